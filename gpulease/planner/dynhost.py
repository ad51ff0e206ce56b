"""Pulumi's own dynamic-provider host, driven in-process the way the engine drives it.

`pulumi up` runs a Python dynamic provider (``pulumi-python:dynamic/...``, e.g.
:class:`gpulease.clouds.gcp.reservation.GceReservation`) in a separate process started from the
SDK's ``pulumi/dynamic/__main__.py``: a gRPC ``ResourceProvider`` server
(``DynamicResourceProviderServicer``) that unpickles the provider from each request's
``__provider`` property and calls its ``check`` / ``diff`` / ``create`` / ``read`` / ``update``
/ ``delete``. :class:`DynamicHost` loads that very module (without its trailing ``main()``,
which would start the server), and sends the servicer the engine's own request messages
(``pulumi.runtime.proto.provider_pb2``), built as the engine builds them:

- properties are ``google.protobuf.Struct`` values; a value unknown at preview travels as the
  engine's unknown sentinel (:data:`pulumi.runtime.rpc.UNKNOWN`), which the servicer turns into
  ``pulumi.output.Unknown`` for ``check`` and ``diff``;
- ``Check`` gets the old *inputs* (empty on a create) and the new inputs; ``Diff`` the old
  *outputs* (the state), the checked new inputs and the old inputs; ``Read`` (refresh) the old
  outputs and inputs; ``Update`` / ``Delete`` the old outputs;
- each call runs on a worker thread of a 4-thread pool, as the host's gRPC server runs it, so
  the ambient Pulumi settings the servicer configures never leak into the caller.

A call the servicer aborts (a provider exception) raises :class:`HostError` with the
traceback text the engine would print. Nothing here talks to a cloud by itself: ``create`` /
``read`` / ``update`` / ``delete`` call whatever the provider calls (tests point it at fakes);
``gpulease plan`` only ever sends ``Check`` and ``Diff``.
"""
from __future__ import annotations

import ast
import threading
import types
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from google.protobuf import json_format, struct_pb2

PROVIDER_KEY = "__provider"


class HostError(RuntimeError):
    """The host aborted a call (gRPC status and the provider's traceback, as the engine shows)."""

    def __init__(self, method: str, code: Any, details: str):
        self.method, self.code, self.details = method, code, details
        last = (details or "").strip().splitlines()[-1:] or [""]
        super().__init__(f"{method}: {last[0]}")


class _Aborted(Exception):
    pass


class _Context:
    """The part of ``grpc.ServicerContext`` the servicer uses."""

    def __init__(self) -> None:
        self.code: Any = None
        self.details = ""

    def abort(self, code, details):
        self.code, self.details = code, details
        raise _Aborted()

    def set_code(self, code):
        self.code = code

    def set_details(self, details):
        self.details = details


class Unknown:
    """A value unknown at preview (what :func:`to_struct` sends as the engine's sentinel)."""

    _instance: Optional["Unknown"] = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<unknown>"


UNKNOWN = Unknown()


def _sentinel() -> str:
    from pulumi.runtime import rpc

    return rpc.UNKNOWN


def _is_unknown(value: Any) -> bool:
    from pulumi.output import Unknown as SdkUnknown

    return value is UNKNOWN or isinstance(value, SdkUnknown)


def _plain(value: Any, sentinel: str, unknown_marks: tuple) -> Any:
    if _is_unknown(value) or (isinstance(value, str) and value in unknown_marks):
        return sentinel
    if isinstance(value, dict):
        return {str(k): _plain(v, sentinel, unknown_marks) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, sentinel, unknown_marks) for v in value]
    return value


def to_struct(props: Optional[dict], *, unknown_marks: tuple = ()) -> struct_pb2.Struct:
    """Engine-side marshalling of a property map: plain JSON values, unknowns as the sentinel.

    ``unknown_marks``: strings that stand for an unknown in a recorded plan (the mocks'
    ``"[unknown]"``)."""
    s = struct_pb2.Struct()
    s.update(_plain(dict(props or {}), _sentinel(), unknown_marks))
    return s


def _back(value: Any, sentinel: str) -> Any:
    if value == sentinel:
        return UNKNOWN
    if isinstance(value, dict):
        return {k: _back(v, sentinel) for k, v in value.items()}
    if isinstance(value, list):
        return [_back(v, sentinel) for v in value]
    return value


def from_struct(s: Optional[struct_pb2.Struct]) -> dict:
    """Engine-side unmarshalling of a response's property map (sentinel -> :data:`UNKNOWN`)."""
    if s is None:
        return {}
    return _back(json_format.MessageToDict(s), _sentinel())


@dataclass(frozen=True)
class CheckOutcome:
    inputs: dict
    failures: list  # [(property, reason)]


@dataclass(frozen=True)
class DiffOutcome:
    changes: Optional[bool]      # None: the provider could not tell (DIFF_UNKNOWN)
    replaces: list = field(default_factory=list)
    delete_before_replace: bool = False


@dataclass(frozen=True)
class ReadOutcome:
    id: str                      # "" = the resource is gone (the engine drops it)
    outputs: dict
    inputs: Optional[dict]


_MODULE_LOCK = threading.Lock()


def _load_servicer_module() -> types.ModuleType:
    """``pulumi/dynamic/__main__.py`` without its trailing ``main()`` call (which starts a gRPC
    server and blocks), executed as a fresh module: its provider cache is this host's own."""
    import pulumi.dynamic

    path = Path(pulumi.dynamic.__file__).with_name("__main__.py")
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    last = tree.body[-1] if tree.body else None
    if not (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
            and isinstance(last.value.func, ast.Name) and last.value.func.id == "main"):
        raise RuntimeError(f"{path} does not end with main(): this Pulumi SDK's dynamic "
                           "provider host has a layout gpulease does not know")
    tree.body = tree.body[:-1]
    module = types.ModuleType("pulumi.dynamic.__gpulease_host__")
    module.__file__ = str(path)
    with _MODULE_LOCK:
        exec(compile(tree, str(path), "exec"), module.__dict__)  # noqa: S102 - the SDK's code
    return module


class DynamicHost:
    """One dynamic-provider host process, in-process: a servicer and its provider cache."""

    def __init__(self, *, config: Optional[dict] = None):
        from pulumi.runtime.proto import provider_pb2

        self._pb = provider_pb2
        self._module = _load_servicer_module()
        self._servicer = self._module.DynamicResourceProviderServicer()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="pulumi-dynamic-host")
        self._call("Configure", provider_pb2.ConfigureRequest(
            args=to_struct(config or {}), acceptSecrets=True, acceptResources=True))

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> "DynamicHost":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- the wire ---------------------------------------------------------------------------
    def _call(self, method: str, request):
        ctx = _Context()

        def run():
            try:
                return getattr(self._servicer, method)(request, ctx)
            except _Aborted:
                return None

        response = self._pool.submit(run).result()
        if ctx.code is not None and response is None:
            raise HostError(method, ctx.code, ctx.details)
        return response

    # ---- the engine's calls ---------------------------------------------------------------
    def check(self, urn: str, olds: Optional[dict], news: dict, *,
              unknown_marks: tuple = ()) -> CheckOutcome:
        """``Check``: ``olds`` = the old inputs (None/empty on a create)."""
        resp = self._call("Check", self._pb.CheckRequest(
            urn=urn, olds=to_struct(olds, unknown_marks=unknown_marks),
            news=to_struct(news, unknown_marks=unknown_marks), randomSeed=b"gpulease-plan"))
        return CheckOutcome(inputs=from_struct(resp.inputs),
                            failures=[(f.property, f.reason) for f in resp.failures])

    def diff(self, urn: str, id_: str, olds: dict, news: dict, *,
             old_inputs: Optional[dict] = None, ignore_changes: tuple = (),
             unknown_marks: tuple = ()) -> DiffOutcome:
        """``Diff``: ``olds`` = the state's outputs, ``news`` = the checked new inputs."""
        resp = self._call("Diff", self._pb.DiffRequest(
            id=id_, urn=urn, olds=to_struct(olds, unknown_marks=unknown_marks),
            news=to_struct(news, unknown_marks=unknown_marks),
            old_inputs=to_struct(old_inputs if old_inputs is not None else olds,
                                 unknown_marks=unknown_marks),
            ignoreChanges=list(ignore_changes)))
        d = self._pb.DiffResponse
        changes = {d.DIFF_SOME: True, d.DIFF_NONE: False}.get(resp.changes)
        return DiffOutcome(changes=changes, replaces=list(resp.replaces),
                           delete_before_replace=bool(resp.deleteBeforeReplace))

    def create(self, urn: str, inputs: dict, *, timeout: float = 0) -> tuple[str, dict]:
        resp = self._call("Create", self._pb.CreateRequest(
            urn=urn, properties=to_struct(inputs), timeout=timeout, preview=False))
        return resp.id, from_struct(resp.properties)

    def read(self, urn: str, id_: str, outputs: dict,
             inputs: Optional[dict] = None) -> ReadOutcome:
        """``Read`` as `pulumi refresh` sends it: the state's outputs and inputs."""
        resp = self._call("Read", self._pb.ReadRequest(
            id=id_, urn=urn, properties=to_struct(outputs),
            inputs=to_struct(inputs if inputs is not None else outputs)))
        return ReadOutcome(id=resp.id, outputs=from_struct(resp.properties),
                           inputs=from_struct(resp.inputs) if resp.HasField("inputs") else None)

    def update(self, urn: str, id_: str, olds: dict, news: dict, *,
               old_inputs: Optional[dict] = None, timeout: float = 0) -> dict:
        resp = self._call("Update", self._pb.UpdateRequest(
            id=id_, urn=urn, olds=to_struct(olds), news=to_struct(news), timeout=timeout,
            old_inputs=to_struct(old_inputs if old_inputs is not None else olds)))
        return from_struct(resp.properties)

    def delete(self, urn: str, id_: str, outputs: dict, *, timeout: float = 0) -> None:
        self._call("Delete", self._pb.DeleteRequest(
            id=id_, urn=urn, properties=to_struct(outputs), timeout=timeout,
            old_inputs=to_struct(outputs)))


def contains_unknown(value: Any, unknown_marks: tuple = ()) -> bool:
    if _is_unknown(value) or (isinstance(value, str) and value in unknown_marks):
        return True
    if isinstance(value, dict):
        return any(contains_unknown(v, unknown_marks) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(contains_unknown(v, unknown_marks) for v in value)
    return False
