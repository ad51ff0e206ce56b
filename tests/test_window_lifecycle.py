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
    assert (w["start"], c["monthly_usd"]) == ("2027-01-04T11:30:00Z", PIN["upfront_fee_usd"])
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
