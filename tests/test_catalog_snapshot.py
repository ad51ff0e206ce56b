"""The default snapshot, 2026.12.03.2 (format /2): coverage, zones, storage/egress everywhere,
provenance, prices built from SKUs, purchase options."""
from __future__ import annotations

import re

import pytest

from gpulease.catalog import TIER_CLASSES, load_catalog
from gpulease.model import CLOUDS

CAT = load_catalog()
RAW = CAT.raw
GPUS = {"T4", "A10G", "L4", "L40S", "V100", "A100", "A100-80GB", "H100", "H200", "B200", "P4",
        "P100"}
ISO = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def test_is_the_default_format_2_and_loads_with_only_the_estimates_warning():
    assert CAT.version == "2026.12.03.2" and CAT.format == "gpulease-catalog/2"
    assert [w.path for w in CAT.warnings] == ["storage/egress"], [str(w) for w in CAT.warnings]
    assert CAT.data_dates and all(CAT.data_dates.values())


def test_covers_at_least_50_regions_across_both_clouds_and_every_gpu():
    regions = {(o.cloud, o.region) for o in CAT.offerings}
    assert len(regions) >= 50
    assert {c for c, _ in regions} == set(CLOUDS)
    assert set(CAT.gpus) == GPUS
    # B200: p6-b200.48xlarge on AWS; GCP's a4-highgpu-8g is left out: SkyPilot lists its host
    # at 0.0 (a missing price, never free) and the Billing Catalog export has no a4 row
    assert {o.cloud for o in CAT.offerings_for(gpu="B200")} == {"aws"}
    assert CAT.raw["generated_by"]["invariants_rejected"]["finite_positive"] >= 10


def test_every_row_has_zones_and_spot_lands_in_one_of_them():
    for o in CAT.offerings:
        assert o.zones, o.key
        assert set(dict(o.zone_spot_usd)) <= set(o.zones), o.key
        if o.zone_spot_usd:
            assert o.spot_usd == min(u for _, u in o.zone_spot_usd), o.key


def test_assumed_zones_say_so():
    for row in RAW["offerings"]:
        if row["zones_source"].startswith("assumed"):
            assert row["instance_type"].startswith("g6e.") and "ASSUMED" in row["notes"]


@pytest.mark.parametrize("cloud", CLOUDS)
def test_every_offering_region_prices_storage_and_egress(cloud):
    for region in {o.region for o in CAT.offerings_for(cloud=cloud)}:
        prices = [CAT.storage_price(cloud, region, c) for c in TIER_CLASSES[cloud]]
        assert [p.min_storage_days for p in prices] == (
            [0, 30, 90, 180] if cloud == "aws" else [0, 30, 90, 365])
        assert prices[0].retrieval_usd_per_gb == 0 and all(
            p.retrieval_usd_per_gb > 0 for p in prices[1:]), (cloud, region)
        other = "gcp" if cloud == "aws" else "aws"
        inter = CAT.egress_usd_per_gb(cloud, region, cloud, "elsewhere-1")
        cross = CAT.egress_usd_per_gb(cloud, region, other, "x")
        assert 0 < inter <= cross < 1, (cloud, region)


def test_gcp_inter_continent_egress_is_dearer_than_same_continent():
    same = CAT.egress_usd_per_gb("gcp", "europe-west4", "gcp", "europe-west1")
    far = CAT.egress_usd_per_gb("gcp", "europe-west4", "gcp", "us-central1")
    assert same < far


def test_every_row_cites_known_dated_sources():
    srcs = RAW["sources"]
    for sid, s in srcs.items():
        assert s["url"].startswith("https://") and ISO.match(s["retrieved"]), sid
    for section in ("offerings", "storage", "egress"):
        for i, row in enumerate(RAW[section]):
            ids = [x for x in row["source"].split(",") if x]
            assert ids and all(x in srcs for x in ids), (section, i, ids)
            if section == "offerings":
                assert ISO.match(row["as_of"])
                for col, sid in row["price_sources"].items():
                    assert sid is None or all(x in srcs for x in sid.split(",")), (i, col, sid)
                    if sid is None and row[f"{col}_usd"] is None:
                        assert row["notes"], (i, col)
                for parts in (row.get("price_components") or {}).values():
                    for p in parts:
                        assert p["source"] in srcs and ISO.match(p["as_of"]), (i, p)
                assert row["purchase_options_source"], i
                assert all(x in srcs for x in row["purchase_options_source"].split(",")), i


def test_disagreements_between_sources_are_noted():
    row = next(r for r in RAW["offerings"] if (r["cloud"], r["region"], r["instance_type"])
               == ("gcp", "us-central1", "a3-highgpu-8g"))
    # Billing Catalog (Cyclenerd 2026-07-30) kept; SkyPilot's 43.07 recorded
    assert row["on_demand_usd"] == pytest.approx(88.49, abs=0.01)
    assert row["price_sources"]["on_demand"] == "cyclenerd-gcp-2026-07"
    assert {"column": "on_demand", "source": "skypilot-gcp", "usd": 43.0662,
            "as_of": "2026-05-20", "diff_pct": -51.3} in row["cross_checks"]
    assert row["commit_1y_usd"] < row["on_demand_usd"]


def test_commitments_and_spot_are_consistent_with_on_demand():
    for o in CAT.offerings:
        for v in (o.spot_usd, o.commit_1y_usd, o.commit_3y_usd):
            if v is not None and o.on_demand_usd is not None:
                assert v <= o.on_demand_usd, o.key


def test_older_versions_still_load():
    for v in ("2026.12.02", "2026.12.03", "2026.12.03.1"):
        assert load_catalog(version=v).version == v
