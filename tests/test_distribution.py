"""A real distribution (issue 25 item 1): the wheel built from this checkout carries every file
gpulease reads, declares only runtime dependencies, installs into an EMPTY virtualenv and plans,
renders and reaps (dry run, against moto) from a directory outside the checkout.

The install test (marked ``distribution``) creates a fresh virtualenv and lets pip install the
wheel with its dependencies (from pip's cache, pinned by constraints.txt): about 2 minutes at
load 11 on the 2-core build machine, most of it unpacking pulumi-aws and pulumi-gcp (see
docs/development.md). ``-m "not distribution"`` leaves it out of a quick local run.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import select
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
import yaml

from gpulease import datafiles
from gpulease import tags
from tests.fakes import moto_strict
from tests.timeouts import HANG_S

ROOT = Path(__file__).resolve().parents[1]
#: the test tools: in the `test` extra, never in a runtime install
TEST_TOOLS = {"pytest", "pytest-xdist", "moto", "hypothesis", "grafana-foundation-sdk",
              "hatchling", "import-linter"}
#: the build tools (issue 31 item 5): each regenerates a shipped file; in the repository and
#: the sdist, never in the wheel. Their paths inside gpulease/ before they moved to tools/.
BUILD_TOOLS = {"tools/catalog_snapshot.py": "gpulease/catalog/build/snapshot.py",
               "tools/quotes_build.py": "gpulease/quotes/build.py",
               "tools/conformance_specs.py": "gpulease/conformance/generate.py",
               "tools/replace_build.py": "gpulease/planner/replace_build.py",
               "tools/config_reference.py": "gpulease/config_reference.py",
               "tools/cli_reference.py": "gpulease/cli/reference.py"}


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    return subprocess.run(cmd, timeout=HANG_S, **kw)


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict[str, Path]:
    """The wheel and the sdist, built offline from this checkout by the declared backend."""
    out = tmp_path_factory.mktemp("dist")
    p = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
              "--no-index", "-q", "-w", str(out), str(ROOT)])
    assert p.returncode == 0, p.stderr
    s = _run([sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", str(out)],
             cwd=ROOT)
    assert s.returncode == 0, s.stderr
    (wheel,) = out.glob("gpulease-*.whl")
    (sdist,) = out.glob("gpulease-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist, "dir": out}


def _checkout_files(folder: str) -> set[str]:
    """Files of a checkout folder that git tracks or would (no caches)."""
    base = ROOT / folder
    return {str(p.relative_to(base)) for p in base.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def test_the_wheel_carries_every_data_file(dist):
    names = set(zipfile.ZipFile(dist["wheel"]).namelist())
    for folder in datafiles.TOP_LEVEL:   # templates/, policy-pack/ -> gpulease/_data/<folder>/
        want = {f"gpulease/{datafiles.BUNDLED}/{folder}/{f}" for f in _checkout_files(folder)}
        assert want and want <= names, sorted(want - names)[:5]
    # the Pulumi program: its entry point rides along, for `gpulease plan` of a wheel install
    assert f"gpulease/{datafiles.BUNDLED}/{datafiles.PROGRAM}/__main__.py" in names
    # one top-level package, gpulease; beside it only the documented pickle alias (a namespace
    # portion: no infra/__init__.py that would hide a user's own infra/ folder)
    top = {n.split("/", 1)[0] for n in names if "/" in n and ".dist-info/" not in n}
    assert top == {"gpulease", "infra"}, top
    assert [n for n in names if n.startswith("infra/")] == ["infra/clouds/gcp/reservation.py"]
    package_data = {str(p.relative_to(ROOT)) for p in (ROOT / "gpulease").rglob("*")
                    if p.is_file() and p.suffix not in (".py", ".pyc")
                    and "__pycache__" not in p.parts}
    assert {"gpulease/planner/data/lookups.json", "gpulease/catalog/families.json",
            "gpulease/conformance/data/specs.json"} <= package_data
    assert package_data <= names, sorted(package_data - names)[:5]
    assert not [n for n in names if n.endswith(".pyc") or n.startswith("tests/")]


def test_the_wheel_carries_no_build_tools(dist):
    """The build tools regenerate shipped files from the checkout: not in the wheel, neither as
    tools/ nor at their old places inside the package (nor a catalog/build/ package)."""
    names = set(zipfile.ZipFile(dist["wheel"]).namelist())
    assert not [n for n in names if n.startswith("tools/")]
    assert not set(BUILD_TOOLS.values()) & names, set(BUILD_TOOLS.values()) & names
    assert not [n for n in names if n.startswith("gpulease/catalog/build/")]
    # ... and nothing the wheel installs imports them
    shipped = [n for n in names if n.endswith(".py")]
    for n in shipped:
        text = zipfile.ZipFile(dist["wheel"]).read(n).decode("utf-8")
        assert not re.search(r"^\s*(from|import) tools\b", text, re.M), n


def test_the_wheel_declares_runtime_dependencies_and_test_tools_as_an_extra(dist):
    meta = zipfile.ZipFile(dist["wheel"]).read("gpulease-0.2.0.dist-info/METADATA").decode()
    reqs = Parser().parsestr(meta).get_all("Requires-Dist")
    def name(r: str) -> str:
        return re.split(r"[\s<>=!\[;]", r, maxsplit=1)[0].lower()

    runtime = {name(r) for r in reqs if "extra" not in r}
    extra = {name(r) for r in reqs if re.search(r"extra\s*==\s*['\"]test['\"]", r)}
    assert {"pulumi", "pulumi-aws", "pulumi-gcp", "boto3", "jinja2", "rich"} <= runtime
    assert not runtime & TEST_TOOLS, runtime & TEST_TOOLS
    assert TEST_TOOLS <= extra
    # the console script
    entry = zipfile.ZipFile(dist["wheel"]).read("gpulease-0.2.0.dist-info/entry_points.txt")
    assert b"gpulease = gpulease.cli:console" in entry


def test_the_sdist_carries_what_the_wheel_is_built_from(dist):
    with tarfile.open(dist["sdist"]) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for need in ("pyproject.toml", "Pulumi.yaml", "gpulease/datafiles.py",
                 "templates/bootstrap/cloud-config.yaml.j2", "policy-pack/__main__.py",
                 "gpulease/planner/data/lookups.json", "stacks/Pulumi.dev.yaml",
                 "tools/__init__.py", *BUILD_TOOLS):
        assert need in names, need


def test_data_is_found_through_one_module():
    """Every reader of a data folder asks gpulease.datafiles; only the Pulumi project directory
    uses its own file's location (the build tools writing into the checkout are in tools/)."""
    allowed = {"gpulease/quotes/store.py", "gpulease/reaper/destroy.py",
               "gpulease/clouds/aws/deploy.py"}
    users = {str(p.relative_to(ROOT)) for p in (ROOT / "gpulease").rglob("*.py")
             if "Path(__file__)" in p.read_text(encoding="utf-8")}
    assert users <= allowed, sorted(users - allowed)
    # in the checkout, the top-level folders are the checkout's own
    assert datafiles.templates() == ROOT / "templates"
    assert datafiles.policy_pack() == ROOT / "policy-pack"
    assert datafiles.missing() == []


# ---- the wheel in an empty virtualenv ----------------------------------------------------------
def _install(wheel: Path, where: Path) -> Path:
    """A new virtualenv with the wheel installed (dependencies from its metadata only)."""
    env_dir = where / "v"
    p = _run([sys.executable, "-m", "venv", str(env_dir)])
    assert p.returncode == 0, p.stderr
    # --no-compile: pip would otherwise byte-compile every module of pulumi-aws and pulumi-gcp
    # (tens of thousands of files; ~50 of its ~85 CPU-s here): an install-time speed-up with no
    # bearing on what the wheel installs; Python compiles what the runs below import.
    p = _run([str(env_dir / "bin" / "pip"), "install", "-q", "--no-compile", "-c",
              str(ROOT / "constraints.txt"),
              str(wheel)])
    assert p.returncode == 0, p.stderr[-3000:]
    return env_dir


@pytest.fixture
def project(tmp_path) -> Path:
    """A user's Pulumi project outside the checkout: Pulumi.yaml and the stack files only."""
    proj = tmp_path / "my-project"
    (proj / "stacks").mkdir(parents=True)
    (proj / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    for f in (ROOT / "stacks").glob("Pulumi.*.yaml"):
        (proj / "stacks" / f.name).write_text(f.read_text())
    return proj


def _clean_env(project: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "AWS_", "GOOGLE_", "GPULEASE_"))}
    env.update(HOME=str(project), NO_COLOR="1", **extra)
    return env


@pytest.mark.distribution
def test_the_wheel_in_an_empty_venv(dist, project, tmp_path):
    """One test (one virtualenv, ~2 min): what a user gets from `pip install gpulease`."""
    venv = _install(dist["wheel"], tmp_path)
    _runtime_has_no_test_tools(venv)
    _plans_and_renders_outside_the_checkout(venv, project)
    _a_users_own_infra_folder_hides_nothing(venv, project)
    _reaps_a_dry_run_against_moto(venv, project)
    _prints_its_data_folders(venv, project)
    _starts_the_policy_pack(venv, project)


def _runtime_has_no_test_tools(venv: Path) -> None:
    p = _run([str(venv / "bin" / "pip"), "list", "--format", "json"])
    installed = {re.sub(r"[-_.]+", "-", d["name"]).lower() for d in json.loads(p.stdout)}
    assert "gpulease" in installed and "pulumi-aws" in installed
    assert not installed & TEST_TOOLS, installed & TEST_TOOLS


def _plans_and_renders_outside_the_checkout(venv: Path, project: Path) -> None:
    gl = str(venv / "bin" / "gpulease")
    env = _clean_env(project)
    where = _run([str(venv / "bin" / "python"), "-c", "import gpulease, gpulease.datafiles as r; "
                  "print(gpulease.__file__); print(r.templates()); print(r.policy_pack())"],
                 cwd=project, env=env)
    pkg, tpl, pack = where.stdout.split()
    assert str(venv) in pkg and str(ROOT) not in where.stdout   # the wheel's copy, not ours
    assert Path(tpl, "bootstrap", "cloud-config.yaml.j2").is_file()
    assert Path(pack, "PulumiPolicy.yaml").is_file()

    plan = _run([gl, "plan", "--stack", "dev", "--format", "json"], cwd=project, env=env)
    assert plan.returncode == 0, plan.stderr
    doc = json.loads(plan.stdout)
    # the same plan as the checkout's (catalog, lookups, templates all found in the wheel)
    mine = _run([sys.executable, "-m", "gpulease.cli", "plan", "--stack", "dev", "--format", "json"],
                cwd=ROOT, env={**_clean_env(project), "PYTHONPATH": str(ROOT)})
    assert mine.returncode == 0, mine.stderr
    ref = json.loads(mine.stdout)
    assert sorted(r["urn"] for r in doc["resources"]) == sorted(r["urn"] for r in ref["resources"])
    assert doc["totals"] == ref["totals"] and doc["resources"]

    html = _run([gl, "plan", "--stack", "prod", "--format", "html", "--out", "prod.html"],
                cwd=project, env=env)
    assert html.returncode == 0, html.stderr   # prod: cluster templates, monitoring, reaper zip
    assert "<html" in (project / "prod.html").read_text()[:500].lower()

    boot = _run([gl, "render", "--stack", "dev", "--cluster", "sandbox", "--out", "boot"],
                cwd=project, env=env)
    assert boot.returncode == 0, boot.stderr
    rendered = {str(p.relative_to(project / "boot")) for p in (project / "boot").rglob("*")
                if p.is_file()}
    assert any(r.endswith("cloud-config.yaml") for r in rendered), rendered


def _a_users_own_infra_folder_hides_nothing(venv: Path, project: Path) -> None:
    """A Pulumi project's own ``infra/`` folder (a common name for the program's folder) beside
    the stacks: gpulease, its program (the wheel's copy) and the pickle alias old state needs
    still import (until 0.2.0 the package was ``infra``: "No module named 'infra.clouds'")."""
    own = project / "infra"
    (own / "clouds").mkdir(parents=True)
    (own / "__main__.py").write_text("raise SystemExit('the user program must not run')\n")
    (own / "network.py").write_text("VPC = 'mine'\n")
    env = _clean_env(project)
    probe = _run([str(venv / "bin" / "python"), "-c",
                  "import gpulease.datafiles as r, infra.network, infra.clouds.gcp.reservation as a;"
                  " from gpulease.clouds.gcp.reservation import ReservationProvider as P;"
                  " print(r.program_file()); print(infra.network.VPC, a.ReservationProvider is P)"],
                 cwd=project, env=env)
    assert probe.returncode == 0, probe.stderr
    program, mine = probe.stdout.strip().split("\n")
    assert str(venv) in program and program.endswith("gpulease/_data/infra/__main__.py")
    assert mine == "mine True"
    plan = _run([str(venv / "bin" / "gpulease"), "plan", "--stack", "dev", "--format", "json"],
                cwd=project, env=env)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["resources"]
    shutil.rmtree(own)


def _reaps_a_dry_run_against_moto(venv: Path, project: Path) -> None:
    server, url = moto_strict.start_server()
    try:
        session = moto_strict.test_session()
        ec2 = session.client("ec2", region_name="us-east-1", endpoint_url=url)
        asg = session.client("autoscaling", region_name="us-east-1", endpoint_url=url)
        ec2.create_launch_template(LaunchTemplateName="lt-a", LaunchTemplateData={
            "ImageId": "ami-12c6146b", "InstanceType": "g6.xlarge"})
        asg.create_auto_scaling_group(
            AutoScalingGroupName="dev-sandbox", LaunchTemplate={"LaunchTemplateName": "lt-a"},
            MinSize=1, MaxSize=1, DesiredCapacity=1, AvailabilityZones=["us-east-1a"],
            Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True, "ResourceId": "dev-sandbox",
                   "ResourceType": "auto-scaling-group"}
                  for k, v in {tags.CLUSTER: "sandbox", tags.ENVIRONMENT: "dev",
                               tags.DECLARED: tags.declared_value("dev", "sandbox"),
                               tags.IDLE_MINUTES: "30"}.items()])
        env = _clean_env(project, AWS_ENDPOINT_URL=url, AWS_ACCESS_KEY_ID="testing",
                         AWS_SECRET_ACCESS_KEY="testing", AWS_REGION="us-east-1")
        p = _run([str(venv / "bin" / "gpulease"), "reap", "--all", "--cloud", "aws", "--region",
                  "us-east-1", "--format", "json", "--audit-log", "audit.jsonl"],
                 cwd=project, env=env)
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        (c,) = doc["clusters"]
        assert (c["cluster"], c["environment"], c["applied"]) == ("sandbox", "dev", False)
        assert (project / "audit.jsonl").is_file()
        # a dry run: the group is as it was
        group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["dev-sandbox"])
        assert group["AutoScalingGroups"][0]["DesiredCapacity"] == 1
    finally:
        server.stop()


def _prints_its_data_folders(venv: Path, project: Path) -> None:
    p = _run([str(venv / "bin" / "python"), "-m", "gpulease.datafiles", "policy-pack"],
             cwd=project, env=_clean_env(project))
    assert p.returncode == 0 and Path(p.stdout.strip(), "__main__.py").is_file()
    bad = _run([str(venv / "bin" / "python"), "-m", "gpulease.datafiles", "stacks"],
               cwd=project, env=_clean_env(project))
    assert bad.returncode == 2 and "usage" in bad.stderr



def _starts_the_policy_pack(venv: Path, project: Path) -> None:
    """The wheel's CrossGuard pack boots as Pulumi starts a Python pack that names no virtualenv
    (the pulumi-analyzer-policy-python shim: ``python3 -u -m pulumi.policy ENGINE .`` in the
    pack's folder, with the first python3 on PATH): in the environment gpulease is installed in,
    its imports resolve and its gRPC server starts and prints its port, as the engine expects."""
    py = str(venv / "bin" / "python")
    pack = Path(_run([py, "-m", "gpulease.datafiles", "policy-pack"], cwd=project,
                     env=_clean_env(project)).stdout.strip())
    assert str(venv) in str(pack)
    assert yaml.safe_load((pack / "PulumiPolicy.yaml").read_text())["runtime"] == {
        "name": "python"}                      # no `virtualenv:` the wheel's folder cannot hold
    env = _clean_env(project, PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.Popen(["python3", "-u", "-m", "pulumi.policy", "127.0.0.1:9", "."],
                            cwd=pack, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], HANG_S)
        port = proc.stdout.readline().strip() if ready else ""
        if not port.isdigit():
            proc.kill()
            raise AssertionError(f"the pack did not start: {port!r} {proc.stderr.read()[-2000:]}")
    finally:
        proc.kill()
        proc.wait(timeout=HANG_S)
