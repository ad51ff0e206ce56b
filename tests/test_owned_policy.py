"""Issue 32 items 1-2 ("Done when"): the policy fills owned pools first, then existing holdings,
then buys. The Pulumi program runs under mocks (as `gpulease plan` runs it) and the resources it
declares are counted by type; every owned cost is recomputed here by hand from the pool's
inputs (docs/owned.md's formulas), never read back from gpulease.owned.cost."""
from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
from collections import Counter

import pytest

from gpulease import money
from gpulease.catalog import load_catalog
from gpulease.config import parse_stack_config
from gpulease.errors import PolicyError
from gpulease.inventory import model as inv_model
from gpulease.planner.plan import build_plan, run
from gpulease.policy import decide

CATALOG = load_catalog()
NOW = dt.datetime(2026, 12, 4, 12, tzinfo=dt.timezone.utc)
#: cloud compute: node groups, their templates and reservations (gpulease.costing.costs)
COMPUTE = {
    "aws:autoscaling/group:Group", "aws:ec2/launchTemplate:LaunchTemplate",
    "aws:ec2/capacityReservation:CapacityReservation",
    "aws:ec2/capacityBlockReservation:CapacityBlockReservation",
    "gcp:compute/instanceGroupManager:InstanceGroupManager",
    "gcp:compute/instanceTemplate:InstanceTemplate", "gcp:compute/reservation:Reservation",
    "pulumi-python:dynamic/gpulease:GceReservation",
}
RACK = {"name": "rack-a", "gpu": "A100-80GB", "gpus": 32, "gpus_per_node": 8,
        "site": "Frankfurt colo cage 12", "kind": "slurm", "purchase_usd": 1_200_000,
        "purchased_on": "2025-01-15", "power_kw_per_node": 6.5, "usd_per_kwh": 0.18,
        "colo_usd_per_month": 4_000, "ops_usd_per_month": 6_000, "rdma": True,
        "regions_equivalent": ["eu-central-1"]}
# by hand (docs/owned.md): depreciation 1,200,000 / 36 = 33,333.33/month (2026-12 is inside
# the 3 years from 2025-01-15); power 6.5 kW x 4 nodes x 730 h x 0.18 = 3,416.40; fixed 10,000;
# GPU-hours 32 x 730 = 23,360
AMORTISED = (1_200_000 / 36 + 6.5 * 4 * 730 * 0.18 + 10_000) / (32 * 730)
MARGINAL = 6.5 / 8 * 0.18


def values(clusters, *, owned=(RACK,), budget=200_000, inventory=None, aws=None):
    v = {"gpulease:owner": "ml-platform", "gpulease:cost_center": "cc-42",
         "gpulease:budget_monthly_usd": budget,
         "gpulease:clouds": {"aws": {"regions": ["eu-central-1"],
                                     "quota_gpus": {"eu-central-1": 64}, **(aws or {})}},
         "gpulease:clusters": list(clusters)}
    if owned:
        v["gpulease:owned"] = [dict(p) for p in owned]
    if inventory:
        v["gpulease:inventory"] = str(inventory)
    return v


def cluster(name, gpus, hours=400, priority=6, **kw):
    return {"name": name, "gpu": "A100-80GB", "gpus": gpus, "hours_per_month": hours,
            "priority": priority, **kw}


def spec_of(v, stack="hybrid"):
    return parse_stack_config(v, stack=stack, source=f"stacks/Pulumi.{stack}.yaml",
                              catalog=CATALOG)


def plan_of(v, stack="hybrid"):
    prun = run(v, stack=stack, now=NOW.timestamp())
    return prun, build_plan(prun, stack=stack)


def compute(plan) -> Counter:
    return Counter(r["type"] for r in plan["resources"] if r["type"] in COMPUTE)


# ---- owned pools first -------------------------------------------------------------------
def test_a_workload_that_fits_the_pool_declares_no_cloud_compute_and_pays_amortised():
    _, plan = plan_of(values([cluster("fit", 16, hours=500)]))
    assert compute(plan) == Counter()            # 0 cloud compute resources of any type
    assert plan["clusters"] == []                # no cloud decision at all
    (p,) = plan["owned"]["placements"]
    assert p["share"] == "owned" and p["cloud_gpus"] == 0
    share = p["owned"]
    assert (share["pool"], share["nodes"], share["gpus"]) == ("rack-a", 2, 16)
    gpu_hours = 2 * 8 * 500
    assert share["gpu_hours_per_month"] == gpu_hours
    assert share["amortised_usd_per_gpu_hour"] == pytest.approx(AMORTISED, abs=1e-6)
    assert share["marginal_usd_per_gpu_hour"] == pytest.approx(MARGINAL, abs=1e-6)
    assert money.usd(share["monthly_usd"]) == money.usd(gpu_hours * AMORTISED) > 0   # never $0
    assert money.usd(share["marginal_monthly_usd"]) == money.usd(gpu_hours * MARGINAL)
    # the idle line: the other GPU-hours carry depreciation, colo and ops, not power
    idle = (32 * 730 - gpu_hours) * (AMORTISED - MARGINAL)
    (pool,) = plan["owned"]["pools"]
    assert money.usd(pool["idle_usd"]) == money.usd(idle)
    # the plan's total and budget count both; every cluster line adds up to it
    total = money.usd(plan["totals"]["monthly_usd"])
    assert total == money.usd(gpu_hours * AMORTISED) + money.usd(idle)
    assert money.usd(plan["totals"]["by_cluster"]["fit"]) == money.usd(gpu_hours * AMORTISED)
    assert money.usd(plan["totals"]["by_cluster"]["owned, idle"]) == money.usd(idle)
    assert money.usd(plan["budget"]["headroom_usd"]) == money.usd(200_000) - total


def test_a_workload_over_the_pool_bursts_to_cloud_with_its_cost():
    _, plan = plan_of(values([cluster("big", 48, hours=300)]))
    (c,) = plan["clusters"]
    assert c["placement"]["share"] == "burst"
    assert c["placement"]["owned"]["gpus"] == 32 and c["placement"]["cloud_gpus"] == 16
    assert c["nodes"] * c["gpus_per_node"] == 16          # only the burst is rented
    assert money.usd(c["monthly_usd"]) > 0
    assert compute(plan)["aws:autoscaling/group:Group"] >= 1
    assert "capacity: the cluster needs 6 nodes, 4 were free" in " ".join(
        c["placement"]["why"])
    # the cluster's total is its cloud share plus its owned share
    owned = money.usd(32 * 300 * AMORTISED)
    assert money.usd(plan["totals"]["by_cluster"]["big"]) == money.usd(c["monthly_usd"]) + owned
    assert money.usd(plan["totals"]["monthly_usd"]) == money.total(
        r["monthly_usd"] for r in plan["resources"]) + money.total(
        x["monthly_usd"] for x in plan["owned"]["lines"])


def test_a_demand_profile_puts_its_baseline_on_the_pool_and_its_burst_on_cloud():
    prof = {**cluster("prof", 48), "demand": [
        {"gpus": 24, "hours_per_month": 730}, {"gpus": 48, "hours_per_month": 100}]}
    del prof["hours_per_month"]
    spec = spec_of(values([prof]))
    env = decide(spec, CATALOG, now=NOW, inventory=None)
    (p,) = env.placements
    assert [(s.gpus, s.hours_per_month) for s in p.owned.steps] == [(24, 730), (32, 100)]
    # 3 nodes x 730 h + 1 node x 100 h, 8 GPUs each
    assert p.owned.gpu_hours_per_month == (3 * 730 + 1 * 100) * 8
    (c,) = env.clusters
    assert [(s.gpus, s.hours_per_month) for s in c.spec.steps] == [(16, 100)]


@pytest.mark.parametrize("change,pool,words", [
    ({"gpu": "H100"}, {}, "GPU model: the pool holds A100-80GB, the cluster needs H100"),
    ({"regions": ["us-"]}, {}, "residency: the cluster may run only in us-"),
    ({"distributed": True}, {"rdma": False},
     "RDMA: a 2-node distributed share needs an RDMA fabric"),
    ({"gpus": 40, "distributed": True}, {},
     "the cluster is one 5-node gang (distributed: true), which cannot split"),
])
def test_why_a_cluster_is_not_on_the_pool(change, pool, words):
    v = values([{**cluster("c", 16), **change}], owned=[{**RACK, **pool}])
    v["gpulease:clouds"]["aws"]["regions"] = ["eu-central-1", "us-east-1"]
    v["gpulease:clouds"]["aws"]["quota_gpus"] = {"eu-central-1": 64, "us-east-1": 64}
    env = decide(spec_of(v), CATALOG, now=NOW, inventory=None)
    (p,) = env.placements
    assert p.owned is None and p.cloud_gpus == p.spec.gpus
    assert any(words in w for w in p.why), p.why
    assert [c.name for c in env.clusters] == ["c"]


def test_higher_priority_claims_the_pool_first_then_config_order():
    v = values([cluster("low", 32, priority=3), cluster("high", 24, priority=8),
                cluster("mid", 16, priority=5)])
    env = decide(spec_of(v), CATALOG, now=NOW, inventory=None)
    by = {p.name: p for p in env.placements}
    assert by["high"].share == "owned" and by["high"].owned.nodes == 3
    assert by["mid"].share == "burst" and by["mid"].owned.nodes == 1   # the last free node
    assert by["low"].share == "cloud"
    assert "capacity: none of its 4 nodes is free" in by["low"].why[0]


def test_the_pools_cost_counts_against_the_budget():
    # 16 GPUs x 500 h at the amortised rate plus the idle line is ~35,600 USD
    with pytest.raises(PolicyError) as exc:
        decide(spec_of(values([cluster("fit", 16, hours=500)], budget=30_000)), CATALOG,
               now=NOW, inventory=None)
    text = str(exc.value)
    # the short budget is 44,503.33 - 30,000; the idle line alone (28,493.15: recomputed in
    # the first test's way) drives it
    idle = (32 * 730 - 16 * 500) * (AMORTISED - MARGINAL)
    assert "gpulease:budget_monthly_usd" in text and "short by 14503.33" in text
    assert f"owned pool rack-a, idle ({money.usd(idle)})" in text


def test_a_depreciated_pool_still_charges_power_and_fixed_costs():
    env = decide(spec_of(values([cluster("fit", 8, hours=730)],
                                owned=[{**RACK, "purchased_on": "2020-01-01"}])),
                 CATALOG, now=NOW, inventory=None)
    (u,) = env.pools
    assert u.depreciated and u.depreciation_usd_per_month == 0
    assert u.amortised_usd_per_gpu_hour == pytest.approx(
        (6.5 * 4 * 730 * 0.18 + 10_000) / (32 * 730))


# ---- existing holdings -------------------------------------------------------------------
def _inventory(tmp_path, *holdings):
    doc = {"format": inv_model.FORMAT, "generated_at": "2026-12-04T10:00:00Z",
           "sources": [{"cloud": "aws", "scope": "123456789012", "regions": ["eu-central-1"],
                        "read_at": "2026-12-04T10:00:00Z",
                        "reads": ["DescribeReservedInstances"]}],
           "holdings": list(holdings)}
    inv = inv_model.parse(doc, source="test")
    return inv_model.write(inv, tmp_path / "inventory.json")


RI = {"id": "ri-0abc", "cloud": "aws", "kind": "ec2-reserved-instances", "model": "commitment",
      "scope": "123456789012", "region": "eu-central-1", "instance_type": "p4de.24xlarge",
      "instances": 2, "start": "2026-01-01T00:00:00Z", "end": "2027-01-01T00:00:00Z",
      "state": "active", "usd_per_hour": 40.0, "term_months": 12}
#: a guaranteed cluster (priority 9): its baseline is reserved, an ODCR holds it
STEADY = {**cluster("steady", 16, hours=730, priority=9)}


def test_a_baseline_covered_by_an_existing_commitment_buys_nothing_new(tmp_path):
    aws = {"capacity_reservations": True}
    _, before = plan_of(values([STEADY], owned=(), aws=aws))
    assert compute(before)["aws:ec2/capacityReservation:CapacityReservation"] == 1
    (c0,) = before["clusters"]
    assert c0["purchase"]["reserved"] == 2 and c0["committed_usd"] > 0

    path = _inventory(tmp_path, RI)
    _, after = plan_of(values([STEADY], owned=(), aws=aws, inventory=path))
    (c,) = after["clusters"]
    assert compute(after)["aws:ec2/capacityReservation:CapacityReservation"] == 0
    assert c["purchase"]["reserved"] == 2 and c["committed_usd"] == 0
    (cov,) = c["coverage"]
    assert (cov["holding"], cov["nodes"], cov["sunk"]) == ("ri-0abc", 2, True)
    # charged at the holding's effective rate: 40 USD/h for 2 instances = 20 USD/node-hour
    assert cov["usd_per_node_hour"] == pytest.approx(20.0)
    assert money.usd(c["costs"]["reserved_usd"]) == money.usd(2 * 20.0 * 730)
    assert after["unused_holdings"] == []
    # explain names the holding that covers it
    from gpulease.cli import main

    cfg = tmp_path / "Pulumi.hybrid.yaml"
    import yaml

    cfg.write_text(yaml.safe_dump({"config": values([STEADY], owned=(), aws=aws,
                                                    inventory=path)}))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["explain", "--config", str(cfg), "--now", "2026-12-04T12:00:00Z"]) == 0
    assert "Covered: 2 reserved node(s) covered by existing ec2-reserved-instances ri-0abc" \
        in out.getvalue()
    assert "sunk" in out.getvalue()


def test_an_unused_commitment_is_reported_with_its_monthly_waste(tmp_path):
    unused = {**RI, "id": "ri-idle", "region": "eu-central-1", "instance_type": "p5.48xlarge",
              "instances": 1, "usd_per_hour": 30.0, "upfront_usd": 12_000.0}
    expired = {**RI, "id": "ri-old", "end": "2026-06-01T00:00:00Z", "state": "retired"}
    path = _inventory(tmp_path, unused, expired)
    _, plan = plan_of(values([cluster("od", 16, hours=200)], owned=(), inventory=path))
    (u,) = plan["unused_holdings"]            # the expired one is not a finding
    assert u["holding"] == "ri-idle"
    # 30 USD/h x 730 h + 12,000 upfront over 12 months
    assert money.usd(u["monthly_waste_usd"]) == money.usd(30.0 * 730 + 12_000 / 12)
    assert any("unused ec2-reserved-instances ri-idle" in w and
               f"wasting {money.usd(30.0 * 730 + 1000)} USD/month" in w
               for w in plan["warnings"])


def test_an_unused_holding_names_the_cluster_that_could_use_it_and_the_saving(tmp_path):
    spare = {**RI, "id": "ri-spare"}
    path = _inventory(tmp_path, spare)
    _, plan = plan_of(values([cluster("od", 16, hours=200)], owned=(), inventory=path))
    (c,) = plan["clusters"]
    assert c["purchase"]["reserved"] == 0        # on-demand at 200 h: nothing reserved
    (u,) = plan["unused_holdings"]
    assert u["cluster"] == "od"
    assert money.usd(u["saving_usd"]) == money.usd(c["monthly_usd"])   # both nodes fit in it


def test_the_hybrid_example_stack_plans(tmp_path):
    from gpulease.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["plan", "--stack", "hybrid", "--json"]) == 0
    plan = json.loads(out.getvalue())
    shares = {p["cluster"]: p["share"] for p in plan["owned"]["placements"]}
    assert shares == {"steady-train": "owned", "research": "burst"}
    assert [c["name"] for c in plan["clusters"]] == ["research"]
    assert not any(r["cluster"] == "steady-train" for r in plan["resources"])


def test_a_gce_commitment_of_accelerators_covers_the_reserved_nodes_on_gcp(tmp_path):
    """GCP: a committed-use discount holding accelerators (the A2 Ultra's bundled
    nvidia-a100-80gb) covers whole nodes; no GCE reservation is declared for them."""
    v = values([{**STEADY, "distributed": False}], owned=())
    v["gpulease:clouds"] = {"gcp": {"project": "acme-ml", "regions": ["europe-west4"],
                                    "quota_gpus": {"europe-west4": 64}}}
    _, before = plan_of(v, stack="prod")
    (c0,) = before["clusters"]
    n = c0["purchase"]["reserved"]
    assert c0["cloud"] == "gcp" and n == c0["nodes"] and n * c0["gpus_per_node"] == 16
    reservations = {"gcp:compute/reservation:Reservation",
                    "pulumi-python:dynamic/gpulease:GceReservation"}
    assert sum(compute(before)[t] for t in reservations) == 1
    cud = {"id": "cud-a2", "cloud": "gcp", "kind": "gce-commitment", "model": "commitment",
           "scope": "acme-ml", "region": "europe-west4", "accelerator_type": "nvidia-a100-80gb",
           "accelerators": 16, "start": "2026-01-01T00:00:00Z", "end": "2027-01-01T00:00:00Z",
           "state": "active"}
    path = _inventory(tmp_path, cud)
    _, after = plan_of({**v, "gpulease:inventory": str(path)}, stack="prod")
    (c,) = after["clusters"]
    assert sum(compute(after)[t] for t in reservations) == 0
    (cov,) = c["coverage"]
    assert (cov["holding"], cov["nodes"], cov["usd_per_node_hour"]) == ("cud-a2", n, None)
    # no rate in the inventory: the catalog's rate is kept, and said
    assert money.usd(c["costs"]["reserved_usd"]) == money.usd(c0["costs"]["reserved_usd"])
    assert "unknown in the inventory" in cov["why"] and c["committed_usd"] == 0


def test_a_covering_gce_reservation_is_consumed_by_name(tmp_path):
    v = values([{**STEADY, "gpus": 8, "distributed": False}], owned=())
    v["gpulease:clouds"] = {"gcp": {"project": "acme-ml", "regions": ["europe-west4"],
                                    "quota_gpus": {"europe-west4": 64}}}
    env = decide(spec_of(v, stack="prod"), CATALOG, now=NOW, inventory=None)
    (d,) = env.clusters
    held = {"id": "team-a2-res", "cloud": "gcp", "kind": "gce-reservation",
            "model": "reservation", "scope": "acme-ml", "region": "europe-west4",
            "zone": d.zone, "instance_type": d.offering.instance_type,
            "instances": d.purchase.reserved, "state": "ready"}
    path = _inventory(tmp_path, held)
    prun, plan = plan_of({**v, "gpulease:inventory": str(path)}, stack="prod")
    (c,) = plan["clusters"]
    assert c["coverage"][0]["holding"] == "team-a2-res"
    assert not compute(plan)["gcp:compute/reservation:Reservation"]
    assert not compute(plan)["pulumi-python:dynamic/gpulease:GceReservation"]
    (tpl,) = [r for r in plan["resources"] if r["type"] ==
              "gcp:compute/instanceTemplate:InstanceTemplate" and "reserved" in r["name"]]
    aff = tpl["inputs"]["reservationAffinity"]
    assert aff["type"] == "SPECIFIC_RESERVATION"
    assert aff["specificReservation"]["values"] == ["team-a2-res"]


@pytest.mark.parametrize("family,reported", [("p5", True), ("p4de", False)])
def test_a_savings_plan_is_unused_only_when_no_cluster_runs_its_family(tmp_path, family,
                                                                       reported):
    sp = {"id": "sp-1", "cloud": "aws", "kind": "savings-plan", "model": "commitment",
          "scope": "123456789012", "region": "eu-central-1", "instance_family": family,
          "start": "2026-01-01T00:00:00Z", "end": "2027-01-01T00:00:00Z", "state": "active",
          "usd_per_hour": 10.0, "term_months": 12}
    path = _inventory(tmp_path, sp)
    env = decide(spec_of(values([cluster("od", 16, hours=200)], owned=(), inventory=path)),
                 CATALOG, now=NOW)
    (c,) = env.clusters
    assert c.offering.instance_type == "p4de.24xlarge" and not c.coverage
    if reported:
        (u,) = env.unused_holdings
        assert u.holding == "sp-1" and u.monthly_waste_usd == pytest.approx(10.0 * 730)
    else:
        assert env.unused_holdings == ()
