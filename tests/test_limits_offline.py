"""Every documented limit enforced offline as online, and schedules that can never fall due
refused (issue 35 item 4)."""
from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulease import cron
from gpulease.cli import main
from gpulease.errors import EXIT_BAD_INPUT, EXIT_OK

UTC = dt.timezone.utc


@pytest.mark.parametrize("expr", ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 4,6,9,11 *",
                                  "0 0 30-31 feb *", "15 3 31 2,4 */1"])
def test_a_schedule_that_never_falls_due_is_refused(expr):
    with pytest.raises(cron.CronError, match="never falls due"):
        cron.parse_cron(expr)


@pytest.mark.parametrize("expr", ["0 0 29 2 *", "0 0 31 * *", "0 0 30 2 mon", "0 0 31 1-4 *"])
def test_a_schedule_that_falls_due_somewhere_is_kept(expr):
    assert cron.parse_cron(expr)


def _field(lo: int, hi: int):
    n = st.integers(lo, hi)
    return st.one_of(st.just("*"), n.map(str),
                     st.tuples(n, n).map(lambda p: f"{min(p)}-{max(p)}"),
                     st.lists(n, min_size=1, max_size=3).map(lambda v: ",".join(map(str, v))),
                     st.integers(1, 6).map(lambda k: f"*/{k}"))


@settings(max_examples=80, derandomize=True)
@given(_field(0, 59), _field(0, 23), _field(1, 31), _field(1, 12), _field(0, 7))
def test_a_schedule_is_kept_exactly_when_it_falls_due_within_eight_years(m, h, dom, mon, dow):
    """Metamorphic with the matcher the reaper and the node autostop run: a kept expression
    matches some day of 2025-2032 (two leap years), a refused one matches none."""
    expr = f"{m} {h} {dom} {mon} {dow}"
    try:
        c = cron.parse_cron(expr)
    except cron.CronError as exc:
        assert "never falls due" in str(exc)
        c = cron.Cron(fields=_fields(expr), texts=(), dom_any=dom.startswith("*"),
                      dow_any=dow.startswith("*"))
        kept = False
    else:
        kept = True
    hour, minute = min(c.fields[1]), min(c.fields[0])
    day, due = dt.datetime(2025, 1, 1, hour, minute, tzinfo=UTC), False
    while day.year < 2033 and not due:
        due = c.matches(day)
        day += dt.timedelta(days=1)
    assert due == kept, expr


def _fields(expr: str) -> tuple:
    """The value sets of an expression parse_cron refuses only for never falling due."""
    out = []
    for part, (_, lo, hi) in zip(expr.split(), cron._FIELDS):
        values: set = set()
        for item in part.split(","):
            if item.startswith("*"):
                values.update(range(lo, hi + 1, int(item[2:]) if "/" in item else 1))
            elif "-" in item:
                a, b = map(int, item.split("-"))
                values.update(range(a, b + 1))
            else:
                values.add(int(item))
        out.append(frozenset(values))
    return tuple(out)


def test_a_stack_with_a_schedule_that_never_falls_due_is_exit_2(tmp_path, capsys):
    import yaml

    cfg = {"config": {"gpulease:owner": "ml", "gpulease:cost_center": "cc",
                      "gpulease:budget_monthly_usd": 1e6,
                      "gpulease:clouds": {"gcp": {"project": "acme-ml-dev",
                                                  "regions": ["us-central1"]}},
                      "gpulease:clusters": [{"name": "sandbox", "gpu": "L4", "gpus": 4,
                                             "hours_per_month": 160, "priority": 3,
                                             "schedule": [{"cron": "0 0 31 4 *",
                                                           "minutes": 60}]}]}}
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["plan", "--config", str(path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "gpulease:clusters[0].schedule[0].cron" in err and "never falls due" in err


@pytest.mark.parametrize("argv,flag", [
    (["--count", "65"], "--count"),
    (["--gpu", "H100", "--count", "65", "--duration-hours", "24"], "--count"),
    (["--start", "2030-01-04T00:00:00Z"], "--start"),
    (["--cloud", "aws", "--start", "2027-03-01T00:00:00Z"], "--start"),
])
def test_offline_refuses_what_live_refuses(argv, flag, capsys):
    assert main(["catalog", "quotes", "--source", "offline", "--no-cache", *argv]) == \
        EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert flag in err and "internal error" not in err


@settings(max_examples=25, derandomize=True)
@given(st.integers(1, 200), st.integers(0, 400))
def test_offline_and_live_agree_on_what_is_refused(count, days_ahead):
    """The same request is refused by both sources, before any call (the live clients are a
    client that fails the test if called)."""
    from gpulease.catalog import load_catalog
    from gpulease.errors import InputError
    from gpulease.quotes import collect

    now = dt.datetime(2026, 12, 4, tzinfo=UTC)
    req = collect.QuoteRequest(clouds=("aws", "gcp"), regions=(), instance_types=(), gpu="H100",
                               count=count, duration_hours=24.0,
                               start=now + dt.timedelta(days=days_ahead), end=None,
                               gcp_project=None)
    offerings = collect.targets(load_catalog(), req)
    try:
        collect.check_limits(offerings, req, now)
        refused = False
    except InputError:
        refused = True
    assert refused == (count > 64 or days_ahead > 120)


def test_a_good_offline_request_still_answers(capsys):
    assert main(["catalog", "quotes", "--source", "offline", "--no-cache", "--gpu", "H100",
                 "--count", "64", "--duration-hours", "24"]) == EXIT_OK
