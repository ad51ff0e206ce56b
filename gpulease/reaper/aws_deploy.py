"""The AWS scheduled reaper: a Lambda run by an EventBridge rule.

Called through ``gpulease.reaper.deploy.deploy_reaper`` (this module is ``AWS.reaper_deploy_module``)
when ``gpulease:reaper.schedule`` is set and the environment has AWS clusters. The Lambda runs
``gpulease.reaper.lambda_handler.handler`` from an archive of :data:`LAMBDA_FILES` (standard
library + boto3: no pydantic, no Pulumi).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pulumi
import pulumi_aws as aws

from gpulease import deadline, tags
from gpulease.costing.context import shared
from gpulease.model import EnvironmentDecision
from gpulease.reaper.bundle import ROOT, SHARED_FILES, catalog_data_files

#: package files the Lambda imports (relative to ROOT): the shared ones, the AWS adaptor and
#: the handler.
LAMBDA_FILES = SHARED_FILES + ("reaper/aws.py", "reaper/lambda_handler.py")
HANDLER = "gpulease.reaper.lambda_handler.handler"
RUNTIME = "python3.12"


def archive_files() -> dict[str, Path]:
    """Archive path -> source file (the catalog data files ride along for reservation prices)."""
    files = {f"gpulease/{rel}": ROOT / rel for rel in LAMBDA_FILES}
    for data in catalog_data_files():
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
             "ForAllValues:StringLike": {"aws:TagKeys": [tags.IDLE_SINCE, f"{tags.CLAIM}-*",
                                                          tags.DEADLINE_SWITCH]}}},
        # The deadline step (issue 37): the progress documents window jobs publish beside
        # their checkpoints - those objects only, never anything else of the data.
        {"Sid": "ReadProgressOnly", "Effect": "Allow",
         "Resource": f"arn:aws:s3:::*/*{deadline.PROGRESS_OBJECT}",
         "Action": ["s3:GetObject"]},
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


def prepare(env: EnvironmentDecision) -> Callable[[], list[pulumi.Resource]]:
    """Check what the AWS reaper needs (nothing beyond the schedule) and return what declares it."""
    return lambda: ScheduledReaper("reaper", env).resources


__all__ = ["LAMBDA_FILES", "HANDLER", "RUNTIME", "archive_files", "code_archive", "role_policy",
           "ScheduledReaper", "prepare"]
