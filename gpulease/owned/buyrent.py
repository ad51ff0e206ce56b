"""Buy or rent: the N-year cost of owning the servers a cluster's demand needs against renting
it with the policy's best mix (docs/buy-vs-rent.md gives the formulas and a worked example).

Pure: every input is passed in (:class:`Server`, :class:`Finance`, :class:`Demand`); nothing
is read from config, catalog or clock here. Plain floats, like the policy's prices; money leaves
through ``gpulease.money`` at the command's boundary.

Monthly cash flows, month m = 0 .. N-1 (N = 12 x years), each valued at the start of its month
with the monthly rate r = (1 + annual rate)^(1/12) - 1, discount d(m) = (1 + r)^-m:

- k = ceil(peak GPUs / GPUs per node) servers, bought at m = 0: P = k x price;
- lead time L months: the cluster rents meanwhile; the servers run from month L;
- utilisation u = GPU-hours used a month / (k x GPUs per node x 730);
- renting costs rho x u a month, rho = the decision's monthly cost / u0 (renting is taken as
  proportional to the GPU-hours used: the policy's mix at the cluster's own utilisation u0);
- owning costs F = k x (colo + ops) a month whether used or not, plus power p x u,
  p = k x kW x 730 x $/kWh; the resale S = resale share x P comes back at month N;
- A_lead = sum of d(m) for m < L, A_own = sum of d(m) for L <= m < N, d_N = (1 + r)^-N;
- Own(u) = P + rho u A_lead + (F + p u) A_own - S d_N;  Rent(u) = rho u (A_lead + A_own);
- break-even utilisation u* = (P - S d_N + F A_own) / ((rho - p) A_own): above it owning
  costs less (none when rho <= p: the power alone costs more than renting);
- payback: the first month M when the discounted savings since L, sum of
  (rho u0 - p u0 - F) d(m) for L <= m < M, reach P (resale not counted); none within N.
- depreciation (straight line, the accounting view): (P - S) / N a month.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from gpulease.model import HOURS_PER_MONTH

#: the utilisation changes `explain --buy-vs-rent` shows (the issue: +/- 20 %).
SENSITIVITY = (-0.2, 0.0, 0.2)


@dataclass(frozen=True)
class Server:
    """One server (node) as quoted: where each figure came from is ``source``."""

    usd_per_node: float
    gpus_per_node: int
    power_kw_per_node: float
    usd_per_kwh: float
    colo_usd_per_node_month: float
    ops_usd_per_node_month: float
    #: "gpulease:buy_vs_rent.servers[0]" or "gpulease:owned[1]"
    source: str = ""


@dataclass(frozen=True)
class Finance:
    years: float
    cost_of_money_rate: float
    lead_time_months: int
    resale_share: float

    @property
    def months(self) -> int:
        return int(round(self.years * 12))

    @property
    def monthly_rate(self) -> float:
        return (1.0 + self.cost_of_money_rate) ** (1.0 / 12.0) - 1.0

    def discount(self, month: float) -> float:
        return (1.0 + self.monthly_rate) ** -month

    def annuity(self, start: int, end: int) -> float:
        """Sum of d(m) for start <= m < end."""
        return sum(self.discount(m) for m in range(max(start, 0), max(end, 0)))


@dataclass(frozen=True)
class Demand:
    """A cluster's monthly demand: its peak GPUs, the GPU-hours it uses a month, and what the
    policy's best mix costs a month to rent it."""

    cluster: str
    gpu: str
    peak_gpus: int
    gpu_hours_per_month: float
    rent_usd_per_month: float


@dataclass(frozen=True)
class Point:
    utilisation: float
    own_usd: float
    rent_usd: float
    #: the utilisation was capped at 100 % of the owned servers
    capped: bool = False

    @property
    def buy(self) -> bool:
        return self.own_usd < self.rent_usd


@dataclass(frozen=True)
class Answer:
    demand: Demand
    server: Server
    finance: Finance
    nodes: int
    utilisation: float
    purchase_usd: float
    resale_usd: float
    depreciation_usd_per_month: float
    power_full_usd_per_month: float
    fixed_usd_per_month: float
    rent_full_usd_per_month: float
    own_usd: float
    rent_usd: float
    break_even_utilisation: Optional[float]
    payback_months: Optional[int]
    sensitivity: tuple[Point, ...] = field(default_factory=tuple)

    @property
    def verdict(self) -> str:
        return "buy" if self.own_usd < self.rent_usd else "rent"


def nodes_for(peak_gpus: int, gpus_per_node: int) -> int:
    return math.ceil(peak_gpus / gpus_per_node)


def own_cost(u: float, *, purchase: float, resale: float, fixed: float, power_full: float,
             rent_full: float, f: Finance) -> float:
    n, lead = f.months, min(f.lead_time_months, f.months)
    a_lead, a_own = f.annuity(0, lead), f.annuity(lead, n)
    return purchase + rent_full * u * a_lead + (fixed + power_full * u) * a_own - \
        resale * f.discount(n)


def rent_cost(u: float, *, rent_full: float, f: Finance) -> float:
    return rent_full * u * f.annuity(0, f.months)


def compare(demand: Demand, server: Server, finance: Finance) -> Answer:
    k = nodes_for(demand.peak_gpus, server.gpus_per_node)
    capacity = k * server.gpus_per_node * HOURS_PER_MONTH
    u0 = demand.gpu_hours_per_month / capacity
    rent_full = demand.rent_usd_per_month / u0 if u0 > 0 else 0.0
    purchase = k * server.usd_per_node
    resale = finance.resale_share * purchase
    fixed = k * (server.colo_usd_per_node_month + server.ops_usd_per_node_month)
    power_full = k * server.power_kw_per_node * HOURS_PER_MONTH * server.usd_per_kwh
    n, lead = finance.months, min(finance.lead_time_months, finance.months)
    a_own = finance.annuity(lead, n)
    kw = dict(purchase=purchase, resale=resale, fixed=fixed, power_full=power_full,
              rent_full=rent_full, f=finance)
    margin = (rent_full - power_full) * a_own
    be = (purchase - resale * finance.discount(n) + fixed * a_own) / margin if margin > 0 \
        else None
    saving = rent_full * u0 - power_full * u0 - fixed
    payback = None
    if saving > 0:
        total = 0.0
        for m in range(lead, n):
            total += saving * finance.discount(m)
            if total >= purchase:
                payback = m + 1
                break
    points = []
    for delta in SENSITIVITY:
        u = u0 * (1 + delta)
        capped = u > 1.0
        u = min(u, 1.0)
        points.append(Point(u, own_cost(u, **kw), rent_cost(u, rent_full=rent_full, f=finance),
                            capped))
    return Answer(demand=demand, server=server, finance=finance, nodes=k, utilisation=u0,
                  purchase_usd=purchase, resale_usd=resale,
                  depreciation_usd_per_month=(purchase - resale) / n,
                  power_full_usd_per_month=power_full, fixed_usd_per_month=fixed,
                  rent_full_usd_per_month=rent_full, own_usd=own_cost(u0, **kw),
                  rent_usd=rent_cost(u0, rent_full=rent_full, f=finance),
                  break_even_utilisation=be, payback_months=payback,
                  sensitivity=tuple(points))


def gpu_hours_per_month(steps) -> float:
    """GPU-hours a month of a load-duration curve (steps of at least ``gpus`` GPUs busy
    ``hours_per_month`` hours, GPUs increasing): each step adds its extra GPUs for its hours."""
    total, below = 0.0, 0
    for st in steps:
        total += (st.gpus - below) * st.hours_per_month
        below = st.gpus
    return total


def server_from_pool(pool) -> Server:
    """An owned pool's figures as a server quote (its price and fixed costs per node)."""
    nodes = pool.nodes
    return Server(usd_per_node=pool.purchase_usd / nodes, gpus_per_node=pool.gpus_per_node,
                  power_kw_per_node=pool.power_kw_per_node, usd_per_kwh=pool.usd_per_kwh,
                  colo_usd_per_node_month=pool.colo_usd_per_month / nodes,
                  ops_usd_per_node_month=pool.ops_usd_per_month / nodes,
                  source=pool.config_path)
