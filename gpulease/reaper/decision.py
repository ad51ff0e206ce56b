"""Pure idle decisions: a cluster's nodes, their GPU utilization and its tags -> state and action.

No cloud SDK, pydantic or Pulumi imports: this module runs in the CLI, in the scheduled Lambda
and in table tests alike. Times are epoch seconds (UTC).

Rules (issue 7):
- a cluster is idle only when EVERY node's maximum GPU utilization stayed below the threshold
  for the cluster's whole idle window; missing or partial data is not idle, and neither is a node
  launched inside the window (it may still be setting up — SkyPilot #715, dstack #890);
- the opt-out tag always wins; the first idle detection only marks; a marked cluster that is
  busy (or can no longer be proven idle) is unmarked (Karpenter sigs#3185); the action comes
  only after the grace period (Cloud Custodian #4097);
- a mark is evidence only while the utilization data proves the cluster idle EVER SINCE the
  mark: a marked cluster is judged over ``[min(now - window, mark), now)``, so nodes that
  replaced the marked ones (scale to zero, then back up) cannot inherit an old mark's grace;
- tag/label values come from the cloud and are untrusted: a window outside
  ``1..MAX_IDLE_MINUTES``, or a mark that is unreadable, in the future or stale, is a finding
  for that cluster (skipped or re-marked), never an exception;
- a group carrying a baseline (``gpulease-baseline-nodes``, issue 16) is scaled down to it and
  never below: an idle cluster with burst nodes above its baseline is scaled to the baseline, a
  cluster at its baseline is left alone, and an unreadable baseline skips the cluster (never
  guess a floor);
- metrics arrive late (issue 21): idle evidence is judged over a window that ends at the newest
  aggregation period whose data can be complete, ``Policy.delay_s`` before ``now``
  (:func:`evidence_end`); busy evidence counts up to ``now``. A publication delay up to
  ``delay_s`` changes when the reaper acts, never whether (docs/reaper.md, "Late metrics");
- the node's busy witness (issue 21 item 4, contract C10): a node that publishes
  ``gpulease-busy-at`` (it carries ``gpulease-busy-witness``) and whose metrics say idle is
  still busy when its last busy check may fall inside the evidence (busy-at later than the
  evidence start minus BUSY_AT_REFRESH_S), and when its busy-at is missing, unreadable or in
  the future (fail safe) — read at judging and again right before acting (:func:`witness`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Mapping, Optional, Sequence

from gpulease import tags
from gpulease.clock import LATEST, TooLate, format_utc
from gpulease.model import MAX_IDLE_MINUTES  # noqa: F401 (re-exported: d.MAX_IDLE_MINUTES)
from gpulease import cron as rs
from gpulease.reaper.defaults import MAX_GRACE_MINUTES  # noqa: F401 (re-exported: d.MAX_GRACE_MINUTES)
from gpulease.text import plural

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

# MAX_IDLE_MINUTES (imported above, one constant in gpulease.model): the longest idle window
# accepted from a tag, --idle-minutes or the stack config (7 days). CloudWatch keeps 60-second
# datapoints for 15 days ("Amazon CloudWatch concepts", Metrics retention) and the reaper reads
# a window in one sweep; anything longer is a typo or garbage (issue 14: 1e12).
# MAX_GRACE_MINUTES (imported, one constant in gpulease.reaper.defaults): the longest grace
# period accepted (7 days), for the same reason: a mark is re-checked against the data since it
# was set.
#: clock skew tolerated between machines that write and read marks and claims (5 min).
CLOCK_SKEW_S = 300
#: a mark older than its grace period plus this (1 day) is stale: the reaper was not running, or
#: the mark outlived its cluster. It is replaced by a fresh mark and a full grace period instead
#: of being proven over days of metrics.
MARK_STALE_AFTER_S = 24 * 3600
#: the longest publication delay of the GPU metrics the reaper reads, which it therefore waits
#: out before a period counts as evidence of idleness (5 min). The documented delays it covers,
#: with their sources (docs/reaper.md, "Late metrics"): AWS, the CloudWatch agent's
#: force_flush_interval (default 60 s) plus up to 2 min before a new datapoint can be
#: retrieved; GCP, Cloud Monitoring's "data is not visible for up to 240 s" after sampling.
PUBLICATION_DELAY_S = 300
#: a busy node rewrites its busy witness (tags.BUSY_AT) at least this often (5 min; contract
#: C10, templates/bootstrap/autostop.sh.j2), so a busy-at of T says "busy at some moment in
#: [T, T + BUSY_AT_REFRESH_S)" at least.
BUSY_AT_REFRESH_S = 300
#: the busy witness: an epoch second in ASCII digits.
_EPOCH = re.compile(r"[0-9]{1,12}")
_MINUTES = re.compile(r"[0-9]{1,7}")
#: a baseline node count as tagged: ASCII digits (a larger value than the group holds simply
#: means the whole group is baseline).
_NODES = re.compile(r"[0-9]{1,7}")

NONE = "none"
MARK = "mark"
UNMARK = "unmark"
SCALE_TO_ZERO = "scale-to-zero"
#: an idle cluster whose groups carry a baseline: burst nodes above it are removed, the
#: baseline keeps running (committed/reserved capacity is paid for either way).
SCALE_TO_BASELINE = "scale-to-baseline"
DESTROY = "destroy"
#: a cluster that is not idle as a whole but runs idle nodes above its floor (issue 21 item
#: 2): those nodes are marked one by one, and removed one by one after the grace
#: (NodeAction), never a busy one, never below the floor.
MARK_NODES = "mark-nodes"
UNMARK_NODES = "unmark-nodes"
REMOVE_NODES = "remove-idle-nodes"
#: actions that stop paying for compute; the per-run cap counts these.
TEARDOWN_ACTIONS = (SCALE_TO_ZERO, SCALE_TO_BASELINE, DESTROY, REMOVE_NODES)


@dataclass(frozen=True)
class Node:
    """One running node of a cluster."""

    id: str
    #: launch (or last start) time when the cloud lists it for free (GCP); None = unknown (AWS:
    #: the coverage rule below catches just-launched nodes without a DescribeInstances sweep).
    launched_at: Optional[float] = None
    #: where its metrics live (AWS region / GCP zone), for the adaptor.
    location: str = ""
    #: the node group it belongs to (ASG name / MIG path); "" = none (never removed alone).
    group: str = ""
    #: what orders the nodes of a group for the floor (AWS: instance id; GCP: instance name),
    #: the order the node autostop ranks by too; "" = the id.
    name: str = ""
    #: the cloud protects it from scale-in (AWS ProtectedFromScaleIn): never removed alone.
    protected: bool = False
    #: it publishes a busy witness (carries tags.BUSY_WITNESS): its busy-at is read and a
    #: missing or unreadable one counts as busy.
    witness: bool = False

    @property
    def rank(self) -> str:
        return self.name or self.id


@dataclass(frozen=True)
class NodeAction:
    """What the reaper does with one node of a cluster that is not idle as a whole."""

    node: str
    group: str
    #: "mark" | "unmark" | "remove"
    action: str
    reason: str

    def as_json(self) -> dict:
        return {"node": self.node, "group": self.group, "action": self.action,
                "reason": self.reason}


@dataclass(frozen=True)
class ClusterRef:
    """A gpulease cluster as discovery found it: the ASGs (AWS: one, or two with a Capacity
    Block) or the MIGs (GCP) that carry its environment and cluster tags / labels."""

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
    #: live nodes per group (ASG name / MIG path); empty with one group = all ``nodes``.
    group_nodes: Mapping[str, int] = field(default_factory=dict)
    #: raw ``gpulease-baseline-nodes`` values per group that carries one (AWS: the ASG's tag;
    #: GCP: the labels of the MIG's live instances, from its instance template). Untrusted.
    baseline_tags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: raw ``gpulease-billed-until`` values per group that carries one (contract C3: its nodes
    #: are prepaid until then), gathered like ``baseline_tags``. Untrusted.
    billed_tags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: when the cluster's node groups were created (the earliest; epoch s), None = unknown: the
    #: first-job grace runs from it.
    created_at: Optional[float] = None
    #: raw per-node idle marks (tags.NODE_IDLE_SINCE on the instance), by node id. Untrusted.
    node_marks: Mapping[str, str] = field(default_factory=dict)
    #: the busy witness of nodes that publish one, as read (tags.BUSY_AT; None = the node has
    #: none), by node id; a witness node missing here was not read. None = nothing read yet
    #: (the engine reads it for the nodes whose metrics say idle). Untrusted.
    busy_at: Optional[Mapping[str, Optional[str]]] = None
    #: the nodes' own requests to leave their group (AWS: tags.LEAVE_REQUESTED on the
    #: instance; GCP: the guest attribute tags.LEAVE_REQUESTED_GUEST_ATTRIBUTE), raw, by node
    #: id, for the nodes that carry one; None = not read yet (the engine reads them for
    #: :func:`leave_candidates`). Untrusted: see :func:`leave_request`.
    leave_requests: Optional[Mapping[str, str]] = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.cloud, self.region, self.environment, self.cluster)


def combined_tags(tag_sets: "Sequence[Mapping[str, str]]") -> dict[str, str]:
    """One cluster's tags from the tag sets of its parts (AWS: its Auto Scaling groups; GCP:
    its VMs' labels). The opt-out wins if ANY part carries it; the idle mark counts only when
    EVERY part carries one, from the latest (most conservative) value; the baseline floor is
    per group (``ClusterRef.baseline_tags``); any other key takes the first part's value."""
    merged: dict[str, str] = {}
    for t in tag_sets:
        for k, v in t.items():
            merged.setdefault(k, v)
    keep = [t[tags.KEEP] for t in tag_sets if tags.KEEP in t]
    since = [t[tags.IDLE_SINCE] for t in tag_sets if tags.IDLE_SINCE in t]
    for k in (tags.KEEP, tags.IDLE_SINCE, tags.BASELINE_NODES):
        merged.pop(k, None)
    if keep:
        merged[tags.KEEP] = keep[0]
    if since and len(since) == len(tag_sets):
        # fixed-width UTC labels (tags.timestamp_label): the string order is the time order
        merged[tags.IDLE_SINCE] = max(since)
    return merged


@dataclass(frozen=True)
class Membership:
    """A cluster's compute as re-read right before acting (the adaptor's ``members``)."""

    #: live nodes now.
    node_ids: frozenset = frozenset()
    #: capacity asked for now (ASG desired / sum of MIG target sizes), pending nodes included.
    capacity: int = 0
    #: groups of the cluster that no longer exist (or are being deleted).
    gone: tuple[str, ...] = ()
    #: live node ids per group (ASG name / MIG path), for per-node removals.
    members: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: each live node's rank key (AWS: its id; GCP: its name), the floor's order.
    ranks: Mapping[str, str] = field(default_factory=dict)


def membership_change(ref: ClusterRef, now: Membership) -> Optional[tuple[str, str]]:
    """(state, reason) when the cluster changed since its utilization was read, else None.

    Only what was measured may be scaled away: a node that joined after discovery (or capacity
    raised, its node still pending) has no utilization read, so nothing is done this run.
    """
    if ref.groups and set(now.gone) >= set(ref.groups):
        return SKIPPED, (f"{_groups(ref.groups)} no longer exist(s): deleted during the run "
                         "by someone else; nothing to scale")
    if now.gone:
        return SKIPPED, (f"{_groups(now.gone)} of the cluster deleted during the run; the "
                         "cluster is changing under someone else's hands: nothing done")
    measured = {n.id for n in ref.nodes}
    new = sorted(now.node_ids - measured)
    if new:
        more = f" (+{len(new) - 1} more)" if len(new) > 1 else ""
        return INSUFFICIENT, (f"node {new[0]}{more} joined after the utilization read and was "
                              "never measured: nothing scaled this run")
    if now.capacity > len(measured):
        return INSUFFICIENT, (f"capacity was raised to {now.capacity} after the utilization "
                              f"read ({plural(len(measured), 'node')} measured): nothing scaled this run")
    return None


def node_membership_change(ref: ClusterRef, v: Verdict,
                           now: Membership) -> Optional[tuple[str, str]]:
    """(state, reason) when the nodes ``v`` removes can no longer go, else None: each must
    still be a live member of its group, and not among the group's floor as the group is now
    (a group that shrank meanwhile moves the floor). Nodes that joined do not matter here:
    only measured nodes are removed, and more nodes keep the floor."""
    gone = [a.group for a in v.removals() if a.group in now.gone]
    if gone:
        return SKIPPED, (f"{_groups(set(gone))} deleted during the run by someone else: "
                         "nothing removed")
    floor = dict(v.floors)
    for a in v.removals():
        live = now.members.get(a.group, ())
        if a.node not in live:
            return SKIPPED, (f"node {a.node} left {a.group} during the run (someone else "
                             "removed it): nothing removed this run")
        ranked = sorted(live, key=lambda n: now.ranks.get(n, n))
        if a.node in ranked[:floor.get(a.group, 0)]:
            return INSUFFICIENT, (f"{a.group} shrank during the run: node {a.node} is now one "
                                  f"of its floor of {plural(floor.get(a.group, 0), 'node')}: "
                                  "nothing removed this run")
    return None


def _groups(names) -> str:
    names = sorted(names)
    return ", ".join(names[:3]) + (f" (+{len(names) - 3} more)" if len(names) > 3 else "")


@dataclass(frozen=True)
class Policy:
    """How idle is judged. ``idle_minutes`` overrides each cluster's own window tag."""

    threshold_pct: float = 5.0
    grace_minutes: int = 30
    idle_minutes: Optional[int] = None
    #: metric aggregation period (CloudWatch Period / Monitoring alignmentPeriod).
    period_s: int = 60
    destroy: bool = False
    #: publication delay tolerated: the newest ``delay_s`` of metrics may still be missing, so
    #: the idle evidence ends at :func:`evidence_end` (busy evidence still counts up to now).
    delay_s: int = PUBLICATION_DELAY_S

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
    #: the cluster's baseline (sum of its groups' floors); None = no group carries one.
    baseline_nodes: Optional[int] = None
    #: teardowns: nodes the action removes (scale-to-baseline: the burst above the baseline).
    nodes_removed: Optional[int] = None
    #: scale-to-baseline: (group, target size) for every group above its floor.
    targets: tuple[tuple[str, int], ...] = ()
    #: what keeps the reaper from acting now (declared schedule, first-job grace, prepaid
    #: groups), whether or not it would have acted.
    holds: tuple[rs.Hold, ...] = ()
    #: per-node marks, unmarks and removals of a cluster that is not idle as a whole.
    node_actions: tuple[NodeAction, ...] = ()
    #: the cluster-wide mark must go as well (set with a per-node action as ``action``).
    unmark_cluster: bool = False
    #: the floor of every group the per-node actions respect ((group, nodes) pairs; a prepaid
    #: group's floor is its size), re-checked against the membership right before removing.
    floors: tuple[tuple[str, int], ...] = ()
    #: nodes whose busy witness held them although their metrics said idle, as
    #: ``{"node", "busy_at", "detail"}`` (busy_at: epoch s, None when missing or unreadable).
    witness: tuple = ()

    def removals(self) -> tuple[NodeAction, ...]:
        return tuple(a for a in self.node_actions if a.action == "remove")


Samples = Mapping[str, tuple[tuple[float, float], ...]]


def parse_minutes(raw: object) -> Optional[int]:
    """A tag's minute count: ASCII digits only, 1..MAX_IDLE_MINUTES; anything else is None."""
    text = str(raw).strip() if raw is not None else ""
    if not _MINUTES.fullmatch(text):
        return None  # "1e12", "-5", "30.5", "٣٠" (non-ASCII digits), "" ...
    value = int(text)
    return value if 1 <= value <= MAX_IDLE_MINUTES else None


def parse_nodes(raw: object) -> Optional[int]:
    """A baseline tag's node count: ASCII digits only; anything else is None."""
    text = str(raw).strip() if raw is not None else ""
    return int(text) if _NODES.fullmatch(text) else None


def floors(ref: ClusterRef) -> tuple[dict[str, int], Optional[str]]:
    """({group: baseline nodes} for every group carrying the tag, None) or ({}, the problem).

    A group whose instances disagree (a template being rolled out) takes the largest value:
    never scale below any floor a node was launched with.
    """
    out: dict[str, int] = {}
    for group, values in sorted(ref.baseline_tags.items()):
        parsed = [parse_nodes(v) for v in values]
        bad = [v for v, n in zip(values, parsed) if n is None]
        if bad or not parsed:
            shown = _shown(bad[0]) if bad else "''"
            return {}, (f"an invalid {shown} {tags.BASELINE_NODES} tag on {group} (a whole "
                        "number of nodes): its baseline is unknown, so nothing is scaled")
        out[group] = max(n for n in parsed if n is not None)
    return out, None


def billed(ref: ClusterRef, now: float) -> tuple[dict[str, float], Optional[str]]:
    """({group: billed until} for every group prepaid beyond ``now``, None) or ({}, the
    problem). A group whose nodes disagree takes the latest time; an unreadable value is a
    problem (the nodes may be prepaid: never guess)."""
    out: dict[str, float] = {}
    for group, values in sorted(ref.billed_tags.items()):
        times = []
        for v in values:
            try:
                times.append(tags.parse_timestamp_label(str(v).strip()))
            except (ValueError, OverflowError):
                return {}, (f"an invalid {_shown(v)} {tags.BILLED_UNTIL} tag on {group} (a UTC "
                            "time such as 20261224t0600z): whether its nodes are prepaid is "
                            "unknown, so nothing is scaled")
        if times and max(times) > now:
            out[group] = max(times)
    return out, None


def _tag_minutes(ref: ClusterRef, key: str, default: int, most: int) -> tuple[int, Optional[str]]:
    raw = ref.tags.get(key)
    if raw is None:
        return default, None
    text = str(raw).strip()
    if _MINUTES.fullmatch(text) and int(text) <= most:
        return int(text), None
    return default, (f"an invalid {_shown(raw)} {key} tag (a whole number of minutes from 0 "
                     f"to {most})")


def holds(ref: ClusterRef, *, now: float) -> tuple[list[rs.Hold], Optional[str]]:
    """The cluster-wide holds in force at ``now`` — a declared window is due or running, or the
    cluster is new and waiting for its first job — and any unreadable schedule tag (then work
    may be due at any time: the reaper does nothing). Prepaid groups: :func:`billed`."""
    windows, problems = rs.windows_from_tags(ref.tags, [tags.schedule_key(i)
                                                        for i in range(rs.MAX_WINDOWS)])
    lead, bad_lead = _tag_minutes(ref, tags.SCHEDULE_LEAD, rs.DEFAULT_LEAD_MINUTES,
                                  rs.MAX_LEAD_MINUTES)
    grace, bad_grace = _tag_minutes(ref, tags.FIRST_JOB_GRACE,
                                    rs.DEFAULT_FIRST_JOB_GRACE_MINUTES,
                                    rs.MAX_FIRST_JOB_GRACE_MINUTES)
    bad = problems + [b for b in (bad_lead, bad_grace) if b]
    if bad:
        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        return [], (f"{bad[0]}{more}: when work is due is unknown, so nothing is done (fix or "
                    "remove the tag)")
    out = []
    due = rs.schedule_hold(windows, now=now, lead_minutes=lead)
    if due is not None:
        out.append(due)
    if ref.created_at is not None and now < ref.created_at + grace * 60:
        out.append(rs.Hold("first-job-grace", ref.created_at + grace * 60,
                           f"created {format_utc(ref.created_at, minutes=True)}: a new cluster "
                           f"waits {grace} min for its first job before it can be marked idle"))
    return out, None


def group_sizes(ref: ClusterRef) -> dict[str, int]:
    """Live nodes per group (one group: all the cluster's nodes)."""
    if ref.group_nodes:
        return dict(ref.group_nodes)
    return {ref.groups[0]: len(ref.nodes)} if len(ref.groups) == 1 else {}


def scale_targets(ref: ClusterRef, floor: Mapping[str, int]) -> tuple[dict[str, int], int]:
    """({group: new size} for every group above its floor, nodes removed). A group without a
    floor goes to zero; a group at or below its floor is not touched (never raised)."""
    sizes = group_sizes(ref)
    goal = {g: floor.get(g, 0) for g in ref.groups if sizes.get(g, 0) > floor.get(g, 0)}
    return goal, sum(sizes[g] - t for g, t in goal.items())


def window_minutes(ref: ClusterRef, policy: Policy) -> Optional[int]:
    """The idle window: ``--idle-minutes`` if given, else the cluster's own tag (validated)."""
    if policy.idle_minutes is not None:
        return policy.idle_minutes
    return parse_minutes(ref.tags.get(tags.IDLE_MINUTES))


def _shown(raw: object, limit: int = 40) -> str:
    text = repr(str(raw))
    return text if len(text) <= limit else text[:limit - 4] + "...'"


def idle_since(ref: ClusterRef) -> Optional[float]:
    """The mark as written (None when absent or unreadable); see :func:`mark` for validity."""
    raw = ref.tags.get(tags.IDLE_SINCE)
    if not raw:
        return None
    try:
        return tags.parse_timestamp_label(str(raw))
    except (ValueError, OverflowError):
        return None


def mark(ref: ClusterRef, *, now: float, policy: Policy) -> tuple[Optional[float], Optional[str]]:
    """(valid mark time or None, why the mark present on the cluster is not valid, or None)."""
    return parse_mark(ref.tags.get(tags.IDLE_SINCE), now=now, policy=policy)


def parse_mark(raw: object, *, now: float, policy: Policy) -> tuple[Optional[float],
                                                                       Optional[str]]:
    """A mark's value (cluster or node) -> (valid time or None, why it is not valid, or None)."""
    if raw is None or raw == "":
        return None, None
    try:
        since: Optional[float] = tags.parse_timestamp_label(str(raw))
    except TooLate:
        return None, (f"its idle mark {_shown(raw)} is in the future (after the year "
                      f"{LATEST.year}: clock skew or a hand edit) and counts for nothing")
    except (ValueError, OverflowError):
        since = None
    if since is None:
        return None, f"its idle mark {_shown(raw)} is unreadable"
    if since > now + CLOCK_SKEW_S:
        return None, (f"its idle mark {format_utc(since, minutes=True)} is in the future (clock "
                      "skew or a hand edit) and counts for nothing")
    if now - since > policy.grace_minutes * 60 + MARK_STALE_AFTER_S:
        return None, (f"its idle mark {format_utc(since, minutes=True)} is stale (older than the "
                      f"grace period plus {MARK_STALE_AFTER_S // 3600} h)")
    return since, None


def evidence_end(now: float, policy: Policy) -> float:
    """End of the idle evidence: the end of the newest aggregation period whose data can be
    complete, i.e. that ended at least ``policy.delay_s`` ago. Periods are aligned on the epoch
    (CloudWatch's 60-s periods start on the minute)."""
    p = max(int(policy.period_s), 1)
    return math.floor((now - max(int(policy.delay_s), 0)) / p) * p


def evidence_start(ref: ClusterRef, *, now: float, policy: Policy, window: int) -> float:
    """Where the utilization evidence must start: the window before :func:`evidence_end`, or
    the mark if it is older."""
    since, _ = mark(ref, now=now, policy=policy)
    start = evidence_end(now, policy) - window * 60
    return min(start, since) if since is not None else start


def lookback_minutes(ref: ClusterRef, *, now: float, policy: Policy) -> int:
    """How many minutes of utilization the decision for ``ref`` needs (0 = none): the cluster's
    evidence, and each node's since its own mark."""
    window = window_minutes(ref, policy)
    if window is None or tags.KEEP in ref.tags or not ref.nodes:
        return 0
    start = evidence_start(ref, now=now, policy=policy, window=window)
    for raw in ref.node_marks.values():
        since, _ = parse_mark(raw, now=now, policy=policy)
        if since is not None:
            start = min(start, since)
    return int(math.ceil((now - start) / 60))


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


def _usable(value: float) -> bool:
    # NaN/inf/negative utilization is garbage, not "idle": it counts as missing data.
    return isinstance(value, (int, float)) and math.isfinite(value) and value >= 0


@dataclass(frozen=True)
class NodeVerdict:
    """One node's utilization evidence: BUSY, IDLE or INSUFFICIENT, with the reason."""

    node: str
    state: str
    reason: str
    #: highest usable utilization seen from the evidence start to now (None: no data).
    top: Optional[float] = None
    #: the busy witness made this node busy although its metrics said idle (:func:`witness`).
    held: Optional[dict] = None


#: the last epoch second a UTC time can be written for (9999-12-31T23:59:59Z)
_LAST_WRITABLE_EPOCH = 253402300799


def _node_time(epoch: int) -> str:
    """A time a node wrote about itself, as a message shows it: untrusted, so a value no calendar
    can write (a node may put any digits in its busy-at) is shown as its digits, never formatted
    (it crashed every `reap` of the cluster: "year ... is out of range")."""
    if epoch > _LAST_WRITABLE_EPOCH:
        return f"{epoch} (epoch seconds, after the year 9999)"
    return format_utc(epoch)


def witness(node: Node, busy_at: Optional[Mapping[str, Optional[str]]], *, now: float,
            start: float) -> Optional[dict]:
    """Whether the node's busy witness (contract C10) holds a node whose metrics say idle over
    ``[start, now)``: None = it does not (or the node publishes none); else ``{"node",
    "busy_at", "detail"}``. A busy-at T says the node was busy at some moment of
    ``[T, T + BUSY_AT_REFRESH_S)``, so T later than ``start - BUSY_AT_REFRESH_S`` may fall in
    the evidence. Missing (no value, or not read), unreadable or in the future beyond the clock
    skew: held (fail safe) — the node writes one at its first check after boot."""
    if not node.witness:
        return None
    why = f"node {node.id} publishes a busy witness ({tags.BUSY_AT})"
    if busy_at is None or node.id not in busy_at:
        return {"node": node.id, "busy_at": None,
                "detail": f"{why} that was not read: counts as busy"}
    raw = busy_at[node.id]
    if raw is None or str(raw).strip() == "":
        return {"node": node.id, "busy_at": None, "detail": (
            f"{why} but has none (the node writes it at its first check after boot: still "
            "booting, or its writes fail): counts as busy")}
    text = str(raw).strip()
    if not _EPOCH.fullmatch(text):
        return {"node": node.id, "busy_at": None, "detail": (
            f"{why} but its value {_shown(raw)} is unreadable (an epoch second): counts as "
            "busy")}
    at = int(text)
    if at > now + CLOCK_SKEW_S:
        return {"node": node.id, "busy_at": None, "detail": (
            f"{why} but its value {_node_time(at)} is in the future (clock skew or a hand edit): "
            "counts as busy")}
    if at > start - BUSY_AT_REFRESH_S:
        ago = max(int(now - at) // 60, 0)
        return {"node": node.id, "busy_at": at, "detail": (
            f"node {node.id} reported itself busy at {format_utc(at)} ({ago} min ago; "
            f"{tags.BUSY_AT}: a GPU process, DCGM activity or a job heartbeat the GPU "
            "utilization metrics do not show)")}
    return None


def assess_nodes(nodes: Sequence[Node], samples: Samples, *, now: float, policy: Policy,
                 start: float, span: str,
                 busy_at: Optional[Mapping[str, Optional[str]]] = None,
                 use_witness: bool = True) -> list[NodeVerdict]:
    """Each node's verdict over ``[start, evidence_end)`` (idle needs complete data there);
    a busy sample anywhere in ``[start, now)`` makes the node busy, whatever the delay, and so
    does the busy witness of a node whose metrics say idle (``use_witness``; :func:`witness`)."""
    end = evidence_end(now, policy)
    p = policy.period_s
    # Data must start within the first two periods of the evidence: a node launched later is
    # still setting up (no agent data can predate its launch). Afterwards one missing period
    # is tolerated (a boundary can split a period); two or more consecutive missing periods
    # are partial data.
    max_head, max_gap = p + 1, 2 * p + 1
    out = []
    for node in nodes:
        seen = tuple(s for s in samples.get(node.id, ()) if start <= s[0] < now and _usable(s[1]))
        top = max((v for _, v in seen), default=None)
        if top is not None and top >= policy.threshold_pct:
            at = max(seen, key=lambda s: s[1])[0]
            out.append(NodeVerdict(node.id, BUSY, f"node {node.id} reached {top:.1f}% at "
                                   f"{format_utc(at, minutes=True)} "
                                   f"(threshold {policy.threshold_pct:g}%)", top))
            continue
        series = tuple(s for s in seen if s[0] < end)
        head, gap = coverage(series, start, end)
        if node.launched_at is not None and node.launched_at > start:
            why = (f"node {node.id} launched {int((now - node.launched_at) // 60)} min ago, "
                   f"inside the {span} (may still be setting up)")
        elif not series:
            why = f"node {node.id} has no GPU utilization data in the {span}"
        elif head > max_head:
            why = (f"node {node.id} has no GPU utilization data for the first "
                   f"{int(head // 60)} min of the {span} (just launched, still setting up, or "
                   "its agent was not running)")
        elif gap > max_gap:
            missing = max(gap - p, 0)  # gap between samples minus one period
            why = (f"node {node.id} has a {int(missing // 60)}-min gap in its GPU utilization "
                   "data (partial data is not idle)")
        else:
            held = witness(node, busy_at, now=now, start=start) if use_witness else None
            if held is not None:
                out.append(NodeVerdict(node.id, BUSY, held["detail"], top, held))
            else:
                out.append(NodeVerdict(node.id, IDLE, "", top))
            continue
        out.append(NodeVerdict(node.id, INSUFFICIENT, why, top))
    return out


def witness_candidates(ref: ClusterRef, samples: Samples, *, now: float,
                       policy: Policy) -> list[Node]:
    """The nodes whose busy witness the decision needs: nodes that publish one and whose
    metrics alone say idle over the cluster's evidence or their own (since their mark). Busy or
    incomplete metrics decide without it, so it is read for these only (GCP: one call each)."""
    window = window_minutes(ref, policy)
    if window is None or tags.KEEP in ref.tags:
        return []
    out = []
    end = evidence_end(now, policy)
    cluster_start = evidence_start(ref, now=now, policy=policy, window=window)
    for n in ref.nodes:
        if not n.witness:
            continue
        if (ref.leave_requests or {}).get(n.id) is not None:
            out.append(n)           # its leave request is honoured only with the witness read
            continue
        since, _ = parse_mark(ref.node_marks.get(n.id), now=now, policy=policy)
        own = end - window * 60 if since is None else min(end - window * 60, since)
        if any(assess_nodes([n], samples, now=now, policy=policy, start=start, span="",
                            use_witness=False)[0].state == IDLE
               for start in {cluster_start, own}):
            out.append(n)
    return out


#: a node re-asks to leave at every autostop check while it stays idle (every 5 min): a request
#: older than this is from a node that stopped asking (it turned busy, or its check fails).
LEAVE_REQUEST_TTL_S = 30 * 60


def leave_candidates(ref: ClusterRef, samples: Samples, *, now: float,
                     policy: Policy) -> list[Node]:
    """The nodes whose leave request the decision may need (GCP reads one guest attribute per
    node): nodes gpulease's bootstrap runs the autostop on (they carry tags.BUSY_WITNESS, set
    at launch with it) with no busy sample over the last LEAVE_REQUEST_TTL_S, in a cluster the
    reaper may act on at all."""
    if window_minutes(ref, policy) is None or tags.KEEP in ref.tags:
        return []
    since = now - LEAVE_REQUEST_TTL_S
    return [n for n in ref.nodes
            if n.witness and not any(since <= t < now and _usable(v) and v >= policy.threshold_pct
                       for t, v in samples.get(n.id, ()))]


def leave_request(node: Node, raw: Optional[str], samples: Samples, *, now: float,
                  policy: Policy, busy_at: Optional[Mapping[str, Optional[str]]],
                  window: int) -> tuple[Optional[int], str]:
    """Whether the node's own request to leave its group (issue 35 item 6) is honoured now:
    (its epoch second, "") or (None, why not; "" when it carries none). The node may act on
    nothing but itself, so it asks and the reaper removes it: the request is evidence about
    that node only, and only while it holds - written at most LEAVE_REQUEST_TTL_S ago and not
    in the future, no busy sample in the cluster's ``window`` (minutes) before it nor since
    (the node counted that long idle before it asked; metrics arrive late, so a sample from
    before the request is often the newest there is: one that says busy contradicts it), and,
    for a node that publishes one, a busy witness that does not say busy since (missing or
    unreadable: held, as always). The floor, the prepaid groups, the holds and the opt-out are
    the caller's, exactly as for the reaper's own per-node removals."""
    if raw is None:
        return None, ""
    what = f"node {node.id} asked to leave ({tags.LEAVE_REQUESTED})"
    text = str(raw).strip()
    if not _EPOCH.fullmatch(text):
        return None, f"{what} with an unreadable value {_shown(raw)}: ignored"
    at = int(text)
    if at > now + CLOCK_SKEW_S:
        return None, f"{what} at {_node_time(at)}, in the future: ignored"
    if at < now - LEAVE_REQUEST_TTL_S:
        return None, (f"{what} at {format_utc(at)}, over {LEAVE_REQUEST_TTL_S // 60} min ago "
                      "and not since: ignored")
    busy = [(t, v) for t, v in samples.get(node.id, ())
            if at - window * 60 <= t < now and _usable(v) and v >= policy.threshold_pct]
    if busy:
        t, v = max(busy, key=lambda s: s[1])
        return None, (f"{what} at {format_utc(at)} but reached {v:.1f}% at "
                      f"{format_utc(t, minutes=True)}: ignored")
    held = witness(node, busy_at, now=now, start=at)
    if held is not None:
        return None, f"{what} at {format_utc(at)} but {held['detail']}: ignored"
    return at, ""


def _span(start: float, now: float, policy: Policy, window: int) -> str:
    end = evidence_end(now, policy)
    if start >= end - window * 60 - 1:
        return f"{window}-min window"
    return f"{int(math.ceil((end - start) / 60))} min since its idle mark"


def assess(ref: ClusterRef, samples: Samples, *, now: float, policy: Policy,
           window: int, start: Optional[float] = None,
           held: Optional[list] = None) -> tuple[str, str, Optional[float]]:
    """Utilization alone -> (BUSY | IDLE | INSUFFICIENT, reason, max utilization seen).

    ``start`` defaults to the window's start; for a marked cluster it is the mark (when older),
    so the cluster must have stayed idle ever since it was marked. One busy node makes the
    cluster busy; one node without complete data makes it insufficient. Nodes the busy
    witness held are appended to ``held`` (when given).
    """
    end = evidence_end(now, policy)
    start = end - window * 60 if start is None else start
    verdicts = assess_nodes(ref.nodes, samples, now=now, policy=policy, start=start,
                            span=_span(start, now, policy, window), busy_at=ref.busy_at)
    if held is not None:
        held += [v.held for v in verdicts if v.held is not None]
    tops = [v.top for v in verdicts if v.top is not None]
    top = max(tops) if tops else None
    # a busy sample is the stronger evidence: named first, before a witness
    busy = sorted((v for v in verdicts if v.state == BUSY), key=lambda v: v.held is not None)
    if busy:
        return BUSY, busy[0].reason, top
    lacking = [v.reason for v in verdicts if v.state == INSUFFICIENT]
    if lacking:
        more = f" (+{len(lacking) - 1} more)" if len(lacking) > 1 else ""
        return INSUFFICIENT, lacking[0] + more, top
    return (IDLE, f"{'the' if len(ref.nodes) == 1 else 'all'} {plural(len(ref.nodes), 'node')} "
            f"stayed below {policy.threshold_pct:g}% GPU for {window} min (max {top:.1f}%)", top)


def protected_nodes(ref: ClusterRef, keep_floor: Mapping[str, int]) -> set:
    """Node ids never removed one by one: in each group the first ``floor`` live nodes by rank
    (instance id / name, the order the node autostop uses, so the two together can never go
    below the floor), nodes the cloud protects from scale-in, and nodes in no group."""
    out = {n.id for n in ref.nodes if n.protected or not n.group}
    by_group: dict[str, list[Node]] = {}
    for n in ref.nodes:
        if n.group:
            by_group.setdefault(n.group, []).append(n)
    for g, members in by_group.items():
        ranked = sorted(members, key=lambda n: n.rank)
        out |= {n.id for n in ranked[:keep_floor.get(g, 0)]}
    return out


def node_plan(ref: ClusterRef, samples: Samples, *, now: float, policy: Policy, window: int,
              keep_floor: Mapping[str, int], blocked: bool,
              held: Optional[list] = None) -> list[NodeAction]:
    """Per-node marks, removals and unmarks for a cluster that is not idle as a whole: a node
    idle over its own window (or since its own mark) and not protected is marked; after the
    grace, idle ever since its mark, it is removed; a marked node that is busy, lacks data or
    is protected is unmarked. ``blocked`` (a hold): nothing is marked or removed."""
    protected = protected_nodes(ref, keep_floor)
    end = evidence_end(now, policy)
    out: list[NodeAction] = []
    for n in ref.nodes:
        if n.id not in protected and not blocked and ref.leave_requests:
            at, _ = leave_request(n, ref.leave_requests.get(n.id), samples, now=now,
                                  policy=policy, busy_at=ref.busy_at, window=window)
            if at is not None:
                out.append(NodeAction(n.id, n.group, "remove", (
                    f"node {n.id} asked to leave at {format_utc(at)} ({tags.LEAVE_REQUESTED}: "
                    "idle by its own checks), above its group's floor, no busy sample "
                    "since: removed from its group")))
                continue
        raw = ref.node_marks.get(n.id)
        since, problem = parse_mark(raw, now=now, policy=policy)
        start = end - window * 60 if since is None else min(end - window * 60, since)
        span = (f"{window}-min window" if since is None or since >= end - window * 60 - 1 else
                f"{int(math.ceil((end - start) / 60))} min since its idle mark")
        v = assess_nodes([n], samples, now=now, policy=policy, start=start, span=span,
                         busy_at=ref.busy_at)[0]
        if v.held is not None and held is not None and \
                all(h["node"] != n.id for h in held):
            held.append(v.held)
        if v.state != IDLE or n.id in protected:
            if raw:
                why = (v.reason if v.state != IDLE else
                       f"node {n.id} is one of its group's floor" + (" (protected from scale-in)"
                                                                     if n.protected else ""))
                out.append(NodeAction(n.id, n.group, "unmark", f"{why}: clears its idle mark"))
            continue
        if blocked:
            continue
        top = "" if v.top is None else f" (max {v.top:.1f}%)"
        if since is None:
            redo = f"{problem}: re-marks it" if problem else "marks it"
            out.append(NodeAction(n.id, n.group, "mark", (
                f"node {n.id} stayed below {policy.threshold_pct:g}% GPU for {window} min{top}, "
                f"above its group's floor: {redo}; removed after a {policy.grace_minutes}-min "
                "grace if still idle")))
        elif now >= since + 60 + policy.grace_minutes * 60:
            out.append(NodeAction(n.id, n.group, "remove", (
                f"node {n.id} marked idle {format_utc(since, minutes=True)} and idle ever "
                f"since{top}, grace period over: removed from its group")))
    return out


def _with_nodes(v: Verdict, acts: list[NodeAction], *, marked: bool) -> Verdict:
    """``v`` (a cluster that is not idle as a whole) with its per-node actions folded in."""
    if not acts:
        return v
    kinds = {a.action for a in acts}
    removes = [a for a in acts if a.action == "remove"]
    action = (REMOVE_NODES if removes else MARK_NODES if "mark" in kinds else
              v.action if v.action == UNMARK else UNMARK_NODES)
    parts = []
    for kind, verb in (("remove", "removes idle"), ("mark", "marks idle"), ("unmark", "unmarks")):
        ids = [a.node for a in acts if a.action == kind]
        if ids:
            more = f" (+{len(ids) - 3} more)" if len(ids) > 3 else ""
            parts.append(f"{verb} {plural(len(ids), 'node', number=False)} "
                         f"{', '.join(ids[:3])}{more}")
    return replace(v, action=action, reason=f"{v.reason}; " + "; ".join(parts),
                   node_actions=tuple(acts), unmark_cluster=marked and action != UNMARK,
                   nodes_removed=len(removes) if removes else None)


def _floored(v: Verdict, keep_floor: Mapping[str, int]) -> Verdict:
    return replace(v, floors=tuple(sorted(keep_floor.items()))) if v.node_actions else v


def decide(ref: ClusterRef, samples: Samples, *, now: float, policy: Policy) -> Verdict:
    """What to do with one cluster now (the dry-run answer; applying it is the adaptor's job)."""
    keep = ref.tags.get(tags.KEEP)
    if keep is not None:
        return Verdict(SKIPPED, f'opt-out tag {tags.KEEP}={_shown(keep)} is set: never touched',
                       NONE)
    window = window_minutes(ref, policy)
    if window is None:
        raw = ref.tags.get(tags.IDLE_MINUTES)
        what = "no" if raw is None else f"an invalid {_shown(raw)}"
        return Verdict(SKIPPED, f"{what} {tags.IDLE_MINUTES} tag (a whole number of minutes "
                       f"from 1 to {MAX_IDLE_MINUTES}) and no --idle-minutes given", NONE)
    floor, bad_floor = floors(ref)
    prepaid, bad_billed = billed(ref, now)
    held, bad_hold = holds(ref, now=now)
    for bad in (bad_floor, bad_billed, bad_hold):
        if bad:
            return Verdict(SKIPPED, bad, NONE, window_minutes=window)
    held += [rs.Hold("billed-until", until, f"the nodes of {g} are prepaid until "
                     f"{format_utc(until, minutes=True)} ({tags.BILLED_UNTIL}): never scaled "
                     "before")
             for g, until in sorted(prepaid.items())]
    holding = tuple(held)
    baseline = sum(floor.values()) if floor else None
    # A prepaid group is floored at its live nodes until its time is up (contract C3).
    sizes = group_sizes(ref)
    keep_floor = dict(floor)
    for g in prepaid:
        keep_floor[g] = max(keep_floor.get(g, 0), sizes.get(g, 0))
    marked = bool(ref.tags.get(tags.IDLE_SINCE))
    since, problem = mark(ref, now=now, policy=policy)
    if not ref.nodes:
        what = "already scaled to zero" if ref.capacity == 0 else "nodes not running yet"
        if marked:  # a leftover mark must not give the next nodes a head start on the grace
            return Verdict(SKIPPED, f"no running nodes ({what}); clears the leftover idle mark",
                           UNMARK, window_minutes=window, holds=holding)
        return Verdict(SKIPPED, f"no running nodes ({what})", NONE, window_minutes=window,
                       holds=holding)
    start = evidence_start(ref, now=now, policy=policy, window=window)
    held_by: list = []
    state, reason, top = assess(ref, samples, now=now, policy=policy, window=window, start=start,
                                held=held_by)
    if state != IDLE:
        # Not idle as a whole: idle nodes above the floor go one by one (issue 21 item 2).
        acts = node_plan(ref, samples, now=now, policy=policy, window=window,
                         keep_floor=keep_floor,
                         blocked=any(h.kind != "billed-until" for h in holding), held=held_by)
        seen = tuple(held_by)
        if marked:
            reason += (f"; clears the idle mark set {format_utc(since, minutes=True)}"
                       if since is not None else f"; clears the idle mark ({problem})")
            return _floored(_with_nodes(Verdict(state, reason, UNMARK, top, window,
                                                baseline_nodes=baseline, holds=holding,
                                                witness=seen), acts,
                                        marked=True), keep_floor)
        return _floored(_with_nodes(Verdict(state, reason, NONE, top, window,
                                            baseline_nodes=baseline, holds=holding,
                                            witness=seen), acts,
                                    marked=False), keep_floor)
    goal, removed = scale_targets(ref, keep_floor)
    if keep_floor and not removed:
        # Committed/reserved capacity bills whether it runs or not, and the reaper already
        # removed what was above it: nothing to do, and nothing to mark.
        if floor and removed == 0 and not prepaid:
            reason += (f"; at its baseline of {plural(baseline, 'node')} ({tags.BASELINE_NODES}), "
                       "which is never scaled down")
        else:
            reason += "".join(f"; {h.detail}" for h in holding if h.kind == "billed-until")
            if floor:
                reason += f"; the rest is its baseline of {plural(baseline, 'node')}"
        if marked:
            return Verdict(SKIPPED, reason + "; clears the idle mark", UNMARK, top, window,
                           baseline_nodes=baseline, holds=holding)
        return Verdict(SKIPPED, reason, NONE, top, window, baseline_nodes=baseline,
                       holds=holding)
    keep = len(ref.nodes) - removed if keep_floor else 0
    teardown = SCALE_TO_BASELINE if keep > 0 else policy.teardown
    removes = removed if teardown == SCALE_TO_BASELINE else len(ref.nodes)
    if teardown == SCALE_TO_BASELINE and prepaid:
        plan = (f" down to {plural(keep, 'node')} (removes {plural(removes, 'node')}; keeps "
                + ", ".join(sorted(prepaid)) + " prepaid" + (f" and its baseline of "
                                                             f"{plural(baseline, 'node')}" if floor
                                                             else "") + ")")
    elif teardown == SCALE_TO_BASELINE:
        plan = (f" down to its baseline of {plural(baseline, 'node')} "
                f"(removes {plural(removes, 'node')})")
    else:
        plan = ""
    blocking = [h for h in holding if h.kind != "billed-until"]
    if blocking:
        # Declared work is due (or the cluster is new): no mark, no teardown. A mark already
        # set stays; it is honoured only if the data proves the cluster idle ever since.
        h = max(blocking, key=lambda x: x.until)
        return Verdict(SKIPPED, f"{reason}; held until {format_utc(h.until, minutes=True)}: "
                       f"{h.detail}", NONE, top, window, baseline_nodes=baseline, holds=holding)
    if since is None:
        redo = f"; {problem}: re-marks it" if problem else "; marks it"
        return Verdict(IDLE, reason + f"{redo}, acts{plan} after a {policy.grace_minutes}-min "
                       "grace period if still idle", MARK, top, window, baseline_nodes=baseline,
                       holds=holding)
    # The mark has minute resolution (tags.timestamp_label truncates), so count the grace from
    # the END of the marked minute: never act before the full grace period has passed.
    acts_after = since + 60 + policy.grace_minutes * 60
    if now < acts_after:
        left = int((acts_after - now + 59) // 60)
        return Verdict(MARKED, f"{reason}; marked idle {format_utc(since, minutes=True)}, grace "
                       f"period ends {format_utc(acts_after, minutes=True)} ({left} min left)",
                       NONE, top, window, acts_after, baseline_nodes=baseline, holds=holding)
    return Verdict(IDLE, f"{reason}; marked idle {format_utc(since, minutes=True)} and idle ever "
                   "since, grace period over", teardown, top, window, acts_after,
                   baseline_nodes=baseline,
                   nodes_removed=removes,
                   targets=tuple(sorted(goal.items())) if teardown == SCALE_TO_BASELINE else (),
                   holds=holding)



def undeclared(*, cloud: str, region: str, environment: str, cluster: str, group: str,
               nodes: int, group_tags: Mapping[str, str]) -> dict:
    """The report entry of a group tagged like a cluster that the program did not declare
    (tags.DECLARED missing, or with a value that is not the cluster's): never acted on.
    Anyone who may tag a group could otherwise add it to a cluster - or, on a teardown, add a
    group the reaper would then scale to zero (docs/reaper.md, "Declared groups")."""
    raw = group_tags.get(tags.DECLARED)
    why = (f"carries no {tags.DECLARED}" if raw is None else
           f"carries {tags.DECLARED}={_shown(raw)}, which is not the value of "
           f"{environment}/{cluster}")
    return {"cloud": cloud, "region": region, "environment": environment, "cluster": cluster,
            "group": group, "nodes": nodes,
            "reason": (f"{group} is tagged {tags.CLUSTER}={_shown(cluster)}, "
                       f"{tags.ENVIRONMENT}={_shown(environment)} but {why}: not declared by "
                       "the program, left alone")}


# ---- the deadline step (issue 37 item 3) --------------------------------------------------------
DEADLINE_SPOT = "deadline-spot"
DEADLINE_ON_DEMAND = "deadline-on-demand"
DEADLINE_STAY = "deadline-stay"
#: the longest work or restart a deadline tag may state (a year, in minutes): more is unreadable
_DEADLINE_MAX_MINUTES = 60 * 24 * 366


@dataclass(frozen=True)
class DeadlineRef:
    """One window job's two node groups as the cloud shows them (tags untrusted)."""

    cluster: str
    environment: str
    cloud: str
    region: str
    spot_group: str
    on_demand_group: str
    spot_desired: int
    spot_in_service: int
    on_demand_desired: int
    on_demand_in_service: int
    #: the two groups' tags/labels combined
    tags: Mapping[str, str]
    #: the progress document's bytes (None: none published), and why it could not be read
    progress: Optional[bytes] = None
    progress_error: Optional[str] = None
    #: spot nodes of the job with an interruption notice or rebalance recommendation seen
    interrupted: int = 0

    @property
    def key(self) -> tuple:
        return (self.cloud, self.region, self.environment, self.cluster)

    @property
    def groups(self) -> tuple[str, str]:
        return (self.spot_group, self.on_demand_group)


@dataclass(frozen=True)
class DeadlineVerdict:
    action: str
    reason: str
    #: target desired sizes {group: nodes}; empty = nothing to change
    targets: Mapping[str, int] = field(default_factory=dict)
    seen: Mapping = field(default_factory=dict)
    findings: tuple = ()

    def as_json(self) -> dict:
        return {"action": self.action, "reason": self.reason, "targets": dict(self.targets),
                "seen": dict(self.seen), "findings": list(self.findings)}


def _minutes(raw: object) -> Optional[int]:
    s = str(raw) if raw is not None else ""
    if not _MINUTES.fullmatch(s):
        return None
    return int(s) if int(s) <= _DEADLINE_MAX_MINUTES else None


def deadline_verdict(ref: DeadlineRef, *, now: float) -> DeadlineVerdict:
    """Spot, on-demand or stay for one window job (the rule: gpulease.deadline.at_run_time,
    shared with the offline model). Untrusted or missing tags, a job not started or past its
    deadline, both groups stopped (by the idle reaper, the node autostop or a person: the step
    never restarts a stopped job) or the opt-out tag: stay, with the reason."""
    from gpulease import deadline as dl
    from gpulease.purchase import ON_DEMAND, SPOT

    t = ref.tags
    if tags.KEEP in t:
        return DeadlineVerdict(DEADLINE_STAY, f"{tags.KEEP} is set: hands off")
    try:
        start = tags.parse_timestamp_label(str(t.get(tags.DEADLINE_START, "")))
        end = tags.parse_timestamp_label(str(t.get(tags.DEADLINE, "")))
    except ValueError as exc:
        return DeadlineVerdict(DEADLINE_STAY, f"unreadable deadline tags ({exc}): nothing done")
    work = _minutes(t.get(tags.DEADLINE_WORK_MINUTES))
    restart = _minutes(t.get(tags.DEADLINE_RESTART_MINUTES))
    if work is None or restart is None or not end > start or work <= 0:
        return DeadlineVerdict(DEADLINE_STAY, f"unreadable {tags.DEADLINE_WORK_MINUTES} "
                               f"{_shown(t.get(tags.DEADLINE_WORK_MINUTES))} / "
                               f"{tags.DEADLINE_RESTART_MINUTES} "
                               f"{_shown(t.get(tags.DEADLINE_RESTART_MINUTES))} or a deadline "
                               "not after its start: nothing done")
    if now < start:
        return DeadlineVerdict(DEADLINE_STAY, f"the run starts at {format_utc(start)}")
    if now >= end:
        return DeadlineVerdict(DEADLINE_STAY, f"the deadline {format_utc(end)} has passed: "
                               "the step no longer switches")
    if ref.spot_desired + ref.on_demand_desired == 0:
        return DeadlineVerdict(DEADLINE_STAY, "both groups are at zero (stopped): the deadline "
                               "step does not restart a stopped job")
    nodes = max(ref.spot_desired, ref.on_demand_desired)
    progress = dl.read_progress(ref.progress)
    findings = tuple(x for x in (ref.progress_error, progress.finding) if x)
    job = dl.Job(work_hours=work / 60.0, deadline_hours=(end - start) / 3600.0,
                 restart_hours=restart / 60.0, nodes=nodes)
    if ref.on_demand_desired > 0:
        running = ON_DEMAND
    elif ref.spot_in_service >= nodes:
        running = SPOT
    else:
        running = dl.NONE
    spot_ok = ref.spot_desired >= nodes and ref.spot_in_service >= nodes and \
        ref.interrupted == 0
    sw = dl.at_run_time(job, elapsed_hours=(now - start) / 3600.0, share_done=progress.share,
                        running=running, spot_available=spot_ok)
    seen = dict(sw.seen, spot_desired=ref.spot_desired, spot_in_service=ref.spot_in_service,
                on_demand_desired=ref.on_demand_desired, interrupted=ref.interrupted,
                progress_at=progress.at)
    if sw.spot_nodes is None:
        return DeadlineVerdict(DEADLINE_STAY, sw.choice.reason, seen=seen, findings=findings)
    targets = {ref.spot_group: sw.spot_nodes, ref.on_demand_group: sw.on_demand_nodes}
    if targets == {ref.spot_group: ref.spot_desired, ref.on_demand_group: ref.on_demand_desired}:
        return DeadlineVerdict(DEADLINE_STAY, f"{sw.choice.kind}: {sw.choice.reason} (the "
                               "groups are already sized for it)", seen=seen, findings=findings)
    action = DEADLINE_ON_DEMAND if sw.choice.kind == ON_DEMAND else DEADLINE_SPOT
    return DeadlineVerdict(action, f"{sw.choice.kind}: {sw.choice.reason}", targets=targets,
                           seen=seen, findings=findings)


def deadline_mark(targets: Mapping[str, int], ref: DeadlineRef, now: float) -> str:
    """The DEADLINE_SWITCH value of a decided switch: spot size, on-demand size, when."""
    return (f"{targets[ref.spot_group]}-{targets[ref.on_demand_group]}-"
            f"{tags.timestamp_label(now)}")
