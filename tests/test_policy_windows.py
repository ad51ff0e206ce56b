"""The window cost model (gpulease.policy.windows): each purchase model's price and fit, by table."""
from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from gpulease import deadline as dl
from gpulease.policy import windows as W
from gpulease.quotes.model import Quote

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
S = dt.datetime(2027, 1, 4, 0, 0, tzinfo=UTC)
E = dt.datetime(2027, 1, 25, 0, 0, tzinfo=UTC)


def item(**kw) -> W.WorkItem:
    base = dict(nodes=8, duration_hours=240.0, earliest_start=S, deadline=E, now=NOW, gang=True,
                interruptions_per_hour=1.0 / 730, lost_hours=(30 / 2 + 10) / 60,
                cloud="aws", region="us-east-1", instance_type="p5.48xlarge")
    base.update(kw)
    return W.WorkItem(**base)


RATES = W.WindowRates(on_demand=55.04, spot=10.2397, commit_1y=None, commit_3y=23.7773,
                      reservation=55.04)
RATE_QUOTE = Quote(kind="capacity_block", cloud="aws", region="us-east-1",
                   instance_type="p5.48xlarge", quoted_at=dt.datetime(2024, 12, 31, tzinfo=UTC),
                   source="aws-capacity-blocks-pricing", hourly_usd=39.33)


def offering(start, hours, *, count=8, fee=None, quoted_at=NOW, oid="cb-1") -> Quote:
    return Quote(kind="capacity_block", cloud="aws", region="us-east-1",
                 instance_type="p5.48xlarge", quoted_at=quoted_at, source="aws:test",
                 start=start, end=start + dt.timedelta(hours=hours), instance_count=count,
                 upfront_usd=fee if fee is not None else 30.0 * count * hours,
                 zone="us-east-1a", offering_id=oid, live=True)


def by_model(opts):
    return {o.model: o for o in opts}


def test_worked_example_prices_every_model_exactly():
    opts = by_model(W.price_window(item(), RATES, [RATE_QUOTE]))
    assert opts["on_demand"].total_usd == pytest.approx(8 * 55.04 * 240)        # 105,676.80
    assert opts["reservation"].total_usd == pytest.approx(8 * 55.04 * 240)
    # spot: the deadline rule's expectation (issue 37 item 4): a gang of 8 at 1/730
    # interruptions per node-hour keeps spot 91.25 h on average; per node E[spot h] and
    # E[on-demand h] (restarts of 25 min included) at the spot and on-demand rates
    e = dl.expected(dl.Job(240, 504, 25 / 60), 730 / 8, 1.64)
    assert opts["spot"].compute_usd == pytest.approx(8 * 10.2397 * e.spot_hours)
    assert opts["spot"].total_usd == pytest.approx(8 * (10.2397 * e.spot_hours
                                                        + 55.04 * e.on_demand_hours))
    assert 240 < e.spot_hours + e.on_demand_hours < 245 and e.missed == 0
    assert opts["spot"].deadline_rule["latest_switch"] == "2027-01-14T23:10:00Z"  # 504-240-2d
    cb = opts["capacity_block"]
    # 240 h + the 30 min AWS stops instances early -> an 11-day block from 11:30 UTC on Jan 4
    assert cb.estimated and cb.billed_node_hours == 8 * 264
    assert cb.total_usd == pytest.approx(39.33 * 8 * 264)                       # 83,064.96
    assert cb.start == dt.datetime(2027, 1, 4, 11, 30, tzinfo=UTC)
    assert opts["commitment"].total_usd == pytest.approx(8 * 23.7773 * 730 * 36)
    assert opts["commitment"].lock_in_months == 36
    # the figures docs/policy.md's worked example prints
    assert round(opts["spot"].total_usd, 2) == 19_807.31
    assert round(opts["commitment"].total_usd, 2) == 4_998_939.55
    assert round(opts["on_demand"].total_usd - cb.total_usd, 2) == 22_611.84
    assert not opts["flex_start"].feasible and "no flex-start price" in opts["flex_start"].unavailable
    assert "no citable rate" in opts["flex_start"].unavailable   # issue 34 item 3
    assert not opts["calendar"].feasible and "GCP" in opts["calendar"].unavailable


@pytest.mark.parametrize("priority,interruptible,expected", [
    (9, True, "capacity_block"),      # guaranteed: block beats a reservation at the on-demand rate
    (6, False, "capacity_block"),     # on-demand band: the block is cheaper than on-demand
    (3, True, "spot"),                # spot band, checkpointed: spot with its rework
    (3, False, "capacity_block"),     # not checkpointed: never spot
])
def test_priority_band_picks_cheapest_allowed(priority, interruptible, expected):
    opts = W.price_window(item(), RATES, [RATE_QUOTE])
    allowed = W.allowed_models(priority, interruptible, reserved_above=8, spot_below=5)
    assert W.cheapest(opts, allowed).model == expected


def test_without_quotes_guaranteed_work_falls_back_to_a_reservation():
    opts = W.price_window(item(), RATES, [])
    best = W.cheapest(opts, W.GUARANTEED)
    assert best.model == "reservation"
    assert by_model(opts)["capacity_block"].unavailable.startswith(
        "no Capacity Block quote for the type in the region: no citable published rate")


def test_live_offerings_cheapest_fitting_one_wins_and_others_say_why():
    day = dt.timedelta(days=1)
    good = offering(dt.datetime(2027, 1, 5, 11, 30, tzinfo=UTC), 264, fee=70_000, oid="cb-good")
    dear = offering(dt.datetime(2027, 1, 6, 11, 30, tzinfo=UTC), 264, fee=90_000, oid="cb-dear")
    small = offering(dt.datetime(2027, 1, 5, 11, 30, tzinfo=UTC), 264, count=4, oid="cb-small")
    late = offering(dt.datetime(2027, 1, 20, 11, 30, tzinfo=UTC), 264, oid="cb-late")
    tight = offering(dt.datetime(2027, 1, 5, 11, 30, tzinfo=UTC), 240, oid="cb-tight")
    old = offering(dt.datetime(2027, 1, 5, 11, 30, tzinfo=UTC), 264, fee=1, oid="cb-old",
                   quoted_at=NOW - 2 * day)
    cb = W.capacity_block(item(), [dear, small, late, tight, old, good, RATE_QUOTE])
    assert cb.quote.offering_id == "cb-good" and cb.total_usd == 70_000 and not cb.estimated
    why = {q.offering_id: w for q, w in cb.passed_over}
    assert why["cb-small"] == "4 instances < 8 nodes"
    assert why["cb-late"].startswith("108.5 usable h from 2027-01-20T11:30:00Z")
    assert why["cb-tight"].startswith("239.5 usable h")       # 30 min before the end: stopped
    assert "quote_max_age_hours" in why["cb-old"]
    assert "cb-dear" not in why                               # fits, only dearer


def test_an_offering_whose_start_has_passed_is_expired():
    started = offering(NOW - dt.timedelta(hours=1), 264)
    assert started.expired(NOW, 24) == "its start 2026-12-03T08:00:00Z has passed"
    w = item(earliest_start=NOW - dt.timedelta(days=1))
    cb = W.capacity_block(w, [started])
    assert not cb.feasible and "has passed" in cb.unavailable


def test_estimated_block_respects_eight_weeks_and_the_deadline():
    far = item(earliest_start=dt.datetime(2027, 3, 1, tzinfo=UTC),
               deadline=dt.datetime(2027, 3, 30, tzinfo=UTC))
    cb = W.capacity_block(far, [RATE_QUOTE])
    assert not cb.feasible and "more than eight weeks ahead" in cb.unavailable
    # an 11-day block from 11:30 on Jan 4 may outlast the deadline: the work must not
    late = item(deadline=dt.datetime(2027, 1, 15, 0, 0, tzinfo=UTC))
    assert W.capacity_block(late, [RATE_QUOTE]).end == dt.datetime(2027, 1, 14, 11, 30,
                                                                    tzinfo=UTC)
    tight = item(deadline=dt.datetime(2027, 1, 14, 0, 0, tzinfo=UTC))  # 228.5 usable h
    cb = W.capacity_block(tight, [RATE_QUOTE])
    assert not cb.feasible and "228.5 usable h" in cb.unavailable
    assert "not checkpointed" in cb.unavailable


def test_capacity_block_limits():
    assert "at most 64 instances" in W.capacity_block(item(nodes=65), [RATE_QUOTE]).unavailable
    assert "AWS" in W.capacity_block(item(cloud="gcp"), [RATE_QUOTE]).unavailable
    assert "182 days" in W.capacity_block(
        item(duration_hours=183 * 24, deadline=dt.datetime(2027, 9, 1, tzinfo=UTC)),
        [RATE_QUOTE]).unavailable


def test_spot_rework_and_the_deadline():
    # the deadline rule prices spot (issue 37 item 4): a gang loses all 8 nodes at each
    # interruption (spot stays 1 / (8 x 0.05) = 2.5 h), independent nodes one at a time (20 h)
    lam, lost = 0.05, 0.5
    gang = W.spot(item(interruptions_per_hour=lam, lost_hours=lost), 10.0, 40.0)
    free = W.spot(item(interruptions_per_hour=lam, lost_hours=lost, gang=False), 10.0, 40.0)
    assert gang.deadline_rule["uptime_hours"] == pytest.approx(2.5)
    assert free.deadline_rule["uptime_hours"] == pytest.approx(20.0)
    assert free.total_usd < gang.total_usd
    assert gang.deadline_rule["fallback_share"] > free.deadline_rule["fallback_share"]
    assert gang.deadline_rule["missed"] == free.deadline_rule["missed"] == 0
    # the window must hold the run plus the fallback's restart: 240 h + 0.5 h
    short = item(interruptions_per_hour=lam, lost_hours=lost,
                 deadline=S + dt.timedelta(hours=240.4))
    assert W.spot(short, 10.0, 40.0).unavailable.startswith("the window leaves 240.4 h")
    assert "restart the on-demand fallback needs" in W.spot(short, 10.0, 40.0).unavailable
    assert W.spot(dataclasses.replace(short, deadline=S + dt.timedelta(hours=240.5)),
                  10.0, 40.0).feasible
    assert "no on-demand rate" in W.spot(item(), 10.0, None).unavailable


def test_flex_start_limits_and_queue():
    gcp = dict(cloud="gcp", region="us-central1", instance_type="a3-highgpu-8g")
    ok = W.flex_start(item(duration_hours=100, **gcp), 40.0)
    assert ok.total_usd == pytest.approx(8 * 40 * 100) and ok.feasible
    assert ok.start == S + dt.timedelta(hours=24)
    long = W.flex_start(item(duration_hours=169, **gcp), 40.0)
    assert "at most 168 h" in long.unavailable
    queued = W.flex_start(item(duration_hours=100, deadline=S + dt.timedelta(hours=110), **gcp),
                          40.0)
    assert "wait for capacity" in queued.unavailable


def test_calendar_whole_days_advice_and_estimate():
    gcp = dict(cloud="gcp", region="us-central1", instance_type="a3-highgpu-8g")
    w = item(duration_hours=100, **gcp)
    est = W.calendar(w, 50.0, [])
    assert est.estimated and est.billed_node_hours == 8 * 120     # 5 whole days
    assert est.total_usd == pytest.approx(8 * 50 * 120)
    advice = Quote(kind="calendar", cloud="gcp", region="us-central1",
                   instance_type="a3-highgpu-8g", quoted_at=NOW, source="gcp:test",
                   start=dt.datetime(2027, 1, 10, tzinfo=UTC),
                   end=dt.datetime(2027, 1, 15, tzinfo=UTC), instance_count=8,
                   zone="us-central1-b", live=True)
    got = W.calendar(w, 50.0, [advice])
    assert got.quote is advice and not got.estimated and got.start == advice.start
    few = dataclasses.replace(advice, instance_count=4)
    assert "advice for 4 VMs < 8 nodes" in W.calendar(w, 50.0, [few]).unavailable
    assert "90 days" in W.calendar(item(duration_hours=91 * 24, **gcp), 50.0, []).unavailable


def test_tcp_overhead_lengthens_the_run():
    w = item(communication_share=0.2, gang=True)
    assert w.run_hours == pytest.approx(300)
    assert W.on_demand(w, 10.0).total_usd == pytest.approx(8 * 10 * 300)


def test_window_too_short_for_anything():
    w = item(deadline=S + dt.timedelta(hours=100))
    opts = W.price_window(w, RATES, [RATE_QUOTE])
    assert W.cheapest(opts) is None
    assert all(not o.feasible for o in opts)


def test_commitment_picks_the_cheaper_term():
    rates = RATES._replace(commit_1y=40.0, commit_3y=23.7773)
    c = by_model(W.price_window(item(), rates, []))["commitment"]
    assert c.lock_in_months == 12 and c.total_usd == pytest.approx(8 * 40 * 730 * 12)


def test_ties_go_to_less_prepayment():
    rates = W.WindowRates(on_demand=10.0, spot=None, reservation=10.0)
    opts = W.price_window(item(), rates, [])
    assert W.cheapest(opts).model == "on_demand"
    assert W.cheapest(opts, W.GUARANTEED).model == "reservation"


def test_checkpointed_work_finishes_the_rest_off_the_block():
    # 336 h = 14 days: a covering block needs 21 days (15 days are not a block length); a
    # checkpointed job takes the 14-day block and finishes on the reservation right after it
    w = item(duration_hours=336, deadline=dt.datetime(2027, 1, 31, tzinfo=UTC),
             checkpointed=True, remainder_rate=55.04, remainder_model="reservation")
    cb = W.capacity_block(w, [RATE_QUOTE])
    rest = 336 - 335.5 + 25 / 60                     # 30 min early stop + one restart's loss
    assert cb.remainder["model"] == "reservation"
    assert cb.remainder["hours"] == pytest.approx(rest)
    assert cb.total_usd == pytest.approx(39.33 * 8 * 336 + 55.04 * 8 * rest)
    assert cb.remainder["start"] == "2027-01-18T11:00:00Z"
    cover = W.capacity_block(dataclasses.replace(w, checkpointed=False), [RATE_QUOTE])
    assert cover.remainder is None and cover.billed_node_hours == 8 * 504
    assert cb.total_usd < cover.total_usd
    # no time left after the block and not enough before it: the remainder does not fit
    squeezed = dataclasses.replace(w, earliest_start=dt.datetime(2027, 1, 4, 11, 30,
                                                                 tzinfo=UTC),
                                   deadline=dt.datetime(2027, 1, 18, 11, 0, tzinfo=UTC))
    assert not W.capacity_block(squeezed, [RATE_QUOTE]).feasible
    # room before the block instead: the remainder runs first
    before = dataclasses.replace(w, deadline=dt.datetime(2027, 1, 18, 11, 0, tzinfo=UTC))
    got = W.capacity_block(before, [RATE_QUOTE])
    assert got.remainder["end"] == "2027-01-04T11:30:00Z" and got.billed_node_hours == \
        pytest.approx(8 * 336 + 8 * got.remainder["hours"])


def test_calendar_mode_without_a_rate_says_no_citable_rate():
    w = dataclasses.replace(item(), cloud="gcp")
    opt = W.calendar(w, None, [])
    assert not opt.feasible and "no citable rate" in opt.unavailable
