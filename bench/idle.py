"""Bench: the reaper's outcome over a simulated month — idle GPU-hours cut, false reaps, dollars.

    python bench/idle.py [--seed 1] [--days 30] [--delays 0,1,3] [--json] [--quick]

Six clusters (128 GPUs on AWS) follow workload archetypes, minute by minute, from a seeded
random generator: an office-hours dev cluster; a training run planned for 25 days that ends
early; a hyper-parameter sweep with gaps between rounds; a nightly fine-tune with its declared
schedule (``schedule: [{cron: "0 2 * * *", minutes: 120}]``, CONTRACTS C3, tagged as
``gpulease.cron.tag_values`` encodes it); a forgotten demo; a bursty team on a demand
profile (a committed baseline of 2 nodes, ``gpulease-baseline-nodes``, plus burst nodes).
Inside the jobs: data loading at each job's start and checkpoint writes every hour (GPU at
0-2 %), a 40-minute CPU phase at 3 % GPU (training), an hour of missing metrics (the agent not
publishing: once inside the training job, once on the idle dev cluster at night).

Every 15 simulated minutes the reaper's real engine (``gpulease.reaper.engine.run`` with
``apply=True`` and the default policy, the AWS adaptor ``gpulease.reaper.aws.AwsReaper``) runs
against moto's server made strict by ``tests/fakes/moto_strict.py``: GetMetricData hides
datapoints younger than the publication delay (0, 1 and 3 minutes here) as of the simulated
clock, TerminateInstanceInAutoScalingGroup refuses to go below MinSize. The engine's calls go
over HTTP; the bench writes the agent's datapoints into moto's CloudWatch store directly (the
HTTP PutMetricData path adds nothing the reaper reads) and drops datapoints older than any
lookback the engine can ask for (checked on every read: a read reaching past them stops the
bench). With ``autostop`` the node-side autostop runs on every node every 5 minutes after a
15-minute boot delay (templates/bootstrap/autostop.timer.j2): its idle count is this file's
port of the rendered script's shell lines, and its schedule and group rules are the Python
programs of the rendered ``autostop.sh`` themselves, executed in-process; like the script it
asks to leave (the instance tag ``gpulease-leave-requested`` on itself: a node may act only on
itself, issue 35 item 6), and the reaper's next run removes the node (counted as the reaper's
stop).

The users: a job that starts when its cluster lacks free nodes scales the group up (a cold
start); jobs are placed on free nodes in instance-id order (a packing scheduler). Without the
reaper nobody scales anything down. Reported per run: idle GPU-hours (GPUs running with no job
on their node), the cut against the run without reaper, false reaps (a node stopped while a
job ran on it, or whose capacity a job needed again within the hour: a scale-up within 60 min
of the stop), steps below a baseline (an action that left a baseline group under its
baseline), cold starts, and dollars at the catalog's on-demand prices (gpulease.catalog).
Progress goes to stderr.
"""
from __future__ import annotations

import argparse
import bisect
import contextlib
import datetime as dt
import io
import json
import logging
import os
import random
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from gpulease.bootstrap.render import HEARTBEAT_MINUTES  # noqa: E402
from gpulease import tags  # noqa: E402
from gpulease.reaper import decision as d  # noqa: E402
from gpulease import cron as rs  # noqa: E402

REGION = "us-east-1"
ACCOUNT = "123456789012"
ENV = "bench"
#: 2026-11-02 00:00 UTC, a Monday: the simulated month starts here (fixed, so a seed is a month).
START = 1793577600
MIN = 60
DAY_MIN = 24 * 60
#: the scheduled reaper's cadence (ReaperSettings.schedule as docs/reaper.md deploys it).
REAP_EVERY_MIN = 15
#: autostop.timer.j2: OnBootSec=15min, OnUnitActiveSec=5min.
AUTOSTOP_BOOT_MIN, AUTOSTOP_EVERY_MIN = 15, 5
#: the stack config's default idle window (gpulease.config ClusterSpec idle_minutes = 60).
IDLE_MINUTES = 60


def default_autostop_minutes(idle_minutes: int = IDLE_MINUTES) -> int:
    """The node autostop's wait on a cluster with this idle window in a stack outside prod that
    configures none: gpulease.bootstrap.render.autostop_minutes's own rule (one source of truth)."""
    from types import SimpleNamespace

    from gpulease.bootstrap.render import autostop_minutes

    return autostop_minutes(SimpleNamespace(bootstrap=None, is_prod=False),
                            SimpleNamespace(spec=SimpleNamespace(idle_minutes=idle_minutes)))


AUTOSTOP_MINUTES = default_autostop_minutes()
#: datapoints older than this before "now" are dropped unless a mark needs them (see Store).
KEEP_S = 4 * 3600
FALSE_REAP_S = 3600
#: CONTRACTS C10, the node's busy witness: the instance tag a node writes (the epoch second of
#: its newest check that found any busy signal) and the launch-time tag saying it writes one.
#: The keys and the refresh period are the reaper's own (gpulease/tags.py,
#: gpulease.reaper.decision), as the rendered node script also takes them.
BUSY_AT = tags.BUSY_AT
BUSY_WITNESS = tags.BUSY_WITNESS
#: C10's node rule: a check every 60 s; while busy the tag is rewritten at least every
#: BUSY_AT_REFRESH_S (gpulease.reaper.decision).
BUSY_AT_CHECK_MIN = 1
BUSY_AT_REFRESH_S = d.BUSY_AT_REFRESH_S
#: the sweep driver's agent touches the job heartbeat every 5 min (render.py asks for at most
#: HEARTBEAT_MINUTES / 2).
HEARTBEAT_TOUCH_MIN = 5


# ---- the workload ---------------------------------------------------------------------------
@dataclass
class Job:
    start: int                      # minute of the month
    end: int
    nodes: int
    util: int                       # GPU % while computing
    load_min: int = 8               # data loading at the start (GPU 0-2 %)
    ckpt_every: int = 60            # checkpoint write every N minutes (4 min at 1 %); 0 = none
    cpu_phase: Optional[tuple[int, int]] = None   # minutes at 3 % GPU
    bound: list = field(default_factory=list)     # instance ids it runs on

    def gpu(self, m: int, rng_val: int) -> int:
        k = m - self.start
        if k < self.load_min:
            return rng_val % 3
        if self.cpu_phase and self.cpu_phase[0] <= m < self.cpu_phase[1]:
            return 3
        if self.ckpt_every and k % self.ckpt_every >= self.ckpt_every - 4:
            return 1
        return max(5, min(100, self.util + rng_val % 11 - 5))


@dataclass
class Cluster:
    name: str
    archetype: str
    itype: str
    nodes: int                      # nodes the user starts with (and keeps, without a reaper)
    max_nodes: int
    jobs: list
    baseline: int = 0
    schedule: tuple = ()            # ((cron, minutes), ...)
    missing: tuple = ()             # ((start, end), ...) minutes without metrics
    #: ((start, end), ...) minutes a job driver runs that touches the job heartbeat
    #: (render.HEARTBEAT_FILE) on every node of the cluster: the sweep's driver, from a sweep's
    #: first round to its last (it stays up in the gaps between its rounds).
    heartbeats: tuple = ()
    gpus: int = 0
    usd_hour: float = 0.0

    @property
    def group(self) -> str:
        return f"{self.name}-asg"


def _day_minute(day: int, hh: int, mm: int = 0) -> int:
    return day * DAY_MIN + hh * 60 + mm


def workload(seed: int, days: int) -> list[Cluster]:
    """The six archetypes for ``days`` days, from ``seed``."""
    rng = random.Random(seed)
    total = days * DAY_MIN
    out = []
    # 1. office-hours dev cluster: weekdays ~09:00-18:00, a lunch dip, idle nights/weekends.
    jobs = []
    for day in range(days):
        if day % 7 >= 5:
            continue
        s = _day_minute(day, 8, rng.randint(30, 90))
        e = _day_minute(day, 17, rng.randint(0, 120))
        lunch = _day_minute(day, 12, rng.randint(0, 30))
        jobs.append(Job(s, lunch, 1, rng.randint(30, 80), load_min=rng.randint(5, 15),
                        ckpt_every=0))
        jobs.append(Job(lunch + rng.randint(30, 45), e, 1, rng.randint(30, 80), load_min=5,
                        ckpt_every=0))
    night = _day_minute(min(2, days - 1), 22, 0)
    out.append(Cluster("dev-office", "office-hours dev", "g6.48xlarge", 1, 1, jobs,
                       missing=((night, night + 60),)))
    # 2. training planned for 25 days that ends early (day 8-14), with a CPU phase and an hour
    # of missing metrics inside the run.
    s = _day_minute(0, 1)
    e = min(total - 1, s + rng.randint(8 * DAY_MIN, 14 * DAY_MIN))
    cpu = s + rng.randint(DAY_MIN, 3 * DAY_MIN)
    job = Job(s, e, 4, rng.randint(80, 95), load_min=12, ckpt_every=60,
              cpu_phase=(cpu, cpu + 40))
    gap = s + rng.randint(3 * DAY_MIN, 5 * DAY_MIN)
    out.append(Cluster("train-early", "training ends early", "p4d.24xlarge", 4, 4, [job],
                       missing=((min(gap, e - 120), min(gap, e - 120) + 60),)))
    # 3. hyper-parameter sweep: rounds of 1-4 h on all nodes, gaps of 10 min to 16 h. A sweep's
    # driver (Optuna / Ray Tune style) stays up between the rounds of one sweep (gaps up to 3 h)
    # and touches the heartbeat on the nodes it holds; it exits between sweeps (gaps of 6-16 h).
    jobs, drivers, t = [], [], _day_minute(0, 9)
    sweep_start = t
    while t < total:
        length = rng.randint(60, 240)
        jobs.append(Job(t, min(total, t + length), 4, rng.randint(70, 98),
                        load_min=rng.randint(4, 10), ckpt_every=0))
        r = rng.random()
        gap = (rng.randint(10, 49) if r < 0.6 else rng.randint(60, 180) if r < 0.85
               else rng.randint(360, 960))
        if r >= 0.85 or t + length + gap >= total:
            drivers.append((sweep_start, min(total, t + length)))
            sweep_start = t + length + gap
        t += length + gap
    out.append(Cluster("hp-sweep", "sweep with gaps", "g6e.48xlarge", 4, 4, jobs,
                       heartbeats=tuple(drivers)))
    # 4. nightly fine-tune at 02:00 for 70-110 min, declared as a schedule.
    jobs = [Job(_day_minute(day, 2), _day_minute(day, 2) + rng.randint(70, 110), 2,
                rng.randint(75, 95), load_min=6, ckpt_every=30) for day in range(days)]
    out.append(Cluster("nightly-ft", "nightly fine-tune", "p4d.24xlarge", 2, 2, jobs,
                       schedule=(("0 2 * * *", 120),)))
    # 5. forgotten demo: three hours on day 0, never used again.
    out.append(Cluster("demo", "forgotten demo", "g6.48xlarge", 1, 1,
                       [Job(_day_minute(0, 10), _day_minute(0, 13), 1, 40, ckpt_every=0)]))
    # 6. bursty team on a demand profile: 2 baseline lanes busy ~75 %, bursts of 2-6 nodes.
    jobs = []
    for _lane in range(2):
        t = rng.randint(0, 120)
        while t < total:
            length = rng.randint(120, 480)
            jobs.append(Job(t, min(total, t + length), 1, rng.randint(60, 95),
                            load_min=rng.randint(4, 10)))
            t += length + rng.randint(20, 160)
    t = _day_minute(0, 10)
    while t < total:
        length = rng.randint(60, 300)
        jobs.append(Job(t, min(total, t + length), rng.randint(2, 6), rng.randint(70, 95),
                        load_min=rng.randint(4, 10)))
        t += length + rng.randint(6 * 60, 48 * 60)
    out.append(Cluster("team-burst", "bursty team, committed baseline", "g6e.12xlarge", 2, 8,
                       sorted(jobs, key=lambda j: j.start), baseline=2))
    return out


def price(clusters: list[Cluster]) -> dict:
    """GPUs per node and on-demand USD per node-hour from the shipped catalog."""
    from gpulease.catalog import load_catalog

    cat = load_catalog()
    facts = {}
    for c in clusters:
        o = cat.offering("aws", REGION, c.itype)
        c.gpus, c.usd_hour = int(o.gpus_per_node), float(o.price("on_demand"))
        facts[c.itype] = {"gpus": c.gpus, "usd_per_hour": c.usd_hour, "as_of": o.as_of,
                          "source": o.source}
    return {"catalog": getattr(cat, "version", ""), "offerings": facts}


# ---- the node autostop: the rendered script's rules -----------------------------------------
def _rendered_autostop(c: Cluster, minutes: int = AUTOSTOP_MINUTES) -> str:
    from gpulease.bootstrap.render import HEARTBEAT_FILE, HEARTBEAT_MINUTES, environment

    return environment().get_template("autostop.sh.j2").render(
        heartbeat_file=HEARTBEAT_FILE, heartbeat_minutes=HEARTBEAT_MINUTES,
        cloud="aws", autostop_minutes=minutes, idle_threshold_pct=d.Policy().threshold_pct,
        tag_keep=tags.KEEP, tag_baseline=tags.BASELINE_NODES, tag_billed=tags.BILLED_UNTIL,
        tag_busy_at=BUSY_AT, tag_busy_witness=BUSY_WITNESS,
        busy_at_guest_attribute=tags.BUSY_AT_GUEST_ATTRIBUTE,
        tag_leave_requested=tags.LEAVE_REQUESTED,
        leave_requested_guest_attribute=tags.LEAVE_REQUESTED_GUEST_ATTRIBUTE,
        busy_at_refresh_s=BUSY_AT_REFRESH_S,
        tag_cluster=tags.CLUSTER, tag_environment=tags.ENVIRONMENT,
        metadata_url="http://169.254.169.254", region=REGION, project="",
        schedule_windows=rs.node_data(list(c.schedule)),
        schedule_lead_minutes=rs.DEFAULT_LEAD_MINUTES,
        cron_match_source=rs.MATCH_SOURCE.strip(), cluster_filter_value=c.name,
        environment_filter_value=ENV)


def _program(script: str, var: str) -> Optional[str]:
    m = re.search(rf"^{var}='\n(.*?)\n'$", script, re.S | re.M)
    return m.group(1) if m else None


def run_rule(program: str, argv: list, stdin: str = "") -> str:
    """Run one of the script's embedded Python programs in-process: its printed line."""
    out = io.StringIO()
    old = sys.argv, sys.stdin
    sys.argv, sys.stdin = ["-c", *map(str, argv)], io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(program, "<autostop rule>", "exec"), {"__name__": "__main__"})
    except SystemExit:
        pass
    finally:
        sys.argv, sys.stdin = old
    return out.getvalue().strip()


class Autostop:
    """One cluster's node autostop. ``threshold``/``minutes`` as the script reads them; the
    signals and the idle count are the script's shell lines (last-busy file in /run: a new node
    starts afresh); the schedule and group rules are the script's own Python programs.

    Signals (issue 21 item 4): GPU utilization; GPU process presence — a node running a job
    holds the job's CUDA process from the job's first minute to its last (data loading,
    checkpoint writes and CPU phases included); the job heartbeat, fresh for HEARTBEAT_MINUTES
    after its last touch (the sweep driver's, see :func:`workload`). DCGM is not installed by
    the bootstrap (docs/reaper.md): the script skips it then."""

    def __init__(self, c: Cluster, minutes: int = AUTOSTOP_MINUTES):
        script = _rendered_autostop(c, minutes)
        self.threshold = int(d.Policy().threshold_pct)
        self.minutes = minutes
        self.schedule_rule = _program(script, "SCHEDULE_RULE")
        self.group_rule = _program(script, "GROUP_RULE")
        if self.group_rule is None or (c.schedule and self.schedule_rule is None):
            raise SystemExit("bench/idle.py: the rendered autostop.sh no longer has the rules "
                             "this bench executes (GROUP_RULE / SCHEDULE_RULE)")
        self.windows = json.dumps(rs.node_data(list(c.schedule)))
        self.last: dict = {}

    def idle_enough(self, node: str, now: int, util: int, processes: int = 0,
                    heartbeat: bool = False) -> bool:
        last = self.last.get(node)
        if util >= self.threshold or processes or heartbeat or last is None:
            self.last[node] = now
            return False
        return (now - last) // 60 >= self.minutes

    def held(self, now: int) -> bool:
        if self.schedule_rule is None:
            return False
        line = run_rule(self.schedule_rule, [self.windows, rs.DEFAULT_LEAD_MINUTES, now])
        return line != "free"     # "held: ...", or an answer that cannot be read: stay

    def verdict(self, node: str, described: str) -> str:
        return run_rule(self.group_rule, ["aws", tags.KEEP, tags.BASELINE_NODES, node, "",
                                          tags.BILLED_UNTIL], described)


# ---- the node's busy witness (CONTRACTS C10) ----------------------------------------------------
class BusyWitness:
    """C10's node rule for every node of the simulation: a check every BUSY_AT_CHECK_MIN from a
    minute after boot (templates/bootstrap/busy-witness.timer.j2: OnBootSec=1min); the tag is
    written (value: the check's epoch second) at the node's first check, busy or not (the boot
    counts as busy: setting up), at once when a check finds busy after a check that found idle,
    and while busy at least every BUSY_AT_REFRESH_S; never else while idle. ``check`` returns
    the value written, or None."""

    def __init__(self):
        self.prev: dict = {}
        self.written: dict = {}

    def check(self, node: str, now: int, busy: bool) -> Optional[int]:
        first = node not in self.written          # nothing published yet (the script's state)
        was_busy = self.prev.get(node, False)
        self.prev[node] = busy
        if first:
            self.written[node] = now
            return now
        if not busy:
            return None
        last = self.written.get(node)
        if last is None or not was_busy or now - last >= BUSY_AT_REFRESH_S:
            self.written[node] = now
            return now
        return None

    def forget(self, node: str) -> None:
        self.prev.pop(node, None)
        self.written.pop(node, None)


def last_touch(c: Cluster, m: int) -> Optional[int]:
    """The minute of the newest touch of the cluster's job heartbeat at or before ``m`` (a
    driver span touches it every HEARTBEAT_TOUCH_MIN from its start to its end), or None."""
    k = bisect.bisect_right(c.heartbeats, (m, float("inf"))) - 1
    if k < 0:
        return None
    s, e = c.heartbeats[k]
    return s + (min(m, e - 1) - s) // HEARTBEAT_TOUCH_MIN * HEARTBEAT_TOUCH_MIN


# ---- moto: the cloud side ---------------------------------------------------------------------
class Store:
    """The agent's datapoints: kept here for the last day, and in moto's CloudWatch store from
    ``horizon`` on (the oldest a read of the engine can reach; checked on every read)."""

    def __init__(self, backend):
        from moto.cloudwatch.models import MetricDatum

        self.backend, self.MetricDatum = backend, MetricDatum
        self.stamps: list = []
        self.data: list = []
        self.pending: list = []
        self.horizon = 0.0

    def add(self, iid: str, t: float, value: int) -> None:
        self.pending.append((t, iid, value))

    def flush(self, now: float, horizon: float) -> None:
        from gpulease.reaper.aws import METRIC, NAMESPACE

        for t, iid, v in sorted(self.pending):
            self.stamps.append(t)
            self.data.append(self.MetricDatum(NAMESPACE, METRIC, float(v), [
                {"Name": "InstanceId", "Value": iid}],
                dt.datetime.fromtimestamp(t, dt.timezone.utc), None))
        self.pending.clear()
        cut = bisect.bisect_left(self.stamps, now - 26 * 3600)
        if cut:
            del self.stamps[:cut], self.data[:cut]
        self.horizon = max(horizon, now - 26 * 3600)
        self.backend.metric_data = self.data[bisect.bisect_left(self.stamps, horizon):]


class Sim:
    """One simulated month: the clusters in moto, the users, the reaper and the autostop."""

    def __init__(self, clusters: list[Cluster], *, delay_min: int, reaper: bool,
                 autostop: bool, days: int, progress: str = "",
                 autostop_minutes: int = AUTOSTOP_MINUTES, heartbeats: bool = True,
                 trace: Optional[list] = None):
        import boto3
        from moto.autoscaling.models import autoscaling_backends
        from moto.cloudwatch.models import cloudwatch_backends
        from moto.ec2.models import ec2_backends

        from tests.fakes import moto_strict

        self.ms = moto_strict
        self.clusters, self.days = clusters, days
        self.delay_min, self.reaper_on, self.autostop_on = delay_min, reaper, autostop
        self.progress = progress
        self.asg = boto3.client("autoscaling", region_name=REGION)
        self.ec2c = boto3.client("ec2", region_name=REGION)
        self.asb = autoscaling_backends[ACCOUNT][REGION]
        self.ec2b = ec2_backends[ACCOUNT][REGION]
        self.store = Store(cloudwatch_backends[ACCOUNT][REGION])
        self.ms.set_metric_delay(delay_min * 60)
        self.reaper = None
        if reaper:
            from gpulease.reaper.aws import AwsReaper

            self.reaper = AwsReaper.for_region(REGION)
            self._guard_reads()
        self.autostops = ({c.name: Autostop(c, autostop_minutes) for c in clusters}
                          if autostop else {})
        #: the job heartbeat's writers run (False: the sensitivity run "the sweep driver
        #: writes no heartbeat")
        self.heartbeats = heartbeats
        self.witness = BusyWitness()
        self.trace = trace             # (minute, instance id, value) of every busy-at write
        self.boot: dict = {}           # instance id -> minute it joined
        self.live: dict = {}           # cluster -> [instance ids] as last seen
        self.stops: dict = {c.name: [] for c in clusters}   # [(minute, iid, by, attributed)]
        self.described: dict = {}
        self.n = {k: 0 for k in ("false_during", "false_due", "below_baseline", "cold_starts",
                                 "stops_reaper", "stops_autostop", "engine_runs",
                                 "leave_requests", "busy_at_writes")}
        self.idle_gpu_min = {c.name: 0 for c in clusters}
        self.run_gpu_min = {c.name: 0 for c in clusters}
        self.events: list = []
        self.false_by = {c.name: 0 for c in clusters}
        self.false_actions: set = set()
        self.engine_s = 0.0
        self.threshold = int(d.Policy().threshold_pct)
        self._build()

    # -- setup ----------------------------------------------------------------------------
    def _build(self) -> None:
        # every node publishes the busy witness: the launch template tags its instances (C10)
        self.ec2c.create_launch_template(LaunchTemplateName="gpu-lt", LaunchTemplateData={
            "ImageId": "ami-12c6146b", "InstanceType": "g6.xlarge",
            "TagSpecifications": [{"ResourceType": "instance",
                                   "Tags": [{"Key": BUSY_WITNESS, "Value": "1"}]}]})
        created = dt.datetime.fromtimestamp(START, dt.timezone.utc)
        for c in self.clusters:
            kv = {tags.CLUSTER: c.name, tags.ENVIRONMENT: ENV, tags.IDLE_MINUTES: str(IDLE_MINUTES),
                  tags.DECLARED: tags.declared_value(ENV, c.name)}
            if c.baseline:
                kv[tags.BASELINE_NODES] = str(c.baseline)
            kv.update(rs.tag_values(list(c.schedule), lead_minutes=rs.DEFAULT_LEAD_MINUTES,
                                    first_job_grace_minutes=rs.DEFAULT_FIRST_JOB_GRACE_MINUTES))
            self.asg.create_auto_scaling_group(
                AutoScalingGroupName=c.group, LaunchTemplate={"LaunchTemplateName": "gpu-lt"},
                MinSize=c.baseline, MaxSize=c.max_nodes, DesiredCapacity=c.nodes,
                AvailabilityZones=[f"{REGION}a"],
                Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True, "ResourceId": c.group,
                       "ResourceType": "auto-scaling-group"} for k, v in kv.items()])
            # the group was created when the month starts (first-job grace runs from it)
            self.asb.autoscaling_groups[c.group].created_time = created.isoformat()
            self.live[c.name] = self._members(c)
            for iid in self.live[c.name]:
                self.boot[iid] = 0
                self._launched(iid, 0)

    def _launched(self, iid: str, m: int) -> None:
        """DescribeInstances' LaunchTime on the simulated clock (moto stamps the real one)."""
        inst = self.ec2b.get_instance_by_id(iid)
        if inst is not None:
            inst.launch_time = dt.datetime.fromtimestamp(START + m * MIN, dt.timezone.utc).replace(
                tzinfo=None)

    def _guard_reads(self) -> None:
        original = self.reaper.utilization
        store = self.store

        def checked(nodes, start, end, period_s):
            if start < store.horizon - 1:
                raise SystemExit(f"bench/idle.py: the engine read from {start:.0f}, before the "
                                 f"datapoints kept ({store.horizon:.0f}): raise KEEP_S")
            return original(nodes, start, end, period_s)
        self.reaper.utilization = checked

    def _members(self, c: Cluster) -> list:
        g = self.asb.autoscaling_groups.get(c.group)
        if g is None:
            return []
        return sorted(s.instance.id for s in g.instance_states
                      if s.lifecycle_state in ("InService", "Pending"))

    # -- one minute ---------------------------------------------------------------------------
    def _refresh(self, m: int, by: str) -> None:
        """Compare live nodes with the last view: record stops by ``by`` and new nodes."""
        for c in self.clusters:
            now = self._members(c)
            before = self.live[c.name]
            gone = [i for i in before if i not in now]
            for iid in now:
                if iid not in self.boot:
                    self.boot[iid] = m
                    self._launched(iid, m)
            for iid in gone:
                running = [j for j in c.jobs if j.start <= m < j.end and iid in j.bound]
                if by != "user":
                    self.n["stops_reaper" if by == "reaper" else "stops_autostop"] += 1
                    if running:
                        self._false(c, m, m, iid, by, "stopped while a job ran on it")
                    self.stops[c.name].append([m, iid, by, bool(running)])
                for j in running:
                    j.bound.remove(iid)
                self.boot.pop(iid, None)
                self.witness.forget(iid)
                if self.autostops:
                    self.autostops[c.name].last.pop(iid, None)
            if by != "user" and c.baseline and gone and len(now) < c.baseline:
                self.n["below_baseline"] += 1
                self.events.append({"minute": m, "at": _iso(START + m * MIN), "cluster": c.name,
                                    "by": by, "what": f"{len(now)} nodes left, below the "
                                    f"baseline of {c.baseline}"})
            if gone or len(now) != len(before):
                self.described.pop(c.name, None)
            self.live[c.name] = now

    def _scale_up(self, c: Cluster, m: int, more: int) -> None:
        g = self.asb.autoscaling_groups[c.group]
        want = min(c.max_nodes, g.desired_capacity + more)
        self.asg.update_auto_scaling_group(AutoScalingGroupName=c.group, DesiredCapacity=want,
                                           MinSize=min(g.min_size, want))
        added = want - len(self.live[c.name])
        self.n["cold_starts"] += max(added, 0)
        # capacity asked back within the hour of a stop: that stop was a false reap
        for s in reversed(self.stops[c.name]):
            if added <= 0 or s[0] < m - FALSE_REAP_S // 60:
                break
            if not s[3]:
                s[3] = True
                added -= 1
                self._false(c, s[0], m, s[1], s[2], f"its capacity was needed again {m - s[0]} "
                            "min after the stop")
        self._refresh(m, "user")

    def _false(self, c: Cluster, stopped: int, seen: int, iid: str, by: str, what: str) -> None:
        """A false reap: the node stopped at minute ``stopped`` (found out at ``seen``)."""
        self.n["false_during" if stopped == seen else "false_due"] += 1
        self.false_by[c.name] += 1
        self.false_actions.add((stopped, c.name, by))
        self.events.append({"minute": stopped, "at": _iso(START + stopped * MIN),
                            "cluster": c.name, "node": iid, "by": by, "what": what})

    def _place(self, c: Cluster, m: int) -> None:
        active = [j for j in c.jobs if j.start <= m < j.end]
        busy = {i for j in active for i in j.bound}
        short = sum(j.nodes - len(j.bound) for j in active)
        free = [i for i in self.live[c.name] if i not in busy]
        if short > len(free):
            self._scale_up(c, m, short - len(free))
            free = [i for i in self.live[c.name] if i not in busy]
        for j in active:
            while len(j.bound) < j.nodes and free:
                j.bound.append(free.pop(0))

    def _account(self, c: Cluster, m: int, rng: random.Random) -> None:
        on = {i: j for j in c.jobs if j.start <= m < j.end for i in j.bound}
        missing = any(a <= m < b for a, b in c.missing)
        t = START + m * MIN
        touched = last_touch(c, m) if self.heartbeats and c.heartbeats else None
        for iid in self.live[c.name]:
            job = on.get(iid)
            util = job.gpu(m, rng.randint(0, 10 ** 6)) if job else rng.randint(0, 1)
            self.run_gpu_min[c.name] += c.gpus
            if job is None:
                self.idle_gpu_min[c.name] += c.gpus
            if not missing:
                self.store.add(iid, t, util)
            booted = self.boot.get(iid, m)
            # the job heartbeat in the node's /run: touched since it booted, and fresh
            beat = touched is not None and touched >= booted and m - touched < HEARTBEAT_MINUTES
            if m - booted >= BUSY_AT_CHECK_MIN:
                # C10: GPU process (every running job), utilization, heartbeat; no DCGM
                busy = job is not None or util >= self.threshold or beat
                value = self.witness.check(iid, t, busy)
                if value is not None:
                    self.ec2b.create_tags([iid], {BUSY_AT: str(value)})
                    self.n["busy_at_writes"] += 1
                    if self.trace is not None:
                        self.trace.append((m, iid, value))
            if self.autostops and (m - booted) >= AUTOSTOP_BOOT_MIN and \
                    (m - booted - AUTOSTOP_BOOT_MIN) % AUTOSTOP_EVERY_MIN == 0:
                self._autostop(c, iid, m, util, 1 if job else 0, beat)

    def _autostop(self, c: Cluster, iid: str, m: int, util: int, processes: int,
                  heartbeat: bool = False) -> None:
        a = self.autostops[c.name]
        now = START + m * MIN
        if not a.idle_enough(iid, now, util, processes, heartbeat) or a.held(now):
            return
        described = self.described.get(c.name)
        if described is None:
            doc = self.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[c.group])
            doc.pop("ResponseMetadata", None)
            described = self.described[c.name] = json.dumps(doc, default=str)
        verdict = a.verdict(iid, described)
        if verdict != "leave" and not verdict.startswith("leave:"):
            return
        # the node may act only on itself (issue 35 item 6): it asks, as the script's
        # `ec2 create-tags` does, and the reaper's next run removes it (docs/reaper.md,
        # "Leave requests"); the removal then counts as the reaper's
        self.ec2b.create_tags([iid], {tags.LEAVE_REQUESTED: str(int(now))})
        self.n["leave_requests"] += 1

    def _reap(self, m: int) -> None:
        from gpulease.reaper import engine

        now = START + m * MIN
        self.ms.set_clock(now)
        self.store.flush(now, self._horizon(now))
        t = time.perf_counter()
        report = engine.run([self.reaper], policy=d.Policy(), apply=True, max_actions=10,
                            environments=[ENV], now=now, settle_s=0, sleep=lambda s: None)
        self.engine_s += time.perf_counter() - t
        self.n["engine_runs"] += 1
        errors = [o for o in report.outcomes if o.state == d.ERROR]
        if errors:
            raise SystemExit(f"bench/idle.py: the reaper reported an error at minute {m}: "
                             f"{errors[0].reason}")
        self.described.clear()
        self._refresh(m, "reaper")

    def _horizon(self, now: float) -> float:
        """The oldest datapoint a read can reach: the window (+ delay) or the oldest live mark."""
        oldest = now - KEEP_S
        pol = d.Policy()
        marks = [t.get("Value") or t.get("value") for g in self.asb.autoscaling_groups.values()
                 for t in g.tags if t.get("Key") == tags.IDLE_SINCE]
        marks += [v for iid, kv in self._instance_tags().items()
                  for k, v in kv.items() if k == tags.NODE_IDLE_SINCE]
        for raw in marks:
            since, _ = d.parse_mark(raw, now=now, policy=pol)
            if since is not None:
                oldest = min(oldest, since - 3600)
        return oldest

    def _instance_tags(self) -> dict:
        out = {}
        for res in self.ec2b.reservations.values():
            for i in res.instances:
                out[i.id] = {k: v for k, v in self.ec2b.tags.get(i.id, {}).items()}
        return out

    def run(self, seed: int, minutes: Optional[int] = None) -> dict:
        rng = random.Random(seed * 7919 + self.delay_min)
        total = minutes or self.days * DAY_MIN
        last = time.perf_counter()
        for m in range(total):
            for c in self.clusters:
                self._place(c, m)
            if self.reaper_on and m % REAP_EVERY_MIN == 0:
                self._reap(m)
                for c in self.clusters:
                    self._place(c, m)
            for c in self.clusters:
                self._account(c, m, rng)
            if self.progress and time.perf_counter() - last > 10:
                last = time.perf_counter()
                print(f"  {self.progress}: day {m // DAY_MIN + 1}/{self.days}", file=sys.stderr)
        return self.result()

    def result(self) -> dict:
        per = {}
        for c in self.clusters:
            per[c.name] = {"archetype": c.archetype, "instance_type": c.itype,
                           "nodes": c.nodes, "max_nodes": c.max_nodes, "gpus_per_node": c.gpus,
                           "baseline_nodes": c.baseline,
                           "schedule": [{"cron": x, "minutes": y} for x, y in c.schedule],
                           "false_reaps": self.false_by[c.name],
                           "idle_gpu_hours": round(self.idle_gpu_min[c.name] / 60, 1),
                           "run_gpu_hours": round(self.run_gpu_min[c.name] / 60, 1),
                           "idle_usd": round(self.idle_gpu_min[c.name] / 60 / c.gpus
                                             * c.usd_hour, 2),
                           "run_usd": round(self.run_gpu_min[c.name] / 60 / c.gpus * c.usd_hour, 2)}
        return {"idle_gpu_hours": round(sum(self.idle_gpu_min.values()) / 60, 1),
                "idle_usd": round(sum(p["idle_usd"] for p in per.values()), 2),
                "run_usd": round(sum(p["run_usd"] for p in per.values()), 2),
                **{k: v for k, v in self.n.items()},
                "false_reaps": self.n["false_during"] + self.n["false_due"],
                "false_reap_actions": len(self.false_actions),
                "engine_seconds": round(self.engine_s, 1), "clusters": per,
                "events": sorted(self.events, key=lambda e: e["minute"])}


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M")


# ---- driver ---------------------------------------------------------------------------------
def label_of(mode: str, delay: int, variant: Optional[dict] = None) -> str:
    """A run's name in the table: mode, delay, and what differs from the defaults."""
    if mode == "none":
        return "no reaper"
    v = variant or {}
    text = mode
    if "autostop" in mode and v.get("autostop_minutes", AUTOSTOP_MINUTES) != AUTOSTOP_MINUTES:
        text += f" {v['autostop_minutes']} min"
    text += f", delay {delay} min"
    if v.get("heartbeats") is False:
        text += ", sweep driver writes no heartbeat"
    return text


def one_run(task: tuple, clusters: Optional[list] = None, minutes: Optional[int] = None,
            trace: Optional[list] = None) -> dict:
    """One simulated month in a fresh moto (``server``: moto's ThreadedMotoServer over HTTP,
    else moto in-process, the same responses without the socket), made strict by
    tests/fakes/moto_strict.py. ``task`` = (seed, days, mode, delay, server[, variant]) with
    mode none / reaper / reaper+autostop / autostop and variant {autostop_minutes, heartbeats}.
    ``clusters`` / ``minutes``: other clusters than :func:`workload`'s, a shorter span;
    ``trace``: a list that receives every busy-at write (the tests)."""
    seed, days, mode, delay, server = task[:5]
    variant = dict(task[5]) if len(task) > 5 and task[5] else {}
    from _pytest.monkeypatch import MonkeyPatch

    from tests.fakes import moto_strict

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    patch = MonkeyPatch()
    for k, v in dict(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                     AWS_DEFAULT_REGION=REGION).items():
        patch.setenv(k, v)
    patch.delenv("AWS_PROFILE", raising=False)
    patch.delenv("AWS_ENDPOINT_URL", raising=False)
    if server:
        from moto.server import ThreadedMotoServer

        srv = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        srv.start()
        host, port = srv.get_host_and_port()
        patch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
        stop = srv.stop
    else:
        from moto import mock_aws

        mock = mock_aws()
        mock.start()
        stop = mock.stop
    try:
        # moto draws instance ids (and so the order jobs take free nodes in) from its own
        # generator: seeded, a run is the same month every time
        from moto.moto_api._internal import mock_random

        mock_random.seed(seed)
        moto_strict.install(patch)
        clusters = workload(seed, days) if clusters is None else clusters
        facts = price(clusters)
        label = label_of(mode, delay, variant)
        print(f"{label}: start", file=sys.stderr, flush=True)
        t, cpu = time.perf_counter(), time.process_time()
        sim = Sim(clusters, delay_min=delay, reaper=mode in ("reaper", "reaper+autostop"),
                  autostop=mode in ("reaper+autostop", "autostop"), days=days, progress=label,
                  autostop_minutes=variant.get("autostop_minutes", AUTOSTOP_MINUTES),
                  heartbeats=variant.get("heartbeats", True), trace=trace)
        out = sim.run(seed, minutes)
        out.update(mode=mode, delay_minutes=delay, prices=facts, label=label,
                   autostop_minutes=(sim.autostops and
                                     next(iter(sim.autostops.values())).minutes) or None,
                   heartbeats=sim.heartbeats,
                   wall_seconds=round(time.perf_counter() - t, 1),
                   cpu_seconds=round(time.process_time() - cpu, 1))
        print(f"{label}: done in {out['wall_seconds']:.0f} s ({out['cpu_seconds']:.0f} s CPU)",
              file=sys.stderr, flush=True)
        return out
    finally:
        patch.undo()
        stop()


def simulate(seed: int, days: int, delays: list, modes: list, *, jobs: int = 1,
             server: bool = False, autostop_minutes: int = AUTOSTOP_MINUTES,
             sensitivity: bool = False) -> dict:
    """The run without reaper (the reference), then each mode at each delay; ``sensitivity``
    adds "reaper, sweep driver writes no heartbeat" at the middle delay."""
    variant = {"autostop_minutes": autostop_minutes}
    tasks = [(seed, days, "none", 0, server)] + [(seed, days, mode, delay, server, variant)
                                                 for mode in modes for delay in delays]
    if sensitivity:
        tasks.append((seed, days, "reaper", delays[len(delays) // 2], server,
                      {**variant, "heartbeats": False}))
    if jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs,
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            runs = list(pool.map(one_run, tasks))
    else:
        runs = [one_run(t) for t in tasks]
    base = runs[0]
    for out in runs[1:]:
        out["cut"] = (round(base["idle_gpu_hours"] / out["idle_gpu_hours"], 2)
                      if out["idle_gpu_hours"] else None)
        out["saved_usd"] = round(base["run_usd"] - out["run_usd"], 2)
    facts = runs[0].pop("prices")
    for out in runs[1:]:
        out.pop("prices", None)
    pol = d.Policy()
    return {"seed": seed, "days": days, "start": _iso(START), "prices": facts,
            "gpus": sum(c["max_nodes"] * c["gpus_per_node"] for c in base["clusters"].values()),
            "moto": "server (HTTP)" if server else "in-process",
            "policy": {"threshold_pct": pol.threshold_pct, "grace_minutes": pol.grace_minutes,
                       "idle_minutes": IDLE_MINUTES, "delay_tolerated_s": pol.delay_s,
                       "reap_every_minutes": REAP_EVERY_MIN,
                       "autostop_minutes": autostop_minutes,
                       "busy_at_refresh_s": BUSY_AT_REFRESH_S},
            "busy_witness": {"tag": BUSY_AT, "launch_tag": BUSY_WITNESS,
                             "reaper_reads_it": hasattr(tags, "BUSY_AT")},
            "runs": runs}


def table(doc: dict) -> str:
    runs = doc["runs"]
    w = max(28, *(len(r["label"]) + 2 for r in runs))
    witness = doc["busy_witness"]
    lines = [f"bench/idle.py: seed {doc['seed']}, {doc['days']} days from {doc['start']} UTC, "
             f"6 clusters / {doc['gpus']} GPUs (AWS, moto {doc['moto']}), "
             f"reaper every {REAP_EVERY_MIN} min, "
             f"idle window {IDLE_MINUTES} min, grace {doc['policy']['grace_minutes']} min, "
             f"autostop after {doc['policy']['autostop_minutes']} min; nodes publish "
             f"{witness['tag']} (C10), " + ("read by the reaper" if witness["reaper_reads_it"]
                                           else "NOT read by this reaper (no tags.BUSY_AT)"),
             f"{'run':<{w}}{'idle GPU-h':>11}{'cut':>7}{'idle $':>11}{'saved $':>11}"
             f"{'false reaps':>18}{'<baseline':>10}{'cold starts':>12}{'stops r/a':>11}"
             f"{'CPU s':>8}"]
    for r in runs:
        cut = f"{r['cut']:.1f}x" if r.get("cut") else "-"
        false = (f"{r['false_reaps']} ({r['false_during']}+{r['false_due']})"
                 f"/{r['false_reap_actions']}")
        lines.append(f"{r['label']:<{w}}{r['idle_gpu_hours']:>11,.0f}{cut:>7}"
                     f"{r['idle_usd']:>11,.0f}{r.get('saved_usd', 0):>11,.0f}{false:>18}"
                     f"{r['below_baseline']:>10}{r['cold_starts']:>12}"
                     f"{r['stops_reaper']:>6}/{r['stops_autostop']:<4}{r['cpu_seconds']:>8,.0f}")
    lines.append("false reaps = nodes (stopped while a job ran + capacity needed again within "
                 "1 h) / actions; idle GPU-hours / false reaps per cluster:")
    names = list(runs[0]["clusters"])
    lines.append(f"{'':<{w}}" + "".join(f"{n:>12}" for n in names))
    for r in runs:
        lines.append(f"{r['label']:<{w}}" + "".join(
            f"{r['clusters'][n]['idle_gpu_hours']:>8,.0f}/{r['clusters'][n]['false_reaps']:<3}"
            for n in names))
    return "\n".join(lines)


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--seed", type=int, default=1, help="the month's random seed (default 1)")
    ap.add_argument("--days", type=int, default=30, help="simulated days (default 30)")
    ap.add_argument("--delays", default="0,1,3",
                    help="publication delays in minutes, comma-separated (default 0,1,3)")
    ap.add_argument("--modes", default="reaper,reaper+autostop",
                    help="reaper, reaper+autostop, autostop (the node autostop alone); "
                         "comma-separated (default reaper,reaper+autostop)")
    ap.add_argument("--autostop-minutes", type=int, default=AUTOSTOP_MINUTES,
                    help="the node autostop's wait in minutes (default %(default)s: "
                         "gpulease.bootstrap.render.autostop_minutes for the bench's idle window "
                         "outside prod)")
    ap.add_argument("--sensitivity", action=argparse.BooleanOptionalAction, default=None,
                    help="add the run 'reaper, sweep driver writes no heartbeat' at the middle "
                         "delay (default: on, off with --quick)")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    ap.add_argument("--jobs", type=int, default=2,
                    help="runs simulated in parallel processes (default 2)")
    ap.add_argument("--server", action="store_true",
                    help="moto's HTTP server instead of in-process moto (slower)")
    ap.add_argument("--quick", action="store_true",
                    help="3 days, delay 1 min only (a smoke run of a minute or so)")
    args = ap.parse_args(argv)
    try:
        delays = [int(x) for x in args.delays.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--delays: whole minutes separated by commas (got {args.delays!r})")
    modes = [x.strip() for x in args.modes.split(",") if x.strip()]
    if any(x not in ("reaper", "reaper+autostop", "autostop") for x in modes) or not modes:
        ap.error(f"--modes: reaper, reaper+autostop and/or autostop (got {args.modes!r})")
    if not 1 <= args.autostop_minutes <= 24 * 60:
        ap.error("--autostop-minutes: 1 to 1440")
    if not delays or any(not 0 <= x <= 10 for x in delays):
        ap.error("--delays: 0 to 10 minutes each")
    if not 1 <= args.days <= 31:
        ap.error("--days: 1 to 31")
    if not 1 <= args.jobs <= 16:
        ap.error("--jobs: 1 to 16")
    if args.quick:
        args.days, delays = min(args.days, 3), [1]
    t = time.perf_counter()
    sensitivity = ((not args.quick) if args.sensitivity is None else args.sensitivity) \
        and "reaper" in modes
    load_start = os.getloadavg()
    doc = simulate(args.seed, args.days, delays, modes, jobs=args.jobs, server=args.server,
                   autostop_minutes=args.autostop_minutes, sensitivity=sensitivity)
    doc["wall_seconds"] = round(time.perf_counter() - t, 1)
    doc["cpu_seconds"] = round(sum(r["cpu_seconds"] for r in doc["runs"]), 1)
    doc["measured_at"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    doc["load"] = {"start": [round(x, 2) for x in load_start],
                   "end": [round(x, 2) for x in os.getloadavg()]}
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print(table(doc))
        print(f"{doc['measured_at']}: wall time {doc['wall_seconds']:.0f} s, CPU "
              f"{doc['cpu_seconds']:.0f} s in the runs, load {doc['load']['start'][0]} at the "
              f"start and {doc['load']['end'][0]} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
