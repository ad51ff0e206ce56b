"""Pure AWS builders: EFA layouts, overrides, lifecycle rules, IAM policy — table tests."""
from __future__ import annotations

import dataclasses
import json

import pytest

from gpulease import tags
from gpulease.catalog import load_catalog
from gpulease.clouds.aws import builders
from gpulease.errors import ConfigError
from gpulease.model import (CloudSpec, ClusterDecision, ClusterSpec, CostBreakdown, Offering,
                            PurchaseMix, StackSpec, StorageSpec)


def offering(itype="p5.48xlarge", *, gpu="H100", gpus=8, rdma="efa", cards=32, efa=32,
             od=55.04, spot=20.0, region="us-east-1") -> Offering:
    return Offering(cloud="aws", region=region, instance_type=itype, gpu=gpu, gpus_per_node=gpus,
                    gpu_memory_gb=80, vcpus=192, memory_gb=2048, network_gbps=3200, rdma=rdma,
                    on_demand_usd=od, spot_usd=spot, commit_1y_usd=None, commit_3y_usd=None,
                    network_cards=cards, efa_interfaces=efa)


def decision(o: Offering, *, purchase=PurchaseMix(on_demand=1, spot=1), network=None,
             distributed=True) -> ClusterDecision:
    spec = ClusterSpec(name="c1", gpu=o.gpu, gpus=o.gpus_per_node * purchase.total,
                       hours_per_month=100, priority=5)
    return ClusterDecision(spec=spec, offering=o, nodes=purchase.total, purchase=purchase,
                           network=network or o.rdma, template="t", hourly_usd=1.0,
                           costs=CostBreakdown(), rationale="", distributed=distributed)


def stack(env="staging", **aws) -> StackSpec:
    return StackSpec(stack=env, environment=env, owner="o", cost_center="c",
                     budget_monthly_usd=1.0,
                     clouds={"aws": CloudSpec(cloud="aws", regions=("us-east-1",), **aws)},
                     storage=(), clusters=())


@pytest.mark.parametrize("cards,efa,expected", [
    (32, 32, [("efa", 0, 0)] + [("efa-only", i, 1) for i in range(1, 32)]),   # p5-class
    (4, 4, [("efa", 0, 0), ("efa-only", 1, 1), ("efa-only", 2, 1), ("efa-only", 3, 1)]),  # p4d
    (1, 1, [("efa", 0, 0)]),                                                  # g6.48xlarge
    (2, 1, [("efa", 0, 0)]),               # only one card carries EFA
    (None, None, [("efa", 0, 0)]),         # layout unknown in the catalog: primary EFA only
])
def test_efa_interface_layout(cards, efa, expected):
    got = builders.efa_interfaces(offering(cards=cards, efa=efa))
    assert [(i["interface_type"], i["network_card_index"], i["device_index"]) for i in got] \
        == expected
    assert all(i.get("associate_public_ip_address") in (None, False) for i in got)
    assert all(i["delete_on_termination"] for i in got)


def test_non_efa_type_gets_one_plain_interface():
    got = builders.efa_interfaces(offering("g6.xlarge", gpu="L4", gpus=1, rdma="none",
                                           cards=None, efa=None))
    assert got == [builders.plain_interface()]
    assert got[0]["interface_type"] == "interface" and got[0]["associate_public_ip_address"] is False


def test_single_node_on_efa_type_uses_plain_interface():
    d = decision(offering(), purchase=PurchaseMix(on_demand=1), network="none",
                 distributed=False)
    assert builders.interfaces_for(d) == [builders.plain_interface()]


def _fallbacks(d, cat) -> list[str]:
    # the policy decides them (gpulease.policy.fallbacks); the component only reads them
    from gpulease.policy.fallbacks import fallback_types

    return list(fallback_types(d.offering, d.purchase, d.network, cat))


def test_equivalent_types_from_the_real_catalog():
    cat = load_catalog()
    l4 = [o for o in cat.offerings_for(cloud="aws", gpu="L4") if o.gpus_per_node == 1]
    assert l4, "catalog has no single-L4 AWS type"
    dearest = max(l4, key=lambda o: o.on_demand_usd or 0)
    d = decision(dearest, network="none", distributed=False)
    got = _fallbacks(d, cat)
    assert got[0] == dearest.instance_type
    for t in got[1:]:
        o = cat.offering("aws", dearest.region, t)
        assert o.gpu == "L4" and o.gpus_per_node == 1
        assert o.spot_usd is not None and o.on_demand_usd <= dearest.on_demand_usd


def test_equivalents_exclude_dearer_other_layout_and_no_spot():
    from gpulease.catalog import parse_catalog

    rows = []
    for itype, od, spot, cards in [("p5.48xlarge", 55.0, 20.0, 32), ("p5x.cheap", 50.0, 18.0, 32),
                                   ("p5x.dear", 60.0, 22.0, 32), ("p5x.fewcards", 40.0, 15.0, 16),
                                   ("p5x.nospot", 41.0, None, 32)]:
        rows.append({"cloud": "aws", "region": "us-east-1", "instance_type": itype, "gpu": "H100",
                     "gpus_per_node": 8, "gpu_memory_gb": 80, "vcpus": 192, "memory_gb": 2048,
                     "network_gbps": 3200, "rdma": "efa", "on_demand_usd": od, "spot_usd": spot,
                     "commit_1y_usd": None, "commit_3y_usd": None, "network_cards": cards,
                     "efa_interfaces": cards})
    # test fixture catalog: made-up types isolate the equivalence rule from real prices.
    cat = parse_catalog({"format": "gpulease-catalog/1", "version": "t", "as_of": "2026-01-01",
                         "offerings": rows})
    d = decision(cat.offering("aws", "us-east-1", "p5.48xlarge"))
    assert _fallbacks(d, cat) == ["p5.48xlarge", "p5x.cheap"]
    reserved_only = decision(cat.offering("aws", "us-east-1", "p5.48xlarge"),
                             purchase=PurchaseMix(reserved=2))
    assert _fallbacks(reserved_only, cat) == ["p5.48xlarge"]


@pytest.mark.parametrize("env,flag,reserved,expected", [
    ("prod", None, 2, True), ("staging", None, 2, True), ("dev", None, 2, False),
    ("dev", True, 2, True), ("prod", False, 2, False), ("prod", None, 0, False),
])
def test_wants_reservation(env, flag, reserved, expected):
    d = decision(offering(), purchase=PurchaseMix(reserved=reserved, on_demand=1))
    assert builders.wants_reservation(stack(env, capacity_reservations=flag), d) is expected


@pytest.mark.parametrize("hours,expected_days", [(1, 1), (24, 1), (25, 2), (200, 9),
                                                  (336, 14), (337, 21), (730, 35), (9999, 182)])
def test_capacity_block_hours(hours, expected_days):
    assert builders.capacity_block_hours(hours) == expected_days * 24


@pytest.mark.parametrize("region,part", [("us-east-1", "aws"), ("cn-north-1", "aws-cn"),
                                         ("us-gov-west-1", "aws-us-gov")])
def test_partition_of(region, part):
    assert builders.partition_of(region) == part


def test_lifecycle_rules_follow_the_storage_tiers():
    spec = StorageSpec(name="d", size_tb=1, home_cloud="aws", home_region="us-east-1",
                       warm_after_days=30, cold_after_days=120, archive_after_days=365,
                       noncurrent_days=14)
    rules = {r["id"]: r for r in builders.lifecycle_rules(spec)}
    assert rules["tiering"]["transitions"] == [
        {"days": 30, "storage_class": "STANDARD_IA"}, {"days": 120, "storage_class": "GLACIER_IR"},
        {"days": 365, "storage_class": "DEEP_ARCHIVE"}]
    assert rules["expire-noncurrent"]["noncurrent_version_expiration"] == {"noncurrent_days": 14}
    skip = dataclasses.replace(spec, cold_after_days=None)
    assert [t["storage_class"] for t in {r["id"]: r for r in builders.lifecycle_rules(skip)}[
        "tiering"]["transitions"]] == ["STANDARD_IA", "DEEP_ARCHIVE"]


def test_work_bucket_rules_have_no_tiering():
    ids = [r["id"] for r in builders.lifecycle_rules(None)]
    assert ids == ["expire-noncurrent", "abort-incomplete-uploads"]


@pytest.mark.parametrize("warm,cold,message", [
    (10, 90, "gpulease:storage[3].warm_after_days: S3 moves objects to STANDARD_IA no earlier "
             "than day 30 (got 10); set it to >= 30 or leave it out"),
    (60, 45, "gpulease:storage[3].cold_after_days: must be later than the previous tier "
             "(got 45 <= 60); tiers go hot -> warm -> cold -> archive"),
])
def test_bad_lifecycle_days_name_the_config_path(warm, cold, message):
    spec = StorageSpec(name="d", size_tb=1, home_cloud="aws", home_region="us-east-1",
                       warm_after_days=warm, cold_after_days=cold, archive_after_days=365)
    with pytest.raises(ConfigError) as exc:
        builders.lifecycle_rules(spec, index=3, source="stacks/Pulumi.dev.yaml")
    assert exc.value.exit_code == 2
    assert f"stacks/Pulumi.dev.yaml: {message}" in str(exc.value)


def _stmt(policy, sid):
    return next(s for s in policy["Statement"] if s["Sid"] == sid)


def test_node_policy_is_least_privilege():
    """Every statement of the node policy, exactly (issue 35 item 6: no simulator here - moto
    5.2.5 implements neither SimulateCustomPolicy nor SimulatePrincipalPolicy, and its request
    authorizer evaluates StringEquals only, no policy variables, no ForAllValues / Null)."""
    pol = builders.node_policy(partition="aws", dataset_bucket="ds", dataset_prefix="data/",
                               checkpoint_bucket="ck", checkpoint_prefix="checkpoints/c1/")
    assert pol == {"Version": "2012-10-17", "Statement": [
        {"Sid": "ListDataset", "Effect": "Allow", "Action": "s3:ListBucket",
         "Resource": "arn:aws:s3:::ds", "Condition": {"StringLike": {"s3:prefix": ["data/*"]}}},
        {"Sid": "ReadDataset", "Effect": "Allow", "Action": "s3:GetObject",
         "Resource": "arn:aws:s3:::ds/data/*"},
        {"Sid": "ListCheckpoints", "Effect": "Allow", "Action": "s3:ListBucket",
         "Resource": "arn:aws:s3:::ck",
         "Condition": {"StringLike": {"s3:prefix": ["checkpoints/c1/*"]}}},
        {"Sid": "ReadWriteCheckpoints", "Effect": "Allow",
         "Action": ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
         "Resource": "arn:aws:s3:::ck/checkpoints/c1/*"},
        {"Sid": "GpuMetrics", "Effect": "Allow", "Action": "cloudwatch:PutMetricData",
         "Resource": "*", "Condition": {"StringEquals": {"cloudwatch:namespace": "CWAgent"}}},
        {"Sid": "DiscoverPeers", "Effect": "Allow", "Action": "ec2:DescribeInstances",
         "Resource": "*"},
        # the autostop reads the opt-out and baseline tags and the members of its own ASG:
        # read-only, no resource-level permissions
        {"Sid": "NodeAutostopOptOut", "Effect": "Allow",
         "Action": ["autoscaling:DescribeAutoScalingInstances",
                    "autoscaling:DescribeAutoScalingGroups"], "Resource": "*"},
        # the one write on EC2: two tag keys, on the node itself
        {"Sid": "NodeSelfTags", "Effect": "Allow", "Action": "ec2:CreateTags",
         "Resource": "${ec2:SourceInstanceARN}",
         "Condition": {"ForAllValues:StringEquals": {"aws:TagKeys": [
             "gpulease-busy-at", "gpulease-leave-requested"]},
             "Null": {"aws:TagKeys": "false"}}},
        # and never any other key, whatever else the role is given
        {"Sid": "NodeTagsNothingElse", "Effect": "Deny",
         "Action": ["ec2:CreateTags", "ec2:DeleteTags", "autoscaling:CreateOrUpdateTags",
                    "autoscaling:DeleteTags"], "Resource": "*",
         "Condition": {"ForAnyValue:StringNotEquals": {"aws:TagKeys": [
             "gpulease-busy-at", "gpulease-leave-requested"]}}}]}
    assert tags.NODE_WRITTEN == ("gpulease-busy-at", "gpulease-leave-requested")
    assert tags.DECLARED not in tags.NODE_WRITTEN
    # no node terminates, scales or stops anything: the reaper does (leave requests)
    text = json.dumps(pol)
    for verb in ("Terminate", "Stop", "SetDesiredCapacity", "UpdateAutoScalingGroup",
                 "Detach", "EnterStandby", "SetInstanceHealth"):
        assert verb not in text, verb
    # Only actions without resource-level permissions use "*" unfenced, and those are reads.
    read_only = {"ec2:DescribeInstances", "autoscaling:DescribeAutoScalingInstances",
                 "autoscaling:DescribeAutoScalingGroups"}
    for s in pol["Statement"]:
        if s["Effect"] == "Allow" and s["Resource"] == "*" and "Condition" not in s:
            actions = s["Action"] if isinstance(s["Action"], list) else [s["Action"]]
            assert set(actions) <= read_only, s
        assert "*" not in str(s["Action"]), s


def test_node_policy_without_dataset_has_no_dataset_read():
    pol = builders.node_policy(partition="aws", dataset_bucket=None, dataset_prefix=None,
                               checkpoint_bucket="ck", checkpoint_prefix="checkpoints/c1/")
    assert not [s for s in pol["Statement"] if s["Sid"] in ("ReadDataset", "ListDataset")]


def test_tls_only_policy_denies_plain_http():
    pol = builders.tls_only_policy("arn:aws:s3:::b")
    (s,) = pol["Statement"]
    assert s["Effect"] == "Deny" and s["Principal"] == "*" and s["Action"] == "s3:*"
    assert s["Resource"] == ["arn:aws:s3:::b", "arn:aws:s3:::b/*"]
    assert s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
