"""The Pulumi program's steps, wired in order: config -> decision -> components -> outputs.

`pulumi up` runs it through ``infra/__main__.py``; `gpulease plan` runs the very same
:func:`main` in-process under Pulumi's mock runtime (``infra.planner``).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Iterable, Optional

import pulumi

from infra import money, oneshot
from infra.catalog import Catalog
from infra.config import (NAMESPACE, TOP_LEVEL_KEYS, load_stack_catalog, located,
                          parse_stack_config)
from infra.costing import transform as cost_transform
from infra.errors import InputError
from infra.model import EnvironmentDecision

#: cloud adaptor modules: each exposes
#: ``deploy(env, catalog, *, storage, only_clusters=None) -> list[pulumi.Resource]`` where
#: ``storage`` maps the names of storage entries already declared (by adaptors earlier in
#: DEPLOY_ORDER) to their components, so a cluster reading a dataset on another cloud can depend
#: on its bucket, and ``only_clusters`` limits the cluster components declared (see main).
CLOUD_ADAPTORS = {"aws": "infra.clouds.aws", "gcp": "infra.clouds.gcp"}
#: GCP first: AWS clusters staging a GCS dataset grant a reader on the GCS bucket, which must
#: exist first; GCP clusters reading S3 only name the bucket (no AWS-side grant on it).
DEPLOY_ORDER = ("gcp", "aws")
#: the project directory (Pulumi.yaml, stacks/): the program's package lives in it.
PROJECT_DIR = Path(__file__).resolve().parents[1]


@dataclass
class ProgramResult:
    decision: EnvironmentDecision
    catalog: Catalog
    ledger: cost_transform.CostLedger


def config_values(stack: str, file_keys: Optional[Iterable[str]] = None) -> dict[str, Any]:
    """The stack's ``gpulease:`` config as the engine passes it, read with `pulumi.Config`.

    Values come from `pulumi.Config` (so secrets and the engine's view win). `pulumi.Config` can
    only answer keys it is asked for, so the keys the stack file holds are read from the file as
    well: a typo there (``gpulese:clusters``) is reported instead of silently ignored.
    """
    cfg = pulumi.Config(NAMESPACE)
    values: dict[str, Any] = {}
    for key in TOP_LEVEL_KEYS:
        value = cfg.get(key)
        if value is not None:
            values[f"{NAMESPACE}:{key}"] = value
    known = {f"{NAMESPACE}:{k}" for k in TOP_LEVEL_KEYS}
    for key in (_stack_file_keys(stack) if file_keys is None else file_keys):
        if key not in known:
            values.setdefault(key, None)
    return values


def _stack_file_keys(stack: str) -> list[str]:
    """Keys of ``stacks/Pulumi.<stack>.yaml`` beside this program (empty when absent/unreadable:
    the values themselves always come from the engine)."""
    from infra.config import read_stack_file, stack_file

    try:
        return [k for k in read_stack_file(stack_file(stack, PROJECT_DIR)) if isinstance(k, str)]
    except InputError:
        return []


def stack_source(stack: str) -> str:
    return f"stacks/Pulumi.{stack}.yaml"


def main(file_keys: Optional[Iterable[str]] = None, *,
         clusters: Optional[Collection[str]] = None) -> ProgramResult:
    """The program. ``file_keys``: the keys of the stack file the config came from (`gpulease
    plan` passes those of the file it read; `pulumi up` reads them beside the program).

    ``clusters`` (`gpulease plan`'s preview check only; `pulumi up` never passes it): declare
    the components of these clusters only, with everything the program declares before the
    last of them exactly as always: the adaptors of the clouds up to the last one holding such
    a cluster (their shared resources, storage and checks in full), none after it, no reaper.
    What is declared is what the whole program declares for it: a resource's inputs can only
    come from what was declared before it, and a cluster's components from the shared
    resources handed to it, never from another cluster (``infra.planner.dynamic``)."""
    stack = pulumi.get_stack()
    values = config_values(stack, file_keys)
    source = stack_source(stack)
    with located(source, path=PROJECT_DIR / source):   # findings at the file's line:column
        catalog = load_stack_catalog(values, source=source)
        spec = parse_stack_config(values, stack=stack, source=source, catalog=catalog)
    for warning in spec.warnings:
        pulumi.log.warn(str(warning))

    from infra.policy import decide

    from infra import clock

    env = decide(spec, catalog, now=clock.now())
    ledger = cost_transform.register(spec, catalog)

    used = {c.cloud for c in env.clusters} | {s.cloud for s in env.storage}
    storage: dict[str, pulumi.Resource] = {}
    order = [c for c in DEPLOY_ORDER if c in used]
    scoped = {}
    if clusters is not None:
        wanted = {c.cloud for c in env.clusters if c.name in clusters}
        order = order[:max([order.index(c) + 1 for c in wanted], default=0)]
        scoped = {"only_clusters": frozenset(clusters)}
    # Everything declared here lives until the program ends: in a one-shot process (`pulumi up`,
    # `gpulease plan`) the collector would walk it again and again for nothing (infra.oneshot).
    with oneshot.collector_paused(only_one_shot=True):
        for cloud in order:
            declared = importlib.import_module(CLOUD_ADAPTORS[cloud]).deploy(
                env, catalog, storage=dict(storage), **scoped)
            storage.update(storage_components(declared))
        if clusters is None and getattr(spec.reaper, "schedule", None):
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
    from the root stack resource; the transform has seen every resource by the time this runs.
    Money is exported as JSON numbers with at most two decimals (``infra.money``)."""
    budget = money.usd(env.stack.budget_monthly_usd)
    total = ledger.monthly_usd
    pulumi.export("clusters", {
        c.name: {"cloud": c.cloud, "region": c.region, "instance_type": c.offering.instance_type,
                 "nodes": c.nodes, "purchase": c.purchase.as_dict(), "template": c.template,
                 "hourly_usd": money.json_number(c.hourly_usd),
                 "monthly_usd": money.json_number(c.monthly_money)}
        for c in env.clusters})
    pulumi.export("storage_monthly_usd", {s.name: money.json_number(s.monthly_money)
                                          for s in env.storage})
    pulumi.export("total_hourly_usd", money.json_number(ledger.hourly_usd(env)))
    pulumi.export("total_monthly_usd", money.json_number(total))
    pulumi.export("budget_monthly_usd", money.json_number(budget))
    pulumi.export("budget_headroom_usd", money.json_number(budget - total))
    pulumi.export("catalog_version", catalog.version)
    pulumi.export("catalog_as_of", catalog.as_of)
