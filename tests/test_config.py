"""Stack configuration: the shipped stacks parse; bad input is reported all at once, located."""
from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpulease.catalog import load_catalog
from gpulease.config import parse_stack_config, read_stack_file
from gpulease.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SRC = "stacks/Pulumi.dev.yaml"

BASE = {
    "gpulease:owner": "ml-platform",
    "gpulease:cost_center": "cc-42",
    "gpulease:budget_monthly_usd": 5000,
    "gpulease:clouds": {"aws": {"regions": ["us-east-1"], "quota_gpus": {"us-east-1": 16}},
                        "gcp": {"project": "proj-1", "regions": ["us-central1"]}},
    "gpulease:storage": [{"name": "data", "size_tb": 2, "home": "aws:us-east-1"}],
    "gpulease:clusters": [
        {"name": "a", "gpu": "L4", "gpus": 1, "hours_per_month": 100, "priority": 3,
         "checkpoint_minutes": 30, "dataset": "data"},
        {"name": "b", "gpu": "H100", "gpus": 8, "hours_per_month": 200, "priority": 6},
    ],
}


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def parse(values, catalog):
    return parse_stack_config(values, stack="dev", source=SRC, catalog=catalog)


def with_change(path: str, value):
    """Copy of BASE with one config path changed (``gpulease:clusters.1.gpus``)."""
    v = copy.deepcopy(BASE)
    key, *rest = path.split(".")
    if not rest:
        v[key] = value
        return v
    node = v[key]
    for part in rest[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    last = rest[-1]
    if last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return v


def test_valid_minimal_config(catalog):
    spec = parse(BASE, catalog)
    assert spec.environment == "dev"
    assert [c.name for c in spec.clusters] == ["a", "b"]
    assert spec.clusters[0].interruptible and not spec.clusters[1].interruptible
    assert spec.clouds["gcp"].project == "proj-1"
    assert spec.storage[0].home == "aws:us-east-1"


def test_pulumi_passes_objects_as_json_strings(catalog):
    import json

    values = {k: (v if isinstance(v, str) else json.dumps(v)) for k, v in BASE.items()}
    values["gpulease:budget_monthly_usd"] = "5000"
    assert parse(values, catalog) == parse(BASE, catalog)


BAD = [
    ("gpulease:clusters.1.gpus", 0, "gpulease:clusters[1].gpus: must be > 0 (got 0)"),
    ("gpulease:clusters.1.gpus", -4, "gpulease:clusters[1].gpus: must be > 0 (got -4)"),
    ("gpulease:clusters.0.gpus", "two",
     "gpulease:clusters[0].gpus: must be a whole number (got 'two')"),
    ("gpulease:clusters.0.priority", 11, "gpulease:clusters[0].priority: must be <= 10 (got 11)"),
    ("gpulease:clusters.0.hours_per_month", 800,
     "gpulease:clusters[0].hours_per_month: must be <= 730 (got 800)"),
    ("gpulease:budget_monthly_usd", -1, "gpulease:budget_monthly_usd: must be >= 0 (got -1)"),
    ("gpulease:clusters.1.gpu", "H10",
     'gpulease:clusters[1].gpu: unknown GPU "H10" (did you mean "H100"?)'),
    ("gpulease:clusters.0.dataset", "dta",
     'gpulease:clusters[0].dataset: names no storage entry: "dta" (did you mean "data"?)'),
    ("gpulease:clouds.aws.regions", ["us-east-9"],
     'gpulease:clouds.aws.regions[0]: region "us-east-9" is not in the catalog (did you mean '),
    ("gpulease:storage.0.home", "aws-us-east-1",
     'gpulease:storage[0].home: must be "<cloud>:<region>", e.g. "aws:us-east-1" (got "aws-us-east-1")'),
    ("gpulease:clusters.0.name", "Bad_Name",
     "gpulease:clusters[0].name: 'Bad_Name' is not a valid name: use lowercase letters"),
    ("gpulease:clusters.0.template", "spot-brust",
     'gpulease:clusters[0].template: unknown template "spot-brust" (did you mean "spot-burst"?)'),
]


@pytest.mark.parametrize("path,value,expected", BAD, ids=[f"{p}={v}" for p, v, _ in BAD])
def test_bad_input_is_located(catalog, path, value, expected):
    with pytest.raises(ConfigError) as exc:
        parse(with_change(path, value), catalog)
    text = str(exc.value)
    assert f"{SRC}: {expected}" in text, text
    assert text.startswith(f"{SRC}: invalid stack configuration")


def test_unknown_keys_with_did_you_mean(catalog):
    v = copy.deepcopy(BASE)
    v["gpulease:budjet_monthly_usd"] = 1
    v["gpulease:clusters"][0]["priorty"] = 2
    with pytest.raises(ConfigError) as exc:
        parse(v, catalog)
    msgs = [str(f) for f in exc.value.findings]
    assert f'{SRC}: gpulease:budjet_monthly_usd: unknown key (did you mean "gpulease:budget_monthly_usd"?)' in msgs
    assert f'{SRC}: gpulease:clusters[0].priorty: unknown key (did you mean "priority"?)' in msgs


def test_all_findings_reported_at_once(catalog):
    v = copy.deepcopy(BASE)
    v["gpulease:clusters"][0]["gpu"] = "L5"
    v["gpulease:clusters"][1]["dataset"] = "nope"
    v["gpulease:clouds"]["aws"]["regions"] = ["us-east-1", "mars-1"]
    with pytest.raises(ConfigError) as exc:
        parse(v, catalog)
    paths = [f.path for f in exc.value.findings]
    assert paths == ["gpulease:clouds.aws.regions[1]", "gpulease:clusters[0].gpu",
                     "gpulease:clusters[1].dataset"]


def test_no_offering_can_satisfy(catalog):
    v = with_change("gpulease:clusters.1.regions", ["ap-"])
    v["gpulease:clouds"]["gcp"]["regions"] = ["us-central1"]
    with pytest.raises(ConfigError) as exc:
        parse(v, catalog)
    text = str(exc.value)
    assert 'gpulease:clusters[1]: no offering can satisfy cluster "b": no H100 in the configured' in text


def test_storage_days_must_increase(catalog):
    v = copy.deepcopy(BASE)
    v["gpulease:storage"][0].update(warm_after_days=60, cold_after_days=30)
    with pytest.raises(ConfigError) as exc:
        parse(v, catalog)
    assert "gpulease:storage[0].cold_after_days: must be greater than warm_after_days (60) (got 30)" in str(exc.value)


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_shipped_stacks_parse(catalog, stack):
    path = ROOT / "stacks" / f"Pulumi.{stack}.yaml"
    spec = parse_stack_config(read_stack_file(path), stack=stack, source=str(path),
                              catalog=catalog)
    assert spec.clusters and spec.budget_monthly_usd > 0
    assert spec.environment == stack


def test_shipped_stacks_differ_like_real_environments(catalog):
    specs = {s: parse_stack_config(read_stack_file(ROOT / "stacks" / f"Pulumi.{s}.yaml"),
                                   stack=s, source=s, catalog=catalog)
             for s in ("dev", "staging", "prod")}
    dev, staging, prod = specs["dev"], specs["staging"], specs["prod"]
    assert len(dev.clusters) == 1 and dev.clusters[0].interruptible
    assert dev.budget_monthly_usd < staging.budget_monthly_usd < prod.budget_monthly_usd
    assert any(c.gpus > 8 for c in staging.clusters)
    assert len(prod.clusters) >= 3 and set(prod.clouds) == {"aws", "gcp"}
    assert any(c.priority > 8 for c in prod.clusters)
    assert any(c.regions for c in prod.clusters)
    assert max(s.size_tb for s in prod.storage) >= 100


def test_cli_bad_config_exit_2_no_traceback(tmp_path):
    bad = yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())
    bad["config"]["gpulease:clusters"][0]["gpus"] = 0
    bad["config"]["gpulease:clusters"][0]["gpu"] = "A1000"
    f = tmp_path / "Pulumi.broken.yaml"
    f.write_text(yaml.safe_dump(bad))
    r = subprocess.run([sys.executable, "-m", "gpulease.cli", "plan", "--config", str(f)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert "gpulease:clusters[0].gpus: must be > 0 (got 0)" in r.stderr
    assert 'gpulease:clusters[0].gpu: unknown GPU "A1000" (did you mean "A100"?)' in r.stderr
    assert r.stdout == ""
