"""`gpulease plan`: run the Pulumi program offline and turn what it declared into a plan.

The plan document (``--json``) has the shape documented in README ("Plan JSON"); every number
in it comes from the program's own run: the policy decision it made and the cost ledger its
stack-wide transform filled while resources were declared.
"""
from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any, Collection, Optional

from gpulease.costing.costs import one_time_money
from gpulease.clock import format_utc
from gpulease.clouds import registry
from gpulease import money
from gpulease.catalog import provenance
from gpulease.config import values_for_pulumi
from gpulease.model import EnvironmentDecision
from gpulease.planner.mocks import ProgramRun, run_program
from gpulease.purchase import CAPACITY_BLOCK, NODE_MODELS, SPOT, WINDOW
from gpulease.quotes import stale_rate

PLAN_FORMAT = "gpulease-plan/1"


def run(values: dict, *, stack: str, catalog_path: Optional[str] = None,
        catalog_version: Optional[str] = None, preview: bool = False,
        now: Optional[float] = None, pause_gc: bool = True,
        clusters: Optional[Collection[str]] = None,
        source: Optional[str] = None) -> ProgramRun:
    """Run THE program (the program's main (infra/__main__.py)) under mocks with a stack file's config values.

    ``preview``: as `pulumi preview` sees it (provider-computed outputs unknown) instead of as
    `pulumi up` creates it (``gpulease.planner.mocks.run_program``). ``now``: the moment (epoch
    seconds) the offline lookups answer for (default: the current time). ``pause_gc=False``:
    with the cyclic collector running, as under the real engine. ``clusters``: declare only
    these clusters' components and what the program declares before them
    (``the program's main (infra/__main__.py)``; the preview check's run, ``gpulease.planner.dynamic``).
    ``source``: the stack file the values came from (`--config FILE`), named in findings."""
    from gpulease.planner.program import load

    main = load().main

    config = dict(values)
    if catalog_path:
        config["gpulease:catalog"] = catalog_path
        config.pop("gpulease:catalog_version", None)
    if catalog_version:
        config["gpulease:catalog_version"] = catalog_version
        config.pop("gpulease:catalog", None)
    keys = [k for k in values if isinstance(k, str)]
    kw = {"source": source} if source else {}   # the stack file named in findings
    return run_program(lambda: main(file_keys=keys, clusters=clusters, **kw), stack=stack,
                       config=values_for_pulumi(config), preview=preview, now=now,
                       pause_gc=pause_gc)


def _tags_of(inputs: dict) -> dict:
    t = inputs.get("tags")
    if isinstance(t, list):  # ASG: [{key, value, propagateAtLaunch}]
        return {x.get("key"): x.get("value") for x in t if isinstance(x, dict)}
    if isinstance(t, dict):
        return t
    lab = inputs.get("labels")
    return lab if isinstance(lab, dict) else {}


def build_plan(prun: ProgramRun, *, stack: str) -> dict[str, Any]:
    result = prun.result
    env: EnvironmentDecision = result.decision
    ledger = result.ledger
    catalog = result.catalog

    resources = []
    by_model: dict[str, Decimal] = defaultdict(lambda: money.ZERO)
    by_cluster: dict[str, Decimal] = defaultdict(lambda: money.ZERO)
    cloud_of_cluster = {c.name: c.cloud for c in env.clusters}
    once_of = {c.name: one_time_json(c) for c in env.clusters}
    # in URN order, not registration order: the SDK registers concurrently, so the order of
    # `prun.resources` varies from run to run; a committed plan must diff cleanly (issue 36)
    for r in sorted(prun.resources, key=lambda r: r.urn):
        if not r.custom:
            continue
        entry = ledger.get(r.type, r.name)
        cost = entry.monthly_usd if entry else money.ZERO
        cluster = entry.cluster if entry else "shared"
        resources.append({
            "urn": r.urn, "type": r.type, "name": r.name,
            "physical_name": getattr(r, "physical_name", None), "cluster": cluster,
            "cloud": resource_cloud(r.type, cloud_of_cluster.get(cluster)),
            "purchase_model": entry.purchase_model if entry else "none",
            "tags": _tags_of(r.inputs), "monthly_usd": money.json_number(cost),
            "inputs": r.inputs, "protect": r.protect, "retain_on_delete": r.retain_on_delete,
            "ignore_changes": list(r.ignore_changes), "autoname": r.autoname,
        })
        if entry is not None and entry.one_time_usd:
            # a window's one-time purchase, never in monthly_usd: its amount and dates
            # (docs/policy.md, "Windows: one-time money"); absent on monthly resources
            t = once_of.get(cluster) or {}
            resources[-1]["one_time"] = {"usd": money.json_number(entry.one_time_usd),
                                         "from": t.get("from"), "until": t.get("until")}
        by_cluster[cluster] += cost

    for c in env.clusters:
        if once_of[c.name] is not None:   # one-time money: never a monthly figure
            continue
        for model in (*NODE_MODELS, WINDOW):
            v = c.costs.amount(f"{model}_usd") + (c.costs.amount("spot_rework_usd")
                                                  if model == SPOT else money.ZERO)
            if v:
                by_model[model] += v
    by_tier: dict[str, Decimal] = defaultdict(lambda: money.ZERO)
    for s in env.storage:
        for t in s.tiers:
            by_tier[t.storage_class] += money.usd(t.monthly_usd)

    owned = getattr(ledger, "owned", [])   # owned pools: lines without a resource
    for x in owned:
        by_cluster[x.cluster] += x.monthly_usd
    owned_total = money.total(x.monthly_usd for x in owned)
    monthly = money.total(x["monthly_usd"] for x in resources) + owned_total
    if monthly != ledger.monthly_usd:   # every priced resource is declared: one total
        raise AssertionError(f"plan resources total {monthly} != cost ledger "
                             f"{ledger.monthly_usd}")
    one_time = ledger.one_time_usd
    judged = monthly + one_time     # what the budget judges (docs/policy.md, one-time money)
    budget = money.usd(env.stack.budget_monthly_usd)
    num = money.json_number
    prices = used_prices(env, catalog, {r.type for r in prun.resources if r.custom})
    plan = {
        "format": PLAN_FORMAT,
        "stack": stack,
        "environment": env.stack.environment,
        "catalog": {"version": catalog.version, "as_of": catalog.as_of,
                    "data_dates": dict(getattr(catalog, "data_dates", {}) or {}),
                    "warnings": [str(w) for w in getattr(catalog, "warnings", ())]},
        # the prices this plan pays: dates (oldest, newest, undated) and estimates
        "prices": {**provenance.summary([u for us in prices.values() for u in us]),
                   "catalog_estimates": provenance.catalog_estimates(catalog),
                   "used": [u.as_dict() for us in prices.values() for u in us]},
        "clusters": [cluster_json(c, now=prun.now, prices=prices.get(c.name, []))
                     for c in env.clusters],
        "storage": [{
            "name": s.name, "cloud": s.cloud, "region": s.region,
            "size_tb": s.spec.size_tb,
            "tiers": [{"storage_class": t.storage_class, "from_day": t.from_day,
                       "to_day": t.to_day, "share": round(t.share, 4),
                       "usd_per_gb_month": t.usd_per_gb_month,
                       "monthly_usd": num(t.monthly_usd)} for t in s.tiers],
            "storage_usd": num(s.storage_money),
            "reads_per_month": round(s.reads_per_month, 4),
            "retrieval_usd": num(s.retrieval_usd),
            "early_delete_usd": num(s.early_delete_usd),
            "lifecycle": {k: getattr(s.lifecycle, k) for k in (
                "warm_after_days", "cold_after_days", "archive_after_days")},
            "basis": s.basis,
            "configured_monthly_usd": num(s.configured_usd),
            "monthly_usd": num(s.monthly_money)} for s in env.storage],
        "resources": resources,
        "totals": {
            "hourly_usd": num(ledger.hourly_usd(env)), "monthly_usd": num(monthly),
            "by_cluster": {k: num(v) for k, v in sorted(by_cluster.items())},
            "by_purchase_model": {k: num(v) for k, v in by_model.items()},
            "by_storage_tier": {k: num(v) for k, v in by_tier.items()},
            # one-time window purchases, never part of monthly_usd (docs/policy.md,
            # "Windows: one-time money"): the resources' one_time amounts; each with its dates
            # in clusters[].one_time
            "one_time_usd": num(one_time),
            "resources": len(resources),
            # owned pools (docs/owned.md): clusters' shares at the amortised rate + idle lines
            "owned_usd": num(owned_total),
        },
        # the budget judges the month's spend: monthly_usd + one_time_usd whole
        "budget": {"monthly_usd": num(budget), "headroom_usd": num(budget - judged),
                   "over": judged > budget},
        "outputs": prun.outputs,
        # owned pools and where each cluster runs (docs/owned.md, "Plan JSON")
        "owned": {**owned_json(env), "lines": [
            {"pool": x.pool, "cluster": x.cluster, "monthly_usd": num(x.monthly_usd)}
            for x in owned]},
        # active holdings of the inventory nothing in the plan uses (docs/owned.md); the
        # inventory read is the plan's "inventory" header (gpulease.cli.plan)
        "unused_holdings": [u.as_dict() for u in env.unused_holdings],
        "warnings": list(prun.warnings) + _block_warnings(env, prun.now)
        + [u.text() for u in env.unused_holdings],
        #: one line per owned pool (gpulease:owned): what the program declared for it
        "owned_pools": list(getattr(result, "owned_notes", ())),
        "violations": [],
        "conformance": [],
    }
    return plan


def owned_json(env: EnvironmentDecision) -> dict[str, Any]:
    """The plan's ``owned`` section: every pool (prices both ways, use, idle line), every
    cluster's placement, and the total the pools add to the plan (``build_plan`` adds
    ``lines``: the ledger's owned lines, which the plan's total counts with its resources)."""
    return {"pools": [u.as_dict() for u in env.pools],
            "placements": [p.as_dict() for p in env.placements],
            "monthly_usd": money.json_number(env.owned_money)}


def used_prices(env: EnvironmentDecision, catalog, types) -> dict[str, list]:
    """The catalog prices a decision pays (``gpulease.catalog.provenance``), by cluster name;
    storage under ``"storage"``, shared infrastructure (NAT gateways) under ``"shared"``."""
    storage = {s.name: s for s in env.storage}
    out: dict[str, list] = {c.name: provenance.cluster_prices(c, catalog, storage)
                            for c in env.clusters}
    out["storage"] = [u for s in env.storage for u in provenance.storage_prices(s, catalog)]
    out["shared"] = provenance.infra_prices(types, catalog)
    return out


def _block_warnings(env: EnvironmentDecision, now: float) -> list[str]:
    """A pinned Capacity Block whose window has ended: its nodes are gone for good."""
    out = [f"{name}: Capacity Block {pin.offering_id} ended at {pin.end}: the window's work "
           "item is over and the cluster is retired (nothing declared, charged or bought "
           "again); remove the cluster (or its window and pin) from the stack config"
           for name, pin in getattr(env, "retired", ())]
    for c in env.clusters:
        pin = c.spec.capacity_block
        if pin is not None and now and now >= pin.end_epoch:
            out.append(f"{c.name}: Capacity Block {pin.offering_id} ended at {pin.end}: its "
                       f"nodes are gone; remove the pin from {c.spec.config_path} (another "
                       "block needs a new quote, pin and approval)")
        stale = stale_rate(c.window.quote, c.window.judged_at) if c.window else None
        if stale:
            out.append(f"{c.name}: {stale}")
    return out


def resource_cloud(type_: str, cluster_cloud: Optional[str]) -> str:
    """The cloud a resource lives in: its provider package (``aws:``, ``gcp:``), or for
    gpulease's own dynamic resources (``pulumi-python:dynamic/...``, which call a cloud API
    directly) the cloud of the cluster they belong to."""
    pkg = type_.split(":", 1)[0]
    cloud = registry.by_provider(pkg)
    if cloud is not None:
        return cloud.name
    if type_.startswith("pulumi:providers:"):
        return type_.rsplit(":", 1)[-1]
    return cluster_cloud or pkg


def capacity_block_json(pin, now: Optional[float]) -> Optional[dict[str, Any]]:
    """A pinned Capacity Block in the plan: the pin and where ``now`` is in its window."""
    if pin is None:
        return None
    out = pin.as_dict()
    if now:
        out["status"] = ("window ended" if now >= pin.end_epoch else
                         "window open" if now >= pin.start_epoch else "before its window")
    return out


def one_time_json(c) -> Optional[dict[str, Any]]:
    """A window cluster's one-time purchase: its amount and dates (None: a monthly bill)."""
    wd = c.window
    if wd is None or wd.months != 1 or wd.lock_in_months:
        return None
    return {"usd": money.json_number(wd.total_usd), "model": wd.model,
            "from": format_utc(wd.bought_from or wd.start),
            "until": format_utc(wd.bought_until or wd.end)}


def cluster_json(c, now: Optional[float] = None,
                 prices: Optional[list] = None) -> dict[str, Any]:
    return {
        "name": c.name, "cloud": c.cloud, "region": c.region, "zone": c.zone,
        "instance_type": c.offering.instance_type, "gpu": c.offering.gpu,
        "gpus_per_node": c.offering.gpus_per_node, "nodes": c.nodes,
        "purchase": c.purchase.as_dict(), "template": c.template, "network": c.network,
        "distributed": c.distributed, "commitment_term": c.commitment_term,
        "hourly_usd": money.json_number(c.hourly_usd),
        # a window's one-time purchase is never in monthly_usd: only its monthly dataset
        # moves stay (one_time below has the purchase with its dates)
        "monthly_usd": money.json_number(c.monthly_money - one_time_money(c)),
        "costs": c.costs.as_dict(),
        # Demand (docs/policy.md "Demand profiles"): the steps as configured, the nodes of the
        # baseline / burst parts with their purchase, hours and cost, and the lock-in.
        "demand": [st.as_dict() for st in c.spec.steps],
        "baseline_nodes": c.baseline_nodes,
        "parts": [part.as_dict() for part in c.parts],
        "commitment_horizon_months": c.commitment_horizon_months,
        "committed_usd": money.json_number(c.committed_usd),
        "lock_in_months": c.lock_in_months,
        "spot_risk": c.spot_risk,
        # the moment the window was judged at is run metadata (`plan --run-meta`), not plan:
        # a committed plan of an unchanged stack must not change with the clock (issue 36)
        WINDOW: ({k: v for k, v in c.window.as_dict().items() if k != "judged_at"}
                 if c.window is not None else None),
        # a window's purchase is one-time money with its dates (docs/policy.md, "Windows:
        # one-time money"); null for a monthly load and a commitment
        "one_time": one_time_json(c),
        "rationale": c.rationale,
        CAPACITY_BLOCK: capacity_block_json(getattr(c.spec, "capacity_block", None), now),
        # prices whose sources disagree beyond PRICE_DISAGREEMENT_PCT (docs/catalog.md)
        "price_disagreements": [pc.as_dict() for pc in c.price_disagreements],
        # the catalog prices it pays, each with its source, date and whether it is an estimate
        "prices": [u.as_dict() for u in (prices or [])],
        # part of the cluster on an owned pool (its other keys describe the cloud share)
        "placement": c.placement.as_dict() if getattr(c, "placement", None) is not None
        else None,
        # reserved nodes existing holdings cover: no new purchase, sunk (docs/owned.md)
        "coverage": [x.as_dict() for x in getattr(c, "coverage", ())],
        "alternatives": [{
            "cloud": a.cloud, "region": a.region, "instance_type": a.instance_type,
            "purchase": a.purchase.as_dict(),
            "monthly_usd": money.json_number(a.monthly_usd),
            "rejected_because": a.rejected_because} for a in c.alternatives],
    }
