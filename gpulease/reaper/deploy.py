"""Scheduled reaper: AWS Lambda + EventBridge, and GCP Cloud Functions (2nd gen) + Cloud Scheduler.

Called by the program (``gpulease.program``) when ``gpulease:reaper.schedule`` is set; one scheduled
reaper per cloud the environment has clusters on. Both run the reaper from an archive of plain
Python files (standard library + boto3 on AWS, google-cloud-compute + requests on GCP: no
pydantic, no Pulumi): the Lambda runs ``gpulease.reaper.lambda_handler.handler`` from
:data:`LAMBDA_FILES`, the Cloud Function ``gpulease.reaper.gcp_function.handler`` from
:data:`GCP_FUNCTION_FILES`. The EventBridge schedule expression is converted to unix-cron for
Cloud Scheduler by :func:`unix_cron`.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Optional

import pulumi
import pulumi_aws as aws
import pulumi_gcp as gcp

from gpulease import datafiles
from gpulease import tags
from gpulease.clouds import registry
from gpulease.clouds.gcp.cloud import mig_name
from gpulease.costing.context import shared
from gpulease.errors import ConfigError, Finding
from gpulease.model import EnvironmentDecision
from gpulease.purchase import NODE_MODELS

ROOT = datafiles.package_root()  # the `gpulease` package directory (checkout or wheel)
#: package files the Lambda imports (relative to ROOT); __init__ files are replaced by empty
#: ones in the archive so no package-level import can drag pydantic or Pulumi in.
LAMBDA_FILES = (
    "errors.py", "limits.py", "model.py", "money.py", "datafiles.py", "retry.py", "text.py",
    "clock.py", "purchase.py",
    "catalog/__init__.py", "tags.py", "cron.py", "reaper/decision.py", "reaper/defaults.py",
    "reaper/engine.py",
    # the cloud registry (model and the engine ask it); these __init__ files import nothing
    "clouds/__init__.py", "clouds/base.py", "clouds/registry.py",
    "clouds/aws/__init__.py", "clouds/aws/cloud.py", "clouds/gcp/__init__.py", "clouds/gcp/cloud.py",
    "reaper/aws.py", "reaper/audit.py", "reaper/errors.py", "reaper/claims.py",
    "reaper/functions.py", "reaper/lambda_handler.py",
)
HANDLER = "gpulease.reaper.lambda_handler.handler"
RUNTIME = "python3.12"


def archive_files() -> dict[str, Path]:
    """Archive path -> source file (the catalog data files ride along for reservation prices)."""
    files = {f"gpulease/{rel}": ROOT / rel for rel in LAMBDA_FILES}
    for data in sorted((ROOT / "catalog" / "data").glob("*.json")):
        files[f"gpulease/catalog/data/{data.name}"] = data
    return files


def code_archive() -> pulumi.AssetArchive:
    assets: dict = {name: pulumi.FileAsset(str(path)) for name, path in archive_files().items()}
    for pkg in ("gpulease", "gpulease/reaper"):
        assets[f"{pkg}/__init__.py"] = pulumi.StringAsset('"""gpulease reaper (Lambda bundle)."""\n')
    return pulumi.AssetArchive(assets)


def role_policy(environment: str, log_group_arn: str) -> dict:
    """Least privilege: read anything it must judge, change only this environment's ASGs."""
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": "Discover", "Effect": "Allow", "Resource": "*",  # Describe* take no resource ARNs
         "Action": ["autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeTags",
                    "ec2:DescribeCapacityReservations", "ec2:DescribeTags",
                    "cloudwatch:GetMetricData"]},
        # Scale a group down, or take idle nodes above its floor out of it (decrementing).
        {"Sid": "ScaleOwnEnvironmentOnly", "Effect": "Allow", "Resource": "*",
         "Action": ["autoscaling:UpdateAutoScalingGroup",
                    "autoscaling:TerminateInstanceInAutoScalingGroup"],
         "Condition": {"StringEquals": {
             f"autoscaling:ResourceTag/{tags.ENVIRONMENT}": environment}}},
        # The per-node idle mark: one tag key, on the environment's instances only.
        {"Sid": "MarkNodesOwnEnvironmentOnly", "Effect": "Allow",
         "Resource": "arn:aws:ec2:*:*:instance/*",
         "Action": ["ec2:CreateTags", "ec2:DeleteTags"],
         "Condition": {"StringEquals": {f"aws:ResourceTag/{tags.ENVIRONMENT}": environment},
                       "ForAllValues:StringEquals": {"aws:TagKeys": [tags.NODE_IDLE_SINCE]}}},
        # The idle mark, and the claim that shares --max-actions with concurrent reapers.
        {"Sid": "MarkOwnEnvironmentOnly", "Effect": "Allow", "Resource": "*",
         "Action": ["autoscaling:CreateOrUpdateTags", "autoscaling:DeleteTags"],
         "Condition": {"StringEquals": {
             f"autoscaling:ResourceTag/{tags.ENVIRONMENT}": environment},
             "ForAllValues:StringLike": {"aws:TagKeys": [tags.IDLE_SINCE, f"{tags.CLAIM}-*"]}}},
        {"Sid": "Logs", "Effect": "Allow", "Resource": f"{log_group_arn}:*",
         "Action": ["logs:CreateLogStream", "logs:PutLogEvents"]},
    ]}


ASSUME = json.dumps({"Version": "2012-10-17", "Statement": [{
    "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"},
    "Action": "sts:AssumeRole"}]})


class ScheduledReaper(pulumi.ComponentResource):
    def __init__(self, name: str, env: EnvironmentDecision,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpulease:reaper:Scheduled", name, None, opts)
        self.cost_context = shared()
        spec = env.stack
        settings = spec.reaper
        environment = spec.environment
        regions = sorted({c.region for c in env.clusters if c.cloud == "aws"})
        child = pulumi.ResourceOptions(parent=self)
        fn_name = f"gpulease-reaper-{environment}"[:64]
        self.log_group = aws.cloudwatch.LogGroup(
            f"{name}-logs", name=f"/aws/lambda/{fn_name}", retention_in_days=90, opts=child)
        self.role = aws.iam.Role(f"{name}-role", assume_role_policy=ASSUME,
                                 description=f"gpulease reaper for environment {environment}",
                                 opts=child)
        self.policy = aws.iam.RolePolicy(
            f"{name}-policy", role=self.role.id,
            policy=self.log_group.arn.apply(lambda arn: json.dumps(role_policy(environment, arn))),
            opts=child)
        self.function = aws.lambda_.Function(
            f"{name}-fn", name=fn_name, runtime=RUNTIME, handler=HANDLER, role=self.role.arn,
            code=code_archive(), timeout=300, memory_size=256,
            environment=aws.lambda_.FunctionEnvironmentArgs(variables={
                "GPULEASE_ENVIRONMENT": environment,
                "GPULEASE_REGIONS": ",".join(regions),
                "GPULEASE_THRESHOLD_PCT": str(settings.threshold_pct),
                "GPULEASE_GRACE_MINUTES": str(settings.grace_minutes),
                "GPULEASE_MAX_ACTIONS": str(settings.max_actions),
                "GPULEASE_APPLY": "true" if settings.apply else "false"}),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.log_group, self.policy]))
        self.rule = aws.cloudwatch.EventRule(
            f"{name}-schedule", schedule_expression=settings.schedule,
            description=f"run the gpulease reaper for {environment}", opts=child)
        self.permission = aws.lambda_.Permission(
            f"{name}-invoke", action="lambda:InvokeFunction", function=self.function.name,
            principal="events.amazonaws.com", source_arn=self.rule.arn, opts=child)
        self.target = aws.cloudwatch.EventTarget(
            f"{name}-target", rule=self.rule.name, arn=self.function.arn, opts=child)
        self.register_outputs({"function": self.function.name, "schedule": settings.schedule})

    @property
    def resources(self) -> list[pulumi.Resource]:
        return [self, self.log_group, self.role, self.policy, self.function, self.rule,
                self.permission, self.target]


# ---- GCP: schedule conversion (pure) ---------------------------------------------------------
SCHEDULE_PATH = "gpulease:reaper.schedule"
#: AWS cron fields (EventBridge "Schedule expressions for rules"): name, low, high.
_CRON_FIELDS = (("minutes", 0, 59), ("hours", 0, 23), ("day-of-month", 1, 31),
                ("month", 1, 12), ("day-of-week", 1, 7), ("year", 1970, 2199))
_MONTHS = {m: i for i, m in enumerate(("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG",
                                       "SEP", "OCT", "NOV", "DEC"), 1)}
#: EventBridge day-of-week 1-7 = SUN-SAT; unix-cron 0-6 = SUN-SAT.
_DAYS = {d: i for i, d in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"), 1)}
_RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
#: EventBridge's L / W / # forms ("L", "LW", "15W", "5L", "L-2", "2#1"); not month names.
_SPECIAL = re.compile(r"#|^L(W|-\d+)?$|^\d+[LW]$")
_TOKEN = re.compile(r"^(?:(\*)|([0-9A-Z]+)(?:-([0-9A-Z]+))?)(?:/(\d+))?$")


def _schedule_error(expression: str, why: str, source: str) -> ConfigError:
    return ConfigError([Finding(SCHEDULE_PATH, f"{expression!r} cannot run on Cloud Scheduler: "
                                f"{why}; use e.g. \"rate(15 minutes)\", \"rate(1 hour)\" or "
                                "\"cron(0/15 * * * ? *)\"", source=source)])


def _rate_cron(n: int, unit: str, expression: str, source: str) -> str:
    if n < 1:
        raise _schedule_error(expression, "the rate must be at least 1", source)
    if unit.startswith("minute"):
        if n % 60 == 0:
            return _rate_cron(n // 60, "hours", expression, source)
        if 60 % n:
            # "*/7" restarts at every full hour (runs at :56 then :00), not every 7 minutes.
            raise _schedule_error(expression, f"unix-cron can only repeat every N minutes "
                                  f"when N divides 60 ({n} does not)", source)
        return "* * * * *" if n == 1 else f"*/{n} * * * *"
    if unit.startswith("hour"):
        if n % 24 == 0:
            return _rate_cron(n // 24, "days", expression, source)
        if 24 % n:
            raise _schedule_error(expression, f"unix-cron can only repeat every N hours when N "
                                  f"divides 24 ({n} does not)", source)
        return "0 * * * *" if n == 1 else f"0 */{n} * * *"
    if n == 1:
        return "0 0 * * *"
    if n == 7:
        return "0 0 * * 0"
    raise _schedule_error(expression, f"unix-cron cannot repeat every {n} days (day-of-month "
                          "steps restart every month); use rate(1 day) or rate(7 days)", source)


def _cron_field(value: str, index: int, expression: str, source: str) -> str:
    name, low, high = _CRON_FIELDS[index]
    names = _MONTHS if name == "month" else _DAYS if name == "day-of-week" else {}
    if value == "?":
        if name not in ("day-of-month", "day-of-week"):
            raise _schedule_error(expression, f"'?' is only allowed in day-of-month or "
                                  f"day-of-week, not in {name}", source)
        return "*"
    shift = -1 if name == "day-of-week" else 0
    out = []
    for token in value.upper().split(","):
        if _SPECIAL.search(token):
            raise _schedule_error(expression, f"{name} {token!r} uses L, W or # (last day, "
                                  "nearest weekday, nth weekday), which unix-cron has no form "
                                  "for", source)
        m = _TOKEN.match(token)
        if not m:
            raise _schedule_error(expression, f"{name} {token!r} is not a value, range, list "
                                  "or step", source)
        star, first, last, step = m.groups()

        def num(v: str) -> int:
            n = names.get(v) if v in names else int(v) if v.isdigit() else None
            if n is None or not low <= n <= high:
                names_hint = f" or {min(names, key=names.get)}-{max(names, key=names.get)}" \
                    if names else ""
                raise _schedule_error(expression, f"{name} {v!r} is not in {low}-{high}"
                                      f"{names_hint}", source)
            return n
        if step is not None and int(step) < 1:
            raise _schedule_error(expression, f"{name} step {step!r} must be at least 1", source)
        if star:
            out.append("*" if step is None else f"*/{step}")
            continue
        a = num(first)
        if last is None and step is None:
            out.append(str(a + shift))
            continue
        # AWS "5/15" = from 5 to the end every 15; unix-cron wants the range spelled out.
        b = num(last) if last is not None else high
        if b < a:
            raise _schedule_error(expression, f"{name} range {token!r} runs backwards", source)
        rng = f"{a + shift}-{b + shift}"
        out.append(rng if step is None else f"{rng}/{step}")
    return ",".join(out)


def unix_cron(expression: str, *, source: str = "") -> str:
    """EventBridge ``rate(...)`` / 6-field ``cron(...)`` -> 5-field unix-cron (Cloud Scheduler).

    EventBridge cron is in UTC: the job is created with ``time_zone="Etc/UTC"``. Raises
    ConfigError naming ``gpulease:reaper.schedule`` when unix-cron has no exact equivalent.
    """
    expr = expression.strip()
    m = _RATE.match(expr)
    if m:
        return _rate_cron(int(m.group(1)), m.group(2), expr, source)
    if not (expr.startswith("cron(") and expr.endswith(")")):
        raise _schedule_error(expr, "not a rate(...) or cron(...) expression", source)
    fields = expr[len("cron("):-1].split()
    if len(fields) != 6:
        raise _schedule_error(expr, f"EventBridge cron has 6 fields (minutes hours "
                              f"day-of-month month day-of-week year), found {len(fields)}", source)
    if fields[5] != "*":
        raise _schedule_error(expr, f"unix-cron has no year field (year is {fields[5]!r}, "
                              "use *)", source)
    return " ".join(_cron_field(v, i, expr, source) for i, v in enumerate(fields[:5]))


# ---- GCP: the function's archive and IAM (pure) --------------------------------------------------
#: the Lambda's plain-Python reaper files minus the AWS adaptor/handler, plus the GCP ones.
GCP_FUNCTION_FILES = tuple(f for f in LAMBDA_FILES
                           if f not in ("reaper/aws.py", "reaper/lambda_handler.py")) + (
    "reaper/gcp.py", "reaper/gcp_function.py")
GCP_RUNTIME = "python312"
GCP_ENTRY_POINT = "handler"
#: the Python runtime loads the entry point from main.py at the source root (Cloud Run
#: functions, "Source directory structure").
GCP_MAIN = ('"""Cloud Functions entry: the gpulease reaper."""\n'
            "from gpulease.reaper.gcp_function import handler  # noqa: F401\n")
#: pinned to the versions installed with gpulease (the ones its reaper code runs and is tested
#: with here: constraints.txt's pins in a checkout, the resolved ones in a wheel install).
GCP_REQUIREMENTS = ("google-cloud-compute", "requests")

#: What gpulease/reaper/gcp.py calls, as IAM permissions (Compute/Monitoring REST references):
#: instances.aggregatedList -> compute.instances.list (project); instances.get (re-read after
#: a 412 on setLabels); instanceGroupManagers.aggregatedList -> compute.instanceGroupManagers
#: .list (MIG target sizes, re-read right before acting); reservations.get; monitoring
#: projects.timeSeries.list; instances.getGuestAttributes -> compute.instances.getGuestAttributes
#: (the nodes' busy witness, contract C10).
GCP_READ_PERMISSIONS = ("compute.instanceGroupManagers.list", "compute.instances.get",
                        "compute.instances.getGuestAttributes", "compute.instances.list",
                        "compute.reservations.get", "monitoring.timeSeries.list")
#: instances.setLabels (idle marks, reaper claim); instanceGroupManagers.resize /
#: .deleteInstances (idle nodes above the floor) and their regional forms: "Authorization
#: requires the following IAM permission on the specified resource instanceGroupManager:
#: compute.instanceGroupManagers.update" and nothing on the instances (Compute Engine REST
#: reference, instanceGroupManagers.deleteInstances / regionInstanceGroupManagers
#: .deleteInstances, read 2026-12-03): the MIG deletes its VMs itself, as the Google APIs
#: service agent. (Before: compute.instances.delete too, which the method does not document.)
#: The operations they return are not polled, so no zoneOperations.get.
GCP_ACT_PERMISSIONS = ("compute.instanceGroupManagers.update", "compute.instances.setLabels")


def requirement_pins(names: tuple = GCP_REQUIREMENTS) -> list[str]:
    """``name==version`` lines for ``names``: the distributions installed beside gpulease."""
    from importlib import metadata

    return [f"{n}=={metadata.version(n)}" for n in names]


def gcp_source_files() -> dict[str, bytes]:
    """Archive path -> content of the Cloud Function's source zip."""
    files = {f"gpulease/{rel}": (ROOT / rel).read_bytes() for rel in GCP_FUNCTION_FILES}
    for data in sorted((ROOT / "catalog" / "data").glob("*.json")):
        files[f"gpulease/catalog/data/{data.name}"] = data.read_bytes()
    for pkg in ("gpulease", "gpulease/reaper"):
        files[f"{pkg}/__init__.py"] = b'"""gpulease reaper (Cloud Function bundle)."""\n'
    files["main.py"] = GCP_MAIN.encode()
    files["requirements.txt"] = ("\n".join(requirement_pins()) + "\n").encode()
    return files


def source_digest(files: dict[str, bytes]) -> str:
    """Content hash of the source: it names the zip object, so a change redeploys the function."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()[:16]


def gcp_source_archive(files: dict[str, bytes]) -> pulumi.AssetArchive:
    return pulumi.AssetArchive({n: pulumi.StringAsset(b.decode()) for n, b in files.items()})


def _gcp_id(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


def account_id(kind: str, environment: str) -> str:
    """Service account id (6-30 chars, ``[a-z]([-a-z0-9]*[a-z0-9])``) unique per environment."""
    base = f"gpulease-{kind}-{_gcp_id(environment)}"
    if len(base) > 30:
        base = f"{base[:24].rstrip('-')}-{hashlib.sha1(base.encode()).hexdigest()[:5]}"
    return base


def custom_role_id(kind: str, environment: str) -> str:
    """Project custom role id ``[a-zA-Z0-9_.]{3,64}``; stable (deleted ids stay reserved)."""
    base = re.sub(r"[^a-zA-Z0-9_]", "_", f"gpulease_reaper_{kind}_{environment}")
    if len(base) > 64:
        base = f"{base[:57]}_{hashlib.sha1(base.encode()).hexdigest()[:6]}"
    return base


def act_condition(*, project: str, clusters: list[str]) -> dict:
    """IAM condition: setLabels/resize only on this environment's clusters' VMs and MIGs.

    Compute Engine supports resource.name in IAM Conditions (IAM "Attribute reference for IAM
    Conditions"); names are ``projects/P/zones/Z/instances/N`` and
    ``projects/P/{zones/Z|regions/R}/instanceGroupManagers/N``. A MIG's VMs are named
    ``<base_instance_name>-<4 chars>`` with the cluster name as base (gpulease/clouds/gcp/cluster.py),
    its MIGs ``mig_name(cluster, model)``. ``extract`` returns "" when the segment is absent,
    so each clause only ever matches its own resource kind.
    """
    migs = sorted({mig_name(c, m) for c in clusters for m in NODE_MODELS})
    vm = " || ".join(f'resource.name.extract("/instances/{{name}}").startsWith("{c}-")'
                     for c in sorted(clusters))
    mig_list = ", ".join(f'"{m}"' for m in migs)
    return {"title": "own-environment-clusters-only",
            "description": f"setLabels/resize only on the VMs and MIGs of {', '.join(sorted(clusters))}",
            "expression": (f'resource.name.startsWith("projects/{project}/") && ('
                           f'{vm} || resource.name.extract("/instanceGroupManagers/{{name}}") '
                           f"in [{mig_list}])")}


class ScheduledGcpReaper(pulumi.ComponentResource):
    """Cloud Function (2nd gen) running the reaper, called by Cloud Scheduler with OIDC."""

    def __init__(self, name: str, env: EnvironmentDecision, *, project: str, region: str,
                 cron: str, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpulease:reaper:ScheduledGcp", name, None, opts)
        self.cost_context = shared()
        spec = env.stack
        settings = spec.reaper
        environment = spec.environment
        clusters = sorted({c.name for c in env.clusters if c.cloud == "gcp"})
        self.provider = gcp.Provider(f"{name}-provider", project=project, region=region,
                                     opts=pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        fn_name = f"gpulease-reaper-{_gcp_id(environment)}"[:63].rstrip("-")

        # Source: a small private bucket; data-outlives-stack rules as for every bucket.
        self.bucket = gcp.storage.Bucket(
            f"{name}-source", project=project, location=region.upper(),
            uniform_bucket_level_access=True, public_access_prevention="enforced",
            force_destroy=False,
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider,
                                        retain_on_delete=True, protect=spec.is_prod))
        files = gcp_source_files()
        self.source_object = gcp.storage.BucketObject(
            f"{name}-source-zip", bucket=self.bucket.name,
            name=f"{fn_name}-{source_digest(files)}.zip", source=gcp_source_archive(files),
            opts=child)

        # Runtime identity: read everything the reaper judges, act only on own clusters.
        self.account = gcp.serviceaccount.Account(
            f"{name}-sa", project=project, account_id=account_id("reaper", environment),
            display_name=f"gpulease reaper {environment}",
            description=f"runs the scheduled gpulease reaper for environment {environment}",
            opts=child)
        member = self.account.email.apply(lambda e: f"serviceAccount:{e}")
        self.read_role = gcp.projects.IAMCustomRole(
            f"{name}-read-role", project=project, role_id=custom_role_id("read", environment),
            title=f"gpulease reaper {environment} (read)",
            description="List/get instances, get reservations, read GPU utilization",
            permissions=list(GCP_READ_PERMISSIONS), stage="GA", opts=child)
        self.act_role = gcp.projects.IAMCustomRole(
            f"{name}-act-role", project=project, role_id=custom_role_id("act", environment),
            title=f"gpulease reaper {environment} (act)",
            description="Set the idle labels on VMs, resize MIGs, remove idle VMs from MIGs",
            permissions=list(GCP_ACT_PERMISSIONS), stage="GA", opts=child)
        # Listing is checked against the project, so the read grant cannot carry a
        # resource.name condition; the write grant does.
        self.read_binding = gcp.projects.IAMMember(
            f"{name}-read", project=project, role=self.read_role.name, member=member, opts=child)
        self.act_binding = gcp.projects.IAMMember(
            f"{name}-act", project=project, role=self.act_role.name, member=member,
            condition=act_condition(project=project, clusters=clusters), opts=child)

        self.function = gcp.cloudfunctionsv2.Function(
            f"{name}-fn", project=project, name=fn_name, location=region,
            description=f"gpulease reaper for environment {environment}",
            build_config={"runtime": GCP_RUNTIME, "entry_point": GCP_ENTRY_POINT,
                          "source": {"storage_source": {"bucket": self.bucket.name,
                                                        "object": self.source_object.name}}},
            service_config={
                "service_account_email": self.account.email,
                "available_memory": "256M", "timeout_seconds": 300,
                # one run at a time: a manual call and a scheduled one must not race.
                "max_instance_count": 1, "min_instance_count": 0,
                "ingress_settings": "ALLOW_ALL", "all_traffic_on_latest_revision": True,
                "environment_variables": {
                    "GPULEASE_ENVIRONMENT": environment,
                    "GPULEASE_PROJECT": project,
                    "GPULEASE_THRESHOLD_PCT": str(settings.threshold_pct),
                    "GPULEASE_GRACE_MINUTES": str(settings.grace_minutes),
                    "GPULEASE_MAX_ACTIONS": str(settings.max_actions),
                    "GPULEASE_APPLY": "true" if settings.apply else "false"}},
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider,
                                        depends_on=[self.read_binding, self.act_binding]))

        # Caller identity: may invoke this function's Cloud Run service and nothing else
        # (a 2nd gen function runs as a Cloud Run service of the same name).
        self.invoker_account = gcp.serviceaccount.Account(
            f"{name}-invoker-sa", project=project,
            account_id=account_id("reaper-inv", environment),
            display_name=f"gpulease reaper {environment} scheduler",
            description="Cloud Scheduler's OIDC identity for the gpulease reaper function",
            opts=child)
        self.invoker = gcp.cloudrunv2.ServiceIamMember(
            f"{name}-invoker", project=project, location=region, name=self.function.name,
            role="roles/run.invoker",
            member=self.invoker_account.email.apply(lambda e: f"serviceAccount:{e}"),
            opts=child)
        self.job = gcp.cloudscheduler.Job(
            f"{name}-schedule", project=project, region=region, name=fn_name,
            description=f"run the gpulease reaper for {environment} ({settings.schedule})",
            schedule=cron, time_zone="Etc/UTC", attempt_deadline="320s",
            retry_config={"retry_count": 0},
            http_target={"uri": self.function.url, "http_method": "POST",
                         "oidc_token": {"service_account_email": self.invoker_account.email,
                                        "audience": self.function.url}},
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider,
                                        depends_on=[self.invoker]))
        self.register_outputs({"function": self.function.name, "schedule": cron})

    @property
    def resources(self) -> list[pulumi.Resource]:
        return [self, self.provider, self.bucket, self.source_object, self.account,
                self.read_role, self.act_role, self.read_binding, self.act_binding,
                self.function, self.invoker_account, self.invoker, self.job]


def _gcp_project(env: EnvironmentDecision) -> str:
    spec = env.stack.clouds.get("gcp")
    if spec is None or not spec.project:
        raise ConfigError([Finding("gpulease:clouds.gcp.project", "the scheduled reaper runs "
                                   "in the GCP project of the clusters but none is configured; "
                                   "add gpulease:clouds.gcp.project", source=env.stack.source)])
    return spec.project


def deploy_reaper(env: EnvironmentDecision) -> list[pulumi.Resource]:
    """Deploy the scheduled reaper on each cloud the environment has clusters on."""
    settings = env.stack.reaper
    if not getattr(settings, "schedule", None):
        return []
    clouds = {c.cloud for c in env.clusters}
    if not clouds & set(registry.NAMES):
        pulumi.log.warn(f"{SCHEDULE_PATH}: the environment has no cluster; no reaper deployed")
        return []
    gcp_args = None
    if "gcp" in clouds:  # validate before declaring anything
        gcp_args = dict(project=_gcp_project(env),
                        region=sorted({c.region for c in env.clusters if c.cloud == "gcp"})[0],
                        cron=unix_cron(settings.schedule, source=env.stack.source))
    out: list[pulumi.Resource] = []
    if "aws" in clouds:
        out += ScheduledReaper("reaper", env).resources
    if gcp_args is not None:
        out += ScheduledGcpReaper("reaper-gcp", env, **gcp_args).resources
    return out
