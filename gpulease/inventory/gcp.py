"""GCP: what the project already paid for, read with google-cloud-compute into inventory holdings.

All regions and zones of the project, through the aggregated lists (one paged listing each):

- ``regionCommitments.aggregatedList``: committed use discounts (kind ``gce-commitment``) -
  status, plan (``TWELVE_MONTH`` / ``THIRTY_SIX_MONTH``), start and end, commitment type (e.g.
  ``ACCELERATOR_OPTIMIZED_A3``, ``Holding.instance_family``), the ``ACCELERATOR`` resources (type
  and amount: ``accelerator_type``, ``accelerators``), vCPU and memory amounts and the attached
  reservations in ``detail``. Cancelled commitments are left out; an expired one is kept for
  :data:`RECENT_DAYS`.
- ``reservations.aggregatedList``: zonal reservations (``gce-reservation``) - machine type,
  ``specificReservation.count`` (``instances``) and ``inUseCount`` (``used_instances``),
  guest accelerators (type, count per VM times the count), the commitment it belongs to, its
  ``deleteAtTime`` as the end.
- ``futureReservations.aggregatedList``: future reservations, calendar mode included
  (``gce-future-reservation``) - ``timeWindow`` start and end (or start plus duration),
  ``specificSkuProperties.totalCount``, ``status.procurementStatus`` as the state; cancelled,
  declined and failed requests are left out.

Pages are asked one by one (``maxResults`` :data:`PAGE_SIZE`) and each is retried alone on 429
and 5xx with the one retry policy (``gpulease.retry``; google-api-core's own retries are off).
A scope the API reports as unreachable makes the read fail: an inventory that silently misses a
region would make the policy buy twice. Every SDK error becomes a CloudError with its HTTP
status; a 403 names the IAM permission refused.
"""
from __future__ import annotations

import datetime as dt
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Optional

from gpulease.clock import format_utc
from gpulease.errors import CloudError
from gpulease.inventory.model import Holding, KINDS, Source
from gpulease.retry import Backoff

CLOUD = "gcp"
COMMITMENT, RESERVATION, FUTURE = "gce-commitment", "gce-reservation", "gce-future-reservation"
#: an ended item (expired commitment, future reservation whose window closed) is kept this many
#: days after its end, then left out.
RECENT_DAYS = 90
#: aggregatedList maxResults: "Acceptable values are 0 to 500, inclusive. (Default: 500)"
#: (Compute Engine API reference). Tests shrink it.
PAGE_SIZE = 500
#: per-request timeout (s); no SDK-level retry.
TIMEOUT_S = 30.0
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
#: states that never held capacity (Commitment.Status, FutureReservationStatus.ProcurementStatus).
COMMITMENT_DROPPED = frozenset({"CANCELLED"})
FUTURE_DROPPED = frozenset({"CANCELLED", "DECLINED", "FAILED"})
#: Commitment.plan -> months.
PLAN_MONTHS = {"TWELVE_MONTH": 12, "THIRTY_SIX_MONTH": 36}
#: the IAM permission behind each listing (Compute Engine IAM permissions).
IAM_PERMISSIONS = {"regionCommitments.aggregatedList": "compute.commitments.list",
                   "reservations.aggregatedList": "compute.reservations.list",
                   "futureReservations.aggregatedList": "compute.futureReservations.list"}
ENDPOINT_ENV = "GPULEASE_GCP_ENDPOINT"
#: what the inventory reads here (credentials messages).
NEEDS = "inventory reads committed use discounts, reservations and future reservations"
#: what this reader calls (``Source.reads``).
READS = tuple(f"compute.{op}" for op in IAM_PERMISSIONS)


@dataclass
class Clients:
    commitments: Any
    reservations: Any
    future_reservations: Any
    backoff: Backoff = field(default_factory=Backoff)


def make_clients(endpoint: Optional[str] = None, *,
                 sleep: Callable[[float], None] = time.sleep) -> Clients:
    """Application Default Credentials, or a local endpoint (``GPULEASE_GCP_ENDPOINT``,
    anonymous: emulators and the tests' fake)."""
    import importlib

    from google.cloud import compute_v1

    endpoint = endpoint or os.environ.get(ENDPOINT_ENV)
    kinds = {"commitments": (compute_v1.RegionCommitmentsClient,
                             "RegionCommitmentsRestTransport"),
             "reservations": (compute_v1.ReservationsClient, "ReservationsRestTransport"),
             "future_reservations": (compute_v1.FutureReservationsClient,
                                     "FutureReservationsRestTransport")}
    out = {}
    for key, (cls, tname) in kinds.items():
        if endpoint:
            from google.auth.credentials import AnonymousCredentials

            scheme, _, host = endpoint.partition("://")
            if not host:
                scheme, host = "http", endpoint
            mod = importlib.import_module(cls.__module__.rsplit(".", 1)[0] + ".transports.rest")
            out[key] = cls(transport=getattr(mod, tname)(
                host=host, url_scheme=scheme, credentials=AnonymousCredentials()))
        else:
            out[key] = cls()
    return Clients(**out, backoff=Backoff(sleep=sleep))


# ---- the one boundary to the SDK -----------------------------------------------------------
def _status(exc: BaseException) -> Optional[int]:
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return code
    resp = getattr(exc, "response", None)
    status = getattr(resp, "status_code", None)
    return int(status) if status else None


def _retryable(exc: BaseException) -> bool:
    import requests
    from google.protobuf.json_format import ParseError

    if isinstance(exc, (ParseError, requests.ConnectionError, requests.Timeout)):
        return True
    return (_status(exc) or 0) in _RETRY_STATUS


def _call(clients: Clients, op: str, where: str, fn: Callable[[], Any]) -> Any:
    from google.api_core.exceptions import GoogleAPICallError
    from google.protobuf.json_format import ParseError
    import requests

    backoff = clients.backoff
    try:
        return backoff.call(fn, retryable=_retryable)
    except (GoogleAPICallError, ParseError, requests.RequestException) as exc:
        status = _status(exc)
        text = f"{where}: " + " ".join(str(exc).split())[:300]
        if status == 403:
            text += (f" (the credentials in use lack {IAM_PERMISSIONS.get(op, op)}: grant it, "
                     "see docs/inventory.md \"Permissions\")")
        elif _retryable(exc):
            text += f" (still failing after {backoff.attempts} attempts)"
        raise CloudError(CLOUD, op, text, retryable=_retryable(exc), status=status) from None


def _aggregated(clients: Clients, client: Any, op: str, project: str,
                attr: str) -> Iterator[tuple[str, Any]]:
    """(scope, item) of every item of an aggregated list, page by page."""
    where = f"{project} compute.{op}"
    token = ""
    seen: set = set()
    while True:
        req = {"project": project, "max_results": PAGE_SIZE}
        if token:
            req["page_token"] = token

        def page(req=req):
            return next(iter(client.aggregated_list(request=req, retry=None,
                                                    timeout=TIMEOUT_S).pages))
        resp = _call(clients, op, where, page)
        for scope, scoped in resp.items.items():
            warning = getattr(scoped, "warning", None)
            code = getattr(warning, "code", "") if warning else ""
            if code and code != "NO_RESULTS_ON_PAGE":
                raise CloudError(CLOUD, op, f"{where}: {scope} answered {code} "
                                 f"({getattr(warning, 'message', '')}): the inventory would "
                                 "miss it; try again later", retryable=True)
            for item in getattr(scoped, attr):
                yield scope, item
        for scope in getattr(resp, "unreachables", None) or ():
            raise CloudError(CLOUD, op, f"{where}: {scope} is unreachable: the inventory "
                             "would miss it; try again later", retryable=True)
        token = resp.next_page_token
        if not token:
            return
        if token in seen:
            raise CloudError(CLOUD, op, f"{where}: the same nextPageToken was answered twice "
                             "(the listing would never end)")
        seen.add(token)


# ---- conversions -----------------------------------------------------------------------------
def _tail(url: str) -> str:
    return str(url or "").rstrip("/").rsplit("/", 1)[-1]


def _parse(text: str) -> Optional[dt.datetime]:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _time(text: str, where: str, op: str) -> Optional[str]:
    try:
        value = _parse(text)
    except ValueError:
        raise CloudError(CLOUD, op, f"{where}: {text!r} is not an RFC 3339 time") from None
    return format_utc(value) if value else None


def _recent(end: Optional[str], now: dt.datetime) -> bool:
    return end is None or _parse(end) > now - dt.timedelta(days=RECENT_DAYS)


def _region_of(scope: str, zone: str = "") -> str:
    """"regions/us-central1" -> us-central1; a zone's region (us-central1-a -> us-central1)."""
    if zone:
        return zone.rsplit("-", 1)[0]
    return _tail(scope)


def _holding(**kw: Any) -> Holding:
    return Holding(cloud=CLOUD, model=KINDS[kw["kind"]][1], **kw)


def commitments(clients: Clients, project: str, now: dt.datetime) -> list[Holding]:
    op = "regionCommitments.aggregatedList"
    out = []
    for scope, c in _aggregated(clients, clients.commitments, op, project, "commitments"):
        status = str(c.status or "")
        if status in COMMITMENT_DROPPED:
            continue
        where = f"{project} {scope} commitment {c.name}"
        end = _time(c.end_timestamp, where, op)
        if status == "EXPIRED" and not _recent(end, now):
            continue
        acc_type, accs, detail = None, 0, {}
        for r in c.resources:
            if r.type_ == "ACCELERATOR":
                acc_type = _tail(r.accelerator_type) or acc_type
                accs += int(r.amount)
            elif r.type_ == "VCPU":
                detail["vcpus"] = str(int(r.amount))
            elif r.type_ == "MEMORY":
                detail["memory_mb"] = str(int(r.amount))
        if c.plan:
            detail["plan"] = str(c.plan)
        if c.category:
            detail["category"] = str(c.category)
        if c.auto_renew:
            detail["auto_renew"] = "true"
        names = [x.name for x in c.reservations if x.name]
        if names:
            detail["reservations"] = ",".join(names)
        out.append(_holding(
            id=c.name, kind=COMMITMENT, scope=project,
            region=_tail(c.region) or _region_of(scope), instance_family=c.type_ or None,
            accelerator_type=acc_type, accelerators=accs,
            start=_time(c.start_timestamp, where, op), end=end, state=status.lower(),
            term_months=PLAN_MONTHS.get(str(c.plan or "")), detail=detail))
    return out


def _accelerators(props: Any) -> tuple[Optional[str], int]:
    """(type, per VM) of an instance-properties message's guest accelerators."""
    acc_type, per_vm = None, 0
    for g in getattr(props, "guest_accelerators", None) or ():
        acc_type = _tail(g.accelerator_type) or acc_type
        per_vm += int(g.accelerator_count)
    return acc_type, per_vm


def reservations(clients: Clients, project: str, now: dt.datetime) -> list[Holding]:
    op = "reservations.aggregatedList"
    out = []
    for scope, r in _aggregated(clients, clients.reservations, op, project, "reservations"):
        zone = _tail(r.zone) or _tail(scope)
        where = f"{project} {zone} reservation {r.name}"
        sku = r.specific_reservation
        count = int(sku.count) if sku else 0
        props = sku.instance_properties if sku else None
        acc_type, per_vm = _accelerators(props)
        detail = {}
        if r.commitment:
            detail["commitment_name"] = _tail(r.commitment)
        if r.specific_reservation_required:
            detail["specific_reservation_required"] = "true"
        if sku and sku.source_instance_template:
            detail["source_instance_template"] = _tail(sku.source_instance_template)
        out.append(_holding(
            id=r.name, kind=RESERVATION, scope=project, region=_region_of("", zone), zone=zone,
            instance_type=(props.machine_type or None) if props else None, instances=count,
            used_instances=int(sku.in_use_count) if sku else None, accelerator_type=acc_type,
            accelerators=per_vm * count, end=_time(r.delete_at_time, where, op),
            state=str(r.status or "").lower(), detail=detail))
    return out


def future_reservations(clients: Clients, project: str, now: dt.datetime) -> list[Holding]:
    op = "futureReservations.aggregatedList"
    out = []
    for scope, f in _aggregated(clients, clients.future_reservations, op, project,
                                "future_reservations"):
        status = str(f.status.procurement_status or "") if f.status else ""
        if status in FUTURE_DROPPED:
            continue
        zone = _tail(f.zone) or _tail(scope)
        where = f"{project} {zone} future reservation {f.name}"
        window = f.time_window
        start = _time(window.start_time, where, op) if window else None
        end = _time(window.end_time, where, op) if window else None
        if end is None and start and window.duration and window.duration.seconds:
            end = format_utc(_parse(start) + dt.timedelta(seconds=int(window.duration.seconds)))
        if not _recent(end, now):
            continue
        sku = f.specific_sku_properties
        count = int(sku.total_count) if sku else 0
        props = sku.instance_properties if sku else None
        acc_type, per_vm = _accelerators(props)
        detail = {}
        if f.reservation_mode:
            detail["reservation_mode"] = str(f.reservation_mode)
        if f.planning_status:
            detail["planning_status"] = str(f.planning_status)
        if f.reservation_name:
            detail["reservation_name"] = f.reservation_name
        if f.status and f.status.fulfilled_count:
            detail["fulfilled_count"] = str(int(f.status.fulfilled_count))
        out.append(_holding(
            id=f.name, kind=FUTURE, scope=project, region=_region_of("", zone), zone=zone,
            instance_type=(props.machine_type or None) if props else None, instances=count,
            accelerator_type=acc_type, accelerators=per_vm * count, start=start, end=end,
            state=status.lower(), detail=detail))
    return out


def collect(scope: str, regions: Iterable[str] = (), *,
            progress: Callable[[str], None] = lambda m: None,
            instance_types: Iterable[str] = (), clients: Optional[Clients] = None,
            now: Optional[dt.datetime] = None) -> tuple[list[Holding], Source]:
    """Every holding of project ``scope`` in all its regions (``regions`` is recorded, not a
    filter: a commitment anywhere in the project is the project's). Raises CloudError when any
    call fails (nothing partial)."""
    if not scope:
        raise ValueError("a GCP inventory needs the project (gpulease:clouds.gcp.project)")
    clients = clients or make_clients()
    now = now or dt.datetime.now(dt.timezone.utc)
    holdings: list[Holding] = []
    progress(f"GCP {scope}: committed use discounts (all regions)")
    holdings += commitments(clients, scope, now)
    progress(f"GCP {scope}: reservations (all zones)")
    holdings += reservations(clients, scope, now)
    progress(f"GCP {scope}: future reservations (all zones)")
    holdings += future_reservations(clients, scope, now)
    source = Source(cloud=CLOUD, scope=scope, regions=sorted(set(regions)),
                    read_at=format_utc(now), reads=list(READS))
    return holdings, source
