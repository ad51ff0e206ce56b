"""The offline price of window work on spot is the deadline rule's expectation (issue 37 item 4):
it equals the replay's mean on freshly generated traces of the same availability model within
5 %, for several slack levels and node counts; the option says its fallback share, the latest
switch to on-demand and the finish it guarantees."""
from __future__ import annotations

import datetime as dt
import random
import statistics

import pytest

from gpulease import deadline as dl
from gpulease.policy import windows as W
from gpulease.policy.rules import SPOT_OUTAGE_HOURS, PolicyRules

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
WORK = 12.0
LOST = 0.25                    # checkpoint every 10 min / 2 + a 10-minute restart, in hours
LAM = 1 / 24                   # the catalog's GCP figure: one preemption per node per 24 h
SPOT, OD = 3.0, 10.0           # USD per node-hour
#: fresh traces per case by node count (the price uses its own seeded ensemble; these use other
#: seeds): a lone node's cost varies most (an outage or none), 16 nodes' least (many)
FRESH = {1: 500, 4: 250, 16: 150}


def item(nodes: int, slack: float, **kw) -> W.WorkItem:
    return W.WorkItem(nodes=nodes, duration_hours=WORK, earliest_start=NOW,
                      deadline=NOW + dt.timedelta(hours=WORK + slack), now=NOW, gang=True,
                      interruptions_per_hour=LAM, lost_hours=LOST, **kw)


def replay_mean(nodes: int, slack: float, seed: int) -> tuple[float, float, int]:
    """(mean USD, mean fallback share, deadlines missed) of the rule replayed on FRESH traces
    of the model the price assumes (a gang of ``nodes``: spot stays 24 / nodes h)."""
    job = dl.Job(WORK, WORK + slack, LOST, nodes=nodes)
    gap = dl.price_gap_hours(job)
    ticks = int((job.deadline_hours + WORK + LOST) / gap) + 2
    rnd = random.Random(seed)
    usd, share, missed = [], [], 0
    for _ in range(FRESH[nodes]):
        trace = dl.markov_trace(1 / (nodes * LAM), SPOT_OUTAGE_HOURS, ticks, rnd, nodes=nodes,
                                gap_hours=gap)
        o = dl.replay(dl.uniform_progress, job, trace, gap, spot_price=0.0)
        usd.append(nodes * (SPOT * o.spot_hours + OD * o.on_demand_hours))
        share.append(o.on_demand_hours / (o.spot_hours + o.on_demand_hours))
        missed += not o.met_deadline
    return statistics.mean(usd), statistics.mean(share), missed


@pytest.mark.parametrize("nodes", [1, 4, 16])
@pytest.mark.parametrize("slack", [1.5, 4.0, 8.0])
def test_offline_price_is_the_replay_mean_within_5_percent(nodes, slack):
    opt = W.spot(item(nodes, slack), SPOT, OD)
    assert opt.feasible
    mean, share, missed = replay_mean(nodes, slack, seed=1000 + nodes * 100 + int(slack))
    assert missed == 0 and opt.deadline_rule["missed"] == 0
    assert abs(opt.total_usd / mean - 1) < 0.05, (opt.total_usd, mean)
    # the fallback is a real part of the price where spot is scarce, and agrees with the replay
    assert abs(opt.deadline_rule["fallback_share"] - share) < 0.05
    assert opt.total_usd == pytest.approx(opt.compute_usd + opt.rework_usd)


def test_spot_rarer_or_slack_tighter_costs_more_fallback():
    loose, tight = W.spot(item(16, 8.0), SPOT, OD), W.spot(item(16, 1.5), SPOT, OD)
    assert tight.deadline_rule["fallback_share"] > loose.deadline_rule["fallback_share"]
    one, many = W.spot(item(1, 8.0), SPOT, OD), W.spot(item(16, 8.0), SPOT, OD)
    assert many.deadline_rule["fallback_share"] > one.deadline_rule["fallback_share"]
    # spot that never goes: no fallback, the run plus its first start on spot
    calm = W.spot(item(4, 8.0, spot_outage_hours=1.0).__class__(
        **{**item(4, 8.0).__dict__, "interruptions_per_hour": 0.0}), SPOT, OD)
    assert calm.deadline_rule["fallback_share"] == 0.0
    assert calm.total_usd == pytest.approx(4 * SPOT * (WORK + LOST))


def test_the_guaranteed_finish_and_the_latest_switch():
    opt = W.spot(item(4, 8.0), SPOT, OD)
    r = opt.deadline_rule
    # idle all along, the safety net fires at D - C - 2d = 20 - 12 - 0.5 = 7.5 h
    assert r["latest_switch"] == "2026-12-03T16:30:00Z"
    # ... then one restart and the whole run on on-demand: done by 7.5 + 0.25 + 12 h
    assert r["guaranteed_by"] == "2026-12-04T04:45:00Z"
    assert r["guaranteed_by"] <= "2026-12-04T05:00:00Z"       # the deadline
    assert opt.as_dict()["deadline_rule"]["fallback_share"] == round(r["fallback_share"], 4)


def test_the_price_is_cached_per_parameter_set():
    dl._expected.cache_clear()
    W.spot(item(4, 8.0), SPOT, OD)
    W.spot(item(4, 8.0), SPOT * 2, OD)           # another rate: the same expectation
    info = dl._expected.cache_info()
    assert (info.misses, info.hits) == (1, 1)


def test_the_outage_default_is_one_policy_rule():
    assert PolicyRules().spot_outage_hours == SPOT_OUTAGE_HOURS == W.WorkItem(
        nodes=1, duration_hours=1, earliest_start=NOW, deadline=NOW, now=NOW).spot_outage_hours
    longer = W.spot(item(4, 8.0, spot_outage_hours=6.0), SPOT, OD)
    assert longer.total_usd > W.spot(item(4, 8.0), SPOT, OD).total_usd
