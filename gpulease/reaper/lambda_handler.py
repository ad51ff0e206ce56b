"""Entry point of the scheduled reaper (AWS Lambda): environment variables -> one reaper run.

Runs with only the standard library, boto3 (in the Lambda runtime) and the gpulease files
listed in ``gpulease.reaper.aws_deploy.LAMBDA_FILES`` — no pydantic, no Pulumi.
"""
from __future__ import annotations

import os
from typing import Any

from gpulease.reaper import functions as scheduled


def settings_from_env(env: Any = None) -> dict:
    env = os.environ if env is None else env
    return {**scheduled.settings_from_env(env),
            "regions": [r for r in env.get("GPULEASE_REGIONS", "").split(",") if r]
            or [env.get("AWS_REGION", "us-east-1")]}


def handler(event: Any = None, context: Any = None) -> dict:
    from gpulease.reaper.aws import AwsReaper

    s = settings_from_env()
    return scheduled.run_pass([AwsReaper.for_region(r) for r in s["regions"]], s)
