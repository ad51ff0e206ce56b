"""The Compute Engine fake (tests/fakes/gcp_compute_monitoring.py) with what a project already
paid for: ``regionCommitments.aggregatedList``, ``reservations.aggregatedList`` and
``futureReservations.aggregatedList``, for `gpulease inventory`.

Written from the Compute Engine v1 discovery document (the methods' parameters, the
``CommitmentAggregatedList`` / ``ReservationAggregatedList`` /
``FutureReservationsAggregatedListResponse`` shapes, int64 fields as JSON strings) and the
compute_v1 types:

- GET ``/compute/v1/projects/P/aggregated/{commitments,reservations,futureReservations}``;
  query parameters are the method's (filter, includeAllScopes, maxResults, orderBy, pageToken,
  returnPartialSuccess, serviceProjectNumber, plus the transport's ``$alt``); any other is a 400
  as the API answers an unknown name; ``maxResults`` above 500 or below 0 is a 400 ("Acceptable
  values are 0 to 500, inclusive"); a ``pageToken`` the fake did not issue is a 400.
- items are keyed by scope (``regions/R`` for commitments, ``zones/Z`` for the others); a page
  holds at most ``maxResults`` items over all scopes; a scope without items on a page carries
  the ``NO_RESULTS_ON_PAGE`` warning as the real list does (:data:`EMPTY_REGION`,
  :data:`EMPTY_ZONE`); ``unreachable`` scopes carry an ``UNREACHABLE`` warning.
- enum values are checked when a test adds an item (Commitment.Status / Plan / Type,
  ResourceCommitment.Type, Reservation.Status, FutureReservationStatus.ProcurementStatus and
  FutureReservation.ReservationMode, from compute_v1), so a fixture cannot hold what the API
  never answers.
- faults per operation as the base fake injects them (``fake.faults["commitments"] = [429]``);
  a 403 answers as Compute does when a permission is missing.
"""
from __future__ import annotations

import base64
import datetime as dt
from dataclasses import dataclass, field
from typing import Optional

from tests.fakes.gcp_compute_monitoring import EMPTY_ZONE, FakeGcp

API = "https://www.googleapis.com/compute/v1"
EMPTY_REGION = "europe-west9"
MAX_RESULTS = 500
QUERY = frozenset({"filter", "includeAllScopes", "maxResults", "orderBy", "pageToken",
                   "returnPartialSuccess", "serviceProjectNumber", "$alt"})
#: route -> (items key, response kind, scope kind, IAM permission)
LISTS = {"commitments": ("commitments", "compute#commitmentAggregatedList", "regions",
                         "compute.commitments.list"),
         "reservations": ("reservations", "compute#reservationAggregatedList", "zones",
                          "compute.reservations.list"),
         "futureReservations": ("futureReservations",
                                "compute#futureReservationsAggregatedListResponse", "zones",
                                "compute.futureReservations.list")}


def _enum(cls) -> frozenset:
    return frozenset(e.name for e in cls if not e.name.startswith("UNDEFINED_"))


def _enums() -> dict:
    from google.cloud import compute_v1 as c

    return {"commitment.status": _enum(c.Commitment.Status),
            "commitment.plan": _enum(c.Commitment.Plan),
            "commitment.type": _enum(c.Commitment.Type),
            "resource.type": _enum(c.ResourceCommitment.Type),
            "reservation.status": _enum(c.Reservation.Status),
            "future.procurement": _enum(c.FutureReservationStatus.ProcurementStatus),
            "future.mode": _enum(c.FutureReservation.ReservationMode)}


def rfc3339(t: dt.datetime) -> str:
    """As Compute writes times: offset form with milliseconds (``-08:00`` in its examples)."""
    return t.isoformat(timespec="milliseconds")


@dataclass
class FakeGcpInventory(FakeGcp):
    commitments: dict = field(default_factory=dict)     # (region, name) -> JSON
    future_reservations: dict = field(default_factory=dict)   # (zone, name) -> JSON
    #: scopes answered with an UNREACHABLE warning ("regions/R" / "zones/Z")
    unreachable: list = field(default_factory=list)
    _enum_cache: Optional[dict] = None

    def _check(self, key: str, value: str) -> None:
        if self._enum_cache is None:
            self._enum_cache = _enums()
        if value not in self._enum_cache[key]:
            raise ValueError(f"{value!r} is no {key} the Compute API answers "
                             f"({sorted(self._enum_cache[key])})")

    # ---- building state ---------------------------------------------------------------------
    def add_commitment(self, region: str, name: str, *, status: str, plan: str, type_: str,
                       start: dt.datetime, accelerator: Optional[tuple[str, int]] = None,
                       vcpus: int = 0, memory_mb: int = 0,
                       reservations: tuple = ()) -> None:
        self._check("commitment.status", status)
        self._check("commitment.plan", plan)
        self._check("commitment.type", type_)
        months = {"TWELVE_MONTH": 12, "THIRTY_SIX_MONTH": 36}[plan]
        end = start + dt.timedelta(days=365 * months // 12)
        resources = []
        if vcpus:
            resources.append({"type": "VCPU", "amount": str(vcpus)})
        if memory_mb:
            resources.append({"type": "MEMORY", "amount": str(memory_mb)})
        if accelerator:
            resources.append({"type": "ACCELERATOR", "amount": str(accelerator[1]),
                              "acceleratorType": f"{API}/projects/{self.project}/zones/"
                                                 f"{region}-a/acceleratorTypes/{accelerator[0]}"})
        for r in resources:
            self._check("resource.type", r["type"])
        self.commitments[(region, name)] = {
            "kind": "compute#commitment", "id": str(abs(hash((region, name))) % 10**18),
            "name": name, "region": f"{API}/projects/{self.project}/regions/{region}",
            "selfLink": f"{API}/projects/{self.project}/regions/{region}/commitments/{name}",
            "status": status, "plan": plan, "type": type_, "category": "MACHINE",
            "startTimestamp": rfc3339(start), "endTimestamp": rfc3339(end),
            "creationTimestamp": rfc3339(start), "resources": resources,
            "reservations": [{"name": n, "zone": f"{API}/projects/{self.project}/zones/"
                                                 f"{region}-a"} for n in reservations]}

    def add_gpu_reservation(self, zone: str, name: str, machine_type: str, count: int, *,
                            in_use: int, accelerator: Optional[tuple[str, int]] = None,
                            status: str = "READY", commitment: str = "",
                            delete_at: Optional[dt.datetime] = None) -> None:
        self._check("reservation.status", status)
        props: dict = {"machineType": machine_type}
        if accelerator:
            props["guestAccelerators"] = [{"acceleratorType": accelerator[0],
                                           "acceleratorCount": accelerator[1]}]
        region = zone.rsplit("-", 1)[0]
        r = {"kind": "compute#reservation", "name": name, "status": status,
             "zone": f"{API}/projects/{self.project}/zones/{zone}",
             "specificReservation": {"count": str(count), "inUseCount": str(in_use),
                                     "instanceProperties": props},
             "specificReservationRequired": True}
        if commitment:
            r["commitment"] = f"{API}/projects/{self.project}/regions/{region}/commitments/" \
                              f"{commitment}"
        if delete_at:
            r["deleteAtTime"] = rfc3339(delete_at)
        self.reservations[(zone, name)] = r

    def add_future_reservation(self, zone: str, name: str, machine_type: str, count: int, *,
                               start: dt.datetime, end: Optional[dt.datetime] = None,
                               duration_s: Optional[int] = None, status: str = "APPROVED",
                               mode: str = "CALENDAR",
                               accelerator: Optional[tuple[str, int]] = None) -> None:
        self._check("future.procurement", status)
        self._check("future.mode", mode)
        props: dict = {"machineType": machine_type}
        if accelerator:
            props["guestAccelerators"] = [{"acceleratorType": accelerator[0],
                                           "acceleratorCount": accelerator[1]}]
        window = {"startTime": rfc3339(start)}
        if end is not None:
            window["endTime"] = rfc3339(end)
        else:
            window["duration"] = {"seconds": str(duration_s)}
        self.future_reservations[(zone, name)] = {
            "kind": "compute#futureReservation", "name": name,
            "zone": f"{API}/projects/{self.project}/zones/{zone}", "timeWindow": window,
            "specificSkuProperties": {"totalCount": str(count), "instanceProperties": props},
            "status": {"procurementStatus": status}, "reservationMode": mode,
            "planningStatus": "SUBMITTED"}

    # ---- HTTP -------------------------------------------------------------------------------
    def route(self, method: str, path: str, q: dict, body: dict) -> tuple[int, dict]:
        prefix = f"/compute/v1/projects/{self.project}/aggregated/"
        if method == "GET" and path.startswith(prefix) and path[len(prefix):] in LISTS:
            return self._inventory_list(path[len(prefix):], q)
        return super().route(method, path, q, body)

    def _inventory_list(self, name: str, q: dict) -> tuple[int, dict]:
        key, kind, scope_kind, permission = LISTS[name]
        queue = self.faults.get(name)
        if queue and queue[0] == 403:
            queue.pop(0)
            msg = f"Required '{permission}' permission for 'projects/{self.project}'"
            return 403, {"error": {"code": 403, "message": msg, "errors": [
                {"domain": "global", "reason": "forbidden", "message": msg}]}}
        fault = self._fault(name)
        if fault:
            return fault
        for param in q:
            if param not in QUERY:
                return self._invalid(f"Invalid JSON payload received. Unknown name "
                                     f"\"{param}\": Cannot bind query parameter.")
        try:
            size = int(q.get("maxResults", MAX_RESULTS))
        except ValueError:
            return self._invalid(f"Invalid value for field 'maxResults': '{q['maxResults']}'")
        if not 0 <= size <= MAX_RESULTS:
            return self._invalid(f"Invalid value for field 'maxResults': '{size}'. Must be "
                                 f"less than or equal to {MAX_RESULTS}")
        store = {"commitments": self.commitments, "reservations": self.reservations,
                 "futureReservations": self.future_reservations}[name]
        rows = sorted(store.items())
        start = 0
        token = q.get("pageToken")
        if token:
            try:
                tag, n = base64.b64decode(token).decode().split(":", 1)
                start = int(n)
                assert tag == name
            except (ValueError, AssertionError):
                return self._invalid("Invalid value for field 'pageToken'")
        size = size or MAX_RESULTS
        page = rows[start:start + size]
        items: dict = {}
        for (where, _), item in page:
            items.setdefault(f"{scope_kind}/{where}", {key: []})[key].append(item)
        empty = EMPTY_REGION if scope_kind == "regions" else EMPTY_ZONE
        for scope in (f"{scope_kind}/{empty}",):
            items.setdefault(scope, {"warning": {
                "code": "NO_RESULTS_ON_PAGE", "message": f"There are no results for scope "
                f"'{scope}' on this page.", "data": [{"key": "scope", "value": scope}]}})
        for scope in self.unreachable:
            if scope.startswith(scope_kind):
                items[scope] = {"warning": {"code": "UNREACHABLE", "message": f"Scope "
                                            f"'{scope}' is unreachable.", "data": [
                                                {"key": "scope", "value": scope}]}}
        out = {"kind": kind, "id": f"projects/{self.project}/aggregated/{name}",
               "items": items,
               "selfLink": f"{API}/projects/{self.project}/aggregated/{name}"}
        if start + size < len(rows):
            out["nextPageToken"] = base64.b64encode(f"{name}:{start + size}".encode()).decode()
        return 200, out

    @staticmethod
    def _invalid(message: str) -> tuple[int, dict]:
        return 400, {"error": {"code": 400, "message": message, "errors": [
            {"domain": "global", "reason": "invalid", "message": message}]}}
