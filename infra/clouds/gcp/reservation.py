"""A zonal GCE reservation WITH a compact placement policy, through a Pulumi dynamic provider.

pulumi-gcp 10's ``compute.Reservation`` has no resource-policies field, but the Compute API's
Reservation does (``resourcePolicies``, a map of key -> policy URL; "Create a reservation for
VMs that use a compact placement policy"), and a VM with a compact policy consumes only a
reservation that carries the same policy. So a distributed cluster's reserved nodes get their
reservation from :class:`ReservationProvider`: create / read / diff / update / delete over
google-cloud-compute's ``ReservationsClient``, each long-running operation waited on. In
`pulumi preview` (and `gpulease plan`) it shows as a ``pulumi-python:dynamic/gpulease:
GceReservation`` with its inputs; its ``name``, ``zone`` and ``selfLink`` are the same as a
``gcp:compute/reservation:Reservation`` would have (docs/resources.md).
"""
from __future__ import annotations

import re
from typing import Any, Optional

import pulumi
import pulumi.dynamic as dyn

#: GCE resource names ("Naming resources"): RFC 1035, 1-63 characters.
NAME_RE = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
#: Properties a change of which needs a new reservation; ``count`` is resized in place
#: (``reservations.resize``).
REPLACE_KEYS = ("project", "zone", "name", "machine_type", "accelerators", "placement_policy",
                "description")
#: Longest wait for one zonal operation (reservations of scarce GPUs can take minutes).
OPERATION_TIMEOUT_S = 1800


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
    """What the Compute API would refuse, as (property, reason) before any call."""
    failures = []
    if not NAME_RE.fullmatch(str(props.get("name", ""))):
        failures.append(("name", f"{props.get('name')!r} is not a GCE name "
                                 "([a-z]([-a-z0-9]*[a-z0-9])?, at most 63 characters)"))
    if int(props.get("count", 0)) < 1:
        failures.append(("count", "a reservation reserves at least 1 VM"))
    policy = str(props.get("placement_policy") or "")
    zone = str(props.get("zone", ""))
    m = re.search(r"/regions/([^/]+)/resourcePolicies/", policy)
    if policy and (not m or not zone.startswith(m.group(1) + "-")):
        failures.append(("placement_policy", f"policy {policy!r} is not in the region of zone "
                                             f"{zone!r}"))
    return failures


def self_link(props: dict) -> str:
    return (f"https://www.googleapis.com/compute/v1/projects/{props['project']}/zones/"
            f"{props['zone']}/reservations/{props['name']}")


class ReservationProvider(dyn.ResourceProvider):
    """CRUD of one reservation; ``endpoint`` (``host:port``, plain HTTP) is for tests only."""

    serialize_as_secret_always = False

    def __init__(self, endpoint: Optional[str] = None):
        super().__init__()
        self.endpoint = endpoint

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

    @staticmethod
    def _wait(operation) -> None:
        operation.result(timeout=OPERATION_TIMEOUT_S)
        if getattr(operation, "error_code", None):
            raise RuntimeError(f"reservation operation failed: {operation.error_message}")

    def check(self, _olds: dict, news: dict) -> dyn.CheckResult:
        return dyn.CheckResult(news, [dyn.CheckFailure(p, r) for p, r in check_props(news)])

    def create(self, props: dict) -> dyn.CreateResult:
        from google.cloud import compute_v1

        body = compute_v1.Reservation.from_json(_json(reservation_body(props)),
                                                ignore_unknown_fields=True)
        op = self._client().insert(project=props["project"], zone=props["zone"],
                                   reservation_resource=body)
        self._wait(op)
        return dyn.CreateResult(id_=f"projects/{props['project']}/zones/{props['zone']}/"
                                    f"reservations/{props['name']}",
                                outs={**props, "self_link": self_link(props)})

    def read(self, id_: str, props: dict) -> dyn.ReadResult:
        from google.api_core import exceptions

        try:
            live = self._client().get(project=props["project"], zone=props["zone"],
                                      reservation=props["name"])
        except exceptions.NotFound:
            return dyn.ReadResult(None, None)  # gone: the engine drops it from the state
        count = int(live.specific_reservation.count)
        return dyn.ReadResult(id_, {**props, "count": count, "self_link": live.self_link})

    def diff(self, _id: str, olds: dict, news: dict) -> dyn.DiffResult:
        replaces = [k for k in REPLACE_KEYS if olds.get(k) != news.get(k)]
        changed = replaces + (["count"] if int(olds.get("count", 0)) != int(news["count"])
                              else [])
        return dyn.DiffResult(changes=bool(changed), replaces=replaces,
                              delete_before_replace=True)

    def update(self, _id: str, olds: dict, news: dict) -> dyn.UpdateResult:
        from google.cloud import compute_v1

        op = self._client().resize(
            project=news["project"], zone=news["zone"], reservation=news["name"],
            reservations_resize_request_resource=compute_v1.ReservationsResizeRequest(
                specific_sku_count=int(news["count"])))
        self._wait(op)
        return dyn.UpdateResult({**news, "self_link": self_link(news)})

    def delete(self, _id: str, props: dict) -> None:
        from google.api_core import exceptions

        try:
            op = self._client().delete(project=props["project"], zone=props["zone"],
                                       reservation=props["name"])
        except exceptions.NotFound:
            return  # already gone: success
        self._wait(op)


def _json(value: dict) -> str:
    import json

    return json.dumps(value)


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
