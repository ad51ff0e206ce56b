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
import os
import sys
import time
from pathlib import Path

import pytest

from gpulease import tags
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
    from gpulease.catalog import load_catalog

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


@pytest.mark.parametrize("util,procs,idle_for,tagkv,members,beat", [
    (0, 0, 130, {}, (INSTANCE_ID,), None),                            # idle long enough: leaves
    (0, 0, 100, {}, (INSTANCE_ID,), None),                            # not yet
    (7, 0, 130, {}, (INSTANCE_ID,), None),                            # busy now
    (0, 1, 130, {}, (INSTANCE_ID,), None),                            # a job's process, GPU 0 %
    (0, 0, 130, {}, (INSTANCE_ID,), 5),                               # heartbeat 5 min ago
    (0, 0, 130, {}, (INSTANCE_ID,), 20),                              # a stale heartbeat
    (0, 0, 130, {tags.KEEP: ""}, (INSTANCE_ID,), None),               # opt-out
    (0, 0, 130, {tags.BASELINE_NODES: "2"}, LOWER + (INSTANCE_ID,), None),  # above the baseline
    (0, 0, 130, {tags.BASELINE_NODES: "2"}, HIGHER + (INSTANCE_ID,), None),  # the baseline
], ids=["idle", "not-yet", "busy", "process", "heartbeat", "stale-heartbeat", "keep", "burst",
        "floor"])
def test_the_bench_autostop_decides_as_the_rendered_script(tmp_path, util, procs, idle_for,
                                                           tagkv, members, beat):
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
    if beat is not None:
        hb = Path(env["GPULEASE_HEARTBEAT_FILE"])
        hb.write_text("")
        os.utime(hb, (now - beat * 60, now - beat * 60))
    with FakeMetadata("aws") as fake:
        proc = _run(script, {**env, "GPULEASE_METADATA_URL": fake.url,
                             "GPULEASE_AUTOSTOP_MINUTES": str(B.AUTOSTOP_MINUTES)})
    assert proc.returncode == 0, proc.stderr
    a = B.Autostop(_cluster("team", []))
    a.last[INSTANCE_ID] = now - idle_for * 60
    fresh = beat is not None and beat < B.HEARTBEAT_MINUTES
    twin = a.idle_enough(INSTANCE_ID, now, util, procs, fresh) and not a.held(now) and \
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
                 ["--modes", "none"], ["--autostop-minutes", "0"]):
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
    assert doc["seed"] == 1 and [r["mode"] for r in doc["runs"]] == ["none", "reaper", "reaper"]
    # the sensitivity run is printed beside the others, named for what it leaves out
    assert [r["heartbeats"] for r in doc["runs"][1:]] == [True, False]
    assert doc["runs"][2]["label"] == "reaper, delay 1 min, sweep driver writes no heartbeat"
    assert doc["runs"][1]["delay_minutes"] == 1
    assert doc["prices"]["offerings"]["g6.48xlarge"]["usd_per_hour"] > 0
    assert doc["runs"][1]["idle_gpu_hours"] < doc["runs"][0]["idle_gpu_hours"]


# ---- the node's busy witness (CONTRACTS C10) --------------------------------------------------
def test_the_witness_follows_the_node_rule_of_c10():
    """Written at the node's first check (busy or not: the boot counts as busy), at once when
    busy after an idle check, at least every 300 s while busy, never else while idle; the value
    is the check's epoch second."""
    w = B.BusyWitness()
    seq = [0] * 3 + [1] * 12 + [0] * 2 + [1] * 2 + [0] * 4     # one check a minute
    writes = [w.check("i-1", 1000 + 60 * k, bool(b)) for k, b in enumerate(seq)]
    written = [k for k, v in enumerate(writes) if v is not None]
    # the first check (idle) writes; busy from check 3: written at 3, then every 5 min (8, 13);
    # idle at 15-16; busy again at 17
    assert written == [0, 3, 8, 13, 17]
    assert all(writes[k] == 1000 + 60 * k for k in written)
    assert all(writes[k] is None for k, b in enumerate(seq) if not b and k)
    # a node that is replaced starts without a tag: its first busy check writes
    w.forget("i-1")
    assert w.check("i-1", 5000, True) == 5000 and w.check("i-1", 5060, True) is None


def _witness_run(cluster, *, hours, mode="none", heartbeats=True):
    trace: list = []
    out = B.one_run((1, 1, mode, 0, False, {"heartbeats": heartbeats}), clusters=[cluster],
                    minutes=hours * H, trace=trace)
    return out, trace


def test_the_bench_publishes_busy_at_from_what_the_node_runs():
    """A job from minute 30 to 70 (data loading at 0-2 % GPU, a checkpoint write at 1 %): the
    tag follows the job's process, not its utilization; nothing is written while idle."""
    job = _cluster("job", [B.Job(30, 70, 1, 80, load_min=12, ckpt_every=20)])
    out, trace = _witness_run(job, hours=2)
    minutes = [m for m, _iid, _v in trace]
    # the first check, a minute after boot; then the job
    assert minutes == [B.BUSY_AT_CHECK_MIN, 30, 35, 40, 45, 50, 55, 60, 65]
    assert all(v == B.START + m * 60 for m, _iid, v in trace)
    assert out["busy_at_writes"] == len(trace)


def test_the_sweep_driver_holds_its_nodes_between_rounds_and_not_after_it_exits():
    rounds = [B.Job(0, 60, 1, 90, ckpt_every=0), B.Job(150, 200, 1, 90, ckpt_every=0)]
    sweep = _cluster("sweep", rounds)
    sweep.heartbeats = ((0, 200),)
    _out, trace = _witness_run(sweep, hours=5)
    minutes = [m for m, _iid, _v in trace]
    # the node's first check is a minute after its boot (minute 0), then one a minute: written
    # every 5 min through the 90-min gap (the driver's heartbeat), until the last touch
    # (minute 195) is 15 min old: no write from minute 210 on
    assert minutes[0] == B.BUSY_AT_CHECK_MIN
    assert [m for m in minutes if 60 <= m < 150] == list(range(61, 150, 5))
    assert max(minutes) < 195 + B.HEARTBEAT_MINUTES
    # the sensitivity run: without the heartbeat the gap is idle
    _out, trace = _witness_run(sweep, hours=5, heartbeats=False)
    assert not [m for m, _iid, _v in trace if 60 <= m < 150]


def test_the_nodes_carry_the_launch_tag_and_the_newest_busy_at_in_moto(monkeypatch):
    import boto3
    from moto import mock_aws

    from tests.fakes import moto_strict

    for k, v in dict(AWS_ACCESS_KEY_ID="t", AWS_SECRET_ACCESS_KEY="t",
                     AWS_DEFAULT_REGION=B.REGION).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        moto_strict.install(monkeypatch)
        c = _cluster("team", [B.Job(10, 40, 1, 80)], nodes=2)
        B.price([c])
        trace: list = []
        sim = B.Sim([c], delay_min=0, reaper=False, autostop=False, days=1, trace=trace)
        sim.run(1, 60)
        res = boto3.client("ec2", region_name=B.REGION).describe_instances()["Reservations"]
        got = {i["InstanceId"]: {t["Key"]: t["Value"] for t in i.get("Tags", [])}
               for r in res for i in r["Instances"]}
        launched = {i["LaunchTime"].timestamp() for r in res for i in r["Instances"]}
    # the nodes were launched on the simulated clock (the month's start), not moto's real one
    assert launched == {B.START}
    assert len(got) == 2 and all(kv.get(B.BUSY_WITNESS) == "1" for kv in got.values())
    # each node's first check (a minute after boot) wrote; then only the node with the job
    first = B.START + B.BUSY_AT_CHECK_MIN * 60
    assert sorted(v for _m, _i, v in trace if v == first) == [first, first]
    worked = {iid for _m, iid, v in trace if v != first}
    assert len(worked) == 1                       # one job on one node; the other stayed idle
    (iid,) = worked
    assert got[iid][B.BUSY_AT] == str(max(v for _m, _i, v in trace))
    (other,) = set(got) - worked
    assert got[other][B.BUSY_AT] == str(first)


def test_the_sweeps_driver_spans_end_at_the_long_gaps():
    (sweep,) = [c for c in B.workload(1, 30) if c.name == "hp-sweep"]
    spans, rounds = sweep.heartbeats, sweep.jobs
    assert spans and spans[0][0] == rounds[0].start and spans[-1][1] == rounds[-1].end
    starts = {j.start for j in rounds}
    ends = {j.end for j in rounds}
    assert all(s in starts and e in ends for s, e in spans)
    for (_s, e), (s2, _e) in zip(spans, spans[1:]):
        assert s2 - e >= 360                       # the driver exits between sweeps only
    for a, b in zip(rounds, rounds[1:]):
        inside = any(s <= a.start and b.end <= e for s, e in spans)
        assert inside == (b.start - a.end < 360)


def test_the_autostop_default_is_the_products_rule():
    """The bench's default wait is what the bootstrap renders for a dev cluster with the bench's
    idle window and no configured value (gpulease.bootstrap.render.autostop_minutes), not a copy
    of the rule's constant."""
    from gpulease.bootstrap.render import autostop_minutes
    from gpulease.catalog import load_catalog
    from tests.builders import one_cluster_stack

    o = next(o for o in load_catalog().offerings if o.cloud == "aws")
    stack, d = one_cluster_stack(o, environment="dev", idle_minutes=B.IDLE_MINUTES)
    assert B.AUTOSTOP_MINUTES == autostop_minutes(stack, d) > 0
    stack, d = one_cluster_stack(o, environment="dev", idle_minutes=45)
    assert B.default_autostop_minutes(45) == autostop_minutes(stack, d)


def test_a_seed_is_one_month_moto_ids_included():
    """moto's instance ids decide which free node a job takes: seeded, two runs are the same."""
    def run():
        team = _cluster("team", [B.Job(0, 30, 1, 80), B.Job(200, 260, 2, 80)], nodes=2,
                        max_nodes=3)
        out = _run_sim([team], delay=0, hours=5)
        return {k: v for k, v in out.items() if not k.endswith("seconds")}
    first, second = run(), run()
    assert first["events"] and first["stops_reaper"] >= 1
    assert first == second


@pytest.mark.parametrize("published", [None, 60, B.BUSY_AT_REFRESH_S + 5])
@pytest.mark.parametrize("previous", [None, "idle", "busy"])
@pytest.mark.parametrize("util", [0, 73])
def test_the_bench_witness_writes_when_the_rendered_script_does(tmp_path, published, previous,
                                                                util):
    """The bench's BusyWitness against `gpulease-autostop --witness` run by bash (one check):
    the same state (what was published how many seconds ago, what the previous check found)
    and the same signal give the same decision to write."""
    from tests.test_reaper_witness import _node, _tagged, _witness_run

    script, env, state = _node(tmp_path, "aws", busy_pct=util)
    now = int(time.time())
    if published is not None:
        (state / "busy-at").write_text(str(now - published))
    if previous is not None:
        (state / "witness-last").write_text(previous)
    with FakeMetadata("aws") as fake:
        _witness_run(script, env, fake)
    w = B.BusyWitness()
    if published is not None:
        w.written[INSTANCE_ID] = now - published
    if previous is not None:
        w.prev[INSTANCE_ID] = previous == "busy"
    bench = w.check(INSTANCE_ID, now, util >= B.d.Policy().threshold_pct) is not None
    assert bench == bool(_tagged(tmp_path))
