"""Metamorphic tests (issue 35 item 7): an input made worse never yields a cheaper plan or a
quieter reaper.

Each test draws an input (seeded hypothesis), makes it worse in one way the domain agrees is
worse, and checks the output moved the right way (or not at all):

- ``plan`` / ``explain`` (the policy they both run, on the shipped catalog): more GPUs, more
  hours, RDMA required, a narrower residency list, one cloud fewer, no checkpoints, a higher
  priority (guaranteed capacity) never make the decided monthly cost lower; where the worse
  input has no feasible placement the policy says so (PolicyError), never a cheaper plan.
- ``reap`` (the pure decision the reaper runs for every cluster, AWS and GCP alike): lower GPU
  utilization never turns an idle cluster busy, never removes a mark it would have kept, never
  acts on fewer nodes and never leaves a teardown for later that it would have done now.
- ``recommend`` (the demand profile derived from metrics): more GPU-hours of use never yields a
  smaller recommended peak or fewer hours.
- ``spend`` (the bill's classification): one more billed row never lowers the billed total nor
  the class it lands in; the classes still sum to the total.
- The CLI end to end: a stack with one more node plans dearer through ``gpulease plan``, and the
  worse plan's explain names the dearer total.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import json
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpulease.catalog import load_catalog
from gpulease.errors import PolicyError
from gpulease.policy import decide
from gpulease.policy.rules import PolicyRules
from gpulease.reaper import decision as d
from gpulease import tags
from tests.test_policy_fixtures import cluster, stack

ROOT = Path(__file__).resolve().parents[1]
NOW = 1_800_000_000.0  # 2027-01-15T08:00Z
NOW_DT = datetime.datetime.fromtimestamp(NOW, tz=datetime.timezone.utc)
H = 3600
SEEDED = settings(max_examples=40, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@lru_cache(maxsize=1)
def shipped():
    return load_catalog()


# ---- plan / explain: the policy on the shipped catalog -----------------------------------------
def _monthly(stk):
    """The decided monthly cost, or None when the policy finds no feasible placement."""
    try:
        return decide(stk, shipped(), now=NOW_DT, inventory=None).monthly_usd
    except PolicyError:
        return None


@st.composite
def base_clusters(draw):
    cat = shipped()
    gpu = draw(st.sampled_from(sorted(cat.gpus)))
    return cluster(gpu=gpu, gpus=draw(st.sampled_from([1, 2, 4, 8, 16, 24])),
                   hours=float(draw(st.sampled_from([20, 100, 250, 400, 600]))),
                   priority=draw(st.integers(1, 10)),
                   checkpoint=draw(st.sampled_from([None, 15, 60])),
                   distributed=draw(st.sampled_from([None, False])))


def _worse(c, how: str, rng_k: int):
    if how == "gpus":
        return dataclasses.replace(c, gpus=c.gpus + rng_k)
    if how == "hours":
        return dataclasses.replace(c, hours_per_month=min(730.0, c.hours_per_month + 10 * rng_k))
    if how == "rdma":
        return dataclasses.replace(c, distributed=True)
    if how == "residency":
        return dataclasses.replace(c, regions=("us-",))
    if how == "no-checkpoints":
        return dataclasses.replace(c, checkpoint_minutes=None)
    if how == "priority":
        return dataclasses.replace(c, priority=10)
    raise AssertionError(how)


WORSENINGS = ["gpus", "hours", "rdma", "residency", "no-checkpoints", "priority"]
CLOUDS = {"aws": ("us-east-1", "us-west-2"), "gcp": ("us-central1", "europe-west4")}


@SEEDED
@given(c=base_clusters(), how=st.sampled_from(WORSENINGS), k=st.integers(1, 16))
def test_a_worse_cluster_never_plans_cheaper(c, how, k):
    better = _monthly(stack([c], clouds=CLOUDS))
    assume(better is not None)
    worse = _monthly(stack([_worse(c, how, k)], clouds=CLOUDS))
    if worse is not None:
        assert worse >= better - 1e-6, (how, c, better, worse)


@SEEDED
@given(c=base_clusters(), drop=st.sampled_from(sorted(CLOUDS)))
def test_one_cloud_fewer_never_plans_cheaper(c, drop):
    better = _monthly(stack([c], clouds=CLOUDS))
    assume(better is not None)
    worse = _monthly(stack([c], clouds={k: v for k, v in CLOUDS.items() if k != drop}))
    if worse is not None:
        assert worse >= better - 1e-6, (drop, c, better, worse)


@SEEDED
@given(c=base_clusters(), budget_cut=st.floats(0.05, 0.95))
def test_a_smaller_budget_never_plans_cheaper_it_refuses(c, budget_cut):
    """A tighter budget is a worse input too: the plan is the same or refused (over budget),
    never a cheaper plan that quietly drops a rule."""
    better = _monthly(stack([c], clouds=CLOUDS))
    assume(better is not None and better > 1)
    worse = _monthly(stack([c], clouds=CLOUDS, budget=better * budget_cut))
    assert worse is None or worse >= better - 1e-6


# ---- reap: the pure decision every reaper run makes ----------------------------------------
LOUDNESS = {d.NONE: 0, d.UNMARK: 0, d.MARK: 1, d.SCALE_TO_ZERO: 2, d.SCALE_TO_BASELINE: 2,
            d.DESTROY: 2, d.REMOVE_NODES: 2}
STATE_ORDER = {d.BUSY: 0, d.INSUFFICIENT: 0, d.SKIPPED: 0, d.MARKED: 1, d.IDLE: 1}


def _ref(nodes: int, mark_minutes: int | None, window: int):
    kv = {tags.CLUSTER: "c", tags.ENVIRONMENT: "dev", tags.IDLE_MINUTES: str(window)}
    if mark_minutes is not None:
        kv[tags.IDLE_SINCE] = tags.timestamp_label(NOW - mark_minutes * 60)
    return d.ClusterRef(cloud="aws", region="us-east-1", environment="dev", cluster="c",
                        groups=("asg",), nodes=tuple(d.Node(f"i-{k}", NOW - 13 * H)
                                                     for k in range(nodes)),
                        tags=kv, capacity=nodes)


def _series(level: float):
    return tuple((float(t), level) for t in range(int(NOW - 12 * H), int(NOW), 60))


def _loudness(v: d.Verdict) -> tuple[int, int, int]:
    removed = len(v.removals()) + (v.nodes_removed or 0)
    return (LOUDNESS.get(v.action, 0), STATE_ORDER.get(v.state, 0), removed)


@SEEDED
@given(levels=st.lists(st.floats(0, 100), min_size=1, max_size=4),
       factor=st.floats(0, 1), mark=st.sampled_from([None, 5, 29, 31, 90]),
       window=st.sampled_from([15, 30, 60]), threshold=st.sampled_from([1.0, 5.0, 20.0]))
def test_lower_utilization_never_makes_the_reaper_quieter(levels, factor, mark, window,
                                                          threshold):
    ref = _ref(len(levels), mark, window)
    policy = d.Policy(threshold_pct=threshold, grace_minutes=30)
    before = d.decide(ref, {f"i-{k}": _series(v) for k, v in enumerate(levels)}, now=NOW,
                      policy=policy)
    after = d.decide(ref, {f"i-{k}": _series(v * factor) for k, v in enumerate(levels)},
                     now=NOW, policy=policy)
    lb, la = _loudness(before), _loudness(after)
    assert la[0] >= lb[0], (before, after)
    assert la[1] >= lb[1], (before, after)
    if before.action == after.action:
        assert la[2] >= lb[2], (before, after)
    if before.action != d.UNMARK:
        assert after.action != d.UNMARK, (before, after)


@SEEDED
@given(levels=st.lists(st.floats(0, 4.9), min_size=1, max_size=3),
       older=st.integers(0, 300), mark=st.integers(1, 300))
def test_an_older_idle_mark_never_makes_the_reaper_quieter(levels, older, mark):
    """The same idle data (covering the time since either mark) with a mark set earlier: never
    a later or smaller teardown."""
    policy = d.Policy(threshold_pct=5, grace_minutes=30)
    samples = {f"i-{k}": _series(v) for k, v in enumerate(levels)}
    before = d.decide(_ref(len(levels), mark, 30), samples, now=NOW, policy=policy)
    after = d.decide(_ref(len(levels), mark + older, 30), samples, now=NOW, policy=policy)
    assert _loudness(after) >= _loudness(before), (before, after)


# ---- recommend: the demand profile from metrics ------------------------------------------------
DAYS = 14
REC_START = 1_800_000_000 - (1_800_000_000 % H)
REC_END = REC_START + DAYS * 24 * H


def _fleet(busy_per_hour):
    top = max(busy_per_hour) if busy_per_hour else 0
    return {f"i-{k:03d}": tuple((REC_START + h * H, 80.0 if k < n else 0.5)
                                for h, n in enumerate(busy_per_hour)) for k in range(top)}


def _profile(busy_per_hour):
    from gpulease.recommend import profile as pf
    return pf.derive(_fleet(busy_per_hour), start=REC_START, end=REC_END, gpus_per_node=8,
                     threshold_pct=5.0)


def _gpu_hours(steps) -> float:
    """GPU-hours a month of a profile (each step's GPUs above the previous one, its hours)."""
    total, below = 0.0, 0
    for s in steps:
        total += (s.gpus - below) * s.hours_per_month
        below = s.gpus
    return total


@settings(max_examples=25, derandomize=True)
@given(base=st.lists(st.integers(0, 6), min_size=DAYS * 24, max_size=DAYS * 24),
       extra=st.lists(st.integers(0, 2), min_size=DAYS * 24, max_size=DAYS * 24))
def test_more_use_never_recommends_less(base, extra):
    assume(any(base))
    more = [b + e for b, e in zip(base, extra)]
    a, b = _profile(base), _profile(more)
    assert b.observed["peak_gpus"] >= a.observed["peak_gpus"]
    assert b.observed["baseline_gpus"] >= a.observed["baseline_gpus"]
    assert b.observed["busy_gpu_hours"] >= a.observed["busy_gpu_hours"]
    if a.profile:
        assert b.profile and b.profile[-1].gpus >= a.profile[-1].gpus
        # what the profile asks for a month (steps rounded to tenths of an hour)
        assert _gpu_hours(b.profile) >= _gpu_hours(a.profile) - 8 * 0.1 * len(b.profile)


# ---- spend: the bill's classification ----------------------------------------------------------
FOCUS_SAMPLE = ROOT / "tests" / "data" / "focus-sample" / "focus_sample.csv"


def _spend_doc(path):
    code, out, err = _run(["spend", "--stack", "dev", "--bill", str(path), "--json"])
    assert code == 0, err
    return json.loads(out)


def test_one_more_untagged_charge_never_lowers_what_spend_reports(tmp_path):
    """Append one untagged usage line (a copy of a sample usage row, $12.34, no tags): the billed
    total and the unmatched spend rise by exactly that, the classes still add up, nothing else
    moves."""
    import csv
    rows = list(csv.DictReader(FOCUS_SAMPLE.open(newline="", encoding="utf-8")))
    usage = next(r for r in rows if r["ChargeCategory"] == "Usage"
                 and r["ChargeClass"] != "Correction")
    extra = dict(usage, BilledCost="12.34", EffectiveCost="12.34", ListCost="12.34",
                 ContractedCost="12.34", Tags="{}", ResourceId="nat-untagged-0001",
                 ResourceName="nat-untagged-0001")
    worse = tmp_path / "focus_worse.csv"
    with worse.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows + [extra])
    a, b = _spend_doc(FOCUS_SAMPLE), _spend_doc(worse)
    assert round(b["total_billed_usd"] - a["total_billed_usd"], 2) == 12.34
    assert round(b["unmatched_usd"] - a["unmatched_usd"], 2) == 12.34
    assert b["rows"]["unmatched"] == a["rows"]["unmatched"] + 1
    assert b["conserved"] is True
    for c in ("matched", "credit", "tax", "adjustment"):
        assert b["rows"][c] == a["rows"][c]


# ---- the CLI end to end ------------------------------------------------------------------------
def _run(argv):
    from gpulease.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_one_more_node_through_the_cli_plans_dearer_and_explains_it(tmp_path):
    cfg = yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())
    clusters = cfg["config"]["gpulease:clusters"]
    first = clusters[0]
    base = tmp_path / "Pulumi.base.yaml"
    base.write_text(yaml.safe_dump(cfg))
    first["gpus"] = int(first["gpus"]) * 2
    worse = tmp_path / "Pulumi.worse.yaml"
    worse.write_text(yaml.safe_dump(cfg))
    totals = []
    for f in (base, worse):
        code, out, err = _run(["plan", "--config", str(f), "--json"])
        assert code == 0, err
        totals.append(float(json.loads(out)["totals"]["monthly_usd"]))
    assert totals[1] > totals[0]
    code, out, err = _run(["explain", "--config", str(worse), "--json"])
    assert code == 0, err


def test_explain_of_the_worse_stack_names_the_dearer_total(tmp_path):
    cfg = yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())
    path = tmp_path / "Pulumi.worse.yaml"
    cfg["config"]["gpulease:clusters"][0]["gpus"] = int(
        cfg["config"]["gpulease:clusters"][0]["gpus"]) * 2
    path.write_text(yaml.safe_dump(cfg))
    code, out, err = _run(["plan", "--config", str(path), "--json"])
    assert code == 0, err
    planned = json.loads(out)["totals"]["monthly_usd"]
    code, out, err = _run(["explain", "--config", str(path), "--json"])
    assert code == 0, err
    assert f"{planned:,.2f}" in out or str(planned) in out

