"""Tests that need a Debian tool skip with the install command when it is absent, and fail
instead under GPULEASE_REQUIRE_TOOLS=1 (what .ci/run sets after installing the tools)."""
from __future__ import annotations

import os
import stat

import pytest

from tests.tools import REQUIRE_ENV, require_tool, script_interpreter


def _fake_tool(directory, name: str, first_line: str = "#!/bin/sh") -> str:
    path = directory / name
    path.write_text(f"{first_line}\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_missing_tool_skips_with_the_apt_package(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"apt-get install -y prometheus"):
        require_tool("promtool")


@pytest.mark.parametrize("value", ["1", "true", "YES"])
def test_missing_tool_fails_when_tools_are_required(tmp_path, monkeypatch, value):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(REQUIRE_ENV, value)
    with pytest.raises(pytest.fail.Exception, match=r"chromium is not installed.*"
                                                     + REQUIRE_ENV + "=1 makes"):
        require_tool("chromium", "chromium-browser")


@pytest.mark.parametrize("value", ["", "0", "no"])
def test_other_values_keep_skipping(tmp_path, monkeypatch, value):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(REQUIRE_ENV, value)
    with pytest.raises(pytest.skip.Exception):
        require_tool("shellcheck")


def test_present_tool_and_alias_are_found(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    alias = _fake_tool(tmp_path, "chromium-browser")
    assert require_tool("chromium", "chromium-browser") == alias
    main = _fake_tool(tmp_path, "chromium")
    assert require_tool("chromium", "chromium-browser") == main


def test_script_interpreter_reads_the_shebang(tmp_path, monkeypatch):
    assert script_interpreter(_fake_tool(tmp_path, "a", "#!/usr/bin/python3 -E")) == \
        "/usr/bin/python3"
    python = _fake_tool(tmp_path, "python3")
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ.get("PATH", ""))
    assert script_interpreter(_fake_tool(tmp_path, "b", "#!/usr/bin/env python3")) == python
    assert script_interpreter(_fake_tool(tmp_path, "c", "echo no shebang")) == ""
