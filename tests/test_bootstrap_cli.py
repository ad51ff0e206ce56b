"""`gpulease render`: writes exactly the files the nodes boot with; bad input exits 2."""
from __future__ import annotations

import json
import stat

from gpulease.bootstrap import render as R
from gpulease.cli import main
from gpulease.cli.common import load_stack
from gpulease.policy import decide


#: a test stack of its own (the shipped stacks change with their owners' work).
STACK = """\
config:
  gpulease:owner: ml-platform
  gpulease:cost_center: cc-test
  gpulease:budget_monthly_usd: 500000
  gpulease:clouds:
    gcp:
      regions: [us-central1]
      project: ml-proj
      quota_gpus:
        us-central1: 64
  gpulease:storage:
    - name: lake
      size_tb: 5
      home: gcp:us-central1
  gpulease:clusters:
    - name: burst
      gpu: H100
      gpus: 16
      hours_per_month: 200
      priority: 2
      checkpoint_minutes: 15
      dataset: lake
"""


class _Args:
    stack, catalog, catalog_version = None, None, None

    def __init__(self, config):
        self.config = config


def test_render_writes_every_file_of_each_purchase_model(tmp_path, capsys):
    cfg = tmp_path / "Pulumi.bstest.yaml"
    cfg.write_text(STACK)
    out = tmp_path / "out"
    loaded = load_stack(_Args(str(cfg)))
    cluster = decide(loaded.spec, loaded.catalog).cluster("burst")
    assert cluster.nodes >= 2 and cluster.network != "none"
    assert main(["render", "--config", str(cfg), "--cluster", "burst", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    models = R.purchase_models_for(cluster)
    assert sorted(p.name for p in out.iterdir()) == sorted(models)
    for model in models:
        expected = R.render_node_files(stack=loaded.spec, decision=cluster, purchase_model=model)
        written = {str(p.relative_to(out / model)): p.read_text()
                   for p in (out / model).rglob("*") if p.is_file()}
        assert written == expected
        setup = out / model / "usr/local/sbin/gpulease-node-setup"
        assert stat.S_IMODE(setup.stat().st_mode) == 0o755
        assert str(out / model / "cloud-config.yaml") in printed
    assert f"{cluster.name}: {cluster.nodes} x {cluster.offering.instance_type}" in printed


def _config(tmp_path):
    cfg = tmp_path / "Pulumi.bstest.yaml"
    cfg.write_text(STACK)
    return str(cfg)


def test_render_json(tmp_path, capsys):
    assert main(["render", "--config", _config(tmp_path), "--cluster", "burst",
                 "--out", str(tmp_path / "out"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["cluster"], doc["cloud"]) == ("burst", "gcp")
    user_data = [f for f in doc["files"] if f["user_data"]]
    assert user_data and all(f["path"].endswith("cloud-config.yaml") for f in user_data)
    assert all(f["bytes"] > 0 for f in doc["files"])


def test_unknown_cluster_exits_2_with_suggestion(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["render", "--config", _config(tmp_path), "--cluster", "brust",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert 'no cluster "brust" in ' in err and "Pulumi.bstest.yaml" in err
    assert '(did you mean "burst"?)' in err
    assert "Traceback" not in err
    assert not out.exists()


def test_out_that_is_a_file_exits_2(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["render", "--config", _config(tmp_path), "--cluster", "burst",
                 "--out", str(f)]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err
