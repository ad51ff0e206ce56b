"""The scheduled reaper: Pulumi resources under mocks, and the Lambda bundle running for real.

The bundle test unpacks exactly the files the AssetArchive ships, blocks pydantic and Pulumi
imports, and calls the handler against moto's server — proving the Lambda path is self-contained.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from gpulease import tags
from gpulease.costing.context import CostContext
from gpulease.model import (ClusterDecision, ClusterSpec, CostBreakdown, EnvironmentDecision,
                            Offering, PurchaseMix, StackSpec)
from gpulease.planner.mocks import run_program
from gpulease.reaper import aws_deploy, deploy
from gpulease.reaper.settings import ReaperSettings
from tests.fakes import moto_strict
from tests.timeouts import HANG_S


def env_decision(schedule="rate(15 minutes)", cloud="aws", region="us-west-2"):
    off = Offering(cloud=cloud, region=region, instance_type="g6.xlarge", gpu="L4",
                   gpus_per_node=1, gpu_memory_gb=24, vcpus=4, memory_gb=16, network_gbps=10,
                   rdma="none", on_demand_usd=0.8, spot_usd=0.3, commit_1y_usd=0.5,
                   commit_3y_usd=0.35)
    spec = ClusterSpec(name="sandbox", gpu="L4", gpus=2, hours_per_month=100, priority=3)
    cd = ClusterDecision(spec=spec, offering=off, nodes=2, purchase=PurchaseMix(spot=2),
                         network="none", template="single-node", hourly_usd=0.6,
                         costs=CostBreakdown(spot_usd=60), rationale="test fixture")
    stack = StackSpec(stack="dev", environment="dev", owner="ml", cost_center="cc",
                      budget_monthly_usd=1000, clouds={}, storage=(), clusters=(spec,),
                      reaper=ReaperSettings(schedule=schedule, apply=True, grace_minutes=45))
    return EnvironmentDecision(stack=stack, clusters=(cd,), storage=(), catalog_version="t",
                               catalog_as_of="2026-12-01")


def test_lambda_on_schedule_with_least_privilege_role():
    holder = {}
    run = run_program(lambda: holder.setdefault("res", deploy.deploy_reaper(env_decision())),
                      stack="dev")
    comp = holder["res"][0]
    assert isinstance(comp.cost_context, CostContext) and comp.cost_context.cluster == tags.SHARED
    fn = run.one("aws:lambda/function:Function")
    assert fn.inputs["runtime"] == "python3.12"
    assert fn.inputs["handler"] == "gpulease.reaper.lambda_handler.handler"
    assert fn.inputs["environment"]["variables"] == {
        "GPULEASE_ENVIRONMENT": "dev", "GPULEASE_REGIONS": "us-west-2",
        "GPULEASE_THRESHOLD_PCT": "5.0", "GPULEASE_GRACE_MINUTES": "45",
        "GPULEASE_MAX_ACTIONS": "10", "GPULEASE_APPLY": "true"}
    assert run.one("aws:cloudwatch/eventRule:EventRule").inputs["scheduleExpression"] == \
        "rate(15 minutes)"
    assert run.one("aws:lambda/permission:Permission").inputs["principal"] == \
        "events.amazonaws.com"
    target = run.one("aws:cloudwatch/eventTarget:EventTarget")
    assert target.parent == fn.parent
    policy = json.loads(run.one("aws:iam/rolePolicy:RolePolicy").inputs["policy"])
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    scale = by_sid["ScaleOwnEnvironmentOnly"]
    assert scale["Action"] == ["autoscaling:UpdateAutoScalingGroup",
                               "autoscaling:TerminateInstanceInAutoScalingGroup"]
    assert scale["Condition"]["StringEquals"] == {
        f"autoscaling:ResourceTag/{tags.ENVIRONMENT}": "dev"}
    nodes = by_sid["MarkNodesOwnEnvironmentOnly"]
    assert nodes["Resource"] == "arn:aws:ec2:*:*:instance/*"
    assert nodes["Condition"] == {
        "StringEquals": {f"aws:ResourceTag/{tags.ENVIRONMENT}": "dev"},
        "ForAllValues:StringEquals": {"aws:TagKeys": [tags.NODE_IDLE_SINCE]}}
    assert by_sid["MarkOwnEnvironmentOnly"]["Condition"]["ForAllValues:StringLike"] == {
        "aws:TagKeys": [tags.IDLE_SINCE, f"{tags.CLAIM}-*", tags.DEADLINE_SWITCH]}
    # the deadline step reads the jobs' progress documents, nothing else of the data
    from gpulease.deadline import PROGRESS_OBJECT
    assert by_sid["ReadProgressOnly"]["Action"] == ["s3:GetObject"]
    assert by_sid["ReadProgressOnly"]["Resource"] == f"arn:aws:s3:::*/*{PROGRESS_OBJECT}"
    # nothing beyond what it needs: no wildcard actions, no write outside autoscaling/logs
    actions = [a for s in policy["Statement"] for a in s["Action"]]
    assert not any(a.endswith("*") for a in actions)
    assert {a.split(":")[0] for a in actions} == {"autoscaling", "ec2", "cloudwatch", "logs",
                                                  "s3"}
    # ec2/cloudwatch: reads, and the node mark's one tag key on instances (above)
    assert all(a.split(":")[1].startswith(("Describe", "Get")) for s in policy["Statement"]
               for a in s["Action"] if a.split(":")[0] in ("ec2", "cloudwatch")
               and s["Sid"] != "MarkNodesOwnEnvironmentOnly")
    assert by_sid["Logs"]["Resource"].endswith(":*") and by_sid["Logs"]["Resource"] != "*:*"


def test_nothing_deployed_without_schedule_or_cluster():
    assert run_program(lambda: deploy.deploy_reaper(env_decision(schedule=None)),
                       stack="dev").resources == []
    no_cluster = dataclasses.replace(env_decision(), clusters=())
    assert run_program(lambda: deploy.deploy_reaper(no_cluster), stack="dev").resources == []
    # GCP environments get their own scheduled reaper: tests/test_reaper_deploy_gcp.py


@pytest.mark.parametrize("bad", ["every 15 minutes", "rate(0 minutes)", "rate(15 minute)",
                                 "cron()"])
def test_schedule_expression_validated(bad):
    with pytest.raises(ValueError, match="not an EventBridge schedule"):
        ReaperSettings(schedule=bad)


BOOT = textwrap.dedent("""
    import json, sys
    for name in ("pydantic", "pulumi", "pulumi_aws", "yaml", "google"):
        sys.modules[name] = None          # any import of these now fails
    sys.path.insert(0, sys.argv[1])
    # only the bundle's files: no editable install's finder may supply a module it lacks
    sys.meta_path[:] = [f for f in sys.meta_path
                        if "editable" not in getattr(f, "__module__", type(f).__module__)]
    from gpulease.reaper.lambda_handler import handler
    import gpulease.catalog                  # loaded when a reservation is priced: it must import
    assert gpulease.catalog.available_versions(), "the catalog data rides along"
    out = handler({}, None)
    assert "gpulease.reaper.settings" not in sys.modules
    print("RESULT " + json.dumps(out))
""")


def test_lambda_bundle_runs_without_pydantic_or_pulumi(tmp_path):
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    bundle = tmp_path / "bundle"
    for name, src in aws_deploy.archive_files().items():
        (bundle / name).parent.mkdir(parents=True, exist_ok=True)
        (bundle / name).write_bytes(src.read_bytes())
    for pkg in ("gpulease", "gpulease/reaper"):
        (bundle / pkg / "__init__.py").write_text("")
    server, url = moto_strict.start_server()   # an empty account, backends warm
    try:
        env = {**os.environ, "AWS_ENDPOINT_URL": url,
               "AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t",
               "GPULEASE_ENVIRONMENT": "dev", "GPULEASE_REGIONS": "us-west-2",
               "GPULEASE_APPLY": "true", "PYTHONPATH": ""}
        session = moto_strict.test_session()
        kw = dict(region_name="us-west-2", endpoint_url=url)
        session.client("ec2", **kw).create_launch_template(
            LaunchTemplateName="lt-x", LaunchTemplateData={"ImageId": "ami-12c6146b"})
        session.client("autoscaling", **kw).create_auto_scaling_group(
            AutoScalingGroupName="g", LaunchTemplate={"LaunchTemplateName": "lt-x"}, MinSize=1,
            MaxSize=1, DesiredCapacity=1, AvailabilityZones=["us-west-2a"],
            Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True, "ResourceId": "g",
                   "ResourceType": "auto-scaling-group"}
                  for k, v in {tags.CLUSTER: "sb", tags.ENVIRONMENT: "dev",
                               tags.DECLARED: tags.declared_value("dev", "sb"),
                               tags.IDLE_MINUTES: "30", tags.FIRST_JOB_GRACE: "0"}.items()])
        proc = subprocess.run([sys.executable, "-I", "-c", BOOT, str(bundle)], env=env,
                              capture_output=True, text=True, cwd=tmp_path, timeout=HANG_S)
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    (c,) = result["clusters"]
    assert (c["cluster"], c["environment"], c["state"]) == ("sb", "dev", "insufficient-data")
    assert '"event": "run-start"' in proc.stdout        # audit lines go to the function's log
