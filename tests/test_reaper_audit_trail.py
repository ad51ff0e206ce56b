"""The audit trail survives (issue 24): a reaper that cannot write its audit record does not
act, says so on stderr, and still prints its JSON. /dev/full is a disk that is always full."""
from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone

import boto3
import pytest

from gpulease.cli import main
from gpulease import tags
from gpulease.errors import CloudError
from gpulease.reaper.audit import AuditLog, guarded
from tests.fakes import moto_strict

REGION = "us-west-2"
FULL = "/dev/full"
pytestmark = pytest.mark.skipif(not os.path.exists(FULL), reason="needs /dev/full (Linux)")


@pytest.fixture
def idle_marked_cluster(moto_url, monkeypatch):
    """dev/alpha on moto: one node, 0.5 % GPU for two hours, marked idle an hour ago: due."""
    moto_strict.point_boto_at(moto_url, monkeypatch)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    ec2 = boto3.client("ec2", region_name=REGION)
    asg = boto3.client("autoscaling", region_name=REGION)
    cw = boto3.client("cloudwatch", region_name=REGION)
    ec2.create_launch_template(LaunchTemplateName="lt-a", LaunchTemplateData={
        "ImageId": "ami-12c6146b", "InstanceType": "g6.xlarge"})
    now = time.time()
    asg.create_auto_scaling_group(
        AutoScalingGroupName="dev-alpha", LaunchTemplate={"LaunchTemplateName": "lt-a"},
        MinSize=1, MaxSize=1, DesiredCapacity=1, AvailabilityZones=[f"{REGION}a"],
        Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": k != tags.IDLE_SINCE,
               "ResourceId": "dev-alpha", "ResourceType": "auto-scaling-group"}
              for k, v in {tags.CLUSTER: "alpha", tags.ENVIRONMENT: "dev",
                           tags.DECLARED: tags.declared_value("dev", "alpha"),
                           tags.IDLE_MINUTES: "30", tags.FIRST_JOB_GRACE: "0",
                           tags.IDLE_SINCE: tags.timestamp_label(now - 3600)}.items()])
    (iid,) = [i["InstanceId"] for i in asg.describe_auto_scaling_groups(
        AutoScalingGroupNames=["dev-alpha"])["AutoScalingGroups"][0]["Instances"]]
    start = datetime.fromtimestamp(now, timezone.utc) - timedelta(hours=2)
    cw.put_metric_data(Namespace="CWAgent", MetricData=[{
        "MetricName": "nvidia_smi_utilization_gpu", "Value": 0.5,
        "Dimensions": [{"Name": "InstanceId", "Value": iid}],
        "Timestamp": start + timedelta(minutes=k)} for k in range(121)])
    return asg


def _desired(asg) -> int:
    (g,) = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["dev-alpha"])[
        "AutoScalingGroups"]
    return g["DesiredCapacity"]


def test_full_disk_apply_acts_on_nothing_and_still_prints_json(idle_marked_cluster, capsys,
                                                                tmp_path):
    # (test_the_same_run_with_a_writable_log_reaps: the cluster is really due)
    code = main(["reap", "--stack", "dev", "--apply", "--json", "--audit-log", FULL])
    out = capsys.readouterr()
    assert code == 1 and "Traceback" not in out.err
    doc = json.loads(out.out)
    (c,) = doc["clusters"]
    assert c["state"] == "error" and not c["applied"]
    assert "the audit log failed" in c["reason"] and "No space left on device" in c["reason"]
    assert doc["audit_log"] == {"path": FULL, "written": False, "error": (
        "cannot write the 'run-start' record to /dev/full: No space left on device")}
    assert _desired(idle_marked_cluster) == 1            # nothing scaled
    assert out.err.splitlines()[-1] == (
        "exit 1 (failed at run time): the audit log could not be written (cannot write the "
        "'run-start' record to /dev/full: No space left on device): nothing was changed; free "
        "space or pass another --audit-log and run again")


def test_the_same_run_with_a_writable_log_reaps(idle_marked_cluster, capsys, tmp_path):
    log = tmp_path / "audit.jsonl"
    assert main(["reap", "--stack", "dev", "--apply", "--json", "--audit-log", str(log)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["clusters"][0]["state"] == "reaped" and doc["audit_log"]["written"] is True
    assert _desired(idle_marked_cluster) == 0


def test_full_disk_dry_run_text_says_so(idle_marked_cluster, capsys):
    code = main(["reap", "--stack", "dev", "--audit-log", FULL])
    out = capsys.readouterr()
    assert code == 1 and "Traceback" not in out.err
    assert "audit log NOT written: cannot write the 'run-start' record" in out.out
    assert "would scale-to-zero" in out.out           # the report is still there


class _Recorder:
    cloud = "aws"
    label = "test"

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *a, **k: self.calls.append(name)


def test_guard_refuses_only_cloud_changing_calls_after_a_failure(tmp_path):
    audit = AuditLog(str(tmp_path / "a.jsonl"))
    ad = _Recorder()
    g = guarded(ad, audit)
    g.mark("ref", "v")
    g.discover(None)
    assert ad.calls == ["mark", "discover"] and g.cloud == "aws"
    audit.failed = "cannot write to x: No space left on device"
    for name in ("mark", "unmark", "claim", "scale_to_zero", "scale_to_baseline"):
        with pytest.raises(CloudError, match="does not act"):
            getattr(g, name)("ref")
    g.discover(None)
    g.release("ref", "key")                            # undoing our own claim stays allowed
    assert ad.calls == ["mark", "discover", "discover", "release"]
