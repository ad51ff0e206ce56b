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


# ---- the quick tier (issue 36 item 6): `pytest -m quick` ---------------------------------------
#: test modules of pure units - no Pulumi program run, no cloud fake or moto server, no wheel -
#: the tier a developer runs before every commit (docs/development.md, "Test tiers"; measured
#: there). The full suite (README's command) stays what CI runs.
QUICK_MODULES = frozenset({
    "test_money", "test_purchase_models", "test_deadline", "test_progress",
    "test_inventory_model", "test_owned_config", "test_retry", "test_timeouts",
    "test_function_length", "test_reaper_decision", "test_reaper_schedule", "test_policy_blend",
    "test_policy_terms", "test_spot_risk", "test_catalog_schema", "test_catalog_invariants",
    "test_config", "test_config_demand", "test_config_hardening", "test_comment",
    "test_names", "test_gate", "test_diff", "test_layers",
})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module is not None and item.module.__name__.rsplit(".", 1)[-1] in QUICK_MODULES:
            item.add_marker(pytest.mark.quick)
