"""The node-side autostop shares the reaper's rule: an idle count never outlives the node's life
and a time from the future is no evidence (issue 14). The rendered script runs for real."""
from __future__ import annotations

import time

import pytest

from tests.test_bootstrap_watcher import AUTOSTOP, _files, _idle_node, _run


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_idle_count_lives_in_run_which_every_boot_empties(cloud, tmp_path):
    """A node started again after a stop must not stop at once on an idle count from before."""
    text = _files(cloud, tmp_path)[AUTOSTOP].read_text()
    assert "STATE_DIR=${GPULEASE_STATE_DIR:-/run/gpulease}" in text
    assert "/var/lib/gpulease" not in text


@pytest.mark.parametrize("written", [
    "future",                                 # clock stepped back / hand edit: in the future
    "garbage", "12e9", "-5",
])
def test_unusable_idle_count_restarts_instead_of_stopping(tmp_path, written):
    if written == "future":  # computed here: a collection-time value differs between workers
        written = str(int(time.time()) + 24 * 3600)
    script, env, stopped = _idle_node(tmp_path, "aws", "aws", {
        "describe-auto-scaling-instances": (0, "train-asg"), "describe-tags": (0, "0")})
    state = tmp_path / "state" / "last-busy"
    state.write_text(written)
    proc = _run(script, env)
    assert proc.returncode == 0, proc.stderr
    assert not stopped.exists()
    assert abs(int(state.read_text()) - time.time()) < 60       # counting starts now


def test_a_valid_idle_count_still_stops(tmp_path):
    script, env, stopped = _idle_node(tmp_path, "aws", "aws", {
        "describe-auto-scaling-instances": (0, "train-asg"), "describe-tags": (0, "0")})
    from tests.test_bootstrap_watcher import FakeMetadata

    with FakeMetadata("aws") as fake:
        proc = _run(script, {**env, "GPULEASE_METADATA_URL": fake.url})
    assert proc.returncode == 0 and stopped.exists(), proc.stdout + proc.stderr
