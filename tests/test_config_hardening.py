"""Bad stack files: every one is exit 2 with located findings, never a traceback or nonsense.

Each case here failed on 0.1 (traceback, or exit 0 with a value the clouds reject).
"""
from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
import yaml

from gpulease.cli import main
from gpulease.config import MAX_STACK_FILE_BYTES, read_stack_file

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT / "stacks" / "Pulumi.dev.yaml"


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def dev_config() -> dict:
    return yaml.safe_load(DEV.read_text())


def write(tmp_path: Path, doc: dict, name: str = "Pulumi.fz.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def plan(path: Path, *extra: str) -> tuple[int, str, str]:
    return run(["plan", "--config", str(path), *extra])


def assert_bad(result: tuple[int, str, str], *expected: str) -> None:
    code, out, err = result
    assert code == 2, (code, err)
    assert "Traceback" not in err and out == ""
    for e in expected:
        assert e in err, err


# ---- the file itself -------------------------------------------------------------------------
def test_not_utf8(tmp_path):
    p = tmp_path / "Pulumi.bin.yaml"
    p.write_bytes(b"config:\n  gpulease:owner: caf\xe9\n")
    assert_bad(plan(p), "config: not UTF-8 text (byte 0xe9 at line 2); save the file as UTF-8")


def test_non_string_key(tmp_path):
    p = tmp_path / "Pulumi.k.yaml"
    p.write_text(DEV.read_text() + "  1: one\n")
    assert_bad(plan(p), 'config: config keys are strings like "gpulease:owner" (got 1)')


@pytest.mark.parametrize("value,kind", [("!!binary aGVsbG8=", "binary data (!!binary)"),
                                        ("2026-01-01", "a date"),
                                        ("!!set {a: null}", "a set (!!set)")])
def test_values_that_are_not_plain_data(tmp_path, value, kind):
    p = tmp_path / "Pulumi.v.yaml"
    p.write_text(DEV.read_text().replace("gpulease:cost_center: cc-ml-research",
                                         f"gpulease:cost_center: {value}"))
    assert_bad(plan(p), f"gpulease:cost_center: {kind} is not a config value")


def test_nested_non_string_key(tmp_path):
    doc = dev_config()
    doc["config"]["gpulease:clouds"]["gcp"]["quota_gpus"][7] = 8
    assert_bad(plan(write(tmp_path, doc)),
               "gpulease:clouds.gcp.quota_gpus: keys are strings (got 7)")


def test_huge_file_is_refused_before_parsing(tmp_path):
    p = tmp_path / "Pulumi.big.yaml"
    filler = "# " + "x" * 1000 + "\n"
    p.write_text(DEV.read_text() + filler * (MAX_STACK_FILE_BYTES // len(filler) + 1))
    assert_bad(plan(p), "; a stack file is at most 1.0 MiB: is this the right file?")


def test_large_valid_file_parses_with_libyaml(tmp_path):
    # ~0.9 MiB of comments and data: read with libyaml, not the pure-Python parser.
    p = tmp_path / "Pulumi.large.yaml"
    body = DEV.read_text() + "".join(f"# {'y' * 200}\n" for _ in range(4000))
    p.write_text(body)
    assert p.stat().st_size < MAX_STACK_FILE_BYTES
    values = read_stack_file(p)
    assert values["gpulease:owner"] == "ml-platform"
    assert yaml.__with_libyaml__, "PyYAML without libyaml: stack files parse 10x slower"


# ---- keys ------------------------------------------------------------------------------------
@pytest.mark.parametrize("key,expected", [
    ("gpulease_reaper", 'gpulease_reaper: a config key needs a namespace: gpulease\'s keys are '
                        'written "gpulease:<key>" (did you mean "gpulease:reaper"?)'),
    ("gpulese:clusters", 'gpulese:clusters: unknown namespace "gpulese" (did you mean '
                         '"gpulease"?)'),
    ("GPULEASE:owner", 'GPULEASE:owner: unknown namespace "GPULEASE" (did you mean "gpulease"?)'),
])
def test_namespace_typos_are_not_ignored(tmp_path, key, expected):
    doc = dev_config()
    doc["config"][key] = {"schedule": "rate(15 minutes)"}
    assert_bad(plan(write(tmp_path, doc)), expected)


def test_other_namespaces_are_left_alone(tmp_path):
    doc = dev_config()
    doc["config"]["gcp:project"] = "acme-ml-dev"
    doc["config"]["aws:region"] = "us-east-1"
    code, _, err = plan(write(tmp_path, doc), "--json")
    assert code == 0, err


# ---- values ----------------------------------------------------------------------------------
@pytest.mark.parametrize("key,value,expected", [
    ("gpulease:budget_monthly_usd", float("inf"),
     "gpulease:budget_monthly_usd: must be a finite number (got Infinity)"),
    ("gpulease:budget_monthly_usd", float("nan"),
     "gpulease:budget_monthly_usd: must be a finite number (got NaN)"),
    ("gpulease:owner", "ML Platform Team",
     "gpulease:owner: 'ML Platform Team' is not a valid tag/label value: use 1-63 lowercase "
     'letters, digits, \'_\' or \'-\' (a GCP label value; AWS tags carry the same text) '
     '(e.g. "ml-platform-team")'),
    ("gpulease:cost_center", "c" * 64, "gpulease:cost_center: 'cccc"),
    ("gpulease:environment", "Prod", "gpulease:environment: 'Prod' is not a valid name"),
    ("gpulease:environment", "prod-", "gpulease:environment: 'prod-' is not a valid name"),
])
def test_values_the_clouds_reject(tmp_path, key, value, expected):
    doc = dev_config()
    doc["config"][key] = value
    assert_bad(plan(write(tmp_path, doc)), expected)


@pytest.mark.parametrize("path,value,expected", [
    (("gcp", "project"), "Not A Project!",
     "gpulease:clouds.gcp.project: 'Not A Project!' is not a valid GCP project id"),
    (("gcp", "quota_gpus", "us-central1"), -1,
     "gpulease:clouds.gcp.quota_gpus.us-central1: must be >= 0 (got -1)"),
])
def test_cloud_values_the_clouds_reject(tmp_path, path, value, expected):
    doc = dev_config()
    node = doc["config"]["gpulease:clouds"]
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    assert_bad(plan(write(tmp_path, doc)), expected)


@pytest.mark.parametrize("field,value,expected", [
    ("idle_minutes", 10 ** 12, "gpulease:clusters[0].idle_minutes: must be <= 10080"),
    ("gpus", 10 ** 9, "gpulease:clusters[0].gpus: must be <= 100000"),
    ("hours_per_month", float("nan"),
     "gpulease:clusters[0].hours_per_month: must be a finite number (got nan)"),
    ("gpu", {"model": "L4"}, "gpulease:clusters[0].gpu: must be a string"),
    ("regions", "us-central1", "gpulease:clusters[0].regions: must be a list"),
    ("name", "sandbox-", "gpulease:clusters[0].name: 'sandbox-' is not a valid name"),
])
def test_cluster_values(tmp_path, field, value, expected):
    doc = dev_config()
    doc["config"]["gpulease:clusters"][0][field] = value
    assert_bad(plan(write(tmp_path, doc)), expected)


def test_aws_ids_are_checked(tmp_path):
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.staging.yaml").read_text())
    doc["config"]["gpulease:clouds"]["aws"]["vpc_id"] = "my-vpc"
    doc["config"]["gpulease:clouds"]["aws"]["subnet_ids"] = ["subnet-0123456789abcdef0", "sn-1"]
    assert_bad(plan(write(tmp_path, doc, "Pulumi.staging.yaml")),
               "gpulease:clouds.aws.vpc_id: 'my-vpc' is not a valid VPC id",
               "gpulease:clouds.aws.subnet_ids[1]: 'sn-1' is not a valid subnet id")


@pytest.mark.parametrize("value", ["12345", 12345])
def test_numeric_cost_center_is_a_string(tmp_path, value):
    doc = dev_config()
    doc["config"]["gpulease:cost_center"] = value
    code, out, err = plan(write(tmp_path, doc), "--json")
    assert code == 0, err
    labels = [r["tags"] for r in json.loads(out)["resources"] if r["tags"]]
    assert labels and all(t["gpulease-cost-center"] == "12345" for t in labels)


# ---- the environment name --------------------------------------------------------------------
def test_stack_named_Prod_needs_an_explicit_environment(tmp_path):
    doc = dev_config()
    p = write(tmp_path, doc, "Pulumi.Prod.yaml")
    assert_bad(plan(p), 'gpulease:environment: the environment defaults to the stack name "Prod"',
               'set gpulease:environment: "prod" or rename the stack')
    doc["config"]["gpulease:environment"] = "prod"
    p.write_text(yaml.safe_dump(doc))
    code, out, err = plan(p, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["environment"] == "prod"
    buckets = [r for r in doc["resources"] if r["type"] == "gcp:storage/bucket:Bucket"]
    # one environment everywhere: labels, names, protection
    assert buckets and all(r["protect"] for r in buckets)
    assert all(r["inputs"]["name"].startswith("gpulease-prod-") for r in buckets)
    assert {r["tags"]["gpulease-environment"] for r in doc["resources"] if r["tags"]} == {"prod"}


# ---- warnings --------------------------------------------------------------------------------
def test_no_clusters_is_a_warning_the_plan_shows(tmp_path):
    doc = dev_config()
    doc["config"]["gpulease:clusters"] = []
    p = write(tmp_path, doc)
    code, out, err = plan(p, "--json")
    assert code == 0, err
    assert any("gpulease:clusters: no clusters configured; the plan would be empty" in w
               for w in json.loads(out)["warnings"])
    code, out, _ = plan(p)
    assert code == 0 and "Warnings (1)" in out and "no clusters configured" in out
    code, _, err = run(["explain", "--config", str(p)])
    assert "warning: " in err and "no clusters configured" in err


# ---- the program reads config through pulumi.Config ------------------------------------------
def test_program_reports_typo_keys_of_the_stack_file():
    from gpulease.config import read_stack_file as read, values_for_pulumi
    from gpulease.errors import ConfigError
    from gpulease.planner.mocks import run_program
    from gpulease.planner.program import load

    program = load().main

    values = read(DEV)
    with pytest.raises(ConfigError) as exc:
        run_program(lambda: program(file_keys=[*values, "gpulease:budjet_monthly_usd"]),
                    stack="dev", config=values_for_pulumi(values))
    assert 'gpulease:budjet_monthly_usd: unknown key (did you mean ' \
           '"gpulease:budget_monthly_usd"?)' in str(exc.value)


def test_program_reads_the_stack_file_keys_itself_under_pulumi_up():
    # `pulumi up` gives the program no file keys: it reads them beside itself.
    from gpulease.planner.program import load
    from gpulease.program import _stack_file_keys

    project = load().PROJECT_DIR   # the program's own project directory (Pulumi.yaml, stacks/)
    assert "gpulease:clusters" in _stack_file_keys("dev", project)
    assert _stack_file_keys("no-such-stack", project) == []


def test_every_finding_of_a_large_stack_at_once(tmp_path):
    doc = dev_config()
    doc["config"]["gpulease:clusters"] = [dict(doc["config"]["gpulease:clusters"][0],
                                              name=f"c{i}", gpus=0) for i in range(2000)]
    code, _, err = plan(write(tmp_path, doc))
    assert code == 2 and err.count("must be > 0 (got 0)") == 2000


def test_infinite_policy_rates_are_refused(tmp_path):
    doc = dev_config()
    doc["config"]["gpulease:policy"] = {"spot_restart_minutes": float("inf"),
                                        "spot_interruptions_per_hour": float("nan")}
    assert_bad(plan(write(tmp_path, doc)),
               "gpulease:policy.spot_restart_minutes: must be a finite number (got inf)",
               "gpulease:policy.spot_interruptions_per_hour: must be a finite number (got nan)")


# ---- strict types (issue 24): booleans are not numbers, floats are not counts ----------------
def _set(doc: dict, path: tuple, value) -> None:
    node = doc["config"]
    for part in path[:-1]:
        node = node.setdefault(part, {}) if isinstance(part, str) else node[part]
    node[path[-1]] = value


@pytest.mark.parametrize("path,value,expected", [
    (("gpulease:clusters", 0, "demand"), [{"gpus": True, "hours_per_month": 730}],
     "gpulease:clusters[0].demand[0].gpus: must be a whole number (got true: true/false is not "
     "a number; write the number)"),
    (("gpulease:clusters", 0, "demand"), [{"gpus": 4, "hours_per_month": True}],
     "gpulease:clusters[0].demand[0].hours_per_month: must be a number (got true"),
    (("gpulease:policy", "commitment_horizon_months"), True,
     "gpulease:policy.commitment_horizon_months: must be a whole number (got true"),
    (("gpulease:policy", "commitment_horizon_months"), 12.0,
     "gpulease:policy.commitment_horizon_months: must be a whole number (got 12.0: a count has "
     "no fraction; write 12)"),
    (("gpulease:clouds", "gcp", "quota_gpus", "us-central1"), True,
     "gpulease:clouds.gcp.quota_gpus.us-central1: must be a whole number (got true"),
    (("gpulease:clouds", "gcp", "quota_gpus", "us-central1"), 8.5,
     "gpulease:clouds.gcp.quota_gpus.us-central1: must be a whole number (got 8.5: a count has "
     "no fraction; write a whole number)"),
    (("gpulease:budget_monthly_usd",), True,
     "gpulease:budget_monthly_usd: must be a number (got true: true/false is not a number"),
    (("gpulease:budget_monthly_usd",), 1e308,
     "gpulease:budget_monthly_usd: must be <= 1000000000000 (got 1e+308)"),
    (("gpulease:clusters", 0, "gpus"), 4.0,
     "gpulease:clusters[0].gpus: must be a whole number (got 4.0: a count has no fraction; "
     "write 4)"),
    (("gpulease:clusters", 0, "gpus"), "4",
     "gpulease:clusters[0].gpus: must be a whole number, not text (got '4': write it without "
     "quotes)"),
    (("gpulease:clusters", 0, "idle_minutes"), False,
     "gpulease:clusters[0].idle_minutes: must be a whole number (got false"),
    (("gpulease:storage", 0, "size_tb"), True,
     "gpulease:storage[0].size_tb: must be a number (got true"),
    (("gpulease:reaper", "grace_minutes"), True,
     "gpulease:reaper.grace_minutes: must be a whole number (got true"),
    (("gpulease:bootstrap", "autostop_minutes"), 30.5,
     "gpulease:bootstrap.autostop_minutes: must be a whole number (got 30.5"),
    (("gpulease:clouds", "gcp", "ssh_via_iap"), 1,
     "gpulease:clouds.gcp.ssh_via_iap: must be true or false (got 1)"),
    (("gpulease:policy", "spot_restart_minutes"), 1e308,
     "gpulease:policy.spot_restart_minutes: must be <= 1440 (got 1e+308)"),
    (("gpulease:policy", "spot_interruptions_per_hour"), 1e300,
     "gpulease:policy.spot_interruptions_per_hour: must be <= 60 (got 1e+300)"),
])
def test_strict_types_in_every_key(tmp_path, path, value, expected):
    doc = dev_config()
    if path[-1] == "demand":
        for k in ("gpus", "hours_per_month"):
            doc["config"]["gpulease:clusters"][0].pop(k, None)
    _set(doc, path, value)
    assert_bad(plan(write(tmp_path, doc)), expected)


def test_whole_floats_where_floats_belong_still_plan(tmp_path):
    doc = dev_config()
    doc["config"]["gpulease:clusters"][0]["hours_per_month"] = 200      # an int for a float
    doc["config"]["gpulease:budget_monthly_usd"] = "1500"               # as `pulumi up` gives it
    code, _, err = plan(write(tmp_path, doc), "--json")
    assert code == 0, err


# ---- the catalog a stack file asks for is reported at the stack file's key ----------------------
@pytest.mark.parametrize("values,expected", [
    ({"gpulease:catalog_version": "2026.13.01"},
     ['gpulease:catalog_version: catalog version \'2026.13.01\' cannot be used (below)',
      'unknown catalog version "2026.13.01"']),
    ({"gpulease:catalog": "no-such-catalog.json"},
     ["gpulease:catalog: the catalog file 'no-such-catalog.json' cannot be used (below)",
      "no-such-catalog.json: No such file or directory"]),
    ({"gpulease:catalog": "x.json", "gpulease:catalog_version": "2026.12.03"},
     ["gpulease:catalog: gives a catalog file and gpulease:catalog_version a shipped version: "
      "keep one"]),
])
def test_a_bad_catalog_key_names_the_stack_file(tmp_path, values, expected):
    doc = dev_config()
    doc["config"].update(values)
    p = write(tmp_path, doc)
    result = plan(p)
    assert_bad(result, *expected)
    # at the key's line and column in the file
    key = expected[0].split(": ")[0]
    line = next(i for i, t in enumerate(p.read_text().split("\n"), 1)
                if t.lstrip().startswith(f"{key}:"))
    assert re.search(rf"{re.escape(str(p))}:{line}:\d+: {re.escape(expected[0])}", result[2]), \
        result[2]
