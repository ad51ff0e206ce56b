"""Build ``gpulease/planner/data/replace_on_change.json``: which inputs force a replacement.

pulumi-aws and pulumi-gcp bridge the Terraform providers: a resource is replaced (not updated in
place) when an input changes whose Terraform schema says ``ForceNew: true`` (SDKv2) or carries a
``RequiresReplace`` plan modifier (plugin framework). This script reads those facts from the
providers' Go sources, as data, for every resource type gpulease declares, and maps each
Terraform attribute path (snake_case, nested blocks) to the Pulumi input path the program sets
(camelCase, lists pluralized as the SDK names them), using the installed Pulumi SDK's own input
types (``pulumi.getter`` names). Run it again when the providers or the program change::

    python -m tools.replace_build \\
        --aws GIT_DIR@COMMIT --aws-repo hashicorp/terraform-provider-aws \\
        --gcp GIT_DIR@COMMIT --gcp-repo hashicorp/terraform-provider-google-beta \\
        --gcp-metadata GIT_DIR@COMMIT:provider/cmd/pulumi-resource-gcp/bridge-metadata.json \\
        > gpulease/planner/data/replace_on_change.json

Each ``GIT_DIR`` is a (bare) clone; nothing of the providers' code is copied: the output holds
attribute names and the repository, commit and date they were read at. What the Go sources
decide at run time (``CustomizeDiff`` functions calling ``ForceNew`` / ``ForceNewIfChange``,
``RequiresReplaceIf``) is recorded as ``conditional``: it may force a replacement.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import keyword
import re
import subprocess
import sys
import typing
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Optional, Union

FORMAT = "gpulease-replace-on-change/1"
ROOT = Path(__file__).resolve().parents[1]

# ---- reading a git snapshot ------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    git_dir: str
    commit: str

    def show(self, path: str) -> str:
        return subprocess.run(["git", f"--git-dir={self.git_dir}", "show",
                               f"{self.commit}:{path}"], check=True, capture_output=True,
                              text=True).stdout

    def ls(self, directory: str) -> list[str]:
        out = subprocess.run(["git", f"--git-dir={self.git_dir}", "ls-tree", "--name-only",
                              f"{self.commit}", directory.rstrip("/") + "/"], check=True,
                             capture_output=True, text=True).stdout
        return [p for p in out.splitlines() if p.endswith(".go") and not p.endswith("_test.go")]

    def grep(self, pattern: str, *paths: str) -> list[tuple[str, str]]:
        proc = subprocess.run(["git", f"--git-dir={self.git_dir}", "grep", "-n", "-E", pattern,
                               self.commit, "--", *paths], capture_output=True, text=True)
        out = []
        for line in proc.stdout.splitlines():
            _, path, _, text = line.split(":", 3)
            out.append((path, text))
        return out

    def date(self) -> str:
        return subprocess.run(["git", f"--git-dir={self.git_dir}", "log", "-1", "--format=%cs",
                               self.commit], check=True, capture_output=True,
                              text=True).stdout.strip()

    def full_commit(self) -> str:
        return subprocess.run(["git", f"--git-dir={self.git_dir}", "rev-parse", self.commit],
                              check=True, capture_output=True, text=True).stdout.strip()


def snapshot(arg: str) -> Snapshot:
    git_dir, _, commit = arg.rpartition("@")
    return Snapshot(git_dir, commit or "HEAD")


# ---- a small Go reader: tokens and nested groups --------------------------------------------------
_TOKEN = re.compile(r"""
    (?P<skip>\s+|//[^\n]*|/\*.*?\*/)
  | (?P<str>"(?:\\.|[^"\\\n])*"|`[^`]*`)
  | (?P<rune>'(?:\\.|[^'\\])+')
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<num>\d[\w.]*)
  | (?P<op>:=|\.\.\.|&&|\|\||==|!=|<=|>=|<-|[{}()\[\],:;.&*=+\-/<>!|^%~])
""", re.S | re.X)


def tokens(src: str) -> list[str]:
    out, pos = [], 0
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if m is None:
            pos += 1
            continue
        pos = m.end()
        if m.lastgroup != "skip":
            out.append(m.group())
    return out


@dataclass
class Group:
    open: str
    items: list  # tokens (str) and Groups

    def __repr__(self) -> str:
        return f"{self.open}…"


_PAIRS = {"{": "}", "(": ")", "[": "]"}


def nest(toks: list[str]) -> list:
    stack: list[list] = [[]]
    opens: list[str] = []
    for t in toks:
        if t in _PAIRS:
            opens.append(t)
            stack.append([])
        elif t in ("}", ")", "]") and opens:
            items = stack.pop()
            stack[-1].append(Group(opens.pop(), items))
        else:
            stack[-1].append(t)
    while opens:  # unbalanced source: close what is open
        items = stack.pop()
        stack[-1].append(Group(opens.pop(), items))
    return stack[0]


def split(items: list, sep: str) -> list[list]:
    parts, cur = [], []
    for x in items:
        if x == sep:
            parts.append(cur)
            cur = []
        else:
            cur.append(x)
    if cur:
        parts.append(cur)
    return parts


def key_value(item: list) -> tuple[Optional[list], list]:
    for i, x in enumerate(item):
        if x == ":":
            return item[:i], item[i + 1:]
    return None, item


def text(seq: list) -> str:
    return "".join(x if isinstance(x, str) else x.open for x in seq)


def fields(group: Group) -> dict[str, list]:
    """``{Key: value, ...}`` of a struct literal: key text -> value sequence."""
    out = {}
    for item in split(group.items, ","):
        k, v = key_value(item)
        if k is not None:
            out[text(k)] = v
    return out


def last_brace(seq: list) -> Optional[Group]:
    """The body of a composite literal ``T{...}`` at the end of a value."""
    if seq and isinstance(seq[-1], Group) and seq[-1].open == "{":
        return seq[-1]
    return None


def call_name(seq: list) -> Optional[str]:
    """``pkg.f()`` / ``f()`` -> "pkg.f" / "f" (a call with no arguments or any)."""
    if len(seq) >= 2 and isinstance(seq[-1], Group) and seq[-1].open == "(":
        head = [x for x in seq[:-1] if isinstance(x, str)]
        if head and all(re.fullmatch(r"[A-Za-z_]\w*|\.", x) for x in head):
            return "".join(head)
    return None


# ---- a Go package: functions, vars, consts --------------------------------------------------------
@dataclass
class Package:
    snap: Snapshot
    directory: str
    consts: dict = field(default_factory=dict)
    funcs: dict = field(default_factory=dict)      # name -> (file, body Group)
    vars: dict = field(default_factory=dict)       # name -> value seq
    files: dict = field(default_factory=dict)      # path -> top-level items
    sources: dict = field(default_factory=dict)    # path -> source text

    def load(self) -> "Package":
        for path in self.snap.ls(self.directory):
            src = self.snap.show(path)
            self.sources[path] = src
            top = nest(tokens(src))
            self.files[path] = top
            self._index(path, top)
        return self

    def _index(self, path: str, top: list) -> None:
        i = 0
        while i < len(top):
            t = top[i]
            if t == "func":
                j = i + 1
                recv = None
                if isinstance(top[j], Group) and top[j].open == "(":
                    recv = top[j]
                    j += 1
                name = top[j] if j < len(top) and isinstance(top[j], str) else None
                k = j + 1
                while k < len(top) and not (isinstance(top[k], Group) and top[k].open == "{"):
                    k += 1
                if name and k < len(top):
                    key = name
                    if recv is not None:
                        rtype = [x for x in recv.items if isinstance(x, str) and x not in "*"]
                        key = f"{rtype[-1]}.{name}" if rtype else name
                    self.funcs.setdefault(key, (path, top[k]))
                i = k + 1
                continue
            if t in ("var", "const") and i + 1 < len(top):
                nxt = top[i + 1]
                if isinstance(nxt, Group) and nxt.open == "(":
                    decls = _decl_lines(nxt.items)
                else:
                    decls = [_until_decl_end(top[i + 1:])]
                for d in decls:
                    eq = next((n for n, x in enumerate(d) if x == "="), None)
                    if eq is None or not isinstance(d[0], str):
                        continue
                    value = d[eq + 1:]
                    if t == "const" and value and isinstance(value[0], str) \
                            and value[0].startswith('"'):
                        self.consts[d[0]] = json.loads(value[0]) if value[0][0] == '"' else None
                    elif t == "var":
                        self.vars[d[0]] = _until_decl_end(value)
            i += 1

    def returned(self, fname: str, depth: int = 0) -> Optional[list]:
        """The expression a function (without arguments) returns."""
        found = self.funcs.get(fname)
        if found is None or depth > 6:
            return None
        body = found[1].items
        for i, x in enumerate(body):
            if x == "return":
                return _until_decl_end(body[i + 1:])
        return None


def _decl_lines(items: list) -> list[list]:
    """The declarations of a ``var ( ... )`` / ``const ( ... )`` block: each starts with an
    identifier followed by ``=`` or a type."""
    out, cur = [], []
    for i, x in enumerate(items):
        if isinstance(x, str) and re.fullmatch(r"[A-Za-z_]\w*", x) and cur and \
                i + 1 < len(items) and items[i + 1] == "=" and _complete(cur):
            out.append(cur)
            cur = []
        cur.append(x)
    if cur:
        out.append(cur)
    return out


def _complete(seq: list) -> bool:
    return "=" in seq and seq[-1] != "=" and seq[-1] not in (".", ",", "&", "*")


def _until_decl_end(seq: list) -> list:
    """A value expression: up to the next keyword that starts a new statement/declaration."""
    out = []
    for x in seq:
        if x in ("func", "var", "const", "type", "return", "if", "for") and out:
            break
        out.append(x)
    return out


# ---- schemas -----------------------------------------------------------------------------------------
@dataclass
class Attr:
    name: str
    force: bool = False          # ForceNew / RequiresReplace
    conditional: bool = False    # RequiresReplaceIf...
    children: dict = field(default_factory=dict)


class Extractor:
    def __init__(self, pkg: Package, attr_names: dict[str, str]):
        self.pkg = pkg
        self.attr_names = attr_names

    def key(self, seq: list) -> Optional[str]:
        t = text(seq)
        if t.startswith('"'):
            return json.loads(t)
        if t.startswith("names.Attr") and t[10:] in self.attr_names:
            return self.attr_names[t[10:]]
        return self.pkg.consts.get(t)

    def resolve(self, seq: list, depth: int = 0) -> list:
        """Follow ``f()`` and package vars to the composite literal they stand for."""
        for _ in range(8):
            name = call_name(seq)
            if name and "." not in name and self.pkg.returned(name):
                seq = self.pkg.returned(name)
                continue
            if len(seq) == 1 and isinstance(seq[0], str) and seq[0] in self.pkg.vars:
                seq = self.pkg.vars[seq[0]]
                continue
            break
        return seq

    # SDKv2: map[string]*schema.Schema{...}
    def sdk_map(self, seq: list) -> dict[str, Attr]:
        seq = self.resolve(seq)
        if seq and seq[0] == "func":
            # SchemaFunc: func() map[string]*schema.Schema { return map...{...} }
            inner = last_brace(seq)
            for i, x in enumerate(inner.items if inner is not None else []):
                if x == "return":
                    return self.sdk_map(_until_decl_end(inner.items[i + 1:]))
            return {}
        body = last_brace(seq)
        return {} if body is None else {
            name: self.sdk_attr(name, v) for name, v in self.entries(body)}

    def entries(self, body: Group) -> list[tuple[str, list]]:
        """``{KEY: value, ...}`` of a map literal with attribute-name keys (string literals,
        ``names.AttrX``, package constants): [(name, value)]."""
        out = []
        for item in split(body.items, ","):
            k, v = key_value(item)
            name = self.key(k) if k is not None else None
            if name is not None:
                out.append((name, v))
        return out

    def sdk_attr(self, name: str, value: list) -> Attr:
        cname = call_name(value)
        value = self.resolve(value)
        body = last_brace(value)
        attr = Attr(name)
        if body is None:
            attr.force = bool(cname and "ForceNew" in cname)   # tftags.TagsSchemaForceNew()
            return attr
        f = fields(body)
        attr.force = text(f.get("ForceNew", [])) == "true"
        elem = f.get("Elem")
        if elem:
            elem = self.resolve(elem)
            eb = last_brace(elem)
            if eb is not None and "Resource" in text(elem[:-1]):
                attr.children = self.sdk_map(fields(eb).get("Schema", []))
        return attr

    def sdk_resource(self, func: str) -> dict[str, Attr]:
        return self.sdk_resource_expr([func, Group("(", [])])

    def sdk_resource_expr(self, seq: list) -> dict[str, Attr]:
        """A ``*schema.Resource`` expression: a literal, a function returning one, or the GCP
        provider's IAM member factory (``tpgiamresource.ResourceIamMember(parentSchema, ...)``,
        whose schema is ``IamMemberBaseSchema`` merged with the parent's)."""
        func = text(seq)
        seq = self.resolve(seq)
        if call_name(seq) == "tpgiamresource.ResourceIamMember":
            parent = split(seq[-1].items, ",")[0]
            iam = Package(self.pkg.snap, "google-beta/tpgiamresource").load()
            base = Extractor(iam, self.attr_names).sdk_map(["IamMemberBaseSchema"])
            return {**base, **self.sdk_map(parent)}
        body = last_brace(seq)
        if body is None:
            raise LookupError(f"no schema.Resource literal returned by {func}")
        f = fields(body)
        if "Schema" in f:
            return self.sdk_map(f["Schema"])
        if "SchemaFunc" in f:
            return self.sdk_map(f["SchemaFunc"])
        raise LookupError(f"{func}(): no Schema / SchemaFunc")

    # plugin framework: schema.Schema{Attributes: ..., Blocks: ...}
    def fw_object(self, body: Group) -> dict[str, Attr]:
        f = fields(body)
        out: dict[str, Attr] = {}
        for key in ("Attributes", "Blocks"):
            m = last_brace(self.resolve(f.get(key, [])))
            for name, v in self.entries(m) if m is not None else []:
                out[name] = self.fw_attr(name, self.resolve(v))
        return out

    def fw_attr(self, name: str, value: list) -> Attr:
        attr = Attr(name)
        body = last_brace(value)
        if body is None:
            return attr
        f = fields(body)
        mods = text(f.get("PlanModifiers", []) and _flat(f["PlanModifiers"]))
        attr.force = bool(re.search(r"\.RequiresReplace\(\)", mods))
        attr.conditional = bool(re.search(r"\.RequiresReplaceIf\w*\(", mods))
        nested = f.get("NestedObject")
        if nested and last_brace(nested) is not None:
            attr.children = self.fw_object(last_brace(nested))
        return attr

    def fw_resource(self, recv: str) -> dict[str, Attr]:
        found = self.pkg.funcs.get(f"{recv}.Schema")
        if found is None:
            raise LookupError(f"no Schema method on {recv}")
        flat = found[1].items
        for i, x in enumerate(flat):
            if x == "schema" and i + 3 < len(flat) and flat[i + 1] == "." \
                    and flat[i + 2] == "Schema" and isinstance(flat[i + 3], Group):
                return self.fw_object(flat[i + 3])
        raise LookupError(f"{recv}.Schema: no schema.Schema literal")


def _flat(seq: list) -> list[str]:
    out = []
    for x in seq:
        if isinstance(x, Group):
            out.append(x.open)
            out += _flat(x.items)
            out.append({"{": "}", "(": ")", "[": "]"}[x.open])
        else:
            out.append(x)
    return out


def conditional_in(src: str) -> set[str]:
    """Attributes a CustomizeDiff may force new (``ForceNew("x")``, ``ForceNewIfChange("x"``,
    ``ForceNewIf("x"``): the top-level names found in the resource's file."""
    return set(re.findall(r'ForceNew(?:IfChange|If)?\(\s*"([a-z0-9_.]+)"', src))


def paths(attrs: dict[str, Attr], prefix: tuple = ()) -> Iterator[tuple[tuple, Attr]]:
    for name, a in sorted(attrs.items()):
        p = prefix + (name,)
        yield p, a
        yield from paths(a.children, p)


# ---- Terraform names -> Pulumi input names (from the installed SDK) ------------------------------------
_FWD = re.compile(r"ForwardRef\('(\w+Args)'\)")


def _sdk_class(token: str):
    """The SDK's ``XxxArgs`` class of a resource token (``aws:ec2/launchTemplate:LaunchTemplate``)."""
    pkg, mod, cls = token.split(":", 2)
    sub = mod.split("/")[0]
    if keyword.iskeyword(sub):
        sub += "_"
    package = importlib.import_module(f"pulumi_{pkg}.{sub}")
    # the resource's own module names its input class first in __all__: ``XArgs``, or
    # ``XInitArgs`` where ``XArgs`` is taken by a nested input type of another resource
    # (``pulumi_aws.s3.BucketVersioningInitArgs``)
    module = sys.modules[getattr(package, cls).__module__]
    name = next(n for n in module.__all__ if n in (f"{cls}Args", f"{cls}InitArgs"))
    return getattr(module, name), module


def _props(cls) -> dict[str, tuple[str, Optional[type]]]:
    """python attribute -> (Pulumi name, nested Args class or None) of an input type."""
    out = {}
    module = sys.modules[cls.__module__]
    for attr, prop in vars(cls).items():
        if not isinstance(prop, property) or prop.fget is None:
            continue
        pname = getattr(prop.fget, "_pulumi_name", attr)
        nested = None
        try:
            ann = str(typing.get_type_hints(prop.fget, globalns=vars(module)).get("return"))
        except Exception:  # noqa: BLE001 - unresolvable forward refs: read the raw annotation
            ann = str(prop.fget.__annotations__.get("return"))
        m = _FWD.search(ann) or re.search(r"\.(\w+Args)\b", ann)
        if m is not None:
            nested = getattr(module, m.group(1), None)
        out[attr] = (pname, nested)
    return out


def _candidates(tf: str) -> list[str]:
    c = [tf, tf + "s", tf + "es"]
    if tf.endswith("y"):
        c.append(tf[:-1] + "ies")
    if tf.endswith("s"):
        c.append(tf + "es")
    return c + [x + "_" for x in c]


#: Top-level inputs pulumi-aws renames (its provider/resources.go field overrides):
#: aws_lambda_function.function_name -> name (an auto-name), aws_lambda_permission.function_name
#: -> function.
RENAMES = {
    ("aws:lambda/function:Function", "function_name"): "name",
    ("aws:lambda/permission:Permission", "function_name"): "function",
}


def pulumi_path(token: str, tf_path: tuple) -> Optional[str]:
    """The Pulumi input path (``networkInterfaces.deviceIndex``) of a Terraform attribute path,
    or None when the SDK has no such input (computed-only attributes, removed ones)."""
    cls, _ = _sdk_class(token)
    out = []
    for i, part in enumerate(tf_path):
        if cls is None:
            return None
        props = _props(cls)
        if i == 0 and (token, part) in RENAMES:
            part = RENAMES[(token, part)]
        hit = next((props[c] for c in _candidates(part) if c in props), None)
        if hit is None:
            return None
        out.append(hit[0])
        cls = hit[1]
    return ".".join(out)


# ---- the two providers ------------------------------------------------------------------------------
def aws_resources(snap: Snapshot, tf_names: set[str]) -> dict[str, dict]:
    names_src = snap.show("names/attr_consts_gen.go")
    attr_names = dict(re.findall(r'^\s*Attr(\w+)\s*=\s*"([^"]+)"', names_src, re.M))
    out: dict[str, dict] = {}
    pattern = r'@(SDK|Framework)Resource\("(' + "|".join(sorted(tf_names)) + r')"'
    packages: dict[str, Package] = {}
    for path, line in snap.grep(pattern, "internal/service"):
        kind, tf = re.search(pattern, line).groups()
        directory = path.rsplit("/", 1)[0]
        pkg = packages.get(directory) or Package(snap, directory).load()
        packages[directory] = pkg
        src = pkg.sources[path]
        after = src[src.index(line.strip()):]
        if kind == "SDK":
            func = re.search(r"func\s+(\w+)\s*\(\s*\)\s*\*schema\.Resource", after).group(1)
            attrs = Extractor(pkg, attr_names).sdk_resource(func)
        else:
            func = re.search(r"func\s+(\w+)\s*\(", after).group(1)
            recv = re.search(r"&(\w+)\{", pkg.sources[path][
                pkg.sources[path].index(f"func {func}"):]).group(1)
            attrs = Extractor(pkg, attr_names).fw_resource(recv)
        out[tf] = {"file": path, "attrs": attrs, "conditional": conditional_in(src),
                   "source": src}
    return out


def gcp_resources(snap: Snapshot, tf_names: set[str]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    packages: dict[str, Package] = {}
    for tf in sorted(tf_names):
        hits = [(p, t) for p, t in snap.grep(rf'Name:\s+"{tf}",', "google-beta/services")
                if "/data_source_" not in p]
        for path, _ in hits:
            src = snap.show(path)
            m = re.search(rf'Name:\s+"{tf}",[^{{}}]*?Type:\s+registry\.SchemaType(?:IAM)?'
                          rf'Resource,\s*Schema:\s+([^\n]+),\n', src)
            if m is None:
                continue
            directory = path.rsplit("/", 1)[0]
            pkg = packages.get(directory) or Package(snap, directory).load()
            packages[directory] = pkg
            attrs = Extractor(pkg, {}).sdk_resource_expr(nest(tokens(m.group(1))))
            out[tf] = {"file": path, "attrs": attrs, "conditional": conditional_in(src),
                       "source": src}
            break
    return out


# ---- the data file ------------------------------------------------------------------------------------
#: Pulumi token -> Terraform resource of pulumi-aws 7 (its resource mapping: aws_<module>_<name>,
#: with the renames v7 made: ``aws.s3.Bucket`` is ``aws_s3_bucket``, the ``*V2`` names gone).
AWS_TF = {
    "aws:autoscaling/group:Group": "aws_autoscaling_group",
    "aws:autoscaling/schedule:Schedule": "aws_autoscaling_schedule",
    "aws:cloudwatch/eventRule:EventRule": "aws_cloudwatch_event_rule",
    "aws:cloudwatch/eventTarget:EventTarget": "aws_cloudwatch_event_target",
    "aws:cloudwatch/logGroup:LogGroup": "aws_cloudwatch_log_group",
    "aws:datasync/s3Location:S3Location": "aws_datasync_location_s3",
    "aws:datasync/locationObjectStorage:LocationObjectStorage":
        "aws_datasync_location_object_storage",
    "aws:datasync/task:Task": "aws_datasync_task",
    "aws:ec2/capacityBlockReservation:CapacityBlockReservation":
        "aws_ec2_capacity_block_reservation",
    "aws:ec2/capacityReservation:CapacityReservation": "aws_ec2_capacity_reservation",
    "aws:ec2/eip:Eip": "aws_eip",
    "aws:ec2/internetGateway:InternetGateway": "aws_internet_gateway",
    "aws:ec2/launchTemplate:LaunchTemplate": "aws_launch_template",
    "aws:ec2/natGateway:NatGateway": "aws_nat_gateway",
    "aws:ec2/placementGroup:PlacementGroup": "aws_placement_group",
    "aws:ec2/routeTable:RouteTable": "aws_route_table",
    "aws:ec2/routeTableAssociation:RouteTableAssociation": "aws_route_table_association",
    "aws:ec2/securityGroup:SecurityGroup": "aws_security_group",
    "aws:ec2/subnet:Subnet": "aws_subnet",
    "aws:ec2/vpc:Vpc": "aws_vpc",
    "aws:ec2/vpcEndpoint:VpcEndpoint": "aws_vpc_endpoint",
    "aws:iam/instanceProfile:InstanceProfile": "aws_iam_instance_profile",
    "aws:iam/role:Role": "aws_iam_role",
    "aws:iam/rolePolicy:RolePolicy": "aws_iam_role_policy",
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": "aws_iam_role_policy_attachment",
    "aws:lambda/function:Function": "aws_lambda_function",
    "aws:lambda/permission:Permission": "aws_lambda_permission",
    "aws:s3/bucket:Bucket": "aws_s3_bucket",
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration":
        "aws_s3_bucket_lifecycle_configuration",
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": "aws_s3_bucket_ownership_controls",
    "aws:s3/bucketPolicy:BucketPolicy": "aws_s3_bucket_policy",
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": "aws_s3_bucket_public_access_block",
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration":
        "aws_s3_bucket_server_side_encryption_configuration",
    "aws:s3/bucketVersioning:BucketVersioning": "aws_s3_bucket_versioning",
    "aws:sns/topic:Topic": "aws_sns_topic",
    "aws:sns/topicPolicy:TopicPolicy": "aws_sns_topic_policy",
}


def declared_types() -> list[str]:
    """Every cloud resource type docs/deploy.md lists (a test keeps that list a superset of
    what the program declares), plus the committed-use types the prepaid guard knows."""
    doc = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    found = set(re.findall(r"`((?:aws|gcp):[\w/]+:\w+)`", doc))
    return sorted(found | {"gcp:compute/regionCommitment:RegionCommitment"})


def gcp_tf_names(metadata: dict) -> dict[str, str]:
    """Pulumi token -> Terraform resource, from pulumi-gcp's bridge-metadata.json."""
    return {v["current"]: k for k, v in metadata["auto-aliasing"]["resources"].items()}


def build(aws: Snapshot, gcp: Snapshot, gcp_metadata: dict, *, aws_repo: str, gcp_repo: str,
          aws_note: str = "", gcp_note: str = "") -> dict:
    types = declared_types()
    gcp_map = gcp_tf_names(gcp_metadata)
    wanted_aws = {AWS_TF[t] for t in types if t.startswith("aws:")}
    wanted_gcp = {gcp_map[t] for t in types if t.startswith("gcp:") and t in gcp_map}
    found = {"aws": aws_resources(aws, wanted_aws), "gcp": gcp_resources(gcp, wanted_gcp)}
    out_types: dict[str, dict] = {}
    problems = []
    for token in types:
        cloud = token.split(":", 1)[0]
        tf = AWS_TF.get(token) if cloud == "aws" else gcp_map.get(token)
        got = found[cloud].get(tf or "")
        if got is None:
            problems.append(f"{token}: no Terraform resource {tf!r} found")
            continue
        replace, conditional, unmapped = set(), set(), set()
        for tf_path, a in paths(got["attrs"]):
            if not (a.force or a.conditional or tf_path[0] in got["conditional"]):
                continue
            pp = pulumi_path(token, tf_path)
            if pp is None:
                unmapped.add(".".join(tf_path))
            elif a.force:
                replace.add(pp)
            else:
                conditional.add(pp)
        for name in got["conditional"]:
            top = name.split(".")[0]
            pp = pulumi_path(token, (top,))
            if pp is not None and pp not in replace:
                conditional.add(pp)
        derived = {}
        attrs = got["attrs"]
        if attrs.get("effective_labels") and attrs["effective_labels"].force \
                and "labels" in attrs and "SetLabelsDiff" in got["source"]:
            # the provider derives effective_labels (ForceNew) from labels in CustomizeDiff
            # (tpgresource.SetLabelsDiff): a label change replaces the resource
            pp = pulumi_path(token, ("labels",))
            if pp is not None and pp not in replace:
                replace.add(pp)
                derived[pp] = ("effective_labels is ForceNew and tpgresource.SetLabelsDiff "
                               "derives it from labels")
        out_types[token] = {"terraform": tf, "file": got["file"], "replace": sorted(replace),
                            "conditional": sorted(conditional - replace),
                            "derived": derived, "unmapped": sorted(unmapped)}
    if problems:
        raise SystemExit("\n".join(problems))
    return {
        "format": FORMAT,
        "about": "Inputs whose change makes pulumi-aws / pulumi-gcp replace a resource instead of"
                 " updating it: the Terraform schema's ForceNew (SDKv2) or RequiresReplace (plugin"
                 " framework) attributes of each resource type gpulease declares, read from the "
                 "providers' sources by tools/replace_build.py and mapped to Pulumi input "
                 "paths (camelCase, list items without index) through the installed SDKs' input "
                 "types. 'conditional': replaced only in some cases (RequiresReplaceIf, a "
                 "CustomizeDiff calling ForceNew / ForceNewIfChange); 'unmapped': Terraform "
                 "attributes the Pulumi SDK has no input for (computed, or set by the bridge). "
                 "Regenerate: docs/offline-plan.md, 'Second run'.",
        "extracted": _dt.date.today().isoformat(),
        "sources": {
            "aws": {"repository": aws_repo, "commit": aws.full_commit(),
                    "commit_date": aws.date(), "note": aws_note},
            "gcp": {"repository": gcp_repo, "commit": gcp.full_commit(),
                    "commit_date": gcp.date(), "note": gcp_note},
        },
        "sdk": {"pulumi_aws": _version("pulumi_aws"), "pulumi_gcp": _version("pulumi_gcp")},
        "types": out_types,
    }


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist.replace("_", "-"))


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--aws", required=True, help="GIT_DIR@COMMIT of terraform-provider-aws")
    p.add_argument("--aws-repo", default="hashicorp/terraform-provider-aws")
    p.add_argument("--aws-note", default="")
    p.add_argument("--gcp", required=True, help="GIT_DIR@COMMIT of terraform-provider-google-beta")
    p.add_argument("--gcp-repo", default="hashicorp/terraform-provider-google-beta")
    p.add_argument("--gcp-note", default="")
    p.add_argument("--gcp-metadata", required=True,
                   help="GIT_DIR@COMMIT:PATH of pulumi-gcp's bridge-metadata.json")
    a = p.parse_args(argv)
    meta_snap, _, meta_path = a.gcp_metadata.partition(":")
    metadata = json.loads(snapshot(meta_snap).show(meta_path))
    doc = build(snapshot(a.aws), snapshot(a.gcp), metadata, aws_repo=a.aws_repo,
                gcp_repo=a.gcp_repo, aws_note=a.aws_note, gcp_note=a.gcp_note)
    json.dump(doc, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
