"""The policy module: each rule, the cost model formulas, located failures, templates."""
from __future__ import annotations

import pytest

from gpulease.quotes.model import QuoteBook

from gpulease.errors import ConfigError, PolicyError
from gpulease.model import HOURS_PER_MONTH, PurchaseMix
from gpulease.policy import decide
from gpulease.policy.rules import PolicyRules
from gpulease.policy.storage import lifecycle_cost
from gpulease.policy.templates import _parse, cluster_templates, template_names
from tests.test_policy_fixtures import catalog, cluster, dataset, offering, stack

H100 = dict(gpu="H100", gpn=8)


def cat1(**kw):
    """One H100 offering per cloud/region; keyword overrides go to every row."""
    rows = [offering("aws", "us-east-1", "p5.48xlarge", rdma="efa", od=98.0, spot=30.0, c1=62.0,
                     c3=43.0, zones=("use1-az4", "use1-az6")),
            offering("aws", "us-west-2", "p5.48xlarge", rdma="efa", od=98.0, spot=28.0, c1=63.0,
                     c3=44.0),
            offering("gcp", "us-central1", "a3-highgpu-8g", rdma="gpudirect-tcpx", od=88.0,
                     spot=25.0, c1=55.0, c3=39.0),
            offering("gcp", "europe-west4", "a3-highgpu-8g", rdma="gpudirect-tcpx", od=92.0,
                     spot=27.0, c1=58.0, c3=40.0)]
    return catalog([{**r, **kw} for r in rows])


def one(c, cat=None, quotes=None, **kw):
    return decide(stack([c], **kw), cat or cat1(), quotes=quotes).clusters[0]


# ---- purchase rules -------------------------------------------------------------------------
def test_priority_above_8_is_reserved_only_even_when_idle_most_of_the_month():
    d = one(cluster(priority=9, hours=100, checkpoint=30))
    assert d.purchase == PurchaseMix(reserved=1)
    assert (d.cloud, d.region) == ("gcp", "us-central1")
    assert d.costs.reserved_usd == pytest.approx(55.0 * HOURS_PER_MONTH)
    assert "Priority 9 > 8 needs guaranteed capacity" in d.rationale
    spot = [a for a in d.alternatives if a.purchase == PurchaseMix(spot=1)
            and a.region == "us-central1"]
    assert spot[0].rejected_because == "priority 9 > 8 needs guaranteed capacity"


def test_priority_above_8_without_commitment_price_when_plain_reservations_are_off():
    cat = catalog([offering("aws", "us-east-1", "p5.48xlarge", rdma="efa", c1=None),
                   offering("gcp", "us-central1", "a3-highgpu-8g", od=99.0, c1=70.0)])
    d = one(cluster(priority=10), cat, rules=PolicyRules(reserve_at_on_demand_rate=False))
    assert d.offering.instance_type == "a3-highgpu-8g"
    rej = {a.instance_type: a.rejected_because for a in d.alternatives}
    assert rej["p5.48xlarge"] == ("no price (no 1y commitment price; priority 10 > 8 needs "
                                  "guaranteed capacity)")


def test_priority_above_8_without_commitment_price_reserves_at_on_demand_rate():
    # Default: a plain capacity reservation, billed at the on-demand rate every hour.
    cat = catalog([offering("aws", "us-east-1", "p5.48xlarge", rdma="efa", od=60.0, c1=None),
                   offering("gcp", "us-central1", "a3-highgpu-8g", od=99.0, c1=70.0)])
    d = one(cluster(priority=10, hours=100), cat)
    assert d.offering.instance_type == "p5.48xlarge"
    assert d.purchase == PurchaseMix(reserved=1)
    assert d.costs.reserved_usd == pytest.approx(60.0 * HOURS_PER_MONTH)
    assert d.hourly_usd == pytest.approx(60.0)
    assert "capacity reservation at the on-demand rate" in d.rationale


@pytest.mark.parametrize("hours,expected", [(455, "on_demand"), (457, "reserved")])
def test_mid_priority_uses_break_even_utilization(hours, expected):
    # gcp us-central1: commit 55 / on-demand 88 = 62.5% -> break-even at 456.25 h/month.
    d = one(cluster(priority=7, hours=hours), clouds={"gcp": ("us-central1",)})
    assert getattr(d.purchase, expected) == 1 and d.purchase.total == 1
    assert ("above the 62% break-even" if expected == "reserved" else
            "below the 62% break-even") in d.rationale


def test_mid_priority_never_spot_even_when_checkpointable():
    d = one(cluster(priority=5, hours=100, checkpoint=10))
    assert d.purchase.spot == 0
    assert any(a.rejected_because == "priority 5 >= 5: spot only below 5" for a in d.alternatives)


def test_low_priority_checkpointable_runs_on_spot_with_rework_cost():
    # no per-offering spot-risk record: the catalog's figure for the cloud (0.05)
    d = one(cluster(priority=3, hours=200, checkpoint=30), clouds={"aws": ("us-west-2",)},
            quotes=QuoteBook())
    assert d.purchase == PurchaseMix(spot=1)
    assert d.template == "single-node-dev"
    # rework = lambda * h * S * (c/2 + restart)/60 * spot rate = 0.05*200*1*(15+10)/60*28
    assert d.costs.spot_rework_usd == pytest.approx(0.05 * 200 * 25 / 60 * 28.0)
    assert d.costs.spot_usd == pytest.approx(28.0 * 200)
    assert d.hourly_usd == pytest.approx(28.0)


def test_spot_never_for_non_checkpointable_work():
    d = one(cluster(priority=1, hours=200))
    assert d.purchase == PurchaseMix(on_demand=1)
    assert any(a.rejected_because == "not interruptible (no gpulease:clusters[0]"
               ".checkpoint_minutes)" for a in d.alternatives)


def test_cost_math_overrides_spot_when_rework_makes_it_dearer():
    rules = PolicyRules(spot_interruptions_per_hour=3.0)  # very unstable spot market
    d = one(cluster(priority=2, hours=100, checkpoint=120), rules=rules,
            clouds={"aws": ("us-east-1",)})
    assert d.purchase == PurchaseMix(on_demand=1)
    assert d.rationale.count("Not spot: priority 2 work defaults to spot") == 1


def test_distributed_rework_stalls_every_node():
    d = one(cluster(priority=2, gpus=16, hours=100, checkpoint=20),
            clouds={"aws": ("us-east-1",)}, quotes=QuoteBook())
    assert d.purchase == PurchaseMix(spot=2) and d.distributed
    # every interruption of one of 2 spot nodes costs lost time on BOTH nodes (2 * 30 $/h)
    assert d.costs.spot_rework_usd == pytest.approx(0.05 * 100 * 2 * (10 + 10) / 60 * 60.0)


def test_three_year_commitment_term():
    d = one(cluster(priority=9), rules=PolicyRules(commitment_term="3y"))
    assert d.commitment_term == "3y"
    assert d.costs.reserved_usd == pytest.approx(39.0 * HOURS_PER_MONTH)


# ---- network / RDMA -------------------------------------------------------------------------
def _mixed_rdma_catalog():
    return catalog([offering("aws", "us-east-1", "p5.48xlarge", rdma="efa", od=98.0, c1=62.0),
                    offering("gcp", "us-central1", "a3-plain-8g", od=60.0, c1=40.0)])


def test_distributed_multi_node_needs_rdma():
    d = one(cluster(gpus=32, priority=6), _mixed_rdma_catalog())
    assert (d.offering.instance_type, d.network, d.template) == ("p5.48xlarge", "efa",
                                                                 "distributed-rdma")
    rej = {a.instance_type: a.rejected_because for a in d.alternatives}
    assert rej["a3-plain-8g"] == "no RDMA (4-node distributed job needs EFA or GPUDirect)"


def test_tcp_distributed_allowed_when_configured_and_charged_for_communication():
    rules = PolicyRules(require_rdma_for_distributed=False)
    d = one(cluster(gpus=32, priority=6, hours=300), _mixed_rdma_catalog(), rules=rules)
    assert (d.offering.instance_type, d.network) == ("a3-plain-8g", "none")
    assert d.costs.communication_usd == pytest.approx(4 * 60.0 * 300 * 0.12 / 0.88)


def test_tcp_distributed_forbidden_past_eight_nodes():
    rules = PolicyRules(require_rdma_for_distributed=False)
    d = one(cluster(gpus=72, priority=6), _mixed_rdma_catalog(), rules=rules)
    assert d.offering.instance_type == "p5.48xlarge"
    rej = {a.instance_type: a.rejected_because for a in d.alternatives}
    assert rej["a3-plain-8g"] == "no RDMA (9 nodes > gpulease:policy.max_nodes_without_rdma 8)"


def test_non_distributed_multi_node_needs_no_rdma():
    d = one(cluster(gpus=32, priority=6, distributed=False), _mixed_rdma_catalog())
    assert (d.offering.instance_type, d.network, d.distributed) == ("a3-plain-8g", "none", False)
    assert d.costs.communication_usd == 0


def test_single_node_has_no_fabric_and_zone_defaults():
    d = one(cluster(priority=6), clouds={"aws": ("us-east-1",)})
    assert (d.network, d.distributed, d.zone) == ("none", False, "use1-az4")
    d = one(cluster(priority=6), clouds={"aws": ("us-west-2",)})
    assert d.zone == "us-west-2a"
    d = one(cluster(priority=6), clouds={"gcp": ("europe-west4",)})
    assert d.zone == "europe-west4-a"


# ---- placement: residency, data gravity, quotas, budget --------------------------------------
def test_residency_prefixes():
    d = one(cluster(priority=6, regions=("europe-", "eu-")))
    assert d.region == "europe-west4"
    rej = {(a.region, a.purchase.total): a.rejected_because for a in d.alternatives}
    assert rej[("us-central1", 1)] == "residency (us-central1 is outside europe-, eu-)"


def test_data_gravity_charges_egress_plus_staged_copy():
    ds = dataset(size_tb=50, home="aws:us-east-1")
    d = one(cluster(priority=6, dataset="data", hours=730), storage=[ds],
            clouds={"gcp": ("us-central1",), "aws": ("us-east-1",)})
    # home region wins only if cheaper with gravity: gcp would pay 50,000 GB * (0.09 + 0.02)
    gcp = [a for a in d.alternatives if a.cloud == "gcp" and a.purchase.total == 1][0]
    assert d.region == "us-east-1" and d.costs.egress_usd == 0
    assert gcp.monthly_usd == pytest.approx(55.0 * 730 + 50_000 * (0.09 + 0.02))
    assert d.costs.monthly_usd == pytest.approx(62.0 * 730)


def test_data_gravity_inter_region_rate_in_rationale():
    ds = dataset(size_tb=1, home="aws:us-west-2")
    d = one(cluster(priority=6, dataset="data"), storage=[ds], clouds={"aws": ("us-east-1",
                                                                              "us-west-2")})
    # 1 TB away costs 1000*(0.02+0.02)=40 $/month, less than the $730 rate difference
    assert d.region == "us-east-1"
    assert d.costs.egress_usd == pytest.approx(40.0)
    assert "including $40.00/month to move and stage dataset data from aws:us-west-2" in d.rationale


def test_cross_cloud_data_can_be_forbidden():
    ds = dataset(size_tb=1, home="aws:us-west-2")
    d = one(cluster(priority=6, dataset="data"), storage=[ds],
            rules=PolicyRules(allow_cross_cloud_data=False))
    assert d.cloud == "aws"


def test_quota_rejects_a_cluster_too_big_for_a_region():
    d = one(cluster(priority=6, gpus=16), quotas={("gcp", "us-central1"): 8})
    assert d.region == "europe-west4"
    rej = {(a.region, a.purchase.total): a.rejected_because for a in d.alternatives}
    assert rej[("us-central1", 2)] == "quota (16 GPUs > gcp:us-central1 quota of 8)"


def test_shared_quota_couples_clusters_and_is_solved_exactly():
    # Both want gcp us-central1 (cheapest); the quota holds one. The MIP puts the cluster with
    # the larger saving there (a: 730h, b: 100h) and explains the other's loss.
    a = cluster("a", priority=6, hours=730)
    b = cluster("b", priority=6, hours=440, index=1)
    env = decide(stack([a, b], quotas={("gcp", "us-central1"): 8},
                       clouds={"gcp": ("us-central1", "europe-west4")}), cat1())
    assert env.cluster("a").region == "us-central1"
    assert env.cluster("b").region == "europe-west4"
    lost = [x for x in env.cluster("b").alternatives if x.region == "us-central1"
            and x.purchase.on_demand == 1]
    assert lost[0].rejected_because == ("quota (shared gcp:us-central1 quota of 8 GPUs goes "
                                        "to a)")
    assert "fits the shared GPU quotas" in env.cluster("b").rationale


def test_quotas_that_cannot_host_every_cluster_fail_located():
    a, b = cluster("a", priority=6), cluster("b", priority=6, index=1)
    with pytest.raises(PolicyError) as e:
        decide(stack([a, b], quotas={("gcp", "us-central1"): 8}, clouds={"gcp": ("us-central1",)}),
               cat1())
    assert str(e.value).splitlines()[1] == (
        "stacks/Pulumi.test.yaml: gpulease:clouds: GPU quotas cannot host clusters a, b at once: "
        "they need at least 16 GPUs together, their regions allow 8 (gcp:us-central1 (8)). Fix: "
        "raise gpulease:clouds.<cloud>.quota_gpus, enable more regions, or lower the clusters' "
        "gpus")
    assert e.value.exit_code == 2


def test_budget_shortfall_names_amount_and_drivers():
    a = cluster("a", priority=9)                       # 55*730 = 40150
    b = cluster("b", priority=9, gpus=16, index=1)     # 80300
    c = cluster("c", priority=6, hours=100, index=2)   # 8800
    with pytest.raises(PolicyError) as e:
        decide(stack([a, b, c], budget=100000, clouds={"gcp": ("us-central1",)}), cat1())
    assert str(e.value).splitlines()[1] == (
        "stacks/Pulumi.test.yaml: gpulease:budget_monthly_usd: budget 100000 USD/month is short "
        "by 29250.00 USD; driven by clusters b (80300). Fix: raise gpulease:budget_monthly_usd "
        "or lower gpus / hours_per_month of those clusters")


def test_budget_exactly_met_passes():
    env = decide(stack([cluster(priority=9)], budget=40150, clouds={"gcp": ("us-central1",)}),
                 cat1())
    assert env.monthly_usd == pytest.approx(40150)


def test_infeasible_cluster_message_lists_each_candidate_and_fix():
    cat = catalog([offering("aws", "us-east-1", "p5.48xlarge", rdma="efa"),
                   offering("gcp", "us-central1", "a3-plain-8g")])
    c = cluster("big", gpus=32, priority=6, regions=("us-central",))
    with pytest.raises(PolicyError) as e:
        decide(stack([cluster("ok", priority=6), c]), cat)
    lines = str(e.value).splitlines()
    assert lines[0].startswith("stacks/Pulumi.test.yaml: no plan satisfies the policy")
    assert lines[1] == (
        'stacks/Pulumi.test.yaml: gpulease:clusters[1]: no feasible offering for cluster "big" '
        "(32 x H100): aws:us-east-1 p5.48xlarge: residency (us-east-1 is outside us-central); "
        "gcp:us-central1 a3-plain-8g: no RDMA (4-node distributed job needs EFA or GPUDirect). "
        "Fix: widen gpulease:clusters[1].regions or set gpulease:clusters[1].distributed: false "
        "or gpulease:policy.require_rdma_for_distributed: false")


def test_no_offering_of_the_gpu_on_configured_clouds():
    with pytest.raises(PolicyError) as e:
        decide(stack([cluster(gpu="B200")]), cat1())
    assert "the catalog has no B200 offering on the configured clouds (aws, gcp)" in str(e.value)


# ---- templates ------------------------------------------------------------------------------
def test_template_files_are_valid_and_cover_the_issue():
    names = template_names()
    for required in ("single-node-dev", "spot-burst", "reserved-baseline", "distributed-rdma",
                     "hybrid-3plus1"):
        assert required in names
    assert cluster_templates()[-1].when == {}, "the last template must be a catch-all"


def test_bad_template_file_is_reported(tmp_path):
    p = tmp_path / "x.yaml"
    with pytest.raises(ConfigError) as e:
        _parse({"name": "x", "order": 1, "description": "d", "node_roles": [],
                "purchase": {"rule": "cheap"}, "network": {}, "storage": {},
                "when": {"gpus_over": 3}, "requires": {}}, p)
    text = str(e.value)
    assert "purchase.rule: must be one of band, spot (got 'cheap')" in text
    assert "when.gpus_over: unknown condition" in text


def _l4_catalog():
    return catalog([offering("aws", "us-east-1", "g6.xlarge", gpu="L4", gpn=1, od=0.8,
                             spot=0.3, c1=0.5, c3=0.35),
                    offering("aws", "us-east-1", "g6.12xlarge", gpu="L4", gpn=4, od=4.6,
                             spot=1.7, c1=2.9, c3=2.0)])


@pytest.mark.parametrize("spec,template,purchase", [
    (dict(gpu="L4", gpus=4, priority=3, checkpoint=30, hours=160), "single-node-dev",
     PurchaseMix(spot=1)),
    (dict(gpu="L4", gpus=8, priority=3, checkpoint=30, hours=300, distributed=False),
     "spot-burst", PurchaseMix(spot=8)),
    (dict(gpu="L4", gpus=8, priority=3, checkpoint=30, hours=300, distributed=False,
          dataset="data"), "hybrid-3plus1", PurchaseMix(on_demand=1, spot=7)),
    (dict(gpu="L4", gpus=8, priority=7, hours=700, distributed=False), "reserved-baseline",
     PurchaseMix(reserved=8)),
    (dict(gpu="L4", gpus=1, priority=9, hours=100), "reserved-baseline", PurchaseMix(reserved=1)),
])
def test_template_choice(spec, template, purchase):
    d = one(cluster(**spec), _l4_catalog(), storage=[dataset(size_tb=5)],
            clouds={"aws": ("us-east-1",)})
    assert (d.template, d.purchase) == (template, purchase)
    assert f"Template {template} (chosen by its rule)" in d.rationale


def test_hybrid_cache_node_extra_cost_is_explained():
    d = one(cluster(gpu="L4", gpus=8, priority=3, checkpoint=30, hours=300, distributed=False,
                    dataset="data"), _l4_catalog(), storage=[dataset(size_tb=5)],
            clouds={"aws": ("us-east-1",)})
    all_spot = [a for a in d.alternatives if a.purchase == PurchaseMix(spot=8)][0]
    assert all_spot.rejected_because == "template hybrid-3plus1 keeps one cache node on-demand"
    assert "7 compute nodes + 1 cache node" in d.rationale


def test_forced_template_is_validated_per_candidate():
    d = one(cluster(gpus=8, priority=3, checkpoint=20, template="spot-burst"))
    assert d.template == "spot-burst" and d.purchase == PurchaseMix(spot=1)
    assert "forced by gpulease:clusters[0].template" in d.rationale
    with pytest.raises(PolicyError) as e:
        one(cluster(gpus=8, priority=6, template="spot-burst"), clouds={"aws": ("us-east-1",)})
    assert ("aws:us-east-1 p5.48xlarge: template spot-burst needs spot-eligible work "
            "(checkpoint_minutes set and priority not above the reserved threshold); 1 more in "
            "regions not enabled under gpulease:clouds. Fix: remove "
            "gpulease:clusters[0].template") in str(e.value)


def test_forced_distributed_rdma_needs_rdma():
    with pytest.raises(PolicyError) as e:
        one(cluster(gpus=16, priority=6, template="distributed-rdma"),
            catalog([offering("gcp", "us-central1", "a3-plain-8g")]),
            clouds={"gcp": ("us-central1",)},
            rules=PolicyRules(require_rdma_for_distributed=False))
    assert ("template distributed-rdma needs an RDMA-capable offering (EFA / GPUDirect)"
            in str(e.value))


def test_forced_single_node_dev_picks_a_one_node_shape():
    d = one(cluster(gpu="L4", gpus=4, priority=6, distributed=False, template="single-node-dev"),
            _l4_catalog(), clouds={"aws": ("us-east-1",)})
    assert (d.offering.instance_type, d.nodes) == ("g6.12xlarge", 1)


# ---- storage --------------------------------------------------------------------------------
def test_storage_tier_shares_under_uniform_ages():
    ds = dataset(size_tb=100, home="gcp:europe-west4", warm_after_days=30, cold_after_days=90,
                 archive_after_days=365, age_horizon_days=540)
    cat = cat1()
    conf = lifecycle_cost(ds, cat.storage_prices("gcp", "europe-west4"), reads_per_month=0.0)
    assert [(t.storage_class, t.from_day, t.to_day) for t in conf.tiers] == [
        ("STANDARD", 0, 30), ("NEARLINE", 30, 90), ("COLDLINE", 90, 365), ("ARCHIVE", 365, None)]
    assert [round(t.share, 6) for t in conf.tiers] == [round(x / 540, 6) for x in (30, 60, 275,
                                                                                  175)]
    assert conf.storage_usd == pytest.approx(100_000 * (30 * .02 + 60 * .01 + 275 * .004
                                                        + 175 * .001) / 540)
    # the policy prices it as the configured option and, unread, finds a cheaper one
    s = decide(stack([], storage=[ds]), cat).storage[0]
    assert s.configured_usd == pytest.approx(conf.total)
    assert s.monthly_usd < s.configured_usd and s.chosen is not None


def test_storage_tier_skipped_when_threshold_unset():
    ds = dataset(size_tb=1, warm_after_days=None, cold_after_days=60, archive_after_days=None,
                 age_horizon_days=120)
    conf = lifecycle_cost(ds, cat1().storage_prices("aws", "us-east-1"), reads_per_month=0.0)
    assert [(t.storage_class, t.share) for t in conf.tiers] == [("STANDARD", 0.5),
                                                                ("GLACIER_IR", 0.5)]


def test_decision_carries_catalog_identity_and_totals():
    env = decide(stack([cluster(priority=9)], clouds={"gcp": ("us-central1",)}), cat1())
    assert (env.catalog_version, env.catalog_as_of) == ("test.1", "2026-12-01")
    assert env.hourly_usd == pytest.approx(55.0)
    assert env.clusters[0].costs.monthly_usd == env.clusters[0].monthly_usd


def test_single_node_dev_template_is_not_chosen_in_production():
    import dataclasses

    dev = stack([cluster(gpus=8, priority=6)])
    prod = dataclasses.replace(dev, environment="prod")
    cat = cat1()
    assert decide(dev, cat).clusters[0].template == "single-node-dev"
    assert decide(prod, cat).clusters[0].template == "reserved-baseline"


def test_decide_restores_the_garbage_collector_state():
    import gc

    assert gc.isenabled()
    one(cluster())
    assert gc.isenabled()
    gc.disable()
    try:
        one(cluster())
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(PolicyError):
        one(cluster(gpu="B200"))  # no such offering in the fixture catalog
    assert gc.isenabled()
