"""The Pulumi program's steps, as library functions: the stack's config as the engine passes it,
the cloud adaptors' deployment in order, and the stack outputs.

The program itself - the wiring of these steps - is ``infra/__main__.py`` (what `pulumi up`
runs and `gpulease plan` loads, ``gpulease.planner.program``).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Iterable, Optional

import pulumi

from gpulease import money, gctuning
from gpulease.catalog import Catalog
from gpulease.clouds import registry
from gpulease.config import NAMESPACE, TOP_LEVEL_KEYS
from gpulease.costing import transform as cost_transform
from gpulease.errors import InputError
from gpulease.model import EnvironmentDecision
from gpulease.policy.pins import check_pins

#: cloud adaptor modules (``Cloud.deploy_module``): each exposes
#: ``deploy(env, catalog, *, storage, only_clusters=None) -> list[pulumi.Resource]`` where
#: ``storage`` maps the names of storage entries already declared (by adaptors earlier in
#: DEPLOY_ORDER) to their components, so a cluster reading a dataset on another cloud can depend
#: on its bucket, and ``only_clusters`` limits the cluster components declared (see main).
CLOUD_ADAPTORS = {c.name: c.deploy_module for c in registry.CLOUDS}
#: the registry's order (GCP first; the reason is in gpulease.clouds.registry).
DEPLOY_ORDER = registry.DEPLOY_ORDER


@dataclass
class ProgramResult:
    decision: EnvironmentDecision
    catalog: Catalog
    ledger: cost_transform.CostLedger
    #: one line per owned pool: what the program declared for it (``deploy_owned``)
    owned_notes: tuple[str, ...] = ()


def config_values(stack: str, file_keys: Optional[Iterable[str]] = None, *,
                  project_dir: Optional[Path] = None) -> dict[str, Any]:
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
    for key in (_stack_file_keys(stack, project_dir) if file_keys is None else file_keys):
        if key not in known:
            values.setdefault(key, None)
    return values


def _stack_file_keys(stack: str, project_dir: Optional[Path]) -> list[str]:
    """Keys of ``stacks/Pulumi.<stack>.yaml`` in the program's project directory (empty when
    absent/unreadable: the values themselves always come from the engine)."""
    from gpulease.config import read_stack_file, stack_file

    if project_dir is None:
        return []
    try:
        return [k for k in read_stack_file(stack_file(stack, project_dir)) if isinstance(k, str)]
    except InputError:
        return []


def stack_source(stack: str) -> str:
    return f"stacks/Pulumi.{stack}.yaml"


def deploy_clouds(env: EnvironmentDecision, catalog: Catalog, spec: Any, *,
                  clusters: Optional[Collection[str]] = None) -> None:
    """Declare every cloud's resources in DEPLOY_ORDER, then the scheduled reaper.

    ``clusters`` (`gpulease plan`'s preview check only; `pulumi up` never passes it): declare
    the components of these clusters only, with everything the program declares before the
    last of them exactly as always: the adaptors of the clouds up to the last one holding such
    a cluster (their shared resources, storage and checks in full), none after it, no reaper.
    What is declared is what the whole program declares for it: a resource's inputs can only
    come from what was declared before it, and a cluster's components from the shared
    resources handed to it, never from another cluster (``gpulease.planner.dynamic``)."""
    # a pinned Capacity Block the policy did not land its cluster on: exit 4 before any cloud
    # declares anything (a cluster moved to another cloud has no AWS adaptor to check it)
    check_pins(env)
    used = {c.cloud for c in env.clusters} | {s.cloud for s in env.storage}
    storage: dict[str, pulumi.Resource] = {}
    order = [c for c in DEPLOY_ORDER if c in used]
    scoped = {}
    if clusters is not None:
        wanted = {c.cloud for c in env.clusters if c.name in clusters}
        order = order[:max([order.index(c) + 1 for c in wanted], default=0)]
        scoped = {"only_clusters": frozenset(clusters)}
    # Everything declared here lives until the program ends: in a one-shot process (`pulumi up`,
    # `gpulease plan`) the collector would walk it again and again for nothing (gpulease.gctuning).
    with gctuning.collector_paused(only_one_shot=True):
        for cloud in order:
            declared = importlib.import_module(CLOUD_ADAPTORS[cloud]).deploy(
                env, catalog, storage=dict(storage), **scoped)
            storage.update(storage_components(declared))
        if clusters is None and getattr(spec.reaper, "schedule", None):
            from gpulease.reaper.deploy import deploy_reaper

            deploy_reaper(env)



def deploy_owned(spec: Any, as_of) -> list[str]:
    """Declare what each owned pool needs (``gpulease.owned.kubernetes`` for a `kubernetes`
    pool: namespace, GPU quota, priority classes) and return one line per pool saying what was
    declared - "nothing to declare" for `slurm`, `ssh` and `none` pools (the plan shows these
    lines). The pool's money is the plan's owned lines (the clusters' amortised shares and the
    pool's idle line, ``gpulease.policy.owned``): the namespace is charged $0, so a pool is
    counted once; the line says what the pool costs a month in all."""
    from gpulease.costing.context import CostContext
    from gpulease.owned import kubernetes as k8s_pool
    from gpulease.owned.cost import pool_cost

    notes = []
    for pool in spec.owned:
        if pool.kind != k8s_pool.KUBERNETES:
            notes.append(f"owned pool {pool.name} ({pool.kind}): nothing to declare")
            continue
        name = k8s_pool.component_name(pool)
        monthly = money.usd(pool_cost(pool, as_of).total_usd_per_month)
        ctx = CostContext(cluster=pool.name)
        k8s_pool.KubernetesPool(name, k8s_pool.KubernetesPoolArgs(
            pool=pool, environment=spec.environment, name_prefix=spec.name_prefix,
            rules=spec.policy, cost_context=ctx))
        notes.append(f"owned pool {pool.name} (kubernetes, context {pool.kube_context}): "
                     f"namespace {k8s_pool.namespace_name(spec.name_prefix, spec.environment, pool)}"
                     f", GPU quota {pool.gpus}, priority classes "
                     f"{', '.join(b.name for b in k8s_pool.bands(spec.policy))}; "
                     f"the pool's ${monthly:,.2f}/month is in the plan's owned lines")
    return notes


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
    Money is exported as JSON numbers with at most two decimals (``gpulease.money``)."""
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
    if ledger.one_time_usd:   # never inside total_monthly_usd (docs/policy.md "one-time money")
        pulumi.export("total_one_time_usd", money.json_number(ledger.one_time_usd))
    pulumi.export("budget_monthly_usd", money.json_number(budget))
    pulumi.export("budget_headroom_usd", money.json_number(budget - ledger.budget_usd))
    pulumi.export("catalog_version", catalog.version)
    pulumi.export("catalog_as_of", catalog.as_of)
    if env.stack.gate is not None:
        # gpulease:gate as written: the CrossGuard pack's cost-gate policies read their
        # thresholds here when their policy config gives none (policy-pack/__main__.py)
        pulumi.export("gate", env.stack.gate)
