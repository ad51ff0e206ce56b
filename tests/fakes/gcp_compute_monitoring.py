"""A local HTTP fake of the Compute Engine and Cloud Monitoring REST APIs the reaper calls.

It stands in for the cloud only (no gpulease logic): aggregated instance list with a label
filter (with the NO_RESULTS_ON_PAGE warning entries the real list carries for empty zones),
aggregated MIG list, instances.get / setLabels (labelFingerprint precondition, 412 on
mismatch; label keys and values checked as Compute Engine checks them, 400 otherwise), zonal
MIG resize (removing instances above the new size; 404 for a MIG that does not exist),
reservations.get, and timeSeries.list with ALIGN_MAX / REDUCE_MAX grouped by instance id: its
filter is parsed clause by clause (metric.type, resource.type, resource.labels.KEY and
metadata.user_labels."KEY" equalities joined by AND; anything else is a 400 as a malformed filter
is), series keep the labels their VM had (also after it is deleted), points older than the
retention are gone, and pages hold at most ``pageSize`` points (FULL view; default 100,000), a
series that does not fit continuing on the next page. Points are published late, as Cloud
Monitoring documents per metric ("After sampling, data is not visible for up to N seconds"): a
point stamped later than the fake's ``clock`` minus ``delay_s`` (default :data:`VISIBLE_AFTER_S`;
tests set both) is not returned yet. MIGs may be zonal or regional; instances leave them by
resize or deleteInstances (the target size going down with them). Guest attributes
(instances.getGuestAttributes): a VM writes them through its metadata server only when its
metadata carries ``enable-guest-attributes: TRUE`` (:meth:`FakeGcp.write_guest_attribute`, the
node's side); a read of a path with no entry is a 404, a namespace with no entries an empty
``queryValue``.
Instance templates (instanceTemplates.get, global ones as the program declares them: their
``properties.labels`` are what the VMs get); listManagedInstances (each member's
``currentAction`` and ``instanceStatus``: :meth:`FakeGcp.preempt` stops or deletes a spot VM
and the MIG repairs it - ``RECREATING`` - until :meth:`FakeGcp.restore`; a MIG with
``stockout`` creates nothing on a resize up and lists the missing VMs as ``CREATING`` without a
status); instanceGroupManagers.patch of the ``allInstancesConfig`` only (a JSON merge patch:
a ``null`` label deletes it; label rules checked, 400 otherwise), which changes no VM (the
update policy is OPPORTUNISTIC: the configuration reaches new VMs only).
Faults can be injected per operation (``fake.faults["resize"] = [503]``); HTML pages, non-JSON
200s and throttling come from ``tests/fakes/fault_proxy.py`` in front of it. Resources can be
changed mid-run (:meth:`FakeGcp.scale_mig`, :meth:`FakeGcp.delete_mig`). Every request is
logged.
"""
from __future__ import annotations

import base64
import datetime as dt
import hashlib
import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional
from urllib.parse import parse_qs, urlparse

METRIC = "agent.googleapis.com/gpu/utilization"
_ids = itertools.count(4_100_000_000_000_000_001)
#: Compute Engine label rules ("Labels" requirements): at most 64 labels; keys start with a
#: lowercase letter, 1-63 chars of [a-z0-9_-]; values 0-63 chars of [a-z0-9_-].
MAX_LABELS = 64
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
#: a zone the fake always lists as empty, as the real aggregated list does for every zone.
EMPTY_ZONE = "us-central1-f"
#: time-series points older than this are deleted ("Time series data points are kept for 6
#: weeks", Cloud Monitoring quotas, Data retention - the documented floor).
RETENTION_S = 42 * 86400
#: timeSeries.list pageSize: in the FULL view the most points per response ("If pageSize is
#: empty or more than 100,000 results, the effective pageSize is 100,000 results").
MAX_PAGE_POINTS = 100_000
#: how long after sampling a point may stay invisible: the figure Google's metric lists give
#: for Compute Engine instance metrics ("Sampled every 60 seconds. After sampling, data is not
#: visible for up to 240 seconds."; docs/reaper.md, "Late metrics", says what was and was not
#: found for agent.googleapis.com/gpu/*).
VISIBLE_AFTER_S = 240
_CLAUSE = re.compile(r'\s*(metric\.type|resource\.type|resource\.labels?\.([a-z_]+)|'
                     r'metadata\.user_labels\."([a-z][a-z0-9_-]*)")\s*=\s*"([^"]*)"\s*')


def rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(ts: str) -> float:
    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def fingerprint(labels: dict) -> str:
    return base64.b64encode(hashlib.sha256(json.dumps(labels, sort_keys=True).encode())
                            .digest()[:8]).decode()


@dataclass
class FakeGcp:
    project: str = "acme-ml"
    instances: dict = field(default_factory=dict)      # (zone, name) -> instance JSON
    migs: dict = field(default_factory=dict)           # (zone, name) -> {"targetSize", "members"}
    reservations: dict = field(default_factory=dict)   # (zone, name) -> reservation JSON
    templates: dict = field(default_factory=dict)      # name -> instance template JSON
    points: list = field(default_factory=list)         # (instance_id, gpu, t, value)
    #: instance id -> the VM's labels as Monitoring keeps them with its series (kept after the
    #: VM is deleted: metadata.user_labels).
    series_labels: dict = field(default_factory=dict)
    #: timeSeries.list requests, as (filter, groupByFields, alignmentPeriod).
    series_queries: list = field(default_factory=list)
    #: "now" for the retention and the publication delay (epoch s); None = the wall clock.
    clock: Optional[float] = None
    #: publication delay (s): points younger than this are not visible yet.
    delay_s: float = VISIBLE_AFTER_S
    #: (zone, name) -> {"namespace/key": value}: what the VM wrote through its metadata server.
    guest_attributes: dict = field(default_factory=dict)
    #: (zone, name) -> the MIG's current action on that member ("RECREATING" after a
    #: preemption); absent = NONE for a running VM, CREATING while it is provisioned
    actions: dict = field(default_factory=dict)
    faults: dict = field(default_factory=dict)         # op -> [status, ...] returned first
    #: op -> [callable, ...]: each runs once, before the next such request is answered (the
    #: world changing mid-run: someone else's action between two of the reaper's calls)
    hooks: dict = field(default_factory=dict)
    log: list = field(default_factory=list)            # (method, path)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: Optional[ThreadingHTTPServer] = None

    # ---- building state (what a real project would hold) --------------------------------
    def add_mig(self, zone: str, name: str, size: int, *, labels: dict, launched: float,
                template: str = "tmpl", reservation: Optional[str] = None,
                regional: bool = False) -> list[str]:
        """A MIG of ``size`` VMs in ``zone``; ``regional``: a regional MIG of the zone's region
        (its key in ``migs`` is (region, name), its VMs are in ``zone``)."""
        where = zone.rsplit("-", 1)[0] if regional else zone
        scope = "regions" if regional else "zones"
        members = []
        for i in range(size):
            iname = f"{name}-{i:04d}"
            iid = str(next(_ids))
            inst = {
                "kind": "compute#instance", "id": iid, "name": iname, "status": "RUNNING",
                "zone": f"https://www.googleapis.com/compute/v1/projects/{self.project}/zones/{zone}",
                "creationTimestamp": rfc3339(launched), "lastStartTimestamp": rfc3339(launched),
                "labels": dict(labels), "labelFingerprint": fingerprint(labels),
                "metadata": {"items": [{"key": "created-by", "value":
                                        f"projects/123456789/{scope}/{where}/"
                                        f"instanceGroupManagers/{name}"}]},
            }
            if reservation:
                inst["reservationAffinity"] = {
                    "consumeReservationType": "SPECIFIC_RESERVATION",
                    "key": "compute.googleapis.com/reservation-name", "values": [reservation]}
            self.instances[(zone, iname)] = inst
            self.series_labels[iid] = dict(labels)
            members.append(iid)
        proto = {k: v for k, v in inst.items() if k in ("kind", "zone", "metadata",
                                                         "reservationAffinity")} if size else {
            "kind": "compute#instance", "metadata": {"items": [{"key": "created-by", "value":
                f"projects/123456789/{scope}/{where}/instanceGroupManagers/{name}"}]},
            "zone": f"https://www.googleapis.com/compute/v1/projects/{self.project}/zones/{zone}"}
        self.migs[(where, name)] = {"targetSize": size, "members": [
            (zone, f"{name}-{i:04d}") for i in range(size)], "instanceTemplate": template,
            "creationTimestamp": rfc3339(launched), "regional": regional,
            # what the instance template gives every VM it creates: its labels and metadata
            "proto": {**proto, "labels": dict(labels)}, "base_labels": dict(labels),
            "next": size}
        self.templates.setdefault(template, {"name": template})
        return members

    def add_template(self, name: str, *, labels: dict, provisioning: str = "STANDARD") -> None:
        """A global instance template whose VMs get ``labels`` (``properties.labels``)."""
        self.templates[name] = {
            "kind": "compute#instanceTemplate", "id": str(next(_ids)), "name": name,
            "selfLink": self.template_url(name),
            "properties": {"machineType": "g2-standard-8", "labels": dict(labels),
                           "scheduling": {"provisioningModel": provisioning}}}

    def template_url(self, name: str) -> str:
        return (f"https://www.googleapis.com/compute/v1/projects/{self.project}/global/"
                f"instanceTemplates/{name}")

    def preempt(self, zone: str, name: str, *, action: str = "STOP") -> None:
        """Compute Engine preempts a spot VM of a MIG: it is stopped (termination action STOP:
        TERMINATED) or deleted (DELETE), and the MIG repairs it by recreating it ("About
        repairing VMs in a MIG": preemption of a Spot VM is a failure the MIG repairs) - which,
        without spot capacity, it keeps trying."""
        if action == "DELETE":
            self.instances.pop((zone, name), None)
        else:
            self.instances[(zone, name)]["status"] = "TERMINATED"
        self.actions[(zone, name)] = "RECREATING"

    def restore(self, zone: str, name: str, *, launched: float) -> None:
        """Spot capacity is back: the MIG's repair of a preempted VM succeeds."""
        self.actions.pop((zone, name), None)
        inst = self.instances.get((zone, name))
        if inst is not None:
            inst["status"] = "RUNNING"
            return
        mig = next(m for m in self.migs.values() if (zone, name) in m["members"])
        inst = json.loads(json.dumps(mig["proto"]))
        inst.update({"id": str(next(_ids)), "name": name, "status": "RUNNING",
                     "labelFingerprint": fingerprint(inst["labels"]),
                     "creationTimestamp": rfc3339(launched),
                     "lastStartTimestamp": rfc3339(launched)})
        self.instances[(zone, name)] = inst
        self.series_labels[inst["id"]] = dict(inst["labels"])

    def scale_mig(self, zone: str, name: str, size: int, *, launched: float) -> list[str]:
        """Someone raises a MIG's target size (``zone``: its key, the region for a regional
        MIG): new instances from its instance template — its labels and metadata, never the
        reaper's marks or claims, which were set on instances, not on the template."""
        mig = self.migs[(zone, name)]
        proto = mig["proto"]
        vm_zone = proto["zone"].rsplit("/", 1)[-1]
        added = []
        for _ in range(len(mig["members"]), size):
            iname = f"{name}-{mig['next']:04d}"
            mig["next"] += 1
            iid = str(next(_ids))
            inst = json.loads(json.dumps(proto))
            inst.update({"id": iid, "name": iname, "status": "PROVISIONING",
                         "labelFingerprint": fingerprint(inst["labels"]),
                         "creationTimestamp": rfc3339(launched),
                         "lastStartTimestamp": rfc3339(launched)})
            self.instances[(vm_zone, iname)] = inst
            self.series_labels[iid] = dict(inst["labels"])
            mig["members"].append((vm_zone, iname))
            added.append(iid)
        mig["targetSize"] = size
        return added

    def delete_mig(self, zone: str, name: str) -> None:
        """Someone deletes a MIG (and with it its instances)."""
        mig = self.migs.pop((zone, name))
        for key in mig["members"]:
            self.instances.pop(key, None)

    def add_instance(self, zone: str, name: str, *, labels: dict, launched: float) -> str:
        iid = str(next(_ids))
        self.instances[(zone, name)] = {
            "kind": "compute#instance", "id": iid, "name": name, "status": "RUNNING",
            "zone": f"https://www.googleapis.com/compute/v1/projects/{self.project}/zones/{zone}",
            "creationTimestamp": rfc3339(launched), "labels": dict(labels),
            "labelFingerprint": fingerprint(labels)}
        self.series_labels[iid] = dict(labels)
        return iid

    def add_history(self, *, labels: dict) -> str:
        """A VM that ran in the past and is gone now (a burst node scaled away): only its
        time series remain, with the labels it had. Returns its instance id."""
        iid = str(next(_ids))
        self.series_labels[iid] = dict(labels)
        return iid

    def add_reservation(self, zone: str, name: str, machine_type: str, count: int) -> None:
        self.reservations[(zone, name)] = {
            "kind": "compute#reservation", "name": name, "zone": zone, "status": "READY",
            "specificReservation": {"count": str(count), "inUseCount": "0", "instanceProperties": {
                "machineType": machine_type}}}

    def put_points(self, instance_id: str, start: float, end: float, value: float,
                   step: float = 60.0, gpus: int = 1) -> None:
        t = start
        while t < end:
            for g in range(gpus):
                self.points.append((instance_id, g, t, value))
            t += step

    def enable_guest_attributes(self, zone: str, name: str) -> None:
        """The VM's metadata gets ``enable-guest-attributes: TRUE`` (its instance template's)."""
        items = self.instances[(zone, name)].setdefault("metadata", {}).setdefault("items", [])
        items.append({"key": "enable-guest-attributes", "value": "TRUE"})

    def write_guest_attribute(self, zone: str, name: str, path: str, value: str) -> None:
        """What the node does: PUT .../instance/guest-attributes/<namespace>/<key> on its
        metadata server. Refused (as the metadata server refuses) unless guest attributes are
        enabled in the VM's metadata."""
        inst = self.instances[(zone, name)]
        meta = {i["key"]: i["value"] for i in (inst.get("metadata") or {}).get("items", [])}
        if str(meta.get("enable-guest-attributes", "")).upper() != "TRUE":
            raise PermissionError(f"guest attributes are not enabled on {name}")
        if path.count("/") != 1 or not all(path.split("/")):
            raise ValueError(f"a guest attribute path is namespace/key, not {path!r}")
        self.guest_attributes.setdefault((zone, name), {})[path] = str(value)

    def labels_of(self, zone: str, name: str) -> dict:
        return dict(self.instances[(zone, name)]["labels"])

    @property
    def mutations(self) -> list:
        # (listManagedInstances is a POST that reads)
        return [(m, p) for m, p in self.log
                if m != "GET" and not p.endswith("/listManagedInstances")]

    # ---- HTTP -------------------------------------------------------------------------
    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                url = urlparse(self.path)
                q = {k: v if len(v) > 1 else v[0] for k, v in parse_qs(url.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                with fake.lock:
                    fake.log.append((method, url.path))
                    status, out = fake.route(method, url.path, q, body)
                self._reply(status, out)

            def do_GET(self):  # noqa: N802
                self._handle("GET")

            def do_POST(self):  # noqa: N802
                self._handle("POST")

            def do_DELETE(self):  # noqa: N802
                self._handle("DELETE")

            def do_PATCH(self):  # noqa: N802
                self._handle("PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    def _fault(self, op: str) -> Optional[tuple[int, dict]]:
        hooks = self.hooks.get(op)
        if hooks:
            hooks.pop(0)()
        queue = self.faults.get(op)
        if queue:
            status = queue.pop(0)
            if status is None:      # this request is answered normally (a later one fails)
                return None
            return status, {"error": {"code": status, "message": f"injected {status} on {op}",
                                      "errors": [{"reason": "rateLimitExceeded" if status == 429
                                                  else "backendError"}]}}
        return None

    @staticmethod
    def _op(kind: str, zone: str) -> dict:
        return {"kind": "compute#operation", "name": f"operation-{next(_ids)}", "status": "DONE",
                "operationType": kind, "zone": zone, "progress": 100}

    def route(self, method: str, path: str, q: dict, body: dict) -> tuple[int, dict]:
        p = self.project
        m = re.fullmatch(rf"/compute/v1/projects/{p}/aggregated/instances", path)
        if m and method == "GET":
            return self._fault("aggregatedList") or self._aggregated(q)
        m = re.fullmatch(rf"/compute/v1/projects/{p}/zones/([^/]+)/instances/([^/]+)/"
                         r"getGuestAttributes", path)
        if m and method == "GET":
            return self._fault("getGuestAttributes") or self._guest_attributes(*m.groups(), q)
        m = re.fullmatch(rf"/compute/v1/projects/{p}/zones/([^/]+)/instances/([^/]+)(/setLabels)?",
                         path)
        if m:
            zone, name, set_labels = m.groups()
            inst = self.instances.get((zone, name))
            if inst is None:
                return 404, {"error": {"code": 404, "message": f"instance {name} not found"}}
            if method == "GET" and not set_labels:
                return 200, inst
            if method == "POST" and set_labels:
                fault = self._fault("setLabels")
                if fault:
                    return fault
                if body.get("labelFingerprint") != inst["labelFingerprint"]:
                    return 412, {"error": {"code": 412, "message": "Labels fingerprint either "
                                           "invalid or resource labels have changed"}}
                bad = self._bad_labels(body.get("labels") or {})
                if bad:
                    return 400, {"error": {"code": 400, "message": bad, "errors": [
                        {"reason": "invalid", "message": bad}]}}
                inst["labels"] = dict(body.get("labels") or {})
                inst["labelFingerprint"] = fingerprint(inst["labels"])
                self.series_labels[inst["id"]] = dict(inst["labels"])
                return 200, self._op("setLabels", zone)
        m = re.fullmatch(rf"/compute/v1/projects/{p}/(zones|regions)/([^/]+)/instanceGroupManagers/"
                         r"([^/]+)/deleteInstances", path)
        if m and method == "POST":
            return self._fault("deleteInstances") or self._delete_instances(*m.groups(), body)
        m = re.fullmatch(rf"/compute/v1/projects/{p}/(zones|regions)/([^/]+)/instanceGroupManagers/"
                         r"([^/]+)/resize", path)
        if m and method == "POST":
            fault = self._fault("resize")
            if fault:
                return fault
            scope, zone, name = m.groups()
            mig = self.migs.get((zone, name))
            if mig is None or bool(mig.get("regional")) != (scope == "regions"):
                return 404, {"error": {"code": 404, "message": f"MIG {name} not found"}}
            if not re.fullmatch(r"[0-9]+", str(q.get("size", ""))):
                return 400, {"error": {"code": 400, "message": "Invalid value for field 'size': "
                                       f"'{q.get('size')}'. Must be greater than or equal to 0."}}
            size = int(q["size"])
            for key in mig["members"][size:]:
                self.instances.pop(key, None)
                self.actions.pop(key, None)
            mig["members"] = mig["members"][:size]
            if size > len(mig["members"]) and not mig.get("stockout"):
                # the MIG creates the VMs from its template (and all-instances configuration)
                self.scale_mig(zone, name, size, launched=self.clock or 0.0)
                for key in mig["members"]:
                    if self.instances.get(key, {}).get("status") == "PROVISIONING":
                        self.instances[key]["status"] = "RUNNING"
            mig["targetSize"] = size
            return 200, self._op("resize", zone)
        m = re.fullmatch(rf"/compute/v1/projects/{p}/(zones|regions)/([^/]+)/instanceGroupManagers/"
                         r"([^/]+)/listManagedInstances", path)
        if m and method == "POST":
            return self._fault("listManagedInstances") or self._managed(*m.groups(), q)
        m = re.fullmatch(rf"/compute/v1/projects/{p}/(zones|regions)/([^/]+)/instanceGroupManagers/"
                         r"([^/]+)", path)
        if m and method == "PATCH":
            return self._fault("patch") or self._patch_mig(*m.groups(), body)
        m = re.fullmatch(rf"/compute/v1/projects/{p}/global/instanceTemplates/([^/]+)", path)
        if m and method == "GET":
            t = self.templates.get(m.group(1))
            if t is None or "properties" not in t:
                return 404, {"error": {"code": 404, "message": f"The resource 'projects/{p}/"
                                       f"global/instanceTemplates/{m.group(1)}' was not found",
                                       "errors": [{"reason": "notFound", "domain": "global"}]}}
            return self._fault("instanceTemplates.get") or (200, t)
        m = re.fullmatch(rf"/compute/v1/projects/{p}/zones/([^/]+)/reservations/([^/]+)", path)
        if m and method == "GET":
            r = self.reservations.get(m.groups())
            return (200, r) if r else (404, {"error": {"code": 404, "message": "not found"}})
        m = re.fullmatch(rf"/compute/v1/projects/{p}/aggregated/instanceGroupManagers", path)
        if m and method == "GET":
            return self._fault("migAggregatedList") or self._mig_list(q)
        m = re.fullmatch(rf"/v3/projects/{p}/timeSeries", path)
        if m and method == "GET":
            return self._fault("timeSeries") or self._time_series(q)
        return 404, {"error": {"code": 404, "message": f"fake has no route {method} {path}"}}

    def _guest_attributes(self, zone: str, name: str, q: dict) -> tuple[int, dict]:
        """instances.getGuestAttributes: ``variableKey`` (one entry: its value) or
        ``queryPath`` (a namespace "ns/" or one entry "ns/key": the matching entries)."""
        inst = self.instances.get((zone, name))
        if inst is None:
            return 404, {"error": {"code": 404, "message": f"The resource 'projects/{self.project}"
                                   f"/zones/{zone}/instances/{name}' was not found"}}
        entries = self.guest_attributes.get((zone, name), {})
        base = {"kind": "compute#guestAttributes",
                "selfLink": f"https://www.googleapis.com/compute/v1/projects/{self.project}/zones/"
                            f"{zone}/instances/{name}/guestAttributes"}
        key, query = q.get("variableKey"), q.get("queryPath")
        missing = (404, {"error": {"code": 404, "message": f"The resource 'projects/{self.project}"
                                   f"/zones/{zone}/instances/{name}/guestAttributes/"
                                   f"{key or query}' was not found"}})
        if key:
            return (200, {**base, "variableKey": key, "variableValue": entries[key]}) \
                if key in entries else missing
        query = str(query or "")
        if query and not query.endswith("/") and query not in entries:
            return missing
        items = [{"namespace": k.split("/", 1)[0], "key": k.split("/", 1)[1], "value": v}
                 for k, v in sorted(entries.items())
                 if not query or k == query or k.startswith(query)]
        return 200, {**base, "queryPath": query,
                     "queryValue": {"items": items} if items else {}}

    @staticmethod
    def _bad_labels(labels: dict) -> Optional[str]:
        if len(labels) > MAX_LABELS:
            return f"Invalid value for field 'labels': at most {MAX_LABELS} labels"
        for k, v in labels.items():
            if not _LABEL_KEY.fullmatch(str(k)):
                return f"Invalid value for field 'labels': label key '{k}' violates format"
            if not isinstance(v, str) or not _LABEL_VALUE.fullmatch(v):
                return f"Invalid value for field 'labels': label value '{v}' violates format"
        return None

    def _delete_instances(self, scope: str, where: str, name: str,
                          body: dict) -> tuple[int, dict]:
        """instanceGroupManagers.deleteInstances / regionInstanceGroupManagers.deleteInstances
        as the API reference describes them: at most 1000 instance URLs (full or
        ``zones/Z/instances/NAME``); a malformed URL or an instance outside the group's zone
        (region) always fails the request; an instance that is not a member fails it unless
        skipInstancesOnValidationError; the target size goes down by the instances deleted."""
        mig = self.migs.get((where, name))
        if mig is None or bool(mig.get("regional")) != (scope == "regions"):
            return 404, {"error": {"code": 404, "message": f"The resource 'projects/"
                                   f"{self.project}/{scope}/{where}/instanceGroupManagers/{name}'"
                                   " was not found"}}
        urls = body.get("instances")
        skip = bool(body.get("skipInstancesOnValidationError", False))

        def bad(msg: str) -> tuple[int, dict]:
            return 400, {"error": {"code": 400, "message": msg, "errors": [
                {"reason": "invalid", "message": msg}]}}
        if not isinstance(urls, list) or not urls:
            return bad("Invalid value for field 'resource.instances': the list of instances "
                       "to delete is empty")
        if len(urls) > 1000:
            return bad("Invalid value for field 'resource.instances': at most 1000 instances")
        picked = []
        for url in urls:
            m = re.search(r"(?:^|/)zones/([a-z0-9-]+)/instances/([a-z0-9-]+)$", str(url))
            if not m:
                return bad(f"Invalid value for field 'resource.instances': '{url}'. The URL is "
                           "malformed.")
            zone, iname = m.groups()
            inside = zone == where if scope == "zones" else zone.rsplit("-", 1)[0] == where
            if not inside:
                return bad(f"Invalid value for field 'resource.instances': '{url}'. Instance is "
                           f"not in the {scope[:-1]} of the instance group manager.")
            if (zone, iname) not in mig["members"]:
                if skip:
                    continue
                return bad(f"Invalid value for field 'resource.instances': '{url}'. The "
                           f"instance is not a member of the instance group manager {name}.")
            picked.append((zone, iname))
        for key in picked:
            self.instances.pop(key, None)
        mig["members"] = [k for k in mig["members"] if k not in picked]
        mig["targetSize"] = max(0, mig["targetSize"] - len(picked))
        return 200, self._op("deleteInstances", where)

    def _mig_list(self, q: dict) -> tuple[int, dict]:
        items: dict = {}
        for (zone, name), mig in sorted(self.migs.items()):
            scope = "regions" if mig.get("regional") else "zones"
            items.setdefault(f"{scope}/{zone}", {"instanceGroupManagers": []})[
                "instanceGroupManagers"].append({
                    "kind": "compute#instanceGroupManager", "name": name,
                    scope[:-1]: f"https://www.googleapis.com/compute/v1/projects/"
                                f"{self.project}/{scope}/{zone}",
                    "targetSize": mig["targetSize"],
                    "creationTimestamp": mig.get("creationTimestamp", rfc3339(0)),
                    "instanceTemplate": self.template_url(mig["instanceTemplate"]),
                    "versions": [{"instanceTemplate":
                                  self.template_url(mig["instanceTemplate"])}],
                    **({"allInstancesConfig": mig["allInstancesConfig"]}
                       if "allInstancesConfig" in mig else {}),
                    "updatePolicy": {"type": "OPPORTUNISTIC"},
                    "baseInstanceName": name, "status": {"isStable": True}})
        items[f"zones/{EMPTY_ZONE}"] = {"warning": {
            "code": "NO_RESULTS_ON_PAGE", "message": "There are no results for scope "
            f"'zones/{EMPTY_ZONE}' on this page.", "data": [{"key": "scope",
                                                             "value": f"zones/{EMPTY_ZONE}"}]}}
        return 200, {"kind": "compute#instanceGroupManagerAggregatedList", "items": items}

    def _mig_or_404(self, scope: str, where: str, name: str):
        mig = self.migs.get((where, name))
        if mig is None or bool(mig.get("regional")) != (scope == "regions"):
            return None, (404, {"error": {"code": 404, "message": f"The resource 'projects/"
                                          f"{self.project}/{scope}/{where}/instanceGroupManagers/"
                                          f"{name}' was not found"}})
        return mig, None

    def _managed(self, scope: str, where: str, name: str, q: dict) -> tuple[int, dict]:
        """listManagedInstances: one entry per member (and, with a stockout, one per VM the
        MIG is still trying to create: CREATING, no instance yet), in pages of maxResults."""
        mig, err = self._mig_or_404(scope, where, name)
        if err:
            return err
        out = []
        for zone, iname in mig["members"]:
            inst = self.instances.get((zone, iname))
            entry = {"instance": f"https://www.googleapis.com/compute/v1/projects/"
                                 f"{self.project}/zones/{zone}/instances/{iname}",
                     "name": iname}
            action = self.actions.get((zone, iname))
            if inst is not None:
                entry.update(id=inst["id"], instanceStatus=inst["status"])
                action = action or ("CREATING" if inst["status"] in ("PROVISIONING", "STAGING")
                                    else "NONE")
            entry["currentAction"] = action or "CREATING"
            out.append(entry)
        for _ in range(len(mig["members"]), mig["targetSize"]):
            out.append({"currentAction": "CREATING"})      # no capacity: keeps trying
        size = int(q.get("maxResults", 500))
        if not 0 <= size <= 500:
            return 400, {"error": {"code": 400, "message": "Invalid value for field "
                                   f"'maxResults': {size}. Must be in [0, 500]."}}
        start = int(q.get("pageToken", 0) or 0)
        body = {"managedInstances": out[start:start + size]} if out[start:start + size] else {}
        if start + size < len(out):
            body["nextPageToken"] = str(start + size)
        return 200, body

    def _patch_mig(self, scope: str, where: str, name: str, body: dict) -> tuple[int, dict]:
        """instanceGroupManagers.patch, a JSON merge patch (RFC 7386), of the one field the
        fake models: allInstancesConfig.properties.labels / .metadata (a null deletes a key)."""
        mig, err = self._mig_or_404(scope, where, name)
        if err:
            return err
        if set(body) - {"allInstancesConfig"}:
            return 400, {"error": {"code": 400, "message": f"fake: patch of "
                                   f"{sorted(set(body) - {'allInstancesConfig'})} not modelled"}}
        aic = body.get("allInstancesConfig")
        if aic is None:
            mig.pop("allInstancesConfig", None)
            return 200, self._op("patch", where)
        props = aic.get("properties") if isinstance(aic, dict) else None
        if not isinstance(props, dict) or set(props) - {"labels", "metadata"}:
            return 400, {"error": {"code": 400, "message": "Invalid value for field "
                                   "'resource.allInstancesConfig.properties'"}}
        cur = mig.setdefault("allInstancesConfig", {"properties": {}})["properties"]
        new = {k: dict(cur.get(k, {})) for k in ("labels", "metadata")}
        for k in ("labels", "metadata"):
            for key, value in (props.get(k) or {}).items():
                if value is None:
                    new[k].pop(key, None)
                else:
                    new[k][key] = value
        bad = self._bad_labels(new["labels"])
        if bad:
            return 400, {"error": {"code": 400, "message": bad, "errors": [
                {"reason": "invalid", "message": bad}]}}
        cur.clear()
        cur.update({k: v for k, v in new.items() if v})
        # new VMs get it (OPPORTUNISTIC: running ones keep what they have)
        mig["proto"]["labels"] = {**mig["base_labels"], **new["labels"]}
        return 200, self._op("patch", where)

    def _aggregated(self, q: dict) -> tuple[int, dict]:
        flt = q.get("filter", "")
        want = re.fullmatch(r"labels\.([a-z0-9_-]+):\*", flt.strip()) if flt else None
        if flt and not want:
            return 400, {"error": {"code": 400, "message": f"fake: unsupported filter {flt!r}"}}
        keys = sorted(k for k, inst in self.instances.items()
                      if not want or want.group(1) in inst["labels"])
        size = int(q.get("maxResults", 500))
        start = int(q.get("pageToken", 0) or 0)
        page = keys[start:start + size]
        items: dict = {}
        for zone, name in page:
            items.setdefault(f"zones/{zone}", {"instances": []})["instances"].append(
                self.instances[(zone, name)])
        items.setdefault(f"zones/{EMPTY_ZONE}", {"warning": {
            "code": "NO_RESULTS_ON_PAGE", "message": "There are no results for scope "
            f"'zones/{EMPTY_ZONE}' on this page.", "data": [{"key": "scope",
                                                             "value": f"zones/{EMPTY_ZONE}"}]}})
        out = {"kind": "compute#instanceAggregatedList", "items": items}
        if start + size < len(keys):
            out["nextPageToken"] = str(start + size)
        return 200, out

    @staticmethod
    def _filter(text: str) -> Optional[dict]:
        """{selector: value} of a filter of ``a = "b"`` clauses joined by AND; None = malformed."""
        out = {}
        for clause in re.split(r"\s+AND\s+", text.strip()):
            m = _CLAUSE.fullmatch(clause)
            if not m:
                return None
            key = (f"resource.labels.{m.group(2)}" if m.group(2) else
                   f"user:{m.group(3)}" if m.group(3) else m.group(1))
            out[key] = m.group(4)
        return out

    def _time_series(self, q: dict) -> tuple[int, dict]:
        flt = self._filter(q.get("filter", ""))
        group_by = q.get("aggregation.groupByFields", [])
        group_by = [group_by] if isinstance(group_by, str) else list(group_by)
        self.series_queries.append((q.get("filter", ""), tuple(group_by),
                                    q.get("aggregation.alignmentPeriod")))
        if flt is None or "metric.type" not in flt:
            return 400, {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message":
                                   f"Field filter had an invalid value of \"{q.get('filter')}\""}}
        if flt["metric.type"] != METRIC or flt.get("resource.type", "gce_instance") != \
                "gce_instance":
            return 200, {}
        if group_by != ["resource.label.instance_id"]:
            return 400, {"error": {"code": 400, "message": f"fake: unsupported groupByFields "
                                   f"{group_by}"}}
        start, end = _parse(q["interval.startTime"]), _parse(q["interval.endTime"])
        period = float(q.get("aggregation.alignmentPeriod", "60s").rstrip("s"))
        zone_of = {inst["id"]: zone for (zone, _), inst in self.instances.items()}
        wanted = {k[5:]: v for k, v in flt.items() if k.startswith("user:")}
        now = self.clock if self.clock is not None else dt.datetime.now().timestamp()
        oldest, newest = now - RETENTION_S, now - self.delay_s
        grouped: dict = {}
        for iid, _, t, v in self.points:
            labels = self.series_labels.get(iid, {})
            if any(labels.get(k) != want for k, want in wanted.items()):
                continue
            if t < oldest or t > newest:
                continue
            if start < t <= end:
                # Buckets aligned on the interval's end: (end - (k+1)p, end - kp].
                k = int((end - t) // period)
                b_end = end - k * period
                cell = grouped.setdefault(iid, {})
                cell[b_end] = max(cell.get(b_end, v), v)
        series = []
        for iid in sorted(grouped):
            pts = [{"interval": {"startTime": rfc3339(e), "endTime": rfc3339(e)},
                    "value": {"doubleValue": val}}
                   for e, val in sorted(grouped[iid].items(), reverse=True)]
            series.append({"metric": {"type": METRIC}, "metricKind": "GAUGE",
                           "valueType": "DOUBLE",
                           "resource": {"type": "gce_instance", "labels": {
                               "project_id": self.project, "instance_id": iid,
                               "zone": zone_of.get(iid, "")}}, "points": pts})
        size = min(int(q.get("pageSize", MAX_PAGE_POINTS)), MAX_PAGE_POINTS)
        # The token is (series index, point index) to resume at.
        si, pi = (int(x) for x in (q.get("pageToken") or "0.0").split("."))
        page, budget = [], size
        while si < len(series) and budget > 0:
            pts = series[si]["points"][pi:pi + budget]
            page.append({**series[si], "points": pts})
            budget -= len(pts)
            pi += len(pts)
            if pi >= len(series[si]["points"]):
                si, pi = si + 1, 0
        out = {"timeSeries": page}
        if si < len(series):
            out["nextPageToken"] = f"{si}.{pi}"
        return 200, out
