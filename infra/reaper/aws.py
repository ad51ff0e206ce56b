"""AWS adaptor of the reaper: gpulease ASGs, CloudWatch GPU utilization, tags, scale to zero.

boto3 clients are created in :func:`clients` (the one place; boto3 honours AWS_ENDPOINT_URL, so
the same code runs against moto or any emulator) and passed in. botocore's own retries are
switched off so that every retry goes through :class:`infra.reaper.retry.Backoff` and is counted
once; botocore errors become :class:`infra.errors.CloudError` here and nowhere else.
"""
from __future__ import annotations

import datetime as _dt
from collections import Counter
from typing import Any, Optional, Sequence

from infra.costing import tags
from infra.errors import CloudError
from infra.reaper.decision import ClusterRef, Node
from infra.reaper.engine import Reservation
from infra.reaper.retry import Backoff

#: CloudWatch agent `nvidia_gpu` metric (DOMAIN.md; agent config rendered from templates/).
NAMESPACE = "CWAgent"
METRIC = "nvidia_smi_utilization_gpu"
#: GetMetricData accepts at most 500 MetricDataQuery structures per call (CloudWatch API ref).
MAX_QUERIES = 500
_ASG_LIVE = ("Pending", "Pending:Wait", "Pending:Proceed", "InService")

_RETRY_CODES = frozenset({
    "Throttling", "ThrottlingException", "ThrottledException", "RequestLimitExceeded",
    "TooManyRequestsException", "RequestThrottled", "RequestThrottledException", "SlowDown",
    "ServiceUnavailable", "ServiceUnavailableException", "InternalError", "InternalFailure",
    "InternalServiceError", "RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete",
})


def clients(region: str, session: Any = None) -> dict:
    """The boto3 clients the adaptor needs, for one region (AWS_ENDPOINT_URL is honoured)."""
    import boto3
    from botocore.config import Config

    session = session or boto3.session.Session()
    cfg = Config(region_name=region, retries={"total_max_attempts": 1, "mode": "standard"},
                 connect_timeout=10, read_timeout=30, max_pool_connections=20)
    return {name: session.client(name, config=cfg)
            for name in ("autoscaling", "ec2", "cloudwatch")}  # ec2: capacity reservations only


def _retryable(exc: BaseException) -> bool:
    from botocore.exceptions import (ClientError, ConnectionClosedError,
                                     EndpointConnectionError, ReadTimeoutError)

    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return err.get("Code") in _RETRY_CODES or int(status or 0) >= 500
    return isinstance(exc, (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError))


def _code(exc: BaseException) -> str:
    resp = getattr(exc, "response", None) or {}
    return resp.get("Error", {}).get("Code", "")


class AwsReaper:
    """Discovery and actions in one AWS region."""

    cloud = "aws"

    def __init__(self, *, region: str, autoscaling: Any, ec2: Any, cloudwatch: Any,
                 backoff: Optional[Backoff] = None):
        self.region = region
        self.label = region
        self.autoscaling, self.ec2, self.cloudwatch = autoscaling, ec2, cloudwatch
        self.backoff = backoff or Backoff()
        #: API calls made, by "service.Operation" (the bench prints them).
        self.calls: Counter = Counter()
        self._odcr: Optional[dict] = None  # (environment, cluster) -> reservations, per run

    @classmethod
    def for_region(cls, region: str, session: Any = None, **kw: Any) -> "AwsReaper":
        return cls(region=region, **clients(region, session), **kw)

    # ---- the one boundary to botocore ---------------------------------------------------
    def _call(self, client: Any, op: str, **params: Any) -> dict:
        from botocore.exceptions import BotoCoreError, ClientError

        method = getattr(client, op)
        service = client.meta.service_model.service_name

        def once() -> dict:
            self.calls[f"{service}.{op}"] += 1
            return method(**params)
        try:
            return self.backoff.call(once, retryable=_retryable)
        except (ClientError, BotoCoreError) as exc:
            raise CloudError("aws", f"{self.region} {service}.{op}", str(exc),
                             retryable=_retryable(exc)) from None

    # ---- discovery ----------------------------------------------------------------------
    def discover(self, environments: Optional[frozenset]) -> list[ClusterRef]:
        self._odcr = None
        filters = [{"Name": "tag-key", "Values": [tags.CLUSTER]}]
        if environments is not None:
            filters.append({"Name": f"tag:{tags.ENVIRONMENT}", "Values": sorted(environments)})
        groups: list[dict] = []
        token = None
        while True:
            page = self._call(self.autoscaling, "describe_auto_scaling_groups", Filters=filters,
                              MaxRecords=100, **({"NextToken": token} if token else {}))
            groups += page.get("AutoScalingGroups", [])
            token = page.get("NextToken")
            if not token:
                break
        refs = []
        for g in groups:
            gtags = {t["Key"]: t.get("Value", "") for t in g.get("Tags", [])}
            cluster, env = gtags.get(tags.CLUSTER), gtags.get(tags.ENVIRONMENT)
            # Never trust the server-side filter alone: both keys must be present and match.
            if not cluster or not env or cluster == tags.SHARED:
                continue
            if environments is not None and env not in environments:
                continue
            # No launch times: a DescribeInstances sweep of every node costs more than it adds —
            # a node launched inside the window has no data for its start, which the decision's
            # coverage rule already treats as insufficient data.
            nodes = tuple(Node(id=i["InstanceId"], location=self.region)
                          for i in g.get("Instances", []) if i.get("LifecycleState") in _ASG_LIVE)
            refs.append(ClusterRef(cloud="aws", region=self.region, environment=env,
                                   cluster=cluster, groups=(g["AutoScalingGroupName"],),
                                   nodes=nodes, tags=gtags,
                                   capacity=int(g.get("DesiredCapacity", 0))))
        return refs

    # ---- utilization --------------------------------------------------------------------
    def utilization(self, nodes: Sequence[Node], start: float, end: float,
                    period_s: int) -> dict:
        """Per-instance maximum GPU utilization per period, batched 500 series per call."""
        ids = sorted({n.id for n in nodes})
        out: dict[str, list] = {i: [] for i in ids}
        t0 = _dt.datetime.fromtimestamp(start, _dt.timezone.utc)
        t1 = _dt.datetime.fromtimestamp(end, _dt.timezone.utc)
        for off in range(0, len(ids), MAX_QUERIES):
            batch = ids[off:off + MAX_QUERIES]
            queries = [{
                "Id": f"n{k}", "ReturnData": True,
                "MetricStat": {"Metric": {"Namespace": NAMESPACE, "MetricName": METRIC,
                                          "Dimensions": [{"Name": "InstanceId", "Value": i}]},
                               "Period": period_s, "Stat": "Maximum"}}
                for k, i in enumerate(batch)]
            token = None
            while True:
                page = self._call(self.cloudwatch, "get_metric_data", MetricDataQueries=queries,
                                  StartTime=t0, EndTime=t1, ScanBy="TimestampAscending",
                                  **({"NextToken": token} if token else {}))
                for r in page.get("MetricDataResults", []):
                    iid = batch[int(r["Id"][1:])]
                    out[iid] += [(ts.timestamp(), float(v))
                                 for ts, v in zip(r.get("Timestamps", []), r.get("Values", []))]
                token = page.get("NextToken")
                if not token:
                    break
        return {i: tuple(sorted(v)) for i, v in out.items()}

    # ---- actions ------------------------------------------------------------------------
    def _tag(self, asg: str, key: str, value: str = "") -> dict:
        return {"ResourceId": asg, "ResourceType": "auto-scaling-group", "Key": key,
                "Value": value, "PropagateAtLaunch": False}

    def mark(self, ref: ClusterRef, value: str) -> None:
        for asg in ref.groups:
            self._call(self.autoscaling, "create_or_update_tags",
                       Tags=[self._tag(asg, tags.IDLE_SINCE, value)])

    def unmark(self, ref: ClusterRef) -> None:
        for asg in ref.groups:
            self._call(self.autoscaling, "delete_tags", Tags=[self._tag(asg, tags.IDLE_SINCE)])

    def scale_to_zero(self, ref: ClusterRef) -> None:
        """ASG min = desired = 0; the launch template, max size and storage stay as they are."""
        for asg in ref.groups:
            try:
                self._call(self.autoscaling, "update_auto_scaling_group",
                           AutoScalingGroupName=asg, MinSize=0, DesiredCapacity=0)
            except CloudError as exc:
                if "not found" in str(exc).lower():  # already gone: teardown is idempotent
                    continue
                raise

    def reservations(self, ref: ClusterRef) -> list[Reservation]:
        """Active On-Demand Capacity Reservations tagged with the cluster (billed while unused).

        Listed once per run for the whole region (tag-key filter) and looked up per cluster.
        """
        if self._odcr is None:
            self._odcr = {}
            token = None
            while True:
                page = self._call(self.ec2, "describe_capacity_reservations", Filters=[
                    {"Name": "tag-key", "Values": [tags.CLUSTER]},
                    {"Name": "state", "Values": ["active"]}],
                    **({"NextToken": token} if token else {}))
                for cr in page.get("CapacityReservations", []):
                    kv = {t["Key"]: t.get("Value", "") for t in cr.get("Tags", [])}
                    key = (kv.get(tags.ENVIRONMENT), kv.get(tags.CLUSTER))
                    self._odcr.setdefault(key, []).append(Reservation(
                        id=cr["CapacityReservationId"], instance_type=cr["InstanceType"],
                        count=int(cr.get("TotalInstanceCount", 0)), region=self.region,
                        zone=cr.get("AvailabilityZone", "")))
                token = page.get("NextToken")
                if not token:
                    break
        return list(self._odcr.get((ref.environment, ref.cluster), ()))
