"""The conformance check: every recorded input the cloud API constrains, against its spec.

:func:`check` runs over the resources one program run recorded (``gpulease.planner.mocks``) and
returns findings in the plan's ``"conformance"`` shape::

    {"level": "error"|"warning", "rule", "resource" (URN), "type", "name" (logical),
     "physical_name", "path" (input path), "value", "message", "spec"}

Values the run cannot know yet (``[unknown]``, ``[secret]``) are skipped, never guessed.
"""
from __future__ import annotations

import ipaddress
import json
import re
from collections import defaultdict
from typing import Any, Iterable, Iterator, Optional, Sequence

from gpulease.conformance import kubernetes as K8S
from gpulease.conformance import names as N
from gpulease.conformance import specs, tables
from gpulease.conformance.specs import Constraint, describe
from gpulease.errors import did_you_mean
from gpulease import tags

ERROR = "error"
WARNING = "warning"

_MASKED = ("[unknown]", "[secret]")

# ---- tags and labels -----------------------------------------------------------------------
#: AWS: at most 50 user tags per resource; keys starting with "aws:" are reserved ("Tagging AWS
#: resources", tag naming limits and requirements).
AWS_MAX_TAGS = 50
AWS_RESERVED_TAG_PREFIX = "aws:"
#: GCP labels ("Requirements for labels"): at most 64 per resource; keys and values at most 63
#: characters of lowercase letters, digits, "_" and "-"; keys start with a lowercase letter.
GCP_MAX_LABELS = 64
GCP_LABEL_SPEC = "GCP resource manager docs, 'Requirements for labels'"
_GCP_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_GCP_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
#: Compute metadata keys: compute_v1.Items.key docstring.
_METADATA_KEY = re.compile(r"[a-zA-Z0-9_-]+")
_METADATA_SPEC = "google-cloud-compute compute_v1.Items.key ([a-zA-Z0-9-_]+, < 128 bytes)"


def _aws_tag(part: str) -> Constraint:
    """Generic AWS tag limits (``part`` "Key" / "Value"): lengths from the Resource Groups
    Tagging API model (the cross-service tagging API), characters from IAM's tag shapes
    (letters, digits, spaces and ``_.:/=+-@``, the set the tagging docs recommend everywhere)."""
    rg = specs.aws_shape("resourcegroupstaggingapi", f"Tag{part}")
    iam = specs.aws_shape("iam", f"tag{part}Type")
    return Constraint(spec=f"{rg.spec} lengths + {iam.spec} characters", min_len=rg.min_len,
                      max_len=rg.max_len, pattern=iam.pattern)


def _walk(value: Any, path: str, shown: str = "") -> Iterator[tuple[str, Any]]:
    """``(shown path, value)`` for every value at ``path`` (``a.b[].c``, ``a[]``)."""
    if not path:
        yield shown, value
        return
    head, _, rest = path.partition(".")
    many = head.endswith("[]")
    key = head[:-2] if many else head
    if not isinstance(value, dict) or value.get(key) is None:
        return
    v = value[key]
    prefix = f"{shown}.{key}" if shown else key
    if many:
        if not isinstance(v, list):
            return
        for i, item in enumerate(v):
            if rest:
                yield from _walk(item, rest, f"{prefix}[{i}]")
            else:
                yield f"{prefix}[{i}]", item
    else:
        if rest:
            yield from _walk(v, rest, prefix)
        else:
            yield prefix, v


class _Out:
    """Collects findings for one resource."""

    def __init__(self, resource: Any, physical: Optional[str], found: list):
        self.r, self.physical, self.found = resource, physical, found

    def add(self, rule: str, path: str, value: Any, message: str, spec: str,
            level: str = ERROR) -> None:
        self.found.append({
            "level": level, "rule": rule, "resource": self.r.urn, "type": self.r.type,
            "name": self.r.name, "physical_name": self.physical, "path": path, "value": value,
            "message": message, "spec": spec})


def _masked(value: Any) -> bool:
    return isinstance(value, str) and value in _MASKED


def violations(value: Any, c: Constraint, extra: Sequence[str] = ()) -> list[tuple[str, str]]:
    """``(rule, message)`` for each way ``value`` breaks constraint ``c``."""
    out: list[tuple[str, str]] = []
    if c.kind in ("integer", "number"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return [("type", f"{describe(value)} is not a number")]
        if c.kind == "integer" and float(value) != int(value):
            out.append(("type", f"{value} is not a whole number"))
        if c.minimum is not None and value < c.minimum:
            out.append(("range", f"{value:g} is below the minimum {c.minimum:g}"))
        if c.maximum is not None and value > c.maximum:
            out.append(("range", f"{value:g} is above the maximum {c.maximum:g}"))
        return out
    if c.kind == "boolean" or not isinstance(value, str):
        return []
    if c.enum and value not in c.enum and value not in extra:
        valid = list(c.enum) + list(extra)
        shown = ", ".join(valid) if len(valid) <= 12 else f"{len(valid)} values"
        out.append(("enum", f"{describe(value)} is not a valid value"
                            f"{did_you_mean(value, valid)}; valid: {shown}"))
        return out
    if c.min_len is not None and len(value) < c.min_len:
        out.append(("length", f"{describe(value)} is {len(value)} characters, the minimum is "
                              f"{c.min_len}"))
    if c.max_len is not None and len(value) > c.max_len:
        out.append(("length", f"{describe(value)} is {len(value)} characters, the maximum is "
                              f"{c.max_len}"))
    if c.pattern and not re.fullmatch(c.pattern, value, flags=re.DOTALL):
        out.append(("pattern", f"{describe(value)} does not match the pattern {c.pattern}"))
    return out


# ---- per-resource checks ----------------------------------------------------------------------
def _check_rows(r: Any, out: _Out, rows: Iterable[tables.Row]) -> None:
    name_key = N.NAME_INPUT.get(r.type, "name")
    for row in rows:
        c = row.constraint()
        if row.path == name_key:
            pairs = [(row.path, out.physical)] if out.physical else []
        else:
            pairs = list(_walk(r.inputs, row.path))
        for shown, value in pairs:
            if value is None or _masked(value):
                continue
            for rule, msg in violations(value, c, row.extra):
                out.add(rule, shown, value, msg, c.spec)


def _check_cidrs(r: Any, out: _Out) -> None:
    for path in tables.CIDR_INPUTS.get(r.type, ()):
        for shown, value in _walk(r.inputs, path):
            if not isinstance(value, str) or _masked(value):
                continue
            try:
                net = ipaddress.ip_network(value, strict=False)
            except ValueError as exc:
                out.add("cidr", shown, value, f"{describe(value)} is not a valid CIDR block "
                        f"({exc})", "Python ipaddress (RFC 4632 CIDR notation)")
                continue
            if "/" not in value:
                out.add("cidr", shown, value, f"{describe(value)} has no prefix length: write "
                        f"{net.with_prefixlen}", "EC2 / Compute API: CIDR notation required")
            elif str(net) != value.strip() and str(net.network_address) != value.split("/")[0]:
                # Host bits set: some calls reject it (EC2 CreateVpc / CreateSubnet), others
                # store the normalised block; a warning, not a guess about which.
                out.add("cidr", shown, value, f"{describe(value)} has host bits set: write "
                        f"{net.with_prefixlen}", "Python ipaddress (RFC 4632 CIDR notation)",
                        level=WARNING)


def _check_tags(r: Any, out: _Out) -> None:
    t = (r.inputs or {}).get("tags")
    if r.type.startswith("aws:") and t is not None:
        if isinstance(t, list):  # ASG: [{key, value, propagateAtLaunch}]
            pairs = [(f"tags[{i}]", x.get("key"), x.get("value")) for i, x in enumerate(t)
                     if isinstance(x, dict)]
        elif isinstance(t, dict):
            pairs = [(f"tags.{k}", k, v) for k, v in t.items()]
        else:
            return
        key_c, val_c = _aws_tag("Key"), _aws_tag("Value")
        if len(pairs) > AWS_MAX_TAGS:
            out.add("tag-count", "tags", len(pairs), f"{len(pairs)} tags; AWS allows "
                    f"{AWS_MAX_TAGS} per resource", "Tagging AWS resources: tag limits")
        for shown, k, v in pairs:
            if not isinstance(k, str) or _masked(k):
                continue
            for rule, msg in violations(k, key_c):
                out.add("tag-key", shown, k, f"tag key {msg}", key_c.spec)
            if k.lower().startswith(AWS_RESERVED_TAG_PREFIX):
                out.add("tag-key", shown, k, f"tag key {describe(k)} uses the reserved "
                        "'aws:' prefix", "Tagging AWS resources: tag naming requirements")
            if isinstance(v, str) and not _masked(v):
                for rule, msg in violations(v, val_c):
                    out.add("tag-value", shown, v, f"tag value {msg}", val_c.spec)
    lab = (r.inputs or {}).get("labels")
    if r.type.startswith("gcp:") and isinstance(lab, dict):
        if len(lab) > GCP_MAX_LABELS:
            out.add("label-count", "labels", len(lab), f"{len(lab)} labels; GCP allows "
                    f"{GCP_MAX_LABELS}", GCP_LABEL_SPEC)
        for k, v in lab.items():
            shown = f"labels.{k}"
            if not _GCP_LABEL_KEY.fullmatch(str(k)):
                out.add("label-key", shown, k, f"label key {describe(k)} must be 1-63 lowercase "
                        "letters, digits, '_' or '-', starting with a letter", GCP_LABEL_SPEC)
            if isinstance(v, str) and not _masked(v) and not _GCP_LABEL_VALUE.fullmatch(v):
                out.add("label-value", shown, v, f"label value {describe(v)} must be at most 63 "
                        "lowercase letters, digits, '_' or '-'", GCP_LABEL_SPEC)


#: where each cloud's bill reads attribution from (docs/cost-tags.md "Tags that reach the bill")
BILL_SPEC = ("AWS Billing: cost allocation tags (user-defined tags activated in the Billing "
             "console appear in CUR 2.0 resource_tags and Cost Explorer); GCP Cloud Billing "
             "export: labels of the billed resource")
_ASG = "aws:autoscaling/group:Group"
_LT = "aws:ec2/launchTemplate:LaunchTemplate"
_GCE_TEMPLATES = ("gcp:compute/instanceTemplate:InstanceTemplate",
                  "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate")


def _check_billed(r: Any, out: _Out) -> None:
    """Tags that reach the bill (issue 33 item 4): what a node group launches is billed on lines
    of its own - EC2 instances and their EBS volumes, GCE VMs and their disks - so each must be
    launched carrying the attribution tags (tags.REQUIRED), or those lines arrive untagged."""
    i = r.inputs or {}
    need = set(tags.REQUIRED)
    own = i.get("labels") if r.type.startswith("gcp:") else i.get("tags")
    keys = ({t.get("key") for t in own if isinstance(t, dict)} if isinstance(own, list)
            else set(own) if isinstance(own, dict) else set())
    if tags.CLUSTER not in keys:
        return          # not a resource gpulease attributes (it carries none of its tags)
    if r.type == _ASG and isinstance(i.get("tags"), list):
        have = {t.get("key") for t in i["tags"] if isinstance(t, dict)
                and t.get("propagateAtLaunch") is True}
        for k in sorted(need - have):
            out.add("billed-tags", "tags", k, f"tag {k} is not propagated at launch: the group's "
                    "instances would reach the bill without it", BILL_SPEC)
    elif r.type == _LT and i.get("tags") is not None:
        specs = {s.get("resourceType"): set((s.get("tags") or {}))
                 for s in i.get("tagSpecifications") or [] if isinstance(s, dict)}
        for rt in ("volume",):
            missing = sorted(need - specs.get(rt, set()))
            if missing:
                out.add("billed-tags", "tagSpecifications", rt, f"the {rt}s it launches miss "
                        f"{', '.join(missing)}: their lines would reach the bill untagged",
                        BILL_SPEC)
    elif r.type in _GCE_TEMPLATES and isinstance(i.get("labels"), dict):
        for n, d in enumerate(i.get("disks") or []):
            if isinstance(d, dict):
                missing = sorted(need - set(d.get("labels") or {}))
                if missing:
                    out.add("billed-tags", f"disks[{n}].labels", None, f"disk {n} misses "
                            f"{', '.join(missing)}: its line would reach the bill unlabelled "
                            "(a template's labels reach the VM only)", BILL_SPEC)


def _check_names(r: Any, out: _Out) -> None:
    name = out.physical
    if not isinstance(name, str) or _masked(name):
        return
    key = N.NAME_INPUT.get(r.type, "name")
    if r.type in ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2"):
        for p in N.s3_bucket_problems(name):
            out.add("name", key, name, f"bucket name {describe(name)} {p}", N.S3_BUCKET_SPEC)
    elif r.type == "gcp:storage/bucket:Bucket":
        for p in N.gcs_bucket_problems(name):
            out.add("name", key, name, f"bucket name {describe(name)} {p}", N.GCS_BUCKET_SPEC)
    elif r.type == "gcp:serviceaccount/account:Account":
        for _, msg in violations(name, N.GCP_SERVICE_ACCOUNT_ID):
            out.add("name", key, name, f"service account id {msg}", N.GCP_SERVICE_ACCOUNT_ID.spec)
    elif r.type == "gcp:projects/iAMCustomRole:IAMCustomRole":
        for _, msg in violations(name, N.GCP_CUSTOM_ROLE_ID):
            out.add("name", key, name, f"custom role id {msg}", N.GCP_CUSTOM_ROLE_ID.spec)
    elif r.type in N.GCE or r.type == "gcp:compute/routerNat:RouterNat":
        c = N.gce_name_constraint()
        for _, msg in violations(name, c):
            out.add("name", key, name, f"Compute resource name {msg}", c.spec)
    if r.type == "gcp:compute/instanceGroupManager:InstanceGroupManager":
        base = r.inputs.get("baseInstanceName")
        if isinstance(base, str) and not _masked(base):
            c = specs.gce_base_instance_name()
            for _, msg in violations(base, c):
                out.add("name", "baseInstanceName", base, f"base instance name {msg}", c.spec)


def _check_metadata(r: Any, out: _Out) -> None:
    md = (r.inputs or {}).get("metadata")
    if not r.type.startswith("gcp:compute/") or not isinstance(md, dict):
        return
    for k in md:
        if not _METADATA_KEY.fullmatch(k) or len(k.encode()) >= 128:
            out.add("metadata-key", f"metadata.{k}", k, f"metadata key {describe(k)} must match "
                    "[a-zA-Z0-9-_]+ and be under 128 bytes", _METADATA_SPEC)


_POLICY_INPUTS = {
    "aws:iam/role:Role": ("assumeRolePolicy", "inlinePolicies[].policy"),
    "aws:iam/rolePolicy:RolePolicy": ("policy",),
    "aws:iam/policy:Policy": ("policy",),
    "aws:s3/bucketPolicy:BucketPolicy": ("policy",),
    "aws:sns/topicPolicy:TopicPolicy": ("policy",),
}


def _check_policy_json(r: Any, out: _Out) -> None:
    for path in _POLICY_INPUTS.get(r.type, ()):
        for shown, value in _walk(r.inputs, path):
            if not isinstance(value, str) or _masked(value):
                continue
            try:
                doc = json.loads(value)
            except ValueError as exc:
                out.add("json", shown, value[:80], f"policy document is not valid JSON ({exc})",
                        "IAM JSON policy reference")
                continue
            if not isinstance(doc, dict) or "Statement" not in doc:
                out.add("json", shown, value[:80], "policy document has no Statement",
                        "IAM JSON policy reference: policy grammar")


# ---- uniqueness -------------------------------------------------------------------------------
def _provider_settings(resources: Sequence[Any]) -> dict[str, dict]:
    """Provider reference ("urn::id") -> its inputs (project / region)."""
    out = {}
    for r in resources:
        if r.type.startswith("pulumi:providers:"):
            out[f"{r.urn}::{r.name}-id"] = r.inputs or {}
            out[r.urn] = r.inputs or {}
    return out


def _setting(r: Any, providers: dict, key: str) -> str:
    v = (r.inputs or {}).get(key)
    if isinstance(v, str) and v:
        return v
    ref = getattr(r, "provider", "") or ""
    p = providers.get(ref) or providers.get(ref.rsplit("::", 1)[0]) or {}
    v = p.get(key)
    return v if isinstance(v, str) and v else "(default)"


def unique_scope(r: Any, providers: dict) -> Optional[tuple]:
    """Where a name must be unique, or None when the cloud does not require it."""
    t = r.type
    if t in ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2"):
        return ("S3 bucket names (global)",)
    if t == "gcp:storage/bucket:Bucket":
        return ("GCS bucket names (global)",)
    if t in N.GCE:
        collection, scope = N.GCE[t]
        project = _setting(r, providers, "project")
        where = ""
        if scope == "zone":
            where = _setting(r, providers, "zone")
        elif scope == "region":
            where = _setting(r, providers, "region")
        return (f"Compute {collection}", project, where)
    if t == "gcp:serviceaccount/account:Account":
        return ("service accounts", _setting(r, providers, "project"))
    if t == "gcp:projects/iAMCustomRole:IAMCustomRole":
        return ("custom roles", _setting(r, providers, "project"))
    if t in ("aws:iam/role:Role", "aws:iam/policy:Policy",
             "aws:iam/instanceProfile:InstanceProfile"):
        return (f"IAM {t.rsplit(':', 1)[-1]} names (account)",)
    if t in ("aws:ec2/launchTemplate:LaunchTemplate", "aws:autoscaling/group:Group",
             "aws:cloudwatch/eventRule:EventRule", "aws:lambda/function:Function",
             "aws:cloudwatch/logGroup:LogGroup", "aws:sns/topic:Topic",
             "aws:ec2/placementGroup:PlacementGroup"):
        return (f"{t.rsplit(':', 1)[-1]} names", _setting(r, providers, "region"))
    return None


def _check_unique(resources: Sequence[Any], physical: dict, found: list) -> None:
    providers = _provider_settings(resources)
    seen: dict[tuple, list] = defaultdict(list)
    for r in resources:
        name = physical.get(r.urn)
        scope = unique_scope(r, providers)
        if scope is None or not isinstance(name, str) or _masked(name):
            continue
        seen[scope + (name,)].append(r)
    for key, rs in seen.items():
        if len(rs) < 2:
            continue
        where = " / ".join(k for k in key[:-1] if k)
        for r in rs:
            others = ", ".join(o.urn for o in rs if o is not r)
            _Out(r, key[-1], found).add(
                "unique", N.NAME_INPUT.get(r.type, "name"), key[-1],
                f"name {describe(key[-1])} is also used by {others}: {where} must be unique, "
                "and the second create would fail", f"uniqueness: {where}")


def _check_kubernetes(r: Any, out: _Out) -> None:
    """A Kubernetes object gpulease declares (owned `kubernetes` pools) against the Kubernetes
    API's schema and the API server's name, label and field rules (gpulease.conformance.kubernetes)."""
    if r.type not in K8S.TYPES:
        return
    for path, message in K8S.check_object(r.type, r.inputs or {}):
        value: Any = r.inputs or {}
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        out.add("kubernetes", path, value, message, K8S.source())


# ---- entry ------------------------------------------------------------------------------------
def check(resources: Sequence[Any]) -> list[dict]:
    """Conformance findings over one program run's recorded resources (custom ones only)."""
    found: list[dict] = []
    physical: dict[str, Optional[str]] = {}
    custom = [r for r in resources if getattr(r, "custom", True)]
    for r in custom:
        if r.type.startswith("pulumi:providers:"):
            continue
        name = N.physical_name(r)
        physical[r.urn] = name
        out = _Out(r, name, found)
        _check_rows(r, out, tables.AWS.get(r.type, ()) + tables.GCP.get(r.type, ()))
        _check_cidrs(r, out)
        _check_tags(r, out)
        _check_billed(r, out)
        _check_names(r, out)
        _check_metadata(r, out)
        _check_policy_json(r, out)
        _check_kubernetes(r, out)
    _check_unique(custom, physical, found)
    return found


def has_errors(findings: Iterable[dict]) -> bool:
    return any(f.get("level") == ERROR for f in findings)
