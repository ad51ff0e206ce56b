"""Entry point of the scheduled reaper on GCP (Cloud Functions 2nd gen, HTTP): env -> one run.

Cloud Scheduler POSTs to the function with an OIDC token; :func:`handler` is the
functions-framework HTTP handler (the archive's ``main.py`` re-exports it, because the Python
runtime loads the entry point from ``main.py`` at the source root). Runs with only the standard
library, google-cloud-compute + requests (the archive's requirements.txt) and the gpulease files
listed in ``infra.reaper.deploy.GCP_FUNCTION_FILES`` — no pydantic, no Pulumi.
"""
from __future__ import annotations

import json
import os
from typing import Any


def settings_from_env(env: Any = None) -> dict:
    env = os.environ if env is None else env
    return {
        "environment": env["GPULEASE_ENVIRONMENT"],
        "project": env["GPULEASE_PROJECT"],
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


def run_once(env: Any = None) -> dict:
    """One `gpulease reap --cloud gcp` pass for the configured environment and project."""
    from infra.reaper import engine
    from infra.reaper.audit import AuditLog
    from infra.reaper.decision import Policy
    from infra.reaper.gcp import GcpReaper

    s = settings_from_env(env)
    # GPULEASE_GCP_ENDPOINT (emulator / the tests' fake) is honoured inside gcp.clients().
    adaptor = GcpReaper.for_project(s["project"])
    policy = Policy(threshold_pct=s["threshold_pct"], grace_minutes=s["grace_minutes"])
    # Audit lines go to stdout: on Cloud Run functions that is the function's Cloud Logging log.
    report = engine.run([adaptor], policy=policy, apply=s["apply"], max_actions=s["max_actions"],
                        environments=[s["environment"]], audit=AuditLog("-"), pricer=_pricer())
    doc = report.as_json()
    doc["failed"] = report.failed
    return doc


def handler(request: Any = None):
    """functions-framework HTTP handler: returns (body, status, headers).

    A run with a failed cluster answers 500 so Cloud Scheduler records the attempt as failed
    (the job is created with no retries: the next scheduled run is the retry).
    """
    doc = run_once()
    return json.dumps(doc), (500 if doc["failed"] else 200), {"Content-Type": "application/json"}
