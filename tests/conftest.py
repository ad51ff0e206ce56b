"""Shared fixtures: plans of the shipped stacks, computed once per test session."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_STACKS = ("dev", "staging", "prod")


@lru_cache(maxsize=None)
def program_run(stack: str):
    """THE Pulumi program run under mocks for a shipped stack (cached per session)."""
    from infra.config import read_stack_file
    from infra.planner.plan import run

    values = read_stack_file(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    return run(values, stack=stack)


@pytest.fixture(params=SHIPPED_STACKS)
def shipped_run(request):
    return request.param, program_run(request.param)


@pytest.fixture(scope="module")
def moto_url():
    """moto's server on 127.0.0.1 (a free port), for the tests that talk AWS through boto3."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(autouse=True)
def _plain_cli_output(monkeypatch):
    """Tests read the CLI's plain (piped) text: a FORCE_COLOR or TTY_COMPATIBLE in the
    environment that runs the suite (some CI runners set them) must not colour it."""
    for key in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(key, raising=False)
