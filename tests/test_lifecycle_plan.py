"""`gpulease plan` and the engine's lifecycle: dynamic providers checked through Pulumi's host
code at preview and at up."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from infra.cli import main
from infra.errors import EXIT_BAD_INPUT, EXIT_OK
from infra.planner.dynamic import check_dynamic
from infra.planner.mocks import UNKNOWN_MASK, ProviderRejected
from tests.conftest import program_run

ROOT = Path(__file__).resolve().parents[1]
RESERVATION = "pulumi-python:dynamic/gpulease:GceReservation"


@pytest.fixture(autouse=True)
def in_project(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_prod_plan_checks_its_reservation_through_the_host_at_preview_and_up(capsys):
    code = main(["plan", "--stack", "prod", "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert code == EXIT_OK
    (rec,) = plan["dynamic_providers"]
    assert rec["type"] == RESERVATION and rec["checked"] == ["preview", "up"]
    # the placement policy is created in the same update: unknown at preview
    assert rec["unknown_at_preview"] == ["placement_policy"]
    # and in `pulumi up` its self link has the Compute API's shape the provider validates
    res = next(r for r in plan["resources"] if r["type"] == RESERVATION)
    assert res["inputs"]["placement_policy"].startswith(
        "https://www.googleapis.com/compute/v1/projects/acme-ml-prod/regions/europe-west4/"
        "resourcePolicies/pretrain-reserved-placement-")


def test_a_stack_without_dynamic_resources_runs_no_preview(capsys):
    code = main(["plan", "--stack", "dev", "--json"])
    assert code == EXIT_OK and json.loads(capsys.readouterr().out)["dynamic_providers"] == []


def _with_inputs(prun, **changes):
    resources = [dataclasses.replace(r, inputs={**r.inputs, **changes})
                 if r.type == RESERVATION else r for r in prun.resources]
    return dataclasses.replace(prun, resources=resources)


def test_a_value_the_provider_refuses_at_up_fails_the_plan():
    up = program_run("prod")
    with pytest.raises(ProviderRejected) as err:
        check_dynamic(_with_inputs(up, count=1.5), None, stack="prod")
    text = str(err.value)
    assert "`pulumi up --stack prod` stops at the provider's check: count: 1.5 is not a whole " \
           "number of VMs" in text
    assert err.value.exit_code == EXIT_BAD_INPUT


def test_an_unknown_at_preview_passes_and_a_bad_known_value_does_not():
    up = program_run("prod")
    preview = _with_inputs(up, placement_policy=UNKNOWN_MASK, zone=UNKNOWN_MASK)
    (rec,) = check_dynamic(up, preview, stack="prod")
    assert rec["unknown_at_preview"] == ["placement_policy", "zone"]
    with pytest.raises(ProviderRejected, match="pulumi preview --stack prod` stops at the "
                                               "provider's check: count"):
        check_dynamic(up, _with_inputs(preview, count="two"), stack="prod")
