"""The compact-placement reservation's dynamic provider, driven the way `pulumi up` drives it.

Every lifecycle test goes through Pulumi's own dynamic-provider host code
(``pulumi/dynamic/__main__.py``'s servicer, ``gpulease.planner.dynhost``) with the provider
serialized as the SDK serializes it, against the local Compute REST fake
(tests/fakes/gcp_compute_reservations.py): preview with unknown inputs, create, refresh with
the reservation gone, a retried create, operation errors, malformed answers.
"""
from __future__ import annotations

import uuid

import pytest
from pulumi.dynamic.dynamic import serialize_provider

from gpulease.clouds.gcp import reservation as res
from gpulease.planner.dynhost import UNKNOWN, DynamicHost, HostError
from tests.fakes.gcp_compute_reservations import REQUEST_ID_WINDOW_S, FakeReservations

POLICY = ("https://www.googleapis.com/compute/v1/projects/acme-ml/regions/us-central1/"
          "resourcePolicies/pretrain-reserved-placement-1a2b3c4")
PROPS = {"project": "acme-ml", "zone": "us-central1-c", "name": "gpulease-prod-pretrain-reserved",
         "machine_type": "a3-highgpu-8g", "count": 2, "placement_policy": POLICY,
         "accelerators": [], "description": "test"}
URN = ("urn:pulumi:prod::gpulease::gpulease:gcp:GpuCluster$pulumi-python:dynamic/gpulease:"
       "GceReservation::pretrain-reservation")
KEY = ("acme-ml", "us-central1-c", "gpulease-prod-pretrain-reserved")


class Clock:
    def __init__(self):
        self.t = 1_800_000_000.0

    def __call__(self):
        return self.t


@pytest.fixture
def fake():
    f = FakeReservations(now=Clock())
    f.endpoint = f.start()
    yield f
    f.stop()


@pytest.fixture(scope="module")
def host():
    with DynamicHost() as h:
        yield h


@pytest.fixture
def inputs(fake):
    """The inputs as the SDK registers them: the properties plus the pickled provider."""
    provider = res.ReservationProvider(endpoint=fake.endpoint, poll_s=0.005, retry_s=0.005)
    return {**PROPS, "__provider": serialize_provider(provider)}


def _inserts(fake) -> int:
    return sum(1 for m, p in fake.log if m == "POST" and p.endswith("/reservations"))


# ---- preview ------------------------------------------------------------------------------
def test_preview_check_lets_an_unknown_placement_policy_pass(fake, host, inputs):
    """`pulumi preview` of a first `up`: the policy is created in the same update, so its
    self link is unknown; check must not judge it (it did: a regex on the Unknown object)."""
    out = host.check(URN, {}, {**inputs, "placement_policy": UNKNOWN})
    assert out.failures == []
    assert out.inputs["placement_policy"] is UNKNOWN   # handed back unknown, as received
    assert out.inputs["count"] == 2
    out = host.check(URN, {}, {**inputs, "zone": UNKNOWN, "count": UNKNOWN})
    assert out.failures == []
    assert fake.log == []                                # check never calls the API


@pytest.mark.parametrize("count", ["two", 1.5, True, "2", 0, -1, None])
def test_check_refuses_a_known_count_that_is_not_a_whole_number_of_vms(host, inputs, count):
    out = host.check(URN, {}, {**inputs, "count": count})
    assert [p for p, _ in out.failures] == ["count"], out.failures


def test_check_accepts_a_count_as_the_engine_sends_numbers(host, inputs):
    out = host.check(URN, {}, {**inputs, "count": 4.0})
    assert out.failures == [] and out.inputs["count"] == 4


def test_check_refuses_what_the_api_refuses_before_any_call(fake, host, inputs):
    out = host.check(URN, {}, {**inputs, "name": "x_y", "zone": "europe-west4-b",
                               "project": "Acme", "accelerators": [{"type": "T4", "count": 1.5}]})
    assert {p for p, _ in out.failures} == {"name", "placement_policy", "project",
                                            "accelerators[0].type", "accelerators[0].count"}
    assert dict(out.failures)["placement_policy"].endswith("is not in the region of zone "
                                                           "'europe-west4-b'")
    out = host.check(URN, {}, {**inputs, "placement_policy": "compact"})
    assert [p for p, _ in out.failures] == ["placement_policy"]
    assert fake.log == []


def test_preview_diff_of_an_unknown_policy_is_a_replacement(host, inputs):
    d = host.diff(URN, "id", dict(inputs), {**inputs, "placement_policy": UNKNOWN})
    assert d.changes and d.replaces == ["placement_policy"] and d.delete_before_replace


# ---- up, refresh, update, destroy ------------------------------------------------------------
def test_up_creates_refresh_reads_and_destroy_deletes(fake, host, inputs):
    checked = host.check(URN, {}, inputs)
    assert checked.failures == []
    id_, outs = host.create(URN, checked.inputs)
    assert id_ == "projects/acme-ml/zones/us-central1-c/reservations/" \
                  "gpulease-prod-pretrain-reserved"
    stored = fake.reservations[KEY]
    assert stored["resourcePolicies"] == {"policy": POLICY}
    assert stored["specificReservation"]["count"] == "2"
    assert outs["self_link"].endswith("/zones/us-central1-c/reservations/"
                                      "gpulease-prod-pretrain-reserved")
    assert outs["__provider"] == inputs["__provider"]
    # the insert carried a request id (a UUID), and its operation was polled to DONE
    assert [k[2] for k in fake.request_ids] and all(
        uuid.UUID(k[2]).int for k in fake.request_ids)
    assert any(m == "GET" and "/operations/" in p for m, p in fake.log)

    read = host.read(URN, id_, outs, checked.inputs)
    assert read.id == id_ and read.outputs["count"] == 2
    assert not host.diff(URN, id_, read.outputs, checked.inputs).changes

    news = host.check(URN, checked.inputs, {**inputs, "count": 4}).inputs
    d = host.diff(URN, id_, outs, news)
    assert d.changes and d.replaces == []
    outs = host.update(URN, id_, outs, news)
    assert fake.reservations[KEY]["specificReservation"]["count"] == "4"
    assert host.read(URN, id_, outs, news).outputs["count"] == 4

    host.delete(URN, id_, outs)
    assert not fake.reservations
    host.delete(URN, id_, outs)          # already gone: success


def test_create_waits_for_a_slow_operation(fake, host, inputs):
    fake.polls_until_done = 3
    host.create(URN, inputs)
    op_polls = [p for m, p in fake.log if m == "GET" and "/operations/" in p]
    assert len(op_polls) >= 3 and KEY in fake.reservations


def test_refresh_of_a_reservation_deleted_outside_pulumi_drops_it(fake, host, inputs):
    """The host writes the provider key into the outputs: a gone resource is an empty id and a
    dict (ReadResult(None, None) crashed the host with a TypeError)."""
    id_, outs = host.create(URN, inputs)
    fake.reservations.clear()
    gone = host.read(URN, id_, outs, inputs)
    assert gone.id == ""
    assert set(gone.outputs) == {"__provider"}


@pytest.mark.parametrize("answer, says", [
    ({"kind": "compute#reservation", "name": "gpulease-prod-pretrain-reserved"},
     "has no reserved count"),
    ({"kind": "compute#reservation", "specificReservation": {"count": "many"}},
     "is not a reservation"),
    ("<html>502 Bad Gateway</html>", "is not a reservation"),
])
def test_refresh_of_a_malformed_answer_is_an_error_never_count_zero(fake, host, inputs,
                                                                    answer, says):
    id_, outs = host.create(URN, inputs)
    fake.malformed_next_get = answer
    with pytest.raises(HostError, match=says):
        host.read(URN, id_, outs, inputs)


# ---- retries and conflicts ---------------------------------------------------------------------
def test_a_create_whose_answer_was_lost_is_retried_with_the_same_request_id(fake, host, inputs):
    fake.lose_next_insert_answer = True
    id_, _ = host.create(URN, inputs)
    assert _inserts(fake) == 2 and len(fake.request_ids) == 1   # the repeat was ignored
    assert list(fake.reservations) == [KEY] and id_.endswith(KEY[2])


def test_a_retried_up_joins_the_first_create_within_the_request_id_window(fake, host, inputs):
    first, _ = host.create(URN, inputs)
    ops = len(fake.operations)
    again, _ = host.create(URN, inputs)        # `pulumi up` again: no 409, no second insert
    assert again == first and len(fake.operations) == ops


def test_a_retried_up_after_the_window_adopts_the_identical_reservation(fake, host, inputs):
    first, _ = host.create(URN, inputs)
    fake.now.t += REQUEST_ID_WINDOW_S + 60
    again, outs = host.create(URN, inputs)     # 409 alreadyExists: the same reservation
    assert again == first and outs["count"] == 2
    assert len(fake.reservations) == 1


def test_an_existing_different_reservation_is_a_clear_error(fake, host, inputs):
    host.create(URN, {**inputs, "count": 3})
    fake.now.t += REQUEST_ID_WINDOW_S + 60
    with pytest.raises(HostError) as err:
        host.create(URN, inputs)
    text = err.value.details
    assert "ReservationConflict" in text and "already exists and is not the reservation" in text
    assert "count: declared 2, existing 3" in text
    assert fake.reservations[KEY]["specificReservation"]["count"] == "3"   # left alone


@pytest.mark.parametrize("http", [None, (503, "SERVICE UNAVAILABLE")])
def test_an_operation_that_ends_with_an_error_list_fails(fake, host, inputs, http):
    """With no httpErrorStatusCode, ExtendedOperation.result() returns normally: the provider
    reads the error list itself."""
    fake.fail_next_insert = {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED",
                                         "message": "not enough resources in us-central1-c"}],
                             "http": http}
    fake.polls_until_done = 2                  # fails after a poll, not in the insert's answer
    with pytest.raises(HostError, match="ZONE_RESOURCE_POOL_EXHAUSTED|SERVICE UNAVAILABLE"):
        host.create(URN, inputs)
    assert not fake.reservations


def test_a_replayed_failure_is_not_the_answer_to_a_new_attempt(fake, host, inputs):
    fake.fail_next_insert = {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED",
                                         "message": "not enough resources"}], "http": None}
    with pytest.raises(HostError, match="ZONE_RESOURCE_POOL_EXHAUSTED"):
        host.create(URN, inputs)
    # ten minutes later, capacity is back: the same request id would replay the failure
    fake.now.t += 600
    id_, _ = host.create(URN, inputs)
    assert KEY in fake.reservations and id_.endswith(KEY[2])


def test_a_replayed_success_of_a_reservation_deleted_since_creates_it_again(fake, host, inputs):
    host.create(URN, inputs)
    fake.reservations.clear()                  # deleted outside Pulumi, refresh dropped it
    host.create(URN, inputs)
    assert KEY in fake.reservations


# ---- the fake is as strict as the API ----------------------------------------------------------
def test_the_fake_refuses_what_the_api_refuses(fake):
    code, out = fake.handle("POST", "/compute/v1/projects/acme-ml/zones/us-central1-c/"
                                    "reservations", res.reservation_body(PROPS),
                            {"requestId": ["00000000-0000-0000-0000-000000000000"]})
    assert code == 400 and "zero UUID" in out["error"]["message"]
    code, out = fake.handle("POST", "/compute/v1/projects/acme-ml/zones/us-central1-c/"
                                    "reservations", {**res.reservation_body(PROPS),
                                                     "name": "Bad_Name"})
    assert code == 400 and "resource.name" in out["error"]["message"]
    body = res.reservation_body({**PROPS, "zone": "europe-west4-b"})
    code, out = fake.handle("POST", "/compute/v1/projects/acme-ml/zones/europe-west4-b/"
                                    "reservations", body)
    assert code == 400 and "Resource policy must be in region" in out["error"]["message"]
    code, _ = fake.handle("POST", "/compute/v1/projects/acme-ml/zones/us-central1-c/"
                                  "reservations", res.reservation_body(PROPS))
    assert code == 200
    code, out = fake.handle("POST", "/compute/v1/projects/acme-ml/zones/us-central1-c/"
                                    "reservations", res.reservation_body(PROPS))
    assert code == 409 and out["error"]["errors"][0]["reason"] == "alreadyExists"


# ---- pure parts ---------------------------------------------------------------------------------
def test_reservation_body_carries_the_placement_policy():
    body = res.reservation_body({**PROPS, "accelerators": [{"type": "nvidia-tesla-t4",
                                                            "count": 1}]})
    assert body["resourcePolicies"] == {"policy": POLICY}
    assert body["specificReservationRequired"] is True
    assert body["specificReservation"] == {"count": "2", "instanceProperties": {
        "machineType": "a3-highgpu-8g",
        "guestAccelerators": [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 1}]}}


def test_request_ids_are_stable_uuids_of_what_is_asked():
    a = res.request_id("insert", "p", "z", res.reservation_body(PROPS))
    assert a == res.request_id("insert", "p", "z", res.reservation_body(PROPS))
    assert a != res.request_id("insert", "p", "z", res.reservation_body({**PROPS, "count": 3}))
    assert uuid.UUID(a).int != 0


def test_differences_name_each_field_that_differs():
    body = res.reservation_body(PROPS)
    live = res.reservation_body({**PROPS, "count": 3, "machine_type": "a3-megagpu-8g"})
    live["specificReservation"]["instanceProperties"]["machineType"] = \
        "https://www.googleapis.com/compute/v1/projects/acme-ml/zones/us-central1-c/" \
        "machineTypes/a3-megagpu-8g"
    assert res.differences(body, body) == []
    assert res.differences(body, live) == [
        "machineType: declared 'a3-highgpu-8g', existing 'a3-megagpu-8g'",
        "count: declared 2, existing 3"]
