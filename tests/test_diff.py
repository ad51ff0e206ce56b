"""Plan cost diff: per-resource, per-cluster and total change between two plan documents."""
from __future__ import annotations

import io

import pytest

from gpulease.cli import ui
from gpulease.cli.plan import render_diff
from gpulease.errors import ConfigError
from gpulease.planner.diff import diff_plans, exceeds, resource_key, shown_rows

T_ASG = "aws:autoscaling/group:Group"
T_BUCKET = "aws:s3/bucket:Bucket"
T_NAT = "aws:ec2/natGateway:NatGateway"


def make_plan(stack: str, resources: list[tuple], *, budget: float = 5000.0,
              catalog: str = "2026-01") -> dict:
    """A hand-built plan document in the documented shape (issue 2)."""
    res = []
    for typ, name, cluster, usd in resources:
        parent = "gpulease:aws:GpuCluster" if cluster != "shared" else "gpulease:aws:Storage"
        res.append({"urn": f"urn:pulumi:{stack}::gpulease::{parent}${typ}::{name}",
                    "type": typ, "name": name, "cluster": cluster, "tags": {},
                    "monthly_usd": usd, "inputs": {}})
    total = round(sum(r["monthly_usd"] for r in res), 2)
    by_cluster: dict = {}
    for r in res:
        by_cluster[r["cluster"]] = round(by_cluster.get(r["cluster"], 0.0) + r["monthly_usd"], 2)
    return {"stack": stack, "catalog": {"version": catalog, "as_of": "2026-01-15"},
            "clusters": [], "storage": [], "resources": res,
            "totals": {"hourly_usd": round(total / 730, 2), "monthly_usd": total,
                       "by_cluster": by_cluster,
                       "by_purchase_model": {"spot": 300.0, "on_demand": 900.0},
                       "by_storage_tier": {"STANDARD": 40.0, "GLACIER_IR": 6.5}},
            "budget": {"monthly_usd": budget, "headroom_usd": round(budget - total, 2),
                       "over": total > budget},
            "violations": []}


STAGING = make_plan("staging", [(T_ASG, "train-asg", "train", 1000.0),
                                (T_BUCKET, "data", "shared", 46.5),
                                (T_NAT, "nat", "shared", 32.85)])
PROD = make_plan("prod", [(T_ASG, "train-asg", "train", 1500.0),
                          (T_BUCKET, "data", "shared", 46.5),
                          (T_ASG, "infer-asg", "infer", 200.0)])


def test_resource_key_normalises_the_stack_only():
    assert resource_key("urn:pulumi:prod::gpulease::aws:s3/bucket:Bucket::data") == \
        "urn:pulumi:*::gpulease::aws:s3/bucket:Bucket::data"
    assert resource_key("not-a-urn") == "not-a-urn"


def test_diff_added_removed_changed_and_totals():
    d = diff_plans(STAGING, PROD)
    by = {r["name"]: r for r in d["resources"]}
    assert by["train-asg"]["change"] == "changed" and by["train-asg"]["delta_usd"] == 500.0
    assert by["infer-asg"]["change"] == "added" and by["infer-asg"]["old_monthly_usd"] is None
    assert by["nat"]["change"] == "removed" and by["nat"]["delta_usd"] == -32.85
    assert "data" not in by
    assert d["counts"] == {"added": 1, "removed": 1, "changed": 1, "unchanged": 1}
    assert [r["name"] for r in d["resources"]] == ["train-asg", "infer-asg", "nat"]
    t = d["total"]
    assert (t["old_monthly_usd"], t["new_monthly_usd"], t["delta_usd"]) == (1079.35, 1746.5, 667.15)
    assert t["pct"] == pytest.approx(61.81)
    cl = {c["cluster"]: c for c in d["clusters"]}
    assert cl["train"]["pct"] == 50.0
    assert cl["infer"]["pct"] is None and cl["infer"]["delta_usd"] == 200.0
    assert cl["shared"]["delta_usd"] == -32.85
    assert [c["cluster"] for c in d["clusters"]][-1] == "shared"


def test_exceeds_threshold():
    d = diff_plans(STAGING, PROD)
    assert exceeds(d, 10) and exceeds(d, 61.8)
    assert not exceeds(d, 61.9)
    down = diff_plans(PROD, STAGING)
    assert down["total"]["delta_usd"] == -667.15 and not exceeds(down, 0)
    same = diff_plans(PROD, PROD)
    assert same["resources"] == [] and same["total"]["pct"] == 0.0 and not exceeds(same, 0)
    empty = make_plan("dev", [])
    assert exceeds(diff_plans(empty, PROD), 1000)  # from nothing: any rise exceeds


def render_diff_text(diff: dict, **kw) -> str:
    """What `plan --diff` prints when piped (plain text, no colour)."""
    buf = io.StringIO()
    render_diff(diff, ui.Out(buf), **kw)
    return buf.getvalue()


def test_render_diff_text_snapshot():
    assert render_diff_text(diff_plans(STAGING, PROD)) == """\
Monthly cost diff: staging (catalog 2026-01) -> prod (catalog 2026-01)
     cluster  type                   name          before      after    change
  -- -------- ---------------------- ---------- ---------- ---------- --------
  ~  train    aws:autoscaling:Group  train-asg  $1,000.00  $1,500.00  +$500.00
  +  infer    aws:autoscaling:Group  infer-asg          -    $200.00  +$200.00
  -  shared   aws:ec2:NatGateway     nat           $32.85          -   -$32.85
  1 added, 1 removed, 1 changed, 1 unchanged

  cluster     before      after    change       %
  -------- ---------- ---------- --------- ------
  infer        $0.00    $200.00  +$200.00     new
  train    $1,000.00  $1,500.00  +$500.00  +50.0%
  shared      $79.35     $46.50   -$32.85  -41.4%

Total monthly: $1,079.35 -> $1,746.50 (+$667.15, +61.8%)
"""
    assert "no resource changes cost" in render_diff_text(diff_plans(PROD, PROD))


def test_zero_cost_changes_are_hidden_unless_asked():
    """91 rows of "+$0.00" buried the money (issue 15): by default only rows that move money
    are listed, with a line saying how many were left out; --diff-all lists them."""
    free = [("aws:iam/role:Role", f"role-{i}", "infer", 0.0) for i in range(3)]
    new = make_plan("prod", [(T_ASG, "train-asg", "train", 1500.0),
                             (T_BUCKET, "data", "shared", 46.5)] + free)
    d = diff_plans(STAGING, new)
    assert d["counts"]["added"] == 3 and d["zero_cost_changes"] == 3
    assert [r["name"] for r in shown_rows(d)] == ["train-asg", "nat"]
    assert len(shown_rows(d, show_all=True)) == 5
    text = render_diff_text(d)
    assert "role-0" not in text and "infer" not in text   # a cluster with no change is hidden too
    assert ("3 added, 1 removed, 1 changed, 1 unchanged; 3 added or removed resources at "
            "$0.00/month not listed (--diff-all lists them)") in text
    full = render_diff_text(d, show_all=True)
    assert "role-0" in full and "+$0.00" in full and "not listed" not in full
    assert "  +  infer    aws:iam:Role           role-0             -      $0.00    +$0.00" in full
    assert "  infer        $0.00      $0.00    +$0.00   +0.0%" in full


def test_not_a_plan_is_a_clear_input_error():
    with pytest.raises(ConfigError) as e:
        diff_plans({"stack": "x"}, PROD)
    assert e.value.exit_code == 2
    assert "--diff: the old plan is not a `gpulease plan --json` document" in str(e.value)
