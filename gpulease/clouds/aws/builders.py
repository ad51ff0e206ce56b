"""Pure builders for the AWS components: interface layouts, overrides, IAM and bucket policies.

Nothing here touches Pulumi or a cloud: every function maps domain objects to the plain
dicts/lists the components pass to pulumi-aws, so each one is table-tested on its own.
"""
from __future__ import annotations

from typing import Optional

from gpulease.catalog import MIN_TRANSITION_DAYS, TIER_CLASSES
from gpulease import tags
from gpulease.clock import format_utc
from gpulease.clouds.aws.cloud import partition_of  # noqa: F401 (lives there: staging reads it too)
from gpulease.purchase import CAPACITY_BLOCK, MIXED, NODE_MODELS, RESERVATION, RESERVED, SPOT
from gpulease.errors import ConfigError, Finding
from gpulease.model import ClusterDecision, Offering, StackSpec, StorageSpec
from gpulease.policy.fallbacks import efa_card_count
from gpulease.quotes import CB_MAX_DAYS, block_hours_for
from gpulease.quotes.blocks import (  # noqa: F401 (moved there: the bootstrap reads them too)
    BLOCK_CHECKPOINT_MINUTES, BLOCK_DRAIN_MINUTES, block_schedule, window_block)

#: IMDSv2 hop limit. 1 (the EC2 default) stops the token PUT answer one hop short of a
#: container on a bridge network, so a containerized trainer could not read its spot notice or
#: role credentials; 2 is the value AWS documents for containers (EC2 User Guide, "Configure the
#: instance metadata options": "we recommend setting the hop limit to 2" in container
#: environments). Tokens stay required, so SSRF-style GETs still get nothing.
IMDS_HOP_LIMIT = 2

#: Root volume. The DLAMI base image snapshot is ~75 GB; 200 GB leaves room for container
#: images and pip caches. Datasets and scratch live on instance-store NVMe, not here.
ROOT_VOLUME_GB = 200
#: Ubuntu-based DLAMIs boot from /dev/sda1.
ROOT_DEVICE = "/dev/sda1"

#: Public SSM parameter of the AWS Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04):
#: NVIDIA driver, CUDA, EFA installer and the aws-ofi-nccl plugin preinstalled
#: (AWS DLAMI docs, "Base OSS Nvidia Driver GPU AMI", query with ssm get-parameter).
DLAMI_PARAMETER = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"

#: Spot allocation: AWS's recommended strategy (lowest price among the pools least likely to
#: be interrupted). EC2 Auto Scaling user guide, "Allocation strategies for multiple instance types".
SPOT_ALLOCATION = "price-capacity-optimized"
#: On-demand picks the override order: the decided type first (it is the one the ODCR holds).
ON_DEMAND_ALLOCATION = "prioritized"

#: EventBridge detail types for spot risk (EC2 User Guide, "Spot Instance interruption notices"
#: and "EC2 instance rebalance recommendations").
SPOT_EVENT_TYPES = {
    "interruption": "EC2 Spot Instance Interruption Warning",
    "rebalance": "EC2 Instance Rebalance Recommendation",
}

#: S3 will not transition to STANDARD_IA before an object is 30 days old (one constant:
#: gpulease.catalog.MIN_TRANSITION_DAYS, which the storage policy's lifecycle search obeys too).
MIN_IA_DAYS = MIN_TRANSITION_DAYS[("aws", "STANDARD_IA")]
#: GPU bootstrap (driver check, EFA check, dataset mount) takes minutes; the health check
#: must not kill nodes that are still booting.
HEALTH_CHECK_GRACE_SECONDS = 900


# ---- network interfaces ---------------------------------------------------------------------
def efa_interfaces(offering: Offering) -> list[dict]:
    """Launch-template network interfaces for one node of ``offering``.

    EFA types: the primary interface (card 0, device 0) is ``efa`` (EFA with ENA: it carries
    the node's IP); every further EFA-capable card gets one ``efa-only`` interface at device
    index 1 (EC2 User Guide, "Maximize network bandwidth on instances with multiple network
    cards"; EFA-only is available on all EFA-supported types since 2024-10). EFA-only devices
    take no IP address, so a 32-card p5 node uses one subnet IP, not 32.
    A type without EFA gets one plain interface. No interface ever gets a public IP.
    """
    cards = efa_card_count(offering)
    if cards == 0:
        return [plain_interface()]
    out = [{"network_card_index": 0, "device_index": 0, "interface_type": "efa",
            "associate_public_ip_address": False, "delete_on_termination": True}]
    out += [{"network_card_index": i, "device_index": 1, "interface_type": "efa-only",
             "delete_on_termination": True} for i in range(1, cards)]
    return out


def plain_interface() -> dict:
    return {"network_card_index": 0, "device_index": 0, "interface_type": "interface",
            "associate_public_ip_address": False, "delete_on_termination": True}


def interfaces_for(decision: ClusterDecision) -> list[dict]:
    """EFA layout only when the cluster actually runs on the EFA fabric (multi-node)."""
    if decision.network == "efa":
        return efa_interfaces(decision.offering)
    return [plain_interface()]


# ---- capacity -------------------------------------------------------------------------------
def purchase_label(decision: ClusterDecision) -> str:
    """Purchase-model tag of the node group: the only model, or "mixed"."""
    models = [m for m, n in decision.purchase.as_dict().items() if n]
    return models[0] if len(models) == 1 else MIXED


def asg_capacity(decision: ClusterDecision, *, without_reserved: bool = False) -> dict:
    """Sizes and purchase split of the cluster's Auto Scaling group.

    The group holds the nodes in node order (most hours first; ``without_reserved``: all but
    the reserved ones, which a Capacity Block group runs). ``on_demand_base_capacity`` covers
    the reserved and on-demand nodes (launched into the capacity reservation first), every node
    above it is spot (``on_demand_percentage_above_base_capacity`` 0) or, when the plan has no
    spot node, on-demand (100) - EC2 Auto Scaling user guide, "Instances distribution" of a
    mixed instances policy. ``desired_capacity`` is what starts at creation: the baseline and
    the reserved nodes (paid every hour); the burst up to ``max_size`` is started by raising the
    desired capacity and stopped by node autostop / the reaper. Raises ValueError for a
    decision whose blocks are not in node order (the group could not carry it).
    """
    blocks = [b for b in decision.node_blocks
              if not (without_reserved and b.purchase == RESERVED)]
    # an ASG fills its on-demand base capacity first and puts every node above it on one
    # market, so a decision it can carry keeps the node-model order along the nodes
    ranks = [NODE_MODELS.index(b.purchase) for b in blocks]
    if ranks != sorted(ranks):
        raise ValueError(f"{decision.name}: nodes bought {[b.purchase for b in blocks]} are not "
                         "in the order reserved, on-demand, spot that one Auto Scaling group "
                         "carries")
    nodes = sum(b.nodes for b in blocks)
    base = sum(b.nodes for b in blocks if b.purchase != SPOT)
    standing = sum(b.nodes for b in blocks if b.part == "baseline" or b.purchase == RESERVED)
    return {"max_size": nodes, "desired_capacity": standing, "on_demand_base_capacity": base,
            "on_demand_percentage_above_base_capacity": 0 if nodes > base else 100}


def window_model(decision: ClusterDecision) -> Optional[str]:
    """How a cluster's window is bought ("capacity_block", "reservation", ...); None for a
    monthly load (docs/policy.md, "Windows")."""
    w = getattr(decision, "window", None)
    return w.model if w is not None else None


def reservation_end(decision: ClusterDecision) -> Optional[str]:
    """When a window's capacity reservation (ODCR) ends (RFC 3339): the end of the run; None =
    unlimited (a monthly load's reservation, or one backing a commitment)."""
    w = getattr(decision, "window", None)
    if w is None or w.model != RESERVATION:
        return None
    return format_utc(w.end)


def wants_reservation(stack: StackSpec, decision: ClusterDecision) -> bool:
    """Reserved nodes get an ODCR / Capacity Block, except in a dev stack that did not ask (a
    window bought as a Capacity Block or a reservation always gets one: that is the purchase)."""
    if decision.purchase.reserved == 0:
        return False
    if not decision.buys_reservation:   # existing holdings cover them (policy.holdings)
        return False
    if window_model(decision) in (CAPACITY_BLOCK, RESERVATION):
        return True
    spec = stack.clouds.get("aws")
    flag = getattr(spec, "capacity_reservations", None)
    if flag is not None:
        return bool(flag)
    return not stack.is_dev


def uses_capacity_block(stack: StackSpec, d: ClusterDecision) -> bool:
    """The reserved nodes of an AWS cluster are a Capacity Block (the stack asks for blocks and
    the type is sold as one, ``gpulease.quotes.CAPACITY_BLOCK_TYPES``; or the policy bought the
    cluster's window as a block); otherwise an ODCR."""
    from gpulease.clouds.aws.cloud import CAPACITY_BLOCK_TYPES

    if window_model(d) is not None:      # a window: the policy chose (or did not choose) one
        return d.cloud == "aws" and window_model(d) == CAPACITY_BLOCK
    aws = stack.clouds.get("aws")
    return bool(d.cloud == "aws" and aws is not None and wants_reservation(stack, d)
                and aws.capacity_blocks and d.offering.instance_type in CAPACITY_BLOCK_TYPES)


def capacity_block_hours(hours_per_month: float) -> int:
    """Capacity Block duration covering a month's hours: 1-14 days in 1-day steps, then 7-day
    steps up to 182 days (EC2 User Guide, "Capacity Blocks for ML", durations;
    ``gpulease.quotes.block_hours_for``)."""
    return block_hours_for(hours_per_month) or CB_MAX_DAYS * 24


def is_zone_id(zone: str) -> bool:
    """``use1-az1`` (an AZ ID, the same in every account) vs ``us-east-1a`` (a name, mapped per
    account): EC2 User Guide, "Availability Zone IDs"."""
    return "-az" in zone


def subnet_zone_args(zone: str) -> dict:
    """Subnet placement input for a zone ID or name (``availability_zone_id`` / ``_zone``)."""
    return {"availability_zone_id": zone} if is_zone_id(zone) else {"availability_zone": zone}


def cluster_zones(decision: ClusterDecision) -> tuple[str, ...]:
    """AZs the cluster may use, when known at program time (decided zone, else the catalog's
    regular zones: Local Zones need an opt-in and are never assumed)."""
    if decision.zone:
        return (decision.zone,)
    return tuple(decision.offering.regular_zones)


# ---- storage --------------------------------------------------------------------------------
def storage_index(stack: StackSpec, name: str) -> int:
    for i, s in enumerate(stack.storage):
        if s.name == name:
            return i
    return 0


def lifecycle_rules(spec: Optional[StorageSpec], *, index: int = 0,
                    noncurrent_days: int = 30, source: str = "") -> list[dict]:
    """S3 lifecycle rules: tiering by age from the storage entry, noncurrent-version expiry,
    and clean-up of abandoned multipart uploads (checkpoint writers crash mid-upload).

    ``spec=None`` (a cluster's work bucket) gets no tiering: staged copies and live
    checkpoints are hot by definition.
    """
    classes = TIER_CLASSES["aws"]
    rules: list[dict] = []
    if spec is not None:
        path = f"gpulease:storage[{index}]"
        steps = [("warm_after_days", spec.warm_after_days, classes[1]),
                 ("cold_after_days", spec.cold_after_days, classes[2]),
                 ("archive_after_days", spec.archive_after_days, classes[3])]
        findings, last, transitions = [], 0, []
        for key, days, cls in steps:
            if days is None:
                continue
            if cls == "STANDARD_IA" and days < MIN_IA_DAYS:
                findings.append(Finding(f"{path}.{key}", f"S3 moves objects to {cls} no earlier "
                                        f"than day {MIN_IA_DAYS} (got {days}); set it to "
                                        f">= {MIN_IA_DAYS} or leave it out", source=source))
            if days <= last:
                findings.append(Finding(f"{path}.{key}", f"must be later than the previous "
                                        f"tier (got {days} <= {last}); tiers go hot -> warm -> "
                                        "cold -> archive", source=source))
            last = max(last, days)
            transitions.append({"days": int(days), "storage_class": cls})
        if findings:
            raise ConfigError(findings)
        if transitions:
            rules.append({"id": "tiering", "status": "Enabled", "filter": {"prefix": ""},
                          "transitions": transitions})
        noncurrent_days = spec.noncurrent_days
    rules.append({"id": "expire-noncurrent", "status": "Enabled", "filter": {"prefix": ""},
                  "noncurrent_version_expiration": {"noncurrent_days": int(noncurrent_days)}})
    rules.append({"id": "abort-incomplete-uploads", "status": "Enabled",
                  "filter": {"prefix": ""},
                  "abort_incomplete_multipart_upload": {"days_after_initiation": 7}})
    return rules


def tls_only_policy(bucket_arn: str) -> dict:
    """Bucket policy denying every request not made over TLS (S3 User Guide, "Security best
    practices": aws:SecureTransport)."""
    return {"Version": "2012-10-17", "Statement": [{
        "Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
        "Resource": [bucket_arn, f"{bucket_arn}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]}


# ---- IAM ------------------------------------------------------------------------------------
def assume_role_policy(service: str = "ec2.amazonaws.com") -> dict:
    return {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}]}


def node_policy(*, partition: str, dataset_bucket: Optional[str],
                dataset_prefix: Optional[str], checkpoint_bucket: str,
                checkpoint_prefix: str) -> dict:
    """Least-privilege inline policy of a GPU node: nothing account-wide except the actions
    that have no resource-level permissions, each fenced by a condition or read-only; the one
    write on EC2 is a tag on the node itself (:func:`self_tag_statement`), and an explicit Deny
    keeps any other tag key out of reach whatever else the role is given
    (:func:`tag_fence_statement`). A node never terminates or scales anything: it asks the
    reaper to remove it (tags.LEAVE_REQUESTED, docs/reaper.md "Leave requests")."""
    s3 = f"arn:{partition}:s3:::"
    stmts: list[dict] = []
    if dataset_bucket and dataset_prefix is not None:
        stmts.append({"Sid": "ListDataset", "Effect": "Allow", "Action": "s3:ListBucket",
                      "Resource": f"{s3}{dataset_bucket}",
                      "Condition": {"StringLike": {"s3:prefix": [f"{dataset_prefix}*"]}}})
        stmts.append({"Sid": "ReadDataset", "Effect": "Allow", "Action": "s3:GetObject",
                      "Resource": f"{s3}{dataset_bucket}/{dataset_prefix}*"})
    stmts.append({"Sid": "ListCheckpoints", "Effect": "Allow", "Action": "s3:ListBucket",
                  "Resource": f"{s3}{checkpoint_bucket}",
                  "Condition": {"StringLike": {"s3:prefix": [f"{checkpoint_prefix}*"]}}})
    stmts.append({"Sid": "ReadWriteCheckpoints", "Effect": "Allow",
                  "Action": ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
                  "Resource": f"{s3}{checkpoint_bucket}/{checkpoint_prefix}*"})
    # PutMetricData has no resource-level permissions; the namespace condition keeps the node
    # to the CloudWatch agent's namespace (CloudWatch User Guide, "Using condition keys").
    stmts.append({"Sid": "GpuMetrics", "Effect": "Allow", "Action": "cloudwatch:PutMetricData",
                  "Resource": "*",
                  "Condition": {"StringEquals": {"cloudwatch:namespace": "CWAgent"}}})
    # Rendezvous discovery lists the cluster's peers by tag; Describe* supports no resources.
    stmts.append({"Sid": "DiscoverPeers", "Effect": "Allow", "Action": "ec2:DescribeInstances",
                  "Resource": "*"})
    # Before it asks to leave, the autostop reads the opt-out and the baseline where the reaper
    # reads them: its own ASG's tags and live members (DescribeAutoScalingGroups). Both actions
    # are read-only (access level List) and list no resource type in the Service Authorization
    # Reference ("Actions, resources, and condition keys for Amazon EC2 Auto Scaling"), so they
    # take "*" and cannot be fenced by ResourceTag either.
    stmts.append({"Sid": "NodeAutostopOptOut", "Effect": "Allow",
                  "Action": ["autoscaling:DescribeAutoScalingInstances",
                             "autoscaling:DescribeAutoScalingGroups"],
                  "Resource": "*"})
    stmts.append(self_tag_statement())
    stmts.append(tag_fence_statement())
    return {"Version": "2012-10-17", "Statement": stmts}


#: every tagging action of the services a node's credentials could reach a group or an
#: instance through (EC2 and EC2 Auto Scaling), the ones the tag fence denies for other keys.
TAGGING_ACTIONS = ("ec2:CreateTags", "ec2:DeleteTags", "autoscaling:CreateOrUpdateTags",
                   "autoscaling:DeleteTags")


def self_tag_statement() -> dict:
    """What a node may write (issue 21 item 4, issue 35 item 6): the tag keys
    tags.NODE_WRITTEN (its busy witness, its leave request), on ONE instance, itself.
    ``${ec2:SourceInstanceARN}`` is the ARN of the instance whose role credentials signed the
    request (EC2 condition key "ec2:SourceInstanceARN", used as a policy variable in AWS's own
    policies, e.g. the managed policy AWSElasticDisasterRecoveryRecoveryInstancePolicy and the
    Systems Manager User Guide's PutComplianceItems example); the resource must equal it.
    ``aws:TagKeys`` with ForAllValues + a Null check admits requests whose only tag keys are
    these (IAM User Guide, "Controlling access during AWS requests", aws:TagKeys). Not
    ``aws:ARN``: IAM Access Analyzer calls it an unsupported key, and a statement on it never
    matches."""
    return {"Sid": "NodeSelfTags", "Effect": "Allow", "Action": "ec2:CreateTags",
            "Resource": "${ec2:SourceInstanceARN}",
            "Condition": {"ForAllValues:StringEquals": {"aws:TagKeys": list(tags.NODE_WRITTEN)},
                          "Null": {"aws:TagKeys": "false"}}}


def tag_fence_statement() -> dict:
    """An explicit Deny of every tagging action with any key but tags.NODE_WRITTEN, on any
    resource: whatever policy is attached to the node role later (a managed policy, a hand
    edit), a node can never write tags.DECLARED (so never declare a group to the reaper), the
    cluster's tags, the opt-out or the reaper's marks. An explicit Deny wins over every Allow
    (IAM User Guide, "Policy evaluation logic"). ForAnyValue:StringNotEquals matches a request
    carrying at least one other key; a request without tag keys is not tagging anything."""
    return {"Sid": "NodeTagsNothingElse", "Effect": "Deny", "Action": list(TAGGING_ACTIONS),
            "Resource": "*",
            "Condition": {"ForAnyValue:StringNotEquals": {"aws:TagKeys":
                                                          list(tags.NODE_WRITTEN)}}}


def spot_event_pattern(detail_type: str) -> dict:
    return {"source": ["aws.ec2"], "detail-type": [detail_type]}


def sns_events_policy(topic_arn: str) -> dict:
    """Lets EventBridge publish to the topic (EventBridge User Guide, "Permissions for SNS")."""
    return {"Version": "2012-10-17", "Statement": [{
        "Sid": "EventBridgePublish", "Effect": "Allow",
        "Principal": {"Service": "events.amazonaws.com"}, "Action": "sns:Publish",
        "Resource": topic_arn}]}
