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

from infra.costing import tags
from infra.guardrails.rules import HEADROOM_WARN_SHARE
from infra.model import HOURS_PER_MONTH, EnvironmentDecision

TEMPLATE_DIR = Path(__file__).resolve().parents[1] / "templates" / "monitoring"
RULES_FILE = "gpulease-alerts.rules.yml"
DASHBOARD_FILE = "gpulease-dashboard.json"

#: default GPU utilization metric: NVIDIA dcgm-exporter's per-GPU utilization (0-100).
DEFAULT_GPU_METRIC = "DCGM_FI_DEV_GPU_UTIL"


def prom_label(key: str) -> str:
    """Prometheus label name for a gpulease tag key (relabelled from the cloud's tags/labels:
    Prometheus label names allow only [a-zA-Z0-9_])."""
    return key.replace("-", "_")


def promql_string(value: Any) -> str:
    """A PromQL double-quoted string literal."""
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def const_series(value: float) -> str:
    """PromQL for a constant (a price from the decision); labels go on the recording rule."""
    return f"vector({float(value):.6g})"


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)
    env.filters["promql"] = promql_string
    env.globals["const"] = const_series
    return env


def monitoring_variables(env: EnvironmentDecision, *, gpu_metric: str = DEFAULT_GPU_METRIC,
                         idle_threshold_pct: Optional[float] = None) -> dict[str, Any]:
    """The one dict of variables both templates render from."""
    stack = env.stack
    if idle_threshold_pct is None:
        idle_threshold_pct = getattr(stack.reaper, "threshold_pct", None) or 5.0
    clusters = []
    for c in env.clusters:
        planned = {m: round(getattr(c.costs, f"{m}_usd") +
                            (c.costs.spot_rework_usd if m == "spot" else 0.0), 2)
                   for m in ("reserved", "on_demand", "spot")
                   if getattr(c.purchase, m)}
        clusters.append({
            "name": c.name, "cloud": c.cloud, "region": c.region,
            "instance_type": c.offering.instance_type, "nodes": c.nodes,
            "node_hourly_usd": round(c.hourly_usd / c.nodes, 4) if c.nodes else 0.0,
            "planned_by_model": planned, "idle_minutes": int(c.spec.idle_minutes),
        })
    return {
        "stack": stack.stack, "environment": stack.environment,
        "budget_monthly_usd": float(stack.budget_monthly_usd),
        "fixed_monthly_usd": round(sum(s.monthly_usd for s in env.storage), 2),
        "catalog_version": env.catalog_version, "catalog_as_of": env.catalog_as_of,
        "clusters": clusters, "hours_per_month": HOURS_PER_MONTH,
        "warn_share": HEADROOM_WARN_SHARE, "idle_threshold_pct": float(idle_threshold_pct),
        "gpu_metric": gpu_metric,
        "label_cluster": prom_label(tags.CLUSTER),
        "label_environment": prom_label(tags.ENVIRONMENT),
        "uid": f"gpulease-{tags.label_value(stack.environment)}"[:40],
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
