"""Renders a node's boot files (cloud-config, scripts, systemd units, agent configs) from templates/bootstrap."""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

import jinja2

from gpulease import datafiles
from gpulease import naming
from gpulease.bootstrap import cluster_members
from gpulease.bootstrap.fabric import fabric_env, fabric_for
from gpulease.bootstrap.settings import BootstrapSettings
from gpulease import tags
from gpulease.clouds import registry
from gpulease.model import ClusterDecision, StackSpec
from gpulease.purchase import MIXED, NODE_MODELS, ON_DEMAND, RESERVED, SPOT
from gpulease import cron as schedule
from gpulease import deadline
from gpulease.quotes import blocks
from gpulease.reaper.decision import BUSY_AT_REFRESH_S

TEMPLATE_DIR = datafiles.templates("bootstrap")

#: purchase models a node can be rendered for; MIXED = an AWS ASG blending spot and on-demand.
NODE_PURCHASE_MODELS = NODE_MODELS + (MIXED,)
#: key of the cloud-config itself in render_node_files().
CLOUD_CONFIG = "cloud-config.yaml"

#: Spot notice windows per cloud (``Cloud.notice_window_seconds``, with the doc behind each).
NOTICE_WINDOW_SECONDS = {c.name: c.notice_window_seconds for c in registry.CLOUDS}
#: poll often enough that the hook still has most of the window left.
POLL_SECONDS = {c.name: c.poll_seconds for c in registry.CLOUDS}
METADATA_URL = {c.name: c.metadata_url for c in registry.CLOUDS}

RDZV_PORT = 29400
MASTER_PORT = 29500
DATA_DIR = "/mnt/data"
CHECKPOINT_DIR = "/mnt/checkpoints"
SCRATCH_DIR = "/mnt/scratch"
#: the training process: its PID file or its systemd unit receives the checkpoint signal.
TRAIN_PIDFILE = "/run/gpulease/train.pid"
TRAIN_UNIT = "gpulease-train.service"
#: file the checkpoint hook writes on a notice (a second, poll-based way for trainers to learn).
NOTICE_FILE = "/run/gpulease/interruption"
#: the job heartbeat (issue 21 item 4): a training job that touches this file at least every
#: HEARTBEAT_MINUTES / 2 keeps its node busy for the node autostop however idle its GPUs look;
#: absent = the job writes none (no signal); unreadable or dated in the future = busy. In /run
#: like train.pid: emptied at boot, so a heartbeat never outlives the node's life.
HEARTBEAT_FILE = "/run/gpulease/heartbeat"
#: a heartbeat older than this says nothing (the job stopped writing it).
HEARTBEAT_MINUTES = 15
USER_HOOK_DIR = "/etc/gpulease/on-interruption.d"


@dataclass(frozen=True)
class NodeFile:
    """One file a node boots with. ``when`` names a boolean node variable that must be true."""

    template: str
    path: str
    mode: str = "0644"
    clouds: tuple[str, ...] = registry.NAMES
    when: Optional[str] = None

    @property
    def key(self) -> str:
        return self.path.lstrip("/")

    @property
    def is_script(self) -> bool:
        return self.template.endswith(".sh.j2")


SBIN = "/usr/local/sbin"
UNITS = "/etc/systemd/system"
NODE_FILES: tuple[NodeFile, ...] = (
    NodeFile("node.env.j2", "/etc/gpulease/node.env"),
    NodeFile("fabric.env.j2", "/etc/gpulease/fabric.env"),
    NodeFile("node-setup.sh.j2", f"{SBIN}/gpulease-node-setup", "0755"),
    NodeFile("check-gpus.sh.j2", f"{SBIN}/gpulease-check-gpus", "0755"),
    NodeFile("check-fabric.sh.j2", f"{SBIN}/gpulease-check-fabric", "0755"),
    NodeFile("mount-data.sh.j2", f"{SBIN}/gpulease-mount-data", "0755"),
    NodeFile("rendezvous.sh.j2", f"{SBIN}/gpulease-rendezvous", "0755"),
    NodeFile("spot-watcher.sh.j2", f"{SBIN}/gpulease-spot-watcher", "0755", when="spot_watcher"),
    NodeFile("checkpoint-hook.sh.j2", f"{SBIN}/gpulease-checkpoint-hook", "0755"),
    # for training scripts: publish progress with each checkpoint (issue 37)
    NodeFile("progress.sh.j2", "/usr/local/bin/gpulease-progress", "0755"),
    # on every node: with --witness it publishes the busy witness (gpulease-busy-witness.timer)
    # even where the autostop itself is off (prod)
    NodeFile("autostop.sh.j2", f"{SBIN}/gpulease-autostop", "0755"),
    NodeFile("shutdown-clean.sh.j2", f"{SBIN}/gpulease-shutdown-clean", "0755"),
    NodeFile("node-setup.service.j2", f"{UNITS}/gpulease-node-setup.service"),
    NodeFile("spot-watcher.service.j2", f"{UNITS}/gpulease-spot-watcher.service",
             when="spot_watcher"),
    NodeFile("autostop.service.j2", f"{UNITS}/gpulease-autostop.service", when="autostop"),
    NodeFile("autostop.timer.j2", f"{UNITS}/gpulease-autostop.timer", when="autostop"),
    NodeFile("busy-witness.service.j2", f"{UNITS}/gpulease-busy-witness.service"),
    NodeFile("busy-witness.timer.j2", f"{UNITS}/gpulease-busy-witness.timer"),
    NodeFile("shutdown-clean.service.j2", f"{UNITS}/gpulease-shutdown-clean.service"),
) + tuple(NodeFile(template, path, clouds=(c.name,))   # agent configs: each cloud's own
          for c in registry.CLOUDS for template, path in c.node_files)


def _shq(value: object) -> str:
    return shlex.quote(str(value))


@lru_cache(maxsize=None)
def environment() -> jinja2.Environment:
    """The one jinja2 environment: StrictUndefined, so a missing variable fails the render."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True, autoescape=False,
                             # bash's ${#array[@]} would open a default jinja comment ("{#").
                             comment_start_string="<%#", comment_end_string="#%>")
    env.filters["shq"] = _shq
    return env


def autostop_minutes(stack: StackSpec, decision: ClusterDecision) -> int:
    """Node-side autostop: configured value, else 1.25 x the cluster's idle_minutes, rounded up
    (0 = off; off in prod).

    The node reads more than the reaper does (GPU processes, DCGM activity, the job heartbeat,
    with no publication delay), so it needs no 2 x wait to be safe: at 2 x it acted after the
    reaper on nearly every idle spell. At 1 x it stopped burst nodes in a bursty team's pauses
    between jobs that came back within the hour (1-2 false reaps a month in 2 of 3 seeded
    months); 1.25 x had none in the same three months (docs/measured.md "Idle GPU-hours")."""
    settings = stack.bootstrap if isinstance(stack.bootstrap, BootstrapSettings) else None
    configured = settings.autostop_minutes if settings is not None else None
    if configured is not None:
        return int(configured)
    return 0 if stack.is_prod else -(-5 * int(decision.spec.idle_minutes) // 4)


def _split_uri(uri: Optional[str]) -> tuple[str, str]:
    """``s3://bucket/a/b/`` -> (``bucket``, ``a/b/``); None -> ("", "")."""
    if not uri:
        return "", ""
    rest = uri.split("://", 1)[1]
    bucket, _, prefix = rest.partition("/")
    return bucket, prefix


def purchase_models_for(decision: ClusterDecision) -> tuple[str, ...]:
    """The node purchase models a cluster boots, one per node group (``Cloud.node_group_models``:
    GCP one MIG per model; AWS one ASG blending spot with the rest)."""
    used = tuple(m for m, n in decision.purchase.as_dict().items() if n > 0)
    if not used:
        return (ON_DEMAND,)
    return registry.get(decision.cloud).node_group_models(used)


def window_drain_at(decision: ClusterDecision, purchase_model: str) -> int:
    """When a prepaid window's node checkpoints (epoch seconds): a Capacity Block node,
    ``blocks.BLOCK_CHECKPOINT_MINUTES`` before its group's drain (``gpulease.quotes.blocks``);
    0 for every other node (only Capacity Blocks end on a schedule)."""
    if purchase_model != RESERVED:
        return 0
    return blocks.checkpoint_at(decision)


def witness_variables() -> dict:
    """What the autostop script's busy-witness part needs (contract C10): the one place a
    renderer of ``autostop.sh.j2`` (the node files, bench/idle.py) gets them."""
    return {"tag_busy_at": tags.BUSY_AT,
            "busy_at_guest_attribute": tags.BUSY_AT_GUEST_ATTRIBUTE,
            "tag_leave_requested": tags.LEAVE_REQUESTED,
            "leave_requested_guest_attribute": tags.LEAVE_REQUESTED_GUEST_ATTRIBUTE,
            "busy_at_refresh_s": BUSY_AT_REFRESH_S}


def node_variables(*, stack: StackSpec, decision: ClusterDecision,
                   purchase_model: str) -> dict:
    """Every variable the bootstrap templates use (the templates see nothing else)."""
    if purchase_model not in NODE_PURCHASE_MODELS:
        raise ValueError(f"purchase_model {purchase_model!r}: expected one of "
                         f"{', '.join(NODE_PURCHASE_MODELS)}")
    cloud, o = decision.cloud, decision.offering
    settings = stack.bootstrap if isinstance(stack.bootstrap, BootstrapSettings) \
        else BootstrapSettings()
    fabric = fabric_for(decision.network)
    dataset_uri = naming.dataset_uri(stack, decision)
    checkpoint_uri = naming.checkpoint_uri(stack, decision)
    ds_bucket, ds_prefix = _split_uri(dataset_uri)
    ck_bucket, ck_prefix = _split_uri(checkpoint_uri)
    stop_after = autostop_minutes(stack, decision)
    provider = registry.get(cloud)
    cloud_spec = stack.clouds.get(cloud) if isinstance(stack.clouds, dict) else None
    threshold = getattr(stack.reaper, "threshold_pct", 5.0) if stack.reaper is not None else 5.0
    # Discovery filters: AWS tags carry the plain values, GCP labels the label-encoded ones
    # (gpulease.tags.label_value), exactly as the cost transform stamps them.
    encode = provider.tag_value
    drain_at = window_drain_at(decision, purchase_model)
    v = {
        "cloud": cloud,
        "region": decision.region,
        "zone": decision.zone or "",
        "project": provider.project(cloud_spec),
        "stack": stack.stack,
        "cluster": decision.name,
        "environment": stack.environment,
        "instance_type": o.instance_type,
        "gpu": o.gpu,
        "accelerator_type": o.accelerator_type or "",
        "nodes": int(decision.nodes),
        "gpus_per_node": int(o.gpus_per_node),
        "distributed": bool(decision.distributed or decision.nodes > 1),
        "purchase_model": purchase_model,
        "rdma": decision.network,
        "fabric_check": fabric.check,
        "fabric_nics": list(fabric.nics),
        "fabric_env": fabric_env(decision.network, gpu=o.gpu),
        "local_nvme_gb": float(o.local_nvme_gb or 0.0),
        "dataset_uri": dataset_uri or "",
        "dataset_bucket": ds_bucket,
        "dataset_prefix": ds_prefix,
        "checkpoint_uri": checkpoint_uri,
        "checkpoint_bucket": ck_bucket,
        "checkpoint_prefix": ck_prefix,
        "data_dir": DATA_DIR,
        "checkpoint_dir": CHECKPOINT_DIR,
        "scratch_dir": SCRATCH_DIR,
        "idle_minutes": int(decision.spec.idle_minutes),
        "idle_threshold_pct": float(threshold),
        "autostop_minutes": stop_after,
        "autostop": stop_after > 0,
        "heartbeat_file": HEARTBEAT_FILE,
        "heartbeat_minutes": HEARTBEAT_MINUTES,
        "tag_cluster": tags.CLUSTER,
        "tag_environment": tags.ENVIRONMENT,
        "tag_keep": tags.KEEP,
        "tag_baseline": tags.BASELINE_NODES,
        "tag_billed": tags.BILLED_UNTIL,
        **witness_variables(),
        "schedule_windows": schedule.node_data(decision.spec.schedule),
        "schedule_lead_minutes": int(decision.spec.schedule_lead_minutes),
        "cron_match_source": schedule.MATCH_SOURCE.strip(),
        "cluster_filter_value": encode(decision.name),
        # the cluster's node groups (GCP: its MIGs, the only groups whose members a node may
        # list, their VMs the only ones it may read: gpulease/clouds/gcp/node_iam.py)
        "node_groups": list(provider.node_group_names(
            decision.name, tuple(m for m in NODE_MODELS if getattr(decision.purchase, m) > 0),
            deadline_standby=deadline.controls(decision))),
        "cluster_members_source": cluster_members.SOURCE,
        "environment_filter_value": encode(stack.environment),
        "spot_watcher": purchase_model in (SPOT, MIXED) or drain_at > 0,
        "drain_at_epoch": drain_at,
        "drain_lead_seconds": 60 * blocks.BLOCK_CHECKPOINT_MINUTES,
        "notice_window_seconds": provider.notice_window_seconds,
        "poll_seconds": provider.poll_seconds,
        "metadata_url": provider.metadata_url,
        "checkpoint_signal": settings.checkpoint_signal,
        "train_pidfile": TRAIN_PIDFILE,
        "train_unit": TRAIN_UNIT,
        "notice_file": NOTICE_FILE,
        "progress_file": f"{CHECKPOINT_DIR}/{deadline.PROGRESS_OBJECT}",
        "progress_object": deadline.PROGRESS_OBJECT,
        "user_hook_dir": USER_HOOK_DIR,
        "rdzv_port": RDZV_PORT,
        "master_port": MASTER_PORT,
        # sshd stays only where the stack opted into SSH through IAP (GCP); AWS uses SSM.
        "keep_sshd": provider.keeps_sshd(cloud_spec),
    }
    v["node_env"] = _node_env(v)
    return v


def _node_env(v: dict) -> dict[str, str]:
    """/etc/gpulease/node.env: what a training launcher (and a human) reads about the node."""
    keys = ("cloud", "region", "zone", "project", "stack", "cluster", "environment",
            "instance_type", "gpu", "gpus_per_node", "nodes", "purchase_model", "rdma",
            "dataset_uri", "data_dir", "checkpoint_uri", "checkpoint_dir", "scratch_dir",
            "checkpoint_signal", "train_pidfile", "train_unit", "notice_file", "progress_file",
            "notice_window_seconds", "idle_minutes", "autostop_minutes", "drain_at_epoch",
            "heartbeat_file", "heartbeat_minutes")
    return {f"GPULEASE_{k.upper()}": str(v[k]) for k in keys}


def _normalize(text: str) -> str:
    """Every file ends with exactly one newline (so the YAML literal block round-trips)."""
    return text.rstrip() + "\n"


def _render(template: str, variables: dict) -> str:
    return _normalize(environment().get_template(template).render(**variables))


def _selected(variables: dict) -> list[NodeFile]:
    return [f for f in NODE_FILES
            if variables["cloud"] in f.clouds and (f.when is None or variables[f.when])]


def _render_all(variables: dict) -> dict[str, str]:
    selected = _selected(variables)
    files = {f.key: _render(f.template, variables) for f in selected}
    entries = [{"path": f.path, "mode": f.mode, "content": files[f.key]} for f in selected]
    cloud_config = _render("cloud-config.yaml.j2", {**variables, "write_files": entries})
    return {CLOUD_CONFIG: cloud_config, **files}


def render_node_files(*, stack: StackSpec, decision: ClusterDecision,
                      purchase_model: str) -> dict[str, str]:
    """Every file a node of this cluster boots with: relative path -> content.

    ``cloud-config.yaml`` is the user data; the other keys are node paths without the leading
    ``/`` and are embedded in the cloud-config's ``write_files`` with exactly this content.
    """
    return _render_all(node_variables(stack=stack, decision=decision,
                                      purchase_model=purchase_model))


def render_user_data(*, stack: StackSpec, decision: ClusterDecision,
                     purchase_model: str) -> str:
    """The cloud-config text (first line ``#cloud-config``) a node of this cluster boots with."""
    return render_node_files(stack=stack, decision=decision,
                             purchase_model=purchase_model)[CLOUD_CONFIG]


def encode_user_data(cloud_config: str, *, cloud: str) -> str:
    """The user data value a cloud API takes for this cloud-config (``Cloud.encode_user_data``:
    on AWS base64 of the gzip-compressed text, under the 16 KB limit; on GCP the text itself).
    """
    if not registry.is_cloud(cloud):
        raise ValueError(f"unknown cloud {cloud!r}")
    return registry.get(cloud).encode_user_data(cloud_config)


def user_data_for(*, stack: StackSpec, decision: ClusterDecision, purchase_model: str) -> str:
    """render_user_data() encoded for the cluster's cloud API (see encode_user_data)."""
    return encode_user_data(render_user_data(stack=stack, decision=decision,
                                             purchase_model=purchase_model),
                            cloud=decision.cloud)
