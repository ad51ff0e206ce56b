"""Owned `kubernetes` pools in the Pulumi program (issue 32 item 4): namespace, GPU quota and a
PriorityClass per band, planned under mocks, carrying cost labels (the pool's cost is the plan's owned lines),
and checked against the Kubernetes API's own schema (gpulease/conformance/data/kubernetes.json)."""
from __future__ import annotations

import datetime as dt

import pytest
import yaml

from gpulease import money
from gpulease.conformance.check import check as conformance_check
from gpulease.conformance import kubernetes as K8S
from gpulease.owned import kubernetes as kp
from gpulease.policy.rules import PolicyRules
from gpulease.planner.plan import build_plan, run
from tests.conftest import ROOT

NS = "kubernetes:core/v1:Namespace"
QUOTA = "kubernetes:core/v1:ResourceQuota"
PC = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
NOW = dt.datetime(2026, 12, 4, tzinfo=dt.timezone.utc).timestamp()

K8S_POOL = {"name": "rack-a", "gpu": "A100-80GB", "gpus": 32, "gpus_per_node": 8,
            "site": "Frankfurt colo cage 12", "kind": "kubernetes", "kube_context": "fra-prod",
            "purchase_usd": 1_200_000, "purchased_on": "2025-01-15", "power_kw_per_node": 6.5,
            "usd_per_kwh": 0.18, "colo_usd_per_month": 4_000, "ops_usd_per_month": 6_000}
SLURM_POOL = {**K8S_POOL, "name": "rack-b", "kind": "slurm", "kube_context": None}


@pytest.fixture(scope="module")
def prun():
    values = yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())["config"]
    slurm = {k: v for k, v in SLURM_POOL.items() if v is not None}
    values["gpulease:owned"] = [K8S_POOL, slurm]
    # two idle racks cost ~$87k a month (their owned, idle lines): a budget that holds them
    values["gpulease:budget_monthly_usd"] = 100_000
    return run(values, stack="dev", now=NOW)


def _k8s(prun, type_):
    return [r for r in prun.resources if r.type == type_]


def test_kubernetes_pool_declares_namespace_quota_and_one_class_per_band(prun):
    (ns,) = _k8s(prun, NS)
    assert ns.inputs["metadata"]["name"] == "gpulease-dev-rack-a"
    (quota,) = _k8s(prun, QUOTA)
    assert quota.inputs["metadata"]["namespace"] == "gpulease-dev-rack-a"
    assert quota.inputs["spec"]["hard"] == {"requests.nvidia.com/gpu": "32"}
    classes = {r.inputs["metadata"]["name"]: r.inputs for r in _k8s(prun, PC)}
    # the default bands (docs/policy.md): spot 1-4, standard 5-8, guaranteed 9-10
    assert {n: (c["value"], c["preemptionPolicy"]) for n, c in classes.items()} == {
        "gpulease-dev-rack-a-spot": (1000, "Never"),
        "gpulease-dev-rack-a-standard": (5000, "PreemptLowerPriority"),
        "gpulease-dev-rack-a-guaranteed": (9000, "PreemptLowerPriority")}
    # every object goes through the provider bound to the pool's kubeconfig context
    (provider,) = [r for r in prun.resources if r.type == "pulumi:providers:kubernetes"]
    assert provider.inputs["context"] == "fra-prod"
    for r in [ns, quota, *_k8s(prun, PC)]:
        assert r.provider.startswith(provider.urn), r.urn


def test_slurm_pool_declares_nothing_and_the_plan_says_so(prun):
    plan = build_plan(prun, stack="dev")
    assert "owned pool rack-b (slurm): nothing to declare" in plan["owned_pools"]
    assert any(line.startswith("owned pool rack-a (kubernetes") for line in plan["owned_pools"])
    assert len(_k8s(prun, NS)) == 1    # rack-b got no namespace


def test_the_pool_is_charged_once_and_every_object_carries_its_cost_labels(prun):
    from gpulease.owned.cost import pool_cost

    (pool,) = [p for p in prun.result.decision.stack.owned if p.name == "rack-a"]
    c = pool_cost(pool, dt.date(2026, 12, 4))
    # by hand: 1.2M / 36 + 6.5 kW * 4 nodes * 730 h * 0.18 + 4000 + 6000
    assert money.usd(c.total_usd_per_month) == \
        money.usd(1_200_000 / 36 + 6.5 * 4 * 730 * 0.18 + 10_000)
    ledger = prun.result.ledger
    # the pool's money is the plan's owned lines (shares + idle line), not the namespace's:
    # charging both would count the pool twice
    assert ledger.get(NS, "owned-rack-a-namespace").monthly_usd == money.ZERO
    assert ledger.get(QUOTA, "owned-rack-a-gpu-quota").monthly_usd == money.ZERO
    plan = build_plan(prun, stack="dev")
    lines = [x for x in plan["owned"]["lines"] if x["pool"] == "rack-a"]
    assert lines and sum(money.usd(x["monthly_usd"]) for x in lines) > 0
    # at most the pool's whole cost (idle GPUs draw no power), at least its fixed part
    total = sum(money.usd(x["monthly_usd"]) for x in lines)
    assert money.usd(c.depreciation_usd_per_month + c.fixed_usd_per_month) <= total <= \
        money.usd(c.total_usd_per_month)
    for r in [*_k8s(prun, NS), *_k8s(prun, QUOTA), *_k8s(prun, PC)]:
        labels = r.inputs["metadata"]["labels"]
        assert labels["gpulease-cluster"] == "rack-a", r.urn
        assert labels["gpulease-environment"] == "dev"
        for k, v in labels.items():
            assert K8S.label_key_problem(k) is None and K8S.label_value_problem(v) is None


def test_planned_objects_pass_the_kubernetes_schema(prun):
    objs = [*_k8s(prun, NS), *_k8s(prun, QUOTA), *_k8s(prun, PC)]
    assert len(objs) == 5
    for r in objs:
        assert K8S.check_object(r.type, r.inputs) == [], r.urn
    found = [f for f in conformance_check(prun.resources) if f["type"].startswith("kubernetes")]
    assert found == []


@pytest.mark.parametrize("change,path,words", [
    (lambda o: o["metadata"].update(name="Rack_A"), "metadata.name", "DNS-1123 label"),
    (lambda o: o["metadata"].update(name="x" * 64), "metadata.name", "no more than 63"),
    (lambda o: o.update(spec={"finalizers": "kubernetes"}), "spec.finalizers", "not of type"),
    (lambda o: o.update(color="blue"), "(object)", "Additional properties"),
    (lambda o: o["metadata"].update(labels={"gpulease-owner": "-bad-"}),
     "metadata.labels.gpulease-owner", "start and end with an alphanumeric"),
])
def test_a_bad_namespace_fails_the_schema(prun, change, path, words):
    (ns,) = _k8s(prun, NS)
    obj = yaml.safe_load(yaml.safe_dump(ns.inputs))
    change(obj)
    problems = K8S.check_object(NS, obj)
    assert any(p == path and words in m for p, m in problems), problems


def test_bad_priority_class_and_quota_fail():
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
          "metadata": {"name": "system-gpus"}, "value": 2_000_000_000,
          "preemptionPolicy": "Sometimes"}
    paths = {p for p, _ in K8S.check_object(PC, pc)}
    assert paths == {"value", "metadata.name", "preemptionPolicy"}
    assert ("value", "Required value") in K8S.check_object(PC, {**pc, "value": None,
                                                               "metadata": {"name": "ok"},
                                                               "preemptionPolicy": "Never"})
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
             "spec": {"hard": {"nvidia.com/gpu": "8", "requests.nvidia.com/gpu": "8",
                               "cpu": "10"}}}
    assert [p for p, _ in K8S.check_object(QUOTA, quota)] == ["spec.hard.nvidia.com/gpu"]


def test_bands_follow_the_policy_rules():
    assert [(b.name, b.low, b.high) for b in kp.bands(PolicyRules())] == [
        ("spot", 1, 4), ("standard", 5, 8), ("guaranteed", 9, 10)]
    rules = PolicyRules(spot_below_priority=1, reserved_above_priority=10)
    assert [(b.name, b.low, b.high) for b in kp.bands(rules)] == [("standard", 1, 10)]
    for b in kp.bands(PolicyRules()):
        assert 0 < b.value <= K8S.HIGHEST_USER_PRIORITY


def test_schema_data_names_its_source():
    d = K8S.data()
    assert d["kubernetes"] == "v1.37.0" and "swagger.json" in d["source"]
    assert set(d["roots"]) <= set(d["definitions"])
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in d["definitions"]
