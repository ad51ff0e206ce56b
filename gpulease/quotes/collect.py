"""What `gpulease catalog quotes` asks the clouds, per offering of the catalog, and how.

Per AWS region and instance type sold as a Capacity Block: ``DescribeCapacityBlockOfferings``
(needs a count and a duration); per AWS region: one ``GetSpotPlacementScores`` for the region's
GPU types; once: the Spot Instance Advisor's data file. Per GCP region and accelerator-optimized
machine type: ``advice.calendarMode`` (count, duration and a start range), ``advice.capacity``;
once: the Billing Catalog's flex-start and calendar-mode SKUs. A failing call is reported and
the others go on (``Failure``); nothing here decides anything.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from gpulease.clouds import registry
from gpulease.errors import CloudError
from gpulease.purchase import CAPACITY_BLOCK, FLEX_START, FUTURE_RESERVATION
from gpulease.quotes import (CALENDAR_MAX_ADVANCE_DAYS, CALENDAR_MAX_DAYS, CB_MAX_ADVANCE_DAYS,
                             block_hours_for, calendar_days_for, sold_as)
from gpulease.quotes.model import Quote, SpotRisk, utc


@dataclass
class QuoteRequest:
    clouds: tuple[str, ...] = registry.NAMES
    regions: tuple[str, ...] = ()
    instance_types: tuple[str, ...] = ()
    gpu: Optional[str] = None
    #: nodes a quote is for (Capacity Blocks, calendar mode, placement scores).
    count: Optional[int] = None
    #: hours of work (a Capacity Block / calendar reservation covering them is asked for).
    duration_hours: Optional[float] = None
    start: Optional[dt.datetime] = None
    end: Optional[dt.datetime] = None
    gcp_project: Optional[str] = None


@dataclass
class Failure:
    cloud: str
    what: str
    message: str

    def __str__(self) -> str:
        return f"{self.cloud}: {self.what}: {self.message}"


@dataclass
class Collected:
    quotes: list[Quote] = field(default_factory=list)
    risks: list[SpotRisk] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    #: what was not asked and why ("Capacity Blocks: give --count and --duration-hours").
    skipped: list[str] = field(default_factory=list)
    calls: int = 0


def targets(catalog, req: QuoteRequest) -> list:
    """The catalog's offerings the request covers."""
    return [o for o in catalog.offerings
            if o.cloud in req.clouds and (not req.regions or o.region in req.regions)
            and (not req.instance_types or o.instance_type in req.instance_types)
            and (req.gpu is None or o.gpu == req.gpu)]


def check_limits(offerings: list, req: QuoteRequest, now: dt.datetime) -> None:
    """The documented limits of what the request asks about, refused (InputError, exit 2)
    whatever the source - offline answers the same request as live, so it refuses the same
    requests (docs/catalog.md, "Quotes"): with Capacity Block targets, 1-64 instances and a
    duration a block can cover; a start no later than the furthest horizon of the window
    products targeted (a block starts within eight weeks, calendar-mode availability is
    visible 120 days ahead); a duration no calendar-mode reservation or block covers."""
    from gpulease.errors import Finding, InputError
    from gpulease.quotes import CB_MAX_INSTANCES

    bad = []
    blocks = any(sold_as(o, CAPACITY_BLOCK) for o in offerings)
    calendar = any(sold_as(o, FUTURE_RESERVATION) for o in offerings)
    from gpulease.quotes import valid_block_count

    if blocks and req.count is not None and not valid_block_count(req.count):
        bad.append(Finding("--count", f"a Capacity Block holds 1 to {CB_MAX_INSTANCES} "
                           f"instances (got {req.count}): ask for at most {CB_MAX_INSTANCES} "
                           "(split larger clusters over several blocks), or leave Capacity "
                           "Blocks out with --cloud gcp"))
    if req.duration_hours is not None and (blocks or calendar) and not (
            (blocks and block_hours_for(req.duration_hours + 0.5) is not None)
            or (calendar and calendar_days_for(req.duration_hours) is not None)):
        bad.append(Finding("--duration-hours", f"{req.duration_hours:g} h is longer than any "
                           "window product covers (a Capacity Block: 182 days; a calendar-mode "
                           f"reservation: {CALENDAR_MAX_DAYS} days)"))
    horizon = max([CB_MAX_ADVANCE_DAYS] * blocks + [CALENDAR_MAX_ADVANCE_DAYS] * calendar,
                  default=None)
    if horizon is not None and req.start is not None \
            and utc(req.start) > utc(now) + dt.timedelta(days=horizon):
        from gpulease.clock import format_utc

        bad.append(Finding("--start", f"{format_utc(req.start)} is more than {horizon} days "
                           f"ahead ({format_utc(utc(now) + dt.timedelta(days=horizon))}): no "
                           "cloud offers or shows capacity that far out (Capacity Blocks start "
                           f"within {CB_MAX_ADVANCE_DAYS // 7} weeks, calendar-mode "
                           f"availability is visible {CALENDAR_MAX_ADVANCE_DAYS} days ahead)"))
    if bad:
        raise InputError(bad)


def collect_aws(clients, offerings: list, req: QuoteRequest, now: dt.datetime,
                progress: Callable[[str], None], out: Collected,
                advisor: Optional[Callable[[], Any]] = None) -> None:
    from gpulease.quotes import aws as qa

    regions = sorted({o.region for o in offerings})
    blocks = [o for o in offerings if sold_as(o, CAPACITY_BLOCK)]
    if blocks and (req.count is None or req.duration_hours is None):
        out.skipped.append("Capacity Block offerings: give --count and --duration-hours (the "
                           "API asks for both)")
    elif blocks:
        hours = block_hours_for(req.duration_hours + 0.5)
        start = req.start or now
        end = req.end
        for o in blocks:
            progress(f"aws {o.region}: DescribeCapacityBlockOfferings {req.count} x "
                     f"{o.instance_type} for {hours} h")
            try:
                out.calls += 1
                if hours is None:
                    raise CloudError("aws", "DescribeCapacityBlockOfferings",
                                     f"{req.duration_hours:g} h needs more than 182 days")
                if utc(start) > utc(now) + dt.timedelta(days=CB_MAX_ADVANCE_DAYS):
                    out.skipped.append(f"{o.region} {o.instance_type}: --start more than eight "
                                       "weeks ahead: AWS offers no block yet")
                    continue
                out.quotes += qa.capacity_block_offerings(
                    clients, o.region, instance_type=o.instance_type, instance_count=req.count,
                    duration_hours=hours, start=start, end=end, now=now)
            except CloudError as exc:
                out.failures.append(Failure("aws", f"{o.region} {o.instance_type} Capacity "
                                            "Blocks", str(exc)))
    for region in regions:
        types = sorted({o.instance_type for o in offerings if o.region == region})
        progress(f"aws {region}: GetSpotPlacementScores for {len(types)} types")
        try:
            out.calls += 1
            out.risks += qa.spot_placement_scores(clients, region, instance_types=types,
                                                  target_capacity=req.count or 1, now=now)
        except CloudError as exc:
            out.failures.append(Failure("aws", f"{region} Spot Placement Scores", str(exc)))
    progress("aws: Spot Instance Advisor data")
    try:
        out.calls += 1
        doc = (advisor or qa.fetch_spot_advisor)()
        out.risks += qa.spot_advisor_bands(doc, pairs={(o.region, o.instance_type)
                                                       for o in offerings},
                                           as_of=now, live=True)
    except CloudError as exc:
        out.failures.append(Failure("aws", "Spot Instance Advisor", str(exc)))


def collect_gcp(clients, offerings: list, req: QuoteRequest, now: dt.datetime,
                progress: Callable[[str], None], out: Collected) -> None:
    from gpulease.quotes import gcp as qg

    dws = [o for o in offerings if sold_as(o, FLEX_START) or sold_as(o, FUTURE_RESERVATION)]
    if dws and clients.billing is not None:
        progress("gcp: Billing Catalog flex-start and calendar-mode SKUs")
        try:
            out.calls += 1
            out.quotes += qg.window_rates(clients.billing, dws, now=now)
        except CloudError as exc:
            out.failures.append(Failure("gcp", "Billing Catalog", str(exc)))
    if not clients.project:
        out.skipped.append("GCP advice (calendar mode, Spot capacity): give --gcp-project")
        return
    cal = [o for o in offerings if sold_as(o, FUTURE_RESERVATION)]
    if cal and (req.count is None or req.duration_hours is None):
        out.skipped.append("calendar-mode advice: give --count and --duration-hours")
    elif cal:
        days = calendar_days_for(req.duration_hours)
        start = utc(req.start or now)
        latest = utc(now) + dt.timedelta(days=CALENDAR_MAX_ADVANCE_DAYS)
        end = min(utc(req.end), latest) if req.end else latest
        for o in cal:
            if days is None:
                out.skipped.append(f"calendar mode: {req.duration_hours:g} h is more than "
                                   f"{CALENDAR_MAX_DAYS} days")
                break
            progress(f"gcp {o.region}: advice.calendarMode {req.count} x {o.instance_type}")
            try:
                out.calls += 1
                out.quotes += qg.calendar_advice(
                    clients, o.region, machine_type=o.instance_type, count=req.count,
                    start_not_earlier=start, start_not_later=max(start, end - dt.timedelta(
                        days=days)), min_hours=days * 24, max_hours=days * 24,
                    zones=o.zones, now=now)
            except CloudError as exc:
                out.failures.append(Failure("gcp", f"{o.region} {o.instance_type} calendar "
                                            "mode", str(exc)))
    for o in offerings:
        progress(f"gcp {o.region}: advice.capacity {req.count or 1} x {o.instance_type} (Spot)")
        try:
            out.calls += 1
            out.risks += qg.capacity_advice(clients, o.region, machine_type=o.instance_type,
                                            count=req.count or 1, zones=o.zones, now=now)
        except CloudError as exc:
            out.failures.append(Failure("gcp", f"{o.region} {o.instance_type} capacity "
                                        "advice", str(exc)))
