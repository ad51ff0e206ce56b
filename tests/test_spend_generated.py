"""`gpulease spend` recovers every known perturbation of a generated month (tests/billgen.py:
20 % fewer hours, spot fallen back to on-demand, untagged NAT gateways, a commitment credit, a
late correction) exactly, on FOCUS CSV, CUR 2.0 Parquet and the GCP export as JSON lines; every
untouched cluster reconciles to the cent; the classes add up to the bill."""
from __future__ import annotations

import json
from decimal import Decimal

import duckdb
import pytest

from gpulease import money, purchase
from gpulease.cli import main
from gpulease.spend import classify as C
from gpulease.spend import reconcile as R
from gpulease.spend import sources as S
from tests import billgen

NOW = "2026-12-04T00:00:00Z"


@pytest.fixture(scope="module")
def month(tmp_path_factory):
    """The prod stack's plan (run in-process, as `spend` runs it) and its generated month."""
    plan, loaded = billgen.stack_plan()
    catalog = loaded.catalog
    paths, exp = billgen.generate(plan, catalog, tmp_path_factory.mktemp("bills"))
    return plan, catalog, paths, exp


def _reconcile(plan, catalog, path):
    import datetime as dt

    from gpulease.cli.spend import catalog_prices

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    src = S.open_source(con, str(path))
    groups, total, rows = C.read_groups(
        con, src, month="2026-10", now=dt.datetime(2026, 12, 4, tzinfo=dt.timezone.utc))
    bill = C.classify(groups, C.PlanIndex.of(plan), source_total=total, source_rows=rows,
                      kind=src.kind)
    return src, R.reconcile(plan, bill, catalog_prices=catalog_prices(plan, catalog),
                            source=str(path), month="2026-10")


@pytest.mark.parametrize("fmt,kind", [("focus", S.FOCUS), ("cur2", S.CUR), ("gcp", S.GCP)])
def test_every_perturbation_recovered(month, fmt, kind):
    plan, catalog, paths, exp = month
    src, doc = _reconcile(plan, catalog, paths[fmt])
    assert src.kind == kind
    by = {c["cluster"]: c for c in doc["clusters"]}
    causes = {name: {x["kind"]: x for x in c["causes"]} for name, c in by.items()}
    assert exp.short and exp.fallback and exp.credit and exp.correction

    # 1. a cluster that ran 20 % fewer hours
    h = causes[exp.short]["hours"]
    assert (h["planned_node_hours"], h["billed_node_hours"]) == exp.short_hours
    assert h["diff_pct"] == -20.0
    # 2. spot that fell back to on-demand: the hours moved, at the catalog's on-demand price
    p = causes[exp.fallback]["purchase_model"]
    assert (p["from"], p["to"], p["node_hours"]) == (purchase.SPOT, purchase.ON_DEMAND,
                                                     exp.fallback_hours)
    assert "unit_price" not in causes[exp.fallback]
    # 3. untagged NAT gateways: unmatched, by id, to the cent
    assert money.usd(doc["unmatched_usd"]) == exp.nat_usd
    assert sorted(u["resource"].rsplit("/", 1)[-1] for u in doc["unmatched"]) == exp.nat_ids
    assert causes["shared"]["untagged"]["resources"] == len(exp.nat_ids)
    assert money.usd(by["shared"]["diff_usd"]) == -exp.nat_usd
    # 4. a commitment credit: the reserved cluster's effective cost is lower by exactly it
    assert money.usd(by[exp.credit]["diff_usd"]) == exp.credit_usd
    assert "commitment_utilisation" not in causes[exp.credit]      # fully used
    # 5. a late correction: an adjustment, attributed, provisional
    assert money.usd(doc["classes_usd"]["adjustment"]) == exp.correction_usd
    assert money.usd(by[exp.correction]["adjustments_usd"]) == exp.correction_usd
    assert money.usd(by[exp.correction]["diff_usd"]) == exp.correction_usd
    assert doc["provisional"]["rows"] == 1
    assert money.usd(doc["provisional"]["usd"]) == exp.correction_usd
    # untouched clusters reconcile to the cent, with no cause
    untouched = [c for c in by if c not in (exp.short, exp.fallback, exp.credit,
                                            exp.correction, "shared")]
    assert untouched
    for name in untouched:
        assert by[name]["diff_usd"] == 0.0 and by[name]["planned_usd"] > 0
        assert [k for k in causes[name] if k != "credits"] == []
    # every line once; the classes add up to the bill to the cent
    assert doc["conserved"] is True
    assert sum(money.usd(v) for v in doc["classes_usd"].values()) == \
        money.usd(doc["total_billed_usd"])
    assert doc["rows"]["unmatched"] == len(exp.nat_ids) and doc["rows"]["tax"] == 0


def test_the_three_formats_agree(month):
    plan, catalog, paths, _ = month
    docs = {f: _reconcile(plan, catalog, p)[1] for f, p in paths.items()}
    totals = {f: d["total_billed_usd"] for f, d in docs.items()}
    assert len(set(totals.values())) == 1, totals
    eff = {f: [(c["cluster"], c["effective_usd"]) for c in d["clusters"]] for f, d in docs.items()}
    assert eff["focus"] == eff["cur2"] == eff["gcp"]


def test_month_filter_and_younger_than_48h(month):
    """--month of another month reads nothing; judged on the month's last day, every line of
    its last 48 hours is provisional."""
    import datetime as dt

    plan, catalog, paths, _ = month
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    src = S.open_source(con, str(paths["focus"]))
    groups, total, rows = C.read_groups(con, src, month="2026-09")
    assert (groups, total, rows) == ([], Decimal(0), 0)
    now = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    groups, total, rows = C.read_groups(con, src, now=now)
    young = con.execute(f"""SELECT count(*) FROM ({S.normalised_sql(src)})
        WHERE start_ts > ?""", [now - dt.timedelta(hours=48)]).fetchone()[0]
    assert young > 0
    # the correction is dated in the last hour: young as well as a correction, counted once
    assert sum(g.rows for g in groups if g.provisional) == young


def test_cli_html_and_json(month, tmp_path, capsys):
    _, _, paths, exp = month
    out = tmp_path / "spend.html"
    assert main(["spend", "--stack", "prod", "--bill", str(paths["cur2"]), "--now", NOW,
                 "--format", "html", "--out", str(out)]) == 0
    page = out.read_text()
    assert page.startswith("<!doctype html>") and exp.short in page and "ran 288.0" in page
    # the config change is on the page too (as in the table and the JSON)
    assert "Config change for next month" in page and "hours_per_month: 288" in page
    assert main(["spend", "--stack", "prod", "--bill", str(paths["gcp"]), "--now", NOW,
                 "--month", "2026-10", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["bill"]["format"] == "GCP Cloud Billing export" and doc["conserved"]


# ---- FOCUS 1.0 conformance of the generated month (no usable focus-validator here: docs/spend.md)
#: FOCUS 1.0 allowed values (FOCUS specification 1.0, columns ChargeCategory, ChargeClass,
#: ChargeFrequency, PricingCategory, CommitmentDiscountCategory / Status)
FOCUS_ENUMS = {
    "ChargeCategory": {"Usage", "Purchase", "Tax", "Credit", "Adjustment"},
    "ChargeClass": {"", "Correction"},
    "ChargeFrequency": {"One-Time", "Recurring", "Usage-Based"},
    "PricingCategory": {"", "Standard", "Dynamic", "Committed", "Other"},
    "CommitmentDiscountCategory": {"", "Spend", "Usage"},
    "CommitmentDiscountStatus": {"", "Used", "Unused"},
}
FOCUS_DATETIMES = ("BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart",
                   "ChargePeriodEnd")
FOCUS_NOT_NULL = ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost",
                  "BillingCurrency", "ChargeCategory", "ChargePeriodStart", "ChargePeriodEnd",
                  "ProviderName", "PublisherName", "InvoiceIssuerName", "BillingAccountId")


def _focus_problems(path) -> list[str]:
    import csv
    import re
    stamp = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
    problems = []
    with open(path, newline="", encoding="utf-8") as fh:
        for n, raw in enumerate(csv.DictReader(fh), start=2):
            # the sample writes a null as NULL, the generator as an empty field
            row = {k: "" if v == "NULL" else v for k, v in raw.items()}
            for col, allowed in FOCUS_ENUMS.items():
                if row[col] not in allowed:
                    problems.append(f"line {n}: {col}={row[col]!r}")
            for col in FOCUS_DATETIMES:
                if not stamp.fullmatch(row[col]):
                    problems.append(f"line {n}: {col}={row[col]!r} is not ISO 8601 UTC")
            for col in FOCUS_NOT_NULL:
                if row[col] == "":
                    problems.append(f"line {n}: {col} is null")
            if row["BillingCurrency"] != "USD":
                problems.append(f"line {n}: BillingCurrency={row['BillingCurrency']!r}")
            if row["Tags"]:
                json.loads(row["Tags"])     # a JSON object, as FOCUS 1.0 defines Tags
    return problems


def test_the_generated_focus_month_has_the_samples_columns_and_focus_values(month):
    """The generated month has the public FOCUS 1.0 sample's header (same columns, same order)
    and FOCUS 1.0's allowed values, timestamps and non-null columns; the same checker finds the
    sample's own deviations from them."""
    import csv
    from tests.test_spend_focus_sample import SAMPLE
    _, _, paths, _ = month
    with open(SAMPLE, newline="", encoding="utf-8") as fh:
        want = next(csv.reader(fh))
    with open(paths["focus"], newline="", encoding="utf-8") as fh:
        got = next(csv.reader(fh))
    assert got == want
    assert _focus_problems(paths["focus"]) == []
    # the checker finds what is off in the public sample itself: timestamps written
    # "2024-09-01 00:00:00" (FOCUS 1.0: ISO 8601 in UTC, "...T00:00:00Z") and 7 rows with
    # ChargeFrequency "Usage-based" and no ContractedCost
    from collections import Counter
    found = Counter(p.split(": ", 1)[1].split("=")[0].split(" is")[0]
                    for p in _focus_problems(SAMPLE))
    assert found == {**{c: 1000 for c in FOCUS_DATETIMES}, "ChargeFrequency": 7,
                     "ContractedCost": 7}
