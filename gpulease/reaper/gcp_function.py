"""Entry point of the scheduled reaper on GCP (Cloud Functions 2nd gen, HTTP): env -> one run.

Cloud Scheduler POSTs to the function with an OIDC token; :func:`handler` is the
functions-framework HTTP handler (the archive's ``main.py`` re-exports it, because the Python
runtime loads the entry point from ``main.py`` at the source root). Runs with only the standard
library, google-cloud-compute + google-cloud-storage + requests (the archive's
requirements.txt) and the gpulease files listed in
``gpulease.reaper.gcp_deploy.GCP_FUNCTION_FILES`` — no pydantic, no Pulumi.
"""
from __future__ import annotations

import json
import os
from typing import Any

from gpulease.reaper import functions as scheduled


def settings_from_env(env: Any = None) -> dict:
    env = os.environ if env is None else env
    return {**scheduled.settings_from_env(env), "project": env["GPULEASE_PROJECT"]}


def run_once(env: Any = None) -> dict:
    """One `gpulease reap --cloud gcp` pass for the configured environment and project."""
    from gpulease.reaper.gcp import GcpReaper

    s = settings_from_env(env)
    # GPULEASE_GCP_ENDPOINT (emulator / the tests' fake) is honoured inside gcp.clients().
    return scheduled.run_pass([GcpReaper.for_project(s["project"])], s)


def handler(request: Any = None):
    """functions-framework HTTP handler: returns (body, status, headers).

    A run with a failed cluster answers 500 so Cloud Scheduler records the attempt as failed
    (the job is created with no retries: the next scheduled run is the retry).
    """
    doc = run_once()
    return json.dumps(doc), (500 if doc["failed"] else 200), {"Content-Type": "application/json"}
