"""The plan header names the inventory it used (text, JSON, HTML): gpulease:inventory, else the
default cache; a key naming no file is exit 2 at the key; an old file is called stale."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpulease.cli import main
from gpulease.inventory import model

ROOT = Path(__file__).resolve().parents[1]
HOLDING = {"id": "cud-a3", "cloud": "gcp", "kind": "gce-commitment", "model": "commitment",
           "scope": "acme-ml-dev", "region": "us-central1", "accelerator_type": "nvidia-l4",
           "accelerators": 8, "start": "2026-01-01T00:00:00Z", "end": "2027-01-01T00:00:00Z",
           "state": "active"}
EXPIRED = {**HOLDING, "id": "cud-old", "start": "2025-01-01T00:00:00Z",
           "end": "2026-01-01T00:00:00Z", "state": "expired"}


def _inventory(path: Path, generated: str = "2026-12-04T12:00:00Z") -> Path:
    inv = model.parse({"format": model.FORMAT, "generated_at": generated,
                       "sources": [{"cloud": "gcp", "scope": "acme-ml-dev",
                                    "read_at": generated}],
                       "holdings": [HOLDING, EXPIRED]}, source=str(path))
    return model.write(inv, path)


def _stack(tmp_path: Path, inventory: str | None) -> Path:
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    text = (ROOT / "stacks" / "Pulumi.dev.yaml").read_text()
    if inventory is not None:
        text = text.replace("config:\n", f"config:\n  gpulease:inventory: {inventory}\n", 1)
    (tmp_path / "stacks").mkdir(exist_ok=True)
    path = tmp_path / "stacks" / "Pulumi.dev.yaml"
    path.write_text(text)
    return path


NOW = "2026-12-05T09:00:00Z"


def test_the_named_file_is_shown_in_text_json_and_html(tmp_path, capsys):
    inv = _inventory(tmp_path / "inv.json")
    stack = _stack(tmp_path, str(inv))
    assert main(["plan", "--config", str(stack), "--now", NOW]) == 0
    out = capsys.readouterr().out
    assert (f"Inventory: {inv} read 2026-12-04T12:00:00Z, 2 holdings (1 active) of gcp "
            "acme-ml-dev") in out
    assert "days old" not in out
    assert main(["plan", "--config", str(stack), "--now", NOW, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inventory"] == {"file": str(inv), "generated_at": "2026-12-04T12:00:00Z",
                                "holdings": 2, "active": 1, "sources": ["gcp acme-ml-dev"],
                                "age_days": 0.9, "stale": False}
    html = tmp_path / "plan.html"
    assert main(["plan", "--config", str(stack), "--now", NOW, "--html", str(html)]) == 0
    assert '<span id="inventory">Inventory: ' in html.read_text()


def test_the_cache_is_read_without_the_key_and_called_stale_when_old(tmp_path, capsys,
                                                                      monkeypatch):
    cache = _inventory(tmp_path / "cache.json", generated="2026-11-01T00:00:00Z")
    monkeypatch.setenv(model.CACHE_ENV, str(cache))
    stack = _stack(tmp_path, None)
    assert main(["plan", "--config", str(stack), "--now", NOW]) == 0
    out = capsys.readouterr().out
    assert f"Inventory: {cache} read 2026-11-01T00:00:00Z" in out
    assert "34.4 days old: run `gpulease inventory` again" in out


def test_no_inventory_no_line(tmp_path, capsys):
    stack = _stack(tmp_path, None)          # the suite's cache points at no file (conftest)
    assert main(["plan", "--config", str(stack), "--now", NOW, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["inventory"] is None


@pytest.mark.parametrize("content,words", [
    (None, "which is not a file; write it with `gpulease inventory --stack dev --out"),
    ('{"format": "gpulease-inventory/1", "holdings": []}', "generated_at"),
])
def test_a_bad_inventory_is_exit_2(tmp_path, capsys, content, words):
    target = tmp_path / "inv.json"
    if content is not None:
        target.write_text(content)
    stack = _stack(tmp_path, str(target))
    assert main(["plan", "--config", str(stack), "--now", NOW]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
