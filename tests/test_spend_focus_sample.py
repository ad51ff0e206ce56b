"""`gpulease spend` on the FinOps Foundation's public FOCUS 1.0 sample (tests/data/focus-sample,
CC BY 4.0): every row classified once, the total conserved to the cent; bad --bill / --month
refused with exit 2 before anything is planned."""
from __future__ import annotations

import csv
import json
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from gpulease import money
from gpulease.cli import main
from gpulease.spend import classify as C
from gpulease.spend import reconcile as R
from gpulease.spend import sources as S

SAMPLE = Path(__file__).parent / "data" / "focus-sample" / "focus_sample.csv"
#: the smallest plan document the reconciliation reads (what `plan --json` has, trimmed)
PLAN = {"stack": "dev", "environment": "dev", "clusters": [], "resources": [],
        "totals": {"monthly_usd": 0.0, "by_cluster": {"shared": 0.0}}}


def _python_total() -> tuple[Decimal, int, dict]:
    """The sample's total and category counts read with csv + Decimal, not DuckDB."""
    total, n, cats = Decimal(0), 0, {}
    with SAMPLE.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            total += Decimal(row["BilledCost"])
            n += 1
            key = (row["ChargeCategory"], row["ChargeClass"])
            cats[key] = cats.get(key, 0) + 1
    return total, n, cats


def _spend(plan=PLAN, path=SAMPLE):
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    src = S.open_source(con, str(path))
    groups, total, rows = C.read_groups(con, src)
    bill = C.classify(groups, C.PlanIndex.of(plan), source_total=total, source_rows=rows,
                      kind=src.kind)
    return src, bill, R.reconcile(plan, bill, source=str(path))


def test_every_row_classified_and_the_total_conserved_to_the_cent():
    total, n, cats = _python_total()
    src, bill, doc = _spend()
    assert src.kind == S.FOCUS
    assert n == 1000 and bill.source_rows == 1000
    assert bill.source_total == total                      # exact, all 11 decimals
    assert sum(doc["rows"].values()) == 1000               # every row once
    assert bill.conserved and doc["conserved"] is True
    assert doc["total_billed_usd"] == float(money.usd(total)) == 20.52
    assert sum(money.usd(v) for v in doc["classes_usd"].values()) == money.usd(total)
    # the sample's credit and correction rows land in their classes
    assert doc["rows"]["credit"] == sum(v for (cat, _), v in cats.items() if cat == "Credit")
    assert doc["rows"]["adjustment"] == sum(
        v for (cat, cls), v in cats.items() if cat == "Adjustment" or cls == "Correction")
    assert doc["rows"]["matched"] == 0                     # no gpulease tags in the sample
    # corrections are provisional; the sample's lines are from 2024, none younger than 48 h
    assert doc["provisional"]["rows"] == sum(
        v for (_, cls), v in cats.items() if cls == "Correction")


def test_tagged_rows_match_by_tag_and_resources_by_name(tmp_path):
    """The sample with gpulease tags on two rows and a plan naming one resource: those rows are
    matched (by tag, by name), the rest unmatched, the total unchanged."""
    rows = list(csv.DictReader(SAMPLE.open(newline="", encoding="utf-8")))
    usage = [r for r in rows if r["ChargeCategory"] == "Usage"]
    usage[0]["Tags"] = json.dumps({"gpulease-cluster": "train", "gpulease-environment": "dev"})
    usage[1]["Tags"] = json.dumps({"user:gpulease-cluster": "train"})     # AWS FOCUS export form
    usage[2]["Tags"] = json.dumps({"gpulease-cluster": "train", "gpulease-environment": "prod"})
    usage[3]["Tags"] = "NULL"
    usage[3]["ResourceId"] = "bucket-of-the-plan"
    out = tmp_path / "tagged.csv"
    with out.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    plan = {**PLAN, "clusters": [{"name": "train", "parts": [], "costs": {}}],
            "resources": [{"physical_name": "bucket-of-the-plan", "cluster": "shared"}],
            "totals": {"monthly_usd": 0.0, "by_cluster": {"train": 0.0, "shared": 0.0}}}
    _, bill, doc = _spend(plan, out)
    assert doc["rows"]["matched"] == 3
    by = {c["cluster"]: c for c in doc["clusters"]}
    expect_train = money.usd(Decimal(usage[0]["BilledCost"]) + Decimal(usage[1]["BilledCost"]))
    assert by["train"]["billed_usd"] == float(expect_train)
    assert by["shared"]["billed_usd"] == float(money.usd(Decimal(usage[3]["BilledCost"])))
    other_env = [line for line in bill.lines if line.group.env_tag == "prod"]
    assert [line.cls for line in other_env] == ["unmatched"]
    assert "environment 'prod'" in other_env[0].note
    assert bill.conserved and doc["total_billed_usd"] == 20.52


def test_apportioned_classes_add_up_to_the_rounded_total():
    exact = {"matched": Decimal("0.005"), "unmatched": Decimal("0.005"), "credit": Decimal(0)}
    got = R.apportion(exact, Decimal("0.010"))
    assert sum(got.values()) == Decimal("0.01")      # not 0.02, which rounding each gives


@pytest.mark.parametrize("bill,needle", [
    ("/nonexistent/bill.csv", "/nonexistent/bill.csv: no such file or folder"),
    ("README.md", "README.md: unknown file type '.md'"),
    ("tests/data/legacy_state", "the folder holds no .parquet"),
])
def test_bad_bill_exits_2_naming_the_path_and_the_fix(bill, needle, capsys):
    assert main(["spend", "--stack", "dev", "--bill", bill]) == 2
    err = capsys.readouterr().err
    assert needle in err and "give a FOCUS 1.0-1.2 CSV or Parquet file" in err
    assert "Traceback" not in err


def test_a_csv_that_is_no_bill_exits_2(tmp_path, capsys):
    f = tmp_path / "x.csv"
    f.write_text("a,b\n1,2\n")
    assert main(["spend", "--stack", "dev", "--bill", str(f)]) == 2
    assert "not a bill this command reads (columns: a, b)" in capsys.readouterr().err


def test_bad_month_exits_2(capsys):
    assert main(["spend", "--stack", "dev", "--bill", str(SAMPLE), "--month", "2026-13"]) == 2
    assert "--month: '2026-13' is not a month; write YYYY-MM" in capsys.readouterr().err


def test_cli_json_on_the_sample(capsys):
    """End to end: the dev stack's plan (run in-process) beside the sample."""
    assert main(["spend", "--stack", "dev", "--bill", str(SAMPLE), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [c["cluster"] for c in doc["clusters"]] == ["sandbox", "shared"]
    assert doc["total_billed_usd"] == 20.52 and doc["conserved"] is True
    assert sum(doc["rows"].values()) == 1000
    assert set(doc["clusters"][0]) >= {"cluster", "planned_usd", "billed_usd", "effective_usd",
                                       "diff_pct", "causes"}
    assert doc["clusters"][0]["planned_usd"] > 0 and doc["clusters"][0]["billed_usd"] == 0
