"""Guardrail rules as plain functions over resource properties as the Pulumi engine sees them.

The same functions run in two places: `gpulease plan` (``infra.guardrails.evaluate`` over the
resources recorded under mocks) and the CrossGuard pack in ``policy-pack/`` (wrapped in
``ResourceValidationPolicy`` / ``StackValidationPolicy``). Properties use the engine's
camelCase keys (``metadataOptions.httpTokens``), exactly like CrossGuard's ``args.props`` and
``infra.planner.mocks.RecordedResource.inputs``.

Resource rules: ``(resource_type, props, ctx) -> list[str]`` (violation messages).
Stack rules: ``(resources, ctx) -> list[tuple[urn, message]]`` (urn "" = the whole stack).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import lru_cache
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Iterable, Optional

from infra.costing import tags

MANDATORY = "mandatory"
ADVISORY = "advisory"

OPEN_CIDRS = frozenset({"0.0.0.0/0", "::/0"})

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

_PKG = {"aws": "pulumi_aws", "gcp": "pulumi_gcp"}


@dataclass(frozen=True)
class RuleContext:
    """What a rule may know beyond the resource's own properties."""

    environment: str = ""
    budget_monthly_usd: Optional[float] = None
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
    from infra.costing.transform import tag_input  # the transform decides the same way

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


def _open(cidrs: Iterable[Any]) -> list[str]:
    return sorted({c for c in cidrs if isinstance(c, str) and c.strip() in OPEN_CIDRS})


def check_open_ingress(resource_type: str, props: Mapping[str, Any], ctx: RuleContext) -> list[str]:
    found: list[str] = []
    if resource_type == AWS_SG:
        for i, rule in enumerate(_list(props.get("ingress"))):
            r = _dict(rule)
            bad = _open(_list(r.get("cidrBlocks")) + _list(r.get("ipv6CidrBlocks")))
            if bad:
                found.append(f"ingress[{i}] (ports {r.get('fromPort')}-{r.get('toPort')}) "
                             f"allows {', '.join(bad)}")
    elif resource_type == AWS_SG_RULE:
        if props.get("type") == "ingress":
            bad = _open(_list(props.get("cidrBlocks")) + _list(props.get("ipv6CidrBlocks")))
            if bad:
                found.append(f"ingress rule allows {', '.join(bad)}")
    elif resource_type == AWS_SG_INGRESS:
        bad = _open([props.get("cidrIpv4"), props.get("cidrIpv6")])
        if bad:
            found.append(f"ingress rule allows {', '.join(bad)}")
    elif resource_type == GCP_FIREWALL:
        direction = str(props.get("direction") or "INGRESS").upper()
        # A deny rule from everywhere is a good thing; only allow rules open the network.
        if direction == "INGRESS" and _list(props.get("allows")):
            bad = _open(_list(props.get("sourceRanges")))
            if bad:
                found.append(f"firewall allows ingress from {', '.join(bad)}")
    if not found:
        return []
    return [f"{m}: restrict the source to the cluster's own security group / network tags "
            "(use SSM Session Manager or IAP instead of open SSH)" for m in found]


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


def tagged_monthly_usd(resources: Sequence[GuardedResource]) -> float:
    """Sum of the gpulease cost tags (AWS dollars) and labels (GCP cents) over the stack."""
    total = 0.0
    for r in resources:
        kind = "tags" if r.type.startswith("aws:") else "labels" if r.type.startswith("gcp:") else None
        if kind is None:
            continue
        t = tag_dict(r.props, kind)
        try:
            if kind == "tags" and tags.MONTHLY_USD in t:
                total += float(t[tags.MONTHLY_USD])
            elif kind == "labels" and tags.MONTHLY_CENTS in t:
                total += tags.from_cents(t[tags.MONTHLY_CENTS])
        except (TypeError, ValueError):
            continue  # an unknown/secret value during preview is not a number yet
    return total


def check_budget_cap(resources: Sequence[GuardedResource], ctx: RuleContext) -> list[tuple[str, str]]:
    if ctx.budget_monthly_usd is None:
        return []
    total = tagged_monthly_usd(resources)
    if total <= ctx.budget_monthly_usd + 0.005:
        return []
    over = total - ctx.budget_monthly_usd
    return [("", f"tagged monthly cost ${total:,.2f} exceeds the budget "
                 f"${ctx.budget_monthly_usd:,.2f} by ${over:,.2f}: shrink clusters, move work to "
                 "spot/reserved, or raise gpulease:budget_monthly_usd")]


def check_budget_headroom(resources: Sequence[GuardedResource],
                          ctx: RuleContext) -> list[tuple[str, str]]:
    b = ctx.budget_monthly_usd
    if b is None or b <= 0:
        return []
    total = tagged_monthly_usd(resources)
    if total <= b * HEADROOM_WARN_SHARE or total > b + 0.005:
        return []  # comfortably under, or already reported by budget-cap
    return [("", f"tagged monthly cost ${total:,.2f} is {total / b:.0%} of the budget "
                 f"${b:,.2f}: little headroom for peaks")]


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
         "No security group or firewall allows ingress from 0.0.0.0/0 or ::/0.", MANDATORY,
         frozenset({AWS_SG, AWS_SG_RULE, AWS_SG_INGRESS, GCP_FIREWALL}), check=check_open_ingress,
         fix="Restrict sources to the cluster's own security group or network tags."),
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
         "The stack's tagged monthly cost stays within gpulease:budget_monthly_usd.", MANDATORY,
         stack_check=check_budget_cap, fix="Reduce cost or raise the budget."),
    Rule("budget-headroom",
         f"Warns when the tagged monthly cost passes {HEADROOM_WARN_SHARE:.0%} of the budget.",
         ADVISORY, stack_check=check_budget_headroom, fix="Plan for peaks or raise the budget."),
)

RULES_BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}
