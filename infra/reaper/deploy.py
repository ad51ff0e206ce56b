"""Scheduled reaper: an AWS Lambda on an EventBridge schedule with a least-privilege role.

Called by the program (``infra.program``) when ``gpulease:reaper.schedule`` is set. The Lambda
runs ``infra.reaper.lambda_handler.handler`` from an archive of exactly :data:`LAMBDA_FILES`
(standard library + boto3 only: no pydantic, no Pulumi in the Lambda path). GCP (Cloud Run job
+ Cloud Scheduler) is not deployed yet: GCP environments run `gpulease reap` themselves.
"""
from __future__ import annotations

import json
from pathlib import Path

import pulumi
import pulumi_aws as aws

from infra.costing import tags
from infra.costing.context import shared
from infra.model import EnvironmentDecision

ROOT = Path(__file__).resolve().parents[1]  # the `infra` package directory
#: package files the Lambda imports (relative to ROOT); __init__ files are replaced by empty
#: ones in the archive so no package-level import can drag pydantic or Pulumi in.
LAMBDA_FILES = (
    "errors.py", "model.py", "catalog/__init__.py", "costing/tags.py",
    "reaper/decision.py", "reaper/engine.py", "reaper/aws.py", "reaper/retry.py",
    "reaper/audit.py", "reaper/lambda_handler.py",
)
HANDLER = "infra.reaper.lambda_handler.handler"
RUNTIME = "python3.12"


def archive_files() -> dict[str, Path]:
    """Archive path -> source file (the catalog data files ride along for reservation prices)."""
    files = {f"infra/{rel}": ROOT / rel for rel in LAMBDA_FILES}
    for data in sorted((ROOT / "catalog" / "data").glob("*.json")):
        files[f"infra/catalog/data/{data.name}"] = data
    return files


def code_archive() -> pulumi.AssetArchive:
    assets: dict = {name: pulumi.FileAsset(str(path)) for name, path in archive_files().items()}
    for pkg in ("infra", "infra/costing", "infra/reaper"):
        assets[f"{pkg}/__init__.py"] = pulumi.StringAsset('"""gpulease reaper (Lambda bundle)."""\n')
    return pulumi.AssetArchive(assets)


def role_policy(environment: str, log_group_arn: str) -> dict:
    """Least privilege: read anything it must judge, change only this environment's ASGs."""
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": "Discover", "Effect": "Allow", "Resource": "*",  # Describe* take no resource ARNs
         "Action": ["autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeTags",
                    "ec2:DescribeCapacityReservations",
                    "cloudwatch:GetMetricData"]},
        {"Sid": "ScaleOwnEnvironmentOnly", "Effect": "Allow", "Resource": "*",
         "Action": ["autoscaling:UpdateAutoScalingGroup"],
         "Condition": {"StringEquals": {
             f"autoscaling:ResourceTag/{tags.ENVIRONMENT}": environment}}},
        {"Sid": "MarkOwnEnvironmentOnly", "Effect": "Allow", "Resource": "*",
         "Action": ["autoscaling:CreateOrUpdateTags", "autoscaling:DeleteTags"],
         "Condition": {"StringEquals": {
             f"autoscaling:ResourceTag/{tags.ENVIRONMENT}": environment},
             "ForAllValues:StringEquals": {"aws:TagKeys": [tags.IDLE_SINCE]}}},
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


def deploy_reaper(env: EnvironmentDecision) -> list[pulumi.Resource]:
    """Deploy the scheduled reaper for an environment with AWS clusters (else nothing)."""
    settings = env.stack.reaper
    if not getattr(settings, "schedule", None):
        return []
    if not any(c.cloud == "aws" for c in env.clusters):
        pulumi.log.warn("gpulease:reaper.schedule: only AWS is deployed on a schedule; this "
                        "environment has no AWS cluster, run `gpulease reap --cloud gcp` instead")
        return []
    return ScheduledReaper("reaper", env).resources
