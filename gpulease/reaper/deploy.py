"""Scheduled reaper: one per cloud the environment has clusters on, each deployed by its cloud's
module (``Cloud.reaper_deploy_module``: the AWS Lambda + EventBridge in
gpulease/reaper/aws_deploy.py, the GCP Cloud Function + Cloud Scheduler in
gpulease/reaper/gcp_deploy.py; the files their bundles share in gpulease/reaper/bundle.py).

Called by the program (``gpulease.program``) when ``gpulease:reaper.schedule`` is set.
"""
from __future__ import annotations

import importlib

import pulumi

from gpulease.clouds import registry
from gpulease.model import EnvironmentDecision
from gpulease.reaper.bundle import SCHEDULE_PATH


def deploy_reaper(env: EnvironmentDecision) -> list[pulumi.Resource]:
    """Deploy the scheduled reaper on each cloud the environment has clusters on.

    Every cloud's module checks what its reaper needs first (``prepare``), so a bad setting
    stops the program before anything is declared; then each declares its component, in the
    registry's order."""
    settings = env.stack.reaper
    if not getattr(settings, "schedule", None):
        return []
    clouds = {c.cloud for c in env.clusters}
    if not clouds & set(registry.NAMES):
        pulumi.log.warn(f"{SCHEDULE_PATH}: the environment has no cluster; no reaper deployed")
        return []
    declare = [importlib.import_module(c.reaper_deploy_module).prepare(env)
               for c in registry.CLOUDS if c.name in clouds]
    out: list[pulumi.Resource] = []
    for d in declare:
        out += d()
    return out


__all__ = ["deploy_reaper"]
