"""The reaper on AWS through a fault-injecting proxy in front of moto's server (issue 14, Reaper).

Every fault a gateway, proxy or throttled API produces — HTML 5xx pages, a 200 that is not the
API's answer, a truncated body, throttling — and resources changing mid-run (nodes joining,
groups deleted, a cluster scaled back up). Each test asserts what the contract says: retried
when transient, otherwise a per-cluster error (exit 1) while the other clusters are handled,
an audit record in every case, and nothing busy, unmeasured or unowned touched.
"""
from __future__ import annotations

import json
from urllib.parse import parse_qs

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber

from gpulease import tags
from gpulease.reaper import decision as d
from gpulease.reaper import aws as aws_adaptor
from gpulease.reaper import engine
from gpulease.reaper.audit import AuditLog
from gpulease.reaper.aws import AwsReaper
from gpulease.reaper.errors import MalformedResponse
from gpulease.retry import Backoff
from tests.fakes import moto_strict
from tests.fakes.fault_proxy import FaultProxy
from tests.test_reaper_aws import BUCKET, OBJECTS, REGION, Env

OTHER = "us-west-2"


class World(Env):
    def __init__(self, moto: str, proxy: FaultProxy, url: str):
        super().__init__()
        self.moto, self.proxy, self.url = moto, proxy, url

    def reaper(self, region: str = REGION, direct: bool = False) -> AwsReaper:
        """A reaper whose every call goes through the proxy (or straight to moto)."""
        cfg = Config(region_name=region, retries={"total_max_attempts": 1, "mode": "standard"})
        made = {n: boto3.client(n, config=cfg, endpoint_url=self.moto if direct else self.url)
                for n in ("autoscaling", "ec2", "cloudwatch")}
        return AwsReaper(region=region, backoff=Backoff(sleep=lambda s: None), **made)

    def idle(self, env: str, name: str, **kw):
        asg, ids, t0 = self.cluster(env, name, **kw)
        self.util(ids, t0 - 60, t0 + 180 * 60, 0.5)
        return asg, ids, t0

    def scale(self, asg: str, desired: int) -> None:
        self.asg.set_desired_capacity(AutoScalingGroupName=asg, DesiredCapacity=desired)

    def delete(self, asg: str) -> None:
        self.asg.delete_auto_scaling_group(AutoScalingGroupName=asg, ForceDelete=True)


@pytest.fixture
def world(moto_url, monkeypatch):
    moto_strict.point_boto_at(moto_url, monkeypatch)
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET)
    for k, body in OBJECTS.items():
        s3.put_object(Bucket=BUCKET, Key=k, Body=body)
    proxy = FaultProxy(moto_url)
    w = World(moto_url, proxy, proxy.start())
    yield w
    proxy.stop()
    listed = s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    assert {o["Key"]: o["Size"] for o in listed} == {k: len(v) for k, v in OBJECTS.items()}


def reap(reapers, now, *, apply=True, audit=None, max_actions=10, envs=("dev",), **kw):
    reapers = reapers if isinstance(reapers, list) else [reapers]
    moto_strict.set_clock(now)      # the fake publishes metrics late, as of this simulated now
    return engine.run(reapers, policy=d.Policy(grace_minutes=30), apply=apply,
                      environments=envs, now=now, audit=audit, max_actions=max_actions,
                      settle_s=0, **kw)


def by_cluster(report) -> dict:
    return {o.cluster: o for o in report.outcomes}


def events(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---- transient faults are retried --------------------------------------------------------------
TRANSIENT = [
    ("DescribeAutoScalingGroups", "html", {"style": "doctype", "status": 503}),
    ("DescribeAutoScalingGroups", "non-json-200", {}),
    ("DescribeAutoScalingGroups", "truncated-200", {}),
    ("GetMetricData", "html", {"style": "nginx", "status": 502}),
    ("GetMetricData", "non-json-200", {}),
    ("GetMetricData", "truncated-200", {}),
    ("GetMetricData", "throttle", {}),
    ("UpdateAutoScalingGroup", "html", {"style": "doctype", "status": 503}),
    ("UpdateAutoScalingGroup", "non-json-200", {}),
    ("CreateOrUpdateTags", "throttle", {}),
    ("DeleteTags", "non-json-200", {}),
]


@pytest.mark.parametrize("op,kind,kw", TRANSIENT, ids=[f"{o}-{k}-{kw.get('style', '')}"
                                                       for o, k, kw in TRANSIENT])
def test_transient_faults_are_retried_and_the_teardown_completes(world, op, kind, kw):
    asg, _, t0 = world.idle("dev", "sandbox")
    r = world.reaper()
    assert by_cluster(reap(r, t0 + 40 * 60))["sandbox"].state == d.MARKED
    world.proxy.add(op, kind, times=2, **kw)
    o = by_cluster(reap(r, t0 + 75 * 60))["sandbox"]
    assert (o.state, o.action, o.applied) == (d.REAPED, d.SCALE_TO_ZERO, True), o.reason
    assert [x for x, _ in world.proxy.injected()] == [op, op]
    assert r.backoff.retries >= 2
    assert world.group(asg)["DesiredCapacity"] == 0


# ---- persistent faults: per-cluster error, the others handled, audit written ---------------
@pytest.mark.parametrize("kind,kw", [("html", {"style": "doctype", "status": 503}),
                                     ("html", {"style": "nginx", "status": 502}),
                                     ("non-json-200", {})])
def test_persistent_fault_on_one_cluster_is_a_per_cluster_error(world, tmp_path, kind, kw):
    alpha, _, t0 = world.idle("dev", "alpha")
    beta, _, _ = world.idle("dev", "beta")
    r = world.reaper()
    reap(r, t0 + 40 * 60)
    world.proxy.add("UpdateAutoScalingGroup", kind, body=f"AutoScalingGroupName={alpha}(&|$)",
                    times=None, **kw)
    log = tmp_path / "audit.jsonl"
    with AuditLog(str(log)) as audit:
        report = reap(r, t0 + 75 * 60, audit=audit)
    out = by_cluster(report)
    assert out["alpha"].state == d.ERROR and "gave up after 5 attempts" in out["alpha"].reason
    assert out["beta"].state == d.REAPED
    assert report.exit_code == 1
    # a 200 page from a proxy is never taken for "done": alpha still runs
    assert world.group(alpha)["DesiredCapacity"] == 2 and world.group(beta)["DesiredCapacity"] == 0
    recs = events(log)
    assert recs[-1]["event"] == "run-end" and recs[-1]["failed"] is True
    assert any(e["event"] == "action" and e["cluster"] == "alpha" and e["ok"] is False
               for e in recs)
    json.dumps(report.as_json())   # the --json document is always valid


def test_non_json_metrics_are_never_read_as_missing_data(world):
    """botocore turns a non-JSON 200 from CloudWatch into {}: read as "no data" that would
    unmark every marked cluster. It must be an error, and the marks stay."""
    asg, _, t0 = world.idle("dev", "sandbox")
    r = world.reaper()
    reap(r, t0 + 40 * 60)
    mark = world.group_tags(asg)[tags.IDLE_SINCE]
    world.proxy.add("GetMetricData", "non-json-200", times=None)
    report = reap(r, t0 + 55 * 60)
    o = by_cluster(report)["sandbox"]
    assert o.state == d.ERROR and "not from AWS" in o.reason
    assert report.exit_code == 1
    assert world.group_tags(asg)[tags.IDLE_SINCE] == mark


def test_discovery_failing_in_one_region_leaves_the_other_region_handled(world, tmp_path):
    _, _, t0 = world.idle("dev", "east")
    west = boto3.client("autoscaling", region_name=OTHER)
    ec2w = boto3.client("ec2", region_name=OTHER)
    ec2w.create_launch_template(LaunchTemplateName="lt-west", LaunchTemplateData={
        "ImageId": "ami-12c6146b", "InstanceType": "g6.xlarge"})
    west.create_auto_scaling_group(
        AutoScalingGroupName="dev-west", LaunchTemplate={"LaunchTemplateName": "lt-west"},
        MinSize=1, MaxSize=1, DesiredCapacity=1, AvailabilityZones=[f"{OTHER}a"],
        Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True, "ResourceId": "dev-west",
               "ResourceType": "auto-scaling-group"} for k, v in {
                   tags.CLUSTER: "west", tags.ENVIRONMENT: "dev", tags.IDLE_MINUTES: "30",
                   tags.DECLARED: tags.declared_value("dev", "west"),
                   tags.FIRST_JOB_GRACE: "0"}.items()])
    east = world.reaper(REGION)
    world.proxy.add("DescribeAutoScalingGroups", "non-json-200", times=None,
                    body=".")  # every DescribeAutoScalingGroups through the proxy
    log = tmp_path / "a.jsonl"
    with AuditLog(str(log)) as audit:
        report = reap([east, world.reaper(OTHER, direct=True)], t0 + 40 * 60, audit=audit)
    states = {(o.region, o.cluster): o.state for o in report.outcomes}
    assert states[(REGION, "*")] == d.ERROR
    assert states[(OTHER, "west")] in (d.INSUFFICIENT, d.IDLE, d.MARKED)
    assert report.exit_code == 1 and events(log)[-1]["event"] == "run-end"


# ---- resources changing mid-run --------------------------------------------------------------
def test_node_joining_after_discovery_is_never_scaled_away_unmeasured(world):
    asg, _, t0 = world.idle("dev", "sandbox")
    r = world.reaper()
    reap(r, t0 + 40 * 60)
    # someone scales the group up right after the reaper's first utilization read
    world.proxy.add("GetMetricData", None, hook=lambda _: world.scale(asg, 3), when="after")
    o = by_cluster(reap(r, t0 + 75 * 60))["sandbox"]
    assert (o.state, o.action, o.applied) == (d.INSUFFICIENT, d.NONE, False)
    assert "joined after the utilization read and was never measured" in o.reason
    g = world.group(asg)
    assert g["DesiredCapacity"] == 3 and len(g["Instances"]) == 3


def test_capacity_raised_right_before_acting_stops_the_teardown(world):
    asg, _, t0 = world.idle("dev", "sandbox")
    r = world.reaper()
    reap(r, t0 + 40 * 60)
    # the membership re-read itself sees desired 3 (the third node still pending)
    world.proxy.add("DescribeAutoScalingGroups", None, skip=1,
                    hook=lambda _: world.scale(asg, 3), when="before")
    o = by_cluster(reap(r, t0 + 75 * 60))["sandbox"]
    assert o.state == d.INSUFFICIENT and o.action == d.NONE
    assert world.group(asg)["DesiredCapacity"] == 3


def test_group_deleted_mid_run_is_reported_as_such(world, tmp_path):
    asg, _, t0 = world.idle("dev", "sandbox")
    other, _, _ = world.idle("dev", "other")
    r = world.reaper()
    reap(r, t0 + 40 * 60)
    world.proxy.add("GetMetricData", None, hook=lambda _: world.delete(asg), when="after")
    log = tmp_path / "a.jsonl"
    with AuditLog(str(log)) as audit:
        report = reap(r, t0 + 75 * 60, audit=audit)
    o = by_cluster(report)["sandbox"]
    assert (o.state, o.action, o.applied) == (d.SKIPPED, d.NONE, False)
    assert "deleted during the run" in o.reason
    assert by_cluster(report)["other"].state == d.REAPED
    assert report.exit_code == 0
    assert not any(e["event"] == "action" and e["cluster"] == "sandbox" and e.get("applied")
                   for e in events(log))


def test_group_deleted_between_the_last_check_and_the_action(world):
    asg, _, t0 = world.idle("dev", "sandbox")
    r = world.reaper()
    reap(r, t0 + 40 * 60)
    world.proxy.add("UpdateAutoScalingGroup", None, hook=lambda _: world.delete(asg))
    o = by_cluster(reap(r, t0 + 75 * 60))["sandbox"]
    assert (o.state, o.applied) == (d.SKIPPED, False) and "deleted during the run" in o.reason


def test_scaled_back_up_cluster_gets_a_new_mark_and_a_full_grace(world):
    asg, ids, t0 = world.idle("dev", "sandbox")
    r = world.reaper()
    reap(r, t0 + 40 * 60)
    assert by_cluster(reap(r, t0 + 75 * 60))["sandbox"].state == d.REAPED
    assert tags.IDLE_SINCE not in world.group_tags(asg)          # cleared with the scale-down
    # a user scales it back up at t0+90; its new nodes idle from then on
    world.asg.update_auto_scaling_group(AutoScalingGroupName=asg, MinSize=2, DesiredCapacity=2)
    new = [i["InstanceId"] for i in world.group(asg)["Instances"] if i["InstanceId"] not in ids]
    world.util(new, t0 + 90 * 60, t0 + 200 * 60, 0.2)
    o = by_cluster(reap(r, t0 + 125 * 60))["sandbox"]
    assert (o.state, o.action) == (d.MARKED, d.MARK)             # a new mark, not a teardown
    assert world.group(asg)["DesiredCapacity"] == 2
    assert by_cluster(reap(r, t0 + 140 * 60))["sandbox"].state == d.MARKED  # inside the grace


def test_a_leftover_mark_gives_new_nodes_no_head_start(world):
    """Even if clearing the mark failed, new nodes cannot inherit it: the data since the mark
    does not cover them."""
    asg, ids, t0 = world.idle("dev", "sandbox")
    r = world.reaper()
    reap(r, t0 + 40 * 60)
    world.proxy.add("DeleteTags", "html", style="doctype", status=503, times=None)
    o = by_cluster(reap(r, t0 + 75 * 60))["sandbox"]
    assert o.state == d.REAPED and "could not be cleared" in o.reason
    assert tags.IDLE_SINCE in world.group_tags(asg)
    world.proxy.clear()
    world.asg.update_auto_scaling_group(AutoScalingGroupName=asg, MinSize=2, DesiredCapacity=2)
    new = [i["InstanceId"] for i in world.group(asg)["Instances"] if i["InstanceId"] not in ids]
    world.util(new, t0 + 90 * 60, t0 + 200 * 60, 0.2)
    o = by_cluster(reap(r, t0 + 125 * 60))["sandbox"]
    # the old mark proves nothing about the new nodes: cleared; each new node, idle over its
    # own window, starts its own mark and a full grace
    assert o.state == d.INSUFFICIENT and "since its idle mark" in o.reason
    assert o.action == d.MARK_NODES and o.applied
    assert world.group(asg)["DesiredCapacity"] == 2
    assert tags.IDLE_SINCE not in world.group_tags(asg)


# ---- untrusted tag values ----------------------------------------------------------------------
@pytest.mark.parametrize("raw", ["1000000000000", "1e12", "-30", "thirty"])
def test_absurd_window_tag_is_a_finding_and_the_region_goes_on(world, raw):
    bad, _, t0 = world.idle("dev", "bad", extra={tags.IDLE_MINUTES: raw})
    good, _, _ = world.idle("dev", "good")
    report = reap(world.reaper(), t0 + 40 * 60)
    out = by_cluster(report)
    assert out["bad"].state == d.SKIPPED and "invalid" in out["bad"].reason
    assert out["good"].state == d.MARKED
    assert report.exit_code == 0
    assert tags.IDLE_SINCE not in world.group_tags(bad)


def test_mark_in_the_far_future_is_replaced(world):
    asg, _, t0 = world.idle("dev", "sandbox", extra={tags.IDLE_SINCE: "29991231t2359z"})
    o = by_cluster(reap(world.reaper(), t0 + 40 * 60))["sandbox"]
    assert (o.state, o.action, o.applied) == (d.MARKED, d.MARK, True)
    assert "in the future" in o.reason
    assert world.group_tags(asg)[tags.IDLE_SINCE] == tags.timestamp_label(t0 + 40 * 60)


def test_a_bug_in_one_adaptor_is_a_per_cluster_error_not_a_traceback(world, monkeypatch,
                                                                     tmp_path):
    """Defence in depth: an exception that is not a CloudError (a gpulease bug) is reported
    per cluster, the audit record is written, and the other region still runs."""
    _, _, t0 = world.idle("dev", "sandbox")
    east = world.reaper(REGION, direct=True)
    reap(east, t0 + 40 * 60)

    def broken(refs):
        raise KeyError("a bug")
    monkeypatch.setattr(east, "members", broken)
    log = tmp_path / "a.jsonl"
    with AuditLog(str(log)) as audit:
        report = reap([east, world.reaper(OTHER, direct=True)], t0 + 75 * 60, audit=audit)
    o = by_cluster(report)["sandbox"]
    assert o.state == d.ERROR and "internal error KeyError" in o.reason
    assert report.exit_code == 1 and events(log)[-1]["event"] == "run-end"


# ---- paging (boto3's paginators; each page one checked, counted, retried call) ---------------
def test_every_page_is_read_and_a_failed_page_is_retried_alone(world, monkeypatch):
    """Discovery lists groups one per page here (the page size shrunk from the API's 100): all
    three pages are read, each with the token of the page before; a 503 on the second page is
    retried for that page alone (the first page is not asked again) and every try is counted."""
    monkeypatch.setitem(aws_adaptor.PAGE_SIZE, "describe_auto_scaling_groups", 1)
    names = {world.idle("dev", n)[0] for n in ("one", "two", "three")}
    r = world.reaper()
    world.proxy.add("DescribeAutoScalingGroups", "html", body="NextToken=", times=2,
                    style="doctype", status=503)
    asked: list = []
    world.proxy.add("DescribeAutoScalingGroups", None, times=None,
                    hook=lambda seen: asked.append(parse_qs(seen.body.decode())))
    found = r.discover(frozenset({"dev"}))
    assert sorted(ref.cluster for ref in found) == ["one", "three", "two"]
    assert {g for ref in found for g in ref.groups} == names
    assert [a["MaxRecords"] for a in asked] == [["1"]] * 3
    tokens = [a.get("NextToken", [None])[0] for a in asked]
    assert tokens[0] is None and len(set(tokens[1:])) == 2 and set(tokens[1:]) <= names
    assert [op for op, _ in world.proxy.injected()] == ["DescribeAutoScalingGroups"] * 2
    assert r.calls["autoscaling.describe_auto_scaling_groups"] == 5   # 1 + (2 failed + 1) + 1
    assert r.backoff.retries == 2


def test_a_token_answered_twice_is_an_error_not_an_endless_listing():
    """A broken gateway that answers the same NextToken again would page forever; botocore's
    paginator refuses it and the reaper reports the listing as malformed."""
    made = {n: boto3.client(n, region_name=REGION, aws_access_key_id="testing",
                            aws_secret_access_key="testing")
            for n in ("autoscaling", "ec2", "cloudwatch")}
    r = AwsReaper(region=REGION, backoff=Backoff(sleep=lambda s: None), **made)
    page = {"AutoScalingGroups": [], "NextToken": "same",
            "ResponseMetadata": {"RequestId": "req-1", "HTTPStatusCode": 200}}
    with Stubber(made["autoscaling"]) as stub:
        stub.add_response("describe_auto_scaling_groups", page)
        stub.add_response("describe_auto_scaling_groups", page)
        with pytest.raises(MalformedResponse, match="same next token was received twice"):
            r.claims()
    assert r.calls["autoscaling.describe_auto_scaling_groups"] == 2


def test_node_marks_are_read_from_every_page_of_describe_tags(world, monkeypatch):
    """EC2 DescribeTags pages at MaxResults (5 to 1000; the fake pages as EC2 does): the idle
    marks of six nodes are read over two pages of five, none dropped."""
    monkeypatch.setitem(aws_adaptor.PAGE_SIZE, "describe_tags", 5)
    _, ids, _ = world.cluster("dev", "wide", nodes=6)
    mark = tags.timestamp_label(1_800_000_000)
    world.ec2.create_tags(Resources=ids, Tags=[{"Key": tags.NODE_IDLE_SINCE, "Value": mark}])
    r = world.reaper()
    (ref,) = r.discover(frozenset({"dev"}))
    assert ref.node_marks == {i: mark for i in ids}
    assert r.calls["ec2.describe_tags"] == 2
