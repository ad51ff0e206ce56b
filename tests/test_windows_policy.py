"""Windows as a purchase model: config, the policy's choice among the models, explain and JSON."""
from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from gpulease.catalog import load_catalog
from gpulease.config import parse_stack_config
from gpulease.errors import ConfigError, PolicyError
from gpulease.policy import decide
from gpulease.quotes.model import Quote, QuoteBook
from gpulease.quotes.store import shipped_book

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
WINDOW = {"earliest_start": "2027-01-04T00:00:00Z", "deadline": "2027-01-25T00:00:00Z",
          "duration_hours": 240}


def values(*clusters, aws=("us-east-1", "us-east-2", "us-west-2"), gcp=("us-central1",),
           policy=None) -> dict:
    v = {"gpulease:owner": "ml", "gpulease:cost_center": "cc", "gpulease:budget_monthly_usd": 1e9,
         "gpulease:clouds": {"aws": {"regions": list(aws)},
                             "gcp": {"project": "acme-ml-dev", "regions": list(gcp)}},
         "gpulease:clusters": list(clusters)}
    for cloud, regions in (("aws", aws), ("gcp", gcp)):   # () = the cloud is not used
        if not regions:
            del v["gpulease:clouds"][cloud]
    if policy:
        v["gpulease:policy"] = policy
    return v


def pretrain(**kw) -> dict:
    return {"name": "pretrain", "gpu": "H100", "gpus": 64, "priority": 9,
            "window": dict(WINDOW), **kw}


def plan(*clusters, quotes=None, now=NOW, **kw):
    cat = load_catalog()
    spec = parse_stack_config(values(*clusters, **kw), stack="t", source="stacks/Pulumi.t.yaml",
                              catalog=cat)
    return decide(spec, cat, quotes=quotes if quotes is not None else shipped_book(), now=now)


# ---- config -------------------------------------------------------------------------------------
@pytest.mark.parametrize("cluster,path,msg", [
    (pretrain(window={**WINDOW, "earliest_start": "next monday"}), "window.earliest_start",
     "is not an RFC 3339 time"),
    (pretrain(window={**WINDOW, "deadline": "2027-01-03T00:00:00Z"}), "window.deadline",
     "must be after"),
    (pretrain(window={**WINDOW, "duration_hours": 600}), "window.duration_hours",
     "does not fit in the window (504 h"),
    (pretrain(hours_per_month=200), "hours_per_month", "leave it out when"),
    (pretrain(demand=[{"gpus": 8, "hours_per_month": 730}]), "demand", "leave it out when"),
    ({k: v for k, v in pretrain().items() if k != "gpus"}, "gpus", "required key is missing"),
    (pretrain(window={**WINDOW, "duration_hours": -1}), "window.duration_hours", "must be > 0"),
    (pretrain(window={**WINDOW, "durationHours": 5}), "window.durationHours", "unknown key"),
])
def test_window_config_errors_are_located(cluster, path, msg):
    with pytest.raises(ConfigError) as exc:
        parse_stack_config(values(cluster), stack="t", source="stacks/Pulumi.t.yaml",
                           catalog=load_catalog())
    text = str(exc.value)
    assert f"gpulease:clusters[0].{path}" in text and msg in text, text


def test_a_window_parses_into_the_spec():
    spec = parse_stack_config(values(pretrain()), stack="t", source="s", catalog=load_catalog())
    c = spec.clusters[0]
    assert c.window.earliest_start == dt.datetime(2027, 1, 4, tzinfo=UTC)
    assert c.window.duration_hours == 240 and c.hours_per_month == 240 and c.demand == ()


# ---- the choice ---------------------------------------------------------------------------------
def test_guaranteed_work_takes_the_capacity_block_over_a_reservation():
    d = plan(pretrain()).clusters[0]
    w = d.window
    assert (d.region, d.offering.instance_type, w.model) == ("us-east-1", "p5.48xlarge",
                                                             "capacity_block")
    assert w.total_usd == pytest.approx(39.33 * 8 * 264) and w.estimated
    assert w.start == dt.datetime(2027, 1, 4, 11, 30, tzinfo=UTC)
    assert d.monthly_usd == pytest.approx(w.total_usd) and d.costs.window_usd == w.total_usd
    assert d.purchase.reserved == 8
    assert "published 2024-12-31" in d.rationale and "availability not checked" in d.rationale
    assert "+$22,611.84" in d.rationale       # the reservation at the on-demand rate
    models = {o["model"]: o for o in w.options}
    assert models["reservation"]["total_usd"] == pytest.approx(105_676.80)
    assert not models["spot"]["allowed"] and not models["on_demand"]["allowed"]


def test_a_fresh_live_offering_beats_the_published_rate_and_a_stale_one_does_not():
    offer = Quote(kind="capacity_block", cloud="aws", region="us-east-2",
                  instance_type="p5.48xlarge", quoted_at=NOW - dt.timedelta(hours=2),
                  source="aws:DescribeCapacityBlockOfferings",
                  start=dt.datetime(2027, 1, 6, 11, 30, tzinfo=UTC),
                  end=dt.datetime(2027, 1, 17, 11, 30, tzinfo=UTC), instance_count=8,
                  upfront_usd=60_000.0, zone="us-east-2b", offering_id="cb-0123456789abcdef0",
                  live=True)
    book = shipped_book()
    book.add([offer])
    d = plan(pretrain(), quotes=book).clusters[0]
    assert d.region == "us-east-2" and d.window.quote["offering_id"] == "cb-0123456789abcdef0"
    assert d.window.total_usd == 60_000.0 and not d.window.estimated
    stale = shipped_book()
    stale.add([dataclasses.replace(offer, quoted_at=NOW - dt.timedelta(hours=30))])
    d = plan(pretrain(), quotes=stale).clusters[0]
    assert d.window.quote.get("offering_id") is None and d.window.total_usd > 80_000


def test_checkpointed_work_takes_a_shorter_block_and_finishes_on_a_reservation():
    d = plan(pretrain(checkpoint_minutes=30)).clusters[0]
    w = d.window
    rest = 240 - 239.5 + 25 / 60
    assert w.model == "capacity_block" and len(w.options) == 7
    chosen = next(o for o in w.options if o["model"] == "capacity_block")
    assert chosen["remainder"]["model"] == "reservation"
    assert chosen["remainder"]["start"] == "2027-01-14T11:00:00Z"
    assert w.total_usd == pytest.approx(39.33 * 8 * 240 + 55.04 * 8 * rest)
    assert w.end == dt.datetime(2027, 1, 14, 11, 55, tzinfo=UTC)


def test_spot_band_takes_spot_and_mid_band_the_block():
    low = plan(pretrain(priority=3, checkpoint_minutes=30)).clusters[0]
    assert low.window.model == "spot" and low.purchase.spot == 8
    # priced by the deadline rule (issue 37 item 4): explain says the fallback share, the latest
    # switch to on-demand and the finish it guarantees, before the deadline
    rule = next(o for o in low.window.options if o["model"] == "spot")["deadline_rule"]
    assert f"{rule['fallback_share']:.1%} of the node-hours on on-demand fallback" in low.rationale
    assert f"switches to on-demand by {rule['latest_switch']} at the latest" in low.rationale
    assert f"done by {rule['guaranteed_by']}" in low.rationale
    assert rule["guaranteed_by"] < "2027-01-25T00:00:00Z" and rule["missed"] == 0
    mid = plan(pretrain(priority=6)).clusters[0]
    assert mid.window.model == "capacity_block"


def test_a_window_that_has_passed_fails_with_the_reason():
    with pytest.raises(PolicyError) as exc:
        plan(pretrain(), now=dt.datetime(2027, 1, 24, tzinfo=UTC))
    text = str(exc.value)
    assert "window (priority 9, guaranteed capacity only" in text
    assert "widen gpulease:clusters[0].window" in text


def test_flex_start_from_a_quoted_rate_for_gcp_only_work():
    flex = Quote(kind="flex_start", cloud="gcp", region="us-central1",
                 instance_type="a3-highgpu-8g", quoted_at=NOW, source="gcp:cloudbilling.skus",
                 hourly_usd=38.0, live=True)
    book = QuoteBook(quotes=[flex])
    job = {"name": "tune", "gpu": "H100", "gpus": 16, "priority": 6, "checkpoint_minutes": 60,
           "window": {"earliest_start": "2027-01-04", "deadline": "2027-01-12",
                      "duration_hours": 100}}
    d = plan(job, aws=("us-east-1",), quotes=book).clusters[0]
    # the only cheaper way: p5 on-demand is 2 x 55.04 x 100 = $11,008; flex 2 x 38 x 100 = $7,600
    assert (d.cloud, d.window.model) == ("gcp", "flex_start")
    assert d.window.total_usd == pytest.approx(7_600.0)
    assert d.window.start == dt.datetime(2027, 1, 5, tzinfo=UTC)     # after the 24 h queue
    long = dict(job, window=dict(job["window"], duration_hours=170))
    d = plan(long, aws=("us-east-1",), quotes=book).clusters[0]
    assert d.window.model != "flex_start"     # 170 h: more than one flex-start run (168 h)


def test_explain_shows_quotes_with_dates_and_start_times(capsys):
    from gpulease.cli import ui
    from gpulease.cli.explain import cluster_doc, render_cluster

    d = plan(pretrain()).clusters[0]
    render_cluster(d, ui.out())
    out = capsys.readouterr().out
    assert "Window: 240 h of work between 2027-01-04T00:00:00Z and 2027-01-25T00:00:00Z" in out
    assert "capacity_block *" in out and "2027-01-04T11:30:00Z" in out
    assert "aws-capacity-blocks-pricing, published 2024-12-31" in out
    doc = cluster_doc(d)
    assert doc["window"]["model"] == "capacity_block"
    assert doc["window"]["quote"]["quoted_at"] == "2024-12-31T00:00:00Z"
    assert doc["costs"]["window_usd"] == pytest.approx(83_064.96)


# ---- issue 34 item 1: compared by the total the work item costs --------------------------------
L4_MONTH = {"name": "l4job", "gpu": "L4", "gpus": 16, "priority": 3, "checkpoint_minutes": 30,
            "distributed": False,
            "window": {"earliest_start": "2027-01-04T00:00:00Z",
                       "deadline": "2027-03-30T00:00:00Z", "duration_hours": 720}}


def test_window_options_are_compared_by_their_total_across_clouds():
    """A 30-day 16 x L4 job: GCP spot stretched past 730 h by its default spot risk spans two
    months; per month of run it looked cheaper than AWS's one-month option, in all it is not."""
    gcp = plan(dict(L4_MONTH), aws=()).clusters[0]
    aws = plan(dict(L4_MONTH), gcp=()).clusters[0]
    both = plan(dict(L4_MONTH)).clusters[0]
    assert gcp.window.run_hours > 730 and gcp.window.total_usd > aws.window.total_usd
    assert gcp.window.total_usd / 2 < aws.window.total_usd   # the per-month trap
    # the choice across clouds equals the cheaper of the two single-cloud optima, in total
    assert both.window.total_usd == pytest.approx(min(gcp.window.total_usd,
                                                      aws.window.total_usd))
    assert (both.cloud, both.offering.instance_type) == (aws.cloud, aws.offering.instance_type)
    assert "for the work item" in both.rationale and "/month" not in both.rationale.split(
        ". Window")[0]


def test_a_window_is_one_time_money_counted_whole():
    d = plan(dict(L4_MONTH), aws=()).clusters[0]
    assert d.window.months == 1 and d.window.monthly_usd == pytest.approx(d.window.total_usd)
    assert d.monthly_usd == pytest.approx(d.window.total_usd + d.costs.egress_usd)


def test_the_budget_judges_a_window_whole_never_divided():
    total = plan(dict(L4_MONTH), aws=()).clusters[0].window.total_usd
    budget = total * 0.75   # above the total / 2 months the old view showed
    v = values(dict(L4_MONTH), aws=())
    v["gpulease:budget_monthly_usd"] = budget
    cat = load_catalog()
    spec = parse_stack_config(v, stack="t", source="stacks/Pulumi.t.yaml", catalog=cat)
    with pytest.raises(PolicyError) as exc:
        decide(spec, cat, quotes=shipped_book(), now=NOW)
    assert "is short by" in str(exc.value) and "l4job" in str(exc.value)


def _cli(argv) -> tuple[int, str]:
    import contextlib
    import io

    from gpulease.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    return code, out.getvalue()


def test_the_plan_shows_a_window_as_one_time_money_with_its_dates(tmp_path):
    import json

    import yaml
    v = values(dict(L4_MONTH), aws=())
    v["gpulease:budget_monthly_usd"] = 100000
    f = tmp_path / "Pulumi.l4.yaml"
    f.write_text(yaml.safe_dump({"config": v}))
    now = ["--now", "2026-12-03T09:00:00Z"]
    code, out = _cli(["plan", "--config", str(f), "--json", *now])
    assert code == 0, out
    p = json.loads(out)
    c = p["clusters"][0]
    # split, never in a monthly figure: the cluster's $/month is its monthly part only (no
    # dataset here: 0), the purchase is one_time with its dates
    assert c["one_time"]["usd"] == c["window"]["total_usd"] > 0
    assert c["monthly_usd"] == 0
    assert (c["one_time"]["from"], c["one_time"]["until"]) == (c["window"]["start"],
                                                               c["window"]["end"])
    tot = p["totals"]
    assert tot["one_time_usd"] == c["one_time"]["usd"]
    assert tot["monthly_usd"] == pytest.approx(sum(r["monthly_usd"] for r in p["resources"]))
    assert tot["by_cluster"].get("l4job", 0) == 0
    assert "l4job" not in str(tot["by_purchase_model"]) and not any(
        v for v in tot["by_purchase_model"].values())
    carriers = [r for r in p["resources"] if r.get("one_time")]
    assert carriers and sum(r["one_time"]["usd"] for r in carriers) == pytest.approx(
        tot["one_time_usd"])
    for r in carriers:   # per resource: the amount with its dates, and tags kept apart
        assert (r["one_time"]["from"], r["one_time"]["until"]) == (
            c["one_time"]["from"], c["one_time"]["until"])
        assert r["monthly_usd"] == 0
        labels = r["tags"]   # a GCP MIG carries no labels; a template or reservation does
        if labels:
            assert labels.get("gpulease-monthly-cents") == "0"
            assert labels.get("gpulease-one-time-cents") == str(
                round(r["one_time"]["usd"] * 100))
    # the budget judges the month's spend: monthly + the one-time purchase whole
    assert p["budget"]["headroom_usd"] == pytest.approx(
        100000 - tot["monthly_usd"] - tot["one_time_usd"])
    code, text = _cli(["plan", "--config", str(f), *now])
    total = next(line for line in text.splitlines() if line.startswith("Total: "))
    assert f"one-time ${c['one_time']['usd']:,.2f}" in total
    assert total.startswith("Total: $0.00/month + one-time"), total
    code, text = _cli(["explain", "--config", str(f), *now])
    assert f"One-time ${c['one_time']['usd']:,.2f}, {c['window']['start']}" in text
    assert "+ one-time" in text and "counted whole against the budget" in text
    code, out = _cli(["explain", "--config", str(f), "--json", *now])
    e = json.loads(out)
    assert e["totals"]["one_time_usd"] == c["one_time"]["usd"]
    assert e["totals"]["monthly_usd"] == tot["monthly_usd"]
    assert e["clusters"][0]["monthly_usd"] == 0 and e["clusters"][0]["one_time"] == c["one_time"]
    assert e["budget"]["headroom_usd"] == p["budget"]["headroom_usd"]
    # the HTML card and the pipeline's markdown say the same
    from gpulease.pipeline import markdown
    md = markdown.render(p)
    assert "**Monthly cost: $0.00**" in md
    assert (f"l4job ${c['one_time']['usd']:,.2f} (flex_start" in md
            or f"l4job ${c['one_time']['usd']:,.2f} (" in md)
    assert f"one-time ${c['one_time']['usd']:,.2f} counted whole" in md
    from gpulease.planner import html
    v = html.report_variables(p)
    assert v["monthly"] == "$0.00" and v["one_time"] == f"${c['one_time']['usd']:,.2f}"
    assert v["one_time_rows"][0]["from"] == c["one_time"]["from"]
    assert v["budget"].monthly == pytest.approx(c["one_time"]["usd"])
    code, page = _cli(["plan", "--config", str(f), "--format", "html", *now])
    assert code == 0 and 'id="one-time">$' + f"{c['one_time']['usd']:,.2f}</b>" in page
    assert f"l4job ${c['one_time']['usd']:,.2f} {c['one_time']['from']}" in page


def test_cost_tags_keep_one_time_money_apart_on_both_clouds():
    from gpulease.clouds import registry
    aws, gcp = (registry.get(n) for n in registry.NAMES)
    a = aws.cost_tags({}, 12.5, 38270.51)
    g = gcp.cost_tags({}, 12.5, 38270.51)
    both = {**a, **g}
    assert both["gpulease-monthly-usd"] == "12.50" and both["gpulease-monthly-cents"] == "1250"
    assert both["gpulease-one-time-usd"] == "38270.51"
    assert both["gpulease-one-time-cents"] == "3827051"
    # no one-time money: no one-time tag (plans of monthly stacks are unchanged)
    assert not any("one-time" in k for k in {**aws.cost_tags({}, 1), **gcp.cost_tags({}, 1)})


def test_the_budget_guardrail_counts_the_one_time_purchase_whole(tmp_path):
    """A window whose purchase is above the monthly budget fails budget-cap although its
    monthly figure is $0: the one-time amount counts whole (docs/policy.md)."""
    import json

    import yaml
    from gpulease.guardrails.rules import RuleContext, check_budget_cap
    total = plan(dict(L4_MONTH), aws=()).clusters[0].window.total_usd
    ctx = RuleContext(budget_monthly_usd=total - 1, planned_monthly_usd=0.0,
                      planned_one_time_usd=total)
    (msg,) = [m for _, m in check_budget_cap([], ctx)]
    assert "one-time window purchases" in msg and "exceeds the budget" in msg
    assert check_budget_cap([], RuleContext(budget_monthly_usd=total + 1,
                                            planned_monthly_usd=0.0,
                                            planned_one_time_usd=total)) == []


# ---- issue 34 item 2: quotes over estimates ----------------------------------------------------
def _us_east_1_offer(fee: float, **kw) -> Quote:
    return Quote(kind="capacity_block", cloud="aws", region="us-east-1",
                 instance_type="p5.48xlarge", quoted_at=NOW - dt.timedelta(hours=2),
                 source="aws:DescribeCapacityBlockOfferings",
                 start=dt.datetime(2027, 1, 4, 11, 30, tzinfo=UTC),
                 end=dt.datetime(2027, 1, 15, 11, 30, tzinfo=UTC), instance_count=8,
                 upfront_usd=fee, zone="us-east-1a", offering_id="cb-0fedcba9876543210",
                 live=True, **kw)


def test_a_dearer_live_offering_replaces_the_published_rate():
    estimate = 39.33 * 8 * 264            # the published rate's 11-day block
    book = shipped_book()
    book.add([_us_east_1_offer(round(estimate * 1.10, 2))])
    d = plan(pretrain(), aws=("us-east-1",), quotes=book).clusters[0]
    w = d.window
    assert w.model == "capacity_block" and not w.estimated
    assert w.quote["offering_id"] == "cb-0fedcba9876543210" and w.quote["live"]
    assert w.total_usd == pytest.approx(estimate * 1.10)      # the plan rose by 10 %
    block = next(o for o in w.options if o["model"] == "capacity_block")
    assert any("replaces the published rate" in p["why"] for p in block["passed_over"])


def test_a_live_answer_with_no_fitting_block_leaves_no_estimated_block():
    """A published rate never makes a block where the quoted offerings have none that fits."""
    book = shipped_book()
    book.add([dataclasses.replace(   # on sale, but after the deadline (2027-01-25)
        _us_east_1_offer(80_000.0), start=dt.datetime(2027, 1, 20, 11, 30, tzinfo=UTC),
        end=dt.datetime(2027, 1, 31, 11, 30, tzinfo=UTC))])
    d = plan(pretrain(), aws=("us-east-1",), quotes=book).clusters[0]
    block = next(o for o in d.window.options if o["model"] == "capacity_block")
    assert not block["feasible"] and d.window.model != "capacity_block"
