"""`gpulease recommend` end to end: a stack with an AWS and a GCP cluster, a month of history in
moto and the GCP fake, the JSON contract, the saving against the current plan, exits 0 / 1 / 2."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpulease.cli import main
from gpulease.recommend import profile as pf
from gpulease.recommend.saving import Profile, apply_to_values
from tests.fakes.gcp_compute_monitoring import FakeGcp
from tests.test_recommend_aws import bursty, cloud  # noqa: F401 (fixtures)
from tests.test_recommend_gcp import labels, ran

ROOT = Path(__file__).resolve().parents[1]
STACK = {
    "gpulease:owner": "ml-platform",
    "gpulease:cost_center": "cc-ml-training",
    "gpulease:budget_monthly_usd": 900000,
    "gpulease:clouds": {"aws": {"regions": ["us-east-1"]},
                        "gcp": {"project": "acme-ml-prod", "regions": ["us-central1"]}},
    "gpulease:clusters": [
        # all or nothing: the baseline must always be there, so every GPU runs all month
        {"name": "pretrain", "gpu": "H100", "gpus": 64, "hours_per_month": 730, "priority": 6,
         "regions": ["us-east-1"]},
        {"name": "eval", "gpu": "L4", "gpus": 8, "hours_per_month": 200, "priority": 6,
         "regions": ["us-central1"]},
    ]}
KEYS = {"name", "window_days", "samples", "observed", "profile", "current", "yaml"}


def write_stack(tmp_path: Path, values: dict = STACK) -> Path:
    p = tmp_path / "Pulumi.prod.yaml"
    p.write_text(yaml.safe_dump({"config": values}, sort_keys=False))
    return p


@pytest.fixture
def gcp(monkeypatch):
    fake = FakeGcp(project="acme-ml-prod")
    url = fake.start()
    monkeypatch.setenv("GPULEASE_GCP_ENDPOINT", url)
    yield fake
    fake.stop()


@pytest.fixture
def world(cloud, gcp):  # noqa: F811 - the AWS fixture
    """pretrain (AWS): bursty; eval (GCP): one g2-standard-96 (8 L4) busy 4 h a night."""
    bursty(cloud)
    vm = gcp.add_history(labels=labels("eval"))
    gcp.window = (cloud.start, cloud.end)
    for night in range(30):
        ran(gcp, vm, range(night * 24, night * 24 + 4), 77.0)
    return cloud, gcp


def run_json(argv, capsys) -> tuple[int, dict, str]:
    code = main(argv + ["--json"])
    out = capsys.readouterr()
    return code, json.loads(out.out, parse_constant=_not_json), out.err


def _not_json(name: str):
    """Strict JSON, as every other parser reads it: NaN / Infinity are not JSON (issue 24)."""
    raise AssertionError(f"{name} in recommend --json")


def plan_usd(values: dict) -> float:
    from gpulease.catalog import load_catalog
    from gpulease.config import parse_stack_config
    from gpulease.policy import decide

    spec = parse_stack_config(values, stack="prod", source="test", catalog=load_catalog())
    return round(decide(spec, load_catalog()).monthly_usd, 2)


def test_json_contract_profiles_and_saving(world, tmp_path, capsys):
    code, doc, err = run_json(["recommend", "--config", str(write_stack(tmp_path))], capsys)
    assert code == 0, err
    assert (doc["stack"], doc["environment"], doc["window_days"]) == ("prod", "prod", 30)
    by = {c["name"]: c for c in doc["clusters"]}
    assert set(by) == {"pretrain", "eval"} and all(KEYS <= set(c) for c in by.values())

    pre = by["pretrain"]
    assert (pre["cloud"], pre["region"], pre["error"]) == ("aws", "us-east-1", None)
    assert pre["profile"] == [{"gpus": 16, "hours_per_month": 730.0},
                              {"gpus": 40, "hours_per_month": 304.2},
                              {"gpus": 64, "hours_per_month": 121.7}]
    assert pre["current"] == {"gpus": 64, "hours_per_month": 730}
    assert pre["observed"]["gpus_per_node"] == 8 and pre["observed"]["peak_gpus"] == 64
    assert pre["samples"] == 2 * 720 + 30 * (3 * 10 + 3 * 4)
    assert yaml.safe_load(pre["yaml"]) == {"gpulease:clusters": [
        {"name": "pretrain", "demand": pre["profile"]}]}
    assert "replaces gpus: 64 and hours_per_month: 730" in pre["yaml"]

    ev = by["eval"]
    assert (ev["cloud"], ev["region"]) == ("gcp", "us-central1")
    assert ev["profile"] == [{"gpus": 8, "hours_per_month": round(730 * 4 / 24, 1)}]
    # the saving is the policy's: the plan with the pasted YAML against the current plan
    pasted = apply_to_values(STACK, Profile("eval", (pf.Step(8, 121.7),)))
    assert ev["saving_usd"] == pytest.approx(plan_usd(STACK) - plan_usd(pasted), abs=0.011)
    assert ev["saving_usd"] > 0
    pasted = apply_to_values(STACK, Profile("pretrain", tuple(
        pf.Step(s["gpus"], s["hours_per_month"]) for s in pre["profile"])))
    # the worked example of docs/recommend.md: the baseline committed at $43.344 a node-hour,
    # burst and peak on demand at $55.04, against all 8 nodes committed
    assert plan_usd(STACK) - plan_usd(pasted) == pytest.approx(119_522.11, abs=0.011)
    assert pre["saving_usd"] == pytest.approx(119_522.11, abs=0.011)
    assert err == ""                      # --json: no progress lines on stderr


def test_text_output_shows_the_yaml_and_the_saving(world, tmp_path, capsys):
    code = main(["recommend", "--config", str(write_stack(tmp_path))])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "      - {gpus: 16, hours_per_month: 730}" in out.out
    assert "      - {gpus: 8, hours_per_month: 121.7}   # peak: 8 GPUs busy 121.7 h/month" \
        in out.out
    assert "saves $" in out.out and "/month against the current plan" in out.out
    assert "reading 30 days of GPU utilization of eval in gcp:acme-ml-prod" in out.err


def test_one_cloud_failing_is_exit_1_and_the_other_is_reported(world, tmp_path, capsys):
    _, gcp = world
    gcp.faults["timeSeries"] = [503] * 5
    code, doc, err = run_json(["recommend", "--config", str(write_stack(tmp_path))], capsys)
    assert code == 1
    by = {c["name"]: c for c in doc["clusters"]}
    assert "503" in by["eval"]["error"] and "gave up after 5 attempts" in by["eval"]["error"]
    assert by["eval"]["profile"] == [] and by["eval"]["yaml"] == ""
    assert by["pretrain"]["error"] is None and len(by["pretrain"]["profile"]) == 3
    assert "exit 1" in err and "eval (gcp us-central1)" in err and "Traceback" not in err


def test_an_idle_cluster_is_priced_as_removed(cloud, gcp, tmp_path, capsys):  # noqa: F811
    asg, members = cloud.group("prod", "pretrain", 2)
    for iid in members:
        cloud.ran(asg, iid, range(cloud.hours), 0.5)
    code, doc, _ = run_json(["recommend", "--config", str(write_stack(tmp_path))], capsys)
    by = {c["name"]: c for c in doc["clusters"]}
    assert code == 0
    assert (by["pretrain"]["kind"], by["pretrain"]["profile"]) == ("idle", [])
    removed = {**STACK, "gpulease:clusters": [c for c in STACK["gpulease:clusters"]
                                              if c["name"] != "pretrain"]}
    assert by["pretrain"]["saving_usd"] == pytest.approx(plan_usd(STACK) - plan_usd(removed),
                                                         abs=0.011)
    assert by["eval"]["kind"] == "no-data" and by["eval"]["saving_usd"] is None


@pytest.mark.parametrize("extra,flag,fragment", [
    (["--window-days", "0"], "--window-days", "must be 1..42"),
    (["--window-days", "43"], "--window-days", "(got 43)"),
    (["--max-steps", "1"], "--max-steps", "a baseline and a peak at least"),
    (["--threshold", "0"], "--threshold", "must be > 0 and <= 100"),
])
def test_bad_arguments_exit_2_before_any_cloud_call(extra, flag, fragment, tmp_path, capsys,
                                                    monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")     # must never be called
    code = main(["recommend", "--config", str(write_stack(tmp_path))] + extra)
    err = capsys.readouterr().err
    assert code == 2 and f"{flag}: " in err and fragment in err and "Traceback" not in err


def test_an_unknown_stack_is_exit_2_with_did_you_mean(capsys):
    code = main(["recommend", "--stack", "prdo"])
    err = capsys.readouterr().err
    assert code == 2 and "did you mean" in err and "prod" in err


def test_a_stack_without_its_gcp_project_is_exit_2(tmp_path, capsys, monkeypatch):
    values = json.loads(json.dumps(STACK))
    values["gpulease:clusters"] = values["gpulease:clusters"][1:]
    del values["gpulease:clouds"]["aws"]
    monkeypatch.delenv("GPULEASE_GCP_ENDPOINT", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    code = main(["recommend", "--config", str(write_stack(tmp_path, values))])
    err = capsys.readouterr().err
    # no usable Application Default Credentials: said before any client is made, with the fix
    assert code == 2 and "gpulease recommend: no usable Google Cloud credentials" in err
    assert "gcloud auth application-default login" in err and "Cloud Monitoring" in err
    assert "Traceback" not in err


def test_help_imports_no_heavy_package():
    probe = ("import json, sys\nfrom gpulease.cli import main\n"
             "try:\n    main(['recommend', '--help'])\nexcept SystemExit:\n    pass\n"
             "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})), file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                       check=True)
    loaded = set(json.loads(p.stderr.strip().splitlines()[-1]))
    heavy = {"pulumi", "pulumi_aws", "pulumi_gcp", "boto3", "botocore", "google", "jinja2",
             "yaml", "rich", "moto", "pydantic"}
    assert "usage: gpulease recommend" in p.stdout and not loaded & heavy, loaded & heavy


def test_a_cluster_that_already_has_a_profile_shows_it_as_current(world, tmp_path, capsys):
    values = json.loads(json.dumps(STACK))
    pre = values["gpulease:clusters"][0]
    del pre["gpus"], pre["hours_per_month"]
    pre["demand"] = [{"gpus": 32, "hours_per_month": 730}, {"gpus": 64, "hours_per_month": 100}]
    code, doc, _ = run_json(["recommend", "--config", str(write_stack(tmp_path, values))], capsys)
    got = {c["name"]: c for c in doc["clusters"]}["pretrain"]
    assert code == 0
    assert got["current"] == {"gpus": 64, "hours_per_month": 730, "demand": pre["demand"]}
    assert "demand:   # replaces the current demand" in got["yaml"]
    # the observed baseline is half the configured one: the smaller commitment is cheaper
    assert got["profile"][0] == {"gpus": 16, "hours_per_month": 730.0}
    pasted = apply_to_values(values, Profile("pretrain", tuple(
        pf.Step(s["gpus"], s["hours_per_month"]) for s in got["profile"])))
    assert got["saving_usd"] == pytest.approx(plan_usd(values) - plan_usd(pasted), abs=0.011)
