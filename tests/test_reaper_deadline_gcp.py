"""The reaper's deadline step on GCP (issue 37 item 3) against the local Compute fake and the
Cloud Storage fake: a window job on spot switched to its on-demand MIG when its progress falls
behind and spot is gone, and back when spot returns - through mark, re-check and act, dry run
by default, with the audit record. The mirror of tests/test_reaper_deadline.py (moto)."""
from __future__ import annotations

import json

import pytest
from google.api_core.exceptions import BadRequest, NotFound

from gpulease import deadline as dl
from gpulease import naming, tags
from gpulease.clouds.gcp.cloud import mig_name
from gpulease.errors import CloudError
from gpulease.purchase import ON_DEMAND, SPOT
from gpulease.reaper import decision as d
from gpulease.reaper import engine
from gpulease.reaper.audit import AuditLog
from gpulease.reaper.errors import GroupGone
from gpulease.reaper.gcp import GcpReaper
from gpulease.retry import Backoff
from tests.fakes.gcp_compute_monitoring import FakeGcp
from tests.fakes.gcs import FakeGcs

PROJECT = "acme-ml"
ZONE = "europe-west4-a"
BUCKET = "gpulease-dev-train-work"
OBJECT = naming.progress_object("train")
START = 1_796_000_000.0 // 3600 * 3600          # a whole hour (labels keep minutes)
HOUR = 3600.0
SPOT_MIG, OD_MIG = mig_name("train", SPOT), mig_name("train", ON_DEMAND)
SPOT_PATH = f"projects/{PROJECT}/zones/{ZONE}/instanceGroupManagers/{SPOT_MIG}"
OD_PATH = f"projects/{PROJECT}/zones/{ZONE}/instanceGroupManagers/{OD_MIG}"


@pytest.fixture(scope="module")
def servers():
    gcp, gcs = FakeGcp(project=PROJECT), FakeGcs()
    gcp.url = gcp.start()
    gcs.start()
    yield gcp, gcs
    gcp.stop()
    gcs.stop()


def job_labels(role: str, env: str = "dev", cluster: str = "train", **extra) -> dict:
    return {tags.CLUSTER: cluster, tags.ENVIRONMENT: env,
            tags.DECLARED: tags.declared_value(env, cluster),
            tags.DEADLINE_GROUP: tags.label_value(role),
            tags.DEADLINE_START: tags.timestamp_label(START),
            tags.DEADLINE: tags.timestamp_label(START + 10 * HOUR),
            tags.DEADLINE_WORK_MINUTES: "360", tags.DEADLINE_RESTART_MINUTES: "30",
            tags.DEADLINE_PROGRESS_BUCKET: BUCKET, **extra}


class Job:
    def __init__(self, gcp: FakeGcp, gcs: FakeGcs):
        self.gcp, self.gcs = gcp, gcs

    def add(self, role: str, size: int, *, name=None, template=None, **labels) -> None:
        name = name or mig_name("train", role)
        template = template or f"train-{role.replace('_', '-')}-template"
        lab = job_labels(role, **labels)
        if template not in self.gcp.templates or "properties" not in self.gcp.templates[template]:
            self.gcp.add_template(template, labels=lab,
                                  provisioning="SPOT" if role == SPOT else "STANDARD")
        self.gcp.add_mig(ZONE, name, size, labels=lab, launched=START, template=template)

    def desired(self) -> tuple[int, int]:
        return (self.gcp.migs[(ZONE, SPOT_MIG)]["targetSize"],
                self.gcp.migs[(ZONE, OD_MIG)]["targetSize"])

    def progress(self, share: float) -> None:
        self.gcs.put(BUCKET, OBJECT, json.dumps(
            {"done": share * 1000, "total": 1000, "unit": "steps"}).encode())

    def spot_vms(self) -> list:
        return list(self.gcp.migs[(ZONE, SPOT_MIG)]["members"])

    def spot_lost(self, action: str = "STOP") -> None:
        """Every spot VM preempted; no spot capacity, so the MIG's repair does not succeed."""
        for zone, name in self.spot_vms():
            self.gcp.preempt(zone, name, action=action)
        self.gcp.migs[(ZONE, SPOT_MIG)]["stockout"] = True

    def spot_back(self, now: float) -> None:
        self.gcp.migs[(ZONE, SPOT_MIG)]["stockout"] = False
        for zone, name in self.spot_vms():
            if (zone, name) in self.gcp.actions:
                self.gcp.restore(zone, name, launched=now)

    def switch_mark(self):
        aic = self.gcp.migs[(ZONE, SPOT_MIG)].get("allInstancesConfig", {})
        return aic.get("properties", {}).get("labels", {}).get(tags.DEADLINE_SWITCH)


@pytest.fixture
def job(servers):
    gcp, gcs = servers
    for part in (gcp.instances, gcp.migs, gcp.templates, gcp.actions, gcp.faults, gcp.hooks,
                 gcs.buckets, gcs.faults):
        part.clear()
    gcp.log.clear()
    gcs.log.clear()
    gcs.create_bucket(BUCKET)
    j = Job(gcp, gcs)
    j.add(SPOT, 2)
    j.add(ON_DEMAND, 0)
    yield j
    # never touches data (the document is as the job wrote it) and no template or VM label:
    # what the step changed is MIG sizes and the spot MIG's all-instances configuration
    assert all(p.endswith("/resize") or (m == "PATCH" and p.endswith(SPOT_MIG))
               for m, p in gcp.mutations), gcp.mutations
    assert all(m == "GET" and "/o/" in p for m, p, _ in gcs.log), gcs.log


def reaper(servers) -> GcpReaper:
    gcp, gcs = servers
    r = GcpReaper.for_project(PROJECT, endpoint=gcp.url, storage_endpoint=gcs.url,
                              backoff=Backoff(sleep=lambda s: None))
    r.discover = lambda envs: []          # (the idle reaper is not under test here)
    return r


def reap(servers, now, *, apply=True, audit=None):
    servers[0].clock = now
    return engine.run([reaper(servers)], policy=d.Policy(), apply=apply,
                      environments=("dev",), now=now, audit=audit, settle_s=0)


def only(report):
    (o,) = [o for o in report.outcomes if o.deadline is not None]
    return o


def test_switches_to_on_demand_when_behind_and_back_when_spot_returns(job, servers, tmp_path):
    gcp, gcs = servers
    audit_path = tmp_path / "audit.jsonl"
    audit = AuditLog(str(audit_path))
    # 4 h in, 20 % done (the uniform line is at 40 %), the spot VMs preempted, none to be had
    job.progress(0.2)
    job.spot_lost()
    dry = only(reap(servers, START + 4 * HOUR, apply=False))
    assert dry.action == d.DEADLINE_ON_DEMAND and not dry.applied, dry.reason
    assert dry.deadline["seen"]["interrupted"] == 2 and dry.deadline["seen"]["spot_in_service"] == 0
    assert job.desired() == (2, 0) and gcp.mutations == []        # dry run: nothing moved
    o = only(reap(servers, START + 4 * HOUR, audit=audit))
    assert o.action == d.DEADLINE_ON_DEMAND and o.applied, o.reason
    assert "behind the uniform-progress line" in o.reason
    assert job.desired() == (0, 2)
    assert o.deadline["targets"] == {SPOT_PATH: 0, OD_PATH: 2}
    assert o.deadline["seen"]["spot_available"] is False
    assert (o.cloud, o.region, o.groups) == ("gcp", "europe-west4", (SPOT_PATH, OD_PATH))
    # mark (on the spot MIG), re-check, act - the MIG that gains first -, clear the mark
    muts = [(m, p.rsplit("/", 2)[-2:]) for m, p in gcp.mutations]
    assert muts == [("PATCH", ["instanceGroupManagers", SPOT_MIG]),
                    ("POST", [OD_MIG, "resize"]), ("POST", [SPOT_MIG, "resize"]),
                    ("PATCH", ["instanceGroupManagers", SPOT_MIG])]
    assert job.switch_mark() is None
    # an hour later, still behind the line at t + 2d: stays on on-demand
    job.progress(0.45)
    o = only(reap(servers, START + 5 * HOUR, audit=audit))
    assert o.action == d.DEADLINE_STAY and job.desired() == (0, 2), o.reason
    # ahead of the line at t + 2d: the spot MIG asks again (make before break) ...
    job.progress(0.75)
    job.spot_back(START + 6 * HOUR)
    marks: list = []
    gcp.hooks["resize"] = [lambda: marks.append((job.desired(), job.switch_mark()))]
    o = only(reap(servers, START + 6 * HOUR, audit=audit))
    assert o.applied and job.desired() == (2, 2), o.reason
    # the mark sat on the spot MIG while it was at 0 (its all-instances configuration)
    assert marks == [((0, 2), f"2-2-{tags.timestamp_label(START + 6 * HOUR)}")]
    # ... spot is there (its VMs running, nothing to repair): the on-demand MIG goes to zero
    o = only(reap(servers, START + 6.25 * HOUR, audit=audit))
    assert o.action == d.DEADLINE_SPOT and o.applied, o.reason
    assert job.desired() == (2, 0)
    assert "spot is available" in o.reason
    # the audit log has why, for every switch, with the mark that preceded it
    events = [json.loads(line) for line in audit_path.read_text().splitlines()]
    acts = [e for e in events if e["event"] == "deadline-action"]
    assert [(e["deadline"]["targets"][SPOT_PATH], e["deadline"]["targets"][OD_PATH])
            for e in acts] == [(0, 2), (2, 2), (2, 0)]
    assert all(e["ok"] and e["mark"].startswith(f"{e['deadline']['targets'][SPOT_PATH]}-")
               for e in acts)
    assert job.switch_mark() is None
    # the progress was read as the reaper may: objects.get of the one object, a ranged read
    assert {(p, r) for _, p, r in gcs.log} == {
        (f"/download/storage/v1/b/{BUCKET}/o/{OBJECT.replace('/', '%2F')}",
         f"bytes=0-{dl.MAX_PROGRESS_BYTES}")}
    assert json.loads(gcs.read(BUCKET, OBJECT))["total"] == 1000


def test_a_recheck_that_decides_otherwise_switches_nothing(job, servers, tmp_path):
    gcp, _ = servers
    audit_path = tmp_path / "audit.jsonl"
    job.progress(0.2)
    job.spot_lost()
    # between the mark and the re-check, spot comes back: the re-check sees spot in service
    gcp.hooks["patch"] = [lambda: job.spot_back(START + 4 * HOUR)]
    o = only(reap(servers, START + 4 * HOUR, audit=AuditLog(str(audit_path))))
    assert o.state == d.SKIPPED and not o.applied, o.reason
    assert "the re-check decided otherwise" in o.reason
    assert job.desired() == (2, 0)
    assert [p.rsplit("/", 1)[-1] for _, p in gcp.mutations] == [SPOT_MIG, SPOT_MIG]  # mark, clear
    assert job.switch_mark() is None
    events = [json.loads(line) for line in audit_path.read_text().splitlines()]
    assert [e["changed"] for e in events if e["event"] == "deadline-recheck"] == [True]
    assert not [e for e in events if e["event"] == "deadline-action"]


def test_no_progress_published_is_taken_as_none_done(job, servers):
    _, gcs = servers
    job.spot_lost(action="DELETE")            # the spot VMs deleted on preemption
    o = only(reap(servers, START + 2 * HOUR, apply=False))
    assert o.action == d.DEADLINE_ON_DEMAND, o.reason
    assert o.deadline["seen"]["interrupted"] == 2
    assert any("no progress published" in f for f in o.deadline["findings"])
    assert not any("progress not read" in f for f in o.deadline["findings"])   # a 404
    # a bucket that does not exist is a 404 too; a refusal is a finding, never "missing"
    gcs.buckets.clear()
    o = only(reap(servers, START + 2 * HOUR, apply=False))
    assert not any("progress not read" in f for f in o.deadline["findings"])
    gcs.create_bucket(BUCKET)
    job.progress(0.9)
    gcs.faults["get"] = [403]
    o = only(reap(servers, START + 2 * HOUR, apply=False))
    assert any("progress not read" in f and "403" in f for f in o.deadline["findings"])
    assert o.deadline["seen"]["work_done_hours"] == 0


def test_oversized_document_reads_at_most_the_limit(job, servers):
    _, gcs = servers
    gcs.put(BUCKET, OBJECT, b"{" + b" " * (3 * dl.MAX_PROGRESS_BYTES) + b"}")
    o = only(reap(servers, START + 2 * HOUR, apply=False))
    assert any(f"more than {dl.MAX_PROGRESS_BYTES}" in f for f in o.deadline["findings"])
    (ref,) = reaper(servers).deadline_jobs(frozenset({"dev"}))
    assert len(ref.progress) == dl.MAX_PROGRESS_BYTES + 1        # a ranged read, not the whole


def test_half_a_pair_undeclared_and_foreign_migs_are_left_alone(job, servers):
    gcp, _ = servers
    job.progress(0.0)
    job.spot_lost()
    # a MIG of someone else's naming using the job's template counts for nothing
    gcp.add_mig(ZONE, "copy-spot", 1, labels=job_labels(SPOT), launched=START,
                template="train-spot-template")
    assert only(reap(servers, START + 4 * HOUR, apply=False)).action == d.DEADLINE_ON_DEMAND
    # half a pair: the on-demand MIG gone
    gcp.delete_mig(ZONE, OD_MIG)
    report = reap(servers, START + 4 * HOUR)
    assert not [o for o in report.outcomes if o.deadline is not None]
    # a pair whose templates do not carry the program's declaration
    job.add(ON_DEMAND, 0, name=OD_MIG, template="forged-template",
            **{tags.DECLARED: "v1-00000000000000000000"})
    report = reap(servers, START + 4 * HOUR)
    assert not [o for o in report.outcomes if o.deadline is not None]
    assert job.desired() == (2, 0) and gcp.mutations == []


def test_opt_out_in_the_all_instances_configuration(job, servers):
    gcp, _ = servers
    job.progress(0.0)
    job.spot_lost()
    gcp.migs[(ZONE, OD_MIG)]["allInstancesConfig"] = {"properties": {"labels": {
        tags.KEEP: "true"}}}
    o = only(reap(servers, START + 4 * HOUR))
    assert o.action == d.DEADLINE_STAY and "hands off" in o.reason
    assert job.desired() == (2, 0) and gcp.mutations == []


def test_fake_is_as_strict_as_compute(job, servers):
    """What the step calls fails as Compute Engine fails: a MIG that does not exist is a 404
    (GroupGone when switching), a negative size and a malformed label a 400."""
    gcp, _ = servers
    r = reaper(servers)
    (ref,) = r.deadline_jobs(frozenset({"dev"}))
    assert (ref.spot_group, ref.on_demand_group) == (SPOT_PATH, OD_PATH)
    with pytest.raises(BadRequest):
        r.migs.resize(project=PROJECT, zone=ZONE, instance_group_manager=SPOT_MIG, size=-1)
    with pytest.raises(NotFound):
        r.migs.resize(project=PROJECT, zone=ZONE, instance_group_manager="nope", size=1)
    with pytest.raises(NotFound):
        list(r.migs.list_managed_instances(project=PROJECT, zone=ZONE,
                                           instance_group_manager="nope"))
    with pytest.raises(NotFound):
        r.templates.get(project=PROJECT, instance_template="nope")
    with pytest.raises(CloudError) as bad:
        r._patch_labels(SPOT_PATH, {"Bad Key": "x"})
    assert bad.value.status == 400
    gcp.delete_mig(ZONE, OD_MIG)
    with pytest.raises(GroupGone):
        r.deadline_resize(ref, {OD_PATH: 2, SPOT_PATH: 0})
    assert gcp.migs[(ZONE, SPOT_MIG)]["targetSize"] == 2     # the gaining MIG went first
    gcp.add_mig(ZONE, OD_MIG, 0, labels=job_labels(ON_DEMAND), launched=START,
                template="train-on-demand-template")
