"""Pulumi state written before the `gpulease` package still works (issue 31 item 1).

Until 0.2.0 the import package was ``infra``; Pulumi keeps a dynamic resource's provider in the
stack's state as a pickle naming its class by module path, so every GCE reservation deployed
before holds ``infra.clouds.gcp.reservation.ReservationProvider`` (tests/data/legacy_state/ has
two such pickles, made by the code of main 6863268). `pulumi refresh`, `destroy` and the next
`up` unpickle it from the state in the dynamic-provider host: these tests drive that pickle
through Pulumi's own host code - in-process (``gpulease.planner.dynhost``) and as the separate
process the engine starts - for read, diff and delete against the local Compute fake. The alias
that makes the old name import is ``infra/clouds/gcp/reservation.py`` (drop it in 0.3.0).
"""
from __future__ import annotations

import base64
import pickle
from pathlib import Path

import dill
import pytest
from pulumi.dynamic.dynamic import serialize_provider
from pulumi.runtime.proto import provider_pb2

from gpulease.clouds.gcp import reservation as res
from gpulease.planner.dynhost import DynamicHost, from_struct, to_struct
from tests.fakes.gcp_compute_reservations import FakeReservations
from tests.test_dynamic_host_process import host_process  # noqa: F401 (fixture)
from tests.test_gcp_reservation import KEY, PROPS, URN
from tests.timeouts import HANG_S

DATA = Path(__file__).parent / "data" / "legacy_state"
PLACEHOLDER = b"127.0.0.1:00000"


def legacy_provider(endpoint: str) -> str:
    """The pre-0.2.0 pickle with the fake's address written over its placeholder (same length:
    the pickle stores the string's length in front of it)."""
    raw = base64.b64decode((DATA / "reservation_provider_pre_gpulease.b64").read_text())
    assert raw.count(PLACEHOLDER) == 1 and b"infra.clouds.gcp.reservation" in raw
    host, port = endpoint.rsplit(":", 1)
    address = f"{host}:{int(port):05d}".encode()
    assert len(address) == len(PLACEHOLDER), address
    return base64.b64encode(raw.replace(PLACEHOLDER, address)).decode()


@pytest.fixture
def fake():
    f = FakeReservations()
    f.endpoint = f.start()
    yield f
    f.stop()


@pytest.fixture
def state(fake):
    """A reservation as an earlier `pulumi up` left it: created in the (fake) cloud by today's
    provider, with the OLD provider pickle in its state's inputs and outputs."""
    with DynamicHost() as host:
        now = serialize_provider(res.ReservationProvider(endpoint=fake.endpoint, poll_s=0.005,
                                                         retry_s=0.005))
        id_, outs = host.create(URN, {**PROPS, "__provider": now})
    old = legacy_provider(fake.endpoint)
    return id_, {**outs, "__provider": old}, {**PROPS, "__provider": old}


def test_the_pickles_name_the_old_module_and_load_todays_class():
    for name in ("reservation_provider_pre_gpulease.b64",
                 "reservation_provider_deployed_pre_gpulease.b64"):
        raw = base64.b64decode((DATA / name).read_text())
        assert b"infra.clouds.gcp.reservation" in raw and b"gpulease" not in raw
        provider = dill.loads(raw)
        assert type(provider) is res.ReservationProvider   # the alias answers today's class
    # what `pulumi up` writes from now on names the new module: no alias needed for it
    fresh = base64.b64decode(serialize_provider(res.ReservationProvider()))
    assert b"gpulease.clouds.gcp.reservation" in fresh and b"infra." not in fresh
    assert pickle.loads(fresh).endpoint is None


def test_refresh_diff_and_destroy_of_old_state_through_the_host(fake, state):
    id_, outs, inputs = state
    with DynamicHost() as host:
        read = host.read(URN, id_, outs, inputs)                   # `pulumi refresh`
        assert read.id == id_ and read.outputs["count"] == 2
        # the next `pulumi up` (unchanged program): the new inputs carry today's pickle, the
        # state the old one; the host diffs with the new one, the old one must not break it
        news = host.check(URN, inputs, {**PROPS, "__provider": serialize_provider(
            res.ReservationProvider(endpoint=fake.endpoint, poll_s=0.005))}).inputs
        assert not host.diff(URN, id_, read.outputs, news, old_inputs=inputs).changes
        # a diff the old pickle answers itself (the engine uses the olds' provider when the
        # new one is unknown): a changed count is an update, not a replacement
        d = host.diff(URN, id_, outs, {**inputs, "count": 4}, old_inputs=inputs)
        assert d.changes and d.replaces == []
        host.delete(URN, id_, outs)                                 # `pulumi destroy`
    assert KEY not in fake.reservations


def test_the_engines_host_process_reads_and_deletes_old_state(fake, state, host_process):
    """As the engine starts it: ``python -m pulumi.dynamic`` in a fresh interpreter, outside the
    repository (the installed package and its alias provide the old module path; the process
    is tests/test_dynamic_host_process.py's)."""
    id_, outs, inputs = state
    stub = host_process
    stub.Configure(provider_pb2.ConfigureRequest(args=to_struct({})))
    read = stub.Read(provider_pb2.ReadRequest(id=id_, urn=URN, properties=to_struct(outs),
                                              inputs=to_struct(inputs)), timeout=HANG_S)
    assert read.id == id_ and from_struct(read.properties)["count"] == 2
    stub.Delete(provider_pb2.DeleteRequest(id=id_, urn=URN, properties=to_struct(outs),
                                           old_inputs=to_struct(inputs)), timeout=HANG_S)
    assert KEY not in fake.reservations
