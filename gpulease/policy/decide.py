"""The environment decision: candidates -> exact choice -> budget check -> rationale and alternatives."""
from __future__ import annotations

from functools import partial
from typing import Optional

import numpy as np

from gpulease import money, gctuning
from gpulease.catalog import Catalog
from gpulease.errors import Finding, PolicyError
from gpulease.model import (HOURS_PER_MONTH, Alternative, ClusterDecision, ClusterSpec, Deferred,
                            EnvironmentDecision, PurchaseMix, StackSpec)
from gpulease.policy.candidates import (Candidate, Context, evaluate, lock_in, rule_rejection,
                                        term_options)
from gpulease.policy.costmodel import blend_costs, break_even_utilization, rates_of
from gpulease.policy.pricing import Quotes, price_clusters
from gpulease.policy.rules import PolicyRules
from gpulease.policy.solver import Option, QuotaInfeasible, solve
from gpulease.policy.storage import storage_decision
from gpulease.policy.templates import get_template
from gpulease.text import plural

_NO_PURCHASE = PurchaseMix()
#: how many rejected candidates an infeasibility message lists before "and N more".
_MAX_LISTED = 12


def _num(v: float) -> str:
    return f"{v:.0f}" if abs(v - round(v)) < 0.005 else f"{v:.2f}"


_money = money.fmt   # THE money text (gpulease.money)


def _delta(a: float, b: float) -> float:
    """a - b as the plan shows them: the difference of the cent-rounded amounts."""
    return round(a, 2) - round(b, 2)


def _where(c: Candidate) -> str:
    return f"{c.offering.cloud}:{c.offering.region} {c.offering.instance_type}"


def chosen_zone(c: Candidate) -> str:
    """The one zone a cluster lands in: the cheapest spot zone when any node is spot (all of a
    gang's nodes share the zone), else the first zone that offers the type."""
    return c.offering.zone_for("spot" if c.purchase is not None and c.purchase.spot else "any")


def decide(stack: StackSpec, catalog: Catalog, *, quotes=None, now=None) -> EnvironmentDecision:
    """Choose cloud, region, instance, nodes, purchase mix and template for every cluster.

    Exact: the total monthly cost is the minimum over every assignment that satisfies each
    cluster's rules and the per-region GPU quotas; raises PolicyError (located findings) when a
    cluster has no feasible offering, the quotas cannot host the clusters together, or the
    optimum is over budget.

    ``quotes``: the quotes and spot-risk records to price with (``gpulease.quotes.model.
    QuoteBook``; default: the shipped data file plus the cache of live quotes,
    ``gpulease.quotes.store.load_book``); ``now``: the time windows are judged at (default: now).
    """
    # A decision allocates hundreds of thousands of small acyclic objects (candidates, costs)
    # that reference counting frees; with the collector on, each generation-2 pass rescanned
    # every live object, which made time per cluster grow with the environment.
    with gctuning.collector_paused():
        return _decide(stack, catalog, quotes, now)


def _decide(stack: StackSpec, catalog: Catalog, book=None, now=None) -> EnvironmentDecision:
    rules = stack.policy if isinstance(stack.policy, PolicyRules) else PolicyRules()
    findings: list[Finding] = []

    storage = []
    for i, s in enumerate(stack.storage):
        readers = sum(1 for c in stack.clusters if c.dataset == s.name)
        sd, bad = storage_decision(s, catalog, index=i, source=stack.source,
                                   reads_per_month=float(readers))
        findings += bad
        if sd is not None:
            storage.append(sd)

    ctx = Context.build(stack, catalog, rules, quotes=book, now=now)   # defaults: Context.build
    # price first (every pair, one vectorised pass), explain later (full candidates only for
    # what the decision shows or chooses): gpulease.policy.pricing
    quotes = price_clusters(stack.clusters, ctx)
    orders, ranked = [], []
    for spec, q in zip(stack.clusters, quotes):
        order = q.order()
        ok = order[q.feasible[order]].tolist()
        if not ok:   # every pair rejected: the first rule each breaks, cheapest first
            findings.append(_infeasible(
                spec, [(q.offerings[j], _rejected(spec, q, j, ctx)) for j in order.tolist()],
                stack))
        orders.append(order)
        ranked.append(ok)
    if findings:
        raise PolicyError(findings, headline=_headline(stack))

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
        raise PolicyError([_quota_finding(stack, exc, quotes, ranked)],
                          headline=_headline(stack)) from None

    chosen_cols = [columns[i][j] for i, j in enumerate(sol.choice)]
    chosen = [_candidate(spec, q, j, ctx)
              for spec, q, j in zip(stack.clusters, quotes, chosen_cols)]
    total = sum(c.monthly_usd for c in chosen) + sum(s.monthly_usd for s in storage)
    if total > stack.budget_monthly_usd + 1e-9:
        raise PolicyError([_budget_finding(stack, chosen, storage, total)],
                          headline=_headline(stack))

    displaced = set(sol.displaced)
    shared_users = _quota_users(stack, chosen)
    decisions = []
    for i, spec in enumerate(stack.clusters):
        c, q, col = chosen[i], quotes[i], chosen_cols[i]
        if c.window is not None:
            nxt = next((j for j in ranked[i] if j != col), None)
            runner = None if nxt is None else (q.offerings[nxt], float(q.objective[nxt]))
            decisions.append(_window_decision(
                spec, c, q, orders[i], col, len(ranked[i]), runner, rules, ctx,
                shared_users if i in displaced else None))
            continue
        blocks = ctx.blocks_of(spec, c)
        months, committed = lock_in(c.offering, c.term, c.costs)
        nxt = next((j for j in ranked[i] if j != col), None)
        runner = None if nxt is None else (q.offerings[nxt], float(q.objective[nxt]))
        # Explain later: the rationale, the alternatives and the commitment terms are built
        # when first read (`explain`, the plan's views), from what is bound here.
        decisions.append(ClusterDecision(
            spec=spec, offering=c.offering, nodes=c.nodes, purchase=c.purchase,
            network=c.network, template=c.template, hourly_usd=c.hourly_usd, costs=c.costs,
            rationale=Deferred(partial(_rationale, spec, c, len(ranked[i]), runner, rules,
                                       stack, i in displaced, blocks)),
            alternatives=Deferred(partial(_alternatives, spec, c, q, orders[i], col, rules, ctx,
                                          shared_users if i in displaced else None)),
            zone=chosen_zone(c),
            commitment_term=c.term, distributed=c.distributed, blocks=blocks,
            terms=Deferred(partial(term_options, spec, c, ctx)),
            commitment_horizon_months=rules.commitment_horizon_months,
            committed_usd=committed, lock_in_months=months,
            spot_risk=spot_risk_doc(ctx, c.offering)))
    return EnvironmentDecision(stack=stack, clusters=tuple(decisions), storage=tuple(storage),
                               catalog_version=catalog.version, catalog_as_of=catalog.as_of)


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


def _candidate(spec: ClusterSpec, q: Quotes, j, ctx: Context) -> Candidate:
    """The full candidate of a quoted pair (``evaluate``; the one the quote came from when the
    pricing already built it)."""
    c = q.exact.get(int(j))
    if c is None:
        forced = get_template(spec.template) if spec.template else None
        c = evaluate(spec, q.offerings[j], ctx, forced)
    return c


def spot_risk_doc(ctx: Context, o) -> Optional[dict]:
    """What the cost model assumed about the offering's spot interruptions (explain, plan JSON):
    the rate, where it came from and the record's figures; None when it has no spot price."""
    if ctx.spot_rate(o) is None:
        return None
    rate, rec = ctx.spot_risk(o)
    if ctx.rules.spot_interruptions_per_hour is not None:
        basis = "gpulease:policy.spot_interruptions_per_hour"
    elif rec is not None and rec.interruptions_per_hour is not None:
        basis = ("Spot Instance Advisor band" if rec.band else "GCP advice.capacity estimated "
                 "uptime")
    else:
        basis = f"catalog default for {o.cloud}"
    doc = {"interruptions_per_hour": rate, "basis": basis, "zone": o.zone_for("spot")}
    if rec is not None:
        doc.update({k: v for k, v in rec.as_dict().items() if k in (
            "band", "band_max_percent", "placement_score", "obtainability",
            "estimated_uptime_hours", "as_of", "source", "live")})
    return doc


# ---- failures ---------------------------------------------------------------------------------
def _headline(stack: StackSpec) -> str:
    return (f"{stack.source or 'stack ' + stack.stack}: no plan satisfies the policy — fix the "
            "keys below (reference: docs/policy.md) and run again:")


_HINTS = (
    ("region not enabled", "enable a region under gpulease:clouds.<cloud>.regions"),
    ("residency", "widen {path}.regions"),
    ("cross-cloud data", "set gpulease:policy.allow_cross_cloud_data: true"),
    ("no RDMA", "set {path}.distributed: false or gpulease:policy.require_rdma_for_distributed: "
                "false"),
    ("quota", "raise gpulease:clouds.<cloud>.quota_gpus"),
    ("template", "remove {path}.template"),
    ("no price", "change {path}.gpu or {path}.priority"),
    ("local zones", "list the region under gpulease:clouds.aws.local_zones"),
    ("window", "widen {path}.window (start earlier, a later deadline) or read live quotes "
               "(gpulease catalog quotes)"),
    ("not sold", "change {path}.gpu, or let a purchase model it is sold with apply "
                 "({path}.priority / checkpoint_minutes; docs/catalog.md 'Purchase options')"),
)


def _infeasible(spec: ClusterSpec, rejected: list[tuple], stack: StackSpec) -> Finding:
    """``rejected``: (offering, why) of every offering of the cluster's GPU, in candidate order
    (``Quotes.order``: what ``candidates_for`` ranks, without building a candidate per pair)."""
    path = spec.config_path
    head = f'no feasible offering for cluster "{spec.name}" ({spec.gpus} x {spec.gpu})'
    if not rejected:
        clouds = ", ".join(sorted(stack.clouds)) or "none"
        return Finding(path, f"{head}: the catalog has no {spec.gpu} offering on the configured "
                       f"clouds ({clouds}); configure a cloud that offers it or change "
                       f"{path}.gpu", source=stack.source)
    # Offerings in regions the stack does not enable are summarised, not itemised: the
    # actionable reasons are the ones that stop candidates the user did allow.
    enabled = [(o, why) for o, why in rejected if not why.startswith("region not enabled")]
    off = [(o, why) for o, why in rejected if why.startswith("region not enabled")]
    listed = [f"{o.cloud}:{o.region} {o.instance_type}: {why}"
              for o, why in enabled[:_MAX_LISTED]]
    if len(enabled) > _MAX_LISTED:
        listed.append(f"and {len(enabled) - _MAX_LISTED} more")
    if off:
        listed.append(f"{len(off)} more in regions not enabled under gpulease:clouds")
    hints = []
    for key, hint in _HINTS:
        if any(why.startswith(key) for _, why in (enabled or off)):
            hints.append(hint.format(path=path))
    return Finding(path, f"{head}: " + "; ".join(listed) + ". Fix: " + " or ".join(hints),
                   source=stack.source)


def _quota_finding(stack: StackSpec, exc: QuotaInfeasible, quotes, ranked) -> Finding:
    names = [stack.clusters[i].name for i in exc.clusters]
    need = sum(int(quotes[i].gpus[ranked[i]].min()) for i in exc.clusters)
    quota = sum(stack.clouds[cl].quota_gpus[r] for cl, r in exc.regions)
    regions = ", ".join(f"{cl}:{r} ({stack.clouds[cl].quota_gpus[r]})" for cl, r in exc.regions)
    return Finding("gpulease:clouds", f"GPU quotas cannot host clusters {', '.join(names)} at "
                   f"once: they need at least {need} GPUs together, their regions allow {quota} "
                   f"({regions}). Fix: raise gpulease:clouds.<cloud>.quota_gpus, enable more "
                   "regions, or lower the clusters' gpus", source=stack.source)


def _budget_finding(stack: StackSpec, chosen: list[Candidate], storage, total: float) -> Finding:
    short = total - stack.budget_monthly_usd
    items = sorted(((c.monthly_usd, s.name) for c, s in zip(chosen, stack.clusters)),
                   key=lambda t: (-t[0], t[1]))
    drivers, acc = [], 0.0
    for usd, name in items:
        drivers.append(f"{name} ({_num(usd)})")
        acc += usd
        if acc >= short:
            break
    text = (f"budget {_num(stack.budget_monthly_usd)} USD/month is short by {short:.2f} USD; "
            f"driven by clusters {', '.join(drivers)}")
    if acc < short and storage:
        text += "; storage " + ", ".join(f"{s.name} ({_num(s.monthly_usd)})" for s in storage)
    return Finding("gpulease:budget_monthly_usd",
                   text + ". Fix: raise gpulease:budget_monthly_usd or lower gpus / "
                   "hours_per_month of those clusters", source=stack.source)


def _quota_users(stack: StackSpec, chosen: list[Candidate]) -> dict:
    users: dict = {}
    for c, spec in zip(chosen, stack.clusters):
        users.setdefault(c.quota_key, []).append(spec.name)
    return users


# ---- explanations ---------------------------------------------------------------------------
def _unpriced_commitment(o) -> str:
    """For an offering whose recorded purchase options sell a commitment the catalog has no
    price for: say so (the row's notes in the catalog file name the sources read)."""
    if o.purchase_options_source and o.sells("commitment"):
        return (" (it is sold with one; the catalog row's notes say which sources were read "
                "for a price)")
    return ""


def _purchase_text(spec: ClusterSpec, c: Candidate, rules: PolicyRules, blocks=()) -> str:
    term, p, n, h = c.term, spec.priority, c.nodes, spec.hours_per_month
    o = c.offering
    rates = rates_of(o, rules, term)
    be = break_even_utilization(rates)
    u = h / HOURS_PER_MONTH
    basis = c.basis.removesuffix("+cache")
    if spec.has_profile:
        text = _profile_text(spec, c, rules, rates, blocks)
    elif basis == "guaranteed":
        how = (f"{term} commitment" if o.price("reserved", term) is not None else
               f"capacity reservation at the on-demand rate: no {term} commitment price in the catalog"
               + _unpriced_commitment(o) if term != "none"
               else "capacity reservation at the on-demand rate: no commitment")
        text = (f"Priority {p} > {rules.reserved_above_priority} needs guaranteed capacity: all "
                f"{n} nodes reserved ({how}).")
    elif basis == "break_even_reserved":
        text = (f"Reserved ({term}) pays: {h:g} h/month is {u:.0%} utilization, above the "
                f"{be:.0%} break-even (commitment rate / on-demand rate).")
    elif basis == "break_even_on_demand" and o.price("reserved", term) is None:
        text = (f"On-demand: the catalog has no {term} commitment price{_unpriced_commitment(o)}, "
                f"and a plain capacity reservation would bill the on-demand rate for all 730 h, "
                f"not just {h:g} h.")
    elif basis == "break_even_on_demand":
        text = (f"On-demand: {h:g} h/month is {u:.0%} utilization, below the {be:.0%} "
                f"break-even where a {term} commitment would pay.")
    elif basis == "no_commit_price":
        text = f"On-demand: the offering has no {term} commitment price{_unpriced_commitment(o)}."
    elif basis == "only_commit_priced":
        text = f"Reserved ({term}): the offering has no on-demand price."
    elif basis == "no_spot_price":
        text = "Not spot: the offering has no spot price, so on-demand/reserved by break-even."
    elif basis == "spot":
        saving = (f"{_money(_delta(c.compared_usd, c.objective))}/month less than "
                  f"{'on-demand/reserved' if c.compared_usd is not None else 'any other model'}"
                  if c.compared_usd is not None else "the least")
        text = (f"Spot: checkpointable work (every {spec.checkpoint_minutes} min) at priority {p} "
                f"< {rules.spot_below_priority}; including {_money(c.costs.spot_rework_usd)}/month "
                f"expected rework it costs {saving}.")
    elif basis == "spot_overridden":
        text = (f"Not spot: priority {p} work defaults to spot, but with expected rework spot "
                f"would cost {_money(c.compared_usd)}/month, more than "
                f"{'reserved' if c.purchase.reserved else 'on-demand'}.")
    elif basis == "spot_forced":
        text = "Spot on every node, as the forced template says."
    else:
        text = f"Purchase: {c.purchase.as_dict()}."
    if c.basis.endswith("+cache"):
        text += " The cache node runs on-demand so that an interruption never loses staged data."
    if rules.commitment_term == "auto":
        text += " " + _term_text(c, rules)
    return text


_MODEL_WORD = {"reserved": "reserved", "on_demand": "on-demand", "spot": "spot"}


def _profile_text(spec: ClusterSpec, c: Candidate, rules: PolicyRules, rates, blocks) -> str:
    """The blend of a multi-step demand: per block what it is and why, with the break-even
    (with ``auto``, of the reserved rate scaled by months billed / horizon)."""
    if rates.reserved is not None and c.lock_in_factor != 1.0:
        rates = rates._replace(reserved=rates.reserved * c.lock_in_factor)
    be = break_even_utilization(rates)
    parts = []
    for b in blocks:
        u = b.hours_per_month / HOURS_PER_MONTH
        what = f"{plural(b.nodes, f'{b.part} node')} x {b.hours_per_month:g} h"
        if b.purchase == "reserved":
            why = (f"{u:.0%} utilization beats the {be:.0%} break-even" if be is not None
                   and u > be else "guaranteed capacity" if b.part == "baseline"
                   and spec.priority > rules.reserved_above_priority else "cheapest")
        elif b.purchase == "on_demand":
            why = (f"{u:.0%} utilization is below the {be:.0%} break-even" if be is not None
                   and u <= be else "no commitment price" if rates.reserved is None
                   else "cheapest")
            if spec.priority > rules.reserved_above_priority and b.part == "burst":
                why += "; burst of guaranteed work is never spot"
        else:
            why = "cheapest with the expected rework"
        parts.append(f"{what}: {_MODEL_WORD[b.purchase]} ({why})")
    steps = ", ".join(f"{st.gpus} GPUs for {st.hours_per_month:g} h" for st in spec.steps)
    text = f"Demand profile ({steps} a month): " + "; ".join(parts) + "."
    if c.basis == "spot_overridden":
        text += (f" Spot on the burst would cost {_money(c.compared_usd)}/month with expected "
                 "rework, more.")
    elif c.basis == "spot" and c.compared_usd is not None:
        text += (f" Spot saves {_money(c.compared_usd - c.objective)}/month against the best "
                 "blend without spot.")
    return text


def _term_text(c: Candidate, rules: PolicyRules) -> str:
    h = rules.commitment_horizon_months
    if not c.costs.reserved_usd:
        return (f"Commitment term auto: no node is reserved, so no term is bought "
                f"(horizon {h} months).")
    if c.term == "none":
        return (f"Commitment term auto: plain capacity reservations without a commitment cost "
                f"least over the {h}-month horizon.")
    return (f"Commitment term auto: {c.term} costs least over the {h}-month horizon "
            f"(average {_money(c.objective)}/month, months billed beyond the horizon included).")


def _template_text(spec: ClusterSpec, c: Candidate, stack: StackSpec) -> str:
    t = get_template(c.template)
    ds = stack.storage_by_name(spec.dataset) if spec.dataset else None
    vals = {"nodes": c.nodes, "compute_nodes": max(c.nodes - 1, 0), "fabric": c.network,
            "nodes_text": plural(c.nodes, "node"),
            "compute_nodes_text": plural(max(c.nodes - 1, 0), "compute node"),
            "dataset": spec.dataset or "-", "dataset_tb": _num(ds.size_tb) if ds else "0",
            "checkpoint_minutes": spec.checkpoint_minutes or 0, "gpu": c.offering.gpu}
    why = t.rationale.format(**vals) if t.rationale else t.description
    how = f"forced by {spec.config_path}.template" if spec.template else "chosen by its rule"
    return f"Template {t.name} ({how}): {why}"


def _rationale(spec: ClusterSpec, c: Candidate, n_ok: int, nxt, rules: PolicyRules,
               stack: StackSpec, displaced: bool, blocks=()) -> str:
    """``n_ok``: feasible candidates; ``nxt``: (offering, objective) of the best other one."""
    o = c.offering
    head = f"{_where(c)} ({c.nodes} x {o.gpus_per_node} {o.gpu})"
    if displaced:
        where = f"is the cheapest of {n_ok} feasible candidates that fits the shared GPU quotas"
    elif nxt is None:
        where = "is the only feasible candidate"
    else:
        other, m = nxt
        where = (f"is the cheapest of {n_ok} feasible candidates; next best "
                 f"{other.cloud}:{other.region} {other.instance_type} "
                 f"costs +{_money(_delta(m, c.objective))}/month")
    gravity = ""
    if c.costs.egress_usd:
        ds = stack.storage_by_name(spec.dataset)
        gravity = (f" (including {_money(c.costs.egress_usd)}/month to move and stage dataset "
                   f"{ds.name} from {ds.home})")
    return (f"{head}{gravity} {where}. {_zone_text(c)} {_purchase_text(spec, c, rules, blocks)}"
            f"{_unsold_text(o)} {_template_text(spec, c, stack)}")


def _unsold_text(o) -> str:
    """The purchase models the offering is not sold with (catalog purchase options), if any."""
    why = o.unavailable("on_demand", "spot", "reserved")
    return f" Purchase options: {why}." if why else ""


def _zone_text(c: Candidate) -> str:
    return _zone_choice_text(c) + _local_zone_text(c.offering)


def _zone_choice_text(c: Candidate) -> str:
    o, zone = c.offering, chosen_zone(c)
    spot_zones = [z for z, _ in o.zone_spot_usd if z in o.regular_zones]
    if c.purchase is not None and c.purchase.spot and len(spot_zones) > 1:
        return (f"Zone {zone}: the cheapest spot zone of {len(spot_zones)} "
                f"({o.spot_in(zone):.4f} $/node-hour).")
    if o.zones:
        return f"Zone {zone}: offers {o.instance_type} ({plural(len(o.regular_zones), 'zone')} of {o.region} {plural(len(o.regular_zones), 'does', number=False)})."
    return f"Zone {zone}: by naming convention (the catalog records no zones)."


def _rejected(spec: ClusterSpec, q: Quotes, j, ctx: Context) -> str:
    """Why a quoted pair was rejected: the first rule it breaks (the full candidate's reason
    when a rule about its price or template decided it)."""
    c = q.exact.get(int(j))
    if c is not None:
        return c.rejected
    why = rule_rejection(spec, q.offerings[j], ctx).rejected
    return why if why is not None else _candidate(spec, q, j, ctx).rejected


def _local_zone_text(o) -> str:
    """What the offering's AWS Local Zones are to this stack (off by default, and why)."""
    if not o.local_zones:
        return ""
    if o.local_zones_allowed:
        return (f" Local Zones {', '.join(o.local_zones)} are candidates "
                f"(gpulease:clouds.aws.local_zones lists {o.region}).")
    return (f" Local Zones {', '.join(o.local_zones)} not used: gpulease:clouds.aws.local_zones "
            f"does not list {o.region} (off by default: a Local Zone is a metro extension with "
            "a smaller service set and capacity, opted into per account).")


def _variant_reason(model: str, spec: ClusterSpec, rules: PolicyRules, delta: float,
                    chosen: Candidate) -> str:
    thr, sb = rules.reserved_above_priority, rules.spot_below_priority
    if model == "spot":
        if not spec.interruptible:
            return f"not interruptible (no {spec.config_path}.checkpoint_minutes)"
        if spec.priority > thr:
            return f"priority {spec.priority} > {thr} needs guaranteed capacity"
        if spec.priority >= sb:
            return f"priority {spec.priority} >= {sb}: spot only below {sb}"
    if model == "on_demand" and spec.priority > thr:
        return f"priority {spec.priority} > {thr} needs guaranteed capacity"
    if delta < 0:
        return f"template {chosen.template} keeps one cache node on-demand"
    return f"cost (+{_money(delta)}/month)"


def _window_decision(spec: ClusterSpec, c: Candidate, q: Quotes, order, col, n_ok: int, nxt,
                     rules, ctx: Context, quota_users) -> ClusterDecision:
    """The decision of a cluster with a window (docs/policy.md, "Windows")."""
    from gpulease.policy import window_choice as WC

    best, opts, allowed = c.window
    wd = WC.decision_of(spec, best, opts, allowed, ctx.now)
    blocks = (WC.block_of(best, c.costs),)
    if nxt is None:
        where = "is the only feasible candidate"
    else:
        other, m = nxt
        where = (f"is the cheapest of {n_ok} feasible candidates; next best "
                 f"{other.cloud}:{other.region} {other.instance_type} "
                 f"costs +{_money(_delta(m, c.objective))}/month")
    o = c.offering
    text = (f"{_where(c)} ({c.nodes} x {o.gpus_per_node} {o.gpu}) {where}. "
            f"{WC.rationale(spec, wd, rules)} {_template_text(spec, c, ctx.stack)}")
    alts = list(_alternatives(spec, c, q, order, col, rules, ctx, quota_users, variants=False))
    extra = [a for _, a in sorted(WC.alternatives(spec, wd, o, rules), key=lambda t: t[0])]
    keep = (extra + alts)[:max(rules.max_alternatives, len(extra[:3]))] \
        if rules.max_alternatives else []
    committed = wd.total_usd if best.model == "commitment" else 0.0
    return ClusterDecision(
        spec=spec, offering=o, nodes=c.nodes, purchase=c.purchase, network=c.network,
        template=c.template, hourly_usd=c.hourly_usd, costs=c.costs, rationale=text,
        alternatives=tuple(keep), zone=wd.quote.get("zone") if wd.quote and wd.quote.get(
            "zone") and o.cloud == "gcp" else chosen_zone(c),
        commitment_term=c.term, distributed=c.distributed, blocks=blocks, terms=(),
        commitment_horizon_months=rules.commitment_horizon_months, committed_usd=committed,
        lock_in_months=best.lock_in_months, spot_risk=spot_risk_doc(ctx, o), window=wd)


def _alternatives(spec: ClusterSpec, chosen: Candidate, q: Quotes, order, col,
                  rules: PolicyRules, ctx: Context, quota_users: Optional[dict],
                  variants: bool = True) -> tuple[Alternative, ...]:
    base = chosen.objective
    per = "/month over the horizon" if rules.commitment_term == "auto" else "/month"
    alts: list[tuple[tuple, Alternative]] = []
    # Every other candidate, cheapest first (ties: cloud, region, type, then candidate order):
    # the first max_alternatives, and the first one rejected only on cost (the runner-up).
    nan = np.isnan(q.objective)
    place = np.empty(len(order), dtype=np.int64)
    place[order] = np.arange(len(order))
    ranked = np.lexsort((place, q.index.name_rank, np.where(nan, 0.0, q.objective), nan))
    obj, feasible, none = q.objective.tolist(), q.feasible.tolist(), nan.tolist()
    shown, runner = [], None
    for j in ranked.tolist():
        if j == col:
            continue
        on_cost = feasible[j] and not (quota_users is not None and obj[j] < base)
        if len(shown) < rules.max_alternatives:
            shown.append(j)
        elif runner is None and on_cost:
            shown.append(j)
        if on_cost and runner is None:
            runner = j
        if len(shown) >= rules.max_alternatives and runner is not None:
            break
    counts = (q.reserved.tolist(), q.on_demand.tolist(), q.spot.tolist())
    monthly = q.monthly.tolist()
    for j in shown:
        o = q.offerings[j]
        m = None if none[j] else obj[j]
        if not feasible[j]:
            why = _rejected(spec, q, j, ctx)
        elif quota_users is not None and m < base:
            users = ", ".join(n for n in quota_users.get((o.cloud, o.region), [])
                              if n != spec.name)
            qg = ctx.stack.clouds[o.cloud].quota_gpus.get(o.region)
            why = (f"quota (shared {o.cloud}:{o.region} quota of {qg} GPUs "
                   f"goes to {users or 'other clusters'})")
        else:
            why = f"cost (+{_money(_delta(m, base))}{per})"
        purchase = (PurchaseMix(counts[0][j], counts[1][j], counts[2][j])
                    if m is not None else _NO_PURCHASE)
        alts.append(((m is None, m or 0.0), Alternative(
            o.cloud, o.region, o.instance_type, purchase, None if m is None else monthly[j],
            why)))
    if not variants:
        alts.sort(key=lambda t: (t[0], t[1].cloud, t[1].region, t[1].instance_type))
        return tuple(a for _, a in alts[:rules.max_alternatives])
    # The chosen offering with the purchase models the rules or the math ruled out: every node
    # on one model (each node keeping the hours of its demand step).
    o, n = chosen.offering, chosen.nodes
    k = ctx.inputs_of(spec, chosen)
    rates = k.rates
    steps = ctx.node_steps(spec, o.gpus_per_node)
    for model in ("spot", "on_demand", "reserved"):
        mix = PurchaseMix(**{model: n})
        if mix == chosen.purchase:
            continue
        if not o.buyable(model):   # say so: the catalog's purchase options rule it out
            alts.append(((True, 0.0), Alternative(
                o.cloud, o.region, o.instance_type, mix, None,
                f"not sold ({o.unavailable(model)})")))
            continue
        if rates.of(model) is None:
            continue
        cost = blend_costs(tuple((st.nodes, st.hours_per_month, model) for st in steps),
                           k)[0].monthly_usd
        alts.append(((False, cost), Alternative(
            o.cloud, o.region, o.instance_type, mix, cost,
            _variant_reason(model, spec, rules, _delta(cost, chosen.monthly_usd), chosen))))
    # The chosen offering's spot in its other zones (alternatives that differ only by zone).
    if chosen.purchase.spot and len(o.zone_spot_usd) > 1:
        zone = chosen_zone(chosen)
        blocks = tuple((n, st.hours_per_month, m) for st, _, n, m in chosen.layout)
        for z, usd in o.zone_spot_usd:
            if z == zone or z not in o.regular_zones:
                continue
            zk = k._replace(rates=k.rates._replace(spot=usd))
            cost = blend_costs(blocks, zk)[0].monthly_usd
            alts.append(((False, cost), Alternative(
                o.cloud, o.region, o.instance_type, chosen.purchase, cost,
                f"zone (spot in {z} costs {usd:.4f}/h vs {o.spot_in(zone):.4f}/h in {zone}: "
                f"+{_money(_delta(cost, chosen.monthly_usd))}/month)", zone=z)))
    alts.sort(key=lambda t: (t[0], t[1].cloud, t[1].region, t[1].instance_type, t[1].zone or ""))
    keep = [a for _, a in alts[:rules.max_alternatives]]
    # The runner-up the rationale names ("next best ...") is always listed, even when cheaper
    # candidates that rules exclude fill the first places.
    runner_up = next((a for _, a in alts if a.rejected_because.startswith("cost")), None)
    if runner_up is not None and runner_up not in keep and rules.max_alternatives > 0:
        keep[-1:] = [runner_up]
    return tuple(keep)
