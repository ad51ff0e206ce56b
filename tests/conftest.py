"""Shared fixtures: plans of the shipped stacks, computed once per test session."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Property tests check behaviour, never time: no per-example deadline and no "data generation is
# too slow" health check, which a loaded machine trips with no fault in the code
# (tests/timeouts.py). A test's own @settings adds to this profile.
settings.register_profile("gpulease", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gpulease")

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_STACKS = ("dev", "staging", "prod", "hybrid")


@lru_cache(maxsize=None)
def program_run(stack: str):
    """THE Pulumi program run under mocks for a shipped stack (cached per session)."""
    from gpulease.config import read_stack_file
    from gpulease.planner.plan import run

    values = read_stack_file(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    return run(values, stack=stack)


@pytest.fixture(params=SHIPPED_STACKS)
def shipped_run(request):
    return request.param, program_run(request.param)


@pytest.fixture(scope="module")
def moto_url():
    """moto's server on 127.0.0.1 (a free port), for the tests that talk AWS through boto3."""
    from tests.fakes import moto_strict

    server, url = moto_strict.start_server()
    yield url
    server.stop()


@pytest.fixture(autouse=True)
def _plain_cli_output(monkeypatch):
    """Tests read the CLI's plain (piped) text: a FORCE_COLOR or TTY_COMPATIBLE in the
    environment that runs the suite (some CI runners set them) must not colour it."""
    for key in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(key, raising=False)


@pytest.fixture(autouse=True)
def _no_quotes_cache(monkeypatch, tmp_path_factory):
    """The quotes cache of the machine running the suite (~/.cache/gpulease/quotes.json) must
    not change plans: every test sees none unless it sets GPULEASE_QUOTES_CACHE itself."""
    monkeypatch.setenv("GPULEASE_QUOTES_CACHE",
                       str(tmp_path_factory.getbasetemp() / "no-quotes-cache.json"))
    # likewise the inventory cache (~/.cache/gpulease/inventory.json, `gpulease inventory`)
    monkeypatch.setenv("GPULEASE_INVENTORY_CACHE",
                       str(tmp_path_factory.getbasetemp() / "no-inventory-cache.json"))
