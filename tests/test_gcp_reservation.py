"""The compact-placement reservation's dynamic provider against a local Compute REST fake."""
from __future__ import annotations

import pytest
from google.api_core import exceptions

from infra.clouds.gcp import reservation as res
from tests.fakes.gcp_compute_reservations import FakeReservations

POLICY = ("https://www.googleapis.com/compute/v1/projects/acme/regions/us-central1/"
          "resourcePolicies/pretrain-reserved-placement-1a2b3c4")
PROPS = {"project": "acme", "zone": "us-central1-c", "name": "gpulease-prod-pretrain-reserved",
         "machine_type": "a3-highgpu-8g", "count": 2, "placement_policy": POLICY,
         "accelerators": [], "description": "test", "self_link": None}


@pytest.fixture
def fake():
    f = FakeReservations()
    f.endpoint = f.start()
    yield f
    f.stop()


@pytest.fixture
def provider(fake):
    return res.ReservationProvider(endpoint=fake.endpoint)


def test_reservation_body_carries_the_placement_policy():
    body = res.reservation_body({**PROPS, "accelerators": [{"type": "nvidia-tesla-t4",
                                                            "count": 1}]})
    assert body["resourcePolicies"] == {"policy": POLICY}
    assert body["specificReservationRequired"] is True
    assert body["specificReservation"] == {"count": "2", "instanceProperties": {
        "machineType": "a3-highgpu-8g",
        "guestAccelerators": [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 1}]}}


def test_create_waits_for_the_operation_and_stores_the_policy(fake, provider):
    out = provider.create(dict(PROPS))
    assert out.id == "projects/acme/zones/us-central1-c/reservations/" \
                     "gpulease-prod-pretrain-reserved"
    stored = fake.reservations[("acme", "us-central1-c", "gpulease-prod-pretrain-reserved")]
    assert stored["resourcePolicies"] == {"policy": POLICY}
    assert stored["specificReservation"]["count"] == "2"
    # the insert's long-running operation was polled to DONE
    assert any(m == "GET" and "/operations/" in p for m, p in fake.log)
    assert out.outs["self_link"].endswith("/zones/us-central1-c/reservations/"
                                          "gpulease-prod-pretrain-reserved")


def test_create_twice_is_a_conflict(fake, provider):
    provider.create(dict(PROPS))
    with pytest.raises(exceptions.Conflict):
        provider.create(dict(PROPS))


def test_the_fake_refuses_what_the_api_refuses(fake, provider):
    with pytest.raises(exceptions.BadRequest, match="resource.name"):
        provider.create({**PROPS, "name": "Bad_Name"})
    with pytest.raises(exceptions.BadRequest, match="Resource policy must be in region"):
        provider.create({**PROPS, "zone": "europe-west4-b"})


def test_check_refuses_before_any_call(fake, provider):
    failures = provider.check({}, {**PROPS, "name": "x_y", "zone": "europe-west4-b"}).failures
    assert {f.property for f in failures} == {"name", "placement_policy"}
    assert fake.log == []
    assert provider.check({}, dict(PROPS)).failures == []


def test_read_returns_live_count_and_gone_when_deleted(fake, provider):
    created = provider.create(dict(PROPS))
    got = provider.read(created.id, dict(PROPS))
    assert got.id == created.id and got.outs["count"] == 2
    fake.reservations.clear()                      # deleted outside Pulumi
    gone = provider.read(created.id, dict(PROPS))
    assert gone.id is None and gone.outs is None


def test_diff_resizes_count_in_place_and_replaces_the_rest(provider):
    d = provider.diff("id", dict(PROPS), {**PROPS, "count": 4})
    assert d.changes and d.replaces == []
    d = provider.diff("id", dict(PROPS), {**PROPS, "placement_policy": POLICY + "x"})
    assert d.changes and d.replaces == ["placement_policy"] and d.delete_before_replace
    assert not provider.diff("id", dict(PROPS), dict(PROPS)).changes


def test_update_resizes(fake, provider):
    provider.create(dict(PROPS))
    provider.update("id", dict(PROPS), {**PROPS, "count": 4})
    key = ("acme", "us-central1-c", "gpulease-prod-pretrain-reserved")
    assert fake.reservations[key]["specificReservation"]["count"] == "4"


def test_delete_is_idempotent(fake, provider):
    created = provider.create(dict(PROPS))
    provider.delete(created.id, dict(PROPS))
    assert not fake.reservations
    provider.delete(created.id, dict(PROPS))       # already gone: success
