"""`gpulease plan --against PREVIOUS` verifies what it compares with (issue 35 item 3):
identity (project, stack, and the organisation an export names), internal consistency (URNs,
types, one stack, a saved plan's Capacity Blocks those its clusters pinned), and time linear
in the number of resources."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from gpulease import money
from gpulease.cli import main
from gpulease.errors import EXIT_BAD_INPUT, EXIT_OK, ConfigError
from gpulease.planner import against as A
from gpulease.planner.mocks import PROJECT
from tests.test_second_run import BLOCKS_STACK, DAY, T0, pin_of, quote

ROOT = Path(__file__).resolve().parents[1]
RES = "aws:ec2/capacityReservation:CapacityReservation"
LT = "aws:ec2/launchTemplate:LaunchTemplate"


@pytest.fixture(autouse=True)
def in_project(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.fixture(scope="module")
def dev_plan() -> dict:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plan", "--stack", "dev", "--json"]) == EXIT_OK
    return json.loads(out.getvalue())


def export_of(plan: dict, *, stack: str = "dev", project: str = PROJECT, org=None) -> dict:
    """A `pulumi stack export` of ``plan``'s resources, their URNs under ``stack``/``project``
    (a Pulumi Cloud export names owner/project/stack in its secrets provider when ``org``)."""
    def urn(u: str) -> str:
        _s, _p, rest = u[len("urn:pulumi:"):].split("::", 2)
        return f"urn:pulumi:{stack}::{project}::{rest}"

    resources = [{"urn": f"urn:pulumi:{stack}::{project}::pulumi:pulumi:Stack::{project}-{stack}",
                  "custom": False, "type": "pulumi:pulumi:Stack"}]
    resources += [{"urn": urn(r["urn"]), "custom": True, "id": f"{r['name']}-id",
                   "type": r["type"], "inputs": copy.deepcopy(r["inputs"]), "outputs": {},
                   "protect": r["protect"]} for r in plan["resources"]]
    dep = {"manifest": {"version": "v3.272.0"}, "resources": resources}
    if org:
        dep["secrets_providers"] = {"type": "service", "state": {
            "url": "https://api.pulumi.com", "owner": org, "project": project, "stack": stack}}
    return {"version": 3, "deployment": dep}


def write(tmp_path: Path, doc, name: str = "prev.json") -> str:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


def refused(path: str) -> str:
    with pytest.raises(ConfigError) as err:
        A.load_previous(path)
    assert err.value.exit_code == EXIT_BAD_INPUT
    text = str(err.value)
    assert path in text
    return text


# ---- identity ------------------------------------------------------------------------------------
def test_the_programs_project_is_pulumi_yamls_name():
    assert yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["name"] == PROJECT


def test_another_projects_export_is_exit_2_naming_both_and_the_fix(dev_plan, tmp_path, capsys):
    path = write(tmp_path, export_of(dev_plan, project="billing-infra", org="acme"))
    prev = A.load_previous(path)
    assert (prev["project"], prev["stack"], prev["organization"]) == ("billing-infra", "dev",
                                                                       "acme")
    code = main(["plan", "--stack", "dev", "--against", path])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT, err
    assert (f'{path} is of project "billing-infra", stack "dev" (organisation "acme"); this '
            f'plan is of project "{PROJECT}", stack "dev" (Pulumi.yaml `name`)') in err
    assert "`pulumi stack export --stack dev > FILE`" in err and "Traceback" not in err


def test_our_own_export_with_its_organisation_compares_and_names_it(dev_plan, tmp_path):
    prev = A.load_previous(write(tmp_path, export_of(dev_plan, org="acme")))
    result = A.compare(prev, dev_plan, stack="dev")
    assert result["previous"]["organization"] == "acme"
    assert result["previous"]["project"] == PROJECT and result["counts"]["create"] == 0


def test_an_export_of_another_stack_is_refused(dev_plan, tmp_path):
    prev = A.load_previous(write(tmp_path, export_of(dev_plan, stack="prod")))
    with pytest.raises(ConfigError, match=f'of project "{PROJECT}", stack "prod"; this plan is '
                                          f'of project "{PROJECT}", stack "dev"'):
        A.compare(prev, dev_plan, stack="dev")


def test_an_export_mixing_two_stacks_is_exit_2_naming_both(dev_plan, tmp_path):
    doc = export_of(dev_plan)
    doc["deployment"]["resources"] += export_of(dev_plan, stack="prod")["deployment"][
        "resources"][3:4]
    n = len(doc["deployment"]["resources"]) - 1
    text = refused(write(tmp_path, doc))
    assert (f'mixes two stacks: deployment.resources[{n}] is of stack "prod" of project '
            f'"{PROJECT}", deployment.resources[0] of stack "dev"') in text


def test_an_export_whose_named_stack_is_not_its_urns_is_refused(dev_plan, tmp_path):
    doc = export_of(dev_plan, org="acme")
    doc["deployment"]["secrets_providers"]["state"]["project"] = "other"
    text = refused(write(tmp_path, doc))
    assert ('names project "other" (deployment.secrets_providers.state.project) but its '
            f'resources are of project "{PROJECT}"') in text


def test_a_saved_plan_relabelled_to_another_stack_is_refused(dev_plan, tmp_path):
    doc = copy.deepcopy(dev_plan)
    doc["stack"] = "staging"            # its URNs still say dev
    text = refused(write(tmp_path, doc))
    assert 'says it is a plan of stack "staging" but its resources are of stack "dev"' in text
    # relabelled throughout (stack and URNs): consistent, but not the planned stack's
    for r in doc["resources"]:
        r["urn"] = r["urn"].replace("urn:pulumi:dev::", "urn:pulumi:staging::", 1)
    prev = A.load_previous(write(tmp_path, doc))
    with pytest.raises(ConfigError, match='stack "staging"; this plan is of project'):
        A.compare(prev, dev_plan, stack="dev")


# ---- internal consistency ------------------------------------------------------------------------
@pytest.mark.parametrize("resources, says", [
    ({"a": {"urn": "x"}}, "deployment.resources is not a list"),
    ({}, "deployment.resources is not a list"),
    ([{"urn": "x", "type": "t", "custom": True}],
     "deployment.resources[0].urn 'x' is not a Pulumi URN (urn:pulumi:STACK::PROJECT::TYPE::NAME)"),
    ([{"urn": f"urn:pulumi:dev::{PROJECT}::aws:ec2/vpc:Vpc::v", "type": RES, "custom": True}],
     f"deployment.resources[0]: its URN names type 'aws:ec2/vpc:Vpc', its type field is '{RES}'"),
    ([{"urn": f"urn:pulumi:dev::{PROJECT}::{RES}::r", "type": RES, "custom": True}] * 2,
     "deployment.resources[1].urn is listed twice"),
])
def test_an_export_that_contradicts_itself_is_exit_2_naming_the_field(tmp_path, capsys,
                                                                       resources, says):
    path = write(tmp_path, {"version": 3, "deployment": {"resources": resources}})
    code = main(["plan", "--stack", "dev", "--against", path])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and says in err and path in err, err


def test_a_saved_plan_with_a_urn_of_x_or_a_wrong_type_is_exit_2(dev_plan, tmp_path):
    doc = copy.deepcopy(dev_plan)
    doc["resources"][2]["urn"] = "urn:pulumi:x"
    assert "resources[2].urn 'urn:pulumi:x' is not a Pulumi URN" in refused(write(tmp_path, doc))
    doc = copy.deepcopy(dev_plan)
    doc["resources"][1]["type"] = RES
    assert "resources[1]: its URN names type" in refused(write(tmp_path, doc))


@pytest.fixture(scope="module")
def block_plan(tmp_path_factory) -> dict:
    """A saved plan of a cluster holding a pinned (bought) Capacity Block."""
    import contextlib
    import io

    stack = copy.deepcopy(BLOCKS_STACK)
    stack["gpulease:clusters"][0]["capacity_block"] = pin_of(quote(T0))
    f = tmp_path_factory.mktemp("blocks") / "Pulumi.blocks.yaml"
    f.write_text(yaml.safe_dump({"config": stack}))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plan", "--config", str(f), "--now", "2026-12-03T13:00:00Z",
                     "--json"]) == EXIT_OK
    return json.loads(out.getvalue())


def test_a_saved_plan_whose_block_is_relabelled_is_exit_2_never_0(block_plan, tmp_path,
                                                                    capsys):
    doc = copy.deepcopy(block_plan)
    assert A.load_previous(write(tmp_path, doc))["kind"] == "plan"     # as saved: accepted
    blk = next(r for r in doc["resources"] if r["type"] == A.BLOCK_TYPE)
    new_offer = quote(T0 + DAY)["capacityBlockOfferingId"]
    blk["inputs"]["capacityBlockOfferingId"] = new_offer   # the next run's: a second purchase
    path = write(tmp_path, doc)
    code = main(["plan", "--config", "stacks/Pulumi.dev.yaml", "--against", path])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT, err
    bought = block_plan["clusters"][0]["capacity_block"]["offering_id"]
    assert (f"contradicts itself: clusters[0].capacity_block.offering_id is '{bought}', the "
            f"block it bought, but resource 'train-block' of cluster 'train' has "
            f"capacityBlockOfferingId '{new_offer}'") in err


def test_a_saved_plan_without_its_bought_blocks_resource_is_exit_2(block_plan, tmp_path):
    doc = copy.deepcopy(block_plan)
    blk = next(r for r in doc["resources"] if r["type"] == A.BLOCK_TYPE)
    doc["resources"].remove(blk)
    # the totals kept true to the resources: only the contradiction is left
    doc["totals"]["monthly_usd"] = money.json_number(
        money.usd(doc["totals"]["monthly_usd"]) - money.usd(blk["monthly_usd"]))
    text = refused(write(tmp_path, doc))
    assert ("a block its cluster 'train' holds, but no Capacity Block resource of that cluster "
            "is in resources") in text


# ---- URNs ----------------------------------------------------------------------------------------
_names = st.text(alphabet="abcxyz019-_.", min_size=1, max_size=12)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(stack=_names, project=_names, parents=st.lists(st.sampled_from(
    ["gpulease:aws:GpuCluster", "gpulease:gcp:Net"]), max_size=2),
    type_=st.sampled_from([RES, LT, "pulumi:providers:aws", "pulumi:pulumi:Stack"]),
    name=st.text(min_size=1, max_size=20).filter(lambda s: s.strip() == s))
def test_a_well_formed_urn_reads_back_its_parts(stack, project, parents, type_, name):
    urn = f"urn:pulumi:{stack}::{project}::{'$'.join([*parents, type_])}::{name}"
    assert A.parse_urn(urn) == (stack, project, type_, name)
    # and nothing shorter, or with a stack or project Pulumi does not allow, parses
    assert A.parse_urn(urn.rsplit("::", 1)[0]) is None
    assert A.parse_urn(f"urn:pulumi:{stack}/x::{project}::{type_}::{name}") is None


# ---- linear in the number of resources -------------------------------------------------------------
def test_2500_reservations_in_use_are_each_found_and_one_unused_is_not(tmp_path):
    """Behaviour at the size that took a minute (bench/against.py has the times): every
    reservation a launch template names is in use, the one nobody names is not."""
    base = f"urn:pulumi:dev::{PROJECT}::"
    resources = []
    for i in range(2501):
        rid = f"cr-{i:017x}"
        resources.append({"urn": f"{base}{RES}::c{i}-odcr", "custom": True, "id": rid,
                          "type": RES, "inputs": {"instanceType": "p4d.24xlarge"}})
        if i < 2500:
            resources.append({"urn": f"{base}{LT}::c{i}-lt", "custom": True, "type": LT,
                              "inputs": {"capacityReservationSpecification": {
                                  "capacityReservationTarget": {
                                      "capacityReservationId": rid}}}})
    prev = A.load_previous(write(tmp_path, {"version": 3,
                                            "deployment": {"resources": resources}}))
    result = A.compare(prev, {"stack": "dev", "resources": [], "clusters": []}, stack="dev")
    assert result["counts"]["delete"] == 5001
    assert len(result["blocked"]) == 2500
    assert "c2500-odcr" not in {b["name"] for b in result["blocked"]}
