"""Render the monitoring artifacts (Prometheus alert rules, Grafana dashboard) of an environment.

Everything priced comes from the policy decision (and so from the catalog): the blended hourly
price per node of each cluster, its planned monthly cost per purchase model, the budget.
Templates live in ``templates/monitoring/`` and render with StrictUndefined.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import jinja2

from gpulease import money
from gpulease import tags
from gpulease.errors import ConfigError, Finding
from gpulease.guardrails.rules import HEADROOM_WARN_SHARE
from gpulease.model import HOURS_PER_MONTH, EnvironmentDecision
from gpulease.purchase import NODE_MODELS, SPOT
from gpulease.datafiles import templates

TEMPLATE_DIR = templates("monitoring")
RULES_FILE = "gpulease-alerts.rules.yml"
DASHBOARD_FILE = "gpulease-dashboard.json"

#: default GPU utilization metric: NVIDIA dcgm-exporter's per-GPU utilization (0-100).
DEFAULT_GPU_METRIC = "DCGM_FI_DEV_GPU_UTIL"
#: One dashboard for every environment: its `environment` variable picks the stack's series,
#: defaulting to the environment it was rendered from.
DASHBOARD_UID = "gpulease"


def prom_label(key: str) -> str:
    """Prometheus label name for a gpulease tag key (relabelled from the cloud's tags/labels:
    Prometheus label names allow only [a-zA-Z0-9_])."""
    return key.replace("-", "_")


def promql_string(value: Any) -> str:
    """A PromQL double-quoted string literal."""
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def const_series(value: float) -> str:
    """PromQL for a constant (a price from the decision); labels go on the recording rule."""
    return f"vector({float(value):.10g})"  # cents survive on a $1M budget


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)
    env.filters["promql"] = promql_string
    env.globals["const"] = const_series
    return env


def flex_node_hourly_usd(c) -> float:
    """$/hour of one node beyond the cluster's reservation: the planned on-demand/spot nodes'
    blended catalog rate (spot: in the zone the cluster lands in), or the on-demand rate when
    every planned node is reserved (an extra node is not covered by the commitment)."""
    o = c.offering
    od, spot = c.purchase.on_demand, c.purchase.spot
    priced = [(n, rate) for n, rate in ((od, o.on_demand_usd), (spot, o.cheapest_spot_usd))
              if n and rate]
    if priced:
        return sum(n * rate for n, rate in priced) / sum(n for n, _ in priced)
    if o.on_demand_usd:
        return float(o.on_demand_usd)
    return c.hourly_usd / c.nodes if c.nodes else 0.0


def monitoring_variables(env: EnvironmentDecision, *, gpu_metric: str = DEFAULT_GPU_METRIC,
                         idle_threshold_pct: Optional[float] = None) -> dict[str, Any]:
    """The one dict of variables both templates render from."""
    stack = env.stack
    if idle_threshold_pct is None:
        idle_threshold_pct = getattr(stack.reaper, "threshold_pct", None) or 5.0
    clusters = []
    for c in env.clusters:
        # money as the plan shows it (gpulease.money): each component converted once, then added
        planned = {m: money.json_number(c.costs.amount(f"{m}_usd") + (
                       c.costs.amount("spot_rework_usd") if m == SPOT else money.ZERO))
                   for m in NODE_MODELS
                   if getattr(c.purchase, m)}
        clusters.append({
            "name": c.name, "cloud": c.cloud, "region": c.region,
            "instance_type": c.offering.instance_type, "nodes": c.nodes,
            "node_hourly_usd": round(c.hourly_usd / c.nodes, 4) if c.nodes else 0.0,
            "planned_by_model": planned, "idle_minutes": int(c.spec.idle_minutes),
            # A reservation / commitment bills every hour of the month whether its nodes run
            # or not (costmodel: reserved_usd = R x commit rate x 730 h).
            "reserved_nodes": int(c.purchase.reserved),
            "committed_usd_per_hour": round(c.costs.reserved_usd / HOURS_PER_MONTH, 4),
            "flex_node_hourly_usd": round(flex_node_hourly_usd(c), 4),
        })
    return {
        "stack": stack.stack, "environment": stack.environment,
        "budget_monthly_usd": float(stack.budget_monthly_usd),
        "fixed_monthly_usd": money.json_number(sum((s.monthly_money for s in env.storage),
                                                   money.ZERO)),
        "catalog_version": env.catalog_version, "catalog_as_of": env.catalog_as_of,
        "clusters": clusters, "hours_per_month": HOURS_PER_MONTH,
        "warn_share": HEADROOM_WARN_SHARE, "idle_threshold_pct": float(idle_threshold_pct),
        "gpu_metric": gpu_metric,
        "label_cluster": prom_label(tags.CLUSTER),
        "label_environment": prom_label(tags.ENVIRONMENT),
        "uid": DASHBOARD_UID,
    }


def render_monitoring(env: EnvironmentDecision, *, gpu_metric: str = DEFAULT_GPU_METRIC,
                      idle_threshold_pct: Optional[float] = None) -> dict[str, str]:
    """File name -> content: the Prometheus rule file and the Grafana dashboard JSON."""
    variables = monitoring_variables(env, gpu_metric=gpu_metric,
                                     idle_threshold_pct=idle_threshold_pct)
    j = _env()
    rules = j.get_template("prometheus-rules.yml.j2").render(**variables)
    dashboard = j.get_template("grafana-dashboard.json.j2").render(**variables)
    # Normalise the dashboard (and fail here, not in Grafana, if the template broke JSON).
    dashboard = json.dumps(json.loads(dashboard), indent=2) + "\n"
    return {RULES_FILE: rules, DASHBOARD_FILE: dashboard}


def write_monitoring(env: EnvironmentDecision, directory: str | Path, **kwargs: Any) -> list[Path]:
    """Render and write both files into `directory` (created when missing). A path that is a
    file or cannot be written raises ConfigError (exit 2) naming it."""
    out = Path(directory)
    files = render_monitoring(env, **kwargs)
    if out.exists() and not out.is_dir():
        raise ConfigError([Finding("--monitoring", f"{out} is a file: give a directory, e.g. "
                                   f"--monitoring {out.parent / 'monitoring'}")])
    blocker = next((p for p in out.parents if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise ConfigError([Finding("--monitoring", f"cannot create {out}: {blocker} is a file, "
                                   "not a directory; choose another directory")])
    written = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (out / name).write_text(text, encoding="utf-8")
            written.append(out / name)
    except OSError as exc:
        raise ConfigError([Finding("--monitoring", f"cannot write into {out}: "
                                   f"{exc.strerror or exc}; choose a writable directory")]) from None
    return written
