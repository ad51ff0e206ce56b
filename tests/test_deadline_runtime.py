"""The deadline rule at run time (issue 37 item 3), pure: gpulease.deadline.at_run_time (the
groups' sizes from the shared rule) and gpulease.reaper.decision.deadline_verdict (untrusted
tags, stopped jobs, the opt-out)."""
from __future__ import annotations

import pytest

from gpulease import deadline as dl
from gpulease import tags
from gpulease.purchase import ON_DEMAND, SPOT
from gpulease.reaper import decision as d

JOB = dl.Job(work_hours=6.0, deadline_hours=10.0, restart_hours=0.5, nodes=2)


def test_spot_when_there_even_behind():
    sw = dl.at_run_time(JOB, elapsed_hours=4, share_done=0.3, running=dl.NONE,
                        spot_available=True)
    assert (sw.choice.kind, sw.spot_nodes, sw.on_demand_nodes) == (SPOT, 2, 0)


def test_wait_for_spot_when_ahead_keeps_the_spot_group_asking():
    sw = dl.at_run_time(JOB, elapsed_hours=2, share_done=0.5, running=dl.NONE,
                        spot_available=False)
    assert (sw.choice.kind, sw.spot_nodes, sw.on_demand_nodes) == (dl.NONE, 2, 0)


def test_on_demand_when_behind_spot_group_released_under_hysteresis():
    sw = dl.at_run_time(JOB, elapsed_hours=4, share_done=0.2, running=dl.NONE,
                        spot_available=False)
    assert (sw.choice.kind, sw.spot_nodes, sw.on_demand_nodes) == (ON_DEMAND, 0, 2)


def test_on_demand_ahead_of_the_line_probes_spot_make_before_break():
    # on on-demand, ahead of ep(t + 2d) = 6 * 7 / 10 = 4.2 h: only spot's absence keeps it
    sw = dl.at_run_time(JOB, elapsed_hours=6, share_done=0.75, running=ON_DEMAND,
                        spot_available=False)
    assert (sw.choice.kind, sw.spot_nodes, sw.on_demand_nodes) == (ON_DEMAND, 2, 2)
    sw = dl.at_run_time(JOB, elapsed_hours=6, share_done=0.75, running=ON_DEMAND,
                        spot_available=True)
    assert (sw.choice.kind, sw.spot_nodes, sw.on_demand_nodes) == (SPOT, 2, 0)


def test_safety_net_is_rederived_and_sticks_to_on_demand():
    # 1.5 h left for 1.2 h of work: less than the work + 2 restarts
    sw = dl.at_run_time(JOB, elapsed_hours=8.5, share_done=0.8, running=ON_DEMAND,
                        spot_available=True)
    assert sw.seen["committed"] is True
    assert (sw.choice.kind, sw.spot_nodes, sw.on_demand_nodes) == (ON_DEMAND, 0, 2)


def test_done_leaves_the_groups_alone():
    sw = dl.at_run_time(JOB, elapsed_hours=5, share_done=1.0, running=SPOT,
                        spot_available=True)
    assert sw.spot_nodes is None and sw.on_demand_nodes is None


def test_same_choice_as_the_offline_rule():
    """at_run_time is the replay's rule: for every state it picks uniform_progress's kind."""
    for elapsed in (0.5, 3, 6, 9):
        for share in (0.0, 0.3, 0.6, 0.9):
            for running in (dl.NONE, SPOT):
                for spot in (True, False):
                    sw = dl.at_run_time(JOB, elapsed_hours=elapsed, share_done=share,
                                        running=running, spot_available=spot)
                    want = dl.uniform_progress(JOB, dl.JobState(elapsed, share * 6, running),
                                               spot)
                    assert sw.choice == want


START = 1_796_000_000.0 // 3600 * 3600


def ref(**kw) -> d.DeadlineRef:
    t = {tags.DEADLINE_START: tags.timestamp_label(START),
         tags.DEADLINE: tags.timestamp_label(START + 36000),
         tags.DEADLINE_WORK_MINUTES: "360", tags.DEADLINE_RESTART_MINUTES: "30"}
    t.update(kw.pop("tags", {}))
    base = dict(cluster="c", environment="dev", cloud="aws", region="r", spot_group="s",
                on_demand_group="o", spot_desired=2, spot_in_service=0, on_demand_desired=0,
                on_demand_in_service=0, tags=t,
                progress=b'{"done": 1, "total": 5}')
    base.update(kw)
    return d.DeadlineRef(**base)


def test_verdict_switches_to_on_demand_with_targets():
    v = d.deadline_verdict(ref(), now=START + 4 * 3600)
    assert v.action == d.DEADLINE_ON_DEMAND and dict(v.targets) == {"s": 0, "o": 2}


@pytest.mark.parametrize("bad", [
    {tags.DEADLINE_WORK_MINUTES: "6.5"}, {tags.DEADLINE_WORK_MINUTES: "-1"},
    {tags.DEADLINE_RESTART_MINUTES: ""}, {tags.DEADLINE: "tomorrow"},
    {tags.DEADLINE: tags.timestamp_label(START)},
])
def test_unreadable_tags_change_nothing(bad):
    v = d.deadline_verdict(ref(tags=bad), now=START + 4 * 3600)
    assert v.action == d.DEADLINE_STAY and not v.targets
    assert "unreadable" in v.reason or "not after" in v.reason


@pytest.mark.parametrize("kw,now,why", [
    ({"tags": {tags.KEEP: "yes"}}, START + 4 * 3600, tags.KEEP),
    ({"spot_desired": 0}, START + 4 * 3600, "does not restart a stopped job"),
    ({}, START - 60, "starts at"),
    ({}, START + 10 * 3600, "has passed"),
])
def test_protections(kw, now, why):
    v = d.deadline_verdict(ref(**kw), now=now)
    assert v.action == d.DEADLINE_STAY and not v.targets and why in v.reason


def test_interruption_notice_means_no_spot():
    # all in service but one being replaced: not fulfilled -> behind the line, on-demand
    v = d.deadline_verdict(ref(spot_in_service=2, interrupted=1), now=START + 4 * 3600)
    assert v.seen["spot_available"] is False and v.action == d.DEADLINE_ON_DEMAND
