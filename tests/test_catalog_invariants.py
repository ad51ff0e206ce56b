"""Price invariants (gpulease/catalog/invariants.py): errors at load naming the row, drops counted in
the build, and the default catalog's GCP prices built from SKUs."""
from __future__ import annotations

import copy

import pytest

from gpulease.catalog import load_catalog, parse_catalog
from gpulease.catalog.invariants import (INVARIANTS, PLAUSIBLE_USD_PER_GPU_HOUR, enforce,
                                         price_problems)
from gpulease.errors import CatalogError

CAT = load_catalog()


def _row(**kw) -> dict:
    row = {"cloud": "gcp", "region": "us-central1", "instance_type": "n1-highmem-4",
           "gpu": "T4", "gpus_per_node": 1, "gpu_memory_gb": 16, "vcpus": 4, "memory_gb": 26,
           "network_gbps": 10, "rdma": "none", "on_demand_usd": 0.5866, "spot_usd": 0.2518,
           "commit_1y_usd": None, "commit_3y_usd": None, "zones": ["us-central1-a"],
           "accelerator_type": "nvidia-tesla-t4", "gpu_sku_usd": {"on_demand": 0.35}}
    row.update(kw)
    return row


def _load(row: dict):
    doc = {"format": "gpulease-catalog/1", "version": "t.1", "as_of": "2026-12-03",
           "offerings": [row]}
    return parse_catalog(doc, source="t.json")


@pytest.mark.parametrize("change,invariant,text", [
    ({"on_demand_usd": 0.19}, "gpu_sku_floor",
     "on_demand_usd 0.19 is below the 0.35 its GPUs alone cost (gpu_sku_usd.on_demand)"),
    ({"on_demand_usd": 1e-300}, "per_gpu_plausible", "USD per GPU-hour (1 GPUs), outside the "
                                                     "plausible 0.01-60.0"),
    ({"spot_usd": 0.9}, "spot_le_on_demand", "spot_usd 0.9 is above on_demand_usd 0.5866"),
    ({"commit_1y_usd": 0.6}, "commitment_lt_on_demand", "commit_1y_usd 0.6 is not below"),
    ({"price_components": {"on_demand": [{"part": "host", "usd": 0.2366, "source": "s"},
                                         {"part": "GPU", "usd": 0.3, "source": "s"}]}},
     "components_sum", "on_demand_usd 0.5866 is not the sum of its price_components"),
])
def test_each_invariant_is_a_located_load_error(change, invariant, text):
    row = _row(**change)
    assert invariant in {p[0] for p in price_problems(row)}
    with pytest.raises(CatalogError) as e:
        _load(row)
    msg = str(e.value)
    assert "offerings[0] (gcp us-central1 n1-highmem-4)" in msg and text in msg


def test_the_plausible_band_is_one_documented_constant():
    lo, hi = PLAUSIBLE_USD_PER_GPU_HOUR
    assert 0 < lo < 0.1 and 15 < hi <= 100   # cheapest real GPU-hour ~0.10, dearest ~15
    _load(_row())                              # the real row loads


def test_the_build_drops_and_counts_what_breaks_an_invariant():
    row = _row(on_demand_usd=0.19, spot_usd=0.2518, zone_spot_usd={"us-central1-a": 0.2518},
               price_sources={"on_demand": "x", "spot": "y"}, notes="")
    dropped = enforce(row)
    invs = [d[0] for d in dropped]
    # the host-only on-demand price is below its GPU; spot then has no on-demand to compare
    assert invs[0] == "gpu_sku_floor" and row["on_demand_usd"] is None
    assert row["price_sources"]["on_demand"] is None and "gpu_sku_floor" in row["notes"]
    assert price_problems(row) == []


def test_the_default_catalog_holds_every_invariant_and_counts_its_build_drops():
    assert all(price_problems(r) == [] for r in CAT.raw["offerings"])
    counts = CAT.raw["generated_by"]["invariants_rejected"]
    assert set(counts) == set(INVARIANTS) and all(isinstance(v, int) for v in counts.values())


def test_the_previous_snapshot_priced_n1_nodes_below_their_gpus():
    # 2026.12.03 priced GCP N1 + T4/V100 nodes as the host alone; with the GPU SKUs the new
    # snapshot records, the floor invariant rejects every one of them.
    old = load_catalog(version="2026.12.03")
    floors = {(o.region, o.accelerator_type, o.gpus_per_node): dict(r.get("gpu_sku_usd") or {})
              for o, r in zip(CAT.offerings, CAT.raw["offerings"]) if o.accelerator_type}
    rejected = 0
    for o in old.offerings:
        f = floors.get((o.region, o.accelerator_type, o.gpus_per_node))
        if o.accelerator_type and f and o.on_demand_usd is not None:
            raw = {"gpus_per_node": o.gpus_per_node, "on_demand_usd": o.on_demand_usd,
                   "gpu_sku_usd": f}
            rejected += any(p[0] == "gpu_sku_floor" for p in price_problems(raw))
    assert rejected >= 20


@pytest.mark.parametrize("region,itype,gpu,n", [("us-central1", "n1-highmem-4", "T4", 1),
                                                ("us-central1", "n1-highmem-8", "V100", 1)])
def test_n1_nodes_cost_host_plus_gpu_with_each_part_cited(region, itype, gpu, n):
    o = next(x for x in CAT.offerings if (x.region, x.instance_type, x.gpu, x.gpus_per_node)
             == (region, itype, gpu, n))
    raw = next(r for r in CAT.raw["offerings"] if (r["region"], r["instance_type"], r["gpu"])
               == (region, itype, gpu))
    parts = raw["price_components"]["on_demand"]
    assert [p["source"] for p in parts] == ["cyclenerd-gcp-2026-07", "skypilot-gcp"]
    assert o.on_demand_usd == pytest.approx(sum(p["usd"] for p in parts), abs=1e-4)
    assert o.on_demand_usd >= raw["gpu_sku_usd"]["on_demand"]
    # SkyPilot prices the same host + GPU alike (both read Google's SKUs)
    assert o.on_demand_usd == pytest.approx({"T4": 0.5866, "V100": 2.9532}[gpu], abs=0.01)
    assert o.commit_1y_usd is None and "GPU's" in raw["notes"]


def test_p5_has_commitment_prices_where_aws_publishes_them():
    for region in ("us-east-1", "us-west-2"):
        o = CAT.offering("aws", region, "p5.48xlarge")
        assert o.commit_1y_usd == pytest.approx(43.344) and o.commit_3y_usd == pytest.approx(23.7773)
        assert o.commit_3y_usd < o.commit_1y_usd < o.on_demand_usd
    # eu-central-1: no source read here lists p5.48xlarge there (SkyPilot, vantage): no row
    assert not CAT.offerings_for(gpu="H100", cloud="aws", region="eu-central-1") or all(
        o.instance_type != "p5.48xlarge"
        for o in CAT.offerings_for(gpu="H100", cloud="aws", region="eu-central-1"))


def test_a3_and_a2_carry_resource_based_commitments_where_the_export_prices_them():
    # A2 Ultra is sold with CUDs too, but the Billing Catalog export carries no commitment
    # figure for it (its bundled local SSD): no price, and every row says so
    for itype in ("a3-highgpu-8g", "a3-megagpu-8g", "a2-highgpu-8g", "a2-ultragpu-8g"):
        rows = [o for o in CAT.offerings if o.instance_type == itype]
        committed = [o for o in rows if o.commit_1y_usd is not None]
        assert bool(committed) == (itype != "a2-ultragpu-8g"), itype
        assert all(o.sells("commitment") for o in rows), itype
        for o in rows:
            raw = next(r for r in CAT.raw["offerings"] if (r["region"], r["instance_type"])
                       == (o.region, itype))
            assert o.commit_1y_usd is not None or "commit_1y" in raw["notes"], (itype, o.region)


def test_edited_rows_keep_failing_loudly():
    doc = copy.deepcopy(CAT.raw)
    i = next(k for k, r in enumerate(doc["offerings"]) if r.get("gpu_sku_usd", {}).get(
        "on_demand"))
    doc["offerings"][i]["on_demand_usd"] = doc["offerings"][i]["gpu_sku_usd"]["on_demand"] / 2
    with pytest.raises(CatalogError, match="its GPUs alone cost"):
        parse_catalog(doc, source="edited.json")
