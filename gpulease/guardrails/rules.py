"""Guardrail rules as plain functions over resource properties as the Pulumi engine sees them.

The same functions run in two places: `gpulease plan` (``gpulease.guardrails.evaluate`` over the
resources recorded under mocks) and the CrossGuard pack in ``policy-pack/`` (wrapped in
``ResourceValidationPolicy`` / ``StackValidationPolicy``). Properties use the engine's
camelCase keys (``metadataOptions.httpTokens``), exactly like CrossGuard's ``args.props`` and
``gpulease.planner.mocks.RecordedResource.inputs``.

Resource rules: ``(resource_type, props, ctx) -> list[str]`` (violation messages).
Stack rules: ``(resources, ctx) -> list[tuple[urn, message]]`` (urn "" = the whole stack).
"""
from __future__ import annotations

import importlib
import ipaddress
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, Callable, Iterable, Optional

from gpulease.clouds import registry
from gpulease import money
from gpulease import tags

MANDATORY = "mandatory"
ADVISORY = "advisory"

_ALL_V4 = ipaddress.ip_network("0.0.0.0/0")
_ALL_V6 = ipaddress.ip_network("::/0")

S3_BUCKET_TYPES = frozenset({"aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2"})
S3_SSE_TYPES = frozenset({
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
})
S3_PAB_TYPE = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
GCS_BUCKET_TYPE = "gcp:storage/bucket:Bucket"
STORAGE_TYPES = S3_BUCKET_TYPES | {GCS_BUCKET_TYPE}

AWS_LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_INSTANCE = "aws:ec2/instance:Instance"
AWS_SG = "aws:ec2/securityGroup:SecurityGroup"
AWS_SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
AWS_SG_INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
GCP_FIREWALL = "gcp:compute/firewall:Firewall"
GCP_TEMPLATES = frozenset({
    "gcp:compute/instanceTemplate:InstanceTemplate",
    "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate",
    "gcp:compute/instance:Instance",
})
AWS_NODE_TYPES = frozenset({AWS_LAUNCH_TEMPLATE, AWS_INSTANCE})

#: budget-headroom warns once the tagged monthly cost passes this share of the budget.
HEADROOM_WARN_SHARE = 0.9

_PKG = registry.sdk_packages()   # provider package -> its Python SDK


@dataclass(frozen=True)
class RuleContext:
    """What a rule may know beyond the resource's own properties."""

    environment: str = ""
    budget_monthly_usd: Optional[float] = None
    #: every dollar the plan counts: the cost ledger's total (`gpulease plan`) or the program's
    #: ``total_monthly_usd`` stack output (CrossGuard). None = not visible; the budget rules
    #: then fall back to the cost tags, which miss what cannot carry labels (GCP reservations,
    #: instance group managers) and say so.
    planned_monthly_usd: Optional[float] = None
    #: the plan's one-time window purchases (``totals.one_time_usd``; the ``total_one_time_usd``
    #: stack output): the budget rules add them whole (docs/policy.md, "Windows: one-time
    #: money"); they are never part of ``planned_monthly_usd``.
    planned_one_time_usd: Optional[float] = None
    #: resource options of the resource being checked; None = not visible to the caller
    #: (CrossGuard exposes ``protect`` but not ``retainOnDelete``).
    protect: Optional[bool] = None
    retain_on_delete: Optional[bool] = None

    @property
    def is_prod(self) -> bool:
        return self.environment in ("prod", "production")


@dataclass(frozen=True)
class GuardedResource:
    """One resource as a stack rule sees it (built from a RecordedResource or a PolicyResource)."""

    urn: str
    type: str
    name: str
    props: Mapping[str, Any]
    protect: Optional[bool] = None
    retain_on_delete: Optional[bool] = None
    #: URNs this resource depends on (property dependencies included).
    dependencies: tuple[str, ...] = ()
    parent: str = ""


ResourceCheck = Callable[[str, Mapping[str, Any], RuleContext], list]
StackCheck = Callable[[Sequence[GuardedResource], RuleContext], list]


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    level: str
    #: resource type tokens the rule applies to; empty = decided by ``applies`` (or stack rule).
    resource_types: frozenset = frozenset()
    check: Optional[ResourceCheck] = None
    stack_check: Optional[StackCheck] = None
    #: how to fix a violation (shown by the pack as remediation steps).
    fix: str = ""
    applies: Optional[Callable[[str], bool]] = field(default=None, compare=False)

    @property
    def is_stack(self) -> bool:
        return self.stack_check is not None

    def applies_to(self, resource_type: str) -> bool:
        if self.applies is not None:
            return self.applies(resource_type)
        return resource_type in self.resource_types


# ---- small helpers ---------------------------------------------------------------------------
def _truthy(value: Any) -> bool:
    """Engine booleans arrive as bool, or as "true"/"false" strings for string-typed AWS fields
    (launch template ``associatePublicIpAddress`` and ``ebs.encrypted`` are strings in the
    EC2 API model)."""
    if isinstance(value, bool):
        return value
    return isinstance(value, str) and value.strip().lower() == "true"


def _list(value: Any) -> list:
    """A list from an engine value; CrossGuard hands sequences in as read-only proxies."""
    if value is None:
        return []
    if isinstance(value, Sequence) and not isinstance(value, str):
        return list(value)
    return [value]


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@lru_cache(maxsize=None)
def tag_kind(resource_type: str) -> Optional[str]:
    """"tags" (AWS) / "labels" (GCP) when the provider's Python class for the type token takes
    that input, else None. Decided from pulumi_aws / pulumi_gcp themselves, so a new resource
    type is covered without a list to maintain."""
    parts = resource_type.split(":")
    if len(parts) != 3 or parts[0] not in _PKG:
        return None
    pkg, mod, cls_name = parts
    module_path = _PKG[pkg] if mod.split("/")[0] == "index" else f"{_PKG[pkg]}.{mod.split('/')[0]}"
    try:
        cls = getattr(importlib.import_module(module_path), cls_name)
    except (ImportError, AttributeError):
        return None
    from gpulease.costing.transform import tag_input  # the transform decides the same way

    return tag_input(cls)


def tag_dict(props: Mapping[str, Any], kind: str) -> dict:
    """Tags as a dict; the ASG's list form ``[{key, value, propagateAtLaunch}]`` included."""
    value = props.get(kind)
    if isinstance(value, Sequence) and not isinstance(value, str):
        return {t.get("key"): t.get("value") for t in value if isinstance(t, Mapping)}
    return dict(value) if isinstance(value, Mapping) else {}


# ---- resource rules --------------------------------------------------------------------------
def check_cost_tags(resource_type: str, props: Mapping[str, Any], ctx: RuleContext) -> list[str]:
    kind = tag_kind(resource_type)
    if kind is None:
        return []
    required = tags.REQUIRED_AWS if kind == "tags" else tags.REQUIRED_GCP
    have = tag_dict(props, kind)
    missing = [k for k in required if k not in have]
    if not missing:
        return []
    return [f"{kind} lack {', '.join(missing)}: declare the resource under a gpulease component "
            "(its CostContext) so the stack-wide cost transform stamps the full set"]


def check_s3_public_access_block(resource_type: str, props: Mapping[str, Any],
                                 ctx: RuleContext) -> list[str]:
    if resource_type != S3_PAB_TYPE:
        return []
    flags = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    off = [f for f in flags if not _truthy(props.get(f))]
    if not off:
        return []
    return [f"{', '.join(off)} not true: S3 Block Public Access needs all four flags on "
            "(AWS S3 user guide, 'Blocking public access to your Amazon S3 storage')"]


def check_imdsv2(resource_type: str, props: Mapping[str, Any], ctx: RuleContext) -> list[str]:
    if resource_type not in AWS_NODE_TYPES:
        return []
    tokens = _dict(props.get("metadataOptions")).get("httpTokens")
    if tokens == "required":
        return []
    shown = "unset (IMDSv1 allowed)" if tokens is None else f"{tokens!r}"
    return [f"metadataOptions.httpTokens is {shown}: set metadata_options.http_tokens="
            "\"required\" (IMDSv2 only; EC2 user guide 'Configure instance metadata options')"]


def world_open(cidrs: Iterable[Any]) -> list[str]:
    """The address families whose WHOLE space the given CIDRs cover, as readable findings.

    Compared as networks (``ipaddress``), not strings: ``0.0.0.0/00``, ``::0/0`` and
    ``0.0.0.0/1`` + ``128.0.0.0/1`` are all "everything". Unparseable values are left to the
    conformance check (``gpulease.conformance``), which rejects them as the cloud would."""
    nets: dict[int, list] = {4: [], 6: []}
    raw: dict[int, list[str]] = {4: [], 6: []}
    for c in cidrs:
        if not isinstance(c, str):
            continue
        try:
            net = ipaddress.ip_network(c.strip(), strict=False)
        except ValueError:
            continue
        nets[net.version].append(net)
        raw[net.version].append(c.strip())
    out = []
    for version, everything in ((4, _ALL_V4), (6, _ALL_V6)):
        if nets[version] and list(ipaddress.collapse_addresses(nets[version])) == [everything]:
            shown = " + ".join(sorted(set(raw[version])))
            out.append(shown if shown == str(everything) else f"{shown} (= {everything})")
    return out


def ingress_sources(resource_type: str, props: Mapping[str, Any]) -> Optional[list]:
    """Source CIDRs of an ingress-allowing resource (None: the resource allows no ingress).

    A GCP INGRESS allow rule that names no source range, tag or service account applies to
    every source: the Compute API's default is 0.0.0.0/0 (pulumi-gcp's Firewall docs: "For
    INGRESS traffic, one of source_ranges, source_tags or source_service_accounts is required")."""
    if resource_type == AWS_SG:
        out: list = []
        for rule in _list(props.get("ingress")):
            r = _dict(rule)
            out += _list(r.get("cidrBlocks")) + _list(r.get("ipv6CidrBlocks"))
        return out
    if resource_type == AWS_SG_RULE:
        if props.get("type") != "ingress":
            return None
        return _list(props.get("cidrBlocks")) + _list(props.get("ipv6CidrBlocks"))
    if resource_type == AWS_SG_INGRESS:
        return [props.get("cidrIpv4"), props.get("cidrIpv6")]
    if resource_type == GCP_FIREWALL:
        direction = str(props.get("direction") or "INGRESS").upper()
        # A deny rule from everywhere is a good thing; only allow rules open the network.
        if direction != "INGRESS" or not _list(props.get("allows")):
            return None
        ranges = _list(props.get("sourceRanges"))
        if not ranges and not _list(props.get("sourceTags")) \
                and not _list(props.get("sourceServiceAccounts")):
            return ["0.0.0.0/0"]
        return ranges
    return None


_INGRESS_FIX = ("restrict the source to the cluster's own security group / network tags / "
                "service account (use SSM Session Manager or IAP instead of open SSH)")


def check_open_ingress(resource_type: str, props: Mapping[str, Any], ctx: RuleContext) -> list[str]:
    found: list[str] = []
    if resource_type == AWS_SG:
        for i, rule in enumerate(_list(props.get("ingress"))):
            r = _dict(rule)
            bad = world_open(_list(r.get("cidrBlocks")) + _list(r.get("ipv6CidrBlocks")))
            if bad:
                found.append(f"ingress[{i}] (ports {r.get('fromPort')}-{r.get('toPort')}) "
                             f"allows {', '.join(bad)}")
        if not found:
            bad = world_open(ingress_sources(resource_type, props) or [])
            if bad:
                found.append(f"its ingress rules together allow {', '.join(bad)}")
    elif resource_type in (AWS_SG_RULE, AWS_SG_INGRESS):
        bad = world_open(ingress_sources(resource_type, props) or [])
        if bad:
            found.append(f"ingress rule allows {', '.join(bad)}")
    elif resource_type == GCP_FIREWALL:
        sources = ingress_sources(resource_type, props)
        if sources is not None and not _list(props.get("sourceRanges")) and sources:
            found.append("INGRESS allow rule names no sourceRanges, sourceTags or "
                         "sourceServiceAccounts, so GCP applies it to 0.0.0.0/0")
        else:
            bad = world_open(sources or [])
            if bad:
                found.append(f"firewall allows ingress from {', '.join(bad)}")
    return [f"{m}: {_INGRESS_FIX}" for m in found]


def check_no_public_ip(resource_type: str, props: Mapping[str, Any], ctx: RuleContext) -> list[str]:
    out: list[str] = []
    if resource_type == AWS_LAUNCH_TEMPLATE:
        for i, nic in enumerate(_list(props.get("networkInterfaces"))):
            if _truthy(_dict(nic).get("associatePublicIpAddress")):
                out.append(f"networkInterfaces[{i}].associatePublicIpAddress is true: GPU nodes "
                           "reach the internet through the NAT gateway; drop the public IP")
    elif resource_type == AWS_INSTANCE:
        if _truthy(props.get("associatePublicIpAddress")):
            out.append("associatePublicIpAddress is true: drop the public IP (NAT for egress)")
    elif resource_type in GCP_TEMPLATES:
        for i, nic in enumerate(_list(props.get("networkInterfaces"))):
            n = _dict(nic)
            if _list(n.get("accessConfigs")) or _list(n.get("ipv6AccessConfigs")):
                out.append(f"networkInterfaces[{i}] has accessConfigs (an external IP): remove "
                           "them; Cloud NAT gives egress without a public address")
    return out


def check_gcp_shielded_vm(resource_type: str, props: Mapping[str, Any],
                          ctx: RuleContext) -> list[str]:
    if resource_type not in GCP_TEMPLATES:
        return []
    cfg = _dict(props.get("shieldedInstanceConfig"))
    flags = ("enableSecureBoot", "enableVtpm", "enableIntegrityMonitoring")
    off = [f for f in flags if not _truthy(cfg.get(f))]
    if not off:
        return []
    return [f"shieldedInstanceConfig.{', '.join(off)} not true: set shielded_instance_config "
            "secure boot, vTPM and integrity monitoring on (GCP 'Shielded VM' docs)"]


def check_gcp_os_login(resource_type: str, props: Mapping[str, Any], ctx: RuleContext) -> list[str]:
    if resource_type not in GCP_TEMPLATES:
        return []
    value = _dict(props.get("metadata")).get("enable-oslogin")
    if isinstance(value, str) and value.strip().upper() == "TRUE":
        return []
    return [f"metadata enable-oslogin is {value!r}, not \"TRUE\": set it so SSH access goes "
            "through IAM (GCP 'Set up OS Login')"]


def check_ebs_encrypted(resource_type: str, props: Mapping[str, Any], ctx: RuleContext) -> list[str]:
    if resource_type != AWS_LAUNCH_TEMPLATE:
        return []
    out = []
    for i, bdm in enumerate(_list(props.get("blockDeviceMappings"))):
        ebs = _dict(_dict(bdm).get("ebs"))
        if ebs and not _truthy(ebs.get("encrypted")):
            out.append(f"blockDeviceMappings[{i}] ({_dict(bdm).get('deviceName')}) EBS volume "
                       "not encrypted: set ebs.encrypted=\"true\"")
    return out


def check_gcs_public_access(resource_type: str, props: Mapping[str, Any],
                            ctx: RuleContext) -> list[str]:
    if resource_type != GCS_BUCKET_TYPE:
        return []
    out = []
    if props.get("publicAccessPrevention") != "enforced":
        out.append(f"publicAccessPrevention is {props.get('publicAccessPrevention')!r}: set "
                   "public_access_prevention=\"enforced\"")
    if not _truthy(props.get("uniformBucketLevelAccess")):
        out.append("uniformBucketLevelAccess is not true: set uniform_bucket_level_access=True")
    return out


def check_storage_protected(resource_type: str, props: Mapping[str, Any],
                            ctx: RuleContext) -> list[str]:
    """Prod buckets must be protect=True and retain_on_delete=True.

    An option the caller cannot see (None) is not judged: CrossGuard's PolicyResourceOptions
    carry ``protect`` but not ``retainOnDelete``, so the pack checks protect only, while
    `gpulease plan` checks both from the recorded registration.
    """
    if resource_type not in STORAGE_TYPES or not ctx.is_prod:
        return []
    out = []
    if ctx.protect is False:
        out.append("prod storage is not protected: pass ResourceOptions(protect=True)")
    if ctx.retain_on_delete is False:
        out.append("prod storage is not retained on delete: pass "
                   "ResourceOptions(retain_on_delete=True)")
    return out


# ---- IAM and resource policies -----------------------------------------------------------------
#: AWS identity-policy documents: resource type -> input paths holding one (JSON string or
#: object). ``inlinePolicies[].policy`` is the Role's inline form.
IAM_POLICY_INPUTS: dict[str, tuple[str, ...]] = {
    "aws:iam/rolePolicy:RolePolicy": ("policy",),
    "aws:iam/policy:Policy": ("policy",),
    "aws:iam/userPolicy:UserPolicy": ("policy",),
    "aws:iam/groupPolicy:GroupPolicy": ("policy",),
    "aws:iam/role:Role": ("inlinePolicies[].policy",),
}
#: AWS resource-based policies (who may act on this resource): resource type -> input paths.
RESOURCE_POLICY_INPUTS: dict[str, tuple[str, ...]] = {
    "aws:s3/bucketPolicy:BucketPolicy": ("policy",),
    "aws:s3/bucket:Bucket": ("policy",),
    "aws:s3/bucketV2:BucketV2": ("policy",),
    "aws:sns/topicPolicy:TopicPolicy": ("policy",),
    "aws:sns/topic:Topic": ("policy",),
    "aws:sqs/queuePolicy:QueuePolicy": ("policy",),
    "aws:iam/role:Role": ("assumeRolePolicy",),
}
AWS_LAMBDA_PERMISSION = "aws:lambda/permission:Permission"
AWS_ROLE_POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
#: AWS managed policies that grant ``*`` on ``*`` (or all of IAM): attaching one is the same as
#: writing ``"Action": "*"`` (AWS managed policy reference: AdministratorAccess, IAMFullAccess).
ADMIN_MANAGED_POLICIES = frozenset({"AdministratorAccess", "IAMFullAccess"})
#: actions that, on ``Resource: "*"``, let the holder become anyone: pass any role to a service
#: it controls, or mint long-lived keys for any user (IAM user guide, "Granting a user
#: permissions to pass a role"; "Manage access keys for IAM users").
ESCALATION_ACTIONS = ("iam:PassRole", "iam:CreateAccessKey")
#: condition keys that make an ``Allow`` to ``Principal "*"`` non-public when pinned to fixed
#: values: the list S3 documents for Block Public Access (botocore s3 model,
#: PublicAccessBlockConfiguration: "Amazon S3 considers a bucket policy public unless ...").
NON_PUBLIC_CONDITION_KEYS = frozenset(k.lower() for k in (
    "aws:SourceIp", "aws:SourceArn", "aws:SourceVpc", "aws:SourceVpce", "aws:SourceOwner",
    "aws:SourceAccount", "s3:x-amz-server-side-encryption-aws-kms-key-id", "aws:userid"))
_FIXED_OPERATORS = ("stringequals", "stringequalsignorecase", "arnequals", "ipaddress")


def _values_at(props: Mapping[str, Any], path: str) -> list[tuple[str, Any]]:
    """``(shown path, value)`` pairs at a dotted input path; ``a[].b`` walks a list."""
    head, _, rest = path.partition(".")
    many = head.endswith("[]")
    key = head[:-2] if many else head
    value = props.get(key) if isinstance(props, Mapping) else None
    if value is None:
        return []
    items = list(enumerate(_list(value))) if many else [(None, value)]
    out = []
    for i, v in items:
        shown = f"{key}[{i}]" if i is not None else key
        if rest:
            out += [(f"{shown}.{p}", x) for p, x in _values_at(_dict(v), rest)]
        else:
            out.append((shown, v))
    return out


def policy_document(value: Any) -> Optional[dict]:
    """A policy document from an engine value (JSON text or an object); None when it is not
    one yet (unknown during preview) or not valid JSON (the conformance check reports that)."""
    if isinstance(value, Mapping):
        return dict(value)
    if not isinstance(value, str):
        return None
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def statements(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [_dict(s) for s in _list(doc.get("Statement")) if isinstance(s, Mapping)]


def _action_matches(pattern: str, action: str) -> bool:
    """IAM action matching: case-insensitive, ``*`` and ``?`` wildcards (IAM JSON policy
    reference, "Action element")."""
    rx = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    return re.fullmatch(rx, action, flags=re.IGNORECASE) is not None


def _all_resources(stmt: Mapping[str, Any]) -> bool:
    if "NotResource" in stmt:
        return True  # everything except a list: as broad as "*" for this check
    return any(isinstance(r, str) and r.strip() == "*" for r in _list(stmt.get("Resource")))


def iam_findings(doc: Mapping[str, Any]) -> list[str]:
    """Over-broad grants in an identity policy: ``*`` / ``*:*`` actions, ``NotAction`` allows,
    and privilege-escalation actions on every resource."""
    out = []
    for i, st in enumerate(statements(doc)):
        if str(st.get("Effect", "")).lower() != "allow":
            continue
        sid = f"Statement[{i}]" + (f" ({st['Sid']})" if st.get("Sid") else "")
        actions = [a.strip() for a in _list(st.get("Action")) if isinstance(a, str)]
        if any(a in ("*", "*:*") for a in actions):
            out.append(f"{sid} allows every action (\"Action\": \"*\"): grant the actions the "
                       "workload calls, on its own resources")
            continue
        if "NotAction" in st and _all_resources(st):
            out.append(f"{sid} allows everything except {_list(st.get('NotAction'))} on every "
                       "resource (NotAction + Resource \"*\"): list the allowed actions instead")
            continue
        if _all_resources(st):
            esc = [e for e in ESCALATION_ACTIONS if any(_action_matches(a, e) for a in actions)]
            if esc:
                out.append(f"{sid} allows {' and '.join(esc)} on Resource \"*\": name the roles "
                           "(PassRole, with an iam:PassedToService condition) or users it may act on")
    return out


def _principal_is_everyone(principal: Any) -> bool:
    if isinstance(principal, str):
        return principal.strip() == "*"
    if isinstance(principal, Mapping):
        return any(isinstance(v, str) and v.strip() == "*"
                   for vals in principal.values() for v in _list(vals))
    return False


def _pinned_by_condition(stmt: Mapping[str, Any]) -> bool:
    """True when a condition pins the caller to fixed values of a key AWS accepts as making a
    policy non-public (no wildcards; for aws:SourceIp, ranges that do not cover everything)."""
    for op, block in _dict(stmt.get("Condition")).items():
        base = str(op).lower().split(":")[-1].removesuffix("ifexists")
        if base not in _FIXED_OPERATORS:
            continue
        for key, values in _dict(block).items():
            if str(key).lower() not in NON_PUBLIC_CONDITION_KEYS:
                continue
            vals = [v for v in _list(values) if isinstance(v, str)]
            if not vals or any("*" in v or "?" in v for v in vals):
                continue
            if str(key).lower() == "aws:sourceip" and world_open(vals):
                continue
            return True
    return False


def public_grants(doc: Mapping[str, Any]) -> list[str]:
    """``Allow`` statements whose principal is everyone (``"*"``, ``{"AWS": "*"}`` or a
    ``NotPrincipal``) and that no fixed-value condition pins down."""
    out = []
    for i, st in enumerate(statements(doc)):
        if str(st.get("Effect", "")).lower() != "allow":
            continue
        if ("NotPrincipal" in st or _principal_is_everyone(st.get("Principal"))) \
                and not _pinned_by_condition(st):
            sid = f"Statement[{i}]" + (f" ({st['Sid']})" if st.get("Sid") else "")
            who = "NotPrincipal" if "NotPrincipal" in st else "Principal \"*\""
            out.append(f"{sid} allows {_list(st.get('Action'))} to {who}")
    return out


def check_iam_least_privilege(resource_type: str, props: Mapping[str, Any],
                              ctx: RuleContext) -> list[str]:
    out = []
    for path in IAM_POLICY_INPUTS.get(resource_type, ()):
        for shown, value in _values_at(props, path):
            doc = policy_document(value)
            if doc is not None:
                out += [f"{shown}: {m}" for m in iam_findings(doc)]
    if resource_type == AWS_ROLE_POLICY_ATTACHMENT:
        arn = props.get("policyArn")
        if isinstance(arn, str) and arn.rsplit("/", 1)[-1] in ADMIN_MANAGED_POLICIES \
                and ":aws:policy/" in arn:
            out.append(f"policyArn {arn} grants administrator access: attach a policy that "
                       "lists the actions the workload calls")
    return out


def check_no_public_resource_policy(resource_type: str, props: Mapping[str, Any],
                                    ctx: RuleContext) -> list[str]:
    out = []
    for path in RESOURCE_POLICY_INPUTS.get(resource_type, ()):
        for shown, value in _values_at(props, path):
            doc = policy_document(value)
            if doc is not None:
                out += [f"{shown}: {m}: name the principals (accounts, roles, services) or pin "
                        "the caller with aws:SourceArn / aws:SourceAccount / aws:SourceVpce"
                        for m in public_grants(doc)]
    if resource_type == AWS_LAMBDA_PERMISSION and _principal_is_everyone(props.get("principal")) \
            and not props.get("sourceArn") and not props.get("sourceAccount") \
            and not props.get("principalOrgId"):
        out.append("principal \"*\" with no sourceArn / sourceAccount: anyone may invoke the "
                   "function; name the calling service and its source ARN")
    return out


# ---- GCP public members, instance templates --------------------------------------------------------
#: members GCP treats as "the public" (IAM overview, "Principal identifiers": allUsers,
#: allAuthenticatedUsers).
GCP_PUBLIC_MEMBERS = ("allUsers", "allAuthenticatedUsers")
_GCP_IAM_CLASS = re.compile(r"(IAM|Iam)(Member|Binding|Policy)$")
#: legacy ACL resources whose ``entity`` / ``roleEntities`` can name the public.
GCS_ACL_TYPES = frozenset({
    "gcp:storage/bucketAccessControl:BucketAccessControl",
    "gcp:storage/defaultObjectAccessControl:DefaultObjectAccessControl",
    "gcp:storage/objectAccessControl:ObjectAccessControl",
    "gcp:storage/bucketACL:BucketACL",
    "gcp:storage/defaultObjectACL:DefaultObjectACL",
})


def _gcp_iam_type(resource_type: str) -> bool:
    return resource_type.startswith("gcp:") and bool(
        _GCP_IAM_CLASS.search(resource_type.rsplit(":", 1)[-1]))


def _public_members(values: Iterable[Any]) -> list[str]:
    out = []
    for v in values:
        if not isinstance(v, str):
            continue
        # "allUsers", "READER:allUsers" (ACL roleEntities), "group-..."
        tail = v.strip().rsplit(":", 1)[-1]
        if tail in GCP_PUBLIC_MEMBERS:
            out.append(v.strip())
    return out


def check_no_public_gcp_members(resource_type: str, props: Mapping[str, Any],
                                ctx: RuleContext) -> list[str]:
    found: list[str] = []
    if _gcp_iam_type(resource_type):
        found += _public_members([props.get("member")] + _list(props.get("members")))
        policy = policy_document(props.get("policyData"))
        if policy:
            for b in _list(policy.get("bindings")):
                found += _public_members(_list(_dict(b).get("members")))
    elif resource_type in GCS_ACL_TYPES:
        found += _public_members([props.get("entity")] + _list(props.get("roleEntities")))
    if not found:
        return []
    return [f"grants {props.get('role') or 'access'} to {', '.join(sorted(set(found)))} (the "
            "public): grant named service accounts or groups instead"]


_GCE_TRUE = frozenset({"true", "1", "y", "yes"})
#: Compute Engine's default service account: ``<project-number>-compute@developer...``; the
#: provider also takes "default" (pulumi-gcp InstanceTemplate service_account.email).
_DEFAULT_SA = re.compile(r"^\d+-compute@developer\.gserviceaccount\.com$")


def _metadata(props: Mapping[str, Any]) -> Mapping[str, Any]:
    return _dict(props.get("metadata"))


def check_gcp_serial_port(resource_type: str, props: Mapping[str, Any],
                          ctx: RuleContext) -> list[str]:
    if resource_type not in GCP_TEMPLATES:
        return []
    value = _metadata(props).get("serial-port-enable")
    if isinstance(value, str) and value.strip().lower() in _GCE_TRUE:
        return [f"metadata serial-port-enable is {value!r}: the interactive serial console "
                "bypasses OS Login and firewalls; set it to \"FALSE\" (GCP 'Interacting with "
                "the serial console')"]
    return []


def check_gcp_block_project_ssh_keys(resource_type: str, props: Mapping[str, Any],
                                     ctx: RuleContext) -> list[str]:
    if resource_type not in GCP_TEMPLATES:
        return []
    value = _metadata(props).get("block-project-ssh-keys")
    if isinstance(value, str) and value.strip().lower() in _GCE_TRUE:
        return []
    return [f"metadata block-project-ssh-keys is {value!r}, not \"TRUE\": project-wide SSH "
            "keys would open every node; set it to \"TRUE\" (GCP 'Manage SSH keys in "
            "metadata')"]


def check_gcp_default_service_account(resource_type: str, props: Mapping[str, Any],
                                      ctx: RuleContext) -> list[str]:
    if resource_type not in GCP_TEMPLATES:
        return []
    out = []
    for i, sa in enumerate(_list(props.get("serviceAccount")) if isinstance(
            props.get("serviceAccount"), Sequence) else [props.get("serviceAccount")]):
        if sa is None:
            continue
        email = _dict(sa).get("email")
        if email is None or (isinstance(email, str) and (
                email.strip() == "default" or _DEFAULT_SA.match(email.strip()))):
            out.append(f"serviceAccount.email is {email!r}: the Compute Engine default service "
                       "account holds project Editor; give the nodes their own least-privilege "
                       "service account")
    return out


# ---- stack rules -----------------------------------------------------------------------------
def _refs(res: GuardedResource) -> set:
    """Every value by which another resource may point at this bucket."""
    refs = {res.urn, res.name, f"{res.name}-id"}
    for key in ("bucket", "id", "name"):
        v = res.props.get(key)
        if isinstance(v, str) and v and not v.startswith("["):
            refs.add(v)
    return refs


def _points_at(child: GuardedResource, bucket: GuardedResource) -> bool:
    if bucket.urn in child.dependencies:
        return True
    target = child.props.get("bucket")
    return isinstance(target, str) and target in _refs(bucket)


def check_bucket_encryption(resources: Sequence[GuardedResource],
                            ctx: RuleContext) -> list[tuple[str, str]]:
    sse = [r for r in resources if r.type in S3_SSE_TYPES]
    out = []
    for b in resources:
        if b.type not in S3_BUCKET_TYPES:
            continue
        inline = b.props.get("serverSideEncryptionConfiguration")
        if inline or any(_points_at(s, b) for s in sse):
            continue
        out.append((b.urn, "no server-side encryption configuration targets this bucket: add "
                           "aws.s3.BucketServerSideEncryptionConfiguration(bucket=<bucket>.id, ...)"))
    return out


def check_bucket_public_access_block_exists(resources: Sequence[GuardedResource],
                                            ctx: RuleContext) -> list[tuple[str, str]]:
    pabs = [r for r in resources if r.type == S3_PAB_TYPE]
    return [(b.urn, "no S3 public access block targets this bucket: add "
                    "aws.s3.BucketPublicAccessBlock(bucket=<bucket>.id) with all four flags true")
            for b in resources
            if b.type in S3_BUCKET_TYPES and not any(_points_at(p, b) for p in pabs)]


def tagged_monthly_usd(resources: Sequence[GuardedResource]) -> Decimal:
    """Sum of the gpulease cost tags (AWS dollars) and labels (GCP cents) over the stack, as
    money (``gpulease.money``)."""
    total = money.ZERO
    for r in resources:
        kind = "tags" if r.type.startswith("aws:") else "labels" if r.type.startswith("gcp:") else None
        if kind is None:
            continue
        t = tag_dict(r.props, kind)
        try:
            if kind == "tags" and tags.MONTHLY_USD in t:
                total += money.usd(str(t[tags.MONTHLY_USD]))
            elif kind == "labels" and tags.MONTHLY_CENTS in t:
                total += tags.from_cents(t[tags.MONTHLY_CENTS])
            # a window's one-time purchase counts whole against the budget, apart
            if kind == "tags" and tags.ONE_TIME_USD in t:
                total += money.usd(str(t[tags.ONE_TIME_USD]))
            elif kind == "labels" and tags.ONE_TIME_CENTS in t:
                total += tags.from_cents(t[tags.ONE_TIME_CENTS])
        except (TypeError, ValueError, ArithmeticError):
            continue  # an unknown/secret value during preview is not a number yet
    return total


def monthly_total(resources: Sequence[GuardedResource], ctx: RuleContext) -> tuple[Decimal, str]:
    """(USD the budget rules judge, what it is): the planned total when visible, else the
    tagged total (a lower bound); money, to the cent as the plan shows it. One-time window
    purchases count whole, beside the monthly figure (docs/policy.md, "Windows: one-time
    money")."""
    if ctx.planned_monthly_usd is not None:
        once = money.usd(ctx.planned_one_time_usd or 0)
        if once:
            return (money.usd(ctx.planned_monthly_usd) + once,
                    f"planned monthly cost {money.fmt(money.usd(ctx.planned_monthly_usd))} + "
                    f"one-time window purchases {money.fmt(once)} (counted whole) =")
        return money.usd(ctx.planned_monthly_usd), "planned monthly cost"
    return tagged_monthly_usd(resources), ("tagged monthly cost (a lower bound: GCP "
                                           "reservations and instance group managers carry no "
                                           "labels)")


def check_budget_cap(resources: Sequence[GuardedResource], ctx: RuleContext) -> list[tuple[str, str]]:
    if ctx.budget_monthly_usd is None:
        return []
    total, what = monthly_total(resources, ctx)
    budget = money.usd(ctx.budget_monthly_usd)
    if total <= budget:   # whole cents: a cent over is over
        return []
    return [("", f"{what} {money.fmt(total)} exceeds the budget {money.fmt(budget)} by "
                 f"{money.fmt(total - budget)}: shrink clusters, move work to "
                 "spot/reserved, or raise gpulease:budget_monthly_usd")]


def check_budget_headroom(resources: Sequence[GuardedResource],
                          ctx: RuleContext) -> list[tuple[str, str]]:
    if ctx.budget_monthly_usd is None:
        return []
    b = money.usd(ctx.budget_monthly_usd)
    if b <= 0:
        return []
    total, what = monthly_total(resources, ctx)
    if total <= b * Decimal(repr(HEADROOM_WARN_SHARE)) or total > b:
        return []  # comfortably under, or already reported by budget-cap
    return [("", f"{what} {money.fmt(total)} is {total / b:.0%} of the budget "
                 f"{money.fmt(b)}: little headroom for peaks")]


def _ingress_target(r: GuardedResource, groups: dict) -> Optional[str]:
    """The security group (URN) or GCP network an ingress resource opens."""
    if r.type == AWS_SG:
        return r.urn
    if r.type in (AWS_SG_RULE, AWS_SG_INGRESS):
        sg_id = r.props.get("securityGroupId")
        for urn, sg in groups.items():
            if urn in r.dependencies or (isinstance(sg_id, str) and sg_id in _refs(sg)):
                return urn
        return f"security group {sg_id}" if isinstance(sg_id, str) else None
    if r.type == GCP_FIREWALL:
        net = r.props.get("network")
        return f"network {net}" if isinstance(net, str) else None
    return None


def check_open_ingress_combined(resources: Sequence[GuardedResource],
                                ctx: RuleContext) -> list[tuple[str, str]]:
    """Ingress rules that are each narrower than "everything" but together admit every address
    into one security group (AWS) or one network (GCP)."""
    groups = {r.urn: r for r in resources if r.type == AWS_SG}
    by_target: dict[str, list[tuple[GuardedResource, list]]] = {}
    for r in resources:
        sources = ingress_sources(r.type, r.props)
        if not sources:
            continue
        target = _ingress_target(r, groups)
        if target is not None:
            by_target.setdefault(target, []).append((r, sources))
    out = []
    for target, members in by_target.items():
        if len(members) < 2 or any(world_open(src) for _, src in members):
            continue  # a single open resource is no-open-ingress's finding
        bad = world_open([c for _, src in members for c in src])
        if bad:
            names = ", ".join(sorted(r.name for r, _ in members))
            for r, _ in members:
                out.append((r.urn, f"ingress rules {names} together allow {', '.join(bad)} into "
                                   f"{target}: {_INGRESS_FIX}"))
    return out


def _taggable(resource_type: str) -> bool:
    return tag_kind(resource_type) is not None


RULES: tuple[Rule, ...] = (
    Rule("cost-tags-required",
         "Every taggable AWS resource carries the gpulease cost tags, every labelable GCP "
         "resource the gpulease cost labels.", MANDATORY, check=check_cost_tags,
         applies=_taggable, fix="Declare resources under a gpulease component with a CostContext."),
    Rule("s3-block-public-access",
         "S3 public access blocks set all four flags.", MANDATORY,
         frozenset({S3_PAB_TYPE}), check=check_s3_public_access_block,
         fix="block_public_acls, block_public_policy, ignore_public_acls, restrict_public_buckets=True"),
    Rule("s3-public-access-block-exists",
         "Every S3 bucket has a public access block.", MANDATORY,
         stack_check=check_bucket_public_access_block_exists,
         fix="Add aws.s3.BucketPublicAccessBlock for the bucket."),
    Rule("s3-bucket-encryption",
         "Every S3 bucket has a default server-side encryption configuration.", MANDATORY,
         stack_check=check_bucket_encryption,
         fix="Add aws.s3.BucketServerSideEncryptionConfiguration for the bucket."),
    Rule("imdsv2-required",
         "Launch templates and instances require IMDSv2 (httpTokens=required).", MANDATORY,
         AWS_NODE_TYPES, check=check_imdsv2, fix="metadata_options.http_tokens='required'"),
    Rule("no-open-ingress",
         "No security group or firewall allows ingress from every address (0.0.0.0/0, ::/0 or "
         "ranges that add up to it; a GCP ingress rule with no source).", MANDATORY,
         frozenset({AWS_SG, AWS_SG_RULE, AWS_SG_INGRESS, GCP_FIREWALL}), check=check_open_ingress,
         fix="Restrict sources to the cluster's own security group or network tags."),
    Rule("no-open-ingress-combined",
         "Ingress rules on one security group / network do not add up to every address.",
         MANDATORY, stack_check=check_open_ingress_combined,
         fix="Restrict sources to the cluster's own security group or network tags."),
    Rule("iam-least-privilege",
         "No IAM policy allows \"*\" actions, NotAction on every resource, iam:PassRole or "
         "iam:CreateAccessKey on \"*\", or attaches AdministratorAccess.", MANDATORY,
         frozenset(IAM_POLICY_INPUTS) | {AWS_ROLE_POLICY_ATTACHMENT},
         check=check_iam_least_privilege,
         fix="List the actions the workload calls, on its own resources."),
    Rule("no-public-resource-policy",
         "No bucket / topic / queue / trust policy or Lambda permission allows Principal \"*\" "
         "without a condition that pins the caller.", MANDATORY,
         frozenset(RESOURCE_POLICY_INPUTS) | {AWS_LAMBDA_PERMISSION},
         check=check_no_public_resource_policy,
         fix="Name the principals, or pin them with aws:SourceArn / aws:SourceAccount."),
    Rule("no-public-gcp-members",
         "No GCP IAM member, binding, policy or GCS ACL grants allUsers / allAuthenticatedUsers.",
         MANDATORY, check=check_no_public_gcp_members,
         applies=lambda t: _gcp_iam_type(t) or t in GCS_ACL_TYPES,
         fix="Grant named service accounts or groups."),
    Rule("gcp-serial-port-disabled",
         "GCP instance templates keep the interactive serial console off.", MANDATORY,
         GCP_TEMPLATES, check=check_gcp_serial_port, fix="metadata {'serial-port-enable': 'FALSE'}"),
    Rule("gcp-block-project-ssh-keys",
         "GCP instance templates block project-wide SSH keys.", MANDATORY, GCP_TEMPLATES,
         check=check_gcp_block_project_ssh_keys, fix="metadata {'block-project-ssh-keys': 'TRUE'}"),
    Rule("gcp-no-default-service-account",
         "GCP instance templates do not run as the Compute Engine default service account.",
         MANDATORY, GCP_TEMPLATES, check=check_gcp_default_service_account,
         fix="service_account={'email': <the cluster's own service account>, ...}"),
    Rule("no-public-ip-gpu-nodes",
         "GPU nodes get no public IP address.", MANDATORY,
         AWS_NODE_TYPES | GCP_TEMPLATES, check=check_no_public_ip,
         fix="No associate_public_ip_address / access_configs; egress goes through NAT."),
    Rule("gcp-shielded-vm",
         "GCP instance templates enable Shielded VM (secure boot, vTPM, integrity monitoring).",
         MANDATORY, GCP_TEMPLATES, check=check_gcp_shielded_vm,
         fix="shielded_instance_config with all three flags True."),
    Rule("gcp-os-login",
         "GCP instance templates enable OS Login.", MANDATORY, GCP_TEMPLATES,
         check=check_gcp_os_login, fix="metadata {'enable-oslogin': 'TRUE'}"),
    Rule("gcs-public-access-prevention",
         "GCS buckets enforce public access prevention and uniform bucket-level access.",
         MANDATORY, frozenset({GCS_BUCKET_TYPE}), check=check_gcs_public_access,
         fix="public_access_prevention='enforced', uniform_bucket_level_access=True"),
    Rule("storage-protected-in-prod",
         "In prod, storage buckets are protected and retained on delete.", MANDATORY,
         STORAGE_TYPES, check=check_storage_protected,
         fix="ResourceOptions(protect=True, retain_on_delete=True)"),
    Rule("ebs-encrypted",
         "Launch template EBS volumes are encrypted.", ADVISORY,
         frozenset({AWS_LAUNCH_TEMPLATE}), check=check_ebs_encrypted,
         fix="block_device_mappings[].ebs.encrypted='true'"),
    Rule("budget-cap",
         "The stack's planned monthly cost (every resource the plan prices) stays within "
         "gpulease:budget_monthly_usd.", MANDATORY,
         stack_check=check_budget_cap, fix="Reduce cost or raise the budget."),
    Rule("budget-headroom",
         f"Warns when the planned monthly cost passes {HEADROOM_WARN_SHARE:.0%} of the budget.",
         ADVISORY, stack_check=check_budget_headroom, fix="Plan for peaks or raise the budget."),
)

RULES_BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}
