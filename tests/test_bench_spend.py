"""bench/spend.py at a tiny size: it runs end to end, reads every row, and prints its targets.

Behaviour, not timing: the figures at 2,000 rows are start-up noise; what is checked is that the
bench generates the month, that spend's reading classifies all of it (the classes add up to
the bill's total, else the child exits non-zero), and that the target lines are printed.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.timeouts import HANG_S

ROOT = Path(__file__).resolve().parents[1]


def test_bench_spend_runs_at_a_small_size(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "spend.py"), "--rows", "2000,4000",
                        "--keep", str(tmp_path)], capture_output=True, text=True,
                       timeout=HANG_S, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    # 97 % usage and 1 % commitment purchases carry the stack's tags (matched), 1 % are
    # untagged NAT lines (unmatched), 1 % credits (a class of their own)
    assert "1,960 matched, 20 unmatched rows" in out
    assert "3,920 matched, 40 unmatched rows" in out
    for n in ("2,000", "4,000"):
        assert re.search(rf"{n} rows: spend CPU / reference CPU [\d.]+x <= 3x: (met|OVER); "
                         rf"peak [\d.]+ GiB <= 2 GiB: (met|OVER)", out), out
    assert re.search(r"linear: spend CPU 4,000 / 2,000 rows = [\d.]+ \(rows x2; within x1.5\): "
                     r"(met|OVER)", out), out
    assert out.rstrip().splitlines()[-1].startswith("end: load ")
    # --keep leaves the bills where it was told
    assert sorted(f.name for f in tmp_path.iterdir()) == ["focus-2000.parquet",
                                                          "focus-4000.parquet"]


def test_bench_spend_rejects_bad_rows():
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "spend.py"), "--rows", "1e6"],
                       capture_output=True, text=True, timeout=HANG_S, cwd=ROOT)
    assert p.returncode == 2
    assert "--rows '1e6'" in p.stderr and "Traceback" not in p.stderr
