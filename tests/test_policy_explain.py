"""`gpulease explain`: readable table and JSON of the decision; bad input exits 2 with a message."""
from __future__ import annotations

import json

import yaml

from gpulease.cli import main
from tests.test_policy_fixtures import catalog, offering

STACK = {"config": {
    "gpulease:owner": "ml", "gpulease:cost_center": "cc", "gpulease:budget_monthly_usd": 500000,
    "gpulease:clouds": {"aws": {"regions": ["us-east-1"]},
                        "gcp": {"project": "proj-x", "regions": ["us-central1"]}},
    "gpulease:storage": [{"name": "data", "size_tb": 10, "home": "aws:us-east-1"}],
    "gpulease:clusters": [
        {"name": "train", "gpu": "H100", "gpus": 16, "hours_per_month": 730, "priority": 9,
         "dataset": "data"},
        {"name": "dev", "gpu": "H100", "gpus": 8, "hours_per_month": 100, "priority": 3,
         "checkpoint_minutes": 30}]}}


def _files(tmp_path):
    cat = catalog([offering("aws", "us-east-1", "p5.48xlarge", rdma="efa", od=98.0, spot=30.0,
                            c1=62.0), offering("gcp", "us-central1", "a3-highgpu-8g",
                                               rdma="gpudirect-tcpx", od=88.0, spot=25.0, c1=55.0)])
    cpath = tmp_path / "cat.json"
    cpath.write_text(json.dumps(cat.raw))
    spath = tmp_path / "Pulumi.x.yaml"
    spath.write_text(yaml.safe_dump(STACK))
    return str(spath), str(cpath)


def test_explain_table(tmp_path, capsys):
    s, c = _files(tmp_path)
    assert main(["explain", "--config", s, "--catalog", c]) == 0
    out = capsys.readouterr().out
    assert "Cluster train  (priority 9, 16 x H100, 730 h/month, not interruptible)" in out
    assert "  gcp    us-central1  us-central1-a  a3-highgpu-8g  2 nodes × 8 H100  2 reserved  " in out
    assert "data gravity (egress + staged copy)" in out
    assert "Alternatives (ranked by monthly cost)" in out
    assert "not interruptible (no gpulease:clusters[0].checkpoint_minutes)" in out
    assert "Environment: clusters" in out


def test_explain_json_one_cluster(tmp_path, capsys):
    s, c = _files(tmp_path)
    assert main(["explain", "--config", s, "--catalog", c, "--cluster", "dev", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [x["name"] for x in doc["clusters"]] == ["dev"]
    d = doc["clusters"][0]
    assert d["purchase"] == {"reserved": 0, "on_demand": 0, "spot": 1}
    assert d["template"] == "single-node-dev"
    assert d["alternatives"][0]["rank"] == 1
    assert d["costs"]["monthly_usd"] == d["monthly_usd"]


def test_explain_unknown_cluster_exits_2(tmp_path, capsys):
    s, c = _files(tmp_path)
    assert main(["explain", "--config", s, "--catalog", c, "--cluster", "trian"]) == 2
    err = capsys.readouterr().err
    assert 'error: --cluster: no cluster "trian" in stack x (did you mean "train"?); ' \
           "clusters: train, dev" in err


def test_explain_policy_failure_exits_2(tmp_path, capsys):
    s, c = _files(tmp_path)
    doc = yaml.safe_load(open(s))
    doc["config"]["gpulease:budget_monthly_usd"] = 1000
    open(s, "w").write(yaml.safe_dump(doc))
    assert main(["explain", "--config", s, "--catalog", c]) == 2
    err = capsys.readouterr().err
    assert "gpulease:budget_monthly_usd: budget 1000 USD/month is short by" in err
    assert "Traceback" not in err
