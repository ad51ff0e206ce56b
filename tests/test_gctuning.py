"""One-shot processes (issue 23 item 3): the `gpulease` console entry freezes what a plan built
out of the collector's walks and exits without interpreter teardown, yet prints everything,
keeps its exit code and runs the atexit handlers; in-process callers (these tests) freeze
nothing."""
from __future__ import annotations

import gc
import subprocess
import sys
import threading

import pytest

from gpulease import gctuning
from gpulease.cli import main
from tests.conftest import ROOT
from tests.timeouts import HANG_S

_PROBE = """\
import atexit, gc, sys
atexit.register(lambda: sys.stderr.write(f"\\nATEXIT frozen={gc.get_freeze_count()}\\n"))
sys.argv = ["gpulease", *sys.argv[1:]]
from gpulease.cli import console
console()
"""


def _console(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _PROBE, *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=HANG_S)


def test_console_plan_freezes_exits_fast_and_loses_no_output():
    p = _console("plan", "--stack", "dev", "--no-color")
    assert p.returncode == 0, p.stderr[-2000:]
    # the whole report reached the pipe before os._exit: its last line is the explain hint
    assert p.stdout.rstrip().splitlines()[-1].startswith("why:"), p.stdout[-500:]
    frozen = int(p.stderr.rsplit("ATEXIT frozen=", 1)[1].split()[0])
    assert frozen > 100_000  # modules, decision and recorded resources out of the walks


def test_console_keeps_the_exit_code_and_its_reason():
    p = _console("plan", "--stack", "no-such-stack")
    assert p.returncode == 2
    assert "no-such-stack" in p.stderr and "ATEXIT" in p.stderr
    p = _console("plan", "--json", "--stack", "dev")
    assert p.returncode == 0 and p.stdout.rstrip().endswith("}")


def test_in_process_main_freezes_nothing(capsys):
    before = gc.get_freeze_count()
    assert not gctuning.is_one_shot()
    assert main(["plan", "--stack", "dev"]) == 0
    assert gc.get_freeze_count() == before
    assert gc.isenabled()


def test_exit_waits_for_a_running_thread(monkeypatch):
    """With another non-daemon thread alive, os._exit would kill it: a normal exit instead."""
    monkeypatch.setattr(gctuning, "_one_shot", True)
    release = threading.Event()
    t = threading.Thread(target=release.wait)
    t.start()
    try:
        with pytest.raises(SystemExit) as e:
            gctuning.exit(3)
        assert e.value.code == 3
    finally:
        release.set()
        t.join()


def test_settle_freezes_only_in_a_one_shot_process(monkeypatch):
    before = gc.get_freeze_count()
    gctuning.settle()
    assert gc.get_freeze_count() == before
    monkeypatch.setattr(gctuning, "_one_shot", True)
    try:
        gctuning.settle()
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()


def test_the_program_pauses_the_collector_only_in_a_one_shot_process(monkeypatch):
    with gctuning.collector_paused(only_one_shot=True):
        assert gc.isenabled()
    with gctuning.collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    before = gc.get_freeze_count()
    monkeypatch.setattr(gctuning, "_one_shot", True)
    try:
        with gctuning.collector_paused(only_one_shot=True):
            assert not gc.isenabled()
            built = [[] for _ in range(1000)]
        assert gc.isenabled() and gc.get_freeze_count() >= before + len(built)
    finally:
        gc.unfreeze()
