"""A plan as a pull-request comment (issue 36 item 2): GitHub/GitLab-flavoured markdown.

Input: the document `gpulease plan --json` prints, with ``diff`` (``--diff BASE``: the cost
delta against the base branch's plan) and ``against`` (``--against STATE``: what the next
`pulumi up` would do) when the pipeline asked for them. Order, as reviewers read it: the cost
delta first, then the breakdown per cluster (collapsed), the budget, the guardrails and what
`pulumi up` would replace or delete.

The first line is a hidden marker naming the stack (:func:`marker`): the comment commands find
their own earlier comment by it (one sticky comment per stack), never by author.
"""
from __future__ import annotations

from typing import Any, Optional

from gpulease import money

#: what a comment of gpulease starts with (followed by the stack): never shown by GitHub/GitLab.
MARKER_PREFIX = "<!-- gpulease-comment stack="
#: GitHub refuses a comment body above 65,536 characters (422 "body is too long"); GitLab's
#: limit is 1,000,000. One budget for both, with room for the truncation note.
MAX_BODY_CHARS = 65_000


def marker(stack: str) -> str:
    return f"{MARKER_PREFIX}{stack} -->"


def delta(plan: dict) -> Optional[float]:
    """The plan's monthly cost change against its ``--diff`` baseline (None: no baseline)."""
    d = plan.get("diff")
    if not isinstance(d, dict):
        return None
    return float(d.get("total", {}).get("delta_usd") or 0.0)


def _pct(value: Optional[float]) -> str:
    return "" if value is None else f" ({value:+.1f} %)"


def _esc(text: Any) -> str:
    """Table-cell text: pipes and newlines would break the row; HTML is not interpreted."""
    return (str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
            .replace("<", "&lt;").replace(">", "&gt;"))


def render(plan: dict, *, title: str = "gpulease cost estimate") -> str:
    """The comment body for ``plan`` (a `plan --json` document)."""
    stack = str(plan.get("stack", "?"))
    totals = plan.get("totals") or {}
    lines = [marker(stack), f"## {title} · stack `{_esc(stack)}`", ""]
    diff = plan.get("diff")
    monthly = totals.get("monthly_usd")
    if isinstance(diff, dict):
        t = diff.get("total") or {}
        d = float(t.get("delta_usd") or 0.0)
        word = "rises" if d > 0 else "falls" if d < 0 else "does not change"
        base = diff.get("old") or {}
        lines.append(f"**Monthly cost {word}: {money.signed(d)}{_pct(t.get('pct'))}** · "
                     f"{money.fmt(t.get('old_monthly_usd'))} → {money.fmt(t.get('new_monthly_usd'))}"
                     f" (against `{_esc(base.get('stack', 'base'))}`)")
    else:
        lines.append(f"**Monthly cost: {money.fmt(monthly)}** (no baseline: run `gpulease plan "
                     "--diff BASE` for the change)")
    lines += _one_time(plan)
    lines.append("")
    lines += _clusters(plan, diff)
    lines += _budget(plan)
    lines += _gate(plan)
    lines += _guardrails(plan)
    lines += _against(plan.get("against"))
    cat = plan.get("catalog") or {}
    lines += ["", f"<sub>estimated by gpulease from catalog {_esc(cat.get('version', '?'))} "
                  f"(as of {_esc(cat.get('as_of', '?'))}); estimates, not the bill</sub>"]
    body = "\n".join(lines) + "\n"
    if len(body) > MAX_BODY_CHARS:
        note = ("\n\n… truncated: the full plan is in the pipeline's artifacts "
                "(`gpulease plan --json`).\n")
        body = body[:MAX_BODY_CHARS - len(note)] + note
    return body


def _clusters(plan: dict, diff: Optional[dict]) -> list[str]:
    rows = []
    if isinstance(diff, dict) and diff.get("clusters"):
        head = "| cluster | before | after | change |\n|---|---:|---:|---:|"
        for c in diff["clusters"]:
            rows.append(f"| {_esc(c['cluster'])} | {money.fmt(c.get('old_monthly_usd'))} | "
                        f"{money.fmt(c.get('new_monthly_usd'))} | "
                        f"{money.signed(c.get('delta_usd') or 0)}{_pct(c.get('pct'))} |")
    else:
        head = ("| cluster | cloud | region | instance | nodes | purchase | $/month |\n"
                "|---|---|---|---|---:|---|---:|")
        for c in plan.get("clusters") or []:
            mix = ", ".join(f"{n} {k.replace('_', '-')}"
                            for k, n in (c.get("purchase") or {}).items() if n)
            rows.append(f"| {_esc(c.get('name'))} | {_esc(c.get('cloud'))} | "
                        f"{_esc(c.get('region'))} | {_esc(c.get('instance_type'))} | "
                        f"{c.get('nodes', '')} | {_esc(mix)} | {money.fmt(c.get('monthly_usd'))}"
                        + (f" + one-time {money.fmt(c['one_time']['usd'])}"
                           if c.get("one_time") else "") + " |")
    if not rows:
        return []
    return ["<details><summary>Per cluster</summary>", "", head, *rows, "", "</details>", ""]


def _budget(plan: dict) -> list[str]:
    b = plan.get("budget") or {}
    if "monthly_usd" not in b:
        return []
    totals = plan.get("totals") or {}
    total = totals.get("monthly_usd")
    once = totals.get("one_time_usd") or 0
    state = "**over budget**" if b.get("over") else "within budget"
    plan_text = (money.fmt(total) if not once else
                 f"{money.fmt(total)}/month + one-time {money.fmt(once)} counted whole")
    return [f"Budget: {money.fmt(b['monthly_usd'])}/month · plan {plan_text} · {state} "
            f"(headroom {money.fmt(b.get('headroom_usd'))})", ""]


def _one_time(plan: dict) -> list[str]:
    """A window's one-time purchases, with their dates: never in the monthly figure
    (docs/policy.md, "Windows: one-time money")."""
    rows = [c for c in plan.get("clusters") or [] if c.get("one_time")]
    if not rows:
        return []
    return ["", "**One-time (window purchases, not monthly):** " + "; ".join(
        f"{_esc(c.get('name'))} {money.fmt(c['one_time']['usd'])} "
        f"({_esc(c['one_time']['model'])}, {c['one_time']['from']} to "
        f"{c['one_time']['until']})" for c in rows)]


def _gate(plan: dict) -> list[str]:
    """The cost gate's verdict (the plan's ``gate`` object, gpulease:gate): one line, then
    each threshold judged and each one not judged."""
    g = plan.get("gate")
    if not isinstance(g, dict) or not (g.get("results") or g.get("not_judged")):
        return []
    head = {"block": "**blocked**", "acknowledged": "**block acknowledged** (a recorded "
            "warning)", "warn": "warning", "ok": "passed"}.get(g.get("level"), "?")
    out = [f"Cost gate: {head}", ""]
    for r in g.get("results") or []:
        out.append(f"- `{_esc(r.get('level'))}` {_esc(r.get('message', ''))}")
    for n in g.get("not_judged") or []:
        out.append(f"- `not judged` `{_esc(n.get('rule'))}`: {_esc(n.get('reason', ''))}")
    return out + [""]


def _guardrails(plan: dict) -> list[str]:
    v = plan.get("violations") or []
    if not v:
        return ["Guardrails: no violations", ""]
    out = [f"Guardrails: **{len(v)} violation(s)**", ""]
    for x in v[:20]:
        out.append(f"- `{_esc(x.get('rule', x.get('policy', '?')))}` "
                   f"{_esc(x.get('resource', x.get('urn', '')))}: {_esc(x.get('message', ''))}")
    if len(v) > 20:
        out.append(f"- … and {len(v) - 20} more")
    return out + [""]


def _against(against: Any) -> list[str]:
    if not isinstance(against, dict):
        return []
    rows = [r for r in against.get("resources", []) if r.get("action") in ("replace", "delete")]
    if not rows:
        return ["`pulumi up` would replace or delete nothing.", ""]
    out = [f"<details><summary>`pulumi up` would replace or delete {len(rows)} resource(s)"
           "</summary>", "", "| action | resource | type | cluster |", "|---|---|---|---|"]
    for r in rows[:100]:
        out.append(f"| {_esc(r['action'])} | {_esc(r.get('name'))} | `{_esc(r.get('type'))}` | "
                   f"{_esc(r.get('cluster') or '')} |")
    return out + ["", "</details>", ""]
