"""`gpulease catalog import skypilot DIR`: fixtures in SkyPilot's v8 layout -> a /2 catalog."""
from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pytest

from gpulease.catalog import FORMAT_V2, load_catalog, parse_catalog
from gpulease.catalog.refresh import checksum
from gpulease.cli import main

GOOD = Path(__file__).resolve().parent / "fixtures" / "skypilot" / "good"
NOW = dt.datetime(2026, 12, 9, 10, 0, tzinfo=dt.timezone.utc)


def _import(capsys, *args) -> tuple[int, dict, str]:
    code = main(["catalog", "import", "skypilot", *args, "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else {}), err


def test_import_writes_a_versioned_checksummed_v2_catalog(tmp_path, capsys):
    code, summary, _ = _import(capsys, str(GOOD), "--out", str(tmp_path / "cats"),
                               "--base", str(load_catalog(version="2026.12.02").path))
    assert code == 0
    doc = json.loads(Path(summary["path"]).read_text())
    assert doc["format"] == FORMAT_V2 and doc["checksum"] == checksum(doc)
    assert doc["version"] == summary["version"] and summary["offerings"] == 3
    cat = parse_catalog(doc)
    p5 = cat.offering("aws", "us-east-1", "p5.48xlarge")
    # zones by ID, per-zone spot (the zone without spot has none), spot = cheapest zone
    assert p5.zones == ("use1-az1", "use1-az4", "use1-az6")
    assert dict(p5.zone_spot_usd) == {"use1-az1": 30.5, "use1-az4": 21.25}
    assert p5.spot_usd == 21.25 and p5.zone_for("spot") == "use1-az4"
    # specs SkyPilot lacks come from the base (2026.12.02 has p5 in us-east-1)
    assert (p5.rdma, p5.network_cards, p5.efa_interfaces) == ("efa", 32, 32)
    # GCP: host + accelerator in the zones listing both; inf2 / n2 (no GPU) skipped
    g2 = cat.offering("gcp", "us-central1", "g2-standard-4")
    assert g2.zones == ("us-central1-a", "us-central1-b")
    assert g2.on_demand_usd == pytest.approx(0.7)
    assert dict(g2.zone_spot_usd) == pytest.approx({"us-central1-a": 0.28, "us-central1-b": 0.22})
    row = next(r for r in doc["offerings"] if r["instance_type"] == "g2-standard-4")
    assert "host g2-standard-4 + 1 x L4" in row["notes"]
    # what neither source has stays null, with a note
    g6 = next(r for r in doc["offerings"] if r["instance_type"] == "g6.xlarge")
    assert g6["commit_1y_usd"] is None and "commit_1y" in g6["notes"]
    assert doc["storage"] and doc["egress"]                # filled from the base


def test_import_never_reuses_a_version(tmp_path, capsys):
    out = tmp_path / "cats"
    _, a, _ = _import(capsys, str(GOOD), "--out", str(out))
    _, b, _ = _import(capsys, str(GOOD), "--out", str(out))
    assert a["version"] != b["version"]
    # a file named after a version another catalog carries (here: the shipped one) is refused
    code, _, err = _import(capsys, str(GOOD), "--out",
                           str(tmp_path / "elsewhere" / f"{load_catalog().version}.json"))
    assert code == 2 and "already carried by another catalog" in err
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("cloud,line,replace,expect", [
    ("aws", 2, ("55.04,30.5", "abc,30.5"), "aws/vms.csv:2: column Price: 'abc' is not a number"),
    ("aws", 3, ("55.04,21.25", "55.04,nan"), "aws/vms.csv:3: column SpotPrice: 'nan' is not a finite"),
    ("gcp", 1, ("AvailabilityZone", "Zone"), "gcp/vms.csv:1: not a SkyPilot v8 vms.csv: missing columns AvailabilityZone"),
    ("gcp", 5, ("0.5,0.2", "0.5,0.2,extra"), "gcp/vms.csv:5: wrong number of fields"),
])
def test_malformed_csv_exits_2_with_the_location(tmp_path, capsys, cloud, line, replace, expect):
    d = tmp_path / "v8"
    shutil.copytree(GOOD, d)
    f = d / cloud / "vms.csv"
    lines = f.read_text().splitlines()
    lines[line - 1] = lines[line - 1].replace(*replace, 1)
    f.write_text("\n".join(lines) + "\n")
    code, _, err = _import(capsys, str(d), "--out", str(tmp_path / "out"))
    assert code == 2 and expect in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()                 # nothing written


def test_missing_directory_and_no_gpu_rows_are_bad_input(tmp_path, capsys):
    code, _, err = _import(capsys, str(tmp_path / "nowhere"), "--out", str(tmp_path / "o"))
    assert code == 2 and "neither aws/vms.csv nor gcp/vms.csv" in err
    d = tmp_path / "v8" / "aws"
    d.mkdir(parents=True)
    (d / "vms.csv").write_text((GOOD / "aws" / "vms.csv").read_text().splitlines()[0] + "\n")
    code, _, err = _import(capsys, str(tmp_path / "v8"), "--out", str(tmp_path / "o"))
    assert code == 2 and "no row for a GPU gpulease plans for" in err


# ---- contradictions, impossible values, names the clouds would never use ----------------------
_P5 = ("p5.48xlarge,H100,8.0,192.0,2048.0,\"{'Gpus': [{'Name': 'H100', 'Count': 8, 'MemoryInfo': "
       "{'SizeInMiB': 81920}}]}\",55.04,30.5,us-east-1,use1-az1,x86_64")


def _with_aws_line(tmp_path, *lines: str) -> Path:
    d = tmp_path / "v8"
    shutil.copytree(GOOD, d)
    f = d / "aws" / "vms.csv"
    f.write_text(f.read_text() + "".join(line + "\n" for line in lines))
    return d


@pytest.mark.parametrize("line,expect", [
    (_P5.replace("H100,8.0,192.0", "H100,4.0,192.0").replace("use1-az1", "use1-az2"),
     "p5.48xlarge: GPUs per node contradicts line 2: 8 there, 4 here"),
    (_P5.replace("H100,8.0", "A100,8.0").replace("use1-az1", "use1-az2"),
     "p5.48xlarge: GPU model contradicts line 2: H100 there, A100 here"),
    (_P5.replace("192.0,2048.0", "96.0,2048.0").replace("use1-az1", "use1-az2"),
     "p5.48xlarge: vCPUs contradicts line 2: 192 there, 96 here"),
    (_P5.replace("55.04,30.5", "55.04,29.0"),
     "p5.48xlarge in use1-az1 contradicts line 2: price/spot (55.04, 30.5) there"),
    (_P5.replace("H100,8.0", "H100,7.9").replace("p5.48xlarge", "p5x.48xlarge"),
     "column AcceleratorCount: '7.9' is not a whole number"),
    (_P5.replace("55.04,30.5", "1e-300,30.5").replace("p5.48xlarge", "p5y.48xlarge"),
     "column Price: 1e-300 is 1.25e-301 USD per GPU-hour, outside the plausible 0.01-60.0"),
    (_P5.replace("us-east-1,use1-az1", "../../etc,use1-az1").replace("p5.48x", "p5z.48x"),
     "column Region: '../../etc' is not a AWS region name"),
    (_P5.replace("use1-az1", "use1-az1/../x").replace("p5.48x", "p5w.48x"),
     "column AvailabilityZone: 'use1-az1/../x' is not an AWS zone ID"),
    # a NUL byte stops the file at the input boundary (gpulease/inputs.py), before any row
    (_P5.replace("use1-az1", "use1-az1\x00").replace("p5.48x", "p5v.48x"),
     "binary data (a NUL byte at offset"),
])
def test_contradictory_or_impossible_rows_exit_2_naming_the_rows(tmp_path, capsys, line, expect):
    d = _with_aws_line(tmp_path, line)
    code, _, err = _import(capsys, str(d), "--out", str(tmp_path / "out"))
    assert code == 2 and expect in err and "Traceback" not in err, err
    assert "aws/vms.csv:" in err and not (tmp_path / "out").exists()


def test_rules_applied_to_differences_are_warned(tmp_path, capsys):
    # zones of one region with different on-demand prices: the highest, said so
    d = _with_aws_line(tmp_path, _P5.replace("55.04,30.5", "56.0,30.5").replace("use1-az1",
                                                                                "use1-az2"))
    code, summary, _ = _import(capsys, str(d), "--out", str(tmp_path / "out"))
    assert code == 0
    assert any("zones list on-demand prices [55.04, 56.0]; rule: the highest (56.0)" in w
               for w in summary["warnings"])
    doc = json.loads(Path(summary["path"]).read_text())
    assert next(r for r in doc["offerings"] if r["instance_type"] == "p5.48xlarge")[
        "on_demand_usd"] == 56.0


def test_every_n1_shape_the_peer_lists_becomes_an_offering(tmp_path, capsys):
    d = tmp_path / "v8" / "gcp"
    d.mkdir(parents=True)
    head = (GOOD / "gcp" / "vms.csv").read_text().splitlines()[0]
    hosts = [f"n1-{fam}-{n},{n}.0,{mem},,,,us-central1,us-central1-a,{od},{sp}"
             for fam, n, mem, od, sp in (("highmem", 4, 26.0, 0.2366, 0.0854),
                                         ("highmem", 8, 52.0, 0.4732, 0.1708),
                                         ("standard", 64, 240.0, 3.04, 1.1163))]
    accs = [f",,,T4,{k}.0,,us-central1,us-central1-a,{0.35 * k:.2f},{0.1654 * k:.4f}"
            for k in (1, 2, 4)]
    (d / "vms.csv").write_text("\n".join([head] + hosts + accs) + "\n")
    code, summary, _ = _import(capsys, str(tmp_path / "v8"), "--out", str(tmp_path / "out"))
    assert code == 0
    cat = parse_catalog(json.loads(Path(summary["path"]).read_text()))
    shapes = {(o.instance_type, o.gpus_per_node): o for o in cat.offerings}
    # SkyPilot's pairing: >= 4 / 8 / 48 vCPUs and 4 GiB each for 1 / 2 / 4 T4
    assert set(shapes) == {("n1-highmem-4", 1), ("n1-highmem-8", 2), ("n1-standard-64", 4)}
    four = shapes[("n1-standard-64", 4)]
    assert four.accelerator_type == "nvidia-tesla-t4" and four.gpu == "T4"
    assert four.on_demand_usd == pytest.approx(3.04 + 1.4)
    assert four.purchase_options == ("on_demand", "spot", "reservation", "commitment")
