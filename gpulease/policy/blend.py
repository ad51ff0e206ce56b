"""The exact purchase of one cluster on one offering: reserved, on-demand or spot per demand step.

The option set is every assignment of one purchase model to each demand step's nodes that keeps
the models in the order reserved -> on-demand -> spot along the nodes (most hours first): what a
node group carries, since an AWS Auto Scaling group fills its on-demand base capacity first (the
capacity reservation first of all) and puts every node above the base on one market, and the
GCP node groups start in the same order. With m steps that is at most (m + 1)(m + 2) / 2
assignments, each priced by the cost model; the cheapest wins (ties within a billionth: fewer
reserved nodes, then fewer on-demand nodes, i.e. less lock-in).

Why this loses nothing when the nodes are independent (not a gang): a node's reserved cost
r * 730 does not depend on its hours, its on-demand cost o * h and spot cost s * h * (1 + lambda
* L) are proportional to them, so the cheapest model of every node is reserved above a break-even
number of hours and the cheaper of on-demand and spot below it - the same for every node of a
step, and monotone along the nodes. So the search equals the optimum over every per-node
assignment (tests/test_policy_blend.py checks it by brute force over all 3^N assignments).
In a gang the spot rework couples the nodes (an interruption stalls every running node), and
the claim is restricted to this option set (docs/policy.md, "Demand profiles").
"""
from __future__ import annotations

from functools import lru_cache
from typing import Iterator, NamedTuple, Optional, Sequence

from gpulease.model import CostBreakdown, NodeStep, PurchaseMix
from gpulease.policy.costmodel import CostInputs, blend_totals, breakdown
from gpulease.purchase import ON_DEMAND, RESERVED, SPOT


class Blend(NamedTuple):
    """One assignment: the purchase model of each node step, its monthly costs, and the value
    the choice minimised (the monthly cost, or with ``commitment_term: auto`` its average over
    the horizon, lock-in beyond the horizon included)."""

    models: tuple[str, ...]
    #: (reserved, on_demand, spot, rework, communication) USD a month (``blend_totals``)
    totals: tuple
    objective: float
    steps: tuple[NodeStep, ...]
    #: nodes per purchase model
    reserved: int = 0
    on_demand: int = 0
    spot: int = 0

    @property
    def purchase(self) -> PurchaseMix:
        return PurchaseMix(self.reserved, self.on_demand, self.spot)

    @property
    def has_spot(self) -> bool:
        return self.spot > 0

    def costs(self, k: CostInputs) -> CostBreakdown:
        return breakdown(self.totals, k)

    def beats(self, other: "Blend") -> bool:
        """Cheaper, or as cheap (within a billionth: float noise) with less lock-in: fewer
        reserved nodes, then fewer on-demand nodes."""
        return better(self.objective, other.objective, (self.reserved, self.on_demand),
                      (other.reserved, other.on_demand))


#: relative difference below which two objectives are a tie (sums in different orders).
TIE = 1e-9


def better(a: float, b: float, tie_a=(), tie_b=()) -> bool:
    """a < b beyond float noise; a tie is decided by ``tie_a < tie_b``."""
    tol = TIE * max(1.0, abs(a), abs(b))
    if a < b - tol:
        return True
    if a > b + tol:
        return False
    return tie_a < tie_b


def assignments(allowed: Sequence[frozenset]) -> Iterator[tuple[str, ...]]:
    """Every monotone assignment (reserved steps, then on-demand, then spot) whose step models
    are all in ``allowed[step]``."""
    return iter(_assignments(tuple(allowed)))


@lru_cache(maxsize=4096)
def _assignments(allowed: tuple) -> tuple[tuple[str, ...], ...]:
    # few distinct inputs (step count x band x priced models): computed once each
    m, out = len(allowed), []
    for a in range(m + 1):
        for b in range(a, m + 1):
            seq = (RESERVED,) * a + (ON_DEMAND,) * (b - a) + (SPOT,) * (m - b)
            if all(x in allowed[j] for j, x in enumerate(seq)):
                out.append(seq)
    return tuple(out)


def blocks_of(steps: Sequence[NodeStep], models: Sequence[str]) -> tuple:
    return tuple((st.nodes, st.hours_per_month, m) for st, m in zip(steps, models))


def objective(costs: CostBreakdown, lock_in_factor: float) -> float:
    """Monthly cost with the reserved (committed) part scaled by months billed / horizon."""
    if lock_in_factor == 1.0:
        return costs.monthly_usd
    return costs.monthly_usd + costs.reserved_usd * (lock_in_factor - 1.0)


def blends(steps: Sequence[NodeStep], allowed: Sequence[frozenset], k: CostInputs,
           lock_in_factor: float = 1.0) -> list[Blend]:
    """Every assignment of the option set, priced."""
    out = []
    steps = tuple(steps)
    egress = k.egress_usd
    for seq in _assignments(tuple(allowed)):
        blocks, r, o, sp = [], 0, 0, 0
        for st, m in zip(steps, seq):
            n = st.nodes
            blocks.append((n, st.hours_per_month, m))
            if m == RESERVED:
                r += n
            elif m == ON_DEMAND:
                o += n
            else:
                sp += n
        totals = blend_totals(blocks, k)
        # the monthly_usd of the breakdown, summed in its order
        value = totals[0] + totals[1] + totals[2] + totals[3] + egress + totals[4]
        if lock_in_factor != 1.0:
            value += totals[0] * (lock_in_factor - 1.0)
        out.append(Blend(seq, totals, value, steps, r, o, sp))
    return out


def cheapest(options: Sequence[Blend], *, spot: Optional[bool] = None) -> Optional[Blend]:
    """The cheapest blend (``spot``: only those with / without a spot step)."""
    best = None
    for b in options:
        if spot is not None and b.has_spot != spot:
            continue
        if best is None or b.beats(best):
            best = b
    return best
