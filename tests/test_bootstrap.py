"""Node bootstrap rendering: every catalog offering x purchase model, checked by cloud-init and shellcheck."""
from __future__ import annotations

import base64
import gzip
import hashlib
import re
import json
import subprocess
import textwrap
from functools import lru_cache
from pathlib import Path

import jinja2
import pytest
import yaml

from gpulease import naming
from gpulease.bootstrap import render as R
from gpulease.bootstrap.fabric import FABRICS, fabric_env
from gpulease.bootstrap.settings import BootstrapSettings
from gpulease.catalog import load_catalog
from gpulease.clouds.aws import cloud as aws_cloud
from gpulease import tags
from gpulease.model import RDMA_KINDS
from gpulease.reaper import aws as reaper_aws
from gpulease.reaper import decision
from gpulease.reaper import gcp as reaper_gcp
from tests.fakes.gcp_compute_monitoring import FakeGcp
from tests.builders import one_cluster_stack
from tests.timeouts import HANG_S
from tests.tools import require_tool, script_interpreter, tool_missing

MODELS = R.NODE_PURCHASE_MODELS
#: libyaml's loader when present (same YAML 1.1 semantics, 20x faster over 936 documents).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _tool(name: str) -> str:
    # Skipped with the apt command when absent; .ci/run installs the tools and sets
    # GPULEASE_REQUIRE_TOOLS=1, which turns a missing tool into a failure.
    return require_tool(name)


def _cloud_init_python() -> str:
    """The Python the `cloud-init` script runs under (Debian: /usr/bin/python3), which can
    import `cloudinit`; skips like _tool when cloud-init is absent."""
    exe = _tool("cloud-init")
    interpreter = script_interpreter(exe)
    if not interpreter:
        tool_missing(f"{exe} has no #! line naming its Python (expected Debian's cloud-init)")
    return interpreter


@lru_cache(maxsize=None)
def all_renders() -> tuple:
    """(offering, purchase model, files) for every offering in the shipped catalog x model."""
    out = []
    for o in load_catalog().offerings:
        for model in MODELS:
            stack, d = one_cluster_stack(o, purchase_model=model)
            out.append((o, model, R.render_node_files(stack=stack, decision=d,
                                                      purchase_model=model)))
    return tuple(out)


def _embedded(cloud_config: str) -> dict[str, str]:
    """write_files of a cloud-config, decoded: node path (no leading /) -> content."""
    doc = yaml.load(cloud_config, Loader=_LOADER)
    out = {}
    for entry in doc["write_files"]:
        assert "encoding" not in entry  # plain text: what `gpulease render` shows is what boots
        out[entry["path"].lstrip("/")] = entry["content"]
    return out


# ---- every offering x purchase model ------------------------------------------------------
def test_renders_every_offering_and_model():
    renders = all_renders()
    catalog = load_catalog()
    assert len(renders) == len(catalog.offerings) * len(MODELS) >= 4
    for o, model, files in renders:
        cc = files[R.CLOUD_CONFIG]
        where = f"{o.cloud}/{o.region}/{o.instance_type}/{model}"
        assert cc.startswith("#cloud-config\n"), where
        embedded = _embedded(cc)
        # what `gpulease render` writes is exactly what boots
        assert embedded == {k: v for k, v in files.items() if k != R.CLOUD_CONFIG}, where
        assert ("usr/local/sbin/gpulease-spot-watcher" in files) == (model in ("spot", "mixed"))
        agent = ("opt/aws/amazon-cloudwatch-agent/etc/amazon-cloudwatch-agent.json"
                 if o.cloud == "aws" else "etc/google-cloud-ops-agent/config.yaml")
        assert agent in files, where
        encoded = R.encode_user_data(cc, cloud=o.cloud)
        if o.cloud == "aws":
            # EC2 user data limit: 16 KB before base64 -> the gzip bytes must fit.
            raw = base64.b64decode(encoded)
            assert len(raw) < aws_cloud.USER_DATA_LIMIT, (where, len(raw))
            assert gzip.decompress(raw).decode() == cc
        else:
            assert encoded == cc
        # the node's GPU count is what the check enforces
        assert f"EXPECTED=${{GPULEASE_GPUS_PER_NODE:-{o.gpus_per_node}}}" in \
            files["usr/local/sbin/gpulease-check-gpus"], where


def test_render_is_deterministic():
    o = load_catalog().offerings[0]
    stack, d = one_cluster_stack(o)
    a = R.render_user_data(stack=stack, decision=d, purchase_model="mixed")
    b = R.render_user_data(stack=stack, decision=d, purchase_model="mixed")
    assert a == b


# ---- cloud-init schema ---------------------------------------------------------------------
_SCHEMA_DRIVER = textwrap.dedent("""\
    # Runs cloud-init's own `schema` subcommand handler (cloudinit.config.schema
    # .handle_schema_args, what `cloud-init schema -c FILE` calls) over many files in one process.
    import argparse, sys
    from cloudinit.config import schema
    bad = 0
    for path in sys.argv[1:]:
        ns = argparse.Namespace(config_file=path, docs=None, system=False, annotate=False)
        try:
            schema.handle_schema_args("schema", ns)
        except SystemExit as exc:
            if exc.code:
                bad += 1
                print("INVALID", path, file=sys.stderr)
    sys.exit(1 if bad else 0)
""")


def _write_unique(tmp: Path, texts, suffix: str) -> list[Path]:
    paths = {}
    for text in texts:
        h = hashlib.sha256(text.encode()).hexdigest()[:16]
        if h not in paths:
            p = tmp / f"{h}{suffix}"
            p.write_text(text)
            paths[h] = p
    return list(paths.values())


def schema_shape(cloud_config: str) -> str:
    """What cloud-init's schema can tell apart in a cloud-config: the whole document with each
    write_files ``content`` replaced by a marker. The schema (schema-cloud-config-v1.json,
    ``write_files.items.properties.content``) types content as a plain string, with no pattern
    or enum, so two documents of one shape pass or fail together; the marker keeps the check
    that content is a string."""
    doc = yaml.load(cloud_config, Loader=_LOADER)
    for entry in doc.get("write_files") or ():
        if "content" in entry:
            assert isinstance(entry["content"], str), entry.get("path")
            entry["content"] = "<a string>"
    return json.dumps(doc, sort_keys=True, default=str)


def test_every_cloud_config_passes_cloud_init_schema(tmp_path):
    """Every render (797 offerings x 4 models), through cloud-init's own validator: one document
    of each schema shape (schema_shape) and one per cloud x fabric x model, so the check costs
    a few dozen validations instead of 3,188 (160 CPU-seconds: half an hour on a loaded 2-core
    machine, docs/development.md)."""
    python = _cloud_init_python()
    by_shape, by_kind = {}, {}
    for o, model, files in all_renders():
        by_shape.setdefault(schema_shape(files[R.CLOUD_CONFIG]), files[R.CLOUD_CONFIG])
        by_kind.setdefault((o.cloud, o.rdma, model), files[R.CLOUD_CONFIG])
    # the shapes follow the cloud and the purchase model, never an offering's values
    assert 2 <= len(by_shape) < len(all_renders()) // 10
    # and, beyond the shapes, one document per cloud x fabric x model
    files = _write_unique(tmp_path, [*by_shape.values(), *by_kind.values()], ".yaml")
    proc = subprocess.run([python, "-c", _SCHEMA_DRIVER, *map(str, files)],
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("Valid cloud-config:") == len(files)


def test_schema_shape_keeps_what_the_schema_checks():
    """Negative control for the grouping: a change the schema sees makes a new shape, a change
    of file content does not."""
    o = load_catalog().offerings[0]
    stack, d = one_cluster_stack(o)
    text = R.render_user_data(stack=stack, decision=d, purchase_model="mixed")
    content_only = text.replace("GPULEASE_STACK=", "GPULEASE_STACK_X=", 1)
    assert content_only != text and schema_shape(content_only) == schema_shape(text)
    for seen in (text.replace("permissions: '0755'", "permissions: [0755]", 1),
                 text.replace("ssh_pwauth: false", "ssh_pwauth: 'no'", 1),
                 text.replace("owner: root:root", "owner: [root]", 1)):
        assert seen != text and schema_shape(seen) != schema_shape(text)


def test_cloud_init_cli_on_each_fabric_and_model(tmp_path):
    """The real `cloud-init schema -c FILE` binary, once per cloud x fabric x purchase model."""
    exe = _tool("cloud-init")
    seen = {}
    for o, model, files in all_renders():
        seen.setdefault((o.cloud, o.rdma, model), files[R.CLOUD_CONFIG])
    assert {k[1] for k in seen} == set(RDMA_KINDS)
    for i, ((cloud, rdma, model), text) in enumerate(sorted(seen.items())):
        p = tmp_path / f"{cloud}-{rdma}-{model}.yaml"
        p.write_text(text)
        proc = subprocess.run([exe, "schema", "-c", str(p)], capture_output=True, text=True,
                              timeout=HANG_S)
        assert proc.returncode == 0 and "Valid cloud-config" in proc.stdout, (p.name, proc.stderr)


_DECODE_DRIVER = textwrap.dedent("""\
    # cloud-init's own user-data conversion (what it does with EC2 user data after base64):
    # gzip is detected and decompressed; the part must be the #cloud-config text again.
    import base64, sys
    from cloudinit.user_data import convert_string
    for path in sys.argv[1:]:
        raw = base64.b64decode(open(path).read())
        msg = convert_string(raw)
        payload = msg.get_payload(decode=True).decode()
        sys.stdout.write(payload)
        sys.stdout.write("\\0")
""")


def test_aws_user_data_is_decoded_by_cloud_init(tmp_path):
    python = _cloud_init_python()
    texts, paths = [], []
    for i, (o, model, files) in enumerate(r for r in all_renders() if r[0].cloud == "aws"):
        if i % 25:
            continue
        texts.append(files[R.CLOUD_CONFIG])
        p = tmp_path / f"{i}.b64"
        p.write_text(R.encode_user_data(files[R.CLOUD_CONFIG], cloud="aws"))
        paths.append(str(p))
    assert len(texts) >= 2
    proc = subprocess.run([python, "-c", _DECODE_DRIVER, *paths], capture_output=True,
                          text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\0")[:-1] == texts


def test_user_data_for_matches_the_cloud():
    for cloud in ("aws", "gcp"):
        o = _offering(cloud, "none")
        stack, d = one_cluster_stack(o)
        text = R.render_user_data(stack=stack, decision=d, purchase_model="spot")
        assert R.user_data_for(stack=stack, decision=d, purchase_model="spot") == \
            R.encode_user_data(text, cloud=cloud)
    with pytest.raises(ValueError, match="unknown cloud 'azure'"):
        R.encode_user_data("#cloud-config\n", cloud="azure")


def test_cloud_init_schema_check_rejects_a_broken_cloud_config(tmp_path):
    """Negative control: the schema check above can fail."""
    exe = _tool("cloud-init")
    o = load_catalog().offerings[0]
    stack, d = one_cluster_stack(o)
    text = R.render_user_data(stack=stack, decision=d, purchase_model="mixed")
    broken = text.replace("permissions: '0755'", "permissions: [0755]", 1)
    assert broken != text
    p = tmp_path / "broken.yaml"
    p.write_text(broken)
    proc = subprocess.run([exe, "schema", "-c", str(p)], capture_output=True, text=True)
    assert proc.returncode != 0


# ---- shellcheck -----------------------------------------------------------------------------
def _scripts(files: dict[str, str]) -> list[str]:
    keys = {f.key for f in R.NODE_FILES if f.is_script}
    return [v for k, v in files.items() if k in keys]


#: what an offering puts into a script: words of these characters only, so a script with other
#: values in their places parses the same (shell word characters; no quote, space or $)
_SHELL_WORD = re.compile(r"[A-Za-z0-9._-]+")


def script_shape(text: str, offering) -> str:
    """A script with the offering's own values (instance type, region, zones, GPU, accelerator)
    and every number replaced by placeholders: two scripts of one shape differ only inside shell
    words, which shellcheck cannot tell apart (it does not evaluate values)."""
    values = {offering.instance_type, offering.region, *(offering.zones or ()), offering.gpu,
              getattr(offering, "accelerator_type", None) or ""}
    for v in sorted((v for v in values if v), key=len, reverse=True):
        assert _SHELL_WORD.fullmatch(v), f"{v!r} is not a plain shell word"
        text = text.replace(v, "X")
    return re.sub(r"[0-9]+", "0", text)


def test_every_script_passes_shellcheck(tmp_path):
    """All 35,568 scripts of every offering x model hold 1,055 distinct texts but 26 shapes
    (:func:`script_shape`): shellcheck runs on one real script of each shape (about 1 s instead
    of 35 s: docs/development.md, "No test does 100 CPU-seconds of work in one step")."""
    exe = _tool("shellcheck")
    shapes: dict[str, str] = {}
    for offering, _, files in all_renders():
        scripts = _scripts(files)
        assert scripts and all(s.startswith("#!/bin/bash\n") for s in scripts)
        for text in scripts:
            shapes.setdefault(script_shape(text, offering), text)
        # the scripts embedded in the cloud-config are the same texts (checked decoded)
        embedded = _embedded(files[R.CLOUD_CONFIG])
        assert sorted(_scripts(embedded)) == sorted(scripts)
    assert len(shapes) >= len(R.NODE_FILES) // 2
    paths = _write_unique(tmp_path, list(shapes.values()), ".sh")
    proc = subprocess.run([exe, "--shell=bash", "--severity=info", *map(str, paths)],
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stdout[-4000:]


def test_shellcheck_rejects_a_broken_script(tmp_path):
    exe = _tool("shellcheck")
    p = tmp_path / "bad.sh"
    p.write_text("#!/bin/bash\nrm -rf $1/*\n")
    assert subprocess.run([exe, str(p)], capture_output=True).returncode != 0


# ---- variables and templates -----------------------------------------------------------------
def test_strict_undefined_fails_on_a_missing_variable():
    o = load_catalog().offerings[0]
    stack, d = one_cluster_stack(o)
    variables = R.node_variables(stack=stack, decision=d, purchase_model="spot")
    for f in R.NODE_FILES:
        if o.cloud not in f.clouds:
            continue
        R.environment().get_template(f.template).render(**variables)  # complete: renders
    broken = dict(variables)
    del broken["checkpoint_signal"]
    with pytest.raises(jinja2.UndefinedError, match="checkpoint_signal"):
        R.environment().get_template("checkpoint-hook.sh.j2").render(**broken)
    del broken["cluster"]
    with pytest.raises(jinja2.UndefinedError):
        R.environment().get_template("cloud-config.yaml.j2").render(**broken, write_files=[])


def test_every_template_is_used():
    names = {p.name for p in R.TEMPLATE_DIR.glob("*.j2")}
    assert names == {f.template for f in R.NODE_FILES} | {"cloud-config.yaml.j2"}


def test_unknown_purchase_model_is_rejected():
    o = load_catalog().offerings[0]
    stack, d = one_cluster_stack(o)
    with pytest.raises(ValueError, match="purchase_model 'preemptible'"):
        R.node_variables(stack=stack, decision=d, purchase_model="preemptible")


def _offering(cloud: str, rdma: str, gpu: str = None):
    for o in load_catalog().offerings:
        if o.cloud == cloud and o.rdma == rdma and (gpu is None or o.gpu == gpu):
            return o
    pytest.fail(f"catalog has no {cloud} offering with rdma={rdma} gpu={gpu}")


def test_variables_come_from_naming_tags_and_settings():
    o = _offering("gcp", "gpudirect-tcpx")
    stack, d = one_cluster_stack(o, bootstrap=BootstrapSettings(checkpoint_signal="SIGTERM"))
    v = R.node_variables(stack=stack, decision=d, purchase_model="spot")
    assert v["dataset_uri"] == naming.dataset_uri(stack, d)
    assert v["checkpoint_uri"] == naming.checkpoint_uri(stack, d)
    assert v["checkpoint_uri"] == f"gs://{naming.bucket_name(stack, 'lake')}/checkpoints/train/"
    assert (v["tag_cluster"], v["tag_environment"]) == (tags.CLUSTER, tags.ENVIRONMENT)
    assert v["notice_window_seconds"] == 30 and v["checkpoint_signal"] == "SIGTERM"
    files = R.render_node_files(stack=stack, decision=d, purchase_model="spot")
    rdzv = files["usr/local/sbin/gpulease-rendezvous"]
    # the cluster's MIGs (a mixed cluster: one per model), read at the project the stack names
    assert v["node_groups"] == ["train-on-demand", "train-spot"]
    assert "MIGS=(train-on-demand train-spot)" in rdzv
    assert '"$CLUSTER_MEMBERS" "$GCLOUD" ml-project "$zone" "${MIGS[@]}"' in rdzv
    assert "instances list" not in rdzv and "--filter" not in rdzv
    hook = files["usr/local/sbin/gpulease-checkpoint-hook"]
    assert "SIGNAL=${GPULEASE_CHECKPOINT_SIGNAL:-SIGTERM}" in hook
    mount = files["usr/local/sbin/gpulease-mount-data"]
    assert "gcsfuse" in mount and "--only-dir data" in mount and "--only-dir checkpoints/train" in mount

    a = _offering("aws", "efa")
    # dataset away from the cluster: staged
    stack, d = one_cluster_stack(a, home_region="eu-west-1")
    v = R.node_variables(stack=stack, decision=d, purchase_model="mixed")
    assert v["dataset_uri"] == f"s3://{naming.work_bucket_name(stack, 'train')}/stage/"
    assert v["notice_window_seconds"] == 120
    rdzv = R.render_node_files(stack=stack, decision=d,
                               purchase_model="mixed")["usr/local/sbin/gpulease-rendezvous"]
    assert f"Name=tag:{tags.CLUSTER},Values=train" in rdzv
    assert "X-aws-ec2-metadata-token-ttl-seconds" in rdzv


def test_no_dataset_means_no_data_mount():
    o = _offering("aws", "none")
    stack, d = one_cluster_stack(o, dataset=None, nodes=1, purchase_model="on_demand")
    files = R.render_node_files(stack=stack, decision=d, purchase_model="on_demand")
    mount = files["usr/local/sbin/gpulease-mount-data"]
    assert "--read-only" not in mount and "has no dataset" in mount
    assert naming.work_bucket_name(stack, "train") in mount  # checkpoints go to the work bucket
    setup = files["usr/local/sbin/gpulease-node-setup"]
    assert "gpulease-check-fabric" not in setup  # single node: no fabric check


# ---- fabric table ---------------------------------------------------------------------------
def test_fabric_table_covers_every_rdma_kind():
    assert set(FABRICS) == set(RDMA_KINDS)
    assert fabric_env("efa", gpu="H100")["FI_PROVIDER"] == "efa"
    assert fabric_env("efa", gpu="H100")["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert fabric_env("efa", gpu="A10G")["FI_EFA_USE_DEVICE_RDMA"] == "0"
    assert fabric_env("gpudirect-tcpx", gpu="H100")["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"] == \
        "eth1,eth2,eth3,eth4"
    assert len(FABRICS["gpudirect-tcpxo"].nics) == 8
    assert fabric_env("rdma", gpu="H200")["NCCL_NET"] == "gIB"
    assert fabric_env("none", gpu="L4")["NCCL_IB_DISABLE"] == "1"
    with pytest.raises(KeyError, match="valid: efa"):
        fabric_env("infiniband", gpu="H100")


def test_fabric_follows_the_decision_not_the_instance_name():
    o = _offering("aws", "efa", "H100")
    stack, d = one_cluster_stack(o)
    files = R.render_node_files(stack=stack, decision=d, purchase_model="mixed")
    assert "FI_PROVIDER=efa" in files["etc/gpulease/fabric.env"]
    assert "fi_info\" -p efa" in files["usr/local/sbin/gpulease-check-fabric"].replace(
        "$FI_INFO", "fi_info")
    # the same instance type used without its fabric (policy chose TCP) gets no EFA settings
    stack, d = one_cluster_stack(o, network="none")
    files = R.render_node_files(stack=stack, decision=d, purchase_model="mixed")
    assert "FI_PROVIDER" not in files["etc/gpulease/fabric.env"]
    assert "fi_info" not in files["usr/local/sbin/gpulease-check-fabric"]
    o = _offering("gcp", "gpudirect-tcpxo")
    stack, d = one_cluster_stack(o)
    check = R.render_node_files(stack=stack, decision=d,
                                purchase_model="spot")["usr/local/sbin/gpulease-check-fabric"]
    assert "for nic in eth1 eth2 eth3 eth4 eth5 eth6 eth7 eth8; do" in check


# ---- autostop, watcher, sshd ----------------------------------------------------------------
@pytest.mark.parametrize("environment,configured,expected", [
    ("dev", None, 57), ("staging", None, 57), ("prod", None, 0), ("prod", 30, 30),
    ("dev", 0, 0), ("dev", 15, 15)])
def test_autostop_minutes(environment, configured, expected):
    o = _offering("aws", "none")
    stack, d = one_cluster_stack(o, environment=environment, idle_minutes=45,
                          bootstrap=BootstrapSettings(autostop_minutes=configured))
    assert R.autostop_minutes(stack, d) == expected
    files = R.render_node_files(stack=stack, decision=d, purchase_model="on_demand")
    assert ("etc/systemd/system/gpulease-autostop.timer" in files) == (expected > 0)
    if expected:
        assert f"MINUTES=${{GPULEASE_AUTOSTOP_MINUTES:-{expected}}}" in \
            files["usr/local/sbin/gpulease-autostop"]
        assert "enable --now gpulease-autostop.timer" in files["usr/local/sbin/gpulease-node-setup"]


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_autostop_opt_out_key_comes_from_the_tag_module(cloud):
    """The autostop reads the opt-out under gpulease.tags.KEEP; the template spells no key."""
    assert tags.KEEP not in (R.TEMPLATE_DIR / "autostop.sh.j2").read_text()
    o = next(o for o in load_catalog().offerings if o.cloud == cloud)
    stack, d = one_cluster_stack(o)
    v = R.node_variables(stack=stack, decision=d, purchase_model="on_demand")
    assert v["tag_keep"] == tags.KEEP
    assert f"KEEP_KEY={tags.KEEP}\n" in R._render("autostop.sh.j2", v)
    # a different key in the variables is what the script then reads
    other = R._render("autostop.sh.j2", {**v, "tag_keep": "acme-keep"})
    assert "KEEP_KEY=acme-keep\n" in other and tags.KEEP not in other


def test_purchase_models_for():
    aws, gcp = _offering("aws", "none"), _offering("gcp", "none")
    for o, mix, expected in ((aws, "mixed", ("mixed",)), (aws, "spot", ("spot",)),
                             (gcp, "mixed", ("on_demand", "spot")), (gcp, "reserved", ("reserved",))):
        _, d = one_cluster_stack(o, purchase_model=mix)
        assert R.purchase_models_for(d) == expected


def test_sshd_disabled_unless_iap_ssh_is_configured():
    for o in (_offering("aws", "none"), _offering("gcp", "none")):
        stack, d = one_cluster_stack(o)
        setup = R.render_node_files(stack=stack, decision=d, purchase_model="spot")[
            "usr/local/sbin/gpulease-node-setup"]
        assert "systemctl disable --now ssh.service sshd.service" in setup
    stack, d = one_cluster_stack(_offering("gcp", "none"), ssh_via_iap=True)
    setup = R.render_node_files(stack=stack, decision=d, purchase_model="spot")[
        "usr/local/sbin/gpulease-node-setup"]
    assert "disable --now ssh" not in setup
    cc = yaml.safe_load(R.render_user_data(stack=stack, decision=d, purchase_model="spot"))
    assert cc["ssh_pwauth"] is False and cc["disable_root"] is True


def test_shutdown_cleaner_is_installed_everywhere():
    for o, model, files in all_renders()[:: max(1, len(all_renders()) // 40)]:
        unit = files["etc/systemd/system/gpulease-shutdown-clean.service"]
        assert "ExecStop=/usr/local/sbin/gpulease-shutdown-clean" in unit
        clean = files["usr/local/sbin/gpulease-shutdown-clean"]
        assert "--gpu-reset" in clean and "-delete" in clean


# ---- agent configs the reaper depends on -----------------------------------------------------
def test_cloudwatch_agent_publishes_what_the_reaper_reads():
    o = _offering("aws", "efa")
    stack, d = one_cluster_stack(o)
    files = R.render_node_files(stack=stack, decision=d, purchase_model="mixed")
    cfg = json.loads(files["opt/aws/amazon-cloudwatch-agent/etc/amazon-cloudwatch-agent.json"])
    m = cfg["metrics"]
    assert m["namespace"] == "CWAgent"
    assert "utilization_gpu" in m["metrics_collected"]["nvidia_gpu"]["measurement"]
    assert reaper_aws.METRIC == "nvidia_smi_utilization_gpu"  # agent prefix + measurement
    # the reaper queries with the InstanceId dimension only: the agent must roll up to it
    assert ["InstanceId"] in m["aggregation_dimensions"]
    assert m["append_dimensions"]["InstanceId"] == "${aws:InstanceId}"
    # how late a sample can arrive (buffered up to force_flush_interval, then up to 2 min until
    # retrievable) stays within the delay the reaper waits out (docs/reaper.md, "Late metrics")
    assert m["force_flush_interval"] + 120 <= decision.PUBLICATION_DELAY_S
    assert m["metrics_collected"]["nvidia_gpu"]["metrics_collection_interval"] == 60


def test_ops_agent_config_collects_gpu_metrics():
    o = _offering("gcp", "none")
    stack, d = one_cluster_stack(o)
    files = R.render_node_files(stack=stack, decision=d, purchase_model="spot")
    cfg = yaml.safe_load(files["etc/google-cloud-ops-agent/config.yaml"])
    receivers = cfg["metrics"]["receivers"]
    pipeline = cfg["metrics"]["service"]["pipelines"]["default_pipeline"]["receivers"]
    assert any(receivers[r]["type"] == "hostmetrics" for r in pipeline)
    assert reaper_gcp.METRIC == "agent.googleapis.com/gpu/utilization"
    # sampled every 60 s, then up to 240 s until visible: within the reaper's delay
    assert all(receivers[r]["collection_interval"] == "60s" for r in pipeline)
    assert FakeGcp().delay_s <= decision.PUBLICATION_DELAY_S


# ---- gpulease:bootstrap settings through the real config reader ---------------------------------
def _parse_with_bootstrap(bootstrap: dict):
    from gpulease.config import parse_stack_config
    values = {
        "gpulease:owner": "ml", "gpulease:cost_center": "cc", "gpulease:budget_monthly_usd": 1000,
        "gpulease:clouds": {"aws": {"regions": ["us-east-1"], "quota_gpus": {"us-east-1": 8}}},
        "gpulease:clusters": [{"name": "c", "gpu": "L4", "gpus": 1, "hours_per_month": 10,
                               "priority": 3}],
        "gpulease:bootstrap": bootstrap}
    return parse_stack_config(values, stack="t", source="stacks/Pulumi.t.yaml",
                              catalog=load_catalog())


def test_bootstrap_settings_are_validated():
    from gpulease.errors import ConfigError
    assert _parse_with_bootstrap({"checkpoint_signal": "usr2"}).bootstrap.checkpoint_signal == \
        "SIGUSR2"
    with pytest.raises(ConfigError) as exc:
        _parse_with_bootstrap({"checkpoint_signal": "SIGKILL", "autostop_minutes": -1})
    text = str(exc.value)
    assert exc.value.exit_code == 2
    assert "stacks/Pulumi.t.yaml: gpulease:bootstrap.checkpoint_signal" in text
    assert "'SIGKILL' is not a checkpoint signal: use one of SIGUSR1" in text
    assert "gpulease:bootstrap.autostop_minutes" in text
