"""GCP adaptor of the reaper: labelled instances, Cloud Monitoring GPU utilization, MIG resize.

Clients are created in :func:`clients` (the one place) and passed in. Endpoint override for
emulators and the tests' local fake: ``GPULEASE_GCP_ENDPOINT=http://127.0.0.1:PORT`` (both the
Compute and the Monitoring REST APIs are then called there, without credentials).
Compute uses google-cloud-compute's REST transport; Monitoring uses its REST API
(``projects.timeSeries.list``) directly, because google-cloud-monitoring ships gRPC transports
only. The deadline step reads progress documents with google-cloud-storage
(``$GPULEASE_GCS_ENDPOINT`` overrides its endpoint, else the one above) and patches a MIG's
all-instances configuration over REST (:class:`ComputeRest`: a JSON merge patch deletes a label
with ``null``, which the SDK's typed map cannot carry). :meth:`GcpReaper._call` is the one boundary: SDK errors, HTML or non-JSON answers
(a 200 from a proxy or captive portal included) become :mod:`gpulease.reaper.errors` types there
and nowhere else. google-api-core's own retries are switched off on every call (``retry=None``;
its defaults retry list/get calls for up to 600 s), so every retry goes through
:class:`gpulease.retry.Backoff` and is counted once.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence

from gpulease import tags
from gpulease.clock import format_utc
from gpulease.clouds.gcp.cloud import mig_name
from gpulease.errors import CloudError
from gpulease.purchase import ON_DEMAND, SPOT
from gpulease.reaper.claims import Claim, expired, token_of
from gpulease.reaper.decision import (ClusterRef, DeadlineRef, Membership, Node, combined_tags,
                                      undeclared)
from gpulease.reaper.engine import Reservation
from gpulease.reaper.errors import GroupGone, MalformedResponse, TransientError
from gpulease.retry import Backoff

#: Ops Agent NVML metric (percent, per GPU; DOMAIN.md).
METRIC = "agent.googleapis.com/gpu/utilization"
#: Compute sets this metadata key on every instance a MIG creates ("Instances created by a
#: managed instance group have the created-by metadata key", Compute Engine docs, MIGs).
CREATED_BY = "created-by"
_LIVE = ("PROVISIONING", "STAGING", "RUNNING")
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
ENDPOINT_ENV = "GPULEASE_GCP_ENDPOINT"
#: the Cloud Storage endpoint of an emulator / the tests' fake (default: $GPULEASE_GCP_ENDPOINT)
STORAGE_ENDPOINT_ENV = "GPULEASE_GCS_ENDPOINT"
#: google-cloud-storage (3.17) otherwise starts a thread per new bucket that calls buckets.get
#: for tracing attributes: a call the reaper's identity may not make (storage.objects.get only).
_NO_BUCKET_METADATA = ("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")
#: listManagedInstances (Compute API, ManagedInstance): a member in service runs with nothing
#: scheduled; a spot member the MIG is replacing after a preemption. A preempted Spot VM is
#: stopped (termination action STOP) or deleted (DELETE), and "if a VM in a MIG fails, the MIG
#: automatically repairs the failed VM by recreating it", preemption included (Compute Engine,
#: "About repairing VMs in a MIG"): currentAction RECREATING, or a stopped VM not yet picked up.
_IN_SERVICE = ("NONE", "RUNNING")
_REPAIRING = frozenset({"RECREATING"})
_STOPPED = frozenset({"STOPPING", "STOPPED", "TERMINATED"})
_LEAVING = frozenset({"DELETING", "ABANDONING"})       # the MIG removing it: not a preemption
#: per-request timeout (s); no SDK-level retry (see the module docstring).
TIMEOUT_S = 30.0
_NO_RETRY = {"retry": None, "timeout": TIMEOUT_S}


def clients(project: str, endpoint: Optional[str] = None,
            storage_endpoint: Optional[str] = None) -> dict:
    """Compute + Monitoring + Storage clients; ``endpoint`` (or $GPULEASE_GCP_ENDPOINT) = an
    emulator, ``storage_endpoint`` (or $GPULEASE_GCS_ENDPOINT, else ``endpoint``) its Storage."""
    from google.cloud import compute_v1, storage

    endpoint = endpoint or os.environ.get(ENDPOINT_ENV)
    kinds = {"instances": (compute_v1.InstancesClient, "InstancesRestTransport"),
             "migs": (compute_v1.InstanceGroupManagersClient, "InstanceGroupManagersRestTransport"),
             "region_migs": (compute_v1.RegionInstanceGroupManagersClient,
                             "RegionInstanceGroupManagersRestTransport"),
             "reservations": (compute_v1.ReservationsClient, "ReservationsRestTransport"),
             "templates": (compute_v1.InstanceTemplatesClient,
                           "InstanceTemplatesRestTransport")}
    out: dict = {}
    os.environ.setdefault(*_NO_BUCKET_METADATA)
    if endpoint:
        import importlib

        from google.auth.credentials import AnonymousCredentials

        scheme, _, host = endpoint.partition("://")
        for key, (cls, tname) in kinds.items():
            mod = importlib.import_module(cls.__module__.rsplit(".", 1)[0] + ".transports.rest")
            transport = getattr(mod, tname)(host=host, url_scheme=scheme,
                                            credentials=AnonymousCredentials())
            out[key] = cls(transport=transport)
        import requests

        out["monitoring"] = MonitoringRest(requests.Session(), endpoint)
        out["compute_rest"] = ComputeRest(requests.Session(), endpoint)
        out["storage"] = storage.Client(
            project=project, credentials=AnonymousCredentials(), client_options={
                "api_endpoint": storage_endpoint or os.environ.get(STORAGE_ENDPOINT_ENV)
                or endpoint})
    else:
        for key, (cls, _) in kinds.items():
            out[key] = cls()
        import google.auth
        from google.auth.transport.requests import AuthorizedSession

        creds, _ = google.auth.default(
            scopes=["https://www.googleapis.com/auth/monitoring.read"])
        out["monitoring"] = MonitoringRest(AuthorizedSession(creds),
                                           "https://monitoring.googleapis.com")
        compute, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/compute"])
        out["compute_rest"] = ComputeRest(AuthorizedSession(compute),
                                          "https://compute.googleapis.com")
        out["storage"] = storage.Client(project=project)
    return out


@dataclass
class ComputeRest:
    """instanceGroupManagers.patch / regionInstanceGroupManagers.patch over REST: "PATCH
    semantics and the JSON merge patch format" (Compute API reference), where a key is deleted
    by sending it as ``null`` (what ``gcloud compute instance-groups managed all-instances-config
    delete --labels=KEY`` sends). google-cloud-compute's InstanceGroupManager types the labels
    as a string map and cannot carry that null."""

    session: Any
    base_url: str

    def patch_mig(self, project: str, scope: str, where: str, name: str, body: dict) -> dict:
        url = (f"{self.base_url}/compute/v1/projects/{project}/{scope}/{where}/"
               f"instanceGroupManagers/{name}")
        resp = self.session.request("PATCH", url, json=body, timeout=TIMEOUT_S)
        where_ = f"{project} compute.instanceGroupManagers.patch"
        op = _json_reply(resp, where_, "Compute Engine")
        if op.get("kind") != "compute#operation":
            raise MalformedResponse("gcp", where_, "HTTP 200 without an operation")
        return op


class HttpStatusError(Exception):
    def __init__(self, status: int, message: str):
        self.code = status
        super().__init__(f"HTTP {status}: {message}")


def _json_reply(resp, where: str, service: str) -> dict:
    """A REST answer's JSON object: HttpStatusError for a non-200 (its status kept for the
    retry policy), MalformedResponse for a body that is not a JSON object."""
    if resp.status_code != 200:
        raise HttpStatusError(resp.status_code, " ".join(resp.text[:300].split()))
    try:
        body = resp.json()
    except ValueError:
        raise MalformedResponse("gcp", where, f"HTTP 200 with a non-JSON body "
                                f"({resp.headers.get('content-type', '?')}): not from "
                                f"{service} (a proxy or captive portal?)") from None
    if not isinstance(body, dict):
        raise MalformedResponse("gcp", where, f"HTTP 200 with a JSON "
                                f"{type(body).__name__}, not an object")
    return body


@dataclass
class MonitoringRest:
    """`projects.timeSeries.list` over REST (https://cloud.google.com/monitoring/api/ref_v3/rest)."""

    session: Any
    base_url: str

    def list_time_series(self, project: str, *, filter: str, start: float, end: float,
                         period_s: int, group_by: Sequence[str],
                         guard: Callable[[Callable[[], dict]], dict] = lambda get: get()
                         ) -> Iterator[dict]:
        """The answer pages of one listing (each the API's JSON object), through
        google-api-core's HTTP page iterator (it sends ``pageToken`` back until the answer has
        no ``nextPageToken``). Each page's request runs inside ``guard`` (the reaper's checked,
        counted, retried call), so a failed page is asked again alone."""
        from google.api_core.page_iterator import HTTPIterator

        params = {"filter": filter, "interval.startTime": format_utc(start),
                  "interval.endTime": format_utc(end),
                  "aggregation.alignmentPeriod": f"{period_s}s",
                  "aggregation.perSeriesAligner": "ALIGN_MAX",
                  "aggregation.crossSeriesReducer": "REDUCE_MAX",
                  "aggregation.groupByFields": list(group_by), "view": "FULL"}
        where = f"{project} monitoring.timeSeries.list"

        def get_page(method: str, path: str, query_params: dict) -> dict:
            resp = self.session.get(f"{self.base_url}{path}", params=query_params, timeout=30)
            body = _json_reply(resp, where, "Cloud Monitoring")
            token = body.get("nextPageToken")
            if token is not None and not isinstance(token, str):
                raise MalformedResponse("gcp", where, "nextPageToken is not a string")
            if token and token == query_params.get("pageToken"):
                raise MalformedResponse("gcp", where, "the same nextPageToken was answered "
                                        "twice (the listing would never end)")
            if not token:
                # "If there are more results than have been returned, then this field is set
                # to a non-empty value" (timeSeries.list reference): empty = the last page. The
                # iterator would send an empty token back, so it is dropped here.
                body.pop("nextPageToken", None)
            return body

        pages = HTTPIterator(
            client=None, path=f"/v3/projects/{project}/timeSeries", items_key="timeSeries",
            api_request=lambda **kw: guard(lambda: get_page(**kw)),
            item_to_value=lambda _iterator, series: series, extra_params=params).pages
        for page in pages:
            yield page.raw_page


def _status(exc: BaseException) -> int:
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return code
    resp = getattr(exc, "response", None)
    return int(getattr(resp, "status_code", 0) or 0)


def _retryable(exc: BaseException) -> bool:
    import requests
    from google.protobuf.json_format import ParseError

    if isinstance(exc, (TransientError, ParseError, requests.ConnectionError, requests.Timeout,
                        requests.exceptions.InvalidJSONError)):
        return True  # throttling/5xx below; unparseable bodies and dropped connections here
    return _status(exc) in _RETRY_STATUS


def _describe(exc: BaseException) -> str:
    from google.protobuf.json_format import ParseError

    if isinstance(exc, ParseError):
        return ("HTTP 200 with a body that is not the API's JSON (an HTML page or a truncated "
                f"answer: a gateway or proxy answered?): {' '.join(str(exc).split())[:120]}")
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _ts(value: str) -> float:
    from gpulease.clock import parse_epoch

    return parse_epoch(value)


def _tail(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class _Instance:
    zone: str
    name: str
    labels: dict
    fingerprint: str


class GcpReaper:
    """Discovery and actions in one GCP project (all zones, through aggregated list)."""

    cloud = "gcp"

    def __init__(self, *, project: str, instances: Any, migs: Any, region_migs: Any,
                 reservations: Any, monitoring: MonitoringRest, templates: Any = None,
                 storage: Any = None, compute_rest: Optional[ComputeRest] = None,
                 backoff: Optional[Backoff] = None):
        self.project = project
        self.label = project
        self.instances, self.migs, self.region_migs = instances, migs, region_migs
        self.reservations_client, self.monitoring = reservations, monitoring
        self.templates, self.storage, self.compute_rest = templates, storage, compute_rest
        #: instance template URL -> its properties.labels (None: gone), per run (immutable)
        self._template_labels: dict[str, Optional[dict]] = {}
        self.backoff = backoff or Backoff()
        self.calls: Counter = Counter()
        self._known: dict[str, _Instance] = {}
        self._affinity: dict[tuple, set] = {}
        #: groups (MIGs, or lone VMs) labelled like a cluster but not declared by the program,
        #: as discovery last found them (:func:`gpulease.reaper.decision.undeclared`).
        self.undeclared: list[dict] = []

    @classmethod
    def for_project(cls, project: str, endpoint: Optional[str] = None,
                    storage_endpoint: Optional[str] = None, **kw: Any) -> "GcpReaper":
        return cls(project=project, **clients(project, endpoint, storage_endpoint), **kw)

    def _call(self, op: str, fn: Any) -> Any:
        from google.api_core.exceptions import GoogleAPICallError
        from google.protobuf.json_format import ParseError
        import requests

        where = f"{self.project} {op}"

        def once():
            self.calls[op] += 1
            try:
                return fn()
            except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
                if isinstance(exc, (ParseError, requests.RequestException)):
                    raise
                raise MalformedResponse("gcp", where, f"an answer lacks what the API documents "
                                        f"({type(exc).__name__}: {exc})") from None
        try:
            return self.backoff.call(once, retryable=_retryable)
        except CloudError as exc:
            raise type(exc)("gcp", where, f"{exc.args[0].split(': ', 2)[-1]}"
                            f"{self._gave_up(exc)}", status=exc.status) from None
        except (GoogleAPICallError, HttpStatusError, ParseError, requests.RequestException) as exc:
            cls = TransientError if _retryable(exc) else CloudError
            raise cls("gcp", where, _describe(exc) + self._gave_up(exc),
                      retryable=_retryable(exc), status=_status(exc) or None) from None

    def _gave_up(self, exc: BaseException) -> str:
        return f" (gave up after {self.backoff.attempts} attempts)" if _retryable(exc) else ""

    # ---- discovery ----------------------------------------------------------------------
    def _list(self, label: str) -> list:
        """Every instance carrying ``label`` in the project: (zone, instance), one paged call."""
        req = {"project": self.project, "filter": f"labels.{label}:*", "max_results": 500}
        found: list = []

        def list_all():
            found.clear()
            for zone_key, scoped in self.instances.aggregated_list(request=req, **_NO_RETRY):
                for inst in scoped.instances:
                    found.append((_tail(inst.zone) or _tail(zone_key), inst))
        self._call("compute.instances.aggregatedList", list_all)
        return found

    def _grouped(self, environments: Optional[frozenset],
                 record: bool = False) -> dict[tuple, list]:
        """Live instances by (environment, cluster), those the program declared only (the
        label tags.DECLARED from the instance template; the node service account cannot set
        labels). ``record``: the others go to ``self.undeclared``, one entry per MIG (or VM)."""
        by_cluster: dict[tuple, list] = {}
        foreign: dict[tuple, list] = {}
        for zone, inst in self._list(tags.CLUSTER):
            labels = dict(inst.labels)
            cluster, env = labels.get(tags.CLUSTER), labels.get(tags.ENVIRONMENT)
            if not cluster or not env or cluster == tags.SHARED or inst.status not in _LIVE:
                continue
            if environments is not None and env not in environments:
                continue
            if not tags.is_declared(labels, env, cluster):
                meta = {i.key: i.value for i in inst.metadata.items} if inst.metadata else {}
                group = meta.get(CREATED_BY) or f"projects/{self.project}/zones/{zone}/" \
                    f"instances/{inst.name}"
                foreign.setdefault((env, cluster, group), []).append(labels)
                continue
            by_cluster.setdefault((env, cluster), []).append((zone, inst))
        if record:
            self.undeclared = [undeclared(
                cloud="gcp", region=self.project, environment=env, cluster=cluster,
                group=group, nodes=len(seen), group_tags=seen[0])
                for (env, cluster, group), seen in sorted(foreign.items())]
        return by_cluster

    def discover(self, environments: Optional[frozenset]) -> list[ClusterRef]:
        self._known.clear()
        self._affinity.clear()
        refs = []
        grouped = self._grouped(environments, record=True)
        # the MIGs' creation times (the first-job grace runs from them), one aggregated list
        migs = self._migs() if grouped else {}
        for (env, cluster), insts in sorted(grouped.items()):
            try:
                refs.append(self._ref(env, cluster, insts, migs))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise MalformedResponse("gcp", f"{self.project} compute.instances."
                                        "aggregatedList", f"an instance lacks what the API "
                                        f"documents ({type(exc).__name__}: {exc})") from None
        return refs

    def _ref(self, env: str, cluster: str, insts: list, migs: dict) -> ClusterRef:
        nodes, groups = [], set()
        zones = set()
        sizes: dict[str, int] = {}
        floors: dict[str, list] = {}
        paid: dict[str, list] = {}
        created: list = []
        marks: dict[str, str] = {}
        for zone, inst in insts:
            zones.add(zone)
            self._known[str(inst.id)] = _Instance(zone, inst.name, dict(inst.labels),
                                                   inst.label_fingerprint)
            started = inst.last_start_timestamp or inst.creation_timestamp
            meta = {i.key: i.value for i in inst.metadata.items} if inst.metadata else {}
            nodes.append(Node(id=str(inst.id), launched_at=_ts(started) if started
                              else None, location=zone, group=meta.get(CREATED_BY, ""),
                              name=inst.name, witness=tags.BUSY_WITNESS in inst.labels))
            if tags.NODE_IDLE_SINCE in inst.labels:
                marks[str(inst.id)] = inst.labels[tags.NODE_IDLE_SINCE]
            if meta.get(CREATED_BY):
                groups.add(meta[CREATED_BY])
                sizes[meta[CREATED_BY]] = sizes.get(meta[CREATED_BY], 0) + 1
                # The baseline label comes from the MIG's instance template, so every VM of
                # the group carries the group's floor.
                if tags.BASELINE_NODES in inst.labels:
                    floors.setdefault(meta[CREATED_BY], []).append(
                        inst.labels[tags.BASELINE_NODES])
                if tags.BILLED_UNTIL in inst.labels:
                    paid.setdefault(meta[CREATED_BY], []).append(inst.labels[tags.BILLED_UNTIL])
                mig = migs.get(_mig_key(meta[CREATED_BY]))
                created.append(mig[1] if mig and mig[1] is not None else
                               (_ts(inst.creation_timestamp) if inst.creation_timestamp
                                else None))
            elif inst.creation_timestamp:
                created.append(_ts(inst.creation_timestamp))
            aff = inst.reservation_affinity
            if aff and aff.consume_reservation_type == "SPECIFIC_RESERVATION":
                for name in aff.values:
                    self._affinity.setdefault((env, cluster), set()).add((zone, _tail(name)))
        merged = combined_tags([dict(i.labels) for _, i in insts])
        region = sorted(zones)[0].rsplit("-", 1)[0]
        known = [c for c in created if c is not None]
        return ClusterRef(cloud="gcp", region=region, environment=env, cluster=cluster,
                          groups=tuple(sorted(groups)), nodes=tuple(nodes), tags=merged,
                          capacity=len(nodes), group_nodes=sizes,
                          baseline_tags={g: tuple(v) for g, v in floors.items()},
                          billed_tags={g: tuple(v) for g, v in paid.items()},
                          created_at=min(known) if known else None, node_marks=marks)

    def busy_witness(self, nodes: Sequence[Node]) -> dict[str, Optional[str]]:
        """The busy witness of these nodes: the guest attribute tags.BUSY_AT_GUEST_ATTRIBUTE
        each node writes through its metadata server, read with instances.getGuestAttributes
        (one call per node: the API reads one instance). {id: value, or None when the node has
        none — a 404 (no such entry, or the instance is gone) or an answer without it}."""
        return self._guest_attribute(nodes, tags.BUSY_AT_GUEST_ATTRIBUTE)

    def leave_requests(self, nodes: Sequence[Node]) -> dict[str, Optional[str]]:
        """The nodes' leave requests: the guest attribute tags.LEAVE_REQUESTED_GUEST_ATTRIBUTE
        each node writes through its own metadata server (no IAM permission: the node service
        account holds none on its MIG), one instances.getGuestAttributes call per node."""
        return self._guest_attribute(nodes, tags.LEAVE_REQUESTED_GUEST_ATTRIBUTE)

    def _guest_attribute(self, nodes: Sequence[Node], path: str) -> dict[str, Optional[str]]:
        from google.api_core.exceptions import NotFound

        namespace, key = path.split("/", 1)
        out: dict[str, Optional[str]] = {}
        for n in sorted(nodes, key=lambda x: x.id):
            def get(n=n):
                try:
                    return self.instances.get_guest_attributes(request={
                        "project": self.project, "zone": n.location,
                        "instance": n.name or n.id,
                        "query_path": path}, **_NO_RETRY)
                except NotFound:
                    return None
            got = self._call("compute.instances.getGuestAttributes", get)
            value = None
            if got is not None:
                if got.variable_value:
                    value = str(got.variable_value)
                for item in (got.query_value.items if got.query_value else ()):
                    if item.namespace == namespace and item.key == key:
                        value = str(item.value)
            out[n.id] = value
        return out

    def _migs(self) -> dict:
        """Every MIG of the project: (scope, where, name) -> (target size, created epoch s)."""
        migs: dict[tuple, tuple] = {}

        def list_migs():
            migs.clear()
            for _, scoped in self.migs.aggregated_list(request={
                    "project": self.project, "max_results": 500}, **_NO_RETRY):
                for m in scoped.instance_group_managers:
                    scope, where = ("zones", _tail(m.zone)) if m.zone else \
                        ("regions", _tail(m.region))
                    migs[(scope, where, m.name)] = (
                        int(m.target_size),
                        _ts(m.creation_timestamp) if m.creation_timestamp else None)
        self._call("compute.instanceGroupManagers.aggregatedList", list_migs)
        return migs

    def members(self, refs: Sequence[ClusterRef]) -> dict:
        """Each cluster's live instances and its MIGs' target sizes, re-read right before acting
        (one aggregated instance list and one aggregated MIG list for the whole project)."""
        now = self._grouped(None)
        migs = {k: size for k, (size, _) in self._migs().items()} \
            if any(r.groups for r in refs) else {}
        out = {}
        for r in refs:
            live = now.get((r.environment, r.cluster), ())
            ids = frozenset(str(i.id) for _, i in live)
            by_group: dict[str, list] = {}
            for _, i in live:
                meta = {x.key: x.value for x in i.metadata.items} if i.metadata else {}
                if meta.get(CREATED_BY):
                    by_group.setdefault(meta[CREATED_BY], []).append(str(i.id))
            sizes, gone = 0, []
            for path in r.groups:
                key = _mig_key(path)
                if key in migs:
                    sizes += migs[key]
                else:
                    gone.append(path)
            out[r.key] = Membership(node_ids=ids, capacity=sizes if r.groups else len(ids),
                                    gone=tuple(gone),
                                    members={g: tuple(sorted(v)) for g, v in by_group.items()},
                                    ranks={str(i.id): i.name for _, i in live})
        return out

    # ---- utilization --------------------------------------------------------------------
    def utilization(self, nodes: Sequence[Node], start: float, end: float,
                    period_s: int) -> dict:
        wanted = {n.id for n in nodes}
        flt = f'metric.type = "{METRIC}" AND resource.type = "gce_instance"'
        return self._series(flt, start, end, period_s, wanted)

    def usage(self, environment: str, clusters: Sequence[str], start: float, end: float,
              period_s: int) -> dict:
        """Per-period maximum GPU utilization of every instance each cluster ran in the window,
        deleted ones included: ``{cluster: {instance id: ((period start, max %), ...)}}``.

        The series are selected by the instances' labels (``metadata.user_labels``, kept with the
        series after the VM is gone), one timeSeries.list per cluster.
        """
        out = {}
        for cluster in clusters:
            flt = (f'metric.type = "{METRIC}" AND resource.type = "gce_instance" AND '
                   f'metadata.user_labels."{tags.ENVIRONMENT}" = '
                   f'"{tags.label_value(environment)}" AND '
                   f'metadata.user_labels."{tags.CLUSTER}" = "{tags.label_value(cluster)}"')
            found = self._series(flt, start, end, period_s, None)
            if found:
                out[cluster] = found
        return out

    def _series(self, flt: str, start: float, end: float, period_s: int,
                wanted: Optional[set]) -> dict:
        """Per-instance maximum per alignment period of the series ``flt`` selects (``wanted``:
        only these instance ids, each present in the answer even without points)."""
        out: dict[str, list] = {i: [] for i in (wanted or ())}
        op = "monitoring.timeSeries.list"

        def read(body: dict) -> dict:
            """One page's points per instance; a page that lacks what the API documents
            raises inside the page's call (and is retried like any malformed answer)."""
            got: dict[str, list] = {}
            for series in body.get("timeSeries", []):
                iid = series.get("resource", {}).get("labels", {}).get("instance_id")
                if wanted is not None and iid not in wanted:
                    continue
                if not iid:
                    raise KeyError("resource.labels.instance_id")
                got.setdefault(iid, [])
                for p in series.get("points", []):
                    # Aligned points are stamped with the END of their alignment period;
                    # the decision module expects period starts.
                    t = _ts(p["interval"]["endTime"]) - period_s
                    v = p.get("value", {})
                    val = v.get("doubleValue", v.get("int64Value"))
                    if val is not None:
                        got[iid].append((t, float(val)))
            return got

        read_pages: list = []

        def page(get: Callable[[], dict]) -> dict:
            body = get()
            read_pages.append(read(body))     # only a page read whole counts
            return body

        for _ in self.monitoring.list_time_series(
                self.project, filter=flt, start=start, end=end, period_s=period_s,
                group_by=["resource.label.instance_id"],
                guard=lambda get: self._call(op, lambda: page(get))):
            pass
        for got in read_pages:
            for iid, points in got.items():
                out.setdefault(iid, []).extend(points)
        return {i: tuple(sorted(v)) for i, v in out.items()}

    # ---- actions ------------------------------------------------------------------------
    def _set_label(self, node_id: str, key: str, value: Optional[str]) -> bool:
        """Set (or with ``value=None`` remove) one label; False when the instance is gone."""
        def edit(labels: dict) -> Optional[dict]:
            if value is None:
                if key not in labels:
                    return None
                return {k: v for k, v in labels.items() if k != key}
            return {**labels, key: tags.label_value(value)}
        return self._edit_labels(node_id, edit)

    def _edit_labels(self, node_id: str, edit: Any) -> bool:
        """Apply ``edit(labels) -> new labels | None`` under the label fingerprint precondition.

        A 412 (labels changed since read) re-reads the instance once and re-applies ``edit``
        to the fresh labels. Returns False when the instance no longer exists.
        """
        from google.cloud import compute_v1

        inst = self._known[node_id]
        for attempt in range(2):
            labels = edit(dict(inst.labels))
            if labels is None:
                return True
            body = compute_v1.InstancesSetLabelsRequest(labels=labels,
                                                        label_fingerprint=inst.fingerprint)
            try:
                op = self._call("compute.instances.setLabels", lambda: self.instances.set_labels_unary(
                    project=self.project, zone=inst.zone, instance=inst.name,
                    instances_set_labels_request_resource=body, **_NO_RETRY))
                self._check(op, "setLabels")
                # The new fingerprint is not returned: the next write re-reads on 412.
                self._known[node_id] = _Instance(inst.zone, inst.name, labels, inst.fingerprint)
                return True
            except CloudError as exc:
                if exc.status == 404:          # the instance is gone
                    return False
                if attempt or exc.status != 412:   # 412: the label fingerprint moved on
                    raise
                try:
                    fresh = self._call("compute.instances.get", lambda: self.instances.get(
                        project=self.project, zone=inst.zone, instance=inst.name, **_NO_RETRY))
                except CloudError as again:
                    if again.status == 404:
                        return False
                    raise
                inst = _Instance(inst.zone, inst.name, dict(fresh.labels),
                                 fresh.label_fingerprint)
                self._known[node_id] = inst
        return True

    def _each_node(self, ref: ClusterRef, key: str, value: Optional[str]) -> None:
        present = [self._set_label(n.id, key, value) for n in ref.nodes]
        if ref.nodes and not any(present):
            raise GroupGone("gcp", f"{self.project} compute.instances.setLabels",
                            f"every instance of cluster {ref.cluster} is gone")

    def _check(self, op: Any, what: str) -> None:
        err = getattr(op, "error", None)
        if err is not None and getattr(err, "errors", None):
            raise CloudError("gcp", f"{self.project} {what}",
                             "; ".join(e.message for e in err.errors))

    def mark(self, ref: ClusterRef, value: str) -> None:
        self._each_node(ref, tags.IDLE_SINCE, value)

    def unmark(self, ref: ClusterRef) -> None:
        try:
            self._each_node(ref, tags.IDLE_SINCE, None)
        except GroupGone:
            pass  # deleted instances carry no mark

    def scale_to_zero(self, ref: ClusterRef) -> list[str]:
        """Resize every MIG of the cluster to 0; instance templates and buckets stay.

        The deleted instances take their labels (mark, claim) with them: instances a later
        resize creates start unmarked, so the next idle spell gets a new mark and full grace.
        Raises GroupGone when every MIG is gone; returns notes otherwise.
        """
        if not ref.groups:
            raise CloudError("gcp", f"{self.project} resize", f"cluster {ref.cluster}: its "
                             f"instances carry no {CREATED_BY} metadata (not in a MIG); "
                             "nothing resized")
        return self._resize(ref, {path: 0 for path in ref.groups})

    def scale_to_baseline(self, ref: ClusterRef, targets: dict) -> list[str]:
        """Resize each MIG in ``targets`` to its baseline (a reserved MIG never below it; a
        burst MIG without a floor to 0). The MIG picks which VMs go: every one was measured
        idle. The baseline VMs keep their idle mark until the next run clears it (a cluster
        at its baseline is unmarked)."""
        return self._resize(ref, dict(targets))

    def _resize(self, ref: ClusterRef, targets: dict) -> list[str]:
        def resize(scope: str, where: str, name: str, size) -> object:
            if scope == "zones":
                return self._call("compute.instanceGroupManagers.resize",
                                  lambda: self.migs.resize_unary(
                                      project=self.project, zone=where,
                                      instance_group_manager=name, size=int(size),
                                      **_NO_RETRY))
            return self._call("compute.regionInstanceGroupManagers.resize",
                              lambda: self.region_migs.resize_unary(
                                  project=self.project, region=where,
                                  instance_group_manager=name, size=int(size),
                                  **_NO_RETRY))

        return self._per_mig(targets, "resize", resize)

    def _per_mig(self, per_path: dict, verb: str, call) -> list[str]:
        """One call per MIG (path -> what to send): a MIG gone since it was read (404) is a
        note; every MIG gone is GroupGone; each operation is checked."""
        notes, done = [], 0
        for path, what in sorted(per_path.items()):
            scope, where, name = _mig_key(path)
            try:
                op = call(scope, where, name, what)
            except CloudError as exc:
                if exc.status == 404:
                    notes.append(f"MIG {name} was already deleted")
                    continue
                raise
            self._check(op, verb)
            done += 1
        if not done:
            raise GroupGone("gcp", f"{self.project} {verb}", f"{', '.join(sorted(per_path))} "
                            "deleted during the run")
        return notes

    def mark_nodes(self, ref: ClusterRef, node_ids: Sequence[str], value: str) -> None:
        """Per-node idle mark: an instance label (setLabels under the label fingerprint)."""
        for node in node_ids:
            self._set_label(node, tags.NODE_IDLE_SINCE, value)

    def unmark_nodes(self, ref: ClusterRef, node_ids: Sequence[str]) -> None:
        for node in node_ids:
            self._set_label(node, tags.NODE_IDLE_SINCE, None)

    def remove_nodes(self, ref: ClusterRef, nodes: Sequence[Node]) -> list[str]:
        """instanceGroupManagers.deleteInstances (regionInstanceGroupManagers for a regional
        MIG), one call per MIG, which "reduces the targetSize of the managed instance group by
        the number of instances that you delete" (Compute API reference), so no replacement
        starts. skipInstancesOnValidationError stays false: a node that is no longer a member
        fails the call instead of being silently skipped."""
        from google.cloud import compute_v1

        by_group: dict[str, list[Node]] = {}
        for n in nodes:
            by_group.setdefault(n.group, []).append(n)

        def delete(scope: str, where: str, name: str, members: list) -> object:
            urls = [f"zones/{n.location}/instances/{n.name}" for n in members]
            if scope == "zones":
                body = {"instance_group_managers_delete_instances_request_resource":
                        compute_v1.InstanceGroupManagersDeleteInstancesRequest(
                            instances=urls, skip_instances_on_validation_error=False)}
                return self._call("compute.instanceGroupManagers.deleteInstances",
                                  lambda: self.migs.delete_instances_unary(
                                      project=self.project, zone=where,
                                      instance_group_manager=name, **body, **_NO_RETRY))
            body = {"region_instance_group_managers_delete_instances_request_resource":
                    compute_v1.RegionInstanceGroupManagersDeleteInstancesRequest(
                        instances=urls, skip_instances_on_validation_error=False)}
            return self._call("compute.regionInstanceGroupManagers.deleteInstances",
                              lambda: self.region_migs.delete_instances_unary(
                                  project=self.project, region=where,
                                  instance_group_manager=name, **body, **_NO_RETRY))

        return self._per_mig(by_group, "deleteInstances", delete)

    def reservations(self, ref: ClusterRef) -> list[Reservation]:
        """Specific reservations the cluster's instances consume (reservationAffinity).

        GCP reservations carry no labels, so the cluster's own instances tell which ones
        they consume; those keep billing after the MIG is resized to zero.
        """
        out = []
        for zone, name in sorted(self._affinity.get((ref.environment, ref.cluster), ())):
            r = self._call("compute.reservations.get", lambda: self.reservations_client.get(
                project=self.project, zone=zone, reservation=name, **_NO_RETRY))
            sku = r.specific_reservation
            out.append(Reservation(id=name, instance_type=_tail(sku.instance_properties.machine_type),
                                   count=int(sku.count), region=zone.rsplit("-", 1)[0],
                                   zone=zone))
        return out

    # ---- claims (gpulease/reaper/claims.py) --------------------------------------------------
    def claim_key(self, ref: ClusterRef) -> tuple:
        return ("gcp", self.project, ref.environment, ref.cluster)

    def claims(self) -> list[Claim]:
        """Every claim label on any gpulease instance of the project (one aggregated list)."""
        out = []
        for _, inst in self._list(tags.CLUSTER):
            labels = dict(inst.labels)
            for k, v in labels.items():
                run = token_of(k)
                if run:
                    out.append(Claim(key=("gcp", self.project, labels.get(tags.ENVIRONMENT),
                                          labels.get(tags.CLUSTER)), token=run, value=v))
        return out

    def claim(self, ref: ClusterRef, key: str, value: str, *, now: float) -> None:
        """Label every instance with this run's claim, dropping expired claims of any run
        (an instance holds at most 64 labels)."""
        def edit(labels: dict) -> dict:
            kept = {k: v for k, v in labels.items()
                    if not (token_of(k) and k != key and expired(v, now))}
            return {**kept, key: tags.label_value(value)}
        present = [self._edit_labels(n.id, edit) for n in ref.nodes]
        if ref.nodes and not any(present):
            raise GroupGone("gcp", f"{self.project} compute.instances.setLabels",
                            f"every instance of cluster {ref.cluster} is gone")

    def release(self, ref: ClusterRef, key: str) -> None:
        """Remove this run's claim label (its own key: nobody else's claim is touched)."""
        try:
            self._each_node(ref, key, None)
        except GroupGone:
            pass

    # ---- the deadline step (issue 37 item 3) -----------------------------------------------
    def deadline_jobs(self, environments: Optional[frozenset]) -> list[DeadlineRef]:
        """Window jobs with a spot and an on-demand MIG (their instance templates labelled
        tags.DEADLINE_GROUP), their sizes, in-service and interrupted spot VMs, and the
        progress each published. A MIG has no labels: its instance template's
        ``properties.labels`` say whose it is (one instanceTemplates.get per candidate MIG:
        named ``mig_name(cluster, spot|on_demand)``, as the program names them)."""
        self._template_labels = {}
        return self._deadline_refs(self._deadline_migs(), environments)

    def deadline_job(self, ref: DeadlineRef) -> DeadlineRef:
        """The same job re-read (the re-check before a switch). Raises GroupGone when one
        of its MIGs is gone or no longer the job's."""
        got = [x for x in self._deadline_refs(self._deadline_migs(),
                                              frozenset({ref.environment}))
               if x.key == ref.key]
        if not got or got[0].groups != ref.groups:
            raise GroupGone("gcp", f"{self.project} compute.instanceGroupManagers."
                            "aggregatedList", f"{', '.join(ref.groups)}: a MIG of the job is "
                            "gone or changed")
        return got[0]

    def _deadline_migs(self) -> list[dict]:
        """Every MIG of the project named like one of a deadline pair (``<cluster>-spot`` /
        ``<cluster>-on-demand``: a pre-filter only, the template's labels decide)."""
        suffixes = tuple(mig_name("", m) for m in (SPOT, ON_DEMAND))
        found: list[dict] = []

        def list_migs():
            found.clear()
            for _, scoped in self.migs.aggregated_list(request={
                    "project": self.project, "max_results": 500}, **_NO_RETRY):
                for m in scoped.instance_group_managers:
                    if not m.name.endswith(suffixes):
                        continue
                    scope, where = ("zones", _tail(m.zone)) if m.zone else \
                        ("regions", _tail(m.region))
                    urls = {v.instance_template for v in m.versions if v.instance_template} \
                        or ({m.instance_template} if m.instance_template else set())
                    aic = m.all_instances_config
                    found.append({
                        "scope": scope, "where": where, "name": m.name,
                        "target": int(m.target_size), "templates": tuple(sorted(urls)),
                        "aic": dict(aic.properties.labels) if aic and aic.properties else {},
                        "path": f"projects/{self.project}/{scope}/{where}/"
                                f"instanceGroupManagers/{m.name}"})
        self._call("compute.instanceGroupManagers.aggregatedList", list_migs)
        return found

    def _labels_of_template(self, url: str) -> Optional[dict]:
        """``properties.labels`` of a global instance template of this project (the program
        declares global ones: gcp.compute.InstanceTemplate), cached for the run (templates are
        immutable); None for a template gone (404) or of another kind or project."""
        from google.api_core.exceptions import NotFound

        if url in self._template_labels:
            return self._template_labels[url]
        parts = url.rstrip("/").split("/")
        labels = None
        if len(parts) >= 5 and parts[-2] == "instanceTemplates" and parts[-3] == "global" \
                and parts[-4] == self.project and parts[-5] == "projects" \
                and self.templates is not None:
            def get():
                try:
                    t = self.templates.get(project=self.project, instance_template=parts[-1],
                                           **_NO_RETRY)
                except NotFound:
                    return None
                return dict(t.properties.labels) if t.properties else {}
            labels = self._call("compute.instanceTemplates.get", get)
        self._template_labels[url] = labels
        return labels

    def _managed(self, mig: dict) -> list[tuple[str, str]]:
        """(currentAction, instanceStatus) of each managed instance (listManagedInstances)."""
        out: list[tuple[str, str]] = []
        zonal = mig["scope"] == "zones"
        client = self.migs if zonal else self.region_migs
        req = {"project": self.project, "instance_group_manager": mig["name"],
               "max_results": 500, ("zone" if zonal else "region"): mig["where"]}

        def list_all():
            out.clear()
            for mi in client.list_managed_instances(request=req, **_NO_RETRY):
                out.append((str(mi.current_action or ""), str(mi.instance_status or "")))
        self._call(f"compute.{'instanceGroupManagers' if zonal else 'regionInstanceGroupManagers'}"
                   ".listManagedInstances", list_all)
        return out

    def _deadline_refs(self, migs: list[dict], environments) -> list[DeadlineRef]:
        jobs: dict[tuple, dict] = {}
        for m in migs:
            if len(m["templates"]) != 1:
                continue    # several versions (a canary rollout): not the program's shape
            labels = self._labels_of_template(m["templates"][0])
            if labels is None:
                continue
            cluster, env = labels.get(tags.CLUSTER), labels.get(tags.ENVIRONMENT)
            role = labels.get(tags.DEADLINE_GROUP)
            if not cluster or not env or role not in (SPOT, ON_DEMAND) or (
                    environments is not None and env not in environments):
                continue
            if m["name"] != mig_name(cluster, role):
                continue    # a template is usable by any MIG: only the program's names count
            if not tags.is_declared(labels, env, cluster):
                continue    # not the program's group (docs/reaper.md, "Declared groups")
            jobs.setdefault((env, cluster), {}).setdefault(role, []).append((m, labels))
        out = []
        for (env, cluster), pair in sorted(jobs.items()):
            if set(pair) != {SPOT, ON_DEMAND} or any(len(v) != 1 for v in pair.values()):
                continue    # half a pair, or two claiming one role: the step leaves it alone
            (sm, sl), (om, ol) = pair[SPOT][0], pair[ON_DEMAND][0]
            if (sm["scope"], sm["where"]) != (om["scope"], om["where"]):
                continue    # the program puts both in the cluster's zone
            spot, od = self._managed(sm), self._managed(om)
            in_service = sum(1 for x in spot if x == _IN_SERVICE)
            interrupted = sum(1 for a, st in spot if a in _REPAIRING or (
                st in _STOPPED and a not in _LEAVING))
            raw, err = self._progress(sl.get(tags.DEADLINE_PROGRESS_BUCKET), cluster)
            # the opt-out may also sit in a MIG's all-instances configuration (a person's
            # override: templates are immutable); only the opt-out is read from there
            keep = [{tags.KEEP: a[tags.KEEP]} for a in (sm["aic"], om["aic"]) if tags.KEEP in a]
            where = sm["where"]
            out.append(DeadlineRef(
                cluster=cluster, environment=env, cloud="gcp",
                region=where if sm["scope"] == "regions" else where.rsplit("-", 1)[0],
                spot_group=sm["path"], on_demand_group=om["path"],
                spot_desired=sm["target"], spot_in_service=in_service,
                on_demand_desired=om["target"],
                on_demand_in_service=sum(1 for x in od if x == _IN_SERVICE),
                tags=combined_tags([sl, ol, *keep]), progress=raw, progress_error=err,
                interrupted=interrupted))
        return out

    def _progress(self, bucket: Optional[str], cluster: str
                  ) -> tuple[Optional[bytes], Optional[str]]:
        """The progress document's bytes (at most MAX_PROGRESS_BYTES + 1 read: a Range), or why
        not. No object (or bucket) - Cloud Storage's 404, google.api_core's NotFound - is
        "none published" (gpulease.deadline.read_progress); anything else is a finding."""
        from google.api_core.exceptions import NotFound

        from gpulease import deadline as dl
        from gpulease import naming

        if not bucket or naming.bucket_rule_broken(bucket) or self.storage is None:
            return None, f"no readable {tags.DEADLINE_PROGRESS_BUCKET} ({bucket!r})"
        name = naming.progress_object(cluster)
        op = "storage.objects.get"

        def get() -> Optional[bytes]:
            from google.cloud.storage.exceptions import DataCorruption

            try:
                return self.storage.bucket(bucket).blob(name).download_as_bytes(
                    start=0, end=dl.MAX_PROGRESS_BYTES, retry=None, timeout=TIMEOUT_S)
            except NotFound:
                return None
            except DataCorruption as exc:
                raise MalformedResponse("gcp", f"{self.project} {op}", "the object's bytes do "
                                        f"not match its checksum ({exc})") from None
        try:
            return self._call(op, get), None
        except CloudError as exc:
            return None, f"progress not read ({exc}): taken as none done"

    def _patch_labels(self, path: str, labels: dict) -> None:
        """Merge ``labels`` (None: delete the key) into the MIG's all-instances configuration."""
        if self.compute_rest is None:
            raise CloudError("gcp", f"{self.project} instanceGroupManagers.patch",
                             "no Compute REST session configured")
        scope, where, name = _mig_key(path)
        api = "instanceGroupManagers" if scope == "zones" else "regionInstanceGroupManagers"
        op = self._call(f"compute.{api}.patch", lambda: self.compute_rest.patch_mig(
            self.project, scope, where, name,
            {"allInstancesConfig": {"properties": {"labels": labels}}}))
        errors = ((op.get("error") or {}).get("errors") or []) if isinstance(op, dict) else []
        if errors:
            raise CloudError("gcp", f"{self.project} {api}.patch",
                             "; ".join(str(e.get("message", e)) for e in errors))

    def deadline_mark(self, ref: DeadlineRef, value: str) -> None:
        """The switch mark: a label in the spot MIG's all-instances configuration. A MIG has no
        labels, its template is immutable and its VMs vanish at 0 nodes; the all-instances
        configuration lives on the MIG at any size, and with the OPPORTUNISTIC update policy
        it reaches new VMs only (running ones are not touched)."""
        self._patch_labels(ref.spot_group, {tags.DEADLINE_SWITCH: tags.label_value(value)})

    def deadline_unmark(self, ref: DeadlineRef) -> None:
        self._patch_labels(ref.spot_group, {tags.DEADLINE_SWITCH: None})

    def deadline_resize(self, ref: DeadlineRef, targets: dict) -> None:
        """instanceGroupManagers.resize (regionInstanceGroupManagers for a regional MIG) of
        each MIG to its target, the one that gains first, so the job is never left with
        neither. A MIG gone (404) fails the switch (GroupGone)."""
        now = {ref.spot_group: ref.spot_desired, ref.on_demand_group: ref.on_demand_desired}
        for path, size in sorted(targets.items(), key=lambda kv: (-(kv[1] - now.get(kv[0], 0)),
                                                                  kv[0])):
            self._resize(ref, {path: int(size)})


def _mig_key(path: str) -> tuple[str, str, str]:
    """("zones"|"regions", where, name) of a created-by path
    (``projects/NUM/zones/Z/instanceGroupManagers/N``)."""
    parts = path.split("/")
    return parts[-4], parts[-3], parts[-1]
