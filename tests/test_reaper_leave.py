"""Leave requests (issue 35 item 6): a node may act on nothing but itself, so its autostop asks
(AWS: the tag gpulease-leave-requested on its own instance; GCP: a guest attribute through its
own metadata server) and the reaper removes it after its own checks - the floor, the prepaid
groups, the holds, the metrics since the request and the busy witness. On moto and on the
Compute fake, plus the rule itself."""
from __future__ import annotations

import pytest

from gpulease import tags
from gpulease.reaper import decision as d
from tests.test_reaper_aws import _team, aws, by_cluster, reap  # noqa: F401 (fixture)
from tests.test_reaper_gcp import ZONE, T0, gcp, mig_size, reaper  # noqa: F401
from tests.test_reaper_gcp import reap as gcp_reap
from tests.test_reaper_witness import _gcp_nodes, _write

NOW = 1_800_000_000
POLICY = d.Policy()


def _rule(raw, samples=(), *, witness=False, busy_at=None):
    node = d.Node(id="i-1", witness=witness)
    return d.leave_request(node, raw, {"i-1": tuple(samples)}, now=NOW, policy=POLICY,
                           busy_at=busy_at, window=30)


@pytest.mark.parametrize("raw,why", [
    ("soon", "unreadable value 'soon': ignored"),
    ("1e9", "unreadable value '1e9': ignored"),
    ("-5", "unreadable value '-5': ignored"),
    (str(NOW + 3600), "in the future: ignored"),
    ("999999999999", "(epoch seconds, after the year 9999), in the future: ignored"),
    (str(NOW - d.LEAVE_REQUEST_TTL_S - 1), "over 30 min ago and not since: ignored"),
])
def test_a_request_that_cannot_be_right_is_ignored(raw, why):
    at, reason = _rule(raw)
    assert at is None and reason.endswith(why), reason
    assert reason.startswith(f"node i-1 asked to leave ({tags.LEAVE_REQUESTED})")


def test_no_request_is_no_reason():
    assert _rule(None) == (None, "")


def test_a_fresh_request_of_an_idle_node_is_honoured():
    at = NOW - 120
    assert _rule(str(at), [(at - 60, 0.5), (at, 0.0)]) == (at, "")
    # no data at all since: the node's own checks are the evidence
    assert _rule(str(at)) == (at, "")


def test_busy_since_the_request_is_not_honoured():
    at = NOW - 600
    got, why = _rule(str(at), [(at + 300, 55.0)])
    assert got is None and "reached 55.0%" in why
    # a busy sample in the window before the request contradicts it (metrics arrive late:
    # often the newest there is)
    assert _rule(str(at), [(at - 29 * 60, 40.0)])[0] is None
    # one before that does not: the node was idle from then on, by its own count
    assert _rule(str(at), [(at - 31 * 60, 40.0)]) == (at, "")


def test_a_witness_node_needs_its_witness_read_and_quiet():
    at = NOW - 600
    got, why = _rule(str(at), witness=True, busy_at=None)
    assert got is None and "not read: counts as busy" in why
    got, why = _rule(str(at), witness=True, busy_at={"i-1": str(at + 60)})
    assert got is None and "reported itself busy" in why
    assert _rule(str(at), witness=True, busy_at={"i-1": str(at - 3600)}) == (at, "")


# ---- AWS (moto) -------------------------------------------------------------------------------
def _ask(aws, iid, at):
    aws.ec2.create_tags(Resources=[iid], Tags=[{"Key": tags.LEAVE_REQUESTED,
                                               "Value": str(int(at))}])


def _live(aws, asg):
    return sorted(i["InstanceId"] for i in aws.group(asg)["Instances"]
                  if i["LifecycleState"] == "InService")


def test_aws_the_nodes_that_asked_are_removed_at_the_next_run(aws):
    asg, ids, t0 = _team(aws)                       # 5 nodes, baseline 2
    aws.util(ids[:2], t0, t0 + 200 * 60, 80.0)
    aws.util(ids[2:], t0, t0 + 200 * 60, 0.4)
    for iid in ids[3:]:
        _ask(aws, iid, t0 + 18 * 60)
    # 20 min in: the reaper's own 30-min window is not even full, the requests decide
    o = by_cluster(reap(aws.reaper(), t0 + 20 * 60, envs=("prod",)))["team"]
    assert (o.action, o.applied, o.nodes_removed) == (d.REMOVE_NODES, True, 2)
    removed = sorted(a["node"] for a in o.node_actions if a["action"] == "remove")
    assert removed == ids[3:]
    assert all(f"asked to leave at " in a["reason"] for a in o.node_actions
               if a["action"] == "remove")
    assert _live(aws, asg) == ids[:3]
    assert aws.group(asg)["DesiredCapacity"] == 3          # no replacement launched


def test_aws_requests_inside_the_floor_stale_or_busy_are_not_honoured(aws):
    asg, ids, t0 = _team(aws)                       # 5 nodes, baseline 2 (the first two)
    aws.util(ids[:1] + ids[4:], t0, t0 + 200 * 60, 80.0)
    aws.util(ids[1:4], t0, t0 + 200 * 60, 0.4)
    now = t0 + 45 * 60
    _ask(aws, ids[1], now - 60)                     # a baseline node: the floor holds it
    _ask(aws, ids[2], now - 31 * 60)                # stale: it stopped asking
    _ask(aws, ids[4], now - 60)                     # busy by its metrics
    o = by_cluster(reap(aws.reaper(), now, envs=("prod",)))["team"]
    assert not [a for a in o.node_actions if a["action"] == "remove"]
    assert _live(aws, asg) == ids


def test_aws_no_request_is_honoured_while_a_hold_is_on(aws):
    asg, ids, t0 = _team(aws, floor="0", nodes=2)
    aws.util(ids[:1], t0, t0 + 200 * 60, 80.0)
    aws.util(ids[1:], t0, t0 + 200 * 60, 0.4)
    aws.asg.create_or_update_tags(Tags=[{
        "ResourceId": asg, "ResourceType": "auto-scaling-group", "Key": tags.FIRST_JOB_GRACE,
        "Value": "600", "PropagateAtLaunch": False}])
    _ask(aws, ids[1], t0 + 18 * 60)
    o = by_cluster(reap(aws.reaper(), t0 + 20 * 60, envs=("prod",)))["team"]
    assert o.action != d.REMOVE_NODES and _live(aws, asg) == ids


# ---- GCP (Compute fake) ------------------------------------------------------------------------
def test_gcp_the_node_that_asked_is_deleted_through_its_mig(gcp):
    ids = _gcp_nodes(gcp, "team-mig", 3)
    gcp.put_points(ids[0], T0, T0 + 3 * 3600, 90.0)
    for i in ids[1:]:
        gcp.put_points(i, T0, T0 + 3 * 3600, 0.0)
    for k in range(3):
        _write(gcp, f"team-mig-{k:04d}", T0)        # each node's first check after boot
    gcp.write_guest_attribute(ZONE, "team-mig-0002", tags.LEAVE_REQUESTED_GUEST_ATTRIBUTE,
                              str(int(T0 + 18 * 60)))
    o = gcp_reap(reaper(gcp), T0 + 20 * 60)["team"]
    assert (o.action, o.applied, o.nodes_removed) == (d.REMOVE_NODES, True, 1)
    assert [a["node"] for a in o.node_actions if a["action"] == "remove"] == [ids[2]]
    assert mig_size(gcp, "team-mig") == 2
    deleted = [p for m, p in gcp.log if p.endswith("/instanceGroupManagers/team-mig/"
                                                   "deleteInstances")]
    assert len(deleted) == 1


def test_gcp_a_failing_leave_read_removes_nothing(gcp):
    ids = _gcp_nodes(gcp, "team-mig", 2)
    gcp.put_points(ids[0], T0, T0 + 3 * 3600, 90.0)
    gcp.put_points(ids[1], T0, T0 + 3 * 3600, 0.0)
    for k in range(2):
        _write(gcp, f"team-mig-{k:04d}", T0)       # (without the fault it would be removed)
    gcp.write_guest_attribute(ZONE, "team-mig-0001", tags.LEAVE_REQUESTED_GUEST_ATTRIBUTE,
                              str(int(T0 + 18 * 60)))
    gcp.faults["getGuestAttributes"] = [403]        # the leave-request read, refused
    o = gcp_reap(reaper(gcp), T0 + 20 * 60)["team"]
    assert o.action != d.REMOVE_NODES
    assert mig_size(gcp, "team-mig") == 2
