"""Self-contained HTML cost report of a plan (`gpulease plan --html`): jinja2 templates, inline SVG, no URLs."""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import jinja2

from gpulease import money as _money
from gpulease.errors import ConfigError, Finding
from gpulease.guardrails.rules import HEADROOM_WARN_SHARE
from gpulease.datafiles import templates
from gpulease.purchase import LABELS, NODE_MODELS, RESERVED
from gpulease.text import plural

TEMPLATE_DIR = templates("report")
PAGE_TEMPLATE = "report.html.j2"

#: colour-blind-safe palette (Okabe-Ito), cycled over the bars of a chart by rank.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
           "#000000")
#: budget state colours, kept apart from the palette so a bar never reads as a verdict.
STATUS_COLOUR = {"ok": "#1b7a3d", "warn": "#b45f06", "over": "#b3261e"}

#: chart geometry (px). A bar below the log axis' first decade still gets MIN_BAR_PX.
CHART_WIDTH = 565
VALUE_WIDTH = 130
BAR_HEIGHT = 20
BAR_STEP = 28         # bar + gap
CHART_TOP = 42        # title and subtitle above the first bar
AXIS_HEIGHT = 18      # tick labels below the last bar
#: label column: ~7.5 px per character of the longest label (12.5 px sans), within bounds.
LABEL_PX_PER_CHAR = 7.5
LABEL_WIDTH_MIN, LABEL_WIDTH_MAX = 70, 190
MIN_BAR_PX = 3.0
#: a log axis spans at most this many decades; anything smaller is drawn at MIN_BAR_PX.
MAX_DECADES = 6
#: Budget bar geometry (px).
BUDGET_WIDTH = 1100
BUDGET_TRACK_X = 10


# ---- formatting ----------------------------------------------------------------------------
#: $1,234.56 ('-' when unknown) and the charts' short labels: THE formatter (gpulease.money).
money = _money.fmt
money_short = _money.short


def percent(share: Optional[float]) -> str:
    """A share 0..1 as '93.8 %'; tiny non-zero shares as '<0.1 %' so they never read as zero."""
    if share is None:
        return "-"
    pct = 100.0 * share
    if 0 < pct < 0.05:
        return "<0.1 %"
    return f"{pct:.1f} %"


def axis_money(v: float) -> str:
    """Axis tick labels: $1, $10, $100, $1k, $10k, $100k, $1M."""
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if v >= div:
            return f"${v / div:g}{suffix}"
    return f"${v:g}"


# ---- charts (pure geometry; the templates only draw what these return) ---------------------
@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    share: float         # of the chart's total
    width: float         # px
    colour: str
    text: str            # the value label: "$1,165 · 0.2 %"


@dataclass(frozen=True)
class Tick:
    x: float             # px from the plot's left edge
    label: str


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    subtitle: str
    bars: tuple[Bar, ...]
    ticks: tuple[Tick, ...]
    width: int
    height: int
    plot_x: int
    plot_w: int
    top: int = CHART_TOP
    step: int = BAR_STEP
    bar_height: int = BAR_HEIGHT

    def bar_y(self, index: int) -> int:
        return self.top + index * self.step

    @property
    def axis_y(self) -> int:
        """Baseline of the tick labels, below the last bar."""
        return self.top + len(self.bars) * self.step + 8


def log_axis(values: Sequence[float], *, max_decades: int = MAX_DECADES) -> tuple[float, float]:
    """(lo, hi) powers of ten for a log axis over the positive values: hi is the decade at or
    above the largest; lo the decade below the smallest (one further down when the smallest
    would sit within 0.3 decade of the axis start and draw as a sliver), at most max_decades
    below hi."""
    pos = [v for v in values if v > 0]
    if not pos:
        return 1.0, 10.0
    hi_exp = math.ceil(math.log10(max(pos)) - 1e-9)
    lo_f = math.log10(min(pos))
    lo_exp = math.floor(lo_f + 1e-9)
    if lo_f - lo_exp < 0.3:
        lo_exp -= 1
    lo_exp = max(lo_exp, hi_exp - max_decades)
    if lo_exp >= hi_exp:
        lo_exp = hi_exp - 1
    return 10.0 ** lo_exp, 10.0 ** hi_exp


def log_width(value: float, lo: float, hi: float, plot_w: float) -> float:
    """Bar length on a log axis; positive values below lo still show MIN_BAR_PX, zero none."""
    if value <= 0:
        return 0.0
    frac = (math.log10(value) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
    return round(max(MIN_BAR_PX, min(1.0, frac) * plot_w), 1)


def bar_chart(css_id: str, title: str, items: Mapping[str, Optional[float]], *,
              width: int = CHART_WIDTH) -> Chart:
    """Horizontal bars on a log axis, largest first, each labelled with dollars and its share
    of the chart's total, so a $200 item beside a $400k one is a visible bar with a number."""
    rows = sorted(((str(k), float(v)) for k, v in items.items() if v is not None),
                  key=lambda kv: (-kv[1], kv[0]))
    total = sum(v for _, v in rows if v > 0)
    longest = max((len(label) for label, _ in rows), default=0)
    plot_x = int(min(LABEL_WIDTH_MAX, max(LABEL_WIDTH_MIN, 12 + LABEL_PX_PER_CHAR * longest)))
    plot_w = width - plot_x - VALUE_WIDTH
    lo, hi = log_axis([v for _, v in rows])
    bars = tuple(
        Bar(label=label, value=value, share=(value / total) if total > 0 else 0.0,
            width=log_width(value, lo, hi, plot_w), colour=PALETTE[i % len(PALETTE)],
            text=f"{money_short(value)} · {percent(value / total if total > 0 else 0.0)}")
        for i, (label, value) in enumerate(rows))
    lo_exp, hi_exp = round(math.log10(lo)), round(math.log10(hi))
    ticks = tuple(Tick(x=round(plot_w * (e - lo_exp) / (hi_exp - lo_exp), 1),
                       label=axis_money(10.0 ** e)) for e in range(lo_exp, hi_exp + 1))
    height = CHART_TOP + max(1, len(bars)) * BAR_STEP + AXIS_HEIGHT
    subtitle = (f"$/month, log scale (each gridline ×10) · total {money(total)}" if bars
                else "nothing to show")
    return Chart(id=css_id, title=title, subtitle=subtitle, bars=bars, ticks=ticks,
                 width=width, height=height, plot_x=plot_x, plot_w=plot_w)


@dataclass(frozen=True)
class BudgetState:
    """Where the plan's monthly total stands against the budget."""

    level: str           # "ok" | "warn" (from HEADROOM_WARN_SHARE) | "over" | "none"
    monthly: float
    budget: float
    share: Optional[float]   # monthly / budget
    headroom: float          # budget - monthly (negative when over)
    headline: str

    @property
    def colour(self) -> str:
        return STATUS_COLOUR.get(self.level, "#555555")


def budget_state(monthly: float, budget: float,
                 warn_share: float = HEADROOM_WARN_SHARE) -> BudgetState:
    """ok below warn_share of the budget, warn from it up to the budget, over past it (by more
    than half a cent, as the budget-cap guardrail counts)."""
    monthly, budget = float(monthly), float(budget)
    if budget <= 0:
        return BudgetState("none", monthly, budget, None, -monthly, "no budget set")
    share = monthly / budget
    headroom = float(_money.usd(budget) - _money.usd(monthly))   # to the cent, as the plan
    if monthly > budget + 0.005:
        return BudgetState("over", monthly, budget, share, headroom,
                           f"{percent(share)} of the budget: {money(-headroom)} over")
    if share >= warn_share:
        return BudgetState("warn", monthly, budget, share, headroom,
                           f"{percent(share)} of the budget used, only {money(headroom)} "
                           f"left (the report warns from {warn_share * 100:g} %)")
    return BudgetState("ok", monthly, budget, share, headroom,
                       f"{percent(share)} of the budget used, {money(headroom)} left")


@dataclass(frozen=True)
class BudgetBar:
    width: int
    track_x: int
    track_w: float
    used_w: float
    budget_x: float
    warn_x: float
    colour: str
    used_label: str
    budget_label: str
    warn_label: str


def budget_bar(state: BudgetState, *, width: int = BUDGET_WIDTH,
               warn_share: float = HEADROOM_WARN_SHARE) -> BudgetBar:
    """Linear bar (a share of one budget reads right linearly): the track is the budget, or the
    total when over it; marks at the warning share and at the budget."""
    track_w = width - 2 * BUDGET_TRACK_X
    scale = max(state.monthly, state.budget, 1e-9)
    used_w = track_w * state.monthly / scale
    if state.monthly > 0:
        used_w = max(used_w, MIN_BAR_PX)
    return BudgetBar(
        width=width, track_x=BUDGET_TRACK_X, track_w=track_w, used_w=round(used_w, 1),
        budget_x=round(BUDGET_TRACK_X + track_w * state.budget / scale, 1),
        warn_x=round(BUDGET_TRACK_X + track_w * state.budget * warn_share / scale, 1),
        colour=state.colour,
        used_label=(f"{money(state.monthly)} · {percent(state.share)} of budget"
                    if state.share is not None else money(state.monthly)),
        budget_label=f"budget {money(state.budget)}",
        warn_label=f"{warn_share * 100:g} %")


# ---- plan sections ---------------------------------------------------------------------------
MODEL_WORDS = tuple((m, LABELS[m]) for m in NODE_MODELS)


def purchase_text(purchase: Mapping[str, int], commitment_term: Optional[str] = None) -> str:
    """'8 reserved (1y)', '1 on-demand + 2 spot', 'no nodes'."""
    parts = []
    for key, word in MODEL_WORDS:
        n = int(purchase.get(key) or 0)
        if n:
            parts.append(f"{n} {word}" + (f" ({commitment_term})"
                                           if key == RESERVED and commitment_term else ""))
    return " + ".join(parts) or "no nodes"


def best_alternative(cluster: Mapping[str, Any]) -> Optional[dict]:
    """The cheapest alternative the policy turned down only because it costs more: what the
    cluster would run on next."""
    alts = [a for a in cluster.get("alternatives") or []
            if a.get("monthly_usd") is not None
            and str(a.get("rejected_because", "")).startswith("cost")]
    if not alts:
        return None
    return _alt_view(min(alts, key=lambda a: a["monthly_usd"]), cluster)


def cheaper_ruled_out(cluster: Mapping[str, Any]) -> Optional[dict]:
    """The cheapest option cheaper than the choice that a rule excluded (with the rule)."""
    chosen = cluster.get("monthly_usd")
    alts = [a for a in cluster.get("alternatives") or []
            if a.get("monthly_usd") is not None and chosen is not None
            and a["monthly_usd"] < chosen
            and not str(a.get("rejected_because", "")).startswith("cost")]
    if not alts:
        return None
    return _alt_view(min(alts, key=lambda a: a["monthly_usd"]), cluster)


def _alt_view(a: Mapping[str, Any], cluster: Mapping[str, Any]) -> dict:
    chosen = cluster.get("monthly_usd")
    delta = None if chosen is None else a["monthly_usd"] - chosen
    return {
        "where": f"{a.get('cloud')} {a.get('region')}",
        "instance_type": a.get("instance_type"),
        "purchase": purchase_text(a.get("purchase") or {}),
        "monthly": money(a["monthly_usd"]),
        "delta": None if delta is None else ("+" if delta >= 0 else "−") + money(abs(delta)),
        "reason": a.get("rejected_because", ""),
    }


def cluster_views(plan: Mapping[str, Any]) -> list[dict]:
    total = float((plan.get("totals") or {}).get("monthly_usd") or 0.0)
    out = []
    for c in plan.get("clusters") or []:
        monthly = c.get("monthly_usd")
        # the zone names its region (europe-west4-a, us-east-1a): show the most precise place
        place = [c.get("cloud"), c.get("zone") or c.get("region")]
        out.append({
            "name": c.get("name"),
            "cloud": c.get("cloud"), "region": c.get("region"), "zone": c.get("zone"),
            "where": " · ".join(str(x) for x in place if x),
            "instance_type": c.get("instance_type"),
            "nodes": f"{int(c.get('nodes') or 0)} × {c.get('gpus_per_node')} {c.get('gpu')}",
            "nodes_long": f"{plural(int(c.get('nodes') or 0), 'node')} × "
                          f"{c.get('gpus_per_node')} {c.get('gpu')}",
            "purchase": purchase_text(c.get("purchase") or {},
                                      c.get("commitment_term")
                                      if (c.get("purchase") or {}).get(RESERVED) else None),
            "template": c.get("template"), "network": c.get("network"),
            "hourly": money(c.get("hourly_usd")), "monthly": money(monthly),
            # a window's purchase, never in the monthly figure (docs/policy.md)
            "one_time": money((c.get("one_time") or {}).get("usd")) if c.get("one_time")
            else None,
            "one_time_dates": (f"{c['one_time']['from']} to {c['one_time']['until']}"
                               if c.get("one_time") else None),
            "share": percent(float(monthly) / total) if monthly is not None and total > 0
            else "-",
            "rationale": c.get("rationale") or "",
            "best_alternative": best_alternative(c),
            "cheaper_ruled_out": cheaper_ruled_out(c),
        })
    return out


def storage_views(plan: Mapping[str, Any]) -> tuple[list[dict], dict[str, float]]:
    """Rows per dataset and storage class, each naming its cloud; and $/month by
    'cloud · CLASS' (S3 STANDARD and GCS STANDARD are different prices, never summed)."""
    rows, by_class = [], {}
    for s in plan.get("storage") or []:
        cloud = str(s.get("cloud"))
        for t in s.get("tiers") or []:
            to_day = t.get("to_day")
            rows.append({
                "dataset": s.get("name"), "cloud": cloud, "region": s.get("region"),
                "size": f"{float(s.get('size_tb') or 0):g} TB",
                "storage_class": t.get("storage_class"),
                "age": f"{t.get('from_day')}–{to_day if to_day is not None else '∞'} days",
                "share": percent(t.get("share")),
                "price": f"${t.get('usd_per_gb_month')}/GB-month",
                "monthly": money(t.get("monthly_usd")),
            })
            key = f"{cloud} · {t.get('storage_class')}"
            by_class[key] = float(_money.usd(by_class.get(key, 0.0))
                                  + _money.usd(t.get("monthly_usd") or 0.0))
    return rows, by_class


def report_variables(plan: Mapping[str, Any]) -> dict[str, Any]:
    """The one dict of variables the report template renders from."""
    totals = plan.get("totals") or {}
    budget = plan.get("budget") or {}
    catalog = plan.get("catalog") or {}
    monthly = float(totals.get("monthly_usd") or 0.0)
    one_time = float(totals.get("one_time_usd") or 0.0)
    # the budget judges the month's spend: monthly + one-time window purchases whole
    state = budget_state(float(_money.usd(monthly) + _money.usd(one_time)),
                         float(budget.get("monthly_usd") or 0.0))
    violations = list(plan.get("violations") or [])
    mandatory = sum(1 for v in violations if v.get("level") == "mandatory")
    by_cluster = totals.get("by_cluster") or _sum_by(plan.get("resources") or [], "cluster")
    by_cloud = by_cloud_of(plan.get("resources") or [])
    storage_rows, by_class = storage_views(plan)
    resources = sorted(plan.get("resources") or [],
                       key=lambda r: (-float(r.get("monthly_usd") or 0), str(r.get("name"))))
    priced = [{"cluster": r.get("cluster"), "type": r.get("type"), "name": r.get("name"),
               "monthly": money(r.get("monthly_usd")),
               "share": percent(float(r.get("monthly_usd") or 0) / monthly) if monthly else "-"}
              for r in resources if float(r.get("monthly_usd") or 0) > 0]
    if mandatory:
        guard_level = "over"
    elif violations:
        guard_level = "warn"
    else:
        # "0 violations" only reads as all-clear when the budget is too.
        guard_level = "ok" if state.level in ("ok", "none") else "neutral"
    return {
        "stack": plan.get("stack", "?"), "environment": plan.get("environment"),
        "source": plan.get("source"),
        "catalog_version": catalog.get("version"), "catalog_as_of": catalog.get("as_of"),
        "prices_text": _prices_text(plan.get("prices")),
        "inventory_text": _inventory_text(plan.get("inventory")),
        "monthly": money(monthly), "hourly": money(totals.get("hourly_usd")),
        "one_time": money(one_time) if one_time else None,
        "one_time_rows": [{"cluster": c.get("name"), "usd": money(c["one_time"]["usd"]),
                           "from": c["one_time"]["from"], "until": c["one_time"]["until"]}
                          for c in plan.get("clusters") or [] if c.get("one_time")],
        "budget": state, "budget_bar": budget_bar(state), "budget_money": money(state.budget),
        "headroom_money": money(abs(state.headroom)),
        "budget_share": percent(state.share),
        "violations": violations,
        "warnings": [str(w) for w in plan.get("warnings") or []],
        "violations_text": plural(len(violations), "violation"), "guard_level": guard_level,
        "mandatory_count": mandatory,
        "chart_list": [
            bar_chart("by-cluster", "By cluster", by_cluster),
            bar_chart("by-purchase-model", "By purchase model",
                      {_model_word(k): v for k, v in
                       (totals.get("by_purchase_model") or {}).items()}),
            bar_chart("by-cloud", "By cloud", by_cloud),
            bar_chart("by-storage-class", "Storage by cloud and class", by_class),
        ],
        "clusters": cluster_views(plan),
        "storage_rows": storage_rows,
        "priced": priced, "resource_count": len(resources),
        "warn_share": f"{HEADROOM_WARN_SHARE * 100:g} %",
    }


def by_cloud_of(resources: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """$/month per cloud, from each priced resource's `cloud` (older plans: its provider,
    `aws:...`, `gcp:...`)."""
    out: dict[str, float] = {}
    for r in resources:
        usd = float(r.get("monthly_usd") or 0.0)
        if usd > 0:
            cloud = str(r.get("cloud") or str(r.get("type", "")).split(":", 1)[0] or "other")
            out[cloud] = float(_money.usd(out.get(cloud, 0.0)) + _money.usd(usd))
    return out


def _inventory_text(inventory: Any) -> Optional[str]:
    """The header's line on the inventory the plan used (None: none, or an older plan)."""
    if not isinstance(inventory, Mapping) or "generated_at" not in inventory:
        return None
    from gpulease.inventory.model import header_text

    return header_text(dict(inventory))


def _prices_text(prices: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The plan header's line on the prices it pays (their dates and estimates), or None for
    a plan document without it (older saved plans)."""
    if not prices or "count" not in prices:
        return None
    from gpulease.catalog.provenance import header_text

    return header_text(dict(prices))


def _model_word(key: str) -> str:
    return dict(MODEL_WORDS).get(key, key)


def _sum_by(resources: list, key: str) -> dict:
    out: dict = {}
    for r in resources:
        k = r.get(key) or "shared"
        out[k] = float(_money.usd(out.get(k, 0.0)) + _money.usd(r.get("monthly_usd") or 0.0))
    return out


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
                              autoescape=True, undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True)


def render_html(plan: Mapping[str, Any]) -> str:
    """The whole page: verdict, headline cards, budget bar, cost charts, clusters with their
    rationale and best alternative, storage by cloud and class, priced resources, violations,
    the program's warnings."""
    return _env().get_template(PAGE_TEMPLATE).render(**report_variables(plan))


def write_html(plan: Mapping[str, Any], path: str | Path) -> Path:
    """Render and write the report, creating missing parent directories. A path that cannot
    be written raises ConfigError (exit 2) naming it; nothing is half-written."""
    target = Path(path)
    text = render_html(plan)
    if target.is_dir():
        raise ConfigError([Finding("--html", f"{target} is a directory: give a file name, "
                                   f"e.g. --html {target / 'report.html'}")])
    blocker = next((p for p in target.parents if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise ConfigError([Finding("--html", f"cannot write {target}: {blocker} is a file, not "
                                   "a directory; choose another path")])
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise ConfigError([Finding("--html", f"cannot write {target}: "
                                   f"{exc.strerror or exc}; choose a writable path")]) from None
    return target
