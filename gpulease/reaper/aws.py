"""AWS adaptor of the reaper: gpulease ASGs, CloudWatch GPU utilization, tags, scale to zero.

boto3 clients are created in :func:`clients` (the one place; boto3 honours AWS_ENDPOINT_URL, so
the same code runs against moto or any emulator) and passed in. botocore's own retries are
switched off so that every retry goes through :class:`gpulease.retry.Backoff` and is counted
once. :meth:`AwsReaper._call` is the one boundary to botocore: every SDK error, and every answer
that did not come from AWS, becomes an :mod:`gpulease.reaper.errors` type there and nowhere else.
"""
from __future__ import annotations

import datetime as _dt
import functools
import re
from collections import Counter
from dataclasses import replace
from typing import Any, Callable, Iterator, Optional, Sequence

from gpulease import tags
from gpulease.errors import CloudError
from gpulease.reaper.claims import Claim, expired, token_of
from gpulease.reaper.decision import (ClusterRef, DeadlineRef, Membership, Node,
                                      combined_tags, undeclared)
from gpulease.reaper.engine import Reservation
from gpulease.reaper.errors import GroupGone, MalformedResponse, TransientError
from gpulease.retry import Backoff

#: CloudWatch agent `nvidia_gpu` metric (DOMAIN.md; agent config rendered from templates/).
NAMESPACE = "CWAgent"
METRIC = "nvidia_smi_utilization_gpu"
#: GetMetricData accepts at most 500 MetricDataQuery structures per call (CloudWatch API ref).
MAX_QUERIES = 500
#: DescribeAutoScalingGroups takes up to 50 names by default (API reference,
#: AutoScalingGroupNames).
MAX_NAMES = 50
#: Page sizes asked for, each the API's maximum (the paginator sets the operation's own limit
#: parameter): DescribeAutoScalingGroups and DescribeScalingActivities MaxRecords "The maximum
#: value is 100", DescribeTags MaxResults 5 to 1000 (EC2 Auto Scaling and EC2 API references).
#: The other listings take the API's default page. Tests shrink these to show every page is read.
PAGE_SIZE = {"describe_auto_scaling_groups": 100, "describe_scaling_activities": 100,
             "describe_tags": 1000}
#: instance ids per DescribeTags call of the busy-witness re-read (a resource-id filter; kept
#: well under the request size limits, as the per-node marks are few per run).
MAX_TAG_IDS = 200
#: the instance tags discovery reads (one paged DescribeTags per region): the per-node idle
#: mark and the busy witness (contract C10).
_INSTANCE_KEYS = (tags.NODE_IDLE_SINCE, tags.BUSY_AT, tags.BUSY_WITNESS, tags.LEAVE_REQUESTED)
_ASG_LIVE = ("Pending", "Pending:Wait", "Pending:Proceed", "InService")
#: DescribeAutoScalingGroups shows a group being deleted with this Status (API reference,
#: AutoScalingGroup.Status).
_DELETING = "Delete in progress"
#: the dimension the CloudWatch agent appends from the instance's group (the rendered agent
#: config's append_dimensions): how `gpulease recommend` finds a group's past instances.
ASG_DIMENSION = "AutoScalingGroupName"
#: DescribeScalingActivities names the instance in the activity's description ("Launching a
#: new EC2 instance: i-4ba0837f", API reference example); EC2 ids are 8 or 17 hex digits.
_INSTANCE_IN_TEXT = re.compile(r"\bi-(?:[0-9a-f]{17}|[0-9a-f]{8})\b")

_RETRY_CODES = frozenset({
    "Throttling", "ThrottlingException", "ThrottledException", "RequestLimitExceeded",
    "TooManyRequestsException", "RequestThrottled", "RequestThrottledException", "SlowDown",
    "ServiceUnavailable", "ServiceUnavailableException", "InternalError", "InternalFailure",
    "InternalServiceError", "RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete",
    "ResourceContention",
})


def clients(region: str, session: Any = None, endpoint_url: Optional[str] = None) -> dict:
    """The boto3 clients the adaptor needs, for one region (AWS_ENDPOINT_URL is honoured;
    ``endpoint_url`` overrides it, e.g. for an emulator behind a proxy)."""
    import boto3
    from botocore.config import Config

    session = session or boto3.session.Session()
    cfg = Config(region_name=region, retries={"total_max_attempts": 1, "mode": "standard"},
                 connect_timeout=10, read_timeout=30, max_pool_connections=20)
    extra = {"endpoint_url": endpoint_url} if endpoint_url else {}
    return {name: session.client(name, config=cfg, **extra)
            for name in ("autoscaling", "ec2", "cloudwatch", "s3")}
    # ec2: capacity reservations and instance tags; s3: the deadline step's progress documents


@functools.lru_cache(maxsize=None)
def _paging_rules(service: str, api: str) -> dict:
    """botocore's paginator configuration for one operation (its paginators-1.json entry: the
    same rules ``client.get_paginator`` uses)."""
    import botocore.session

    return botocore.session.get_session().get_paginator_model(service).get_paginator(api)


def _retryable(exc: BaseException) -> bool:
    from botocore.exceptions import (ClientError, ConnectionClosedError, ConnectTimeoutError,
                                     EndpointConnectionError, ReadTimeoutError)
    from botocore.parsers import ResponseParserError

    if isinstance(exc, (TransientError, ResponseParserError)):
        return True  # HTML error pages, non-XML/JSON or truncated bodies: gateways, proxies
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return err.get("Code") in _RETRY_CODES or int(status or 0) >= 500
    return isinstance(exc, (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError,
                            ConnectTimeoutError))


def _http_status(exc: BaseException) -> Optional[int]:
    """The HTTP status of a botocore ClientError (its ResponseMetadata), else None."""
    resp = getattr(exc, "response", None) or {}
    status = (resp.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return int(status) if isinstance(status, int) and status else None


def _describe(exc: BaseException) -> str:
    """A one-line account of an SDK error (ResponseParserError carries the whole raw body)."""
    from botocore.parsers import ResponseParserError

    if isinstance(exc, ResponseParserError):
        first = str(exc).split("\n", 1)
        body = first[1].strip()[:80] if len(first) > 1 else ""
        return ("unparseable answer (an HTML page or a truncated body: a gateway or proxy "
                f"answered?){': ' + body if body else ''}")
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _gone(exc: BaseException) -> bool:
    """Auto Scaling answers ValidationError "AutoScalingGroup name not found" for a missing
    group."""
    resp = getattr(exc, "response", None) or {}
    err = resp.get("Error", {})
    message = str(err.get("Message", "")).lower()
    return err.get("Code") == "ValidationError" and "not found" in message


class AwsReaper:
    """Discovery and actions in one AWS region."""

    cloud = "aws"

    def __init__(self, *, region: str, autoscaling: Any, ec2: Any, cloudwatch: Any,
                 s3: Any = None, backoff: Optional[Backoff] = None):
        self.region = region
        self.label = region
        self.autoscaling, self.ec2, self.cloudwatch = autoscaling, ec2, cloudwatch
        self.s3 = s3
        self.backoff = backoff or Backoff()
        #: API calls made, by "service.Operation" (the bench prints them).
        self.calls: Counter = Counter()
        self._odcr: Optional[dict] = None  # (environment, cluster) -> reservations, per run
        #: groups tagged like a cluster but not declared by the program, as discovery last
        #: found them (:func:`gpulease.reaper.decision.undeclared`): reported, never acted on.
        self.undeclared: list[dict] = []

    @classmethod
    def for_region(cls, region: str, session: Any = None, endpoint_url: Optional[str] = None,
                   **kw: Any) -> "AwsReaper":
        return cls(region=region, **clients(region, session, endpoint_url), **kw)

    # ---- the one boundary to botocore ---------------------------------------------------
    def _call(self, client: Any, op: str, *, expect: tuple = (),
              check: Optional[Callable[[dict], Optional[str]]] = None, **params: Any) -> dict:
        from botocore.exceptions import BotoCoreError, ClientError
        from botocore.parsers import ResponseParserError

        method = getattr(client, op)
        service = client.meta.service_model.service_name
        where = f"{self.region} {service}.{op}"

        def once() -> dict:
            self.calls[f"{service}.{op}"] += 1
            try:
                resp = method(**params)
            except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
                # botocore's query parser raises KeyError on a well-formed XML/HTML 200 that
                # lacks the result wrapper (a proxy's page): not AWS's answer.
                raise MalformedResponse("aws", where, f"unparseable answer ({type(exc).__name__}: "
                                        f"{exc})") from None
            meta = resp.get("ResponseMetadata") or {}
            if not meta.get("RequestId"):
                # Every AWS answer carries a request id (x-amzn-RequestId / <RequestId>).
                # botocore turns a non-JSON 200 from an awsJson service into {} and, for a call
                # without output fields, never parses the body at all: without this check a
                # captive portal's page reads as "no data" or as "done".
                ctype = (meta.get("HTTPHeaders") or {}).get("content-type", "?")
                raise MalformedResponse("aws", where, f"answer without an AWS request id "
                                        f"(HTTP {meta.get('HTTPStatusCode', '?')}, {ctype}): "
                                        "not from AWS (a proxy or captive portal?)")
            missing = [k for k in expect if k not in resp]
            if missing:
                raise MalformedResponse("aws", where, f"answer lacks {', '.join(missing)} "
                                        "(truncated, or not from AWS)")
            problem = check(resp) if check else None
            if problem:
                raise TransientError("aws", where, problem)
            return resp
        try:
            return self.backoff.call(once, retryable=_retryable)
        except CloudError as exc:
            raise type(exc)("aws", where, f"{exc.args[0].split(': ', 2)[-1]}"
                            f"{self._gave_up(exc)}", status=exc.status) from None
        except (ClientError, BotoCoreError, ResponseParserError) as exc:
            cls = GroupGone if _gone(exc) else TransientError if _retryable(exc) else CloudError
            raise cls("aws", where, _describe(exc) + self._gave_up(exc),
                      retryable=_retryable(exc), status=_http_status(exc)) from None

    def _pages(self, client: Any, op: str, *, expect: tuple = (),
               check: Optional[Callable[[dict], Optional[str]]] = None,
               **params: Any) -> Iterator[dict]:
        """The pages of a listing, through boto3's paginator for ``op`` (botocore's paging
        rules: which token goes back, which parameter sets the page size, and "the same next
        token was received twice" refused). Each page's request is one :meth:`_call`: checked,
        counted and, when transient, retried alone by the one retry policy (the pages already
        read are not asked again)."""
        from botocore.exceptions import PaginationError
        from botocore.paginate import Paginator

        api = client.meta.method_to_api_mapping[op]
        service = client.meta.service_model.service_name
        paginator = Paginator(lambda **kw: self._call(client, op, expect=expect, check=check,
                                                      **kw),
                              _paging_rules(service, api),
                              client.meta.service_model.operation_model(api))
        size = PAGE_SIZE.get(op)
        try:
            yield from paginator.paginate(**params, PaginationConfig=(
                {"PageSize": size} if size else {}))
        except PaginationError as exc:   # a repeated token: the listing would never end
            raise MalformedResponse("aws", f"{self.region} {service}.{op}",
                                    f"{exc} (not AWS's paging)") from None

    def _gave_up(self, exc: BaseException) -> str:
        return f" (gave up after {self.backoff.attempts} attempts)" if _retryable(exc) else ""

    # ---- discovery ----------------------------------------------------------------------
    def discover(self, environments: Optional[frozenset]) -> list[ClusterRef]:
        self._odcr = None
        self.undeclared = []
        filters = [{"Name": "tag-key", "Values": [tags.CLUSTER]}]
        if environments is not None:
            filters.append({"Name": f"tag:{tags.ENVIRONMENT}", "Values": sorted(environments)})
        groups: list[dict] = []
        for page in self._pages(self.autoscaling, "describe_auto_scaling_groups",
                                Filters=filters, expect=("AutoScalingGroups",)):
            groups += page["AutoScalingGroups"]
        marks = self._instance_tags() if groups else {}
        per_cluster: dict[tuple, list[ClusterRef]] = {}
        for g in groups:
            try:
                ref = self._ref(g, environments)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise MalformedResponse("aws", f"{self.region} autoscaling."
                                        "describe_auto_scaling_groups", f"a group entry lacks "
                                        f"{exc} (truncated, or not from AWS)") from None
            if ref is not None:
                mine = {n.id: marks.get(n.id, {}) for n in ref.nodes}
                nodes = tuple(replace(n, witness=tags.BUSY_WITNESS in mine[n.id])
                              for n in ref.nodes)
                ref = replace(ref, nodes=nodes, node_marks={
                    i: t[tags.NODE_IDLE_SINCE] for i, t in mine.items()
                    if tags.NODE_IDLE_SINCE in t}, busy_at={
                    n.id: mine[n.id].get(tags.BUSY_AT) for n in nodes if n.witness},
                    leave_requests={i: t[tags.LEAVE_REQUESTED] for i, t in mine.items()
                                    if tags.LEAVE_REQUESTED in t})
                per_cluster.setdefault(ref.key, []).append(ref)
        # A Capacity Block cluster runs its reserved nodes in `<c>-block-asg` beside `<c>-asg`:
        # one cluster, whose nodes are read, marked, claimed and scaled together.
        return [_merged(parts) for parts in per_cluster.values()]

    def _instance_tags(self, keys: Sequence[str] = _INSTANCE_KEYS,
                       ids: Optional[Sequence[str]] = None) -> dict[str, dict[str, str]]:
        """{instance id: {key: value}} for the instance tags ``keys`` (per-node idle marks, the
        busy witness) of every instance in the region that carries one — or of ``ids`` only —
        with EC2 DescribeTags (one paged listing; ``ids`` in batches of MAX_TAG_IDS)."""
        out: dict[str, dict[str, str]] = {}
        batches = [None] if ids is None else [sorted(ids)[k:k + MAX_TAG_IDS]
                                              for k in range(0, len(ids), MAX_TAG_IDS)]
        for batch in batches:
            filters = [{"Name": "key", "Values": list(keys)},
                       {"Name": "resource-type", "Values": ["instance"]}]
            if batch is not None:
                filters.append({"Name": "resource-id", "Values": batch})
            for page in self._pages(self.ec2, "describe_tags", Filters=filters,
                                    expect=("Tags",)):
                try:
                    for t in page["Tags"]:
                        if str(t["Key"]) in keys:   # never trust the server-side filter alone
                            out.setdefault(str(t["ResourceId"]), {})[str(t["Key"])] = \
                                str(t.get("Value", ""))
                except (KeyError, TypeError) as exc:
                    raise MalformedResponse("aws", f"{self.region} ec2.describe_tags",
                                            f"a tag entry lacks {exc}") from None
        return out

    def busy_witness(self, nodes: Sequence[Node]) -> dict[str, Optional[str]]:
        """The busy witness (tags.BUSY_AT instance tag, written by the node itself) of these
        nodes as EC2 has it now: {id: value, or None when the instance carries none}."""
        ids = sorted({n.id for n in nodes})
        found = self._instance_tags((tags.BUSY_AT,), ids) if ids else {}
        return {i: found.get(i, {}).get(tags.BUSY_AT) for i in ids}

    def leave_requests(self, nodes: Sequence[Node]) -> dict[str, Optional[str]]:
        """The nodes' leave requests (tags.LEAVE_REQUESTED instance tag, written by the node on
        itself) as EC2 has them now: {id: value, or None}. Discovery reads them for every
        instance already (one DescribeTags listing), so the engine needs this only for refs
        built elsewhere."""
        ids = sorted({n.id for n in nodes})
        found = self._instance_tags((tags.LEAVE_REQUESTED,), ids) if ids else {}
        return {i: found.get(i, {}).get(tags.LEAVE_REQUESTED) for i in ids}

    def _ref(self, g: dict, environments: Optional[frozenset]) -> Optional[ClusterRef]:
        gtags = {str(t["Key"]): str(t.get("Value", "")) for t in g.get("Tags", [])}
        cluster, env = gtags.get(tags.CLUSTER), gtags.get(tags.ENVIRONMENT)
        # Never trust the server-side filter alone: both keys must be present and match.
        if not cluster or not env or cluster == tags.SHARED:
            return None
        if environments is not None and env not in environments:
            return None
        name = str(g["AutoScalingGroupName"])
        if not tags.is_declared(gtags, env, cluster):
            self.undeclared.append(undeclared(
                cloud="aws", region=self.region, environment=env, cluster=cluster, group=name,
                nodes=sum(1 for i in g.get("Instances", [])
                          if i.get("LifecycleState") in _ASG_LIVE), group_tags=gtags))
            return None
        # No launch times: a DescribeInstances sweep of every node costs more than it adds —
        # a node launched inside the window has no data for its start, which the decision's
        # coverage rule already treats as insufficient data.
        nodes = tuple(Node(id=str(i["InstanceId"]), location=self.region, group=name,
                           protected=bool(i.get("ProtectedFromScaleIn", False)))
                      for i in g.get("Instances", []) if i.get("LifecycleState") in _ASG_LIVE)
        floor = {name: (gtags[tags.BASELINE_NODES],)} if tags.BASELINE_NODES in gtags else {}
        paid = {name: (gtags[tags.BILLED_UNTIL],)} if tags.BILLED_UNTIL in gtags else {}
        created = g.get("CreatedTime")
        return ClusterRef(cloud="aws", region=self.region, environment=env, cluster=cluster,
                          groups=(name,), nodes=nodes, tags=gtags,
                          capacity=int(g.get("DesiredCapacity", 0)),
                          group_nodes={name: len(nodes)}, baseline_tags=floor,
                          billed_tags=paid,
                          created_at=created.timestamp() if hasattr(created, "timestamp")
                          else None)

    def members(self, refs: Sequence[ClusterRef]) -> dict:
        """Each cluster's live instances and desired capacity, re-read right before acting."""
        names = sorted({g for r in refs for g in r.groups})
        found: dict[str, tuple[frozenset, int]] = {}
        for off in range(0, len(names), MAX_NAMES):
            batch = names[off:off + MAX_NAMES]
            for page in self._pages(self.autoscaling, "describe_auto_scaling_groups",
                                    AutoScalingGroupNames=batch, expect=("AutoScalingGroups",)):
                try:
                    for g in page["AutoScalingGroups"]:
                        if g.get("Status") == _DELETING:
                            continue
                        found[str(g["AutoScalingGroupName"])] = (
                            frozenset(str(i["InstanceId"]) for i in g.get("Instances", [])
                                      if i.get("LifecycleState") in _ASG_LIVE),
                            int(g.get("DesiredCapacity", 0)))
                except (KeyError, TypeError, ValueError) as exc:
                    raise MalformedResponse("aws", f"{self.region} autoscaling."
                                            "describe_auto_scaling_groups",
                                            f"a group entry lacks {exc}") from None
        out = {}
        for r in refs:
            here = [g for g in r.groups if g in found]
            ids = frozenset().union(*(found[g][0] for g in here))
            out[r.key] = Membership(node_ids=ids,
                                    capacity=sum(found[g][1] for g in here),
                                    gone=tuple(g for g in r.groups if g not in found),
                                    members={g: tuple(sorted(found[g][0])) for g in here},
                                    ranks={i: i for i in ids})
        return out

    # ---- utilization --------------------------------------------------------------------
    def utilization(self, nodes: Sequence[Node], start: float, end: float,
                    period_s: int) -> dict:
        """Per-instance maximum GPU utilization per period, batched 500 series per call."""
        ids = sorted({n.id for n in nodes})
        out: dict[str, list] = {i: [] for i in ids}
        t0 = _dt.datetime.fromtimestamp(start, _dt.timezone.utc)
        t1 = _dt.datetime.fromtimestamp(end, _dt.timezone.utc)

        def internal_error(page: dict) -> Optional[str]:
            bad = [r.get("Id") for r in page["MetricDataResults"]
                   if isinstance(r, dict) and r.get("StatusCode") == "InternalError"]
            return f"GetMetricData answered InternalError for {len(bad)} series" if bad else None
        for off in range(0, len(ids), MAX_QUERIES):
            batch = ids[off:off + MAX_QUERIES]
            queries = [{
                "Id": f"n{k}", "ReturnData": True,
                "MetricStat": {"Metric": {"Namespace": NAMESPACE, "MetricName": METRIC,
                                          "Dimensions": [{"Name": "InstanceId", "Value": i}]},
                               "Period": period_s, "Stat": "Maximum"}}
                for k, i in enumerate(batch)]
            for page in self._pages(self.cloudwatch, "get_metric_data",
                                    MetricDataQueries=queries, StartTime=t0, EndTime=t1,
                                    ScanBy="TimestampAscending", expect=("MetricDataResults",),
                                    check=internal_error):
                try:
                    for r in page["MetricDataResults"]:
                        iid = batch[int(r["Id"][1:])]
                        out[iid] += [(ts.timestamp(), float(v)) for ts, v in
                                     zip(r.get("Timestamps", []), r.get("Values", []))]
                except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
                    raise MalformedResponse("aws", f"{self.region} monitoring.get_metric_data",
                                            f"a result does not match the query ({exc})") from None
        return {i: tuple(sorted(v)) for i, v in out.items()}

    # ---- history (`gpulease recommend`) ----------------------------------------------------
    def usage(self, environment: str, clusters, start: float, end: float,
              period_s: int) -> dict:
        """Per-period maximum GPU utilization of every instance each of ``clusters`` (of
        ``environment``) ran in the window: ``{cluster: {instance id: ((period start, max %),
        ...)}}``.

        A group's instances over the window are its live members, the instances its metrics
        name (ListMetrics lists only metrics with data in the past two weeks) and the instances
        its scaling activities name (kept six weeks): burst nodes terminated 2 to 6 weeks ago
        are found through the latter.
        """
        members: dict[str, set] = {}
        wanted = set(clusters)
        for ref in self.discover(frozenset({environment})):
            if ref.cluster not in wanted:
                continue
            ids = members.setdefault(ref.cluster, set())
            ids.update(n.id for n in ref.nodes)
            for asg in ref.groups:
                ids |= self._instances_in_metrics(asg) | self._instances_in_activities(asg)
        every = sorted(set().union(*members.values())) if members else []
        series = self.utilization([Node(id=i) for i in every], start, end, period_s) \
            if every else {}
        return {c: {i: series.get(i, ()) for i in sorted(ids)} for c, ids in members.items()}

    def _instances_in_metrics(self, asg: str) -> set:
        out: set = set()
        for page in self._pages(self.cloudwatch, "list_metrics", Namespace=NAMESPACE,
                                MetricName=METRIC, expect=("Metrics",),
                                Dimensions=[{"Name": ASG_DIMENSION, "Value": asg}]):
            try:
                for m in page["Metrics"]:
                    out.update(str(x["Value"]) for x in m.get("Dimensions", [])
                               if x.get("Name") == "InstanceId")
            except (KeyError, TypeError) as exc:
                raise MalformedResponse("aws", f"{self.region} monitoring.list_metrics",
                                        f"a metric lacks {exc}") from None
        return out

    def _instances_in_activities(self, asg: str) -> set:
        out: set = set()
        pages = self._pages(self.autoscaling, "describe_scaling_activities",
                            AutoScalingGroupName=asg, expect=("Activities",))
        try:
            for page in pages:
                try:
                    for a in page["Activities"]:
                        out.update(_INSTANCE_IN_TEXT.findall(str(a.get("Description", ""))))
                except (KeyError, TypeError) as exc:
                    raise MalformedResponse("aws", f"{self.region} autoscaling.describe_"
                                            "scaling_activities", f"an activity lacks {exc}"
                                            ) from None
        except GroupGone:
            pass    # deleted since discovery: its metrics still say who ran in it
        return out

    # ---- actions ------------------------------------------------------------------------
    def _tag(self, asg: str, key: str, value: Optional[str] = "") -> dict:
        tag = {"ResourceId": asg, "ResourceType": "auto-scaling-group", "Key": key,
               "PropagateAtLaunch": False}
        if value is not None:
            tag["Value"] = value
        return tag

    def mark(self, ref: ClusterRef, value: str) -> None:
        for asg in ref.groups:
            self._call(self.autoscaling, "create_or_update_tags",
                       Tags=[self._tag(asg, tags.IDLE_SINCE, value)])

    def unmark(self, ref: ClusterRef) -> None:
        for asg in ref.groups:
            try:
                self._call(self.autoscaling, "delete_tags",
                           Tags=[self._tag(asg, tags.IDLE_SINCE, None)])
            except GroupGone:
                continue  # a deleted group carries no mark: nothing left to clear

    def scale_to_zero(self, ref: ClusterRef) -> list[str]:
        """ASG min = desired = 0, then the idle mark is cleared (the next idle spell starts a
        new mark and a full grace). The launch template, max size and storage stay as they are.

        Raises GroupGone when every group of the cluster is gone; returns notes otherwise.
        """
        return self._scale(ref, {asg: 0 for asg in ref.groups})

    def scale_to_baseline(self, ref: ClusterRef, targets: dict) -> list[str]:
        """Each ASG in ``targets``: min = desired = its baseline, then the idle mark is cleared.

        MinSize goes to the baseline too (UpdateAutoScalingGroup needs min <= desired), which
        also makes the group refuse a node-side autostop's decrement below it (EC2 Auto Scaling
        API reference, TerminateInstanceInAutoScalingGroup: the group does not go below its
        minimum). Which instances go is the group's termination policy's choice: every node
        was measured idle.
        """
        return self._scale(ref, dict(targets))

    def _scale(self, ref: ClusterRef, targets: dict) -> list[str]:
        notes, done = [], []
        for asg, size in sorted(targets.items()):
            try:
                self._call(self.autoscaling, "update_auto_scaling_group",
                           AutoScalingGroupName=asg, MinSize=int(size),
                           DesiredCapacity=int(size))
                done.append(asg)
            except GroupGone:
                notes.append(f"group {asg} was already deleted")
        if not done:
            raise GroupGone("aws", f"{self.region} autoscaling.update_auto_scaling_group",
                            f"{', '.join(sorted(targets))} deleted during the run")
        for asg in done:
            try:
                self._call(self.autoscaling, "delete_tags",
                           Tags=[self._tag(asg, tags.IDLE_SINCE, None)])
            except CloudError as exc:
                # Harmless: a mark older than the new nodes' data is never honoured.
                notes.append(f"the idle mark on {asg} could not be cleared ({exc})")
        return notes

    def mark_nodes(self, ref: ClusterRef, node_ids: Sequence[str], value: str) -> None:
        """Per-node idle mark: an EC2 instance tag (one CreateTags call for the nodes)."""
        if node_ids:
            self._call(self.ec2, "create_tags", Resources=sorted(node_ids),
                       Tags=[{"Key": tags.NODE_IDLE_SINCE, "Value": value}])

    def unmark_nodes(self, ref: ClusterRef, node_ids: Sequence[str]) -> None:
        if node_ids:
            self._call(self.ec2, "delete_tags", Resources=sorted(node_ids),
                       Tags=[{"Key": tags.NODE_IDLE_SINCE}])

    def remove_nodes(self, ref: ClusterRef, nodes: Sequence[Node]) -> list[str]:
        """TerminateInstanceInAutoScalingGroup with ShouldDecrementDesiredCapacity for each node,
        so the group does not launch a replacement. A group refuses to decrement below its
        MinSize ("Currently, desiredSize equals minSize …"), so where the minimum is above what
        stays, it is lowered first to exactly what stays (never below the floor: the decision
        never removes a floor node). A node already gone is a note, not an error."""
        notes: list[str] = []
        by_group: dict[str, list[Node]] = {}
        for n in nodes:
            by_group.setdefault(n.group, []).append(n)
        page = self._call(self.autoscaling, "describe_auto_scaling_groups",
                          AutoScalingGroupNames=sorted(by_group), expect=("AutoScalingGroups",))
        sizes = {str(g["AutoScalingGroupName"]): (int(g.get("MinSize", 0)),
                                                  int(g.get("DesiredCapacity", 0)))
                 for g in page["AutoScalingGroups"] if g.get("Status") != _DELETING}
        removed = 0
        for asg, members in sorted(by_group.items()):
            if asg not in sizes:
                notes.append(f"group {asg} was already deleted")
                continue
            low, desired = sizes[asg]
            stays = max(desired - len(members), 0)
            if low > stays:
                self._call(self.autoscaling, "update_auto_scaling_group",
                           AutoScalingGroupName=asg, MinSize=stays)
            for n in members:
                try:
                    self._call(self.autoscaling, "terminate_instance_in_auto_scaling_group",
                               InstanceId=n.id, ShouldDecrementDesiredCapacity=True,
                               expect=("Activity",))
                    removed += 1
                except GroupGone:   # "Instance Id not found": someone else took it away
                    notes.append(f"node {n.id} was already gone")
        if not removed and not notes:
            raise GroupGone("aws", f"{self.region} autoscaling.terminate_instance_in_auto_"
                            "scaling_group", "nothing to remove")
        return notes

    def reservations(self, ref: ClusterRef) -> list[Reservation]:
        """Active On-Demand Capacity Reservations tagged with the cluster (billed while unused).

        Listed once per run for the whole region (tag-key filter) and looked up per cluster.
        """
        if self._odcr is None:
            found: dict = {}
            for page in self._pages(self.ec2, "describe_capacity_reservations", Filters=[
                    {"Name": "tag-key", "Values": [tags.CLUSTER]},
                    {"Name": "state", "Values": ["active"]}], expect=("CapacityReservations",)):
                try:
                    for cr in page["CapacityReservations"]:
                        kv = {t["Key"]: t.get("Value", "") for t in cr.get("Tags", [])}
                        key = (kv.get(tags.ENVIRONMENT), kv.get(tags.CLUSTER))
                        found.setdefault(key, []).append(Reservation(
                            id=cr["CapacityReservationId"], instance_type=cr["InstanceType"],
                            count=int(cr.get("TotalInstanceCount", 0)), region=self.region,
                            zone=cr.get("AvailabilityZone", "")))
                except (KeyError, TypeError, ValueError) as exc:
                    raise MalformedResponse("aws", f"{self.region} ec2.describe_capacity_"
                                            "reservations", f"an entry lacks {exc}") from None
            self._odcr = found
        return list(self._odcr.get((ref.environment, ref.cluster), ()))

    # ---- claims (gpulease/reaper/claims.py) --------------------------------------------------
    def claim_key(self, ref: ClusterRef) -> tuple:
        return ("aws", self.region, ref.environment, ref.cluster)

    def claims(self) -> list[Claim]:
        """Every claim tag on any gpulease ASG of the region, all environments (the discovery
        listing again: claim keys carry the run token, and DescribeTags filters exact keys)."""
        out = []
        for page in self._pages(self.autoscaling, "describe_auto_scaling_groups",
                                Filters=[{"Name": "tag-key", "Values": [tags.CLUSTER]}],
                                expect=("AutoScalingGroups",)):
            try:
                for g in page["AutoScalingGroups"]:
                    kv = {str(t["Key"]): str(t.get("Value", "")) for t in g.get("Tags", [])}
                    env, cluster = kv.get(tags.ENVIRONMENT), kv.get(tags.CLUSTER)
                    if not env or not cluster:
                        continue  # not a cluster discovery would act on
                    for k, v in kv.items():
                        run = token_of(k)
                        if run:
                            out.append(Claim(key=("aws", self.region, env, cluster),
                                             token=run, value=v))
            except (KeyError, TypeError) as exc:
                raise MalformedResponse("aws", f"{self.region} autoscaling."
                                        "describe_auto_scaling_groups",
                                        f"a group entry lacks {exc}") from None
        return out

    def claim(self, ref: ClusterRef, key: str, value: str, *, now: float) -> None:
        """Write this run's claim; drop expired claims of any run on the same group (an ASG
        holds at most 50 tags)."""
        stale = [k for k, v in ref.tags.items() if token_of(k) and k != key and expired(v, now)]
        for asg in ref.groups:
            self._call(self.autoscaling, "create_or_update_tags",
                       Tags=[self._tag(asg, key, value)])
            if stale:
                self._call(self.autoscaling, "delete_tags",
                           Tags=[self._tag(asg, k, None) for k in stale])

    def release(self, ref: ClusterRef, key: str) -> None:
        """Delete this run's claim (its key is the run's own: nobody else's claim is touched)."""
        for asg in ref.groups:
            try:
                self._call(self.autoscaling, "delete_tags", Tags=[self._tag(asg, key, None)])
            except GroupGone:
                continue


    # ---- the deadline step (issue 37 item 3) -----------------------------------------------
    def _deadline_groups(self, filters: list) -> list[dict]:
        groups: list[dict] = []
        for page in self._pages(self.autoscaling, "describe_auto_scaling_groups",
                                Filters=filters, expect=("AutoScalingGroups",)):
            groups += page["AutoScalingGroups"]
        return groups

    def deadline_jobs(self, environments: Optional[frozenset]) -> list[DeadlineRef]:
        """Window jobs with a spot and an on-demand group (tags.DEADLINE_GROUP), their sizes,
        in-service and interrupted spot nodes, and the progress each published."""
        filters = [{"Name": "tag-key", "Values": [tags.DEADLINE_GROUP]}]
        if environments is not None:
            filters.append({"Name": f"tag:{tags.ENVIRONMENT}", "Values": sorted(environments)})
        return self._deadline_refs(self._deadline_groups(filters), environments)

    def deadline_job(self, ref: DeadlineRef) -> DeadlineRef:
        """The same job re-read (the re-check before a switch). Raises GroupGone when one
        of its groups is gone."""
        groups = self._deadline_groups([{"Name": f"tag:{tags.CLUSTER}", "Values": [ref.cluster]},
                                        {"Name": f"tag:{tags.ENVIRONMENT}",
                                         "Values": [ref.environment]}])
        got = [x for x in self._deadline_refs(groups, None) if x.key == ref.key]
        if not got or got[0].groups != ref.groups:
            raise GroupGone("aws", f"{self.region} autoscaling.describe_auto_scaling_groups",
                            f"{', '.join(ref.groups)}: a group of the job is gone or changed")
        return got[0]

    def _deadline_refs(self, groups: list[dict], environments) -> list[DeadlineRef]:
        from gpulease.purchase import ON_DEMAND, SPOT

        pairs: dict[tuple, dict] = {}
        for g in groups:
            gtags = {str(t["Key"]): str(t.get("Value", "")) for t in g.get("Tags", [])}
            cluster, env = gtags.get(tags.CLUSTER), gtags.get(tags.ENVIRONMENT)
            role = gtags.get(tags.DEADLINE_GROUP)
            if not cluster or not env or role not in (SPOT, ON_DEMAND) or (
                    environments is not None and env not in environments):
                continue
            if not tags.is_declared(gtags, env, cluster):
                continue    # not the program's group (docs/reaper.md, "Declared groups")
            pairs.setdefault((env, cluster), {})[role] = (g, gtags)
        out = []
        for (env, cluster), pair in sorted(pairs.items()):
            if set(pair) != {SPOT, ON_DEMAND}:
                continue   # half a pair: not the program's; the step leaves it alone
            (sg, st), (og, ot) = pair[SPOT], pair[ON_DEMAND]
            insts = [i for i in sg.get("Instances", [])]
            in_service = sum(1 for i in insts if i.get("LifecycleState") == "InService"
                             and i.get("HealthStatus", "Healthy") == "Healthy")
            # the group replacing an interrupted or rebalance-recommended spot node
            # (capacity_rebalance) takes it out of service: Terminating* lifecycle states
            interrupted = sum(1 for i in insts
                              if str(i.get("LifecycleState", "")).startswith("Terminating"))
            od_in = sum(1 for i in og.get("Instances", [])
                        if i.get("LifecycleState") == "InService")
            raw, err = self._progress(st.get(tags.DEADLINE_PROGRESS))
            out.append(DeadlineRef(
                cluster=cluster, environment=env, cloud="aws", region=self.region,
                spot_group=str(sg["AutoScalingGroupName"]),
                on_demand_group=str(og["AutoScalingGroupName"]),
                spot_desired=int(sg.get("DesiredCapacity", 0)), spot_in_service=in_service,
                on_demand_desired=int(og.get("DesiredCapacity", 0)),
                on_demand_in_service=od_in, tags=combined_tags([st, ot]), progress=raw,
                progress_error=err, interrupted=interrupted))
        return out

    def _progress(self, uri: Optional[str]) -> tuple[Optional[bytes], Optional[str]]:
        """The progress document's bytes (at most MAX_PROGRESS_BYTES + 1 read), or why not:
        no object is "none published" (gpulease.deadline.read_progress)."""
        from gpulease import deadline as dl

        if not uri or not uri.startswith("s3://") or self.s3 is None:
            return None, f"no readable {tags.DEADLINE_PROGRESS} ({uri!r})"
        bucket, _, key = uri[len("s3://"):].partition("/")
        try:
            resp = self._call(self.s3, "get_object", Bucket=bucket, Key=key,
                              Range=f"bytes=0-{dl.MAX_PROGRESS_BYTES}")
        except CloudError as exc:
            # Decided by the HTTP status S3 answered (404: NoSuchKey / NoSuchBucket), never by
            # the error's text, which may quote any digits (issue 35). Without s3:ListBucket
            # (the reaper has none) S3 answers a missing key with 403 AccessDenied: that one
            # cannot be told from a refusal and stays a finding (none done, said so).
            if exc.status == 404:
                return None, None
            return None, f"progress not read ({exc}): taken as none done"
        return resp["Body"].read(dl.MAX_PROGRESS_BYTES + 1), None

    def deadline_mark(self, ref: DeadlineRef, value: str) -> None:
        self._call(self.autoscaling, "create_or_update_tags",
                   Tags=[self._tag(ref.spot_group, tags.DEADLINE_SWITCH, value)])

    def deadline_unmark(self, ref: DeadlineRef) -> None:
        self._call(self.autoscaling, "delete_tags",
                   Tags=[self._tag(ref.spot_group, tags.DEADLINE_SWITCH, None)])

    def deadline_resize(self, ref: DeadlineRef, targets: dict) -> None:
        """Desired capacity of each group (min 0: node autostop may still decrement). The
        group that gains goes first, so the job is never left with neither."""
        for asg, size in sorted(targets.items(), key=lambda kv: -kv[1]):
            self._call(self.autoscaling, "update_auto_scaling_group",
                       AutoScalingGroupName=asg, MinSize=0, DesiredCapacity=int(size))


def _merged(parts: list[ClusterRef]) -> ClusterRef:
    """One cluster from the Auto Scaling groups that carry its environment and cluster tags
    (tags combined by the shared rule, :func:`gpulease.reaper.decision.combined_tags`)."""
    if len(parts) == 1:
        return parts[0]
    parts = sorted(parts, key=lambda r: r.groups)
    first = parts[0]
    return ClusterRef(cloud=first.cloud, region=first.region, environment=first.environment,
                      cluster=first.cluster, groups=tuple(g for r in parts for g in r.groups),
                      nodes=tuple(n for r in parts for n in r.nodes),
                      tags=combined_tags([r.tags for r in parts]),
                      capacity=sum(r.capacity for r in parts),
                      group_nodes={g: n for r in parts for g, n in r.group_nodes.items()},
                      baseline_tags={g: v for r in parts for g, v in r.baseline_tags.items()},
                      billed_tags={g: v for r in parts for g, v in r.billed_tags.items()},
                      created_at=min((r.created_at for r in parts if r.created_at is not None),
                                     default=None),
                      node_marks={k: v for r in parts for k, v in r.node_marks.items()},
                      busy_at=None if all(r.busy_at is None for r in parts) else
                      {k: v for r in parts for k, v in (r.busy_at or {}).items()},
                      leave_requests=None if all(r.leave_requests is None for r in parts) else
                      {k: v for r in parts for k, v in (r.leave_requests or {}).items()})
