"""What the scheduled reapers share (AWS Lambda, GCP Cloud Function): settings from the
environment variables the deployment sets, the catalog pricer, and one reaper pass.

Plain Python only (no pydantic, no Pulumi): it ships inside both function archives.
"""
from __future__ import annotations

import os
from typing import Any, Sequence


def settings_from_env(env: Any = None) -> dict:
    """Settings every scheduled reaper reads (each cloud's ``gpulease.reaper.<cloud>_deploy``
    sets these variables)."""
    env = os.environ if env is None else env
    return {
        "environment": env["GPULEASE_ENVIRONMENT"],
        "threshold_pct": float(env.get("GPULEASE_THRESHOLD_PCT", "5")),
        "grace_minutes": int(env.get("GPULEASE_GRACE_MINUTES", "30")),
        "max_actions": int(env.get("GPULEASE_MAX_ACTIONS", "10")),
        "apply": env.get("GPULEASE_APPLY", "false").lower() == "true",
    }


def pricer():
    """Reserved-node prices from the bundled catalog, or None (reservations listed unpriced)."""
    try:
        from gpulease.catalog import load_catalog
        from gpulease.reaper.engine import catalog_pricer

        return catalog_pricer(load_catalog())
    except Exception:  # noqa: BLE001 - no bundled catalog: reservations are listed unpriced
        return None


def run_pass(adaptors: Sequence, settings: dict) -> dict:
    """One reaper pass over ``adaptors`` for the configured environment; JSON-able report."""
    from gpulease.reaper import engine
    from gpulease.reaper.audit import AuditLog
    from gpulease.reaper.decision import Policy

    policy = Policy(threshold_pct=settings["threshold_pct"],
                    grace_minutes=settings["grace_minutes"])
    # Audit lines go to stdout: the function's log (CloudWatch Logs / Cloud Logging).
    report = engine.run(adaptors, policy=policy, apply=settings["apply"],
                        max_actions=settings["max_actions"],
                        environments=[settings["environment"]], audit=AuditLog("-"),
                        pricer=pricer())
    doc = report.as_json()
    doc["failed"] = report.failed
    return doc
