"""Monitoring artifacts: Prometheus rules pass `promtool check rules` (and a rule unit test
with `promtool test rules`), the Grafana dashboard round-trips through Grafana's own schema
types (grafana-foundation-sdk)."""
from __future__ import annotations

import json
import re
import subprocess

import jinja2
import pytest
import yaml

from gpulease.catalog import parse_catalog
from gpulease.model import (ClusterDecision, ClusterSpec, CostBreakdown, EnvironmentDecision,
                            PurchaseMix, StorageDecision, StorageSpec, TierShare)
from gpulease.errors import ConfigError
from gpulease.monitoring import (DASHBOARD_FILE, RULES_FILE, const_series, flex_node_hourly_usd,
                                 monitoring_variables, promql_string, render_monitoring,
                                 write_monitoring)
from tests import builders
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


def monitoring_env(environment: str = "prod", budget: float = 90000.0) -> EnvironmentDecision:
    """A sandbox on AWS spot and a reserved-baseline H100 cluster on GCP, with one dataset (the
    stack itself lists no clouds, clusters or storage: monitoring reads the decision)."""
    aws_o, gcp_o = CATALOG.offerings
    stack = builders.make_stack(environment, clouds=(), owner="ml", cost_center="cc",
                                budget=budget, source="")
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
    return builders.make_env((sandbox, train), (storage,), catalog=CATALOG, stack=stack)


def _promtool() -> str:
    return require_tool("promtool")


def test_variables_come_from_the_decision():
    v = monitoring_variables(monitoring_env())
    sandbox, train = v["clusters"]
    assert sandbox["node_hourly_usd"] == pytest.approx(1.6)
    assert sandbox["planned_by_model"] == {"spot": 524.0}
    assert train["planned_by_model"] == {"reserved": 120450.0, "on_demand": 58400.0}
    assert v["fixed_monthly_usd"] == 150.0
    assert v["label_cluster"] == "gpulease_cluster"
    assert v["label_environment"] == "gpulease_environment"


def test_rules_pass_promtool_check(tmp_path):
    files = render_monitoring(monitoring_env())
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
    env = monitoring_env(environment="dev", budget=500.0)
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
                # train-h100 has no node up, yet its 3 reserved nodes bill $120,450/730 h.
                "exp_samples": [{"labels": 'gpulease:cluster_spend_usd_per_hour{'
                                           'gpulease_cluster="sandbox",gpulease_environment="dev"}',
                                 "value": 3.2},
                                {"labels": 'gpulease:cluster_spend_usd_per_hour{'
                                           'gpulease_cluster="train-h100",'
                                           'gpulease_environment="dev"}',
                                 "value": 165.0}],
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
                # (2 nodes x $1.60 + $165 committed) x 730 h + $150 storage = $122,936 > $500.
                {"eval_time": "40m", "alertname": "GpuSpendOverBudget", "exp_alerts": [{
                    "exp_labels": {"severity": "critical", "gpulease_environment": "dev"},
                    "exp_annotations": {
                        "summary": "GPU spend in dev is on course to exceed its monthly budget",
                        "description": "Projected $122936 a month against a budget of $500. "
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
    assert const_series(455935.81) == "vector(455935.81)"  # no rounding to 6 digits


def test_dashboard_round_trips_through_grafana_schema_types():
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    text = render_monitoring(monitoring_env())[DASHBOARD_FILE]
    data = json.loads(text)
    model = Dashboard.from_json(data)
    again = json.loads(json.dumps(model, cls=JSONEncoder))
    # Every key we emit is a field of Grafana's dashboard schema: nothing is dropped.
    assert _keys(data) <= _keys(again) | {"current"}, _keys(data) - _keys(again)
    assert again["schemaVersion"] == 39
    assert again["title"] == "gpulease - GPU spend and utilization"
    types = {p["type"] for p in data["panels"]}
    assert {"timeseries", "piechart", "stat", "gauge"} <= types
    exprs = " ".join(t["expr"] for p in data["panels"] for t in p["targets"])
    assert "gpulease:cluster_spend_usd_per_hour" in exprs
    assert "sum by (purchase_model)" in exprs and "DCGM_FI_DEV_GPU_UTIL" in exprs
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids))
    boxes = []
    for p in data["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        boxes.append((g["x"], g["y"], g["x"] + g["w"], g["y"] + g["h"], p["title"]))
    for i, a in enumerate(boxes):        # no two panels overlap on the grid
        for b in boxes[i + 1:]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a[4], b[4])


def test_every_query_selects_the_environment_variable():
    data = json.loads(render_monitoring(monitoring_env(environment="prod"))[DASHBOARD_FILE])
    variables = {v["name"]: v for v in data["templating"]["list"]}
    env = variables["environment"]
    assert env["type"] == "query" and env["query"] == (
        "label_values(gpulease:environment_budget_usd_per_month, gpulease_environment)")
    assert env["current"] == {"selected": True, "text": "prod", "value": "prod"}
    assert env["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    targets = [t for p in data["panels"] for t in p["targets"]]
    assert len(targets) >= 8
    for t in targets:
        selectors = re.findall(r"\{([^}]*)\}", t["expr"])
        assert selectors, t["expr"]
        for sel in selectors:
            assert sel == 'gpulease_environment="$environment"', t["expr"]
    # no environment is hard-coded anywhere a query or title could pick it up
    for p in data["panels"]:
        assert "prod" not in json.dumps(p), p["title"]
    # the same dashboard (uid, queries) whichever stack rendered it; only the default differs
    dev = json.loads(render_monitoring(monitoring_env(environment="dev"))[DASHBOARD_FILE])
    assert dev["uid"] == data["uid"] == "gpulease"
    assert dev["panels"] == data["panels"]


def test_gpu_utilization_is_the_per_node_maximum_like_the_alert():
    files = render_monitoring(monitoring_env())
    data = json.loads(files[DASHBOARD_FILE])
    (panel,) = [p for p in data["panels"] if "utilization" in p["title"].lower()]
    (target,) = panel["targets"]
    assert target["expr"] == ('max by (gpulease_cluster, instance) '
                              '(DCGM_FI_DEV_GPU_UTIL{gpulease_environment="$environment"})')
    assert target["legendFormat"] == "{{gpulease_cluster}} {{instance}}"
    exprs = " ".join(t["expr"] for p in data["panels"] for t in p["targets"])
    assert "avg" not in exprs
    # GpuIdle judges the same thing: the max over a node's GPUs, per instance
    doc = yaml.safe_load(files[RULES_FILE])
    idle = [r for g in doc["groups"] for r in g["rules"] if r.get("alert") == "GpuIdle"]
    assert all(r["expr"].startswith("max by (gpulease_environment, gpulease_cluster, instance)")
               for r in idle)


@pytest.mark.parametrize("purchase, expected", [
    (PurchaseMix(spot=2), 30.0),                       # spot rate
    (PurchaseMix(reserved=3, on_demand=1), 80.0),      # beyond the reservation: on-demand
    (PurchaseMix(reserved=4), 80.0),                   # fully reserved: an extra node is on-demand
    (PurchaseMix(on_demand=1, spot=3), (80.0 + 3 * 30.0) / 4),
])
def test_flex_node_rate_table(purchase, expected):
    _, gcp_o = CATALOG.offerings
    c = ClusterDecision(spec=ClusterSpec(name="x", gpu="H100", gpus=8 * purchase.total,
                                         hours_per_month=730, priority=5),
                        offering=gcp_o, nodes=purchase.total, purchase=purchase, network="none",
                        template="t", hourly_usd=1.0, costs=CostBreakdown(), rationale="r")
    assert flex_node_hourly_usd(c) == pytest.approx(expected)


def test_reserved_spend_is_projected_even_at_zero_nodes(tmp_path):
    """promtool: train-h100 (3 reserved + 1 on-demand, $120,450/month committed) at 0, 2 and 5
    nodes; no spot node reports. Committed spend never drops to zero."""
    env = monitoring_env(environment="prod", budget=130000.0)
    (tmp_path / RULES_FILE).write_text(render_monitoring(env)[RULES_FILE])
    series = ('DCGM_FI_DEV_GPU_UTIL{gpulease_environment="prod",gpulease_cluster="train-h100",'
              'instance="n%d",gpu="0"}')
    # n0..n4: all absent for 20 m, then 2 nodes (under the reservation), then 5 nodes
    values = {0: "_x19 50x39", 1: "_x19 50x39", 2: "_x39 50x19", 3: "_x39 50x19",
              4: "_x39 50x19"}
    spend = 'gpulease:cluster_spend_usd_per_hour{gpulease_cluster="train-h100",' \
            'gpulease_environment="prod"}'
    projected = 'gpulease:environment_spend_usd_per_month:projected{gpulease_environment="prod"}'
    test = {
        "rule_files": [RULES_FILE], "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": series % i, "values": v} for i, v in values.items()],
            "promql_expr_test": [
                # no node at all: the reservation's $165/h; $120,450 + $150 storage a month
                {"expr": "gpulease:cluster_spend_usd_per_hour", "eval_time": "10m",
                 "exp_samples": [{"labels": spend, "value": 165.0}]},
                {"expr": "gpulease:environment_spend_usd_per_month:projected",
                 "eval_time": "10m", "exp_samples": [{"labels": projected, "value": 120600.0}]},
                # 2 nodes up, inside the 3-node reservation: nothing extra
                {"expr": "gpulease:cluster_spend_usd_per_hour", "eval_time": "30m",
                 "exp_samples": [{"labels": spend, "value": 165.0}]},
                # 5 nodes up: 2 beyond the reservation at the on-demand $80/h
                {"expr": "gpulease:cluster_spend_usd_per_hour", "eval_time": "50m",
                 "exp_samples": [{"labels": spend, "value": 325.0}]},
                {"expr": "gpulease:environment_spend_usd_per_month:projected",
                 "eval_time": "50m", "exp_samples": [{"labels": projected,
                                                      "value": 325.0 * 730 + 150.0}]},
            ],
            "alert_rule_test": [
                # $120,600 is 92.8 % of $130,000 with nothing running: near-budget fires
                {"eval_time": "65m", "alertname": "GpuSpendNearBudget", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "gpulease_environment": "prod"},
                    "exp_annotations": {
                        "summary": "GPU spend in prod passed 90% of its monthly budget"}}]},
            ],
        }],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    proc = subprocess.run([_promtool(), "test", "rules", "test.yml"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rule_files_of_two_environments_load_side_by_side(tmp_path):
    """One Prometheus, the dev and prod rule files: each environment's spend is computed once,
    from its own series, and only dev's budget alert fires."""
    (tmp_path / "dev.yml").write_text(
        render_monitoring(monitoring_env(environment="dev", budget=500.0))[RULES_FILE])
    (tmp_path / "prod.yml").write_text(
        render_monitoring(monitoring_env(environment="prod", budget=1e6))[RULES_FILE])
    series = 'DCGM_FI_DEV_GPU_UTIL{gpulease_environment="%s",gpulease_cluster="sandbox",' \
             'instance="n1",gpu="0"}'

    def spend(env, cluster):
        return ('gpulease:cluster_spend_usd_per_hour{gpulease_cluster="%s",'
                'gpulease_environment="%s"}' % (cluster, env))
    test = {
        "rule_files": ["dev.yml", "prod.yml"], "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": series % "dev", "values": "90x60"},
                             {"series": series % "prod", "values": "90x60"}],
            "promql_expr_test": [{
                "expr": "gpulease:cluster_spend_usd_per_hour", "eval_time": "10m",
                "exp_samples": [{"labels": spend(env, "sandbox"), "value": 1.6}
                                for env in ("dev", "prod")]
                + [{"labels": spend(env, "train-h100"), "value": 165.0}
                   for env in ("dev", "prod")]}],
            "alert_rule_test": [{
                # dev: ($1.60 + $165 committed) x 730 h + $150 = $121,768 > $500
                "eval_time": "45m", "alertname": "GpuSpendOverBudget", "exp_alerts": [{
                    "exp_labels": {"severity": "critical", "gpulease_environment": "dev"},
                    "exp_annotations": {
                        "summary": "GPU spend in dev is on course to exceed its monthly budget",
                        "description": "Projected $121768 a month against a budget of $500. "
                                       "Run `gpulease reap` or scale clusters down."}}]}],
        }],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    proc = subprocess.run([_promtool(), "test", "rules", "test.yml"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_shipped_stacks_render_rules_promtool_accepts(tmp_path, shipped_run):
    stack, prun = shipped_run
    files = render_monitoring(prun.result.decision)
    path = tmp_path / RULES_FILE
    path.write_text(files[RULES_FILE])
    proc = subprocess.run([_promtool(), "check", "rules", str(path)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    v = monitoring_variables(prun.result.decision)
    for c, d in zip(v["clusters"], prun.result.decision.clusters):
        assert c["committed_usd_per_hour"] == pytest.approx(d.costs.reserved_usd / 730, abs=1e-3)
        assert (c["reserved_nodes"] > 0) == (d.costs.reserved_usd > 0)


def test_write_monitoring_creates_the_directory_and_refuses_a_file(tmp_path):
    written = write_monitoring(monitoring_env(), tmp_path / "a" / "mon")
    assert sorted(p.name for p in written) == sorted([RULES_FILE, DASHBOARD_FILE])
    assert all(p.is_file() for p in written)
    blocker = tmp_path / "file"
    blocker.write_text("keep")
    with pytest.raises(ConfigError, match=r"--monitoring: .*file is a file: give a directory"):
        write_monitoring(monitoring_env(), blocker)
    with pytest.raises(ConfigError, match=r"--monitoring: cannot create .*file/sub: .*file is "
                                          r"a file, not a directory"):
        write_monitoring(monitoring_env(), blocker / "sub")
    assert blocker.read_text() == "keep"


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
    from gpulease.monitoring import _env

    with pytest.raises(jinja2.UndefinedError):
        _env().get_template("prometheus-rules.yml.j2").render(environment="x")


def test_no_cluster_environment_still_renders_valid_rules(tmp_path):
    env = monitoring_env()
    empty = EnvironmentDecision(stack=env.stack, clusters=(), storage=(),
                                catalog_version="v", catalog_as_of="d")
    files = render_monitoring(empty)
    (tmp_path / "r.yml").write_text(files[RULES_FILE])
    proc = subprocess.run([_promtool(), "check", "rules", str(tmp_path / "r.yml")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    json.loads(files[DASHBOARD_FILE])
