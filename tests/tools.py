"""Debian tools some tests run (chromium, promtool, shellcheck, cloud-init): skip when absent, fail in CI."""
from __future__ import annotations

import os
import shutil

import pytest

#: Set to 1 (as `.ci/run` does) to turn "tool missing, test skipped" into a test failure.
REQUIRE_ENV = "GPULEASE_REQUIRE_TOOLS"

#: command -> Debian package that ships it (what `.ci/run` installs).
DEBIAN_PACKAGE = {
    "chromium": "chromium",
    "promtool": "prometheus",
    "shellcheck": "shellcheck",
    "cloud-init": "cloud-init",
}


def tools_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip().lower() in ("1", "true", "yes")


def require_tool(name: str, *aliases: str) -> str:
    """Path of `name` (or the first alias found on PATH); otherwise skip the calling test with
    the apt command that installs it, or fail it when GPULEASE_REQUIRE_TOOLS=1."""
    for candidate in (name, *aliases):
        path = shutil.which(candidate)
        if path:
            return path
    package = DEBIAN_PACKAGE.get(name, name)
    tool_missing(f"{name} is not installed: `apt-get install -y {package}` "
                 f"(.ci/run installs it and sets {REQUIRE_ENV}=1)")
    raise AssertionError("unreachable")  # tool_missing always raises


def tool_missing(reason: str) -> None:
    """Skip the calling test with `reason`, or fail it when GPULEASE_REQUIRE_TOOLS=1."""
    if tools_required():
        pytest.fail(f"{reason}; {REQUIRE_ENV}=1 makes a missing tool a failure", pytrace=False)
    pytest.skip(reason)


def script_interpreter(path: str) -> str:
    """The interpreter on a script's `#!` line (cloud-init's Python, which can import cloudinit)."""
    with open(path, "rb") as fh:
        first = fh.readline().decode("utf-8", "replace").strip()
    if not first.startswith("#!"):
        return ""
    parts = first[2:].split()
    if parts and os.path.basename(parts[0]) == "env" and len(parts) > 1:
        return shutil.which(parts[1]) or ""
    return parts[0] if parts else ""
