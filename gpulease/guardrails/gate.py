"""The cost gate's thresholds (``gpulease:gate``): warn / block on the monthly $ increase, the %
increase and the monthly total, judged from a plan document alone, with an acknowledgement that
turns a block into a recorded warning.

One pure function, :func:`evaluate`, judges a plan JSON (its ``totals.monthly_usd`` and, when
it has one, ``diff.total``): `gpulease plan` calls it on the plan it prints, the CrossGuard pack
(policy-pack/__main__.py) on a plan-shaped document it builds from the stack outputs and a saved
baseline plan, so CI and `pulumi preview --policy-pack` give the same verdict on the same
numbers (docs/guardrails.md "Thresholds").

A threshold is crossed by a value **more than** it (a rise of exactly the threshold passes, as
with ``--fail-on-increase``); money is compared in whole cents (``gpulease.money``), the
percentage as the diff states it (two decimals). A rise from $0 has no percentage and crosses
every %-threshold. A fall never crosses a delta threshold.
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any, Iterable, Mapping, Optional

from gpulease import money

#: what a threshold measures: the monthly $ increase, the % increase, the monthly total.
METRICS = ("delta_usd", "delta_pct", "total_usd")
#: the two kinds of threshold, mildest first.
KINDS = ("warn", "block")
#: result levels, mildest first; the gate's overall level is the worst of its results.
OK, WARN, ACKNOWLEDGED, BLOCK = "ok", "warn", "acknowledged", "block"
LEVELS = (OK, WARN, ACKNOWLEDGED, BLOCK)
#: the environment variable CI sets to the pull request's labels (comma-separated).
ACK_ENV = "GPULEASE_GATE_ACK"
#: the config key (messages name thresholds as ``gpulease:gate.block.delta_usd``).
KEY = "gpulease:gate"
#: the rule name of the flag form, ``plan --fail-on-increase PCT`` (a block on delta_pct).
FLAG_RULE = "--fail-on-increase"
#: changes below half a cent are no change (amounts are whole cents).
_EPSILON = money.CENT / 2


def parse_labels(text: Optional[str]) -> list[str]:
    """Labels from ``GPULEASE_GATE_ACK`` (or one ``--ack``): comma- or newline-separated,
    blanks dropped, surrounding spaces stripped."""
    if not text:
        return []
    return [p.strip() for p in text.replace("\n", ",").split(",") if p.strip()]


def thresholds(settings: Optional[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """``{"warn": {metric: value}, "block": {...}}`` with only the thresholds that are set."""
    out: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        got = (settings or {}).get(kind) or {}
        out[kind] = {m: float(got[m]) for m in METRICS if got.get(m) is not None}
    return out


def is_configured(settings: Optional[Mapping[str, Any]]) -> bool:
    """True when ``settings`` sets at least one threshold."""
    t = thresholds(settings)
    return any(t[k] for k in KINDS)


def whole_change(t: dict) -> tuple[float, Optional[float]]:
    """(delta, pct) of a diff's ``total`` as the gate judges it: monthly plus one-time
    purchases counted whole (a ``total`` without the one-time fields: the monthly change)."""
    if "whole_delta_usd" in t:
        return t["whole_delta_usd"], t.get("whole_pct")
    return t["delta_usd"], t.get("pct")


def _signed(value: Decimal) -> str:
    return ("+" if value > 0 else "") + money.fmt(value)


def _threshold_text(metric: str, value: float) -> str:
    return f"{value:g}%" if metric == "delta_pct" else money.fmt(value)


def _rule_name(kind: str, metric: str, flag: bool) -> str:
    return FLAG_RULE if flag else f"{KEY}.{kind}.{metric}"


def _measure(metric: str, plan: Mapping[str, Any]) -> tuple[bool, Any, str]:
    """(judged, value, what): the metric's value in ``plan`` and a phrase saying it.
    ``judged`` is False when the plan has no diff for a delta metric."""
    totals = plan.get("totals") or {}
    if metric == "total_usd":
        total = money.usd(totals.get("monthly_usd") or 0)
        once = money.usd(totals.get("one_time_usd") or 0)
        if once:   # one-time window purchases counted whole, as the budget counts them
            return True, total + once, (f"the monthly total {money.fmt(total)} plus one-time "
                                        f"purchases {money.fmt(once)} is "
                                        f"{money.fmt(total + once)}")
        return True, total, f"the monthly total is {money.fmt(total)}"
    t = (plan.get("diff") or {}).get("total")
    if not t:
        return False, None, "no baseline to compare with (plan --diff BASE)"
    old, new = money.usd(t["old_monthly_usd"]), money.usd(t["new_monthly_usd"])
    old_once = money.usd(t.get("old_one_time_usd") or 0)
    new_once = money.usd(t.get("new_one_time_usd") or 0)
    whole, pct = whole_change(t)
    delta = money.usd(whole)
    verb = "rose" if delta > 0 else "fell" if delta < 0 else "did not change"
    if old_once or new_once:
        what = (f"the cost (monthly plus one-time purchases, counted whole) {verb}"
                + (f" {_signed(delta)}" if delta else "")
                + f" (monthly {money.fmt(old)} -> {money.fmt(new)}, one-time "
                + f"{money.fmt(old_once)} -> {money.fmt(new_once)}"
                + (f", {pct:+.2f}%)" if pct is not None else ")"))
    else:
        what = (f"the monthly cost {verb}" + (f" {_signed(delta)}" if delta else "")
                + f" ({money.fmt(old)} -> {money.fmt(new)}"
                + (f", {pct:+.2f}%)" if pct is not None else ")"))
    if metric == "delta_usd":
        return True, delta, what
    if delta < _EPSILON:          # no rise: never over a %-threshold, whatever the old total
        return True, (0.0 if pct is None else float(pct)), what
    return True, (None if pct is None else float(pct)), what


def _crosses(metric: str, value: Any, threshold: float) -> bool:
    """More than the threshold (a rise from $0, whose % is None, crosses any %-threshold)."""
    if metric == "delta_pct":
        return value is None or value > threshold
    return value > money.usd(threshold)


def evaluate(settings: Optional[Mapping[str, Any]], plan: Mapping[str, Any], *,
             acks: Iterable[str] = (), fail_on_increase: Optional[float] = None) -> dict:
    """The gate's verdict on ``plan`` (a `gpulease plan --json` document, or the same shape).

    ``settings``: ``gpulease:gate`` as plain data (``warn``/``block`` thresholds,
    ``acknowledged`` labels). ``acks``: the acknowledgements passed in (pull-request labels
    from ``plan --ack`` / ``GPULEASE_GATE_ACK``); a block is acknowledged when one of them is
    listed in ``acknowledged`` (case-insensitive, as forge labels are). ``fail_on_increase``:
    the flag form, a block on ``delta_pct`` (the stricter of it and the config's wins).

    Returns ``{"level", "results": [{"level", "rule", "value", "threshold", "message"}],
    "not_judged": [{"rule", "reason"}], "thresholds", "fail_on_increase", "acknowledged_by",
    "acks_passed"}``:
    one result per metric with a threshold, judged against the strictest threshold it crosses
    (a block before a warn), or, when it crosses none, against the lowest one set."""
    limits = thresholds(settings)
    flag_pct = None if fail_on_increase is None else float(fail_on_increase)
    accepted = {str(a).casefold(): str(a) for a in (settings or {}).get("acknowledged") or ()}
    passed = [str(a) for a in acks]
    by = sorted({accepted[a.casefold()] for a in passed if a.casefold() in accepted})
    results: list[dict] = []
    not_judged: list[dict] = []
    for metric in METRICS:
        candidates: list[tuple[str, float, bool]] = []   # (kind, threshold, from the flag)
        for kind in KINDS:
            if metric in limits[kind]:
                candidates.append((kind, limits[kind][metric], False))
        if metric == "delta_pct" and flag_pct is not None:
            block = [c for c in candidates if c[0] == "block"]
            if not block or flag_pct < block[0][1]:
                candidates = [c for c in candidates if c[0] != "block"] + [("block", flag_pct,
                                                                            True)]
        if not candidates:
            continue
        judged, value, what = _measure(metric, plan)
        if not judged:
            not_judged += [{"rule": _rule_name(k, metric, f), "reason": what}
                           for k, _, f in candidates]
            continue
        crossed = [c for c in candidates if _crosses(metric, value, c[1])]
        kind, limit, flag = (max(crossed, key=lambda c: KINDS.index(c[0])) if crossed
                             else min(candidates, key=lambda c: c[1]))
        rule = _rule_name(kind, metric, flag)
        shown = _threshold_text(metric, limit)
        if not crossed:
            level, message = OK, f"{what}: within {rule} {shown}"
        elif kind == "warn":
            level, message = WARN, f"{what}: more than {rule} {shown}"
        elif by:
            level = ACKNOWLEDGED
            message = (f"{what}: more than {rule} {shown}; acknowledged by "
                       + ", ".join(repr(b) for b in by) + f" ({KEY}.acknowledged), "
                       "a recorded warning instead of a block")
        else:
            level, message = BLOCK, f"{what}: more than {rule} {shown}" + _ack_hint(
                accepted, passed)
        results.append({"level": level, "rule": rule,
                        "value": None if value is None else (
                            money.json_number(value) if isinstance(value, Decimal) else value),
                        "threshold": limit, "message": message})
    level = max((r["level"] for r in results), key=LEVELS.index, default=OK)
    return {"level": level, "results": results, "not_judged": not_judged,
            "thresholds": limits, "fail_on_increase": flag_pct,
            "acknowledged_by": by if level == ACKNOWLEDGED else [],
            "acks_passed": passed}


def _ack_hint(accepted: Mapping[str, str], passed: list[str]) -> str:
    if not accepted:
        return f" (no acknowledgement possible: {KEY}.acknowledged lists none)"
    names = ", ".join(repr(a) for a in sorted(accepted.values()))
    if passed:
        return (f" (acknowledgements passed in: {', '.join(repr(p) for p in passed)}; none is "
                f"listed in {KEY}.acknowledged: {names})")
    return f" (to acknowledge it, pass one of {names} with --ack or {ACK_ENV})"


def blocks(gate: Mapping[str, Any]) -> bool:
    """True when the gate blocks (an unacknowledged block): `gpulease plan` exits 3."""
    return gate.get("level") == BLOCK


def warnings(gate: Mapping[str, Any]) -> list[dict]:
    """The results recorded as warnings: crossed warn thresholds and acknowledged blocks."""
    return [r for r in gate.get("results", ()) if r["level"] in (WARN, ACKNOWLEDGED)]
