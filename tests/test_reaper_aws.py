"""The reaper against moto's server over real HTTP (boto3 via AWS_ENDPOINT_URL): issue 7's scenarios.

Time is simulated by passing ``now`` to the engine: metric points are published with timestamps
relative to each instance's real (moto) launch time, so windows, grace periods and launch checks
are all exercised for real.
"""
from __future__ import annotations

import datetime as dt
import itertools
import json

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError

from gpulease.catalog import parse_catalog
from gpulease import tags
from gpulease.reaper import decision as d
from gpulease.reaper import engine
from gpulease.reaper.audit import AuditLog
from gpulease.reaper.aws import METRIC, NAMESPACE, AwsReaper
from gpulease.retry import Backoff
from tests.fakes import moto_strict

REGION = "us-east-1"
BUCKET = "gpulease-dev-sandbox-data"
OBJECTS = {"datasets/a.parquet": b"A" * 1000, "checkpoints/step-100.pt": b"C" * 500}
_names = itertools.count(1)


@pytest.fixture
def aws(moto_url, monkeypatch):
    """Fresh moto state, credentials for it, and a bucket with objects checked after the test."""
    moto_strict.point_boto_at(moto_url, monkeypatch)
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET)
    for k, body in OBJECTS.items():
        s3.put_object(Bucket=BUCKET, Key=k, Body=body)
    env = Env()
    yield env
    # Every path (mark, unmark, scale, skip, failure) leaves the bucket and its objects intact.
    listed = s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    assert {o["Key"]: o["Size"] for o in listed} == {k: len(v) for k, v in OBJECTS.items()}
    for k, body in OBJECTS.items():
        assert s3.get_object(Bucket=BUCKET, Key=k)["Body"].read() == body


class Env:
    """Builds gpulease-shaped AWS state in moto (what the cluster component would create)."""

    def __init__(self):
        self.asg = boto3.client("autoscaling", region_name=REGION)
        self.ec2 = boto3.client("ec2", region_name=REGION)
        self.cw = boto3.client("cloudwatch", region_name=REGION)

    def cluster(self, env: str, name: str, nodes: int = 2, idle_minutes: int = 30,
                extra: dict | None = None, gpulease: bool = True,
                declared: bool = True) -> tuple[str, list[str], float]:
        n = next(_names)
        lt = f"lt-{name}-{n}"
        self.ec2.create_launch_template(LaunchTemplateName=lt, LaunchTemplateData={
            "ImageId": "ami-12c6146b", "InstanceType": "g6.xlarge"})
        asg = f"{env}-{name}-{n}"
        # (FIRST_JOB_GRACE 0: the scenarios start right after creation; the first-job grace has
        # tests of its own)
        kv = {tags.CLUSTER: name, tags.ENVIRONMENT: env, tags.IDLE_MINUTES: str(idle_minutes),
              tags.DECLARED: tags.declared_value(env, name),
              tags.FIRST_JOB_GRACE: "0"} \
            if gpulease else {"team": "someone-else"}
        if not declared:
            kv.pop(tags.DECLARED, None)
        kv.update(extra or {})
        self.asg.create_auto_scaling_group(
            AutoScalingGroupName=asg, LaunchTemplate={"LaunchTemplateName": lt},
            MinSize=nodes, MaxSize=nodes, DesiredCapacity=nodes, AvailabilityZones=[f"{REGION}a"],
            Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True, "ResourceId": asg,
                   "ResourceType": "auto-scaling-group"} for k, v in kv.items()])
        ids = [i["InstanceId"] for i in self.group(asg)["Instances"]]
        launched = min(i["LaunchTime"].timestamp() for r in self.ec2.describe_instances(
            InstanceIds=ids)["Reservations"] for i in r["Instances"])
        return asg, ids, launched

    def group(self, asg: str) -> dict:
        return self.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[asg])[
            "AutoScalingGroups"][0]

    def group_tags(self, asg: str) -> dict:
        return {t["Key"]: t["Value"] for t in self.group(asg)["Tags"]}

    def util(self, ids, start: float, end: float, value: float, step: int = 60) -> None:
        data = []
        for iid in ids:
            t = start
            while t < end:
                data.append({"MetricName": METRIC, "Value": value,
                             "Dimensions": [{"Name": "InstanceId", "Value": iid}],
                             "Timestamp": dt.datetime.fromtimestamp(t, dt.timezone.utc)})
                t += step
        for off in range(0, len(data), 1000):
            self.cw.put_metric_data(Namespace=NAMESPACE, MetricData=data[off:off + 1000])

    def reaper(self, **kw) -> AwsReaper:
        return AwsReaper.for_region(REGION, backoff=Backoff(sleep=lambda s: None), **kw)


def reap(reaper, now, *, envs=("dev",), apply=True, grace=30, audit=None, **kw):
    no_reservations(reaper)
    moto_strict.set_clock(now)      # the fake publishes metrics late, as of this simulated now
    return engine.run([reaper], policy=d.Policy(grace_minutes=grace, **kw.pop("policy", {})),
                      apply=apply, environments=envs, now=now, audit=audit,
                      settle_s=kw.pop("settle_s", 0), **kw)


def no_reservations(reaper, found=()):
    """moto has no model of capacity reservations: answer DescribeCapacityReservations here."""
    def answer(**_):
        return (AWSResponse("http://moto/", 200, {}, None),
                {"CapacityReservations": list(found),
                 "ResponseMetadata": {"HTTPStatusCode": 200, "RequestId": "req-test-odcr"}})
    reaper.ec2.meta.events.unregister("before-call.ec2.DescribeCapacityReservations",
                                      unique_id="gpulease-test-odcr")
    reaper.ec2.meta.events.register("before-call.ec2.DescribeCapacityReservations", answer,
                                    unique_id="gpulease-test-odcr")


def by_cluster(report) -> dict:
    return {o.cluster: o for o in report.outcomes}


# ---- scenarios ------------------------------------------------------------------------------
def test_idle_cluster_marked_then_reaped_after_grace_only(aws, tmp_path):
    asg, ids, t0 = aws.cluster("dev", "sandbox")
    aws.util(ids, t0, t0 + 120 * 60, 1.5)
    r = aws.reaper()
    log = tmp_path / "audit.jsonl"
    with AuditLog(str(log)) as audit:
        first = by_cluster(reap(r, t0 + 40 * 60, audit=audit))["sandbox"]
    assert (first.state, first.action, first.applied) == (d.MARKED, d.MARK, True)
    assert tags.IDLE_SINCE in aws.group_tags(asg)
    assert first.max_gpu_utilization == pytest.approx(1.5)

    during = by_cluster(reap(r, t0 + 60 * 60))["sandbox"]       # 20 min into a 30-min grace
    assert (during.state, during.action) == (d.MARKED, d.NONE)
    assert "grace period ends" in during.reason
    assert aws.group(asg)["DesiredCapacity"] == 2

    after = by_cluster(reap(r, t0 + 75 * 60))["sandbox"]
    assert (after.state, after.action, after.applied) == (d.REAPED, d.SCALE_TO_ZERO, True)
    g = aws.group(asg)
    assert (g["MinSize"], g["DesiredCapacity"], g["MaxSize"]) == (0, 0, 2)
    assert aws.ec2.describe_launch_templates()["LaunchTemplates"]  # template left in place
    events = [json.loads(x)["event"] for x in log.read_text().splitlines()]
    assert events[0] == "run-start" and "decision" in events and events[-1] == "run-end"


def test_dry_run_changes_nothing(aws):
    asg, ids, t0 = aws.cluster("dev", "sandbox")
    aws.util(ids, t0, t0 + 120 * 60, 0.0)
    o = by_cluster(reap(aws.reaper(), t0 + 40 * 60, apply=False))["sandbox"]
    assert (o.state, o.action, o.applied) == (d.IDLE, d.MARK, False)
    assert tags.IDLE_SINCE not in aws.group_tags(asg)


def test_busy_cluster_untouched(aws):
    asg, ids, t0 = aws.cluster("dev", "train")
    aws.util(ids[:1], t0, t0 + 60 * 60, 0.0)
    aws.util(ids[1:], t0, t0 + 60 * 60, 87.0)    # one busy node keeps the whole cluster
    o = by_cluster(reap(aws.reaper(), t0 + 40 * 60, grace=0))["train"]
    # the cluster is not marked or scaled; its idle node is marked on its own (issue 21 item 2)
    assert (o.state, o.action) == (d.BUSY, d.MARK_NODES)
    assert o.max_gpu_utilization == pytest.approx(87.0)
    assert tags.IDLE_SINCE not in aws.group_tags(asg)
    assert aws.group(asg)["DesiredCapacity"] == 2
    marks = {t["ResourceId"] for t in aws.ec2.describe_tags(Filters=[
        {"Name": "key", "Values": [tags.NODE_IDLE_SINCE]}])["Tags"]}
    assert marks == {ids[0]}


def test_cluster_turning_busy_during_grace_is_unmarked(aws):
    asg, ids, t0 = aws.cluster("dev", "finetune")
    aws.util(ids, t0, t0 + 45 * 60, 0.5)
    aws.util(ids, t0 + 45 * 60, t0 + 90 * 60, 64.0)
    r = aws.reaper()
    assert by_cluster(reap(r, t0 + 40 * 60))["finetune"].state == d.MARKED
    o = by_cluster(reap(r, t0 + 80 * 60))["finetune"]             # grace is over, but busy now
    assert (o.state, o.action, o.applied) == (d.BUSY, d.UNMARK, True)
    assert tags.IDLE_SINCE not in aws.group_tags(asg)
    assert aws.group(asg)["DesiredCapacity"] == 2


def test_recheck_right_before_acting_catches_a_job_that_just_started(aws):
    asg, ids, t0 = aws.cluster("dev", "sandbox")
    aws.util(ids, t0, t0 + 70 * 60, 0.0)
    r = aws.reaper()
    reap(r, t0 + 40 * 60)
    now = t0 + 75 * 60
    reads = []

    def job_starts(**_):   # a job's first minutes arrive between the first read and the action
        reads.append(1)
        if len(reads) == 1:   # (published late: moto shows datapoints 3 min after their time)
            aws.util(ids[:1], now - 5 * 60, now, 99.0)
    r.cloudwatch.meta.events.register("after-call.monitoring.GetMetricData", job_starts)
    o = by_cluster(reap(r, now))["sandbox"]
    assert len(reads) == 2
    # busy now: the cluster mark goes and nothing is scaled; the idle sibling is marked alone
    assert (o.state, o.action) == (d.BUSY, d.MARK_NODES)
    assert [(a["node"], a["action"]) for a in o.as_json()["node_actions"]] == [(ids[1], "mark")]
    assert tags.IDLE_SINCE not in aws.group_tags(asg)
    assert aws.group(asg)["DesiredCapacity"] == 2


def test_untagged_idle_instances_and_groups_untouched(aws):
    plain = aws.ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                                  InstanceType="g6.xlarge")["Instances"][0]["InstanceId"]
    other, other_ids, t0 = aws.cluster("dev", "x", gpulease=False)
    aws.util([plain, *other_ids], t0, t0 + 120 * 60, 0.0)
    r = aws.reaper()
    for now in (t0 + 40 * 60, t0 + 80 * 60):
        report = reap(r, now, envs=None, grace=0)
        assert report.outcomes == []
    state = aws.ec2.describe_instances(InstanceIds=[plain])["Reservations"][0]["Instances"][0]
    assert state["State"]["Name"] == "running" and not state.get("Tags")
    assert aws.group(other)["DesiredCapacity"] == 2
    assert tags.IDLE_SINCE not in aws.group_tags(other)


def test_other_environment_untouched(aws):
    mine, mine_ids, t0 = aws.cluster("dev", "sandbox")
    theirs, their_ids, _ = aws.cluster("staging", "sandbox")
    aws.util(mine_ids + their_ids, t0, t0 + 120 * 60, 0.0)
    r = aws.reaper()
    reap(r, t0 + 40 * 60, grace=0)
    report = reap(r, t0 + 80 * 60, grace=0)
    assert [(o.environment, o.state) for o in report.outcomes] == [("dev", d.REAPED)]
    assert aws.group(mine)["DesiredCapacity"] == 0
    assert aws.group(theirs)["DesiredCapacity"] == 2
    assert tags.IDLE_SINCE not in aws.group_tags(theirs)


def test_missing_or_partial_metrics_mean_no_action(aws):
    none_asg, _, t0 = aws.cluster("dev", "nodata")
    gap_asg, gap_ids, _ = aws.cluster("dev", "gappy")
    aws.util(gap_ids, t0, t0 + 20 * 60, 0.0)
    aws.util(gap_ids, t0 + 30 * 60, t0 + 60 * 60, 0.0)   # a 10-min hole inside the window
    report = by_cluster(reap(aws.reaper(), t0 + 45 * 60, grace=0))
    assert report["nodata"].state == d.INSUFFICIENT and "no GPU utilization data" in \
        report["nodata"].reason
    assert report["gappy"].state == d.INSUFFICIENT and "gap" in report["gappy"].reason
    for asg in (none_asg, gap_asg):
        assert tags.IDLE_SINCE not in aws.group_tags(asg)
        assert aws.group(asg)["DesiredCapacity"] == 2


def test_just_launched_nodes_are_not_idle(aws):
    asg, ids, t0 = aws.cluster("dev", "fresh")
    aws.util(ids, t0, t0 + 20 * 60, 0.0)
    o = by_cluster(reap(aws.reaper(), t0 + 20 * 60, grace=0))["fresh"]
    assert o.state == d.INSUFFICIENT
    # the 30-min window ends 5 min before now (metrics are published late): [t0 - 15, t0 + 15)
    assert "no GPU utilization data for the first 15 min of the 30-min window" in o.reason


def test_opt_out_tag_always_wins(aws):
    asg, ids, t0 = aws.cluster("dev", "keepme", extra={tags.KEEP: "true",
                                                        tags.IDLE_SINCE: "20200101t0000z"})
    aws.util(ids, t0, t0 + 120 * 60, 0.0)
    o = by_cluster(reap(aws.reaper(), t0 + 80 * 60, grace=0))["keepme"]
    assert (o.state, o.action) == (d.SKIPPED, d.NONE) and tags.KEEP in o.reason
    assert aws.group(asg)["DesiredCapacity"] == 2


def test_throttling_is_retried_with_backoff(aws):
    asg, ids, t0 = aws.cluster("dev", "sandbox")
    aws.util(ids, t0, t0 + 120 * 60, 0.0)
    r = aws.reaper()
    reap(r, t0 + 40 * 60)
    thrown = []

    def throttle(**_):
        if not thrown:
            thrown.append(1)
            raise ClientError({"Error": {"Code": "Throttling", "Message": "Rate exceeded"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}},
                              "UpdateAutoScalingGroup")
    r.autoscaling.meta.events.register("before-call.autoscaling.UpdateAutoScalingGroup", throttle)
    o = by_cluster(reap(r, t0 + 75 * 60))["sandbox"]
    assert o.state == d.REAPED
    assert thrown and r.backoff.retries == 1
    assert r.calls["autoscaling.update_auto_scaling_group"] == 2
    assert aws.group(asg)["DesiredCapacity"] == 0


def test_one_failing_cluster_does_not_stop_the_others(aws):
    bad, bad_ids, t0 = aws.cluster("dev", "alpha")
    good, good_ids, _ = aws.cluster("dev", "beta")
    aws.util(bad_ids + good_ids, t0, t0 + 120 * 60, 0.0)
    r = aws.reaper()
    reap(r, t0 + 40 * 60)

    def deny(params, **_):
        if params.get("AutoScalingGroupName") == bad:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "not allowed"},
                               "ResponseMetadata": {"HTTPStatusCode": 403}},
                              "UpdateAutoScalingGroup")
    r.autoscaling.meta.events.register(
        "before-parameter-build.autoscaling.UpdateAutoScalingGroup", deny)
    report = reap(r, t0 + 75 * 60)
    out = by_cluster(report)
    assert out["alpha"].state == d.ERROR and "AccessDenied" in out["alpha"].reason
    assert out["beta"].state == d.REAPED
    assert report.exit_code == 1
    assert aws.group(bad)["DesiredCapacity"] == 2 and aws.group(good)["DesiredCapacity"] == 0


def test_per_run_cap(aws):
    groups = []
    for name in ("a", "b", "c"):
        asg, ids, t0 = aws.cluster("dev", name)
        aws.util(ids, t0 - 60, t0 + 120 * 60, 0.0)
        groups.append(asg)
    r = aws.reaper()
    reap(r, t0 + 40 * 60)
    report = reap(r, t0 + 75 * 60, max_actions=2)
    states = [o.state for o in report.outcomes]
    assert states == [d.REAPED, d.REAPED, d.SKIPPED]
    assert "per-run cap of 2" in report.outcomes[2].reason
    assert aws.group(groups[2])["DesiredCapacity"] == 2


CATALOG = parse_catalog({
    "format": "gpulease-catalog/1", "version": "test", "as_of": "2026-12-01",
    "offerings": [{"cloud": "aws", "region": REGION, "instance_type": "g6.xlarge", "gpu": "L4",
                   "gpus_per_node": 1, "gpu_memory_gb": 24, "vcpus": 4, "memory_gb": 16,
                   "network_gbps": 10, "rdma": "none", "on_demand_usd": 0.8048,
                   "spot_usd": 0.3, "commit_1y_usd": 0.507, "commit_3y_usd": 0.35}],
}, source="test fixture")


def test_reservations_that_keep_billing_are_listed_with_catalog_price(aws):
    asg, ids, t0 = aws.cluster("dev", "sandbox")
    aws.util(ids, t0, t0 + 120 * 60, 0.0)
    r = aws.reaper()
    reap(r, t0 + 40 * 60)
    odcr = {"CapacityReservationId": "cr-0abc", "InstanceType": "g6.xlarge",
            "TotalInstanceCount": 2, "AvailabilityZone": f"{REGION}a", "State": "active",
            "Tags": [{"Key": tags.CLUSTER, "Value": "sandbox"},
                     {"Key": tags.ENVIRONMENT, "Value": "dev"}]}
    other = dict(odcr, CapacityReservationId="cr-0other", Tags=[
        {"Key": tags.CLUSTER, "Value": "sandbox"}, {"Key": tags.ENVIRONMENT, "Value": "prod"}])
    no_reservations(r, [odcr, other])
    moto_strict.set_clock(t0 + 75 * 60)
    report = engine.run([r], policy=d.Policy(), apply=True, environments=["dev"],
                        now=t0 + 75 * 60, pricer=engine.catalog_pricer(CATALOG),
                        settle_s=0)
    o = by_cluster(report)["sandbox"]
    assert o.state == d.REAPED
    (res,) = o.reservations
    assert res.id == "cr-0abc" and res.usd_per_day == pytest.approx(0.507 * 2 * 24, abs=0.01)
    assert "1 reservation keeps billing ($24.34/day unused)" in o.reason


def test_destroy_only_when_every_cluster_of_the_environment_is_due(aws):
    a, a_ids, t0 = aws.cluster("dev", "idle-one")
    b, b_ids, _ = aws.cluster("dev", "busy-one")
    aws.util(a_ids, t0, t0 + 120 * 60, 0.0)
    aws.util(b_ids, t0, t0 + 120 * 60, 90.0)
    r = aws.reaper()
    destroyed = []
    reap(r, t0 + 40 * 60)
    report = reap(r, t0 + 75 * 60, policy={"destroy": True}, destroyer=destroyed.append)
    o = by_cluster(report)["idle-one"]
    assert o.state == d.SKIPPED and "would also take down cluster(s) busy-one" in o.reason
    assert destroyed == [] and aws.group(a)["DesiredCapacity"] == 2


# ---- issue 16: idle burst capacity goes down to the baseline, never below ----------------------
def test_idle_burst_scaled_down_to_the_baseline_and_no_further(aws, tmp_path):
    asg, ids, t0 = aws.cluster("dev", "pretrain", nodes=5,
                               extra={tags.BASELINE_NODES: "2"})
    aws.util(ids, t0, t0 + 240 * 60, 0.5)
    r = aws.reaper()
    first = by_cluster(reap(r, t0 + 40 * 60))["pretrain"]
    assert (first.state, first.action, first.baseline_nodes) == (d.MARKED, d.MARK, 2)
    log = tmp_path / "audit.jsonl"
    with AuditLog(str(log)) as audit:
        report = reap(r, t0 + 75 * 60, audit=audit)
    o = by_cluster(report)["pretrain"]
    assert (o.state, o.action, o.applied) == (d.REAPED, d.SCALE_TO_BASELINE, True)
    assert (o.baseline_nodes, o.nodes_removed) == (2, 3)
    assert "scaled down to the baseline: 3 nodes removed, 2 nodes of baseline kept" in o.reason
    g = aws.group(asg)
    assert (g["MinSize"], g["DesiredCapacity"], g["MaxSize"]) == (2, 2, 5)
    assert len([i for i in g["Instances"] if i["LifecycleState"] == "InService"]) == 2
    assert tags.IDLE_SINCE not in aws.group_tags(asg)
    as_json = report.as_json()["clusters"][0]
    assert (as_json["action"], as_json["baseline_nodes"], as_json["nodes_removed"]) == \
        (d.SCALE_TO_BASELINE, 2, 3)
    acted = [json.loads(x) for x in log.read_text().splitlines()
             if json.loads(x)["event"] == "action"]
    assert [(a["ok"], a["action"], a["nodes_removed"], a["baseline_nodes"]) for a in acted] == \
        [(True, d.SCALE_TO_BASELINE, 3, 2)]

    # idle still, at its baseline: never marked, never reaped again, never scaled below it
    for later in (t0 + 120 * 60, t0 + 200 * 60):
        again = by_cluster(reap(r, later, grace=0))["pretrain"]
        assert (again.state, again.action, again.applied) == (d.SKIPPED, d.NONE, False)
        assert "at its baseline of 2 nodes" in again.reason and again.nodes_removed is None
    assert aws.group(asg)["DesiredCapacity"] == 2
    assert tags.IDLE_SINCE not in aws.group_tags(asg)


def test_dry_run_says_how_many_nodes_would_go(aws):
    asg, ids, t0 = aws.cluster("dev", "pretrain", nodes=3, extra={tags.BASELINE_NODES: "1"})
    aws.util(ids, t0, t0 + 120 * 60, 0.0)
    r = aws.reaper()
    reap(r, t0 + 40 * 60)
    o = by_cluster(reap(r, t0 + 75 * 60, apply=False))["pretrain"]
    assert (o.state, o.action, o.applied, o.nodes_removed) == \
        (d.IDLE, d.SCALE_TO_BASELINE, False, 2)
    assert aws.group(asg)["DesiredCapacity"] == 3


def test_destroy_spares_an_environment_that_keeps_a_baseline(aws):
    based, based_ids, t0 = aws.cluster("dev", "pretrain", nodes=3,
                                       extra={tags.BASELINE_NODES: "1"})
    plain, plain_ids, _ = aws.cluster("dev", "sandbox")
    aws.util(based_ids + plain_ids, t0, t0 + 120 * 60, 0.0)
    r = aws.reaper()
    destroyed = []
    reap(r, t0 + 40 * 60)
    out = by_cluster(reap(r, t0 + 75 * 60, policy={"destroy": True},
                          destroyer=destroyed.append))
    assert (out["pretrain"].state, out["pretrain"].action) == (d.REAPED, d.SCALE_TO_BASELINE)
    assert out["sandbox"].state == d.SKIPPED
    assert "would also take down cluster(s) pretrain (keeps a baseline)" in out["sandbox"].reason
    assert destroyed == []
    assert aws.group(based)["DesiredCapacity"] == 1 and aws.group(plain)["DesiredCapacity"] == 2


def test_an_unreadable_baseline_tag_is_never_guessed(aws):
    asg, ids, t0 = aws.cluster("dev", "pretrain", nodes=3,
                               extra={tags.BASELINE_NODES: "two"})
    aws.util(ids, t0, t0 + 120 * 60, 0.0)
    o = by_cluster(reap(aws.reaper(), t0 + 80 * 60, grace=0))["pretrain"]
    assert (o.state, o.action) == (d.SKIPPED, d.NONE)
    assert "invalid 'two' gpulease-baseline-nodes tag" in o.reason
    assert aws.group(asg)["DesiredCapacity"] == 3 and tags.IDLE_SINCE not in aws.group_tags(asg)


# ---- a cluster of two groups (Capacity Block group + the burst group) ------------------------
def test_a_cluster_of_two_groups_is_one_cluster(aws, tmp_path):
    """A Capacity Block cluster runs its reserved nodes in ``<c>-block-asg`` and the rest in
    ``<c>-asg`` (gpulease/clouds/aws/cluster.py), both tagged with the same cluster: the reaper
    sees one cluster, reads every node of both, and scales the burst down to the floors."""
    block, block_ids, t0 = aws.cluster("dev", "pretrain", nodes=2,
                                       extra={tags.BASELINE_NODES: "2"})
    burst, burst_ids, _ = aws.cluster("dev", "pretrain", nodes=3,
                                      extra={tags.BASELINE_NODES: "0"})
    aws.util(block_ids + burst_ids, t0, t0 + 240 * 60, 0.5)
    r = aws.reaper()
    first = reap(r, t0 + 40 * 60)
    assert [o.cluster for o in first.outcomes] == ["pretrain"]
    o = first.outcomes[0]
    assert (o.state, o.action, o.baseline_nodes) == (d.MARKED, d.MARK, 2)
    assert tags.IDLE_SINCE in aws.group_tags(block) and tags.IDLE_SINCE in aws.group_tags(burst)
    second = reap(r, t0 + 75 * 60)
    assert [o.cluster for o in second.outcomes] == ["pretrain"]
    o = second.outcomes[0]
    assert (o.state, o.action, o.applied) == (d.REAPED, d.SCALE_TO_BASELINE, True)
    assert (o.baseline_nodes, o.nodes_removed) == (2, 3)
    assert aws.group(block)["DesiredCapacity"] == 2 and aws.group(burst)["DesiredCapacity"] == 0


def test_a_busy_node_in_either_group_keeps_the_whole_cluster(aws):
    block, block_ids, t0 = aws.cluster("dev", "pretrain", nodes=2)
    burst, burst_ids, _ = aws.cluster("dev", "pretrain", nodes=2)
    aws.util(block_ids + burst_ids[1:], t0, t0 + 240 * 60, 0.0)
    aws.util(burst_ids[:1], t0, t0 + 240 * 60, 93.0)
    r = aws.reaper()
    report = reap(r, t0 + 40 * 60, grace=0)
    assert [(o.cluster, o.state, o.action) for o in report.outcomes] == \
        [("pretrain", d.BUSY, d.MARK_NODES)]
    assert aws.group(block)["DesiredCapacity"] == 2 and aws.group(burst)["DesiredCapacity"] == 2
    assert tags.IDLE_SINCE not in aws.group_tags(block)
    # the whole cluster never goes; its idle nodes go one by one, the busy one stays
    reap(r, t0 + 120 * 60, grace=0)
    assert aws.group(block)["DesiredCapacity"] == 0 and aws.group(burst)["DesiredCapacity"] == 1
    assert [i["InstanceId"] for i in aws.group(burst)["Instances"]] == burst_ids[:1]


def test_one_claim_per_cluster_of_two_groups(aws):
    """A cluster of two groups counts once against the shared cap: with --max-actions 2 both
    clusters (three groups) are torn down."""
    one, one_ids, t0 = aws.cluster("dev", "pretrain", nodes=1)
    two, two_ids, _ = aws.cluster("dev", "pretrain", nodes=1)
    other, other_ids, _ = aws.cluster("dev", "sandbox", nodes=1)
    aws.util(one_ids + two_ids + other_ids, t0, t0 + 240 * 60, 0.0)
    r = aws.reaper()
    reap(r, t0 + 40 * 60)
    report = reap(r, t0 + 75 * 60, max_actions=2)
    got = by_cluster(report)
    assert (got["pretrain"].state, got["sandbox"].state) == (d.REAPED, d.REAPED)
    assert {aws.group(g)["DesiredCapacity"] for g in (one, two, other)} == {0}


# ---- issue 21 item 3 / contract C3: holds read from the groups --------------------------------
def test_a_new_group_waits_for_its_first_job(aws):
    """The first-job grace runs from the group's CreatedTime (DescribeAutoScalingGroups)."""
    asg, ids, t0 = aws.cluster("dev", "nightly", extra={tags.FIRST_JOB_GRACE: "120"})
    aws.util(ids, t0, t0 + 180 * 60, 0.5)
    r = aws.reaper()
    held = by_cluster(reap(r, t0 + 60 * 60))["nightly"]
    assert (held.state, held.action) == (d.SKIPPED, d.NONE)
    assert [h["kind"] for h in held.as_json()["holds"]] == ["first-job-grace"]
    assert tags.IDLE_SINCE not in aws.group_tags(asg)
    assert by_cluster(reap(r, t0 + 125 * 60))["nightly"].state == d.MARKED


def test_a_declared_schedule_on_the_group_holds_the_reaper(aws):
    import datetime as _dt
    asg, ids, t0 = aws.cluster("dev", "nightly")
    now = t0 + 75 * 60
    start = _dt.datetime.fromtimestamp(now + 30 * 60, _dt.timezone.utc)   # due in 30 min
    aws.asg.create_or_update_tags(Tags=[{
        "ResourceId": asg, "ResourceType": "auto-scaling-group", "PropagateAtLaunch": True,
        "Key": tags.schedule_key(0), "Value": f"{start.minute}_{start.hour}_x_x_x_90"}])
    aws.util(ids, t0, t0 + 180 * 60, 0.5)
    r = aws.reaper()
    assert by_cluster(reap(r, t0 + 40 * 60))["nightly"].state == d.MARKED
    o = by_cluster(reap(r, now))["nightly"]
    assert (o.state, o.action, o.applied) == (d.SKIPPED, d.NONE, False)
    assert "held until" in o.reason and o.as_json()["holds"][0]["kind"] == "schedule"
    assert aws.group(asg)["DesiredCapacity"] == 2


def test_a_prepaid_block_group_is_kept_and_the_rest_goes(aws):
    """Contract C3: the Capacity Block's group carries gpulease-billed-until; its nodes stay
    until then, the burst group beside it is scaled to zero; the JSON says why."""
    t_end = "20991231t2359z"
    block, block_ids, t0 = aws.cluster("dev", "pretrain", nodes=2,
                                       extra={tags.BILLED_UNTIL: t_end})
    burst, burst_ids, _ = aws.cluster("dev", "pretrain", nodes=3)
    aws.util(block_ids + burst_ids, t0, t0 + 240 * 60, 0.5)
    r = aws.reaper()
    assert reap(r, t0 + 40 * 60).outcomes[0].state == d.MARKED
    o = reap(r, t0 + 75 * 60).outcomes[0]
    assert (o.state, o.action, o.nodes_removed) == (d.REAPED, d.SCALE_TO_BASELINE, 3)
    assert aws.group(block)["DesiredCapacity"] == 2 and aws.group(burst)["DesiredCapacity"] == 0
    doc = o.as_json()
    assert [(h["kind"], h["until"]) for h in doc["holds"]] == [("billed-until",
                                                                "2099-12-31T23:59Z")]
    # only the prepaid group left: nothing more to do, ever (until its time)
    again = reap(r, t0 + 120 * 60).outcomes[0]
    assert (again.state, again.action) in {(d.SKIPPED, d.NONE), (d.SKIPPED, d.UNMARK)}
    assert "prepaid until 2099-12-31T23:59Z" in again.reason


# ---- issue 21 item 2: idle burst nodes above the floor go one by one ---------------------------
def _team(aws, *, floor="2", nodes=5, min_size=0):
    """A demand-profile group as the cluster component makes it (MinSize 0: node autostop
    leaves with a decrement) unless ``min_size`` says otherwise."""
    asg, ids, t0 = aws.cluster("prod", "team", nodes=nodes, extra={tags.BASELINE_NODES: floor})
    aws.asg.update_auto_scaling_group(AutoScalingGroupName=asg, MinSize=min_size)
    ids = sorted(ids)                     # the floor is counted by instance id, as autostop does
    return asg, ids, t0


def test_idle_nodes_above_the_baseline_are_removed_one_by_one(aws, tmp_path):
    asg, ids, t0 = _team(aws)
    aws.util(ids[:2], t0, t0 + 200 * 60, 80.0)          # the two first-ranked nodes work
    aws.util(ids[2:], t0, t0 + 200 * 60, 0.4)
    r = aws.reaper()
    log = tmp_path / "audit.jsonl"
    with AuditLog(str(log)) as audit:
        first = by_cluster(reap(r, t0 + 40 * 60, envs=("prod",), audit=audit))["team"]
    assert (first.state, first.action, first.applied) == (d.BUSY, d.MARK_NODES, True)
    marked = {t["ResourceId"] for t in aws.ec2.describe_tags(Filters=[
        {"Name": "key", "Values": [tags.NODE_IDLE_SINCE]}])["Tags"]}
    assert marked == set(ids[2:])
    assert tags.IDLE_SINCE not in aws.group_tags(asg)          # the cluster itself is not idle
    o = by_cluster(reap(r, t0 + 75 * 60, envs=("prod",)))["team"]
    assert (o.state, o.action, o.applied, o.nodes_removed) == (d.REAPED, d.REMOVE_NODES, True, 3)
    assert "3 nodes removed from its group (desired capacity down with them), 2 nodes kept " \
           "running" in o.reason
    g = aws.group(asg)
    assert g["DesiredCapacity"] == 2 and sorted(i["InstanceId"] for i in g["Instances"]
                                                if i["LifecycleState"] == "InService") == ids[:2]
    doc = o.as_json()
    assert sorted((a["node"], a["action"]) for a in doc["node_actions"]) == \
        [(i, "remove") for i in ids[2:]]
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    assert any(rec["event"] == "action" and rec["action"] == d.MARK_NODES for rec in recs)
    # at the floor now: nothing more to do
    again = by_cluster(reap(r, t0 + 120 * 60, envs=("prod",)))["team"]
    assert again.action in (d.NONE, d.UNMARK_NODES) and aws.group(asg)["DesiredCapacity"] == 2


def test_a_busy_node_is_never_removed_and_the_floor_holds(aws):
    asg, ids, t0 = _team(aws)
    aws.util(ids[:2] + ids[3:4], t0, t0 + 200 * 60, 75.0)   # ids[3] busy above the floor
    aws.util(ids[2:3] + ids[4:], t0, t0 + 200 * 60, 0.2)
    r = aws.reaper()
    reap(r, t0 + 40 * 60, envs=("prod",))
    o = by_cluster(reap(r, t0 + 75 * 60, envs=("prod",)))["team"]
    assert o.action == d.REMOVE_NODES and o.nodes_removed == 2
    left = sorted(i["InstanceId"] for i in aws.group(asg)["Instances"]
                  if i["LifecycleState"] == "InService")
    assert left == ids[:2] + ids[3:4]


def test_a_minimum_above_what_stays_is_lowered_to_exactly_that(aws):
    """Auto Scaling refuses a decrement below MinSize; the reaper lowers it to what stays
    (never below the floor) before the nodes leave."""
    asg, ids, t0 = _team(aws, min_size=4)
    aws.util(ids[:2], t0, t0 + 200 * 60, 80.0)
    aws.util(ids[2:], t0, t0 + 200 * 60, 0.4)
    r = aws.reaper()
    reap(r, t0 + 40 * 60, envs=("prod",))
    o = by_cluster(reap(r, t0 + 75 * 60, envs=("prod",)))["team"]
    assert o.state == d.REAPED and o.nodes_removed == 3
    g = aws.group(asg)
    assert (g["MinSize"], g["DesiredCapacity"]) == (2, 2)


def test_strict_moto_refuses_what_auto_scaling_refuses(aws):
    asg, ids, _ = aws.cluster("dev", "strict", nodes=1)
    aws.asg.update_auto_scaling_group(AutoScalingGroupName=asg, MinSize=1)
    with pytest.raises(ClientError, match="desiredSize equals minSize \\(1\\)"):
        aws.asg.terminate_instance_in_auto_scaling_group(
            InstanceId=ids[0], ShouldDecrementDesiredCapacity=True)
    with pytest.raises(ClientError, match="Instance Id not found - No managed instance found"):
        aws.asg.terminate_instance_in_auto_scaling_group(
            InstanceId="i-0123456789abcdef0", ShouldDecrementDesiredCapacity=True)


def test_a_node_taken_away_meanwhile_stops_the_removal(aws):
    asg, ids, t0 = _team(aws)
    aws.util(ids[:2], t0, t0 + 200 * 60, 80.0)
    aws.util(ids[2:], t0, t0 + 200 * 60, 0.4)
    r = aws.reaper()
    reap(r, t0 + 40 * 60, envs=("prod",))

    def someone_else(**_):        # after the claim, before the membership re-read
        if not getattr(someone_else, "done", False):
            someone_else.done = True
            aws.asg.terminate_instance_in_auto_scaling_group(
                InstanceId=ids[4], ShouldDecrementDesiredCapacity=True)
    r.autoscaling.meta.events.register("after-call.autoscaling.CreateOrUpdateTags",
                                       someone_else)
    o = by_cluster(reap(r, t0 + 75 * 60, envs=("prod",)))["team"]
    assert o.state == d.SKIPPED and f"node {ids[4]} left" in o.reason and not o.applied, o.reason
    assert aws.group(asg)["DesiredCapacity"] == 4


def test_a_dry_run_names_the_idle_nodes_and_touches_nothing(aws):
    asg, ids, t0 = _team(aws)
    aws.util(ids[:2], t0, t0 + 200 * 60, 80.0)
    aws.util(ids[2:], t0, t0 + 200 * 60, 0.4)
    r = aws.reaper()
    dry = by_cluster(reap(r, t0 + 40 * 60, envs=("prod",), apply=False))["team"]
    assert (dry.action, dry.applied) == (d.MARK_NODES, False)
    assert aws.ec2.describe_tags(Filters=[
        {"Name": "key", "Values": [tags.NODE_IDLE_SINCE]}])["Tags"] == []
    reap(r, t0 + 40 * 60, envs=("prod",))                        # marked for real
    dry = by_cluster(reap(r, t0 + 75 * 60, envs=("prod",), apply=False))["team"]
    assert (dry.action, dry.applied, dry.nodes_removed) == (d.REMOVE_NODES, False, 3)
    assert sorted(a["node"] for a in dry.as_json()["node_actions"]) == ids[2:]
    assert aws.group(asg)["DesiredCapacity"] == 5 and len(aws.group(asg)["Instances"]) == 5


@pytest.mark.parametrize("late_s", [0, 60, 180, 300])
def test_idle_nodes_go_whatever_the_publication_delay(aws, late_s):
    """Issue 21 item 1 for item 2: 0-5 min of delay changes when a node goes, never whether."""
    asg, ids, t0 = _team(aws)
    aws.util(ids[:2], t0, t0 + 200 * 60, 80.0)
    aws.util(ids[2:], t0, t0 + 200 * 60, 0.4)
    moto_strict.set_metric_delay(late_s)
    r = aws.reaper()
    reap(r, t0 + 40 * 60, envs=("prod",))
    o = by_cluster(reap(r, t0 + 80 * 60, envs=("prod",)))["team"]
    assert (o.state, o.action, o.nodes_removed) == (d.REAPED, d.REMOVE_NODES, 3), o.reason
    assert aws.group(asg)["DesiredCapacity"] == 2
