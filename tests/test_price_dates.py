"""Honest dates (issue 25 item 3): the plan header shows the oldest and newest publication date
of the prices it pays and which are estimates; explain shows them per cluster. Dates are
re-derived here from the raw catalog file, not from the code under test."""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml

from gpulease.catalog import provenance
from gpulease.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _run(argv) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    return code, out.getvalue()


def _catalog_raw(plan: dict) -> dict:
    return json.loads((ROOT / "gpulease" / "catalog" / "data" /
                       f"{plan['catalog']['version']}.json").read_text())


def test_source_date_is_the_oldest_publication_never_the_read_day():
    sources = {"a": {"published": "2026-03-13", "retrieved": "2026-12-02"},
               "b": {"published": "2025-09-14"}, "c": {"retrieved": "2026-12-03"}}
    assert provenance.source_date(sources, "a,b") == "2025-09-14"
    assert provenance.source_date(sources, "a,c") == "2026-03-13"
    assert provenance.source_date(sources, "c") is None       # read, never published: unknown
    assert provenance.source_date(sources, "missing") is None
    assert provenance.source_date(sources, "") is None


@pytest.fixture(scope="module")
def prod():
    code, out = _run(["plan", "--stack", "prod", "--json"])
    assert code == 0
    return json.loads(out)


def _expected_date(raw: dict, ids: str):
    dates = [raw["sources"][s]["published"] for s in ids.split(",")
             if "published" in raw["sources"].get(s, {})]
    return min(dates) if dates else None


def test_each_price_the_plan_pays_is_dated_by_its_own_sources(prod):
    raw = _catalog_raw(prod)
    rows = {(o["cloud"], o["region"], o["instance_type"]): o for o in raw["offerings"]}
    used = prod["prices"]["used"]
    assert used
    columns = {"on-demand": "on_demand", "spot": "spot", "1y commitment": "commit_1y",
               "3y commitment": "commit_3y"}
    for c in prod["clusters"]:
        mine = [u for u in used if u["cluster"] == c["name"]]
        assert mine == c["prices"], c["name"]
        row = rows[(c["cloud"], c["region"], c["instance_type"])]
        for u in mine:
            if u["unit"] != "node-hour":
                continue
            word = next(w for w in columns if f"{c['instance_type']} {w}" in u["what"])
            col = columns[word]
            assert u["source"] == row["price_sources"][col], u
            assert u["date"] == _expected_date(raw, u["source"]), u
            price = (row["zone_spot_usd"][c["zone"]] if col == "spot" and c.get("zone")
                     else row[f"{col}_usd"])
            assert u["usd"] == price, u
    # every cluster pays at least one dated or undated offering price
    assert all(c["prices"] for c in prod["clusters"])


def test_the_plan_header_shows_the_span_and_the_undated(prod):
    raw = _catalog_raw(prod)
    p = prod["prices"]
    dates = [u["date"] for u in p["used"] if u["date"]]
    assert p["oldest"] == min(dates) and p["newest"] == max(dates)
    assert p["oldest"] != raw["as_of"] or p["newest"] != raw["as_of"]
    # AWS spot prices from SkyPilot's catalog carry no publication date: undated, not the
    # catalog's build date
    spot = [u for u in p["used"] if "spot" in u["what"] and u["source"] == "skypilot-aws"]
    assert spot and all(u["date"] is None for u in spot)
    assert all(u in p["undated"] for u in spot)
    assert p["catalog_estimates"] == sum(1 for s in raw["storage"] if s.get("estimate")) + \
        sum(1 for e in raw["egress"] if e.get("estimate"))
    code, text = _run(["plan", "--stack", "prod"])
    head = text.splitlines()[:2]
    assert "prices as of" not in head[0] and f"(built {raw['as_of']})" in head[0]
    assert head[1].startswith("Prices: ")
    assert f"published {p['oldest']} to {p['newest']}" in head[1]
    assert f"date unknown: {len(p['undated'])} (" in head[1]
    assert spot[0]["what"] in head[1]
    assert f"the catalog's {p['catalog_estimates']} estimated storage/egress prices are not " \
           "used" in head[1]


def _estimate_stack(tmp_path) -> Path:
    """A stack whose dataset lives where the catalog has no regional S3 figure."""
    raw = json.loads((ROOT / "gpulease" / "catalog" / "data" / "2026.12.03.1.json").read_text())
    est = sorted(s["region"] for s in raw["storage"]
                 if s["cloud"] == "aws" and s["storage_class"] == "STANDARD" and s.get("estimate"))
    gpu_regions = {o["region"] for o in raw["offerings"] if o["cloud"] == "aws" and o["gpu"] == "L4"}
    region = next(r for r in est if r in gpu_regions)
    doc = {"config": {"gpulease:owner": "ml", "gpulease:cost_center": "cc",
                      "gpulease:budget_monthly_usd": 100000,
                      "gpulease:catalog_version": "2026.12.03.1",
                      "gpulease:clouds": {"aws": {"regions": [region]}},
                      "gpulease:storage": [{"name": "data", "size_tb": 1,
                                            "home": f"aws:{region}"}],
                      "gpulease:clusters": [{"name": "job", "gpu": "L4", "gpus": 1,
                                             "hours_per_month": 100, "priority": 5,
                                             "dataset": "data"}]}}
    f = tmp_path / "Pulumi.est.yaml"
    f.write_text(yaml.safe_dump(doc))
    return f, region


def test_estimates_are_named_in_the_header_and_per_dataset(tmp_path):
    f, region = _estimate_stack(tmp_path)
    code, out = _run(["plan", "--config", str(f), "--json"])
    assert code == 0, out
    plan = json.loads(out)
    est = plan["prices"]["estimates"]
    tiers = [t["storage_class"] for t in plan["storage"][0]["tiers"]]
    # every tier of the dataset is priced by an estimated row in that region, nothing else
    assert [u["what"] for u in est] == [f"storage aws:{region} {t}" for t in tiers]
    assert all("no regional figure" in u["estimate"] for u in est)
    code, text = _run(["plan", "--config", str(f)])
    head = text.splitlines()[1]
    assert f"estimates: {len(est)} (storage aws:{region} STANDARD (" in head, head
    assert "no estimate among them" not in head
    code, text = _run(["explain", "--config", str(f)])
    assert code == 0
    storage_part = text.split("Storage data")[1]
    assert f"storage aws:{region} STANDARD" in storage_part and "estimate: no regional" \
        in storage_part
    code, out = _run(["explain", "--config", str(f), "--json"])
    doc = json.loads(out)
    assert doc["storage"][0]["prices"][0]["estimate"]
    assert doc["prices"]["estimates"] == est


def test_explain_shows_each_clusters_prices(prod):
    code, text = _run(["explain", "--stack", "prod"])
    assert code == 0
    for c in prod["clusters"]:
        block = text.split(f"Cluster {c['name']} ")[1].split("\nCluster ")[0]
        line = next(ln for ln in block.splitlines() if ln.startswith("  Prices: "))
        for u in c["prices"]:
            assert u["what"] in line and (u["date"] or "date unknown") in line, (c["name"], u)
    code, out = _run(["explain", "--stack", "prod", "--json"])
    doc = json.loads(out)
    assert {c["name"]: c["prices"] for c in doc["clusters"]} == \
        {c["name"]: c["prices"] for c in prod["clusters"]}


def test_a_window_quote_is_a_dated_estimate(tmp_path, monkeypatch):
    """A published Capacity Block rate is an estimate for any window (availability not
    checked), dated by when it was published."""
    from tests.test_windows_components import JOB, _stack_file

    monkeypatch.chdir(ROOT)
    f = _stack_file(tmp_path, JOB)
    code, out = _run(["explain", "--config", str(f), "--now", "2026-12-03T09:00:00Z", "--json"])
    assert code == 0
    c = json.loads(out)["clusters"][0]
    q = c["window"]["quote"]
    [u] = [u for u in c["prices"] if u["what"].startswith("capacity block")]
    assert u["usd"] == q["hourly_usd"] and u["source"] == q["source"]
    assert u["date"] == q["quoted_at"][:10]
    assert u["estimate"] == "a published rate, availability not checked"
