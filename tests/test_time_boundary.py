"""One time type at the boundary (issue 35 item 1): every time gpulease reads - stack config
(window, Capacity Block pin), flags (`plan --now`, `catalog quotes --start/--end`), quote-cache
rows, the inventory, tags nodes write - goes through gpulease.clock.parse_time: RFC 3339 with a
zone, a calendar time, inside clock.EARLIEST..LATEST; anything else is exit 2 naming the file or
flag and the field, never an internal error."""
from __future__ import annotations

import datetime as dt
import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulease import clock, tags
from gpulease.cli import main
from gpulease.errors import EXIT_BAD_INPUT

UTC = dt.timezone.utc

#: the issue's examples, and the classes it names (no zone, ISO week date, basic format, empty)
BAD = ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00", "2027-02-30T11:30:00Z",
       "2027-01-04T00:00:00", "2027-W01-1T00:00:00Z", "2027-004T00:00:00Z", "20270104T000000Z",
       "", " 2027-01-04T00:00:00Z", "2027-01-04T23:59:60Z", "2027-01-04T00:00:00+24:00",
       "2027-01-04 00:00:00Z", "2027-01-04T00:00Z", "\u0662\u0660\u0662\u0667-01-04T00:00:00Z",
       "2100-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "1970-01-01T00:30:00+01:00"]


@pytest.mark.parametrize("text", BAD)
def test_bad_times_are_refused_with_a_reason(text):
    with pytest.raises(clock.TimeError) as exc:
        clock.parse_time(text)
    assert repr(text) in str(exc.value)


@pytest.mark.parametrize("text,expected", [
    ("2027-01-04T00:00:00Z", dt.datetime(2027, 1, 4, tzinfo=UTC)),
    ("2027-01-04t00:00:00z", dt.datetime(2027, 1, 4, tzinfo=UTC)),
    ("2027-01-04T01:30:00+01:30", dt.datetime(2027, 1, 4, tzinfo=UTC)),
    ("2027-01-03T19:00:00.5-05:00", dt.datetime(2027, 1, 4, 0, 0, 0, 500000, tzinfo=UTC)),
    ("2026-12-04T11:30:00.123456789Z", dt.datetime(2026, 12, 4, 11, 30, 0, 123456, tzinfo=UTC)),
    ("1970-01-01T00:00:00Z", clock.EARLIEST), ("2099-12-31T23:59:59Z", clock.LATEST),
])
def test_good_times_are_read_as_utc(text, expected):
    assert clock.parse_time(text) == expected


def test_a_bare_date_only_where_documented():
    with pytest.raises(clock.TimeError, match="bare date"):
        clock.parse_time("2027-01-04")
    assert clock.parse_time("2027-01-04", date_ok=True) == dt.datetime(2027, 1, 4, tzinfo=UTC)
    with pytest.raises(clock.TimeError, match="calendar"):
        clock.parse_time("2027-02-30", date_ok=True)


_offsets = st.integers(-23 * 60 - 59, 23 * 60 + 59)
_moments = st.datetimes(min_value=dt.datetime(1970, 1, 2), max_value=dt.datetime(2099, 12, 30))


@settings(max_examples=300, derandomize=True)
@given(_moments, _offsets)
def test_any_moment_written_with_any_offset_reads_back(moment, offset):
    tz = dt.timezone(dt.timedelta(minutes=offset))
    local = moment.replace(tzinfo=UTC, microsecond=0).astimezone(tz)
    sign = "+" if offset >= 0 else "-"
    zone = f"{sign}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}"
    text = local.strftime("%Y-%m-%dT%H:%M:%S") + zone
    assert clock.parse_time(text) == moment.replace(tzinfo=UTC, microsecond=0)
    assert clock.parse_time(clock.format_utc(moment)) == moment.replace(tzinfo=UTC, microsecond=0)


@settings(max_examples=500, derandomize=True)
@given(st.one_of(
    st.text(max_size=40),
    st.from_regex(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,12})?"
                  r"(Z|[+-][0-9]{2}:[0-9]{2})?\Z"),
    st.builds(lambda y, rest: f"{y:04d}{rest}", st.integers(0, 9999),
              st.sampled_from(["-12-31T23:59:59-01:00", "-01-01T00:00:00+01:00",
                               "-02-29T00:00:00Z", "-06-15T12:00:00+23:59"]))))
def test_any_text_is_a_time_in_range_or_a_time_error(text):
    """Never an OverflowError, a plain ValueError from datetime, or a time outside the range."""
    try:
        value = clock.parse_time(text)
    except clock.TimeError:
        return
    assert value.tzinfo == UTC and clock.EARLIEST <= value <= clock.LATEST
    assert clock.format_utc(value)          # formats: every accepted time can be written


@settings(max_examples=300, derandomize=True)
@given(st.from_regex(r"\A[0-9]{8}t[0-9]{4}z\Z") | st.text(max_size=20))
def test_a_node_written_time_label_is_in_range_or_a_value_error(text):
    """tags.parse_timestamp_label reads values nodes can write (billed-until, idle marks)."""
    try:
        epoch = tags.parse_timestamp_label(text)
    except ValueError:
        return
    assert clock.EARLIEST.timestamp() <= epoch <= clock.LATEST.timestamp()
    assert tags.timestamp_label(epoch) == text


def test_set_now_refuses_a_moment_outside_the_range():
    with pytest.raises(clock.TimeError):
        clock.set_now(253402300800)
    clock.set_now(None)


# ---- through the CLI: exit 2 naming the file or flag and the field ----

from tests.test_windows_components import JOB, PIN  # noqa: E402  (one copy of the fixture)


def _stack(tmp_path, cluster: dict):
    cfg = {"config": {"gpulease:owner": "ml", "gpulease:cost_center": "cc",
                      "gpulease:budget_monthly_usd": 1e9, "gpulease:environment": "staging",
                      "gpulease:clouds": {"aws": {"regions": ["us-east-1"]}},
                      "gpulease:clusters": [cluster]}}
    path = tmp_path / "Pulumi.staging.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _exit(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exc:       # argparse's own errors
        return exc.code


@pytest.mark.parametrize("where,key,value", [
    ("window", "earliest_start", "9999-12-31T23:59:59-01:00"),
    ("window", "deadline", "0001-01-01T00:00:00+01:00"),
    ("window", "earliest_start", "2027-01-04T00:00:00"),
    ("window", "deadline", "2027-W04-1T00:00:00Z"),
    ("pin", "start", "2027-02-30T11:30:00Z"),
    ("pin", "end", "20270115T113000Z"),
    ("pin", "start", "9999-12-31T23:59:59-01:00"),
    ("pin", "quoted_at", "0001-01-01T00:00:00+01:00"),
    ("pin", "upfront_fee_usd", 1e308),
])
def test_bad_times_in_the_stack_file_are_exit_2_at_their_path(where, key, value, tmp_path,
                                                               capsys):
    job = json.loads(json.dumps(JOB))
    if where == "window":
        job["window"][key] = value
    else:
        job["capacity_block"] = dict(PIN, **{key: value})
    path = _stack(tmp_path, job)
    code = _exit(["plan", "--config", str(path), "--now", "2026-12-03T09:00:00Z"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT, err
    field = "window" if where == "window" else "capacity_block"
    assert f"gpulease:clusters[0].{field}.{key}" in err and str(path) in err
    assert "internal error" not in err and "Traceback" not in err


def test_a_pin_time_with_an_offset_is_the_same_moment(tmp_path):
    from gpulease.catalog import load_catalog
    from gpulease.config import parse_stack_config

    pin = dict(PIN, start="2027-01-04T12:30:00+01:00", end="2027-01-15T06:30:00-05:00")
    spec = parse_stack_config(yaml.safe_load(_stack(tmp_path, dict(JOB, capacity_block=pin))
                                             .read_text())["config"],
                              stack="staging", source="x.yaml", catalog=load_catalog())
    got = spec.clusters[0].capacity_block
    assert (got.start, got.end) == ("2027-01-04T11:30:00Z", "2027-01-15T11:30:00Z")


@pytest.mark.parametrize("argv,flag", [
    (["plan", "--stack", "dev", "--now", ""], "--now"),
    (["plan", "--stack", "dev", "--now", "9999-12-31T23:59:59-01:00"], "--now"),
    (["plan", "--stack", "dev", "--now", "0001-01-01T00:00:00+01:00"], "--now"),
    (["plan", "--stack", "dev", "--now", "2026-12-10T09:00:00"], "--now"),
    (["catalog", "quotes", "--source", "offline", "--start", "9999-12-31T23:59:59-01:00"],
     "--start"),
    (["catalog", "quotes", "--source", "offline", "--start", "0001-01-01T00:00:00+01:00"],
     "--start"),
    (["catalog", "quotes", "--source", "offline", "--start", ""], "--start"),
    (["catalog", "quotes", "--source", "offline", "--end", "2027-W01-1T00:00:00Z"], "--end"),
])
def test_bad_time_flags_are_exit_2_naming_the_flag(argv, flag, capsys):
    code = _exit(argv)
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT, err
    assert flag in err and ("not an RFC 3339 time" in err or "outside the times" in err)
    assert "internal error" not in err and "Traceback" not in err


@pytest.mark.parametrize("key,value", [
    ("quoted_at", "9999-12-31T23:59:59-01:00"), ("quoted_at", "0001-01-01T00:00:00+01:00"),
    ("start", "2027-01-04T11:30:00"), ("end", "2027-02-30T11:30:00Z"),
])
def test_a_bad_time_in_the_quote_cache_is_exit_2_naming_the_file(key, value, tmp_path,
                                                                 monkeypatch, capsys):
    row = {"kind": "capacity_block", "cloud": "aws", "region": "us-east-1",
           "instance_type": "p5.48xlarge", "quoted_at": "2026-12-03T09:00:00Z", "source": "s",
           "start": "2027-01-04T11:30:00Z", "end": "2027-01-05T11:30:00Z", "instance_count": 2,
           "upfront_usd": 5.0}
    row[key] = value
    cache = tmp_path / "cache.json"
    cache.write_text(json.dumps({"format": "gpulease-quotes-cache/1", "quotes": [row]}))
    monkeypatch.setenv("GPULEASE_QUOTES_CACHE", str(cache))
    code = _exit(["catalog", "quotes", "--source", "offline"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT, err
    assert str(cache) in err and f"{key}: {value!r}" in err
    assert "internal error" not in err
