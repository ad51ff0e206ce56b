"""Issue 34 item 4: after the window. A pinned Capacity Block that has started is continued (the
window re-planned from the block bought, past scheduled actions left out); one that has ended -
and that `pulumi refresh` dropped from the state - retires its cluster: nothing declared,
charged or bought again, and the plan says when it ended. Driven through `plan --against` with
a state export shaped like the one refresh leaves."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpulease.cli import main
from gpulease.errors import EXIT_OK, EXIT_POLICY
from tests.test_second_run import stack_export

ROOT = Path(__file__).resolve().parents[1]
BLOCK = "aws:ec2/capacityBlockReservation:CapacityBlockReservation"
SCHEDULE = "aws:autoscaling/schedule:Schedule"
PIN = {"offering_id": "cb-0123456789abcdef0", "region": "us-east-1",
       "availability_zone": "us-east-1a", "instance_type": "p5.48xlarge", "instance_count": 2,
       "start": "2027-01-04T11:30:00Z", "end": "2027-01-15T11:30:00Z",
       "upfront_fee_usd": 20766.24, "purchase_approved": True}
STACK = {"gpulease:owner": "ml", "gpulease:cost_center": "cc",
         "gpulease:budget_monthly_usd": 1000000, "gpulease:environment": "staging",
         "gpulease:clouds": {"aws": {"regions": ["us-east-1"]}},
         "gpulease:clusters": [{
             "name": "train", "gpu": "H100", "gpus": 16, "priority": 9,
             "window": {"earliest_start": "2027-01-04T00:00:00Z",
                        "deadline": "2027-01-25T00:00:00Z", "duration_hours": 240},
             "capacity_block": PIN}]}


@pytest.fixture(autouse=True)
def in_project(monkeypatch):
    monkeypatch.chdir(ROOT)


def _plan(f: Path, now: str, capsys, *extra) -> tuple[int, dict, str]:
    code = main(["plan", "--config", str(f), "--now", now, "--json", *extra])
    cap = capsys.readouterr()
    return code, (json.loads(cap.out) if cap.out.strip() else {}), cap.err


@pytest.fixture
def first(tmp_path, capsys):
    """The stack, and the state its first `pulumi up` (before the window) left."""
    f = tmp_path / "Pulumi.train.yaml"
    f.write_text(yaml.safe_dump({"config": STACK}))
    code, plan, err = _plan(f, "2026-12-03T09:00:00Z", capsys)
    assert code == EXIT_OK, err
    assert {r["name"] for r in plan["resources"] if r["type"] == SCHEDULE} == {
        "train-block-start", "train-block-drain"}
    return f, plan


def _state(tmp_path, plan: dict, *, drop=()) -> Path:
    state = stack_export(plan)
    state["deployment"]["resources"] = [r for r in state["deployment"]["resources"]
                                        if r["type"] not in drop]
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    return path


def test_a_started_block_is_continued_not_replanned(first, tmp_path, capsys):
    f, plan = first
    code, doc, err = _plan(f, "2027-01-06T00:00:00Z", capsys, "--against",
                           str(_state(tmp_path, plan)))
    assert code == EXIT_OK, err
    (c,) = doc["clusters"]
    w = c["window"]
    assert (w["model"], w["quote"]["offering_id"], w["quote"]["pinned"]) == (
        "capacity_block", PIN["offering_id"], True)
    assert (w["start"], c["one_time"]["usd"], c["monthly_usd"]) == (
        "2027-01-04T11:30:00Z", PIN["upfront_fee_usd"], 0)
    rows = {r["name"]: r for r in doc["against"]["resources"]}
    assert "train-block" not in rows and doc["against"]["one_time_usd"] == 0
    # the start action has passed: left out (AWS rejects a start time in the past), with a note
    assert rows["train-block-start"]["action"] == "delete"
    assert {r["name"] for r in doc["resources"] if r["type"] == SCHEDULE} == {
        "train-block-drain"}
    assert any("scheduled action start at 2027-01-04T11:30:00Z has passed" in x
               for x in doc["warnings"]), doc["warnings"]
    group = next(r for r in doc["resources"] if r["name"] == "train-block-asg")
    assert group["inputs"]["desiredCapacity"] == 2
    # the moment the plan was judged at is run metadata (plan --run-meta), not plan
    assert "judged_at" not in w


def test_an_ended_block_refresh_dropped_is_neither_charged_nor_bought_again(first, tmp_path,
                                                                            capsys):
    f, plan = first
    # `pulumi refresh` after the block's end: the provider reads the expired block as gone
    state = _state(tmp_path, plan, drop=(BLOCK,))
    code, doc, err = _plan(f, "2027-01-20T00:00:00Z", capsys, "--against", str(state))
    assert code == EXIT_OK, err
    assert doc["clusters"] == [] and doc["totals"]["monthly_usd"] == 0
    assert not [r for r in doc["resources"] if r["type"] == BLOCK]
    a = doc["against"]
    assert a["counts"]["create"] == 0 and a["one_time_usd"] == 0, a["resources"]
    assert a["monthly_usd"]["after"] == 0
    assert {r["action"] for r in a["resources"]} == {"delete"}
    assert any("Capacity Block cb-0123456789abcdef0 ended at 2027-01-15T11:30:00Z" in x
               and "retired" in x for x in doc["warnings"]), doc["warnings"]


def test_an_ended_block_months_later_is_not_charged(first, tmp_path, capsys):
    f, plan = first
    code, doc, err = _plan(f, "2027-06-01T00:00:00Z", capsys)
    assert code == EXIT_OK, err
    assert doc["totals"]["monthly_usd"] == 0 and doc["clusters"] == []


def test_an_ended_pin_of_a_monthly_cluster_is_not_bought_again(tmp_path, capsys):
    stack = json.loads(json.dumps(STACK))
    c = stack["gpulease:clusters"][0]
    del c["window"]
    c.update(hours_per_month=730, gpus=16)
    stack["gpulease:clouds"]["aws"]["capacity_blocks"] = True
    f = tmp_path / "Pulumi.m.yaml"
    f.write_text(yaml.safe_dump({"config": stack}))
    code, doc, err = _plan(f, "2027-02-01T00:00:00Z", capsys)
    assert code == EXIT_POLICY, err
    assert ("pinned Capacity Block cb-0123456789abcdef0 ended at 2027-01-15T11:30:00Z" in err
            and "remove the pin" in err), err


# ---- issue 34 item 5: every declared type in the replace table; prepaid kinds guarded ---------
def _window_types() -> set:
    """The resource types window clusters declare (AWS block, GCP flex-start and calendar)."""
    from tests import test_windows_components as W
    from gpulease.quotes.model import Quote, QuoteBook

    pinned = {**W.JOB, "capacity_block": W.PIN}
    types = {r.type for r in W.run(W.env_for(pinned)).resources}
    flex = Quote(kind="flex_start", cloud="gcp", region="us-central1",
                 instance_type="a3-highgpu-8g", quoted_at=W.NOW, source="gcp:cloudbilling.skus",
                 hourly_usd=38.0, live=True)
    types |= {r.type for r in W.run_gcp(W.gcp_env(W.GCP_JOB, QuoteBook(quotes=[flex]))).resources}
    cal = Quote(kind="calendar", cloud="gcp", region="us-central1",
                instance_type="a3-highgpu-8g", quoted_at=W.NOW, source="gcp:cloudbilling.skus",
                hourly_usd=40.0, live=True)
    types |= {r.type for r in W.run_gcp(W.gcp_env({**W.GCP_JOB, "priority": 9},
                                                  QuoteBook(quotes=[cal]))).resources}
    return types


def test_the_replace_table_covers_every_type_windows_declare():
    from gpulease.planner import against as A

    types = _window_types()
    for t in ("aws:autoscaling/schedule:Schedule", "gcp:compute/resizeRequest:ResizeRequest",
              "gcp:compute/futureReservation:FutureReservation"):
        assert t in types, sorted(types)   # the programs above do declare them
    cloud = sorted(t for t in types if t.split(":")[0] in ("aws", "gcp"))
    assert [t for t in cloud if t not in A.replace_data()["types"]] == []
    deploy = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    assert [t for t in cloud if f"`{t}`" not in deploy] == []
    data = A.replace_data()["types"]
    # upstream: every settable field of a resize request forces a new one
    assert {"resizeBy", "requestedRunDuration", "instanceGroupManager"} <= set(
        data["gcp:compute/resizeRequest:ResizeRequest"]["replace"])
    assert "scheduledActionName" in data["aws:autoscaling/schedule:Schedule"]["replace"]


def _res(urn_name: str, type_: str, inputs: dict) -> dict:
    return {"urn": f"urn:pulumi:s::gpulease::{type_}::{urn_name}", "type": type_,
            "inputs": inputs, "outputs": None, "id": None, "protect": False,
            "monthly_usd": 0.0, "cluster": "tune", "physical_name": None, "name": urn_name}


@pytest.mark.parametrize("type_", ["gcp:compute/futureReservation:FutureReservation",
                                   BLOCK, "gcp:compute/regionCommitment:RegionCommitment"])
def test_every_prepaid_kind_is_guarded(type_):
    """Replacing or deleting a future reservation (calendar mode), a block or a commitment is
    blocked (exit 4) unless its cluster opts in."""
    from gpulease.planner import against as A

    assert type_ in A.PREPAID_TYPES
    forced = A.replace_data()["types"][type_]["replace"][0]
    old = _res("tune-reservation", type_, {forced: "a"})
    prev = {"kind": "plan", "source": "p.json", "stack": "s", "resources": {old["urn"]: old}}
    new = dict(old, inputs={forced: "b"})
    for plan in ({"resources": [new], "clusters": []}, {"resources": [], "clusters": []}):
        result = A.compare(prev, plan, stack="s")
        (b,) = result["blocked"]
        assert b["prepaid"] == A.PREPAID_TYPES[type_] and b["cluster"] == "tune"
        assert "gpulease:allow_prepaid_replacement" in A.blocked_reason(result)
        assert A.compare(prev, plan, stack="s", allow=("tune",))["blocked"] == []


# ---- issue 34 item 2: the exit-4 message of an estimate -----------------------------------------
def test_an_estimated_block_is_never_offered_to_pin_and_names_the_config_file(tmp_path, capsys):
    stack = json.loads(json.dumps(STACK))
    del stack["gpulease:clusters"][0]["capacity_block"]
    f = tmp_path / "my-training.yaml"      # not stacks/Pulumi.<stack>.yaml
    f.write_text(yaml.safe_dump({"config": stack}))
    code = main(["plan", "--config", str(f), "--now", "2026-12-03T09:00:00Z"])
    err = capsys.readouterr().err
    assert code == EXIT_POLICY
    assert "This is an ESTIMATE from the published rate $39.3300 per instance-hour" in err
    assert "never pinned or approved" in err and "offering_id:" not in err
    assert "gpulease catalog quotes --source live --cloud aws --region us-east-1" in err
    assert f"under gpulease:clusters[0] in {f}" in err and "stacks/Pulumi." not in err
