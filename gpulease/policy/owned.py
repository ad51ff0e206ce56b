"""Owned pools first (issue 32; docs/owned.md, "How the policy fills what is paid for"): which
clusters, or which share of a cluster, run on the GPUs the organisation already owns
(``gpulease:owned``), before the cloud policy prices what is left.

The rule, per cluster, in the order clusters claim pools - **priority, highest first; equal
priorities in config order** (a cluster never displaces one placed before it):

- a pool fits when it has the cluster's GPU model, the cluster is a monthly load (a window work
  item is priced by its window; a pinned Capacity Block is a purchase already chosen), the
  pool's ``regions_equivalent`` satisfy the cluster's residency allow-list (an entry of the
  pool that equals or starts with an entry of the cluster, as a cloud region would; a cluster
  without an allow-list fits any pool), the pool runs at least the hours of the cluster's
  first demand step (``available_hours_per_month``), and the pool has a free node;
- the cluster takes whole nodes of the pool (``gpus_per_node``): all it needs
  (``ceil(gpus / gpus_per_node)``) when that many are free, else every free node - its first
  GPUs (the baseline, the most hours) run on the pool and the rest, the **burst**, goes to
  the cloud policy as a cluster of the remaining GPUs (a job never spans the site and a
  cloud: the burst is a separate node group);
- a cluster with ``distributed: true`` is one gang: it is placed whole or not at all; a share
  of more than one node that is distributed (``distributed: true``, or unset and more than one
  node, as on cloud) needs a pool with ``rdma: true`` while ``require_rdma_for_distributed``
  holds;
- among the pools that fit, the first in config order that takes the whole cluster, else the
  one that takes most nodes (first in config order on a tie).

Owned capacity is filled whenever it fits: using it adds only its marginal cost (the power a
running GPU draws, ``gpulease.owned.cost``) while depreciation, colocation and operations are
paid either way. The plan charges the share the pool's amortised $/GPU-hour (never $0) and
shows the marginal figure beside it.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Optional

from gpulease.model import (ClusterSpec, DemandStep, OwnedPool, OwnedPoolUse, OwnedShare,
                            Placement, StackSpec)
from gpulease.owned.cost import PoolCost, pool_cost
from gpulease.policy.candidates import matches_residency


def place(stack: StackSpec, as_of: dt.date, *, require_rdma: bool = True
          ) -> tuple[tuple[Placement, ...], tuple[OwnedPoolUse, ...]]:
    """Every cluster's placement (config order) and every pool's use; ``((), ())`` without
    owned pools."""
    if not stack.owned:
        return (), ()
    costs = {p.name: pool_cost(p, as_of) for p in stack.owned}
    free = {p.name: p.nodes for p in stack.owned}
    placed: dict[str, Placement] = {}
    for spec in sorted(stack.clusters, key=lambda c: (-c.priority, c.index)):
        placed[spec.name] = _place_one(spec, stack.owned, free, costs, require_rdma)
    placements = tuple(placed[c.name] for c in stack.clusters)
    uses = tuple(_use(p, costs[p.name], [x.owned for x in placements
                                          if x.owned is not None and x.owned.pool == p.name],
                      as_of) for p in stack.owned)
    return placements, uses


def cloud_spec(p: Placement) -> Optional[ClusterSpec]:
    """The cluster the cloud policy prices: as configured (nothing owned), the burst (the GPUs
    the pool does not hold), or None (all on the pool)."""
    if p.owned is None:
        return p.spec
    if not p.cloud_gpus:
        return None
    cap = p.owned.gpus
    rest = [DemandStep(st.gpus - cap, st.hours_per_month) for st in p.spec.steps
            if st.gpus > cap]
    return dataclasses.replace(p.spec, gpus=rest[-1].gpus, hours_per_month=rest[0].hours_per_month,
                               demand=tuple(rest) if len(rest) > 1 else ())


def _mismatch(spec: ClusterSpec, pool: OwnedPool) -> Optional[str]:
    """Why the pool cannot take any of the cluster (None: it can, capacity aside)."""
    if spec.gpu != pool.gpu:
        return f"GPU model: the pool holds {pool.gpu}, the cluster needs {spec.gpu}"
    if spec.window is not None:
        return ("the cluster is a work item with a window, priced by its window; owned pools "
                "take monthly loads")
    if spec.capacity_block is not None:
        return "the cluster's reserved nodes are pinned to a Capacity Block"
    if spec.regions and not any(matches_residency(e, spec.regions)
                                for e in pool.regions_equivalent):
        have = ", ".join(pool.regions_equivalent) or "none"
        return (f"residency: the cluster may run only in {', '.join(spec.regions)}; the site "
                f"satisfies {have} (regions_equivalent)")
    first = spec.steps[0].hours_per_month
    if first > pool.available_hours_per_month + 1e-9:
        return (f"hours: the pool runs {pool.available_hours_per_month:g} h a month, the "
                f"cluster's first demand step {first:g} h")
    return None


def _place_one(spec: ClusterSpec, pools, free: dict, costs: dict,
               require_rdma: bool) -> Placement:
    why, fits = [], []
    for pool in pools:
        bad = _mismatch(spec, pool)
        if bad is None:
            need = -(-spec.gpus // pool.gpus_per_node)
            take = min(need, free[pool.name])
            gang = spec.distributed is True
            distributed = spec.distributed if spec.distributed is not None else take > 1
            if take == 0:
                bad = (f"capacity: none of its {pool.nodes} nodes is free (taken by clusters of "
                       "higher priority, or earlier in config)")
            elif gang and take < need:
                bad = (f"capacity: the cluster is one {need}-node gang (distributed: true), "
                       f"which cannot split between the site and a cloud; {take} of the "
                       f"pool's nodes are free")
            elif distributed and take > 1 and require_rdma and not pool.rdma:
                bad = (f"RDMA: a {take}-node distributed share needs an RDMA fabric; the pool "
                       "has none (rdma: false)")
            else:
                fits.append((take == need, take, pool, need))
                continue
        why.append(f'owned pool "{pool.name}": {bad}')
    if not fits:
        return Placement(spec=spec, owned=None, cloud_gpus=spec.gpus, why=tuple(why))
    whole = [f for f in fits if f[0]]
    full, take, pool, need = whole[0] if whole else max(fits, key=lambda f: f[1])
    free[pool.name] -= take
    share = _share(spec, pool, take, full, costs[pool.name])
    cloud = 0 if full else spec.gpus - share.gpus
    c = costs[pool.name]
    text = (f'owned pool "{pool.name}" ({pool.site}): {take} of its {pool.nodes} '
            f"{pool.gpus_per_node}x{pool.gpu} nodes, at the amortised "
            f"{c.amortised_usd_per_gpu_hour:.4f} USD/GPU-hour (marginal "
            f"{c.marginal_usd_per_gpu_hour:.4f}: power only, the rest is paid either way)")
    if not full:
        text += (f"; capacity: the cluster needs {need} nodes, {take} were free, so its other "
                 f"{cloud} GPUs (the burst) run on cloud")
    return Placement(spec=spec, owned=share, cloud_gpus=cloud, why=tuple([text] + why))


def _share(spec: ClusterSpec, pool: OwnedPool, nodes: int, full: bool,
           cost: PoolCost) -> OwnedShare:
    cap = spec.gpus if full else nodes * pool.gpus_per_node
    steps, before = [], 0
    for st in spec.steps:
        g = min(st.gpus, cap)
        if g > before:
            steps.append(DemandStep(g, st.hours_per_month))
            before = g
    probe = dataclasses.replace(spec, gpus=steps[-1].gpus, demand=tuple(steps))
    node_hours = sum(ns.nodes * ns.hours_per_month for ns in probe.node_steps(pool.gpus_per_node))
    return OwnedShare(pool=pool.name, site=pool.site, kind=pool.kind, gpu=pool.gpu,
                      gpus_per_node=pool.gpus_per_node, nodes=nodes, steps=tuple(steps),
                      gpu_hours_per_month=node_hours * pool.gpus_per_node,
                      amortised_usd_per_gpu_hour=cost.amortised_usd_per_gpu_hour,
                      marginal_usd_per_gpu_hour=cost.marginal_usd_per_gpu_hour)


def _use(pool: OwnedPool, c: PoolCost, shares: list[OwnedShare], as_of: dt.date) -> OwnedPoolUse:
    return OwnedPoolUse(
        pool=pool.name, site=pool.site, kind=pool.kind, gpu=pool.gpu, gpus=pool.gpus,
        gpus_per_node=pool.gpus_per_node, used_nodes=sum(s.nodes for s in shares),
        gpu_hours_per_month=c.gpu_hours_per_month,
        used_gpu_hours=sum(s.gpu_hours_per_month for s in shares),
        amortised_usd_per_gpu_hour=c.amortised_usd_per_gpu_hour,
        marginal_usd_per_gpu_hour=c.marginal_usd_per_gpu_hour,
        depreciation_usd_per_month=c.depreciation_usd_per_month,
        power_usd_per_month=c.power_usd_per_month, fixed_usd_per_month=c.fixed_usd_per_month,
        depreciated=c.depreciated, as_of=as_of.isoformat())
