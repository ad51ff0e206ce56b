"""GCP adaptor of the reaper: labelled instances, Cloud Monitoring GPU utilization, MIG resize.

Clients are created in :func:`clients` (the one place) and passed in. Endpoint override for
emulators and the tests' local fake: ``GPULEASE_GCP_ENDPOINT=http://127.0.0.1:PORT`` (both the
Compute and the Monitoring REST APIs are then called there, without credentials).
Compute uses google-cloud-compute's REST transport; Monitoring uses its REST API
(``projects.timeSeries.list``) directly, because google-cloud-monitoring ships gRPC transports
only. Errors become :class:`infra.errors.CloudError` here and nowhere else.
"""
from __future__ import annotations

import datetime as _dt
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

from infra.costing import tags
from infra.errors import CloudError
from infra.reaper.decision import ClusterRef, Node
from infra.reaper.engine import Reservation
from infra.reaper.retry import Backoff

#: Ops Agent NVML metric (percent, per GPU; DOMAIN.md).
METRIC = "agent.googleapis.com/gpu/utilization"
#: Compute sets this metadata key on every instance a MIG creates ("Instances created by a
#: managed instance group have the created-by metadata key", Compute Engine docs, MIGs).
CREATED_BY = "created-by"
_LIVE = ("PROVISIONING", "STAGING", "RUNNING")
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
ENDPOINT_ENV = "GPULEASE_GCP_ENDPOINT"


def clients(project: str, endpoint: Optional[str] = None) -> dict:
    """Compute + Monitoring clients; ``endpoint`` (or $GPULEASE_GCP_ENDPOINT) = an emulator."""
    from google.cloud import compute_v1

    endpoint = endpoint or os.environ.get(ENDPOINT_ENV)
    kinds = {"instances": (compute_v1.InstancesClient, "InstancesRestTransport"),
             "migs": (compute_v1.InstanceGroupManagersClient, "InstanceGroupManagersRestTransport"),
             "region_migs": (compute_v1.RegionInstanceGroupManagersClient,
                             "RegionInstanceGroupManagersRestTransport"),
             "reservations": (compute_v1.ReservationsClient, "ReservationsRestTransport")}
    out: dict = {}
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
    else:
        for key, (cls, _) in kinds.items():
            out[key] = cls()
        import google.auth
        from google.auth.transport.requests import AuthorizedSession

        creds, _ = google.auth.default(
            scopes=["https://www.googleapis.com/auth/monitoring.read"])
        out["monitoring"] = MonitoringRest(AuthorizedSession(creds),
                                           "https://monitoring.googleapis.com")
    return out


class HttpStatusError(Exception):
    def __init__(self, status: int, message: str):
        self.code = status
        super().__init__(f"HTTP {status}: {message}")


@dataclass
class MonitoringRest:
    """`projects.timeSeries.list` over REST (https://cloud.google.com/monitoring/api/ref_v3/rest)."""

    session: Any
    base_url: str

    def list_time_series(self, project: str, *, filter: str, start: float, end: float,
                         period_s: int, group_by: Sequence[str]) -> Iterator[dict]:
        def rfc3339(t: float) -> str:
            return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        params = {"filter": filter, "interval.startTime": rfc3339(start),
                  "interval.endTime": rfc3339(end),
                  "aggregation.alignmentPeriod": f"{period_s}s",
                  "aggregation.perSeriesAligner": "ALIGN_MAX",
                  "aggregation.crossSeriesReducer": "REDUCE_MAX",
                  "aggregation.groupByFields": list(group_by), "view": "FULL"}
        token = None
        while True:
            q = dict(params, **({"pageToken": token} if token else {}))
            resp = self.session.get(f"{self.base_url}/v3/projects/{project}/timeSeries",
                                    params=q, timeout=30)
            if resp.status_code != 200:
                raise HttpStatusError(resp.status_code, resp.text[:300])
            body = resp.json()
            yield body
            token = body.get("nextPageToken")
            if not token:
                return


def _status(exc: BaseException) -> int:
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return code
    resp = getattr(exc, "response", None)
    return int(getattr(resp, "status_code", 0) or 0)


def _retryable(exc: BaseException) -> bool:
    import requests

    if isinstance(exc, (requests.ConnectionError, requests.Timeout)):
        return True
    return _status(exc) in _RETRY_STATUS


def _ts(value: str) -> float:
    return _dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


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
                 reservations: Any, monitoring: MonitoringRest, backoff: Optional[Backoff] = None):
        self.project = project
        self.label = project
        self.instances, self.migs, self.region_migs = instances, migs, region_migs
        self.reservations_client, self.monitoring = reservations, monitoring
        self.backoff = backoff or Backoff()
        self.calls: Counter = Counter()
        self._known: dict[str, _Instance] = {}
        self._affinity: dict[tuple, set] = {}

    @classmethod
    def for_project(cls, project: str, endpoint: Optional[str] = None, **kw: Any) -> "GcpReaper":
        return cls(project=project, **clients(project, endpoint), **kw)

    def _call(self, op: str, fn: Any) -> Any:
        from google.api_core.exceptions import GoogleAPICallError
        import requests

        def once():
            self.calls[op] += 1
            return fn()
        try:
            return self.backoff.call(once, retryable=_retryable)
        except (GoogleAPICallError, HttpStatusError, requests.RequestException) as exc:
            raise CloudError("gcp", f"{self.project} {op}", str(exc),
                             retryable=_retryable(exc)) from None

    # ---- discovery ----------------------------------------------------------------------
    def discover(self, environments: Optional[frozenset]) -> list[ClusterRef]:
        req = {"project": self.project, "filter": f"labels.{tags.CLUSTER}:*",
               "max_results": 500}
        found: list = []

        def list_all():
            found.clear()
            for zone_key, scoped in self.instances.aggregated_list(request=req):
                for inst in scoped.instances:
                    found.append((zone_key, inst))
        self._call("compute.instances.aggregatedList", list_all)
        by_cluster: dict[tuple, list] = {}
        for _, inst in found:
            labels = dict(inst.labels)
            cluster, env = labels.get(tags.CLUSTER), labels.get(tags.ENVIRONMENT)
            if not cluster or not env or cluster == tags.SHARED or inst.status not in _LIVE:
                continue
            if environments is not None and env not in environments:
                continue
            by_cluster.setdefault((env, cluster), []).append(inst)
        refs = []
        for (env, cluster), insts in sorted(by_cluster.items()):
            nodes, groups, merged, since = [], set(), {}, []
            zones = set()
            for inst in insts:
                zone = _tail(inst.zone)
                zones.add(zone)
                self._known[str(inst.id)] = _Instance(zone, inst.name, dict(inst.labels),
                                                       inst.label_fingerprint)
                started = inst.last_start_timestamp or inst.creation_timestamp
                nodes.append(Node(id=str(inst.id), launched_at=_ts(started) if started
                                  else None, location=zone))
                meta = {i.key: i.value for i in inst.metadata.items} if inst.metadata else {}
                if meta.get(CREATED_BY):
                    groups.add(meta[CREATED_BY])
                for k, v in inst.labels.items():
                    merged.setdefault(k, v)
                if tags.IDLE_SINCE in inst.labels:
                    since.append(inst.labels[tags.IDLE_SINCE])
                aff = inst.reservation_affinity
                if aff and aff.consume_reservation_type == "SPECIFIC_RESERVATION":
                    for name in aff.values:
                        self._affinity.setdefault((env, cluster), set()).add((zone, _tail(name)))
            # The opt-out wins if ANY node carries it; the idle mark counts from its latest
            # (most conservative) value and only when every node carries it.
            keep = [i.labels[tags.KEEP] for i in insts if tags.KEEP in i.labels]
            merged.pop(tags.KEEP, None)
            merged.pop(tags.IDLE_SINCE, None)
            if keep:
                merged[tags.KEEP] = keep[0]
            if since and len(since) == len(insts):
                merged[tags.IDLE_SINCE] = max(since)
            region = sorted(zones)[0].rsplit("-", 1)[0]
            refs.append(ClusterRef(cloud="gcp", region=region, environment=env, cluster=cluster,
                                   groups=tuple(sorted(groups)), nodes=tuple(nodes),
                                   tags=merged, capacity=len(nodes)))
        return refs

    # ---- utilization --------------------------------------------------------------------
    def utilization(self, nodes: Sequence[Node], start: float, end: float,
                    period_s: int) -> dict:
        wanted = {n.id for n in nodes}
        out: dict[str, list] = {i: [] for i in wanted}
        flt = f'metric.type = "{METRIC}" AND resource.type = "gce_instance"'
        pages: list = []

        def fetch():
            pages.clear()
            pages.extend(self.monitoring.list_time_series(
                self.project, filter=flt, start=start, end=end, period_s=period_s,
                group_by=["resource.label.instance_id"]))
        self._call("monitoring.timeSeries.list", fetch)
        for body in pages:
            for series in body.get("timeSeries", []):
                iid = series.get("resource", {}).get("labels", {}).get("instance_id")
                if iid not in wanted:
                    continue
                for p in series.get("points", []):
                    # Aligned points are stamped with the END of their alignment period;
                    # the decision module expects period starts.
                    t = _ts(p["interval"]["endTime"]) - period_s
                    v = p.get("value", {})
                    val = v.get("doubleValue", v.get("int64Value"))
                    if val is not None:
                        out[iid].append((t, float(val)))
        return {i: tuple(sorted(v)) for i, v in out.items()}

    # ---- actions ------------------------------------------------------------------------
    def _set_label(self, node_id: str, key: str, value: Optional[str]) -> None:
        from google.cloud import compute_v1

        inst = self._known[node_id]
        for attempt in range(2):
            labels = dict(inst.labels)
            if value is None:
                if key not in labels:
                    return
                labels.pop(key)
            else:
                labels[key] = tags.label_value(value)
            body = compute_v1.InstancesSetLabelsRequest(labels=labels,
                                                        label_fingerprint=inst.fingerprint)
            try:
                op = self._call("compute.instances.setLabels", lambda: self.instances.set_labels_unary(
                    project=self.project, zone=inst.zone, instance=inst.name,
                    instances_set_labels_request_resource=body))
                self._check(op, "setLabels")
                self._known[node_id] = _Instance(inst.zone, inst.name, labels, inst.fingerprint)
                return
            except CloudError as exc:
                # 412: labels changed since we read them (fingerprint); re-read once and retry.
                if attempt or ("412" not in str(exc) and "Precondition" not in str(exc)):
                    raise
                fresh = self._call("compute.instances.get", lambda: self.instances.get(
                    project=self.project, zone=inst.zone, instance=inst.name))
                inst = _Instance(inst.zone, inst.name, dict(fresh.labels),
                                 fresh.label_fingerprint)

    def _check(self, op: Any, what: str) -> None:
        err = getattr(op, "error", None)
        if err is not None and getattr(err, "errors", None):
            raise CloudError("gcp", f"{self.project} {what}",
                             "; ".join(e.message for e in err.errors))

    def mark(self, ref: ClusterRef, value: str) -> None:
        for n in ref.nodes:
            self._set_label(n.id, tags.IDLE_SINCE, value)

    def unmark(self, ref: ClusterRef) -> None:
        for n in ref.nodes:
            self._set_label(n.id, tags.IDLE_SINCE, None)

    def scale_to_zero(self, ref: ClusterRef) -> None:
        """Resize every MIG of the cluster to 0; instance templates and buckets stay."""
        if not ref.groups:
            raise CloudError("gcp", f"{self.project} resize", f"cluster {ref.cluster}: its "
                             f"instances carry no {CREATED_BY} metadata (not in a MIG); "
                             "nothing resized")
        for path in ref.groups:
            parts = path.split("/")
            scope, where, name = parts[-4], parts[-3], parts[-1]
            if scope == "zones":
                op = self._call("compute.instanceGroupManagers.resize",
                                lambda: self.migs.resize_unary(
                                    project=self.project, zone=where,
                                    instance_group_manager=name, size=0))
            else:
                op = self._call("compute.regionInstanceGroupManagers.resize",
                                lambda: self.region_migs.resize_unary(
                                    project=self.project, region=where,
                                    instance_group_manager=name, size=0))
            self._check(op, "resize")

    def reservations(self, ref: ClusterRef) -> list[Reservation]:
        """Specific reservations the cluster's instances consume (reservationAffinity).

        GCP reservations carry no labels, so the cluster's own instances tell which ones
        they consume; those keep billing after the MIG is resized to zero.
        """
        out = []
        for zone, name in sorted(self._affinity.get((ref.environment, ref.cluster), ())):
            r = self._call("compute.reservations.get", lambda: self.reservations_client.get(
                project=self.project, zone=zone, reservation=name))
            sku = r.specific_reservation
            out.append(Reservation(id=name, instance_type=_tail(sku.instance_properties.machine_type),
                                   count=int(sku.count), region=zone.rsplit("-", 1)[0],
                                   zone=zone))
        return out
