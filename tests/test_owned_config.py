"""gpulease:owned (issue 32 item 1): the pool's schema, its checks, and its cost formulas
recomputed by hand."""
from __future__ import annotations

import datetime as dt

import pytest

from gpulease.errors import ConfigError
from gpulease.owned.cost import depreciation_end, pool_cost
from gpulease.catalog import load_catalog
from gpulease.config import parse_stack_config

BASE = {
    "gpulease:owner": "ml-platform", "gpulease:cost_center": "cc-42",
    "gpulease:budget_monthly_usd": 50000,
    "gpulease:clouds": {"aws": {"regions": ["us-east-1"]}},
}
CATALOG = load_catalog()


def parse_values(values):
    return parse_stack_config(values, stack="dev", source="stacks/Pulumi.dev.yaml",
                              catalog=CATALOG)


def make_stack_values(*, owned):
    return {**BASE, "gpulease:owned": owned}

RACK = {"name": "rack-a", "gpu": "A100-80GB", "gpus": 32, "gpus_per_node": 8,
        "site": "Frankfurt colo cage 12", "kind": "slurm", "purchase_usd": 1_200_000,
        "purchased_on": "2025-01-15", "power_kw_per_node": 6.5, "usd_per_kwh": 0.18,
        "colo_usd_per_month": 4_000, "ops_usd_per_month": 6_000}


def _spec(**pool):
    return parse_values(make_stack_values(owned=[{**RACK, **pool}]))


def test_pool_parses_with_defaults():
    spec = _spec()
    (p,) = spec.owned
    assert (p.name, p.nodes, p.depreciation_years, p.available_hours_per_month, p.rdma) == \
        ("rack-a", 4, 3, 730.0, False)
    assert p.config_path == "gpulease:owned[0]"


@pytest.mark.parametrize("change,path,words", [
    ({"gpus": 30}, "gpulease:owned[0].gpus", "whole number of 8-GPU nodes"),
    ({"gpu": "A100-80"}, "gpulease:owned[0].gpu", "unknown GPU"),
    ({"purchased_on": "2025-02-30"}, "gpulease:owned[0].purchased_on", "not a calendar date"),
    ({"kind": "kubernetes"}, "gpulease:owned[0].kube_context", "kubeconfig context"),
    ({"kind": "k8s"}, "gpulease:owned[0].kind", ""),
    ({"usd_per_kwh": -1}, "gpulease:owned[0].usd_per_kwh", ""),
])
def test_bad_pool_is_exit_2_with_its_path(change, path, words):
    with pytest.raises(ConfigError) as exc:
        _spec(**change)
    assert exc.value.exit_code == 2
    text = str(exc.value)
    assert path in text and words in text


def test_two_pools_one_name():
    with pytest.raises(ConfigError, match=r"owned\[1\]\.name.*two owned pools"):
        parse_values(make_stack_values(owned=[RACK, RACK]))


def test_costs_by_hand():
    (p,) = _spec().owned
    c = pool_cost(p, dt.date(2026, 12, 4))
    dep = 1_200_000 / 36                        # $33,333.33 a month for 3 years
    power = 6.5 * 4 * 730 * 0.18                # 4 nodes under load all month
    assert c.depreciation_usd_per_month == pytest.approx(dep)
    assert c.power_usd_per_month == pytest.approx(power)
    assert c.amortised_usd_per_gpu_hour == pytest.approx((dep + power + 10_000) / (32 * 730))
    assert c.marginal_usd_per_gpu_hour == pytest.approx(6.5 / 8 * 0.18)
    assert c.amortised_usd_per_gpu_hour > c.marginal_usd_per_gpu_hour > 0


def test_paid_off_pool_still_costs_power_and_fixed():
    (p,) = _spec(purchased_on="2020-01-01").owned
    assert depreciation_end(p) == dt.date(2023, 1, 1)
    c = pool_cost(p, dt.date(2026, 12, 4))
    assert c.depreciated and c.depreciation_usd_per_month == 0
    assert c.amortised_usd_per_gpu_hour == pytest.approx(
        (6.5 * 4 * 730 * 0.18 + 10_000) / (32 * 730))
