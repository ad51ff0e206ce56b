"""Table tests of the pure idle decision (no cloud): states, reasons, actions, grace, coverage."""
from __future__ import annotations

import pytest

from gpulease import tags
from gpulease.reaper import decision as d

NOW = 1_800_000_000.0  # 2027-01-15T08:00Z
H = 3600


def ref(nodes=2, launched=NOW - 4 * H, **tagkv):
    kv = {tags.CLUSTER: "c", tags.ENVIRONMENT: "dev", tags.IDLE_MINUTES: "30", **tagkv}
    return d.ClusterRef(cloud="aws", region="us-east-1", environment="dev", cluster="c",
                        groups=("asg",), nodes=tuple(d.Node(f"i-{k}", launched)
                                                     for k in range(nodes)),
                        tags=kv, capacity=nodes)


def series(value=1.0, start=NOW - 2 * H, end=NOW, step=60, holes=()):
    return tuple((t, value) for t in range(int(start), int(end), step)
                 if not any(a <= t < b for a, b in holes))


def mark(minutes_ago):
    return tags.timestamp_label(NOW - minutes_ago * 60)


P = d.Policy(threshold_pct=5, grace_minutes=30)

CASES = [
    # (name, ref, samples, policy, expected state, expected action, reason fragment)
    ("idle first time -> mark", ref(), {"i-0": series(), "i-1": series(4.9)}, P,
     d.IDLE, d.MARK, "below 5% GPU for 30 min (max 4.9%)"),
    ("threshold is strict", ref(), {"i-0": series(), "i-1": series(5.0)}, P,
     d.BUSY, d.NONE, "reached 5.0%"),
    ("one busy node keeps the cluster", ref(), {"i-0": series(0), "i-1": series(80)}, P,
     d.BUSY, d.NONE, "node i-1 reached 80.0%"),
    ("busy clears a mark", ref(**{tags.IDLE_SINCE: mark(10)}),
     {"i-0": series(0), "i-1": series(80)}, P, d.BUSY, d.UNMARK, "clears the idle mark"),
    ("marked, inside grace", ref(**{tags.IDLE_SINCE: mark(10)}),
     {"i-0": series(), "i-1": series()}, P, d.MARKED, d.NONE, "min left"),
    ("grace counts from the end of the marked minute", ref(**{tags.IDLE_SINCE: mark(30)}),
     {"i-0": series(), "i-1": series()}, P, d.MARKED, d.NONE, "1 min left"),
    ("marked, grace over -> scale", ref(**{tags.IDLE_SINCE: mark(32)}),
     {"i-0": series(), "i-1": series()}, P, d.IDLE, d.SCALE_TO_ZERO, "grace period over"),
    ("destroy instead", ref(**{tags.IDLE_SINCE: mark(32)}),
     {"i-0": series(), "i-1": series()}, d.Policy(destroy=True), d.IDLE, d.DESTROY, "over"),
    ("no data for one node", ref(), {"i-0": series()}, P,
     d.INSUFFICIENT, d.NONE, "node i-1 has no GPU utilization data"),
    ("partial data (gap)", ref(), {"i-0": series(), "i-1": series(holes=[(NOW - 20 * 60,
                                                                        NOW - 15 * 60)])},
     P, d.INSUFFICIENT, d.NONE, "5-min gap"),
    ("data stops early", ref(), {"i-0": series(), "i-1": series(end=NOW - 10 * 60)}, P,
     d.INSUFFICIENT, d.NONE, "gap"),
    ("one late period tolerated", ref(), {"i-0": series(), "i-1": series(end=NOW - 60)}, P,
     d.IDLE, d.MARK, "below"),
    ("just launched (launch time known)", ref(launched=NOW - 10 * 60),
     {"i-0": series(), "i-1": series()}, P, d.INSUFFICIENT, d.NONE, "launched 10 min ago"),
    # (the 30-min window ends 5 min before NOW: the publication delay, d.PUBLICATION_DELAY_S)
    ("just launched (launch time unknown: coverage)", ref(launched=None),
     {"i-0": series(), "i-1": series(start=NOW - 32 * 60)}, P, d.INSUFFICIENT, d.NONE,
     "no GPU utilization data for the first 3 min of the 30-min window"),
    ("data from the second period is enough", ref(launched=None),
     {"i-0": series(), "i-1": series(start=NOW - 34 * 60)}, P, d.IDLE, d.MARK, "below"),
    ("insufficient clears a mark", ref(**{tags.IDLE_SINCE: mark(40)}), {"i-0": series()}, P,
     d.INSUFFICIENT, d.UNMARK, "clears"),
    ("opt-out wins even when marked and idle", ref(**{tags.KEEP: "1", tags.IDLE_SINCE: mark(99)}),
     {"i-0": series(), "i-1": series()}, P, d.SKIPPED, d.NONE, "opt-out"),
    ("no window tag", ref(**{tags.IDLE_MINUTES: "soon"}), {}, P, d.SKIPPED, d.NONE,
     "an invalid 'soon' gpulease-idle-minutes tag (a whole number of minutes from 1 to 10080)"),
    ("--idle-minutes overrides the tag", ref(**{tags.IDLE_MINUTES: "soon"}),
     {"i-0": series(), "i-1": series()}, d.Policy(idle_minutes=90), d.IDLE, d.MARK, "90 min"),
    ("no nodes", ref(nodes=0), {}, P, d.SKIPPED, d.NONE, "no running nodes"),
    # ---- issue 14: a mark is evidence only while the data proves idleness ever since ------
    ("scaled to zero with a mark left over -> unmark", ref(nodes=0, **{tags.IDLE_SINCE: mark(90)}),
     {}, P, d.SKIPPED, d.UNMARK, "clears the leftover idle mark"),
    ("scaled back up: new nodes cannot inherit an old mark",
     ref(launched=None, **{tags.IDLE_SINCE: mark(180)}),
     {"i-0": series(0, start=NOW - 40 * 60), "i-1": series(0, start=NOW - 40 * 60)}, P,
     d.INSUFFICIENT, d.UNMARK, "no GPU utilization data for the first 140 min of the 175 min "
     "since its idle mark"),
    ("busy during the grace, idle again for the window -> unmark",
     ref(**{tags.IDLE_SINCE: mark(40)}, **{tags.IDLE_MINUTES: "20"}),
     {"i-0": series(0), "i-1": series(0, end=NOW - 30 * 60) + series(70, start=NOW - 30 * 60,
                                                                    end=NOW - 25 * 60)
      + series(0, start=NOW - 25 * 60)}, P, d.BUSY, d.UNMARK, "node i-1 reached 70.0%"),
    ("a mark in the future is invalid -> re-marked", ref(**{tags.IDLE_SINCE: mark(-24 * 60)}),
     {"i-0": series(), "i-1": series()}, P, d.IDLE, d.MARK,
     "idle mark 2027-01-16T08:00Z is in the future (clock skew or a hand edit) and counts for "
     "nothing: re-marks it"),
    ("a mark within the clock-skew allowance is honoured", ref(**{tags.IDLE_SINCE: mark(-4)}),
     {"i-0": series(), "i-1": series()}, P, d.MARKED, d.NONE, "grace period ends"),
    ("an unreadable mark -> re-marked", ref(**{tags.IDLE_SINCE: "yesterday"}),
     {"i-0": series(), "i-1": series()}, P, d.IDLE, d.MARK, "idle mark 'yesterday' is unreadable"),
    ("a stale mark -> re-marked, fresh grace", ref(**{tags.IDLE_SINCE: mark(3 * 24 * 60)}),
     {"i-0": series(), "i-1": series()}, P, d.IDLE, d.MARK, "is stale"),
    ("a future mark on a busy cluster is cleared", ref(**{tags.IDLE_SINCE: "29991231t2359z"}),
     {"i-0": series(90), "i-1": series()}, P, d.BUSY, d.UNMARK, "in the future"),
    ("NaN / negative utilization is missing data, not idle", ref(),
     {"i-0": series(float("nan")), "i-1": series(-1.0)}, P, d.INSUFFICIENT, d.NONE,
     "node i-0 has no GPU utilization data in the 30-min window (+1 more)"),
    ("infinite utilization is not busy either", ref(),
     {"i-0": series(float("inf")), "i-1": series()}, P, d.INSUFFICIENT, d.NONE, "node i-0"),
]

#: untrusted window tags: a finding for the cluster, never an exception (issue 14).
#: ("\u0663\u0660" is "30" in Arabic-Indic digits: int() would accept it, the tag rule does not.)
BAD_WINDOWS = ["1e12", "1000000000000", "-5", "0", "30.5", " ", "\u0663\u0660", "0x1e", "10081",
               "30 minutes", "nan", "inf", "9" * 400]


@pytest.mark.parametrize("raw", BAD_WINDOWS)
def test_untrusted_window_tag_is_a_per_cluster_finding(raw):
    r = ref(**{tags.IDLE_MINUTES: raw})
    v = d.decide(r, {"i-0": series(), "i-1": series()}, now=NOW, policy=P)
    assert (v.state, v.action) == (d.SKIPPED, d.NONE)
    assert "invalid" in v.reason and len(v.reason) < 200
    assert d.lookback_minutes(r, now=NOW, policy=P) == 0


@pytest.mark.parametrize("raw,minutes", [("1", 1), ("30", 30), (" 45 ", 45), ("10080", 10080)])
def test_valid_window_tags(raw, minutes):
    assert d.parse_minutes(raw) == minutes


def test_lookback_covers_the_mark():
    # the window (30 min) before the evidence end (5 min before now: the publication delay)
    assert d.lookback_minutes(ref(), now=NOW, policy=P) == 35
    assert d.lookback_minutes(ref(**{tags.IDLE_SINCE: mark(45)}), now=NOW, policy=P) == 45
    # invalid marks and opted-out clusters need no extra history
    assert d.lookback_minutes(ref(**{tags.IDLE_SINCE: mark(-60)}), now=NOW, policy=P) == 35
    assert d.lookback_minutes(ref(**{tags.IDLE_SINCE: mark(3 * 24 * 60)}), now=NOW, policy=P) == 35
    assert d.lookback_minutes(ref(**{tags.KEEP: "y"}), now=NOW, policy=P) == 0


@pytest.mark.parametrize("name,r,samples,policy,state,action,fragment", CASES,
                         ids=[c[0] for c in CASES])
def test_decide(name, r, samples, policy, state, action, fragment):
    v = d.decide(r, samples, now=NOW, policy=policy)
    assert (v.state, v.action) == (state, action), v.reason
    assert fragment in v.reason


def test_window_is_the_clusters_own_tag():
    r = ref(**{tags.IDLE_MINUTES: "120"})
    # idle for the last 60 min only: not idle for a 120-min window
    v = d.decide(r, {"i-0": series(0, start=NOW - 60 * 60), "i-1": series(0)}, now=NOW, policy=P)
    assert v.state == d.INSUFFICIENT and v.window_minutes == 120


def test_samples_outside_the_window_are_ignored():
    old_busy = series(90, start=NOW - 3 * H, end=NOW - H) + series(0, start=NOW - H)
    v = d.decide(ref(), {"i-0": old_busy, "i-1": series(0)}, now=NOW, policy=P)
    assert v.state == d.IDLE and v.max_gpu_utilization == 0


def test_decision_module_imports_no_sdk():
    import subprocess
    import sys
    code = ("import sys; import gpulease.reaper.decision, gpulease.reaper.engine; "
            "bad = [m for m in ('boto3','botocore','google','pydantic','pulumi') if m in sys.modules];"
            "print(bad); sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ---- issue 16: idle burst capacity goes down to the baseline, never below ---------------------
def based(nodes=5, baseline="2", groups=None, **tagkv):
    """A cluster whose ASG (or, with ``groups``, MIGs: {group: (nodes, baseline or None)})
    carries gpulease-baseline-nodes."""
    r = ref(nodes=nodes, **tagkv)
    if groups is None:
        return d.ClusterRef(**{**r.__dict__, "group_nodes": {"asg": nodes},
                               "baseline_tags": {"asg": (baseline,)} if baseline is not None
                               else {}})
    return d.ClusterRef(**{**r.__dict__, "groups": tuple(sorted(groups)),
                           "group_nodes": {g: n for g, (n, _) in groups.items()},
                           "baseline_tags": {g: b for g, (_, b) in groups.items() if b}})


def idle(nodes):
    return {f"i-{k}": series(0.5) for k in range(nodes)}


def test_idle_burst_is_marked_with_the_baseline_named():
    v = d.decide(based(), idle(5), now=NOW, policy=P)
    assert (v.state, v.action, v.baseline_nodes) == (d.IDLE, d.MARK, 2)
    assert "acts down to its baseline of 2 nodes (removes 3 nodes) after a 30-min grace" \
        in v.reason


def test_after_the_grace_the_burst_goes_and_the_baseline_stays():
    v = d.decide(based(**{tags.IDLE_SINCE: mark(32)}), idle(5), now=NOW, policy=P)
    assert (v.state, v.action) == (d.IDLE, d.SCALE_TO_BASELINE)
    assert (v.baseline_nodes, v.nodes_removed, v.targets) == (2, 3, (("asg", 2),))


def test_destroy_never_takes_a_baseline_down():
    v = d.decide(based(**{tags.IDLE_SINCE: mark(32)}), idle(5), now=NOW,
                 policy=d.Policy(destroy=True))
    assert v.action == d.SCALE_TO_BASELINE and v.targets == (("asg", 2),)


@pytest.mark.parametrize("nodes,baseline", [(2, "2"), (1, "2"), (3, "0003"), (2, "9999999")])
def test_a_cluster_at_or_below_its_baseline_is_not_reaped_again(nodes, baseline):
    v = d.decide(based(nodes=nodes, baseline=baseline), idle(nodes), now=NOW, policy=P)
    assert (v.state, v.action) == (d.SKIPPED, d.NONE)
    assert f"at its baseline of {int(baseline):,} nodes (gpulease-baseline-nodes), which is " \
           "never scaled down" in v.reason
    assert v.nodes_removed is None and v.targets == ()


def test_at_the_baseline_a_leftover_mark_is_cleared():
    v = d.decide(based(nodes=2, **{tags.IDLE_SINCE: mark(90)}), idle(2), now=NOW, policy=P)
    assert (v.state, v.action) == (d.SKIPPED, d.UNMARK)
    assert "clears the idle mark" in v.reason


def test_a_busy_cluster_with_a_baseline_is_busy():
    v = d.decide(based(), {**idle(5), "i-4": series(60)}, now=NOW, policy=P)
    assert (v.state, v.action, v.baseline_nodes) == (d.BUSY, d.NONE, 2)


def test_baseline_zero_is_scale_to_zero():
    v = d.decide(based(baseline="0", **{tags.IDLE_SINCE: mark(32)}), idle(5), now=NOW, policy=P)
    assert (v.action, v.nodes_removed, v.targets) == (d.SCALE_TO_ZERO, 5, ())


def test_no_tag_is_todays_behaviour():
    v = d.decide(based(baseline=None, **{tags.IDLE_SINCE: mark(32)}), idle(5), now=NOW,
                 policy=P)
    assert (v.action, v.baseline_nodes, v.nodes_removed) == (d.SCALE_TO_ZERO, None, 5)


def test_groups_are_floored_one_by_one():
    """GCP: a reserved MIG is never resized below its baseline, the burst MIG goes to zero."""
    groups = {"reserved-mig": (3, ("2", "2", "2")), "spot-mig": (2, ("0", "0")),
              "untagged-mig": (0, None)}
    v = d.decide(based(nodes=5, groups=groups, **{tags.IDLE_SINCE: mark(32)}), idle(5),
                 now=NOW, policy=P)
    assert v.action == d.SCALE_TO_BASELINE
    assert v.targets == (("reserved-mig", 2), ("spot-mig", 0))
    assert (v.baseline_nodes, v.nodes_removed) == (2, 3)


def test_disagreeing_floors_in_one_group_keep_the_largest():
    groups = {"mig": (4, ("1", "3", "1", "1"))}
    v = d.decide(based(nodes=4, groups=groups, **{tags.IDLE_SINCE: mark(32)}), idle(4),
                 now=NOW, policy=P)
    assert v.targets == (("mig", 3),) and v.nodes_removed == 1


@pytest.mark.parametrize("raw", ["-1", "2.5", "two", "", "1e3", "\u0663", "12345678"])
def test_an_unreadable_baseline_skips_the_cluster(raw):
    v = d.decide(based(baseline=raw, **{tags.IDLE_SINCE: mark(32)}), idle(5), now=NOW, policy=P)
    assert (v.state, v.action) == (d.SKIPPED, d.NONE)
    assert "gpulease-baseline-nodes tag on asg (a whole number of nodes): its baseline is " \
           "unknown, so nothing is scaled" in v.reason


def test_a_clusters_tags_combine_its_parts_conservatively():
    a = {tags.CLUSTER: "pretrain", tags.IDLE_SINCE: "20261203t0100z", tags.BASELINE_NODES: "2"}
    b = {tags.CLUSTER: "pretrain", tags.IDLE_SINCE: "20261203t0230z", tags.KEEP: "true"}
    got = d.combined_tags([a, b])
    # the later mark (a shorter grace so far), the opt-out of any part, no group's floor
    assert got == {tags.CLUSTER: "pretrain", tags.IDLE_SINCE: "20261203t0230z",
                   tags.KEEP: "true"}
    # a part without a mark: the cluster is not marked (it will be, with a fresh grace)
    assert tags.IDLE_SINCE not in d.combined_tags([a, {tags.CLUSTER: "pretrain"}])
    assert d.combined_tags([]) == {}


# ---- issue 21: metrics arrive late ------------------------------------------------------------
@pytest.mark.parametrize("late_min", [0, 1, 2, 3, 4, 5])
def test_data_up_to_five_minutes_late_is_still_complete_evidence(late_min):
    """The idle evidence ends at the newest period that can be complete (5 min before now):
    30 idle minutes whose last 0..5 minutes are not published yet still read as idle."""
    visible = {k: series(0.5, end=NOW - late_min * 60) for k in ("i-0", "i-1")}
    v = d.decide(ref(), visible, now=NOW, policy=P)
    assert (v.state, v.action) == (d.IDLE, d.MARK), v.reason


def test_data_later_than_the_tolerated_delay_is_insufficient():
    visible = {k: series(0.5, end=NOW - 8 * 60) for k in ("i-0", "i-1")}
    v = d.decide(ref(), visible, now=NOW, policy=P)
    assert v.state == d.INSUFFICIENT and "gap" in v.reason


def test_busy_data_newer_than_the_evidence_end_still_counts():
    """The evidence for idleness stops 5 min before now; a busy sample that already arrived
    from those minutes is evidence of work and wins."""
    busy_tail = series(0.5, end=NOW - 2 * 60) + ((NOW - 2 * 60, 88.0),)
    v = d.decide(ref(**{tags.IDLE_SINCE: mark(40)}), {"i-0": series(0.5), "i-1": busy_tail},
                 now=NOW, policy=P)
    assert (v.state, v.action) == (d.BUSY, d.UNMARK) and "88.0%" in v.reason


def test_without_a_delay_the_evidence_ends_now():
    p0 = d.Policy(threshold_pct=5, grace_minutes=30, delay_s=0)
    assert d.evidence_end(NOW, p0) == NOW and d.evidence_end(NOW, P) == NOW - 300
    assert d.evidence_end(NOW + 59, P) == NOW - 300     # whole periods only
    late = {k: series(0.5, end=NOW - 3 * 60) for k in ("i-0", "i-1")}
    assert d.decide(ref(), late, now=NOW, policy=p0).state == d.INSUFFICIENT


def _act_time(delay_s: int, *, cadence_min: int = 15) -> float:
    """Run the decision every ``cadence_min`` over a cluster idle from NOW - 2 h, with its
    metrics published ``delay_s`` late; apply marks; return when it is scaled to zero."""
    r = ref(launched=None, **{tags.IDLE_MINUTES: "60"})
    t = NOW
    while t < NOW + 6 * H:
        visible = {n.id: series(0.5, start=NOW - 2 * H, end=t - delay_s) for n in r.nodes}
        v = d.decide(r, visible, now=t, policy=P)
        if v.action == d.MARK:
            r = d.ClusterRef(**{**r.__dict__, "tags": {**r.tags,
                                                       tags.IDLE_SINCE: tags.timestamp_label(t)}})
        elif v.action == d.UNMARK:
            raise AssertionError(f"unmarked at +{(t - NOW) / 60:.0f} min: {v.reason}")
        elif v.action == d.SCALE_TO_ZERO:
            return t
        t += cadence_min * 60
    raise AssertionError("never scaled")


def test_a_delay_of_zero_to_five_minutes_changes_when_never_whether():
    times = {delay: _act_time(delay) for delay in (0, 60, 120, 180, 240, 300)}
    assert len(set(times.values())) == 1, times     # here not even when: 15-min cadence


# ---- issue 21 item 3: declared schedules and the first-job grace; C3: prepaid groups ----------
def _at(ref_, **kw):
    return d.ClusterRef(**{**ref_.__dict__, **kw})


NIGHTLY = {tags.schedule_key(0): "0_2_x_x_x_120"}       # daily 02:00 UTC for 120 min
SEVEN = 1_800_000_000.0 - 3600     # 2027-01-15T07:00Z


def test_a_declared_window_holds_the_reaper_from_the_lead_to_its_end():
    # NOW is 08:00 UTC: a window at 08:30 is due within the 60-min lead
    r = ref(**{tags.schedule_key(0): "30_8_x_x_x_60"})
    v = d.decide(r, idle(2), now=NOW, policy=P)
    assert (v.state, v.action) == (d.SKIPPED, d.NONE)
    assert "held until 2027-01-15T09:30Z: work due 2027-01-15T08:30Z to 2027-01-15T09:30Z" \
        in v.reason
    assert [h.kind for h in v.holds] == ["schedule"]


def test_a_hold_keeps_a_marked_cluster_from_being_torn_down_but_keeps_its_mark():
    r = ref(**{tags.schedule_key(0): "30_8_x_x_x_60", tags.IDLE_SINCE: mark(45)})
    v = d.decide(r, idle(2), now=NOW, policy=P)
    assert (v.state, v.action) == (d.SKIPPED, d.NONE) and "held until" in v.reason
    # busy work during the window still clears the mark
    busy = d.decide(r, {"i-0": series(70), "i-1": series()}, now=NOW, policy=P)
    assert busy.action == d.UNMARK


def test_outside_its_windows_a_scheduled_cluster_is_reaped_as_usual():
    r = ref(**{tags.schedule_key(0): "0_2_x_x_x_120", tags.IDLE_SINCE: mark(45)})
    v = d.decide(r, idle(2), now=NOW, policy=P)
    assert v.action == d.SCALE_TO_ZERO and v.holds == ()


def test_the_lead_is_the_clusters_own():
    r = ref(**{tags.schedule_key(0): "30_9_x_x_x_60", tags.SCHEDULE_LEAD: "120"})
    assert d.decide(r, idle(2), now=NOW, policy=P).state == d.SKIPPED
    r0 = ref(**{tags.schedule_key(0): "30_9_x_x_x_60", tags.SCHEDULE_LEAD: "60"})
    assert d.decide(r0, idle(2), now=NOW, policy=P).action == d.MARK


@pytest.mark.parametrize("key,raw", [(tags.schedule_key(0), "0 2 * * *"),
                                     (tags.schedule_key(3), "61_2_x_x_x_60"),
                                     (tags.SCHEDULE_LEAD, "-5"),
                                     (tags.FIRST_JOB_GRACE, "forever")])
def test_an_unreadable_schedule_tag_means_work_may_be_due_at_any_time(key, raw):
    v = d.decide(ref(**{key: raw, tags.IDLE_SINCE: mark(45)}), idle(2), now=NOW, policy=P)
    assert (v.state, v.action) == (d.SKIPPED, d.NONE)
    assert key in v.reason and "when work is due is unknown, so nothing is done" in v.reason


def test_a_new_cluster_waits_for_its_first_job():
    """Created at 07:00 for a job at 09:00 (nothing declared): not marked before 09:00."""
    r = _at(ref(), created_at=SEVEN)
    v = d.decide(r, idle(2), now=NOW, policy=P)
    assert (v.state, v.action) == (d.SKIPPED, d.NONE)
    assert "held until 2027-01-15T09:00Z: created 2027-01-15T07:00Z: a new cluster waits 120 " \
           "min for its first job" in v.reason
    later = {f"i-{k}": series(0.5, end=SEVEN + 2 * H) for k in range(2)}
    assert d.decide(r, later, now=SEVEN + 2 * H, policy=P).action == d.MARK
    assert d.decide(_at(ref(**{tags.FIRST_JOB_GRACE: "30"}), created_at=SEVEN), idle(2),
                    now=NOW, policy=P).action == d.MARK


def test_the_first_job_grace_does_not_hide_a_busy_cluster():
    v = d.decide(_at(ref(), created_at=SEVEN), {"i-0": series(80), "i-1": series()}, now=NOW,
                 policy=P)
    assert v.state == d.BUSY and [h.kind for h in v.holds] == ["first-job-grace"]


def prepaid(until_minutes, nodes=3, **kw):
    return _at(ref(nodes=nodes, **kw), group_nodes={"asg": nodes},
               billed_tags={"asg": (tags.timestamp_label(NOW + until_minutes * 60),)})


def test_a_prepaid_group_is_never_scaled_before_its_time():
    v = d.decide(prepaid(600, **{tags.IDLE_SINCE: mark(45)}), idle(3), now=NOW, policy=P)
    assert (v.state, v.action) == (d.SKIPPED, d.UNMARK)     # nothing to do: no mark either
    assert "prepaid until 2027-01-15T18:00Z (gpulease-billed-until): never scaled before" \
        in v.reason
    assert [(h.kind, h.until) for h in v.holds] == [("billed-until", NOW + 600 * 60)]


def test_after_its_time_a_prepaid_group_is_an_ordinary_group():
    v = d.decide(prepaid(-10, **{tags.IDLE_SINCE: mark(45)}), idle(3), now=NOW, policy=P)
    assert v.action == d.SCALE_TO_ZERO and v.holds == ()


def test_beside_a_prepaid_group_the_other_groups_go_down():
    """A Capacity Block cluster: the block's group is prepaid, the burst group is not."""
    r = _at(ref(nodes=5, **{tags.IDLE_SINCE: mark(45)}), groups=("block-asg", "asg"),
            group_nodes={"block-asg": 2, "asg": 3},
            billed_tags={"block-asg": (tags.timestamp_label(NOW + H),)})
    v = d.decide(r, idle(5), now=NOW, policy=P)
    assert (v.action, v.targets, v.nodes_removed) == (d.SCALE_TO_BASELINE, (("asg", 0),), 3)
    dv = d.decide(r, idle(5), now=NOW, policy=d.Policy(destroy=True))
    assert dv.action == d.SCALE_TO_BASELINE     # a destroy would take the block's nodes too


@pytest.mark.parametrize("raw", ["tomorrow", "2026-12-24", "", "99999999t9999z"])
def test_an_unreadable_billed_until_scales_nothing(raw):
    r = _at(ref(**{tags.IDLE_SINCE: mark(45)}), group_nodes={"asg": 2},
            billed_tags={"asg": (raw,)})
    v = d.decide(r, idle(2), now=NOW, policy=P)
    assert (v.state, v.action) == (d.SKIPPED, d.NONE)
    assert "gpulease-billed-until tag on asg" in v.reason and "nothing is scaled" in v.reason


# ---- issue 21 item 2: idle nodes above the floor go one by one ---------------------------------
def team(busy=("i-0", "i-1"), floor="2", marks=None, nodes=5, protected=(), **tagkv):
    """A demand-profile group: ``nodes`` nodes in one ASG, baseline ``floor``; ``busy`` work."""
    r = ref(nodes=nodes, **tagkv)
    return d.ClusterRef(**{**r.__dict__,
                           "nodes": tuple(d.Node(n.id, n.launched_at, group="asg",
                                                 protected=n.id in protected) for n in r.nodes),
                           "group_nodes": {"asg": nodes},
                           "baseline_tags": {"asg": (floor,)} if floor is not None else {},
                           "node_marks": dict(marks or {})}), {
        f"i-{k}": series(80 if f"i-{k}" in busy else 0.5) for k in range(nodes)}


def test_idle_nodes_above_the_floor_are_marked_one_by_one():
    r, samples = team()
    v = d.decide(r, samples, now=NOW, policy=P)
    assert (v.state, v.action) == (d.BUSY, d.MARK_NODES)
    # i-0 and i-1 rank first (the floor of 2): busy or not, never marked; i-2..i-4 are idle
    assert [(a.node, a.action) for a in v.node_actions] == [
        ("i-2", "mark"), ("i-3", "mark"), ("i-4", "mark")]
    assert "removed after a 30-min grace if still idle" in v.node_actions[0].reason


def test_after_the_grace_marked_idle_nodes_are_removed_and_busy_ones_unmarked():
    r, samples = team(busy=("i-0", "i-1", "i-3"),
                      marks={"i-2": mark(45), "i-3": mark(45), "i-4": mark(20)})
    v = d.decide(r, samples, now=NOW, policy=P)
    assert v.action == d.REMOVE_NODES and v.nodes_removed == 1
    assert [(a.node, a.action) for a in v.node_actions] == [("i-2", "remove"),
                                                            ("i-3", "unmark")]
    # i-4: marked 20 min ago, still in its grace: nothing this run
    assert d.REMOVE_NODES in d.TEARDOWN_ACTIONS


def test_the_floor_counts_nodes_by_rank_never_by_business():
    """Floor 2, the two first-ranked nodes idle, the others busy: nothing can go (the node
    autostop ranks the same way, so the two together never cross the floor)."""
    r, samples = team(busy=("i-2", "i-3", "i-4"))
    v = d.decide(r, samples, now=NOW, policy=P)
    assert (v.state, v.action, v.node_actions) == (d.BUSY, d.NONE, ())


def test_a_group_without_a_floor_loses_every_idle_node():
    r, samples = team(busy=("i-3",), floor=None)
    v = d.decide(r, samples, now=NOW, policy=P)
    assert [a.node for a in v.node_actions if a.action == "mark"] == ["i-0", "i-1", "i-2", "i-4"]


def test_a_node_without_complete_data_is_never_marked_and_loses_its_mark():
    r, samples = team(marks={"i-2": mark(45)})
    samples["i-2"] = series(0.5, end=NOW - 20 * 60)          # its data stops: not idle
    v = d.decide(r, samples, now=NOW, policy=P)
    assert ("i-2", "unmark") in [(a.node, a.action) for a in v.node_actions]
    assert "i-2" not in [a.node for a in v.node_actions if a.action in ("mark", "remove")]


def test_a_node_busy_since_its_mark_is_unmarked_not_removed():
    r, samples = team(marks={"i-2": mark(50)})
    samples["i-2"] = series(0.5, end=NOW - 45 * 60) + series(60, start=NOW - 45 * 60,
                                                               end=NOW - 42 * 60) + \
        series(0.5, start=NOW - 42 * 60)
    v = d.decide(r, samples, now=NOW, policy=P)
    assert ("i-2", "unmark") in [(a.node, a.action) for a in v.node_actions]


def test_protected_from_scale_in_is_never_removed():
    r, samples = team(protected=("i-4",), marks={"i-4": mark(45)})
    v = d.decide(r, samples, now=NOW, policy=P)
    acts = {a.node: a.action for a in v.node_actions}
    assert acts["i-4"] == "unmark" and acts["i-2"] == "mark"


def test_a_hold_blocks_node_marks_and_removals_not_unmarks():
    r, samples = team(marks={"i-2": mark(45)}, busy=("i-0", "i-1", "i-2"),
                      **{tags.schedule_key(0): "30_8_x_x_x_60"})
    v = d.decide(r, samples, now=NOW, policy=P)
    assert [(a.node, a.action) for a in v.node_actions] == [("i-2", "unmark")]
    r2, samples2 = team(marks={"i-3": mark(45)}, **{tags.schedule_key(0): "30_8_x_x_x_60"})
    assert d.decide(r2, samples2, now=NOW, policy=P).node_actions == ()


def test_a_prepaid_group_keeps_every_node():
    r, samples = team(floor=None)
    r = d.ClusterRef(**{**r.__dict__, "billed_tags": {"asg": (tags.timestamp_label(NOW + H),)}})
    assert d.decide(r, samples, now=NOW, policy=P).node_actions == ()


def test_the_cluster_mark_goes_when_nodes_are_handled_one_by_one():
    r, samples = team(**{tags.IDLE_SINCE: mark(40)})
    v = d.decide(r, samples, now=NOW, policy=P)
    assert v.action == d.MARK_NODES and v.unmark_cluster


def test_lookback_covers_the_oldest_node_mark():
    r, _ = team(marks={"i-2": mark(90)})
    assert d.lookback_minutes(r, now=NOW, policy=P) == 90
