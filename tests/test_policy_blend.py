"""Demand profiles: the blended purchase is optimal, proved by brute force on small cases.

The reference implementations here are written from docs/policy.md independently of
gpulease.policy: node hours from the demand steps, the per-node cost of each purchase model, the
gang rework as a sum over (interrupted spot node, stalled node) pairs, and every per-node
assignment (3^N). Prices are synthetic test fixtures.
"""
from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulease.errors import PolicyError
from gpulease.model import (HOURS_PER_MONTH, ClusterSpec, CostBreakdown, DemandStep, NodeStep,
                            PurchaseMix)
from gpulease.policy import decide
from gpulease.policy.blend import assignments
from gpulease.policy.candidates import Context, billed_months, candidates_for
from gpulease.policy.costmodel import CostInputs, Rates, blend_costs, cluster_costs
from gpulease.policy.rules import PolicyRules
from tests.test_policy_fixtures import catalog, offering, stack

MODELS = ("reserved", "on_demand", "spot")
RANK = {m: i for i, m in enumerate(MODELS)}
LAMBDAS = (0.0, 0.05, 0.5)


# ---- independent reference model ------------------------------------------------------------
def node_hours(steps, gpn: int) -> list[tuple[float, int]]:
    """(hours, step index) of node k = 1..N: the first step whose GPUs exceed (k-1) x gpn."""
    n = -(-steps[-1][0] // gpn)
    out = []
    for k in range(1, n + 1):
        j = next(i for i, (g, _) in enumerate(steps) if g > (k - 1) * gpn)
        out.append((steps[j][1], j))
    return out


def reference_cost(hours, models, *, r, o, s, lam, lost, gang, share, egress=0.0):
    """Monthly USD of one per-node assignment, node by node and pair by pair."""
    rate = {"reserved": r, "on_demand": o, "spot": s}
    reserved = sum(r * HOURS_PER_MONTH for m in models if m == "reserved")
    od = sum(o * h for h, m in zip(hours, models) if m == "on_demand")
    sp = sum(s * h for h, m in zip(hours, models) if m == "spot")
    rework = 0.0
    for hj, mj in zip(hours, models):
        if mj != "spot":
            continue
        if gang:   # every node running while j runs stalls: they overlap min(h_j, h_k) hours
            rework += lam * lost * sum(min(hj, hk) * rate[mk] for hk, mk in zip(hours, models))
        else:
            rework += lam * hj * lost * s
    comm = (od + sp + rework) * share / (1 - share) if share else 0.0
    return reserved, reserved + od + sp + rework + comm + egress


def allowed_per_node(step_of, priority, interruptible, rules, priced):
    out = []
    for j in step_of:
        if priority > rules.reserved_above_priority:
            a = {"reserved"} if j == 0 else {"reserved", "on_demand"}
        elif interruptible and priority < rules.spot_below_priority:
            a = set(MODELS)
        else:
            a = {"reserved", "on_demand"}
        out.append(a & priced)
    return out


def carried(models, step_of) -> bool:
    """What the gang option set holds: one model per demand step, in node order reserved ->
    on-demand -> spot."""
    ranks = [RANK[m] for m in models]
    if ranks != sorted(ranks):
        return False
    return all(models[a] == models[b] for a in range(len(models)) for b in range(len(models))
               if step_of[a] == step_of[b])


# ---- strategies --------------------------------------------------------------------------------
@st.composite
def profiles(draw, *, max_nodes=5):
    gpn = draw(st.sampled_from([1, 2, 4, 8]))
    k = draw(st.integers(1, 3))
    peak_max = max_nodes * gpn
    gpus = sorted(draw(st.lists(st.integers(1, peak_max), min_size=k, max_size=k, unique=True)))
    hours = sorted(draw(st.lists(st.sampled_from([20, 50, 120, 200, 365, 500, 600, 730]),
                                 min_size=k, max_size=k, unique=True)), reverse=True)
    return gpn, tuple(zip(gpus, [float(h) for h in hours]))


prices = st.integers(1, 40).map(float)


@st.composite
def cases(draw, *, gang: bool):
    gpn, steps = draw(profiles())
    od = draw(prices)
    # spot sometimes dearer than the commitment (193 of 1,345 rows of catalog 2026.12.03)
    spot = draw(st.one_of(st.none(), st.floats(0.1, 1.0).map(lambda f: round(od * f, 3))))
    c1 = draw(st.one_of(st.none(), st.floats(0.3, 0.99).map(lambda f: round(od * f, 3))))
    c3 = None if c1 is None else round(c1 * draw(st.floats(0.5, 0.95)), 3)
    rdma = draw(st.sampled_from(["efa", "none"])) if gang else "none"
    rules = PolicyRules(require_rdma_for_distributed=False, max_nodes_without_rdma=8,
                        spot_interruptions_per_hour=draw(st.sampled_from(LAMBDAS)),
                        commitment_term=draw(st.sampled_from(["1y", "3y", "none", "auto"])),
                        commitment_horizon_months=draw(st.sampled_from([6, 12, 18, 36])),
                        tcp_communication_share=draw(st.sampled_from([0.0, 0.12, 0.3])))
    spec = ClusterSpec(
        name="c", gpu="H100", gpus=steps[-1][0], hours_per_month=steps[0][1],
        priority=draw(st.integers(1, 10)), checkpoint_minutes=draw(st.sampled_from([None, 10, 60])),
        distributed=gang, demand=tuple(DemandStep(g, h) for g, h in steps) if len(steps) > 1
        else ())
    row = offering("aws", "us-east-1", "t", gpn=gpn, od=od, spot=spot, c1=c1, c3=c3, rdma=rdma)
    return catalog([row]), stack([spec], rules=rules), gpn, steps


def brute_force(cat, stk, gpn, steps, *, restrict: bool):
    """Cheapest objective over every per-node assignment (and term, for auto) the rules allow;
    ``restrict``: only the assignments the gang option set holds."""
    spec, rules = stk.clusters[0], stk.policy
    o = cat.offerings[0]
    hours_steps = node_hours(steps, gpn)
    hours = [h for h, _ in hours_steps]
    step_of = [j for _, j in hours_steps]
    gang = bool(spec.distributed) and len(hours) > 1
    share = rules.tcp_communication_share if gang and o.rdma == "none" else 0.0
    lam = rules.spot_interruptions_per_hour
    lost = ((spec.checkpoint_minutes or 0) / 2 + rules.spot_restart_minutes) / 60
    terms = ("none", "1y", "3y") if rules.commitment_term == "auto" else (rules.commitment_term,)
    best = None
    for term in terms:
        commit = {"1y": o.commit_1y_usd, "3y": o.commit_3y_usd}.get(term)
        r = commit if commit is not None else o.on_demand_usd  # plain reservation
        factor = 1.0
        if rules.commitment_term == "auto" and commit is not None:
            factor = billed_months(term, rules.commitment_horizon_months) / \
                rules.commitment_horizon_months
        priced = {m for m, p in (("reserved", r), ("on_demand", o.on_demand_usd),
                                 ("spot", o.spot_usd)) if p is not None}
        allowed = allowed_per_node(step_of, spec.priority, spec.interruptible, rules, priced)
        for models in itertools.product(*[sorted(a) for a in allowed]):
            if restrict and not carried(models, step_of):
                continue
            reserved, monthly = reference_cost(hours, models, r=r, o=o.on_demand_usd,
                                               s=o.spot_usd, lam=lam, lost=lost, gang=gang,
                                               share=share)
            value = monthly + reserved * (factor - 1.0)
            best = value if best is None or value < best else best
    return best


class Priced:
    """A candidate with its blocks (``Context.blocks_of``)."""

    def __init__(self, cand, blocks):
        self.cand, self.blocks = cand, blocks

    def __getattr__(self, name):
        return getattr(self.cand, name)


def policy_candidate(cat, stk):
    ctx = Context.build(stk, cat, stk.policy)
    (cand,) = candidates_for(stk.clusters[0], ctx)
    return Priced(cand, ctx.blocks_of(stk.clusters[0], cand) if cand.layout else ())


def check(cand, best, gpn, steps):
    if best is None:
        assert not cand.feasible
        return
    assert cand.feasible, cand.rejected
    assert cand.objective == pytest.approx(best, rel=1e-9, abs=1e-6)
    # the blocks are the nodes in order, with the hours of their demand step
    hours = [h for h, _ in node_hours(steps, gpn)]
    got = [b.hours_per_month for b in cand.blocks for _ in range(b.nodes)]
    assert got == hours
    assert [b.first for b in cand.blocks] == list(itertools.accumulate(
        [1] + [b.nodes for b in cand.blocks[:-1]]))
    assert cand.purchase.total == len(hours)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(gang=False))
def test_independent_nodes_equal_brute_force_over_every_per_node_assignment(case):
    """Not a gang: the search over monotone per-step assignments loses nothing against all 3^N
    per-node assignments (docs/policy.md, "Why per step suffices")."""
    cat, stk, gpn, steps = case
    check(policy_candidate(cat, stk), brute_force(cat, stk, gpn, steps, restrict=False),
          gpn, steps)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(gang=True))
def test_gangs_equal_brute_force_over_the_option_set(case):
    """A gang: the rework couples the nodes, so optimality is claimed over the assignments one
    node group carries (one model per step, reserved -> on-demand -> spot); the brute force
    enumerates all 3^N per-node assignments and keeps exactly those."""
    cat, stk, gpn, steps = case
    cand = policy_candidate(cat, stk)
    best = brute_force(cat, stk, gpn, steps, restrict=True)
    check(cand, best, gpn, steps)
    if best is not None:   # the restriction never beats the unrestricted optimum
        assert brute_force(cat, stk, gpn, steps, restrict=False) <= best + 1e-6


def test_the_gang_restriction_is_a_real_restriction():
    """A documented case where mixing spot into the baseline step of a gang would be cheaper
    per node-assignment than any one-model-per-step blend (so the docs say 'restricted')."""
    rules = PolicyRules(spot_interruptions_per_hour=0.05, commitment_term="1y")
    # spot dearer per hour than the commitment, 4-hourly checkpoints: an interruption stalls
    # the gang for 130 min, and a reserved node next to a spot node makes each stall cheaper
    row = offering("aws", "us-east-1", "t", gpn=8, od=10.0, spot=6.22, c1=4.12, c3=3.0,
                   rdma="efa")
    spec = ClusterSpec(name="c", gpu="H100", gpus=16, hours_per_month=400, priority=3,
                       checkpoint_minutes=240, distributed=True)
    cat, stk = catalog([row]), stack([spec], rules=rules)
    restricted = brute_force(cat, stk, 8, ((16, 400.0),), restrict=True)
    free = brute_force(cat, stk, 8, ((16, 400.0),), restrict=False)
    assert policy_candidate(cat, stk).objective == pytest.approx(restricted) == 6015.2
    assert free == pytest.approx(5943.67, abs=0.01)  # 1 reserved + 1 spot inside the step


# ---- environment: quotas and budget still solved exactly -------------------------------------
@st.composite
def environments(draw):
    rows = []
    for k, (cloud, region) in enumerate([("aws", "us-east-1"), ("aws", "us-west-2"),
                                         ("gcp", "us-central1")]):
        for j in range(draw(st.integers(0, 2))):
            od = draw(prices)
            c1 = draw(st.one_of(st.none(), st.floats(0.3, 0.99).map(lambda f: od * f)))
            rows.append(offering(cloud, region, f"t{k}{j}", gpn=draw(st.sampled_from([1, 4, 8])),
                                 od=od, c1=c1, c3=None if c1 is None else c1 * 0.7,
                                 spot=draw(st.one_of(st.none(),
                                                     st.floats(0.1, 1.0).map(lambda f: od * f))),
                                 rdma=draw(st.sampled_from(["none", "efa" if cloud == "aws"
                                                            else "rdma"]))))
    if not rows:
        rows.append(offering("aws", "us-east-1", "t00", od=5.0, c1=3.0, c3=2.5))
    clusters = []
    for i in range(draw(st.integers(1, 3))):
        _, steps = draw(profiles(max_nodes=3))
        steps = tuple((g * 2, h) for g, h in steps)
        clusters.append(ClusterSpec(
            name=f"c{i}", gpu="H100", gpus=steps[-1][0], hours_per_month=steps[0][1],
            priority=draw(st.integers(1, 10)),
            checkpoint_minutes=draw(st.sampled_from([None, 30])),
            distributed=draw(st.sampled_from([None, False, True])), index=i,
            demand=tuple(DemandStep(g, h) for g, h in steps) if len(steps) > 1 else ()))
    quotas = {r: draw(st.sampled_from([8, 16, 32])) for r in
              [("aws", "us-east-1"), ("gcp", "us-central1")] if draw(st.booleans())}
    rules = PolicyRules(require_rdma_for_distributed=draw(st.booleans()),
                        commitment_term=draw(st.sampled_from(["1y", "auto"])),
                        commitment_horizon_months=18,
                        spot_interruptions_per_hour=draw(st.sampled_from(LAMBDAS)))
    return catalog(rows), clusters, quotas, rules


def environment_brute_force(cat, stk):
    ctx = Context.build(stk, cat, stk.policy)
    per = [[c for c in candidates_for(s, ctx) if c.feasible] for s in stk.clusters]
    quotas = {(cl, r): q for cl, cs in stk.clouds.items() for r, q in cs.quota_gpus.items()}
    best = None
    for combo in itertools.product(*per):
        used: dict = {}
        for c in combo:
            used[c.quota_key] = used.get(c.quota_key, 0) + c.gpus
        if any(n > quotas.get(k, math.inf) for k, n in used.items()):
            continue
        value = sum(c.objective for c in combo)
        if best is None or value < best[0]:
            best = (value, sum(c.monthly_usd for c in combo))
    return best


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(environments())
def test_environment_with_profiles_equals_brute_force_under_quotas_and_budget(env):
    cat, clusters, quotas, rules = env
    stk = stack(clusters, quotas=quotas, rules=rules)
    best = environment_brute_force(cat, stk)
    try:
        got = decide(stk, cat)
    except PolicyError as exc:
        assert best is None, f"policy failed but {best} is feasible: {exc}"
        return
    assert best is not None
    ctx = Context.build(stk, cat, rules)
    chosen = []
    for c in got.clusters:
        cand = next(x for x in candidates_for(c.spec, ctx)
                    if x.offering.key == c.offering.key)
        chosen.append(cand)
        assert c.blocks == ctx.blocks_of(c.spec, cand) and c.commitment_term == cand.term
    assert sum(c.objective for c in chosen) == pytest.approx(best[0], rel=1e-9, abs=1e-6)
    # the budget is checked on the optimum's monthly bill: a cent less refuses the plan
    monthly = sum(c.monthly_usd for c in got.clusters)
    tight = stack(clusters, quotas=quotas, rules=rules, budget=monthly - 0.01)
    with pytest.raises(PolicyError, match="budget"):
        decide(tight, cat)


# ---- the rules the blend keeps ---------------------------------------------------------------
def one(spec, row, **rules):
    cat, stk = catalog([row]), stack([spec], rules=PolicyRules(**rules))
    return policy_candidate(cat, stk)


def profile(*steps, priority=6, checkpoint=None, distributed=False):
    return ClusterSpec(name="c", gpu="H100", gpus=steps[-1][0], hours_per_month=steps[0][1],
                       priority=priority, checkpoint_minutes=checkpoint, distributed=distributed,
                       demand=tuple(DemandStep(g, float(h)) for g, h in steps))


def test_guaranteed_work_reserves_the_baseline_and_never_bursts_on_spot():
    row = offering("aws", "us-east-1", "t", gpn=8, od=10.0, spot=1.0, c1=6.0, c3=4.5)
    c = one(profile((16, 730), (32, 500), (64, 100), priority=9, checkpoint=30), row)
    assert [(b.nodes, b.purchase, b.part) for b in c.blocks] == [
        (2, "reserved", "baseline"), (2, "reserved", "burst"), (4, "on_demand", "burst")]
    # 500 h = 68 % > 60 % break-even: reserved; 100 h: on-demand; spot at 10 % never
    assert c.costs.reserved_usd == pytest.approx(4 * 6.0 * 730)
    assert c.costs.on_demand_usd == pytest.approx(4 * 10.0 * 100)
    assert c.basis == "guaranteed"


def test_guaranteed_baseline_without_commitment_is_a_plain_reservation_with_term_none():
    row = offering("aws", "us-east-1", "t", gpn=8, od=10.0, spot=1.0, c1=6.0, c3=4.5)
    c = one(profile((8, 730), (16, 100), priority=10), row, commitment_term="none")
    assert [(b.purchase, b.part) for b in c.blocks] == [("reserved", "baseline"),
                                                        ("on_demand", "burst")]
    assert c.reserved_rate == 10.0 and c.term == "none"


def test_spot_band_bursts_on_spot_over_a_committed_baseline_when_spot_beats_the_commitment_only_for_the_burst():
    # GCP-like interruption rate; spot at 45 % of on-demand, commitment at 40 %.
    row = offering("gcp", "us-central1", "t", gpn=8, od=10.0, spot=4.5, c1=4.0, c3=3.0)
    c = one(profile((8, 730), (32, 150), priority=3, checkpoint=60), row,
            spot_interruptions_per_hour=0.05)
    assert [(b.nodes, b.purchase) for b in c.blocks] == [(1, "reserved"), (3, "spot")]
    assert c.basis == "spot"


def test_a_step_that_owns_no_node_is_merged_into_the_node_below():
    spec = profile((17, 730), (20, 100))   # 3 nodes of 8 GPUs cover both steps
    assert spec.node_steps(8) == (NodeStep(0, 1, 3, 730.0),)
    assert profile((16, 730), (64, 200)).node_steps(8) == (NodeStep(0, 1, 2, 730.0),
                                                          NodeStep(1, 3, 6, 200.0))
    assert profile((1, 730), (3, 300), (4, 20)).node_steps(1) == (
        NodeStep(0, 1, 1, 730.0), NodeStep(1, 2, 2, 300.0), NodeStep(2, 4, 1, 20.0))


@pytest.mark.parametrize("steps,gpn,expect", [
    (((16, 730), (64, 200)), 8, [730, 730] + [200] * 6),
    (((4, 730), (6, 300), (9, 50)), 4, [730, 300, 50]),
    (((3, 600),), 2, [600, 600]),
])
def test_node_hours_follow_the_load_duration_curve(steps, gpn, expect):
    spec = profile(*steps) if len(steps) > 1 else ClusterSpec(
        name="c", gpu="H100", gpus=steps[0][0], hours_per_month=steps[0][1], priority=6)
    got = [st.hours_per_month for st in spec.node_steps(gpn) for _ in range(st.nodes)]
    assert got == expect == [h for h, _ in node_hours(steps, gpn)]


# ---- the cost model --------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.sampled_from(MODELS)), min_size=1, max_size=4),
       st.lists(st.sampled_from([730.0, 400.0, 200.0, 30.0]), min_size=4, max_size=4),
       st.booleans(), st.sampled_from([0.0, 0.12]), st.sampled_from(LAMBDAS))
def test_blend_costs_match_the_pairwise_formula_and_blocks_sum_to_the_total(
        groups, hours, gang, share, lam):
    hours = sorted(hours, reverse=True)[:len(groups)]
    blocks = tuple((n, h, m) for (n, m), h in zip(groups, hours))
    k = CostInputs(rates=Rates(6.0, 10.0, 3.0), gang=gang, tcp_gang=gang and share > 0,
                   interruptions_per_hour=lam, checkpoint_minutes=30, restart_minutes=10,
                   communication_share=share, egress_usd=7.0)
    total, parts = blend_costs(blocks, k, per_block=True)
    per_node_h = [h for n, h, _ in blocks for _ in range(n)]
    per_node_m = [m for n, _, m in blocks for _ in range(n)]
    _, monthly = reference_cost(per_node_h, per_node_m, r=6.0, o=10.0, s=3.0, lam=lam,
                                lost=(15 + 10) / 60, gang=gang, share=share if gang else 0.0,
                                egress=7.0)
    assert total.monthly_usd == pytest.approx(monthly, rel=1e-12)
    for key in ("reserved_usd", "on_demand_usd", "spot_usd", "spot_rework_usd",
                "communication_usd"):
        assert sum(getattr(p, key) for p in parts) == pytest.approx(getattr(total, key),
                                                                    rel=1e-12, abs=1e-9)


@pytest.mark.parametrize("mix,gang,expect_rework", [
    # one step: lambda * h * S * L * rate (all nodes of the gang / the spot node alone)
    (PurchaseMix(reserved=1, on_demand=1, spot=2), True, 0.5 * 200 * 2 * (25 / 60) * 22.0),
    (PurchaseMix(spot=3), False, 0.5 * 200 * 3 * (25 / 60) * 3.0),
])
def test_one_step_cluster_costs_are_the_classic_formulas(mix, gang, expect_rework):
    c = cluster_costs(mix=mix, rates=Rates(6.0, 10.0, 3.0), hours=200, gang=gang,
                      tcp_gang=False, interruptions_per_hour=0.5, checkpoint_minutes=30,
                      restart_minutes=10, communication_share=0.12)
    assert c.reserved_usd == mix.reserved * 6.0 * 730
    assert c.on_demand_usd == mix.on_demand * 10.0 * 200
    assert c.spot_usd == mix.spot * 3.0 * 200
    assert c.spot_rework_usd == pytest.approx(expect_rework)
    assert c == CostBreakdown(c.reserved_usd, c.on_demand_usd, c.spot_usd, c.spot_rework_usd)


def test_assignments_are_the_monotone_ones_the_rules_allow():
    everything = frozenset(MODELS)
    assert len(list(assignments([everything] * 3))) == 10       # (m+1)(m+2)/2
    assert list(assignments([frozenset({"reserved"}), frozenset({"reserved", "on_demand"})])) \
        == [("reserved", "on_demand"), ("reserved", "reserved")]
    assert all([RANK[m] for m in seq] == sorted(RANK[m] for m in seq)
               for seq in assignments([everything] * 4))
