"""The cost model: monthly USD of one cluster on one offering with one purchase per node (pure math).

Nodes are numbered 1..N in order of the hours they run (most first): node k runs h_k hours a
month, the hours of the first demand step whose GPUs exceed (k - 1) x GPUs per node (one step =
every node runs the cluster's hours_per_month). Each node is reserved (R), on-demand (O) or
spot (S); r, o, s are the offering's hourly rates (r: the commitment rate of the term, or the
on-demand rate for a plain capacity reservation), lambda the spot interruptions per node-hour,
L = (checkpoint_minutes / 2 + restart_minutes) / 60 the hours of work one interruption loses.

  reserved_usd      = sum over R nodes of r * 730       (billed every hour of the month)
  on_demand_usd     = sum over O nodes of o * h_k
  spot_usd          = sum over S nodes of s * h_k
  spot_rework_usd   = not a gang: sum over S nodes of lambda * h_k * L * s
                        (only the interrupted node redoes its work)
                      a gang (multi-node distributed job; one lost rank stalls every running
                      rank): lambda * L * sum over hour levels l of dh_l * X_l * A_l
                        levels = the distinct node hours, h_(1) > h_(2) > ... (h_(m+1) = 0);
                        dh_l = h_(l) - h_(l+1): the hours in which exactly the nodes with
                        h_k >= h_(l) run; X_l = spot nodes among them; A_l = their summed hourly
                        rate. Equivalently lambda * L * sum over S nodes j, all nodes k of
                        min(h_j, h_k) * rate_k: nodes run nested (node k > j only runs while
                        node j does), and each interruption of j stalls everything running.
  communication_usd = (on_demand_usd + spot_usd + spot_rework_usd) * c / (1 - c)
                      only for multi-node distributed jobs on TCP (c = tcp_communication_share;
                      reserved nodes are billed every hour anyway, so their extra hours are free)
  egress_usd        = size_tb * 1000 * (egress $/GB home -> cluster + STANDARD $/GB-month in the
                      cluster's region), only when the cluster runs away from its dataset's home

With one demand step and one level the gang rework is lambda * h * S * L * (hourly rate of all
nodes), the single-step model's formula. Block costs (``blend_costs``) attribute each term to
the nodes that cause it: rework to the interrupted spot node, communication pro rata; they sum to
the totals (egress stays with the cluster).
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

from gpulease.model import HOURS_PER_MONTH, CostBreakdown, PurchaseMix
from gpulease.purchase import ON_DEMAND, RESERVED, SPOT

#: (nodes, hours per month, purchase model) of consecutive nodes, in node order.
Block = tuple[int, float, str]


class Rates(NamedTuple):
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


class CostInputs(NamedTuple):
    """Everything but the purchase that the cost of a cluster on an offering depends on.
    (Immutable tuples: the policy builds a few per candidate, tens of thousands per plan.)"""

    rates: Rates
    gang: bool
    tcp_gang: bool
    interruptions_per_hour: float
    checkpoint_minutes: Optional[float]
    restart_minutes: float
    communication_share: float
    egress_usd: float = 0.0

    @property
    def lost_hours(self) -> float:
        """Work one interruption loses: half a checkpoint interval plus the restart."""
        return ((self.checkpoint_minutes or 0.0) / 2.0 + self.restart_minutes) / 60.0


def blend_costs(blocks: Sequence[Block], k: CostInputs,
                per_block: bool = False) -> tuple[CostBreakdown, tuple[CostBreakdown, ...]]:
    """Monthly breakdown of a cluster whose nodes are ``blocks`` (node order, hours
    non-increasing), and - with ``per_block`` - each block's share (module docstring)."""
    total = breakdown(blend_totals(blocks, k), k)
    if not per_block:
        return total, ()
    return total, block_shares(blocks, k)


def breakdown(totals: tuple, k: CostInputs) -> CostBreakdown:
    """A ``blend_totals`` tuple as a CostBreakdown (egress from the inputs)."""
    reserved, on_demand, spot, rework, comm = totals
    return CostBreakdown(reserved_usd=reserved, on_demand_usd=on_demand, spot_usd=spot,
                         spot_rework_usd=rework, egress_usd=k.egress_usd,
                         communication_usd=comm)


def blend_totals(blocks: Sequence[Block], k: CostInputs) -> tuple:
    """(reserved, on_demand, spot, rework, communication) USD a month: the formulas of the
    module docstring, as a plain tuple (the policy prices thousands of blends)."""
    r = k.rates
    if len(blocks) == 1 and not k.gang:
        n, h, m = blocks[0]
        rate = r.of(m)
        if m == RESERVED:
            return (n * rate * HOURS_PER_MONTH, 0.0, 0.0, 0.0, 0.0)
        if m == ON_DEMAND:
            return (0.0, n * rate * h, 0.0, 0.0, 0.0)
        return (0.0, 0.0, n * rate * h,
                k.interruptions_per_hour * h * n * k.lost_hours * rate, 0.0)
    reserved = on_demand = spot = 0.0
    for n, h, m in blocks:
        if m == RESERVED:
            reserved += n * r.reserved * HOURS_PER_MONTH
        elif m == ON_DEMAND:
            on_demand += n * r.on_demand * h
        else:
            spot += n * r.spot * h
    lam, lost = k.interruptions_per_hour, k.lost_hours
    rework = 0.0
    if any(m == SPOT and n for n, _, m in blocks):
        if not k.gang:
            for n, h, m in blocks:
                if m == SPOT:
                    rework += lam * h * n * lost * r.spot
        else:
            # hour levels, longest first: (hours, spot nodes, hourly rate of the nodes up)
            levels: list[list] = []
            for n, h, m in blocks:
                if not levels or h != levels[-1][0]:
                    levels.append([h, 0, 0.0])
                lv = levels[-1]
                if m == SPOT:
                    lv[1] += n
                lv[2] += n * r.of(m)
            x = a = 0.0
            for i, (h, xs, rate) in enumerate(levels):
                x, a = x + xs, a + rate
                dh = h - (levels[i + 1][0] if i + 1 < len(levels) else 0.0)
                if x:
                    rework += lam * dh * x * lost * a
    comm = 0.0
    share = k.communication_share if k.tcp_gang else 0.0
    if share > 0:
        comm = (on_demand + spot + rework) * share / (1.0 - share)
    return (reserved, on_demand, spot, rework, comm)


def block_shares(blocks: Sequence[Block], k: CostInputs) -> tuple[CostBreakdown, ...]:
    """Each block's share of the totals: rework to the interrupted spot nodes (in a gang, for
    every node they stall), communication pro rata; no egress."""
    r = k.rates
    lam, lost = k.interruptions_per_hour, k.lost_hours
    share = k.communication_share if k.tcp_gang else 0.0
    parts = []
    for n, h, m in blocks:
        rate = r.of(m)
        res = n * rate * HOURS_PER_MONTH if m == RESERVED else 0.0
        od = n * rate * h if m == ON_DEMAND else 0.0
        sp = n * rate * h if m == SPOT else 0.0
        rw = 0.0
        if m == SPOT and n:
            if k.gang:
                stalled = sum(min(h, h2) * n2 * r.of(m2) for n2, h2, m2 in blocks)
                rw = lam * lost * n * stalled
            else:
                rw = lam * h * n * lost * rate
        cm = (od + sp + rw) * share / (1.0 - share) if share > 0 else 0.0
        parts.append(CostBreakdown(reserved_usd=res, on_demand_usd=od, spot_usd=sp,
                                   spot_rework_usd=rw, communication_usd=cm))
    return tuple(parts)


def mix_blocks(mix: PurchaseMix, hours: float) -> tuple[Block, ...]:
    """One demand step: the nodes in node order reserved, on-demand, spot, all at ``hours``."""
    return tuple((n, hours, m) for m, n in ((RESERVED, mix.reserved),
                                           (ON_DEMAND, mix.on_demand), (SPOT, mix.spot)) if n)


def cluster_costs(*, mix: PurchaseMix, rates: Rates, hours: float, gang: bool, tcp_gang: bool,
                  interruptions_per_hour: float, checkpoint_minutes: Optional[float],
                  restart_minutes: float, communication_share: float,
                  egress_usd: float = 0.0) -> CostBreakdown:
    """Monthly cost breakdown of a one-step cluster (every node runs ``hours``).

    ``gang``: multi-node distributed job (an interruption stalls every node);
    ``tcp_gang``: such a job without an RDMA fabric (pays the communication overhead).
    """
    k = CostInputs(rates=rates, gang=gang, tcp_gang=tcp_gang,
                   interruptions_per_hour=interruptions_per_hour,
                   checkpoint_minutes=checkpoint_minutes, restart_minutes=restart_minutes,
                   communication_share=communication_share, egress_usd=egress_usd)
    return blend_costs(mix_blocks(mix, hours), k)[0]


def rates_of(offering, rules, term: Optional[str] = None) -> "Rates":
    """The three hourly rates of an offering under the stack's rules (``term``: the commitment
    term to price reserved nodes at; default the rules' own, which must not be ``auto``)."""
    term = term or rules.commitment_term
    return Rates(offering.reservation_rate(term, rules.reserve_at_on_demand_rate),
                 offering.price(ON_DEMAND), spot_rate(offering))


def spot_rate(offering) -> Optional[float]:
    """The spot rate a spot cluster pays (its cheapest zone), None when spot is not sold."""
    return offering.cheapest_spot_usd if offering.sells(SPOT) else None


def break_even_utilization(rates: Rates) -> Optional[float]:
    """Utilization above which a commitment beats on-demand: commit_rate / on_demand_rate."""
    if rates.reserved is None or rates.on_demand is None:
        return None
    return rates.reserved / rates.on_demand
