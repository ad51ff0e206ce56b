"""The cost model: monthly USD of one cluster on one offering with one purchase mix (pure math).

Formulas (README "Cost model"), for N nodes = R reserved + O on-demand + S spot, h hours/month:
  reserved_usd      = R * commit_rate * 730            (billed every hour of the month)
  on_demand_usd     = O * on_demand_rate * h
  spot_usd          = S * spot_rate * h
  spot_rework_usd   = lambda * h * S * (checkpoint_minutes / 2 + restart_minutes) / 60 * k
                      k = hourly rate of ALL nodes for a multi-node distributed job (one lost
                      rank stalls the gang), else the spot rate (only that node redoes work)
  communication_usd = (on_demand_usd + spot_usd + spot_rework_usd) * s / (1 - s)
                      only for multi-node distributed jobs on TCP (s = tcp_communication_share;
                      reserved nodes are billed every hour anyway, so their extra hours are free)
  egress_usd        = size_tb * 1000 * (egress $/GB home -> cluster + STANDARD $/GB-month in the
                      cluster's region), only when the cluster runs away from its dataset's home
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from infra.model import HOURS_PER_MONTH, CostBreakdown, PurchaseMix


@dataclass(frozen=True)
class Rates:
    """Hourly per-node prices of one offering (None = the provider has no such price)."""

    reserved: Optional[float]
    on_demand: Optional[float]
    spot: Optional[float]

    def of(self, model: str) -> Optional[float]:
        return getattr(self, model)


def hourly_usd(mix: PurchaseMix, rates: Rates) -> float:
    """$/hour with every node up: sum of nodes x rate by purchase model."""
    return ((mix.reserved * rates.reserved if mix.reserved else 0.0)
            + (mix.on_demand * rates.on_demand if mix.on_demand else 0.0)
            + (mix.spot * rates.spot if mix.spot else 0.0))


def cluster_costs(*, mix: PurchaseMix, rates: Rates, hours: float, gang: bool, tcp_gang: bool,
                  interruptions_per_hour: float, checkpoint_minutes: Optional[float],
                  restart_minutes: float, communication_share: float,
                  egress_usd: float = 0.0) -> CostBreakdown:
    """Monthly cost breakdown (see the module docstring for each formula).

    ``gang``: multi-node distributed job (an interruption stalls every node);
    ``tcp_gang``: such a job without an RDMA fabric (pays the communication overhead).
    """
    reserved = mix.reserved * rates.reserved * HOURS_PER_MONTH if mix.reserved else 0.0
    on_demand = mix.on_demand * rates.on_demand * hours if mix.on_demand else 0.0
    spot = mix.spot * rates.spot * hours if mix.spot else 0.0
    rework = 0.0
    if mix.spot:
        # Each interruption loses on average half a checkpoint interval plus the restart time.
        lost_hours = ((checkpoint_minutes or 0.0) / 2.0 + restart_minutes) / 60.0
        per_hour = hourly_usd(mix, rates) if gang else rates.spot
        rework = interruptions_per_hour * hours * mix.spot * lost_hours * per_hour
    comm = 0.0
    if tcp_gang and communication_share > 0:
        comm = (on_demand + spot + rework) * communication_share / (1.0 - communication_share)
    return CostBreakdown(reserved_usd=reserved, on_demand_usd=on_demand, spot_usd=spot,
                         spot_rework_usd=rework, egress_usd=egress_usd, communication_usd=comm)


def rates_of(offering, rules) -> "Rates":
    """The three hourly rates of an offering under the stack's rules."""
    return Rates(offering.reservation_rate(rules.commitment_term, rules.reserve_at_on_demand_rate),
                 offering.on_demand_usd, offering.cheapest_spot_usd)


def break_even_utilization(rates: Rates) -> Optional[float]:
    """Utilization above which a commitment beats on-demand: commit_rate / on_demand_rate."""
    if rates.reserved is None or rates.on_demand is None:
        return None
    return rates.reserved / rates.on_demand


def steady_mix(nodes: int, rates: Rates, hours: float) -> tuple[Optional[PurchaseMix], str]:
    """On-demand vs reserved in closed form: reserved pays when h / 730 > commit / on-demand.

    With every node running the same hours (the model's load assumption), the comparison is the
    same for each node, so the optimum is all-reserved or all-on-demand.
    Returns (mix or None, basis) where basis names the reason for the rationale.
    """
    if rates.reserved is None and rates.on_demand is None:
        return None, "no_price"
    if rates.on_demand is None:
        return PurchaseMix(reserved=nodes), "only_commit_priced"
    if rates.reserved is None:
        return PurchaseMix(on_demand=nodes), "no_commit_price"
    if rates.reserved * HOURS_PER_MONTH < rates.on_demand * hours:
        return PurchaseMix(reserved=nodes), "break_even_reserved"
    return PurchaseMix(on_demand=nodes), "break_even_on_demand"
