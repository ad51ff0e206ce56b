"""Entry point of the scheduled reaper (AWS Lambda): environment variables -> one reaper run.

Runs with only the standard library, boto3 (in the Lambda runtime) and the gpulease files
listed in ``infra.reaper.deploy.LAMBDA_FILES`` — no pydantic, no Pulumi.
"""
from __future__ import annotations

import os
from typing import Any


def settings_from_env(env: Any = None) -> dict:
    env = os.environ if env is None else env
    return {
        "environment": env["GPULEASE_ENVIRONMENT"],
        "regions": [r for r in env.get("GPULEASE_REGIONS", "").split(",") if r]
        or [env.get("AWS_REGION", "us-east-1")],
        "threshold_pct": float(env.get("GPULEASE_THRESHOLD_PCT", "5")),
        "grace_minutes": int(env.get("GPULEASE_GRACE_MINUTES", "30")),
        "max_actions": int(env.get("GPULEASE_MAX_ACTIONS", "10")),
        "apply": env.get("GPULEASE_APPLY", "false").lower() == "true",
    }


def _pricer():
    try:
        from infra.catalog import load_catalog
        from infra.reaper.engine import catalog_pricer

        return catalog_pricer(load_catalog())
    except Exception:  # noqa: BLE001 - no bundled catalog: reservations are listed unpriced
        return None


def handler(event: Any = None, context: Any = None) -> dict:
    from infra.reaper import engine
    from infra.reaper.audit import AuditLog
    from infra.reaper.aws import AwsReaper
    from infra.reaper.decision import Policy

    s = settings_from_env()
    adaptors = [AwsReaper.for_region(r) for r in s["regions"]]
    policy = Policy(threshold_pct=s["threshold_pct"], grace_minutes=s["grace_minutes"])
    # Audit lines go to stdout: in Lambda that is the function's CloudWatch log group.
    report = engine.run(adaptors, policy=policy, apply=s["apply"], max_actions=s["max_actions"],
                        environments=[s["environment"]], audit=AuditLog("-"), pricer=_pricer())
    doc = report.as_json()
    doc["failed"] = report.failed
    return doc
