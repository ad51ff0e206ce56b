"""The Pulumi program's steps, wired in order: config -> decision -> components -> outputs.

`pulumi up` runs it through ``infra/__main__.py``; `gpulease plan` runs the very same
:func:`main` in-process under Pulumi's mock runtime (``infra.planner``).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import pulumi

from infra.catalog import Catalog, load_catalog
from infra.config import catalog_selection, parse_stack_config
from infra.costing import transform as cost_transform
from infra.model import EnvironmentDecision

#: cloud adaptor modules: each exposes
#: ``deploy(env, catalog, *, storage) -> list[pulumi.Resource]`` where ``storage`` maps the
#: names of storage entries already declared (by adaptors earlier in DEPLOY_ORDER) to their
#: components, so a cluster reading a dataset on another cloud can depend on its bucket.
CLOUD_ADAPTORS = {"aws": "infra.clouds.aws", "gcp": "infra.clouds.gcp"}
#: GCP first: AWS clusters staging a GCS dataset grant a reader on the GCS bucket, which must
#: exist first; GCP clusters reading S3 only name the bucket (no AWS-side grant on it).
DEPLOY_ORDER = ("gcp", "aws")


@dataclass
class ProgramResult:
    decision: EnvironmentDecision
    catalog: Catalog
    ledger: cost_transform.CostLedger


def config_values() -> dict[str, Any]:
    """Every config value the engine passed (``project:key`` -> value)."""
    from pulumi.runtime import config as rc

    return {**rc.get_config_env(), **rc.CONFIG.get()}


def stack_source(stack: str) -> str:
    return f"stacks/Pulumi.{stack}.yaml"


def main() -> ProgramResult:
    stack = pulumi.get_stack()
    values = config_values()
    catalog = load_catalog(*catalog_selection(values))
    spec = parse_stack_config(values, stack=stack, source=stack_source(stack), catalog=catalog)

    from infra.policy import decide

    env = decide(spec, catalog)
    ledger = cost_transform.register(spec, catalog)

    used = {c.cloud for c in env.clusters} | {s.cloud for s in env.storage}
    storage: dict[str, pulumi.Resource] = {}
    for cloud in [c for c in DEPLOY_ORDER if c in used]:
        declared = importlib.import_module(CLOUD_ADAPTORS[cloud]).deploy(
            env, catalog, storage=dict(storage))
        storage.update(storage_components(declared))
    if getattr(spec.reaper, "schedule", None):
        from infra.reaper.deploy import deploy_reaper

        deploy_reaper(env)

    export_outputs(env, catalog, ledger)
    return ProgramResult(decision=env, catalog=catalog, ledger=ledger)


def storage_components(resources: list) -> dict[str, pulumi.Resource]:
    """Storage components among an adaptor's top-level resources, by storage name."""
    out = {}
    for r in resources:
        ctx = getattr(r, "cost_context", None)
        if getattr(ctx, "storage", None) is not None and ctx.decision is None:
            out[ctx.storage.name] = r
    return out


def export_outputs(env: EnvironmentDecision, catalog: Catalog,
                   ledger: cost_transform.CostLedger) -> None:
    """Stack outputs: what `pulumi preview` / `pulumi stack output` show about cost.

    ``total_monthly_usd`` is the cost ledger's total (every resource the transform priced, NAT
    gateways included), the number `gpulease plan` totals and the CrossGuard budget rule reads
    from the root stack resource; the transform has seen every resource by the time this runs."""
    budget = env.stack.budget_monthly_usd
    total = round(ledger.monthly_usd, 2)
    pulumi.export("clusters", {
        c.name: {"cloud": c.cloud, "region": c.region, "instance_type": c.offering.instance_type,
                 "nodes": c.nodes, "purchase": c.purchase.as_dict(), "template": c.template,
                 "hourly_usd": round(c.hourly_usd, 2), "monthly_usd": round(c.monthly_usd, 2)}
        for c in env.clusters})
    pulumi.export("storage_monthly_usd", {s.name: round(s.monthly_usd, 2) for s in env.storage})
    pulumi.export("total_hourly_usd", round(env.hourly_usd, 2))
    pulumi.export("total_monthly_usd", total)
    pulumi.export("budget_monthly_usd", round(budget, 2))
    pulumi.export("budget_headroom_usd", round(budget - total, 2))
    pulumi.export("catalog_version", catalog.version)
    pulumi.export("catalog_as_of", catalog.as_of)
