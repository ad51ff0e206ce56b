"""What an AWS account already paid for, answered as AWS answers it, for `gpulease inventory`.

moto 5.2 implements neither EC2 ``DescribeReservedInstances`` (NotImplementedError) nor any
Savings Plans API, and answers ``DescribeCapacityReservations`` with an HTML 500
(/work/shared/NOTES.md). These fakes are written from botocore's service models
(``botocore/data/ec2/*/service-2.json``, ``savingsplans/*/service-2.json``: the enums and limits
below are read from the installed models, not copied) and the EC2 / Savings Plans API
references:

EC2 (patched into the tests' in-process moto server, :func:`install`; STS stays moto's):

- ``DescribeReservedInstances`` has no paging parameters (``MaxResults`` / ``NextToken`` are
  ``UnknownParameter``); its filters are the documented names (availability-zone, duration,
  end, fixed-price, instance-type, scope, product-description, reserved-instances-id, start,
  state, usage-price, tag:KEY, tag-key; another is ``InvalidParameterValue``), ``OfferingClass``
  and ``OfferingType`` must be enum values.
- ``DescribeCapacityReservations``: ``MaxResults`` 1-1000 (else ``InvalidParameterValue``),
  ``NextToken`` pages (a token it did not issue is ``InvalidNextToken``), documented filter
  names only; ODCRs and Capacity Blocks (``ReservationType``) with every state.

Savings Plans (a local HTTP server, rest-json, reached through
``AWS_ENDPOINT_URL_SAVINGSPLANS``): ``POST /DescribeSavingsPlans`` and
``POST /DescribeSavingsPlanRates``; ``maxResults`` 1-1000, ``nextToken`` matching the model's
pattern, ``states`` / filter names / rate filter names from the model's enums (else a 400
``ValidationException``), ``savingsPlanId`` required and known (else 400 / 404
``ResourceNotFoundException``); every answer carries ``x-amzn-RequestId``.

Faults per operation (``FAULTS["DescribeReservedInstances"] = [503, None, 403]``: answered in
turn before the normal answer; ``None`` answers normally): 503 ``RequestLimitExceeded`` (EC2's
throttling) / 429 ``ThrottlingException`` (Savings Plans), 403 ``UnauthorizedOperation`` (EC2) /
``AccessDeniedException`` (Savings Plans), 500 ``InternalError``. ``CALLS`` records every request
(operation, region, params), so a test can assert that nothing was asked.
"""
from __future__ import annotations

import base64
import datetime as dt
import functools
import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

UTC = dt.timezone.utc
#: region -> [RI dicts in the API's shape]; [CR dicts]; [Savings Plan dicts]; plan id -> [rates]
RESERVED: dict = {}
CAPACITY: dict = {}
PLANS: list = []
RATES: dict = {}
FAULTS: dict = {}
CALLS: list = []
#: DescribeReservedInstances filters (EC2 API reference).
RI_FILTERS = frozenset({"availability-zone", "availability-zone-id", "duration", "end",
                        "fixed-price", "instance-type", "scope", "product-description",
                        "reserved-instances-id", "start", "state", "usage-price", "tag-key"})
#: DescribeCapacityReservations filters (EC2 API reference).
CR_FILTERS = frozenset({"instance-type", "owner-id", "instance-platform", "availability-zone",
                        "tenancy", "outpost-arn", "state", "start-date", "end-date",
                        "end-date-type", "instance-match-criteria", "placement-group-arn",
                        "capacity-reservation-id", "reservation-type"})


def reset() -> None:
    for d in (RESERVED, CAPACITY, RATES, FAULTS):
        d.clear()
    PLANS.clear()
    CALLS.clear()


@functools.lru_cache(maxsize=None)
def _model(service: str):
    import botocore.session

    return botocore.session.get_session().get_service_model(service)


def enum(service: str, shape: str) -> frozenset:
    return frozenset(_model(service).shape_for(shape).enum)


def limits(service: str, shape: str) -> dict:
    return dict(_model(service).shape_for(shape).metadata)


# ---- EC2 ------------------------------------------------------------------------------------
def _ec2_error(code: str, message: str, status: int = 400):
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}'
            f"</Code><Message>{message}</Message></Error></Errors><RequestID>{uuid.uuid4()}"
            "</RequestID></Response>")
    return body, {"status": status, "Content-Type": "text/xml"}


_EC2_FAULTS = {503: ("RequestLimitExceeded", "Request limit exceeded."),
               403: ("UnauthorizedOperation", "You are not authorized to perform this "
                                              "operation."),
               500: ("InternalError", "An internal error has occurred.")}


def _fault(op: str):
    queue = FAULTS.get(op)
    if queue:
        status = queue.pop(0)
        if status is not None:
            return status
    return None


def _filters(self, allowed: frozenset):
    """{name: [values]} of the request's Filter.N, or an error answer."""
    found = self._filters_from_querystring() or {}
    for name in found:
        if name not in allowed and not name.startswith("tag:"):
            return None, _ec2_error("InvalidParameterValue", f"The filter '{name}' is invalid")
    return found, None


def _unknown(self, allowed: tuple):
    for key in self.querystring:
        top = key.split(".", 1)[0]
        if top not in ("Action", "Version", *allowed):
            return _ec2_error("UnknownParameter", f"The parameter {top} is not recognized")
    return None


def _iso(v):
    return v.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z") if isinstance(v, dt.datetime) \
        else v


def _matches(item: dict, found: dict, fields: dict) -> bool:
    for name, values in found.items():
        key = fields.get(name)
        if key and str(_iso(item.get(key))) not in values:
            return False
    return True


def describe_reserved_instances(self):
    from moto.core.responses import ActionResult

    CALLS.append(("DescribeReservedInstances", self.region, dict(self.querystring)))
    status = _fault("DescribeReservedInstances")
    if status:
        return _ec2_error(*_EC2_FAULTS[status], status=status)
    bad = _unknown(self, ("Filter", "ReservedInstancesId", "OfferingClass", "OfferingType",
                          "DryRun"))
    if bad:
        return bad
    for param, shape in (("OfferingClass", "OfferingClassType"),
                         ("OfferingType", "OfferingTypeValues")):
        value = self._get_param(param)
        if value is not None and value not in enum("ec2", shape):
            return _ec2_error("InvalidParameterValue", f"Value ({value}) for parameter "
                              f"{param} is invalid.")
    found, err = _filters(self, RI_FILTERS)
    if err:
        return err
    fields = {"state": "State", "instance-type": "InstanceType", "scope": "Scope",
              "availability-zone": "AvailabilityZone"}
    items = [r for r in RESERVED.get(self.region, []) if _matches(r, found, fields)]
    return ActionResult({"ReservedInstances": items})


def describe_capacity_reservations(self):
    from moto.core.responses import ActionResult

    CALLS.append(("DescribeCapacityReservations", self.region, dict(self.querystring)))
    status = _fault("DescribeCapacityReservations")
    if status:
        return _ec2_error(*_EC2_FAULTS[status], status=status)
    bad = _unknown(self, ("Filter", "CapacityReservationId", "MaxResults", "NextToken",
                          "DryRun"))
    if bad:
        return bad
    found, err = _filters(self, CR_FILTERS)
    if err:
        return err
    lim = limits("ec2", "DescribeCapacityReservationsMaxResults")
    size = self._get_int_param("MaxResults")
    if size is not None and not lim["min"] <= size <= lim["max"]:
        return _ec2_error("InvalidParameterValue", f"Value ( {size} ) for parameter maxResults "
                          f"is invalid. Parameter must be between {lim['min']} and "
                          f"{lim['max']}.")
    fields = {"state": "State", "instance-type": "InstanceType",
              "reservation-type": "ReservationType"}
    items = [c for c in CAPACITY.get(self.region, []) if _matches(c, found, fields)]
    token = self._get_param("NextToken")
    start = 0
    if token:
        try:
            start = int(base64.b64decode(token).decode().split(":", 1)[1])
        except (ValueError, IndexError):
            return _ec2_error("InvalidNextToken", "The token is invalid")
    size = size or 1000
    out = {"CapacityReservations": items[start:start + size]}
    if start + size < len(items):
        out["NextToken"] = base64.b64encode(f"cr:{start + size}".encode()).decode()
    return ActionResult(out)


def install(monkeypatch) -> None:
    """Both EC2 actions in the tests' moto server, for one test (monkeypatch undoes it)."""
    from moto.ec2.responses import EC2Response

    monkeypatch.setattr(EC2Response, "describe_reserved_instances", describe_reserved_instances)
    monkeypatch.setattr(EC2Response, "describe_capacity_reservations",
                        describe_capacity_reservations, raising=False)


# ---- builders (what an account would hold) ---------------------------------------------------
def add_ri(region: str, rid: str, instance_type: str, count: int, *, start: dt.datetime,
           years: int = 1, state: str = "active", fixed: float = 0.0, hourly: float = 0.0,
           usage: float = 0.0, zone: Optional[str] = None, offering_class: str = "standard",
           offering_type: str = "No Upfront") -> None:
    RESERVED.setdefault(region, []).append({
        "ReservedInstancesId": rid, "InstanceType": instance_type, "InstanceCount": count,
        "Start": start, "End": start + dt.timedelta(days=365 * years),
        "Duration": 31536000 * years, "FixedPrice": fixed, "UsagePrice": usage,
        "RecurringCharges": [{"Amount": hourly, "Frequency": "Hourly"}] if hourly else [],
        "ProductDescription": "Linux/UNIX", "State": state, "InstanceTenancy": "default",
        "CurrencyCode": "USD", "OfferingType": offering_type, "OfferingClass": offering_class,
        "Scope": "Availability Zone" if zone else "Region",
        **({"AvailabilityZone": zone} if zone else {})})


def add_capacity(region: str, cid: str, instance_type: str, total: int, available: int, *,
                 zone: str, start: dt.datetime, end: Optional[dt.datetime],
                 state: str = "active", block: bool = False,
                 owner: str = "123456789012") -> None:
    CAPACITY.setdefault(region, []).append({
        "CapacityReservationId": cid, "OwnerId": owner,
        "CapacityReservationArn": f"arn:aws:ec2:{region}:{owner}:capacity-reservation/{cid}",
        "InstanceType": instance_type, "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": zone, "Tenancy": "default", "TotalInstanceCount": total,
        "AvailableInstanceCount": available, "State": state, "StartDate": start,
        "EndDateType": "limited" if end else "unlimited",
        **({"EndDate": end} if end else {}),
        "InstanceMatchCriteria": "targeted" if block else "open",
        "CreateDate": start, "ReservationType": "capacity-block" if block else "default"})


def add_plan(pid: str, plan_type: str, commitment: str, *, start: dt.datetime, years: int = 1,
             state: str = "active", region: str = "", family: str = "",
             upfront: str = "0", account: str = "123456789012") -> None:
    PLANS.append({
        "offeringId": str(uuid.uuid5(uuid.NAMESPACE_URL, pid)), "savingsPlanId": pid,
        "savingsPlanArn": f"arn:aws:savingsplans::{account}:savingsplan/{pid}",
        "description": f"{years} year No Upfront {plan_type}",
        "start": _iso(start), "end": _iso(start + dt.timedelta(days=365 * years)),
        "state": state, "region": region, "ec2InstanceFamily": family,
        "savingsPlanType": plan_type, "paymentOption": "No Upfront",
        "productTypes": ["EC2", "Fargate", "Lambda"] if plan_type == "Compute" else ["EC2"],
        "currency": "USD", "commitment": commitment, "upfrontPaymentAmount": upfront,
        "recurringPaymentAmount": commitment, "termDurationInSeconds": 31536000 * years})


def add_rate(pid: str, region: str, instance_type: str, rate: str, *,
             product_type: str = "EC2", tenancy: str = "shared",
             description: str = "Linux/UNIX") -> None:
    RATES.setdefault(pid, []).append({
        "rate": rate, "currency": "USD", "unit": "Hrs", "productType": product_type,
        "serviceCode": "AmazonEC2", "usageType": f"BoxUsage:{instance_type}",
        "operation": "RunInstances",
        "properties": [{"name": "region", "value": region},
                       {"name": "instanceType", "value": instance_type},
                       {"name": "instanceFamily", "value": instance_type.split(".")[0]},
                       {"name": "productDescription", "value": description},
                       {"name": "tenancy", "value": tenancy}]})


# ---- Savings Plans (rest-json) ----------------------------------------------------------------
_SP_FAULTS = {429: ("ThrottlingException", "Rate exceeded"),
              403: ("AccessDeniedException", "User is not authorized to perform: "
                                             "savingsplans:DescribeSavingsPlans"),
              500: ("InternalServerException", "An internal error occurred"),
              503: ("ServiceUnavailableException", "Service unavailable")}


class _Invalid(Exception):
    def __init__(self, status: int, code: str, message: str):
        self.status, self.code, self.message = status, code, message


def _page(items: list, body: dict, kind: str) -> dict:
    lim = limits("savingsplans", "MaxResults")
    size = body.get("maxResults", 1000)
    if not isinstance(size, int) or not lim["min"] <= size <= lim["max"]:
        raise _Invalid(400, "ValidationException", f"1 validation error detected: Value "
                       f"'{size}' at 'maxResults' failed to satisfy constraint: Member must "
                       f"have value between {lim['min']} and {lim['max']}")
    token = body.get("nextToken")
    start = 0
    if token is not None:
        tl = limits("savingsplans", "PaginationToken")
        if not isinstance(token, str) or not re.fullmatch(tl["pattern"], token) \
                or len(token) > tl["max"]:
            raise _Invalid(400, "ValidationException", "Value at 'nextToken' failed to "
                           "satisfy constraint")
        try:
            k, n = base64.b64decode(token).decode().split(":", 1)
            start = int(n)
            assert k == kind
        except (ValueError, AssertionError):
            raise _Invalid(400, "ValidationException", "Invalid nextToken") from None
    out = items[start:start + size]
    nxt = None
    if start + size < len(items):
        nxt = base64.b64encode(f"{kind}:{start + size}".encode()).decode()
    return {"items": out, "nextToken": nxt}


def _check_filters(body: dict, shape: str) -> list:
    names = enum("savingsplans", shape)
    filters = body.get("filters") or []
    if not isinstance(filters, list):
        raise _Invalid(400, "SerializationException", "filters must be a list")
    for f in filters:
        if f.get("name") not in names:
            raise _Invalid(400, "ValidationException", f"1 validation error detected: Value "
                           f"'{f.get('name')}' at 'filters.member.name' failed to satisfy "
                           f"constraint: Member must satisfy enum value set: {sorted(names)}")
        if not isinstance(f.get("values"), list) or not f["values"]:
            raise _Invalid(400, "ValidationException", "filter values must be a non-empty "
                           "list")
    return filters


def describe_savings_plans(body: dict) -> dict:
    states = body.get("states") or []
    allowed = enum("savingsplans", "SavingsPlanState")
    for s in states:
        if s not in allowed:
            raise _Invalid(400, "ValidationException", f"1 validation error detected: Value "
                           f"'[{s}]' at 'states' failed to satisfy constraint: Member must "
                           f"satisfy enum value set: {sorted(allowed)}")
    filters = _check_filters(body, "SavingsPlansFilterName")
    keys = {"region": "region", "savings-plan-type": "savingsPlanType",
            "ec2-instance-family": "ec2InstanceFamily"}
    items = [p for p in PLANS if (not states or p["state"] in states) and all(
        f["name"] not in keys or p.get(keys[f["name"]]) in f["values"] for f in filters)]
    page = _page(items, body, "sp")
    out = {"savingsPlans": page["items"]}
    if page["nextToken"]:
        out["nextToken"] = page["nextToken"]
    return out


def describe_savings_plan_rates(body: dict) -> dict:
    pid = body.get("savingsPlanId")
    if not pid:
        raise _Invalid(400, "ValidationException", "1 validation error detected: Value null at "
                       "'savingsPlanId' failed to satisfy constraint: Member must not be null")
    if not any(p["savingsPlanId"] == pid for p in PLANS):
        raise _Invalid(404, "ResourceNotFoundException", f"Savings Plan {pid} not found")
    filters = _check_filters(body, "SavingsPlanRateFilterName")
    props = {"region", "instanceType", "productDescription", "tenancy"}

    def keep(r: dict) -> bool:
        have = {p["name"]: p["value"] for p in r["properties"]}
        for f in filters:
            value = have.get(f["name"]) if f["name"] in props else r.get(f["name"])
            if value not in f["values"]:
                return False
        return True
    page = _page([r for r in RATES.get(pid, []) if keep(r)], body, f"rates-{pid}")
    out = {"savingsPlanId": pid, "searchResults": page["items"]}
    if page["nextToken"]:
        out["nextToken"] = page["nextToken"]
    return out


_SP_OPS = {"/DescribeSavingsPlans": ("DescribeSavingsPlans", describe_savings_plans),
           "/DescribeSavingsPlanRates": ("DescribeSavingsPlanRates",
                                         describe_savings_plan_rates)}


class SavingsPlansServer:
    """The Savings Plans API on 127.0.0.1 (``url`` for AWS_ENDPOINT_URL_SAVINGSPLANS)."""

    def __init__(self):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _reply(self, status: int, body: dict, code: str = "") -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
                if code:
                    self.send_header("x-amzn-ErrorType", code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                route = _SP_OPS.get(self.path)
                if route is None:
                    self._reply(404, {"message": f"no route {self.path}"}, "UnknownOperation")
                    return
                op, fn = route
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._reply(400, {"message": "not JSON"}, "SerializationException")
                    return
                CALLS.append((op, "us-east-1", body))
                status = _fault(op)
                if status:
                    code, msg = _SP_FAULTS[status]
                    self._reply(status, {"message": msg}, code)
                    return
                try:
                    self._reply(200, fn(body))
                except _Invalid as exc:
                    self._reply(exc.status, {"message": exc.message}, exc.code)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
