"""The second `pulumi up`: `gpulease plan --against PREVIOUS` and Capacity Blocks over time.

Every shipped stack planned twice with no change in between (a day apart, so quotes and
anything time-dependent move) must be a no-op: 0 creates, updates, replaces, deletes.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from gpulease.cli import main
from gpulease.config import read_stack_file
from gpulease.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_POLICY, ConfigError
from gpulease.clock import format_utc
from gpulease.model import parse_utc
from gpulease.planner import against as A
from gpulease.planner import mocks
from gpulease.planner.plan import build_plan, run
from tests.conftest import SHIPPED_STACKS

ROOT = Path(__file__).resolve().parents[1]
T0 = parse_utc("2026-12-03T13:00:00Z")
DAY = 86400.0
BLOCK = "aws:ec2/capacityBlockReservation:CapacityBlockReservation"


@pytest.fixture(autouse=True)
def in_project(monkeypatch):
    monkeypatch.chdir(ROOT)


def plan_of(values: dict, stack: str, now: float) -> dict:
    return build_plan(run(values, stack=stack, now=now), stack=stack)


def shipped(stack: str) -> dict:
    return read_stack_file(ROOT / "stacks" / f"Pulumi.{stack}.yaml")


def previous_plan(plan: dict, path: Path) -> dict:
    path.write_text(json.dumps(plan))
    return A.load_previous(str(path))


# ---- every shipped stack, twice ------------------------------------------------------------------
@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_a_second_plan_of_every_shipped_stack_changes_nothing(stack, tmp_path):
    first = plan_of(shipped(stack), stack, T0)
    second = plan_of(shipped(stack), stack, T0 + 8 * DAY)
    result = A.compare(previous_plan(first, tmp_path / "first.json"), second, stack=stack)
    assert result["counts"]["replace"] == 0 and result["counts"]["update"] == 0, \
        result["resources"]
    assert result["counts"]["create"] == result["counts"]["delete"] == 0, result["resources"]
    assert result["unchanged"] == len(second["resources"]) and result["blocked"] == []
    assert result["monthly_usd"]["delta"] == 0.0


def test_a_stack_export_of_the_first_up_is_a_no_op_too(tmp_path):
    """Against a state as `pulumi stack export` writes it: auto-names with the provider's own
    random suffix, provider-filled defaults (__defaults), ids, outputs, a secret, components and
    the stack resource."""
    plan = plan_of(shipped("prod"), "prod", T0)
    state = stack_export(plan)
    path = tmp_path / "prod.state.json"
    path.write_text(json.dumps(state))
    previous = A.load_previous(str(path))
    assert previous["kind"] == "state" and previous["stack"] == "prod"
    result = A.compare(previous, plan_of(shipped("prod"), "prod", T0 + DAY), stack="prod")
    assert result["resources"] == [], result["resources"]
    # the costs come back from the gpulease-monthly-usd / -cents tags the program stamped
    assert result["monthly_usd"]["before"] == pytest.approx(plan["totals"]["monthly_usd"],
                                                            abs=1.0)


def stack_export(plan: dict) -> dict:
    """A `pulumi stack export` (version 3) of the state the first `pulumi up` of ``plan`` would
    leave (apitype.UntypedDeployment / ResourceV3)."""
    resources = [{"urn": f"urn:pulumi:{plan['stack']}::gpulease::pulumi:pulumi:Stack::"
                         f"gpulease-{plan['stack']}", "custom": False,
                  "type": "pulumi:pulumi:Stack", "outputs": {"total_monthly_usd": 1}}]
    for r in plan["resources"]:
        inputs = copy.deepcopy(r["inputs"])
        if r.get("autoname"):
            # the provider's Check filled the name with its own random suffix; the state keeps
            # it (the program never sent one)
            assert r["autoname"] not in inputs and r["physical_name"]
            inputs[r["autoname"]] = r["physical_name"][:-7] + "f00dbad"
        inputs["__defaults"] = []
        if r["type"] == "aws:s3/bucketVersioning:BucketVersioning":
            inputs["expectedBucketOwner"] = "123456789012"      # a default the provider filled
            inputs["__defaults"] = ["expectedBucketOwner"]
        outputs = {**inputs, "id": f"{r['name']}-real-id"}
        if r["type"] == "gcp:storage/hmacKey:HmacKey":
            outputs["secret"] = {A.SECRET_SIG_KEY: "1b47061264138c4ac30d75fd1eb44270",
                                 "ciphertext": "v1:AAAA"}
        resources.append({"urn": r["urn"], "custom": True, "id": f"{r['name']}-real-id",
                          "type": r["type"], "inputs": inputs, "outputs": outputs,
                          "protect": r["protect"], "dependencies": []})
    return {"version": 3, "deployment": {
        "manifest": {"time": "2026-12-03T13:00:00Z", "magic": "x", "version": "v3.272.0"},
        "resources": resources}}


# ---- what changes, and why --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def prod_pair():
    a = plan_of(shipped("prod"), "prod", T0)
    return a, copy.deepcopy(a)


def _row(result, name):
    (row,) = [r for r in result["resources"] if r["name"] == name]
    return row


def test_each_action_and_the_property_that_forces_a_replacement(prod_pair, tmp_path):
    old, new = copy.deepcopy(prod_pair[0]), prod_pair[1]
    by_name = {r["name"]: r for r in old["resources"]}
    # an instance template's machine type is ForceNew upstream: replace, naming it
    tmpl = next(r for r in old["resources"]
                if r["type"] == "gcp:compute/instanceTemplate:InstanceTemplate")
    tmpl["inputs"]["machineType"] = "a2-highgpu-1g"
    # an ASG's max size is updated in place
    asg = next(r for r in old["resources"] if r["type"] == "aws:autoscaling/group:Group")
    asg["inputs"]["maxSize"] = asg["inputs"]["maxSize"] + 5
    # an ignored input (desiredCapacity: the reaper scales it) is not a change
    asg["inputs"]["desiredCapacity"] = 99
    # a resource only PREVIOUS has is deleted; one only the new plan has is created
    gone = copy.deepcopy(by_name["aws-us-east-1-net-s3"])
    gone["urn"] = gone["urn"].replace("aws-us-east-1-net-s3", "old-endpoint")
    gone["name"] = "old-endpoint"
    old["resources"].append(gone)
    old["resources"] = [r for r in old["resources"] if r["name"] != "aws-us-east-1-net-igw"]
    result = A.compare(previous_plan(old, tmp_path / "p.json"), new, stack="prod")
    assert result["counts"] == {"create": 1, "update": 1, "replace": 1, "delete": 1,
                                "unchanged": len(new["resources"]) - 3}
    t = _row(result, tmpl["name"])
    assert t["action"] == "replace" and t["replaced_by"] == ["machineType"]
    u = _row(result, asg["name"])
    assert u["action"] == "update" and u["properties"] == ["maxSize"]
    assert _row(result, "old-endpoint")["action"] == "delete"
    assert _row(result, "aws-us-east-1-net-igw")["action"] == "create"


def test_a_price_change_replaces_gcp_instance_templates_through_their_labels(prod_pair,
                                                                                tmp_path):
    """Upstream, a template's effective_labels are ForceNew and derived from labels: the cost
    label moving with a price replaces the template (and rolls its MIG); AWS launch templates
    take new tags in place."""
    old, new = copy.deepcopy(prod_pair[0]), prod_pair[1]
    for r in old["resources"]:
        if r["type"] == "gcp:compute/instanceTemplate:InstanceTemplate":
            r["inputs"]["labels"]["gpulease-monthly-cents"] = "1"
        if r["type"] == "aws:ec2/launchTemplate:LaunchTemplate":
            r["inputs"]["tags"]["gpulease-monthly-usd"] = "0.01"
    result = A.compare(previous_plan(old, tmp_path / "p.json"), new, stack="prod")
    actions = {(r["type"].rsplit(":", 1)[-1], r["action"]) for r in result["resources"]}
    assert actions == {("InstanceTemplate", "replace"), ("LaunchTemplate", "update")}
    assert all(r["replaced_by"] == ["labels"] for r in result["resources"]
               if r["action"] == "replace")


def test_the_reservation_provider_decides_its_own_diff_through_the_host(prod_pair, tmp_path):
    old, new = copy.deepcopy(prod_pair[0]), prod_pair[1]
    res = next(r for r in old["resources"] if r["type"] == mocks_type())
    res["inputs"]["count"] = res["inputs"]["count"] - 1       # resized in place
    result = A.compare(previous_plan(old, tmp_path / "p.json"), new, stack="prod")
    row = _row(result, res["name"])
    assert row["action"] == "update" and row["replaced_by"] == []
    res["inputs"]["placement_policy"] = res["inputs"]["placement_policy"] + "-old"
    result = A.compare(previous_plan(old, tmp_path / "p.json"), new, stack="prod")
    row = _row(result, res["name"])
    assert row["action"] == "replace" and row["replaced_by"] == ["placement_policy"]
    # a reservation the pretrain MIG uses: its replacement is blocked without the opt-in
    (b,) = result["blocked"]
    assert b["name"] == res["name"] and "a node group uses" in b["why"]
    result = A.compare(previous_plan(old, tmp_path / "p.json"), new, stack="prod",
                       allow=("pretrain",))
    assert result["blocked"] == [] and [a["name"] for a in result["allowed"]] == [res["name"]]


def mocks_type() -> str:
    return "pulumi-python:dynamic/gpulease:GceReservation"


# ---- Capacity Blocks over time --------------------------------------------------------------------
BLOCKS_STACK = {
    "gpulease:owner": "ml-platform", "gpulease:cost_center": "cc-ml-training",
    "gpulease:budget_monthly_usd": 400000,
    "gpulease:clouds": {"aws": {"regions": ["us-east-1"], "capacity_reservations": True,
                                "capacity_blocks": True}},
    "gpulease:clusters": [{"name": "train", "gpu": "H100", "gpus": 16, "hours_per_month": 200,
                           "priority": 9, "distributed": True}],
}
ASK = {"capacityDurationHours": 216, "instanceCount": 2, "instanceType": "p5.48xlarge"}


def quote(now: float) -> dict:
    return mocks.capacity_block_quote(dict(ASK), "us-east-1", mocks.load_lookups(), now)


def pin_of(q: dict, **extra) -> dict:
    return {"offering_id": q["capacityBlockOfferingId"], "region": "us-east-1",
            "availability_zone": q["availabilityZone"], "instance_type": q["instanceType"],
            "instance_count": q["instanceCount"], "start": q["startDateRange"],
            "end": q["endDateRange"], "upfront_fee_usd": float(q["upfrontFee"]),
            "purchase_approved": True, **extra}


def test_offline_quotes_behave_like_the_api_over_time():
    q0, q_later_today, q1 = quote(T0), quote(T0 + 3600), quote(T0 + DAY)
    # the earliest block starts at 11:30 UTC at least a day ahead, for the asked 9 days
    assert (q0["startDateRange"], q0["endDateRange"]) == ("2026-12-05T11:30:00Z",
                                                          "2026-12-14T11:30:00Z")
    # priced from the dated rate: 39.33 $/h x 216 h x 2 instances
    assert q0["upfrontFee"] == "16990.56"
    assert q_later_today == q0                      # the same offering within the day
    # a day later the earliest offering is another one: the old quote has expired
    assert q1["capacityBlockOfferingId"] != q0["capacityBlockOfferingId"]
    assert q1["startDateRange"] == "2026-12-06T11:30:00Z"
    # a start asked for past the 8-week horizon, or a type AWS does not sell here: none
    with pytest.raises(Exception, match="no EC2 Capacity Block Offering found"):
        mocks.capacity_block_quote({**ASK, "startDateRange": format_utc(T0 + 60 * DAY)},
                                   "us-east-1", mocks.load_lookups(), T0)
    with pytest.raises(Exception, match="no EC2 Capacity Block Offering found"):
        mocks.capacity_block_quote({**ASK, "instanceType": "p5.48xlarge"}, "eu-west-1",
                                   mocks.load_lookups(), T0)


def test_an_unpinned_block_stops_every_run_and_the_quote_moves(tmp_path):
    f = tmp_path / "Pulumi.blocks.yaml"
    f.write_text(yaml.safe_dump({"config": BLOCKS_STACK}))
    outs = []
    for now in ("2026-12-03T13:00:00Z", "2026-12-04T13:00:00Z"):
        code = main(["plan", "--config", str(f), "--now", now, "--json"])
        assert code == EXIT_POLICY
        outs.append(now)
    # each day's run names that day's quote (what an unpinned `pulumi up` would have bought)
    assert quote(T0)["capacityBlockOfferingId"] != quote(T0 + DAY)["capacityBlockOfferingId"]


def test_a_pinned_block_plans_the_same_block_on_the_second_run(tmp_path, capsys):
    stack = copy.deepcopy(BLOCKS_STACK)
    stack["gpulease:clusters"][0]["capacity_block"] = pin_of(quote(T0))
    f = tmp_path / "Pulumi.blocks.yaml"
    f.write_text(yaml.safe_dump({"config": stack}))
    assert main(["plan", "--config", str(f), "--now", "2026-12-03T13:00:00Z", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    saved = tmp_path / "first.json"
    saved.write_text(json.dumps(first))
    (c,) = first["clusters"]
    assert c["capacity_block"]["offering_id"] == quote(T0)["capacityBlockOfferingId"]
    assert c["capacity_block"]["status"] == "before its window"
    # a week later (quotes have moved on; the block is running): nothing to do
    code = main(["plan", "--config", str(f), "--now", "2026-12-10T13:00:00Z", "--against",
                 str(saved), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == EXIT_OK, doc["against"]
    assert doc["against"]["resources"] == [] and doc["clusters"][0]["capacity_block"][
        "status"] == "window open"
    blk = next(r for r in doc["resources"] if r["type"] == BLOCK)
    assert blk["inputs"]["capacityBlockOfferingId"] == quote(T0)["capacityBlockOfferingId"]
    assert blk["protect"] is True


def test_buying_another_block_over_a_bought_one_is_exit_4_unless_opted_in(tmp_path, capsys):
    stack = copy.deepcopy(BLOCKS_STACK)
    stack["gpulease:clusters"][0]["capacity_block"] = pin_of(quote(T0))
    f = tmp_path / "Pulumi.blocks.yaml"
    f.write_text(yaml.safe_dump({"config": stack}))
    main(["plan", "--config", str(f), "--now", "2026-12-03T13:00:00Z", "--json"])
    saved = tmp_path / "first.json"
    saved.write_text(capsys.readouterr().out)
    # the only way to another window is another offering: a second prepaid block
    stack["gpulease:clusters"][0]["capacity_block"] = pin_of(quote(T0 + DAY))
    f.write_text(yaml.safe_dump({"config": stack}))
    code = main(["plan", "--config", str(f), "--now", "2026-12-04T13:00:00Z", "--against",
                 str(saved)])
    cap = capsys.readouterr()
    assert code == EXIT_POLICY
    assert "[blocked] replace train-block: a prepaid Capacity Block" in cap.out
    assert "replaced: capacityBlockOfferingId changed" in cap.out
    assert "one-time $16,990.56 (prepaid purchases)" in cap.out
    assert ("the next `pulumi up` would replace train-block (a prepaid Capacity Block (not "
            "refundable; a replacement buys a second block); protected: `pulumi up` refuses to "
            "replace it; forced by capacityBlockOfferingId)" in cap.err)
    assert "list train in gpulease:allow_prepaid_replacement" in cap.err
    stack["gpulease:allow_prepaid_replacement"] = ["train"]
    f.write_text(yaml.safe_dump({"config": stack}))
    code = main(["plan", "--config", str(f), "--now", "2026-12-04T13:00:00Z", "--against",
                 str(saved)])
    cap = capsys.readouterr()
    assert code == EXIT_OK and "[allowed] replace train-block" in cap.out


def test_replacing_a_protected_bucket_is_what_pulumi_up_refuses(prod_pair, tmp_path):
    """Prod buckets are protected: the engine refuses their replacement, so the plan does too;
    the prepaid opt-in does not lift it."""
    old, new = copy.deepcopy(prod_pair[0]), prod_pair[1]
    bucket = next(r for r in old["resources"] if r["type"] == "gcp:storage/bucket:Bucket"
                  and r["protect"])
    bucket["inputs"]["location"] = "US"
    result = A.compare(previous_plan(old, tmp_path / "p.json"), new, stack="prod",
                       allow=(bucket["cluster"],))
    (b,) = result["blocked"]
    assert b["name"] == bucket["name"] and b["protected"] and b["prepaid"] is None
    assert b["why"] == "protected: `pulumi up` refuses to replace it"
    assert "deleted only after `pulumi state unprotect`" in A.blocked_reason(result)


def test_deleting_a_reservation_a_node_group_uses_is_blocked(tmp_path, capsys):
    code = main(["plan", "--stack", "prod", "--json"])
    saved = tmp_path / "prod.json"
    saved.write_text(capsys.readouterr().out)
    values = shipped("prod")
    values["gpulease:clusters"] = [c for c in values["gpulease:clusters"]
                                   if c["name"] != "eval-sweeps"]
    f = tmp_path / "Pulumi.prod.yaml"
    f.write_text(yaml.safe_dump({"config": values}))
    code = main(["plan", "--config", str(f), "--against", str(saved), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == EXIT_POLICY
    assert [b["name"] for b in doc["against"]["blocked"]] == ["eval-sweeps-odcr"]
    assert doc["against"]["counts"]["delete"] > 1
    assert doc["against"]["monthly_usd"]["delta"] < 0


# ---- PREVIOUS is untrusted input ---------------------------------------------------------------
@pytest.mark.parametrize("content, says", [
    ("not json", "not valid JSON"),
    ("[]", "is neither a `gpulease plan --json` document"),
    ('{"format": "gpulease-plan/1", "stack": "dev"}', "resources: must be the list"),
    ('{"format": "gpulease-plan/1", "stack": "dev", "resources": [{"urn": "urn:pulumi:dev::'
     'p::t::n", "type": "t", "name": "n", "cluster": "c", "monthly_usd": -1}]}',
     "monthly_usd"),
    ('{"version": 9, "deployment": {}}', "gpulease reads versions 1-3"),
    ('{"version": 3, "deployment": {"resources": [{"urn": 1}]}}',
     "is not a resource with a urn and a type"),
    ('{"hello": 1}', "is neither a `gpulease plan --json` document"),
    ('{"version": 3, "deployment": {"resources": [' + "[" * 80 + "]" * 80 + "]}}",
     "nested more than"),
])
def test_a_bad_previous_file_is_exit_2_naming_it(tmp_path, capsys, content, says):
    bad = tmp_path / "prev.json"
    bad.write_text(content)
    code = main(["plan", "--stack", "dev", "--against", str(bad)])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and f"{bad}: " in err and says in err


def test_previous_of_another_stack_is_refused(tmp_path, capsys):
    main(["plan", "--stack", "dev", "--json"])
    saved = tmp_path / "dev.json"
    saved.write_text(capsys.readouterr().out)
    with pytest.raises(ConfigError, match='is of project "gpulease", stack "dev"; this plan is of '
                                          'project "gpulease", stack "staging"'):
        A.compare(A.load_previous(str(saved)), plan_of(shipped("staging"), "staging", T0),
                  stack="staging")


# ---- the replace-forcing data --------------------------------------------------------------------------
def test_replace_data_covers_every_declared_type_and_names_its_sources():
    from tests.test_docs import _declared_types

    data = A.replace_data()
    for cloud, src in data["sources"].items():
        assert src["repository"].startswith("hashicorp/terraform-provider-")
        assert len(src["commit"]) == 40 and src["commit_date"][:2] == "20"
    missing = sorted(t for t in _declared_types()
                     if t.split(":")[0] in ("aws", "gcp") and t not in data["types"])
    assert missing == []
    types = data["types"]
    assert "capacityBlockOfferingId" in types[BLOCK]["replace"]
    assert "maxSize" not in types["aws:autoscaling/group:Group"]["replace"]
    assert "machineType" in types["gcp:compute/instanceTemplate:InstanceTemplate"]["replace"]
    assert "specificReservation.count" not in types["gcp:compute/reservation:Reservation"][
        "replace"]
