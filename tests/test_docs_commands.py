"""Every shell block in README.md and docs/ is run, so documented commands cannot rot.

A fenced block whose info string starts with ``bash``, ``sh``, ``shell`` or ``console`` is run
with ``bash -euo pipefail`` in a scratch copy of the project (Pulumi.yaml, stacks/), with the
virtualenv's ``bin`` first on PATH, and must exit 0 (a documented non-zero exit is written
``cmd || test $? -eq 3``). A block that cannot run here says so in its info string:
``bash no-run: <reason>`` — and then every command in it must start with a program this
machine does not have or must not run (the Pulumi CLI, cloud CLIs, apt, the test suite itself,
node-side commands); anything else there is a documentation bug.
"""
from __future__ import annotations

import os
import re
import shutil
import textwrap
import subprocess
import sys
from pathlib import Path

import pytest

from tests.timeouts import HANG_S

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELLS = ("bash", "sh", "shell", "console")
#: what a `no-run` block may contain: commands that need what this machine cannot have.
NOT_RUNNABLE = ("pulumi ", "aws ", "gcloud ", "apt-get ", "sudo ", "torchrun ", "set -a",
                ".venv/bin/python -m pytest", "python -m pytest", "python3 -m venv ")
_BLOCK = re.compile(r"^([ \t]*)```([^\n]*)\n(.*?)^[ \t]*```", re.S | re.M)


def _blocks():
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in _BLOCK.finditer(text):
            info = m.group(2).strip()
            body = textwrap.dedent(m.group(3))
            if info.split()[:1] and info.split()[0] in SHELLS:
                line = text[:m.start()].count("\n") + 1
                yield pytest.param(path, line, info, body,
                                   id=f"{path.relative_to(ROOT)}:{line}")


BLOCKS = list(_blocks())


def _commands(body: str) -> list[str]:
    """Logical command lines: continuations joined, comments and blanks dropped."""
    out, cur = [], ""
    for raw in body.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        s = cur.strip()
        cur = ""
        if s and not s.startswith("#"):
            out.append(s.removeprefix("$ "))
    return out


def _sandbox(tmp: Path) -> Path:
    work = tmp / "project"
    work.mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", work / "Pulumi.yaml")
    shutil.copytree(ROOT / "stacks", work / "stacks")
    (work / "docs" / "img").mkdir(parents=True)
    venv = work / ".venv"
    venv.symlink_to(Path(sys.prefix))  # `.venv/bin/gpulease` as the docs write it
    return work


def test_there_are_shell_blocks_to_run():
    runnable = [p for p in BLOCKS if "no-run" not in p.values[2]]
    assert len(runnable) >= 5


@pytest.mark.parametrize("path,line,info,body", BLOCKS)
def test_documented_commands_run(tmp_path, path, line, info, body):
    where = f"{path.relative_to(ROOT)}:{line}"
    if "no-run" in info:
        reason = info.split("no-run", 1)[1].lstrip(":").strip()
        assert reason, f"{where}: a no-run block must say why (```bash no-run: <reason>)"
        bad = [c for c in _commands(body) if not c.startswith(NOT_RUNNABLE)]
        assert bad == [], f"{where}: these commands can run here, so they must: {bad}"
        return
    from tests.tools import DEBIAN_PACKAGE, require_tool

    for tool in DEBIAN_PACKAGE:  # a block using a Debian tool skips without it (fails in CI)
        if any(c.startswith(tool + " ") for c in _commands(body)):
            require_tool(tool)
    work = _sandbox(tmp_path)
    env = {**os.environ, "PATH": f"{Path(sys.prefix) / 'bin'}:{os.environ.get('PATH', '')}",
           "NO_COLOR": "1", "HOME": str(tmp_path)}
    for k in ("AWS_ENDPOINT_URL", "GPULEASE_GCP_ENDPOINT", "FORCE_COLOR"):
        env.pop(k, None)
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=work, env=env,
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, (f"{where}: exit {proc.returncode}\n--- stdout\n"
                                  f"{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}")
    assert "Traceback" not in proc.stderr, f"{where}:\n{proc.stderr[-3000:]}"


def test_ci_runs_readme_two_commands_verbatim():
    """The README's install-and-plan line and its test command are what `.ci/run` runs."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    install = re.search(r"^python3 -m venv \.venv && .*$", readme, re.M)
    tests = re.search(r"^\.venv/bin/python -m pytest.*$", readme, re.M)
    assert install and tests, "README lost its two commands"
    for cmd in (install.group(0), tests.group(0)):
        cmd = cmd.split("#")[0].strip()
        assert cmd in ci, f".ci/run does not run README's command: {cmd}"


def test_the_test_command_is_one_command_and_prints_skip_reasons():
    """README, docs/development.md and `.ci/run` give the same test command, and pyproject's
    addopts make it name every skip with its reason (`-r` with `s`; `f` and `E` keep failures
    and errors in the summary, which a bare `-rs` would drop)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    dev = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    pattern = re.compile(r"^\.venv/bin/python -m pytest.*$", re.M)
    commands = {name: {m.split("#")[0].strip() for m in pattern.findall(text)}
                for name, text in (("README.md", readme), ("docs/development.md", dev),
                                   (".ci/run", ci))}
    assert all(len(c) == 1 for c in commands.values()), commands
    assert len(set().union(*commands.values())) == 1, commands
    m = re.search(r'^addopts\s*=\s*"([^"]*)"', (ROOT / "pyproject.toml").read_text(), re.M)
    addopts = m.group(1).split() if m else []
    report = [a[2:] for a in addopts if a.startswith("-r")]
    assert report and set("fEs") <= set(report[0]), addopts
