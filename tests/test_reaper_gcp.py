"""The reaper against a local HTTP fake of the Compute + Monitoring REST APIs: issue 7's scenarios."""
from __future__ import annotations

import time

import pytest

from gpulease.catalog import parse_catalog
from gpulease import tags
from gpulease.reaper import decision as d
from gpulease.reaper import engine
from gpulease.errors import CloudError
from gpulease.reaper.errors import GroupGone
from gpulease.reaper.gcp import GcpReaper
from gpulease.retry import Backoff
from tests.fakes.gcp_compute_monitoring import FakeGcp
from tests.timeouts import HANG_S

ZONE = "europe-west4-a"
T0 = time.time() - 6 * 3600   # instances launched six hours ago; `now` is simulated from there


#: the fakes of the running test: every run sets their clock to its simulated now, so they
#: publish metrics late (FakeGcp.delay_s) as of that time.
FAKES: list = []


@pytest.fixture
def gcp():
    fake = FakeGcp(project="acme-ml")
    url = fake.start()
    fake.url = url
    FAKES.append(fake)
    yield fake
    FAKES.remove(fake)
    # Nothing but labels and MIG sizes (resize, or deleteInstances of idle nodes) was ever
    # changed; templates are all still there.
    assert all(p.endswith(("/setLabels", "/resize", "/deleteInstances"))
               for _, p in fake.mutations)
    assert set(fake.templates) == {m["instanceTemplate"] for m in fake.migs.values()}
    fake.stop()


def labels(env, cluster, **extra):
    # (FIRST_JOB_GRACE 0: the scenarios start right after creation; the grace has its own tests)
    return {tags.CLUSTER: cluster, tags.ENVIRONMENT: env, tags.IDLE_MINUTES: "30",
            tags.DECLARED: tags.declared_value(env, cluster),
            tags.FIRST_JOB_GRACE: "0", **extra}


def reaper(fake) -> GcpReaper:
    return GcpReaper.for_project(fake.project, endpoint=fake.url,
                                 backoff=Backoff(sleep=lambda s: None))


def reap(r, now, *, envs=("dev",), grace=30, **kw):
    at(now)
    return {o.cluster: o for o in engine.run([r], policy=d.Policy(grace_minutes=grace),
                                             apply=kw.pop("apply", True), environments=envs,
                                             now=now, settle_s=0, **kw).outcomes}


def at(now: float) -> None:
    for fake in FAKES:
        fake.clock = now


def mig_size(fake, name):
    return fake.migs[(ZONE, name)]["targetSize"]


def test_idle_mig_marked_then_resized_to_zero_after_grace(gcp):
    ids = gcp.add_mig(ZONE, "sandbox-mig", 2, labels=labels("dev", "sandbox"), launched=T0)
    for i in ids:
        gcp.put_points(i, T0, T0 + 3 * 3600, 0.7, gpus=4)
    r = reaper(gcp)
    assert reap(r, T0 + 40 * 60)["sandbox"].state == d.MARKED
    assert tags.IDLE_SINCE in gcp.labels_of(ZONE, "sandbox-mig-0000")
    assert reap(r, T0 + 60 * 60)["sandbox"].state == d.MARKED     # still inside the grace
    assert mig_size(gcp, "sandbox-mig") == 2
    o = reap(r, T0 + 75 * 60)["sandbox"]
    assert (o.state, o.action, o.applied) == (d.REAPED, d.SCALE_TO_ZERO, True)
    assert o.max_gpu_utilization == pytest.approx(0.7)
    assert mig_size(gcp, "sandbox-mig") == 0


def test_busy_node_untouched_and_busy_during_grace_unmarked(gcp):
    """A busy node keeps its cluster (no scale to zero); its idle sibling goes on its own
    (issue 21 item 2: marked, then removed with deleteInstances after the grace)."""
    busy = gcp.add_mig(ZONE, "train-mig", 2, labels=labels("dev", "train"), launched=T0)
    turn = gcp.add_mig(ZONE, "tune-mig", 1, labels=labels("dev", "tune"), launched=T0)
    gcp.put_points(busy[0], T0, T0 + 3 * 3600, 0.0)
    gcp.put_points(busy[1], T0, T0 + 3 * 3600, 71.0)
    gcp.put_points(turn[0], T0, T0 + 45 * 60, 0.0)
    gcp.put_points(turn[0], T0 + 45 * 60, T0 + 3 * 3600, 55.0)
    r = reaper(gcp)
    first = reap(r, T0 + 40 * 60)
    assert first["train"].state == d.BUSY and first["tune"].state == d.MARKED
    assert first["train"].action == d.MARK_NODES
    assert tags.NODE_IDLE_SINCE in gcp.labels_of(ZONE, "train-mig-0000")
    assert tags.NODE_IDLE_SINCE not in gcp.labels_of(ZONE, "train-mig-0001")
    second = reap(reaper(gcp), T0 + 80 * 60)
    assert (second["tune"].state, second["tune"].action) == (d.BUSY, d.UNMARK)
    assert tags.IDLE_SINCE not in gcp.labels_of(ZONE, "tune-mig-0000")
    assert (second["train"].state, second["train"].action, second["train"].nodes_removed) == \
        (d.REAPED, d.REMOVE_NODES, 1)
    assert mig_size(gcp, "train-mig") == 1 and mig_size(gcp, "tune-mig") == 1
    assert set(gcp.migs[(ZONE, "train-mig")]["members"]) == {(ZONE, "train-mig-0001")}


def test_unlabelled_and_other_environment_untouched(gcp):
    plain = gcp.add_instance(ZONE, "someones-vm", labels={"team": "x"}, launched=T0)
    other = gcp.add_mig(ZONE, "stg-mig", 1, labels=labels("staging", "sandbox"), launched=T0)
    for i in (plain, *other):
        gcp.put_points(i, T0, T0 + 3 * 3600, 0.0)
    r = reaper(gcp)
    for now in (T0 + 40 * 60, T0 + 80 * 60):
        assert reap(r, now, grace=0) == {}
    assert gcp.labels_of(ZONE, "someones-vm") == {"team": "x"}
    assert tags.IDLE_SINCE not in gcp.labels_of(ZONE, "stg-mig-0000")
    assert mig_size(gcp, "stg-mig") == 1 and gcp.mutations == []


def test_missing_metrics_and_opt_out_mean_no_action(gcp):
    gcp.add_mig(ZONE, "nodata-mig", 1, labels=labels("dev", "nodata"), launched=T0)
    keep = gcp.add_mig(ZONE, "keep-mig", 1, labels=labels("dev", "keep", **{tags.KEEP: "yes"}),
                       launched=T0)
    gcp.put_points(keep[0], T0, T0 + 3 * 3600, 0.0)
    out = reap(reaper(gcp), T0 + 80 * 60, grace=0)
    assert out["nodata"].state == d.INSUFFICIENT and out["keep"].state == d.SKIPPED
    assert gcp.mutations == []


def test_throttling_retried_and_one_failure_does_not_stop_others(gcp):
    a = gcp.add_mig(ZONE, "a-mig", 1, labels=labels("dev", "a"), launched=T0)
    b = gcp.add_mig(ZONE, "b-mig", 1, labels=labels("dev", "b"), launched=T0)
    for i in a + b:
        gcp.put_points(i, T0, T0 + 3 * 3600, 0.0)
    r = reaper(gcp)
    gcp.faults["timeSeries"] = [429]                 # throttled once: retried
    reap(r, T0 + 40 * 60)
    assert r.backoff.retries == 1
    gcp.faults["resize"] = [403]                     # not retryable: a-mig fails, b-mig goes on
    at(T0 + 75 * 60)
    report = engine.run([r], policy=d.Policy(), apply=True, environments=["dev"],
                        now=T0 + 75 * 60, settle_s=0)
    out = {o.cluster: o for o in report.outcomes}
    assert out["a"].state == d.ERROR and "403" in out["a"].reason
    assert out["b"].state == d.REAPED and report.exit_code == 1
    assert mig_size(gcp, "a-mig") == 1 and mig_size(gcp, "b-mig") == 0


def test_label_fingerprint_conflict_is_reread_once(gcp):
    ids = gcp.add_mig(ZONE, "s-mig", 1, labels=labels("dev", "s"), launched=T0)
    gcp.put_points(ids[0], T0, T0 + 3 * 3600, 0.0)
    r = reaper(gcp)
    refs = r.discover(frozenset({"dev"}))
    inst = gcp.instances[(ZONE, "s-mig-0000")]      # someone else relabels it meanwhile
    from tests.fakes.gcp_compute_monitoring import fingerprint
    inst["labels"]["owner"] = "alice"
    inst["labelFingerprint"] = fingerprint(inst["labels"])
    r.mark(refs[0], "20261202t1200z")
    assert gcp.labels_of(ZONE, "s-mig-0000") == {**labels("dev", "s"), "owner": "alice",
                                                 tags.IDLE_SINCE: "20261202t1200z"}


def test_consumed_reservation_listed_with_catalog_price(gcp):
    ids = gcp.add_mig(ZONE, "r-mig", 2, labels=labels("dev", "r"), launched=T0,
                      reservation="r-res")
    gcp.add_reservation(ZONE, "r-res", "a3-highgpu-8g", 2)
    for i in ids:
        gcp.put_points(i, T0, T0 + 3 * 3600, 0.0)
    catalog = parse_catalog({
        "format": "gpulease-catalog/1", "version": "t", "as_of": "2026-12-01",
        "offerings": [{"cloud": "gcp", "region": "europe-west4", "instance_type": "a3-highgpu-8g",
                       "gpu": "H100", "gpus_per_node": 8, "gpu_memory_gb": 80, "vcpus": 208,
                       "memory_gb": 1872, "network_gbps": 1000, "rdma": "gpudirect-tcpx",
                       "on_demand_usd": 88.0, "spot_usd": 30.0, "commit_1y_usd": 60.0,
                       "commit_3y_usd": 40.0}]}, source="test fixture")
    out = reap(reaper(gcp), T0 + 40 * 60, apply=False, grace=0,
               pricer=engine.catalog_pricer(catalog))
    assert out["r"].action == d.MARK                 # reservations only matter at teardown
    r = reaper(gcp)
    reap(r, T0 + 40 * 60, grace=0)
    o = reap(r, T0 + 80 * 60, grace=0, pricer=engine.catalog_pricer(catalog))["r"]
    (res,) = o.reservations
    assert (res.id, res.count, res.usd_per_day) == ("r-res", 2, 60.0 * 2 * 24)


# ---- issue 16: a reserved MIG is never resized below its baseline ---------------------------------
def test_idle_burst_mig_resized_to_zero_reserved_mig_to_its_baseline(gcp):
    reserved = gcp.add_mig(ZONE, "pretrain-reserved", 3, launched=T0, reservation="pre-res",
                           labels=labels("dev", "pretrain", **{tags.BASELINE_NODES: "2"}))
    burst = gcp.add_mig(ZONE, "pretrain-spot", 2, launched=T0,
                        labels=labels("dev", "pretrain", **{tags.BASELINE_NODES: "0"}))
    for i in reserved + burst:
        gcp.put_points(i, T0, T0 + 5 * 3600, 0.3, gpus=8)
    r = reaper(gcp)
    assert reap(r, T0 + 40 * 60)["pretrain"].state == d.MARKED
    o = reap(r, T0 + 75 * 60)["pretrain"]
    assert (o.state, o.action, o.applied) == (d.REAPED, d.SCALE_TO_BASELINE, True)
    assert (o.baseline_nodes, o.nodes_removed) == (2, 3)
    assert (mig_size(gcp, "pretrain-reserved"), mig_size(gcp, "pretrain-spot")) == (2, 0)
    resized = [p for _, p in gcp.mutations if p.endswith("/resize")]
    assert sorted(p.split("/")[-2] for p in resized) == ["pretrain-reserved", "pretrain-spot"]

    # the two baseline VMs carry the old mark; the next run clears it and resizes nothing
    again = reap(r, T0 + 120 * 60, grace=0)["pretrain"]
    assert (again.state, again.action, again.applied) == (d.SKIPPED, d.UNMARK, True)
    assert "at its baseline of 2 nodes" in again.reason
    assert all(tags.IDLE_SINCE not in gcp.labels_of(ZONE, f"pretrain-reserved-{k:04d}")
               for k in range(2))
    third = reap(r, T0 + 180 * 60, grace=0)["pretrain"]
    assert (third.state, third.action) == (d.SKIPPED, d.NONE)
    assert [p for _, p in gcp.mutations if p.endswith("/resize")] == resized
    assert mig_size(gcp, "pretrain-reserved") == 2


def test_reserved_mig_at_its_baseline_is_not_resized(gcp):
    reserved = gcp.add_mig(ZONE, "eval-reserved", 2, launched=T0,
                           labels=labels("dev", "eval", **{tags.BASELINE_NODES: "2"}))
    burst = gcp.add_mig(ZONE, "eval-ondemand", 1, launched=T0,
                        labels=labels("dev", "eval", **{tags.BASELINE_NODES: "0"}))
    for i in reserved + burst:
        gcp.put_points(i, T0, T0 + 5 * 3600, 0.0)
    r = reaper(gcp)
    reap(r, T0 + 40 * 60)
    o = reap(r, T0 + 75 * 60)["eval"]
    assert (o.action, o.nodes_removed) == (d.SCALE_TO_BASELINE, 1)
    resized = [p for _, p in gcp.mutations if p.endswith("/resize")]
    assert [p.split("/")[-2] for p in resized] == ["eval-ondemand"]
    assert (mig_size(gcp, "eval-reserved"), mig_size(gcp, "eval-ondemand")) == (2, 0)


def test_the_floors_the_plan_stamps_are_the_floors_the_reaper_keeps(gcp):
    """The contract with the demand-profile components: the prod plan labels pretrain's reserved
    MIG template with its baseline and the on-demand one with 0; MIGs built from those labels
    are scaled to exactly that."""
    from tests.conftest import program_run

    planned = {r.name: r.inputs["labels"] for r in program_run("prod").resources
               if r.type == "gcp:compute/instanceTemplate:InstanceTemplate"
               and r.name.startswith("pretrain-")}
    reserved, burst = planned["pretrain-reserved-template"], planned["pretrain-on-demand-template"]
    floor = int(reserved[tags.BASELINE_NODES])
    assert floor > 0 and burst[tags.BASELINE_NODES] == "0"
    assert reserved[tags.BUSY_WITNESS] == burst[tags.BUSY_WITNESS] == "1"   # contract C10
    ids = gcp.add_mig(ZONE, "pretrain-reserved", floor + 1, launched=T0, labels=reserved)
    ids += gcp.add_mig(ZONE, "pretrain-on-demand", 2, launched=T0, labels=burst)
    for i in ids:
        gcp.put_points(i, T0, T0 + 5 * 3600, 0.2, gpus=8)
    for zone, name in list(gcp.instances):      # each node's first check after boot
        gcp.enable_guest_attributes(zone, name)
        gcp.write_guest_attribute(zone, name, tags.BUSY_AT_GUEST_ATTRIBUTE, str(int(T0 + 60)))
    window = int(reserved[tags.IDLE_MINUTES])
    r = reaper(gcp)
    # the window must lie after the launch: it ends at the newest period whose (late) data can
    # be complete, 5 min before now; and it must start 5 min after the nodes' boot witness
    # (a node was busy at some moment of the 5 min after its busy-at)
    first = reap(r, T0 + (window + 13) * 60, envs=("prod",))["pretrain"]
    assert first.state == d.MARKED, first.reason
    o = reap(r, T0 + (window + 48) * 60, envs=("prod",))["pretrain"]
    assert (o.action, o.baseline_nodes, o.nodes_removed) == (d.SCALE_TO_BASELINE, floor, 3)
    assert (mig_size(gcp, "pretrain-reserved"), mig_size(gcp, "pretrain-on-demand")) == (floor, 0)


# ---- issue 21 item 3 / contract C3 -------------------------------------------------------------
def test_a_new_mig_waits_for_its_first_job(gcp):
    """The first-job grace runs from the MIG's creationTimestamp (aggregated MIG list)."""
    ids = gcp.add_mig(ZONE, "fresh-mig", 1, launched=T0,
                      labels={**labels("dev", "fresh"), tags.FIRST_JOB_GRACE: "90"})
    gcp.put_points(ids[0], T0, T0 + 3 * 3600, 0.2)
    r = reaper(gcp)
    o = reap(r, T0 + 60 * 60)["fresh"]
    assert (o.state, o.action) == (d.SKIPPED, d.NONE)
    assert o.as_json()["holds"][0]["kind"] == "first-job-grace"
    assert reap(r, T0 + 95 * 60)["fresh"].state == d.MARKED


def test_a_prepaid_mig_is_never_resized_before_its_time(gcp):
    """Contract C3 on GCP: the label comes from the MIG's instance template, so its VMs carry
    it; a flex-start / calendar-reservation MIG stays until then."""
    until = "20991231t2359z"
    paid = gcp.add_mig(ZONE, "block-mig", 2, launched=T0,
                       labels={**labels("dev", "train"), tags.BILLED_UNTIL: until})
    burst = gcp.add_mig(ZONE, "burst-mig", 2, launched=T0, labels=labels("dev", "train"))
    for i in paid + burst:
        gcp.put_points(i, T0, T0 + 4 * 3600, 0.1)
    r = reaper(gcp)
    assert reap(r, T0 + 40 * 60)["train"].state == d.MARKED
    o = reap(r, T0 + 75 * 60)["train"]
    assert (o.state, o.action, o.nodes_removed) == (d.REAPED, d.SCALE_TO_BASELINE, 2)
    assert (mig_size(gcp, "block-mig"), mig_size(gcp, "burst-mig")) == (2, 0)
    assert o.as_json()["holds"] == [{"kind": "billed-until", "until": "2099-12-31T23:59Z",
                                     "detail": "the nodes of projects/123456789/zones/"
                                     f"{ZONE}/instanceGroupManagers/block-mig are prepaid until "
                                     "2099-12-31T23:59Z (gpulease-billed-until): never scaled "
                                     "before"}]


# ---- issue 21 item 2 on GCP: deleteInstances, zonal and regional ---------------------------------
@pytest.mark.parametrize("regional,late_s", [(False, 240), (True, 240), (False, 0),
                                              (False, 300)],
                         ids=["zonal", "regional", "zonal-instant", "zonal-5-min-late"])
def test_idle_nodes_above_the_baseline_leave_their_mig(gcp, regional, late_s):
    gcp.delay_s = late_s     # 0-5 min of publication delay: when a node goes, never whether
    ids = gcp.add_mig(ZONE, "team-mig", 4, launched=T0, regional=regional,
                      labels={**labels("dev", "team"), tags.BASELINE_NODES: "1"})
    # ranks by instance name: team-mig-0000 is the floor; -0001 works; -0002/-0003 idle
    gcp.put_points(ids[0], T0, T0 + 4 * 3600, 0.3)
    gcp.put_points(ids[1], T0, T0 + 4 * 3600, 66.0)
    for i in ids[2:]:
        gcp.put_points(i, T0, T0 + 4 * 3600, 0.3)
    r = reaper(gcp)
    first = reap(r, T0 + 40 * 60)["team"]
    assert first.action == d.MARK_NODES
    assert sorted(a["node"] for a in first.as_json()["node_actions"]) == sorted(ids[2:])
    o = reap(r, T0 + 75 * 60)["team"]
    assert (o.state, o.action, o.nodes_removed) == (d.REAPED, d.REMOVE_NODES, 2)
    key = (ZONE.rsplit("-", 1)[0] if regional else ZONE, "team-mig")
    assert gcp.migs[key]["targetSize"] == 2
    assert [n for _, n in gcp.migs[key]["members"]] == ["team-mig-0000", "team-mig-0001"]
    scope = "regions" if regional else "zones"
    assert any(p.endswith("/deleteInstances") and f"/{scope}/" in p for _, p in gcp.mutations)


def _delete(fake, scope, where, name, body):
    import requests
    return requests.post(f"{fake.url}/compute/v1/projects/{fake.project}/{scope}/{where}/"
                         f"instanceGroupManagers/{name}/deleteInstances", json=body, timeout=HANG_S)


def test_the_fakes_delete_instances_is_as_strict_as_the_api(gcp):
    gcp.add_mig(ZONE, "m", 2, launched=T0, labels=labels("dev", "m"))
    gcp.add_mig("europe-west4-b", "other", 1, launched=T0, labels=labels("dev", "o"))
    url = f"zones/{ZONE}/instances/m-0001"
    # not a member: fails unless skipInstancesOnValidationError
    r = _delete(gcp, "zones", ZONE, "m", {"instances": [url, f"zones/{ZONE}/instances/nope"]})
    assert r.status_code == 400 and "not a member" in r.json()["error"]["message"]
    assert gcp.migs[(ZONE, "m")]["targetSize"] == 2
    r = _delete(gcp, "zones", ZONE, "m", {"instances": [url, f"zones/{ZONE}/instances/nope"],
                                          "skipInstancesOnValidationError": True})
    assert r.status_code == 200 and gcp.migs[(ZONE, "m")]["targetSize"] == 1
    # malformed, or in another zone: always fails
    for bad in ("m-0000", "zones/europe-west4-b/instances/other-0000"):
        r = _delete(gcp, "zones", ZONE, "m", {"instances": [bad],
                                              "skipInstancesOnValidationError": True})
        assert r.status_code == 400, bad
    assert _delete(gcp, "zones", ZONE, "m", {"instances": [url] * 1001}).status_code == 400
    assert _delete(gcp, "zones", ZONE, "absent", {"instances": [url]}).status_code == 404
    assert _delete(gcp, "regions", "europe-west4", "m", {"instances": [url]}).status_code == 404


@pytest.mark.parametrize("status", [403, 500])
def test_a_failure_is_never_read_as_gone_because_404_is_in_its_text(status):
    """Errors are classified by the HTTP status the API answered, never by searching the
    message: the message quotes the request URL, so a project (or a fake's port) containing
    "404" made a 403 on setLabels read as "instance already deleted" (issue 35)."""
    fake = FakeGcp(project="acme-404-ml")
    fake.url = fake.start()
    try:
        ids = fake.add_mig(ZONE, "s-mig", 1, labels=labels("dev", "s"), launched=T0)
        fake.put_points(ids[0], T0, T0 + 3 * 3600, 0.0)
        r = GcpReaper.for_project(fake.project, endpoint=fake.url,
                                  backoff=Backoff(sleep=lambda s: None, attempts=1))
        refs = r.discover(frozenset({"dev"}))
        fake.faults["setLabels"] = [status] * 10
        with pytest.raises(CloudError) as exc:
            r.mark(refs[0], "20261202t1200z")
        assert "404" in str(exc.value) and exc.value.status == status
        assert not isinstance(exc.value, GroupGone)
        # and a real 404 still means "gone": the label write reports the node absent
        fake.faults["setLabels"] = [404]
        with pytest.raises(GroupGone):
            r.mark(refs[0], "20261202t1200z")
    finally:
        fake.stop()
