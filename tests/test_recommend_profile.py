"""The pure derivation of a demand profile from hourly GPU utilization: table and property tests."""
from __future__ import annotations

import itertools
import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulease.recommend import profile as pf

H = 3600
DAYS = 30
START = 1_800_000_000 - (1_800_000_000 % H)
END = START + DAYS * 24 * H


def fleet(nodes_per_hour, busy=80.0, idle=0.5, extra_idle=0):
    """Series for a cluster whose busy node count in hour h is ``nodes_per_hour(h)``; node k is
    busy when k < that count (so the lowest nodes are the steady ones), ``extra_idle`` nodes
    report idle all the time."""
    hours = DAYS * 24
    top = max(nodes_per_hour(h) for h in range(hours)) + extra_idle
    return {f"i-{k:03d}": tuple((START + h * H, busy if k < nodes_per_hour(h) else idle)
                                for h in range(hours)) for k in range(top)}


def derive(series, gpn=8, **kw):
    return pf.derive(series, start=START, end=END, gpus_per_node=gpn, threshold_pct=5.0, **kw)


def steps(d):
    return [(s.gpus, s.hours_per_month) for s in d.profile]


# ---- the four shapes of the issue -------------------------------------------------------------
def test_steady_is_one_always_busy_step():
    d = derive(fleet(lambda h: 4))
    assert steps(d) == [(32, 730.0)]
    assert (d.observed["baseline_gpus"], d.observed["peak_gpus"]) == (32, 32)
    assert d.samples == 4 * 720 and d.observed["instances"] == 4


def test_bursty_is_a_baseline_and_bursts():
    # 2 nodes always; 5 nodes for 10 h a day; 8 nodes for 4 of those hours
    d = derive(fleet(lambda h: 8 if h % 24 < 4 else 5 if h % 24 < 10 else 2))
    assert steps(d) == [(16, 730.0), (40, round(730 * 10 / 24, 1)), (64, round(730 * 4 / 24, 1))]
    assert d.observed["peak_hours_per_month"] == pytest.approx(121.7)
    assert d.observed["mean_busy_gpus"] == pytest.approx(8 * (2 * 14 + 5 * 6 + 8 * 4) / 24)


def test_idle_cluster_has_no_profile_and_says_so():
    d = derive(fleet(lambda h: 0, extra_idle=3))
    assert d.profile == () and d.kind == "idle"
    assert "no GPU reached 5% in 720 observed hour(s) (3 instance(s) reported)" == d.note
    assert d.observed["peak_gpus"] == 0 and d.samples == 3 * 720


def test_nightly_training_has_no_baseline():
    # 6 nodes busy from 22:00 to 06:00 (8 h a night), nothing by day
    d = derive(fleet(lambda h: 6 if (h % 24) >= 22 or (h % 24) < 6 else 0))
    assert steps(d) == [(48, round(730 * 8 / 24, 1))]
    assert d.observed["baseline_gpus"] == 0


def test_no_data_is_not_idle():
    d = derive({"i-1": (), "i-2": ((START - 5 * H, 90.0), (END + H, 90.0))})
    assert (d.profile, d.kind, d.samples) == ((), "no-data", 0)
    assert d.note == "no GPU utilization data in the 30-day window"


# ---- the rules behind them --------------------------------------------------------------------
def test_baseline_is_the_level_met_in_90_percent_of_hours():
    # 3 nodes in 91% of the hours, 4 nodes in 89% of them: the baseline is 3 nodes
    hours = DAYS * 24
    four = int(hours * 0.89)
    three = int(hours * 0.91)
    d = derive(fleet(lambda h: 4 if h < four else 3 if h < three else 1), gpn=1)
    assert d.observed["baseline_gpus"] == 3 and d.profile[0] == pf.Step(3, 730.0)
    # at the 20th percentile the 89% level qualifies
    assert derive(fleet(lambda h: 4 if h < four else 3 if h < three else 1), gpn=1,
                  percentile=20).observed["baseline_gpus"] == 4


def test_one_maintenance_hour_does_not_erase_the_baseline():
    d = derive(fleet(lambda h: 0 if h == 100 else 3))
    assert steps(d) == [(24, 730.0)]


def test_a_node_is_busy_in_an_hour_when_its_maximum_reaches_the_threshold():
    base = {f"i-{k}": tuple((START + h * H + m * 600, 1.0) for h in range(720) for m in range(6))
            for k in range(2)}
    spike = dict(base)
    # node 1 touches exactly the threshold for one 10-minute sample each hour of 100 hours
    spike["i-1"] = tuple((t, 5.0 if (t - START) % H == 1200 and t < START + 100 * H else v)
                         for t, v in base["i-1"])
    d = derive(spike, gpn=2)
    assert steps(d) == [(2, round(730 * 100 / 720, 1))]
    assert d.samples == 2 * 720      # (instance, hour) samples, whatever the raw resolution


def test_garbage_samples_are_ignored_not_busy():
    series = fleet(lambda h: 1)
    series["i-bad"] = tuple((START + h * H, v) for h, v in
                            zip(range(720), itertools.cycle([math.nan, math.inf, -3.0])))
    d = derive(series)
    assert steps(d) == [(8, 730.0)] and d.observed["instances"] == 1


def test_a_cluster_created_mid_window_is_not_diluted():
    # no data for the first 20 days, then 2 nodes always busy
    series = {f"i-{k}": tuple((START + h * H, 70.0) for h in range(480, 720)) for k in range(2)}
    d = derive(series)
    assert steps(d) == [(16, 730.0)]
    assert (d.observed["hours_observed"], d.observed["hours_with_data"]) == (240, 240)


def test_hours_without_data_after_the_start_count_as_nothing_busy():
    # scaled to zero for the last 15 days: 2 nodes busy 50% of the observed hours
    series = {f"i-{k}": tuple((START + h * H, 70.0) for h in range(360)) for k in range(2)}
    d = derive(series)
    assert steps(d) == [(16, 365.0)]


def test_max_steps_caps_the_burst_steps_and_keeps_node_hours():
    # a staircase: 1 node always, then one more node for each of 10 shorter spans
    def nodes(h):
        return 1 + sum(1 for k in range(10) if h % 24 < 20 - 2 * k)
    d = derive(fleet(nodes), gpn=1, max_steps=3)
    assert len(d.profile) == 3 and d.profile[0] == pf.Step(1, 730.0)
    assert d.profile[-1].gpus == d.observed["peak_gpus"] == 11
    # node-hours a month above the baseline, exactly: 730 x (busy node-hours - 1 node) / hours
    exact = 730 * sum(nodes(h) - 1 for h in range(720)) / 720
    got, lower = 0.0, 1
    for s in d.profile[1:]:
        got += (s.gpus - lower) * s.hours_per_month
        lower = s.gpus
    assert got == pytest.approx(exact, abs=0.05 * 10)   # each step's hours rounded to 0.1


def test_max_steps_below_two_is_refused():
    with pytest.raises(ValueError, match="at least 2"):
        derive(fleet(lambda h: 1), max_steps=1)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=700, allow_nan=False), min_size=1, max_size=9),
       st.integers(min_value=1, max_value=4))
def test_segment_is_optimal_against_brute_force(values, groups):
    values = sorted(values, reverse=True)

    def sse(ranges):
        total = 0.0
        for i, j in ranges:
            part = values[i:j]
            mean = sum(part) / len(part)
            total += sum((v - mean) ** 2 for v in part)
        return total
    best = min(sse(list(zip((0,) + cuts, cuts + (len(values),))))
               for k in range(0, min(groups, len(values)))
               for cuts in itertools.combinations(range(1, len(values)), k))
    got = pf.segment(values, groups)
    assert len(got) <= groups
    assert [i for i, _ in got][0] == 0 and got[-1][1] == len(values)
    assert all(a[1] == b[0] for a, b in zip(got, got[1:]))
    assert sse(got) == pytest.approx(best, abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=12), min_size=24, max_size=24),
       st.integers(min_value=2, max_value=8), st.sampled_from([1, 4, 8]))
def test_every_profile_is_a_valid_config_demand(day, max_steps, gpn):
    d = derive(fleet(lambda h: day[h % 24], extra_idle=1), gpn=gpn, max_steps=max_steps)
    if not any(day):
        assert d.profile == () and d.kind == "idle"
        return
    gpus = [s.gpus for s in d.profile]
    hours = [s.hours_per_month for s in d.profile]
    assert 1 <= len(d.profile) <= max_steps
    assert gpus == sorted(set(gpus)) and all(g % gpn == 0 and g > 0 for g in gpus)
    assert hours == sorted(set(hours), reverse=True)
    assert all(0 < h <= 730 for h in hours)
    assert gpus[-1] == d.observed["peak_gpus"] == max(day) * gpn
    # the YAML says the same thing
    doc = yaml.safe_load(pf.render_yaml("c", d, replaces="gpus: 8 and hours_per_month: 100"))
    assert doc == {"gpulease:clusters": [{"name": "c", "demand": [s.as_dict() for s in
                                                                   d.profile]}]}


def test_rendered_yaml_of_the_bursty_shape():
    d = derive(fleet(lambda h: 8 if h % 24 < 4 else 5 if h % 24 < 10 else 2))
    assert pf.render_yaml("pretrain", d, replaces="gpus: 64 and hours_per_month: 300") == (
        "gpulease:clusters:\n"
        "  - name: pretrain\n"
        "    demand:   # replaces gpus: 64 and hours_per_month: 300\n"
        "      - {gpus: 16, hours_per_month: 730}     # baseline: busy in at least 90% of the "
        "hours, kept running\n"
        "      - {gpus: 40, hours_per_month: 304.2}   # burst\n"
        "      - {gpus: 64, hours_per_month: 121.7}   # peak: 64 GPUs busy 121.7 h/month\n")


def test_rendered_yaml_without_a_profile_is_only_comments():
    text = pf.render_yaml("sandbox", derive(fleet(lambda h: 0, extra_idle=1)))
    assert yaml.safe_load(text) is None
    assert text.startswith("# sandbox: no GPU reached 5%")
    assert "remove the cluster, or keep it and let the reaper keep it scaled to zero" in text


def test_the_baseline_percentile_clears_every_commitments_break_even():
    """docs/recommend.md's reason for the 10th percentile: a level busy 90% of the hours is above
    the break-even utilization (commitment rate / on-demand rate) of every offering shipped."""
    from gpulease.catalog import load_catalog

    ratios = [getattr(o, k) / o.on_demand_usd for o in load_catalog().offerings
              for k in ("commit_1y_usd", "commit_3y_usd") if getattr(o, k) and o.on_demand_usd]
    assert ratios and max(ratios) < 1 - pf.BASELINE_PERCENTILE / 100
