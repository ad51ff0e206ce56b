"""Price first, explain later: every (cluster, offering) pair priced in one vectorised pass.

``gpulease.policy.candidates.evaluate`` prices one offering for one cluster and explains it (a
``Candidate`` with its blend, template, layout and reasons); a plan of 1,000 clusters asks it
~84,000 times, though a person only ever sees the choice and a few alternatives. This module
answers what the choice needs for every pair at once — is the pair feasible, what does it cost
(the value the environment solve minimises, and the monthly bill), how many nodes of each
purchase model — with numpy over all clusters of one GPU model x all offerings of it; the
decision then builds full candidates (``evaluate``) only for what it shows or chooses.

Same answers, not approximately: every price is computed with the same floating-point
operations in the same order as ``costmodel.blend_totals`` / ``blend.blends`` (numpy's
element-wise arithmetic is IEEE double like Python's floats), every choice with the same
sequential "beats" scans (``blend.better``: ties within a billionth, then less lock-in), so
each pair's objective is bit-for-bit the candidate's (tests/test_policy_pricing.py compares them
on thousands of random clusters). Pairs whose price depends on their template (a forced
template, a cache node that takes the first spot node on-demand) and clusters whose demand
steps share their hours are priced by ``evaluate`` itself, so nothing is priced twice two ways.

Layout per GPU model: the offerings of the stack's clouds in catalog order (``GpuIndex``,
arrays of their rates by purchase model and term, built once per catalog and rules) and the
clusters that ask for the GPU; the pairs are priced in blocks of clusters that share the node
size, the number of node steps and whether they run as a gang, as 2-D arrays
(clusters x offerings) that broadcast cluster columns against offering rows.

Adding a purchase model means one more priced column: a rate array in ``GpuIndex.rates`` and
its billing in ``_totals`` (what ``blend_totals`` charges for it), in the same order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Optional

import numpy as np

from gpulease.model import HOURS_PER_MONTH, ClusterSpec, Offering
from gpulease.policy.blend import TIE, _assignments
from gpulease.policy.candidates import (Candidate, evaluate, local_zone_regions, matches_residency,
                                        rule_rejection)
from gpulease.policy.templates import Facts, choose_template, cluster_templates, get_template
from gpulease.purchase import ON_DEMAND, RESERVED, SPOT

_R, _O, _S = RESERVED, ON_DEMAND, SPOT
_ALL = frozenset((_R, _O, _S))
_NAN = float("nan")


def _arr(values, dtype=float) -> np.ndarray:
    return np.array([_NAN if v is None else v for v in values], dtype=dtype)


@dataclass
class GpuIndex:
    """The offerings of one GPU model on the stack's clouds (``Context.by_gpu`` order) as
    arrays: what pricing every cluster of the GPU against every offering needs."""

    offerings: tuple[Offering, ...]
    gpn: np.ndarray            # GPUs per node
    on_demand: np.ndarray      # $/node-hour, NaN = no price
    spot: np.ndarray           # the spot rate a cluster pays (Context.spot_rate), NaN = none
    #: term -> the reserved rate (Offering.reservation_rate under the rules), NaN = none
    reserved: dict
    #: term -> Context.lock_in_factor
    lock_in: dict
    has_rdma: np.ndarray
    interruptions: np.ndarray  # per node-hour, of the offering (Context.spot_risk)
    quota: np.ndarray          # GPUs of the offering's region quota, inf = none
    enabled: np.ndarray        # the region is enabled in the stack
    #: the offering has a zone a cluster may land in (False = offered only in AWS Local Zones
    #: the stack does not allow: ``Offering.regular_zones`` empty)
    zoned: np.ndarray
    name_rank: np.ndarray      # rank of (cloud, region, instance_type)
    #: node size -> column indices of the offerings with that many GPUs per node
    by_gpn: dict = field(default_factory=dict)
    _masks: dict = field(default_factory=dict)

    @classmethod
    def build(cls, offerings, ctx) -> "GpuIndex":
        offerings = tuple(offerings)
        rules, stack = ctx.rules, ctx.stack
        names = [o.key for o in offerings]
        order = sorted(set(names))
        rank = {k: i for i, k in enumerate(order)}
        gpn = np.array([o.gpus_per_node for o in offerings], dtype=np.int64)
        idx = cls(
            offerings=offerings, gpn=gpn,
            on_demand=_arr(o.price(ON_DEMAND) for o in offerings),
            spot=_arr(ctx.spot_rate(o) for o in offerings),
            reserved={t: _arr(o.reservation_rate(t, rules.reserve_at_on_demand_rate)
                              for o in offerings) for t in ctx.terms},
            lock_in={t: _arr(ctx.lock_in_factor(o, t) for o in offerings) for t in ctx.terms},
            has_rdma=np.array([o.has_rdma for o in offerings], dtype=bool),
            interruptions=_arr(ctx.spot_risk(o)[0] for o in offerings),
            quota=_arr(stack.clouds[o.cloud].quota_gpus.get(o.region, float("inf"))
                       for o in offerings),
            enabled=np.array([o.region in stack.clouds[o.cloud].regions for o in offerings],
                             dtype=bool),
            zoned=np.array([not o.zones or bool(o.regular_zones) for o in offerings],
                           dtype=bool),
            name_rank=np.array([rank[k] for k in names], dtype=np.int64))
        for g in sorted(set(gpn.tolist())):
            idx.by_gpn[g] = np.flatnonzero(gpn == g)
        return idx

    def mask(self, key, fn) -> np.ndarray:
        """A per-offering vector memoised by ``key`` (what depends on the offerings alone:
        residency lists, a dataset's home cloud)."""
        hit = self._masks.get(key)
        if hit is None:
            hit = self._masks[key] = fn()
        return hit


_INDEXES: dict = {}


def gpu_index(ctx, gpu: str) -> GpuIndex:
    """The ``GpuIndex`` of ``gpu`` for this decision's catalog, clouds and rules: built once and
    kept while they stay the same (a plan decides twice, a benchmark thousands of times)."""
    rules, stack = ctx.rules, ctx.stack
    clouds = tuple((c, tuple(cs.regions), tuple(sorted(cs.quota_gpus.items())))
                   for c, cs in sorted(stack.clouds.items()))
    key = (id(ctx.catalog), gpu, clouds, local_zone_regions(stack),
           rules.reserve_at_on_demand_rate,
           rules.commitment_term, rules.commitment_horizon_months,
           tuple(sorted(ctx.interruptions.items())),
           ctx.quotes.fingerprint() if ctx.quotes is not None else None)
    hit = _INDEXES.get(key)
    if hit is None or hit[0] is not ctx.catalog:
        if len(_INDEXES) > 256:
            _INDEXES.clear()
        hit = _INDEXES[key] = (ctx.catalog, GpuIndex.build(ctx.by_gpu.get(gpu, ()), ctx))
    return hit[1]


def context_index(ctx, gpu: str) -> GpuIndex:
    """``gpu_index`` memoised on the decision's context (``Context._indexes``)."""
    hit = ctx._indexes.get(gpu)
    if hit is None:
        hit = ctx._indexes[gpu] = gpu_index(ctx, gpu)
    return hit


class Quotes:
    """One cluster against every offering of its GPU (``GpuIndex`` order): rows of the GPU's
    result matrices. ``objective`` / ``monthly`` are NaN where the pair has no price."""

    __slots__ = ("index", "objective", "monthly", "reserved", "on_demand", "spot", "gpus",
                 "feasible", "exact")

    def __init__(self, index: GpuIndex, objective, monthly, reserved, on_demand, spot, gpus,
                 feasible, exact: dict):
        self.index = index
        self.objective, self.monthly = objective, monthly
        self.reserved, self.on_demand, self.spot = reserved, on_demand, spot
        self.gpus, self.feasible = gpus, feasible
        #: column -> the Candidate ``evaluate`` built for pairs priced by it
        self.exact = exact

    @property
    def offerings(self) -> tuple[Offering, ...]:
        return self.index.offerings

    def order(self) -> np.ndarray:
        """Columns in candidate order (``Candidate.sort_key``: cheapest first, then fewer
        GPUs, then cloud / region / instance type, then catalog order)."""
        obj = self.objective
        none = np.isnan(obj)
        return np.lexsort((np.arange(len(obj)), self.index.name_rank, self.gpus,
                           np.where(none, 0.0, obj), none))

    def candidate(self, spec: ClusterSpec, j, ctx) -> Candidate:
        """The full candidate of column ``j`` (``evaluate``; the one the pricing already built,
        when it did)."""
        c = self.exact.get(int(j))
        if c is None:
            forced = get_template(spec.template) if spec.template else None
            c = evaluate(spec, self.offerings[j], ctx, forced)
        return c

    def rejection(self, spec: ClusterSpec, j, ctx) -> str:
        """Why column ``j`` was rejected: the first rule it breaks (the full candidate's reason
        when a rule about its price or template decided it)."""
        c = self.exact.get(int(j))
        if c is not None:
            return c.rejected
        why = rule_rejection(spec, self.offerings[j], ctx).rejected
        return why if why is not None else self.candidate(spec, j, ctx).rejected


# ---- the vectorised cost model ----------------------------------------------------------------
def _better(a, b, ra, oa, rb, ob):
    """``blend.better(a, b, (ra, oa), (rb, ob))`` element-wise."""
    tol = TIE * np.maximum(np.maximum(1.0, np.abs(a)), np.abs(b))
    lt = a < b - tol
    tie = ~lt & ~(a > b + tol)
    return lt | (tie & ((ra < rb) | ((ra == rb) & (oa < ob))))


def _strictly_better(a, b):
    """``blend.better(a, b)`` without a tie-break (a tie is not better)."""
    return a < b - TIE * np.maximum(np.maximum(1.0, np.abs(a)), np.abs(b))


class _Best:
    """A sequential "cheapest so far" over blends, element-wise (``Blend.beats``)."""

    __slots__ = ("has", "val", "monthly", "r", "o", "s", "first_spot", "empty")
    _FIELDS = ("has", "val", "monthly", "r", "o", "s", "first_spot")

    def __init__(self, shape):
        self.has = np.zeros(shape, dtype=bool)
        self.val = np.zeros(shape)
        self.monthly = np.zeros(shape)
        self.r = np.zeros(shape)
        self.o = np.zeros(shape)
        self.s = np.zeros(shape)
        self.first_spot = np.zeros(shape, dtype=bool)
        #: nothing offered has won yet (``has`` all False): the first offer wins where valid
        self.empty = True

    def offer(self, valid, val, monthly, r, o, s, first_spot, *, tie_break: bool = True):
        if self.empty:   # ~has everywhere: no comparison to make
            wins = valid
        elif tie_break:
            wins = valid & (~self.has | _better(val, self.val, r, o, self.r, self.o))
        else:
            wins = valid & (~self.has | _strictly_better(val, self.val))
        if not wins.any():
            return
        self.empty = False
        self.val = np.where(wins, val, self.val)
        self.monthly = np.where(wins, monthly, self.monthly)
        self.r = np.where(wins, r, self.r)
        self.o = np.where(wins, o, self.o)
        self.s = np.where(wins, s, self.s)
        self.first_spot = np.where(wins, first_spot, self.first_spot)
        self.has = self.has | wins

    def take(self, other: "_Best", where) -> None:
        """Element-wise: where ``where``, this becomes ``other``."""
        if not where.any():
            return
        for k in self._FIELDS:
            setattr(self, k, np.where(where, getattr(other, k), getattr(self, k)))
        self.empty = self.empty and other.empty


def _totals(seq, n, h, rates, lam, lost, gang):
    """``costmodel.blend_totals`` of the assignment ``seq`` (one model per node step) for every
    pair of a block, in its order of operations. ``n`` / ``h``: per step node counts and hours
    ((clusters, 1) or (clusters, offerings)); ``rates``: model -> (1, offerings) rates;
    ``lam``: (1, offerings); ``gang``: True / False, or per pair (one-step blocks)."""
    res = od = sp = rework = 0.0
    for k, m in enumerate(seq):
        if m == _R:
            res = res + n[k] * rates[_R] * HOURS_PER_MONTH
        elif m == _O:
            od = od + n[k] * rates[_O] * h[k]
        else:
            sp = sp + n[k] * rates[_S] * h[k]
    if _S in seq:
        alone = together = 0.0
        if gang is not True:     # each interrupted node redoes its own work
            for k, m in enumerate(seq):
                if m == _S:
                    alone = alone + lam * h[k] * n[k] * lost * rates[_S]
        if gang is not False:    # a gang: one interruption stalls every running node
            x = a = 0.0
            last = len(seq) - 1
            for k, m in enumerate(seq):
                if m == _S:
                    x = x + n[k]
                a = a + n[k] * rates[m]
                dh = h[k] - (h[k + 1] if k < last else 0.0)
                together = together + lam * dh * x * lost * a
        rework = (alone if gang is False else together if gang is True
                  else np.where(gang, together, alone))
    return res, od, sp, rework


_EFFECTS: dict = {}


def _template_effects(ctx, key: tuple) -> dict:
    """(rdma, all spot) -> (spot purchase rule, on-demand cache node) of the template
    ``choose_template`` picks for pairs of a key (nodes, distributed, gang, priority,
    interruptible, has a dataset, its TB), memoised per template set."""
    full = (id(cluster_templates()), ctx.stack.is_prod) + key
    hit = _EFFECTS.get(full)
    if hit is not None:
        return hit
    rules = ctx.rules
    nodes, distributed, gang, priority, interruptible, has_ds, tb = key
    spot_allowed = interruptible and priority <= rules.reserved_above_priority
    effects = {}
    for rdma in (False, True):
        for spot in (False, True):
            t = choose_template(Facts(
                nodes=nodes, distributed=distributed, rdma=rdma, rdma_fabric=gang and rdma,
                dataset=has_ds, dataset_tb=tb, spot=spot, interruptible=interruptible,
                spot_allowed=spot_allowed, priority=priority, production=ctx.stack.is_prod))
            effects[rdma, spot] = (t.purchase_rule == SPOT, t.cache_node == ON_DEMAND)
    if len(_EFFECTS) > 4096:
        _EFFECTS.clear()
    _EFFECTS[full] = effects
    return effects


def _feeds(seq) -> tuple:
    """The scans of ``_price_block`` an assignment is offered to (its allowed_models)."""
    if _S in seq:
        return (SPOT,)
    return ("guar", "steady") if seq[0] == _R else ("steady",)


class _Block(NamedTuple):
    """Clusters x offerings priced together: per step (clusters, 1) or (clusters, offerings)
    node counts ``n`` and hours ``h``, the nodes per pair, gang (a bool, or per pair),
    and per-cluster (clusters, 1) columns."""

    cols: np.ndarray
    n: list
    h: list
    nodes: np.ndarray
    gang: object
    lost: np.ndarray
    guaranteed: np.ndarray
    spot_band: np.ndarray
    egress: object


def _price_block(ctx, idx: GpuIndex, b: _Block):
    """The band's cheapest blend per pair under the best term (``candidates.evaluate``'s term
    loop around ``price_band`` / ``band_blend``), before templates; and per pair the monthly
    cost of an all-spot blend with its first node on-demand (a template's cache node)."""
    rules, cols = ctx.rules, b.cols
    n, h, nodes, gang = b.n, b.h, b.nodes, b.gang
    guaranteed, spot_band = b.guaranteed, b.spot_band
    C, m = len(b.lost), len(n)
    # a gang without RDMA that the rules allow runs on TCP and pays the communication overhead
    # (a gang the rules reject for lacking RDMA is priced without it, as evaluate does)
    share = rules.tcp_communication_share
    tcp = None
    if share > 0 and gang is not False:
        tcp = ~idx.has_rdma[cols][None, :] & (not rules.require_rdma_for_distributed) & (
            nodes <= rules.max_nodes_without_rdma)
        if gang is not True:
            tcp = tcp & gang
    od_rate = idx.on_demand[cols][None, :]
    sp_rate = idx.spot[cols][None, :]
    lam = idx.interruptions[cols][None, :]
    priced_o, priced_s = ~np.isnan(od_rate), ~np.isnan(sp_rate)
    shape = (C, len(cols))
    zero = np.zeros((C, 1))
    best: Optional[_Best] = None
    seqs = _assignments(tuple([_ALL] * m))
    # which of the three scans below has a cluster to offer to (``_feeds``)
    feeds = {"guar": bool(guaranteed.any()), SPOT: bool((~guaranteed & spot_band).any()),
             "steady": not bool(guaranteed.all())}
    for term in ctx.terms:
        r_rate = idx.reserved[term][cols][None, :]
        lf = idx.lock_in[term][cols][None, :]
        priced_r = ~np.isnan(r_rate)
        rates = {_R: r_rate, _O: od_rate, _S: sp_rate}
        steady, with_spot, guar = _Best(shape), _Best(shape), _Best(shape)
        for seq in seqs:
            if not any(feeds[k] for k in _feeds(seq)):
                continue   # every offer would be invalid: nothing to price
            res, od, sp, rework = _totals(seq, n, h, rates, lam, b.lost, gang)
            comm = 0.0
            if tcp is not None:
                comm = np.where(tcp, (od + sp + rework) * share / (1.0 - share), 0.0)
            monthly = res + od + sp + rework + b.egress + comm
            val = monthly + res * (lf - 1.0)
            cr = sum((n[j] for j, x in enumerate(seq) if x == _R), zero)
            co = sum((n[j] for j, x in enumerate(seq) if x == _O), zero)
            cs = sum((n[j] for j, x in enumerate(seq) if x == _S), zero)
            priced = np.ones((1, len(cols)), dtype=bool)
            if _R in seq:
                priced = priced & priced_r
            if _O in seq:
                priced = priced & priced_o
            if _S in seq:
                priced = priced & priced_s
            args = (val, monthly, cr, co, cs, seq[0] == _S)
            # allowed_models: guaranteed work reserves the baseline and never goes to spot;
            # the spot band may use every model; the rest reserved or on-demand.
            if seq[0] == _R and _S not in seq:
                guar.offer(guaranteed & priced, *args)
            if _S in seq:
                with_spot.offer(~guaranteed & spot_band & priced, *args)
            else:
                steady.offer(~guaranteed & priced, *args)
        # band_blend: the cheapest steady blend, or (spot band with a spot price) the cheapest
        # with spot when it beats it; guaranteed work: its cheapest reserved-baseline blend
        term_best = steady
        term_best.take(with_spot, with_spot.has & (~steady.has | _better(
            with_spot.val, steady.val, with_spot.r, with_spot.o, steady.r, steady.o)))
        term_best.take(guar, guaranteed)
        if best is None:
            best = term_best
        else:   # evaluate's term loop: a later term only when strictly cheaper
            best.take(term_best, term_best.has & (~best.has | _strictly_better(
                term_best.val, best.val)))
    # A template's on-demand cache node (candidates.finish, cache_on_demand): a blend whose
    # first step is spot is all spot (models are monotone), and node 1 then runs on-demand:
    # blocks (1 node on-demand, the rest of step 1 on spot, the other steps on spot). A step
    # of no node adds nothing, and equal hours as separate gang levels add the same (the first
    # level has no spot node yet).
    def cache_monthly():   # only asked for when a template puts a cache node on a pair
        cn = [np.ones_like(n[0]), n[0] - 1.0] + n[1:]
        ch = [h[0], h[0]] + h[1:]
        cseq = (_O,) + (_S,) * m
        res, od, sp, rework = _totals(cseq, cn, ch, {_O: od_rate, _S: sp_rate}, lam, b.lost,
                                      gang)
        comm = 0.0
        if tcp is not None:
            comm = np.where(tcp, (od + sp + rework) * share / (1.0 - share), 0.0)
        return np.broadcast_to(res + od + sp + rework + b.egress + comm, shape)
    return best, cache_monthly


def _template_effects_on(ctx, idx: GpuIndex, cols, best: "_Best", nodes, keys: list,
                         gpn_cols: dict) -> tuple[np.ndarray, np.ndarray]:
    """What the chosen templates do to the price (``candidates.apply_template``): (pairs
    ``evaluate`` must price: a spot purchase rule over a blend that is not all spot; pairs
    whose first node becomes an on-demand cache node). ``keys[i]``: node size -> the template
    key of cluster i at that size; ``gpn_cols``: node size -> positions in ``cols``."""
    all_spot = best.has & (best.s == nodes)
    cache_case = best.has & best.first_spot & ~np.isnan(idx.on_demand[cols])[None, :] & (
        nodes >= 2)
    rdma = idx.has_rdma[cols].astype(np.int64)
    changed = np.zeros(best.has.shape, dtype=bool)
    cached = np.zeros(best.has.shape, dtype=bool)
    for i, by_g in enumerate(keys):
        for g, key in by_g.items():
            eff = _template_effects(ctx, key)
            if not any(a or c for a, c in eff.values()):
                continue
            pos = gpn_cols[g]
            # per pair its (rdma, all spot) cell of the template's effects: a spot purchase
            # rule changes the pair unless it is all spot already (and has no cache node); an
            # on-demand cache node alone caches it where the blend starts on spot
            rule, cache = _effect_tables(eff)
            spot = all_spot[i, pos]
            cell = rdma[pos] * 2 + spot
            changed[i, pos] |= rule[cell] & (~spot | cache[cell])
            cached[i, pos] |= ~rule[cell] & cache[cell] & cache_case[i, pos]
    return changed, cached & ~changed


def _effect_tables(eff: dict) -> tuple[np.ndarray, np.ndarray]:
    """``_template_effects``' answer as two lookup tables indexed by rdma * 2 + all spot."""
    cells = [eff[bool(r), bool(sp)] for r in (0, 1) for sp in (0, 1)]
    return (np.array([a for a, _ in cells], dtype=bool),
            np.array([c for _, c in cells], dtype=bool))


# ---- rules that reject a pair before its price matters ----------------------------------------
def _rules_ok(ctx, idx: GpuIndex, specs: list[ClusterSpec], cols: np.ndarray, nodes,
              gpus, gang) -> np.ndarray:
    """Pairs that no rule of ``candidates.rule_rejection`` rejects (region, Local Zones only,
    residency, cross-cloud data, RDMA, quota, a priced dataset move), clusters x offerings
    ``cols``."""
    rules, stack = ctx.rules, ctx.stack
    ok = (idx.enabled[cols] & idx.zoned[cols])[None, :] & ~(gpus > idx.quota[cols][None, :])
    if gang is not False:
        has = idx.has_rdma[cols][None, :]
        fabric_ok = (has if rules.require_rdma_for_distributed
                     else has | (nodes <= rules.max_nodes_without_rdma))
        ok = ok & (fabric_ok if gang is True else fabric_ok | ~gang)
    ok = np.array(np.broadcast_to(ok, (len(specs), len(cols))))
    for i, spec in enumerate(specs):
        if spec.regions:
            ok[i] &= idx.mask(("residency", spec.regions), lambda: np.array(
                [matches_residency(o.region, spec.regions) for o in idx.offerings], dtype=bool))[cols]
        if spec.dataset:
            ds = stack.storage_by_name(spec.dataset)
            if ds is not None and not rules.allow_cross_cloud_data:
                ok[i] &= idx.mask(("home", ds.home_cloud), lambda: np.array(
                    [o.cloud == ds.home_cloud for o in idx.offerings], dtype=bool))[cols]
            ok[i] &= _dataset_vector(ctx, idx, spec.dataset, 1)[cols]
    return ok


def _dataset_vector(ctx, idx: GpuIndex, dataset: str, part: int) -> np.ndarray:
    """Per offering: the dataset's move per month (``part`` 0) or whether it has a price (1);
    memoised per decision (the stack's storage says where the dataset lives)."""
    key = (id(idx), dataset, part)
    hit = ctx._vectors.get(key)
    if hit is None:
        moves = [ctx.gravity(dataset, o.cloud, o.region) for o in idx.offerings]
        ctx._vectors[(id(idx), dataset, 0)] = np.array([m[0] for m in moves])
        ctx._vectors[(id(idx), dataset, 1)] = np.array([m[1] is None for m in moves],
                                                       dtype=bool)
        hit = ctx._vectors[key]
    return hit


def _egress(ctx, idx: GpuIndex, specs: list[ClusterSpec], cols):
    """(clusters, offerings) monthly dataset moves, or 0.0 when no cluster has a dataset."""
    if not any(s.dataset for s in specs):
        return 0.0
    zero = np.zeros(len(cols))
    return np.stack([_dataset_vector(ctx, idx, s.dataset, 0)[cols] if s.dataset else zero
                     for s in specs])


# ---- entry ------------------------------------------------------------------------------------
def price_clusters(specs, ctx) -> list[Quotes]:
    """Quotes of every cluster against every offering of its GPU (in ``specs`` order)."""
    by_gpu: dict[str, list[int]] = {}
    for i, spec in enumerate(specs):
        by_gpu.setdefault(spec.gpu, []).append(i)
    out: list[Optional[Quotes]] = [None] * len(specs)
    with np.errstate(all="ignore"):
        for gpu, members in by_gpu.items():
            rows_specs = [specs[i] for i in members]
            for row, q in enumerate(_price_gpu(ctx, context_index(ctx, gpu), rows_specs)):
                out[members[row]] = q
    return out


def _price_gpu(ctx, idx: GpuIndex, specs: list[ClusterSpec]) -> list[Quotes]:
    """Every cluster of ``specs`` (all of the index's GPU) against every offering of it: the
    one-step clusters in one block (node counts per pair), clusters with a demand profile in
    blocks per node size, number of node steps and gang."""
    grid = _Grid(ctx, idx, specs)
    # rows evaluate prices whole: a forced template decides feasibility and price per pair; a
    # work window is priced over the window (gpulease/policy/windows.py), not by this pass
    slow = {i for i, s in enumerate(specs) if s.template or getattr(s, "window", None)}
    single = [i for i, s in enumerate(specs) if not s.demand and i not in slow]
    if single:
        _price_single(grid, single)
    _price_profiled(grid, [i for i, s in enumerate(specs) if s.demand and i not in slow], slow)
    for i in range(len(specs)):
        grid.evaluate(i, range(len(idx.offerings)) if i in slow else list(grid.exact[i]))
    return grid.quotes()


class _Grid:
    """One GPU's clusters x offerings: what the vectorised pass reads per pair (node counts,
    gangs, the priority bands) and what it finds (the result matrices ``Quotes`` are rows of)."""

    def __init__(self, ctx, idx: GpuIndex, specs: list[ClusterSpec]):
        rules = ctx.rules
        self.ctx, self.idx, self.specs = ctx, idx, specs
        C, N = len(specs), len(idx.offerings)
        self.obj = np.full((C, N), _NAN)
        self.monthly = np.full((C, N), _NAN)
        self.cnt = [np.zeros((C, N), dtype=np.int64) for _ in range(3)]
        self.feasible = np.zeros((C, N), dtype=bool)
        #: per cluster: column -> the Candidate ``evaluate`` built (None: to be built)
        self.exact: list[dict] = [{} for _ in specs]
        want = np.array([s.gpus for s in specs], dtype=np.int64)[:, None]
        self.nodes = -(-want // idx.gpn[None, :])            # (C, N)
        self.gpus = self.nodes * idx.gpn[None, :]
        dist = np.array([s.distributed is not None for s in specs])[:, None]
        dist_v = np.array([bool(s.distributed) for s in specs])[:, None]
        self.distributed = np.where(dist, dist_v, self.nodes > 1)
        self.gang = self.distributed & (self.nodes > 1)
        self.prio = np.array([s.priority for s in specs])
        self.interruptible = np.array([s.interruptible for s in specs])
        self.lost = np.array([((s.checkpoint_minutes or 0.0) / 2.0 + rules.spot_restart_minutes)
                              / 60.0 for s in specs])
        self.guaranteed = self.prio > rules.reserved_above_priority
        self.spot_band = self.interruptible & (self.prio < rules.spot_below_priority)
        datasets = [ctx.stack.storage_by_name(s.dataset) if s.dataset else None for s in specs]
        self.ds_key = [(False, 0.0) if d is None else (True, d.size_tb) for d in datasets]

    def template_keys(self, i: int) -> dict:
        """Node size -> the ``_template_effects`` key of cluster ``i`` on offerings of it."""
        out = {}
        for g, cols in self.idx.by_gpn.items():
            c = cols[0]
            out[g] = (int(self.nodes[i, c]), bool(self.distributed[i, c]),
                      bool(self.gang[i, c]), int(self.prio[i]),
                      bool(self.interruptible[i])) + self.ds_key[i]
        return out

    def block(self, rows, cols, node_steps, hours, nodes, gang) -> "_Block":
        """The ``_Block`` of clusters ``rows`` x offerings ``cols``."""
        bspecs = [self.specs[i] for i in rows]
        return _Block(cols, node_steps, hours, nodes, gang, self.lost[rows][:, None],
                      self.guaranteed[rows][:, None], self.spot_band[rows][:, None],
                      _egress(self.ctx, self.idx, bspecs, cols))

    def store(self, rows, cols, best, ok, changed, cached, cache_monthly, nodes) -> None:
        ix = np.ix_(rows, cols)
        # the cache node's blend is all spot: nothing reserved, so its objective is its bill
        if cached.any():
            cm = cache_monthly()
            month = np.where(cached, cm, best.monthly)
            self.obj[ix] = np.where(best.has, np.where(cached, cm, best.val), _NAN)
        else:
            month = best.monthly
            self.obj[ix] = np.where(best.has, best.val, _NAN)
        self.monthly[ix] = np.where(best.has, month, _NAN)
        self.cnt[0][ix] = best.r
        self.cnt[1][ix] = np.where(cached, 1, best.o)
        self.cnt[2][ix] = np.where(cached, nodes - 1, best.s)
        self.feasible[ix] = best.has & ok
        for j, c in zip(*np.nonzero(changed)):
            self.exact[int(rows[j])][int(cols[c])] = None   # priced below by evaluate

    def evaluate(self, i: int, todo) -> None:
        """Price cluster ``i`` on columns ``todo`` with ``evaluate`` (the full candidate)."""
        if not todo:
            return
        spec, ctx = self.specs[i], self.ctx
        forced = get_template(spec.template) if spec.template else None
        obj, monthly, cnt, feasible = self.obj, self.monthly, self.cnt, self.feasible
        for c in todo:
            cand = evaluate(spec, self.idx.offerings[c], ctx, forced)
            self.exact[i][c] = cand
            mo = cand.objective
            obj[i, c] = _NAN if mo is None else mo
            monthly[i, c] = _NAN if cand.costs is None else cand.monthly_usd
            p = cand.purchase
            cnt[0][i, c], cnt[1][i, c], cnt[2][i, c] = (
                (p.reserved, p.on_demand, p.spot) if p is not None else (0, 0, 0))
            feasible[i, c] = cand.feasible

    def quotes(self) -> list[Quotes]:
        cnt = self.cnt
        return [Quotes(self.idx, self.obj[i], self.monthly[i], cnt[0][i], cnt[1][i], cnt[2][i],
                       self.gpus[i], self.feasible[i], self.exact[i])
                for i in range(len(self.specs))]


def _price_single(grid: _Grid, single: list[int]) -> None:
    """The one-step clusters ``single`` against every offering, in one block."""
    ctx, idx, specs = grid.ctx, grid.idx, grid.specs
    rows = np.array(single)
    cols = np.arange(len(idx.offerings))
    bspecs = [specs[i] for i in single]
    nodes = grid.nodes[rows].astype(float)
    gang = grid.gang[rows]
    gang = True if gang.all() else False if not gang.any() else gang
    block = grid.block(rows, cols, [nodes], [np.array([[s.hours_per_month] for s in bspecs])],
                       nodes, gang)
    best, cache_monthly = _price_block(ctx, idx, block)
    changed, cached = _template_effects_on(ctx, idx, cols, best, nodes,
                                           [grid.template_keys(i) for i in single],
                                           {g: c for g, c in idx.by_gpn.items()})
    grid.store(rows, cols, best, _rules_ok(ctx, idx, bspecs, cols, nodes, grid.gpus[rows], gang),
               changed, cached, cache_monthly, nodes)


def _price_profiled(grid: _Grid, profiled: list[int], slow: set) -> None:
    """The clusters with a demand profile, in blocks per node size, number of node steps and
    gang; a profile whose steps share their hours is added to ``slow`` (``evaluate`` prices
    it)."""
    ctx, idx, specs = grid.ctx, grid.idx, grid.specs
    for g, cols in idx.by_gpn.items():
        blocks: dict[tuple, list] = {}
        for i in profiled:
            steps = ctx.node_steps(specs[i], g)
            if any(a.hours_per_month == b.hours_per_month for a, b in zip(steps, steps[1:])):
                slow.add(i)  # equal hours merge into one gang level: evaluate's loop
                continue
            st = tuple((x.nodes, x.hours_per_month) for x in steps)
            blocks.setdefault((len(st), bool(grid.gang[i, cols[0]])), []).append((i, st))
        for (m, gang), members in blocks.items():
            rows = np.array([i for i, _ in members])
            bspecs = [specs[i] for i in rows]
            nodes = grid.nodes[rows][:, cols[:1]].astype(float)
            block = grid.block(
                rows, cols, [np.array([[st[s][0]] for _, st in members], dtype=float)
                             for s in range(m)],
                [np.array([[st[s][1]] for _, st in members], dtype=float) for s in range(m)],
                nodes, gang)
            best, cache_monthly = _price_block(ctx, idx, block)
            changed, cached = _template_effects_on(
                ctx, idx, cols, best, nodes, [{g: grid.template_keys(i)[g]} for i in rows],
                {g: np.arange(len(cols))})
            grid.store(rows, cols, best, _rules_ok(ctx, idx, bspecs, cols, nodes,
                                                   grid.gpus[rows][:, cols], gang), changed,
                       cached, cache_monthly, nodes)
