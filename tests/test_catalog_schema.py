"""The catalog schema: bad files exit 2 with the row named, never a traceback; soft problems warn."""
from __future__ import annotations

import copy
import json

import pytest

from gpulease.catalog import load_catalog, parse_catalog
from gpulease.cli import main
from gpulease.errors import CatalogError

NEW = load_catalog()
RAW = NEW.raw


def _first(cloud: str = "aws") -> int:
    return next(i for i, r in enumerate(RAW["offerings"]) if r["cloud"] == cloud
                and r.get("zone_spot_usd") and r["on_demand_usd"])


def _errors(doc) -> str:
    with pytest.raises(CatalogError) as exc:
        parse_catalog(doc, source="bad.json")
    return str(exc.value)


@pytest.mark.parametrize("mutate,expect", [
    (lambda d, i: d["offerings"][i].update(on_demand_usd=-1.0), ".on_demand_usd: Input should be greater than 0"),
    (lambda d, i: d["offerings"][i].update(on_demand_usd=float("nan")), "finite number"),
    (lambda d, i: d["offerings"][i].update(commit_1y_usd=d["offerings"][i]["on_demand_usd"] * 2),
     "is not below on_demand_usd"),
    (lambda d, i: d["offerings"][i]["zone_spot_usd"].update(
        {d["offerings"][i]["zones"][0]: d["offerings"][i]["on_demand_usd"] * 3}), "above on_demand_usd"),
    (lambda d, i: d["offerings"][i].update(zones=[], zone_spot_usd={}), "format /2 needs the zones"),
    (lambda d, i: d["offerings"][i].update(zones=["us-east-1a"], zone_spot_usd={}), "not AWS zone IDs"),
    (lambda d, i: d["offerings"][i].update(gpus_per_node=64), "gpus_per_node"),
    (lambda d, i: d["offerings"][i].update(vcpus="96"), "vcpus"),
    (lambda d, i: d.update(sources=["not", "a", "map"]), "sources"),
    (lambda d, i: d.update(infra={"nat": 1}), "infra"),
    (lambda d, i: d.update(spot_interruptions=[1]), "spot_interruptions"),
    (lambda d, i: d["storage"][0].update(usd_per_gb_month=float("inf")), "storage[0]"),
    (lambda d, i: d["egress"][0].update(usd_per_gb=-0.01), "egress[0]"),
    (lambda d, i: d["storage"][0].update(storage_class="GLACIERR"), "is not a aws class"),
])
def test_bad_rows_are_located_errors(mutate, expect):
    doc = copy.deepcopy(RAW)
    i = _first()
    mutate(doc, i)
    text = _errors(doc)
    assert expect in text, text
    if "offerings" in expect or expect.startswith("."):
        row = doc["offerings"][i]
        assert f"offerings[{i}] (aws {row['region']} {row['instance_type']})" in text


def test_spot_must_be_the_cheapest_zone():
    doc = copy.deepcopy(RAW)
    i = _first("gcp")
    doc["offerings"][i]["spot_usd"] = max(doc["offerings"][i]["zone_spot_usd"].values()) + 0.01
    assert "must equal the cheapest zone's spot price" in _errors(doc)


@pytest.mark.parametrize("damage,expect", [
    (lambda b: b.replace(b'"format"', b'"fo\xffrmat"', 1), "not UTF-8 text (byte 0xff"),
    (lambda b: b.replace(b'"offerings": [', b'"offerings": [[', 1), "not valid JSON"),
    (lambda b: b.replace(b'"as_of": "', b'"as_of": NaN, "x": "', 1), "not valid JSON"),
    (lambda b: b.replace(f'"version": "{NEW.version}"'.encode(), b'"version": 20261203', 1),
     "version"),
])
def test_damaged_files_exit_2_without_traceback(tmp_path, capsys, damage, expect):
    bad = tmp_path / "bad.json"
    bad.write_bytes(damage(open(NEW.path, "rb").read()))
    assert main(["catalog", "list", "--catalog", str(bad)]) == 2
    err = capsys.readouterr().err
    assert expect in err and "Traceback" not in err and str(bad) in err


def test_byte_flip_in_a_price_is_caught_by_the_checksum(tmp_path):
    doc = copy.deepcopy(RAW)
    i = _first()
    doc["offerings"][i]["commit_3y_usd"] = None       # a valid-looking edit
    doc["offerings"][i]["notes"] += "; edited"
    cat = parse_catalog(doc, source="edited.json")
    assert any("no longer matches the file's checksum" in str(w) for w in cat.warnings)
    assert not any("checksum" in str(w) for w in NEW.warnings)


def test_old_format_loads_with_a_zones_warning():
    old = load_catalog(version="2026.12.02")
    assert old.format == "gpulease-catalog/1"
    assert any("record no zones" in str(w) and w.level == "warning" for w in old.warnings)


# ---- property: any mutation of a row loads or is a located CatalogError, never a crash -------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_JUNK = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                  st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                  st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                       st.integers(), max_size=2))
_SMALL = {**{k: v for k, v in RAW.items() if k not in ("offerings", "storage", "egress")},
          "offerings": RAW["offerings"][:6], "storage": RAW["storage"][:8],
          "egress": RAW["egress"][:8]}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(section=st.sampled_from(["offerings", "storage", "egress", "top"]),
       index=st.integers(0, 5), key=st.text(min_size=1, max_size=3) | st.sampled_from(
           ["on_demand_usd", "spot_usd", "zones", "zone_spot_usd", "cloud", "gpu", "region",
            "usd_per_gb_month", "kind", "sources", "infra", "spot_interruptions", "format",
            "retrieval_usd_per_gb", "gpus_per_node"]), value=_JUNK)
def test_mutated_catalogs_load_or_fail_cleanly(section, index, key, value):
    doc = copy.deepcopy(_SMALL)
    target = doc if section == "top" else doc[section][index % len(doc[section])]
    target[key] = value
    try:
        cat = parse_catalog(doc, source="mutated.json")
    except CatalogError as exc:
        assert exc.findings and all(f.path is not None for f in exc.findings)
        return
    for o in cat.offerings:       # whatever loads is finite and consistent
        for v in (o.on_demand_usd, o.spot_usd, o.commit_1y_usd, o.commit_3y_usd):
            assert v is None or (v == v and v >= 0 and v != float("inf"))
