"""The deadline rule (issue 37): Uniform Progress's four rules as a pure function, the replay
and the offline optimum, on traces the tests generate (seeded)."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from gpulease import deadline as dl
from gpulease.purchase import ON_DEMAND, SPOT

G = 0.25                                   # 15-minute ticks
JOB = dl.Job(work_hours=10, deadline_hours=14, restart_hours=0.5)


def markov(n: int, up: float, down: float, rnd: random.Random, nodes: int = 1) -> list[int]:
    out, there = [], True
    for _ in range(n):
        out.append(nodes if there else 0)
        if rnd.random() < G / (up if there else down):
            there = not there
    return out


# ---- the four rules ------------------------------------------------------------------------
@pytest.mark.parametrize("state,spot,kind,words", [
    (dl.JobState(0, 10), True, dl.NONE, "done"),
    # rule 4: idle with 10.9 h left for 10 h of work and 2 x 0.5 h of restart
    (dl.JobState(3.1, 0), True, ON_DEMAND, "safety net"),
    (dl.JobState(5, 4, running=SPOT, committed=True), True, ON_DEMAND, "safety net"),
    # rule 3: on on-demand and behind the line at t + 2d = 5 h (3.57 h): stay
    (dl.JobState(4, 3.5, running=ON_DEMAND), True, ON_DEMAND, "hysteresis"),
    # ... ahead of it: spot again
    (dl.JobState(4, 3.6, running=ON_DEMAND), True, SPOT, "spot is available"),
    # rule 2: spot even when behind the line
    (dl.JobState(4, 1, running=dl.NONE), True, SPOT, "spot"),
    # rule 1: no spot, behind the line (ep(4) = 2.86 h): on-demand
    (dl.JobState(4, 2.5), False, ON_DEMAND, "behind"),
    # ahead of the line: wait for spot
    (dl.JobState(4, 3), False, dl.NONE, "wait"),
])
def test_each_rule(state, spot, kind, words):
    c = dl.uniform_progress(JOB, state, spot)
    assert c.kind == kind and words in c.reason


def test_a_running_spot_job_is_not_pulled_off_by_the_safety_net():
    # progress on spot keeps the slack; only an idle job must fall back
    c = dl.uniform_progress(JOB, dl.JobState(3.5, 0.2, running=SPOT), True)
    assert c.kind == SPOT


# ---- the replay ------------------------------------------------------------------------------
def test_all_spot_trace_costs_spot_for_work_and_one_restart():
    o = dl.replay(dl.uniform_progress, JOB, [1] * 100, G, spot_price=0.3)
    assert o.finished_hours == pytest.approx(10.5) and o.met_deadline
    assert o.cost_od_hours == pytest.approx(0.3 * 10.5) and o.on_demand_hours == 0


def test_no_spot_at_all_waits_one_tick_then_runs_on_demand():
    o = dl.replay(dl.uniform_progress, JOB, [0] * 100, G, spot_price=0.3)
    assert o.spot_hours == 0 and o.met_deadline
    assert o.finished_hours == pytest.approx(G + 0.5 + 10)   # the line is 0 at t = 0
    assert o.cost_od_hours == pytest.approx(10.5)


def test_nodes_need_that_many_spot_nodes_at_once():
    job = dl.Job(10, 14, 0.5, nodes=4)
    o = dl.replay(dl.uniform_progress, job, [3] * 100, G, spot_price=0.3)
    assert o.spot_hours == 0 and o.cost_od_hours == pytest.approx(4 * 10.5)


def test_preemption_keeps_progress_and_pays_a_restart():
    trace = [1] * 8 + [0] + [1] * 100       # 2 h of spot, one tick gone, spot again
    o = dl.replay(dl.greedy, JOB, trace, G, spot_price=0.3)
    assert o.switches == 2 and o.finished_hours == pytest.approx(10 + 2 * 0.5 + G)


def test_bad_inputs():
    with pytest.raises(ValueError):
        dl.Job(0, 1, 0)
    with pytest.raises(ValueError):
        dl.replay(dl.greedy, JOB, [1], G, spot_price=1.5)


# ---- against the optimum and the baselines, on generated traces -------------------------------
@settings(max_examples=40, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), up=st.sampled_from([1.0, 3.0, 8.0]),
       down=st.sampled_from([0.5, 2.0, 6.0]), slack=st.sampled_from([1.5, 4.0, 8.0]),
       spot=st.sampled_from([0.12, 0.3, 0.6]))
def test_rule_never_misses_a_deadline_the_optimum_meets(seed, up, down, slack, spot):
    job = dl.Job(work_hours=8, deadline_hours=8 + slack, restart_hours=0.5)
    trace = markov(200, up, down, random.Random(seed))
    opt = dl.offline_optimum(job, trace, G, spot_price=spot)
    assert opt is not None                        # on-demand from the start always fits
    for name in ("uniform_progress", "greedy"):
        o = dl.replay(dl.POLICIES[name], job, trace, G, spot_price=spot)
        assert o.met_deadline, name
        # the optimum knows the future: nothing is cheaper (restart = 2 whole ticks here)
        assert o.cost_od_hours >= opt.cost_od_hours - 1e-6, name


def test_optimum_is_exact_on_small_cases():
    # 1 h of work, 0.25 h restart (one tick), deadline 2 h (8 ticks)
    job = dl.Job(1, 2, 0.25)
    # spot in ticks 2..6: wait, then restart + 4 ticks of work on spot: 0.3 x 1.25
    opt = dl.offline_optimum(job, [0, 0, 1, 1, 1, 1, 1, 0], G, spot_price=0.3)
    assert opt.cost_od_hours == pytest.approx(0.375) and opt.on_demand_hours == 0
    # spot in ticks 2..5 only: 3 ticks of work on spot, then restart + 1 on on-demand by the
    # deadline: 0.3 x 1.0 + 0.5 (cheaper than 1.25 h all on on-demand)
    opt = dl.offline_optimum(job, [0, 0, 1, 1, 1, 1, 0, 0], G, spot_price=0.3)
    assert opt.cost_od_hours == pytest.approx(0.8)
    assert (opt.spot_hours, opt.on_demand_hours, opt.switches) == (1.0, 0.5, 2)
    # no way to finish: None
    assert dl.offline_optimum(dl.Job(3, 2, 0.25), [1] * 8, G, spot_price=0.3) is None


def test_on_average_the_rule_saves_against_on_demand_and_beats_greedy_at_tight_slack():
    rnd = random.Random(37)
    job = dl.Job(work_hours=24, deadline_hours=26, restart_hours=0.25)
    up_costs, greedy_costs = [], []
    for _ in range(30):
        trace = markov(200, 4.0, 4.0, rnd)
        up_costs.append(dl.replay(dl.uniform_progress, job, trace, G, spot_price=0.3)
                        .cost_ratio(job))
        greedy_costs.append(dl.replay(dl.greedy, job, trace, G, spot_price=0.3)
                            .cost_ratio(job))
    mean_up = sum(up_costs) / len(up_costs)
    assert mean_up < 0.9                                # saves against always-on-demand
    assert mean_up < sum(greedy_costs) / len(greedy_costs)
