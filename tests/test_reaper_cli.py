"""`gpulease reap` end to end: argument errors (exit 2), --destroy refusal, JSON shape on both clouds."""
from __future__ import annotations

import json
import time

import boto3
import pytest

from gpulease.cli import main
from gpulease import tags
from tests.fakes import moto_strict
from tests.fakes.gcp_compute_monitoring import FakeGcp

JSON_KEYS = {"cluster", "environment", "cloud", "region", "state", "reason", "action", "nodes",
             "max_gpu_utilization"}


@pytest.mark.parametrize("argv,flag,fragment", [
    (["reap"], "--stack", "--stack ENV (repeatable) or --all"),
    (["reap", "--all", "--threshold", "0"], "--threshold", "must be > 0 and <= 100"),
    (["reap", "--all", "--threshold", "150"], "--threshold", "(got 150)"),
    (["reap", "--all", "--idle-minutes", "0"], "--idle-minutes", "must be > 0"),
    (["reap", "--all", "--grace-minutes", "-5"], "--grace-minutes", "must be >= 0"),
    (["reap", "--all", "--max-actions", "0"], "--max-actions", "must be >= 1"),
    (["reap", "--all", "--cloud", "gcp"], "--project", "GOOGLE_CLOUD_PROJECT"),
])
def test_bad_arguments_exit_2_with_the_flag_named(argv, flag, fragment, capsys, monkeypatch):
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{flag}: " in err and fragment in err and "Traceback" not in err


def test_destroy_refused_without_pulumi_cli(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))          # no `pulumi` anywhere
    monkeypatch.setenv("PULUMI_HOME", str(tmp_path / "pulumi-home"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")   # must never be called
    code = main(["reap", "--stack", "dev", "--destroy", "--apply",
                 "--audit-log", str(tmp_path / "a.jsonl")])
    err = capsys.readouterr().err
    assert code == 2
    assert "refusing --destroy" in err and "needs the Pulumi CLI" in err
    assert not (tmp_path / "a.jsonl").exists()          # refused before anything ran


@pytest.fixture
def moto_env(monkeypatch):
    server, url = moto_strict.start_server()   # an empty account, backends warm
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", moto_strict.test_session())
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    yield
    server.stop()


def test_aws_json_document(moto_env, capsys, tmp_path):
    ec2 = boto3.client("ec2", region_name="us-west-2")
    asg = boto3.client("autoscaling", region_name="us-west-2")
    ec2.create_launch_template(LaunchTemplateName="lt-a", LaunchTemplateData={
        "ImageId": "ami-12c6146b", "InstanceType": "g6.xlarge"})
    asg.create_auto_scaling_group(
        AutoScalingGroupName="dev-sandbox", LaunchTemplate={"LaunchTemplateName": "lt-a"},
        MinSize=1, MaxSize=1, DesiredCapacity=1, AvailabilityZones=["us-west-2a"],
        Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True, "ResourceId": "dev-sandbox",
               "ResourceType": "auto-scaling-group"}
              for k, v in {tags.CLUSTER: "sandbox", tags.ENVIRONMENT: "dev",
                           tags.DECLARED: tags.declared_value("dev", "sandbox"),
                           tags.IDLE_MINUTES: "30", tags.FIRST_JOB_GRACE: "0"}.items()])
    audit = tmp_path / "audit.jsonl"
    code = main(["reap", "--stack", "dev", "--json", "--audit-log", str(audit)])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    (c,) = out["clusters"]
    assert JSON_KEYS <= set(c)
    # launched seconds ago (moto's clock): still setting up, never idle
    assert (c["cluster"], c["region"], c["state"], c["action"]) == (
        "sandbox", "us-west-2", "insufficient-data", "none")
    events = [json.loads(line)["event"] for line in audit.read_text().splitlines()]
    assert events == ["run-start", "decision", "run-end"]
    # the log is append-only: a second run adds, never rewrites
    main(["reap", "--stack", "dev", "--json", "--audit-log", str(audit)])
    assert len(audit.read_text().splitlines()) == 6


def test_gcp_text_dry_run_through_endpoint_override(capsys, monkeypatch, tmp_path):
    fake = FakeGcp(project="acme-ml")
    url = fake.start()
    try:
        monkeypatch.setenv("GPULEASE_GCP_ENDPOINT", url)
        now = time.time()
        ids = fake.add_mig("us-central1-b", "sb-mig", 2, launched=now - 3 * 3600, labels={
            tags.CLUSTER: "sandbox", tags.ENVIRONMENT: "dev", tags.IDLE_MINUTES: "30",
            tags.FIRST_JOB_GRACE: "0", tags.DECLARED: tags.declared_value("dev", "sandbox")})
        for i in ids:
            fake.put_points(i, now - 2 * 3600, now + 60, 0.4)
        code = main(["reap", "--all", "--cloud", "gcp", "--project", "acme-ml",
                     "--audit-log", str(tmp_path / "a.jsonl")])
        out = capsys.readouterr().out
        assert code == 0
        assert "would mark" in out and "dry run: nothing changed" in out
        assert "sandbox" in out and "0.4%" in out
        assert fake.mutations == []
    finally:
        fake.stop()


# ---- issue 14: bad input is exit 2 before any cloud call; run-time faults still give JSON -------
@pytest.mark.parametrize("argv,fragments", [
    (["--stack", "devv"], ['--stack: no stack "devv"', '(did you mean "dev"?)',
                           "stacks: dev, hybrid, prod, staging", "--all"]),
    (["--stack", "dev", "--stack", "prdo"], ['no stack "prdo"', '(did you mean "prod"?)']),
    (["--all", "--idle-minutes", "1000000000000"], ["--idle-minutes: must be > 0 and <= 10080"]),
    (["--all", "--grace-minutes", "20000"], ["--grace-minutes: must be >= 0 and <= 10080"]),
])
def test_bad_input_exits_2_before_touching_any_cloud(argv, fragments, capsys, monkeypatch,
                                                     tmp_path):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")   # must never be called
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    audit = tmp_path / "a.jsonl"
    assert main(["reap", *argv, "--apply", "--audit-log", str(audit)]) == 2
    err = capsys.readouterr().err
    assert all(f in err for f in fragments), err
    assert "Traceback" not in err and not audit.exists()


def test_audit_log_that_is_a_directory_is_bad_input(capsys, tmp_path):
    assert main(["reap", "--all", "--audit-log", str(tmp_path)]) == 2
    assert f"--audit-log: {tmp_path} is a directory" in capsys.readouterr().err


def test_clients_that_cannot_be_created_are_bad_input(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "not a url")
    monkeypatch.delenv("GPULEASE_GCP_ENDPOINT", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    code = main(["reap", "--all", "--project", "acme-ml", "--audit-log",
                 str(tmp_path / "a.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "Invalid endpoint: not a url" in err and "AWS_ENDPOINT_URL" in err
    # the key file GOOGLE_APPLICATION_CREDENTIALS names is missing: said with the fix
    assert "credentials: gpulease reap: no usable Google Cloud credentials" in err
    assert "missing.json" in err and "gcloud auth application-default login" in err
    assert not (tmp_path / "a.jsonl").exists()


def test_gateway_failure_still_prints_json_and_writes_the_audit(moto_env, capsys, monkeypatch,
                                                                tmp_path):
    """An HTML 5xx from a gateway on one cluster's action: exit 1, the JSON document and the
    audit record are written, the other cluster is reaped (the CLI end to end, real time)."""
    from datetime import datetime, timedelta, timezone

    from tests.fakes import moto_strict
    from tests.fakes.fault_proxy import FaultProxy

    moto_strict.install(monkeypatch)
    region = "us-west-2"
    ec2 = boto3.client("ec2", region_name=region)
    asg = boto3.client("autoscaling", region_name=region)
    cw = boto3.client("cloudwatch", region_name=region)
    ec2.create_launch_template(LaunchTemplateName="lt-a", LaunchTemplateData={
        "ImageId": "ami-12c6146b", "InstanceType": "g6.xlarge"})
    now = time.time()
    marked = tags.timestamp_label(now - 60 * 60)            # marked an hour ago
    for name in ("alpha", "beta"):
        asg.create_auto_scaling_group(
            AutoScalingGroupName=f"dev-{name}", LaunchTemplate={"LaunchTemplateName": "lt-a"},
            MinSize=1, MaxSize=1, DesiredCapacity=1, AvailabilityZones=[f"{region}a"],
            Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": k != tags.IDLE_SINCE,
                   "ResourceId": f"dev-{name}", "ResourceType": "auto-scaling-group"}
                  for k, v in {tags.CLUSTER: name, tags.ENVIRONMENT: "dev",
                               tags.DECLARED: tags.declared_value("dev", name),
                               tags.IDLE_MINUTES: "30", tags.FIRST_JOB_GRACE: "0",
                               tags.IDLE_SINCE: marked}.items()])
        (iid,) = [i["InstanceId"] for i in asg.describe_auto_scaling_groups(
            AutoScalingGroupNames=[f"dev-{name}"])["AutoScalingGroups"][0]["Instances"]]
        start = datetime.fromtimestamp(now, timezone.utc) - timedelta(hours=2)
        cw.put_metric_data(Namespace="CWAgent", MetricData=[{
            "MetricName": "nvidia_smi_utilization_gpu", "Value": 0.5,
            "Dimensions": [{"Name": "InstanceId", "Value": iid}],
            "Timestamp": start + timedelta(minutes=k)} for k in range(121)])
    import os
    proxy = FaultProxy(os.environ["AWS_ENDPOINT_URL"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.start())
    proxy.add("UpdateAutoScalingGroup", "html", style="doctype", status=503, times=None,
              body="AutoScalingGroupName=dev-alpha(&|$)")
    audit = tmp_path / "audit.jsonl"
    try:
        code = main(["reap", "--stack", "dev", "--apply", "--json", "--audit-log", str(audit)])
    finally:
        proxy.stop()
    out = capsys.readouterr()
    doc = json.loads(out.out)
    states = {c["cluster"]: c["state"] for c in doc["clusters"]}
    assert code == 1 and states == {"alpha": "error", "beta": "reaped"}
    assert "Traceback" not in out.err
    # the reason names the failed cluster (stderr; stdout holds the JSON document only)
    assert out.err.splitlines()[-1] == (
        f"exit 1 (failed at run time): a cloud call failed for 1 cluster: dev/alpha (aws "
        f"{region}); the other clusters were handled")
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    assert events[0]["event"] == "run-start" and events[-1]["event"] == "run-end"
    assert events[-1]["failed"] is True
    groups = {g["AutoScalingGroupName"]: g["DesiredCapacity"] for g in
              boto3.client("autoscaling", region_name=region,
                           endpoint_url=proxy.upstream).describe_auto_scaling_groups()[
                  "AutoScalingGroups"]}
    assert groups == {"dev-alpha": 1, "dev-beta": 0}
