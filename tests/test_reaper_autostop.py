"""The node-side autostop shares the reaper's rule: an idle count never outlives the node's life
and a time from the future is no evidence (issue 14). The rendered script runs for real."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpulease import tags
from tests.test_bootstrap_watcher import (AUTOSTOP, GCP_ZONE, INSTANCE_ID, NO_APPS, FakeMetadata,
                                          _calls, _files, _idle_node, _quiet_signals, _run,
                                          asg_doc, gcp_gcloud, gcp_vm, idle_gcp_node, run_gcp)


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_idle_count_lives_in_run_which_every_boot_empties(cloud, tmp_path):
    """A node started again after a stop must not stop at once on an idle count from before."""
    text = _files(cloud, tmp_path)[AUTOSTOP].read_text()
    assert "STATE_DIR=${GPULEASE_STATE_DIR:-/run/gpulease}" in text
    assert "/var/lib/gpulease" not in text


@pytest.mark.parametrize("written", [
    "future",                                 # clock stepped back / hand edit: in the future
    "garbage", "12e9", "-5",
], ids=["future", "garbage", "12e9", "-5"])  # (an id from the clock differs between xdist workers)
def test_unusable_idle_count_restarts_instead_of_stopping(tmp_path, written):
    if written == "future":  # computed here: a collection-time value differs between workers
        written = str(int(time.time()) + 24 * 3600)
    script, env, stopped = _idle_node(tmp_path, "aws", "aws", {
        "describe-auto-scaling-instances": (0, "train-asg"),
        "describe-auto-scaling-groups": asg_doc("train-asg")})
    state = tmp_path / "state" / "last-busy"
    state.write_text(written)
    proc = _run(script, env)
    assert proc.returncode == 0, proc.stderr
    assert not stopped.exists()
    assert abs(int(state.read_text()) - time.time()) < 60       # counting starts now


def test_a_valid_idle_count_still_stops(tmp_path):
    script, env, stopped = _idle_node(tmp_path, "aws", "aws", {
        "describe-auto-scaling-instances": (0, "train-asg"),
        "describe-auto-scaling-groups": asg_doc("train-asg")})
    from tests.test_bootstrap_watcher import FakeMetadata

    with FakeMetadata("aws") as fake:
        proc = _run(script, {**env, "GPULEASE_METADATA_URL": fake.url})
    assert proc.returncode == 0 and stopped.exists(), proc.stdout + proc.stderr


# ---- issue 16: a node never leaves when that would take its group below the baseline -----------
def _sub(tmp: Path, name: str) -> Path:
    """A fresh directory per simulated node (each has its own state and CLI log)."""
    p = tmp / name
    p.mkdir()
    return p


ASG = "gpulease-prod-pretrain-asg"
LOWER = ("i-0000000000000000a", "i-0000000000000000b")   # sort before INSTANCE_ID
HIGHER = ("i-fffffffffffffff01", "i-fffffffffffffff02")  # sort after it


def _aws(tmp_path, doc, **env_extra):
    script, env, stopped = _idle_node(tmp_path, "aws", "aws", {
        "describe-auto-scaling-instances": (0, ASG), "describe-auto-scaling-groups": doc})
    with FakeMetadata("aws") as fake:
        proc = _run(script, {**env, "GPULEASE_METADATA_URL": fake.url, **env_extra})
    assert proc.returncode == 0, proc.stderr
    return proc, stopped


def test_aws_a_burst_node_above_the_baseline_leaves(tmp_path):
    proc, stopped = _aws(tmp_path, asg_doc(ASG, {tags.BASELINE_NODES: "2"},
                                           members=LOWER + (INSTANCE_ID,)))
    assert stopped.exists(), proc.stdout + proc.stderr


def test_aws_a_baseline_node_stays(tmp_path):
    proc, stopped = _aws(tmp_path, asg_doc(ASG, {tags.BASELINE_NODES: "2"},
                                           members=(INSTANCE_ID,) + HIGHER))
    assert not stopped.exists()
    assert (f"this node is one of the 2 baseline node(s) of Auto Scaling group {ASG} (3 live): "
            "the baseline is never scaled down, not stopping") in proc.stdout


def test_aws_members_that_are_leaving_do_not_count(tmp_path):
    """Terminating or standby instances are no part of the baseline: with them gone the group
    is at its baseline, so this node stays even though it ranks last."""
    doc = asg_doc(ASG, {tags.BASELINE_NODES: "1"}, members=LOWER + (INSTANCE_ID,),
                  states={LOWER[0]: "Terminating", LOWER[1]: "Standby"})
    proc, stopped = _aws(tmp_path, doc)
    assert not stopped.exists() and "of the 1 baseline node(s)" in proc.stdout
    # a Pending member does count: it will be in service
    doc = asg_doc(ASG, {tags.BASELINE_NODES: "1"}, members=LOWER[:1] + (INSTANCE_ID,),
                  states={LOWER[0]: "Pending:Wait"})
    proc, stopped = _aws(_sub(tmp_path, "pending"), doc)
    assert stopped.exists(), proc.stdout + proc.stderr


@pytest.mark.parametrize("raw", ["two", "-1", "1.5", ""])
def test_aws_an_unreadable_baseline_keeps_the_node(tmp_path, raw):
    proc, stopped = _aws(tmp_path, asg_doc(ASG, {tags.BASELINE_NODES: raw},
                                           members=LOWER + (INSTANCE_ID,)))
    assert not stopped.exists()
    assert f"Auto Scaling group {ASG} carries an invalid {tags.BASELINE_NODES} value" in \
        proc.stderr and "not stopping" in proc.stderr


def test_aws_a_failed_leave_with_a_baseline_never_powers_off(tmp_path):
    """The group refuses (e.g. at its minimum, which the reaper sets to the baseline): a power
    off would only get the node replaced."""
    script, env, stopped = _idle_node(tmp_path, "aws", "aws", {
        "describe-auto-scaling-instances": (0, ASG),
        "describe-auto-scaling-groups": asg_doc(ASG, {tags.BASELINE_NODES: "1"},
                                                members=LOWER[:1] + (INSTANCE_ID,)),
        "create-tags": (1, "")})
    bin_dir = tmp_path / "bin"
    (bin_dir / "shutdown").write_text(f"#!/bin/sh\ntouch {tmp_path / 'powered-off'}\n")
    (bin_dir / "shutdown").chmod(0o755)
    env.pop("GPULEASE_STOP_CMD")
    with FakeMetadata("aws") as fake:
        proc = _run(script, {**env, "GPULEASE_METADATA_URL": fake.url})
    assert proc.returncode == 0, proc.stderr
    # the node asks the reaper to remove it (it may act on itself only: issue 35 item 6)
    ask = _calls(tmp_path, "aws")[-1]
    assert ask[:2] == ["ec2", "create-tags"]
    assert ask[ask.index("--resources") + 1] == INSTANCE_ID
    assert ask[ask.index("--tags") + 1].startswith(f"Key={tags.LEAVE_REQUESTED},Value=")
    assert not any(c[:1] == ["autoscaling"] and "terminate" in c[1] for c in _calls(tmp_path,
                                                                                   "aws"))
    assert not (tmp_path / "powered-off").exists()
    assert "could not leave the group (it has a baseline): keeps running" in proc.stderr


@pytest.mark.parametrize("order", [(0, 1, 2, 3, 4), (4, 3, 2, 1, 0), (2, 0, 4, 1, 3)])
def test_aws_every_idle_node_at_the_same_minute_leaves_the_baseline_standing(tmp_path, order):
    """Five idle nodes, baseline 2, all deciding from the same (stale) view of the group: the
    three that rank last leave, the two first stay, whatever order they run in."""
    ids = [f"i-0{k}{'0' * 15}" for k in range(5)]
    doc = asg_doc(ASG, {tags.BASELINE_NODES: "2"}, members=tuple(ids))
    left = []
    for k in order:
        node = _sub(tmp_path, f"node{k}")
        script, env, stopped = _idle_node(node, "aws", "aws", {
            "describe-auto-scaling-instances": (0, ASG), "describe-auto-scaling-groups": doc})
        with FakeMetadata("aws", instance_id=ids[k]) as fake:
            proc = _run(script, {**env, "GPULEASE_METADATA_URL": fake.url})
        assert proc.returncode == 0, proc.stderr
        if stopped.exists():
            left.append(ids[k])
    assert sorted(left) == ids[2:]


# ---- GCP: the baseline label of the node's own MIG ---------------------------------------------
def _vm(name, mig, floor=None, status="RUNNING", zone=GCP_ZONE):
    return gcp_vm(name, mig, floor=floor, status=status, zone=zone)


# the node's cluster buys on-demand and spot nodes (GCP_MIGS): the on-demand MIG has a baseline
FLEET = [_vm("train-res-a", "train-on-demand", "2"), _vm("train-res-b", "train-on-demand", "2"),
         _vm("train-res-c", "train-on-demand", "2"),
         _vm("train-spot-a", "train-spot", "0"), _vm("train-spot-b", "train-spot", "0")]


def _gcp(tmp_path, me, nodes=FLEET):
    script, env, stopped = idle_gcp_node(tmp_path, nodes)
    proc, fake = run_gcp(script, env, me)
    return proc, stopped, fake


@pytest.mark.parametrize("me,stops", [("train-res-a", False), ("train-res-b", False),
                                      ("train-res-c", True), ("train-spot-a", True),
                                      ("train-spot-b", True)])
def test_gcp_reserved_mig_keeps_its_baseline_burst_mig_empties(tmp_path, me, stops):
    proc, stopped, fake = _gcp(tmp_path, me)
    assert stopped.exists() == stops, proc.stdout + proc.stderr
    if not stops:
        assert ("this node is one of the 2 baseline node(s) of MIG train-on-demand (3 live)"
                in proc.stdout)
    asked = {r[1] for r in fake.requests}
    assert asked == {"/computeMetadata/v1/instance/name", "/computeMetadata/v1/instance/zone"}


def test_gcp_without_any_baseline_label_only_the_zone_is_asked(tmp_path):
    nodes = [_vm("train-a", "train-spot"), _vm("train-b", "train-spot")]
    proc, stopped, fake = _gcp(tmp_path, "train-b", nodes)
    assert stopped.exists()
    assert [r[1] for r in fake.requests] == ["/computeMetadata/v1/instance/zone"]


def test_gcp_a_node_that_cannot_find_itself_keeps_running(tmp_path):
    proc, stopped, _ = _gcp(tmp_path, "")            # metadata has no name for it
    assert not stopped.exists()
    assert "not listed as one live member of a managed instance group" in proc.stderr
    elsewhere = [_vm("train-res-c", "train-on-demand", "2", zone="us-east4-b")]  # other zone
    proc, stopped, _ = _gcp(_sub(tmp_path, "elsewhere"), "train-res-c", elsewhere)
    assert not stopped.exists() and "cannot be read" in proc.stderr


def test_gcp_an_unreadable_baseline_label_keeps_the_node(tmp_path):
    nodes = FLEET[:2] + [_vm("train-res-c", "train-on-demand", "two")]
    proc, stopped, _ = _gcp(tmp_path, "train-res-c", nodes)
    assert not stopped.exists()
    assert (f"MIG train-on-demand carries an invalid {tags.BASELINE_NODES} value 'two'"
            in proc.stderr)


def test_gcp_all_reserved_nodes_at_once_leave_the_baseline_standing(tmp_path):
    left = []
    for me in ("train-res-c", "train-res-a", "train-res-b"):
        proc, stopped, _ = _gcp(_sub(tmp_path, me), me)
        if stopped.exists():
            left.append(me)
    assert left == ["train-res-c"]


# ---- contract C3: prepaid groups; issue 21 item 3: declared schedules ---------------------------
def _later(minutes: int) -> str:
    import datetime as _dt
    return (_dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(minutes=minutes)).strftime(
        "%Y%m%dt%H%Mz")


@pytest.mark.parametrize("until,stops", [(600, False), (-600, True)])
def test_aws_a_prepaid_group_keeps_its_nodes_until_its_time(tmp_path, until, stops):
    proc, stopped = _aws(tmp_path, asg_doc(ASG, {tags.BILLED_UNTIL: _later(until)},
                                           members=LOWER + (INSTANCE_ID,)))
    assert stopped.exists() == stops, proc.stdout + proc.stderr
    if not stops:
        assert f"are prepaid until" in proc.stdout and "never scaled before" in proc.stdout


def test_aws_an_unreadable_billed_until_keeps_the_node(tmp_path):
    proc, stopped = _aws(tmp_path, asg_doc(ASG, {tags.BILLED_UNTIL: "christmas"},
                                           members=(INSTANCE_ID,)))
    assert not stopped.exists()
    assert f"carries an invalid {tags.BILLED_UNTIL} value 'christmas'" in proc.stderr


def test_gcp_a_prepaid_mig_keeps_its_nodes(tmp_path):
    paid = {tags.BILLED_UNTIL: _later(600)}
    # a flex-start window's nodes are its on-demand MIG's (gpulease/clouds/gcp/cluster.py)
    nodes = [dict(_vm("train-flex-a", "train-on-demand"),
                  labels={**_vm("x", "y")["labels"], **paid}),
             dict(_vm("train-flex-b", "train-on-demand"),
                  labels={**_vm("x", "y")["labels"], **paid})]
    proc, stopped, fake = _gcp(tmp_path, "train-flex-b", nodes)
    assert not stopped.exists() and "MIG train-on-demand are prepaid until" in proc.stdout
    other = _vm("train-spot-a", "train-spot")          # a MIG without the label still empties
    proc, stopped, _ = _gcp(_sub(tmp_path, "spot"), "train-spot-a", nodes + [other])
    assert stopped.exists(), proc.stdout + proc.stderr


def _scheduled(tmp_path, cloud, windows):
    from tests.test_bootstrap_watcher import _fake_cli, _files
    files = _files(cloud, tmp_path, schedule=windows)
    script = files[AUTOSTOP]
    cli = "aws" if cloud == "aws" else "gcloud"
    if cloud == "aws":
        bin_dir = _fake_cli(tmp_path, cli, {"describe-auto-scaling-instances": (0, ASG),
                                            "describe-auto-scaling-groups": asg_doc(ASG)})
    else:
        bin_dir = gcp_gcloud(tmp_path, [_vm("train-a", "train-spot")])
    (bin_dir / "nvidia-smi").write_text('#!/bin/sh\n' + NO_APPS + 'printf "0\\n"\n')
    (bin_dir / "nvidia-smi").chmod(0o755)
    state, stopped = tmp_path / "state", tmp_path / "stopped"
    state.mkdir()
    (state / "last-busy").write_text(str(int(time.time()) - 40 * 60))
    env = {"GPULEASE_STATE_DIR": str(state), "GPULEASE_STOP_CMD": f"touch {stopped}",
           "GPULEASE_AUTOSTOP_MINUTES": "30", "GPULEASE_IDLE_THRESHOLD_PCT": "5",
           "PATH": f"{bin_dir}:{__import__('os').environ['PATH']}", **_quiet_signals(tmp_path)}
    with FakeMetadata(cloud, **({"gcp_name": "train-a"} if cloud == "gcp" else {})) as fake:
        proc = _run(script, {**env, "GPULEASE_METADATA_URL": fake.url})
    assert proc.returncode == 0, proc.stderr
    return proc, stopped


def _cron_at(minutes_from_now: int) -> str:
    import datetime as _dt
    t = _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(minutes=minutes_from_now)
    return f"{t.minute} {t.hour} * * *"


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_no_leave_within_the_lead_before_declared_work(tmp_path, cloud):
    proc, stopped = _scheduled(tmp_path, cloud, ((_cron_at(30), 60),))
    assert not stopped.exists()
    assert "by the declared schedule" in proc.stdout and "not stopping" in proc.stdout


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_outside_the_declared_windows_the_node_leaves(tmp_path, cloud):
    proc, stopped = _scheduled(tmp_path, cloud, ((_cron_at(180), 60),))
    assert stopped.exists(), proc.stdout + proc.stderr


def test_the_node_and_the_reaper_agree_on_every_hold(tmp_path):
    """The autostop's schedule rule (run as rendered) and gpulease.cron.schedule_hold
    give the same answer over a week of times for a few windows."""
    import datetime as _dt
    import random
    import subprocess
    import sys

    from gpulease import cron as rs
    windows = (("0 2 * * *", 120), ("*/20 9-17 * * 1-5", 15), ("30 23 13 * 5", 90))
    text = _files("aws", tmp_path, schedule=windows)[AUTOSTOP].read_text()
    rule = text.split("SCHEDULE_RULE='", 1)[1].split("\n'\n", 1)[0]
    data = json.dumps(rs.node_data(windows))
    parsed = [rs.window(c, m) for c, m in windows]
    rng = random.Random(21)
    base = _dt.datetime(2026, 12, 1, tzinfo=_dt.timezone.utc).timestamp()
    for _ in range(40):
        now = int(base + rng.randrange(0, 14 * 86400, 60))
        out = subprocess.run([sys.executable, "-c", rule, data, "60", str(now)],
                             capture_output=True, text=True, check=True).stdout.strip()
        expect = rs.schedule_hold(parsed, now=now, lead_minutes=60)
        assert out.startswith("held:") == (expect is not None), (now, out, expect)


# ---- issue 21 item 4: signals beyond utilization, failing safe ---------------------------------
def _signals_node(tmp_path, *, apps=None, dcgm=None, beat_age_s=None, beat_raw=False):
    """An AWS node idle 40 of 30 min by utilization (GPUs at 0 and 2%), with the given extra
    signals: ``apps`` = what `nvidia-smi --query-compute-apps` prints (None = nothing; an int =
    exit code of a failing call), ``dcgm`` = what `dcgmi dmon` prints (None = no dcgmi; an int =
    exit code), ``beat_age_s`` = a heartbeat file that old (None = none; negative = future)."""
    script, env, stopped = _idle_node(tmp_path, "aws", "aws", {
        "describe-auto-scaling-instances": (0, ASG),
        "describe-auto-scaling-groups": asg_doc(ASG)})
    bin_dir = tmp_path / "bin"
    smi = "#!/bin/sh\n"
    if apps is not None:
        (tmp_path / "apps.out").write_text("" if isinstance(apps, int) else apps)
        smi += ('case "$*" in *--query-compute-apps*) ' +
                (f"exit {apps} ;; esac\n" if isinstance(apps, int) else
                 f"cat {tmp_path / 'apps.out'}; exit 0 ;; esac\n"))
    (bin_dir / "nvidia-smi").write_text(smi + NO_APPS + 'printf "0\\n2\\n"\n')
    if dcgm is not None:
        dcgmi = bin_dir / "dcgmi"
        (tmp_path / "dmon.out").write_text("" if isinstance(dcgm, int) else dcgm)
        dcgmi.write_text("#!/bin/sh\n" + (f"exit {dcgm}\n" if isinstance(dcgm, int) else
                                          f"echo \"$*\" > {tmp_path / 'dmon.args'}\n"
                                          f"cat {tmp_path / 'dmon.out'}\n"))
        dcgmi.chmod(0o755)
        env["GPULEASE_DCGMI"] = str(dcgmi)
    if beat_age_s is not None:
        beat = tmp_path / "heartbeat"
        beat.write_text("")
        t = time.time() - beat_age_s
        __import__("os").utime(beat, (t, t))
        env["GPULEASE_HEARTBEAT_FILE"] = str(beat)
        if beat_raw:   # a dangling link: the file is there, its time cannot be read
            beat.unlink()
            beat.symlink_to(tmp_path / "gone")
    with FakeMetadata("aws") as fake:
        proc = _run(script, {**env, "GPULEASE_METADATA_URL": fake.url})
    assert proc.returncode == 0, proc.stderr
    return proc, stopped, tmp_path / "state" / "last-busy"


def _reset(last_busy) -> bool:
    """The idle count started again (the node was found busy)."""
    return abs(int(last_busy.read_text()) - time.time()) < 60


DMON_IDLE = ("#Entity   GRACT   SMACT\nID\nGPU 0     0.000   0.000\nGPU 1     0.012   0.010\n")
DMON_BUSY = ("#Entity   GRACT   SMACT\nID\nGPU 0     0.000   0.000\nGPU 1     0.640   0.410\n")


@pytest.mark.parametrize("apps,dcgm,beat,stops,says", [
    (None, None, None, True, ""),                                    # utilization alone: idle
    ("4242\n", None, None, False, "busy: 1 GPU process(es) running"),
    (" 4242\n 4243\n", None, None, False, "busy: 2 GPU process(es) running"),
    (3, None, None, False, "busy: GPU processes unreadable"),
    ("No running processes found\n", None, None, False, "busy: GPU processes unreadable"),
    (None, DMON_IDLE, None, True, ""),                               # DCGM below 5 %: idle
    (None, DMON_BUSY, None, False, "busy: DCGM activity 64%"),
    (None, 1, None, False, "busy: DCGM activity unreadable (dcgmi dmon failed)"),
    (None, "#Entity GRACT SMACT\nGPU 0 N/A N/A\n", None, False, "busy: DCGM activity unreadable"),
    (None, "Error: unable to connect to host engine\n", None, False,
     "busy: DCGM activity unreadable"),
    (None, None, 120, False, "busy: job heartbeat 2 min ago"),
    (None, None, 3600, True, ""),                                    # stale heartbeat: no signal
    (None, None, -3600, False, "is dated in the future"),
], ids=["util-only", "one-process", "two-processes", "smi-apps-fails", "apps-garbage",
        "dcgm-idle", "dcgm-busy", "dcgmi-fails", "dcgm-na", "dcgm-no-engine", "fresh-beat",
        "stale-beat", "future-beat"])
def test_every_signal_the_node_has_must_say_idle(tmp_path, apps, dcgm, beat, stops, says):
    proc, stopped, last = _signals_node(tmp_path, apps=apps, dcgm=dcgm, beat_age_s=beat)
    assert stopped.exists() == stops, proc.stdout + proc.stderr
    if not stops:
        assert says in proc.stdout and _reset(last), proc.stdout
    if isinstance(dcgm, str):   # graphics engine active and SM active, one sample
        assert (tmp_path / "dmon.args").read_text().split() == ["dmon", "-e", "1001,1002",
                                                               "-c", "1"]


def test_an_unreadable_heartbeat_counts_as_busy(tmp_path):
    proc, stopped, last = _signals_node(tmp_path, beat_age_s=3600, beat_raw=True)
    assert not stopped.exists() and "heartbeat" in proc.stdout and "unreadable" in proc.stdout
    assert _reset(last)


def test_the_rendered_node_knows_where_the_heartbeat_lives(tmp_path):
    from gpulease.bootstrap.render import HEARTBEAT_FILE, HEARTBEAT_MINUTES
    files = _files("aws", tmp_path)
    text = files[AUTOSTOP].read_text()
    assert f"HEARTBEAT_FILE=${{GPULEASE_HEARTBEAT_FILE:-{HEARTBEAT_FILE}}}" in text
    assert f"HEARTBEAT_MINUTES=${{GPULEASE_HEARTBEAT_MINUTES:-{HEARTBEAT_MINUTES}}}" in text
    env = files["/etc/gpulease/node.env"].read_text()
    assert f"GPULEASE_HEARTBEAT_FILE={HEARTBEAT_FILE}" in env
