"""Candidates: every offering a cluster could run on, priced by the cost model or rejected with why."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from infra.catalog import TIER_CLASSES, Catalog
from infra.model import ClusterSpec, CostBreakdown, Offering, PurchaseMix, StackSpec
from infra.policy.costmodel import Rates, cluster_costs, rates_of, steady_mix
from infra.policy.rules import PolicyRules
from infra.policy.templates import ClusterTemplate, Facts, choose_template, get_template


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
    #: why the purchase mix is what it is (key for the rationale, see decide._PURCHASE_TEXT).
    basis: str
    #: None = feasible; else the reason ("residency (...)", "quota (...)", "no RDMA (...)", ...).
    rejected: Optional[str] = None
    #: monthly cost of the purchase mix the band compared against (spot vs steady), if any.
    compared_usd: Optional[float] = None
    #: commitment term the reserved rate is priced at.
    term: str = "1y"
    #: hourly rate of a reserved node (commitment, or on-demand for a plain reservation).
    reserved_rate: Optional[float] = None

    @property
    def feasible(self) -> bool:
        return self.rejected is None

    @property
    def monthly_usd(self) -> Optional[float]:
        return None if self.costs is None else self.costs.monthly_usd

    @property
    def hourly_usd(self) -> float:
        if self.purchase is None:
            return 0.0
        o = self.offering
        p = self.purchase
        r = self.reserved_rate
        return ((p.reserved * r if p.reserved else 0.0)
                + (p.on_demand * o.on_demand_usd if p.on_demand else 0.0)
                + (p.spot * o.cheapest_spot_usd if p.spot else 0.0))

    @property
    def quota_key(self) -> tuple[str, str]:
        return (self.offering.cloud, self.offering.region)

    @property
    def sort_key(self) -> tuple:
        """Deterministic order: cheapest first, then fewer GPUs, then by name."""
        m = self.monthly_usd
        return (m is None, m if m is not None else 0.0, self.gpus, self.offering.cloud,
                self.offering.region, self.offering.instance_type)


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
    _gravity: dict = field(default_factory=dict)

    @classmethod
    def build(cls, stack: StackSpec, catalog: Catalog, rules: PolicyRules) -> "Context":
        ctx = cls(stack=stack, catalog=catalog, rules=rules)
        for cloud in stack.clouds:
            ctx.interruptions[cloud] = (rules.spot_interruptions_per_hour
                                        if rules.spot_interruptions_per_hour is not None
                                        else catalog.spot_interruptions_per_hour(cloud))
        for o in catalog.offerings:
            if o.cloud in stack.clouds:
                ctx.by_gpu.setdefault(o.gpu, []).append(o)
        return ctx

    def gravity(self, dataset: Optional[str], cloud: str, region: str) -> tuple[float, Optional[str]]:
        """Data-gravity cost per month of running in (cloud, region), or a 'no price' reason.

        Away from the dataset's home the cluster pays, every month, the egress of the whole
        dataset plus keeping the staged copy in STANDARD storage in its own region (the work
        bucket, ``infra.naming.needs_work_bucket``).
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


def _band_mix(spec: ClusterSpec, rates: Rates, nodes: int, rules: PolicyRules, cost_of,
              tcp_gang: bool) -> tuple[Optional[PurchaseMix], str, Optional[float]]:
    """Purchase mix by priority band, with the cost math allowed to override the default."""
    if spec.priority > rules.reserved_above_priority:
        if rates.reserved is None:
            return None, "no_commit_guaranteed", None
        return PurchaseMix(reserved=nodes), "guaranteed", None
    # A TCP-only gang bills its on-demand nodes for the communication overhead too, so the
    # break-even compares the commitment with those effective hours.
    hours = spec.hours_per_month
    if tcp_gang and rules.tcp_communication_share:
        hours = hours / (1.0 - rules.tcp_communication_share)
    steady, basis = steady_mix(nodes, rates, hours)
    spot_band = spec.interruptible and spec.priority < rules.spot_below_priority
    if not spot_band:
        return steady, basis, None
    if rates.spot is None:
        return steady, "no_spot_price" if steady is not None else "no_price", None
    spot = PurchaseMix(spot=nodes)
    if steady is None:
        return spot, "spot", None
    cs, cst = cost_of(spot).monthly_usd, cost_of(steady).monthly_usd
    if cs <= cst:
        return spot, "spot", cst
    # Spot is the default for this band, but with the expected rework it costs more.
    return steady, "spot_overridden", cs


def evaluate(spec: ClusterSpec, o: Offering, ctx: Context,
             forced: Optional[ClusterTemplate] = None) -> Candidate:
    """Price one offering for one cluster under every rule; the first broken rule rejects it."""
    rules, stack = ctx.rules, ctx.stack
    cspec = stack.clouds[o.cloud]
    term = rules.commitment_term
    nodes = -(-spec.gpus // o.gpus_per_node)
    gpus = nodes * o.gpus_per_node
    distributed = spec.distributed if spec.distributed is not None else nodes > 1
    gang = distributed and nodes > 1
    rates = rates_of(o, rules)
    reason: Optional[str] = None

    def reject(why: str) -> None:
        nonlocal reason
        if reason is None:
            reason = why

    if o.region not in cspec.regions:
        reject(f"region not enabled (add it to gpulease:clouds.{o.cloud}.regions)")
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

    lam = ctx.interruptions.get(o.cloud, 0.0)

    def cost_of(mix: PurchaseMix) -> CostBreakdown:
        return cluster_costs(mix=mix, rates=rates, hours=spec.hours_per_month, gang=gang,
                             tcp_gang=tcp_gang, interruptions_per_hour=lam,
                             checkpoint_minutes=spec.checkpoint_minutes,
                             restart_minutes=rules.spot_restart_minutes,
                             communication_share=rules.tcp_communication_share,
                             egress_usd=egress)

    mix, basis, compared = _band_mix(spec, rates, nodes, rules, cost_of, tcp_gang)
    spot_allowed = spec.interruptible and spec.priority <= rules.reserved_above_priority
    facts = Facts(nodes=nodes, distributed=distributed, rdma=o.has_rdma,
                  rdma_fabric=network != "none", dataset=bool(spec.dataset),
                  dataset_tb=ds.size_tb if ds is not None else 0.0,
                  spot=bool(mix and mix.spot), interruptible=spec.interruptible,
                  spot_allowed=spot_allowed, priority=spec.priority,
                  production=stack.is_prod)
    if forced is not None:
        tmpl = forced
        unmet = tmpl.unmet(facts)
        if unmet:
            reject(f"template {tmpl.name} needs {' and '.join(unmet)}")
    else:
        tmpl = choose_template(facts)
    if tmpl.purchase_rule == "spot" and (mix is None or mix.spot != nodes):
        if rates.spot is None:
            reject("no price (no spot price)")
        elif spot_allowed:
            mix, basis, compared = PurchaseMix(spot=nodes), "spot_forced", None
    if (tmpl.cache_node == "on_demand" and mix is not None and mix.spot and nodes >= 2
            and rates.on_demand is not None):
        mix = PurchaseMix(reserved=mix.reserved, on_demand=mix.on_demand + 1, spot=mix.spot - 1)
        basis = basis + "+cache"
    if mix is None:
        reject({"no_commit_guaranteed": f"no price (no {term} commitment price; priority "
                f"{spec.priority} > {rules.reserved_above_priority} needs guaranteed capacity)",
                }.get(basis, "no price (neither on-demand nor commitment price)"))
    costs = cost_of(mix) if mix is not None else None
    cand = Candidate(offering=o, nodes=nodes, gpus=gpus, distributed=distributed,
                     network=network, purchase=mix, costs=costs, template=tmpl.name,
                     basis=basis, rejected=reason, compared_usd=compared, term=term,
                     reserved_rate=rates.reserved)
    return cand


def candidates_for(spec: ClusterSpec, ctx: Context) -> list[Candidate]:
    """Every offering of the cluster's GPU on the stack's clouds, ranked (cheapest first)."""
    forced = get_template(spec.template) if spec.template else None
    out = [evaluate(spec, o, ctx, forced) for o in ctx.by_gpu.get(spec.gpu, ())]
    out.sort(key=lambda c: c.sort_key)
    return out
