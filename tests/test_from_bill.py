"""From the bill back to the plan (issue 33 item 5): `gpulease recommend --from-bill` derives each
cluster's demand from the nodes billed per hour, and `gpulease spend` prints the config change
that makes next month's plan match what ran - on a generated month (tests/billgen.py) written as
FOCUS CSV, CUR 2.0 Parquet and the GCP export as JSON lines; and bad input is exit 2."""
from __future__ import annotations

import dataclasses
import datetime as dt
import json

import duckdb
import pytest

from gpulease import purchase
from gpulease.cli import main
from gpulease.cli import spend_change
from gpulease.recommend import profile as pf
from gpulease.spend import classify as C
from gpulease.spend import reconcile as R
from gpulease.spend import sources as S
from gpulease.spend import usage as U
from tests import billgen

MONTH = "2026-10"
FORMATS = ("focus", "cur2", "gcp")
H = 3600.0


@pytest.fixture(scope="module")
def month(tmp_path_factory):
    """The prod stack's plan (as `spend` makes it), its stack and the generated month."""
    plan, loaded = billgen.stack_plan()
    paths, exp = billgen.generate(plan, loaded.catalog, tmp_path_factory.mktemp("bills"),
                                  month=MONTH)
    return plan, loaded, paths, exp


def _con():
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return con


# ---- the derivation from nodes per hour (pure) -----------------------------------------------
def test_billed_hours_are_kept_as_billed_and_capped_at_always_on():
    start = dt.datetime(2026, 10, 1, tzinfo=dt.timezone.utc).timestamp()
    hours = 744                                  # October: 31 days
    # 2 nodes always on, a third for 100 h: hours kept as billed (not x 730 / 744), the
    # always-on level capped at 730
    nodes = [3] * 100 + [2] * (hours - 100)
    d = pf.derive_running(nodes, start=start, end=start + hours * H, gpus_per_node=8)
    assert [(s.gpus, s.hours_per_month) for s in d.profile] == [(16, 730.0), (24, 100.0)]
    assert d.observed["measure"] == "running" and d.kind == "profile"
    # first billed mid-month (hour 372 of 744): extrapolated to the whole month
    half = [0] * 372 + [1] * 100 + [0] * 272
    d = pf.derive_running(half, start=start, end=start + hours * H, gpus_per_node=8)
    assert [(s.gpus, s.hours_per_month) for s in d.profile] == [(8, 200.0)]
    # nothing billed: idle, priced as removed by the engine
    d = pf.derive_running([0] * hours, start=start, end=start + hours * H, gpus_per_node=8)
    assert d.kind == "idle" and d.profile == () and "did not run" in d.note


# ---- recommend --from-bill ---------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_recommend_from_bill_recovers_the_short_month_exactly(month, fmt, capsys):
    plan, loaded, paths, exp = month
    assert main(["recommend", "--stack", "prod", "--from-bill", str(paths[fmt]), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["source"], doc["month"], doc["window_days"]) == ("bill", MONTH, 31)
    by = {c["name"]: c for c in doc["clusters"]}
    assert all(c["source"] == "bill" and c["error"] is None for c in by.values())
    # the cluster that ran 20 % fewer hours: exactly 0.8 x its planned hours, same GPUs
    planned, ran = exp.short_hours
    short = by[exp.short]
    gpus = short["current"]["gpus"]
    assert short["profile"] == [{"gpus": gpus, "hours_per_month": ran}]
    assert ran == 0.8 * planned == 0.8 * short["current"]["hours_per_month"]
    assert short["saving_usd"] > 0 and "hours_per_month: 288" in short["yaml"]
    # every other cluster billed as planned: its profile is its current demand
    for name, c in by.items():
        if name == exp.short:
            continue
        current = c["current"].get("demand") or [
            {"gpus": c["current"]["gpus"], "hours_per_month": c["current"]["hours_per_month"]}]
        assert c["profile"] == current, name
        assert c["saving_usd"] == 0.0, name


def test_recommend_from_bill_text_names_the_month(month, capsys):
    _, _, paths, exp = month
    assert main(["recommend", "--stack", "prod", "--from-bill", str(paths["focus"]),
                 "--month", MONTH]) == 0
    out = capsys.readouterr().out
    assert f"{exp.short} (" in out and f"billed in {MONTH}" in out
    assert "{gpus: 8, hours_per_month: 288}" in out and "GPUs running" in out


# ---- spend's config change ---------------------------------------------------------------------
def _spend_doc(plan, loaded, path):
    from gpulease.cli.spend import catalog_prices

    con = _con()
    src = S.open_source(con, str(path))
    groups, total, rows = C.read_groups(con, src, month=MONTH,
                                        now=dt.datetime(2026, 12, 4, tzinfo=dt.timezone.utc))
    bill = C.classify(groups, C.PlanIndex.of(plan), source_total=total, source_rows=rows,
                      kind=src.kind)
    doc = R.reconcile(plan, bill, catalog_prices=catalog_prices(plan, loaded.catalog),
                      source=str(path), month=MONTH)
    gpn = {c["name"]: c["gpus_per_node"] for c in plan["clusters"]}
    spend_change.add(doc, plan, loaded.spec, loaded.source,
                     lambda: U.read(con, src, C.PlanIndex.of(plan), gpn, month=MONTH))
    return doc


@pytest.mark.parametrize("fmt", FORMATS)
def test_spend_config_change_names_the_purchase_model_and_the_hours(month, fmt):
    plan, loaded, paths, exp = month
    doc = _spend_doc(plan, loaded, paths[fmt])
    by = {c["cluster"]: c["config_change"] for c in doc["clusters"]}
    spot_below = loaded.spec.policy.spot_below_priority
    fell = by[exp.fallback]
    index = next(c.index for c in loaded.spec.clusters if c.name == exp.fallback)
    assert (fell["file"], fell["path"]) == ("stacks/Pulumi.prod.yaml", f"gpulease:clusters[{index}]")
    assert fell["set"] == {"priority": spot_below}
    assert f"purchase model {purchase.ON_DEMAND}, not {purchase.SPOT}" in fell["yaml"]
    assert fell["yaml"].startswith(f"# stacks/Pulumi.prod.yaml, config gpulease:clusters[{index}]")
    assert f"- name: {exp.fallback}\n    priority: {spot_below}" in fell["yaml"]
    short = by[exp.short]
    assert short["set"] == {"demand": [{"gpus": 8, "hours_per_month": exp.short_hours[1]}]}
    assert "{gpus: 8, hours_per_month: 288}" in short["yaml"]
    # nothing to change where hours and purchase model match the plan (credits, corrections
    # and untagged spend are not config)
    assert {k for k, v in by.items() if v} == {exp.short, exp.fallback}


def test_the_config_change_closes_the_loop(month):
    """The stack with spend's changes applied plans what the bill shows: the short cluster's
    node-hours as billed, the fallen-back cluster with no spot."""
    from gpulease.config import parse_stack_config, read_stack_file, stack_file
    from gpulease.policy import decide
    from gpulease.recommend.saving import Profile, apply_to_values

    plan, loaded, paths, exp = month
    doc = _spend_doc(plan, loaded, paths["focus"])
    values = read_stack_file(stack_file("prod"))
    for c in doc["clusters"]:
        ch = c["config_change"]
        if not ch:
            continue
        if "demand" in ch["set"]:
            steps = tuple(pf.Step(s["gpus"], s["hours_per_month"]) for s in ch["set"]["demand"])
            values = apply_to_values(values, Profile(ch["cluster"], steps))
        if "priority" in ch["set"]:
            values = dict(values, **{"gpulease:clusters": [
                dict(e, priority=ch["set"]["priority"]) if e["name"] == ch["cluster"] else e
                for e in values["gpulease:clusters"]]})
    spec = parse_stack_config(values, stack="prod", source="stacks/Pulumi.prod.yaml",
                              catalog=loaded.catalog)
    after = {d.name: d for d in decide(spec, loaded.catalog).clusters}
    blocks = {name: [(b.purchase, b.nodes, b.hours_per_month) for p in d.parts for b in p.blocks]
              for name, d in after.items()}
    assert sum(n * h for _, n, h in blocks[exp.short]) == exp.short_hours[1]
    assert blocks[exp.fallback] and all(m != purchase.SPOT for m, _, _ in blocks[exp.fallback])


def test_spend_cli_prints_the_change(month, capsys):
    _, _, paths, exp = month
    assert main(["spend", "--stack", "prod", "--bill", str(paths["gcp"]),
                 "--now", "2026-12-04T00:00:00Z"]) == 0
    out = capsys.readouterr().out
    assert "config change" in out and "# stacks/Pulumi.prod.yaml, config gpulease:clusters[" in out
    assert f"- name: {exp.fallback}" in out and f"purchase model {purchase.ON_DEMAND}" in out


# ---- bad input: exit 2, a message naming the flag, the file and the fix ----------------------
def _derived(month, tmp_path, name: str, sql: str) -> str:
    _, _, paths, _ = month
    out = tmp_path / name
    con = _con()
    con.execute(f"COPY ({sql.format(src=S._quote(str(paths['focus'])))}) TO '{out}' "
                "(HEADER, DELIMITER ',')")
    return str(out)


_READ = "read_csv({src}, header = true, all_varchar = true)"


@pytest.mark.parametrize("case", ["missing", "empty-month", "other-stack", "two-months",
                                  "daily"])
def test_bad_bills_are_exit_2(month, case, tmp_path, capsys):
    _, _, paths, exp = month
    stack, extra = "prod", []
    if case == "missing":
        bill, want = str(tmp_path / "nope.csv"), "--from-bill: " + str(tmp_path / "nope.csv")
    elif case == "empty-month":
        bill, extra, want = str(paths["focus"]), ["--month", "2026-09"], "no compute usage line in 2026-09"
    elif case == "other-stack":
        bill, stack, want = str(paths["cur2"]), "dev", "no compute usage in 2026-10 belongs to a cluster of stack dev"
    elif case == "two-months":
        bill = _derived(month, tmp_path, "two.csv", f"""SELECT * FROM {_READ} UNION ALL
            SELECT * REPLACE (replace(ChargePeriodStart, '2026-10-', '2026-11-') AS
            ChargePeriodStart) FROM {_READ} WHERE ChargePeriodStart LIKE '2026-10-01T00%'""")
        want = "2 months (2026-10, 2026-11); say which one, e.g. --month 2026-11"
    else:
        bill = _derived(month, tmp_path, "daily.csv", f"""SELECT * REPLACE (CASE WHEN
            ResourceId LIKE '{exp.short}-%' AND ChargePeriodStart = '2026-10-01T00:00:00Z'
            THEN '24' ELSE ConsumedQuantity END AS ConsumedQuantity) FROM {_READ}""")
        want = "the bill is not hourly"
    assert main(["recommend", "--stack", stack, "--from-bill", bill, *extra]) == 2
    err = capsys.readouterr().err
    assert want in err and "Traceback" not in err


@pytest.mark.parametrize("argv,want", [
    (["--threshold", "5"], "--threshold: reads GPU metrics"),
    (["--window-days", "7"], "--window-days: reads GPU metrics"),
    (["--month", "2026-13"], "--month: '2026-13' is not a month")])
def test_bad_arguments_with_from_bill_are_exit_2(argv, want, tmp_path, capsys):
    assert main(["recommend", "--stack", "prod", "--from-bill", str(tmp_path), *argv]) == 2
    assert want in capsys.readouterr().err


def test_month_without_from_bill_is_exit_2(capsys):
    assert main(["recommend", "--stack", "prod", "--month", MONTH]) == 2
    assert "--month: applies only with --from-bill" in capsys.readouterr().err


def test_usage_reader_keeps_exact_node_hours(month):
    """The node-hours the reader sums are the bill's, and whole nodes per hour keep them."""
    plan, loaded, paths, exp = month
    con = _con()
    src = S.open_source(con, str(paths["cur2"]))
    gpn = {c["name"]: c["gpus_per_node"] for c in plan["clusters"]}
    usage = U.read(con, src, C.PlanIndex.of(plan), gpn, month=MONTH)
    assert usage.hours == 744 and set(usage.clusters) == set(gpn)
    short = usage.clusters[exp.short]
    assert short.node_hours == sum(short.nodes) == exp.short_hours[1]
    assert dataclasses.astuple(short)[2:] == (1, int(exp.short_hours[1]))
