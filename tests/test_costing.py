"""Cost transform and per-resource pricing, exercised on small components under mocks."""
from __future__ import annotations

from decimal import Decimal

import pulumi
import pulumi_aws as aws
import pulumi_gcp as gcp
import pytest

from gpulease.catalog import parse_catalog
from gpulease import tags
from gpulease.costing import transform
from gpulease.costing.context import CostContext
from gpulease.costing.costs import resource_monthly_usd
from gpulease.model import ClusterDecision, ClusterSpec, CostBreakdown, PurchaseMix, StackSpec
from gpulease.planner.mocks import run_program

# Test fixture catalog: synthetic figures, used only to check arithmetic.
CATALOG = parse_catalog({
    "format": "gpulease-catalog/1", "version": "test", "as_of": "2026-01-01",
    "offerings": [{"cloud": "aws", "region": "us-east-1", "instance_type": "g6.xlarge",
                   "gpu": "L4", "gpus_per_node": 1, "gpu_memory_gb": 24, "vcpus": 4,
                   "memory_gb": 16, "network_gbps": 10, "rdma": "none", "on_demand_usd": 1.0,
                   "spot_usd": 0.4, "commit_1y_usd": 0.7, "commit_3y_usd": 0.5}],
    "infra": [{"cloud": "aws", "item": "nat_gateway_hour", "unit": "hour", "usd": 0.05}],
})
STACK = StackSpec(stack="dev", environment="dev", owner="Team ML", cost_center="CC-7",
                  budget_monthly_usd=100.0, clouds={}, storage=(), clusters=())
SPEC = ClusterSpec(name="c1", gpu="L4", gpus=4, hours_per_month=100, priority=5,
                   idle_minutes=45)
DECISION = ClusterDecision(
    spec=SPEC, offering=CATALOG.offerings[0], nodes=4,
    purchase=PurchaseMix(reserved=1, on_demand=1, spot=2), network="none", template="spot-burst",
    hourly_usd=2.5, costs=CostBreakdown(reserved_usd=511.0, on_demand_usd=100.0, spot_usd=80.0,
                                        spot_rework_usd=4.0, egress_usd=7.0,
                                        communication_usd=3.0),
    rationale="test")


def ctx(**kw) -> CostContext:
    base = dict(cluster="c1", template="spot-burst", purchase_model="mixed", decision=DECISION,
                roles={"c1-asg": "mixed"}, anchor="c1-asg", reservation_created=True,
                idle_minutes=45, egress_anchor="c1-work")
    base.update(kw)
    return CostContext(**base)


def test_compute_group_carries_on_demand_spot_rework_and_communication():
    assert resource_monthly_usd("aws:autoscaling/group:Group", "c1-asg", ctx(), CATALOG) == \
        Decimal("187.00")


def test_reserved_cost_on_reservation_or_group():
    assert resource_monthly_usd("aws:ec2/capacityReservation:CapacityReservation", "c1-odcr",
                                ctx(), CATALOG) == 511.0
    no_odcr = ctx(reservation_created=False)
    assert resource_monthly_usd("aws:ec2/capacityReservation:CapacityReservation", "c1-odcr",
                                no_odcr, CATALOG) == 0.0
    assert resource_monthly_usd("aws:autoscaling/group:Group", "c1-asg", no_odcr, CATALOG) == \
        Decimal("698.00")


def test_gcp_migs_by_purchase_model_and_egress_on_work_bucket():
    c = ctx(roles={"c1-spot": "spot", "c1-on-demand": "on_demand"}, anchor="c1-on-demand")
    assert resource_monthly_usd("gcp:compute/instanceGroupManager:InstanceGroupManager",
                                "c1-spot", c, CATALOG) == Decimal("84.00")
    assert resource_monthly_usd("gcp:compute/instanceGroupManager:InstanceGroupManager",
                                "c1-on-demand", c, CATALOG) == Decimal("103.00")
    assert resource_monthly_usd("gcp:storage/bucket:Bucket", "c1-work", c, CATALOG) == 7.0


def test_nat_priced_from_catalog_and_free_resources_are_zero():
    assert resource_monthly_usd("aws:ec2/natGateway:NatGateway", "nat", None, CATALOG) == \
        Decimal("36.50")   # money: whole cents (gpulease.money)
    assert resource_monthly_usd("aws:ec2/securityGroup:SecurityGroup", "sg", ctx(), CATALOG) == 0.0


class _Cluster(pulumi.ComponentResource):
    def __init__(self, name: str, context: CostContext):
        super().__init__("gpulease:test:Cluster", name, None, None)
        self.cost_context = context
        o = pulumi.ResourceOptions(parent=self)
        aws.autoscaling.Group(f"{name}-asg", max_size=4, min_size=0,
                              tags=[{"key": "Name", "value": "x", "propagate_at_launch": True}],
                              opts=o)
        aws.ec2.SecurityGroup(f"{name}-sg", description="d", tags={"Team": "x"}, opts=o)
        aws.iam.RolePolicy(f"{name}-rp", role="r", policy="{}", opts=o)
        gcp.compute.InstanceTemplate(f"{name}-tpl", machine_type="g2-standard-4",
                                     disks=[{"boot": True}],
                                     network_interfaces=[{"network": "n"}], opts=o)
        self.register_outputs({})


def _run():
    def program():
        ledger = transform.register(STACK, CATALOG)
        _Cluster("c1", ctx(roles={"c1-asg": "mixed", "c1-tpl": "spot"}))
        aws.ec2.NatGateway("nat", subnet_id="s")
        return ledger
    return run_program(program, stack="dev")


def test_transform_stamps_tags_labels_and_fills_ledger():
    run = _run()
    asg = run.one("aws:autoscaling/group:Group")
    t = {x["key"]: x for x in asg.inputs["tags"]}
    assert t["Name"]["value"] == "x"  # user tags kept
    assert t[tags.CLUSTER]["value"] == "c1" and t[tags.CLUSTER]["propagateAtLaunch"] is True
    assert t[tags.OWNER]["value"] == "Team ML"
    assert t[tags.MONTHLY_USD]["value"] == "187.00"
    assert t[tags.IDLE_MINUTES]["value"] == "45"
    sg = run.one("aws:ec2/securityGroup:SecurityGroup")
    assert sg.inputs["tags"]["Team"] == "x" and sg.inputs["tags"][tags.MONTHLY_USD] == "0.00"
    tpl = run.one("gcp:compute/instanceTemplate:InstanceTemplate")
    labels = tpl.inputs["labels"]
    assert labels[tags.OWNER] == "team-ml" and labels[tags.COST_CENTER] == "cc-7"
    assert labels[tags.PURCHASE_MODEL] == "spot"
    assert labels[tags.MONTHLY_CENTS] == "0"
    assert "tags" not in run.one("aws:iam/rolePolicy:RolePolicy").inputs  # not taggable
    nat = run.one("aws:ec2/natGateway:NatGateway")
    assert nat.inputs["tags"][tags.CLUSTER] == tags.SHARED
    assert nat.inputs["tags"][tags.MONTHLY_USD] == "36.50"
    ledger = run.result
    assert ledger.get("aws:autoscaling/group:Group", "c1-asg").monthly_usd == 187.0
    assert ledger.monthly_usd == pytest.approx(187.0 + 36.5)


def test_label_encoders():
    assert tags.label_value("Team ML/Platform.2") == "team-ml-platform-2"
    assert len(tags.label_value("x" * 100)) == 63
    assert tags.label_key("9lives") == "k9lives"
    assert tags.cents(1234.567) == "123457" and tags.from_cents("123457") == Decimal("1234.57")
    ts = tags.timestamp_label(1_800_000_000)
    assert ts == "20270115t0800z" and tags.parse_timestamp_label(ts) == 1_800_000_000


def test_reservation_rate_falls_back_to_on_demand_only_without_commitment():
    import dataclasses

    o = CATALOG.offerings[0]
    assert o.reservation_rate("1y") == 0.7 and o.reservation_rate("3y") == 0.5
    plain = dataclasses.replace(o, commit_1y_usd=None)
    assert plain.reservation_rate("1y") == 1.0  # billed at on-demand every hour
    assert plain.reservation_rate("1y", plain_at_on_demand=False) is None
