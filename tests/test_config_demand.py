"""Demand profiles in stack config: `demand:` steps, strictly validated, located errors."""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys

import pytest
import yaml

from gpulease.config import MAX_DEMAND_STEPS
from gpulease.errors import ConfigError
from gpulease.model import DemandStep
from gpulease.policy.rules import PolicyRules
from tests.test_config import BASE, ROOT, SRC, catalog, parse  # noqa: F401 (fixture)

PROFILE = [{"gpus": 16, "hours_per_month": 730}, {"gpus": 64, "hours_per_month": 200}]


def with_demand(demand, **keys):
    v = copy.deepcopy(BASE)
    c = v["gpulease:clusters"][1]
    c.pop("gpus"), c.pop("hours_per_month")
    c.update(keys)
    if demand is not ...:
        c["demand"] = demand
    return v


def findings(values, catalog):
    with pytest.raises(ConfigError) as exc:
        parse(values, catalog)
    text = str(exc.value)
    assert text.startswith(f"{SRC}: invalid stack configuration"), text
    return [str(f) for f in exc.value.findings]


def test_a_profile_parses_into_steps_with_the_peak_and_the_baseline_hours(catalog):
    spec = parse(with_demand(PROFILE), catalog).clusters[1]
    assert spec.demand == (DemandStep(16, 730.0), DemandStep(64, 200.0))
    assert spec.gpus == 64 and spec.hours_per_month == 730.0 and spec.has_profile
    assert spec.steps == spec.demand


def test_gpus_may_repeat_the_peak(catalog):
    assert parse(with_demand(PROFILE, gpus=64), catalog).clusters[1].gpus == 64


def test_one_step_is_the_classic_form(catalog):
    one = parse(with_demand([{"gpus": 8, "hours_per_month": 200}]), catalog).clusters[1]
    classic = parse(BASE, catalog).clusters[1]
    assert one == classic and not one.has_profile and one.demand == ()


def test_pulumi_json_strings_parse_the_same(catalog):
    values = {k: (v if isinstance(v, str) else json.dumps(v))
              for k, v in with_demand(PROFILE).items()}
    assert parse(values, catalog) == parse(with_demand(PROFILE), catalog)


BAD = [
    (dict(demand=[{"gpus": 16, "hours_per_month": 730}, {"gpus": 16, "hours_per_month": 200}]),
     ["gpulease:clusters[1].demand[1].gpus: must be more than the step before "
      "(gpulease:clusters[1].demand[0].gpus = 16) (got 16): each step reads \"at least G GPUs "
      "busy H hours a month\", so GPUs go up from step to step; merge or reorder the steps"]),
    (dict(demand=[{"gpus": 16, "hours_per_month": 200}, {"gpus": 64, "hours_per_month": 730}]),
     ["gpulease:clusters[1].demand[1].hours_per_month: must be fewer than the step before "
      "(gpulease:clusters[1].demand[0].hours_per_month = 200) (got 730): more GPUs are busy for "
      "fewer hours, so hours go down from step to step; merge or reorder the steps"]),
    (dict(demand=PROFILE, hours_per_month=730),
     ["gpulease:clusters[1].hours_per_month: leave it out when gpulease:clusters[1].demand is "
      "given: each step has its own hours (the first step's are the baseline's)"]),
    (dict(demand=PROFILE, gpus=32),
     ["gpulease:clusters[1].gpus: must equal the last demand step's gpus (64), the peak (got "
      "32); or leave gpus out"]),
    (dict(demand=[]),
     ["gpulease:clusters[1].demand: an empty demand profile describes no load: give at least "
      "one step {gpus, hours_per_month}, or leave demand out and set gpus and hours_per_month"]),
    (dict(demand=...),
     ["gpulease:clusters[1].gpus: required key is missing (or describe the load as steps with "
      "gpulease:clusters[1].demand)",
      "gpulease:clusters[1].hours_per_month: required key is missing (or describe the load as "
      "steps with gpulease:clusters[1].demand)"]),
    (dict(demand=[{"gpus": 8, "hours_per_month": 731}]),
     ["gpulease:clusters[1].demand[0].hours_per_month: must be <= 730 (got 731)"]),
    (dict(demand=[{"gpus": 0, "hours_per_month": 730}, {"gpus": 8}]),
     ["gpulease:clusters[1].demand[0].gpus: must be > 0 (got 0)",
      "gpulease:clusters[1].demand[1].hours_per_month: required key is missing"]),
    (dict(demand=[{"gpus": 8, "hours_per_monht": 730}]),
     ['gpulease:clusters[1].demand[0].hours_per_monht: unknown key (did you mean '
      '"hours_per_month"?)',
      'gpulease:clusters[1].demand[0].hours_per_month: required key is missing']),
    (dict(demand=[{"gpus": i + 1, "hours_per_month": 700 - i}
                  for i in range(MAX_DEMAND_STEPS + 1)]),
     [f"gpulease:clusters[1].demand: must have at most {MAX_DEMAND_STEPS} entries (got "
      f"{MAX_DEMAND_STEPS + 1})"]),
    (dict(demand={"gpus": 8, "hours_per_month": 730}),
     ["gpulease:clusters[1].demand: must be a list (got {'gpus': 8, 'hours_per_month': 730})"]),
]


@pytest.mark.parametrize("keys,expected", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_profiles_are_located_with_the_fix(catalog, keys, expected):
    demand = keys.pop("demand")
    got = findings(with_demand(demand, **keys), catalog)
    assert got == [f"{SRC}: {e}" for e in expected]


def test_profile_errors_come_with_the_other_findings_at_once(catalog):
    v = with_demand([{"gpus": 16, "hours_per_month": 730}, {"gpus": 8, "hours_per_month": 100}])
    v["gpulease:clusters"][0]["gpu"] = "L5"
    v["gpulease:clusters"][0]["gpus"] = 0
    paths = [f.path for f in pytest.raises(ConfigError, parse, v, catalog).value.findings]
    assert paths == ["gpulease:clusters[0].gpu", "gpulease:clusters[0].gpus",
                     "gpulease:clusters[1].demand[1].gpus"]


@pytest.mark.parametrize("values,expected", [
    ({"commitment_term": "5y"},
     "gpulease:policy.commitment_term: must be one of '1y', '3y', 'none' or 'auto' (got '5y')"),
    ({"commitment_horizon_months": 0},
     "gpulease:policy.commitment_horizon_months: must be >= 1 (got 0)"),
    ({"commitment_horizon_months": 121},
     "gpulease:policy.commitment_horizon_months: must be <= 120 (got 121)"),
])
def test_commitment_keys_are_validated(catalog, values, expected):
    v = copy.deepcopy(BASE)
    v["gpulease:policy"] = values
    assert f"{SRC}: {expected}" in findings(v, catalog)


def test_commitment_defaults_keep_todays_plans():
    rules = PolicyRules()
    assert (rules.commitment_term, rules.commitment_horizon_months) == ("1y", 12)


def test_cli_bad_profile_exit_2_no_traceback_nothing_planned(tmp_path):
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())
    doc["config"]["gpulease:clusters"][0]["demand"][1]["gpus"] = 16
    f = tmp_path / "Pulumi.broken.yaml"
    f.write_text(yaml.safe_dump(doc))
    r = subprocess.run([sys.executable, "-m", "gpulease.cli", "plan", "--config", str(f)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert re.search(re.escape(str(f)) + r":\d+:\d+: " + re.escape(
        "gpulease:clusters[0].demand[1].gpus: must be more than the step before "
        "(gpulease:clusters[0].demand[0].gpus = 32) (got 16)"), r.stderr), r.stderr
