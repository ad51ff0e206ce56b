"""Reproducible output (issue 36 item 4): two `plan --json` runs of an unchanged stack print
the same bytes - resources in URN order, no timings in the plan - and the run's metadata goes
to `--run-meta FILE`."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from tests.timeouts import HANG_S

ROOT = Path(__file__).resolve().parents[1]


def _plan(*args, tmp):
    r = subprocess.run([sys.executable, "-m", "gpulease", "plan", "--stack", "staging",
                        "--json", *args], cwd=ROOT, capture_output=True, timeout=HANG_S,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp),
                            "GPULEASE_QUOTES_CACHE": str(tmp / "none.json"),
                            "GPULEASE_INVENTORY_CACHE": str(tmp / "none-inv.json")})
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    return r.stdout


def test_two_runs_print_the_same_bytes_and_the_metadata_goes_elsewhere(tmp_path):
    meta = tmp_path / "out" / "meta.json"
    first = _plan("--run-meta", str(meta), tmp=tmp_path)
    second = _plan(tmp=tmp_path)
    assert first == second
    doc = json.loads(first)
    assert "elapsed_s" not in doc
    urns = [r["urn"] for r in doc["resources"]]
    assert urns == sorted(urns) and len(urns) > 10
    m = json.loads(meta.read_text())
    assert m["stack"] == "staging" and m["elapsed_s"] > 0 and m["judged_at"].endswith("Z")


def test_an_unwritable_run_meta_is_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = subprocess.run([sys.executable, "-m", "gpulease", "plan", "--stack", "dev", "--json",
                        "--run-meta", str(blocker / "meta.json")], cwd=ROOT,
                       capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 2 and "--run-meta" in r.stderr and "Traceback" not in r.stderr
