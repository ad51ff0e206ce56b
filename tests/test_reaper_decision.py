"""Table tests of the pure idle decision (no cloud): states, reasons, actions, grace, coverage."""
from __future__ import annotations

import pytest

from infra.costing import tags
from infra.reaper import decision as d

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
    ("just launched (launch time unknown: coverage)", ref(launched=None),
     {"i-0": series(), "i-1": series(start=NOW - 27 * 60)}, P, d.INSUFFICIENT, d.NONE,
     "no GPU utilization data for the first 3 min of the 30-min window"),
    ("data from the second period is enough", ref(launched=None),
     {"i-0": series(), "i-1": series(start=NOW - 29 * 60)}, P, d.IDLE, d.MARK, "below"),
    ("insufficient clears a mark", ref(**{tags.IDLE_SINCE: mark(40)}), {"i-0": series()}, P,
     d.INSUFFICIENT, d.UNMARK, "clears"),
    ("opt-out wins even when marked and idle", ref(**{tags.KEEP: "1", tags.IDLE_SINCE: mark(99)}),
     {"i-0": series(), "i-1": series()}, P, d.SKIPPED, d.NONE, "opt-out"),
    ("no window tag", ref(**{tags.IDLE_MINUTES: "soon"}), {}, P, d.SKIPPED, d.NONE,
     "no valid gpulease-idle-minutes"),
    ("--idle-minutes overrides the tag", ref(**{tags.IDLE_MINUTES: "soon"}),
     {"i-0": series(), "i-1": series()}, d.Policy(idle_minutes=90), d.IDLE, d.MARK, "90 min"),
    ("no nodes", ref(nodes=0), {}, P, d.SKIPPED, d.NONE, "no running nodes"),
]


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
    code = ("import sys; import infra.reaper.decision, infra.reaper.engine; "
            "bad = [m for m in ('boto3','botocore','google','pydantic','pulumi') if m in sys.modules];"
            "print(bad); sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
