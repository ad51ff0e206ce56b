"""Commitments in catalog 2026.12.03.2 (issue 22 item 3): prices held to their sources, and
every commitment a cloud sells without a price here says which sources were read for it."""
from __future__ import annotations

import json

import pytest

from gpulease.catalog import load_catalog
from tools import catalog_snapshot as snapshot
from gpulease.catalog.invariants import price_problems

NEW = load_catalog(version="2026.12.03.2")
OLD = load_catalog(version="2026.12.03.1")
ROWS = {(r["cloud"], r["region"], r["instance_type"], r.get("accelerator_type"),
         r["gpus_per_node"]): r for r in NEW.raw["offerings"]}

# Quoted from tsaol/aws-gpu data/all_gpu_instances.js at 77fcd9f ("Last updated: 2026-01-21"),
# ap-east-1: {"onDemand": 1.5488, "reserved": 0.97574} for g5.xlarge, {"onDemand": 25.0764,
# "reserved": 15.79813} for g5.48xlarge, {"onDemand": 8.7324, "reserved": 5.50141} for
# g5.12xlarge; the 2025-11-30 raw export (gpu_instances_raw.json at 2d0108c) has no ap-east-1.
QUOTED_1Y = {("aws", "ap-east-1", "g5.xlarge", None, 1): (1.5488, 0.97574),
             ("aws", "ap-east-1", "g5.48xlarge", None, 8): (25.0764, 15.79813),
             ("aws", "ap-east-1", "g5.12xlarge", None, 4): (8.7324, 5.50141)}


@pytest.mark.parametrize("key", sorted(QUOTED_1Y, key=str))
def test_new_commitments_are_the_quoted_source_figures(key):
    od, c1 = QUOTED_1Y[key]
    row = ROWS[key]
    assert row["on_demand_usd"] == pytest.approx(od, abs=1e-4)
    assert row["commit_1y_usd"] == pytest.approx(c1, abs=1e-4)
    assert row["price_sources"]["commit_1y"] == snapshot.TSAOL_2026
    assert snapshot.TSAOL_2026 in row["source"].split(",")
    assert "1-year Standard Reserved Instance, No Upfront" in row["notes"]
    # no 3-year figure in that export: still null, and the note says so
    assert row["commit_3y_usd"] is None and "no 3-year figure" in row["notes"]
    old = next(o for o in OLD.offerings if (o.cloud, o.region, o.instance_type) == key[:3])
    assert old.commit_1y_usd is None          # what 2026.12.03.2 added


def test_the_new_source_is_cited_with_commit_and_date():
    src = NEW.sources[snapshot.TSAOL_2026]
    assert "77fcd9fe1d0652fd07b830e5ed030d61da87923e" in src["url"]
    assert src["published"] == "2026-01-21" and src["retrieved"] == "2026-12-03"
    assert snapshot.TSAOL_2026 not in OLD.sources


def test_only_commitments_and_notes_changed_against_the_previous_version():
    old = {(r["cloud"], r["region"], r["instance_type"], r.get("accelerator_type"),
            r["gpus_per_node"]): r for r in OLD.raw["offerings"]}
    assert old.keys() == ROWS.keys()
    changed = {k for k, r in ROWS.items() for c in ("on_demand_usd", "spot_usd",
                                                    "commit_1y_usd", "commit_3y_usd")
               if r.get(c) != old[k].get(c)}
    assert changed == {k for k in ROWS if k[:3] in {("aws", "ap-east-1", f"g5.{s}")
                                                   for s in ("xlarge", "2xlarge", "4xlarge",
                                                             "8xlarge", "12xlarge", "16xlarge",
                                                             "24xlarge", "48xlarge")}}


def test_commitment_invariants_hold_on_every_row():
    for row in NEW.raw["offerings"]:
        assert price_problems(row) == [], (row["region"], row["instance_type"])
        if row.get("commit_1y_usd") and row.get("on_demand_usd"):
            assert row["commit_1y_usd"] < row["on_demand_usd"]


def test_every_commitment_sold_without_a_price_says_what_was_read():
    unpriced = [r for r in NEW.raw["offerings"]
                if "commitment" in r["purchase_options"] and r.get("commit_1y_usd") is None]
    assert len(unpriced) == 210          # 218 in 2026.12.03.1, less the 8 g5 rows above
    for r in unpriced:
        note = r["notes"]
        assert "commit_1y/commit_3y: sold" in note and "no citable price" in note, r
        assert snapshot.SEARCHED in note
        if r["cloud"] == "aws":
            assert "Savings Plans" in note and "instances.vantage.sh" in note
        elif r.get("accelerator_type"):
            assert f"Commitment v1: Nvidia Tesla {r['gpu']} GPU" in note
        else:
            assert "Cyclenerd export" in note


@pytest.mark.parametrize("itype,expect", [
    ("p5en.48xlarge", "the 2026-01-21 export lists on-demand only"),
    ("p6-b200.48xlarge", "the 2026-01-21 export lists on-demand only"),
    ("p3.2xlarge", "the 2025-11-30 raw export lists no Reserved Instance here"),
])
def test_aws_types_sold_with_savings_plans_only_keep_commitment(itype, expect):
    rows = [r for r in NEW.raw["offerings"] if r["instance_type"] == itype]
    assert rows
    for r in rows:
        assert "commitment" in r["purchase_options"]        # Savings Plans are sold
        assert r["commit_1y_usd"] is None and expect in r["notes"], r["region"]


def test_gcp_gaps_name_the_export_fact():
    mega = ROWS[("gcp", "us-central1", "a3-megagpu-8g", None, 8)]["notes"]
    assert "in 9 other regions" in mega and "not in us-central1" in mega
    ultra = ROWS[("gcp", "us-central1", "a3-ultragpu-8g", None, 8)]["notes"]
    assert "has no a3-ultragpu-8g machine type" in ultra
    a2u = ROWS[("gcp", "us-central1", "a2-ultragpu-8g", None, 8)]["notes"]
    assert "no commitment in any region" in a2u


def test_tsaol_table_reads_the_js_export(tmp_path):
    js = tmp_path / "all.js"
    js.write_text("// Auto-generated\n// Last updated: 2026-01-21\nconst allGPUInstances = "
                  + json.dumps([{"name": "g5.xlarge", "pricing": {
                      "ap-east-1": {"onDemand": 1.5488, "reserved": 0.97574},
                      "us-east-1": {"onDemand": 1.006}}}]) + ";\n", encoding="utf-8")
    t = snapshot.tsaol_table(js)
    assert t[("ap-east-1", "g5.xlarge")] == {"od": 1.5488, "c1": 0.97574}
    assert t[("us-east-1", "g5.xlarge")] == {"od": 1.006, "c1": None}


def test_the_builder_refuses_the_new_version_without_its_input(tmp_path):
    with pytest.raises(SystemExit, match="needs --vantage-2026"):
        snapshot.build(tmp_path, tmp_path, tmp_path, None, "2026.12.03.2", None)
    with pytest.raises(SystemExit, match="--version must be one of"):
        snapshot.build(tmp_path, tmp_path, tmp_path, None, "2026.12.04", None)


def test_bench_counts_the_coverage_of_both_versions(capsys):
    from bench.commitments import coverage, family, main

    new, old = coverage(NEW.offerings), coverage(OLD.offerings)
    assert (old["unpriced"], new["unpriced"]) == (218, 210)
    assert new["priced_1y"] - old["priced_1y"] == 8 and new["priced_3y"] == old["priced_3y"]
    assert new["families"]["aws g5"] == {"sold": 120, "priced_1y": 120, "priced_3y": 112,
                                         "unpriced": 0}
    assert new["families"]["gcp n1 + T4"]["unpriced"] == new["families"]["gcp n1 + T4"]["sold"]
    assert family(next(o for o in NEW.offerings if o.instance_type == "a3-megagpu-8g")) \
        == "a3-megagpu"
    assert main(["--catalog-version", "2026.12.03.2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["2026.12.03.2"]["unpriced"] == 210
    assert main(["--catalog", "/nonexistent/c.json"]) == 2
    err = capsys.readouterr().err
    assert "/nonexistent/c.json" in err and "Traceback" not in err


@pytest.mark.parametrize("options,said", [
    (["on_demand", "spot", "reservation", "commitment"], True),
    (["on_demand", "spot", "reservation"], False),     # not sold that way: nothing to explain
])
def test_the_rationale_says_an_unpriced_commitment_is_sold(options, said):
    from gpulease.policy import decide
    from tests.test_policy_fixtures import catalog, cluster, offering, stack

    rows = [{**offering("aws", "us-east-1", "p5.48xlarge", rdma="efa", od=60.0, c1=None,
                        c3=None), "purchase_options": options,
             "purchase_options_source": "aws-purchase-options"}]
    d = decide(stack([cluster(priority=10, hours=100)]), catalog(rows)).clusters[0]
    assert "capacity reservation at the on-demand rate: no 1y commitment price" in d.rationale
    assert ("it is sold with one; the catalog row's notes say which sources were read"
            in d.rationale) is said
