"""The rendered node scripts run for real: spot watcher vs a fake metadata server, hook, autostop, checks."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpulease.bootstrap import render as R
from gpulease.catalog import load_catalog
from gpulease import tags
from gpulease.clouds.gcp import node_iam
from tests.builders import one_cluster_stack
from tests.fakes import gcloud_compute
from tests.timeouts import HANG_S


#: the instance id the fake AWS metadata server answers.
INSTANCE_ID = "i-0123456789abcdef0"
#: the zone the fake GCP metadata server answers.
GCP_ZONE = "us-central1-a"


class FakeMetadata:
    """A local HTTP fake of the AWS IMDSv2 / GCP metadata server; records every request."""

    def __init__(self, cloud: str, gcp_name: str = "", instance_id: str = INSTANCE_ID):
        self.cloud = cloud
        self.gcp_name = gcp_name
        self.instance_id = instance_id
        self.notice = False
        self.expire_token_once = False
        self.requests: list[tuple[str, str, dict]] = []
        self.tokens: list[str] = []
        self.issued = 0
        #: GCP guest attributes the VM wrote (path under guest-attributes/ -> value), and whether
        #: its metadata enables them (`enable-guest-attributes`; else the write is refused).
        self.guest_attributes: dict[str, str] = {}
        self.guest_attributes_enabled = True
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep pytest output clean
                pass

            def _send(self, code: int, body: str = ""):
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self):
                fake.requests.append(("PUT", self.path, dict(self.headers)))
                if fake.cloud == "aws" and self.path == "/latest/api/token" and \
                        self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    token = f"token-{fake.issued}"
                    fake.issued += 1
                    fake.tokens.append(token)
                    return self._send(200, token)
                prefix = "/computeMetadata/v1/instance/guest-attributes/"
                if fake.cloud == "gcp" and self.path.startswith(prefix):
                    if self.headers.get("Metadata-Flavor") != "Google":
                        return self._send(403, "Missing Metadata-Flavor:Google header")
                    if not fake.guest_attributes_enabled:
                        return self._send(403, "guest attributes are not enabled")
                    path = self.path[len(prefix):]
                    if path.count("/") != 1 or not all(path.split("/")):
                        return self._send(400, "a guest attribute is namespace/key")
                    body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    fake.guest_attributes[path] = body.decode()
                    return self._send(200)
                self._send(400)

            def do_GET(self):
                fake.requests.append(("GET", self.path, dict(self.headers)))
                if fake.cloud == "aws":
                    token = self.headers.get("X-aws-ec2-metadata-token")
                    if not token or token not in fake.tokens:
                        return self._send(401)
                    if fake.expire_token_once:
                        fake.expire_token_once = False
                        fake.tokens.remove(token)
                        return self._send(401)
                    if self.path == "/latest/meta-data/spot/instance-action":
                        if fake.notice:
                            return self._send(200, json.dumps(
                                {"action": "terminate", "time": "2030-01-02T03:04:05Z"}))
                        return self._send(404, "Not Found")
                    if self.path == "/latest/meta-data/local-ipv4":
                        return self._send(200, "10.0.1.20")
                    if self.path == "/latest/meta-data/instance-id":
                        return self._send(200, fake.instance_id)
                    return self._send(404)
                if self.headers.get("Metadata-Flavor") != "Google":
                    return self._send(403, "Missing Metadata-Flavor:Google header")
                if self.path == "/computeMetadata/v1/instance/preempted":
                    return self._send(200, "TRUE" if fake.notice else "FALSE")
                if self.path == "/computeMetadata/v1/instance/network-interfaces/0/ip":
                    return self._send(200, "10.128.0.7")
                if self.path == "/computeMetadata/v1/instance/name" and fake.gcp_name:
                    return self._send(200, fake.gcp_name)
                if self.path == "/computeMetadata/v1/instance/zone":
                    return self._send(200, f"projects/123456789/zones/{GCP_ZONE}")
                self._send(404)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _offering(cloud: str):
    return next(o for o in load_catalog().offerings if o.cloud == cloud)


def _files(cloud: str, tmp: Path, **kw) -> dict[str, Path]:
    """Render a node of ``cloud`` and write its files under tmp (node path -> local file)."""
    stack, d = one_cluster_stack(_offering(cloud), **kw)
    model = "mixed" if cloud == "aws" else "spot"
    out = {}
    for rel, text in R.render_node_files(stack=stack, decision=d, purchase_model=model).items():
        p = tmp / "node" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        p.chmod(0o755)
        out["/" + rel] = p
    return out


def _run(script: Path, env: dict, timeout: float = HANG_S) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script)], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=timeout)


def _hook(tmp: Path) -> tuple[str, Path]:
    """A hook command that appends one line per run (with the notice env it was given)."""
    log = tmp / "hook.log"
    script = tmp / "hook.sh"
    script.write_text('#!/bin/sh\necho "ran $GPULEASE_NOTICE_ACTION $GPULEASE_NOTICE_DEADLINE '
                      f'$GPULEASE_NOTICE_WINDOW_SECONDS" >> {log}\n')
    script.chmod(0o755)
    return str(script), log


def _watcher_env(fake: FakeMetadata, tmp: Path, hook: str, polls: int) -> dict:
    return {"GPULEASE_METADATA_URL": fake.url, "GPULEASE_CHECKPOINT_HOOK": hook,
            "GPULEASE_STATE_DIR": str(tmp / "state"), "GPULEASE_POLL_SECONDS": "0.05",
            "GPULEASE_MAX_POLLS": str(polls)}


WATCHER = "/usr/local/sbin/gpulease-spot-watcher"


# ---- AWS ------------------------------------------------------------------------------------
def test_aws_no_notice_does_nothing_and_uses_imdsv2(tmp_path):
    files = _files("aws", tmp_path)
    hook, log = _hook(tmp_path)
    with FakeMetadata("aws") as fake:
        proc = _run(files[WATCHER], _watcher_env(fake, tmp_path, hook, polls=4))
    assert proc.returncode == 0, proc.stderr
    assert not log.exists()
    gets = [r for r in fake.requests if r[0] == "GET"]
    assert len(gets) == 4
    assert all(r[1] == "/latest/meta-data/spot/instance-action" for r in gets)
    # IMDSv2: the token PUT comes before any GET and every GET carries the token
    assert fake.requests[0][:2] == ("PUT", "/latest/api/token")
    assert fake.requests[0][2]["X-aws-ec2-metadata-token-ttl-seconds"] == "21600"
    assert all(r[2].get("X-aws-ec2-metadata-token") == "token-0" for r in gets)
    assert len(fake.tokens) == 1  # the token is reused between polls


def test_aws_notice_runs_the_hook_once(tmp_path):
    files = _files("aws", tmp_path)
    hook, log = _hook(tmp_path)
    with FakeMetadata("aws") as fake:
        fake.notice = True
        first = _run(files[WATCHER], _watcher_env(fake, tmp_path, hook, polls=0))
        # restarted by systemd, or a second notice poll: the hook must not run again
        second = _run(files[WATCHER], _watcher_env(fake, tmp_path, hook, polls=0))
    assert first.returncode == 0 and second.returncode == 0, (first.stderr, second.stderr)
    lines = log.read_text().splitlines()
    deadline = 1893553445  # 2030-01-02T03:04:05Z from the notice body
    assert lines == [f"ran terminate {deadline} 120"]
    assert "already handled" in second.stdout


def test_aws_expired_token_is_refreshed(tmp_path):
    files = _files("aws", tmp_path)
    hook, log = _hook(tmp_path)
    with FakeMetadata("aws") as fake:
        fake.expire_token_once = True
        proc = _run(files[WATCHER], _watcher_env(fake, tmp_path, hook, polls=3))
    assert proc.returncode == 0, proc.stderr
    assert fake.tokens == ["token-1"]  # token-0 was rejected (401) and replaced
    assert [r[0] for r in fake.requests].count("PUT") == 2


def test_unreachable_metadata_is_reported_not_fatal(tmp_path):
    files = _files("aws", tmp_path)
    hook, log = _hook(tmp_path)
    env = {"GPULEASE_METADATA_URL": "http://127.0.0.1:9", "GPULEASE_CHECKPOINT_HOOK": hook,
           "GPULEASE_STATE_DIR": str(tmp_path / "s"), "GPULEASE_POLL_SECONDS": "0",
           "GPULEASE_MAX_POLLS": "2"}
    proc = _run(files[WATCHER], env)
    assert proc.returncode == 0
    assert proc.stderr.count("instance metadata unreachable") == 2
    assert not log.exists()


# ---- GCP ------------------------------------------------------------------------------------
def test_gcp_no_notice_then_notice(tmp_path):
    files = _files("gcp", tmp_path)
    hook, log = _hook(tmp_path)
    with FakeMetadata("gcp") as fake:
        quiet = _run(files[WATCHER], _watcher_env(fake, tmp_path, hook, polls=3))
        assert quiet.returncode == 0 and not log.exists(), quiet.stderr
        fake.notice = True
        t0 = time.time()
        noticed = _run(files[WATCHER], _watcher_env(fake, tmp_path, hook, polls=0))
        again = _run(files[WATCHER], _watcher_env(fake, tmp_path, hook, polls=0))
    assert noticed.returncode == 0 and again.returncode == 0
    (line,) = log.read_text().splitlines()
    action, deadline, window = line.split()[1:]
    assert (action, window) == ("preempt", "30")
    assert t0 + 29 <= int(deadline) <= time.time() + 31
    assert fake.requests and all(r[2].get("Metadata-Flavor") == "Google" for r in fake.requests)
    assert {r[1] for r in fake.requests} == {"/computeMetadata/v1/instance/preempted"}


# ---- notice -> checkpoint hook -> training process --------------------------------------------
TRAINER = """
import os, signal, sys, time
done = sys.argv[1]
def on_signal(signum, frame):
    with open(done, "w") as f:
        f.write(signal.Signals(signum).name)
    sys.exit(0)
signal.signal(signal.SIGUSR1, on_signal)
with open(sys.argv[2], "w") as f:
    f.write(str(os.getpid()))
while True:
    time.sleep(0.05)
"""


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_notice_signals_the_training_process_and_runs_user_hooks(tmp_path, cloud):
    files = _files(cloud, tmp_path)
    done, pidfile = tmp_path / "checkpointed", tmp_path / "train.pid"
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, str(done), str(pidfile)])
    try:
        for _ in range(200):
            if pidfile.exists() and pidfile.read_text():
                break
            time.sleep(0.02)
        hooks = tmp_path / "on-interruption.d"
        hooks.mkdir()
        (hooks / "10-mark").write_text(f"#!/bin/sh\necho user-hook >> {tmp_path / 'user.log'}\n")
        (hooks / "10-mark").chmod(0o755)
        (hooks / "20-not-executable").write_text("#!/bin/sh\nexit 1\n")
        with FakeMetadata(cloud) as fake:
            fake.notice = True
            env = _watcher_env(fake, tmp_path, str(files["/usr/local/sbin/gpulease-checkpoint-hook"]),
                               polls=0)
            env.update({"GPULEASE_TRAIN_PIDFILE": str(pidfile), "GPULEASE_USER_HOOK_DIR": str(hooks),
                        "GPULEASE_NOTICE_FILE": str(tmp_path / "run" / "interruption")})
            proc = _run(files[WATCHER], env)
        assert proc.returncode == 0, proc.stderr
        trainer.wait(timeout=HANG_S)
        assert done.read_text() == "SIGUSR1"
        assert (tmp_path / "user.log").read_text() == "user-hook\n"
        notice = (tmp_path / "run" / "interruption").read_text()
        assert "GPULEASE_NOTICE_DEADLINE=" in notice
    finally:
        if trainer.poll() is None:
            trainer.kill()


# ---- autostop and GPU check with a fake nvidia-smi --------------------------------------------
#: a fake nvidia-smi's first line: no GPU compute process (`--query-compute-apps` prints no
#: row), so only the utilization the fake prints decides (issue 21 item 4 signals).
NO_APPS = 'case "$*" in *--query-compute-apps*) exit 0 ;; esac\n'


def _quiet_signals(tmp: Path) -> dict:
    """No dcgmi and no job heartbeat on the simulated node, whatever this machine has."""
    return {"GPULEASE_DCGMI": str(tmp / "no-dcgmi"),
            "GPULEASE_HEARTBEAT_FILE": str(tmp / "no-heartbeat")}


def _fake_smi(tmp: Path, body: str) -> str:
    p = tmp / "nvidia-smi"
    p.write_text("#!/bin/sh\n" + NO_APPS + body)
    p.chmod(0o755)
    return str(p)


def _fake_cli(tmp: Path, name: str, answers: dict) -> Path:
    """A fake cloud CLI ``name`` in tmp/bin: logs each argv as a JSON line to tmp/<name>.log and
    answers the first subcommand word it knows with (exit code, stdout); unknown = exit 2."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / name
    exe.write_text(f"#!{sys.executable}\n" + textwrap.dedent(f"""\
        import json, sys
        answers = {answers!r}
        with open({str(tmp / (name + ".log"))!r}, "a") as log:
            log.write(json.dumps(sys.argv[1:]) + "\\n")
        for word in sys.argv[1:]:
            if word in answers:
                code, out = answers[word]
                sys.stdout.write(out + "\\n" if out else "")
                if code:
                    sys.stderr.write(f"{name}: simulated failure of {{word}}\\n")
                sys.exit(code)
        sys.stderr.write("unexpected call: " + " ".join(sys.argv[1:]) + "\\n")
        sys.exit(2)
        """))
    exe.chmod(0o755)
    return bin_dir


def _calls(tmp: Path, name: str) -> list[list[str]]:
    log = tmp / f"{name}.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_autostop_stops_only_after_the_idle_window(tmp_path):
    files = _files("aws", tmp_path)
    script = files["/usr/local/sbin/gpulease-autostop"]
    state = tmp_path / "state"
    stopped = tmp_path / "stopped"
    env = {"GPULEASE_STATE_DIR": str(state), "GPULEASE_STOP_CMD": f"touch {stopped}",
           "GPULEASE_AUTOSTOP_MINUTES": "30", "GPULEASE_IDLE_THRESHOLD_PCT": "5",
           **_quiet_signals(tmp_path)}
    idle = _fake_smi(tmp_path, 'printf "0\\n3\\n"\n')
    # first run only records the time
    assert _run(script, {**env, "GPULEASE_NVIDIA_SMI": idle}).returncode == 0
    assert not stopped.exists() and (state / "last-busy").exists()
    # idle for 20 of 30 minutes: nothing
    (state / "last-busy").write_text(str(int(time.time()) - 20 * 60))
    assert _run(script, {**env, "GPULEASE_NVIDIA_SMI": idle}).returncode == 0
    assert not stopped.exists()
    # nvidia-smi failing is not idle: it resets the clock
    (state / "last-busy").write_text(str(int(time.time()) - 40 * 60))
    failing = tmp_path / "smi-fail"
    failing.write_text("#!/bin/sh\nexit 9\n")
    failing.chmod(0o755)
    assert _run(script, {**env, "GPULEASE_NVIDIA_SMI": str(failing)}).returncode == 0
    assert not stopped.exists()
    # a busy GPU resets the clock too
    (state / "last-busy").write_text(str(int(time.time()) - 40 * 60))
    busy = tmp_path / "smi-busy"
    busy.write_text('#!/bin/sh\n' + NO_APPS + 'printf "0\\n87\\n"\n')
    busy.chmod(0o755)
    assert _run(script, {**env, "GPULEASE_NVIDIA_SMI": str(busy)}).returncode == 0
    assert not stopped.exists() and int((state / "last-busy").read_text()) > time.time() - 60
    # idle for 40 of 30 minutes, and the ASG carries no opt-out tag: stop
    (state / "last-busy").write_text(str(int(time.time()) - 40 * 60))
    bin_dir = _fake_cli(tmp_path, "aws", {"describe-auto-scaling-instances": (0, "train-asg"),
                                          "describe-auto-scaling-groups": asg_doc("train-asg")})
    with FakeMetadata("aws") as fake:
        proc = _run(script, {**env, "GPULEASE_NVIDIA_SMI": idle, "GPULEASE_METADATA_URL": fake.url,
                             "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert proc.returncode == 0 and stopped.exists(), proc.stdout + proc.stderr
    assert "no gpulease-keep opt-out: stopping this node" in proc.stdout


# ---- autostop honours the gpulease-keep opt-out (read where the reaper reads it) ---------------
AUTOSTOP = "/usr/local/sbin/gpulease-autostop"


def _idle_node(tmp: Path, cloud: str, cli, answers: dict) -> tuple[Path, dict, Path]:
    """An autostop script idle for 40 of 30 minutes, with fake nvidia-smi and ``cli`` on PATH
    (None: the fake CLI is already in tmp/bin, e.g. the strict gcloud of gcp_gcloud)."""
    files = _files(cloud, tmp)
    bin_dir = _fake_cli(tmp, cli, answers) if cli else tmp / "bin"
    (bin_dir / "nvidia-smi").write_text('#!/bin/sh\n' + NO_APPS + 'printf "0\\n2\\n"\n')
    (bin_dir / "nvidia-smi").chmod(0o755)
    state, stopped = tmp / "state", tmp / "stopped"
    state.mkdir()
    (state / "last-busy").write_text(str(int(time.time()) - 40 * 60))
    env = {"GPULEASE_STATE_DIR": str(state), "GPULEASE_STOP_CMD": f"touch {stopped}",
           "GPULEASE_AUTOSTOP_MINUTES": "30", "GPULEASE_IDLE_THRESHOLD_PCT": "5",
           "PATH": f"{bin_dir}:{os.environ['PATH']}", **_quiet_signals(tmp)}
    return files[AUTOSTOP], env, stopped


def _aws_region() -> str:
    return _offering("aws").region


def asg_doc(name: str, tagkv: dict | None = None, members=(INSTANCE_ID,),
            states: dict | None = None) -> tuple[int, str]:
    """A DescribeAutoScalingGroups answer as `aws ... --output json` prints it."""
    states = states or {}
    return 0, json.dumps({"AutoScalingGroups": [{
        "AutoScalingGroupName": name, "MinSize": 0, "MaxSize": 8,
        "DesiredCapacity": len(members),
        "Instances": [{"InstanceId": i, "LifecycleState": states.get(i, "InService"),
                       "HealthStatus": "Healthy"} for i in members],
        "Tags": [{"ResourceId": name, "ResourceType": "auto-scaling-group", "Key": k,
                  "Value": v, "PropagateAtLaunch": True} for k, v in (tagkv or {}).items()]}]})


@pytest.mark.parametrize("keep,stops", [(True, False), (False, True)])
def test_aws_autostop_reads_the_opt_out_on_its_asg(tmp_path, keep, stops):
    group = "gpulease-dev-train-asg"
    script, env, stopped = _idle_node(tmp_path, "aws", "aws", {
        "describe-auto-scaling-instances": (0, group),
        "describe-auto-scaling-groups": asg_doc(group, {tags.KEEP: ""} if keep else {})})
    with FakeMetadata("aws") as fake:
        proc = _run(script, {**env, "GPULEASE_METADATA_URL": fake.url})
    assert proc.returncode == 0, proc.stderr
    assert stopped.exists() == stops, proc.stdout + proc.stderr
    if not stops:
        assert (f"opt-out is on (tag {tags.KEEP} on Auto Scaling group gpulease-dev-train-asg)"
                in proc.stdout)
    # the ASG is found from the instance id (IMDSv2), then THAT group is described
    find, describe = _calls(tmp_path, "aws")
    assert find[:2] == ["autoscaling", "describe-auto-scaling-instances"]
    assert find[find.index("--instance-ids") + 1] == INSTANCE_ID
    assert find[find.index("--region") + 1] == _aws_region()
    assert describe[:2] == ["autoscaling", "describe-auto-scaling-groups"]
    assert describe[describe.index("--auto-scaling-group-names") + 1:] == [group, "--output",
                                                                            "json"]
    assert describe[describe.index("--region") + 1] == _aws_region()
    assert fake.requests[0][:2] == ("PUT", "/latest/api/token")
    assert ("GET", "/latest/meta-data/instance-id") in [r[:2] for r in fake.requests]


@pytest.mark.parametrize("answers,metadata,why", [
    ({"describe-auto-scaling-instances": (255, ""),
      "describe-auto-scaling-groups": asg_doc("asg-1")}, True,
     "describe-auto-scaling-instances failed for " + INSTANCE_ID),
    ({"describe-auto-scaling-instances": (0, "None"),
      "describe-auto-scaling-groups": asg_doc("asg-1")}, True,
     f"{INSTANCE_ID} is in no Auto Scaling group"),
    ({"describe-auto-scaling-instances": (0, "asg-1"),
      "describe-auto-scaling-groups": (254, "")}, True,
     "describe-auto-scaling-groups failed for Auto Scaling group asg-1"),
    ({"describe-auto-scaling-instances": (0, "asg-1"),
      "describe-auto-scaling-groups": (0, "<html>proxy</html>")}, True,
     "the describe-auto-scaling-groups answer is not JSON"),
    ({"describe-auto-scaling-instances": (0, "asg-1"),
      "describe-auto-scaling-groups": (0, '{"AutoScalingGroups": []}')}, True,
     "describe-auto-scaling-groups did not describe exactly one group"),
    ({"describe-auto-scaling-instances": (0, "asg-1"),
      "describe-auto-scaling-groups": asg_doc("asg-1")}, False,
     "instance metadata (IMDSv2) did not give this node's instance id"),
], ids=["find-asg-fails", "no-asg", "describe-fails", "garbled-answer", "no-group",
        "no-metadata"])
def test_aws_autostop_never_stops_when_the_opt_out_cannot_be_read(tmp_path, answers, metadata,
                                                                 why):
    script, env, stopped = _idle_node(tmp_path, "aws", "aws", answers)
    if metadata:
        with FakeMetadata("aws") as fake:
            proc = _run(script, {**env, "GPULEASE_METADATA_URL": fake.url})
    else:
        proc = _run(script, {**env, "GPULEASE_METADATA_URL": "http://127.0.0.1:9"})
    assert proc.returncode == 0, proc.stderr
    assert not stopped.exists(), proc.stdout + proc.stderr
    assert f"opt-out {tags.KEEP} or the baseline {tags.BASELINE_NODES} cannot be read " \
           f"({why}): not stopping" in proc.stderr
    if not metadata:
        assert _calls(tmp_path, "aws") == []  # no instance id: no cloud call at all


# ---- GCP: the node reads its cluster's MIGs and their VMs, nothing else ------------------------
#: the MIGs a node of _files("gcp") renders (its cluster "train" buys on-demand and spot nodes)
GCP_MIGS = ("train-on-demand", "train-spot")


def gcp_iam(migs=GCP_MIGS, *, project="ml-project", zone=GCP_ZONE) -> dict:
    """The node's grant as the program declares it (gpulease/clouds/gcp/node_iam.py)."""
    return {"permissions": list(node_iam.NODE_READ_PERMISSIONS),
            "condition": node_iam.read_condition(project=project, zone=zone,
                                                 base_instance_name="train",
                                                 migs=migs)["expression"]}


def gcp_vm(name, mig="train-spot", *, floor=None, status="RUNNING", zone=GCP_ZONE,
           ip="10.128.0.7", **labels: str) -> dict:
    """An instances.get answer for a VM the MIG ``mig`` created (its created-by metadata)."""
    found = {tags.CLUSTER: "train", tags.ENVIRONMENT: "dev", **labels}
    if floor is not None:
        found[tags.BASELINE_NODES] = floor
    created_by = f"projects/123456789/zones/{zone}/instanceGroupManagers/{mig}"
    return {"name": name, "status": status, "labels": found,
            "zone": f"https://www.googleapis.com/compute/v1/projects/ml-project/zones/{zone}",
            "networkInterfaces": [{"name": "nic0", "networkIP": ip}],
            "metadata": {"items": [{"key": "created-by", "value": created_by}]}}


def gcp_gcloud(tmp: Path, vms, *, iam="node", **state) -> Path:
    """The strict fake gcloud (tests/fakes/gcloud_compute.py) over ``vms``, behind the node's
    IAM grant; logs to tmp/gcloud.log (``_calls(tmp, "gcloud")``). Returns its bin dir."""
    grant = gcp_iam() if iam == "node" else iam
    gcloud_compute.write(tmp / "bin", log=tmp / "gcloud.log",
                         state={"project": "ml-project", "instances": list(vms), "iam": grant,
                                "migs": list(GCP_MIGS), **state})
    return tmp / "bin"


def idle_gcp_node(tmp: Path, vms, **kw) -> tuple[Path, dict, Path]:
    """An idle GCP node's autostop (40 of 30 minutes) with the fake gcloud over ``vms``."""
    gcp_gcloud(tmp, vms, **kw)
    return _idle_node(tmp, "gcp", None, {})


def run_gcp(script: Path, env: dict, me: str = ""):
    with FakeMetadata("gcp", gcp_name=me) as fake:
        proc = _run(script, {**env, "GPULEASE_METADATA_URL": fake.url})
    assert proc.returncode == 0, proc.stderr
    return proc, fake


def assert_only_fenced_calls(tmp: Path, described: set) -> None:
    """The node listed its cluster's MIGs and described ``described``: nothing else, every
    call zonal (--zone) in its project, and IAM allowed each under the node's condition."""
    got = _calls(tmp, "gcloud")
    lists = [c for c in got if c[:4] == ["compute", "instance-groups", "managed", "list-instances"]]
    gets = [c for c in got if c[:3] == ["compute", "instances", "describe"]]
    assert len(lists) + len(gets) == len(got), got
    assert sorted(c[4] for c in lists) == sorted(GCP_MIGS)
    assert {c[3] for c in gets} == described and len(gets) == len(described)
    for c in got:
        assert c[c.index("--zone") + 1] == GCP_ZONE and c[c.index("--project") + 1] == "ml-project"
    assert all(ok for _, _, ok in gcloud_compute.decisions(tmp / "gcloud.log"))


@pytest.mark.parametrize("keep_value", ["", "yes"])
def test_gcp_autostop_keeps_the_cluster_when_any_node_carries_the_label(tmp_path, keep_value):
    # like the reaper: the label on ANY running node keeps the cluster, whatever its value
    vms = [gcp_vm("train-0a1b"), gcp_vm("train-9z8y", "train-on-demand", **{tags.KEEP: keep_value})]
    script, env, stopped = idle_gcp_node(tmp_path, vms)
    proc, _ = run_gcp(script, env)
    assert not stopped.exists(), proc.stdout + proc.stderr
    assert f"opt-out is on (label {tags.KEEP} on train-9z8y)" in proc.stdout


def test_gcp_autostop_without_the_label_stops_and_reads_only_its_cluster(tmp_path):
    vms = [gcp_vm("train-0a1b"), gcp_vm("train-9z8y", "train-on-demand"),
           # the project's other VMs: another cluster's (its MIG, its labels), a stray VM that
           # copies this cluster's labels, a stopped member: none is read, none counts
           gcp_vm("other-0a1b", "other-spot", **{tags.KEEP: ""}),
           dict(gcp_vm("stray-1", **{tags.KEEP: ""}), metadata={}),
           gcp_vm("train-dead", status="TERMINATED")]
    script, env, stopped = idle_gcp_node(tmp_path, vms)
    proc, fake = run_gcp(script, env)
    assert stopped.exists(), proc.stdout + proc.stderr
    assert_only_fenced_calls(tmp_path, {"train-0a1b", "train-9z8y"})
    assert [r[1] for r in fake.requests] == ["/computeMetadata/v1/instance/zone"]


def test_gcp_a_vm_being_created_is_not_read(tmp_path):
    vms = [gcp_vm("train-0a1b"), dict(gcp_vm("train-new1"), _creating=True)]
    script, env, stopped = idle_gcp_node(tmp_path, vms)
    proc, _ = run_gcp(script, env)
    assert stopped.exists(), proc.stdout + proc.stderr
    assert_only_fenced_calls(tmp_path, {"train-0a1b"})


@pytest.mark.parametrize("grant,why", [
    # the role before issue 35: compute.instances.list only - every read of the node is denied
    ({"permissions": ["compute.instances.list"], "condition": None},
     "gcloud compute instance-groups managed list-instances train-on-demand failed"),
    # the right role fenced to another cluster's MIGs and VMs
    (gcp_iam(("tune-spot",)) | {"condition": node_iam.read_condition(
        project="ml-project", zone=GCP_ZONE, base_instance_name="tune",
        migs=("tune-spot",))["expression"]},
     "gcloud compute instance-groups managed list-instances train-on-demand failed"),
    # MIGs allowed, VMs of another zone only
    (gcp_iam() | {"condition": gcp_iam()["condition"].replace(
        f'zones/{GCP_ZONE}/instances/', 'zones/europe-west4-a/instances/')},
     "gcloud compute instances describe train-0a1b failed"),
], ids=["old-role", "other-cluster", "vms-elsewhere"])
def test_gcp_a_read_iam_denies_keeps_the_node(tmp_path, grant, why):
    script, env, stopped = idle_gcp_node(tmp_path, [gcp_vm("train-0a1b")], iam=grant)
    proc, _ = run_gcp(script, env)
    assert not stopped.exists(), proc.stdout + proc.stderr
    assert f"cannot be read ({why}): not stopping" in proc.stderr
    assert "Required 'compute." in proc.stderr          # gcloud's own words reach the journal
    assert not all(ok for _, _, ok in gcloud_compute.decisions(tmp_path / "gcloud.log"))


def test_gcp_the_node_condition_fences_reads_to_the_cluster():
    """The condition itself, evaluated by a CEL implementation: the cluster's MIGs and VMs in
    its zone and project; not another cluster's, zone's or project's, nor the project."""
    iam = gcp_iam()
    ok = lambda perm, name: gcloud_compute.allowed(iam, perm, name)  # noqa: E731
    zonal = f"projects/ml-project/zones/{GCP_ZONE}"
    get_mig, get_vm = node_iam.NODE_READ_PERMISSIONS
    assert ok(get_mig, f"{zonal}/instanceGroupManagers/train-spot")
    assert ok(get_mig, f"{zonal}/instanceGroupManagers/train-on-demand")
    assert ok(get_vm, f"{zonal}/instances/train-0a1b")
    for name in (f"{zonal}/instanceGroupManagers/train-reserved",   # not one of its MIGs
                 f"{zonal}/instanceGroupManagers/other-spot",
                 f"{zonal}/instances/trainer-0a1b",                # no hyphen after the base
                 f"{zonal}/instances/other-0a1b",
                 f"projects/ml-project/zones/us-east4-b/instances/train-0a1b",
                 f"projects/other-project/zones/{GCP_ZONE}/instances/train-0a1b",
                 "projects/ml-project"):                          # a list is checked here
        assert not ok(get_vm, name) and not ok(get_mig, name), name
    assert not ok("compute.instances.list", "projects/ml-project")


@pytest.mark.parametrize("state,why", [
    ({"vms": [gcp_vm("train-0a1b")], "garble": True},
     "gcloud compute instance-groups managed list-instances train-on-demand did not answer JSON"),
    ({"vms": [], "migs": []}, "gcloud compute instance-groups managed list-instances "
                              "train-on-demand failed"),
    ({"vms": []}, "no running instance of the cluster is visible (not even this one)"),
], ids=["garbled-answer", "no-such-mig", "nothing-live"])
def test_gcp_autostop_never_stops_when_the_opt_out_cannot_be_read(tmp_path, state, why):
    script, env, stopped = idle_gcp_node(tmp_path, **state)
    proc, _ = run_gcp(script, env)
    assert not stopped.exists(), proc.stdout + proc.stderr
    assert f"opt-out {tags.KEEP} or the baseline {tags.BASELINE_NODES} cannot be read " \
           f"({why}): not stopping" in proc.stderr


def test_gcp_autostop_without_its_zone_asks_nothing(tmp_path):
    script, env, stopped = idle_gcp_node(tmp_path, [gcp_vm("train-0a1b")])
    proc = _run(script, {**env, "GPULEASE_METADATA_URL": "http://127.0.0.1:9"})
    assert proc.returncode == 0 and not stopped.exists(), proc.stdout + proc.stderr
    assert "instance metadata did not give this node's zone" in proc.stderr
    assert _calls(tmp_path, "gcloud") == []


def test_autostop_reads_no_opt_out_before_the_idle_window_ends(tmp_path):
    """The cloud is asked only once the node would otherwise stop (not every 5 minutes)."""
    script, env, stopped = _idle_node(tmp_path, "aws", "aws", {})
    (tmp_path / "state" / "last-busy").write_text(str(int(time.time()) - 10 * 60))
    proc = _run(script, {**env, "GPULEASE_METADATA_URL": "http://127.0.0.1:9"})
    assert proc.returncode == 0 and not stopped.exists(), proc.stderr
    assert "idle for 10 of 30 minutes" in proc.stdout
    assert _calls(tmp_path, "aws") == []


@pytest.mark.parametrize("gpus,ok", [(8, True), (7, False)])
def test_gpu_check_fails_loudly_on_missing_gpus(tmp_path, gpus, ok):
    o = next(o for o in load_catalog().offerings if o.gpus_per_node == 8)
    stack, d = one_cluster_stack(o)
    text = R.render_node_files(stack=stack, decision=d,
                               purchase_model="spot")["usr/local/sbin/gpulease-check-gpus"]
    script = tmp_path / "check"
    script.write_text(text)
    rows = "".join(f"{i}, NVIDIA {o.gpu}, 81559 MiB, 570.86\\n" for i in range(gpus))
    smi = _fake_smi(tmp_path, f'printf "{rows}"\n')
    proc = _run(script, {"GPULEASE_NVIDIA_SMI": smi})
    assert (proc.returncode == 0) == ok, proc.stderr
    if not ok:
        assert f"{o.instance_type} should have 8 GPUs but nvidia-smi shows 7" in proc.stderr


# ---- rendezvous with a fake cloud CLI ------------------------------------------------------------
def test_aws_rendezvous_picks_the_lowest_ip(tmp_path):
    files = _files("aws", tmp_path, nodes=3)
    fake_aws = tmp_path / "aws"
    args_log = tmp_path / "aws.args"
    fake_aws.write_text(f'#!/bin/sh\necho "$@" > {args_log}\n'
                        'printf "10.0.1.20\\t10.0.1.9\\t10.0.2.3\\n"\n')
    fake_aws.chmod(0o755)
    out = tmp_path / "torchrun.env"
    with FakeMetadata("aws") as fake:
        proc = _run(files["/usr/local/sbin/gpulease-rendezvous"],
                    {"GPULEASE_METADATA_URL": fake.url, "GPULEASE_AWS_CLI": str(fake_aws),
                     "GPULEASE_TORCHRUN_ENV": str(out), "GPULEASE_RDZV_WAIT_SECONDS": "0"})
    assert proc.returncode == 0, proc.stderr
    env = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert env["GPULEASE_RDZV_ENDPOINT"] == "10.0.1.9:29400"
    assert env["MASTER_ADDR"] == "10.0.1.9"
    assert env["GPULEASE_NODE_RANK"] == "1"  # 10.0.1.9 < 10.0.1.20 < 10.0.2.3
    assert env["GPULEASE_NNODES"] == "3"
    args = args_log.read_text()
    assert "Name=tag:gpulease-cluster,Values=train" in args
    assert "Name=tag:gpulease-environment,Values=dev" in args


def test_gcp_rendezvous_reads_its_cluster_members_only(tmp_path):
    files = _files("gcp", tmp_path, nodes=3)
    vms = [gcp_vm("train-aaaa", ip="10.128.0.20"), gcp_vm("train-bbbb", "train-on-demand"),
           gcp_vm("train-cccc", ip="10.128.0.3"),
           gcp_vm("train-dddd", ip="10.128.0.2", status="STOPPING"),   # leaving: not a peer
           gcp_vm("other-aaaa", "other-spot", ip="10.128.0.1")]       # another cluster's
    gcloud = gcp_gcloud(tmp_path, vms) / "gcloud"
    out = tmp_path / "torchrun.env"
    with FakeMetadata("gcp") as fake:                  # this node: 10.128.0.7 (train-bbbb)
        proc = _run(files["/usr/local/sbin/gpulease-rendezvous"],
                    {"GPULEASE_METADATA_URL": fake.url, "GPULEASE_GCLOUD": str(gcloud),
                     "GPULEASE_TORCHRUN_ENV": str(out), "GPULEASE_RDZV_WAIT_SECONDS": "0"})
    assert proc.returncode == 0, proc.stderr
    env = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert env["MASTER_ADDR"] == "10.128.0.3" and env["GPULEASE_NNODES"] == "3"
    assert env["GPULEASE_NODE_RANK"] == "1"  # 10.128.0.3 < 10.128.0.7 < 10.128.0.20
    assert_only_fenced_calls(tmp_path, {"train-aaaa", "train-bbbb", "train-cccc"})


def test_gcp_rendezvous_that_cannot_read_says_why_and_waits_alone(tmp_path):
    files = _files("gcp", tmp_path, nodes=2)
    gcloud = gcp_gcloud(tmp_path, [gcp_vm("train-aaaa")],
                        iam={"permissions": ["compute.instances.list"], "condition": None})
    out = tmp_path / "torchrun.env"
    with FakeMetadata("gcp") as fake:
        proc = _run(files["/usr/local/sbin/gpulease-rendezvous"],
                    {"GPULEASE_METADATA_URL": fake.url, "GPULEASE_GCLOUD": str(gcloud / "gcloud"),
                     "GPULEASE_TORCHRUN_ENV": str(out), "GPULEASE_RDZV_WAIT_SECONDS": "0"})
    assert proc.returncode == 0, proc.stderr
    assert ("cannot read the cluster's members: gcloud compute instance-groups managed "
            "list-instances train-on-demand failed") in proc.stderr
    env = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert env["MASTER_ADDR"] == "10.128.0.7"          # only itself, after the wait


@pytest.mark.parametrize("argv,code,says", [
    (["compute", "instances", "list", "--project", "ml-project", "--format=json"], 2,
     "Invalid choice"),
    (["compute", "instances", "describe", "train-aaaa", "--project", "ml-project",
      "--format=json"], 1, "Specify the [--zone] flag"),
    (["compute", "instances", "describe", "train-aaaa", "--zone", GCP_ZONE, "--project",
      "ml-project", "--format=json", "--filter=labels.x=y"], 2, "unrecognized arguments"),
    (["compute", "instances", "describe", "other-aaaa", f"--zone={GCP_ZONE}", "--project",
      "ml-project", "--format=json"], 1, "Required 'compute.instances.get' permission"),
    (["compute", "instance-groups", "managed", "list-instances", "other-spot", "--zone",
      GCP_ZONE, "--project", "ml-project", "--format=json"], 1,
     "Required 'compute.instanceGroupManagers.get' permission"),
    (["compute", "instances", "describe", "train-gone", "--zone", GCP_ZONE, "--project",
      "ml-project", "--format=json"], 1, "was not found"),
], ids=["list", "no-zone", "extra-flag", "other-vm", "other-mig", "missing-vm"])
def test_the_fake_gcloud_refuses_what_the_node_must_not_do(tmp_path, argv, code, says):
    """The fake is as strict as gcloud + IAM for the node's grant (tests/fakes/gcloud_compute.py)."""
    gcloud = gcp_gcloud(tmp_path, [gcp_vm("train-aaaa"), gcp_vm("other-aaaa", "other-spot")],
                        migs=list(GCP_MIGS) + ["other-spot"]) / "gcloud"
    proc = subprocess.run([str(gcloud), *argv], capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == code and says in proc.stderr, proc.stderr
    assert proc.stdout == ""
    ok = subprocess.run([str(gcloud), "compute", "instances", "describe", "train-aaaa", "--zone",
                         GCP_ZONE, "--project", "ml-project", "--format=json"],
                        capture_output=True, text=True, timeout=HANG_S)
    assert ok.returncode == 0 and json.loads(ok.stdout)["name"] == "train-aaaa", ok.stderr
