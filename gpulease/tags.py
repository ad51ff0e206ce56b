"""Tag and label keys gpulease stamps on resources — the one place they are spelled.

The same keys are used on both clouds (they are valid GCP label keys: lowercase letters,
digits, ``-`` and ``_``, starting with a letter). Values are encoded per cloud: AWS tags keep
them as they are (cost in dollars with cents), GCP labels go through :func:`label_value`
(lowercase, ``[a-z0-9_-]``, at most 63 characters; cost as integer cents).
"""
from __future__ import annotations

import re
from decimal import Decimal

from gpulease import clock, money

CLUSTER = "gpulease-cluster"
ENVIRONMENT = "gpulease-environment"
OWNER = "gpulease-owner"
COST_CENTER = "gpulease-cost-center"
PURCHASE_MODEL = "gpulease-purchase-model"
TEMPLATE = "gpulease-template"
#: AWS: estimated monthly cost in USD with cents ("1234.56").
MONTHLY_USD = "gpulease-monthly-usd"
#: GCP: estimated monthly cost in integer US cents ("123456"), since labels cannot hold ".".
MONTHLY_CENTS = "gpulease-monthly-cents"
#: AWS: a window's one-time purchase the resource carries, USD with cents, never part of
#: MONTHLY_USD (docs/policy.md, "Windows: one-time money"); its dates are BILLED_UNTIL's
#: resource's window. Only on resources that carry one-time money.
ONE_TIME_USD = "gpulease-one-time-usd"
#: GCP: the same in integer US cents.
ONE_TIME_CENTS = "gpulease-one-time-cents"
#: idle window (minutes) stamped from the cluster's ``idle_minutes`` config; read by the reaper.
IDLE_MINUTES = "gpulease-idle-minutes"
#: set by the reaper when it first sees the cluster idle (UTC, label-safe timestamp).
IDLE_SINCE = "gpulease-idle-since"
#: set by the reaper on one node (AWS: an EC2 instance tag; GCP: an instance label) it sees
#: idle above its group's floor while the cluster as a whole is not idle (same value format).
NODE_IDLE_SINCE = "gpulease-node-idle-since"
#: the node's busy witness (issue 21 item 4, contract C10): the epoch second (ASCII digits) of
#: the newest node check that found ANY busy signal (GPU utilization, a GPU process, DCGM
#: activity, a fresh job heartbeat), written by the node itself (AWS: a tag on its own
#: instance; GCP: the guest attribute BUSY_AT_GUEST_ATTRIBUTE) at its first check after boot,
#: at once when it turns busy, and every 5 min while busy. The reaper reads it as evidence of
#: work the cloud metrics cannot show yet (docs/reaper.md, "Signals beyond utilization").
BUSY_AT = "gpulease-busy-at"
#: GCP: where the node writes BUSY_AT (guest attributes are "namespace/key").
BUSY_AT_GUEST_ATTRIBUTE = "gpulease/busy-at"
#: launch-time tag (AWS launch template, instance) / label (GCP instance template) "1" on nodes
#: that publish BUSY_AT: on such a node a missing or unreadable BUSY_AT counts as busy.
BUSY_WITNESS = "gpulease-busy-witness"
#: opt-out: any value keeps the reaper's hands off the cluster, always.
KEEP = "gpulease-keep"
#: prefix of the claim a reaper run sets on a cluster it is about to tear down: key
#: "gpulease-reaper-claim-<run token>", value "<expires epoch>". How concurrent reapers share
#: --max-actions (gpulease/reaper/claims.py, docs/reaper.md).
CLAIM = "gpulease-reaper-claim"

#: the program's declaration of a node group (issue 35 item 6): on the AWS Auto Scaling group
#: (propagated to its instances) and on the GCP instance template (so its VMs carry it), value
#: :func:`declared_value` of the group's environment and cluster. The reaper counts a group as
#: a cluster's only when it carries this with the value its own tags derive; a group merely
#: tagged like a cluster (anyone may copy tags) is reported and left alone. No node may write
#: it: the AWS node policy denies the key, the GCP node service account has no setLabels.
DECLARED = "gpulease-declared"
#: AWS: the node's own request to leave its Auto Scaling group (issue 35 item 6), an instance
#: tag written by the node on itself only (ec2:CreateTags on ${ec2:SourceInstanceARN}), value
#: the epoch second (ASCII digits) of the request. Auto Scaling documents no condition key
#: that names the instance of TerminateInstanceInAutoScalingGroup, so a node that may call it
#: may terminate every member of its group: the node asks, the reaper removes
#: (docs/reaper.md, "Leave requests").
LEAVE_REQUESTED = "gpulease-leave-requested"
#: GCP: where the node writes its leave request (a guest attribute, "namespace/key", written
#: through its own metadata server: no IAM permission at all).
LEAVE_REQUESTED_GUEST_ATTRIBUTE = "gpulease/leave-requested"
#: the only instance tag keys an AWS node may write (on itself): the busy witness and the leave
#: request. The node policy's aws:TagKeys condition is built from this tuple.
NODE_WRITTEN = (BUSY_AT, LEAVE_REQUESTED)

#: what a bucket holds ("dataset", "work"): informational, set by the storage components.
PURPOSE = "gpulease-purpose"

#: clusters with a demand profile (more than one demand step) only: which part of the demand
#: the nodes a resource runs or reserves belong to - the baseline (the first step's nodes) or
#: the burst above it; a node group that runs nodes of both carries PART_BOTH.
DEMAND_PART = "gpulease-demand-part"
PART_BASELINE = "baseline"
PART_BURST = "burst"
PART_BOTH = "baseline-burst"
#: clusters with a demand profile only, on node groups (AWS Auto Scaling group, propagated to
#: its instances; GCP instance template, so its VMs carry the label): how many of the group's
#: nodes are the baseline or reserved (a reserved burst node bills every hour), the floor idle
#: burst capacity is scaled down to and never below.
#: Absent = no floor (a one-step cluster is stopped whole when idle). Value: a decimal node
#: count; read by the reaper (per ASG / per MIG from its VMs' labels) and the node autostop
#: (docs/reaper.md, "Baselines"), which treat an unreadable value as "do not scale".
BASELINE_NODES = "gpulease-baseline-nodes"
#: node groups whose nodes are prepaid or billed until a fixed time whether they run or not
#: (AWS Capacity Block, GCP calendar-mode reservation, flex-start run): on the ASG (AWS) / on the
#: VMs from the instance template (GCP), value a :func:`timestamp_label`. The reaper and the node
#: autostop never scale those nodes before that time (issue 26; contract C3, docs/reaper.md).
BILLED_UNTIL = "gpulease-billed-until"
#: declared work windows of a cluster (issue 21 item 3): one window per key, SCHEDULE + "-0" ..
#: "-3", each value ``minute_hour_dom_month_dow_minutes`` (gpulease/cron.py: the cron
#: fields with "*" "/" "," written "x" "s" "c", then the window length in minutes).
SCHEDULE = "gpulease-schedule"
#: minutes before a declared window during which the reaper does not act (default 60).
SCHEDULE_LEAD = "gpulease-schedule-lead-minutes"
#: minutes after a cluster's creation before it can first be marked idle (default 120).
FIRST_JOB_GRACE = "gpulease-first-job-grace-minutes"

#: issue 37 (docs/reaper.md, "Deadline step"): the two node groups of a window job on spot
#: carry DEADLINE_GROUP, value the purchase model the group runs (gpulease.purchase SPOT or
#: ON_DEMAND); only the reaper's deadline step moves capacity between them. Both also carry the
#: job: DEADLINE and DEADLINE_START (:func:`timestamp_label`: the run's start and deadline),
#: DEADLINE_WORK_MINUTES (whole minutes of work on all its nodes), DEADLINE_RESTART_MINUTES
#: (whole minutes, rounded up, a switch or a restart costs before progress resumes) and, AWS
#: only, DEADLINE_PROGRESS (the s3:// URI of the progress document,
#: gpulease.deadline.PROGRESS_OBJECT); GCP only, DEADLINE_PROGRESS_BUCKET (the name of the
#: bucket holding it: a label value cannot hold a gs:// URI, bucket names can be one - the
#: object is gpulease.naming.progress_object(cluster)). Integers: valid GCP label values as
#: they are.
DEADLINE_GROUP = "gpulease-deadline-group"
DEADLINE = "gpulease-deadline"
DEADLINE_START = "gpulease-deadline-start"
DEADLINE_WORK_MINUTES = "gpulease-deadline-work-minutes"
DEADLINE_RESTART_MINUTES = "gpulease-deadline-restart-minutes"
DEADLINE_PROGRESS = "gpulease-deadline-progress"
DEADLINE_PROGRESS_BUCKET = "gpulease-deadline-progress-bucket"
#: the deadline step's mark: the switch it decided (``<spot>-<on-demand>-<timestamp_label>``,
#: the two target sizes), set on the spot group before the re-check and cleared after acting
#: (AWS: an ASG tag; GCP: a label in the spot MIG's all-instances configuration).
DEADLINE_SWITCH = "gpulease-deadline-switch"


def declared_value(environment: str, cluster: str) -> str:
    """The value of DECLARED on a node group of ``cluster`` in ``environment``: ``v1-`` and 20
    hex digits of SHA-256 over both (label-safe on GCP). It is no secret - anyone can compute it;
    what keeps nodes from declaring a group is that no node may write the key. The value ties
    the declaration to the cluster's own tags: a declared group retagged to another cluster no
    longer counts for either."""
    import hashlib

    digest = hashlib.sha256(f"gpulease\x00{environment}\x00{cluster}".encode()).hexdigest()
    return f"v1-{digest[:20]}"


def is_declared(group_tags, environment: str, cluster: str) -> bool:
    """Whether tags/labels ``group_tags`` carry the program's declaration for that cluster."""
    return str(group_tags.get(DECLARED, "")) == declared_value(environment, cluster)


def schedule_key(index: int) -> str:
    """Tag/label key of a cluster's ``index``-th declared window (0 .. 3)."""
    return f"{SCHEDULE}-{index}"


def part_value(parts) -> str:
    """DEMAND_PART value for a set of demand parts ("baseline", "burst")."""
    parts = set(parts)
    if parts == {"baseline"}:
        return PART_BASELINE
    if parts == {"burst"}:
        return PART_BURST
    return PART_BOTH

#: every resource gpulease creates that can carry tags/labels must carry all of these.
REQUIRED = (CLUSTER, ENVIRONMENT, OWNER, COST_CENTER, PURCHASE_MODEL, TEMPLATE)
REQUIRED_AWS = REQUIRED + (MONTHLY_USD,)
REQUIRED_GCP = REQUIRED + (MONTHLY_CENTS,)

#: value of the cluster tag on resources that belong to no cluster (shared network, storage).
SHARED = "shared"

_LABEL_MAX = 63
_BAD = re.compile(r"[^a-z0-9_-]")


def label_value(value: object) -> str:
    """Encode any value as a GCP label value: lowercase, [a-z0-9_-], at most 63 chars."""
    s = _BAD.sub("-", str(value).strip().lower())
    return s[:_LABEL_MAX]


_K8S_BAD = re.compile(r"[^A-Za-z0-9_.-]")
_K8S_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


def kubernetes_label_value(value: object) -> str:
    """Encode any value as a Kubernetes label value: at most 63 characters of
    ``[A-Za-z0-9_.-]``, starting and ending alphanumeric (or empty). The keys above are valid
    Kubernetes label names as they are (no prefix: labels private to the cluster's users)."""
    s = _K8S_BAD.sub("-", str(value).strip())[:_LABEL_MAX]
    return _K8S_EDGE.sub("", s)


def kubernetes_labels(values: dict, monthly_usd) -> dict[str, str]:
    """The cost labels of a Kubernetes object: ``values`` encoded, plus the monthly cost in
    dollars with cents (MONTHLY_USD: ``.`` is allowed in Kubernetes label values)."""
    out = {k: kubernetes_label_value(v) for k, v in values.items()}
    out[MONTHLY_USD] = usd(monthly_usd)
    return out


def label_key(key: str) -> str:
    s = label_value(key)
    if not s or not s[0].isalpha():
        s = ("k" + s)[:_LABEL_MAX]
    return s


def usd(amount) -> str:
    """AWS tag encoding of a monthly cost: dollars with cents (``gpulease.money``)."""
    return f"{money.usd(amount):f}"


def cents(amount) -> str:
    """GCP label encoding of a monthly cost: integer cents (``gpulease.money``)."""
    return str(money.cents(amount))


def from_cents(value: str) -> Decimal:
    """A GCP cost label back as money."""
    return money.usd(int(value)) / 100


def timestamp_label(epoch_seconds: float) -> str:
    """Label-safe UTC timestamp (``20261202t1530z``) usable as a tag or label value."""
    import datetime as _dt

    return _dt.datetime.fromtimestamp(epoch_seconds, _dt.timezone.utc).strftime("%Y%m%dt%H%Mz")


def parse_timestamp_label(value: str) -> float:
    """A :func:`timestamp_label` back as epoch seconds. The value may come from a node (tags
    are writable by whoever holds the instance): anything but the exact form, or a time outside
    the years gpulease accepts (gpulease.clock.EARLIEST..LATEST), raises ValueError."""
    import datetime as _dt

    if not re.fullmatch(r"[0-9]{8}t[0-9]{4}z", value):
        raise ValueError(f"{value!r} is not a UTC time label such as 20261202t1530z")
    return clock.check_epoch(_dt.datetime.strptime(value, "%Y%m%dt%H%Mz").replace(
        tzinfo=_dt.timezone.utc).timestamp())
