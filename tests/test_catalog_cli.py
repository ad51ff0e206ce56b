"""`gpulease catalog list / versions / refresh` through the real CLI entry point."""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest

from gpulease.catalog import OFFERING_COLUMNS, load_catalog
from gpulease.cli import main
from gpulease.catalog.refresh import file_state
from tests.fakes.gcp_billing import FakeBilling
from tests.test_refresh_gcp import R, _base_catalog, _skus

warnings.filterwarnings("ignore", category=FutureWarning)


@pytest.fixture
def catalog_file(tmp_path):
    path = tmp_path / "base.json"
    path.write_text(json.dumps(_base_catalog().raw))
    return path


def test_list_json_rows_exact_shape(catalog_file, capsys):
    assert main(["catalog", "list", "--catalog", str(catalog_file), "--gpu", "L4", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["cloud"] for r in rows} == {"aws", "gcp"} and len(rows) == 2
    # the catalog's columns, then what `list` derives: the on-demand price per GPU-hour
    assert all(list(r) == [*OFFERING_COLUMNS, "on_demand_usd_per_gpu"] for r in rows)
    g2 = next(r for r in rows if r["cloud"] == "gcp")
    assert g2["on_demand_usd"] == 0.85 and g2["commit_1y_usd"] is None


def test_list_filters_and_table(catalog_file, capsys):
    assert main(["catalog", "list", "--catalog", str(catalog_file), "--cloud", "gcp",
                 "--region", R]) == 0
    out = capsys.readouterr().out
    assert "catalog 2026.12.02" in out and "n1-standard-8" in out and "g6.xlarge" not in out
    line = next(x for x in out.splitlines() if x.startswith("gcp") and "a2-highgpu-1g" in x)
    assert line.split()[-5:] == ["3.670", "1.470", "2.310", "1.290", "-"]   # no zones in /1


@pytest.mark.parametrize("flag,value,hint", [("--gpu", "H10", '(did you mean "H100"?)'),
                                              ("--gpu", "l4", '(did you mean "L4"?)'),
                                              ("--cloud", "gpc", '(did you mean "gcp"?)')])
def test_list_unknown_value_exit_2(flag, value, hint, capsys):
    assert main(["catalog", "list", flag, value]) == 2
    err = capsys.readouterr().err
    assert f'{flag}: unknown' in err and hint in err and "Traceback" not in err


def test_list_shipped_catalog_and_versions(capsys):
    shipped = load_catalog()
    assert main(["catalog", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(shipped.offerings)
    assert main(["catalog", "versions", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    defaults = [v for v in doc["versions"] if v["default"]]
    assert len(defaults) == 1 and defaults[0]["version"] == shipped.version


@pytest.fixture
def fake(monkeypatch):
    f = FakeBilling()
    f.skus = _skus()
    f.start()
    monkeypatch.setenv("GPULEASE_GCP_ENDPOINT", f.endpoint)
    yield f
    f.stop()


def test_refresh_writes_versioned_file_diff_and_refuses_overwrite(fake, catalog_file, tmp_path,
                                                                   capsys):
    out_dir = tmp_path / "cats"
    args = ["catalog", "refresh", "--cloud", "gcp", "--from", str(catalog_file),
            "--out", str(out_dir)]
    assert main(args) == 0
    cap = capsys.readouterr()
    written = sorted(out_dir.glob("*.json"))
    assert len(written) == 1 and file_state(written[0]) == "generated"
    cat = load_catalog(str(written[0]))
    assert cat.version == written[0].stem and cat.offering("gcp", R, "g2-standard-8").commit_1y_usd
    assert "rows added" in cap.out and "biggest price moves" in cap.out
    assert "g2-standard-8" in cap.out and "kept gcp/" not in cap.out
    assert "[1/" in cap.err and "billing catalog" in cap.err        # progress on stderr
    # a second run gets a new .N name instead of overwriting
    assert main(args) == 0
    names = sorted(p.name for p in out_dir.glob("*.json"))
    second = [n for n in names if n != written[0].name]
    assert len(names) == 2 and re.fullmatch(r"\d{4}\.\d{2}\.\d{2}\.\d+\.json", second[0])
    # an explicit existing file: refused without --force, and a hand edit is recognised
    target = written[0]
    doc = json.loads(target.read_text())
    doc["offerings"][0]["on_demand_usd"] = 0.01
    target.write_text(json.dumps(doc))
    assert file_state(target) == "hand-edited"
    capsys.readouterr()
    assert main(args[:-1] + [str(target)]) == 2
    err = capsys.readouterr().err
    assert "edited by hand" in err and "--force" in err
    assert json.loads(target.read_text())["offerings"][0]["on_demand_usd"] == 0.01
    assert main(args[:-1] + [str(target), "--force"]) == 0
    assert file_state(target) == "generated"
    # --format json: the same run as one strict JSON document (the output convention, C5)
    capsys.readouterr()
    assert main(args + ["--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out, parse_constant=lambda name: 1 / 0)
    assert doc["from_version"] == load_catalog(str(catalog_file)).version
    assert Path(doc["path"]).is_file() and doc["version"] == Path(doc["path"]).stem
    assert doc["refreshed"] and all(m["column"].endswith("_usd") for m in doc["price_moves"])


def test_refresh_nothing_refreshed_exit_1(fake, catalog_file, tmp_path, capsys):
    fake.faults["skus"] = [403]
    out = tmp_path / "x.json"
    assert main(["catalog", "refresh", "--cloud", "gcp", "--from", str(catalog_file),
                 "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "nothing could be refreshed" in err and "billing.list_skus" in err and "403" in err
    assert not out.exists()


def test_refresh_aws_without_credentials_exit_2(catalog_file, tmp_path, monkeypatch, capsys):
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "nope"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "nope"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    assert main(["catalog", "refresh", "--cloud", "aws", "--from", str(catalog_file),
                 "--out", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert "gpulease catalog refresh: no AWS credentials found" in err
    assert "AWS_PROFILE" in err and "AWS_ACCESS_KEY_ID" in err and "Traceback" not in err
    assert not (tmp_path / "o.json").exists()


def test_refresh_bad_region_exit_2(catalog_file, capsys):
    assert main(["catalog", "refresh", "--cloud", "gcp", "--region", "us-centrall",
                 "--from", str(catalog_file)]) == 2
    assert 'did you mean "us-central1"' in capsys.readouterr().err
