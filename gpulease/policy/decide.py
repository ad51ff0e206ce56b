"""The environment decision: candidates -> exact choice -> budget check. Its words are the
policy's other modules': the rationale and alternatives ``gpulease.policy.explanation``, why no
plan satisfies the policy ``gpulease.policy.failures``."""
from __future__ import annotations

import dataclasses
import datetime as dt
from functools import partial
from typing import Optional

from gpulease import clock, gctuning
from gpulease.catalog import Catalog
from gpulease.errors import Finding, PolicyError
from gpulease.model import ClusterDecision, ClusterSpec, Deferred, EnvironmentDecision, StackSpec
from gpulease.policy import explanation, failures, holdings, owned
from gpulease.policy.candidates import Candidate, Context, lock_in, term_options
from gpulease.policy.fallbacks import fallback_types
from gpulease.policy.pricing import Quotes, price_clusters
from gpulease.policy.rules import PolicyRules
from gpulease.policy.solver import Option, QuotaInfeasible, solve
from gpulease.policy.storage import storage_decision
from gpulease.clouds import registry
from gpulease.purchase import COMMITMENT, SPOT


def chosen_zone(c: Candidate) -> str:
    """The one zone a cluster lands in: the cheapest spot zone when any node is spot (all of a
    gang's nodes share the zone), else the first zone that offers the type."""
    return c.offering.zone_for(SPOT if c.purchase is not None and c.purchase.spot else "any")


def decide(stack: StackSpec, catalog: Catalog, *, quotes=None, now=None,
           inventory=holdings.DEFAULT) -> EnvironmentDecision:
    """Choose cloud, region, instance, nodes, purchase mix and template for every cluster.

    Exact: the total monthly cost is the minimum over every assignment that satisfies each
    cluster's rules and the per-region GPU quotas; raises PolicyError (located findings) when a
    cluster has no feasible offering, the quotas cannot host the clusters together, or the
    optimum is over budget.

    ``quotes``: the quotes and spot-risk records to price with (``gpulease.quotes.model.
    QuoteBook``; default: the shipped data file plus the cache of live quotes,
    ``gpulease.quotes.store.load_book``); ``now``: the time windows are judged at (default: now).
    ``inventory``: what the accounts already hold (``gpulease.inventory.model.Inventory``, or
    None for nothing; default: ``gpulease:inventory`` or the inventory cache, ``load_for``).

    Owned pools first, then holdings, then purchases (docs/owned.md): clusters (or their
    first GPUs) that fit an owned pool run there (``gpulease.policy.owned``) and only the rest
    is priced on cloud; reserved nodes an active holding covers buy nothing new
    (``gpulease.policy.holdings``); holdings nothing uses are reported.
    """
    # A decision allocates hundreds of thousands of small acyclic objects (candidates, costs)
    # that reference counting frees; with the collector on, each generation-2 pass rescanned
    # every live object, which made time per cluster grow with the environment.
    with gctuning.collector_paused():
        return _decide(stack, catalog, quotes, now, inventory)


def _decide(stack: StackSpec, catalog: Catalog, book=None, now=None,
            inventory=holdings.DEFAULT) -> EnvironmentDecision:
    rules = stack.policy if isinstance(stack.policy, PolicyRules) else PolicyRules()
    retired = ()
    if any(c.window is not None and c.capacity_block is not None for c in stack.clusters):
        # a window whose pinned block has ended is over: retired, not re-planned (issue 34)
        from dataclasses import replace as _replace

        from gpulease.policy.window_choice import ended_pins

        retired = ended_pins(stack, now if now is not None else clock.now())
        gone = {name for name, _ in retired}
        stack = _replace(stack, clusters=tuple(c for c in stack.clusters if c.name not in gone))
    storage, findings = _storage(stack, catalog)
    configured = stack
    if inventory is holdings.DEFAULT:
        inventory = holdings.load(stack)

    # owned pools first: the cloud policy prices what they do not hold (gpulease.policy.owned)
    from gpulease.quotes.model import utc

    when = utc(now) if now is not None else dt.datetime.now(dt.timezone.utc)
    placements, pools = owned.place(stack, when.date(),
                                    require_rdma=rules.require_rdma_for_distributed)
    if placements:
        stack = dataclasses.replace(stack, clusters=tuple(
            s for s in (owned.cloud_spec(p) for p in placements) if s is not None))
    burst = {p.name: p for p in placements if p.owned is not None and p.cloud_gpus}

    ctx = Context.build(stack, catalog, rules, quotes=book, now=when)   # defaults: Context.build
    # price first (every pair, one vectorised pass), explain later (full candidates only for
    # what the decision shows or chooses): gpulease.policy.pricing
    quotes = price_clusters(stack.clusters, ctx)
    orders, ranked = [], []
    for spec, q in zip(stack.clusters, quotes):
        order = q.order()
        ok = order[q.feasible[order]].tolist()
        if not ok:   # every pair rejected: the first rule each breaks, cheapest first
            findings.append(failures.infeasible(
                spec, [(q.offerings[j], q.rejection(spec, j, ctx)) for j in order.tolist()],
                stack))
        orders.append(order)
        ranked.append(ok)
    if findings:
        raise PolicyError(findings, headline=failures.headline(stack))

    quotas = {(cl, r): q for cl, cs in stack.clouds.items() for r, q in cs.quota_gpus.items()}
    columns = [_solver_columns(q, ok, quotas) for q, ok in zip(quotes, ranked)]
    options = [[Option(float(q.objective[j]), int(q.gpus[j]), _quota_key(q, j, quotas))
                for j in cols] for q, cols in zip(quotes, columns)]
    try:
        sol = solve(options, quotas)
    except QuotaInfeasible as exc:
        # the regions the clusters could use: every feasible candidate's (not only the ones
        # the solver kept)
        coupled = [i for i, opts in enumerate(options) if opts[0].quota_key is not None]
        exc.regions = sorted({k for i in coupled for k in
                              (_quota_key(quotes[i], j, quotas) for j in ranked[i])
                              if k is not None})
        raise PolicyError([failures.quota_finding(stack, exc, quotes, ranked)],
                          headline=failures.headline(stack)) from None

    chosen_cols = [columns[i][j] for i, j in enumerate(sol.choice)]
    chosen = [q.candidate(spec, j, ctx)
              for spec, q, j in zip(stack.clusters, quotes, chosen_cols)]
    # existing holdings cover reserved nodes before anything new is bought
    cover = holdings.cover(stack.clusters, chosen, [chosen_zone(c) for c in chosen], inventory,
                           when)
    pairs = [holdings.charged(c, cover.get(spec.name, ())) for c, spec in
             zip(chosen, stack.clusters)]
    chosen = [c for c, _ in pairs]
    cover = {spec.name: cov for spec, (_, cov) in zip(stack.clusters, pairs) if cov}
    owned_usd = sum(p.owned.monthly_usd for p in placements if p.owned is not None) + \
        sum(u.idle_usd for u in pools)
    total = sum(c.monthly_usd for c in chosen) + sum(s.monthly_usd for s in storage) + owned_usd
    if total > stack.budget_monthly_usd + 1e-9:
        raise PolicyError([failures.budget_finding(stack, chosen, storage, total,
                                                   owned=(placements, pools))],
                          headline=failures.headline(stack))

    displaced = set(sol.displaced)
    shared_users = _quota_users(stack, chosen)
    decisions = []
    for i, spec in enumerate(stack.clusters):
        c, q, col = chosen[i], quotes[i], chosen_cols[i]
        nxt = next((j for j in ranked[i] if j != col), None)
        runner = None if nxt is None else (q.offerings[nxt], float(q.objective[nxt]))
        cluster_decision = _monthly_decision if c.window is None else _window_decision
        decisions.append(cluster_decision(spec, c, q, orders[i], col, len(ranked[i]), runner,
                                          rules, ctx, shared_users if i in displaced else None,
                                          placement=burst.get(spec.name),
                                          coverage=cover.get(spec.name, ())))
    return EnvironmentDecision(
        stack=configured, clusters=tuple(decisions), storage=tuple(storage),
        catalog_version=catalog.version, catalog_as_of=catalog.as_of,
        placements=placements, pools=pools,
        unused_holdings=holdings.unused(inventory, cover, stack.clusters, chosen, catalog, when),
        inventory=None if inventory is None else (inventory.origin, inventory.generated_at),
        retired=retired)


def _storage(stack: StackSpec, catalog: Catalog) -> tuple[list, list[Finding]]:
    """Each dataset's storage decision (tiers, lifecycle, cost), and the findings of those that
    cannot be placed."""
    findings: list[Finding] = []
    storage = []
    for i, s in enumerate(stack.storage):
        readers = sum(1 for c in stack.clusters if c.dataset == s.name)
        sd, bad = storage_decision(s, catalog, index=i, source=stack.source,
                                   reads_per_month=float(readers))
        findings += bad
        if sd is not None:
            storage.append(sd)
    return storage, findings


def _monthly_decision(spec: ClusterSpec, c: Candidate, q: Quotes, order, col, n_ok: int, nxt,
                      rules: PolicyRules, ctx: Context,
                      quota_users: Optional[dict], **extra) -> ClusterDecision:
    """The decision of a cluster with a monthly load. ``n_ok``: its feasible candidates;
    ``nxt``: (offering, objective) of the best other one; ``quota_users``: who holds each
    shared quota when the quotas displaced the cluster (else None).

    Explain later: the rationale, the alternatives and the commitment terms are built when
    first read (`explain`, the plan's views), from what is bound here."""
    blocks = ctx.blocks_of(spec, c)
    months, committed = lock_in(c.offering, c.term, c.costs)
    covered = extra.get("coverage", ())
    if covered:   # no new commitment for the nodes existing holdings cover (policy.holdings)
        new = c.costs.reserved_usd - sum(x.monthly_usd for x in covered)
        months, committed = (months, new * months) if new > 1e-9 else (0, 0.0)
    zone = chosen_zone(c)
    return ClusterDecision(
        spec=spec, offering=c.offering, nodes=c.nodes, purchase=c.purchase,
        network=c.network, template=c.template, hourly_usd=c.hourly_usd, costs=c.costs,
        rationale=Deferred(partial(explanation.rationale, spec, c, zone, n_ok, nxt, rules,
                                   ctx.stack, quota_users is not None, blocks)),
        alternatives=Deferred(partial(explanation.alternatives, spec, c, zone, q, order, col,
                                      rules, ctx, quota_users)),
        zone=zone,
        commitment_term=c.term, distributed=c.distributed, blocks=blocks,
        terms=Deferred(partial(term_options, spec, c, ctx)),
        commitment_horizon_months=rules.commitment_horizon_months,
        committed_usd=committed, lock_in_months=months,
        spot_risk=explanation.spot_risk_doc(ctx, c.offering),
        fallback_types=fallback_types(c.offering, c.purchase, c.network, ctx.catalog), **extra)


def _window_decision(spec: ClusterSpec, c: Candidate, q: Quotes, order, col, n_ok: int, nxt,
                     rules: PolicyRules, ctx: Context,
                     quota_users: Optional[dict], **extra) -> ClusterDecision:
    """The decision of a cluster with a window (docs/policy.md, "Windows"); arguments as
    ``_monthly_decision``'s."""
    # Imported here for speed: window pricing loads only for a stack with a window.
    from gpulease.policy import window_choice as WC

    best, opts, allowed = c.window
    wd = WC.decision_of(spec, best, opts, allowed, ctx.now)
    o = c.offering
    committed = wd.total_usd if best.model == COMMITMENT else 0.0
    return ClusterDecision(
        spec=spec, offering=o, nodes=c.nodes, purchase=c.purchase, network=c.network,
        template=c.template, hourly_usd=c.hourly_usd, costs=c.costs,
        rationale=explanation.window_rationale(spec, c, wd, n_ok, nxt, rules, ctx),
        alternatives=explanation.window_alternatives(spec, c, wd, q, order, col, rules, ctx,
                                                     quota_users),
        zone=wd.quote.get("zone") if wd.quote and wd.quote.get(
            "zone") and registry.get(o.cloud).quote_picks_zone else chosen_zone(c),
        commitment_term=c.term, distributed=c.distributed, blocks=(WC.block_of(best, c.costs),),
        terms=(), commitment_horizon_months=rules.commitment_horizon_months,
        committed_usd=committed, lock_in_months=best.lock_in_months,
        spot_risk=explanation.spot_risk_doc(ctx, o), window=wd,
        fallback_types=fallback_types(o, c.purchase, c.network, ctx.catalog), **extra)


def _quota_key(q: Quotes, j, quotas: dict) -> Optional[tuple[str, str]]:
    o = q.offerings[j]
    key = (o.cloud, o.region)
    return key if key in quotas else None


def _solver_columns(q: Quotes, ranked, quotas: dict) -> list:
    """The feasible columns the exact solve can choose (``solver._prune`` on the ranked
    list): the cheapest outside any quota, and per quota region the cheaper-and-smaller front
    before it."""
    keep, best_gpus = [], {}
    for j in ranked:
        key = _quota_key(q, j, quotas)
        if key is None:
            keep.append(j)
            break
        if q.gpus[j] < best_gpus.get(key, 1 << 60):
            best_gpus[key] = q.gpus[j]
            keep.append(j)
    return keep


def _quota_users(stack: StackSpec, chosen: list[Candidate]) -> dict:
    users: dict = {}
    for c, spec in zip(chosen, stack.clusters):
        users.setdefault(c.quota_key, []).append(spec.name)
    return users
