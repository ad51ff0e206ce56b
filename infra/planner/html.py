"""Self-contained HTML cost report of a plan (`gpulease plan --html`): inline SVG, no URLs."""
from __future__ import annotations

import html
from typing import Any

#: colour-blind-safe palette (Okabe-Ito), cycled over bars.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
           "#000000")


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _money(v: Any) -> str:
    return "-" if v is None else f"${float(v):,.2f}"


def bar_chart(title: str, items: dict, *, width: int = 560, css_id: str = "") -> str:
    """Horizontal bar chart as inline SVG: one bar per item, value labels in dollars."""
    rows = [(str(k), float(v)) for k, v in items.items() if v is not None]
    rows.sort(key=lambda kv: -kv[1])
    bar_h, gap, label_w, value_w = 22, 8, 170, 110
    height = 30 + len(rows) * (bar_h + gap) + (20 if not rows else 0)
    top = max([v for _, v in rows] + [0.0])
    plot_w = width - label_w - value_w
    out = [f'<svg id="{_e(css_id)}" class="chart" role="img" aria-label="{_e(title)}" '
           f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}">',
           f'<text x="0" y="16" class="chart-title">{_e(title)}</text>']
    if not rows:
        out.append('<text x="0" y="40" class="muted">nothing to show</text>')
    for i, (label, value) in enumerate(rows):
        y = 30 + i * (bar_h + gap)
        w = 0 if top <= 0 else max(1.0, plot_w * value / top) if value > 0 else 0
        colour = PALETTE[i % len(PALETTE)]
        out.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end" class="lbl">'
                   f'{_e(label[:28])}</text>')
        out.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" '
                   f'fill="{colour}" data-value="{value:.2f}"><title>{_e(label)}: '
                   f'{_money(value)}</title></rect>')
        out.append(f'<text x="{label_w + w + 6:.1f}" y="{y + 15}" class="val">'
                   f'{_e(_money(value))}</text>')
    out.append("</svg>")
    return "\n".join(out)


def budget_gauge(monthly: float, budget: float, *, width: int = 560) -> str:
    """Total vs budget as one bar with the budget marked."""
    scale = max(monthly, budget, 1e-9)
    plot_w = width - 20
    used = plot_w * monthly / scale
    mark = 10 + plot_w * budget / scale
    colour = "#D55E00" if monthly > budget else "#009E73"
    # keep the label inside the SVG when the budget mark sits at the right edge
    anchor = "end" if mark > width - 90 else "middle"
    return "\n".join([
        f'<svg id="budget" class="chart" role="img" aria-label="total vs budget" '
        f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="64" viewBox="0 0 {width} 64">',
        f'<rect x="10" y="14" width="{plot_w}" height="22" fill="#e8e8e8"/>',
        f'<rect x="10" y="14" width="{used:.1f}" height="22" fill="{colour}"/>',
        f'<line x1="{mark:.1f}" y1="6" x2="{mark:.1f}" y2="44" stroke="#000" stroke-width="2"/>',
        f'<text x="{mark:.1f}" y="58" text-anchor="{anchor}" class="lbl">budget '
        f'{_e(_money(budget))}</text>',
        "</svg>"])


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:24px 0 8px}
.muted{color:#666;fill:#666;font-size:13px}
.cards{display:flex;gap:16px;flex-wrap:wrap;margin:16px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:10px 16px;min-width:160px}
.card b{display:block;font-size:20px}.over{color:#D55E00}.ok{color:#009E73}
.charts{display:flex;flex-wrap:wrap;gap:24px}
.chart-title{font-weight:600;font-size:14px}.lbl{font-size:12px}.val{font-size:12px;fill:#333}
table{border-collapse:collapse;font-size:13px;margin-top:8px}
td,th{border-bottom:1px solid #eee;padding:4px 10px;text-align:left}
td.num,th.num{text-align:right}
.viol-mandatory{color:#D55E00;font-weight:600}.viol-advisory{color:#8a6d00}
"""


def render_html(plan: dict) -> str:
    """The whole page: headline cards, charts by cluster / purchase model / storage tier,
    total vs budget, the clusters, top resources and guardrail violations."""
    totals = plan.get("totals") or {}
    budget = plan.get("budget") or {}
    catalog = plan.get("catalog") or {}
    monthly = float(totals.get("monthly_usd") or 0.0)
    budget_usd = float(budget.get("monthly_usd") or 0.0)
    over = bool(budget.get("over", monthly > budget_usd))
    by_cluster = totals.get("by_cluster") or _sum_by(plan.get("resources") or [], "cluster")
    by_model = totals.get("by_purchase_model") or {}
    by_tier = totals.get("by_storage_tier") or {}
    violations = plan.get("violations") or []
    stack = plan.get("stack", "?")

    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>gpulease plan — {_e(stack)}</title>",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<style>{CSS}</style></head><body>",
        f"<h1>gpulease plan — stack {_e(stack)}</h1>",
        f'<div class="muted">catalog <span id="catalog-version">{_e(catalog.get("version"))}'
        f'</span>, prices as of {_e(catalog.get("as_of"))} · estimated monthly cost from the '
        "plan's cost tags</div>",
        '<div class="cards">',
        f'<div class="card">Estimated monthly<b id="total">{_e(_money(monthly))}</b></div>',
        f'<div class="card">Per hour, all nodes up<b>{_e(_money(totals.get("hourly_usd")))}</b></div>',
        f'<div class="card">Budget<b>{_e(_money(budget_usd))}</b></div>',
        f'<div class="card">{"Over budget by" if over else "Headroom"}'
        f'<b class="{"over" if over else "ok"}" id="headroom">'
        f'{_e(_money(abs(float(budget.get("headroom_usd", budget_usd - monthly)))))}</b></div>',
        f'<div class="card">Guardrails<b class="{"over" if violations else "ok"}">'
        f'{len(violations)} violation{"s" if len(violations) != 1 else ""}</b></div>',
        "</div>",
        "<h2>Total vs budget</h2>", budget_gauge(monthly, budget_usd),
        "<h2>Cost breakdown ($/month)</h2>", '<div class="charts">',
        bar_chart("By cluster", by_cluster, css_id="by-cluster"),
        bar_chart("By purchase model", by_model, css_id="by-purchase-model"),
        bar_chart("By storage tier", by_tier, css_id="by-storage-tier"),
        "</div>",
    ]
    clusters = plan.get("clusters") or []
    if clusters:
        parts.append("<h2>Clusters</h2><table><tr><th>cluster</th><th>cloud</th><th>region</th>"
                     "<th>instance</th><th>nodes</th><th>purchase (R/OD/S)</th><th>template</th>"
                     '<th class="num">$/hour</th><th class="num">$/month</th></tr>')
        for c in clusters:
            p = c.get("purchase") or {}
            parts.append(
                f"<tr><td>{_e(c.get('name'))}</td><td>{_e(c.get('cloud'))}</td>"
                f"<td>{_e(c.get('region'))}</td><td>{_e(c.get('instance_type'))}</td>"
                f"<td>{_e(c.get('nodes'))} × {_e(c.get('gpus_per_node'))} {_e(c.get('gpu'))}</td>"
                f"<td>{_e(p.get('reserved', 0))}/{_e(p.get('on_demand', 0))}/{_e(p.get('spot', 0))}</td>"
                f"<td>{_e(c.get('template'))}</td><td class=\"num\">{_e(_money(c.get('hourly_usd')))}</td>"
                f"<td class=\"num\">{_e(_money(c.get('monthly_usd')))}</td></tr>")
        parts.append("</table>")
    resources = sorted(plan.get("resources") or [], key=lambda r: -float(r.get("monthly_usd") or 0))
    priced = [r for r in resources if float(r.get("monthly_usd") or 0) > 0]
    parts.append(f"<h2>Resources with a cost ({len(priced)} of {len(resources)})</h2>"
                 '<table><tr><th>cluster</th><th>type</th><th>name</th>'
                 '<th class="num">$/month</th></tr>')
    for r in priced:
        parts.append(f"<tr><td>{_e(r.get('cluster'))}</td><td>{_e(r.get('type'))}</td>"
                     f"<td>{_e(r.get('name'))}</td>"
                     f"<td class=\"num\">{_e(_money(r.get('monthly_usd')))}</td></tr>")
    parts.append("</table>")
    if violations:
        parts.append("<h2>Guardrail violations</h2><table><tr><th>level</th><th>policy</th>"
                     "<th>resource</th><th>message</th></tr>")
        for v in violations:
            lvl = str(v.get("level"))
            parts.append(f'<tr><td class="viol-{_e(lvl)}">{_e(lvl)}</td><td>{_e(v.get("policy"))}'
                         f"</td><td>{_e(v.get('resource') or '(stack)')}</td>"
                         f"<td>{_e(v.get('message'))}</td></tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _sum_by(resources: list, key: str) -> dict:
    out: dict = {}
    for r in resources:
        k = r.get(key) or "shared"
        out[k] = out.get(k, 0.0) + float(r.get("monthly_usd") or 0.0)
    return out
