"""Progress a controller can read (issue 37 item 1): the node's `gpulease-progress` command, run
for real, and the reaper's reading of what it wrote - node-written, so untrusted: malformed
documents are "nothing done" with a finding, never an exception."""
from __future__ import annotations

import json
import subprocess

import pytest
from hypothesis import given, settings, strategies as st

from gpulease import deadline as dl
from gpulease.bootstrap import render as R
from gpulease.catalog import load_catalog
from tests.builders import one_cluster_stack
from tests.timeouts import HANG_S


@pytest.fixture(scope="module")
def rendered():
    o = next(o for o in load_catalog().offerings if o.cloud == "aws" and o.spot_usd)
    stack, d = one_cluster_stack(o)
    files = R.render_node_files(stack=stack, decision=d, purchase_model="spot")
    return files, R.node_variables(stack=stack, decision=d, purchase_model="spot")


def _run(script: str, tmp_path, *args):
    path = tmp_path / "gpulease-progress"
    path.write_text(script)
    out = tmp_path / "progress.json"
    env = {"PATH": "/usr/bin:/bin", "GPULEASE_PROGRESS_FILE": str(out)}
    r = subprocess.run(["bash", str(path), *args], env=env, capture_output=True, text=True,
                       timeout=HANG_S)
    return r, out


def test_the_file_sits_beside_the_checkpoints(rendered):
    files, v = rendered
    assert v["progress_file"] == f"{R.CHECKPOINT_DIR}/{dl.PROGRESS_OBJECT}"
    assert f"GPULEASE_PROGRESS_FILE={v['progress_file']}" in files["etc/gpulease/node.env"]
    assert v["progress_file"] in files["usr/local/sbin/gpulease-checkpoint-hook"]


def test_one_line_publishes_what_the_reaper_reads(rendered, tmp_path):
    files, _ = rendered
    r, out = _run(files["usr/local/bin/gpulease-progress"], tmp_path, "1200", "4000", "steps")
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert (doc["done"], doc["total"], doc["unit"]) == (1200, 4000, "steps")
    p = dl.read_progress(out.read_bytes())
    assert p.share == pytest.approx(0.3) and p.finding is None and p.at == doc["at"]


@pytest.mark.parametrize("args", [("1",), ("5", "4"), ("1", "0"), ("-1", "4"), ("1e3", "4000"),
                                  ("1", "4", "Steps"), ("1", "4", "s", "x"), ("x", "4")])
def test_bad_arguments_exit_2_and_write_nothing(rendered, tmp_path, args):
    files, _ = rendered
    r, out = _run(files["usr/local/bin/gpulease-progress"], tmp_path, *args)
    assert r.returncode == 2 and "usage: gpulease-progress" in r.stderr
    assert not out.exists()


@pytest.mark.parametrize("raw,share,words", [
    (None, 0.0, "no progress published"),
    (b'{"done": 5, "total": 4}', 1.0, "clamped"),
    (b'{"done": 1, "total": 0}', 0.0, "not a share"),
    (b'{"done": NaN, "total": 4}', 0.0, "unreadable"),
    (b'{"done": true, "total": 4}', 0.0, "unreadable"),
    (b'{"done": 1e400, "total": 4}', 0.0, "not a share"),
    (b"\xff\xfe", 0.0, "unreadable"),
    (b"[1, 2]", 0.0, "unreadable"),
    (b"x" * 5000, 0.0, "bytes"),
])
def test_hostile_documents_are_nothing_done(raw, share, words):
    p = dl.read_progress(raw)
    assert p.share == share and words in p.finding


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.binary(max_size=200) | st.builds(lambda d: json.dumps(d).encode(), st.dictionaries(
    st.sampled_from(["done", "total", "at", "unit"]),
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=50)))))
def test_any_bytes_give_a_share_in_range_never_an_exception(raw):
    p = dl.read_progress(raw)
    assert 0.0 <= p.share <= 1.0
