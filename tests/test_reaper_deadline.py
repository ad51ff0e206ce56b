"""The reaper's deadline step (issue 37 item 3) against moto's server: a window job on spot
switched to on-demand when its progress falls behind and spot is gone, and back when spot
returns - through mark, re-check and act, dry run by default, with the audit record."""
from __future__ import annotations

import json

import boto3
import pytest

from gpulease import deadline as dl
from gpulease import tags
from gpulease.purchase import ON_DEMAND, SPOT
from gpulease.reaper import decision as d
from gpulease.reaper import engine
from gpulease.reaper.audit import AuditLog
from gpulease.reaper.aws import AwsReaper
from gpulease.retry import Backoff
from tests.fakes import moto_strict
from tests.fakes.fault_proxy import FaultProxy

REGION = "us-east-1"
BUCKET = "gpulease-dev-train-work"
PROGRESS_KEY = f"checkpoints/train/{dl.PROGRESS_OBJECT}"
START = 1_796_000_000.0 // 3600 * 3600          # a whole hour (tags keep minutes)
HOUR = 3600.0
SPOT_GROUP, OD_GROUP = f"train-{SPOT}", f"train-{ON_DEMAND}"


@pytest.fixture
def job(moto_url, monkeypatch):
    moto_strict.point_boto_at(moto_url, monkeypatch)
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET)
    asg = boto3.client("autoscaling", region_name=REGION)
    ec2 = boto3.client("ec2", region_name=REGION)
    common = {tags.CLUSTER: "train", tags.ENVIRONMENT: "dev",
              tags.DECLARED: tags.declared_value("dev", "train"),
              tags.DEADLINE_START: tags.timestamp_label(START),
              tags.DEADLINE: tags.timestamp_label(START + 10 * HOUR),
              tags.DEADLINE_WORK_MINUTES: "360", tags.DEADLINE_RESTART_MINUTES: "30",
              tags.DEADLINE_PROGRESS: f"s3://{BUCKET}/{PROGRESS_KEY}"}
    for role, size in ((SPOT, 2), (ON_DEMAND, 0)):
        name = f"train-{role}"
        ec2.create_launch_template(LaunchTemplateName=f"lt-{role}", LaunchTemplateData={
            "ImageId": "ami-12c6146b", "InstanceType": "g6.xlarge"})
        kv = dict(common, **{tags.DEADLINE_GROUP: role})
        asg.create_auto_scaling_group(
            AutoScalingGroupName=name, LaunchTemplate={"LaunchTemplateName": f"lt-{role}"},
            MinSize=0, MaxSize=2, DesiredCapacity=size, AvailabilityZones=[f"{REGION}a"],
            Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True, "ResourceId": name,
                   "ResourceType": "auto-scaling-group"} for k, v in kv.items()])

    class Job:
        def group(self, role):
            return asg.describe_auto_scaling_groups(AutoScalingGroupNames=[f"train-{role}"])[
                "AutoScalingGroups"][0]

        def desired(self):
            return self.group(SPOT)["DesiredCapacity"], self.group(ON_DEMAND)["DesiredCapacity"]

        def progress(self, share):
            s3.put_object(Bucket=BUCKET, Key=PROGRESS_KEY, Body=json.dumps(
                {"done": share * 1000, "total": 1000, "unit": "steps"}).encode())

        def spot_lost(self):
            """Every spot node interrupted and not replaced (no spot capacity): EC2 Auto
            Scaling marks an interrupted spot node unhealthy before it replaces it."""
            for i in self.group(SPOT)["Instances"]:
                asg.set_instance_health(InstanceId=i["InstanceId"], HealthStatus="Unhealthy")

    yield Job()
    # never touches data: the progress document is as the job wrote it
    body = s3.get_object(Bucket=BUCKET, Key=PROGRESS_KEY)["Body"].read()
    assert json.loads(body)["total"] == 1000


def reap(now, *, apply=True, audit=None):
    reaper = AwsReaper.for_region(REGION, backoff=Backoff(sleep=lambda s: None))
    reaper.discover = lambda envs: []          # (the idle reaper is not under test here)
    moto_strict.set_clock(now)
    return engine.run([reaper], policy=d.Policy(), apply=apply, environments=("dev",),
                      now=now, audit=audit, settle_s=0)


def only(report):
    (o,) = [o for o in report.outcomes if o.deadline is not None]
    return o


def test_switches_to_on_demand_when_behind_and_back_when_spot_returns(job, tmp_path):
    audit_path = tmp_path / "audit.jsonl"
    audit = AuditLog(str(audit_path))
    # 4 h in, 20 % done (the uniform line is at 40 %), the spot nodes interrupted
    job.progress(0.2)
    job.spot_lost()
    dry = only(reap(START + 4 * HOUR, apply=False))
    assert dry.action == d.DEADLINE_ON_DEMAND and not dry.applied
    assert job.desired() == (2, 0)                       # dry run: nothing moved
    o = only(reap(START + 4 * HOUR, audit=audit))
    assert o.action == d.DEADLINE_ON_DEMAND and o.applied, o.reason
    assert "behind the uniform-progress line" in o.reason
    assert job.desired() == (0, 2)
    assert o.deadline["targets"] == {SPOT_GROUP: 0, OD_GROUP: 2}
    assert o.deadline["seen"]["spot_available"] is False
    # an hour later, still behind the line at t + 2d: stays on on-demand
    job.progress(0.45)
    o = only(reap(START + 5 * HOUR, audit=audit))
    assert o.action == d.DEADLINE_STAY and job.desired() == (0, 2), o.reason
    # ahead of the line at t + 2d: the spot group asks again (make before break) ...
    job.progress(0.75)
    o = only(reap(START + 6 * HOUR, audit=audit))
    assert o.applied and job.desired() == (2, 2), o.reason
    # ... spot is there (its group fulfilled): the on-demand group goes to zero
    o = only(reap(START + 6.25 * HOUR, audit=audit))
    assert o.action == d.DEADLINE_SPOT and o.applied, o.reason
    assert job.desired() == (2, 0)
    assert "spot is available" in o.reason
    # the audit log has why, for every switch, with the mark that preceded it
    events = [json.loads(line) for line in audit_path.read_text().splitlines()]
    acts = [e for e in events if e["event"] == "deadline-action"]
    assert [(e["deadline"]["targets"][SPOT_GROUP],
             e["deadline"]["targets"][OD_GROUP]) for e in acts] == [(0, 2), (2, 2), (2, 0)]
    assert all(e["ok"] and e["mark"].startswith(f"{e['deadline']['targets'][SPOT_GROUP]}-")
               for e in acts)
    # the mark is cleared after acting
    assert tags.DEADLINE_SWITCH not in {t["Key"] for t in job.group(SPOT)["Tags"]}


def test_stopped_job_and_opt_out_are_left_alone(job):
    job.progress(0.0)
    job.spot_lost()
    boto3.client("autoscaling", region_name=REGION).update_auto_scaling_group(
        AutoScalingGroupName=SPOT_GROUP, MinSize=0, DesiredCapacity=0)
    o = only(reap(START + 4 * HOUR))
    assert o.action == d.DEADLINE_STAY and "does not restart a stopped job" in o.reason
    assert job.desired() == (0, 0)


def test_no_progress_published_is_taken_as_none_done(job):
    job.progress(0.5)
    boto3.client("s3", region_name=REGION).delete_object(Bucket=BUCKET, Key=PROGRESS_KEY)
    job.spot_lost()
    o = only(reap(START + 2 * HOUR, apply=False))
    assert o.action == d.DEADLINE_ON_DEMAND
    assert any("no progress published" in f for f in o.deadline["findings"])
    assert not any("progress not read" in f for f in o.deadline["findings"])   # a 404: missing
    job.progress(0.5)   # (the fixture checks the document afterwards)


#: S3's AccessDenied as AWS words it (the caller's ARN quoted: an account id may hold "404")
DENIED = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>'
          b"User: arn:aws:sts::140412345678:assumed-role/gpulease-reaper-dev/fn is not "
          b"authorized to perform: s3:GetObject because no VPC endpoint policy allows the "
          b"s3:GetObject action</Message><RequestId>4T0C9Z</RequestId><HostId>a1b2</HostId>"
          b"</Error>")


def test_progress_missing_is_decided_by_the_status_not_the_text(job, moto_url):
    """Issue 35 item 5: "none published" is S3's 404 (NoSuchKey), read from the HTTP status;
    a 403 whose message happens to quote "404" (an account id in the caller's ARN) is an
    unreadable document - a finding - not a missing one."""
    job.progress(0.5)
    proxy = FaultProxy(moto_url)
    url = proxy.start()
    try:
        # S3's REST calls carry no Action: the operation the proxy matches is empty
        proxy.add(r"^$", "body", status=403, page=DENIED, times=None)
        reaper = AwsReaper(region=REGION, backoff=Backoff(sleep=lambda s: None),
                           autoscaling=boto3.client("autoscaling", region_name=REGION),
                           ec2=boto3.client("ec2", region_name=REGION),
                           cloudwatch=boto3.client("cloudwatch", region_name=REGION),
                           s3=boto3.client("s3", region_name=REGION, endpoint_url=url))
        (ref,) = reaper.deadline_jobs(frozenset({"dev"}))
        assert ref.progress is None and "progress not read" in ref.progress_error
        assert "140412345678" in ref.progress_error       # the message, quoted
        assert proxy.injected() == [("", 403)]               # not retried: a refusal
        proxy.clear()
        (ref,) = reaper.deadline_jobs(frozenset({"dev"}))      # through the proxy, forwarded
        assert json.loads(ref.progress)["done"] == 500 and ref.progress_error is None
        boto3.client("s3", region_name=REGION).delete_object(Bucket=BUCKET, Key=PROGRESS_KEY)
        (ref,) = reaper.deadline_jobs(frozenset({"dev"}))
        assert ref.progress is None and ref.progress_error is None          # S3's 404
    finally:
        proxy.stop()
        job.progress(0.5)
