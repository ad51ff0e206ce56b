"""`gpulease recommend` on AWS: a month of CloudWatch history in moto's server, read through the
reaper's adaptor, turned into profiles (steady, bursty, idle, nightly).

moto is made as strict as CloudWatch and Auto Scaling where recommend depends on them
(tests/fakes/moto_strict.py, ``install_history``): ListMetrics lists only metrics with data in
the past two weeks, data older than 15 days needs a 5-minute multiple Period, GetMetricData
pages at MaxDatapoints, scaling activities are kept six weeks. The history is laid down with
PutMetricData at past timestamps, which moto accepts and CloudWatch would not (it takes points up
to two weeks old): that is how a month that already happened gets into the test.
"""
from __future__ import annotations

import datetime as dt
import itertools
import time

import boto3
import pytest

from gpulease import tags
from gpulease.recommend import profile as pf
from gpulease.recommend.engine import window
from gpulease.reaper.aws import ASG_DIMENSION, METRIC, NAMESPACE, AwsReaper
from gpulease.retry import Backoff
from tests.fakes import moto_strict

REGION = "us-east-1"
GPN = 8                      # GPUs per node of the cluster (p5.48xlarge)
H = 3600
_ids = itertools.count(0x10000000000000000)


@pytest.fixture
def cloud(moto_url, monkeypatch):
    moto_strict.point_boto_at(moto_url, monkeypatch)
    moto_strict.install_history(monkeypatch)
    history = History()
    # `gpulease recommend` reads the window this history was written for, however long the
    # test takes to get there (an hour turning in between would shift it by one hour)
    monkeypatch.setattr("gpulease.cli.recommend.clock", lambda: history.now)
    return history


def fresh_id() -> str:
    return f"i-{next(_ids):017x}"[:19]


class History:
    """A month of what the CloudWatch agent and Auto Scaling would have recorded."""

    def __init__(self):
        self.asg = boto3.client("autoscaling", region_name=REGION)
        self.ec2 = boto3.client("ec2", region_name=REGION)
        self.cw = boto3.client("cloudwatch", region_name=REGION)
        self.now = time.time()
        self.start, self.end = window(self.now, pf.DEFAULT_WINDOW_DAYS)
        self.hours = int((self.end - self.start) // H)

    def group(self, env: str, cluster: str, nodes: int, extra: dict | None = None) -> tuple:
        name = f"gpulease-{env}-{cluster}-asg"
        self.ec2.create_launch_template(LaunchTemplateName=f"{name}-lt", LaunchTemplateData={
            "ImageId": "ami-12c6146b", "InstanceType": "p5.48xlarge"})
        kv = {tags.CLUSTER: cluster, tags.ENVIRONMENT: env,
              tags.DECLARED: tags.declared_value(env, cluster), **(extra or {})}
        self.asg.create_auto_scaling_group(
            AutoScalingGroupName=name, LaunchTemplate={"LaunchTemplateName": f"{name}-lt"},
            MinSize=0, MaxSize=16, DesiredCapacity=nodes, AvailabilityZones=[f"{REGION}a"],
            Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True, "ResourceId": name,
                   "ResourceType": "auto-scaling-group"} for k, v in kv.items()])
        members = [i["InstanceId"] for i in self.asg.describe_auto_scaling_groups(
            AutoScalingGroupNames=[name])["AutoScalingGroups"][0]["Instances"]]
        return name, members

    def ran(self, asg: str, iid: str, hours, value, *, activity: bool = True) -> None:
        """``iid`` ran in ``asg`` during ``hours`` (indexes into the window) at ``value`` %:
        the agent's per-instance rollup (one a minute, folded to one an hour here) and its
        per-GPU points with every dimension (thinned to the run's first and last hour and one a
        day: only their names and recency matter, to ListMetrics); Auto Scaling's launch
        activity for it."""
        hours = list(hours)
        keep = {hours[0], hours[-1]} if hours else set()
        data = []
        for h in hours:
            t = dt.datetime.fromtimestamp(self.start + h * H + 600, dt.timezone.utc)
            v = value(h) if callable(value) else value
            data.append({"MetricName": METRIC, "Value": v, "Timestamp": t,
                         "Dimensions": [{"Name": "InstanceId", "Value": iid}]})
            for g in range(GPN) if (h in keep or h % 24 == 0) else ():
                data.append({"MetricName": METRIC, "Value": v, "Timestamp": t, "Dimensions": [
                    {"Name": "InstanceId", "Value": iid}, {"Name": ASG_DIMENSION, "Value": asg},
                    {"Name": "index", "Value": str(g)}, {"Name": "name", "Value": "NVIDIA H100"}]})
        for off in range(0, len(data), 1000):
            self.cw.put_metric_data(Namespace=NAMESPACE, MetricData=data[off:off + 1000])
        if activity and hours:
            moto_strict.record_activity(asg, iid, self.start + hours[0] * H)

    def adaptor(self) -> AwsReaper:
        return AwsReaper.for_region(REGION, backoff=Backoff(sleep=lambda s: None))

    def usage(self, *clusters: str, env: str = "prod") -> dict:
        return self.adaptor().usage(env, list(clusters), self.start, self.end, pf.PERIOD_S)

    def derive(self, series: dict) -> pf.Derivation:
        return pf.derive(series, start=self.start, end=self.end, gpus_per_node=GPN,
                         threshold_pct=5.0)


def steps(d: pf.Derivation) -> list:
    return [(s.gpus, s.hours_per_month) for s in d.profile]


def bursty(cloud: History, cluster: str = "pretrain", *, activities: bool = True) -> dict:
    """2 nodes always busy (the group's members); every day 6 burst nodes launched for 4 h,
    3 of them kept 6 h more, then terminated: 8 nodes at the peak, 5 for 10 h a day."""
    asg, members = cloud.group("prod", cluster, 2)
    for iid in members:
        cloud.ran(asg, iid, range(cloud.hours), 75.0)
    burst = []
    for day in range(cloud.hours // 24):
        for k in range(6):
            iid = fresh_id()
            burst.append(iid)
            span = 10 if k < 3 else 4
            cloud.ran(asg, iid, range(day * 24, day * 24 + span), 60.0, activity=activities)
    return {"asg": asg, "members": members, "burst": burst}


# ---- the four shapes ---------------------------------------------------------------------------
def test_steady(cloud):
    asg, members = cloud.group("prod", "pretrain", 4)
    for iid in members:
        cloud.ran(asg, iid, range(cloud.hours), 91.0)
    usage = cloud.usage("pretrain")
    assert set(usage) == {"pretrain"} and set(usage["pretrain"]) == set(members)
    d = cloud.derive(usage["pretrain"])
    assert steps(d) == [(32, 730.0)] and d.samples == 4 * cloud.hours


def test_bursty_nodes_gone_for_weeks_are_still_counted(cloud):
    world = bursty(cloud)
    usage = cloud.usage("pretrain")["pretrain"]
    assert set(usage) == set(world["members"]) | set(world["burst"])
    d = cloud.derive(usage)
    assert steps(d) == [(16, 730.0), (40, round(730 * 10 / 24, 1)), (64, round(730 * 4 / 24, 1))]
    assert d.observed["instances"] == 2 + 6 * 30


def test_without_scaling_activities_listmetrics_sees_two_weeks_only(cloud):
    """What ListMetrics alone would give: bursts of the first 16 days are invisible, so the
    burst hours come out too low. The activities are what makes the month complete."""
    world = bursty(cloud, activities=False)
    found = cloud.usage("pretrain")["pretrain"]
    old = [i for k, i in enumerate(world["burst"]) if k // 6 < 15]
    assert not set(old) & set(found)
    d = cloud.derive(found)
    assert d.profile[0] == pf.Step(16, 730.0)
    assert d.profile[-1].hours_per_month < round(730 * 4 / 24, 1) * 0.6


def test_idle(cloud):
    asg, members = cloud.group("prod", "eval", 3)
    for iid in members:
        cloud.ran(asg, iid, range(cloud.hours), 0.4)
    d = cloud.derive(cloud.usage("eval")["eval"])
    assert (d.profile, d.kind) == ((), "idle")
    assert d.observed["instances"] == 3 and d.samples == 3 * cloud.hours


def test_nightly(cloud):
    """6 nodes launched every night at 22:00 (window time) for 8 h, none by day."""
    asg, _ = cloud.group("prod", "nightly", 0)
    for night in range(cloud.hours // 24):
        for _ in range(6):
            first = night * 24 + 22
            cloud.ran(asg, fresh_id(), range(first, min(first + 8, cloud.hours)), 88.0)
    d = cloud.derive(cloud.usage("nightly")["nightly"])
    # the last night is cut by the window's end: 29 full nights + 2 h
    assert steps(d) == [(48, round(730 * (29 * 8 + 2) / (cloud.hours - 22), 1))]


# ---- what is read, and how ----------------------------------------------------------------------
def test_only_the_environments_clusters_are_read(cloud):
    mine, mine_ids = cloud.group("prod", "pretrain", 1)
    theirs, their_ids = cloud.group("staging", "pretrain", 1)
    other, other_ids = cloud.group("prod", "eval", 1)
    for asg, ids in ((mine, mine_ids), (theirs, their_ids), (other, other_ids)):
        cloud.ran(asg, ids[0], range(cloud.hours), 50.0)
    usage = cloud.usage("pretrain")
    assert usage == {"pretrain": {mine_ids[0]: usage["pretrain"][mine_ids[0]]}}
    assert len(usage["pretrain"][mine_ids[0]]) == cloud.hours


def test_hourly_maxima_over_a_month_are_paged(cloud, monkeypatch):
    """GetMetricData answers at most MaxDatapoints per call (100,800): the rest comes behind
    NextToken and must be read, never dropped. A small page size shows it with less data."""
    monkeypatch.setattr(moto_strict, "MAX_DATAPOINTS", 500)
    asg, members = cloud.group("prod", "pretrain", 2)
    for iid in members:
        cloud.ran(asg, iid, range(cloud.hours), 70.0)
    a = cloud.adaptor()
    usage = a.usage("prod", ["pretrain"], cloud.start, cloud.end, pf.PERIOD_S)["pretrain"]
    assert all(len(v) == cloud.hours for v in usage.values())
    assert a.calls["cloudwatch.get_metric_data"] == -(-2 * cloud.hours // 500)
    assert a.calls["cloudwatch.list_metrics"] == 1
    assert a.calls["autoscaling.describe_scaling_activities"] == 1


def test_an_hour_at_the_threshold_is_busy_and_a_minute_before_the_window_is_not(cloud):
    asg, (iid,) = cloud.group("prod", "pretrain", 1)
    cloud.ran(asg, iid, range(cloud.hours), lambda h: 5.0 if h < 100 else 4.99)
    d = cloud.derive(cloud.usage("pretrain")["pretrain"])
    assert steps(d) == [(8, round(730 * 100 / cloud.hours, 1))]


def test_a_failing_cloud_is_a_cloud_error_after_retries(cloud):
    from botocore.exceptions import ClientError

    from gpulease.errors import CloudError

    asg, (iid,) = cloud.group("prod", "pretrain", 1)
    cloud.ran(asg, iid, range(24), 70.0)
    a = cloud.adaptor()

    def throttle(**_):
        raise ClientError({"Error": {"Code": "Throttling", "Message": "Rate exceeded"},
                           "ResponseMetadata": {"HTTPStatusCode": 400}}, "ListMetrics")
    a.cloudwatch.meta.events.register("before-call.monitoring.ListMetrics", throttle)
    with pytest.raises(CloudError, match="gave up after 5 attempts"):
        a.usage("prod", ["pretrain"], cloud.start, cloud.end, pf.PERIOD_S)
    assert a.calls["cloudwatch.list_metrics"] == 5 and a.backoff.retries == 4
