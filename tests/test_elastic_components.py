"""Components that carry a blended cluster (demand profile), on AWS and GCP, under Pulumi mocks.

Decisions are built directly with explicit node blocks (costs are TEST FIXTURE numbers), so each
test pins what the components declare for one blend; the last tests plan the shipped prod stack.
"""
from __future__ import annotations

import pytest

from gpulease.clouds.aws import builders
from gpulease import tags
from gpulease.model import (ClusterDecision, ClusterSpec, CostBreakdown, DemandStep, NodeBlock,
                            PurchaseMix)
from tests import test_aws_components as A
from tests import test_gcp_components as G
from tests.conftest import program_run

ASG, LT, ODCR = A.ASG, A.LT, A.ODCR
RATE = {"reserved": 3.0, "on_demand": 5.0, "spot": 2.0}   # TEST FIXTURE $/node-hour


def blend(offering, layout, *, name="elastic", distributed=True, priority=6, index=0,
          dataset=None):
    """A decided cluster from ``layout`` = [(nodes, hours, model, step), ...] in node order."""
    gpn = offering.gpus_per_node
    steps, first, blocks, upto = {}, 1, [], 0
    for n, h, m, step in layout:
        upto += n
        steps[step] = DemandStep(upto * gpn, float(h))
        hours = 730.0 if m == "reserved" else h
        cost = CostBreakdown(**{f"{m}_usd": n * RATE[m] * hours},
                             spot_rework_usd=10.0 * n if m == "spot" else 0.0)
        blocks.append(NodeBlock(first=first, nodes=n, hours_per_month=float(h), purchase=m,
                                part="baseline" if step == 0 else "burst", step=step,
                                costs=cost))
        first += n
    demand = tuple(steps[k] for k in sorted(steps))
    spec = ClusterSpec(name=name, gpu=offering.gpu, gpus=demand[-1].gpus,
                       hours_per_month=demand[0].hours_per_month, priority=priority,
                       checkpoint_minutes=30, distributed=distributed, dataset=dataset,
                       idle_minutes=45, index=index, demand=demand if len(demand) > 1 else ())
    counts = {m: sum(b.nodes for b in blocks if b.purchase == m) for m in RATE}
    keys = ("reserved_usd", "on_demand_usd", "spot_usd", "spot_rework_usd")
    costs = CostBreakdown(**{k: sum(getattr(b.costs, k) for b in blocks) for k in keys})
    return ClusterDecision(spec=spec, offering=offering, nodes=sum(counts.values()),
                           purchase=PurchaseMix(**counts),
                           network=offering.rdma if distributed else "none",
                           template="distributed-rdma", hourly_usd=1.0, costs=costs,
                           rationale="test fixture", distributed=distributed,
                           blocks=tuple(blocks))


# ---- AWS: one Auto Scaling group, on-demand base capacity + burst above it -------------------
P4DE = A.CATALOG.offering("aws", "us-east-1", "p4de.24xlarge")


def aws_run(decision, env="prod", **aws):
    return A.run(A.make_env([decision], env=env, **aws))


@pytest.fixture(scope="module")
def aws_spot_burst():
    """2 reserved baseline nodes (ODCR), 3 spot burst nodes in two steps."""
    return aws_run(blend(P4DE, [(2, 730, "reserved", 0), (2, 200, "spot", 1),
                                (1, 50, "spot", 2)]))


def test_asg_keeps_the_baseline_on_base_capacity_and_bursts_on_spot(aws_spot_burst):
    asg = aws_spot_burst.one(ASG, "elastic-asg")
    dist = asg.inputs["mixedInstancesPolicy"]["instancesDistribution"]
    assert dist["onDemandBaseCapacity"] == 2, asg.urn
    assert dist["onDemandPercentageAboveBaseCapacity"] == 0, asg.urn
    assert (asg.inputs["maxSize"], asg.inputs["desiredCapacity"], asg.inputs["minSize"]) == (
        5, 2, 0), asg.urn
    odcr = aws_spot_burst.one(ODCR, "elastic-odcr")
    assert odcr.inputs["instanceCount"] == 2, odcr.urn


def test_aws_demand_part_and_baseline_floor_tags(aws_spot_burst):
    asg = aws_spot_burst.one(ASG, "elastic-asg")
    t = {x["key"]: x for x in asg.inputs["tags"]}
    assert t[tags.DEMAND_PART]["value"] == tags.PART_BOTH, asg.urn
    assert t[tags.BASELINE_NODES]["value"] == "2" and t[tags.BASELINE_NODES][
        "propagateAtLaunch"] is True, asg.urn
    odcr = aws_spot_burst.one(ODCR, "elastic-odcr")
    assert odcr.inputs["tags"][tags.DEMAND_PART] == tags.PART_BASELINE, odcr.urn
    assert tags.BASELINE_NODES not in odcr.inputs["tags"], odcr.urn
    lt = aws_spot_burst.one(LT, "elastic-lt")
    assert lt.inputs["tags"][tags.DEMAND_PART] == tags.PART_BOTH, lt.urn


def test_aws_costs_split_between_reservation_and_group(aws_spot_burst):
    led = aws_spot_burst.ledger
    assert led.get(ODCR, "elastic-odcr").monthly_usd == pytest.approx(2 * 3.0 * 730)
    # the group carries the spot nodes and their rework (2 x 200 h + 1 x 50 h at $2)
    assert led.get(ASG, "elastic-asg").monthly_usd == pytest.approx(
        2 * 2.0 * 200 + 1 * 2.0 * 50 + 30.0)


def test_on_demand_burst_sets_everything_on_base_capacity():
    r = aws_run(blend(P4DE, [(1, 730, "reserved", 0), (3, 120, "on_demand", 1)]))
    asg = r.one(ASG, "elastic-asg")
    dist = asg.inputs["mixedInstancesPolicy"]["instancesDistribution"]
    assert (dist["onDemandBaseCapacity"], dist["onDemandPercentageAboveBaseCapacity"]) == (4, 100)
    assert (asg.inputs["maxSize"], asg.inputs["desiredCapacity"]) == (4, 1), asg.urn


def test_one_step_clusters_get_no_part_tags_and_start_whole():
    r = aws_run(blend(P4DE, [(1, 300, "on_demand", 0), (2, 300, "spot", 0)]))
    asg = r.one(ASG, "elastic-asg")
    keys = {x["key"] for x in asg.inputs["tags"]}
    assert tags.DEMAND_PART not in keys and tags.BASELINE_NODES not in keys, asg.urn
    assert (asg.inputs["maxSize"], asg.inputs["desiredCapacity"]) == (3, 3), asg.urn


def test_capacity_block_group_runs_the_reserved_baseline():
    r = aws_run(A.pinned(blend(P4DE, [(2, 730, "reserved", 0), (2, 100, "spot", 1)])),
                capacity_blocks=True)
    basg, main = r.one(ASG, "elastic-block-asg"), r.one(ASG, "elastic-asg")
    assert (basg.inputs["maxSize"], basg.inputs["desiredCapacity"]) == (2, 2), basg.urn
    assert (main.inputs["maxSize"], main.inputs["desiredCapacity"]) == (2, 0), main.urn
    assert {x["key"]: x["value"] for x in basg.inputs["tags"]}[tags.DEMAND_PART] == "baseline"
    assert {x["key"]: x["value"] for x in main.inputs["tags"]}[tags.DEMAND_PART] == "burst"
    assert {x["key"]: x["value"] for x in main.inputs["tags"]}[tags.BASELINE_NODES] == "0"


@pytest.mark.parametrize("layout,expect", [
    ([(2, 730, "reserved", 0), (4, 200, "spot", 1)],
     {"max_size": 6, "desired_capacity": 2, "on_demand_base_capacity": 2,
      "on_demand_percentage_above_base_capacity": 0}),
    ([(2, 730, "reserved", 0), (1, 500, "reserved", 1), (2, 100, "on_demand", 2)],
     {"max_size": 5, "desired_capacity": 3, "on_demand_base_capacity": 5,
      "on_demand_percentage_above_base_capacity": 100}),
    ([(1, 730, "spot", 0), (3, 100, "spot", 1)],
     {"max_size": 4, "desired_capacity": 1, "on_demand_base_capacity": 0,
      "on_demand_percentage_above_base_capacity": 0}),
    ([(1, 730, "on_demand", 0), (1, 730, "spot", 0), (2, 40, "spot", 1)],   # cache node
     {"max_size": 4, "desired_capacity": 2, "on_demand_base_capacity": 1,
      "on_demand_percentage_above_base_capacity": 0}),
])
def test_asg_capacity_table(layout, expect):
    assert builders.asg_capacity(blend(P4DE, layout)) == expect


def test_asg_capacity_refuses_a_blend_one_group_cannot_carry():
    bad = blend(P4DE, [(1, 730, "spot", 0), (1, 100, "on_demand", 1)])
    with pytest.raises(ValueError, match="not in the order reserved, on-demand, spot"):
        builders.asg_capacity(bad)


# ---- GCP: a reserved MIG for the baseline, spot / on-demand MIGs for the burst ---------------
A3 = next(o for o in G.FIXTURE_CATALOG.offerings if o.instance_type == "a3-highgpu-8g")


def gcp_run(decision):
    return G.run(G.make_env([decision]))


@pytest.fixture(scope="module")
def gcp_blend():
    """3 reserved baseline nodes, 2 on-demand burst nodes, 4 spot burst nodes in two steps."""
    return gcp_run(blend(A3, [(3, 730, "reserved", 0), (2, 300, "on_demand", 1),
                              (2, 100, "spot", 2), (2, 30, "spot", 3)]))


def test_migs_start_with_their_standing_nodes(gcp_blend):
    sizes = {m.name: m.inputs["targetSize"] for m in gcp_blend.by_type(G.T_MIG)}
    assert sizes == {"elastic-reserved": 3, "elastic-on_demand": 0, "elastic-spot": 0}
    (res,) = gcp_blend.by_type(G.T_DYN_RES)   # compact placement: the dynamic reservation
    assert res.inputs["count"] == 3, res.urn


def test_compact_placement_only_where_a_mig_starts_whole(gcp_blend):
    pols = {p.name: p.inputs["groupPlacementPolicy"]["vmCount"]
            for p in gcp_blend.by_type(G.T_POL)}
    # reserved: 3 at creation; on-demand: one burst step of 2; spot: two steps -> none
    assert pols == {"elastic-reserved-placement": 3, "elastic-on-demand-placement": 2}
    spot_tpl = gcp_blend.one(G.T_IT, "elastic-spot-template")
    assert not spot_tpl.inputs.get("resourcePolicies"), spot_tpl.urn


def test_gcp_templates_label_the_part_and_the_floor(gcp_blend):
    labels = {t.name: (t.inputs["labels"][tags.DEMAND_PART],
                       t.inputs["labels"][tags.BASELINE_NODES])
              for t in gcp_blend.by_type(G.T_IT)}
    assert labels == {"elastic-reserved-template": ("baseline", "3"),
                      "elastic-on-demand-template": ("burst", "0"),
                      "elastic-spot-template": ("burst", "0")}


def test_gcp_mig_costs_are_the_parts_they_run(gcp_blend):
    got = {e.name: e.monthly_usd for e in gcp_blend.result.entries.values()
           if e.type == G.T_MIG}
    assert got == {"elastic-reserved": 0.0,                 # the reservation carries it
                   "elastic-on_demand": pytest.approx(2 * 5.0 * 300),
                   "elastic-spot": pytest.approx(2 * 2.0 * 130 + 40.0)}


def test_a_mig_spanning_baseline_and_burst_starts_with_the_baseline():
    r = gcp_run(blend(A3, [(2, 730, "spot", 0), (3, 100, "spot", 1)]))
    (mig,) = r.by_type(G.T_MIG)
    assert mig.inputs["targetSize"] == 2, mig.urn
    assert not r.by_type(G.T_POL)   # started in two steps: no COLLOCATED policy
    tpl = r.one(G.T_IT, "elastic-spot-template")
    assert tpl.inputs["labels"][tags.DEMAND_PART] == tags.PART_BOTH
    assert tpl.inputs["labels"][tags.BASELINE_NODES] == "2"


# ---- the shipped prod stack plans both clouds' blends -----------------------------------------
def test_prod_plans_committed_baselines_with_bursts_on_both_clouds():
    from gpulease.cli.plan import _conformance, _violations
    from gpulease.planner.plan import build_plan

    run = program_run("prod")
    plan = build_plan(run, stack="prod")
    plan["violations"] = _violations(run, run.result.decision.stack)
    plan["conformance"] = _conformance(run)
    clusters = {c["name"]: c for c in plan["clusters"]}
    for name, cloud in (("pretrain", "gcp"), ("eval-sweeps", "aws")):
        c = clusters[name]
        assert c["cloud"] == cloud and len(c["demand"]) == 2, name
        base, burst = c["parts"]
        assert (base["part"], burst["part"]) == ("baseline", "burst")
        assert base["purchase"]["reserved"] == base["nodes"] == c["baseline_nodes"] > 0
        assert burst["purchase"]["on_demand"] == burst["nodes"] > 0
        assert {b["hours_per_month"] for b in burst["blocks"]} == {c["demand"][1]["hours_per_month"]}
        assert base["monthly_usd"] + burst["monthly_usd"] + c["costs"]["egress_usd"] == \
            pytest.approx(c["monthly_usd"], abs=0.02)
        assert c["committed_usd"] == pytest.approx(12 * c["costs"]["reserved_usd"], abs=0.1)
        parts = {r["tags"].get(tags.DEMAND_PART) for r in plan["resources"]
                 if r["cluster"] == name} - {None}
        assert parts >= {"baseline"} and parts & {"burst", "baseline-burst"}, name
    # clean: no guardrail but the advisory 90 %-of-budget warning, no conformance finding
    assert [v["policy"] for v in plan["violations"]] == ["budget-headroom"]
    assert plan["violations"][0]["level"] == "advisory" and plan["conformance"] == []
    assert plan["totals"]["monthly_usd"] < plan["budget"]["monthly_usd"]


def test_the_worked_example_in_docs_policy_md():
    """docs/policy.md "Worked example": prod's pretrain, by the formulas, from the catalog."""
    import dataclasses
    from pathlib import Path

    from gpulease.policy import decide

    run = program_run("prod")
    env, catalog = run.result.decision, run.result.catalog
    c = env.cluster("pretrain")
    o = catalog.offering("gcp", "europe-west4", "a3-highgpu-8g")
    assert (c.offering.key, c.baseline_nodes, c.nodes) == (o.key, 4, 8)
    assert c.costs.reserved_usd == pytest.approx(4 * o.commit_1y_usd * 730)
    assert c.costs.on_demand_usd == pytest.approx(4 * o.on_demand_usd * 200)
    flat = dataclasses.replace(env.stack, clusters=(dataclasses.replace(c.spec, demand=()),),
                               budget_monthly_usd=1e9)
    whole = decide(flat, catalog).clusters[0]
    doc = (Path(__file__).resolve().parents[1] / "docs" / "policy.md").read_text()
    for amount in (c.costs.reserved_usd, c.costs.on_demand_usd, c.monthly_usd,
                   whole.monthly_usd, round(whole.monthly_usd, 2) - round(c.monthly_usd, 2),
                   c.committed_usd, 12 * whole.costs.reserved_usd):
        assert f"${amount:,.2f}" in doc, amount
    sweeps = env.cluster("eval-sweeps")
    for amount in (sweeps.monthly_usd,):
        assert f"${amount:,.2f}" in doc


# ---- reserved nodes in a burst step bill every hour: the floor keeps them ----------------------
def test_reserved_burst_nodes_are_part_of_the_aws_floor():
    """A burst step whose hours beat the commitment's break-even is reserved: it bills whether
    it runs or not, starts at creation (desired capacity) and the reaper keeps it (the floor)."""
    r = aws_run(blend(P4DE, [(2, 730, "reserved", 0), (1, 600, "reserved", 1),
                             (2, 100, "spot", 2)]))
    asg = r.one(ASG, "elastic-asg")
    t = {x["key"]: x["value"] for x in asg.inputs["tags"]}
    assert (t[tags.DEMAND_PART], t[tags.BASELINE_NODES]) == (tags.PART_BOTH, "3"), asg.urn
    assert asg.inputs["desiredCapacity"] == 3, asg.urn


def test_reserved_burst_nodes_are_part_of_the_gcp_floor():
    r = gcp_run(blend(A3, [(2, 730, "reserved", 0), (1, 600, "reserved", 1),
                           (2, 100, "spot", 2)]))
    tpl = r.one(G.T_IT, "elastic-reserved-template")
    assert (tpl.inputs["labels"][tags.DEMAND_PART],
            tpl.inputs["labels"][tags.BASELINE_NODES]) == (tags.PART_BOTH, "3"), tpl.urn
    assert r.one(G.T_IT, "elastic-spot-template").inputs["labels"][tags.BASELINE_NODES] == "0"
