"""The GCP inventory reader against the Compute fake's aggregated lists of commitments,
reservations and future reservations (tests/fakes/gcp_compute_inventory.py), through
google-cloud-compute's REST transport."""
from __future__ import annotations

import datetime as dt

import pytest

from gpulease.errors import CloudError
from gpulease.inventory import gcp as reader
from gpulease.inventory import model
from tests.fakes.gcp_compute_inventory import FakeGcpInventory
from tests.timeouts import HANG_S

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
PROJECT = "acme-ml"


@pytest.fixture
def gcp(monkeypatch):
    fake = FakeGcpInventory(project=PROJECT)
    url = fake.start()
    monkeypatch.setattr(reader, "PAGE_SIZE", 2)
    yield fake, lambda: reader.make_clients(url, sleep=lambda s: None)
    fake.stop()


def _project(fake):
    start = NOW - dt.timedelta(days=60)
    fake.add_commitment("us-central1", "cud-a3", status="ACTIVE", plan="TWELVE_MONTH",
                        type_="ACCELERATOR_OPTIMIZED_A3", start=start,
                        accelerator=("nvidia-h100-80gb", 16), vcpus=416, memory_mb=3_812_352,
                        reservations=("res-a3",))
    fake.add_commitment("europe-west4", "cud-a2", status="NOT_YET_ACTIVE",
                        plan="THIRTY_SIX_MONTH", type_="ACCELERATOR_OPTIMIZED",
                        start=NOW + dt.timedelta(days=3), accelerator=("nvidia-tesla-a100", 8))
    fake.add_commitment("us-central1", "cud-gone", status="CANCELLED", plan="TWELVE_MONTH",
                        type_="GENERAL_PURPOSE", start=start, vcpus=8)
    fake.add_commitment("us-east4", "cud-expired-long-ago", status="EXPIRED",
                        plan="TWELVE_MONTH", type_="ACCELERATOR_OPTIMIZED",
                        start=NOW - dt.timedelta(days=800), accelerator=("nvidia-l4", 4))
    fake.add_commitment("us-east4", "cud-expired", status="EXPIRED", plan="TWELVE_MONTH",
                        type_="ACCELERATOR_OPTIMIZED", start=NOW - dt.timedelta(days=400),
                        accelerator=("nvidia-l4", 4))
    fake.add_gpu_reservation("us-central1-a", "res-a3", "a3-highgpu-8g", 2, in_use=1,
                             accelerator=("nvidia-h100-80gb", 8), commitment="cud-a3")
    fake.add_gpu_reservation("us-central1-b", "res-g2", "g2-standard-48", 3, in_use=0,
                             accelerator=("nvidia-l4", 4),
                             delete_at=NOW + dt.timedelta(days=10))
    fake.add_gpu_reservation("us-west1-b", "res-plain", "n1-standard-8", 1, in_use=1)
    fake.add_future_reservation("us-central1-a", "fr-cal", "a3-highgpu-8g", 4,
                                start=NOW + dt.timedelta(days=7),
                                end=NOW + dt.timedelta(days=21),
                                accelerator=("nvidia-h100-80gb", 8))
    fake.add_future_reservation("us-central1-c", "fr-dur", "a3-highgpu-8g", 1,
                                start=NOW + dt.timedelta(days=1), duration_s=86400 * 3,
                                mode="DEFAULT", status="PROCURING")
    fake.add_future_reservation("us-central1-a", "fr-declined", "a3-highgpu-8g", 8,
                                start=NOW + dt.timedelta(days=7),
                                end=NOW + dt.timedelta(days=14), status="DECLINED")


def test_reads_all_regions_across_pages(gcp):
    fake, clients = gcp
    _project(fake)
    holdings, source = reader.collect(PROJECT, ["us-central1"], clients=clients(), now=NOW)
    by_id = {h.id: h for h in holdings}
    assert set(by_id) == {"cud-a3", "cud-a2", "cud-expired", "res-a3", "res-g2", "res-plain",
                          "fr-cal", "fr-dur"}
    assert (source.scope, source.regions) == (PROJECT, ["us-central1"])

    cud = by_id["cud-a3"]
    assert (cud.kind, cud.model, cud.region, cud.instance_family) == \
        ("gce-commitment", "commitment", "us-central1", "ACCELERATOR_OPTIMIZED_A3")
    assert (cud.accelerator_type, cud.accelerators, cud.term_months, cud.state) == \
        ("nvidia-h100-80gb", 16, 12, "active")
    assert cud.detail == {"vcpus": "416", "memory_mb": "3812352", "plan": "TWELVE_MONTH",
                          "category": "MACHINE", "reservations": "res-a3"}
    assert cud.start == "2026-10-05T12:00:00Z" and cud.active_at(NOW)
    a2 = by_id["cud-a2"]      # another region than the stack's: the project's all the same
    assert (a2.region, a2.term_months, a2.state, a2.active_at(NOW)) == \
        ("europe-west4", 36, "not_yet_active", False)
    assert by_id["cud-expired"].state == "expired" and by_id["cud-expired"].ended_by(NOW)

    res = by_id["res-a3"]
    assert (res.kind, res.model, res.zone, res.region, res.instance_type) == \
        ("gce-reservation", "reservation", "us-central1-a", "us-central1", "a3-highgpu-8g")
    assert (res.instances, res.used_instances, res.utilisation, res.accelerators) == \
        (2, 1, 0.5, 16)
    assert res.detail["commitment_name"] == "cud-a3" and res.end is None
    assert by_id["res-g2"].end == "2026-12-14T12:00:00Z"
    assert by_id["res-plain"].accelerator_type is None and by_id["res-plain"].accelerators == 0

    cal = by_id["fr-cal"]
    assert (cal.kind, cal.model, cal.instances, cal.accelerators, cal.state) == \
        ("gce-future-reservation", "future_reservation", 4, 32, "approved")
    assert (cal.start, cal.end) == ("2026-12-11T12:00:00Z", "2026-12-25T12:00:00Z")
    assert cal.detail["reservation_mode"] == "CALENDAR"
    dur = by_id["fr-dur"]     # a window given as start + duration
    assert (dur.start, dur.end, dur.state) == ("2026-12-05T12:00:00Z", "2026-12-08T12:00:00Z",
                                               "procuring")
    # every page was read: pages of 2 (5 commitments -> 3 pages, 3 reservations -> 2)
    lists = [p for m, p in fake.log if "/aggregated/" in p]
    assert lists.count(f"/compute/v1/projects/{PROJECT}/aggregated/commitments") == 3
    assert lists.count(f"/compute/v1/projects/{PROJECT}/aggregated/reservations") == 2
    assert lists.count(f"/compute/v1/projects/{PROJECT}/aggregated/futureReservations") == 2
    inv = model.Inventory(generated_at="2026-12-04T12:00:00Z", sources=[source],
                          holdings=holdings)
    assert model.parse(inv.as_json(), source="x").holdings == inv.holdings


def test_an_empty_project_answers_nothing(gcp):
    fake, clients = gcp
    holdings, _ = reader.collect(PROJECT, [], clients=clients(), now=NOW)
    assert holdings == []
    assert len([p for _, p in fake.log if "/aggregated/" in p]) == 3


@pytest.mark.parametrize("status", [429, 503])
def test_throttling_is_retried(gcp, status):
    fake, clients = gcp
    _project(fake)
    fake.faults["commitments"] = [None, status, status]     # the second page, twice
    c = clients()
    holdings, _ = reader.collect(PROJECT, [], clients=c, now=NOW)
    assert "cud-expired" in {h.id for h in holdings}
    assert c.backoff.retries == 2


def test_a_refusal_names_the_permission(gcp):
    fake, clients = gcp
    fake.faults["futureReservations"] = [403]
    with pytest.raises(CloudError) as exc:
        reader.collect(PROJECT, [], clients=clients(), now=NOW)
    assert exc.value.status == 403 and not exc.value.retryable
    assert "compute.futureReservations.list" in str(exc.value)


def test_an_unreachable_region_fails_the_read(gcp):
    fake, clients = gcp
    _project(fake)
    fake.unreachable.append("regions/asia-east1")
    with pytest.raises(CloudError, match="regions/asia-east1 answered UNREACHABLE"):
        reader.collect(PROJECT, [], clients=clients(), now=NOW)


def test_the_fake_refuses_what_compute_refuses(gcp):
    import requests

    fake, _ = gcp
    base = f"http://127.0.0.1:{fake.server.server_address[1]}/compute/v1/projects/{PROJECT}"
    r = requests.get(f"{base}/aggregated/commitments", params={"maxResults": 501}, timeout=HANG_S)
    assert r.status_code == 400 and "500" in r.json()["error"]["message"]
    r = requests.get(f"{base}/aggregated/reservations", params={"pageSize": 5}, timeout=HANG_S)
    assert r.status_code == 400 and "Unknown name" in r.json()["error"]["message"]
    r = requests.get(f"{base}/aggregated/futureReservations", params={"pageToken": "x"},
                     timeout=HANG_S)
    assert r.status_code == 400
    with pytest.raises(ValueError, match="no commitment.status"):
        fake.add_commitment("us-central1", "x", status="RUNNING", plan="TWELVE_MONTH",
                            type_="GENERAL_PURPOSE", start=NOW)
