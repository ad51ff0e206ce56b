"""The Pulumi program under mocks, for every shipped stack: decisions, resources, cost tags."""
from __future__ import annotations

import importlib
import inspect
import json
import keyword

import pytest

from gpulease import money
from gpulease import tags
from gpulease.planner.plan import build_plan
from tests.conftest import program_run

PKG = {"aws": "pulumi_aws", "gcp": "pulumi_gcp"}


def tag_kind_from_token(token: str):
    """'tags' / 'labels' when the provider class of a type token takes that input."""
    pkg, mod, cls = token.split(":")
    if pkg not in PKG:
        return None
    sub = mod.split("/")[0]
    if keyword.iskeyword(sub):
        sub += "_"  # pulumi_aws.lambda_
    module = importlib.import_module(f"{PKG[pkg]}.{sub}" if sub != "index" else PKG[pkg])
    params = inspect.signature(getattr(module, cls)._internal_init).parameters
    kind = "tags" if pkg == "aws" else "labels"
    return kind if kind in params else None


def tag_dict(inputs: dict, kind: str) -> dict:
    v = inputs.get(kind)
    if isinstance(v, list):
        return {t["key"]: t["value"] for t in v}
    return v or {}


def test_program_declares_clusters_on_decided_clouds(shipped_run):
    stack, run = shipped_run
    env = run.result.decision
    assert env.clusters, stack
    for c in env.clusters:
        typ = f"gpulease:{c.cloud}:GpuCluster"
        comps = [r for r in run.resources if r.type == typ and r.name == c.name]
        assert comps, f"{stack}: no {typ} named {c.name}"


def test_every_taggable_resource_has_the_full_tag_set(shipped_run):
    stack, run = shipped_run
    checked = 0
    for r in run.custom:
        kind = tag_kind_from_token(r.type)
        if not kind:
            continue
        got = tag_dict(r.inputs, kind)
        required = tags.REQUIRED_AWS if kind == "tags" else tags.REQUIRED_GCP
        missing = [k for k in required if k not in got]
        assert not missing, f"{r.urn} lacks {missing}"
        checked += 1
    assert checked >= 2, f"{stack}: only {checked} taggable resources"


def test_gcp_labels_are_label_safe(shipped_run):
    import re

    stack, run = shipped_run
    for r in run.custom:
        if r.type.startswith("gcp:") and isinstance(r.inputs.get("labels"), dict):
            for k, v in r.inputs["labels"].items():
                assert re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", k), (r.urn, k)
                assert re.fullmatch(r"[a-z0-9_-]{0,63}", v), (r.urn, k, v)


def test_resource_costs_add_up_to_the_decision(shipped_run):
    stack, run = shipped_run
    env = run.result.decision
    by_cluster = run.result.ledger.by_cluster()
    # a cluster partly on an owned pool also carries its owned share (docs/owned.md)
    owned = {p.name: p.owned_money for p in env.placements}
    for c in env.clusters:
        # to the cent: each resource carries converted components (gpulease.money)
        assert by_cluster.get(c.name, money.ZERO) == \
            c.monthly_money + owned.get(c.name, money.ZERO), c.name
        assert abs(float(c.monthly_money) - c.monthly_usd) <= 0.005 * 7, c.name
    storage_total = sum(e.monthly_usd for e in run.result.ledger.entries.values()
                        if e.type.endswith(("s3/bucket:Bucket", "storage/bucket:Bucket"))
                        and e.cluster == tags.SHARED)
    assert storage_total == sum((s.monthly_money for s in env.storage), money.ZERO)


def test_monthly_cost_tag_matches_ledger(shipped_run):
    stack, run = shipped_run
    ledger = run.result.ledger
    for r in run.custom:
        kind = tag_kind_from_token(r.type)
        if not kind:
            continue
        got = tag_dict(r.inputs, kind)
        e = ledger.get(r.type, r.name)
        if kind == "tags":
            assert money.usd(got[tags.MONTHLY_USD]) == e.monthly_usd, r.urn
        else:
            assert tags.from_cents(got[tags.MONTHLY_CENTS]) == e.monthly_usd, r.urn


def test_stack_outputs_carry_costs_and_catalog(shipped_run):
    stack, run = shipped_run
    out = run.outputs
    env = run.result.decision
    assert set(out["clusters"]) == {c.name for c in env.clusters}
    assert out["catalog_version"] == run.result.catalog.version
    assert out["budget_monthly_usd"] == env.stack.budget_monthly_usd
    assert out["budget_headroom_usd"] == pytest.approx(
        out["budget_monthly_usd"] - out["total_monthly_usd"], abs=0.01)


def test_plan_json_shape(shipped_run):
    stack, run = shipped_run
    plan = build_plan(run, stack=stack)
    json.dumps(plan)  # serializable
    assert set(plan) >= {"stack", "catalog", "clusters", "storage", "resources", "totals",
                         "budget", "violations"}
    c = plan["clusters"][0]
    assert set(c) >= {"name", "cloud", "region", "instance_type", "gpu", "gpus_per_node",
                      "nodes", "purchase", "template", "network", "hourly_usd", "monthly_usd",
                      "rationale", "alternatives"}
    assert sum(c["purchase"].values()) == c["nodes"]
    r = plan["resources"][0]
    assert set(r) >= {"urn", "type", "name", "cluster", "tags", "monthly_usd", "inputs"}
    # the resources and the owned pools' lines (docs/owned.md; none without owned pools)
    assert plan["totals"]["monthly_usd"] == pytest.approx(
        sum(x["monthly_usd"] for x in plan["resources"])
        + sum(x["monthly_usd"] for x in plan["owned"]["lines"]), abs=0.01)
    assert plan["budget"]["over"] == (plan["totals"]["monthly_usd"] > plan["budget"]["monthly_usd"])


def test_storage_is_never_deleted_with_the_stack():
    run = program_run("prod")
    buckets = [r for r in run.custom if r.type in ("aws:s3/bucket:Bucket", "gcp:storage/bucket:Bucket")]
    assert buckets
    for b in buckets:
        assert b.retain_on_delete, b.urn
        assert b.protect, b.urn


def test_shipped_stacks_pass_every_mandatory_guardrail(shipped_run):
    from gpulease.guardrails.evaluate import evaluate

    stack, run = shipped_run
    spec = run.result.decision.stack
    violations = evaluate(run.resources, budget_monthly_usd=spec.budget_monthly_usd,
                          environment=spec.environment)
    assert [v for v in violations if v["level"] == "mandatory"] == [], stack


def test_aws_cluster_reading_a_gcs_dataset_waits_for_the_bucket():
    """GCP is deployed first, so the AWS-side reader grants can depend on the GCS bucket."""
    import yaml

    from gpulease.planner.plan import run
    from tests.conftest import ROOT

    values = yaml.safe_load((ROOT / "stacks" / "Pulumi.staging.yaml").read_text())["config"]
    values["gpulease:storage"] = [{"name": "corpus", "size_tb": 5, "home": "gcp:us-central1"}]
    values["gpulease:clusters"][0].update(dataset="corpus", regions=["us-east-1"])
    prun = run(values, stack="staging")
    (c,) = prun.result.decision.clusters
    assert (c.cloud, c.region) == ("aws", "us-east-1")
    bucket = prun.one("gcp:storage/bucket:Bucket", "corpus-bucket")
    grants = [r for r in prun.resources if r.type == "gcp:storage/bucketIAMMember:BucketIAMMember"
              and r.name.startswith(f"{c.name}-")]
    assert grants, "no reader grant on the GCS dataset bucket"
    for g in grants:
        assert bucket.urn in g.depends_on, (g.urn, g.depends_on)
    assert prun.one("aws:datasync/task:Task").urn
