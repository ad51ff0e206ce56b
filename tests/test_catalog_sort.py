"""`catalog list --sort price|gpu-price` and the $/GPU-hour column (issue 36 item 6)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests.timeouts import HANG_S


def _list(*args):
    r = subprocess.run([sys.executable, "-m", "gpulease", "catalog", "list", "--json", *args],
                       capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("sort,key", [("price", "on_demand_usd"),
                                      ("gpu-price", "on_demand_usd_per_gpu")])
def test_cheapest_first_and_unpriced_last(sort, key):
    rows = _list("--sort", sort)
    priced = [r[key] for r in rows if r[key] is not None]
    assert priced == sorted(priced) and len(priced) > 100
    first_unpriced = next((i for i, r in enumerate(rows) if r[key] is None), len(rows))
    assert all(r[key] is None for r in rows[first_unpriced:])


def test_per_gpu_price_is_the_node_price_over_its_gpus():
    rows = _list("--gpu", "H100")
    for r in rows:
        if r["on_demand_usd"] is not None:
            assert r["on_demand_usd_per_gpu"] == pytest.approx(
                r["on_demand_usd"] / r["gpus_per_node"], abs=1e-4)
    natural = [(r["cloud"], r["region"], r["instance_type"]) for r in rows]
    assert natural[0][0] <= natural[-1][0]           # the default keeps the natural order


def test_unknown_sort_is_exit_2():
    r = subprocess.run([sys.executable, "-m", "gpulease", "catalog", "list", "--sort", "cost"],
                       capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 2 and "gpu-price" in r.stderr
