"""bench/idle.py on tiny seeded configurations: the simulation's accounting and its autostop.

Behaviour, not timing: a few hours of one-node clusters (seconds), each shaped so that the
outcome is known — a forgotten demo is reaped after its window and grace, a job with dips, a
CPU phase and an hour of missing metrics is never stopped, a reap shortly before the next job
is counted as a false reap, a baseline is kept. The node autostop's port in the bench is
checked against the rendered script run by bash (tests/test_bootstrap_watcher's harness).
"""
from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest

from infra.costing import tags
from tests.test_bootstrap_watcher import FakeMetadata, INSTANCE_ID, _idle_node, _run, asg_doc

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_idle", ROOT / "bench" / "idle.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_idle"] = mod
    spec.loader.exec_module(mod)
    return mod


B = _bench()
H = 60  # minutes


def _cluster(name, jobs, *, nodes=1, max_nodes=None, baseline=0, missing=(), schedule=()):
    return B.Cluster(name, name, "g6.48xlarge", nodes, max_nodes or nodes, jobs,
                     baseline=baseline, missing=missing, schedule=schedule)


def _run_sim(clusters, *, mode="reaper", delay=1, hours=6):
    return B.one_run((1, 1, mode, delay, False), clusters=clusters, minutes=hours * H)


@pytest.mark.parametrize("delay", [3])
def test_a_forgotten_demo_is_reaped_after_its_window_and_grace_and_nothing_busy_is(delay):
    demo = _cluster("demo", [B.Job(10, 60, 1, 60, ckpt_every=0)])
    # a job with data loading, hourly checkpoints, a 40-min CPU phase at 3 % and an hour
    # without metrics: busy all along, never stopped
    train = _cluster("train", [B.Job(0, 6 * H, 1, 85, load_min=12, cpu_phase=(90, 130))],
                     missing=((150, 210),))
    out = _run_sim([demo, train], delay=delay)
    stops = [e for e in out["events"]]
    assert out["false_reaps"] == 0 and out["below_baseline"] == 0, stops
    assert out["stops_reaper"] == 1                      # the demo, and only the demo
    per = out["clusters"]
    assert per["train"]["idle_gpu_hours"] == 0
    # idle 10 min before its job and from minute 60: marked after the 60-min window and the
    # 5 min the reaper waits for late data, reaped after the 30-min grace, each at a 15-min
    # tick: 10 + (95 .. 126) idle minutes
    idle_min = per["demo"]["idle_gpu_hours"] * 60 / 8
    assert 10 + 95 <= idle_min <= 10 + 126, idle_min
    # dollars: the catalog's on-demand price of the node (set on the cluster by the run)
    from infra.catalog import load_catalog

    hourly = load_catalog().offering("aws", B.REGION, "g6.48xlarge").price("on_demand")
    assert demo.usd_hour == hourly
    assert per["demo"]["idle_usd"] == pytest.approx(idle_min / 60 * hourly, rel=0.01)


def test_the_no_reaper_run_keeps_everything_and_counts_idle_gpu_hours():
    demo = _cluster("demo", [B.Job(10, 60, 1, 60, ckpt_every=0)])
    out = _run_sim([demo], mode="none", delay=0, hours=3)
    assert out["stops_reaper"] == out["stops_autostop"] == 0
    assert out["clusters"]["demo"]["idle_gpu_hours"] == pytest.approx((180 - 50) * 8 / 60, abs=0.1)


def test_a_reap_before_the_next_job_is_a_false_reap():
    """The detector can fail: the next round comes 40 min after the reaper scaled to zero."""
    sweep = _cluster("sweep", [B.Job(0, 20, 1, 90, ckpt_every=0),
                               B.Job(20 + 60 + 5 + 30 + 15 + 40, 6 * H, 1, 90, ckpt_every=0)])
    out = _run_sim([sweep], delay=0)
    assert out["stops_reaper"] == 1
    assert out["false_due"] == 1 and out["false_during"] == 0
    assert out["cold_starts"] == 1
    ev = out["events"][0]
    assert ev["cluster"] == "sweep" and "needed again" in ev["what"]


def test_idle_burst_goes_and_the_baseline_stays_with_the_autostop():
    """Baseline 1 of 3 nodes, one node busy all along: idle burst nodes leave (the reaper's
    per-node scale-down or the node autostop's own rules), never the baseline."""
    team = _cluster("team", [B.Job(0, 6 * H, 1, 80)], nodes=3, baseline=1)
    out = _run_sim([team], mode="reaper+autostop", delay=1)
    assert out["below_baseline"] == 0 and out["false_reaps"] == 0, out["events"]
    assert out["stops_reaper"] + out["stops_autostop"] >= 1
    assert out["clusters"]["team"]["idle_gpu_hours"] < 2 * 8 * 6


# ---- the autostop: the bench's port against the rendered script -----------------------------
LOWER = ("i-0000000000000000a", "i-0000000000000000b")
HIGHER = ("i-fffffffffffffff01", "i-fffffffffffffff02")


@pytest.mark.parametrize("util,procs,idle_for,tagkv,members", [
    (0, 0, 130, {}, (INSTANCE_ID,)),                                  # idle long enough: leaves
    (0, 0, 100, {}, (INSTANCE_ID,)),                                  # not yet
    (7, 0, 130, {}, (INSTANCE_ID,)),                                  # busy now
    (0, 1, 130, {}, (INSTANCE_ID,)),                                  # a job's process, GPU 0 %
    (0, 0, 130, {tags.KEEP: ""}, (INSTANCE_ID,)),                     # opt-out
    (0, 0, 130, {tags.BASELINE_NODES: "2"}, LOWER + (INSTANCE_ID,)),  # above the baseline
    (0, 0, 130, {tags.BASELINE_NODES: "2"}, HIGHER + (INSTANCE_ID,)),  # one of the baseline
], ids=["idle", "not-yet", "busy", "process", "keep", "burst", "floor"])
def test_the_bench_autostop_decides_as_the_rendered_script(tmp_path, util, procs, idle_for,
                                                           tagkv, members):
    group = "gpulease-bench-team-asg"
    doc = asg_doc(group, tagkv, members=members)
    script, env, stopped = _idle_node(tmp_path, "aws", "aws", {
        "describe-auto-scaling-instances": (0, group), "describe-auto-scaling-groups": doc})
    smi = Path(env["PATH"].split(":")[0]) / "nvidia-smi"
    apps = "4242\\n" if procs else ""
    smi.write_text('#!/bin/sh\ncase "$*" in\n'
                   f'  *query-compute-apps*) printf "{apps}" ;;\n'
                   f'  *) printf "{util}\\n" ;;\nesac\n')
    now = int(time.time())
    (tmp_path / "state" / "last-busy").write_text(str(now - idle_for * 60))
    with FakeMetadata("aws") as fake:
        proc = _run(script, {**env, "GPULEASE_METADATA_URL": fake.url,
                             "GPULEASE_AUTOSTOP_MINUTES": str(B.AUTOSTOP_MINUTES)})
    assert proc.returncode == 0, proc.stderr
    a = B.Autostop(_cluster("team", []))
    a.last[INSTANCE_ID] = now - idle_for * 60
    twin = a.idle_enough(INSTANCE_ID, now, util, procs) and not a.held(now) and \
        a.verdict(INSTANCE_ID, doc[1]).split(":")[0] == "leave"
    assert twin == stopped.exists(), proc.stdout + proc.stderr


def test_the_bench_runs_the_scripts_own_schedule_rule():
    a = B.Autostop(_cluster("nightly", [], schedule=(("0 2 * * *", 120),)))
    day = B.START
    assert a.held(day + 90 * 60)            # 01:30: inside the 60-min lead
    assert a.held(day + 3 * 3600)           # 03:00: inside the window
    assert not a.held(day + 5 * 3600)       # 05:00: free


def test_bad_options_exit_2(capsys):
    for argv in (["--delays", "one"], ["--delays", "99"], ["--days", "0"],
                 ["--modes", "autostop"]):
        with pytest.raises(SystemExit) as exc:
            B.main(argv)
        assert exc.value.code == 2
        assert "--" in capsys.readouterr().err


def test_one_day_prints_one_json_document(capsys, monkeypatch):
    monkeypatch.setattr(B, "workload", lambda seed, days: [
        _cluster("demo", [B.Job(10, 60, 1, 60, ckpt_every=0)])])
    monkeypatch.setattr(B, "DAY_MIN", 4 * H)       # one "day" of 4 h: seconds, not minutes
    assert B.main(["--days", "1", "--delays", "1", "--json", "--jobs", "1",
                   "--modes", "reaper"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["seed"] == 1 and [r["mode"] for r in doc["runs"]] == ["none", "reaper"]
    assert doc["runs"][1]["delay_minutes"] == 1
    assert doc["prices"]["offerings"]["g6.48xlarge"]["usd_per_hour"] > 0
    assert doc["runs"][1]["idle_gpu_hours"] < doc["runs"][0]["idle_gpu_hours"]
