"""Price first, explain later (issue 23 item 1): the one-pass pricing of every (cluster,
offering) pair (gpulease/policy/pricing.py) gives, bit for bit, what ``candidates.evaluate`` — the
full candidate, the old path — gives for the same pair: the objective the solve minimises, the
monthly bill, the purchase mix, the GPUs and feasibility. Checked on 3,000 random
clusters on the shipped catalog and on random small catalogs under random rules (terms, RDMA,
quotas, residency, datasets, forced templates, demand profiles, purchase options,
AWS Local Zones allowed or not)."""
from __future__ import annotations

import dataclasses
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulease.catalog import load_catalog
from gpulease.model import CloudSpec, ClusterSpec, DemandStep, PurchaseMix, StackSpec
from gpulease.errors import PolicyError
from gpulease.policy import decide
from gpulease.policy.failures import infeasible
from gpulease.policy.candidates import Context, candidates_for, evaluate
from gpulease.policy.pricing import price_clusters
from gpulease.policy.rules import PolicyRules
from gpulease.policy.templates import get_template, template_names
from tests.test_policy_fixtures import catalog, cluster, dataset, offering, stack


def _differences(stk, cat) -> list[str]:
    """Every pair where the one-pass pricing and evaluate disagree (empty = none)."""
    ctx = Context.build(stk, cat, stk.policy)
    quotes = price_clusters(stk.clusters, ctx)
    ref = Context.build(stk, cat, stk.policy)   # a fresh context: no shared memo
    out = []
    for spec, q in zip(stk.clusters, quotes):
        forced = get_template(spec.template) if spec.template else None
        assert q.offerings == tuple(ref.by_gpu.get(spec.gpu, ()))
        for j, o in enumerate(q.offerings):
            c = evaluate(spec, o, ref, forced)
            m = c.objective
            got = (None if math.isnan(q.objective[j]) else float(q.objective[j]),
                   None if math.isnan(q.monthly[j]) else float(q.monthly[j]),
                   (int(q.reserved[j]), int(q.on_demand[j]), int(q.spot[j])) if m is not None
                   else None, int(q.gpus[j]), bool(q.feasible[j]))
            want = (m, c.monthly_usd, None if c.purchase is None else (
                c.purchase.reserved, c.purchase.on_demand, c.purchase.spot), c.gpus, c.feasible)
            if got != want:   # exact float equality: the same operations in the same order
                out.append(f"{spec} on {o.key}: pricing {got} != evaluate {want} "
                           f"({c.rejected}, {c.basis})")
    return out


# ---- thousands of random clusters on the shipped catalog ---------------------------------------
def _random_clusters(cat, n: int, seed: int) -> list[ClusterSpec]:
    rng = random.Random(seed)
    gpus = cat.gpus
    out = []
    for i in range(n):
        k = rng.choice([1, 1, 2, 4, 8, 8, 16, 32, 64])
        spec = ClusterSpec(
            name=f"c{i}", gpu=rng.choice(gpus), gpus=k,
            hours_per_month=rng.choice([10, 40, 120, 200, 360, 500, 600, 730]) + rng.random(),
            priority=rng.randint(1, 10), checkpoint_minutes=rng.choice([None, 10, 30, 120]),
            distributed=rng.choice([None, None, False, True]), index=i,
            regions=rng.choice([(), (), ("us-",), ("europe-", "eu-"), ("asia",)]),
            dataset=rng.choice([None, None, "corpus", "evals"]))
        if k > 1 and rng.random() < 0.35:
            sizes = sorted(rng.sample(range(1, k), min(k - 1, rng.choice([1, 2, 3])))) + [k]
            hours = sorted(rng.sample([730, 600, 500, 360, 200, 120, 40, 10], len(sizes)),
                           reverse=True)
            spec = dataclasses.replace(spec, hours_per_month=float(hours[0]), demand=tuple(
                DemandStep(g, float(h)) for g, h in zip(sizes, hours)))
        out.append(spec)
    return out


def _shipped_stack(cat, clusters, rules: PolicyRules, local_zones: bool = False) -> StackSpec:
    clouds = {cl: CloudSpec(cloud=cl, regions=tuple(cat.regions(cl)),
                            project="p" if cl == "gcp" else None,
                            local_zone_regions=tuple(cat.regions(cl))
                            if local_zones and cl == "aws" else ())
              for cl in ("aws", "gcp")}
    # datasets: data gravity, the hybrid template's cache node (a dataset of a TB or more)
    storage = (dataset("corpus", size_tb=40, home="aws:us-east-1"),
               dataset("evals", size_tb=0.5, home="gcp:us-central1"))
    return StackSpec(stack="t", environment="t", owner="o", cost_center="c",
                     budget_monthly_usd=1e12, clouds=clouds, storage=storage,
                     clusters=tuple(clusters), policy=rules, source="t")


#: random clusters per rule set (x3: 3,000 clusters, ~250,000 pairs, ~10 CPU-s in all)
CLUSTERS_PER_RUN = 1000


@pytest.mark.parametrize("seed,rules,local_zones", [
    (1, PolicyRules(), False),
    (2, PolicyRules(commitment_term="auto", commitment_horizon_months=18), False),
    (3, PolicyRules(require_rdma_for_distributed=False, commitment_term="3y",
                    reserve_at_on_demand_rate=False), True),
])
def test_one_pass_pricing_equals_evaluate_on_random_clusters_of_the_shipped_catalog(
        seed, rules, local_zones):
    """(``local_zones``: every AWS region's Local Zones allowed, so the shipped rows with
    Local Zone spot prices are priced with them.)"""
    cat = load_catalog()
    stk = _shipped_stack(cat, _random_clusters(cat, CLUSTERS_PER_RUN, seed), rules, local_zones)
    diffs = _differences(stk, cat)
    assert not diffs, f"{len(diffs)} pairs differ, e.g.:\n" + "\n".join(diffs[:5])


# ---- random small catalogs under random rules ---------------------------------------------------
REGIONS = [("aws", "us-east-1"), ("aws", "us-west-2"), ("gcp", "us-central1"),
           ("gcp", "europe-west4")]
price = st.integers(min_value=1, max_value=40).map(float)


@st.composite
def environments(draw):
    rows = []
    for k, (cloud, region) in enumerate(REGIONS):
        for j in range(draw(st.integers(0, 3))):
            od = draw(st.one_of(st.none(), price))
            c1 = draw(st.one_of(st.none(), st.floats(0.3, 0.99).map(lambda f: (od or 9) * f)))
            row = offering(
                cloud, region, f"t{k}{j}", gpu=draw(st.sampled_from(["H100", "L4"])),
                gpn=draw(st.sampled_from([1, 2, 4, 8])), od=od,
                spot=draw(st.one_of(st.none(), st.floats(0.1, 1.0).map(
                    lambda f: (od or 9) * f))),
                c1=c1, c3=None if c1 is None else c1 * draw(st.sampled_from([0.6, 0.75, 1.0])),
                rdma=draw(st.sampled_from(["none", "efa" if cloud == "aws" else "rdma"])))
            if row["on_demand_usd"] is None and row["commit_1y_usd"] is None \
                    and row["spot_usd"] is None:
                row["on_demand_usd"] = 5.0
            if row["on_demand_usd"] is not None and row["spot_usd"] is not None:
                row["spot_usd"] = min(row["spot_usd"], row["on_demand_usd"])
            if cloud == "aws" and draw(st.booleans()):
                # AZ IDs and Local Zone IDs (``use1-bos1-az1``); some types only in a Local Zone
                pre = {"us-east-1": "use1", "us-west-2": "usw2"}[region]
                zones = draw(st.sampled_from([[f"{pre}-az1", f"{pre}-az2", f"{pre}-lz1-az1"],
                                              [f"{pre}-lz1-az1"], [f"{pre}-az4"]]))
                row["zones"] = zones
                if row["spot_usd"] is not None:
                    top = row["on_demand_usd"] or row["spot_usd"] * 1.25
                    per = {z: draw(st.floats(0.1, 1.0).map(lambda f: round(top * f, 4)))
                           for z in zones}
                    row["zone_spot_usd"] = per
                    row["spot_usd"] = min(per.values())
            if cloud == "gcp" and row["spot_usd"] is not None and draw(st.booleans()):
                row["zones"] = [f"{region}-a", f"{region}-b", f"{region}-c"]
                top = row["on_demand_usd"] or row["spot_usd"] * 1.25
                row["zone_spot_usd"] = {f"{region}-b": row["spot_usd"],
                                        f"{region}-c": (row["spot_usd"] + top) / 2}
            sold = draw(st.sampled_from([None, ("on_demand", "spot", "reservation", "commitment"),
                                         ("spot", "reservation", "commitment"),
                                         ("on_demand", "reservation"), ("spot", "commitment"),
                                         ("on_demand", "spot")]))
            if sold is not None:   # C1: prices only for how the offering is sold
                row["purchase_options"] = list(sold)
                for col, opt in (("on_demand_usd", "on_demand"), ("spot_usd", "spot"),
                                 ("commit_1y_usd", "commitment"),
                                 ("commit_3y_usd", "commitment")):
                    if opt not in sold:
                        row[col] = None
                if "spot" not in sold:
                    row.pop("zone_spot_usd", None)
            rows.append(row)
    if not rows:
        rows.append(offering("aws", "us-east-1", "t00", od=5.0, c1=3.0, c3=2.5))
    storage = [dataset("d1", size_tb=draw(st.sampled_from([0.5, 5, 50])),
                       home=draw(st.sampled_from(["aws:us-east-1", "gcp:us-central1"])))]
    clusters = []
    for i in range(draw(st.integers(1, 5))):
        k = draw(st.integers(1, 32))
        spec = cluster(
            f"c{i}", index=i, gpu=draw(st.sampled_from(["H100", "L4"])), gpus=k,
            hours=draw(st.sampled_from([50, 200, 400, 600, 730])),
            priority=draw(st.integers(1, 10)), checkpoint=draw(st.sampled_from([None, 10, 60])),
            distributed=draw(st.sampled_from([None, False, True])),
            dataset=draw(st.sampled_from([None, "d1"])),
            regions=draw(st.sampled_from([(), ("us-",), ("europe-",)])),
            template=draw(st.sampled_from([None] * 6 + template_names())))
        if k > 2 and draw(st.booleans()):
            cut = draw(st.integers(1, k - 1))
            spec = dataclasses.replace(spec, hours_per_month=730.0, demand=(
                DemandStep(cut, 730.0), DemandStep(k, float(draw(st.sampled_from(
                    [600, 200, 40]))))))
        clusters.append(spec)
    quotas = {r: draw(st.sampled_from([4, 8, 16, 32])) for r in REGIONS if draw(st.booleans())}
    rules = PolicyRules(
        require_rdma_for_distributed=draw(st.booleans()),
        max_nodes_without_rdma=draw(st.sampled_from([2, 8])),
        spot_interruptions_per_hour=draw(st.sampled_from([None, 0.0, 0.05, 0.5])),
        commitment_term=draw(st.sampled_from(["1y", "3y", "none", "auto"])),
        commitment_horizon_months=draw(st.sampled_from([6, 12, 30])),
        reserve_at_on_demand_rate=draw(st.booleans()),
        allow_cross_cloud_data=draw(st.booleans()),
        tcp_communication_share=draw(st.sampled_from([0.0, 0.12])))
    stk = stack(clusters, storage=storage, quotas=quotas, rules=rules)
    local = tuple(r for c, r in REGIONS if c == "aws" and draw(st.booleans()))
    aws = dataclasses.replace(stk.clouds["aws"], local_zone_regions=local)
    return catalog(rows), dataclasses.replace(stk, clouds={**stk.clouds, "aws": aws})


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(environments())
def test_one_pass_pricing_equals_evaluate_under_random_rules(env):
    cat, stk = env
    diffs = _differences(stk, cat)
    assert not diffs, "\n".join(diffs[:5])


def test_the_decision_chooses_the_cheapest_feasible_candidate_and_explains_it():
    """Without quotas the choice is the first feasible candidate of the old ranking (every
    pair a full candidate), and each alternative says what that pair's full candidate says."""
    cat = load_catalog()
    probe = _shipped_stack(cat, _random_clusters(cat, 80, 9), PolicyRules())
    ctx = Context.build(probe, cat, probe.policy)
    deployable = [s for s in probe.clusters if any(c.feasible for c in candidates_for(s, ctx))]
    stk = _shipped_stack(cat, deployable, PolicyRules())
    assert len(stk.clusters) > 40
    ctx = Context.build(stk, cat, stk.policy)
    env = decide(stk, cat)
    for spec, d in zip(stk.clusters, env.clusters):
        cands = candidates_for(spec, ctx)
        ranked = [c for c in cands if c.feasible]
        best = ranked[0]
        assert (d.offering, d.purchase, d.costs) == (best.offering, best.purchase, best.costs)
        assert (f"cheapest of {len(ranked)} feasible" in d.rationale if len(ranked) > 1
                else "only feasible candidate" in d.rationale)
        by_key = {c.offering.key: c for c in cands}
        for a in d.alternatives:
            key = (a.cloud, a.region, a.instance_type)
            if key == d.offering.key:
                continue   # the chosen offering with other purchase models or zones
            c = by_key[key]
            assert (a.monthly_usd, a.purchase) == (c.monthly_usd, c.purchase or PurchaseMix())
            if c.rejected:
                assert a.rejected_because == c.rejected
            else:
                assert a.rejected_because.startswith("cost (+")


def test_an_infeasible_cluster_is_explained_as_the_full_candidates_explain_it():
    """A cluster with no feasible offering: the error lists each offering's first broken rule
    in the order and words every pair's full candidate gives (the decision no longer builds
    them: a rule's reason comes from ``rule_rejection``, a price's from ``evaluate``)."""
    cat = load_catalog()
    regions = {"aws": ("us-east-1", "us-west-2"), "gcp": ("us-central1", "europe-west4")}
    rules = PolicyRules(require_rdma_for_distributed=True)
    probe = _shipped_stack(cat, _random_clusters(cat, 400, 21), rules)
    quotas = {"aws": {"us-east-1": 16}, "gcp": {"us-central1": 8}}
    probe = dataclasses.replace(probe, clouds={cl: dataclasses.replace(
        cs, regions=regions[cl], quota_gpus=quotas[cl]) for cl, cs in probe.clouds.items()})
    ctx = Context.build(probe, cat, probe.policy)
    full = [candidates_for(s, ctx) for s in probe.clusters]
    stuck = [i for i, cands in enumerate(full) if not any(c.feasible for c in cands)]
    assert len(stuck) > 40
    stk = dataclasses.replace(probe, clusters=tuple(probe.clusters[i] for i in stuck))
    with pytest.raises(PolicyError) as e:
        decide(stk, cat)
    want = [infeasible(probe.clusters[i], [(c.offering, c.rejected) for c in full[i]], stk)
            for i in stuck]
    assert e.value.findings == want
    reasons = " ".join(f.message for f in want)
    for why in ("regions not enabled", "no RDMA", "quota", "residency", "no price", "not sold"):
        assert why in reasons   # rules and prices: reasons from rule_rejection and evaluate


def test_the_explanation_is_built_when_first_read_and_reads_the_same_whenever_read():
    """decide defers each cluster's rationale, alternatives and commitment terms (only a person
    reads them: `explain`, the plan's views); read later, in another order, after other
    decisions, they are what reading them at once gives."""
    from gpulease.model import Deferred

    cat = load_catalog()
    rules = PolicyRules(commitment_term="auto", commitment_horizon_months=18)
    probe = _shipped_stack(cat, _random_clusters(cat, 60, 5), rules)
    ctx = Context.build(probe, cat, probe.policy)
    deployable = [s for s in probe.clusters if any(c.feasible for c in candidates_for(s, ctx))]
    stk = _shipped_stack(cat, deployable, rules)
    assert len(stk.clusters) > 30
    first = decide(stk, cat)
    lazy = ("rationale", "alternatives", "terms")
    assert all(type(d.__dict__[k]) is Deferred for d in first.clusters for k in lazy)
    at_once = [(d.rationale, d.alternatives, d.terms) for d in first.clusters]
    assert not [k for d in first.clusters for k in lazy if type(d.__dict__[k]) is Deferred]
    assert all(r and a for r, a, _ in at_once) and any(t for *_, t in at_once)
    later = decide(stk, cat)
    decide(_shipped_stack(cat, deployable[:5], PolicyRules()), cat)   # another one between
    read = [(d.rationale, d.alternatives, d.terms) for d in reversed(later.clusters)][::-1]
    assert read == at_once
    assert later == first     # equality reads them too
    # a copy or a pickle keeps the values, not what would build them (the policy's context)
    import copy
    import pickle

    fresh = decide(stk, cat).clusters[0]
    blob = pickle.dumps(fresh)
    assert len(blob) < 100_000, len(blob)
    back = pickle.loads(blob)
    assert not [k for k in lazy if type(back.__dict__[k]) is Deferred]
    assert back == first.clusters[0] == copy.deepcopy(fresh)
    # the fields' own names in __dict__: the dataclass copy idiom still works, unread too
    unread = decide(stk, cat).clusters[0]
    assert type(unread).__name__ == "ClusterDecision"
    assert type(unread)(**unread.__dict__) == first.clusters[0]
