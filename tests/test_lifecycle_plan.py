"""`gpulease plan` and the engine's lifecycle: dynamic providers checked through Pulumi's host
code at preview and at up."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gpulease.cli import main
from gpulease.errors import EXIT_BAD_INPUT, EXIT_OK
from gpulease.planner.dynamic import check_dynamic
from gpulease.planner.mocks import UNKNOWN_MASK, ProviderRejected
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


# ---- the preview run declares what the check needs (issue 23) --------------------------------
def _doubled_prod() -> dict:
    """The prod stack with every cluster twice (a second copy named ``<name>-b``), unlimited
    quota and budget, pre-training kept in Europe's GCP region: two reservations on GCP, two
    GCP clusters without one, six AWS clusters declared after them."""
    import copy

    from gpulease.config import read_stack_file

    values = copy.deepcopy(read_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml"))
    values["gpulease:budget_monthly_usd"] = 1e12
    for cloud in values["gpulease:clouds"].values():
        cloud["quota_gpus"] = {}
    values["gpulease:clusters"] += [{**c, "name": c["name"] + "-b"}
                                    for c in values["gpulease:clusters"]]
    for c in values["gpulease:clusters"]:
        if c["name"].startswith("pretrain"):
            c["regions"] = ["europe-"]
    return values


def _same_as_whole_preview(values: dict, stack: str):
    """The scoped preview run against the whole program's preview, resource by resource."""
    from gpulease.planner.dynamic import preview_clusters, run_preview
    from gpulease.planner.plan import run

    up = run(values, stack=stack)
    whole = run(values, stack=stack, preview=True)
    scope = preview_clusters(up)
    calls = []

    def scoped_run(clusters):
        calls.append(clusters)
        return run(values, stack=stack, preview=True, now=up.now, clusters=clusters)

    part = run_preview(up, scoped_run)
    assert calls == [scope], "the scoped run declared every dynamic resource: no second run"
    whole_by = {r.urn: r for r in whole.resources}
    for r in part.resources:
        w = whole_by[r.urn]
        assert (r.type, r.parent, r.inputs, r.outputs, r.physical_name, r.protect,
                r.depends_on, r.provider) == (w.type, w.parent, w.inputs, w.outputs,
                                              w.physical_name, w.protect, w.depends_on,
                                              w.provider), r.urn
    dynamic = sorted(r.urn for r in up.custom if r.type == RESERVATION)
    assert sorted(r.urn for r in part.custom if r.type == RESERVATION) == dynamic
    return up, whole, part, scope


def test_the_preview_run_declares_only_the_clusters_holding_a_dynamic_resource():
    up, whole, part, scope = _same_as_whole_preview(_doubled_prod(), "prod")
    assert scope == {"pretrain", "pretrain-b"}
    clusters = {r.name for r in whole.resources if r.type.endswith(":GpuCluster")}
    assert {r.name for r in part.resources if r.type.endswith(":GpuCluster")} == scope
    assert len(clusters) == 10
    # GCP is declared first: no AWS resource is needed for the check, nor the reaper
    assert not [r.urn for r in part.custom if r.type.startswith("aws:")]
    assert [r for r in whole.custom if r.type.startswith("aws:")]
    # what it skips is most of the program
    assert len(part.resources) < len(whole.resources) / 2


def test_the_scoped_preview_of_prod_is_the_whole_preview_for_what_it_declares():
    from gpulease.config import read_stack_file

    _same_as_whole_preview(read_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml"), "prod")


def test_a_dynamic_resource_outside_the_clusters_or_missed_runs_the_whole_preview():
    from gpulease.planner.dynamic import preview_clusters, run_preview

    up = program_run("prod")
    assert preview_clusters(up) == {"pretrain"}
    stack_urn = next(r.parent for r in up.resources if r.type.endswith(":GpuCluster"))
    outside = dataclasses.replace(up, resources=[
        dataclasses.replace(r, parent=stack_urn) if r.type == RESERVATION else r
        for r in up.resources])
    assert preview_clusters(outside) is None
    calls = []

    def fake_run(clusters):
        calls.append(clusters)
        return up if clusters is None else dataclasses.replace(up, resources=[
            r for r in up.resources if r.type != RESERVATION])

    assert run_preview(outside, fake_run) is up and calls == [None]
    calls.clear()
    # a scoped run that did not declare a dynamic resource: the whole program runs instead
    assert run_preview(up, fake_run) is up and calls == [frozenset({"pretrain"}), None]
