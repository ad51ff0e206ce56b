"""One reaper run across cloud adaptors: discover -> read utilization -> decide -> act -> audit.

Cloud-neutral: adaptors (``gpulease.reaper.aws`` / ``gpulease.reaper.gcp``) do discovery and actions
and raise :class:`gpulease.errors.CloudError` (subtypes in :mod:`gpulease.reaper.errors`); this module
owns ordering, the per-run cap and its sharing with concurrent reapers (:mod:`gpulease.reaper.claims`),
the re-checks right before acting (utilization, then membership), per-cluster failure isolation
and the audit trail. Whatever goes wrong, :func:`run` returns a report: one cluster's failure,
or one adaptor's, never stops the others, and nothing escapes as a traceback.
No pydantic / Pulumi imports (the scheduled functions run it).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterable, Optional, Protocol, Sequence

from gpulease import money
from gpulease import tags
from gpulease.clouds import registry
from gpulease.errors import CloudError
from gpulease.reaper import claims as cl
from gpulease.reaper import decision as d
from gpulease.reaper.audit import AuditLog
from gpulease.reaper.errors import GroupGone
from gpulease.text import plural


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

    def scale_to_zero(self, ref: d.ClusterRef) -> Optional[list]: ...

    #: resize each group named in ``targets`` to its size (the baseline); others untouched.
    def scale_to_baseline(self, ref: d.ClusterRef, targets: dict) -> Optional[list]: ...

    #: per-node idle marks (issue 21 item 2): set ``value`` on / clear it from these nodes.
    def mark_nodes(self, ref: d.ClusterRef, node_ids: Sequence[str], value: str) -> None: ...

    def unmark_nodes(self, ref: d.ClusterRef, node_ids: Sequence[str]) -> None: ...

    #: take these nodes out of their groups, each group's desired size going down with them
    #: (AWS TerminateInstanceInAutoScalingGroup with decrement; GCP MIG deleteInstances).
    def remove_nodes(self, ref: d.ClusterRef, nodes: Sequence[d.Node]) -> Optional[list]: ...

    def reservations(self, ref: d.ClusterRef) -> list[Reservation]: ...

    #: the busy witness (tags.BUSY_AT, contract C10) of these nodes as the cloud has it now:
    #: {node id: raw value, or None when the node has none}. Called only for nodes that carry
    #: tags.BUSY_WITNESS (an adaptor whose nodes never do need not have it).
    def busy_witness(self, nodes: Sequence[d.Node]) -> dict: ...

    #: the nodes' own leave requests (tags.LEAVE_REQUESTED; GCP: its guest attribute) as the
    #: cloud has them now: {node id: raw value, or None when the node carries none}.
    def leave_requests(self, nodes: Sequence[d.Node]) -> dict: ...

    #: each cluster's compute right now (node ids, capacity, deleted groups), by ref.key.
    def members(self, refs: Sequence[d.ClusterRef]) -> dict: ...

    def claim_key(self, ref: d.ClusterRef) -> Any: ...

    def claims(self) -> list[cl.Claim]: ...

    def claim(self, ref: d.ClusterRef, key: str, value: str, *, now: float) -> None: ...

    def release(self, ref: d.ClusterRef, key: str) -> None: ...


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
    #: the cluster's baseline (``gpulease-baseline-nodes`` summed over its groups); None = none.
    baseline_nodes: Optional[int] = None
    #: teardowns: nodes removed (``applied``) or that would be (dry run); None otherwise.
    nodes_removed: Optional[int] = None
    #: what held the reaper back (declared schedule, first-job grace, prepaid groups), as
    #: ``{"kind", "until", "detail"}`` (schedule.Hold.as_json).
    holds: tuple = ()
    #: per-node marks / unmarks / removals, as ``{"node", "group", "action", "reason"}``.
    node_actions: tuple = ()
    #: nodes whose busy witness held them (their metrics said idle), as ``{"node",
    #: "busy_at", "detail"}`` (issue 21 item 4, contract C10).
    busy_witness: tuple = ()

    #: the deadline step's verdict (issue 37): DeadlineVerdict.as_json; None for idle outcomes
    deadline: Optional[dict] = None

    def as_json(self) -> dict:
        out = {k: getattr(self, k) for k in (
            "cluster", "environment", "cloud", "region", "state", "reason", "action", "nodes",
            "max_gpu_utilization")}
        if out["max_gpu_utilization"] is not None:
            out["max_gpu_utilization"] = round(out["max_gpu_utilization"], 2)
        out.update(window_minutes=self.window_minutes, applied=self.applied,
                   groups=list(self.groups),
                   reservations=[asdict(r) for r in self.reservations],
                   baseline_nodes=self.baseline_nodes, nodes_removed=self.nodes_removed,
                   holds=[dict(h) for h in self.holds],
                   node_actions=[dict(a) for a in self.node_actions],
                   busy_witness=[dict(w) for w in self.busy_witness])
        if self.deadline is not None:
            out["deadline"] = dict(self.deadline)
        return out


@dataclass
class Report:
    outcomes: list = field(default_factory=list)
    apply: bool = False
    #: groups tagged like a cluster that the program did not declare (tags.DECLARED): listed,
    #: never acted on (:func:`gpulease.reaper.decision.undeclared`).
    undeclared: list = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(o.state == d.ERROR for o in self.outcomes)

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def as_json(self) -> dict:
        return {"apply": self.apply, "clusters": [o.as_json() for o in self.outcomes],
                "undeclared": [dict(u) for u in self.undeclared]}


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
    removed = v.nodes_removed if v.action in d.TEARDOWN_ACTIONS else None
    return Outcome(cluster=ref.cluster, environment=ref.environment, cloud=ref.cloud,
                   region=ref.region, state=v.state, reason=v.reason, action=v.action,
                   nodes=len(ref.nodes), max_gpu_utilization=v.max_gpu_utilization,
                   window_minutes=v.window_minutes, groups=ref.groups,
                   baseline_nodes=v.baseline_nodes, nodes_removed=removed,
                   holds=tuple(h.as_json() for h in v.holds),
                   node_actions=tuple(a.as_json() for a in v.node_actions),
                   busy_witness=tuple(dict(w) for w in v.witness), **kw)


def _internal(cloud: str, what: str, exc: BaseException) -> CloudError:
    """An exception that is not a CloudError is a gpulease bug: reported, never a traceback."""
    return CloudError(cloud, what, f"internal error {type(exc).__name__}: {exc} (a gpulease "
                      "bug: please report it with the audit log)")


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


#: utilization reads are grouped by lookback rounded up to this many minutes, so a few marked
#: clusters needing their evidence since the mark cost one more batched read, not one each.
LOOKBACK_STEP_MIN = 30


def _read(ad: Adaptor, refs: Sequence[d.ClusterRef], *, now: float, policy: d.Policy) -> dict:
    """Utilization for ``refs``: each cluster's nodes over the lookback its decision needs."""
    buckets: dict[int, list] = {}
    for ref in refs:
        minutes = d.lookback_minutes(ref, now=now, policy=policy)
        if minutes:
            step = int(math.ceil(minutes / LOOKBACK_STEP_MIN)) * LOOKBACK_STEP_MIN
            buckets.setdefault(step, []).extend(ref.nodes)
    samples: dict = {}
    for minutes, nodes in sorted(buckets.items()):
        samples.update(ad.utilization(nodes, now - minutes * 60, now, policy.period_s))
    return samples


def _witness(ad: Adaptor, refs: Sequence[d.ClusterRef], samples: dict, *, now: float,
             policy: d.Policy, fresh: bool) -> tuple[list, dict]:
    """``refs`` with the busy witness of their candidate nodes (:func:`d.witness_candidates`)
    read, one batched call per adaptor; ``fresh`` re-reads it even where discovery brought it
    (the re-check right before acting). Returns (refs, {ref.key: CloudError} for the clusters
    whose read failed: nothing is done with those)."""
    want = {ref.key: d.witness_candidates(ref, samples, now=now, policy=policy)
            for ref in refs if fresh or ref.busy_at is None or
            any(n.witness and n.id not in ref.busy_at for n in ref.nodes)}
    nodes = [n for ns in want.values() for n in ns]
    if not nodes:
        return list(refs), {}
    got, exc = _safely(ad.cloud, "read the busy witness", ad.busy_witness, nodes)
    out, failed = [], {}
    for ref in refs:
        mine = want.get(ref.key) or []
        if not mine:
            out.append(ref)
        elif exc is not None:
            failed[ref.key] = exc
            out.append(ref)
        else:
            seen = dict(ref.busy_at or {})
            seen.update({n.id: got.get(n.id) for n in mine})
            out.append(replace(ref, busy_at=seen))
    return out, failed


def _leaves(ad: Adaptor, refs: Sequence[d.ClusterRef], samples: dict, *, now: float,
            policy: d.Policy, audit: AuditLog) -> list:
    """``refs`` with the leave requests of their candidate nodes read where discovery did not
    bring them (GCP: one call per node, :func:`d.leave_candidates`). A read that fails leaves
    the cluster without requests - no node leaves on a request the reaper did not see - and is
    written to the audit log."""
    want = {ref.key: d.leave_candidates(ref, samples, now=now, policy=policy)
            for ref in refs if ref.leave_requests is None}
    nodes = [n for ns in want.values() for n in ns]
    got, exc = (_safely(ad.cloud, "read the leave requests", ad.leave_requests, nodes)
                if nodes else ({}, None))
    if exc is not None:
        audit.write("error", cloud=ad.cloud, region=ad.label,
                    reason=f"leave requests not read ({exc}): none honoured this run")
        got = {}
    return [replace(ref, leave_requests={n.id: got[n.id] for n in want[ref.key]
                                         if got.get(n.id) is not None})
            if ref.key in want else ref for ref in refs]


def _safely(cloud: str, what: str, fn: Callable, *args: Any, **kw: Any):
    """(result, None) or (None, CloudError): the engine's guard around every adaptor call."""
    try:
        return fn(*args, **kw), None
    except CloudError as exc:
        return None, exc
    except Exception as exc:  # noqa: BLE001 - a bug must not abort the other clusters
        return None, _internal(cloud, what, exc)


@dataclass
class _Run:
    """State of one run shared by its phases."""

    report: Report
    audit: AuditLog
    apply: bool
    policy: d.Policy
    now: Callable[[], float]
    pricer: Optional[Pricer]
    destroyer: Optional[Destroyer]
    token: str = ""
    destroyed: set = field(default_factory=set)

    def put(self, idx: int, o: Outcome, event: str, **extra: Any) -> Outcome:
        self.report.outcomes[idx] = o
        self.audit.write(event, **extra, **o.as_json())
        return o


def run(adaptors: Sequence[Adaptor], *, policy: d.Policy, apply: bool = False,
        max_actions: int = 10, environments: Optional[Iterable[str]] = None,
        audit: Optional[AuditLog] = None, now: Optional[float] = None,
        pricer: Optional[Pricer] = None, destroyer: Optional[Destroyer] = None,
        clock: Callable[[], float] = time.time, settle_s: float = cl.SETTLE_S,
        sleep: Callable[[float], None] = time.sleep, run_token: Optional[str] = None) -> Report:
    """Run the reaper once. ``environments=None`` means every environment (``--all``).

    With ``apply``, teardowns go through: the utilization re-check, the claim protocol shared
    with concurrent reapers (at most ``max_actions`` across all of them, :mod:`claims`), the
    membership re-check (only measured nodes are scaled away), then the action.
    """
    audit = audit or AuditLog(None)
    envs = frozenset(environments) if environments is not None else None
    report = Report(apply=apply)
    r = _Run(report=report, audit=audit, apply=apply, policy=policy,
             now=(lambda: now) if now is not None else clock, pricer=pricer,
             destroyer=destroyer, token=run_token or cl.new_token())
    audit.write("run-start", apply=apply, environments=sorted(envs) if envs else "all",
                policy=asdict(policy), max_actions=max_actions, claim_token=r.token,
                adaptors=[f"{a.cloud}:{a.label}" for a in adaptors])

    planned: list[tuple[Adaptor, d.ClusterRef, d.Verdict]] = []
    for ad in adaptors:
        refs, exc = _safely(ad.cloud, "discover", ad.discover, envs)
        if exc is not None:
            o = Outcome(cluster="*", environment="*", cloud=ad.cloud, region=ad.label,
                        state=d.ERROR, reason=f"discovery failed: {exc}", action=d.NONE,
                        nodes=0, max_gpu_utilization=None)
            report.outcomes.append(o)
            audit.write("error", **o.as_json())
            continue
        for u in getattr(ad, "undeclared", None) or ():
            report.undeclared.append(dict(u))
            audit.write("undeclared", **u)
        refs = sorted(refs, key=lambda x: x.key)
        t = r.now()
        samples, exc = _safely(ad.cloud, "read GPU utilization", _read, ad, refs, now=t,
                               policy=policy)
        if exc is not None:
            for ref in refs:
                o = _error(ref, CloudError(ad.cloud, "read GPU utilization", str(exc)))
                report.outcomes.append(o)
                audit.write("error", **o.as_json())
            continue
        refs = _leaves(ad, refs, samples, now=t, policy=policy, audit=audit)
        got, exc = _safely(ad.cloud, "read the busy witness", _witness, ad, refs, samples,
                           now=t, policy=policy, fresh=False)
        refs, unread = got if exc is None else (refs, {ref.key: exc for ref in refs})
        for ref in refs:
            if ref.key in unread:
                o = _error(ref, CloudError(ad.cloud, "read the busy witness",
                                           str(unread[ref.key])))
                report.outcomes.append(o)
                audit.write("error", **o.as_json())
                continue
            verdict, exc = _safely(ad.cloud, "decide", d.decide, ref, samples, now=t,
                                   policy=policy)
            if exc is not None:
                o = _error(ref, exc)
                report.outcomes.append(o)
                audit.write("error", **o.as_json())
                continue
            planned.append((ad, ref, verdict))

    blocked_envs = _destroy_blockers(planned) if policy.destroy else {}
    acted = 0
    teardowns: list[tuple[int, Adaptor, d.ClusterRef, d.Verdict]] = []
    for ad, ref, verdict in planned:
        audit.write("decision", apply=apply, **_outcome(ref, verdict).as_json())
        if verdict.action in d.TEARDOWN_ACTIONS:
            if verdict.action == d.DESTROY and ref.environment in blocked_envs:
                o = _outcome(ref, replace(verdict, state=d.SKIPPED, action=d.NONE, reason=(
                    f"{verdict.reason}; --destroy would also take down "
                    f"{blocked_envs[ref.environment]} of environment {ref.environment}, "
                    "which are not due: nothing destroyed")))
                report.outcomes.append(o)
                audit.write("skipped", **o.as_json())
                continue
            if acted >= max_actions:
                o = _outcome(ref, replace(verdict, state=d.SKIPPED, action=d.NONE, reason=(
                    f"{verdict.reason}; per-run cap of {plural(max_actions, 'teardown')} reached "
                    "(raise --max-actions)")))
                report.outcomes.append(o)
                audit.write("skipped", **o.as_json())
                continue
            acted += 1
            teardowns.append((len(report.outcomes), ad, ref, verdict))
            report.outcomes.append(None)  # filled below, after the re-checks
            continue
        report.outcomes.append(_mark_or_unmark(ad, ref, verdict, r))

    if not apply:
        for idx, ad, ref, v in teardowns:
            report.outcomes[idx] = _outcome(ref, v, reservations=_reservations(ad, ref, r))
    elif teardowns:
        destroy_sets: dict = {}
        for _, ref, v in planned:
            if v.action == d.DESTROY:
                destroy_sets.setdefault(ref.environment, set()).add(ref.key)
        try:
            due = _recheck(teardowns, adaptors, r)
            due = _claim(due, adaptors, r, max_actions=max_actions, settle_s=settle_s,
                         sleep=sleep)
            _act(due, adaptors, r, destroy_sets=destroy_sets)
        except Exception as exc:  # noqa: BLE001 - a bug: report it per cluster, never a traceback
            err = _internal("reaper", "teardown", exc)
            for idx, _, ref, v in teardowns:
                if report.outcomes[idx] is None:
                    r.put(idx, _error(ref, err, v.action), "error")
    reaped = {(o.cloud, o.region, o.environment, o.cluster) for o in report.outcomes
              if o is not None and o.state == d.REAPED}
    _deadline_step(adaptors, r, envs, reaped)
    audit.write("run-end", apply=apply, clusters=len(report.outcomes),
                teardowns=sum(1 for o in report.outcomes if o.state == d.REAPED),
                failed=report.failed)
    return report


def _destroy_blockers(planned) -> dict[str, str]:
    """Environments where some cluster is NOT due: destroying their stack would hit it too.

    A cluster with a baseline is never due for a destroy (it is scaled to its baseline
    instead), so it keeps its whole environment's stack."""
    pending: dict[str, list[str]] = {}
    for _, ref, v in planned:
        if v.action != d.DESTROY:
            pending.setdefault(ref.environment, []).append(
                ref.cluster + (" (keeps a baseline)" if v.baseline_nodes else ""))
    return {env: "cluster(s) " + ", ".join(sorted(c)) for env, c in pending.items()}


def _mark_or_unmark(ad: Adaptor, ref: d.ClusterRef, v: d.Verdict, r: _Run) -> Outcome:
    if v.action == d.NONE or not r.apply:
        return _outcome(ref, v)
    exc = _node_marks(ad, ref, v, r)
    if exc is None and v.action == d.MARK:
        _, exc = _safely(ad.cloud, "mark", ad.mark, ref, tags.timestamp_label(r.now()))
        v = replace(v, state=d.MARKED) if exc is None else v
    elif exc is None and (v.action == d.UNMARK or v.unmark_cluster):
        _, exc = _safely(ad.cloud, "unmark", ad.unmark, ref)
    if isinstance(exc, GroupGone):
        o = _outcome(ref, replace(v, state=d.SKIPPED, action=d.NONE, reason=(
            f"{v.reason}; but it was deleted during the run ({exc}): nothing to {v.action}")))
        r.audit.write("action", ok=True, **o.as_json())
        return o
    if exc is not None:
        o = _error(ref, exc, v.action)
        r.audit.write("action", ok=False, **o.as_json())
        return o
    o = _outcome(ref, v, applied=True)
    r.audit.write("action", ok=True, **o.as_json())
    return o


def _node_marks(ad: Adaptor, ref: d.ClusterRef, v: d.Verdict, r: _Run) -> Optional[CloudError]:
    """Set and clear the per-node idle marks of ``v`` (removals are a teardown, not here)."""
    marks = [a.node for a in v.node_actions if a.action == "mark"]
    unmarks = [a.node for a in v.node_actions if a.action == "unmark"]
    if marks:
        _, exc = _safely(ad.cloud, "mark nodes", ad.mark_nodes, ref, marks,
                         tags.timestamp_label(r.now()))
        if exc is not None:
            return exc
    if unmarks:
        _, exc = _safely(ad.cloud, "unmark nodes", ad.unmark_nodes, ref, unmarks)
        if exc is not None:
            return exc
    return None


def _reservations(ad: Adaptor, ref: d.ClusterRef, r: _Run) -> tuple:
    found, exc = _safely(ad.cloud, "list reservations", ad.reservations, ref)
    if exc is not None:
        return (Reservation(id="?", instance_type="?", count=0, region=ref.region,
                            note=f"could not list reservations: {exc}"),)
    priced, exc = _safely(ref.cloud, "price reservations", _price, found, ref.cloud, r.pricer)
    return priced if exc is None else _price(found, ref.cloud, None)


def _by_adaptor(items, adaptors):
    for ad in adaptors:
        mine = [t for t in items if t[1] is ad]
        if mine:
            yield ad, mine


def _recheck(teardowns, adaptors, r: _Run) -> list:
    """Re-read utilization right before acting, one batched read per adaptor: a job may have
    started since the first read (Karpenter sigs#3185 — a node became busy during the wait and
    was deleted anyway). Clusters whose verdict changed are marked/unmarked instead."""
    due = []
    for ad, mine in _by_adaptor(teardowns, adaptors):
        t = r.now()
        fresh, exc = _safely(ad.cloud, "re-check GPU utilization", _read, ad,
                             [ref for _, _, ref, _ in mine], now=t, policy=r.policy)
        # the busy witness again, as it is now: a job that started a minute ago shows there
        # long before its metrics do (no publication delay)
        now_refs, unread = {}, {}
        if exc is None:
            mine_refs = [ref for _, _, ref, _ in mine]
            got, werr = _safely(ad.cloud, "re-check the busy witness", _witness, ad, mine_refs,
                                fresh, now=t, policy=r.policy, fresh=True)
            if werr is None:
                now_refs, unread = {x.key: x for x in got[0]}, got[1]
            else:
                unread = {ref.key: werr for ref in mine_refs}
        for idx, _, ref, v in mine:
            if exc is not None:
                r.put(idx, _error(ref, CloudError(ad.cloud, "re-check GPU utilization",
                                                  str(exc)), v.action), "action", ok=False)
                continue
            if ref.key in unread:
                r.put(idx, _error(ref, CloudError(ad.cloud, "re-check the busy witness",
                                                  str(unread[ref.key])), v.action),
                      "action", ok=False)
                continue
            ref = now_refs.get(ref.key, ref)
            again, err = _safely(ad.cloud, "decide", d.decide, ref, fresh, now=t,
                                 policy=r.policy)
            if err is not None:
                r.put(idx, _error(ref, err, v.action), "action", ok=False)
            elif again.action != v.action or (
                    v.action == d.REMOVE_NODES and
                    {a.node for a in again.removals()} != {a.node for a in v.removals()}):
                # (removals: act only on the nodes both reads found idle since their mark)
                if again.action == d.REMOVE_NODES:
                    keep = {a.node for a in v.removals()}
                    again = replace(again, node_actions=tuple(
                        a for a in again.node_actions if a.action != "remove"
                        or a.node in keep))
                    if again.removals():
                        r.audit.write("recheck", changed=True, **_outcome(ref, again).as_json())
                        due.append((idx, ad, ref, replace(again, nodes_removed=len(
                            again.removals()))))
                        continue
                    again = replace(again, action=d.MARK_NODES if any(
                        a.action == "mark" for a in again.node_actions) else d.UNMARK_NODES
                        if again.node_actions else d.NONE, nodes_removed=None)
                r.audit.write("recheck", changed=True, **_outcome(ref, again).as_json())
                r.report.outcomes[idx] = _mark_or_unmark(ad, ref, again, r)
            else:
                due.append((idx, ad, ref, again))
    return due


def _skip(ref: d.ClusterRef, v: d.Verdict, why: str, state: str = d.SKIPPED) -> Outcome:
    return _outcome(ref, replace(v, state=state, action=d.NONE, reason=f"{v.reason}; {why}"))


def _claim(due, adaptors, r: _Run, *, max_actions: int, settle_s: float, sleep) -> list:
    """The claim protocol of :mod:`gpulease.reaper.claims`: which due clusters this run may act on.

    Claims are read from every adaptor of the run (the regions/projects it covers); a cluster
    whose adaptor's claims cannot be read is not acted on (the count would be blind there).
    """
    def read_all() -> tuple[list, dict]:
        found, failed = [], {}
        for ad in adaptors:
            got, exc = _safely(ad.cloud, "read reaper claims", ad.claims)
            if exc is None:
                found += got
            else:
                failed[id(ad)] = exc
        return found, failed

    t = r.now()
    before, failed = read_all()
    pre = cl.tally(before, run_token=r.token, now=t)
    budget = max(0, max_actions - len(pre.others))
    key, value = cl.tag_key(r.token), cl.value(t)
    written = []
    for idx, ad, ref, v in due:
        if id(ad) in failed:
            r.put(idx, _error(ref, failed[id(ad)], v.action), "action", ok=False)
            continue
        if ad.claim_key(ref) in pre.others:
            r.put(idx, _skip(ref, v, f"another reaper (run {pre.others[ad.claim_key(ref)]}) "
                             "is tearing it down"), "skipped")
            continue
        if len(written) >= budget:
            r.put(idx, _skip(ref, v, f"the teardown cap of {max_actions} is in use by other "
                             f"reapers: {len(pre.others)} cluster(s) claimed by run(s) "
                             f"{pre.other_runs()} within the last {cl.LEASE_S // 60} min"),
                  "skipped")
            continue
        _, exc = _safely(ad.cloud, "claim", ad.claim, ref, key, value, now=t)
        if exc is not None:
            _safely(ad.cloud, "release claim", ad.release, ref, key)
            if isinstance(exc, GroupGone):
                r.put(idx, _skip(ref, v, f"deleted during the run ({exc}): nothing to scale"),
                      "action", ok=True)
            else:
                r.put(idx, _error(ref, exc, v.action), "action", ok=False)
            continue
        written.append((idx, ad, ref, v))
        r.audit.write("claim", claim=key, expires=value, **_outcome(ref, v).as_json())
    if not written:
        return []
    if settle_s > 0:
        sleep(settle_s)
    after, failed = read_all()
    t2 = cl.tally(after, run_token=r.token, now=r.now())
    order = [ad.claim_key(ref) for _, ad, ref, _ in written if id(ad) not in failed]
    kept, lost = cl.settle(order, t2, cap=max_actions)
    kept = set(kept)
    out = []
    for idx, ad, ref, v in written:
        ck = ad.claim_key(ref)
        if id(ad) in failed:
            _safely(ad.cloud, "release claim", ad.release, ref, key)
            r.put(idx, _error(ref, failed[id(ad)], v.action), "action", ok=False)
        elif ck in kept:
            out.append((idx, ad, ref, v))
        else:
            _safely(ad.cloud, "release claim", ad.release, ref, key)
            r.put(idx, _skip(ref, v, f"not torn down: {lost.get(ck, 'claim lost')}"), "skipped",
                  released=key)
    return out


def _act(due, adaptors, r: _Run, *, destroy_sets: dict) -> None:
    """Membership re-read right before acting (only measured nodes are scaled away), then act."""
    ready: list = []
    for ad, mine in _by_adaptor(due, adaptors):
        members, exc = _safely(ad.cloud, "re-read group membership", ad.members,
                               [ref for _, _, ref, _ in mine])
        for idx, _, ref, v in mine:
            if exc is not None:
                r.put(idx, _error(ref, exc, v.action), "action", ok=False)
                continue
            now_members = members.get(ref.key, d.Membership(gone=ref.groups))
            change = (d.node_membership_change(ref, v, now_members)
                      if v.action == d.REMOVE_NODES else
                      d.membership_change(ref, now_members))
            if change is not None:
                state, why = change
                # nothing done: the claim must not hold the shared cap for nothing
                _safely(ad.cloud, "release claim", ad.release, ref, cl.tag_key(r.token))
                r.put(idx, _skip(ref, v, why, state=state), "membership", changed=True)
                continue
            ready.append((idx, ad, ref, v))
    if r.policy.destroy:
        # A stack destroy takes the whole environment: every cluster of it must still be due.
        # (A cluster scaled to its baseline instead is no part of a destroy.)
        have: dict = {}
        for _, _, ref, v in ready:
            if v.action == d.DESTROY:
                have.setdefault(ref.environment, set()).add(ref.key)
        for idx, ad, ref, v in list(ready):
            if v.action == d.DESTROY and \
                    have.get(ref.environment) != destroy_sets.get(ref.environment):
                ready.remove((idx, ad, ref, v))
                _safely(ad.cloud, "release claim", ad.release, ref, cl.tag_key(r.token))
                r.put(idx, _skip(ref, v, f"another cluster of environment {ref.environment} "
                                 "changed, hit the cap or could not be claimed: nothing "
                                 "destroyed"), "skipped")
    for idx, ad, ref, v in ready:
        o = _teardown(ad, ref, v, r)
        if o.state == d.SKIPPED:  # deleted under our hands: nothing was torn down
            _safely(ad.cloud, "release claim", ad.release, ref, cl.tag_key(r.token))
        r.put(idx, o, "action", ok=o.state != d.ERROR)


def _remove_nodes(ad: Adaptor, ref: d.ClusterRef, v: d.Verdict, r: _Run) -> Outcome:
    """Idle nodes above the floor of a cluster that is not idle as a whole: removed one by one
    from their groups, then the verdict's other per-node marks and unmarks are applied."""
    by_id = {n.id: n for n in ref.nodes}
    nodes = [by_id[a.node] for a in v.removals() if a.node in by_id]
    notes, exc = _safely(ad.cloud, "remove idle nodes", ad.remove_nodes, ref, nodes)
    if isinstance(exc, GroupGone):
        return _skip(ref, v, f"deleted during the run by someone else ({exc}): nothing removed")
    if exc is not None:
        return _error(ref, exc, v.action)
    rest = replace(v, node_actions=tuple(a for a in v.node_actions if a.action != "remove"))
    mexc = _node_marks(ad, ref, rest, r)
    if mexc is None and v.unmark_cluster:
        _, mexc = _safely(ad.cloud, "unmark", ad.unmark, ref)
    extra = "".join(f"; {n}" for n in (notes or ()))
    if mexc is not None and not isinstance(mexc, GroupGone):
        extra += f"; the marks could not all be updated ({mexc})"
    kept = len(ref.nodes) - len(nodes)
    where = "their groups" if len({n.group for n in nodes}) > 1 else "its group"
    what = (f"{plural(len(nodes), 'node')} removed from {where} (desired capacity down with "
            f"them), {plural(kept, 'node')} kept running")
    return _outcome(ref, replace(v, state=d.REAPED, reason=f"{v.reason}; {what}{extra}"),
                    applied=True)


def _teardown(ad: Adaptor, ref: d.ClusterRef, v: d.Verdict, r: _Run) -> Outcome:
    reservations = _reservations(ad, ref, r)
    notes: list = []
    if v.action == d.DESTROY:
        if r.destroyer is None:
            return _error(ref, CloudError(ref.cloud, "destroy", "no Pulumi destroyer "
                                          "configured"), v.action)
        if ref.environment not in r.destroyed:
            _, exc = _safely("pulumi", "destroy", r.destroyer, ref.environment)
            if exc is not None:
                return _error(ref, exc, v.action)
            r.destroyed.add(ref.environment)
    elif v.action == d.REMOVE_NODES:
        return _remove_nodes(ad, ref, v, r)
    else:
        if v.action == d.SCALE_TO_BASELINE:
            notes, exc = _safely(ad.cloud, "scale to baseline", ad.scale_to_baseline, ref,
                                 dict(v.targets))
        else:
            notes, exc = _safely(ad.cloud, "scale to zero", ad.scale_to_zero, ref)
        if isinstance(exc, GroupGone):
            return _skip(ref, v, f"deleted during the run by someone else ({exc}): nothing "
                         "scaled")
        if exc is not None:
            return _error(ref, exc, v.action)
    if v.action == d.SCALE_TO_BASELINE:
        kept = len(ref.nodes) - (v.nodes_removed or 0)
        what = (f"idle burst capacity scaled down to the baseline: "
                f"{plural(v.nodes_removed or 0, 'node')} removed, {plural(kept, 'node')} of "
                "baseline kept running")
    else:
        what = "stack destroyed" if v.action == d.DESTROY else "compute scaled to zero"
    templates = registry.get(ref.cloud).node_templates
    keep = f"; {templates} and storage untouched" if v.action != d.DESTROY else \
        "; retained/protected storage survives"
    billing = ""
    if reservations:
        known = [x.usd_per_day for x in reservations if x.usd_per_day is not None]
        idle = "; the baseline runs on them" if v.action == d.SCALE_TO_BASELINE else " unused"
        n = len(reservations)
        billing = (f"; {plural(n, 'reservation')} {plural(n, 'keeps', number=False)} billing"
                   + (f" ({money.fmt(sum(known))}/day{idle})" if known else ""))
    extra = "".join(f"; {n}" for n in (notes or ()))
    return _outcome(ref, replace(v, state=d.REAPED, reason=f"{v.reason}; {what}{keep}"
                                 f"{billing}{extra}"), applied=True, reservations=reservations)


# ---- the deadline step (issue 37 item 3) ------------------------------------------------------
def _deadline_outcome(ref: d.DeadlineRef, v: d.DeadlineVerdict, *, state: str = d.BUSY,
                      reason: Optional[str] = None, applied: bool = False) -> Outcome:
    return Outcome(cluster=ref.cluster, environment=ref.environment, cloud=ref.cloud,
                   region=ref.region, state=state, reason=reason or v.reason, action=v.action,
                   nodes=ref.spot_in_service + ref.on_demand_in_service,
                   max_gpu_utilization=None, applied=applied, groups=ref.groups,
                   deadline=v.as_json())


def _deadline_step(adaptors, r: _Run, envs, reaped: set) -> None:
    """Spot, on-demand or stay for each window job on spot (two groups tagged
    tags.DEADLINE_GROUP): decide (gpulease.deadline's rule), and with ``--apply`` mark the
    decided switch on the spot group, re-read both groups and the progress, decide again, and
    only if the decision holds set the two groups' desired capacity, then clear the mark. A
    cluster the idle reaper tore down in this run is left alone."""
    for ad in adaptors:
        find = getattr(ad, "deadline_jobs", None)
        if find is None:
            continue
        refs, exc = _safely(ad.cloud, "discover deadline jobs", find, envs)
        if exc is not None:
            o = Outcome(cluster="*", environment="*", cloud=ad.cloud, region=ad.label,
                        state=d.ERROR, reason=f"deadline step: discovery failed: {exc}",
                        action=d.DEADLINE_STAY, nodes=0, max_gpu_utilization=None)
            r.report.outcomes.append(o)
            r.audit.write("error", **o.as_json())
            continue
        for ref in sorted(refs, key=lambda x: x.key):
            r.report.outcomes.append(_deadline_one(ad, ref, r, reaped))


def _deadline_one(ad, ref: d.DeadlineRef, r: _Run, reaped: set) -> Outcome:
    if ref.key in reaped:
        v = d.DeadlineVerdict(d.DEADLINE_STAY, "torn down by the idle reaper in this run")
        o = _deadline_outcome(ref, v, state=d.SKIPPED)
        r.audit.write("deadline-decision", apply=r.apply, **o.as_json())
        return o
    v, exc = _safely(ad.cloud, "decide the deadline step", d.deadline_verdict, ref, now=r.now())
    if exc is not None:
        o = _error(d.ClusterRef(cloud=ref.cloud, region=ref.region, environment=ref.environment,
                                cluster=ref.cluster, groups=ref.groups, nodes=()), exc)
        r.audit.write("error", **o.as_json())
        return o
    o = _deadline_outcome(ref, v)
    r.audit.write("deadline-decision", apply=r.apply, **o.as_json())
    if not v.targets or not r.apply:
        return o
    # mark -> re-check -> act
    mark = d.deadline_mark(v.targets, ref, r.now())
    _, exc = _safely(ad.cloud, "mark the deadline switch", ad.deadline_mark, ref, mark)
    if exc is None:
        fresh, exc = _safely(ad.cloud, "re-read the deadline job", ad.deadline_job, ref)
    if exc is None:
        again, exc = _safely(ad.cloud, "decide the deadline step", d.deadline_verdict, fresh,
                             now=r.now())
    if exc is not None:
        _safely(ad.cloud, "clear the deadline mark", ad.deadline_unmark, ref)
        o = _deadline_outcome(ref, v, state=d.ERROR, reason=f"{v.reason}; {exc}")
        r.audit.write("deadline-action", ok=False, **o.as_json())
        return o
    if dict(again.targets) != dict(v.targets):
        _safely(ad.cloud, "clear the deadline mark", ad.deadline_unmark, ref)
        o = _deadline_outcome(fresh, again, state=d.SKIPPED, reason=(
            f"{v.reason}; the re-check decided otherwise ({again.reason}): nothing switched"))
        r.audit.write("deadline-recheck", changed=True, **o.as_json())
        return o
    _, exc = _safely(ad.cloud, "switch the deadline groups", ad.deadline_resize, fresh,
                     dict(again.targets))
    if exc is not None:
        o = _deadline_outcome(fresh, again, state=d.ERROR, reason=f"{again.reason}; {exc}")
        r.audit.write("deadline-action", ok=False, **o.as_json())
        return o
    _, uexc = _safely(ad.cloud, "clear the deadline mark", ad.deadline_unmark, ref)
    sizes = ", ".join(f"{g} to {n}" for g, n in sorted(again.targets.items()))
    note = f"; the mark could not be cleared ({uexc})" if uexc is not None else ""
    o = _deadline_outcome(fresh, again, reason=f"{again.reason}; desired capacity set: "
                          f"{sizes}{note}", applied=True)
    r.audit.write("deadline-action", ok=True, mark=mark, **o.as_json())
    return o
