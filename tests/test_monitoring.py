"""Monitoring artifacts: Prometheus rules pass `promtool check rules` (and a rule unit test
with `promtool test rules`), the Grafana dashboard round-trips through Grafana's own schema
types (grafana-foundation-sdk)."""
from __future__ import annotations

import json
import subprocess

import jinja2
import pytest
import yaml

from infra.catalog import parse_catalog
from infra.model import (ClusterDecision, ClusterSpec, CostBreakdown, EnvironmentDecision,
                         PurchaseMix, StackSpec, StorageDecision, StorageSpec, TierShare)
from infra.monitoring import (DASHBOARD_FILE, RULES_FILE, const_series, monitoring_variables,
                              promql_string, render_monitoring)
from tests.tools import require_tool

# Test fixture catalog: synthetic figures, used only to check the rendering arithmetic.
CATALOG = parse_catalog({
    "format": "gpulease-catalog/1", "version": "test-1", "as_of": "2026-01-01",
    "offerings": [
        {"cloud": "aws", "region": "us-east-1", "instance_type": "g6.12xlarge", "gpu": "L4",
         "gpus_per_node": 4, "gpu_memory_gb": 24, "vcpus": 48, "memory_gb": 192,
         "network_gbps": 40, "rdma": "none", "on_demand_usd": 4.0, "spot_usd": 1.6,
         "commit_1y_usd": 2.8, "commit_3y_usd": 2.0},
        {"cloud": "gcp", "region": "europe-west4", "instance_type": "a3-highgpu-8g",
         "gpu": "H100", "gpus_per_node": 8, "gpu_memory_gb": 80, "vcpus": 208,
         "memory_gb": 1872, "network_gbps": 1000, "rdma": "gpudirect-tcpx",
         "on_demand_usd": 80.0, "spot_usd": 30.0, "commit_1y_usd": 55.0,
         "commit_3y_usd": 40.0}],
})


def make_env(environment: str = "prod", budget: float = 90000.0) -> EnvironmentDecision:
    aws_o, gcp_o = CATALOG.offerings
    stack = StackSpec(stack=environment, environment=environment, owner="ml", cost_center="cc",
                      budget_monthly_usd=budget, clouds={}, storage=(), clusters=())
    sandbox = ClusterDecision(
        spec=ClusterSpec(name="sandbox", gpu="L4", gpus=8, hours_per_month=160, priority=3,
                         checkpoint_minutes=30, idle_minutes=30),
        offering=aws_o, nodes=2, purchase=PurchaseMix(spot=2), network="none",
        template="spot-burst", hourly_usd=3.2,
        costs=CostBreakdown(spot_usd=512.0, spot_rework_usd=12.0), rationale="r")
    train = ClusterDecision(
        spec=ClusterSpec(name="train-h100", gpu="H100", gpus=32, hours_per_month=730,
                         priority=9, idle_minutes=120, index=1),
        offering=gcp_o, nodes=4, purchase=PurchaseMix(reserved=3, on_demand=1),
        network="gpudirect-tcpx", template="reserved-baseline", hourly_usd=245.0,
        costs=CostBreakdown(reserved_usd=120450.0, on_demand_usd=58400.0,
                            communication_usd=100.0), rationale="r")
    storage = StorageDecision(
        spec=StorageSpec(name="lake", size_tb=10, home_cloud="gcp", home_region="europe-west4"),
        cloud="gcp", region="europe-west4",
        tiers=(TierShare("STANDARD", 0, 30, 0.5, 0.02, 100.0),
               TierShare("NEARLINE", 30, None, 0.5, 0.01, 50.0)))
    return EnvironmentDecision(stack=stack, clusters=(sandbox, train), storage=(storage,),
                               catalog_version=CATALOG.version, catalog_as_of=CATALOG.as_of)


def _promtool() -> str:
    return require_tool("promtool")


def test_variables_come_from_the_decision():
    v = monitoring_variables(make_env())
    sandbox, train = v["clusters"]
    assert sandbox["node_hourly_usd"] == pytest.approx(1.6)
    assert sandbox["planned_by_model"] == {"spot": 524.0}
    assert train["planned_by_model"] == {"reserved": 120450.0, "on_demand": 58400.0}
    assert v["fixed_monthly_usd"] == 150.0
    assert v["label_cluster"] == "gpulease_cluster"
    assert v["label_environment"] == "gpulease_environment"


def test_rules_pass_promtool_check(tmp_path):
    files = render_monitoring(make_env())
    path = tmp_path / RULES_FILE
    path.write_text(files[RULES_FILE])
    proc = subprocess.run([_promtool(), "check", "rules", str(path)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout
    doc = yaml.safe_load(files[RULES_FILE])
    alerts = [r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r]
    assert alerts.count("GpuIdle") == 2 and "GpuSpendOverBudget" in alerts
    idle = [r for g in doc["groups"] for r in g["rules"] if r.get("alert") == "GpuIdle"]
    assert "[30m]" in idle[0]["expr"] and "[120m]" in idle[1]["expr"]


def test_rules_fire_as_intended_under_promtool_test(tmp_path):
    """promtool's rule unit test: 2 sandbox nodes busy then idle -> spend and GpuIdle alerts."""
    env = make_env(environment="dev", budget=500.0)
    (tmp_path / RULES_FILE).write_text(render_monitoring(env)[RULES_FILE])
    series = 'DCGM_FI_DEV_GPU_UTIL{gpulease_environment="dev",gpulease_cluster="sandbox",instance="%s",gpu="0"}'
    test = {
        "rule_files": [RULES_FILE],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": series % "n1", "values": "90x10 0x80"},
                {"series": series % "n2", "values": "90x90"},
            ],
            "promql_expr_test": [{
                "expr": "gpulease:cluster_spend_usd_per_hour",
                "eval_time": "5m",
                "exp_samples": [{"labels": 'gpulease:cluster_spend_usd_per_hour{'
                                           'gpulease_cluster="sandbox",gpulease_environment="dev"}',
                                 "value": 3.2}],
            }],
            "alert_rule_test": [
                {"eval_time": "80m", "alertname": "GpuIdle", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "gpulease_cluster": "sandbox",
                                   "gpulease_environment": "dev", "instance": "n1"},
                    "exp_annotations": {
                        "summary": "GPUs of sandbox idle for 30 minutes",
                        "description": "Every GPU on n1 stayed under 5.0% for 30 minutes "
                                       "(g6.12xlarge on aws us-east-1, ~$1.60/hour per node). "
                                       "The gpulease reaper stops idle clusters after its grace "
                                       "period."}}]},
                {"eval_time": "10m", "alertname": "GpuIdle", "exp_alerts": []},
                # 2 nodes x $1.60 x 730 h + $150 storage = $2,486 > $500 budget after 30 m.
                {"eval_time": "40m", "alertname": "GpuSpendOverBudget", "exp_alerts": [{
                    "exp_labels": {"severity": "critical", "gpulease_environment": "dev"},
                    "exp_annotations": {
                        "summary": "GPU spend in dev is on course to exceed its monthly budget",
                        "description": "Projected $2486 a month against a budget of $500. "
                                       "Run `gpulease reap` or scale clusters down."}}]},
            ],
        }],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    proc = subprocess.run([_promtool(), "test", "rules", "test.yml"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promql_strings_are_quoted():
    assert promql_string('x"y') == '"x\\"y"'
    assert const_series(1.5) == "vector(1.5)"


def test_dashboard_round_trips_through_grafana_schema_types():
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    text = render_monitoring(make_env())[DASHBOARD_FILE]
    data = json.loads(text)
    model = Dashboard.from_json(data)
    again = json.loads(json.dumps(model, cls=JSONEncoder))
    # Every key we emit is a field of Grafana's dashboard schema: nothing is dropped.
    assert _keys(data) <= _keys(again) | {"current"}, _keys(data) - _keys(again)
    assert again["schemaVersion"] == 39 and again["title"].startswith("gpulease prod")
    types = {p["type"] for p in data["panels"]}
    assert {"timeseries", "piechart", "stat"} <= types
    exprs = " ".join(t["expr"] for p in data["panels"] for t in p["targets"])
    assert "gpulease:cluster_spend_usd_per_hour" in exprs
    assert "sum by (purchase_model)" in exprs and "DCGM_FI_DEV_GPU_UTIL" in exprs
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids))
    for p in data["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]


def _keys(obj, prefix="") -> set:
    out = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            if prefix.endswith("options") or k in ("options", "fieldConfig"):
                # panel options are plugin-specific (free-form in the dashboard schema)
                out.add(prefix + k)
                continue
            out.add(prefix + k)
            out |= _keys(v, prefix + k + ".")
    elif isinstance(obj, list):
        for v in obj:
            out |= _keys(v, prefix)
    return out


def test_templates_fail_loudly_on_a_missing_variable():
    from infra.monitoring import _env

    with pytest.raises(jinja2.UndefinedError):
        _env().get_template("prometheus-rules.yml.j2").render(environment="x")


def test_no_cluster_environment_still_renders_valid_rules(tmp_path):
    env = make_env()
    empty = EnvironmentDecision(stack=env.stack, clusters=(), storage=(),
                                catalog_version="v", catalog_as_of="d")
    files = render_monitoring(empty)
    (tmp_path / "r.yml").write_text(files[RULES_FILE])
    proc = subprocess.run([_promtool(), "check", "rules", str(tmp_path / "r.yml")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    json.loads(files[DASHBOARD_FILE])
