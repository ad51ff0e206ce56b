"""Declared work windows (issue 21 item 3): cron parsing, the tag/label encoding, holds."""
from __future__ import annotations

import datetime as dt
import re

import pytest

from gpulease import cron as S
from gpulease.clock import format_utc


def utc(*a) -> float:
    return dt.datetime(*a, tzinfo=dt.timezone.utc).timestamp()


@pytest.mark.parametrize("expr,minutes,encoded", [
    ("0 2 * * *", 120, "0_2_x_x_x_120"),
    ("*/15 9-17 * * mon-fri", 10, "xs15_9-17_x_x_1-5_10"),
    ("0,30 2 1 jan *", 30, "0c30_2_1_1_x_30"),
    ("5 4 * * sun", 45, "5_4_x_x_0_45"),
    ("0 22 * * 7", 600, "0_22_x_x_7_600"),
    ("0 0-23/6 * * *", 60, "0_0-23s6_x_x_x_60"),
])
def test_windows_encode_as_valid_tag_and_label_values_and_round_trip(expr, minutes, encoded):
    w = S.window(expr, minutes)
    assert w.encode() == encoded
    # a GCP label value: [a-z0-9_-], at most 63 characters (also a valid AWS tag value)
    assert re.fullmatch(r"[a-z0-9_-]{1,63}", encoded)
    back = S.decode(encoded)
    assert back.minutes == minutes and back.cron.fields == w.cron.fields


@pytest.mark.parametrize("expr,fragment", [
    ("0 2 * *", "has 4 field(s)"),
    ("61 * * * *", "outside 0-59"),
    ("0 24 * * *", "outside 0-23"),
    ("0 2 0 * *", "outside 1-31"),
    ("0 2 * 13 *", "outside 1-12"),
    ("0 2 * * 8", "outside 0-7"),
    ("0 2 * * fri-mon", "runs backwards"),
    ("0 2 * * funday", "is not a number"),
    ("0 2 * * 1/0", "at least 1"),
    ("@daily", "has 1 field(s)"),
    ("*-5 2 * * *", "takes no range"),
])
def test_bad_cron_is_a_clear_error(expr, fragment):
    with pytest.raises(S.CronError) as e:
        S.parse_cron(expr)
    assert fragment in str(e.value)


@pytest.mark.parametrize("minutes", [0, -5, S.MAX_WINDOW_MINUTES + 1, True, 1.5])
def test_window_length_is_bounded(minutes):
    with pytest.raises(S.CronError):
        S.window("0 2 * * *", minutes)


def test_a_window_too_long_to_be_a_label_is_refused():
    long = ",".join(str(m) for m in range(0, 60, 2))
    with pytest.raises(S.CronError, match="too long to carry as a tag/label value"):
        S.window(f"{long} 2 * * *", 30)


@pytest.mark.parametrize("raw", ["", "0_2_x_x_x", "0_2_x_x_x_abc", "0 2 * * * 120",
                                 "61_2_x_x_x_10", "0_2_x_x_x_0", "DROP TABLE", "0_2_x_x_x_" + "9" * 9])
def test_untrusted_encoded_values_are_refused(raw):
    with pytest.raises(S.CronError):
        S.decode(raw)


def test_day_of_month_and_day_of_week_either_matches_as_in_cron():
    w = S.parse_cron("0 2 13 * 5")                 # the 13th, or any Friday
    assert w.matches(dt.datetime(2026, 12, 13, 2, 0))       # a Sunday the 13th
    assert w.matches(dt.datetime(2026, 12, 4, 2, 0))        # a Friday the 4th
    assert not w.matches(dt.datetime(2026, 12, 5, 2, 0))    # Saturday the 5th
    sunday = S.parse_cron("0 2 * * 7")
    assert sunday.matches(dt.datetime(2026, 12, 6, 2, 0)) and S.parse_cron(
        "0 2 * * 0").matches(dt.datetime(2026, 12, 6, 2, 0))


def test_hold_from_lead_before_start_to_the_end():
    nightly = [S.window("0 2 * * *", 120)]
    at = lambda *a: S.schedule_hold(nightly, now=utc(*a), lead_minutes=60)  # noqa: E731
    assert at(2026, 12, 3, 0, 59) is None
    h = at(2026, 12, 3, 1, 0)
    assert h.kind == "schedule" and h.until == utc(2026, 12, 3, 4, 0)
    assert "work due 2026-12-03T02:00Z to 2026-12-03T04:00Z" in h.detail
    assert at(2026, 12, 3, 3, 59).until == utc(2026, 12, 3, 4, 0)
    assert at(2026, 12, 3, 4, 0) is None


def test_a_window_running_over_midnight_holds_the_next_day_too():
    late = [S.window("0 23 * * *", 180)]
    h = S.schedule_hold(late, now=utc(2026, 12, 4, 1, 30), lead_minutes=0)
    assert h is not None and h.until == utc(2026, 12, 4, 2, 0)


def test_overlapping_windows_hold_until_the_last_end():
    ws = [S.window("0 2 * * *", 60), S.window("30 2 * * *", 120)]
    h = S.schedule_hold(ws, now=utc(2026, 12, 3, 2, 45), lead_minutes=30)
    assert h.until == utc(2026, 12, 3, 4, 30)


def test_next_holds_for_explain():
    got = S.next_holds([S.window("0 2 * * 1-5", 90)], now=utc(2026, 12, 4, 12, 0),
                       lead_minutes=60)
    # Friday 4 Dec at noon: the next weekday windows are Monday and Tuesday
    assert [(format_utc(a, minutes=True), format_utc(b, minutes=True)) for a, b, _ in got] == [
        ("2026-12-07T01:00Z", "2026-12-07T03:30Z"), ("2026-12-08T01:00Z", "2026-12-08T03:30Z"),
        ("2026-12-09T01:00Z", "2026-12-09T03:30Z")]


def test_windows_from_tags_reports_unreadable_values():
    found, problems = S.windows_from_tags({"k0": "0_2_x_x_x_120", "k1": "garbage"},
                                          ["k0", "k1", "k2"])
    assert [w.minutes for w in found] == [120]
    assert len(problems) == 1 and problems[0].startswith("k1: ")


# ---- the stack config and the plan ----------------------------------------------------------------
def _dev_values(**cluster):
    from pathlib import Path

    from gpulease.config import read_stack_file
    values = read_stack_file(Path(__file__).resolve().parents[1] / "stacks" / "Pulumi.dev.yaml")
    values = dict(values)
    clusters = [dict(c) for c in values["gpulease:clusters"]]
    clusters[0].update(cluster)
    values["gpulease:clusters"] = clusters
    return values


def test_a_declared_schedule_is_stamped_on_the_node_groups():
    """The plan labels the cluster's instance templates (so its VMs carry them, where the reaper
    reads labels) with the encoded windows and the lead."""
    from gpulease.planner.plan import run

    values = _dev_values(schedule=[{"cron": "0 2 * * *", "minutes": 120},
                                   {"cron": "30 9 * * mon-fri", "minutes": 45}],
                         schedule_lead_minutes=30, first_job_grace_minutes=180)
    result = run(values, stack="dev")
    templates = [r for r in result.resources
                 if r.type == "gcp:compute/instanceTemplate:InstanceTemplate"]
    assert templates
    for t in templates:
        got = {k: v for k, v in t.inputs["labels"].items() if "schedule" in k or "grace" in k}
        assert got == {"gpulease-schedule-0": "0_2_x_x_x_120",
                       "gpulease-schedule-1": "30_9_x_x_1-5_45",
                       "gpulease-schedule-lead-minutes": "30",
                       "gpulease-first-job-grace-minutes": "180"}


def test_without_a_schedule_nothing_extra_is_stamped():
    from gpulease.planner.plan import run

    result = run(_dev_values(), stack="dev")
    for r in result.resources:
        labels = (r.inputs or {}).get("labels") or {}
        assert not any("schedule" in k or "first-job" in k for k in labels), r.name


@pytest.mark.parametrize("schedule,path,fragment", [
    ([{"cron": "0 2 * *", "minutes": 60}], "schedule[0].cron", "has 4 field(s)"),
    ([{"cron": "0 2 * * *"}], "schedule[0].minutes", "required"),
    ([{"cron": "0 2 * * *", "minutes": 60, "lead": 5}], "schedule[0].lead", ""),
    ([{"cron": "0 2 * * *", "minutes": 60}] * 5, "schedule", "at most 4"),
    ("0 2 * * *", "schedule", "must be a list"),
])
def test_a_bad_schedule_names_the_config_path(schedule, path, fragment):
    from gpulease.catalog import load_catalog
    from gpulease.config import parse_stack_config
    from gpulease.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        parse_stack_config(_dev_values(schedule=schedule), stack="dev",
                           source="stacks/Pulumi.dev.yaml", catalog=load_catalog())
    text = str(e.value)
    assert f"stacks/Pulumi.dev.yaml: gpulease:clusters[0].{path}" in text and fragment in text
