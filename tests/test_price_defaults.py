"""Defaults that moved the price (issue 34 item 6): explain names each default a stack left
unset that changed a cluster's cost, with the saving of setting it the other way - recomputed
here by deciding the changed stack through the public policy entry point."""
from __future__ import annotations

import dataclasses
import datetime as dt

from gpulease.catalog import load_catalog
from gpulease.config import parse_stack_config
from gpulease.policy import decide
from gpulease.policy.defaults import price_moving_defaults

NOW = dt.datetime(2026, 12, 4, tzinfo=dt.timezone.utc)
CAT = load_catalog()
BASE = {"gpulease:owner": "ml", "gpulease:cost_center": "cc", "gpulease:budget_monthly_usd": 500000,
        "gpulease:clouds": {"aws": {"regions": ["us-east-1", "us-west-2"]},
                            "gcp": {"project": "proj-123", "regions": ["us-central1"]}}}


def _stack(**cluster):
    c = {"name": "train", "gpu": "H100", "gpus": 16, "hours_per_month": 300, "priority": 5,
         "checkpoint_minutes": 30, **cluster}
    return parse_stack_config({**BASE, "gpulease:clusters": [c]}, stack="dev",
                              source="stacks/Pulumi.dev.yaml", catalog=CAT)


def test_an_unset_distributed_is_named_with_its_saving_recomputed():
    stack = _stack()
    env = decide(stack, CAT, now=NOW)
    rows = [r for r in price_moving_defaults(env, CAT, now=NOW)["train"]
            if r["key"] == "distributed"]
    assert len(rows) == 1 and rows[0]["alternative"] == "false"
    alt = dataclasses.replace(stack, clusters=(dataclasses.replace(stack.clusters[0],
                                                                   distributed=False),))
    want = float(env.clusters[0].monthly_money) - float(
        decide(alt, CAT, now=NOW).clusters[0].monthly_money)
    assert rows[0]["saving_usd"] == round(want, 2)


def test_a_value_the_stack_sets_is_not_a_default():
    env = decide(_stack(distributed=True), CAT, now=NOW)
    assert not [r for r in price_moving_defaults(env, CAT, now=NOW).get("train", [])
                if r["key"] == "distributed"]
