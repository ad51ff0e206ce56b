"""Pure idle decisions: a cluster's nodes, their GPU utilization and its tags -> state and action.

No cloud SDK, pydantic or Pulumi imports: this module runs in the CLI, in the scheduled Lambda
and in table tests alike. Times are epoch seconds (UTC).

Rules (issue 7):
- a cluster is idle only when EVERY node's maximum GPU utilization stayed below the threshold
  for the cluster's whole idle window; missing or partial data is not idle, and neither is a node
  launched inside the window (it may still be setting up — SkyPilot #715, dstack #890);
- the opt-out tag always wins; the first idle detection only marks; a marked cluster that is
  busy (or can no longer be proven idle) is unmarked (Karpenter sigs#3185); the action comes
  only after the grace period (Cloud Custodian #4097).
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Mapping, Optional

from infra.costing import tags

# ---- states and actions (the `--json` vocabulary) ---------------------------------------------
BUSY = "busy"
IDLE = "idle"
INSUFFICIENT = "insufficient-data"
MARKED = "marked"
REAPED = "reaped"
SKIPPED = "skipped"
#: a cloud call failed for this cluster (the run goes on; exit code 1).
ERROR = "error"
STATES = (BUSY, IDLE, INSUFFICIENT, MARKED, REAPED, SKIPPED, ERROR)

NONE = "none"
MARK = "mark"
UNMARK = "unmark"
SCALE_TO_ZERO = "scale-to-zero"
DESTROY = "destroy"
#: actions that stop paying for compute; the per-run cap counts these.
TEARDOWN_ACTIONS = (SCALE_TO_ZERO, DESTROY)


@dataclass(frozen=True)
class Node:
    """One running node of a cluster."""

    id: str
    #: launch (or last start) time when the cloud lists it for free (GCP); None = unknown (AWS:
    #: the coverage rule below catches just-launched nodes without a DescribeInstances sweep).
    launched_at: Optional[float] = None
    #: where its metrics live (AWS region / GCP zone), for the adaptor.
    location: str = ""


@dataclass(frozen=True)
class ClusterRef:
    """A gpulease cluster as discovery found it (one ASG, or the MIGs sharing the labels)."""

    cloud: str
    region: str
    environment: str
    cluster: str
    #: the compute groups that hold its nodes (ASG names; GCP MIG paths).
    groups: tuple[str, ...]
    nodes: tuple[Node, ...]
    #: tags/labels of the group (AWS: ASG tags; GCP: labels common to the nodes).
    tags: Mapping[str, str] = field(default_factory=dict)
    #: compute capacity currently asked for (ASG desired / sum of MIG target sizes).
    capacity: int = 0
    #: names/ids of reservations tied to the cluster (filled by the adaptor when known).
    reservation_ids: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.cloud, self.region, self.environment, self.cluster)


@dataclass(frozen=True)
class Policy:
    """How idle is judged. ``idle_minutes`` overrides each cluster's own window tag."""

    threshold_pct: float = 5.0
    grace_minutes: int = 30
    idle_minutes: Optional[int] = None
    #: metric aggregation period (CloudWatch Period / Monitoring alignmentPeriod).
    period_s: int = 60
    destroy: bool = False

    @property
    def teardown(self) -> str:
        return DESTROY if self.destroy else SCALE_TO_ZERO


@dataclass(frozen=True)
class Verdict:
    state: str
    reason: str
    action: str
    max_gpu_utilization: Optional[float] = None
    window_minutes: Optional[int] = None
    #: when the grace period ends (marked clusters), epoch seconds.
    acts_after: Optional[float] = None


Samples = Mapping[str, tuple[tuple[float, float], ...]]


def _iso(epoch: float) -> str:
    return _dt.datetime.fromtimestamp(epoch, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


def window_minutes(ref: ClusterRef, policy: Policy) -> Optional[int]:
    """The idle window: ``--idle-minutes`` if given, else the cluster's own tag."""
    if policy.idle_minutes is not None:
        return policy.idle_minutes
    raw = ref.tags.get(tags.IDLE_MINUTES)
    try:
        value = int(str(raw))
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def idle_since(ref: ClusterRef) -> Optional[float]:
    raw = ref.tags.get(tags.IDLE_SINCE)
    if not raw:
        return None
    try:
        return tags.parse_timestamp_label(str(raw))
    except ValueError:
        return None


def coverage(samples: tuple[tuple[float, float], ...], start: float,
             end: float) -> tuple[float, float]:
    """(seconds without data at the start of the window, longest gap after the first sample).

    Samples are stamped with the START of their aggregation period, so a complete series starts
    at the window start, has gaps of one period, and its last point sits one period before
    ``end``.
    """
    points = sorted(t for t, _ in samples if start <= t < end)
    if not points:
        return end - start, end - start
    edges = points + [end]
    return points[0] - start, max(b - a for a, b in zip(edges, edges[1:]))


def assess(ref: ClusterRef, samples: Samples, *, now: float, policy: Policy,
           window: int) -> tuple[str, str, Optional[float]]:
    """Utilization alone -> (BUSY | IDLE | INSUFFICIENT, reason, max utilization seen)."""
    start = now - window * 60
    p = policy.period_s
    # Data must start within the first two periods of the window: a node launched later is
    # still setting up (no agent data can predate its launch). Afterwards one missing period
    # is tolerated (agents publish late; a boundary can split a period); two or more
    # consecutive missing periods are partial data.
    max_head, max_gap = p + 1, 2 * p + 1
    seen: list[float] = []
    busy_note = None
    lacking: list[str] = []
    for node in ref.nodes:
        series = tuple(s for s in samples.get(node.id, ()) if start <= s[0] < now)
        if series:
            top = max(v for _, v in series)
            seen.append(top)
            if top >= policy.threshold_pct and busy_note is None:
                at = max(series, key=lambda s: s[1])[0]
                busy_note = (f"node {node.id} reached {top:.1f}% at {_iso(at)} "
                             f"(threshold {policy.threshold_pct:g}%)")
        head, gap = coverage(series, start, now)
        if node.launched_at is not None and node.launched_at > start:
            lacking.append(f"node {node.id} launched {int((now - node.launched_at) // 60)} min "
                           f"ago, inside the {window}-min window (may still be setting up)")
        elif not series:
            lacking.append(f"node {node.id} has no GPU utilization data in the last {window} min")
        elif head > max_head:
            lacking.append(f"node {node.id} has no GPU utilization data for the first "
                           f"{int(head // 60)} min of the {window}-min window (just launched, "
                           "still setting up, or its agent was not running)")
        elif gap > max_gap:
            missing = max(gap - p, 0)  # gap between samples minus one period
            lacking.append(f"node {node.id} has a {int(missing // 60)}-min gap in its GPU "
                           f"utilization data (partial data is not idle)")
    top = max(seen) if seen else None
    if busy_note:
        return BUSY, busy_note, top
    if lacking:
        more = f" (+{len(lacking) - 1} more)" if len(lacking) > 1 else ""
        return INSUFFICIENT, lacking[0] + more, top
    return (IDLE, f"all {len(ref.nodes)} node(s) stayed below {policy.threshold_pct:g}% GPU for "
            f"{window} min (max {top:.1f}%)", top)


def decide(ref: ClusterRef, samples: Samples, *, now: float, policy: Policy) -> Verdict:
    """What to do with one cluster now (the dry-run answer; applying it is the adaptor's job)."""
    keep = ref.tags.get(tags.KEEP)
    if keep is not None:
        return Verdict(SKIPPED, f'opt-out tag {tags.KEEP}="{keep}" is set: never touched', NONE)
    window = window_minutes(ref, policy)
    if window is None:
        return Verdict(SKIPPED, f"no valid {tags.IDLE_MINUTES} tag "
                       f"({ref.tags.get(tags.IDLE_MINUTES)!r}) and no --idle-minutes given", NONE)
    since = idle_since(ref)
    if not ref.nodes:
        what = "already scaled to zero" if ref.capacity == 0 else "nodes not running yet"
        return Verdict(SKIPPED, f"no running nodes ({what})", NONE, window_minutes=window)
    state, reason, top = assess(ref, samples, now=now, policy=policy, window=window)
    if state != IDLE:
        action = UNMARK if since is not None else NONE
        if action == UNMARK:
            reason += f"; clears the idle mark set {_iso(since)}"
        return Verdict(state, reason, action, top, window)
    if since is None:
        return Verdict(IDLE, reason + f"; marks it, acts after a {policy.grace_minutes}-min grace "
                       "period if still idle", MARK, top, window)
    # The mark has minute resolution (tags.timestamp_label truncates), so count the grace from
    # the END of the marked minute: never act before the full grace period has passed.
    acts_after = since + 60 + policy.grace_minutes * 60
    if now < acts_after:
        left = int((acts_after - now + 59) // 60)
        return Verdict(MARKED, f"{reason}; marked idle {_iso(since)}, grace period ends "
                       f"{_iso(acts_after)} ({left} min left)", NONE, top, window, acts_after)
    return Verdict(IDLE, f"{reason}; marked idle {_iso(since)}, grace period over",
                   policy.teardown, top, window, acts_after)
