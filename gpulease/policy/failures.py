"""What the decision says when no plan satisfies the policy: findings naming the config keys to
fix (an infeasible cluster, GPU quotas that cannot host the clusters together, a budget short)."""
from __future__ import annotations

from gpulease.errors import Finding
from gpulease.model import ClusterSpec, StackSpec
from gpulease.policy.candidates import Candidate
from gpulease.policy.explanation import num
from gpulease.policy.solver import QuotaInfeasible

#: how many rejected candidates an infeasibility message lists before "and N more".
_MAX_LISTED = 12


def headline(stack: StackSpec) -> str:
    """The first line of the decision's PolicyError."""
    return (f"{stack.source or 'stack ' + stack.stack}: no plan satisfies the policy — fix the "
            "keys below (reference: docs/policy.md) and run again:")


_HINTS = (
    ("region not enabled", "enable a region under gpulease:clouds.<cloud>.regions"),
    ("residency", "widen {path}.regions"),
    ("cross-cloud data", "set gpulease:policy.allow_cross_cloud_data: true"),
    ("no RDMA", "set {path}.distributed: false or gpulease:policy.require_rdma_for_distributed: "
                "false"),
    ("quota", "raise gpulease:clouds.<cloud>.quota_gpus"),
    ("template", "remove {path}.template"),
    ("no price", "change {path}.gpu or {path}.priority"),
    ("local zones", "list the region under gpulease:clouds.aws.local_zones"),
    ("window", "widen {path}.window (start earlier, a later deadline) or read live quotes "
               "(gpulease catalog quotes)"),
    ("not sold", "change {path}.gpu, or let a purchase model it is sold with apply "
                 "({path}.priority / checkpoint_minutes; docs/catalog.md 'Purchase options')"),
)


def infeasible(spec: ClusterSpec, rejected: list[tuple], stack: StackSpec) -> Finding:
    """Why no offering can run the cluster. ``rejected``: (offering, why) of every offering of
    the cluster's GPU, in candidate order (``Quotes.order``: what ``candidates_for`` ranks,
    without building a candidate per pair)."""
    path = spec.config_path
    head = f'no feasible offering for cluster "{spec.name}" ({spec.gpus} x {spec.gpu})'
    if not rejected:
        clouds = ", ".join(sorted(stack.clouds)) or "none"
        return Finding(path, f"{head}: the catalog has no {spec.gpu} offering on the configured "
                       f"clouds ({clouds}); configure a cloud that offers it or change "
                       f"{path}.gpu", source=stack.source)
    # Offerings in regions the stack does not enable are summarised, not itemised: the
    # actionable reasons are the ones that stop candidates the user did allow.
    enabled = [(o, why) for o, why in rejected if not why.startswith("region not enabled")]
    off = [(o, why) for o, why in rejected if why.startswith("region not enabled")]
    listed = [f"{o.cloud}:{o.region} {o.instance_type}: {why}"
              for o, why in enabled[:_MAX_LISTED]]
    if len(enabled) > _MAX_LISTED:
        listed.append(f"and {len(enabled) - _MAX_LISTED} more")
    if off:
        listed.append(f"{len(off)} more in regions not enabled under gpulease:clouds")
    hints = []
    for key, hint in _HINTS:
        if any(why.startswith(key) for _, why in (enabled or off)):
            hints.append(hint.format(path=path))
    return Finding(path, f"{head}: " + "; ".join(listed) + ". Fix: " + " or ".join(hints),
                   source=stack.source)


def quota_finding(stack: StackSpec, exc: QuotaInfeasible, quotes, ranked) -> Finding:
    """The clusters the GPU quotas cannot host together (``ranked``: each one's feasible
    columns of its ``quotes``)."""
    names = [stack.clusters[i].name for i in exc.clusters]
    need = sum(int(quotes[i].gpus[ranked[i]].min()) for i in exc.clusters)
    quota = sum(stack.clouds[cl].quota_gpus[r] for cl, r in exc.regions)
    regions = ", ".join(f"{cl}:{r} ({stack.clouds[cl].quota_gpus[r]})" for cl, r in exc.regions)
    return Finding("gpulease:clouds", f"GPU quotas cannot host clusters {', '.join(names)} at "
                   f"once: they need at least {need} GPUs together, their regions allow {quota} "
                   f"({regions}). Fix: raise gpulease:clouds.<cloud>.quota_gpus, enable more "
                   "regions, or lower the clusters' gpus", source=stack.source)


def budget_finding(stack: StackSpec, chosen: list[Candidate], storage, total: float,
                   owned=((), ())) -> Finding:
    """How far the cheapest plan is over budget, and the clusters (then storage) driving it.
    ``owned``: (placements, pool uses) - a cluster's owned share counts with its cloud cost,
    a pool's idle line as "owned pool NAME, idle"."""
    short = total - stack.budget_monthly_usd
    placements, pools = owned
    cost = {s.name: c.monthly_usd for c, s in zip(chosen, stack.clusters)}
    for p in placements:
        if p.owned is not None:
            cost[p.name] = cost.get(p.name, 0.0) + p.owned.monthly_usd
    for u in pools:
        if u.idle_usd > 0:
            cost[f"owned pool {u.pool}, idle"] = u.idle_usd
    items = sorted(((usd, name) for name, usd in cost.items()), key=lambda t: (-t[0], t[1]))
    drivers, acc = [], 0.0
    for usd, name in items:
        drivers.append(f"{name} ({num(usd)})")
        acc += usd
        if acc >= short:
            break
    text = (f"budget {num(stack.budget_monthly_usd)} USD/month is short by {short:.2f} USD; "
            f"driven by clusters {', '.join(drivers)}")
    if acc < short and storage:
        text += "; storage " + ", ".join(f"{s.name} ({num(s.monthly_usd)})" for s in storage)
    return Finding("gpulease:budget_monthly_usd",
                   text + ". Fix: raise gpulease:budget_monthly_usd or lower gpus / "
                   "hours_per_month of those clusters", source=stack.source)
