"""The node's busy witness (issue 21 item 4, contract C10) as the reaper reads it.

A node that publishes ``gpulease-busy-at`` (it carries ``gpulease-busy-witness``) tells the reaper
"I was busy at T" where the GPU utilization metrics cannot: data loading at 0-2 % GPU, a job's
first minute still unpublished. The reaper reads it at judging and again right before acting;
a missing or unreadable value on such a node counts as busy. Nodes without the witness tag are
judged exactly as before. AWS runs on moto (instance tags, DescribeTags), GCP on the local fake
(guest attributes, getGuestAttributes)."""
from __future__ import annotations

import pytest

from gpulease import tags
from gpulease.reaper import decision as d
from tests.test_reaper_aws import _team, aws, by_cluster, reap  # noqa: F401 (fixture)
from tests.test_reaper_gcp import ZONE, T0, gcp, labels, mig_size, reaper  # noqa: F401
from tests.test_reaper_gcp import reap as gcp_reap


# ---- the rule itself -------------------------------------------------------------------------
NOW = 1_800_000_000.0
START = NOW - 300 - 30 * 60          # roughly an evidence start (window 30 min, 5 min late data)


@pytest.mark.parametrize("raw,holds,busy_at", [
    (str(int(NOW - 60)), True, int(NOW - 60)),                # a job started a minute ago
    (str(int(START - 299)), True, int(START - 299)),          # may have been busy at START
    (str(int(START - 301)), False, None),                     # busy before the evidence: stale
    (str(int(NOW - 86400)), False, None),                     # yesterday's job
    (str(int(NOW + 200)), True, int(NOW + 200)),              # ahead within the clock skew
    (str(int(NOW + 400)), True, None),                        # in the future: counts as busy
    (None, True, None),                                       # node has none: counts as busy
    ("", True, None),
    ("soon", True, None), ("1.7e9", True, None), ("-5", True, None),
    ("١٧٠٠٠٠٠٠٠٠", True, None),                               # non-ASCII digits
], ids=["minute-ago", "edge-in", "edge-out", "yesterday", "skew", "future", "none", "empty",
        "word", "float", "negative", "arabic-digits"])
def test_the_witness_rule(raw, holds, busy_at):
    node = d.Node(id="i-1", witness=True)
    got = d.witness(node, {"i-1": raw}, now=NOW, start=START)
    assert (got is not None) == holds
    if got is not None:
        assert got["node"] == "i-1" and got["busy_at"] == busy_at and "i-1" in got["detail"]


def test_no_witness_tag_means_metrics_alone_and_an_unread_witness_is_busy():
    assert d.witness(d.Node(id="i-1"), {"i-1": str(int(NOW))}, now=NOW, start=START) is None
    got = d.witness(d.Node(id="i-1", witness=True), None, now=NOW, start=START)
    assert got is not None and "not read" in got["detail"]


# ---- AWS: instance tags ------------------------------------------------------------------------
def _witness(aws, ids, value=None):
    """What the launch template stamps (the witness tag) and what the node writes (busy-at)."""
    aws.ec2.create_tags(Resources=list(ids), Tags=[{"Key": tags.BUSY_WITNESS, "Value": "1"}])
    if value is not None:
        busy(aws, ids, value)


def busy(aws, ids, at):
    aws.ec2.create_tags(Resources=list(ids), Tags=[{"Key": tags.BUSY_AT, "Value": str(at)}])


def test_a_job_that_started_a_minute_before_the_act_vetoes_the_teardown(aws):
    """Marked, grace over, metrics idle (the job loads data at 0 % and its first minutes are not
    published yet): the node's busy-at from a minute ago keeps the cluster."""
    asg, ids, t0 = aws.cluster("dev", "sweep")
    aws.util(ids, t0, t0 + 120 * 60, 0.0)
    _witness(aws, ids, int(t0))                       # its first check after boot
    r = aws.reaper()
    assert by_cluster(reap(r, t0 + 45 * 60))["sweep"].state == d.MARKED
    now = t0 + 80 * 60
    busy(aws, ids[:1], int(now - 60))
    o = by_cluster(reap(r, now))["sweep"]
    assert (o.state, o.action) == (d.BUSY, d.MARK_NODES), o.reason
    assert "reported itself busy" in o.reason and ids[0] in o.reason
    doc = o.as_json()
    assert [w["node"] for w in doc["busy_witness"]] == [ids[0]]
    assert doc["busy_witness"][0]["busy_at"] == int(now - 60)
    assert aws.group(asg)["DesiredCapacity"] == 2 and tags.IDLE_SINCE not in aws.group_tags(asg)


def test_the_recheck_right_before_acting_reads_the_witness_again(aws):
    """The job starts between the judging read and the act: only the witness can show it."""
    asg, ids, t0 = aws.cluster("dev", "sweep")
    aws.util(ids, t0, t0 + 120 * 60, 0.0)
    _witness(aws, ids, int(t0))
    r = aws.reaper()
    reap(r, t0 + 45 * 60)
    now = t0 + 80 * 60
    reads = []

    def job_starts(**_):             # after the first (judging) utilization read
        reads.append(1)
        if len(reads) == 1:
            busy(aws, ids[1:], int(now - 30))
    r.cloudwatch.meta.events.register("after-call.monitoring.GetMetricData", job_starts)
    o = by_cluster(reap(r, now))["sweep"]
    assert len(reads) == 2
    assert o.state == d.BUSY and o.action in (d.MARK_NODES, d.UNMARK), o.reason
    assert [w["node"] for w in o.as_json()["busy_witness"]] == [ids[1]]
    assert aws.group(asg)["DesiredCapacity"] == 2


def test_a_stale_witness_does_not_hold(aws):
    asg, ids, t0 = aws.cluster("dev", "demo")
    aws.util(ids, t0, t0 + 120 * 60, 0.0)
    _witness(aws, ids, int(t0))                       # boot, and never busy again
    r = aws.reaper()
    assert by_cluster(reap(r, t0 + 45 * 60))["demo"].state == d.MARKED
    o = by_cluster(reap(r, t0 + 80 * 60))["demo"]
    assert (o.state, o.action, o.applied) == (d.REAPED, d.SCALE_TO_ZERO, True)
    assert o.as_json()["busy_witness"] == []
    assert aws.group(asg)["DesiredCapacity"] == 0


@pytest.mark.parametrize("value,says", [
    (None, "has none"), ("not-a-time", "unreadable"), ("99999999999", "in the future"),
    # values no calendar can write (after 9999-12-31) crashed every reap of the cluster with
    # "year ... is out of range" (issue 35): a node may write any digits on itself
    ("999999999999", "999999999999 (epoch seconds, after the year 9999) is in the future"),
    ("253402300800", "253402300800 (epoch seconds, after the year 9999) is in the future"),
    ("253402300799", "9999-12-31T23:59:59Z is in the future")])
def test_a_missing_or_garbage_witness_holds(aws, value, says):
    asg, ids, t0 = aws.cluster("dev", "demo")
    aws.util(ids, t0, t0 + 120 * 60, 0.0)
    _witness(aws, ids, int(t0))
    if value is None:
        aws.ec2.delete_tags(Resources=ids[1:], Tags=[{"Key": tags.BUSY_AT}])
    else:
        busy(aws, ids[1:], value)
    o = by_cluster(reap(aws.reaper(), t0 + 45 * 60))["demo"]
    assert o.state == d.BUSY and says in o.reason, o.reason
    assert [(w["node"], w["busy_at"]) for w in o.as_json()["busy_witness"]] == [(ids[1], None)]
    assert tags.IDLE_SINCE not in aws.group_tags(asg)


def test_nodes_without_the_witness_tag_are_judged_on_metrics_alone(aws):
    """A busy-at without the witness tag is not read (C10): such nodes behave as before."""
    asg, ids, t0 = aws.cluster("dev", "demo")
    aws.util(ids, t0, t0 + 120 * 60, 0.0)
    r = aws.reaper()
    reap(r, t0 + 45 * 60)
    busy(aws, ids, int(t0 + 79 * 60))
    o = by_cluster(reap(r, t0 + 80 * 60))["demo"]
    assert (o.state, o.action) == (d.REAPED, d.SCALE_TO_ZERO)


def test_per_node_scale_down_spares_a_node_whose_job_just_started(aws):
    """Idle burst nodes above the baseline go one by one; one that took a job a minute before
    the act (data loading, 0 % GPU) stays, the others go."""
    asg, ids, t0 = _team(aws)
    aws.util(ids[:2], t0, t0 + 200 * 60, 80.0)
    aws.util(ids[2:], t0, t0 + 200 * 60, 0.4)
    _witness(aws, ids, int(t0))
    r = aws.reaper()
    first = by_cluster(reap(r, t0 + 45 * 60, envs=("prod",)))["team"]
    assert first.action == d.MARK_NODES
    now = t0 + 80 * 60
    reads = []

    def job_starts(**_):
        reads.append(1)
        if len(reads) == 1:
            busy(aws, ids[3:4], int(now - 60))
    r.cloudwatch.meta.events.register("after-call.monitoring.GetMetricData", job_starts)
    o = by_cluster(reap(r, now, envs=("prod",)))["team"]
    assert (o.state, o.action, o.nodes_removed) == (d.REAPED, d.REMOVE_NODES, 2), o.reason
    left = sorted(i["InstanceId"] for i in aws.group(asg)["Instances"]
                  if i["LifecycleState"] == "InService")
    assert left == ids[:2] + ids[3:4]
    assert ids[3] in [w["node"] for w in o.as_json()["busy_witness"]]


def test_the_re_read_names_only_the_candidates(aws):
    """Discovery reads the witness with the node marks (one DescribeTags); the re-check right
    before acting re-reads it for the nodes whose metrics say idle, by instance id."""
    asg, ids, t0 = aws.cluster("dev", "demo")
    aws.util(ids, t0, t0 + 120 * 60, 0.0)
    _witness(aws, ids, int(t0))
    r = aws.reaper()
    reap(r, t0 + 45 * 60)
    before = r.calls["ec2.describe_tags"]
    reap(r, t0 + 80 * 60)
    assert r.calls["ec2.describe_tags"] - before == 2      # discovery + the re-check


# ---- GCP: guest attributes ------------------------------------------------------------------
def _gcp_nodes(gcp, name, n, *, witness=True):
    extra = {tags.BUSY_WITNESS: "1"} if witness else {}
    ids = gcp.add_mig(ZONE, name, n, labels=labels("dev", name.split("-")[0], **extra),
                      launched=T0)
    for i in range(n):
        gcp.enable_guest_attributes(ZONE, f"{name}-{i:04d}")
    return ids


def _write(gcp, name, at):
    gcp.write_guest_attribute(ZONE, name, tags.BUSY_AT_GUEST_ATTRIBUTE, str(int(at)))


def test_gcp_a_fresh_guest_attribute_holds_and_a_stale_one_does_not(gcp):
    ids = _gcp_nodes(gcp, "sweep-mig", 2)
    for i in ids:
        gcp.put_points(i, T0, T0 + 5 * 3600, 0.0)
    for i in range(2):
        _write(gcp, f"sweep-mig-{i:04d}", T0)
    r = reaper(gcp)
    assert gcp_reap(r, T0 + 45 * 60)["sweep"].state == d.MARKED
    _write(gcp, "sweep-mig-0001", T0 + 79 * 60)       # a job started a minute before the act
    o = gcp_reap(r, T0 + 80 * 60)["sweep"]
    assert o.state == d.BUSY and "reported itself busy" in o.reason, o.reason
    assert [w["node"] for w in o.as_json()["busy_witness"]] == [ids[1]]
    assert mig_size(gcp, "sweep-mig") == 2
    # once the job is over and its witness stale, the cluster goes as before
    o = gcp_reap(r, T0 + 180 * 60)["sweep"]
    assert o.state == d.MARKED
    o = gcp_reap(r, T0 + 215 * 60)["sweep"]
    assert (o.state, o.action) == (d.REAPED, d.SCALE_TO_ZERO) and mig_size(gcp, "sweep-mig") == 0


def test_gcp_no_guest_attribute_is_a_404_and_counts_as_busy(gcp):
    ids = _gcp_nodes(gcp, "demo-mig", 1)
    gcp.put_points(ids[0], T0, T0 + 3 * 3600, 0.0)
    o = gcp_reap(reaper(gcp), T0 + 45 * 60)["demo"]
    assert o.state == d.BUSY and "has none" in o.reason, o.reason
    assert any(p.endswith("/getGuestAttributes") for _, p in gcp.log)


def test_gcp_reads_guest_attributes_only_for_nodes_whose_metrics_say_idle(gcp):
    ids = _gcp_nodes(gcp, "train-mig", 2)
    gcp.put_points(ids[0], T0, T0 + 3 * 3600, 90.0)   # busy by its metrics: no read needed
    gcp.put_points(ids[1], T0, T0 + 3 * 3600, 0.0)
    _write(gcp, "train-mig-0001", T0)
    reap_out = gcp_reap(reaper(gcp), T0 + 45 * 60)["train"]
    assert reap_out.state == d.BUSY
    read = [p for _, p in gcp.log if p.endswith("/getGuestAttributes")]
    assert read and all("/instances/train-mig-0001/" in p for p in read)


def test_gcp_nodes_without_the_witness_label_are_never_read(gcp):
    ids = _gcp_nodes(gcp, "demo-mig", 1, witness=False)
    gcp.put_points(ids[0], T0, T0 + 3 * 3600, 0.0)
    assert gcp_reap(reaper(gcp), T0 + 45 * 60)["demo"].state == d.MARKED
    assert not any(p.endswith("/getGuestAttributes") for _, p in gcp.log)


def test_gcp_a_failing_witness_read_is_an_error_and_nothing_is_done(gcp):
    ids = _gcp_nodes(gcp, "demo-mig", 1)
    gcp.put_points(ids[0], T0, T0 + 3 * 3600, 0.0)
    _write(gcp, "demo-mig-0000", T0)
    gcp.faults["getGuestAttributes"] = [403] * 10
    o = gcp_reap(reaper(gcp), T0 + 45 * 60)["demo"]
    assert o.state == d.ERROR and "busy witness" in o.reason
    assert tags.IDLE_SINCE not in gcp.labels_of(ZONE, "demo-mig-0000")


def test_the_fake_refuses_a_write_where_guest_attributes_are_off(gcp):
    gcp.add_mig(ZONE, "x-mig", 1, labels=labels("dev", "x"), launched=T0)
    with pytest.raises(PermissionError):
        gcp.write_guest_attribute(ZONE, "x-mig-0000", tags.BUSY_AT_GUEST_ATTRIBUTE, "1")


def test_moto_serves_the_witness_as_ec2_does(aws):
    """DescribeTags with key + resource-id filters, as the adaptor's re-read sends it."""
    _, ids, _ = aws.cluster("dev", "x")
    _witness(aws, ids, 123)
    got = aws.ec2.describe_tags(Filters=[{"Name": "key", "Values": [tags.BUSY_AT]},
                                         {"Name": "resource-id", "Values": ids[:1]}])["Tags"]
    assert [(t["ResourceId"], t["Value"]) for t in got] == [(ids[0], "123")]


# ---- the node side: the rendered script publishes the witness ------------------------------
import json as _json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import time as _time  # noqa: E402

from gpulease.bootstrap import render as R  # noqa: E402
from tests.builders import one_cluster_stack  # noqa: E402
from tests.test_bootstrap_watcher import (AUTOSTOP, INSTANCE_ID, FakeMetadata, _calls,  # noqa: E402
                                          _fake_cli, _files, _offering, _quiet_signals, _run)
from tests.timeouts import HANG_S  # noqa: E402


def _node(tmp_path, cloud, *, busy_pct=0, cli_fails=False, **stack_kw):
    """A rendered node (``cloud``) whose GPUs run at ``busy_pct``, fake CLIs on PATH; returns
    (script, env, state dir)."""
    files = _files(cloud, tmp_path, **stack_kw)
    cli = "aws" if cloud == "aws" else "gcloud"
    bin_dir = _fake_cli(tmp_path, cli, {"create-tags": (1 if cli_fails else 0, "")})
    smi = bin_dir / "nvidia-smi"
    smi.write_text('#!/bin/sh\ncase "$*" in *--query-compute-apps*) exit 0 ;; esac\n'
                   f'printf "{busy_pct}\\n0\\n"\n')
    smi.chmod(0o755)
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    env = {"GPULEASE_STATE_DIR": str(state), "GPULEASE_STOP_CMD": f"touch {tmp_path / 'stopped'}",
           "PATH": f"{bin_dir}:{os.environ['PATH']}", **_quiet_signals(tmp_path)}
    return files[AUTOSTOP], env, state


def _witness_run(script, env, fake):
    """One run of the witness timer's command, `gpulease-autostop --witness`."""
    proc = subprocess.run(["bash", str(script), "--witness"],
                          env={**os.environ, **env, "GPULEASE_METADATA_URL": fake.url},
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    return proc


def _tagged(tmp_path) -> list:
    return [c for c in _calls(tmp_path, "aws") if "create-tags" in c]


def test_node_publishes_at_its_first_check_then_only_when_busy(tmp_path):
    script, env, state = _node(tmp_path, "aws")
    with FakeMetadata("aws") as fake:
        first = _witness_run(script, env, fake)            # idle, first check after boot
        calls = _tagged(tmp_path)
        assert len(calls) == 1, first.stdout + first.stderr
        args = calls[0]
        assert args[args.index("--resources") + 1] == INSTANCE_ID
        key, value = args[args.index("--tags") + 1].split(",")
        assert key == f"Key={tags.BUSY_AT}" and abs(int(value.split("=")[1]) - _time.time()) < 60
        assert (state / "busy-at").read_text().strip() == value.split("=")[1]
        _witness_run(script, env, fake)                    # idle again: nothing written
        assert len(_tagged(tmp_path)) == 1
    # the node turns busy: written at once
    (tmp_path / "b").mkdir()
    busy_script, busy_env, _ = _node(tmp_path / "b", "aws", busy_pct=73)
    busy_env["GPULEASE_STATE_DIR"] = str(state)
    with FakeMetadata("aws") as fake:
        _witness_run(busy_script, busy_env, fake)
        assert len(_tagged(tmp_path / "b")) == 1
        _witness_run(busy_script, busy_env, fake)          # still busy, refreshed < 5 min ago
        assert len(_tagged(tmp_path / "b")) == 1
        (state / "busy-at").write_text(str(int(_time.time()) - d.BUSY_AT_REFRESH_S - 5))
        _witness_run(busy_script, busy_env, fake)          # busy for 5 min: refreshed
        assert len(_tagged(tmp_path / "b")) == 2


def test_a_failed_write_is_not_recorded_and_tried_again(tmp_path):
    script, env, state = _node(tmp_path, "aws", busy_pct=50, cli_fails=True)
    with FakeMetadata("aws") as fake:
        proc = _witness_run(script, env, fake)
        assert "could not publish the busy witness" in proc.stderr
        assert not (state / "busy-at").exists()
        _witness_run(script, env, fake)
    assert len(_tagged(tmp_path)) == 2


def test_the_witness_runs_in_prod_where_the_autostop_is_off(tmp_path):
    script, env, state = _node(tmp_path, "aws", environment="prod")
    assert "MINUTES=${GPULEASE_AUTOSTOP_MINUTES:-0}" in script.read_text()
    with FakeMetadata("aws") as fake:
        _witness_run(script, env, fake)
        # and the autostop itself stays off
        proc = _run(script, {**env, "GPULEASE_METADATA_URL": fake.url})
    assert proc.returncode == 0 and not (tmp_path / "stopped").exists()
    assert len(_tagged(tmp_path)) == 1


def test_gcp_node_writes_the_guest_attribute(tmp_path):
    script, env, state = _node(tmp_path, "gcp", busy_pct=60)
    with FakeMetadata("gcp") as fake:
        proc = _witness_run(script, env, fake)
        assert set(fake.guest_attributes) == {tags.BUSY_AT_GUEST_ATTRIBUTE}, proc.stderr
        assert abs(int(fake.guest_attributes[tags.BUSY_AT_GUEST_ATTRIBUTE]) - _time.time()) < 60
    (tmp_path / "off").mkdir()
    script2, env2, state2 = _node(tmp_path / "off", "gcp", busy_pct=60)
    with FakeMetadata("gcp") as fake:
        fake.guest_attributes_enabled = False
        proc = _witness_run(script2, env2, fake)
        assert "could not publish" in proc.stderr and not (state2 / "busy-at").exists()


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
@pytest.mark.parametrize("environment", ["dev", "prod"])
def test_every_node_runs_the_witness_every_minute(cloud, environment):
    stack, dec = one_cluster_stack(_offering(cloud), environment=environment)
    files = R.render_node_files(stack=stack, decision=dec, purchase_model="on_demand")
    timer = files["etc/systemd/system/gpulease-busy-witness.timer"]
    assert "OnBootSec=1min" in timer and "OnUnitActiveSec=1min" in timer
    assert "ExecStart=/usr/local/sbin/gpulease-autostop --witness" in \
        files["etc/systemd/system/gpulease-busy-witness.service"]
    assert "enable --now gpulease-busy-witness.timer" in \
        files["usr/local/sbin/gpulease-node-setup"]


def test_the_node_may_tag_only_itself_with_only_the_witness_key():
    from gpulease.clouds.aws import builders
    policy = builders.node_policy(partition="aws", dataset_bucket=None, dataset_prefix=None,
                                  checkpoint_bucket="b", checkpoint_prefix="p/")
    stmt = next(s for s in policy["Statement"] if s["Sid"] == "NodeSelfTags")
    assert stmt["Action"] == "ec2:CreateTags" and stmt["Resource"] == "${ec2:SourceInstanceARN}"
    assert stmt["Condition"] == {"ForAllValues:StringEquals": {"aws:TagKeys": [
        tags.BUSY_AT, tags.LEAVE_REQUESTED]}, "Null": {"aws:TagKeys": "false"}}
    allows = [s for s in policy["Statement"] if s["Effect"] == "Allow"]
    assert _json.dumps(allows).count("ec2:CreateTags") == 1


def test_gcp_nodes_have_guest_attributes_on():
    from gpulease.clouds.gcp import builders
    assert builders.node_metadata("x")["enable-guest-attributes"] == "TRUE"


def test_the_witness_reuses_every_signal_of_the_autostop(tmp_path):
    """GPUs idle, but the job's heartbeat is fresh: the witness is written at once, naming it
    (the same signal lines as the autostop's, not a copy)."""
    script, env, state = _node(tmp_path, "aws")
    beat = tmp_path / "heartbeat"
    beat.write_text("")
    env["GPULEASE_HEARTBEAT_FILE"] = str(beat)
    (state / "busy-at").write_text(str(int(_time.time()) - 120))     # published, then idle
    (state / "witness-last").write_text("idle")
    with FakeMetadata("aws") as fake:
        proc = _witness_run(script, env, fake)
    assert len(_tagged(tmp_path)) == 1 and "job heartbeat 0 min ago" in proc.stdout, proc.stdout
    assert (state / "witness-last").read_text().strip() == "busy"
    text = script.read_text()
    # one reading of each signal in the script, shared by the autostop and the witness
    assert text.count("--query-compute-apps=pid") == 1 and text.count("dmon -e 1001,1002") == 1


def test_gcp_a_transient_witness_read_is_retried(gcp):
    ids = _gcp_nodes(gcp, "demo-mig", 1)
    gcp.put_points(ids[0], T0, T0 + 3 * 3600, 0.0)
    _write(gcp, "demo-mig-0000", T0 + 40 * 60)
    gcp.faults["getGuestAttributes"] = [503, 429]
    o = gcp_reap(reaper(gcp), T0 + 45 * 60)["demo"]
    assert o.state == d.BUSY and "reported itself busy" in o.reason, o.reason
    # two refused and retried, then the leave-request read and the witness read (one each)
    assert sum(p.endswith("/getGuestAttributes") for _, p in gcp.log) == 4
