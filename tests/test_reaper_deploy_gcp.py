"""The scheduled reaper on GCP: Pulumi resources under mocks, the schedule conversion, and the
Cloud Function bundle running for real (pydantic/Pulumi blocked) against the local GCP fake.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from gpulease import tags
from gpulease.costing.context import CostContext
from gpulease.errors import ConfigError
from gpulease.model import CloudSpec
from gpulease.planner.mocks import run_program
from gpulease.reaper import deploy, gcp_deploy
from tests.conftest import ROOT, program_run
from tests.fakes.gcp_compute_monitoring import FakeGcp
from tests.test_reaper_deploy import env_decision
from tests.timeouts import HANG_S

P = "urn:pulumi:dev::gpulease::gpulease:reaper:ScheduledGcp"


def gcp_env(schedule="rate(15 minutes)", project="acme-ml", **kw):
    env = env_decision(schedule=schedule, cloud="gcp", region="europe-west4", **kw)
    clouds = {"gcp": CloudSpec(cloud="gcp", regions=("europe-west4",), project=project)} \
        if project else {}
    return dataclasses.replace(env, stack=dataclasses.replace(env.stack, clouds=clouds,
                                                              source="stacks/Pulumi.dev.yaml"))


@pytest.fixture(scope="module")
def gcp_run():
    holder = {}
    run = run_program(lambda: holder.setdefault("res", deploy.deploy_reaper(gcp_env())),
                      stack="dev")
    return run, holder["res"]


def urn(typ: str, name: str) -> str:
    return f"{P}${typ}::{name}"


def test_every_gcp_resource_declared_under_one_component(gcp_run):
    run, res = gcp_run
    comp = res[0]
    assert isinstance(comp.cost_context, CostContext) and comp.cost_context.cluster == tags.SHARED
    got = {r.urn for r in run.resources}
    want = {urn(t, n) for t, n in [
        ("pulumi:providers:gcp", "reaper-gcp-provider"),
        ("gcp:storage/bucket:Bucket", "reaper-gcp-source"),
        ("gcp:storage/bucketObject:BucketObject", "reaper-gcp-source-zip"),
        ("gcp:serviceaccount/account:Account", "reaper-gcp-sa"),
        ("gcp:projects/iAMCustomRole:IAMCustomRole", "reaper-gcp-read-role"),
        ("gcp:projects/iAMCustomRole:IAMCustomRole", "reaper-gcp-act-role"),
        ("gcp:projects/iAMCustomRole:IAMCustomRole", "reaper-gcp-progress-role"),
        ("gcp:projects/iAMMember:IAMMember", "reaper-gcp-read"),
        ("gcp:projects/iAMMember:IAMMember", "reaper-gcp-act"),
        ("gcp:projects/iAMMember:IAMMember", "reaper-gcp-progress"),
        ("gcp:cloudfunctionsv2/function:Function", "reaper-gcp-fn"),
        ("gcp:serviceaccount/account:Account", "reaper-gcp-invoker-sa"),
        ("gcp:cloudrunv2/serviceIamMember:ServiceIamMember", "reaper-gcp-invoker"),
        ("gcp:cloudscheduler/job:Job", "reaper-gcp-schedule")]}
    assert got == want | {"urn:pulumi:dev::gpulease::pulumi:pulumi:Stack$"
                          "gpulease:reaper:ScheduledGcp::reaper-gcp"}
    provider = run.one("pulumi:providers:gcp")
    assert provider.inputs["project"] == "acme-ml"
    assert all(r.provider.startswith(provider.urn) for r in run.custom if r is not provider)
    # no AWS reaper for a GCP-only environment
    assert not [r for r in run.resources if r.type.startswith("aws:")]


def test_function_runs_the_reaper_from_the_uploaded_zip(gcp_run):
    run, _ = gcp_run
    bucket = run.one("gcp:storage/bucket:Bucket")
    assert bucket.inputs["uniformBucketLevelAccess"] is True
    assert bucket.inputs["publicAccessPrevention"] == "enforced"
    assert bucket.inputs["forceDestroy"] is False
    assert bucket.retain_on_delete and not bucket.protect          # dev: retained, unprotected
    obj = run.one("gcp:storage/bucketObject:BucketObject")
    assert obj.inputs["bucket"] == bucket.outputs["name"]
    files = gcp_deploy.gcp_source_files()
    assert obj.inputs["name"] == f"gpulease-reaper-dev-{gcp_deploy.source_digest(files)}.zip"
    assert set(obj.inputs["source"]["assets"]) == set(files)
    fn = run.one("gcp:cloudfunctionsv2/function:Function")
    assert fn.inputs["name"] == "gpulease-reaper-dev" and fn.inputs["location"] == "europe-west4"
    build = fn.inputs["buildConfig"]
    assert (build["runtime"], build["entryPoint"]) == ("python312", "handler")
    assert build["source"]["storageSource"] == {"bucket": bucket.outputs["name"],
                                                "object": obj.inputs["name"]}
    svc = fn.inputs["serviceConfig"]
    assert svc["serviceAccountEmail"] == "gpulease-reaper-dev@plan.iam.gserviceaccount.com"
    assert svc["maxInstanceCount"] == 1
    assert svc["environmentVariables"] == {
        "GPULEASE_ENVIRONMENT": "dev", "GPULEASE_PROJECT": "acme-ml",
        "GPULEASE_THRESHOLD_PCT": "5.0", "GPULEASE_GRACE_MINUTES": "45",
        "GPULEASE_MAX_ACTIONS": "10", "GPULEASE_APPLY": "true"}
    # the grants exist before the first run
    assert {urn("gcp:projects/iAMMember:IAMMember", "reaper-gcp-read"),
            urn("gcp:projects/iAMMember:IAMMember", "reaper-gcp-act"),
            urn("gcp:projects/iAMMember:IAMMember", "reaper-gcp-progress")} <= set(fn.depends_on)


def test_reaper_identity_is_least_privilege(gcp_run):
    run, _ = gcp_run
    roles = {r.name: r.inputs for r in run.by_type("gcp:projects/iAMCustomRole:IAMCustomRole")}
    read, act = roles["reaper-gcp-read-role"], roles["reaper-gcp-act-role"]
    assert read["roleId"] == "gpulease_reaper_read_dev" and act["roleId"] == "gpulease_reaper_act_dev"
    assert read["permissions"] == ["compute.instanceGroupManagers.list",
                                   "compute.instanceTemplates.get", "compute.instances.get",
                                   "compute.instances.getGuestAttributes",
                                   "compute.instances.list", "compute.reservations.get",
                                   "monitoring.timeSeries.list"]
    assert act["permissions"] == ["compute.instanceGroupManagers.get",
                                  "compute.instanceGroupManagers.update",
                                  "compute.instances.setLabels"]
    progress = roles["reaper-gcp-progress-role"]
    assert progress["roleId"] == "gpulease_reaper_progress_dev"
    assert progress["permissions"] == ["storage.objects.get"]
    assert not any(p.endswith("*") for p in read["permissions"] + act["permissions"]
                   + progress["permissions"])
    members = {r.name: r.inputs for r in run.by_type("gcp:projects/iAMMember:IAMMember")}
    sa = "serviceAccount:gpulease-reaper-dev@plan.iam.gserviceaccount.com"
    assert members["reaper-gcp-read"]["member"] == sa == members["reaper-gcp-act"]["member"]
    assert "condition" not in members["reaper-gcp-read"]      # listing is checked on the project
    # the deadline step reads exactly the progress documents of the environment's clusters
    assert members["reaper-gcp-progress"]["member"] == sa
    assert members["reaper-gcp-progress"]["condition"]["expression"] == (
        'resource.name == "projects/_/buckets/gpulease-dev-sandbox-work/objects/'
        'checkpoints/sandbox/gpulease-progress.json"')
    expr = members["reaper-gcp-act"]["condition"]["expression"]
    assert expr == ('resource.name.startsWith("projects/acme-ml/") && ('
                    'resource.name.extract("/instances/{name}").startsWith("sandbox-") || '
                    'resource.name.extract("/instanceGroupManagers/{name}") in '
                    '["sandbox-on-demand", "sandbox-reserved", "sandbox-spot"])')
    # no predefined role anywhere but run.invoker, and that one only on the function's service
    assert {m["role"] for m in members.values()} == {
        r.outputs["name"] for r in run.by_type("gcp:projects/iAMCustomRole:IAMCustomRole")}
    inv = run.one("gcp:cloudrunv2/serviceIamMember:ServiceIamMember")
    assert inv.inputs == {"role": "roles/run.invoker", "location": "europe-west4",
                          "project": "acme-ml", "name": "gpulease-reaper-dev",
                          "member": "serviceAccount:gpulease-reaper-inv-dev@plan.iam."
                                    "gserviceaccount.com"}


def test_scheduler_calls_the_function_with_oidc(gcp_run):
    run, _ = gcp_run
    job = run.one("gcp:cloudscheduler/job:Job")
    assert (job.inputs["schedule"], job.inputs["timeZone"]) == ("*/15 * * * *", "Etc/UTC")
    assert job.inputs["region"] == "europe-west4"
    target = job.inputs["httpTarget"]
    assert target["httpMethod"] == "POST"
    assert target["oidcToken"]["serviceAccountEmail"] == \
        "gpulease-reaper-inv-dev@plan.iam.gserviceaccount.com"
    # the URL is the function's output, and the job waits for the grant
    assert target["uri"] == target["oidcToken"]["audience"] == \
        "https://europe-west4-plan-project.cloudfunctions.net/gpulease-reaper-dev"
    assert urn("gcp:cloudfunctionsv2/function:Function", "reaper-gcp-fn") in job.depends_on
    assert urn("gcp:cloudrunv2/serviceIamMember:ServiceIamMember",
               "reaper-gcp-invoker") in job.depends_on
    assert job.inputs["retryConfig"] == {"retryCount": 0}


def test_prod_stack_deploys_both_reapers_and_protects_the_source_bucket():
    run = program_run("prod")
    fns = run.by_type("gcp:cloudfunctionsv2/function:Function")
    assert [f.inputs["serviceConfig"]["environmentVariables"]["GPULEASE_PROJECT"]
            for f in fns] == ["acme-ml-prod"]
    assert len(run.by_type("aws:lambda/function:Function")) == 1
    src = run.one("gcp:storage/bucket:Bucket", "reaper-gcp-source")
    assert src.protect and src.retain_on_delete
    # the stack-wide cost transform labelled the function and bucket as shared infrastructure
    for r in (fns[0], src):
        assert r.inputs["labels"][tags.label_key(tags.CLUSTER)] == tags.SHARED
    assert run.one("gcp:cloudscheduler/job:Job").inputs["schedule"] == "*/15 * * * *"


# ---- schedule conversion ---------------------------------------------------------------------
@pytest.mark.parametrize("aws,unix", [
    ("rate(1 minute)", "* * * * *"),
    ("rate(15 minutes)", "*/15 * * * *"),
    ("rate(30 minutes)", "*/30 * * * *"),
    ("rate(120 minutes)", "0 */2 * * *"),
    ("rate(1 hour)", "0 * * * *"),
    ("rate(6 hours)", "0 */6 * * *"),
    ("rate(24 hours)", "0 0 * * *"),
    ("rate(1 day)", "0 0 * * *"),
    ("rate(7 days)", "0 0 * * 0"),
    ("cron(0/15 * * * ? *)", "0-59/15 * * * *"),
    ("cron(5/20 1-23/2 ? * SUN,SAT *)", "5-59/20 1-23/2 * * 0,6"),
    ("cron(0 8 ? * MON-FRI *)", "0 8 * * 1-5"),
    ("cron(0 8 ? * 2-6 *)", "0 8 * * 1-5"),          # AWS 1=SUN, unix 0=SUN
    ("cron(0 0 ? * 7 *)", "0 0 * * 6"),
    ("cron(0 0 ? * 1/2 *)", "0 0 * * 0-6/2"),
    ("cron(30 2 1 * ? *)", "30 2 1 * *"),
    ("cron(0 12 ? JAN,JUL 1 *)", "0 12 * 1,7 0"),
    ("cron(*/10 * * * ? *)", "*/10 * * * *"),
])
def test_eventbridge_schedule_to_unix_cron(aws, unix):
    assert gcp_deploy.unix_cron(aws) == unix


@pytest.mark.parametrize("bad,why", [
    ("rate(7 minutes)", "every N minutes when N divides 60 (7 does not)"),
    ("rate(5 hours)", "every N hours when N divides 24 (5 does not)"),
    ("rate(3 days)", "cannot repeat every 3 days"),
    ("cron(0 8 L * ? *)", "day-of-month 'L' uses L, W or #"),
    ("cron(0 8 15W * ? *)", "day-of-month '15W' uses L, W or #"),
    ("cron(0 8 ? * 2#1 *)", "day-of-week '2#1' uses L, W or #"),
    ("cron(0 8 * * ? 2027)", "unix-cron has no year field (year is '2027', use *)"),
    ("cron(0 8 * *)", "EventBridge cron has 6 fields"),
    ("cron(61 * * * ? *)", "minutes '61' is not in 0-59"),
    ("cron(0 8 ? * FOO *)", "day-of-week 'FOO' is not in 1-7 or SUN-SAT"),
    ("cron(0 ? * * * *)", "'?' is only allowed in day-of-month or day-of-week"),
    ("cron(0 20-8 * * ? *)", "hours range '20-8' runs backwards"),
])
def test_unconvertible_schedule_is_a_config_error(bad, why):
    with pytest.raises(ConfigError) as exc:
        gcp_deploy.unix_cron(bad, source="stacks/Pulumi.dev.yaml")
    assert exc.value.exit_code == 2
    msg = str(exc.value)
    assert msg.startswith(f"stacks/Pulumi.dev.yaml: gpulease:reaper.schedule: {bad!r} cannot "
                          "run on Cloud Scheduler: ")
    assert why in msg and 'use e.g. "rate(15 minutes)"' in msg


def test_bad_schedule_or_missing_project_fails_before_declaring_anything():
    for env, path in [(gcp_env(schedule="rate(7 minutes)"), "gpulease:reaper.schedule"),
                      (gcp_env(project=None), "gpulease:clouds.gcp.project")]:
        holder = {}

        def program(env=env):
            try:
                deploy.deploy_reaper(env)
            except ConfigError as exc:
                holder["err"] = exc
        assert run_program(program, stack="dev").resources == []
        assert holder["err"].findings[0].path == path


# ---- the bundle ------------------------------------------------------------------------------
BLOCKED = ("pydantic", "pulumi", "pulumi_gcp", "pulumi_aws", "pulumi_policy", "yaml", "boto3",
           "botocore", "jinja2")


def test_archive_imports_nothing_of_pydantic_or_pulumi():
    files = gcp_deploy.gcp_source_files()
    for name, body in files.items():
        if not name.endswith(".py"):
            continue
        for node in ast.walk(ast.parse(body, name)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for m in mods:
                assert m.split(".")[0] not in BLOCKED, f"{name} imports {m}"
                assert m != "gpulease.reaper.settings", f"{name} imports the pydantic settings"
    pins = dict(line.split("==") for line in files["requirements.txt"].decode().split())
    # the versions the reaper code runs with here: constraints.txt's pins (README's install)
    repo = dict(line.split("==", 1) for line in (ROOT / "constraints.txt").read_text().split("\n")
                if "==" in line and not line.startswith("#"))
    assert pins == {"google-cloud-compute": repo["google-cloud-compute"],
                    "google-cloud-storage": repo["google-cloud-storage"],
                    "requests": repo["requests"]}
    assert files["main.py"].decode().endswith(
        "from gpulease.reaper.gcp_function import handler  # noqa: F401\n")


BOOT = textwrap.dedent("""
    import json, sys
    for name in %r:
        sys.modules[name] = None          # any import of these now fails
    sys.path.insert(0, sys.argv[1])
    from main import handler              # what the Python runtime loads
    body, status, headers = handler(None)
    assert "gpulease.reaper.settings" not in sys.modules
    print("RESULT " + json.dumps({"status": status, "headers": headers, "body": json.loads(body)}))
""") % (BLOCKED,)


def test_function_bundle_dry_run_against_the_gcp_fake(tmp_path):
    bundle = tmp_path / "bundle"
    for name, body in gcp_deploy.gcp_source_files().items():
        (bundle / name).parent.mkdir(parents=True, exist_ok=True)
        (bundle / name).write_bytes(body)
    fake = FakeGcp(project="acme-ml")
    url = fake.start()
    try:
        now = time.time()
        lab = {tags.CLUSTER: "sandbox", tags.ENVIRONMENT: "dev", tags.IDLE_MINUTES: "30",
               tags.FIRST_JOB_GRACE: "0", tags.DECLARED: tags.declared_value("dev", "sandbox")}
        idle = fake.add_mig("europe-west4-a", "sandbox-spot", 2, labels=lab, launched=now - 6 * 3600)
        busy = fake.add_mig("europe-west4-a", "train-spot", 1, launched=now - 6 * 3600,
                            labels={**lab, tags.CLUSTER: "train",
                                    tags.DECLARED: tags.declared_value("dev", "train")})
        other = fake.add_mig("europe-west4-a", "x-spot", 1, launched=now - 6 * 3600,
                             labels={**lab, tags.CLUSTER: "x", tags.ENVIRONMENT: "prod",
                                     tags.DECLARED: tags.declared_value("prod", "x")})
        for i in idle + other:
            fake.put_points(i, now - 3 * 3600, now, 0.5)
        fake.put_points(busy[0], now - 3 * 3600, now, 80.0)
        env = {**os.environ, "GPULEASE_GCP_ENDPOINT": url, "GPULEASE_PROJECT": "acme-ml",
               "GPULEASE_ENVIRONMENT": "dev", "GPULEASE_APPLY": "false", "PYTHONPATH": ""}
        proc = subprocess.run([sys.executable, "-I", "-c", BOOT, str(bundle)], env=env,
                              capture_output=True, text=True, cwd=tmp_path, timeout=HANG_S)
    finally:
        fake.stop()
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert out["status"] == 200 and out["headers"] == {"Content-Type": "application/json"}
    assert out["body"]["apply"] is False and out["body"]["failed"] is False
    got = {c["cluster"]: c for c in out["body"]["clusters"]}
    assert set(got) == {"sandbox", "train"}                      # other environment not judged
    assert (got["sandbox"]["state"], got["sandbox"]["action"], got["sandbox"]["applied"]) == \
        ("idle", "mark", False)                                  # dry run: would mark
    assert got["train"]["state"] == "busy"
    assert fake.mutations == []                                  # a dry run changes nothing
    paths = {p for _, p in fake.log}
    assert "/compute/v1/projects/acme-ml/aggregated/instances" in paths
    assert "/v3/projects/acme-ml/timeSeries" in paths
    assert '"event": "run-start"' in proc.stdout                 # audit lines reach the log
