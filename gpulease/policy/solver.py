"""Exact choice of one candidate per cluster: per-cluster argmin, or a MIP when quotas couple them.

Problem: minimise sum_i cost(i, x_i) over one candidate x_i per cluster, subject to
sum_{i: x_i in region r} gpus(i, x_i) <= quota(r) for every region with a quota.
The budget does not change the optimum (any plan within budget costs at least the optimum), so
it is checked on the result, not modelled.

Fast exact path: the per-cluster argmin is optimal whenever it respects every quota. Otherwise
a cluster whose argmin uses no quota keeps it (moving could only add cost and quota use), and
the rest go into a 0/1 MIP (HiGHS through ``scipy.optimize.milp``, gap 0). Candidates are
pruned first without losing optimality: per cluster, in a region without quota only the
cheapest survives, in a quota region only the (GPUs, cost) Pareto front, and nothing that costs
at least as much as the cheapest quota-free candidate.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Optional, Sequence



@dataclass(frozen=True)
class Option:
    """A feasible candidate as the solver sees it."""

    monthly_usd: float
    gpus: int
    #: (cloud, region) when that region has a quota, else None (unlimited).
    quota_key: Optional[tuple[str, str]]


@dataclass(frozen=True)
class Solution:
    choice: tuple[int, ...]        # index into each cluster's option list
    method: str                    # "argmin" | "mip"
    #: clusters that the MIP moved away from their argmin (their cheaper options lost on quota).
    displaced: tuple[int, ...] = ()


class QuotaInfeasible(Exception):
    def __init__(self, clusters: list[int], regions: list[tuple[str, str]]):
        self.clusters, self.regions = clusters, regions
        super().__init__(f"quotas cannot host clusters {clusters}")


def _usage(options: Sequence[Sequence[Option]], choice: Sequence[int]) -> dict:
    used: dict = defaultdict(int)
    for opts, j in zip(options, choice):
        o = opts[j]
        if o.quota_key is not None:
            used[o.quota_key] += o.gpus
    return used


def _prune(opts: Sequence[Option]) -> list[int]:
    """Indices (into opts, which are sorted cheapest first) that can be optimal."""
    keep: list[int] = []
    best_gpus: dict = {}
    for j, o in enumerate(opts):
        if o.quota_key is None:
            keep.append(j)
            break  # everything after costs at least as much and uses no less quota
        if o.gpus < best_gpus.get(o.quota_key, 1 << 60):
            best_gpus[o.quota_key] = o.gpus
            keep.append(j)
    return keep


def solve(options: Sequence[Sequence[Option]], quotas: dict) -> Solution:
    """Optimal choice. ``options[i]`` is cluster i's feasible options, sorted cheapest first."""
    argmin = [0] * len(options)
    used = _usage(options, argmin)
    if all(n <= quotas[k] for k, n in used.items()):
        return Solution(tuple(argmin), "argmin")

    # scipy loads in ~0.3 s: only when quotas actually couple clusters (not for --help).
    import numpy as np
    from scipy.optimize import LinearConstraint, milp
    from scipy.sparse import csr_matrix

    coupled = [i for i, opts in enumerate(options) if opts[0].quota_key is not None]
    cols: list[tuple[int, int]] = []
    for i in coupled:
        cols.extend((i, j) for j in _prune(options[i]))
    rows_of_region = {k: r for r, k in enumerate(sorted(quotas))}
    n_clusters = len(coupled)
    row_of_cluster = {i: r for r, i in enumerate(coupled)}
    data, ri, ci = [], [], []
    cost = np.empty(len(cols))
    for c, (i, j) in enumerate(cols):
        o = options[i][j]
        cost[c] = o.monthly_usd
        data.append(1.0), ri.append(row_of_cluster[i]), ci.append(c)
        if o.quota_key is not None:
            data.append(float(o.gpus)), ri.append(n_clusters + rows_of_region[o.quota_key])
            ci.append(c)
    n_rows = n_clusters + len(rows_of_region)
    a = csr_matrix((data, (ri, ci)), shape=(n_rows, len(cols)))
    lb = np.concatenate([np.ones(n_clusters), np.full(len(rows_of_region), -np.inf)])
    ub = np.concatenate([np.ones(n_clusters),
                         np.array([float(quotas[k]) for k in sorted(quotas)])])
    res = milp(cost, constraints=LinearConstraint(a, lb, ub), integrality=np.ones(len(cols)),
               bounds=(0, 1), options={"mip_rel_gap": 0.0, "time_limit": 120.0})
    if res.status == 2 or res.x is None:
        regions = sorted({o.quota_key for i in coupled for o in options[i]
                          if o.quota_key is not None})
        stuck = [i for i in coupled if all(o.quota_key is not None for o in options[i])]
        raise QuotaInfeasible(stuck or coupled, regions)
    if res.status != 0:  # pragma: no cover - time limit on absurd inputs
        raise RuntimeError(f"MIP solver stopped: {res.message}")
    choice = list(argmin)
    for c, (i, j) in enumerate(cols):
        if res.x[c] > 0.5:
            choice[i] = j
    displaced = tuple(i for i in coupled if choice[i] != 0
                      and options[i][choice[i]].monthly_usd > options[i][0].monthly_usd)
    return Solution(tuple(choice), "mip", displaced)
