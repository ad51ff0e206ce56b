"""Issue 34 item 3: a published window rate older than PUBLISHED_RATE_MAX_AGE_DAYS is flagged -
in the cluster's rationale (explain) and as a plan warning - and a live quote never is."""
from __future__ import annotations

import datetime as dt

import pytest

from gpulease.quotes import PUBLISHED_RATE_MAX_AGE_DAYS, stale_rate
from tests.test_windows_policy import NOW, plan, pretrain

UTC = dt.timezone.utc
RATE = {"live": False, "quoted_at": "2024-12-31T00:00:00Z", "hourly_usd": 39.33,
        "source": "aws-capacity-blocks-pricing"}


def test_the_age_limit_is_inclusive_and_a_live_quote_never_stale():
    quoted = dt.datetime(2024, 12, 31, tzinfo=UTC)
    at_limit = quoted + dt.timedelta(days=PUBLISHED_RATE_MAX_AGE_DAYS)
    assert stale_rate(RATE, at_limit) is None
    text = stale_rate(RATE, at_limit + dt.timedelta(days=1))
    assert text and f"{PUBLISHED_RATE_MAX_AGE_DAYS + 1} days old" in text
    assert "$39.3300 per node-hour" in text and "gpulease catalog quotes" in text
    assert stale_rate({**RATE, "live": True}, at_limit + dt.timedelta(days=900)) is None
    assert stale_rate(None, NOW) is None


def test_the_plan_and_explain_flag_the_2024_block_rate():
    d = plan(pretrain()).clusters[0]
    assert d.window.model == "capacity_block" and not d.window.quote["live"]
    age = (NOW - dt.datetime(2024, 12, 31, tzinfo=UTC)).days
    assert f"is {age} days old, older than {PUBLISHED_RATE_MAX_AGE_DAYS}" in d.rationale


def test_a_young_published_rate_is_not_flagged():
    d = plan(pretrain(), now=dt.datetime(2025, 3, 1, tzinfo=UTC)).clusters[0]
    assert "days old" not in d.rationale


def test_the_exit_4_estimate_names_the_rates_age(tmp_path):
    """Offline the plan stops at exit 4 (an estimate cannot be pinned): its message gives the
    published rate's date and age, so the user knows to get a live quote."""
    import contextlib
    import io

    import yaml

    from gpulease.cli import main
    from tests.test_windows_policy import values
    cfg = tmp_path / "Pulumi.t.yaml"
    cfg.write_text(yaml.safe_dump({"config": values(pretrain())}))
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["plan", "--config", str(cfg), "--now", "2026-12-03T09:00:00Z", "--json"])
    assert code == 4
    age = (NOW - dt.datetime(2024, 12, 31, tzinfo=UTC)).days
    assert (f"published 2024-12-31), {age} days old (older than "
            f"{PUBLISHED_RATE_MAX_AGE_DAYS} days: AWS may have changed it)") in err.getvalue()


def test_an_undated_source_is_flagged_whatever_the_date_it_carries():
    """The shipped p5e / p5en rates come from a report with no publication date; their rows
    carry the day they were read (2026-12-03), which the age check alone would call fresh."""
    from gpulease.quotes import undated_source
    from gpulease.quotes.store import shipped_book
    book = shipped_book()
    undated = {q.instance_type for q in book.quotes if undated_source(q.source)}
    assert undated == {"p5e.48xlarge", "p5en.48xlarge"}
    assert not undated_source("aws-capacity-blocks-pricing") and not undated_source(None)
    q = {"live": False, "quoted_at": "2026-12-03T00:00:00Z", "hourly_usd": 39.8,
         "source": "capacity-blocks-h200-2026"}
    text = stale_rate(q, NOW)
    assert text and "is undated: its source gives no publication date" in text
    assert stale_rate({**q, "live": True}, NOW) is None


def test_an_h200_window_says_its_rate_is_undated():
    d = plan(pretrain(gpu="H200")).clusters[0]
    assert (d.window.model, d.offering.instance_type) == ("capacity_block", "p5e.48xlarge")
    assert d.window.quote["source"] == "capacity-blocks-h200-2026"
    assert "is undated: its source gives no publication date" in d.rationale
    assert "days old" not in d.rationale
