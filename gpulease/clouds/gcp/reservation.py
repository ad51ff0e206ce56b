"""A zonal GCE reservation WITH a compact placement policy, through a Pulumi dynamic provider.

pulumi-gcp 10's ``compute.Reservation`` has no resource-policies field, but the Compute API's
Reservation does (``resourcePolicies``, a map of key -> policy URL; "Create a reservation for
VMs that use a compact placement policy"), and a VM with a compact policy consumes only a
reservation that carries the same policy. So a distributed cluster's reserved nodes get their
reservation from :class:`ReservationProvider`: check / create / read / diff / update / delete
over google-cloud-compute's ``ReservationsClient``, each long-running operation waited on. In
`pulumi preview` (and `gpulease plan`) it shows as a ``pulumi-python:dynamic/gpulease:
GceReservation`` with its inputs; its ``name``, ``zone`` and ``selfLink`` are the same as a
``gcp:compute/reservation:Reservation`` would have (docs/resources.md).

How the engine calls it (Pulumi's dynamic-provider host, ``pulumi/dynamic/__main__.py``; the
tests drive it through that host, ``gpulease.planner.dynhost``):

- ``check`` runs at preview with the inputs still unknown where they come from resources the
  same update creates (the placement policy's self link on a first `pulumi up`): an unknown
  value passes, every known value is validated strictly (``count: "two"`` or ``1.5`` fail).
- ``read`` (`pulumi refresh`) of a reservation deleted outside Pulumi answers an empty id and
  no outputs, which drops it from the state; an answer without the reserved count is an error,
  never a count of 0.
- ``create`` is idempotent: the insert carries a ``requestId`` derived from the reservation it
  asks for, so a retried insert joins the first one's operation (the API ignores a repeated
  request id for at least 60 minutes); after that, 409 ``alreadyExists`` on an identical
  reservation adopts it, and on a different one fails naming the differences.
- an operation that ends with an ``error`` list fails, with or without an HTTP status.
"""
from __future__ import annotations

import json
import re
import uuid
from typing import Any, Optional

import pulumi
import pulumi.dynamic as dyn

from gpulease.clouds.gcp.cloud import GCP_PROJECT_PATTERN

#: GCE resource names ("Naming resources"): RFC 1035, 1-63 characters.
NAME_RE = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
PROJECT_RE = re.compile(GCP_PROJECT_PATTERN.strip("^$"))
#: Zone names (``us-central1-c``, ``europe-west4-b``): ``<region>-<letter>``.
ZONE_RE = re.compile(r"[a-z]+-[a-z]+[0-9]+-[a-z]")
#: Machine and accelerator type names as the reservation body takes them (``a3-highgpu-8g``,
#: ``nvidia-tesla-t4``).
TYPE_RE = re.compile(r"[a-z][-a-z0-9]{0,62}")
#: A compact placement policy's self link, full or relative.
POLICY_RE = re.compile(r"(https://www\.googleapis\.com/compute/v1/)?projects/[^/]+/regions/"
                       r"(?P<region>[a-z]+-[a-z]+[0-9]+)/resourcePolicies/[a-z]([-a-z0-9]{0,61}"
                       r"[a-z0-9])?")
#: Properties a change of which needs a new reservation; ``count`` is resized in place
#: (``reservations.resize``).
REPLACE_KEYS = ("project", "zone", "name", "machine_type", "accelerators", "placement_policy",
                "description")
INPUT_KEYS = REPLACE_KEYS + ("count",)
#: Longest wait for one zonal operation (reservations of scarce GPUs can take minutes).
OPERATION_TIMEOUT_S = 1800
# An insert / resize / delete call is repeated on a transient failure (timeout, 429, 5xx) by
# gpulease.retry's policy, always with the same request id, so a repeat never acts twice.
#: The namespace of the request ids (any fixed UUID: ids are uuid5 of the request's content).
REQUEST_ID_NAMESPACE = uuid.UUID("6f0b3c52-4bde-4a49-9c2e-2f4f1b1c9a31")


class ReservationConflict(RuntimeError):
    """A reservation of the same name exists and differs from the one declared."""


class MalformedAnswer(RuntimeError):
    """The Compute API answered something that is not a reservation or operation we can read."""


def _unknown(value: Any) -> bool:
    """True for a value unknown at preview (the host passes ``pulumi.output.Unknown``)."""
    from pulumi.output import Unknown

    return isinstance(value, Unknown)


def _whole(value: Any) -> Optional[int]:
    """``value`` as a whole number, or None. Numbers cross the engine as doubles (4 -> 4.0);
    a string, a bool or a fraction is not a count."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def reservation_body(props: dict) -> dict:
    """The Compute API ``Reservation`` (JSON field names) for the resource's properties."""
    instance: dict[str, Any] = {"machineType": props["machine_type"]}
    if props.get("accelerators"):
        instance["guestAccelerators"] = [
            {"acceleratorType": a["type"], "acceleratorCount": int(a["count"])}
            for a in props["accelerators"]]
    body: dict[str, Any] = {
        "name": props["name"], "zone": props["zone"],
        "description": props.get("description", ""),
        "specificReservationRequired": True,
        "specificReservation": {"count": str(int(props["count"])),
                                "instanceProperties": instance},
        # only this project's VMs consume it (the default share setting, stated)
        "shareSettings": {"shareType": "LOCAL"},
    }
    if props.get("placement_policy"):
        body["resourcePolicies"] = {"policy": props["placement_policy"]}
    return body


def check_props(props: dict) -> list[tuple[str, str]]:
    """What the Compute API would refuse, as (property, reason), before any call.

    A value unknown at preview is not judged (it is checked again when known); a known value
    of the wrong type is a failure, never an exception."""
    failures: list[tuple[str, str]] = []

    def known(key: str) -> bool:
        return not _unknown(props.get(key))

    def text(key: str, pattern: re.Pattern, rule: str, *, required: bool = True) -> None:
        if not known(key):
            return
        value = props.get(key)
        if value in (None, "") and not required:
            return
        if not isinstance(value, str) or not pattern.fullmatch(value):
            failures.append((key, f"{value!r} is not {rule}"))

    text("project", PROJECT_RE, "a GCP project id (6-30 lowercase letters, digits or '-')")
    text("zone", ZONE_RE, "a GCE zone name such as us-central1-c")
    text("name", NAME_RE, "a GCE name ([a-z]([-a-z0-9]*[a-z0-9])?, at most 63 characters)")
    text("machine_type", TYPE_RE, "a machine type name such as a3-highgpu-8g")
    if known("count"):
        count = _whole(props.get("count"))
        if count is None:
            failures.append(("count", f"{props.get('count')!r} is not a whole number of VMs"))
        elif count < 1:
            failures.append(("count", f"a reservation reserves at least 1 VM (got {count})"))
    if known("description") and not isinstance(props.get("description", ""), str):
        failures.append(("description", f"{props.get('description')!r} is not a string"))
    accelerators = props.get("accelerators") or []
    if known("accelerators"):
        if not isinstance(accelerators, list):
            failures.append(("accelerators", f"{accelerators!r} is not a list"))
        else:
            for i, a in enumerate(accelerators):
                if _unknown(a):
                    continue
                if not isinstance(a, dict) or set(a) - {"type", "count"}:
                    failures.append((f"accelerators[{i}]", f"{a!r} is not "
                                     "{type: <accelerator type>, count: <whole number>}"))
                    continue
                if not _unknown(a.get("type")) and not (
                        isinstance(a.get("type"), str) and TYPE_RE.fullmatch(a["type"])):
                    failures.append((f"accelerators[{i}].type", f"{a.get('type')!r} is not an "
                                     "accelerator type such as nvidia-tesla-t4"))
                if not _unknown(a.get("count")):
                    n = _whole(a.get("count"))
                    if n is None or n < 1:
                        failures.append((f"accelerators[{i}].count", f"{a.get('count')!r} is "
                                         "not a whole number of at least 1"))
    policy = props.get("placement_policy")
    if known("placement_policy") and policy not in (None, ""):
        m = POLICY_RE.fullmatch(policy) if isinstance(policy, str) else None
        if m is None:
            failures.append(("placement_policy", f"{policy!r} is not a resource policy's self "
                                                 "link (projects/P/regions/R/resourcePolicies/N)"))
        elif known("zone") and isinstance(props.get("zone"), str) \
                and not props["zone"].startswith(m.group("region") + "-"):
            failures.append(("placement_policy", f"policy {policy!r} is not in the region of "
                                                 f"zone {props['zone']!r}"))
    return failures


def self_link(props: dict) -> str:
    return (f"https://www.googleapis.com/compute/v1/projects/{props['project']}/zones/"
            f"{props['zone']}/reservations/{props['name']}")


def request_id(*parts: Any) -> str:
    """A request id for the Compute API (a UUID, never the zero UUID) derived from what is
    asked: the same request always carries the same id, so the API ignores a repeat of it
    (for at least 60 minutes, "requestId" in the Compute API reference)."""
    return str(uuid.uuid5(REQUEST_ID_NAMESPACE, json.dumps(parts, sort_keys=True)))


def differences(body: dict, live: dict) -> list[str]:
    """How an existing reservation (Compute API JSON) differs from the one ``body`` asks for,
    in the fields a reservation is made of; [] = the same reservation."""
    def instance(r: dict) -> dict:
        i = (r.get("specificReservation") or {}).get("instanceProperties") or {}
        return {"machineType": str(i.get("machineType", "")).rsplit("/", 1)[-1],
                "guestAccelerators": sorted(
                    (str(a.get("acceleratorType", "")).rsplit("/", 1)[-1],
                     int(a.get("acceleratorCount", 0)))
                    for a in i.get("guestAccelerators") or [])}

    want, have = instance(body), instance(live)
    out = [f"{k}: declared {want[k]!r}, existing {have[k]!r}" for k in want if want[k] != have[k]]
    wc = str((body.get("specificReservation") or {}).get("count"))
    hc = str((live.get("specificReservation") or {}).get("count"))
    if wc != hc:
        out.append(f"count: declared {wc}, existing {hc}")
    wp = sorted((body.get("resourcePolicies") or {}).values())
    hp = sorted((live.get("resourcePolicies") or {}).values())
    if [p.split("/compute/v1/")[-1] for p in wp] != [p.split("/compute/v1/")[-1] for p in hp]:
        out.append(f"resourcePolicies: declared {wp}, existing {hp}")
    if bool(body.get("specificReservationRequired")) != bool(live.get(
            "specificReservationRequired")):
        out.append(f"specificReservationRequired: declared "
                   f"{body.get('specificReservationRequired')}, existing "
                   f"{live.get('specificReservationRequired')}")
    want_share = (body.get("shareSettings") or {}).get("shareType", "LOCAL")
    have_share = (live.get("shareSettings") or {}).get("shareType", "LOCAL")
    if want_share != have_share:
        out.append(f"shareSettings.shareType: declared {want_share}, existing {have_share}")
    return out


class ReservationProvider(dyn.ResourceProvider):
    """CRUD of one reservation; ``endpoint`` (``host:port``, plain HTTP) is for tests only,
    as are ``poll_s`` (the first wait between operation polls; None = the client's default)
    and ``retry_s`` (the wait before repeating a call that failed transiently)."""

    serialize_as_secret_always = False

    def __init__(self, endpoint: Optional[str] = None, *, poll_s: Optional[float] = None,
                 retry_s: Optional[float] = None):
        super().__init__()
        self.endpoint = endpoint
        self.poll_s = poll_s
        self.retry_s = retry_s

    # ---- the API ------------------------------------------------------------------------
    def _client(self):
        from google.cloud import compute_v1

        if self.endpoint is None:
            return compute_v1.ReservationsClient()
        from google.auth.credentials import AnonymousCredentials
        from google.cloud.compute_v1.services.reservations.transports.rest import \
            ReservationsRestTransport
        from google.cloud.compute_v1.services.zone_operations.transports.rest import \
            ZoneOperationsRestTransport

        creds = AnonymousCredentials()
        transport = ReservationsRestTransport(host=self.endpoint, url_scheme="http",
                                              credentials=creds)
        # the operation poller is built lazily with the default host: point it here too
        transport._extended_operations_services["zone_operations"] = \
            compute_v1.ZoneOperationsClient(transport=ZoneOperationsRestTransport(
                host=self.endpoint, url_scheme="http", credentials=creds))
        return compute_v1.ReservationsClient(transport=transport)

    def _call(self, what: str, fn):
        """``fn()`` retried on transient failures by the one retry policy (``gpulease.retry``; the
        caller made the request idempotent with a request id); other errors, and the last
        one, propagate. ``retry_s`` (tests) shortens the waits, never the number of tries."""
        from google.api_core import exceptions

        from gpulease.retry import Backoff

        transient = (exceptions.ServiceUnavailable, exceptions.TooManyRequests,
                     exceptions.InternalServerError, exceptions.DeadlineExceeded,
                     exceptions.GatewayTimeout, ConnectionError, TimeoutError)
        backoff = Backoff() if self.retry_s is None else Backoff(base_s=self.retry_s,
                                                                 cap_s=self.retry_s)
        return backoff.call(fn, retryable=lambda exc: isinstance(exc, transient))

    def _wait(self, operation, what: str) -> None:
        """Wait for a zonal operation; an error list fails it even without an HTTP status
        (``ExtendedOperation.result`` raises only when the operation carries one)."""
        kwargs: dict[str, Any] = {"timeout": OPERATION_TIMEOUT_S}
        if self.poll_s is not None:
            from google.api_core.future import polling

            kwargs["polling"] = polling.DEFAULT_POLLING.with_delay(
                initial=self.poll_s, maximum=self.poll_s * 4, multiplier=2.0)
        operation.result(**kwargs)
        errors = operation_errors(operation)
        if errors:
            raise RuntimeError(f"{what}: operation {getattr(operation, 'name', '?')} failed: "
                               + "; ".join(errors))

    # ---- the provider ---------------------------------------------------------------------
    def check(self, _olds: dict, news: dict) -> dyn.CheckResult:
        failures = check_props(news)
        inputs = dict(news)
        if not failures and not _unknown(news.get("count")):
            inputs["count"] = _whole(news.get("count"))
        return dyn.CheckResult(inputs, [dyn.CheckFailure(p, r) for p, r in failures])

    def create(self, props: dict) -> dyn.CreateResult:
        from google.api_core import exceptions
        from google.cloud import compute_v1

        client = self._client()
        body = reservation_body(props)
        where = f"reservation {props['name']} in {props['project']}/{props['zone']}"
        rid = request_id("insert", props["project"], props["zone"], body)

        def insert(req_id: str):
            request = compute_v1.InsertReservationRequest(
                project=props["project"], zone=props["zone"], request_id=req_id,
                reservation_resource=compute_v1.Reservation.from_json(
                    json.dumps(body), ignore_unknown_fields=True))
            return self._call(where, lambda: client.insert(request=request))

        for attempt in (1, 2):
            try:
                op = insert(rid)
                # An operation already DONE in the insert's own answer is, for a repeated
                # request id, an earlier attempt's operation replayed by the API.
                replayed = _answered_done(op) and \
                    getattr(op, "client_operation_id", "") == rid
                try:
                    self._wait(op, f"creating {where}")
                except RuntimeError:
                    if replayed and attempt == 1:
                        # an earlier attempt's failure is never the answer to this one
                        rid = request_id("insert-after", rid, op.name)
                        continue
                    raise
            except exceptions.Conflict:
                existing = self._get_json(client, props)
                if existing is None:
                    raise
                diffs = differences(body, existing)
                if diffs:
                    raise ReservationConflict(
                        f"{where} already exists and is not the reservation this stack declares"
                        " (" + "; ".join(diffs) + "): it was made outside this stack or by an "
                        "earlier configuration. Delete it (gcloud compute reservations delete "
                        f"{props['name']} --zone {props['zone']} --project {props['project']}) "
                        "if nothing uses it, or rename the cluster so the reservation gets "
                        "another name") from None
                break   # the identical reservation: an earlier attempt made it; adopt it
            if self._get_json(client, props) is not None:
                break
            if replayed and attempt == 1:
                # the replayed success made a reservation that has been deleted since
                rid = request_id("insert-after", rid, op.name)
                continue
            raise MalformedAnswer(f"creating {where}: operation {op.name} finished without "
                                  "error, but the reservation does not exist")
        return dyn.CreateResult(id_=f"projects/{props['project']}/zones/{props['zone']}/"
                                    f"reservations/{props['name']}",
                                outs={**props, "count": int(props["count"]),
                                      "self_link": self_link(props)})

    def _get_json(self, client, props: dict) -> Optional[dict]:
        """The live reservation as Compute API JSON, or None when it does not exist."""
        from google.api_core import exceptions
        from google.cloud import compute_v1
        from google.protobuf import json_format

        try:
            live = self._call(f"reading reservation {props['name']}", lambda: client.get(
                project=props["project"], zone=props["zone"], reservation=props["name"]))
        except exceptions.NotFound:
            return None
        except (ValueError, TypeError, json_format.ParseError) as exc:  # not parseable
            raise MalformedAnswer(f"reading reservation {props['name']} in "
                                  f"{props['project']}/{props['zone']}: the Compute API's "
                                  f"answer is not a reservation ({exc})") from None
        return json.loads(compute_v1.Reservation.to_json(live))

    def read(self, id_: str, props: dict) -> dyn.ReadResult:
        live = self._get_json(self._client(), props)
        if live is None:
            # gone: an empty id and no outputs drop it from the state (the host writes the
            # provider key into the outputs, so they are a dict, never None)
            return dyn.ReadResult("", {})
        where = f"reservation {props['name']} in {props['project']}/{props['zone']}"
        spec = live.get("specificReservation")
        count = _whole(_number(spec.get("count"))) if isinstance(spec, dict) else None
        if count is None or count < 0:
            raise MalformedAnswer(f"reading {where}: the Compute API's answer has no reserved "
                                  f"count (specificReservation.count = "
                                  f"{(spec or {}).get('count')!r}); refusing to record a guess")
        machine = ((spec.get("instanceProperties") or {}).get("machineType") or "")
        outs = {**props, "count": count, "self_link": live.get("selfLink") or self_link(props)}
        if machine:
            outs["machine_type"] = str(machine).rsplit("/", 1)[-1]
        return dyn.ReadResult(id_, outs)

    def diff(self, _id: str, olds: dict, news: dict) -> dyn.DiffResult:
        replaces = [k for k in REPLACE_KEYS
                    if _unknown(news.get(k)) or _norm(olds.get(k)) != _norm(news.get(k))]
        count_changes = _unknown(news.get("count")) or \
            _whole(olds.get("count")) != _whole(news.get("count"))
        changed = replaces + (["count"] if count_changes else [])
        return dyn.DiffResult(changes=bool(changed), replaces=replaces,
                              delete_before_replace=True)

    def update(self, _id: str, olds: dict, news: dict) -> dyn.UpdateResult:
        from google.cloud import compute_v1

        client = self._client()
        count = int(news["count"])
        where = f"reservation {news['name']} in {news['project']}/{news['zone']}"
        request = compute_v1.ResizeReservationRequest(
            project=news["project"], zone=news["zone"], reservation=news["name"],
            request_id=request_id("resize", news["project"], news["zone"], news["name"], count),
            reservations_resize_request_resource=compute_v1.ReservationsResizeRequest(
                specific_sku_count=count))
        op = self._call(where, lambda: client.resize(request=request))
        self._wait(op, f"resizing {where} to {count}")
        return dyn.UpdateResult({**news, "count": count, "self_link": self_link(news)})

    def delete(self, _id: str, props: dict) -> None:
        from google.api_core import exceptions
        from google.cloud import compute_v1

        client = self._client()
        where = f"reservation {props['name']} in {props['project']}/{props['zone']}"
        request = compute_v1.DeleteReservationRequest(
            project=props["project"], zone=props["zone"], reservation=props["name"],
            request_id=request_id("delete", props["project"], props["zone"], props["name"]))
        try:
            op = self._call(where, lambda: client.delete(request=request))
        except exceptions.NotFound:
            return  # already gone: success
        self._wait(op, f"deleting {where}")


def operation_errors(operation) -> list[str]:
    """The error list of a finished operation, as "CODE: message" lines ([] = succeeded)."""
    error = getattr(operation, "error", None)
    errors = list(getattr(error, "errors", None) or [])
    return [f"{getattr(e, 'code', '') or 'ERROR'}: {getattr(e, 'message', '')}".strip()
            for e in errors]


def _answered_done(operation) -> bool:
    """The operation's status as the call answered it (before any poll): DONE or not."""
    status = getattr(getattr(operation, "_extended_operation", None), "status", None)
    return getattr(status, "name", status) == "DONE"


def _number(value: Any) -> Any:
    """int64 fields are strings in Compute API JSON ("2"); anything else is left to _whole."""
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value):
        return int(value)
    return value


def _norm(value: Any) -> Any:
    """Compare numbers as numbers (the engine sends 4.0 for 4)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_norm(v) for v in value]
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    return value


class GceReservation(dyn.Resource, module="gpulease", name="GceReservation"):
    """``pulumi-python:dynamic/gpulease:GceReservation``: see the module docstring."""

    name: pulumi.Output[str]
    zone: pulumi.Output[str]
    self_link: pulumi.Output[str]

    def __init__(self, resource_name: str, *, project: str, zone: str, name: str,
                 machine_type: str, count: int, placement_policy: pulumi.Input[str],
                 accelerators: Optional[list] = None, description: str = "",
                 opts: Optional[pulumi.ResourceOptions] = None,
                 provider: Optional[ReservationProvider] = None):
        props = {"project": project, "zone": zone, "name": name, "machine_type": machine_type,
                 "count": count, "placement_policy": placement_policy,
                 "accelerators": accelerators or [], "description": description,
                 "self_link": None}
        super().__init__(provider or ReservationProvider(), resource_name, props, opts)
