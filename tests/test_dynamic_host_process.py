"""`pulumi up` starts the dynamic-provider host as its own process: the project's virtualenv
python running ``python -u -m pulumi.dynamic`` (the SDK's ``pulumi-resource-pulumi-python``
launcher), a gRPC server that unpickles the provider from ``__provider``. The pickle refers to
``gpulease.clouds.gcp.reservation`` by name, so that module must import in a fresh interpreter
from the install README describes. This test starts that very process, outside the repository
(the installed package, not the working directory, provides ``infra``), and speaks gRPC to it
as the engine does: Check at preview with an unknown policy, Create and Read against the local
Compute fake."""
from __future__ import annotations

import os
import subprocess
import sys

import grpc
import pytest
from pulumi.dynamic.dynamic import serialize_provider
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

from gpulease.clouds.gcp.reservation import ReservationProvider
from gpulease.planner.dynhost import UNKNOWN, from_struct, to_struct
from tests.fakes.gcp_compute_reservations import FakeReservations
from tests.test_gcp_reservation import PROPS, URN
from tests.timeouts import HANG_S


@pytest.fixture
def host_process(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.Popen([sys.executable, "-u", "-m", "pulumi.dynamic", "127.0.0.1:1"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        port = proc.stdout.readline().strip()
        assert port.isdigit(), proc.stderr.read() if proc.poll() is not None else port
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield provider_pb2_grpc.ResourceProviderStub(channel)
    finally:
        proc.terminate()
        proc.wait(timeout=HANG_S)


def test_the_host_process_imports_the_provider_and_runs_it(host_process, tmp_path):
    fake = FakeReservations()
    endpoint = fake.start()
    try:
        provider = serialize_provider(ReservationProvider(endpoint=endpoint, poll_s=0.005))
        inputs = {**PROPS, "__provider": provider}
        host_process.Configure(provider_pb2.ConfigureRequest(args=to_struct({})))
        preview = host_process.Check(provider_pb2.CheckRequest(
            urn=URN, olds=to_struct({}), news=to_struct({**inputs,
                                                         "placement_policy": UNKNOWN})),
            timeout=HANG_S)
        assert list(preview.failures) == []
        assert from_struct(preview.inputs)["placement_policy"] is UNKNOWN
        bad = host_process.Check(provider_pb2.CheckRequest(
            urn=URN, olds=to_struct({}), news=to_struct({**inputs, "count": "two"})), timeout=HANG_S)
        assert [f.property for f in bad.failures] == ["count"]
        created = host_process.Create(provider_pb2.CreateRequest(
            urn=URN, properties=to_struct(inputs)), timeout=HANG_S)
        assert created.id.endswith("/reservations/gpulease-prod-pretrain-reserved")
        assert len(fake.reservations) == 1
        fake.reservations.clear()
        gone = host_process.Read(provider_pb2.ReadRequest(
            id=created.id, urn=URN, properties=created.properties,
            inputs=to_struct(inputs)), timeout=HANG_S)
        assert gone.id == ""
    finally:
        fake.stop()
