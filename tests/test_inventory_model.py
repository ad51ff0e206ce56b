"""The inventory file's schema (issue 32 item 3): the contract between the readers and the
policy. Kinds come from each cloud's object; a holding's kind fixes its cloud and model."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from gpulease import purchase
from gpulease.errors import ConfigError
from gpulease.inventory import model

RI = {"id": "ri-1", "cloud": "aws", "kind": "ec2-reserved-instances", "model": "commitment",
      "region": "us-east-1", "instance_type": "p5.48xlarge", "instances": 2,
      "start": "2026-01-01T00:00:00Z", "end": "2027-01-01T00:00:00Z", "state": "active",
      "usd_per_hour": 110.0}


def _doc(*holdings):
    return {"format": model.FORMAT, "generated_at": "2026-12-04T12:00:00Z",
            "sources": [{"cloud": "aws", "scope": "123456789012", "regions": ["us-east-1"],
                         "read_at": "2026-12-04T12:00:00Z"}],
            "holdings": list(holdings)}


def test_kinds_are_the_clouds_answers():
    assert model.KINDS["gce-commitment"] == ("gcp", purchase.COMMITMENT)
    assert model.KINDS["ec2-capacity-block"] == ("aws", purchase.CAPACITY_BLOCK)
    assert {m for _, m in model.KINDS.values()} <= set(purchase.BY_NAME)


def test_round_trip_and_terms(tmp_path):
    inv = model.parse(_doc(RI), source="inv.json")
    path = model.write(inv, tmp_path / "inv.json")
    back = model.load(path)
    assert back.holdings == inv.holdings and back.origin == str(path)
    (h,) = back.holdings
    utc = dt.timezone.utc
    assert h.active_at(dt.datetime(2026, 12, 4, tzinfo=utc))
    assert not h.active_at(dt.datetime(2027, 1, 1, tzinfo=utc))
    assert h.ended_by(dt.datetime(2027, 1, 1, tzinfo=utc))
    assert json.loads(path.read_text())["format"] == "gpulease-inventory/1"


@pytest.mark.parametrize("change,words", [
    ({"kind": "ec2-reserved"}, "unknown kind"),
    ({"cloud": "gcp"}, "is on aws, not gcp"),
    ({"model": "reservation"}, "is a commitment, not reservation"),
    ({"end": "2027-01-01"}, "pattern"),
    ({"instances": -1}, "greater than or equal"),
])
def test_bad_holding_is_exit_2_naming_the_field(change, words):
    with pytest.raises(ConfigError) as exc:
        model.parse(_doc({**RI, **change}), source="inv.json")
    assert exc.value.exit_code == 2 and "inv.json" in str(exc.value)
    assert "holdings[0]" in str(exc.value) and words in str(exc.value)


def test_cache_path_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(model.CACHE_ENV, str(tmp_path / "x.json"))
    assert model.cache_path() == tmp_path / "x.json"
    monkeypatch.delenv(model.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert model.cache_path() == tmp_path / "gpulease" / "inventory.json"
