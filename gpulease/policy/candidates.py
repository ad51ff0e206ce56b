"""Candidates: every offering a cluster could run on, priced by the cost model or rejected with why."""
from __future__ import annotations

import dataclasses
import datetime as dt
import math
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

from gpulease.catalog import TIER_CLASSES, Catalog
from gpulease.model import (COMMITMENT_TERMS, TERM_MONTHS, ClusterSpec, CostBreakdown, NodeBlock,
                            NodeStep, Offering, PurchaseMix, StackSpec, TermOption)
from gpulease.policy.blend import Blend, better, blends, cheapest, objective
from gpulease.policy.costmodel import CostInputs, Rates, blend_costs, rates_of, spot_rate
from gpulease.policy.rules import PolicyRules
from gpulease.policy.templates import ClusterTemplate, Facts, choose_template, get_template
from gpulease.purchase import NODE_MODELS, ON_DEMAND, RESERVED, SPOT, WINDOW


@dataclass(frozen=True)
class Candidate:
    """One offering for one cluster: its shape, purchase mix and costs, or why it cannot be used."""

    offering: Offering
    nodes: int
    gpus: int
    distributed: bool
    network: str
    purchase: Optional[PurchaseMix]
    costs: Optional[CostBreakdown]
    template: Optional[str]
    #: why the purchase mix is what it is (key for the rationale, see explanation._purchase_text).
    basis: str
    #: None = feasible; else the reason ("residency (...)", "quota (...)", "no RDMA (...)", ...).
    rejected: Optional[str] = None
    #: monthly cost of the purchase mix the band compared against (spot vs steady), if any.
    compared_usd: Optional[float] = None
    #: commitment term the reserved rate is priced at.
    term: str = "1y"
    #: hourly rate of a reserved node (commitment, or on-demand for a plain reservation).
    reserved_rate: Optional[float] = None
    #: the nodes as (node step, first node, nodes, purchase model) runs
    #: (``Context.blocks_of`` turns them into NodeBlocks with their cost shares).
    layout: tuple = ()
    #: what the choice minimises: monthly_usd, or with commitment_term auto the average per
    #: month over the horizon (lock-in beyond it included).
    objective_usd: Optional[float] = None
    #: months billed / horizon of the reserved part (1.0 = no lock-in beyond the horizon).
    lock_in_factor: float = 1.0
    #: a window's choice: (the WindowOption kept, every option priced, the allowed models)
    #: (``gpulease.policy.window_choice``); None = a monthly load.
    window: Optional[tuple] = None

    @property
    def feasible(self) -> bool:
        return self.rejected is None

    @property
    def monthly_usd(self) -> Optional[float]:
        return None if self.costs is None else self.costs.monthly_usd

    @property
    def objective(self) -> Optional[float]:
        """The value the environment solve minimises (monthly_usd unless the term is auto)."""
        if self.costs is None:
            return None
        return self.monthly_usd if self.objective_usd is None else self.objective_usd

    @property
    def hourly_usd(self) -> float:
        if self.purchase is None:
            return 0.0
        if self.window is not None:
            opt = self.window[0]
            return opt.total_usd * opt.nodes / opt.billed_node_hours if opt.billed_node_hours \
                else 0.0
        o = self.offering
        p = self.purchase
        r = self.reserved_rate
        return ((p.reserved * r if p.reserved else 0.0)
                + (p.on_demand * o.price(ON_DEMAND) if p.on_demand else 0.0)
                + (p.spot * spot_rate(o) if p.spot else 0.0))

    @property
    def quota_key(self) -> tuple[str, str]:
        return (self.offering.cloud, self.offering.region)

    @property
    def sort_key(self) -> tuple:
        """Deterministic order: cheapest first, then fewer GPUs, then by name."""
        m = self.objective
        return (m is None, m if m is not None else 0.0, self.gpus, self.offering.cloud,
                self.offering.region, self.offering.instance_type)


def billed_months(term: str, horizon_months: int) -> int:
    """Months a commitment bills to cover ``horizon_months``: whole terms (a 3y commitment
    bills 36 months even if the horizon is 18; a 1y one renewed for 18 months bills 24)."""
    m = TERM_MONTHS[term]
    return 0 if not m else math.ceil(horizon_months / m) * m


def matches_residency(region: str, allow: tuple[str, ...]) -> bool:
    """Residency entries are exact regions or prefixes ("europe-", "eu")."""
    return not allow or any(region == a or region.startswith(a) for a in allow)


@dataclass
class Context:
    """What evaluating candidates needs, computed once per decision."""

    stack: StackSpec
    catalog: Catalog
    rules: PolicyRules
    interruptions: dict = field(default_factory=dict)
    by_gpu: dict = field(default_factory=dict)
    #: quotes and spot-risk records (``gpulease.quotes.model.QuoteBook``; :meth:`build` defaults
    #: to the shipped data + cache); None = none known.
    quotes: Optional[object] = None
    #: the time windows are judged at (aware UTC; decide's ``now``).
    now: Optional[object] = None
    _gravity: dict = field(default_factory=dict)
    _steps: dict = field(default_factory=dict)
    _spot: dict = field(default_factory=dict)
    #: GPU model -> its ``gpulease.policy.pricing.GpuIndex`` for this decision
    #: (``pricing.context_index``)
    _indexes: dict = field(default_factory=dict)
    _templates: dict = field(default_factory=dict)
    _vectors: dict = field(default_factory=dict)
    _risk: dict = field(default_factory=dict)

    def shape_of(self, spec: ClusterSpec, c: Candidate) -> "Shape":
        """What pricing a candidate again needs (decisions, alternatives, term options); kept
        off the candidates, of which a plan holds tens of thousands."""
        gang = c.distributed and c.nodes > 1
        return Shape(spec=spec, offering=c.offering,
                     steps=self.node_steps(spec, c.offering.gpus_per_node), nodes=c.nodes,
                     gang=gang, tcp_gang=gang and c.network == "none",
                     egress=c.costs.egress_usd if c.costs is not None else 0.0,
                     interruptions=self.spot_risk(c.offering)[0])

    def inputs_of(self, spec: ClusterSpec, c: Candidate, spot: Optional[float] = None
                  ) -> CostInputs:
        """The cost-model inputs the candidate was priced with (``spot``: another spot rate)."""
        o = c.offering
        rates = Rates(c.reserved_rate, o.price(ON_DEMAND),
                      self.spot_rate(o) if spot is None else spot)
        return self.shape_of(spec, c).inputs(rates, self.rules)

    def blocks_of(self, spec: ClusterSpec, c: Candidate) -> tuple[NodeBlock, ...]:
        """The candidate's nodes by demand step and purchase model, with their cost shares."""
        return node_blocks(c.layout, self.inputs_of(spec, c))

    def spot_rate(self, offering: Offering) -> Optional[float]:
        """``costmodel.spot_rate`` memoised (a zone search; every cluster asks); None when the
        offering is not sold as spot."""
        hit = self._spot.get(id(offering))
        if hit is None or hit[0] is not offering:
            hit = self._spot[id(offering)] = (offering, spot_rate(offering))
        return hit[1]

    def spot_risk(self, offering: Offering) -> tuple[float, Optional[object]]:
        """Spot interruptions per node-hour for the offering, and the record they come from
        (``gpulease.quotes.model.SpotRisk``; None = not a per-offering figure): the stack's
        ``spot_interruptions_per_hour`` override, else the record of the offering's region and
        spot zone (the Spot Instance Advisor band, GCP's estimated uptime), else the catalog's
        figure for the cloud. Memoised per offering."""
        hit = self._risk.get(id(offering))
        if hit is not None and hit[0] is offering:
            return hit[1]
        default = self.interruptions.get(offering.cloud, 0.0)
        out: tuple = (default, None)
        if self.rules.spot_interruptions_per_hour is None and self.quotes is not None:
            rec = self.quotes.risk(offering.cloud, offering.region, offering.instance_type,
                                   offering.zone_for(SPOT))
            rate = rec.interruptions_per_hour if rec is not None else None
            if rate is not None:
                out = (rate, rec)
            elif rec is not None:
                out = (default, rec)     # a placement score / obtainability without a rate
        self._risk[id(offering)] = (offering, out)
        return out

    def node_steps(self, spec: ClusterSpec, gpus_per_node: int) -> tuple[NodeStep, ...]:
        """``spec.node_steps`` memoised per cluster and node size (every candidate asks)."""
        key = (spec.index, spec.name, gpus_per_node)
        hit = self._steps.get(key)
        if hit is None or hit[0] is not spec:
            hit = self._steps[key] = (spec, spec.node_steps(gpus_per_node))
        return hit[1]

    @property
    def terms(self) -> tuple[str, ...]:
        """Commitment terms each candidate is priced at: the stack's, or all with ``auto``."""
        t = self.rules.commitment_term
        return COMMITMENT_TERMS if t == "auto" else (t,)

    def lock_in_factor(self, offering: Offering, term: str, horizon: bool = False) -> float:
        """Months a commitment of ``term`` bills / the horizon (1.0 when nothing is committed).

        Only ``auto`` weighs lock-in in the decision (a fixed term is the stack's choice, and
        the decision is its monthly optimum); ``horizon=True`` asks for the horizon view anyway
        (the per-term comparison that `gpulease explain` shows).
        """
        if (self.rules.commitment_term != "auto" and not horizon) or not TERM_MONTHS[term] \
                or not offering.is_commitment(term):
            return 1.0
        return billed_months(term, self.rules.commitment_horizon_months) / float(
            self.rules.commitment_horizon_months)

    @classmethod
    def build(cls, stack: StackSpec, catalog: Catalog, rules: PolicyRules,
              quotes: Optional[object] = None, now: Optional[object] = None) -> "Context":
        """``quotes`` default: the shipped quote data plus the cache of live quotes (as
        :func:`gpulease.policy.decide` uses, so a context built here prices spot risk as the
        decision does); ``now`` default: the real time."""
        # Imported here for speed: the quote store (with the pydantic schema of its file) loads
        # when a decision runs, not with every command that imports the policy or the config.
        from gpulease.quotes.model import utc

        if quotes is None:
            from gpulease.quotes.store import load_book

            quotes = load_book(cache=True)
        now = utc(now) if now is not None else dt.datetime.now(dt.timezone.utc)
        ctx = cls(stack=stack, catalog=catalog, rules=rules, quotes=quotes, now=now)
        for cloud in stack.clouds:
            ctx.interruptions[cloud] = (rules.spot_interruptions_per_hour
                                        if rules.spot_interruptions_per_hour is not None
                                        else catalog.spot_interruptions_per_hour(cloud))
        ctx.by_gpu = _offerings_by_gpu(catalog, tuple(sorted(stack.clouds)),
                                       local_zone_regions(stack))
        return ctx

    def gravity(self, dataset: Optional[str], cloud: str, region: str) -> tuple[float, Optional[str]]:
        """Data-gravity cost per month of running in (cloud, region), or a 'no price' reason.

        Away from the dataset's home the cluster pays, every month, the egress of the whole
        dataset plus keeping the staged copy in STANDARD storage in its own region (the work
        bucket, ``gpulease.naming.needs_work_bucket``).
        """
        if not dataset:
            return 0.0, None
        key = (dataset, cloud, region)
        hit = self._gravity.get(key)
        if hit is not None:
            return hit
        ds = self.stack.storage_by_name(dataset)
        if ds is None or (ds.home_cloud, ds.home_region) == (cloud, region):
            out: tuple[float, Optional[str]] = (0.0, None)
        else:
            gb = ds.size_tb * 1000.0
            try:
                egress = self.catalog.egress_usd_per_gb(ds.home_cloud, ds.home_region, cloud, region)
                stage = self.catalog.storage_price(cloud, region, TIER_CLASSES[cloud][0])
                out = (gb * (egress + stage.usd_per_gb_month), None)
            except KeyError as exc:
                out = (0.0, f"no price ({str(exc).strip(chr(39))})")
        self._gravity[key] = out
        return out


_BY_GPU: dict = {}


def local_zone_regions(stack: StackSpec) -> tuple[tuple[str, str], ...]:
    """(cloud, region) pairs whose AWS Local Zones the stack allows
    (``gpulease:clouds.aws.local_zones``), sorted: part of every cache key of the offerings."""
    return tuple(sorted((c, r) for c, cs in stack.clouds.items()
                        for r in cs.local_zone_regions))


def _offerings_by_gpu(catalog: Catalog, clouds: tuple[str, ...],
                      local_zones: tuple[tuple[str, str], ...] = ()) -> dict:
    """GPU model -> the catalog's offerings of it on ``clouds``, in catalog order (memoised
    per catalog: every decision asks). An offering with Local Zones in a region of
    ``local_zones`` ((cloud, region) pairs) is a copy that allows them
    (``Offering.local_zones_allowed``); elsewhere its Local Zones are neither candidates nor
    priced (``Offering.regular_zones``)."""
    key = (id(catalog), clouds, local_zones)
    hit = _BY_GPU.get(key)
    if hit is None or hit[0] is not catalog:
        by_gpu: dict = {}
        allowed = set(local_zones)
        for o in catalog.offerings:
            if o.cloud in clouds:
                if (o.cloud, o.region) in allowed and o.local_zones:
                    o = dataclasses.replace(o, local_zones_allowed=True)
                by_gpu.setdefault(o.gpu, []).append(o)
        if len(_BY_GPU) > 32:
            _BY_GPU.clear()
        hit = _BY_GPU[key] = (catalog, {g: tuple(v) for g, v in by_gpu.items()})
    return hit[1]


def allowed_models(spec: ClusterSpec, steps, rates: Rates, rules: PolicyRules,
                   guaranteed_baseline: bool = True) -> list[frozenset]:
    """Purchase models each node step may take: the priority band's, among the priced ones.

    Above ``reserved_above_priority`` the baseline (first step) is reserved and the burst
    reserved or on-demand (never spot); in the spot band (interruptible, priority below
    ``spot_below_priority``) every model; otherwise reserved or on-demand.
    """
    priced = _PRICED[(rates.reserved is not None, rates.on_demand is not None,
                      rates.spot is not None)]
    if spec.priority > rules.reserved_above_priority:
        burst = _STEADY & priced
        base = _RESERVED & priced if guaranteed_baseline else burst
        return [base if st.step == 0 else burst for st in steps]
    spot_band = spec.interruptible and spec.priority < rules.spot_below_priority
    band = (_ALL if spot_band else _STEADY) & priced
    return [band] * len(steps)


_ALL = frozenset(NODE_MODELS)
_STEADY = frozenset((RESERVED, ON_DEMAND))
_RESERVED = frozenset((RESERVED,))
#: (reserved, on-demand, spot priced) -> the priced models
_PRICED = {(r, o, s): frozenset(m for m, ok in zip(NODE_MODELS, (r, o, s))
                                if ok)
           for r in (False, True) for o in (False, True) for s in (False, True)}


def band_blend(spec: ClusterSpec, steps, rates: Rates, rules: PolicyRules, k: CostInputs,
               lock_in_factor: float = 1.0) -> tuple[Optional[Blend], str, Optional[float]]:
    """The cheapest purchase the priority band allows (``gpulease.policy.blend``), with the basis
    the rationale names and the objective of what it was compared against (spot vs not)."""
    if spec.priority > rules.reserved_above_priority:
        if rates.reserved is None:
            return None, "no_commit_guaranteed", None
        best = cheapest(blends(steps, allowed_models(spec, steps, rates, rules), k,
                               lock_in_factor))
        return best, "guaranteed", None
    options = blends(steps, allowed_models(spec, steps, rates, rules), k, lock_in_factor)
    steady = with_spot = None
    for b in options:   # one pass: the cheapest with and without spot
        if b.has_spot:
            if with_spot is None or b.beats(with_spot):
                with_spot = b
        elif steady is None or b.beats(steady):
            steady = b
    spot_band = spec.interruptible and spec.priority < rules.spot_below_priority
    if not spot_band or rates.spot is None:
        if steady is None:
            return None, "no_price", None
        if spot_band:
            basis = "no_spot_price"
        elif rates.on_demand is None:
            basis = "only_commit_priced"
        elif rates.reserved is None:
            basis = "no_commit_price"
        elif len(steps) > 1:
            basis = "break_even"
        else:
            basis = ("break_even_reserved" if steady.models[0] == RESERVED
                     else "break_even_on_demand")
        return steady, basis, None
    if steady is None:
        return with_spot, SPOT, None
    best = with_spot if with_spot is not None and with_spot.beats(steady) else steady
    if best.has_spot:
        return best, SPOT, steady.objective
    # Spot is the band's default, but with the expected rework it costs more.
    return best, "spot_overridden", with_spot.objective


class Priced(NamedTuple):
    """The purchase of one candidate under one commitment term, templates applied."""

    term: str
    rates: Rates
    blend: Optional[Blend]
    basis: str
    compared: Optional[float]
    #: the nodes as (step, first node, nodes, model) runs, after the template's rules.
    layout: tuple = ()
    costs: Optional[CostBreakdown] = None
    objective: float = 0.0
    lock_in_factor: float = 1.0
    inputs: Optional[CostInputs] = None

    @property
    def purchase(self) -> Optional[PurchaseMix]:
        return layout_purchase(self.layout)


def layout_purchase(layout) -> Optional[PurchaseMix]:
    if not layout:
        return None
    counts = {RESERVED: 0, ON_DEMAND: 0, SPOT: 0}
    for _, _, n, m in layout:
        counts[m] += n
    return PurchaseMix(**counts)


def node_blocks(layout, k: Optional[CostInputs]) -> tuple[NodeBlock, ...]:
    """The layout's blocks with their cost shares (``blend_costs(per_block=True)``)."""
    if not layout:
        return ()
    _, shares = blend_costs(tuple((n, st.hours_per_month, m) for st, _, n, m in layout), k,
                            per_block=True)
    return tuple(NodeBlock(first=first, nodes=n, hours_per_month=st.hours_per_month, purchase=m,
                           part=st.part, step=st.step, costs=c)
                 for (st, first, n, m), c in zip(layout, shares))


def finish(steps, blend: Optional[Blend], k: CostInputs, *, spot_all: bool = False,
           cache_on_demand: bool = False) -> tuple[tuple, CostBreakdown]:
    """Layout and costs of a step assignment after the template's rules: ``spot_all`` = every
    node spot (a template that forces spot); ``cache_on_demand`` = node 1 (the cache node, up
    whenever the cluster is) runs on-demand instead of spot."""
    models = [SPOT] * len(steps) if spot_all else list(blend.models)
    layout = [(st, st.first, st.nodes, m) for st, m in zip(steps, models)]
    changed = spot_all
    if cache_on_demand and layout and layout[0][3] == SPOT:
        st, first, n, _ = layout[0]
        layout[0:1] = [(st, first, 1, ON_DEMAND)] + (
            [(st, first + 1, n - 1, SPOT)] if n > 1 else [])
        changed = True
    if not changed and blend is not None:
        return tuple(layout), blend.costs(k)
    total, _ = blend_costs(tuple((n, st.hours_per_month, m) for st, _, n, m in layout), k)
    return tuple(layout), total


class Rules(NamedTuple):
    """What the rules say about one pair before it is priced: the first rule it breaks (None
    = none), its network fabric, whether it runs as a TCP gang, its dataset's move per month."""

    rejected: Optional[str]
    network: str
    tcp_gang: bool
    egress: float


def rule_rejection(spec: ClusterSpec, o: Offering, ctx: Context) -> Rules:
    """The rules a pair must meet whatever it costs: region, residency, cross-cloud data,
    RDMA, quota, a priced dataset move (the first broken one is the reason)."""
    rules, stack = ctx.rules, ctx.stack
    cspec = stack.clouds[o.cloud]
    nodes = -(-spec.gpus // o.gpus_per_node)
    gpus = nodes * o.gpus_per_node
    distributed = spec.distributed if spec.distributed is not None else nodes > 1
    gang = distributed and nodes > 1
    reason: Optional[str] = None

    def reject(why: str) -> None:
        nonlocal reason
        if reason is None:
            reason = why

    if o.region not in cspec.regions:
        reject(f"region not enabled (add it to gpulease:clouds.{o.cloud}.regions)")
    if o.zones and not o.regular_zones:
        reject(f"local zones (offered only in AWS Local Zones {', '.join(o.local_zones)}; "
               f"gpulease:clouds.aws.local_zones does not list {o.region})")
    if not matches_residency(o.region, spec.regions):
        reject(f"residency ({o.region} is outside {', '.join(spec.regions)})")
    ds = stack.storage_by_name(spec.dataset) if spec.dataset else None
    if ds is not None and ds.home_cloud != o.cloud and not rules.allow_cross_cloud_data:
        reject(f"cross-cloud data (dataset {ds.name} lives on {ds.home}; "
               "gpulease:policy.allow_cross_cloud_data is false)")
    network, tcp_gang = "none", False
    if gang:
        if o.has_rdma:
            network = o.rdma
        elif rules.require_rdma_for_distributed:
            reject(f"no RDMA ({nodes}-node distributed job needs EFA or GPUDirect)")
        elif nodes > rules.max_nodes_without_rdma:
            reject(f"no RDMA ({nodes} nodes > gpulease:policy.max_nodes_without_rdma "
                   f"{rules.max_nodes_without_rdma})")
        else:
            tcp_gang = True
    quota = cspec.quota_gpus.get(o.region)
    if quota is not None and gpus > quota:
        reject(f"quota ({gpus} GPUs > {o.cloud}:{o.region} quota of {quota})")
    egress, why = ctx.gravity(spec.dataset, o.cloud, o.region)
    if why:
        reject(why)
    return Rules(reason, network, tcp_gang, egress)


def evaluate(spec: ClusterSpec, o: Offering, ctx: Context,
             forced: Optional[ClusterTemplate] = None) -> Candidate:
    """Price one offering for one cluster under every rule; the first broken rule rejects it.
    (The decision prices every pair with ``gpulease.policy.pricing`` and calls this for the pairs
    it shows or chooses; it gives the same objective, bit for bit.)"""
    rules, stack = ctx.rules, ctx.stack
    nodes = -(-spec.gpus // o.gpus_per_node)
    steps = ctx.node_steps(spec, o.gpus_per_node)
    gpus = nodes * o.gpus_per_node
    distributed = spec.distributed if spec.distributed is not None else nodes > 1
    gang = distributed and nodes > 1
    checked = rule_rejection(spec, o, ctx)
    reason: Optional[str] = checked.rejected
    network, tcp_gang, egress = checked.network, checked.tcp_gang, checked.egress
    ds = stack.storage_by_name(spec.dataset) if spec.dataset else None

    def reject(why: str) -> None:
        nonlocal reason
        if reason is None:
            reason = why

    if spec.window is not None:
        # Imported here for speed: window pricing (gpulease.policy.windows) loads only for a
        # stack with a window. window_choice imports nothing of this module (no loop).
        from gpulease.policy.window_choice import window_candidate

        w = window_candidate(spec, o, ctx, forced, nodes=nodes, distributed=distributed,
                             network=network, gang=gang, tcp_gang=tcp_gang, egress=egress,
                             ds=ds, rejected=reason)
        return Candidate(offering=o, nodes=nodes, gpus=gpus, distributed=distributed,
                         network=network, purchase=w.purchase, costs=w.costs,
                         template=w.template, basis=WINDOW, rejected=w.rejected, term=w.term,
                         window=w.window, objective_usd=w.objective_usd)
    shape = Shape(spec, o, steps, nodes, gang, tcp_gang, egress,
                  ctx.spot_risk(o)[0])
    best: Optional[Priced] = None
    for term in ctx.terms:   # "none", "1y", "3y": on a tie the shorter lock-in wins
        p = price_band(shape, term, rules, ctx.lock_in_factor(o, term), ctx.spot_rate(o))
        if best is None or (p.blend is not None and (
                best.blend is None or better(p.blend.objective, best.blend.objective))):
            best = p
    term, rates, basis, compared = best.term, best.rates, best.basis, best.compared
    blend = best.blend
    mix = blend.purchase if blend is not None else None
    spot_allowed = spec.interruptible and spec.priority <= rules.reserved_above_priority
    facts = Facts(nodes=nodes, distributed=distributed, rdma=o.has_rdma,
                  rdma_fabric=network != "none", dataset=bool(spec.dataset),
                  dataset_tb=ds.size_tb if ds is not None else 0.0,
                  spot=bool(mix and mix.spot == nodes), interruptible=spec.interruptible,
                  spot_allowed=spot_allowed, priority=spec.priority,
                  production=stack.is_prod)
    if forced is not None:
        tmpl = forced
        unmet = tmpl.unmet(facts)
        if unmet:
            reject(f"template {tmpl.name} needs {' and '.join(unmet)}")
    else:
        tmpl = choose_template(facts)
    priced = apply_template(shape, best, tmpl, rules, spot_allowed)
    if priced.basis == "no_spot_for_template":
        reject(f"not sold ({o.unavailable(SPOT)})" if not o.buyable(SPOT)
               else "no price (no spot price)")
        priced = apply_template(shape, best, None, rules, spot_allowed)
    if not priced.layout:
        reject(_unpriced(spec, o, basis, term, rules))
    return Candidate(offering=o, nodes=nodes, gpus=gpus, distributed=distributed,
                     network=network, purchase=priced.purchase, costs=priced.costs,
                     template=tmpl.name, basis=priced.basis, rejected=reason,
                     compared_usd=priced.compared, term=term, reserved_rate=rates.reserved,
                     layout=priced.layout, objective_usd=priced.objective,
                     lock_in_factor=priced.lock_in_factor)


def _unpriced(spec: ClusterSpec, o: Offering, basis: str, term: str, rules: PolicyRules) -> str:
    """Why no purchase the band allows has a price: a model the offering is not sold with
    (``Offering.unavailable``, from the catalog's purchase options) or a missing price."""
    if basis == "no_commit_guaranteed":
        if not o.buyable(RESERVED):
            return (f"not sold ({o.unavailable(RESERVED)}; priority {spec.priority} > "
                    f"{rules.reserved_above_priority} needs guaranteed capacity)")
        which = "1y or 3y" if rules.commitment_term == "auto" else term
        return (f"no price (no {which} commitment price; priority {spec.priority} > "
                f"{rules.reserved_above_priority} needs guaranteed capacity)")
    unsold = [m for m in (ON_DEMAND, RESERVED) if not o.buyable(m)]
    if unsold:
        why = o.unavailable(*unsold)
        if RESERVED not in unsold:
            why += "; the catalog has no commitment price for it"
        if o.buyable(SPOT):
            why += "; spot is not allowed for this cluster's priority or checkpointing"
        return f"not sold ({why})"
    return "no price (neither on-demand nor commitment price)"


class Shape(NamedTuple):
    """What pricing a candidate needs besides the term: the cluster, the offering, its node
    steps and the cost-model flags."""

    spec: ClusterSpec
    offering: Offering
    steps: tuple[NodeStep, ...]
    nodes: int
    gang: bool
    tcp_gang: bool
    egress: float
    interruptions: float

    def inputs(self, rates: Rates, rules: PolicyRules) -> CostInputs:
        # positional: (rates, gang, tcp_gang, interruptions_per_hour, checkpoint_minutes,
        # restart_minutes, communication_share, egress_usd)
        return CostInputs(rates, self.gang, self.tcp_gang, self.interruptions,
                          self.spec.checkpoint_minutes, rules.spot_restart_minutes,
                          rules.tcp_communication_share, self.egress)


def price_band(shape: Shape, term: str, rules: PolicyRules, lock_in_factor: float,
               spot_rate: Optional[float] = None) -> Priced:
    """The band's cheapest blend under one commitment term (no template applied yet).
    ``spot_rate``: the offering's spot rate when the caller has it (``Context.spot_rate``)."""
    o = shape.offering
    rates = (rates_of(o, rules, term) if spot_rate is None else
             Rates(o.reservation_rate(term, rules.reserve_at_on_demand_rate), o.price(ON_DEMAND),
                   spot_rate))
    k = shape.inputs(rates, rules)
    blend, basis, compared = band_blend(shape.spec, shape.steps, rates, rules, k, lock_in_factor)
    return Priced(term=term, rates=rates, blend=blend, basis=basis, compared=compared,
                  lock_in_factor=lock_in_factor, inputs=k)


def apply_template(shape: Shape, p: Priced, tmpl: Optional[ClusterTemplate],
                   rules: PolicyRules, spot_allowed: bool) -> Priced:
    """The template's purchase rules on a band blend: a spot template puts every node on spot
    (when the work may run there), a cache node runs on-demand rather than spot.
    ``tmpl=None``: the band blend as it is."""
    rates, basis, compared = p.rates, p.basis, p.compared
    blend = p.blend
    spot_all = False
    if tmpl is not None and tmpl.purchase_rule == SPOT and (
            blend is None or blend.purchase.spot != shape.nodes):
        if rates.spot is None:
            return Priced(p.term, rates, blend, "no_spot_for_template", compared)
        if spot_allowed:
            spot_all, basis, compared = True, "spot_forced", None
    if blend is None and not spot_all:
        return p
    cache = (tmpl is not None and tmpl.cache_node == ON_DEMAND and shape.nodes >= 2
             and rates.on_demand is not None)
    k = p.inputs or shape.inputs(rates, rules)
    layout, costs = finish(shape.steps, blend, k, spot_all=spot_all, cache_on_demand=cache)
    if cache and layout[0][3] == ON_DEMAND and (
            spot_all or (blend is not None and blend.models[0] == SPOT)):
        basis = basis + "+cache"
    return Priced(term=p.term, rates=rates, blend=blend, basis=basis, compared=compared,
                  layout=layout, costs=costs, objective=objective(costs, p.lock_in_factor),
                  lock_in_factor=p.lock_in_factor, inputs=k)


def term_options(spec: ClusterSpec, c: Candidate, ctx: Context) -> tuple[TermOption, ...]:
    """What each commitment term would cost the candidate over the horizon: per term the blend
    that is cheapest over ``commitment_horizon_months`` (what ``auto`` compares), its monthly
    bill, its average per month over the horizon and what one purchase of the term commits."""
    rules, o = ctx.rules, c.offering
    shape = ctx.shape_of(spec, c)
    spot_allowed = spec.interruptible and spec.priority <= rules.reserved_above_priority
    tmpl = get_template(c.template) if c.template else None
    out = []
    for term in COMMITMENT_TERMS:
        factor = ctx.lock_in_factor(o, term, horizon=True)
        p = price_band(shape, term, rules, factor, ctx.spot_rate(o))
        q = apply_template(shape, p, tmpl, rules, spot_allowed)
        if q.basis == "no_spot_for_template":
            q = apply_template(shape, p, None, rules, spot_allowed)
        if not q.layout:
            why = ("no commitment price for guaranteed capacity" if p.basis ==
                   "no_commit_guaranteed" else "no price")
            out.append(TermOption(term, PurchaseMix(), 0.0, 0.0, 0.0, 0, unavailable=why))
            continue
        months, committed = lock_in(o, term, q.costs)
        out.append(TermOption(term, q.purchase, q.costs.monthly_usd,
                              objective(q.costs, factor), committed, months))
    return tuple(out)


def lock_in(offering: Offering, term: str, costs: CostBreakdown) -> tuple[int, float]:
    """(months, USD) one purchase of the term locks in: the reserved nodes at a commitment
    price for the term's months; plain capacity reservations lock nothing in."""
    months = TERM_MONTHS.get(term, 0)
    if not months or not costs.reserved_usd or not offering.is_commitment(term):
        return 0, 0.0
    return months, costs.reserved_usd * months


def candidates_for(spec: ClusterSpec, ctx: Context) -> list[Candidate]:
    """Every offering of the cluster's GPU on the stack's clouds as a full candidate, ranked
    (cheapest first): the reference, not a path of the decision. ``decide`` prices every pair
    with ``gpulease.policy.pricing`` and calls ``evaluate`` only for what it shows or chooses;
    tests compare it with this (tests/test_policy_pricing.py, the brute-force tests) and
    bench/policy.py times it as the path ``decide`` took before issue 23."""
    forced = get_template(spec.template) if spec.template else None
    out = [evaluate(spec, o, ctx, forced) for o in ctx.by_gpu.get(spec.gpu, ())]
    out.sort(key=lambda c: c.sort_key)
    return out
