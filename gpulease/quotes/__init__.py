"""Quotes for time windows and spot risk: what the clouds answer when asked for capacity at a time.

Prices that do not depend on when (on-demand, spot, commitments) live in the catalog. What does
depend on when lives here, each with its time of quote and source:

- **AWS EC2 Capacity Blocks for ML** (``DescribeCapacityBlockOfferings``): an offering is a
  block of N instances from a start to an end, paid up front (``upfrontFee``);
- **GCP Dynamic Workload Scheduler**: flex-start (``provisioningModel: FLEX_START``, queued,
  all-or-nothing, at most 7 days a run) and calendar-mode future reservations
  (``advice.calendarMode``: when and where N VMs can be reserved for 1-90 days);
- **spot risk**: the AWS Spot Instance Advisor's monthly interruption bands and Spot Placement
  Scores (``GetSpotPlacementScores``), GCP's ``advice.capacity`` (obtainability, estimated uptime).

Live answers come from ``gpulease.quotes.aws`` / ``gpulease.quotes.gcp`` (`gpulease catalog quotes`),
are cached with their time of quote (``gpulease.quotes.store``), and a dated data file shipped with
gpulease answers offline (``gpulease/quotes/data/<version>.json``: published rates and the Spot
Advisor bands, each with its source and date; docs/catalog.md "Quotes").

The limits below are the providers' documented ones, in one place.
"""
from __future__ import annotations

import math
from typing import Optional

from gpulease.clock import parse_time
from gpulease.clouds import registry
from gpulease.purchase import CALENDAR, CAPACITY_BLOCK, FLEX_START, FUTURE_RESERVATION

# ---- AWS EC2 Capacity Blocks for ML --------------------------------------------------------
# EC2 API Reference, DescribeCapacityBlockOfferings, and EC2 User Guide, "Find and purchase
# Capacity Blocks" / "How Capacity Blocks work" (read 2026-12-03):
#: The instance counts a Capacity Block is sold in: THE one constant (the offline lookup, the
#: tests' fake API, the quote checks and the policy's block sizing all read it). The sources
#: disagree (docs/catalog.md, "Block sizes"): an older, undated copy of the User Guide's "Find
#: and purchase Capacity Blocks" lists "instance count 1, 2, 4, 8, 16, 32, or 64 instances"
#: (with "up to 3 available blocks"); the EC2 API model's ``InstanceCount`` since botocore's
#: model update of 2025-04-30 (commit 00feda055, unchanged in botocore 1.44.8 and at the
#: botocore mirror's head of 2026-08-07) and the newer User Guide copy say "Each Capacity Block
#: can have up to 64 instances, and you can have up to 256 instances across Capacity Blocks"
#: (with "up to 6 available blocks"). The most recent official one wins: any count 1-64.
CB_INSTANCE_COUNTS = tuple(range(1, 65))
#: "Each Capacity Block can have up to 64 instances".
CB_MAX_INSTANCES = max(CB_INSTANCE_COUNTS)
#: "... and you can have up to 256 instances across Capacity Blocks" (same sources, 2025-04-30).
CB_MAX_INSTANCES_ACROSS_BLOCKS = 256
#: "You must specify the duration in 1-day increments up 14 days, and in 7-day increments up to
#: 182 days."
CB_DAY_STEPS_UP_TO_DAYS = 14
CB_WEEK_STEP_DAYS = 7
CB_MAX_DAYS = 182
#: "You can reserve a Capacity Block with a reservation start time up to eight weeks in the
#: future."
CB_MAX_ADVANCE_DAYS = 56
#: "All Capacity Blocks end at 11:30AM UTC" (hour, minute).
CB_END_UTC = (11, 30)
#: (The types sold as Capacity Blocks are the AWS cloud's answer:
#: ``gpulease.clouds.aws.cloud.CAPACITY_BLOCK_TYPES``.)
#: "Thirty minutes before the reservation expires, we begin to terminate any instances that are
#: still running in the Capacity Block" (EC2 User Guide, "Work with Capacity Blocks").
CB_TERMINATION_LEAD_MINUTES = 30

# ---- GCP Dynamic Workload Scheduler ----------------------------------------------------------
#: Flex-start VMs run at most seven days (Compute Engine docs, "About flex-start VMs"; GKE
#: "About flex-start": "for up to seven days").
FLEX_START_MAX_RUN_HOURS = 7 * 24
#: Calendar-mode future reservations reserve 1 to 90 days, and future availability can be
#: viewed up to 120 days ahead (Compute Engine docs, "Reserve capacity in calendar mode").
CALENDAR_MIN_DAYS = 1
CALENDAR_MAX_DAYS = 90
CALENDAR_MAX_ADVANCE_DAYS = 120

#: Purchase options sold for a window (``sold_as``).
WINDOW_OPTIONS = (CAPACITY_BLOCK, FLEX_START, FUTURE_RESERVATION)
#: Kinds of quote: a capacity purchase for a window.
QUOTE_KINDS = (CAPACITY_BLOCK, FLEX_START, CALENDAR)


#: A published window rate (not a live offering) older than this many days is flagged by the plan
#: and explain. AWS revises Capacity Block prices on a schedule (its pricing page announced an
#: update "scheduled ... on January 1, 2025" beside the rates it replaced), and flex-start and
#: calendar-mode prices follow Compute Engine's price changes; half a year is gpulease's
#: default for "ask for a live quote before trusting this", not a cloud figure
#: (docs/catalog.md, "Quotes").
PUBLISHED_RATE_MAX_AGE_DAYS = 180


def stale_age_days(quote: Optional[dict], judged_at) -> Optional[int]:
    """The age in whole days of a window's published rate when it is older than
    :data:`PUBLISHED_RATE_MAX_AGE_DAYS` (None: live, undated or young enough). ``quote``: a
    WindowDecision's quote dict (``live``, ``quoted_at``); ``judged_at``: an aware datetime."""
    if not quote or quote.get("live") or not quote.get("quoted_at"):
        return None
    quoted = parse_time(str(quote["quoted_at"]), date_ok=True)
    age = (judged_at - quoted).total_seconds() / 86400
    return int(age) if age > PUBLISHED_RATE_MAX_AGE_DAYS else None


def undated_source(source: Optional[str]) -> bool:
    """True when a shipped published rate's source gives no publication date (its rows carry
    the day the figure was read, which says nothing about its age: the age flag cannot judge
    it). Live quotes and unknown sources are not undated."""
    if not source:
        return False
    from gpulease.quotes.store import shipped_book   # the data file's sources (no cycle)
    row = shipped_book().sources.get(source)
    return row is not None and not row.get("published")


def stale_rate(quote: Optional[dict], judged_at) -> Optional[str]:
    """Why a window's published rate is too old, or too undated, to trust as is (None: it is
    neither)."""
    if quote and not quote.get("live") and undated_source(quote.get("source")):
        return (f"the published rate ${float(quote['hourly_usd']):,.4f} per node-hour "
                f"({quote.get('source')}) is undated: its source gives no publication date "
                f"(the {str(quote.get('quoted_at'))[:10]} it carries is the day it was read) - "
                "get a live quote (`gpulease catalog quotes`) before relying on this estimate")
    age = stale_age_days(quote, judged_at)
    if age is None:
        return None
    return (f"the published rate ${float(quote['hourly_usd']):,.4f} per node-hour "
            f"({quote.get('source')}, {str(quote['quoted_at'])[:10]}) is {age} days old, "
            f"older than {PUBLISHED_RATE_MAX_AGE_DAYS}: the cloud may have changed it - get a "
            "live quote (`gpulease catalog quotes`) before relying on this estimate")


def sold_as(offering, option: str) -> bool:
    """True when the offering can be bought as ``option`` ("capacity_block", "flex_start",
    "future_reservation"): what the catalog records from the provider's documentation
    (``Offering.sells`` with a ``purchase_options_source``), else - rows whose options are only
    derived from their prices, which never imply these - what the offering's cloud sells by
    default (``Cloud.window_options_by_default``: Capacity Blocks for the listed AWS types,
    flex-start and calendar mode for GCP's accelerator-optimized series a2, a3, a4, g2)."""
    sells = getattr(offering, "sells", None)
    if sells is not None and getattr(offering, "purchase_options_source", ""):
        return sells(option)      # recorded from the provider's documentation
    if option not in WINDOW_OPTIONS:
        raise ValueError(f"unknown window purchase option {option!r}")
    return option in registry.get(offering.cloud).window_options_by_default(
        offering.instance_type)


def valid_block_hours(hours: float) -> bool:
    """True when ``hours`` is a Capacity Block duration AWS accepts: whole days, 1-14 days in
    1-day steps, then multiples of 7 days up to 182."""
    if hours <= 0 or hours % 24:
        return False
    days = int(hours // 24)
    if days <= CB_DAY_STEPS_UP_TO_DAYS:
        return True
    return days <= CB_MAX_DAYS and days % CB_WEEK_STEP_DAYS == 0


def shorter_block_hours(hours: float) -> Optional[int]:
    """The next Capacity Block duration below ``hours`` (a valid duration): one day less up to
    14 days, 7 days less above (21 -> 14); None for a one-day block."""
    days = int(hours // 24)
    if days <= 1:
        return None
    if days <= CB_DAY_STEPS_UP_TO_DAYS:
        return (days - 1) * 24
    return max(CB_DAY_STEPS_UP_TO_DAYS, days - CB_WEEK_STEP_DAYS) * 24


def block_window_problem(start, end, earliest_start, deadline) -> Optional[tuple[str, str]]:
    """Why a Capacity Block from ``start`` to ``end`` cannot be one bought for the window
    ``earliest_start`` .. ``deadline`` (aware datetimes): ``("start" | "end", why)``, the field
    at fault and the reason; None when it can be.

    A block may run past the window only by what AWS's fixed block times and lengths force
    (blocks start and end at 11:30 UTC, last 1-14 days, then 7-day steps): it starts in the
    window, and the next shorter duration from the same start would stop before the deadline
    (instances stop 30 minutes before a block ends) - else whole days of it are paid for after
    the deadline, for nothing. The policy keeps only such blocks
    (``gpulease.policy.windows.capacity_block``) and a pin is checked with the same rule
    (``gpulease.config.parse``)."""
    from gpulease.clock import format_utc

    if start < earliest_start:
        return "start", (f"the block starts at {format_utc(start)}, before the window's "
                         f"earliest_start {format_utc(earliest_start)}: its hours before then "
                         "are paid for while the work may not run")
    if start >= deadline:
        return "start", (f"the block starts at {format_utc(start)}, at or after the window's "
                         f"deadline {format_utc(deadline)}: no hour of it is in the window")
    shorter = shorter_block_hours((end - start).total_seconds() / 3600.0)
    lead = CB_TERMINATION_LEAD_MINUTES * 60.0
    if end > deadline and shorter is not None and \
            start.timestamp() + shorter * 3600.0 - lead >= deadline.timestamp():
        days = (end - deadline).total_seconds() / 86400.0
        return "end", (f"the block ends at {format_utc(end)}, {days:.1f} days after the "
                       f"window's deadline {format_utc(deadline)}: a {shorter // 24}-day block "
                       "from the same start would already run until the deadline, so its last "
                       "days are paid for after it, for nothing")
    return None


def block_hours_for(hours: float) -> Optional[int]:
    """The shortest Capacity Block duration (hours) that covers ``hours`` of work, or None when
    no block is long enough (more than 182 days)."""
    days = max(1, math.ceil(hours / 24.0 - 1e-9))
    if days > CB_DAY_STEPS_UP_TO_DAYS:
        days = CB_WEEK_STEP_DAYS * math.ceil(days / CB_WEEK_STEP_DAYS)
    return days * 24 if days <= CB_MAX_DAYS else None


def calendar_days_for(hours: float) -> Optional[int]:
    """Whole days a calendar-mode reservation needs to cover ``hours`` of work (None beyond
    the 90-day maximum)."""
    days = max(CALENDAR_MIN_DAYS, math.ceil(hours / 24.0 - 1e-9))
    return days if days <= CALENDAR_MAX_DAYS else None


def valid_block_count(count: int) -> bool:
    """True when AWS sells a Capacity Block of ``count`` instances (``CB_INSTANCE_COUNTS``)."""
    return count in CB_INSTANCE_COUNTS


def block_counts(nodes: int, sizes: Optional[tuple] = None
                 ) -> tuple[Optional[int], Optional[tuple[int, ...]]]:
    """How ``nodes`` instances can be bought as Capacity Blocks of the sizes AWS sells:
    (round_up, split). ``round_up`` is the smallest size >= nodes (one block, its extra
    instances paid and idle; None above the largest size); ``split`` is the fewest blocks whose
    sizes add up to exactly ``nodes`` (largest first: 3 of 1, 2, 4, ... is 2 + 1; None when
    they would pass ``CB_MAX_INSTANCES_ACROSS_BLOCKS`` or no sum of sizes makes ``nodes``).
    A size AWS sells is its own round-up and a one-block split."""
    if nodes < 1:
        return None, None
    ordered = sorted(set(CB_INSTANCE_COUNTS if sizes is None else sizes))
    up = next((s for s in ordered if s >= nodes), None)
    split = None
    if nodes <= CB_MAX_INSTANCES_ACROSS_BLOCKS:
        # the fewest blocks summing to nodes (coin change; sizes are few, nodes <= 256)
        best: list = [()] + [None] * nodes
        for n in range(1, nodes + 1):
            for s in ordered:
                if s > n:
                    break
                prev = best[n - s]
                if prev is not None and (best[n] is None or len(prev) + 1 < len(best[n])):
                    best[n] = tuple(sorted(prev + (s,), reverse=True))
        split = best[nodes]
    return up, split
