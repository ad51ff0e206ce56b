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

#: The AMIs the tests launch from (moto's default ``ami-12c6146b``, Amazon Linux). By default
#: moto loads about 400 default and per-region "latest" AMIs into every region's EC2 backend it
#: creates, and re-creates each one on every reset: ~0.2 s per region a test touched, paid again
#: by the next test's reset (2-3 s of setup per moto test in a full run). moto reads
#: MOTO_AMIS_PATH (a JSON list in its own amis.json format) instead when it is set before moto
#: is imported (moto/ec2/models/__init__.py): the tests get exactly these AMIs, and with
#: MOTO_ENABLE_AMI_VALIDATION (moto's settings.py; off by default, when moto launches from any
#: id) launching from any other id fails as it would on AWS.
TEST_AMIS = ("ami-12c6146b",)


def _moto_amis() -> None:
    import gzip
    import importlib.util
    import json
    import os
    import tempfile

    os.environ.setdefault("MOTO_ENABLE_AMI_VALIDATION", "true")
    if "MOTO_AMIS_PATH" in os.environ:
        return
    spec = importlib.util.find_spec("moto")
    if spec is None or spec.origin is None:
        return
    src = Path(spec.origin).parent / "ec2" / "resources" / "amis.json.gz"
    if not src.is_file():
        return
    with gzip.open(src, "rt", encoding="utf-8") as fh:
        amis = [a for a in json.load(fh) if a.get("ami_id") in TEST_AMIS]
    assert len(amis) == len(TEST_AMIS), f"moto's amis.json.gz lacks one of {TEST_AMIS}"
    fd, path = tempfile.mkstemp(prefix="gpulease-moto-amis-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(amis, fh)
    os.environ["MOTO_AMIS_PATH"] = path
    import atexit
    atexit.register(lambda: Path(path).unlink(missing_ok=True))


_moto_amis()
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


# ---- no credentials on this machine, for the tests of what commands say then ----------------
#: a port nothing listens on: any call that escapes the checks fails loudly, never reaches a cloud
DEAD = "http://127.0.0.1:9"


@pytest.fixture
def no_aws(monkeypatch, tmp_path):
    """botocore's whole chain finds nothing: no keys, no profile files, no instance metadata."""
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
              "AWS_DEFAULT_PROFILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
              "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", DEAD)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    import boto3

    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)


@pytest.fixture
def no_gcp(monkeypatch, tmp_path):
    """google-auth finds no Application Default Credentials (and asks no metadata server)."""
    for k in ("GOOGLE_APPLICATION_CREDENTIALS", "GPULEASE_GCP_ENDPOINT", "GOOGLE_CLOUD_PROJECT",
              "CLOUDSDK_CORE_PROJECT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")
