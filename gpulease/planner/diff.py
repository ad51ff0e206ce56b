"""Cost diff between two plan documents (`gpulease plan --diff`), like a cost diff on a PR.

The diff document lists every added, removed or re-priced resource; what the text shows by
default (only rows that move money) is chosen here too, and drawn by gpulease.cli.plan.
Resources are matched by URN with the stack segment normalised, so ``staging`` and ``prod``
plans (or a saved plan and today's) compare resource by resource.
"""
from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any, Optional

from gpulease import money
from gpulease.errors import ConfigError, Finding
from gpulease.guardrails.gate import whole_change

#: cost changes smaller than this (USD/month) are not changes: amounts are whole cents
#: (gpulease.money), so a change is at least a cent; half a cent also holds for JSON floats.
EPSILON_USD = money.CENT / 2


def resource_key(urn: str) -> str:
    """``urn:pulumi:<stack>::<project>::<type>::<name>`` -> the same with the stack as ``*``."""
    parts = urn.split("::")
    head = parts[0].split(":")
    if len(head) >= 3 and head[0] == "urn" and head[1] == "pulumi":
        parts[0] = ":".join(head[:2] + ["*"])
    return "::".join(parts)


def _pct(old: Decimal, delta: Decimal) -> Optional[float]:
    if abs(delta) < EPSILON_USD:
        return 0.0
    if abs(old) < EPSILON_USD:
        return None  # from nothing: an increase no percentage describes
    return round(float(delta / old) * 100.0, 2)


def _check(plan: Any, which: str) -> None:
    if not isinstance(plan, dict) or not isinstance(plan.get("resources"), list):
        raise ConfigError([Finding("--diff", f"the {which} plan is not a `gpulease plan --json` "
                                   "document (no \"resources\" list): save one with "
                                   "`gpulease plan --stack NAME --json > plan.json`")])


def _amount(r: Optional[dict]) -> Decimal:
    """A resource's monthly amount as money (``gpulease.money``; absent = 0)."""
    return money.usd((r.get("monthly_usd") or 0) if r else 0)


def _total(plan: dict) -> Decimal:
    """The plan's monthly total as the gate counts it: the sum of its resources' amounts, never
    a total the document states (a saved plan is checked by gpulease.planner.saved, whose
    totals must agree with this sum to the cent)."""
    return sum((_amount(r) for r in _rows(plan)), money.ZERO)


def owned_lines(plan: dict) -> list[dict]:
    """The plan's owned-pool lines (docs/owned.md): costs without a cloud resource, counted
    with the resources (absent in plans without owned pools)."""
    owned = plan.get("owned")
    lines = owned.get("lines") if isinstance(owned, dict) else None
    return [x for x in lines if isinstance(x, dict)] if isinstance(lines, list) else []


def _rows(plan: dict) -> list[dict]:
    """The resources, then each owned line as a row keyed ``owned:POOL:CLUSTER``."""
    return list(plan["resources"]) + [
        {"urn": f"owned:{x.get('pool')}:{x.get('cluster')}", "type": "gpulease:owned",
         "name": str(x.get("pool")), "cluster": x.get("cluster"),
         "monthly_usd": x.get("monthly_usd")} for x in owned_lines(plan)]


def _label(plan: dict) -> dict:
    return {"stack": plan.get("stack", "?"),
            "catalog_version": (plan.get("catalog") or {}).get("version"),
            "monthly_usd": money.json_number(_total(plan))}


def diff_plans(old: dict, new: dict) -> dict:
    """Per-resource, per-cluster and total monthly cost change from ``old`` to ``new``, added
    up in money (``gpulease.money``): the totals are the plans' own totals to the cent."""
    _check(old, "old")
    _check(new, "new")
    num = money.json_number
    before = {resource_key(r["urn"]): r for r in _rows(old)}
    after = {resource_key(r["urn"]): r for r in _rows(new)}
    rows: list[dict] = []
    counts = {"added": 0, "removed": 0, "changed": 0, "unchanged": 0}
    by_cluster: dict[str, list[Decimal]] = defaultdict(lambda: [money.ZERO, money.ZERO])
    for key in sorted(set(before) | set(after)):
        o, n = before.get(key), after.get(key)
        ou, nu = _amount(o), _amount(n)
        ref = n or o
        cluster = ref.get("cluster") or "shared"
        if o:
            by_cluster[o.get("cluster") or "shared"][0] += ou
        if n:
            by_cluster[cluster][1] += nu
        change = "added" if o is None else "removed" if n is None else \
            "changed" if abs(nu - ou) >= EPSILON_USD else "unchanged"
        counts[change] += 1
        if change == "unchanged":
            continue
        rows.append({"key": key, "type": ref.get("type", ""), "name": ref.get("name", ""),
                     "cluster": cluster, "change": change,
                     "old_monthly_usd": None if o is None else num(ou),
                     "new_monthly_usd": None if n is None else num(nu),
                     "delta_usd": num(nu - ou)})
    rows.sort(key=lambda r: (-abs(r["delta_usd"]), r["key"]))
    clusters = [{"cluster": c, "old_monthly_usd": num(v[0]), "new_monthly_usd": num(v[1]),
                 "delta_usd": num(v[1] - v[0]), "pct": _pct(v[0], v[1] - v[0])}
                for c, v in sorted(by_cluster.items(), key=lambda kv: (kv[0] == "shared", kv[0]))]
    old_total, new_total = _total(old), _total(new)
    return {
        "format": "gpulease-plan-diff/1",
        "old": _label(old), "new": _label(new),
        "resources": rows, "counts": counts, "clusters": clusters,
        # added/removed resources that cost nothing: listed in "resources", hidden in the text
        "zero_cost_changes": sum(1 for r in rows if not moves_money(r)),
        "total": total_change(old_total, new_total, one_time_total(old),
                              one_time_total(new)),
    }


def one_time_total(plan: dict) -> Decimal:
    """A plan's one-time window purchases (``totals.one_time_usd``; 0 when it has none)."""
    return money.usd((plan.get("totals") or {}).get("one_time_usd") or 0)


def total_change(old_total: money.Amount, new_total: money.Amount,
                 old_one_time: money.Amount = 0, new_one_time: money.Amount = 0) -> dict:
    """A diff's ``total`` object from two monthly totals and the two plans' one-time
    purchases (the CrossGuard pack builds the same object from a saved baseline and the
    stack's ``total_monthly_usd`` / ``total_one_time_usd`` outputs).

    ``delta_usd`` / ``pct`` are the monthly change; ``whole_delta_usd`` / ``whole_pct`` the
    change the cost gate judges: monthly plus one-time purchases counted whole, the budget's
    rule (docs/guardrails.md), so a Capacity Block bought in a pull request moves the gate."""
    old_total, new_total = money.usd(old_total), money.usd(new_total)
    old_once, new_once = money.usd(old_one_time), money.usd(new_one_time)
    delta = new_total - old_total
    whole = delta + new_once - old_once
    num = money.json_number
    return {"old_monthly_usd": num(old_total), "new_monthly_usd": num(new_total),
            "delta_usd": num(delta), "pct": _pct(old_total, delta),
            "old_one_time_usd": num(old_once), "new_one_time_usd": num(new_once),
            "whole_delta_usd": num(whole), "whole_pct": _pct(old_total + old_once, whole)}


def plan_total(plan: dict) -> Decimal:
    """A `plan --json` document's monthly total as the gate counts it (the sum of its
    resources)."""
    _check(plan, "baseline")
    return _total(plan)


def exceeds(diff: dict, pct: float) -> bool:
    """True when the cost rose by more than ``pct`` percent (any rise from 0): the monthly
    total plus one-time purchases counted whole (:func:`whole_change`)."""
    delta, change = whole_change(diff["total"])
    if delta < EPSILON_USD:
        return False
    return change is None or change > pct


def moves_money(row: dict) -> bool:
    """A diff row whose monthly cost changed by at least a cent (added or removed resources
    that cost nothing do not)."""
    return abs(row["delta_usd"]) >= EPSILON_USD


def shown_rows(diff: dict, *, show_all: bool = False) -> list[dict]:
    """The resource rows `plan --diff` lists: by default only those that move money."""
    return list(diff["resources"]) if show_all else [r for r in diff["resources"]
                                                     if moves_money(r)]


def shown_clusters(diff: dict, *, show_all: bool = False) -> list[dict]:
    """The per-cluster rows `plan --diff` lists: by default only clusters whose cost changed."""
    return list(diff["clusters"]) if show_all else [c for c in diff["clusters"]
                                                    if abs(c["delta_usd"]) >= EPSILON_USD]
