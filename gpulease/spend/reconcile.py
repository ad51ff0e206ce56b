"""The plan beside the bill: per cluster and shared resource, planned / billed / effective, the
difference, and its causes (hours run, purchase model used, unit price, commitment use,
credits, untagged spend).

Pure: reads a plan document (the `gpulease plan --json` shape), a :class:`Classified` bill and
the catalog's node-hour prices per cluster; returns the `spend --json` document.
"""
from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any, Mapping, Optional

from gpulease import money, purchase, tags
from gpulease.spend import sources as S
from gpulease.spend.classify import (ADJUSTMENT, CLASSES, CREDIT, MATCHED, UNMATCHED,
                                     Classified)

FORMAT = "gpulease-spend/1"
#: a difference smaller than this share of the planned figure is not a cause (rounding of
#: fractional hours, cent rounding of unit prices).
TOLERANCE_PCT = 0.5
#: untagged resources listed by name in the JSON and the table.
TOP_UNMATCHED = 10


def planned_hours(cluster: Mapping[str, Any]) -> dict[str, float]:
    """Planned node-hours a month by node purchase model, from the plan's demand blocks."""
    out: dict = defaultdict(float)
    for part in cluster.get("parts") or ():
        for b in part.get("blocks") or ():
            out[b["purchase"]] += float(b["nodes"]) * float(b["hours_per_month"])
    return dict(out)


def planned_unit_prices(cluster: Mapping[str, Any]) -> dict[str, float]:
    """The plan's own USD per node-hour by purchase model (its cost of the model over its
    node-hours)."""
    hours = planned_hours(cluster)
    costs = cluster.get("costs") or {}
    out = {}
    for model, h in hours.items():
        usd = costs.get(f"{model}_usd")
        if h > 0 and usd:
            out[model] = float(usd) / h
    return out


def _pct(new: float, old: float) -> Optional[float]:
    return None if not old else round((new - old) / old * 100, 1)


def reconcile(plan: Mapping[str, Any], bill: Classified, *,
              catalog_prices: Mapping[str, Mapping[str, Optional[float]]] | None = None,
              source: str = "", month: Optional[str] = None) -> dict[str, Any]:
    """The `spend` document. ``catalog_prices``: cluster -> purchase model -> the catalog's
    USD per node-hour (what an unplanned model, e.g. on-demand after a spot fallback, costs)."""
    catalog_prices = catalog_prices or {}
    by_cluster = {c["name"]: c for c in plan.get("clusters", ())}
    names = list(by_cluster) + [tags.SHARED]
    planned_total = (plan.get("totals") or {}).get("by_cluster") or {}
    acc = {n: _Acc() for n in names}
    unmatched: dict = defaultdict(lambda: [Decimal(0), 0, ""])
    for line in bill.lines:
        g = line.group
        if line.cls == MATCHED:
            a = acc[line.cluster]
            a.billed += g.billed
            a.effective += g.effective
            if g.hour_unit and g.pricing:
                per_node = 1.0
                if g.hour_unit == S.GPU_HOURS:
                    per_node = float(by_cluster.get(line.cluster, {}).get("gpus_per_node") or 1)
                a.hours[g.pricing] += g.hours / per_node
                a.compute[g.pricing] += g.effective
        elif line.cls in (CREDIT, ADJUSTMENT) and line.cluster is not None:
            a = acc[line.cluster]
            a.effective += g.effective
            (a.credits if line.cls == CREDIT else a.adjustments)[0] += g.billed
        elif line.cls == UNMATCHED:
            key = g.resource_name or g.resource_id or g.cluster_tag or "(no resource id)"
            u = unmatched[key]
            u[0] += g.billed
            u[1] += g.rows
            u[2] = line.note
    clusters = []
    for name in names:
        a = acc[name]
        planned = money.usd(planned_total.get(name, 0.0))
        c = by_cluster.get(name)
        causes = _causes(c, a, catalog_prices.get(name, {})) if c is not None else []
        billed, effective = money.usd(a.billed), money.usd(a.effective)
        if name == tags.SHARED and unmatched:
            n = len(unmatched)
            usd = money.usd(sum((u[0] for u in unmatched.values()), Decimal(0)))
            causes.append({"kind": "untagged", "usd": money.json_number(usd), "resources": n,
                           "text": f"{money.fmt(usd)} on {n} resource(s) with no gpulease tag "
                                   "and not in the plan (see unmatched[]): tag them or they "
                                   "stay outside every cluster's figure"})
        clusters.append({
            "cluster": name,
            "planned_usd": money.json_number(planned),
            "billed_usd": money.json_number(billed),
            "effective_usd": money.json_number(effective),
            "diff_usd": money.json_number(effective - planned),
            "diff_pct": _pct(float(effective), float(planned)),
            "credits_usd": money.json_number(a.credits[0]),
            "adjustments_usd": money.json_number(a.adjustments[0]),
            "node_hours": {m: round(h, 3) for m, h in sorted(a.hours.items())},
            "causes": causes,
        })
    totals = apportion(bill.totals, bill.source_total) if bill.conserved else \
        {c: money.usd(bill.totals[c]) for c in CLASSES}
    prov_rows = sum(line.group.rows for line in bill.lines if line.group.provisional)
    prov_usd = money.usd(sum((line.group.billed for line in bill.lines
                              if line.group.provisional), Decimal(0)))
    top = sorted(unmatched.items(), key=lambda kv: (-abs(kv[1][0]), kv[0]))
    return {
        "format": FORMAT,
        "stack": plan.get("stack"),
        "environment": plan.get("environment"),
        "bill": {"source": source, "format": S.FORMAT_LABELS[bill.kind], "month": month,
                 "source_rows": bill.source_rows},
        "clusters": clusters,
        "unmatched_usd": money.json_number(totals[UNMATCHED]),
        "unmatched": [{"resource": k, "usd": money.json_number(v[0]), "rows": v[1],
                       "why": v[2]} for k, v in top[:TOP_UNMATCHED]],
        "total_billed_usd": money.json_number(money.usd(bill.source_total)),
        "classes_usd": {c: money.json_number(totals[c]) for c in CLASSES},
        "rows": dict(bill.rows),
        "conserved": bill.conserved,
        "provisional": {"rows": prov_rows, "usd": money.json_number(prov_usd),
                        "why": "lines younger than 48 h and corrections: the clouds still "
                               "change them" if prov_rows else ""},
        "planned_total_usd": money.json_number(money.usd(
            (plan.get("totals") or {}).get("monthly_usd", 0.0))),
    }


def apportion(exact: Mapping[str, Decimal], total: Decimal) -> dict[str, Decimal]:
    """Exact class sums rounded to cents so that they add up to the rounded total (largest
    remainders take the odd cents): the view's classes sum to its total to the cent."""
    rounded = {k: money.usd(v) for k, v in exact.items()}
    short = money.usd(total) - sum(rounded.values(), Decimal(0))
    step = money.CENT if short > 0 else -money.CENT
    order = sorted(exact, key=lambda k: (-(exact[k] - rounded[k]) * step, k))
    i = 0
    while short != 0 and order:
        k = order[i % len(order)]
        rounded[k] += step
        short -= step
        i += 1
    return rounded


class _Acc:
    def __init__(self):
        self.billed = Decimal(0)
        self.effective = Decimal(0)
        self.hours: dict = defaultdict(float)
        self.compute: dict = defaultdict(Decimal)
        self.credits = [Decimal(0)]
        self.adjustments = [Decimal(0)]


def _causes(cluster: Mapping[str, Any], a: _Acc,
            catalog: Mapping[str, Optional[float]]) -> list[dict]:
    causes = []
    plan_h = planned_hours(cluster)
    planned_total_h = sum(plan_h.values())
    billed_total_h = sum(a.hours.values())
    tol = TOLERANCE_PCT / 100
    if planned_total_h and abs(billed_total_h - planned_total_h) > tol * planned_total_h:
        pct = _pct(billed_total_h, planned_total_h)
        causes.append({"kind": "hours", "planned_node_hours": round(planned_total_h, 3),
                       "billed_node_hours": round(billed_total_h, 3), "diff_pct": pct,
                       "text": f"ran {billed_total_h:,.1f} node-hours against "
                               f"{planned_total_h:,.1f} planned ({pct:+.1f} %)"})
    models = [m for m in purchase.NODE_MODELS if plan_h.get(m) or a.hours.get(m)]
    shifts = {m: a.hours.get(m, 0.0) - plan_h.get(m, 0.0) for m in models}
    spot_short = -shifts.get(purchase.SPOT, 0.0)
    od_extra = shifts.get(purchase.ON_DEMAND, 0.0)
    if spot_short > tol * max(planned_total_h, 1) and od_extra > tol * max(planned_total_h, 1):
        moved = min(spot_short, od_extra)
        causes.append({"kind": "purchase_model", "from": purchase.SPOT,
                       "to": purchase.ON_DEMAND, "node_hours": round(moved, 3),
                       "text": f"spot fell back to on-demand: {moved:,.1f} node-hours billed "
                               f"on-demand beyond the plan's {plan_h.get(purchase.ON_DEMAND, 0):,.1f}"})
    else:
        for m in models:
            if plan_h.get(m, 0.0) == 0 and a.hours.get(m, 0.0) > 0:
                causes.append({"kind": "purchase_model", "from": None, "to": m,
                               "node_hours": round(a.hours[m], 3),
                               "text": f"{a.hours[m]:,.1f} node-hours billed "
                                       f"{purchase.label(m)}, which the plan does not use"})
    plan_price = planned_unit_prices(cluster)
    for m in models:
        h = a.hours.get(m, 0.0)
        ref = plan_price.get(m) or catalog.get(m)
        if not h or not ref:
            continue
        unit = float(a.compute[m]) / h
        if abs(unit - ref) > tol * ref:
            pct = _pct(unit, ref)
            causes.append({"kind": "unit_price", "purchase_model": m,
                           "billed_usd_per_node_hour": round(unit, 4),
                           "planned_usd_per_node_hour": round(ref, 4), "diff_pct": pct,
                           "text": f"{purchase.label(m)} cost ${unit:,.4f}/node-hour against "
                                   f"${ref:,.4f} in the catalog ({pct:+.1f} %)"})
    reserved = plan_h.get(purchase.RESERVED, 0.0)
    if reserved:
        used = a.hours.get(purchase.RESERVED, 0.0)
        pct = round(used / reserved * 100, 1)
        if abs(used - reserved) > tol * reserved:
            causes.append({"kind": "commitment_utilisation", "planned_node_hours": reserved,
                           "used_node_hours": round(used, 3), "utilisation_pct": pct,
                           "text": f"reserved capacity used {used:,.1f} of {reserved:,.1f} "
                                   f"node-hours ({pct:.1f} %)"})
    if a.credits[0]:
        usd = money.usd(a.credits[0])
        causes.append({"kind": "credits", "usd": money.json_number(usd),
                       "text": f"credits {money.fmt(usd)} (commitment discounts, promotions)"})
    if a.adjustments[0]:
        usd = money.usd(a.adjustments[0])
        causes.append({"kind": "adjustments", "usd": money.json_number(usd),
                       "text": f"corrections and adjustments {money.fmt(usd)} (provisional)"})
    return causes
