"""Refresh orchestration without clouds: versions, checksums, hand-edit detection, diff, scope."""
from __future__ import annotations

import datetime as dt
import json
import warnings

import pytest

from gpulease.catalog import load_catalog, parse_catalog
from gpulease.catalog.refresh import (check_writable, checksum, diff_catalogs, file_state,
                                      next_version, refresh, render_diff, resolve_out,
                                      select_regions)
from gpulease.errors import InputError
from tests.fakes.gcp_billing import FakeBilling
from tests.test_refresh_gcp import NOW, _base_catalog, _skus, clients

warnings.filterwarnings("ignore", category=FutureWarning)
TODAY = dt.date(2026, 12, 9)


def test_next_version_and_resolve_out(tmp_path):
    assert next_version(tmp_path, TODAY) == "2026.12.09"
    (tmp_path / "2026.12.09.json").write_text("{}")
    (tmp_path / "2026.12.09.1.json").write_text("{}")
    assert next_version(tmp_path, TODAY) == "2026.12.09.2"
    assert next_version(tmp_path / "empty", TODAY, avoid=("2026.12.09",)) == "2026.12.09.1"
    assert resolve_out(str(tmp_path), TODAY) == (tmp_path / "2026.12.09.2.json", "2026.12.09.2")
    # a non-version file name never reuses a version a file beside it carries (issue 13)
    assert resolve_out(str(tmp_path / "mine.json"), TODAY) == (tmp_path / "mine.json",
                                                               "2026.12.09.2")
    assert resolve_out(str(tmp_path / "2027.01.01.json"), TODAY)[1] == "2027.01.01"


def test_versions_are_unique_across_shipped_and_written_catalogs(tmp_path):
    from gpulease.catalog import available_versions

    shipped = available_versions()[-1]
    day = dt.date(*map(int, shipped.split(".")[:3]))
    # today's date is a shipped version: a file named anything else gets the next free one
    _, v = resolve_out(str(tmp_path / "refreshed.json"), day)
    assert v != shipped and v.startswith(day.strftime("%Y.%m.%d")) and \
        v not in available_versions()
    # a file whose content carries a version (whatever its name) blocks that version too
    (tmp_path / "other.json").write_text('{"version": "%s.1"}' % shipped)
    _, v2 = resolve_out(str(tmp_path / "again.json"), day)
    assert v2 not in {shipped, f"{shipped}.1"}
    # naming the file after a taken version is refused, nothing written
    with pytest.raises(InputError, match="already carried by another catalog"):
        resolve_out(str(tmp_path / f"{shipped}.json"), day)


def test_default_out_dir_is_a_user_dir_not_the_package(monkeypatch, tmp_path):
    import gpulease.catalog as catalog
    monkeypatch.delenv("GPULEASE_CATALOG_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    path, _ = resolve_out(None, TODAY)
    assert path.parent == tmp_path / "gpulease" / "catalogs"
    assert catalog.DATA_DIR not in path.parents


def test_checksum_detects_hand_edits(tmp_path):
    doc = {"generated_by": {"tool": "x"}, "offerings": [{"a": 1}], "storage": []}
    doc["checksum"] = checksum(doc)
    p = tmp_path / "c.json"
    p.write_text(json.dumps(doc, indent=2))
    assert file_state(p) == "generated"
    doc["offerings"][0]["a"] = 2
    p.write_text(json.dumps(doc))
    assert file_state(p) == "hand-edited"
    with pytest.raises(InputError, match="edited by hand"):
        check_writable(p, force=False)
    check_writable(p, force=True)
    p.write_text(json.dumps({"offerings": []}))
    assert file_state(p) == "hand-written"
    assert file_state(tmp_path / "absent.json") == "absent"


def test_select_regions_defaults_and_new_regions():
    base = _base_catalog()
    assert select_regions(base, ["aws", "gcp"], []) == {"aws": ["us-east-1"],
                                                        "gcp": ["us-central1"]}
    assert select_regions(base, ["gcp"], ["europe-west4"]) == {"gcp": ["europe-west4"]}
    assert select_regions(base, ["aws", "gcp"], ["eu-west-1"]) == {"aws": ["eu-west-1"]}
    with pytest.raises(InputError, match='did you mean "us-east-1"'):
        select_regions(base, ["aws"], ["us-east-l"])


def test_diff_orders_biggest_moves_first():
    base = _base_catalog()
    raw = json.loads(json.dumps(base.raw))
    raw["version"] = "new"
    raw["offerings"][0]["on_demand_usd"] = 0.85 * 1.5     # g2 +50 %
    raw["offerings"][1]["spot_usd"] = 1.47 * 0.9          # a2 -10 %
    del raw["offerings"][2]                               # aws g6 removed
    raw["offerings"].append(dict(raw["offerings"][0], region="us-east4"))
    d = diff_catalogs(base, parse_catalog(raw))
    assert d.added == (("gcp", "us-east4", "g2-standard-8"),)
    assert d.removed == (("aws", "us-east-1", "g6.xlarge"),)
    assert [round(m.pct) for m in d.moves] == [50, -10] and d.rows_changed == 2
    text = render_diff(d)
    assert "1 row added, 1 removed, 2 with price changes" in text and "+50.0%" in text


def test_refresh_of_the_shipped_snapshot_validates():
    """The real snapshot (read-only) refreshed with fake GCP prices still loads."""
    shipped = load_catalog()
    fake = FakeBilling()
    fake.skus = _skus()
    fake.start()
    try:
        scope = select_regions(shipped, ["gcp"], [])
        res = refresh(shipped, scope=scope, gcp=clients(fake), version="2026.12.09", now=NOW)
    finally:
        fake.stop()
    assert res.catalog is not None and len(res.catalog.offerings) == len(shipped.offerings)
    refreshed = {k[2] for k in res.report.refreshed}
    # the fake prices only A2 (A100 40GB), G2 (L4) and N1 + T4 in us-central1
    assert refreshed and all(t.startswith(("a2-highgpu", "g2-standard", "n1-"))
                             for t in refreshed)
    assert all(k[1] == "us-central1" for k in res.report.refreshed)
    kept = res.doc["offerings"]
    marked = [r for r in kept if r["cloud"] == "gcp" and r["region"] != "us-central1"]
    assert marked and all(v is None or v.startswith("kept:")
                          for r in marked for v in r["price_sources"].values())
    assert res.doc["checksum"] == checksum(res.doc)
    assert res.doc["generated_by"]["base_version"] == shipped.version


def test_a_price_cut_below_the_old_gpu_sku_floor_refreshes(tmp_path):
    """Issue 35 item 5: GCP spot prices move monthly. A refreshed spot price below the row's
    old GPU SKU floor (gpu_sku_usd.spot, a figure derived from the OLD prices) used to fail the
    load-time invariant (exit 1, internal error); the merge drops every derived field of a
    column it reprices, so the new catalog loads."""
    from gpulease.catalog.fetchers import CloudFetch, Fetched
    from gpulease.catalog.fetchers.gcp import BILLING_SOURCE, COMPUTE_SOURCE
    from gpulease.catalog.refresh import merge

    shipped = load_catalog()
    row = next(r for r in shipped.raw["offerings"]
               if r["cloud"] == "gcp" and (r.get("gpu_sku_usd") or {}).get("spot")
               and r.get("spot_usd"))
    cut = round(row["gpu_sku_usd"]["spot"] * 0.5, 4)           # half the old GPU-only floor
    got = Fetched(cloud=row["cloud"], region=row["region"], instance_type=row["instance_type"],
                  prices={"spot_usd": cut}, price_sources={"spot_usd": BILLING_SOURCE})
    fetch = CloudFetch(cloud=row["cloud"], rows={(row["region"], row["instance_type"]): got},
                       priced_regions={row["region"]}, apis=(BILLING_SOURCE, COMPUTE_SOURCE))
    doc, report = merge(shipped, {row["cloud"]: fetch}, {row["cloud"]: [row["region"]]},
                        version="2026.12.09", now=NOW)
    new = next(r for r in doc["offerings"] if (r["cloud"], r["region"], r["instance_type"]) ==
               (row["cloud"], row["region"], row["instance_type"]))
    assert new["spot_usd"] == cut and "spot" not in (new.get("gpu_sku_usd") or {})
    cat = parse_catalog(doc, source="refreshed.json")          # the load-time invariants hold
    assert any(o.instance_type == row["instance_type"] and o.region == row["region"] and
               o.spot_usd == cut for o in cat.offerings)
