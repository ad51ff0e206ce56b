"""Spot that never misses a deadline: the Uniform Progress rule and its replay (issue 37).

A window job (``clusters[].window``: work hours, a deadline) on spot may lose its nodes at any
time. The rule of *Can't Be Late* (Wu et al., NSDI 2024) decides, at each step, whether the job
runs on spot, on on-demand, or waits, from four facts only: the work left, the time left, the
restart overhead ``d`` (what a switch costs before progress resumes: boot, restore the last
checkpoint, redo the work since it) and whether spot is there now. Its four rules, as the paper
states them (``cp(t)``: work done; ``ep(t) = C * t / D``: the uniform line from start to
deadline; ``R(t)``: time left; ``C(t)``: work left):

1. **Uniform progress**: idle and behind the line (``cp(t) < ep(t)``): run on on-demand to catch
   up.
2. **Taking risks**: spot is there: take it (even when behind), and stay until preempted.
3. **Hysteresis**: on on-demand, stay until ``cp(t) >= ep(t + 2d)`` (so the job does not flap
   between the two for one tick of gain).
4. **Safety net**: idle and ``R(t) < C(t) + 2d``: on-demand until the end.

:func:`uniform_progress` is that rule as a pure function of :class:`JobState` - the scheduled
reaper's deadline step and the offline model call the same function. :func:`replay` runs a
policy over an availability trace (one sample per tick; a sample is the number of spot nodes
obtainable then, the format of the public traces the paper's authors released,
skypilot-org/spot-traces: ``{"metadata": {"gap_seconds": 300}, "data": [...]}``), and
:func:`offline_optimum` is the cheapest schedule that knows the whole trace in advance (a
dynamic programme over ticks), the bound the rule is judged against. :func:`greedy` (spot until
forced onto on-demand) and :func:`always_on_demand` are the baselines.

Model (the paper's): time advances in ticks of the trace's gap; within a tick spot is there or
not; a node group runs one purchase model at a time; switching to a model (or restarting after
a preemption) costs ``d`` hours of paid time without progress; progress made before a
preemption is kept (checkpoints; the work since the last one is part of ``d``); every running
hour is paid, overhead included. Plain Python (no third-party import): the reaper bundle
carries it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence

from gpulease.purchase import ON_DEMAND, SPOT

#: what a job runs on in one tick: nothing, or a node purchase model (gpulease.purchase)
NONE = "none"
KINDS = (NONE, SPOT, ON_DEMAND)
#: float tolerance of "work done" (hours)
EPS = 1e-9
#: the object a node's `gpulease-progress` writes beside the checkpoints (in the cluster's
#: work bucket, under its checkpoint prefix): ``{"done", "total", "unit", "at", "node"}``.
PROGRESS_OBJECT = "gpulease-progress.json"
#: a progress document is a few dozen bytes; more is not one.
MAX_PROGRESS_BYTES = 4096


@dataclass(frozen=True)
class Progress:
    """What a job published: ``share`` of its work done (0..1), when, and any finding about
    the document (a node writes it: it is untrusted input, clamped and reported, never
    raised)."""

    share: float
    at: Optional[str] = None
    finding: Optional[str] = None


def read_progress(raw: Optional[bytes]) -> Progress:
    """A progress document as the reaper reads it. None (no object) or anything malformed is
    "nothing done" - the conservative reading: the rule then falls behind the line sooner and
    errs towards on-demand - with a finding saying why."""
    import json

    if raw is None:
        return Progress(0.0, finding="no progress published: taken as none done")
    if len(raw) > MAX_PROGRESS_BYTES:
        return Progress(0.0, finding=f"progress document of {len(raw)} bytes (more than "
                                     f"{MAX_PROGRESS_BYTES}): ignored, taken as none done")
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
        done, total = doc["done"], doc["total"]
        if isinstance(done, bool) or isinstance(total, bool):
            raise TypeError("booleans")
        done, total = float(done), float(total)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, OverflowError) as exc:
        return Progress(0.0, finding=f"unreadable progress document ({type(exc).__name__}): "
                                     "taken as none done")
    if not (math.isfinite(done) and math.isfinite(total)) or total <= 0 or done < 0:
        return Progress(0.0, finding=f"progress {done!r} of {total!r} is not a share of work: "
                                     "taken as none done")
    at = doc.get("at") if isinstance(doc.get("at"), str) and len(doc["at"]) <= 40 else None
    if done > total:
        return Progress(1.0, at, finding=f"progress {done:g} exceeds its total {total:g}: "
                                         "clamped to done")
    return Progress(done / total, at)


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


@dataclass(frozen=True)
class Job:
    """A window job: ``work_hours`` of compute (at full speed) to finish within
    ``deadline_hours`` of its start; ``restart_hours``: the overhead of a (re)start; ``nodes``:
    how many spot nodes it needs at once (a tick offers spot only with at least that many)."""

    work_hours: float
    deadline_hours: float
    restart_hours: float
    nodes: int = 1

    def __post_init__(self):
        if not (self.work_hours > 0 and self.deadline_hours > 0 and self.restart_hours >= 0
                and self.nodes >= 1):
            raise ValueError(f"a job needs work > 0, a deadline > 0, a restart >= 0 and at "
                             f"least one node: {self}")

    @property
    def slack_hours(self) -> float:
        return self.deadline_hours - self.work_hours


@dataclass(frozen=True)
class JobState:
    """Where a job stands at the start of a tick."""

    elapsed_hours: float
    done_hours: float
    #: what it ran on in the last tick (NONE after a preemption or before the start)
    running: str = NONE
    #: the safety net has fired: on-demand until the end
    committed: bool = False

    def left(self, job: Job) -> tuple[float, float]:
        """(work left, time left) in hours."""
        return max(0.0, job.work_hours - self.done_hours), job.deadline_hours - self.elapsed_hours


@dataclass(frozen=True)
class Choice:
    """A decision and its reason (for `reap --json` and the audit log)."""

    kind: str
    reason: str
    #: the safety net fired with this choice (sticky from now on)
    commit: bool = False


Policy = Callable[[Job, JobState, bool], Choice]


def _line(job: Job, t: float) -> float:
    """ep(t): the work a uniform pace has done by ``t``."""
    return job.work_hours * min(t, job.deadline_hours) / job.deadline_hours


def uniform_progress(job: Job, state: JobState, spot_available: bool) -> Choice:
    """The four rules (module docstring), in the paper's order of precedence."""
    work, time = state.left(job)
    d = job.restart_hours
    if work <= EPS:
        return Choice(NONE, "done")
    if state.committed:
        return Choice(ON_DEMAND, "safety net: on-demand until the end", commit=True)
    # rule 4 (safety net): whenever the job is not progressing on spot, the slack left must
    # still cover a restart on on-demand with one more of margin
    if state.running != SPOT and time < work + 2 * d:
        return Choice(ON_DEMAND, f"safety net: {time:.2f} h left < {work:.2f} h of work + 2 x "
                                 f"{d:.2f} h restart", commit=True)
    # rule 3 (hysteresis): on on-demand, stay until ahead of the line at t + 2d
    if state.running == ON_DEMAND and (not spot_available or
                                       state.done_hours < _line(job, state.elapsed_hours + 2 * d)):
        return Choice(ON_DEMAND, "hysteresis: on on-demand until ahead of the line at t + 2d")
    # rule 2 (taking risks): spot when it is there
    if spot_available:
        return Choice(SPOT, "spot is available")
    # rule 1 (uniform progress): behind the line and no spot: on-demand
    if state.done_hours < _line(job, state.elapsed_hours):
        return Choice(ON_DEMAND, "behind the uniform-progress line and no spot")
    return Choice(NONE, "ahead of the uniform-progress line: wait for spot")


def greedy(job: Job, state: JobState, spot_available: bool) -> Choice:
    """Spot whenever it is there, wait otherwise, until the slack left only covers a restart on
    on-demand (the same safety net): then on-demand to the end."""
    work, time = state.left(job)
    if work <= EPS:
        return Choice(NONE, "done")
    if state.committed or (state.running != SPOT and time < work + 2 * job.restart_hours):
        return Choice(ON_DEMAND, "greedy: forced onto on-demand", commit=True)
    return Choice(SPOT, "greedy: spot") if spot_available else Choice(NONE, "greedy: wait")


def always_on_demand(job: Job, state: JobState, spot_available: bool) -> Choice:
    work, _ = state.left(job)
    return Choice(NONE, "done") if work <= EPS else Choice(ON_DEMAND, "on-demand only")


@dataclass(frozen=True)
class Outcome:
    """A replay's result: cost in on-demand node-hours (multiply by the on-demand price),
    hours on each model, when it finished (None: not within the trace) and whether it met the
    deadline."""

    cost_od_hours: float
    spot_hours: float
    on_demand_hours: float
    finished_hours: Optional[float]
    met_deadline: bool
    switches: int

    def cost_ratio(self, job: Job) -> float:
        """Cost against running the whole job on on-demand from the start."""
        return self.cost_od_hours / (job.nodes * (job.work_hours + job.restart_hours))


def spot_at(trace: Sequence[int], tick: int, nodes: int) -> bool:
    """True when tick ``tick`` of the trace offers ``nodes`` spot nodes (past its end: no)."""
    return tick < len(trace) and trace[tick] >= nodes


def replay(policy: Policy, job: Job, trace: Sequence[int], gap_hours: float, *,
           spot_price: float) -> Outcome:
    """Run ``policy`` over ``trace`` (ticks of ``gap_hours``) until the job is done or the
    deadline has passed by the time on-demand alone would need (so a late finish is measured,
    not cut off). ``spot_price``: spot's price as a fraction of on-demand."""
    if not 0 <= spot_price <= 1:
        raise ValueError(f"spot_price is a fraction of on-demand, got {spot_price}")
    state = JobState(0.0, 0.0)
    overhead = 0.0
    cost = spot_h = od_h = 0.0
    switches = 0
    limit = job.deadline_hours + job.work_hours + job.restart_hours
    tick = 0
    while state.elapsed_hours < limit - EPS:
        has_spot = spot_at(trace, tick, job.nodes)
        running = state.running
        if running == SPOT and not has_spot:
            running = NONE                  # preempted: the nodes are gone
        # (JobState(...) rather than dataclasses.replace: the same state, 3x cheaper per tick)
        choice = policy(job, JobState(state.elapsed_hours, state.done_hours, running,
                                      state.committed), has_spot)
        kind = choice.kind
        if kind == SPOT and not has_spot:
            kind = NONE                     # a policy cannot run on spot that is not there
        if kind != NONE and kind != running:
            overhead = job.restart_hours
            switches += 1
        done = state.done_hours
        finished = None
        if kind != NONE:
            useful = max(0.0, gap_hours - overhead)
            used = gap_hours
            if done + useful >= job.work_hours - EPS:     # finishes within this tick
                useful = job.work_hours - done
                used = min(gap_hours, overhead) + useful
                finished = state.elapsed_hours + used
            overhead = max(0.0, overhead - gap_hours)
            price = spot_price if kind == SPOT else 1.0
            cost += price * used * job.nodes
            if kind == SPOT:
                spot_h += used
            else:
                od_h += used
            done += useful
        state = JobState(state.elapsed_hours + gap_hours, done, kind,
                         state.committed or choice.commit)
        tick += 1
        if finished is not None:
            return Outcome(cost, spot_h, od_h, finished,
                           finished <= job.deadline_hours + EPS, switches)
    return Outcome(cost, spot_h, od_h, None, False, switches)


def offline_optimum(job: Job, trace: Sequence[int], gap_hours: float, *,
                    spot_price: float) -> Optional[Outcome]:
    """The cheapest schedule that meets the deadline knowing the whole trace (None when none
    does). A dynamic programme over ticks (numpy over the work done; imported here, so the
    reaper bundle, which never calls it, stays free of it): state = (model running, ticks of
    restart left, ticks of work done); the work and the restart overhead are rounded up to
    whole ticks, so compare it with replays whose restart is a whole number of ticks."""
    import numpy as np

    n_work = math.ceil(job.work_hours / gap_hours - EPS)
    k = math.ceil(job.restart_hours / gap_hours - EPS)
    n_ticks = math.floor(job.deadline_hours / gap_hours + EPS)
    inf = np.inf
    keys = [(NONE, 0)] + [(m, o) for m in (SPOT, ON_DEMAND) for o in range(k + 1)]
    # per state: arrays over work done (0 .. n_work-1) of (cost, spot ticks, od ticks, switches)
    def empty():
        return [np.full(n_work, inf), np.zeros(n_work), np.zeros(n_work), np.zeros(n_work)]

    best = {key: empty() for key in keys}
    best[(NONE, 0)][0][0] = 0.0
    price = {SPOT: spot_price * job.nodes, ON_DEMAND: 1.0 * job.nodes}
    found = None          # (cost, spot, od, switches)
    for tick in range(n_ticks):
        has_spot = spot_at(trace, tick, job.nodes)
        nxt = {key: empty() for key in keys}
        for (kind, ov), src in best.items():
            if not np.isfinite(src[0]).any():
                continue
            running = NONE if kind == SPOT and not has_spot else kind
            for choice in (NONE, SPOT, ON_DEMAND):
                if choice == SPOT and not has_spot:
                    continue
                if choice == NONE:
                    _merge(nxt[(NONE, 0)], src, 0.0, 0, 0, 0, shift=0)
                    continue
                fresh = choice != running
                left = k if fresh else ov
                gain = 1 if left == 0 else 0
                dst = nxt[(choice, max(0, left - 1))]
                add = (price[choice], choice == SPOT, choice == ON_DEMAND, fresh)
                _merge(dst, src, *add, shift=gain)
                if gain and np.isfinite(src[0][-1]):          # the last tick of work
                    cand = (src[0][-1] + add[0], src[1][-1] + add[1], src[2][-1] + add[2],
                            src[3][-1] + add[3])
                    if found is None or cand[0] < found[0] - EPS:
                        found = cand
        best = nxt
    if found is None:
        return None
    cost, spot_t, od_t, sw = found
    return Outcome(float(cost) * gap_hours, float(spot_t) * gap_hours, float(od_t) * gap_hours,
                   None, True, int(sw))


def _merge(dst, src, cost, spot, od, switch, *, shift: int) -> None:
    """dst = elementwise cheaper of dst and src + the step (shifted by ``shift`` ticks of work;
    what shifts past the end is the finishing step, handled by the caller)."""
    import numpy as np

    n = len(src[0])
    if shift:
        c = src[0][:n - 1] + cost
        better = c < dst[0][1:]
        for i, add in enumerate((cost, spot, od, switch)):
            cand = src[i][:n - 1] + add
            dst[i][1:] = np.where(better, cand, dst[i][1:])
    else:
        c = src[0] + cost
        better = c < dst[0]
        for i, add in enumerate((cost, spot, od, switch)):
            dst[i][:] = np.where(better, src[i] + add, dst[i])


POLICIES: dict[str, Policy] = {"uniform_progress": uniform_progress, "greedy": greedy,
                               "always_on_demand": always_on_demand}


# ---- the offline price: the rule's expectation over generated traces ---------------------------
#: tick of the generated traces (5 minutes, the bench's; coarser only for long windows, so a
#: priced replay has at most MAX_PRICE_TICKS ticks)
GEN_GAP_HOURS = 5 / 60
MAX_PRICE_TICKS = 1000
#: traces in the priced ensemble (at most) and its seed: replays stop once the mean's standard
#: error is below PRICE_SE of it (at least PRICE_MIN_TRACES), measured on the cost at
#: PRICE_SPOT_SHARE of on-demand (spot at ~30 % of list, /work/shared/DOMAIN.md's figure; the
#: expectation itself is per model, price-free). tests/test_deadline_pricing.py checks the
#: mean against fresh traces of the same model within 5 %.
PRICE_TRACES = 256
PRICE_MIN_TRACES = 32
PRICE_SE = 0.01
PRICE_SPOT_SHARE = 0.3
PRICE_SEED = 37


def markov_trace(up_hours: float, down_hours: float, ticks: int, rnd, *, nodes: int = 1,
                 gap_hours: float = GEN_GAP_HOURS,
                 first: Optional[tuple[bool, int]] = None) -> list[int]:
    """A generated availability trace: a two-state chain (spot there with ``nodes`` nodes /
    gone) whose spells last ``up_hours`` / ``down_hours`` on average (geometric in ticks),
    starting in its stationary state. ``up_hours`` = inf: spot never goes. ``first``: the
    first spell (there?, ticks) already drawn (:func:`_expected_uncached` conditions on it)."""
    if not (up_hours > 0 and down_hours > 0 and gap_hours > 0):
        raise ValueError("spell means and the tick must be positive")
    if math.isinf(up_hours):
        return [nodes] * ticks
    p_up, p_down = min(1.0, gap_hours / up_hours), min(1.0, gap_hours / down_hours)
    out: list[int] = []
    if first is None:
        there = rnd.random() < up_hours / (up_hours + down_hours)
    else:
        there, n = first
        out.extend([nodes if there else 0] * min(n, ticks))
        there = not there
    while len(out) < ticks:
        # a spell lasts a geometric number of ticks (>= 1): the tick-by-tick chain, drawn
        # one spell at a time
        n = _spell(rnd, p_up if there else p_down)
        out.extend([nodes if there else 0] * min(n, ticks - len(out)))
        there = not there
    return out


def _spell(rnd, p: float) -> int:
    """A geometric number of ticks (>= 1) with end probability ``p`` per tick."""
    return 1 if p >= 1.0 else 1 + int(math.log(1.0 - rnd.random()) / math.log(1.0 - p))


@dataclass(frozen=True)
class Expectation:
    """The rule's mean over an ensemble of generated traces, per node: hours on spot and on
    on-demand (restarts included), the on-demand share of them, the mean and latest finish
    (hours from the start) and the deadlines missed."""

    spot_hours: float
    on_demand_hours: float
    finish_mean_hours: float
    finish_max_hours: float
    missed: int
    traces: int
    gap_hours: float

    @property
    def fallback_share(self) -> float:
        total = self.spot_hours + self.on_demand_hours
        return self.on_demand_hours / total if total > 0 else 0.0

    def cost_od_hours(self, spot_price: float) -> float:
        """Cost per node in on-demand hours (spot at ``spot_price`` of on-demand)."""
        return spot_price * self.spot_hours + self.on_demand_hours


def price_gap_hours(job: Job) -> float:
    """The tick a priced replay uses: 5 minutes, coarser for windows longer than
    MAX_PRICE_TICKS of them (never coarser than the restart: the safety net's margin)."""
    horizon = job.deadline_hours + job.work_hours + job.restart_hours
    gap = max(GEN_GAP_HOURS, horizon / MAX_PRICE_TICKS)
    return min(gap, max(GEN_GAP_HOURS, job.restart_hours)) if job.restart_hours else gap


def latest_switch_hours(job: Job) -> float:
    """Hours from the start after which an idle job is on on-demand for good: the safety net
    fires once the time left is below the work left + 2 restarts; with no progress at all,
    that is ``D - C - 2d``."""
    return max(0.0, job.deadline_hours - job.work_hours - 2 * job.restart_hours)


def expected(job: Job, up_hours: float, down_hours: float, *, traces: int = PRICE_TRACES,
             seed: int = PRICE_SEED, gap_hours: Optional[float] = None,
             policy: Policy = uniform_progress) -> Expectation:
    """``policy`` (the rule) replayed on ``traces`` seeded traces of the two-state model
    (:func:`markov_trace`), averaged. Cached per parameter set (the policy prices many
    offerings with the same few rates)."""
    return _expected(job, float(up_hours), float(down_hours), traces, seed,
                     gap_hours or price_gap_hours(job), policy)


def _expected_uncached(job, up, down, traces, seed, gap, policy,
                       min_traces: int = PRICE_MIN_TRACES) -> Expectation:
    import random

    ticks = math.ceil((job.deadline_hours + job.work_hours + job.restart_hours) / gap) + 1
    rnd = random.Random(seed)
    missed = 0
    # the outcome while spot never goes (most traces when interruptions are rare): replayed
    # once, reused for every trace whose spot lasts until that run is done
    plain = replay(policy, job, [job.nodes] * ticks, gap, spot_price=0.0)
    need = ticks if plain.finished_hours is None else min(
        ticks, math.ceil(plain.finished_hours / gap - EPS) + 1)
    # E = P0 x plain + (1 - P0) x E[outcome | spot goes before that run is done]: P0 exactly
    # (start there, first spell of >= need ticks), the rest sampled from the traces where spot
    # goes - so rare interruptions are neither missed nor a source of noise
    if math.isinf(up):
        p0 = 1.0
    else:
        p_up, p_down = min(1.0, gap / up), min(1.0, gap / down)
        p0 = up / (up + down) * (1.0 - p_up) ** (need - 1)
    spot_h, od_h, fin, worst = plain.spot_hours, plain.on_demand_hours, plain.finished_hours, 0.0
    worst = fin if fin is not None else math.inf
    fin = worst
    costs: list[float] = []
    if p0 < 1.0 - 1e-4:
        s_h = o_h = f_h = 0.0
        for i in range(traces):
            while True:                 # the first spell, unless it is the plain run's
                there = rnd.random() < up / (up + down)
                n = _spell(rnd, p_up if there else p_down)
                if not (there and n >= need):
                    break
            trace = markov_trace(up, down, ticks, rnd, nodes=job.nodes, gap_hours=gap,
                                 first=(there, n))
            o = replay(policy, job, trace, gap, spot_price=0.0)
            s_h += o.spot_hours
            o_h += o.on_demand_hours
            end = o.finished_hours if o.finished_hours is not None else math.inf
            f_h += end
            worst = max(worst, end)
            missed += not o.met_deadline
            costs.append(PRICE_SPOT_SHARE * o.spot_hours + o.on_demand_hours)
            if i + 1 >= min_traces and _settled(costs, 1.0 - p0, p0 * (
                    PRICE_SPOT_SHARE * plain.spot_hours + plain.on_demand_hours)):
                break
        k = len(costs)
        spot_h = p0 * spot_h + (1 - p0) * s_h / k
        od_h = p0 * od_h + (1 - p0) * o_h / k
        fin = p0 * fin + (1 - p0) * f_h / k
    return Expectation(spot_h, od_h, fin, worst, missed, len(costs), gap)


def _settled(costs: list[float], weight: float, base: float) -> bool:
    """True when the standard error of ``base + weight x mean(costs)`` is below PRICE_SE of
    it."""
    import statistics

    mean = base + weight * statistics.fmean(costs)
    se = weight * statistics.stdev(costs) / math.sqrt(len(costs))
    return mean > 0 and se < PRICE_SE * mean


def _cache(fn, size: int = 512):
    import functools

    return functools.lru_cache(maxsize=size)(fn)


_expected = _cache(_expected_uncached)


@dataclass(frozen=True)
class Switch:
    """The deadline step's decision for one running job (:func:`at_run_time`): the rule's
    choice and the desired sizes it gives the spot group and the on-demand group."""

    choice: Choice
    #: None (both): leave the groups as they are (the job is done)
    spot_nodes: Optional[int]
    on_demand_nodes: Optional[int]
    #: what the step saw, for `reap --json` and the audit log
    seen: dict


def at_run_time(job: Job, *, elapsed_hours: float, share_done: float, running: str,
                spot_available: bool, policy: Policy = uniform_progress) -> Switch:
    """The rule at run time (the scheduled reaper's deadline step), from what the cloud and
    the job show now: hours since the run started, the share of the work the job published
    (:func:`read_progress`), what it runs on (``running``: ON_DEMAND while the on-demand group
    has nodes, SPOT while the spot group has all it asked for, NONE otherwise) and whether spot
    is there (its group fulfilled, no interruption notice). Stateless: the safety net's
    commitment is re-derived each run (on on-demand with less time left than the work and two
    restarts). The two groups' sizes:

    - spot / wait for spot: the spot group asks for the job's nodes (fulfilment is how the
      step sees spot), the on-demand group none;
    - on-demand: the on-demand group runs the nodes; the spot group keeps asking only when
      nothing but spot's absence keeps the job on on-demand (the rule would leave on-demand
      if spot were there), so spot's return is seen and the switch back is made before
      break; otherwise (hysteresis, safety net) it asks for none;
    - done: nothing changes (the idle reaper stops finished work)."""
    done_hours = max(0.0, min(1.0, share_done)) * job.work_hours
    state = JobState(elapsed_hours, done_hours, running=running)
    work, time = state.left(job)
    committed = running == ON_DEMAND and work > EPS and time < work + 2 * job.restart_hours
    state = replace(state, committed=committed)
    choice = policy(job, state, spot_available)
    seen = {"elapsed_hours": round(elapsed_hours, 3), "work_done_hours": round(done_hours, 3),
            "work_left_hours": round(work, 3), "time_left_hours": round(time, 3),
            "restart_hours": round(job.restart_hours, 3),
            "uniform_line_hours": round(_line(job, elapsed_hours), 3),
            "running": running, "spot_available": spot_available, "committed": committed}
    n = job.nodes
    if choice.kind == ON_DEMAND:
        leave = (not choice.commit and policy(job, replace(state, running=ON_DEMAND), True)
                 .kind == SPOT)
        return Switch(choice, n if leave else 0, n, seen)
    if choice.reason == "done":
        return Switch(choice, None, None, seen)
    return Switch(choice, n, 0, seen)


def controls(decision) -> bool:
    """True for window work the policy put on spot (``clusters[].window`` bought as spot, every
    node spot): the program declares its spot group and an on-demand group of the same nodes
    at zero, and the reaper's deadline step moves capacity between them."""
    w = getattr(decision, "window", None)
    return w is not None and w.model == SPOT and decision.purchase.spot == decision.nodes


def restart_minutes(checkpoint_minutes: Optional[float], spot_restart_minutes: float) -> float:
    """The restart overhead ``d`` of a switch, in minutes: the work since the last checkpoint
    (half an interval, on average) and the restart itself - the policy's lost work per spot
    interruption (gpulease.policy.costmodel)."""
    return (checkpoint_minutes or 0.0) / 2.0 + spot_restart_minutes

