"""The decision in words: each cluster's rationale, its ranked alternatives with the reason each
lost, and the spot-risk assumptions (what `gpulease explain` and the plan show).

``decide`` chooses; the rationale and alternatives of a monthly load are built from here when
first read (``model.Deferred``), so a plan of many clusters pays for the sentences it shows.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from gpulease import money
from gpulease.model import (HOURS_PER_MONTH, Alternative, ClusterSpec, Offering, PurchaseMix,
                            StackSpec, WindowDecision)
from gpulease.policy.candidates import Candidate, Context
from gpulease.policy.costmodel import blend_costs, break_even_utilization, rates_of
from gpulease.policy.pricing import Quotes
from gpulease.policy.rules import PolicyRules
from gpulease.policy.templates import get_template
from gpulease.purchase import COMMITMENT, LABELS, ON_DEMAND, RESERVED, SPOT
from gpulease.text import plural

_NO_PURCHASE = PurchaseMix()


def num(v: float) -> str:
    """A figure as messages write it: whole numbers bare, else two decimals."""
    return f"{v:.0f}" if abs(v - round(v)) < 0.005 else f"{v:.2f}"


_money = money.fmt   # THE money text (gpulease.money)


def delta(a: float, b: float) -> float:
    """a - b as the plan shows them: the difference of the cent-rounded amounts."""
    return round(a, 2) - round(b, 2)


def _where(c: Candidate) -> str:
    return f"{c.offering.cloud}:{c.offering.region} {c.offering.instance_type}"


def spot_risk_doc(ctx: Context, o: Offering) -> Optional[dict]:
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
    doc = {"interruptions_per_hour": rate, "basis": basis, "zone": o.zone_for(SPOT)}
    if rec is not None:
        doc.update({k: v for k, v in rec.as_dict().items() if k in (
            "band", "band_max_percent", "placement_score", "obtainability",
            "estimated_uptime_hours", "as_of", "source", "live")})
    return doc


# ---- a monthly load ---------------------------------------------------------------------------
def rationale(spec: ClusterSpec, c: Candidate, zone: str, n_ok: int, nxt, rules: PolicyRules,
              stack: StackSpec, displaced: bool, blocks=()) -> str:
    """Why the cluster runs where it does, on what purchase mix and template. ``zone``: the zone
    it lands in; ``n_ok``: feasible candidates; ``nxt``: (offering, objective) of the best
    other one; ``displaced``: the shared GPU quotas ruled out a cheaper one."""
    o = c.offering
    head = f"{_where(c)} ({c.nodes} x {o.gpus_per_node} {o.gpu})"
    where = _rank_text(c, n_ok, nxt, displaced)
    gravity = ""
    if c.costs.egress_usd:
        ds = stack.storage_by_name(spec.dataset)
        gravity = (f" (including {_money(c.costs.egress_usd)}/month to move and stage dataset "
                   f"{ds.name} from {ds.home})")
    return (f"{head}{gravity} {where}. {_zone_text(c, zone)} "
            f"{_purchase_text(spec, c, rules, blocks)}{_unsold_text(o)} "
            f"{_template_text(spec, c, stack)}")


def _rank_text(c: Candidate, n_ok: int, nxt, displaced: bool = False) -> str:
    """Where the choice ranks among the feasible candidates, and what the next best costs."""
    if displaced:
        return f"is the cheapest of {n_ok} feasible candidates that fits the shared GPU quotas"
    if nxt is None:
        return "is the only feasible candidate"
    other, m = nxt
    # a window's candidates are compared by what the work item costs in all, not per month
    per = "/month" if c.window is None else " for the work item"
    return (f"is the cheapest of {n_ok} feasible candidates; next best "
            f"{other.cloud}:{other.region} {other.instance_type} "
            f"costs +{_money(delta(m, c.objective))}{per}")


def _unpriced_commitment(o) -> str:
    """For an offering whose recorded purchase options sell a commitment the catalog has no
    price for: say so (the row's notes in the catalog file name the sources read)."""
    if o.purchase_options_source and o.sells(COMMITMENT):
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
        how = (f"{term} commitment" if o.price(RESERVED, term) is not None else
               f"capacity reservation at the on-demand rate: no {term} commitment price in the catalog"
               + _unpriced_commitment(o) if term != "none"
               else "capacity reservation at the on-demand rate: no commitment")
        text = (f"Priority {p} > {rules.reserved_above_priority} needs guaranteed capacity: all "
                f"{n} nodes reserved ({how}).")
    elif basis == "break_even_reserved":
        text = (f"Reserved ({term}) pays: {h:g} h/month is {u:.0%} utilization, above the "
                f"{be:.0%} break-even (commitment rate / on-demand rate).")
    elif basis == "break_even_on_demand" and o.price(RESERVED, term) is None:
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
    elif basis == SPOT:
        saving = (f"{_money(delta(c.compared_usd, c.objective))}/month less than "
                  f"{'on-demand/reserved' if c.compared_usd is not None else 'any other model'}"
                  if c.compared_usd is not None else "the least")
        text = (f"Spot: checkpointable work (every {spec.checkpoint_minutes} min) at priority {p} "
                f"< {rules.spot_below_priority}; including {_money(c.costs.spot_rework_usd)}/month "
                f"expected rework it costs {saving}.")
    elif basis == "spot_overridden":
        text = (f"Not spot: priority {p} work defaults to spot, but with expected rework spot "
                f"would cost {_money(c.compared_usd)}/month, more than "
                f"{LABELS[RESERVED] if c.purchase.reserved else LABELS[ON_DEMAND]}.")
    elif basis == "spot_forced":
        text = "Spot on every node, as the forced template says."
    else:
        text = f"Purchase: {c.purchase.as_dict()}."
    if c.basis.endswith("+cache"):
        text += " The cache node runs on-demand so that an interruption never loses staged data."
    if rules.commitment_term == "auto":
        text += " " + _term_text(c, rules)
    return text


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
        if b.purchase == RESERVED:
            why = (f"{u:.0%} utilization beats the {be:.0%} break-even" if be is not None
                   and u > be else "guaranteed capacity" if b.part == "baseline"
                   and spec.priority > rules.reserved_above_priority else "cheapest")
        elif b.purchase == ON_DEMAND:
            why = (f"{u:.0%} utilization is below the {be:.0%} break-even" if be is not None
                   and u <= be else "no commitment price" if rates.reserved is None
                   else "cheapest")
            if spec.priority > rules.reserved_above_priority and b.part == "burst":
                why += "; burst of guaranteed work is never spot"
        else:
            why = "cheapest with the expected rework"
        parts.append(f"{what}: {LABELS[b.purchase]} ({why})")
    steps = ", ".join(f"{st.gpus} GPUs for {st.hours_per_month:g} h" for st in spec.steps)
    text = f"Demand profile ({steps} a month): " + "; ".join(parts) + "."
    if c.basis == "spot_overridden":
        text += (f" Spot on the burst would cost {_money(c.compared_usd)}/month with expected "
                 "rework, more.")
    elif c.basis == SPOT and c.compared_usd is not None:
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
            "dataset": spec.dataset or "-", "dataset_tb": num(ds.size_tb) if ds else "0",
            "checkpoint_minutes": spec.checkpoint_minutes or 0, "gpu": c.offering.gpu}
    why = t.rationale.format(**vals) if t.rationale else t.description
    how = f"forced by {spec.config_path}.template" if spec.template else "chosen by its rule"
    return f"Template {t.name} ({how}): {why}"


def _unsold_text(o: Offering) -> str:
    """The purchase models the offering is not sold with (catalog purchase options), if any."""
    why = o.unavailable(ON_DEMAND, SPOT, RESERVED)
    return f" Purchase options: {why}." if why else ""


def _zone_text(c: Candidate, zone: str) -> str:
    return _zone_choice_text(c, zone) + _local_zone_text(c.offering)


def _zone_choice_text(c: Candidate, zone: str) -> str:
    o = c.offering
    spot_zones = [z for z, _ in o.zone_spot_usd if z in o.regular_zones]
    if c.purchase is not None and c.purchase.spot and len(spot_zones) > 1:
        return (f"Zone {zone}: the cheapest spot zone of {len(spot_zones)} "
                f"({o.spot_in(zone):.4f} $/node-hour).")
    if o.zones:
        return f"Zone {zone}: offers {o.instance_type} ({plural(len(o.regular_zones), 'zone')} of {o.region} {plural(len(o.regular_zones), 'does', number=False)})."
    return f"Zone {zone}: by naming convention (the catalog records no zones)."


def _local_zone_text(o: Offering) -> str:
    """What the offering's AWS Local Zones are to this stack (off by default, and why)."""
    if not o.local_zones:
        return ""
    if o.local_zones_allowed:
        return (f" Local Zones {', '.join(o.local_zones)} are candidates "
                f"(gpulease:clouds.aws.local_zones lists {o.region}).")
    return (f" Local Zones {', '.join(o.local_zones)} not used: gpulease:clouds.aws.local_zones "
            f"does not list {o.region} (off by default: a Local Zone is a metro extension with "
            "a smaller service set and capacity, opted into per account).")


def alternatives(spec: ClusterSpec, chosen: Candidate, zone: str, q: Quotes, order, col,
                 rules: PolicyRules, ctx: Context,
                 quota_users: Optional[dict]) -> tuple[Alternative, ...]:
    """What the cluster could have run on and why not, cheapest first: other candidates, the
    chosen offering on the purchase models the rules or the math ruled out, and its spot in
    its other zones (``zone``: the one it lands in); the first ``max_alternatives``."""
    alts = (_other_candidates(spec, chosen, q, order, col, rules, ctx, quota_users)
            + _variants(spec, chosen, zone, rules, ctx))
    alts.sort(key=lambda t: (t[0], t[1].cloud, t[1].region, t[1].instance_type, t[1].zone or ""))
    keep = [a for _, a in alts[:rules.max_alternatives]]
    # The runner-up the rationale names ("next best ...") is always listed, even when cheaper
    # candidates that rules exclude fill the first places.
    runner_up = next((a for _, a in alts if a.rejected_because.startswith("cost")), None)
    if runner_up is not None and runner_up not in keep and rules.max_alternatives > 0:
        keep[-1:] = [runner_up]
    return tuple(keep)


def _other_candidates(spec: ClusterSpec, chosen: Candidate, q: Quotes, order, col,
                      rules: PolicyRules, ctx: Context,
                      quota_users: Optional[dict]) -> list[tuple[tuple, Alternative]]:
    """The other offerings of the cluster's GPU as (sort key, alternative). ``quota_users``:
    who holds each shared quota, when the quotas displaced the cluster (else None)."""
    base = chosen.objective
    per = (" for the work item" if chosen.window is not None
           else "/month over the horizon" if rules.commitment_term == "auto" else "/month")
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
            why = q.rejection(spec, j, ctx)
        elif quota_users is not None and m < base:
            users = ", ".join(n for n in quota_users.get((o.cloud, o.region), [])
                              if n != spec.name)
            qg = ctx.stack.clouds[o.cloud].quota_gpus.get(o.region)
            why = (f"quota (shared {o.cloud}:{o.region} quota of {qg} GPUs "
                   f"goes to {users or 'other clusters'})")
        else:
            why = f"cost (+{_money(delta(m, base))}{per})"
        purchase = (PurchaseMix(counts[0][j], counts[1][j], counts[2][j])
                    if m is not None else _NO_PURCHASE)
        alts.append(((m is None, m or 0.0), Alternative(
            o.cloud, o.region, o.instance_type, purchase, None if m is None else monthly[j],
            why)))
    return alts


def _variants(spec: ClusterSpec, chosen: Candidate, zone: str, rules: PolicyRules,
              ctx: Context) -> list[tuple[tuple, Alternative]]:
    """The chosen offering with the purchase models the rules or the math ruled out (every
    node on one model, each node keeping the hours of its demand step), and its spot in its
    other zones (alternatives that differ only by zone), as (sort key, alternative)."""
    alts: list[tuple[tuple, Alternative]] = []
    o, n = chosen.offering, chosen.nodes
    k = ctx.inputs_of(spec, chosen)
    rates = k.rates
    steps = ctx.node_steps(spec, o.gpus_per_node)
    for model in (SPOT, ON_DEMAND, RESERVED):
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
            _variant_reason(model, spec, rules, delta(cost, chosen.monthly_usd), chosen))))
    if chosen.purchase.spot and len(o.zone_spot_usd) > 1:
        blocks = tuple((n, st.hours_per_month, m) for st, _, n, m in chosen.layout)
        for z, usd in o.zone_spot_usd:
            if z == zone or z not in o.regular_zones:
                continue
            zk = k._replace(rates=k.rates._replace(spot=usd))
            cost = blend_costs(blocks, zk)[0].monthly_usd
            alts.append(((False, cost), Alternative(
                o.cloud, o.region, o.instance_type, chosen.purchase, cost,
                f"zone (spot in {z} costs {usd:.4f}/h vs {o.spot_in(zone):.4f}/h in {zone}: "
                f"+{_money(delta(cost, chosen.monthly_usd))}/month)", zone=z)))
    return alts


def _variant_reason(model: str, spec: ClusterSpec, rules: PolicyRules, delta: float,
                    chosen: Candidate) -> str:
    thr, sb = rules.reserved_above_priority, rules.spot_below_priority
    if model == SPOT:
        if not spec.interruptible:
            return f"not interruptible (no {spec.config_path}.checkpoint_minutes)"
        if spec.priority > thr:
            return f"priority {spec.priority} > {thr} needs guaranteed capacity"
        if spec.priority >= sb:
            return f"priority {spec.priority} >= {sb}: spot only below {sb}"
    if model == ON_DEMAND and spec.priority > thr:
        return f"priority {spec.priority} > {thr} needs guaranteed capacity"
    if delta < 0:
        return f"template {chosen.template} keeps one cache node on-demand"
    return f"cost (+{_money(delta)}/month)"


# ---- a window ----------------------------------------------------------------------------------
def window_rationale(spec: ClusterSpec, c: Candidate, wd: WindowDecision, n_ok: int, nxt,
                     rules: PolicyRules, ctx: Context) -> str:
    """Why the cluster's work item runs where and how it does (docs/policy.md, "Windows")."""
    # Imported here for speed (as the two below): window pricing loads only for a stack with a
    # window.
    from gpulease.policy import window_choice as WC

    o = c.offering
    return (f"{_where(c)} ({c.nodes} x {o.gpus_per_node} {o.gpu}) {_rank_text(c, n_ok, nxt)}. "
            f"{WC.rationale(spec, wd, rules)} {_template_text(spec, c, ctx.stack)}")


def window_alternatives(spec: ClusterSpec, c: Candidate, wd: WindowDecision, q: Quotes, order,
                        col, rules: PolicyRules, ctx: Context,
                        quota_users: Optional[dict]) -> tuple[Alternative, ...]:
    """The chosen offering's other window models (up to three even past
    ``max_alternatives``), then the other candidates."""
    from gpulease.policy import window_choice as WC

    alts = _other_candidates(spec, c, q, order, col, rules, ctx, quota_users)
    alts.sort(key=lambda t: (t[0], t[1].cloud, t[1].region, t[1].instance_type))
    others = [a for _, a in alts[:rules.max_alternatives]]
    extra = [a for _, a in sorted(WC.alternatives(spec, wd, c.offering, rules),
                                  key=lambda t: t[0])]
    keep = (extra + others)[:max(rules.max_alternatives, len(extra[:3]))] \
        if rules.max_alternatives else []
    return tuple(keep)
