"""One reaper run across cloud adaptors: discover -> read utilization -> decide -> act -> audit.

Cloud-neutral: adaptors (``infra.reaper.aws`` / ``infra.reaper.gcp``) do discovery and actions
and raise :class:`infra.errors.CloudError`; this module owns ordering, the per-run cap, the
re-check right before acting, per-cluster failure isolation and the audit trail.
No pydantic / Pulumi imports (the scheduled Lambda runs it).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Iterable, Optional, Protocol, Sequence

from infra.costing import tags
from infra.errors import CloudError
from infra.reaper import decision as d
from infra.reaper.audit import AuditLog


@dataclass(frozen=True)
class Reservation:
    """Capacity that keeps billing after a scale-down (AWS ODCR, GCP reservation)."""

    id: str
    instance_type: str
    count: int
    region: str
    zone: str = ""
    #: reserved price x count x 24 from the catalog; None when the catalog has no price.
    usd_per_day: Optional[float] = None
    note: str = ""


class Adaptor(Protocol):
    cloud: str
    #: where it looks (AWS region / GCP project), for messages.
    label: str

    def discover(self, environments: Optional[frozenset]) -> list[d.ClusterRef]: ...

    def utilization(self, nodes: Sequence[d.Node], start: float, end: float,
                    period_s: int) -> dict: ...

    def mark(self, ref: d.ClusterRef, value: str) -> None: ...

    def unmark(self, ref: d.ClusterRef) -> None: ...

    def scale_to_zero(self, ref: d.ClusterRef) -> None: ...

    def reservations(self, ref: d.ClusterRef) -> list[Reservation]: ...


#: hourly reserved price of one node: (cloud, region, instance_type) -> USD or None.
Pricer = Callable[[str, str, str], Optional[float]]
#: tears an environment's whole stack down (Pulumi Automation API).
Destroyer = Callable[[str], None]


@dataclass(frozen=True)
class Outcome:
    cluster: str
    environment: str
    cloud: str
    region: str
    state: str
    reason: str
    action: str
    nodes: int
    max_gpu_utilization: Optional[float]
    window_minutes: Optional[int] = None
    #: True when the action was carried out (``--apply``); False for a dry run / no action.
    applied: bool = False
    groups: tuple[str, ...] = ()
    reservations: tuple[Reservation, ...] = ()

    def as_json(self) -> dict:
        out = {k: getattr(self, k) for k in (
            "cluster", "environment", "cloud", "region", "state", "reason", "action", "nodes",
            "max_gpu_utilization")}
        if out["max_gpu_utilization"] is not None:
            out["max_gpu_utilization"] = round(out["max_gpu_utilization"], 2)
        out.update(window_minutes=self.window_minutes, applied=self.applied,
                   groups=list(self.groups),
                   reservations=[asdict(r) for r in self.reservations])
        return out


@dataclass
class Report:
    outcomes: list = field(default_factory=list)
    apply: bool = False

    @property
    def failed(self) -> bool:
        return any(o.state == d.ERROR for o in self.outcomes)

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def as_json(self) -> dict:
        return {"apply": self.apply, "clusters": [o.as_json() for o in self.outcomes]}


def catalog_pricer(catalog) -> Pricer:
    """Reserved hourly price per node from the catalog (never invented: None when absent).

    A reservation with no commitment price bills at the on-demand rate (Offering.reservation_rate).
    """

    def price(cloud: str, region: str, instance_type: str) -> Optional[float]:
        try:
            return catalog.offering(cloud, region, instance_type).reservation_rate()
        except KeyError:
            return None
    return price


def _outcome(ref: d.ClusterRef, v: d.Verdict, **kw) -> Outcome:
    return Outcome(cluster=ref.cluster, environment=ref.environment, cloud=ref.cloud,
                   region=ref.region, state=v.state, reason=v.reason, action=v.action,
                   nodes=len(ref.nodes), max_gpu_utilization=v.max_gpu_utilization,
                   window_minutes=v.window_minutes, groups=ref.groups, **kw)


def _error(ref: d.ClusterRef, exc: Exception, action: str = d.NONE) -> Outcome:
    return Outcome(cluster=ref.cluster, environment=ref.environment, cloud=ref.cloud,
                   region=ref.region, state=d.ERROR, reason=str(exc), action=action,
                   nodes=len(ref.nodes), max_gpu_utilization=None, groups=ref.groups)


def _price(reservations: Iterable[Reservation], cloud: str, pricer: Optional[Pricer]):
    out = []
    for r in reservations:
        hourly = pricer(cloud, r.region, r.instance_type) if pricer else None
        if hourly is None:
            out.append(replace(r, note=r.note or f"no reserved price for {r.instance_type} in "
                               f"{r.region} in the catalog"))
        else:
            out.append(replace(r, usd_per_day=round(hourly * r.count * 24, 2)))
    return tuple(out)


def _longest_window(refs: Sequence[d.ClusterRef], policy: d.Policy) -> int:
    windows = [w for w in (d.window_minutes(r, policy) for r in refs) if w]
    return max(windows, default=60)


def run(adaptors: Sequence[Adaptor], *, policy: d.Policy, apply: bool = False,
        max_actions: int = 10, environments: Optional[Iterable[str]] = None,
        audit: Optional[AuditLog] = None, now: Optional[float] = None,
        pricer: Optional[Pricer] = None, destroyer: Optional[Destroyer] = None,
        clock: Callable[[], float] = time.time) -> Report:
    """Run the reaper once. ``environments=None`` means every environment (``--all``)."""
    audit = audit or AuditLog(None)
    envs = frozenset(environments) if environments is not None else None
    report = Report(apply=apply)
    audit.write("run-start", apply=apply, environments=sorted(envs) if envs else "all",
                policy=asdict(policy), max_actions=max_actions,
                adaptors=[f"{a.cloud}:{a.label}" for a in adaptors])

    planned: list[tuple[Adaptor, d.ClusterRef, d.Verdict]] = []
    for ad in adaptors:
        try:
            refs = sorted(ad.discover(envs), key=lambda r: r.key)
        except CloudError as exc:
            o = Outcome(cluster="*", environment="*", cloud=ad.cloud, region=ad.label,
                        state=d.ERROR, reason=f"discovery failed: {exc}", action=d.NONE,
                        nodes=0, max_gpu_utilization=None)
            report.outcomes.append(o)
            audit.write("error", **o.as_json())
            continue
        t = now if now is not None else clock()
        window = _longest_window(refs, policy)
        nodes = [n for r in refs for n in r.nodes]
        try:
            samples = ad.utilization(nodes, t - window * 60, t, policy.period_s) if nodes else {}
        except CloudError as exc:
            for ref in refs:
                o = _error(ref, CloudError(ad.cloud, "read GPU utilization", str(exc)))
                report.outcomes.append(o)
                audit.write("error", **o.as_json())
            continue
        for ref in refs:
            planned.append((ad, ref, d.decide(ref, samples, now=t, policy=policy)))

    blocked_envs = _destroy_blockers(planned) if policy.destroy else {}
    destroyed: set[str] = set()
    acted = 0
    teardowns: list[tuple[int, Adaptor, d.ClusterRef, d.Verdict]] = []
    for ad, ref, verdict in planned:
        audit.write("decision", apply=apply, **_outcome(ref, verdict).as_json())
        if verdict.action in d.TEARDOWN_ACTIONS:
            if ref.environment in blocked_envs:
                o = _outcome(ref, replace(verdict, state=d.SKIPPED, action=d.NONE, reason=(
                    f"{verdict.reason}; --destroy would also take down "
                    f"{blocked_envs[ref.environment]} of environment {ref.environment}, "
                    "which are not due: nothing destroyed")))
                report.outcomes.append(o)
                audit.write("skipped", **o.as_json())
                continue
            if acted >= max_actions:
                o = _outcome(ref, replace(verdict, state=d.SKIPPED, action=d.NONE, reason=(
                    f"{verdict.reason}; per-run cap of {max_actions} teardown(s) reached "
                    "(raise --max-actions)")))
                report.outcomes.append(o)
                audit.write("skipped", **o.as_json())
                continue
            acted += 1
            teardowns.append((len(report.outcomes), ad, ref, verdict))
            report.outcomes.append(None)  # filled below, after the re-check
            continue
        report.outcomes.append(_mark_or_unmark(ad, ref, verdict, apply=apply,
                                               now=now if now is not None else clock(),
                                               audit=audit))

    # Re-check right before acting, one batched read per adaptor: a job may have started since
    # the first read (Karpenter sigs#3185 — a node became busy during the wait and was
    # deleted anyway).
    for ad in adaptors:
        mine = [t for t in teardowns if t[1] is ad]
        if not mine:
            continue
        t = now if now is not None else clock()
        fresh: Optional[dict] = None
        if apply:
            window = _longest_window([ref for _, _, ref, _ in mine], policy)
            try:
                fresh = ad.utilization([n for _, _, ref, _ in mine for n in ref.nodes],
                                       t - window * 60, t, policy.period_s)
            except CloudError as exc:
                for idx, _, ref, v in mine:
                    o = _error(ref, CloudError(ad.cloud, "re-check GPU utilization", str(exc)),
                               v.action)
                    report.outcomes[idx] = o
                    audit.write("action", ok=False, **o.as_json())
                continue
        for idx, _, ref, v in mine:
            report.outcomes[idx] = _teardown(ad, ref, v, apply=apply, policy=policy, now=t,
                                             fresh=fresh, pricer=pricer, destroyer=destroyer,
                                             destroyed=destroyed, audit=audit)
    audit.write("run-end", apply=apply, clusters=len(report.outcomes), teardowns=acted,
                failed=report.failed)
    return report


def _destroy_blockers(planned) -> dict[str, str]:
    """Environments where some cluster is NOT due: destroying their stack would hit it too."""
    pending: dict[str, list[str]] = {}
    for _, ref, v in planned:
        if v.action != d.DESTROY:
            pending.setdefault(ref.environment, []).append(ref.cluster)
    return {env: "cluster(s) " + ", ".join(sorted(c)) for env, c in pending.items()}


def _mark_or_unmark(ad: Adaptor, ref: d.ClusterRef, v: d.Verdict, *, apply: bool, now: float,
                    audit: AuditLog) -> Outcome:
    if v.action == d.NONE or not apply:
        return _outcome(ref, v)
    try:
        if v.action == d.MARK:
            ad.mark(ref, tags.timestamp_label(now))
            v = replace(v, state=d.MARKED)
        elif v.action == d.UNMARK:
            ad.unmark(ref)
    except CloudError as exc:
        o = _error(ref, exc, v.action)
        audit.write("action", ok=False, **o.as_json())
        return o
    o = _outcome(ref, v, applied=True)
    audit.write("action", ok=True, **o.as_json())
    return o


def _teardown(ad: Adaptor, ref: d.ClusterRef, v: d.Verdict, *, apply: bool, policy: d.Policy,
              now: float, fresh: Optional[dict], pricer, destroyer, destroyed: set,
              audit: AuditLog) -> Outcome:
    try:
        reservations = _price(ad.reservations(ref), ref.cloud, pricer)
    except CloudError as exc:
        reservations = (Reservation(id="?", instance_type="?", count=0, region=ref.region,
                                    note=f"could not list reservations: {exc}"),)
    if not apply:
        return _outcome(ref, v, reservations=reservations)
    try:
        again = d.decide(ref, fresh or {}, now=now, policy=policy)
        if again.action != v.action:
            audit.write("recheck", changed=True, **_outcome(ref, again).as_json())
            return _mark_or_unmark(ad, ref, again, apply=apply, now=now, audit=audit)
        if v.action == d.DESTROY:
            if destroyer is None:
                raise CloudError(ref.cloud, "destroy", "no Pulumi destroyer configured")
            if ref.environment not in destroyed:
                destroyer(ref.environment)
                destroyed.add(ref.environment)
        else:
            ad.scale_to_zero(ref)
    except CloudError as exc:
        o = _error(ref, exc, v.action)
        audit.write("action", ok=False, **o.as_json())
        return o
    what = "stack destroyed" if v.action == d.DESTROY else "compute scaled to zero"
    templates = "launch templates" if ref.cloud == "aws" else "instance templates"
    keep = f"; {templates} and storage untouched" if v.action == d.SCALE_TO_ZERO else \
        "; retained/protected storage survives"
    billing = ""
    if reservations:
        known = [r.usd_per_day for r in reservations if r.usd_per_day is not None]
        billing = (f"; {len(reservations)} reservation(s) keep billing"
                   + (f" (${sum(known):,.2f}/day unused)" if known else ""))
    o = _outcome(ref, replace(again, state=d.REAPED, reason=f"{again.reason}; {what}{keep}"
                              f"{billing}"), applied=True, reservations=reservations)
    audit.write("action", ok=True, **o.as_json())
    return o
