"""The cost model of a work item with a window (pure math): every way to buy it, priced exactly.

A work item needs N nodes for D hours of work, starting at or after S (``earliest_start``) and
done by E (``deadline``); "now" is T. The time it can use is W = E - max(S, T). A multi-node
distributed job on TCP only runs D' = D / (1 - c) hours (c = tcp_communication_share: the same
overhead the monthly model charges as extra node-hours); otherwise D' = D. Each purchase model
gives a total price, a run (start, end) and whether it meets the window:

  on_demand     N x o x D'                          runs [max(S,T), +D']
  reservation   N x o x D'                          a capacity reservation for the run (AWS
                                                    ODCR, GCP reservation) at the on-demand rate:
                                                    guaranteed capacity, nothing locked in
  commitment    N x r_term x 730 x months(term)     a 1-/3-year commitment bought for the item:
                                                    bills every hour of its term
  spot          N x (s x E[spot h] + o x E[on-demand h])   the deadline rule's expectation
                                                    (gpulease.deadline.expected: Uniform
                                                    Progress replayed on 40 seeded traces of a
                                                    two-state model, spot there 1/(k x lambda) h
                                                    on average, k = N in a gang else 1, gone
                                                    spot_outage_hours; restarts of L included);
                                                    needs W >= D' + L (the fallback's restart)
  capacity_block  the offering's upfront fee        AWS: an offering of >= N instances whose
                  (rate x count x block hours for   [start, end - 30 min] lies in [max(S,T), E]
                  a published rate)                 and holds D' hours; blocks end 11:30 UTC,
                                                    last 1-14 days or 7-day steps to 182 days,
                                                    start within 8 weeks, of the instance
                                                    counts AWS sells (CB_INSTANCE_COUNTS:
                                                    rounded up to one block, or split - priced,
                                                    shown, not planned: one block a cluster)
  flex_start    N x f x D'                          GCP DWS: D' <= 168 h (one run), queued: needs
                                                    W - D' >= the queue allowance
                                                    (flex_start_queue_hours); not preempted
  calendar      N x c x 24 x days                   GCP calendar-mode future reservation of
                                                    days = ceil(D' / 24) (1-90 days), starting
                                                    within 120 days, inside [max(S,T), E]

(o, s, r, f, c: USD per node-hour; lambda: spot interruptions per node-hour of the zone;
L = (checkpoint_minutes / 2 + restart_minutes) / 60 hours lost per interruption.) An option
is **feasible** when it is priced and meets the window; the policy keeps the cheapest feasible
option the priority band allows (ties: the one that prepays and locks in least,
``purchase.WINDOW_PREFERENCE``).
"""
from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field, replace
from typing import NamedTuple, Optional, Sequence

from gpulease import deadline as dl
from gpulease.clouds import registry
from gpulease.model import HOURS_PER_MONTH, TERM_MONTHS
from gpulease.purchase import (CALENDAR, CAPACITY_BLOCK, COMMITMENT, FLEX_START, GUARANTEED,
                               ON_DEMAND, RESERVATION, SPOT, WINDOW_MODELS, WINDOW_PREFERENCE)
from gpulease.quotes import (CALENDAR_MAX_ADVANCE_DAYS, CB_DAY_STEPS_UP_TO_DAYS, CB_END_UTC,
                             CB_MAX_ADVANCE_DAYS, CB_MAX_DAYS, CB_MAX_INSTANCES,
                             CB_MAX_INSTANCES_ACROSS_BLOCKS, CB_TERMINATION_LEAD_MINUTES,
                             CB_WEEK_STEP_DAYS, FLEX_START_MAX_RUN_HOURS, block_counts,
                             block_hours_for, block_window_problem, calendar_days_for)

CB_DAY_STEPS, CB_MAX_BLOCK_DAYS = CB_DAY_STEPS_UP_TO_DAYS, CB_MAX_DAYS
from gpulease.clock import format_utc
from gpulease.policy.rules import SPOT_OUTAGE_HOURS
from gpulease.quotes.model import Quote, utc

# WINDOW_MODELS (every model a work item can be bought with, in the order `explain` lists them),
# WINDOW_PREFERENCE (on an exact tie the lower wins: no prepayment and no lock-in before either),
# GUARANTEED (capacity held for the run: what priority > reserved_above_priority needs) and
# WINDOW_ONLY (what `bench/policy.py` leaves out for "the best plan without them") are views of
# the one purchase-model table, gpulease.purchase.
#: relative tolerance of a price tie (sums in different orders).
TIE = 1e-9


class WindowRates(NamedTuple):
    """USD per node-hour of one offering (None = not priced / not sold that way)."""

    on_demand: Optional[float]
    spot: Optional[float]
    commit_1y: Optional[float] = None
    commit_3y: Optional[float] = None
    #: a capacity reservation's rate (the on-demand rate where the offering can be reserved).
    reservation: Optional[float] = None
    flex_start: Optional[float] = None
    calendar: Optional[float] = None


@dataclass(frozen=True)
class WorkItem:
    """What pricing a window needs besides the rates and quotes."""

    nodes: int
    duration_hours: float
    earliest_start: dt.datetime
    deadline: dt.datetime
    now: dt.datetime
    gang: bool = False
    #: spot interruptions per node-hour (the zone's, from the spot-risk data or the default).
    interruptions_per_hour: float = 0.0
    #: hours of work one interruption loses: checkpoint_minutes / 2 + restart, in hours.
    lost_hours: float = 0.0
    #: mean hours spot stays gone once interrupted (gpulease:policy.spot_outage_hours).
    spot_outage_hours: float = SPOT_OUTAGE_HOURS
    #: False: the priority band rules spot out, so its option is not priced (the deadline
    #: rule's expectation costs replays; what no band can choose is not worth them).
    spot_allowed: bool = True
    #: communication share of a TCP-only gang (0 otherwise).
    communication_share: float = 0.0
    #: queueing time a flex-start request must be able to wait within the window.
    flex_start_queue_hours: float = 24.0
    #: a live offering older than this is not used (offerings change by the hour).
    quote_max_age_hours: float = 24.0
    #: checkpointed work can move between purchases (a block, then the remainder); with
    #: ``remainder_rate`` the part a block cannot hold runs on ``remainder_model``.
    checkpointed: bool = False
    remainder_rate: Optional[float] = None
    remainder_model: str = ON_DEMAND
    #: cloud of the offering: which window-only models it sells (``Cloud.window_models``:
    #: Capacity Blocks on AWS, flex-start and calendar mode on GCP).
    cloud: str = registry.NAMES[0]
    region: str = ""
    instance_type: str = ""

    @property
    def run_hours(self) -> float:
        """D': the hours the job runs (TCP overhead included)."""
        c = self.communication_share
        return self.duration_hours / (1.0 - c) if c > 0 else self.duration_hours

    @property
    def first_start(self) -> dt.datetime:
        return max(utc(self.earliest_start), utc(self.now))

    @property
    def usable_hours(self) -> float:
        """W: hours from the first possible start to the deadline."""
        return (utc(self.deadline) - self.first_start).total_seconds() / 3600.0


@dataclass(frozen=True)
class WindowOption:
    """One way to buy a work item: its price and run, or why it cannot be used."""

    model: str
    total_usd: Optional[float] = None
    #: the parts of total_usd: compute (node-hours or the fee; on spot the expected spot hours,
    #: restarts included), rework (on spot: the expected on-demand fallback of the deadline
    #: rule, what the interruptions cost beyond the spot hours).
    compute_usd: float = 0.0
    rework_usd: float = 0.0
    #: hours the work item runs (D', longer on spot by the rework) and when.
    run_hours: float = 0.0
    start: Optional[dt.datetime] = None
    end: Optional[dt.datetime] = None
    #: node-hours paid for (a block or calendar reservation longer than the run pays its idle
    #: hours; a commitment pays its whole term).
    billed_node_hours: float = 0.0
    nodes: int = 0
    #: the quote the price comes from (capacity block offering or rate, flex / calendar rate).
    quote: Optional[Quote] = None
    #: True when ``quote`` is a published rate, not an offering (availability not checked).
    estimated: bool = False
    lock_in_months: int = 0
    #: None = feasible; else why not (no price, too long, window too short, ...).
    unavailable: Optional[str] = None
    #: other quotes of the kind that were looked at and why they were not used.
    passed_over: tuple = field(default=())
    #: the part of the run a block cannot hold, on another model: {model, hours, usd, start,
    #: end, node_hour_usd} (checkpointed work only).
    remainder: Optional[dict] = None
    #: the capacity bought and its time: a block from its start to its end, a calendar-mode
    #: reservation's whole days, a reservation / flex-start run for the run (None: on-demand,
    #: spot, a commitment). Nodes bought so are billed until ``bought_until``.
    bought_from: Optional[dt.datetime] = None
    bought_until: Optional[dt.datetime] = None
    #: the instance counts of the Capacity Blocks bought (one block: (count,), its count may
    #: be above ``nodes`` when the nodes are not a size AWS sells); () for other models.
    blocks: tuple = ()
    #: spot under the deadline rule: {fallback_share, fallback_usd, spot_hours, on_demand_hours
    #: (per node, restarts included), latest_switch, guaranteed_by, mean_finish, uptime_hours,
    #: outage_hours, restart_hours, traces} (None for every other model).
    deadline_rule: Optional[dict] = None

    @property
    def feasible(self) -> bool:
        return self.unavailable is None and self.total_usd is not None

    @property
    def guaranteed(self) -> bool:
        return self.model in GUARANTEED

    def as_dict(self) -> dict:
        return {"model": self.model, "feasible": self.feasible,
                "total_usd": None if self.total_usd is None else round(self.total_usd, 2),
                "compute_usd": round(self.compute_usd, 2), "rework_usd": round(self.rework_usd, 2),
                "run_hours": round(self.run_hours, 4), "start": format_utc(self.start),
                "end": format_utc(self.end), "nodes": self.nodes,
                "billed_node_hours": round(self.billed_node_hours, 4),
                "lock_in_months": self.lock_in_months, "estimated": self.estimated,
                "unavailable": self.unavailable,
                "quote": self.quote.as_dict() if self.quote is not None else None,
                "bought_from": format_utc(self.bought_from),
                "bought_until": format_utc(self.bought_until),
                "blocks": list(self.blocks),
                "remainder": None if self.remainder is None else {
                    k: (round(v, 4) if isinstance(v, float) else v)
                    for k, v in self.remainder.items()},
                "passed_over": [{"quote": q.as_dict(), "why": why} for q, why in self.passed_over],
                **({"deadline_rule": {k: round(v, 4) if isinstance(v, float) else v
                                      for k, v in self.deadline_rule.items()}}
                   if self.deadline_rule else {})}


def _after(t: dt.datetime, hours: float) -> dt.datetime:
    return t + dt.timedelta(hours=hours)


def _too_short(w: WorkItem, hours: float) -> Optional[str]:
    if w.usable_hours + 1e-9 < hours:
        return (f"the window leaves {max(w.usable_hours, 0):.1f} h from "
                f"{format_utc(w.first_start)} to the deadline {format_utc(w.deadline)}, less than "
                f"the {hours:.1f} h the run needs")
    return None


def on_demand(w: WorkItem, rate: Optional[float], model: str = ON_DEMAND) -> WindowOption:
    d = w.run_hours
    if rate is None:
        what = "an on-demand" if model == ON_DEMAND else "a capacity reservation"
        return WindowOption(model, nodes=w.nodes, unavailable=f"no price ({what} rate)")
    start = w.first_start
    usd = w.nodes * rate * d
    bought = (start, _after(start, d)) if model == RESERVATION else (None, None)
    return WindowOption(model, total_usd=usd, compute_usd=usd, run_hours=d, start=start,
                        end=_after(start, d), billed_node_hours=w.nodes * d, nodes=w.nodes,
                        unavailable=_too_short(w, d), bought_from=bought[0],
                        bought_until=bought[1])


def commitment(w: WorkItem, rate: Optional[float], term: str) -> WindowOption:
    months = TERM_MONTHS[term]
    if rate is None:
        return WindowOption(COMMITMENT, nodes=w.nodes, lock_in_months=months,
                            unavailable=f"no price (no {term} commitment rate)")
    d = w.run_hours
    hours = HOURS_PER_MONTH * months
    usd = w.nodes * rate * hours
    start = w.first_start
    return WindowOption(COMMITMENT, total_usd=usd, compute_usd=usd, run_hours=d, start=start,
                        end=_after(start, d), billed_node_hours=w.nodes * hours, nodes=w.nodes,
                        lock_in_months=months, unavailable=_too_short(w, d))


def spot_job(w: WorkItem) -> tuple[dl.Job, float, int]:
    """The work item as the deadline rule sees it: (job of one unit, mean hours spot stays,
    units). A gang is one unit of N nodes (any interruption stops it: spot stays
    1 / (N x lambda) h); independent nodes are N units of one (1 / lambda h each)."""
    unit = w.nodes if w.gang else 1
    lam = w.interruptions_per_hour * unit
    job = dl.Job(work_hours=w.run_hours, deadline_hours=max(w.usable_hours, w.run_hours),
                 restart_hours=w.lost_hours)
    return job, (math.inf if lam <= 0 else 1.0 / lam), w.nodes


def spot(w: WorkItem, rate: Optional[float], fallback_rate: Optional[float] = None
         ) -> WindowOption:
    """Spot under the deadline rule (Uniform Progress, gpulease/deadline.py): the expected
    spot and on-demand node-hours over generated traces of the availability model, priced at
    the spot and on-demand rates; the deadline is met because the rule falls back to
    on-demand (at the latest ``latest_switch``)."""
    if rate is None:
        return WindowOption(SPOT, nodes=w.nodes, unavailable="no price (no spot price)")
    n, d, lost = w.nodes, w.run_hours, w.lost_hours
    start = w.first_start
    if not w.spot_allowed:
        return WindowOption(SPOT, nodes=n, unavailable="not priced: the priority band does "
                                                        "not allow spot")
    if fallback_rate is None:
        return WindowOption(SPOT, nodes=n, unavailable="no on-demand rate to fall back on: "
                                                        "the deadline cannot be guaranteed")
    if w.usable_hours + 1e-9 < d + lost:
        return WindowOption(SPOT, nodes=n, start=start, unavailable=(
            f"the window leaves {max(w.usable_hours, 0):.1f} h from {format_utc(start)} to the "
            f"deadline {format_utc(w.deadline)}, less than the {d:.1f} h run plus one "
            f"{lost:.2f} h restart the on-demand fallback needs"))
    job, up, units = spot_job(w)
    e = dl.expected(job, up, w.spot_outage_hours)
    compute = units * rate * e.spot_hours
    fallback = units * fallback_rate * e.on_demand_hours
    hours = e.spot_hours + e.on_demand_hours
    wall = min(e.finish_mean_hours, job.deadline_hours)
    switch = dl.latest_switch_hours(job)
    rule = {"fallback_share": e.fallback_share, "fallback_usd": fallback,
            "spot_hours": e.spot_hours, "on_demand_hours": e.on_demand_hours,
            "latest_switch": format_utc(_after(start, switch)),
            # with no progress on spot at all: on-demand from the switch, one restart, the run
            "guaranteed_by": format_utc(_after(start, switch + lost + d)),
            "mean_finish": format_utc(_after(start, wall)),
            "uptime_hours": None if math.isinf(up) else up,
            "outage_hours": w.spot_outage_hours, "restart_hours": lost,
            "traces": e.traces, "missed": e.missed}
    return WindowOption(SPOT, total_usd=compute + fallback, compute_usd=compute,
                        rework_usd=fallback, run_hours=wall, start=start, end=_after(start, wall),
                        billed_node_hours=units * hours, nodes=n, deadline_rule=rule)


def flex_start(w: WorkItem, rate: Optional[float], quote: Optional[Quote] = None) -> WindowOption:
    d = w.run_hours
    if rate is None:
        return WindowOption(FLEX_START, nodes=w.nodes,
                            unavailable="no flex-start price: no citable rate (Google publishes "
                                        "none outside its Billing Catalog; `gpulease catalog "
                                        "quotes --source live` reads the DWS SKUs)")
    usd = w.nodes * rate * d
    why = None
    if d > FLEX_START_MAX_RUN_HOURS + 1e-9:
        why = (f"the run takes {d:.1f} h; a flex-start VM runs at most "
               f"{FLEX_START_MAX_RUN_HOURS} h (7 days)")
    elif w.usable_hours + 1e-9 < d + w.flex_start_queue_hours:
        why = (f"queued: the window leaves {max(w.usable_hours, 0):.1f} h, less than the "
               f"{d:.1f} h run plus {w.flex_start_queue_hours:g} h to wait for capacity "
               "(gpulease:policy.flex_start_queue_hours)")
    # capacity arrives at some point in the queue allowance; the plan shows the latest start
    start = _after(w.first_start, w.flex_start_queue_hours)
    return WindowOption(FLEX_START, total_usd=usd, compute_usd=usd, run_hours=d, start=start,
                        end=_after(start, d), billed_node_hours=w.nodes * d, nodes=w.nodes,
                        quote=quote, unavailable=why, bought_from=start,
                        bought_until=_after(start, d))


def _next_block_start(t: dt.datetime) -> dt.datetime:
    h, m = CB_END_UTC
    s = utc(t).replace(hour=h, minute=m, second=0, microsecond=0)
    return s if s >= utc(t) else s + dt.timedelta(days=1)


def _hours(a: dt.datetime, b: dt.datetime) -> float:
    return (utc(b) - utc(a)).total_seconds() / 3600.0


def _fit_block(w: WorkItem, q: Quote, bstart: dt.datetime, bend: dt.datetime, fee: float,
               count: int, estimated: bool) -> tuple[Optional[WindowOption], Optional[str]]:
    """A block [bstart, bend] for the work item: the run inside it (AWS stops instances 30 min
    before the end), or - checkpointed work only - inside it plus the rest on the remainder
    model right after (or right before) it, one restart's lost work included."""
    d, n = w.run_hours, w.nodes
    lead = CB_TERMINATION_LEAD_MINUTES / 60.0
    ustart = max(utc(bstart), w.first_start)
    stop = utc(bend) - dt.timedelta(hours=lead)
    uend = min(stop, utc(w.deadline))
    usable = _hours(ustart, uend)
    if usable <= 0:
        return None, (f"no usable hour between {format_utc(ustart)} and {format_utc(uend)} "
                      f"(instances stop {CB_TERMINATION_LEAD_MINUTES} min before the block ends)")
    base = dict(quote=q, nodes=n, estimated=estimated, blocks=(count,),
                billed_node_hours=count * _hours(bstart, bend), bought_from=utc(bstart),
                bought_until=utc(bend))
    if usable + 1e-9 >= d:
        return WindowOption(CAPACITY_BLOCK, total_usd=fee, compute_usd=fee, run_hours=d,
                            start=ustart, end=_after(ustart, d), **base), None
    if not w.checkpointed or w.remainder_rate is None:
        return None, (f"{usable:.1f} usable h from {format_utc(ustart)} (instances stop "
                      f"{CB_TERMINATION_LEAD_MINUTES} min before the end) < {d:.1f} h, and "
                      + ("the work is not checkpointed: it cannot move off the block"
                         if not w.checkpointed else "no rate to finish it on"))
    rest = d - usable + w.lost_hours
    extra = n * w.remainder_rate * rest
    after = _hours(stop, w.deadline)
    before = _hours(w.first_start, ustart)
    if after + 1e-9 >= rest:
        rstart, rend, start, end = stop, _after(stop, rest), ustart, _after(stop, rest)
    elif before + 1e-9 >= rest:
        rstart, rend = _after(ustart, -rest), ustart
        start, end = rstart, _after(ustart, usable)
    else:
        return None, (f"{usable:.1f} usable h in the block; the other {rest:.1f} h (restart "
                      f"included) fit neither before it ({before:.1f} h) nor after it until the "
                      f"deadline ({after:.1f} h)")
    rem = {"model": w.remainder_model, "hours": rest, "usd": extra, "start": format_utc(rstart),
           "end": format_utc(rend), "node_hour_usd": w.remainder_rate}
    return WindowOption(CAPACITY_BLOCK, total_usd=fee + extra, compute_usd=fee + extra,
                        run_hours=_hours(start, end), start=start, end=end,
                        remainder=rem, **dict(base, billed_node_hours=base["billed_node_hours"]
                                              + n * rest)), None


def _floor_block_hours(hours: float) -> Optional[int]:
    """The longest Capacity Block duration not above ``hours`` (None below one day)."""
    days = int(hours // 24)
    if days > CB_DAY_STEPS:
        days = max(CB_DAY_STEPS, CB_WEEK_STEP_DAYS * (days // CB_WEEK_STEP_DAYS))
    days = min(days, CB_MAX_BLOCK_DAYS)
    return days * 24 if days >= 1 else None


def _sold_on(model: str) -> str:
    """The clouds selling a window-only model, as messages name them ("AWS", "GCP")."""
    return " / ".join(c.name.upper() for c in registry.CLOUDS if model in c.window_models)


def capacity_block(w: WorkItem, quotes: Sequence[Quote]) -> WindowOption:
    """The cheapest Capacity Block plan for the work item: a live offering, else blocks
    estimated from a published rate from the first 11:30 UTC in the window (the shortest
    covering the run, and for checkpointed work the longest shorter one plus the remainder)."""
    d = w.run_hours
    lead = CB_TERMINATION_LEAD_MINUTES / 60.0
    if CAPACITY_BLOCK not in registry.get(w.cloud).window_models:
        return WindowOption(CAPACITY_BLOCK, nodes=w.nodes,
                            unavailable=f"Capacity Blocks are an {_sold_on(CAPACITY_BLOCK)} "
                                        "purchase option")
    if w.nodes > CB_MAX_INSTANCES_ACROSS_BLOCKS:
        return WindowOption(CAPACITY_BLOCK, nodes=w.nodes,
                            unavailable=f"{w.nodes} nodes: an account holds at most "
                                        f"{CB_MAX_INSTANCES_ACROSS_BLOCKS} instances across "
                                        "Capacity Blocks")
    up, split = block_counts(w.nodes)
    passed: list = []
    best: Optional[WindowOption] = None
    # a live (or cached) offering replaces the published rates, dearer or cheaper: a
    # published rate is only an estimate of what AWS would quote (docs/catalog.md, "Quotes")
    live = [q for q in quotes if q.kind == CAPACITY_BLOCK and q.is_offering
            and q.expired(w.now, w.quote_max_age_hours) is None
            and (q.instance_count or 0) >= w.nodes]

    def consider(opt: WindowOption) -> None:
        nonlocal best
        if best is None or _better(opt, best):
            best = opt
    latest = utc(w.now) + dt.timedelta(days=CB_MAX_ADVANCE_DAYS)
    for q in quotes:
        if q.kind == CAPACITY_BLOCK and not q.is_offering and live:
            passed.append((q, "an estimate: a quoted offering replaces the published rate"))
            continue
        if q.kind != CAPACITY_BLOCK:
            continue
        if q.is_offering:
            why = q.expired(w.now, w.quote_max_age_hours)
            if why is None and (q.instance_count or 0) < w.nodes:
                why = f"{q.instance_count} instances < {w.nodes} nodes"
            if why is None:
                opt, why = _fit_block(w, q, q.start, q.end, q.upfront_usd, q.instance_count,
                                      estimated=False)
            if why is None:     # the rule a pinned block is checked with (config.parse)
                problem = block_window_problem(utc(q.start), utc(q.end), utc(w.earliest_start),
                                               utc(w.deadline))
                why = problem[1] if problem else None
            if why is not None:
                passed.append((q, why))
                continue
            consider(opt)
            continue
        # a published rate: estimate blocks from the first 11:30 UTC in the window
        start = _next_block_start(w.first_start)
        if start > latest:
            passed.append((q, f"the earliest block start {format_utc(start)} is more than eight "
                              f"weeks ahead of {format_utc(w.now)}"))
            continue
        lengths = [block_hours_for(d + lead)]
        if w.checkpointed and w.remainder_rate is not None:
            lengths.append(_floor_block_hours(d + lead))
        found, last = False, (f"{w.nodes} nodes: no Capacity Block size holds them (at most "
                              f"{CB_MAX_INSTANCES} instances a block); see the split")
        for hours in dict.fromkeys(h for h in lengths if h):
            if split is not None and split != (w.nodes,):
                # not a size AWS sells: priced as split blocks, shown, never planned (the
                # program declares one block a cluster: docs/catalog.md, "Block sizes")
                fee = q.hourly_usd * w.nodes * hours
                passed.append((q, f"split into {len(split)} blocks of "
                                  f"{' + '.join(map(str, split))} instances for {hours} h: "
                                  f"${fee:,.2f} (estimated) - gpulease buys one block a "
                                  "cluster; not planned"))
            if up is None:
                continue
            fee = q.hourly_usd * up * hours
            opt, why = _fit_block(w, q, start, _after(start, hours), fee, up, estimated=True)
            if opt is not None:
                consider(opt)
                found = True
            else:
                last = why
        if not found:
            passed.append((q, last if lengths[0] else
                           f"{d:.1f} h is longer than the longest block (182 days)"))
    if best is None:
        why = ("no Capacity Block quote for the type in the region: no citable published rate "
               "(`gpulease catalog quotes --source live` asks AWS for offerings)" if not passed else
               "no quoted block fits: " + "; ".join(why for _, why in passed[:3]))
        return WindowOption(CAPACITY_BLOCK, nodes=w.nodes, unavailable=why,
                            passed_over=tuple(passed))
    return replace(best, passed_over=tuple(passed))


def calendar(w: WorkItem, rate: Optional[float], quotes: Sequence[Quote],
             rate_quote: Optional[Quote] = None) -> WindowOption:
    """A calendar-mode future reservation of whole days: at a recommended start (live advice),
    else estimated at the window's first start (availability not checked)."""
    d = w.run_hours
    if CALENDAR not in registry.get(w.cloud).window_models:
        return WindowOption(CALENDAR, nodes=w.nodes,
                            unavailable=f"calendar-mode reservations are a {_sold_on(CALENDAR)} "
                                        "purchase option")
    if rate is None:
        return WindowOption(CALENDAR, nodes=w.nodes,
                            unavailable="no calendar-mode price: no citable rate (Google "
                                        "publishes none outside its Billing Catalog; `gpulease "
                                        "catalog quotes --source live` reads the SKUs)")
    days = calendar_days_for(d)
    if days is None:
        return WindowOption(CALENDAR, nodes=w.nodes,
                            unavailable=f"{d:.1f} h needs more than the 90 days a calendar-mode "
                                        "reservation can last")
    hours = days * 24.0
    fee = w.nodes * rate * hours
    latest = utc(w.now) + dt.timedelta(days=CALENDAR_MAX_ADVANCE_DAYS)
    passed: list = []
    offers = [q for q in quotes if q.kind == CALENDAR and q.is_offering]
    for q in sorted(offers, key=lambda q: (utc(q.start), q.zone or "")):
        why = q.expired(w.now, w.quote_max_age_hours)
        if why is None and (q.instance_count or 0) < w.nodes:
            why = f"advice for {q.instance_count} VMs < {w.nodes} nodes"
        if why is None and (utc(q.start) < w.first_start or utc(q.end) > utc(w.deadline)
                            or q.hours + 1e-9 < d):
            why = (f"recommended {format_utc(q.start)} - {format_utc(q.end)} does not hold "
                   f"{d:.1f} h inside {format_utc(w.first_start)} - {format_utc(w.deadline)}")
        if why is not None:
            passed.append((q, why))
            continue
        start = utc(q.start)
        return WindowOption(CALENDAR, total_usd=fee, compute_usd=fee, run_hours=d, start=start,
                            end=_after(start, d), billed_node_hours=w.nodes * hours,
                            nodes=w.nodes, quote=q, passed_over=tuple(passed),
                            bought_from=start, bought_until=_after(start, hours))
    if offers:
        return WindowOption(CALENDAR, nodes=w.nodes, passed_over=tuple(passed),
                            unavailable="no calendar-mode recommendation fits: "
                                        + "; ".join(why for _, why in passed[:3]))
    start = w.first_start
    why = None
    if start > latest:
        why = f"starts more than {CALENDAR_MAX_ADVANCE_DAYS} days ahead"
    elif _after(start, hours) > utc(w.deadline):
        why = (f"{days} reserved days from {format_utc(start)} end after the deadline "
               f"{format_utc(w.deadline)}")
    return WindowOption(CALENDAR, total_usd=fee, compute_usd=fee, run_hours=d, start=start,
                        end=_after(start, d), billed_node_hours=w.nodes * hours, nodes=w.nodes,
                        quote=rate_quote, estimated=True, unavailable=why, bought_from=start,
                        bought_until=_after(start, hours))


def _better(a: WindowOption, b: WindowOption) -> bool:
    """a before b: cheaper beyond float noise; on a tie, the one that prepays and locks in
    less (``WINDOW_PREFERENCE``), then the earlier start."""
    x, y = a.total_usd, b.total_usd
    tol = TIE * max(1.0, abs(x), abs(y))
    if x < y - tol:
        return True
    if x > y + tol:
        return False
    ka = (WINDOW_PREFERENCE[a.model], a.start or dt.datetime.max.replace(tzinfo=dt.timezone.utc))
    kb = (WINDOW_PREFERENCE[b.model], b.start or dt.datetime.max.replace(tzinfo=dt.timezone.utc))
    return ka < kb


def price_window(w: WorkItem, rates: WindowRates, quotes: Sequence[Quote] = (),
                 terms: Sequence[str] = ("1y", "3y")) -> list[WindowOption]:
    """Every model of ``WINDOW_MODELS`` priced for the work item (the cheapest commitment term
    stands for "commitment"); infeasible ones say why."""
    # a rate read live (or cached) replaces a published one, dearer or cheaper; the newest first
    def rate_of(kind):
        rates = [q for q in quotes if q.kind == kind and not q.is_offering]
        return max(rates, key=lambda q: (q.live, utc(q.quoted_at)), default=None)
    flex_q, cal_q = rate_of(FLEX_START), rate_of(CALENDAR)
    opts = [on_demand(w, rates.on_demand),
            on_demand(w, rates.reservation, model=RESERVATION),
            spot(w, rates.spot, rates.on_demand),
            flex_start(w, rates.flex_start if rates.flex_start is not None
                       else (flex_q.hourly_usd if flex_q else None), flex_q),
            calendar(w, rates.calendar if rates.calendar is not None
                     else (cal_q.hourly_usd if cal_q else None), quotes, cal_q),
            capacity_block(w, quotes)]
    commits = [commitment(w, rates.commit_1y if t == "1y" else rates.commit_3y, t)
               for t in terms]
    priced = [c for c in commits if c.total_usd is not None]
    opts.append(min(priced, key=lambda c: (c.total_usd, c.lock_in_months)) if priced
                else commits[0])
    return opts


def cheapest(options: Sequence[WindowOption], allowed: Optional[frozenset] = None
             ) -> Optional[WindowOption]:
    """The cheapest feasible option among ``allowed`` models (None = all)."""
    best = None
    for o in options:
        if not o.feasible or (allowed is not None and o.model not in allowed):
            continue
        if best is None or _better(o, best):
            best = o
    return best


def allowed_models(priority: int, interruptible: bool, *, reserved_above: int,
                   spot_below: int) -> frozenset:
    """The models a work item's priority band allows (docs/policy.md, "Windows"):
    above ``reserved_above`` guaranteed capacity only (a reservation, a block, a calendar-mode
    reservation, a commitment); checkpointed work below ``spot_below`` anything; otherwise
    anything but spot (flex-start is queued but never preempted)."""
    if priority > reserved_above:
        return GUARANTEED
    if interruptible and priority < spot_below:
        return frozenset(WINDOW_MODELS)
    return frozenset(WINDOW_MODELS) - {SPOT}


def months_spanned(option: WindowOption) -> int:
    """Billing months a window purchase is spread over in the monthly view: ceil(run / 730 h),
    at least 1 (a block's fee is paid up front, at purchase; see docs/policy.md)."""
    return max(1, math.ceil(option.run_hours / HOURS_PER_MONTH - 1e-9))
