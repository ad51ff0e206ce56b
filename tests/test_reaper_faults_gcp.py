"""The reaper on GCP through the fault-injecting proxy in front of the Compute + Monitoring fake.

HTML 5xx pages, a 200 whose body is not JSON (Compute and Monitoring), throttling, and MIGs
changing mid-run: retried when transient, otherwise a per-cluster (or per-project) error with
the others handled and an audit record; nothing unmeasured scaled away.
"""
from __future__ import annotations

import json
import time

import pytest

from gpulease import tags
from gpulease.reaper import decision as d
from gpulease.reaper import engine, gcp_deploy
from gpulease.reaper.audit import AuditLog
from gpulease.reaper.gcp import GcpReaper
from gpulease.retry import Backoff
from tests.fakes.fault_proxy import FaultProxy
from tests.fakes.gcp_compute_monitoring import FakeGcp

ZONE = "europe-west4-a"
T0 = time.time() - 6 * 3600


#: the fakes of the running test: every run sets their clock to its simulated now, so they
#: publish metrics late (FakeGcp.delay_s) as of that time.
FAKES: list = []


class Site:
    """One GCP project: the fake, and the proxy every reaper call goes through."""

    def __init__(self, project: str):
        self.fake = FakeGcp(project=project)
        FAKES.append(self.fake)
        self.upstream = self.fake.start()
        self.proxy = FaultProxy(self.upstream)
        self.url = self.proxy.start()

    def reaper(self) -> GcpReaper:
        return GcpReaper.for_project(self.fake.project, endpoint=self.url,
                                     backoff=Backoff(sleep=lambda s: None))

    def idle(self, name: str, size: int = 2, env: str = "dev") -> list[str]:
        ids = self.fake.add_mig(ZONE, f"{name}-mig", size, launched=T0, labels={
            tags.CLUSTER: name, tags.ENVIRONMENT: env, tags.IDLE_MINUTES: "30",
            tags.DECLARED: tags.declared_value(env, name),
            tags.FIRST_JOB_GRACE: "0"})
        for i in ids:
            self.fake.put_points(i, T0, T0 + 4 * 3600, 0.3)
        return ids

    def size(self, name: str) -> int:
        return self.fake.migs[(ZONE, f"{name}-mig")]["targetSize"]

    def stop(self) -> None:
        self.proxy.stop()
        self.fake.stop()
        FAKES.remove(self.fake)


@pytest.fixture
def site():
    s = Site("acme-ml")
    yield s
    # only labels and MIG sizes are ever changed
    assert all(p.endswith(("/setLabels", "/resize", "/deleteInstances"))
               for _, p in s.fake.mutations)
    s.stop()


def reap(reapers, now, *, apply=True, audit=None, **kw):
    reapers = reapers if isinstance(reapers, list) else [reapers]
    for fake in FAKES:
        fake.clock = now
    return engine.run(reapers, policy=d.Policy(grace_minutes=30), apply=apply,
                      environments=["dev"], now=now, audit=audit, settle_s=0, **kw)


def by_cluster(report) -> dict:
    return {o.cluster: o for o in report.outcomes}


TRANSIENT = [
    ("/aggregated/instances$", "non-json-200", {}),
    ("/aggregated/instances$", "truncated-200", {}),
    ("/aggregated/instances$", "html", {"style": "doctype", "status": 503}),
    ("/timeSeries$", "non-json-200", {}),
    ("/timeSeries$", "html", {"style": "nginx", "status": 502}),
    ("/timeSeries$", "throttle", {}),
    ("/aggregated/instanceGroupManagers$", "non-json-200", {}),
    ("/resize$", "html", {"style": "doctype", "status": 503}),
    ("/resize$", "non-json-200", {}),
    ("/setLabels$", "throttle", {}),
]


@pytest.mark.parametrize("op,kind,kw", TRANSIENT, ids=[f"{o.strip('/$')}-{k}" for o, k, _ in
                                                       TRANSIENT])
def test_transient_faults_are_retried_and_the_teardown_completes(site, op, kind, kw):
    site.idle("sandbox")
    r = site.reaper()
    assert by_cluster(reap(r, T0 + 40 * 60))["sandbox"].state == d.MARKED
    site.proxy.add(op, kind, times=2, **kw)
    o = by_cluster(reap(r, T0 + 75 * 60))["sandbox"]
    assert (o.state, o.action, o.applied) == (d.REAPED, d.SCALE_TO_ZERO, True), o.reason
    assert len(site.proxy.injected()) == 2 and r.backoff.retries >= 2
    assert site.size("sandbox") == 0


def test_persistent_non_json_from_compute_fails_one_project_only(site, tmp_path):
    site.idle("sandbox")
    other = Site("acme-ml-2")
    try:
        other.idle("elsewhere")
        site.proxy.add("/aggregated/instances$", "non-json-200", times=None)
        log = tmp_path / "a.jsonl"
        with AuditLog(str(log)) as audit:
            report = reap([site.reaper(), other.reaper()], T0 + 40 * 60, audit=audit)
        out = {(o.region, o.cluster): o for o in report.outcomes}
        err = out[("acme-ml", "*")]
        assert err.state == d.ERROR and "not the API's JSON" in err.reason
        assert "gave up after 5 attempts" in err.reason
        assert out[("europe-west4", "elsewhere")].state == d.MARKED
        assert report.exit_code == 1
        recs = [json.loads(x) for x in log.read_text().splitlines()]
        assert recs[-1]["event"] == "run-end" and recs[-1]["failed"] is True
    finally:
        other.stop()


def test_persistent_non_json_from_monitoring_keeps_the_marks(site):
    site.idle("sandbox")
    r = site.reaper()
    reap(r, T0 + 40 * 60)
    mark = site.fake.labels_of(ZONE, "sandbox-mig-0000")[tags.IDLE_SINCE]
    site.proxy.add("/timeSeries$", "non-json-200", times=None)
    o = by_cluster(reap(r, T0 + 55 * 60))["sandbox"]
    assert o.state == d.ERROR and "non-JSON body" in o.reason
    assert site.fake.labels_of(ZONE, "sandbox-mig-0000")[tags.IDLE_SINCE] == mark


def test_persistent_html_on_one_resize_is_a_per_cluster_error(site):
    site.idle("alpha")
    site.idle("beta")
    r = site.reaper()
    reap(r, T0 + 40 * 60)
    site.proxy.add("/instanceGroupManagers/alpha-mig/resize$", "html", times=None,
                   style="doctype", status=503)
    report = reap(r, T0 + 75 * 60)
    out = by_cluster(report)
    assert out["alpha"].state == d.ERROR and "503" in out["alpha"].reason, out["alpha"]
    assert out["beta"].state == d.REAPED and report.exit_code == 1
    assert site.size("alpha") == 2 and site.size("beta") == 0


def test_mig_scaled_up_mid_run_is_not_scaled_away_unmeasured(site):
    site.idle("sandbox")
    r = site.reaper()
    reap(r, T0 + 40 * 60)
    site.proxy.add("/timeSeries$", None, when="after", hook=lambda _: site.fake.scale_mig(
        ZONE, "sandbox-mig", 3, launched=T0 + 74 * 60))
    o = by_cluster(reap(r, T0 + 75 * 60))["sandbox"]
    assert (o.state, o.action, o.applied) == (d.INSUFFICIENT, d.NONE, False)
    assert "joined after the utilization read" in o.reason
    assert site.size("sandbox") == 3


def test_mig_deleted_mid_run_is_reported_as_such(site):
    site.idle("sandbox")
    site.idle("other")
    r = site.reaper()
    reap(r, T0 + 40 * 60)
    site.proxy.add("/timeSeries$", None, when="after",
                   hook=lambda _: site.fake.delete_mig(ZONE, "sandbox-mig"))
    report = reap(r, T0 + 75 * 60)
    o = by_cluster(report)["sandbox"]
    assert (o.state, o.applied) == (d.SKIPPED, False) and "deleted during the run" in o.reason
    assert by_cluster(report)["other"].state == d.REAPED and report.exit_code == 0


def test_mig_deleted_right_before_the_resize(site):
    site.idle("sandbox")
    r = site.reaper()
    reap(r, T0 + 40 * 60)
    site.proxy.add("/resize$", None, hook=lambda _: site.fake.delete_mig(ZONE, "sandbox-mig"))
    o = by_cluster(reap(r, T0 + 75 * 60))["sandbox"]
    assert (o.state, o.applied) == (d.SKIPPED, False) and "deleted during the run" in o.reason


def test_every_call_the_reaper_makes_is_granted_to_the_scheduled_function(site):
    """Least privilege must still cover every REST call (the claim and membership reads)."""
    site.idle("sandbox")
    r = site.reaper()
    reap(r, T0 + 40 * 60)
    site.fake.log.clear()
    reap(r, T0 + 75 * 60)
    needed = set()
    for method, path in site.fake.log:
        if path.endswith("/aggregated/instances"):
            needed.add("compute.instances.list")
        elif path.endswith("/aggregated/instanceGroupManagers"):
            needed.add("compute.instanceGroupManagers.list")
        elif path.endswith("/setLabels"):
            needed.add("compute.instances.setLabels")
        elif path.endswith("/resize"):
            needed.add("compute.instanceGroupManagers.update")
        elif path.endswith("/deleteInstances"):
            # documented on the MIG only (REST reference, deleteInstances)
            needed.add("compute.instanceGroupManagers.update")
        elif path.endswith("/getGuestAttributes"):
            needed.add("compute.instances.getGuestAttributes")
        elif "/instances/" in path and method == "GET":
            needed.add("compute.instances.get")
        elif path.endswith("/timeSeries"):
            needed.add("monitoring.timeSeries.list")
        else:
            raise AssertionError(f"unmapped call {method} {path}")
    assert needed >= {"compute.instances.list", "compute.instanceGroupManagers.list",
                      "compute.instances.setLabels", "compute.instanceGroupManagers.update",
                      "monitoring.timeSeries.list"}
    assert needed <= set(gcp_deploy.GCP_READ_PERMISSIONS) | set(gcp_deploy.GCP_ACT_PERMISSIONS)
