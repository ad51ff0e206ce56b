"""Issue 35 item 2: Capacity Block pins and approvals checked against each other, their window
and the decision. What the stack file alone decides is exit 2 (one offering pinned twice, a
block outside its window, an instance type of another GPU, a region outside the cluster's
residency); a pin the decision does not use is exit 4 (docs/deploy.md "Capacity Blocks");
``allow_prepaid_replacement`` names are checked with a did-you-mean (a warning from the stack
alone, exit 2 under ``plan --against``, which knows the removed clusters). Never a traceback,
nothing planned on a refusal."""
from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from gpulease.cli import main
from gpulease.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_POLICY
from gpulease.policy import windows as W
from gpulease.quotes import block_window_problem, shorter_block_hours, valid_block_hours
from gpulease.quotes.store import shipped_book

ROOT = Path(__file__).resolve().parents[1]
UTC = dt.timezone.utc
NOW = "2026-12-03T09:00:00Z"
PIN = {"offering_id": "cb-0123456789abcdef0", "region": "us-east-1",
       "availability_zone": "us-east-1a", "instance_type": "p5.48xlarge", "instance_count": 2,
       "start": "2027-01-04T11:30:00Z", "end": "2027-01-15T11:30:00Z",
       "upfront_fee_usd": 20766.24, "purchase_approved": True}
JOB = {"name": "train", "gpu": "H100", "gpus": 16, "priority": 9,
       "window": {"earliest_start": "2027-01-04T00:00:00Z",
                  "deadline": "2027-01-25T00:00:00Z", "duration_hours": 240},
       "capacity_block": PIN}
STACK = {"gpulease:owner": "ml", "gpulease:cost_center": "cc",
         "gpulease:budget_monthly_usd": 1000000, "gpulease:environment": "staging",
         "gpulease:clouds": {"aws": {"regions": ["us-east-1"]}},
         "gpulease:clusters": [JOB]}


@pytest.fixture(autouse=True)
def in_project(monkeypatch):
    monkeypatch.chdir(ROOT)


def _stack(**cluster) -> dict:
    s = copy.deepcopy(STACK)
    c = s["gpulease:clusters"][0]
    for k, v in cluster.items():
        if isinstance(v, dict) and isinstance(c.get(k), dict):
            c[k].update(v)
        else:
            c[k] = v
    return s


def _plan(tmp_path, stack: dict, capsys, *extra) -> tuple[int, str, str]:
    f = tmp_path / "Pulumi.pins.yaml"
    f.write_text(yaml.safe_dump({"config": stack}))
    code = main(["plan", "--config", str(f), "--now", NOW, *extra])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err and "internal error" not in cap.err, cap.err
    return code, cap.out, cap.err


def _refused(tmp_path, stack, capsys, code_wanted, *extra) -> str:
    code, out, err = _plan(tmp_path, stack, capsys, "--json", *extra)
    assert code == code_wanted, err
    assert out == "", "nothing is planned on a refusal"
    return err


# ---- exit 2: what the stack file alone decides ------------------------------------------------
def test_two_clusters_pinning_one_offering_is_exit_2_naming_both(tmp_path, capsys):
    s = copy.deepcopy(STACK)
    s["gpulease:clusters"].append({**copy.deepcopy(JOB), "name": "train2"})
    err = _refused(tmp_path, s, capsys, EXIT_BAD_INPUT)
    assert ("gpulease:clusters[1].capacity_block.offering_id: \"cb-0123456789abcdef0\" is "
            "pinned by cluster \"train\" too (gpulease:clusters[0].capacity_block)") in err
    assert "Pulumi.pins.yaml" in err and "pin a quote of its own for each cluster" in err
    assert "clusters[0].capacity_block.offering_id" not in err     # the first pin is fine


def test_a_block_starting_before_the_window_is_exit_2(tmp_path, capsys):
    err = _refused(tmp_path, _stack(window={"earliest_start": "2027-01-05T00:00:00Z"}), capsys,
                   EXIT_BAD_INPUT)
    assert ("gpulease:clusters[0].capacity_block.start: the block starts at "
            "2027-01-04T11:30:00Z, before the window's earliest_start 2027-01-05T00:00:00Z"
            in err), err
    assert "(gpulease:clusters[0].window); pin a quote for this window" in err


def test_a_block_starting_after_the_deadline_is_exit_2(tmp_path, capsys):
    late = {**PIN, "start": "2027-01-26T11:30:00Z", "end": "2027-02-06T11:30:00Z"}
    err = _refused(tmp_path, _stack(capacity_block=late), capsys, EXIT_BAD_INPUT)
    assert ("capacity_block.start: the block starts at 2027-01-26T11:30:00Z, at or after the "
            "window's deadline 2027-01-25T00:00:00Z") in err, err


def test_a_block_days_past_the_deadline_is_exit_2(tmp_path, capsys):
    err = _refused(tmp_path, _stack(window={"deadline": "2027-01-07T00:00:00Z",
                                            "duration_hours": 24}), capsys, EXIT_BAD_INPUT)
    assert ("capacity_block.end: the block ends at 2027-01-15T11:30:00Z, 8.5 days after the "
            "window's deadline 2027-01-07T00:00:00Z: a 10-day block from the same start would "
            "already run until the deadline") in err, err


def test_a_block_past_the_deadline_only_by_what_block_times_force_is_planned(tmp_path, capsys):
    """240 h from the block's 11:30 start need 10 days and 30 minutes (instances stop 30 min
    before the end): an 11-day block ending 11.5 h after a midnight deadline is the shortest."""
    code, out, err = _plan(tmp_path, _stack(window={"deadline": "2027-01-15T00:00:00Z"}), capsys,
                           "--json")
    assert code == EXIT_OK, err
    (c,) = json.loads(out)["clusters"]
    assert c["capacity_block"]["offering_id"] == PIN["offering_id"]


def test_a_pin_of_another_gpu_is_exit_2_naming_the_types_that_fit(tmp_path, capsys):
    err = _refused(tmp_path, _stack(gpu="A100"), capsys, EXIT_BAD_INPUT)
    assert ('gpulease:clusters[0].capacity_block.instance_type: "p5.48xlarge" has H100 GPUs, '
            'but cluster "train" runs A100 (gpulease:clusters[0].gpu)') in err, err
    assert "p4d.24xlarge" in err


def test_a_pin_outside_the_clusters_residency_is_exit_2(tmp_path, capsys):
    s = _stack(regions=["us-west-2"])
    s["gpulease:clouds"]["aws"]["regions"].append("us-west-2")
    err = _refused(tmp_path, s, capsys, EXIT_BAD_INPUT)
    assert ('gpulease:clusters[0].capacity_block.region: "us-east-1" is outside the cluster\'s '
            "residency list gpulease:clusters[0].regions (us-west-2)") in err, err


def test_every_finding_of_a_pin_at_once(tmp_path, capsys):
    s = _stack(gpu="A100", window={"earliest_start": "2027-01-05T00:00:00Z"})
    s["gpulease:clusters"].append({**copy.deepcopy(JOB), "name": "train2"})
    err = _refused(tmp_path, s, capsys, EXIT_BAD_INPUT)
    assert "clusters[0].capacity_block.instance_type" in err
    assert "clusters[0].capacity_block.start" in err
    assert "clusters[1].capacity_block.offering_id" in err


# ---- exit 4: the pin against the decision ---------------------------------------------------
def test_a_cluster_the_policy_moved_to_gcp_is_exit_4_with_the_way_back(tmp_path, capsys):
    """500 TB homed on GCP make GCP cheapest: the pinned block would be left unused."""
    s = _stack(dataset="lake")
    s["gpulease:clouds"]["gcp"] = {"project": "my-proj-123", "regions": ["us-central1"]}
    s["gpulease:storage"] = [{"name": "lake", "size_tb": 500, "home": "gcp:us-central1"}]
    err = _refused(tmp_path, s, capsys, EXIT_POLICY)
    assert "a pinned Capacity Block does not fit the plan (nothing was planned; exit 4)" in err
    assert ('gpulease:clusters[0].capacity_block: the policy put cluster "train" on gcp '
            "us-central1 a3-highgpu-8g, not on its pinned Capacity Block cb-0123456789abcdef0 "
            "(2 x p5.48xlarge in us-east-1)") in err, err
    assert "limit gpulease:clusters[0].regions to us-east-1" in err
    # the way back works: the cluster limited to the block's region plans the block
    s["gpulease:clusters"][0]["regions"] = ["us-east-1"]
    code, out, err = _plan(tmp_path, s, capsys, "--json")
    assert code == EXIT_OK, err
    assert json.loads(out)["clusters"][0]["capacity_block"]["offering_id"] == PIN["offering_id"]


def test_a_window_bought_another_way_than_its_pinned_block_is_exit_4(tmp_path, capsys):
    """A pin whose fee is above a reservation's price: the policy buys the reservation."""
    err = _refused(tmp_path, _stack(capacity_block={**PIN, "upfront_fee_usd": 90000.0}),
                   capsys, EXIT_POLICY)
    assert "a pinned Capacity Block does not fit the plan (nothing was planned; exit 4)" in err
    assert ('the plan reserves no nodes of cluster "train" with a block (the policy bought its '
            "window as reservation") in err, err


# ---- allow_prepaid_replacement -----------------------------------------------------------------
def test_an_opt_in_naming_no_cluster_warns_with_a_did_you_mean(tmp_path, capsys):
    s = _stack()
    s["gpulease:allow_prepaid_replacement"] = ["trian"]
    code, out, err = _plan(tmp_path, s, capsys)
    assert code == EXIT_OK, err
    assert ('gpulease:allow_prepaid_replacement[0]: "trian" names no cluster of this stack (did '
            'you mean "train"?)') in out + err


def test_an_opt_in_naming_no_cluster_of_stack_or_state_is_exit_2_under_against(tmp_path,
                                                                              capsys):
    code, first, err = _plan(tmp_path, _stack(), capsys, "--json")
    assert code == EXIT_OK, err
    saved = tmp_path / "first.json"
    saved.write_text(first)
    s = _stack()
    s["gpulease:allow_prepaid_replacement"] = ["train", "trian"]
    err = _refused(tmp_path, s, capsys, EXIT_BAD_INPUT, "--against", str(saved))
    assert ('gpulease:allow_prepaid_replacement[1]: "trian" names no cluster of this stack nor '
            f'of {saved} (did you mean "train"?)') in err, err
    assert "allow_prepaid_replacement[0]" not in err


def test_an_opt_in_naming_a_removed_cluster_the_state_holds_is_accepted(tmp_path, capsys):
    s = copy.deepcopy(STACK)
    s["gpulease:clusters"].append({**copy.deepcopy(JOB), "name": "old", "capacity_block": {
        **PIN, "offering_id": "cb-00000000000000001"}})
    code, first, err = _plan(tmp_path, s, capsys, "--json")
    assert code == EXIT_OK, err
    saved = tmp_path / "first.json"
    saved.write_text(first)
    s = _stack()                                     # "old" removed
    s["gpulease:allow_prepaid_replacement"] = ["old"]
    code, out, err = _plan(tmp_path, s, capsys, "--against", str(saved))
    assert "names no cluster of this stack nor" not in err
    assert code in (EXIT_OK, EXIT_POLICY) and "delete old-block" in out, out + err


# ---- one rule for the policy and the pin ---------------------------------------------------------
def _t(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.parametrize("start,end,field", [
    ("2027-01-03T11:30:00Z", "2027-01-14T11:30:00Z", "start"),     # before earliest_start
    ("2027-01-25T11:30:00Z", "2027-01-26T11:30:00Z", "start"),     # after the deadline
    ("2027-01-04T11:30:00Z", "2027-02-01T11:30:00Z", "end"),       # 28 days: 21 reach it
    ("2027-01-04T11:30:00Z", "2027-01-25T11:30:00Z", None),        # 21 days: 14 do not reach
    ("2027-01-24T11:30:00Z", "2027-01-25T11:30:00Z", None),        # 1 day: nothing shorter
])
def test_block_window_problem(start, end, field):
    got = block_window_problem(_t(start), _t(end), _t("2027-01-04T00:00:00Z"),
                               _t("2027-01-25T00:00:00Z"))
    assert (got[0] if got else None) == field, got


def test_shorter_block_hours_steps_down_through_the_valid_durations():
    assert shorter_block_hours(24) is None
    assert shorter_block_hours(14 * 24) == 13 * 24
    assert shorter_block_hours(21 * 24) == 14 * 24
    assert shorter_block_hours(182 * 24) == 175 * 24
    assert all(valid_block_hours(shorter_block_hours(d * 24)) for d in range(2, 15))


def _policy_block(earliest, deadline, hours, checkpointed=False):
    """The Capacity Block option the policy prices for a 2-node p5 work item (us-east-1,
    the shipped published rate)."""
    now = dt.datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
    w = W.WorkItem(nodes=2, duration_hours=hours, earliest_start=earliest, deadline=deadline,
                   now=now, checkpointed=checkpointed,
                   remainder_rate=98.32 if checkpointed else None, region="us-east-1",
                   instance_type="p5.48xlarge")
    quotes = shipped_book().for_offering("capacity_block", "aws", "us-east-1", "p5.48xlarge")
    assert quotes
    return W.capacity_block(w, quotes)


def test_the_policy_prices_a_block_that_overruns_a_midnight_deadline():
    """The rule's reason to exist: 240 h in a 10-day window need an 11-day block."""
    earliest, deadline = _t("2027-01-04T00:00:00Z"), _t("2027-01-14T00:00:00Z")
    opt = _policy_block(earliest, deadline, 216)
    assert opt.feasible and opt.bought_until > deadline
    assert block_window_problem(opt.bought_from, opt.bought_until, earliest, deadline) is None


@settings(max_examples=40, deadline=None, derandomize=True)
@given(lead_days=st.integers(0, 40), span_hours=st.integers(24, 60 * 24),
       share=st.floats(0.05, 1.0), checkpointed=st.booleans(), start_minute=st.integers(0, 1439))
def test_the_policys_own_blocks_pass_the_pin_rule(lead_days, span_hours, share, checkpointed,
                                                  start_minute):
    """Every block the policy prices for a window - what `gpulease plan` offers to pin - is one
    the pin check accepts: the two never disagree."""
    earliest = (dt.datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
                + dt.timedelta(days=lead_days, minutes=start_minute))
    deadline = earliest + dt.timedelta(hours=span_hours)
    opt = _policy_block(earliest, deadline, max(1.0, span_hours * share), checkpointed)
    if opt.feasible:
        assert block_window_problem(opt.bought_from, opt.bought_until, earliest, deadline) \
            is None, (opt.bought_from, opt.bought_until, earliest, deadline)


def test_another_stacks_previous_is_refused_for_that_reason_first(tmp_path, capsys):
    f = tmp_path / "Pulumi.other.yaml"
    f.write_text(yaml.safe_dump({"config": _stack()}))
    assert main(["plan", "--config", str(f), "--now", NOW, "--json"]) == EXIT_OK
    saved = tmp_path / "other.json"
    saved.write_text(capsys.readouterr().out)
    s = _stack()
    s["gpulease:allow_prepaid_replacement"] = ["trian"]
    err = _refused(tmp_path, s, capsys, EXIT_BAD_INPUT, "--against", str(saved))
    assert ('is of project "gpulease", stack "other"; this plan is of project "gpulease", '
            'stack "pins"') in err, err
    assert "names no cluster of this stack nor" not in err
