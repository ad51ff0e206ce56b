"""What an owned GPU pool costs: amortised (every dollar of owning it, spread over the GPU-hours
it can run) and marginal (what one more GPU-hour adds once the hardware is bought).

The formulas (docs/owned.md gives a worked example with every input named):

- ``nodes = gpus / gpus_per_node``; ``H = available_hours_per_month`` (default 730);
- **depreciation** (straight line): ``purchase_usd / (12 * depreciation_years)`` a month from
  ``purchased_on`` until ``depreciation_years`` later, 0 after (the hardware is paid off);
- **power** at full use: ``power_kw_per_node * nodes * H * usd_per_kwh`` a month;
- **fixed**: ``colo_usd_per_month + ops_usd_per_month`` (paid whether the pool runs or not);
- **amortised $/GPU-hour** = ``(depreciation + power + fixed) / (gpus * H)``: the price the plan
  charges for a GPU-hour on the pool, never $0;
- **marginal $/GPU-hour** = ``power_kw_per_node / gpus_per_node * usd_per_kwh``: depreciation,
  colocation and operations are sunk or fixed, only the power a running GPU draws is added.
  The policy fills owned pools by this (they are the cheapest capacity whenever the marginal
  cost is below any cloud price), and shows both.

Plain floats, like the policy's other prices: money leaves the policy through
``gpulease.money.usd`` at the ledger boundary.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from gpulease.model import OwnedPool


@dataclass(frozen=True)
class PoolCost:
    """A pool's monthly costs (USD) and its two GPU-hour prices, judged at ``as_of``."""

    pool: str
    as_of: dt.date
    depreciation_usd_per_month: float
    power_usd_per_month: float
    colo_usd_per_month: float
    ops_usd_per_month: float
    gpu_hours_per_month: float
    #: the depreciation period is over (the hardware is paid off)
    depreciated: bool

    @property
    def fixed_usd_per_month(self) -> float:
        return self.colo_usd_per_month + self.ops_usd_per_month

    @property
    def total_usd_per_month(self) -> float:
        return self.depreciation_usd_per_month + self.power_usd_per_month + \
            self.fixed_usd_per_month

    @property
    def amortised_usd_per_gpu_hour(self) -> float:
        return self.total_usd_per_month / self.gpu_hours_per_month

    @property
    def marginal_usd_per_gpu_hour(self) -> float:
        return self.power_usd_per_month / self.gpu_hours_per_month


def depreciation_end(pool: OwnedPool) -> dt.date:
    """The day the straight-line depreciation is over (``purchased_on`` + the period, in whole
    days of 365.25)."""
    start = dt.date.fromisoformat(pool.purchased_on)
    return start + dt.timedelta(days=round(pool.depreciation_years * 365.25))


def pool_cost(pool: OwnedPool, as_of: dt.date) -> PoolCost:
    """The pool's costs in the month of ``as_of``."""
    start = dt.date.fromisoformat(pool.purchased_on)
    depreciated = as_of >= depreciation_end(pool)
    in_service = as_of >= start
    dep = 0.0 if depreciated or not in_service else \
        pool.purchase_usd / (12.0 * pool.depreciation_years)
    hours = pool.available_hours_per_month
    power = pool.power_kw_per_node * pool.nodes * hours * pool.usd_per_kwh
    return PoolCost(pool=pool.name, as_of=as_of, depreciation_usd_per_month=dep,
                    power_usd_per_month=power, colo_usd_per_month=pool.colo_usd_per_month,
                    ops_usd_per_month=pool.ops_usd_per_month,
                    gpu_hours_per_month=pool.gpus * hours, depreciated=depreciated)
