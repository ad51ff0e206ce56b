"""Make moto's Auto Scaling as strict as the real API where the reaper depends on it
(TerminateInstanceInAutoScalingGroup included: :func:`terminate_instance`).

moto 5.2 answers CreateOrUpdateTags / DeleteTags on a group that does not exist with an HTML
500 (a KeyError inside moto), and DeleteTags removes a tag whatever value is given. Real Auto
Scaling answers ValidationError "AutoScalingGroup name not found" (cloud-custodian#380 quotes
it), and "If you specify a value and the value is incorrect, the tag is not deleted" (EC2 Auto
Scaling User Guide, Delete tags) — the reaper's claim withdrawal relies on that. moto has no
DescribeCapacityReservations at all. The server runs in-process (ThreadedMotoServer), so
patching the classes is enough.

moto also answers GetMetricData with a datapoint the instant it is put. Real datapoints arrive
late (docs/reaper.md, "Late metrics"): the CloudWatch agent holds them up to its
``force_flush_interval`` (default 60 s) and a new datapoint can take up to 2 min to be
retrievable. :func:`install` therefore replaces GetMetricData with :func:`get_metric_data_response`,
which hides every datapoint younger than ``METRIC_DELAY_S`` (default :data:`AGENT_DELAY_S`,
settable per test with :func:`set_metric_delay`) as of the fake's clock (``CLOCK``: the
simulated "now" a test sets, else the wall clock), and keeps CloudWatch's retention, rounding
and paging. :func:`install_history` adds ListMetrics' two-week visibility and Auto Scaling's
scaling activities (below).
"""
from __future__ import annotations

import datetime as _dt
import sys
import time as _time

from moto.autoscaling.exceptions import ValidationError
from moto.autoscaling.models import AutoScalingBackend

from tests.timeouts import HANG_S


def _group(backend: AutoScalingBackend, name: str):
    group = backend.autoscaling_groups.get(name)
    if group is None:
        raise ValidationError(f"AutoScalingGroup name not found - AutoScaling Group {name} "
                              "not found")
    return group


def create_or_update_tags(self, tags):
    for tag in tags:
        _group(self, tag["ResourceId"])
    return _ORIGINAL["create_or_update_tags"](self, tags)


def delete_tags(self, tags):
    for tag in tags:
        group = _group(self, tag["ResourceId"])
        want = tag.get("Value")
        group.tags = [t for t in group.tags if not (
            t["Key"] == tag["Key"] and (want is None or t.get("Value") == want))]


def terminate_instance(self, instance_id, should_decrement):
    """TerminateInstanceInAutoScalingGroup as Auto Scaling answers it where moto is laxer: an
    instance in no group is ValidationError "Instance Id not found - No managed instance found
    for instance ID i-..." (moto: an HTML 500 from a StopIteration), and a decrement below the
    group's MinSize is refused with "Currently, desiredSize equals minSize (N). Terminating
    instance without replacement will violate group's min size constraint. Either set
    shouldDecrementDesiredCapacity flag to false or lower group's min size." (moto: allowed).
    Both messages as AWS answers them (quoted in aws/aws-cli#47, hashicorp/nomad-autoscaler
    #1290, yaybu/touchdown#51)."""
    group = next((g for g in self.autoscaling_groups.values()
                  for st in g.instance_states if st.instance.id == instance_id), None)
    if group is None:
        raise ValidationError("Instance Id not found - No managed instance found for instance "
                              f"ID {instance_id}")
    if should_decrement and group.desired_capacity <= group.min_size:
        raise ValidationError(
            f"Currently, desiredSize equals minSize ({group.min_size}). Terminating instance "
            "without replacement will violate group's min size constraint. Either set "
            "shouldDecrementDesiredCapacity flag to false or lower group's min size.")
    return _ORIGINAL["terminate_instance"](self, instance_id, should_decrement)


_ORIGINAL = {"create_or_update_tags": AutoScalingBackend.create_or_update_tags,
             "delete_tags": AutoScalingBackend.delete_tags,
             "terminate_instance": AutoScalingBackend.terminate_instance}


def describe_capacity_reservations(self):
    """moto has no model of capacity reservations (an HTML 500 "not implemented"): answer as
    an account without any does (NOTES.md)."""
    from moto.core.responses import ActionResult

    return ActionResult({"CapacityReservations": []})


#: EC2 DescribeTags MaxResults: "This value can be between 5 and 1000. To get the next page of
#: items, make another request with the token returned in the output" (EC2 API reference,
#: DescribeTags); without MaxResults every tag is returned. moto ignores MaxResults.
DESCRIBE_TAGS_MAX = 1000


def describe_tags(self):
    """EC2 DescribeTags paged as EC2 pages it (moto returns every tag in one answer)."""
    from moto.core.responses import ActionResult

    filters = self._filters_from_querystring()
    self.error_on_dryrun()
    found = self.ec2_backend.describe_tags(filters=filters)
    size = self._get_int_param("MaxResults")
    if size is None:
        return ActionResult({"Tags": found})
    size = min(size, DESCRIBE_TAGS_MAX)
    off = int(self._get_param("NextToken") or 0)
    out = {"Tags": found[off:off + size]}
    if off + size < len(found):
        out["NextToken"] = str(off + size)
    return ActionResult(out)


#: the services the tests and the reaper call; :func:`start_server` warms them.
WARM_SERVICES = ("ec2", "autoscaling", "cloudwatch", "s3")


def start_server():
    """moto's server on 127.0.0.1 (a free port), in this process, with the backends the tests
    use already loaded. Returns ``(server, url)``; stop it with ``server.stop()``.

    moto imports and builds a service's backend on its first request: EC2's took 3.5-6.9 s of
    one request at load 12, long enough for a short client timeout to fire on a loaded machine
    (tests/timeouts.py). Warming them here, with no deadline, leaves every later request cheap,
    the reaper's own (connect 10 s, read 30 s) included."""
    import logging

    import requests
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    session = test_session()
    kw = dict(region_name="us-east-1", endpoint_url=url)
    session.client("ec2", **kw).describe_instances()
    session.client("autoscaling", **kw).describe_auto_scaling_groups()
    session.client("cloudwatch", **kw).list_metrics()
    session.client("s3", **kw).list_buckets()
    requests.post(f"{url}/moto-api/reset", timeout=HANG_S)
    return server, url


def reset(url: str) -> None:
    """Empty every moto backend (they are process-wide, shared by all servers of the process)."""
    import requests

    requests.post(f"{url}/moto-api/reset", timeout=HANG_S)


def test_session():
    """A boto3 session for the tests' own calls to moto: dummy keys, HANG_S timeouts and no
    botocore retries (a retried create would answer AlreadyExists, hiding what happened)."""
    import boto3
    from botocore.config import Config

    session = boto3.session.Session(aws_access_key_id="testing",
                                    aws_secret_access_key="testing")
    session._session.set_default_client_config(Config(
        connect_timeout=HANG_S, read_timeout=HANG_S,
        retries={"total_max_attempts": 1, "mode": "standard"}))
    return session


def point_boto_at(url: str, monkeypatch) -> None:
    """Fresh moto state (the server's backends are process-wide), dummy credentials, boto3
    pointed at ``url`` through AWS_ENDPOINT_URL (``boto3.client`` in a test gets
    :func:`test_session`'s timeouts), and the strict Auto Scaling of :func:`install`."""
    import boto3

    reset(url)
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", test_session())
    install(monkeypatch)


def install(monkeypatch) -> None:
    """Patch for the duration of one test (pytest's monkeypatch undoes it): strict Auto
    Scaling tags, DescribeCapacityReservations, EC2 DescribeTags paging, and GetMetricData with CloudWatch's retention,
    paging and publication delay (the fake's clock and delay are reset for the test)."""
    from moto.cloudwatch.responses import CloudWatchResponse
    from moto.ec2.responses import EC2Response

    monkeypatch.setattr(AutoScalingBackend, "create_or_update_tags", create_or_update_tags)
    monkeypatch.setattr(AutoScalingBackend, "delete_tags", delete_tags)
    monkeypatch.setattr(AutoScalingBackend, "terminate_instance", terminate_instance)
    monkeypatch.setattr(EC2Response, "describe_capacity_reservations",
                        describe_capacity_reservations, raising=False)
    monkeypatch.setattr(EC2Response, "describe_tags", describe_tags)
    monkeypatch.setattr(CloudWatchResponse, "get_metric_data", get_metric_data_response)
    here = sys.modules[__name__]
    monkeypatch.setattr(here, "CLOCK", [None])
    monkeypatch.setattr(here, "METRIC_DELAY_S", [AGENT_DELAY_S])


def set_metric_delay(seconds: float) -> None:
    """How late datapoints become visible to GetMetricData in this test (0 = at once)."""
    METRIC_DELAY_S[0] = float(seconds)


def set_clock(now: float) -> None:
    """The fake's "now" (epoch s): the simulated time a test passes to the reaper."""
    CLOCK[0] = float(now)


# ---- CloudWatch history and Auto Scaling activities, as `gpulease recommend` reads them ---------
# moto keeps every datum forever, lists every metric ever written, answers any Period and never
# pages GetMetricData, and records no scaling activities. Real CloudWatch and Auto Scaling:
#
# - ListMetrics: "metrics that have not had any new data points in the past two weeks" are not
#   listed (ListMetrics API reference), 500 per page;
# - GetMetricData (API reference): Period 1, 5, 10, 20, 30, 60 or a multiple of 60; at most 500
#   queries; data older than 15 days needs a Period that is a multiple of 300 s, older than 63
#   days a multiple of 3600 s ("or no data points in that time range is returned"); datapoints
#   are kept 455 days; StartTime is rounded down (to the minute under 15 days, to 5 minutes up
#   to 63, to the hour beyond); at most MaxDatapoints (default 100,800) per answer, the rest
#   behind NextToken;
# - DescribeScalingActivities: "all activities for the past six weeks", newest first, MaxRecords
#   at most 100, NextToken.
DAY = 86400
LIST_METRICS_RECENT_S = 14 * DAY
ACTIVITY_RETENTION_S = 42 * DAY
MAX_DATAPOINTS = 100_800
MAX_QUERIES = 500
#: activities recorded by tests: group name -> [activity dicts] (see :func:`record_activity`).
ACTIVITIES: dict = {}
#: "now" of the fake (epoch s); tests that simulate time set it. None = the wall clock.
CLOCK: list = [None]
#: the CloudWatch agent's default force_flush_interval (60 s: "The default value is 60",
#: CloudWatch User Guide, "Manually create or edit the CloudWatch agent configuration file";
#: defaultForceFlushInterval = time.Minute in aws/amazon-cloudwatch-agent
#: plugins/outputs/cloudwatch/cloudwatch.go) plus the 2 minutes a new datapoint may take to be
#: retrievable ("it can take up to 2 minutes before you can retrieve statistics for the new
#: metric", CloudWatch User Guide, "Publish custom metrics"): how late a sample may arrive.
AGENT_DELAY_S = 60 + 120
#: the publication delay in force (seconds), see :func:`set_metric_delay`.
METRIC_DELAY_S: list = [AGENT_DELAY_S]


def _now() -> float:
    return CLOCK[0] if CLOCK[0] is not None else _time.time()


def _epoch(ts) -> float:
    if isinstance(ts, (int, float)):
        return float(ts)
    if isinstance(ts, str):
        ts = _dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=_dt.timezone.utc)
    return ts.timestamp()


def _identity(md) -> tuple:
    return (md.namespace, md.name, tuple(sorted((d.name, d.value) for d in md.dimensions)))


def get_filtered_metrics(self, metric_name, namespace, dimensions):
    """ListMetrics' selection: one entry per metric (namespace, name, dimension set) matching
    the filter whose newest datapoint is less than two weeks old."""
    newest: dict = {}
    first: dict = {}
    for md in self.get_all_metrics():
        if not md.filter(namespace=namespace, name=metric_name, dimensions=dimensions):
            continue
        key = _identity(md)
        first.setdefault(key, md)
        newest[key] = max(newest.get(key, 0.0), _epoch(md.timestamp))
    cut = _now() - LIST_METRICS_RECENT_S
    return [md for key, md in first.items() if newest[key] >= cut]


def _validation(message: str):
    from moto.cloudwatch.exceptions import ValidationError as CwValidation

    return CwValidation(message)


def _visible(age_s: float, period: int) -> bool:
    """Whether a period starting ``age_s`` ago can be answered at ``period`` resolution."""
    if age_s > 455 * DAY:
        return False
    if age_s > 63 * DAY:
        return period % 3600 == 0
    if age_s > 15 * DAY:
        return period % 300 == 0
    if age_s > 3 * 3600:
        return period % 60 == 0
    return True


def get_metric_data_response(self):
    """GetMetricData (MetricStat queries) with CloudWatch's retention, rounding, paging and
    publication delay (a datapoint stamped later than the fake's now minus METRIC_DELAY_S is
    not visible yet)."""
    from moto.cloudwatch.models import Statistics
    from moto.core.responses import ActionResult

    params = self._get_params()
    queries = params.get("MetricDataQueries", [])
    if not queries or len(queries) > MAX_QUERIES:
        raise _validation(f"The collection MetricDataQueries must not be empty and must not "
                          f"contain more than {MAX_QUERIES} elements.")
    if any("MetricStat" not in q for q in queries):
        raise _validation("The parameter MetricDataQueries.member.1.MetricStat is required.\n")
    start, end = _epoch(params["StartTime"]), _epoch(params["EndTime"])
    if start >= end:
        raise _validation("The parameter EndTime must be greater than StartTime.")
    now = _now()
    age = now - start
    step = 60 if age <= 15 * DAY else 300 if age <= 63 * DAY else 3600
    start -= start % step
    limit = int(params.get("MaxDatapoints") or MAX_DATAPOINTS)
    newest = now - METRIC_DELAY_S[0]
    index: dict = {}
    for md in self.cloudwatch_backend.get_all_metrics():
        t = _epoch(md.timestamp)
        if start <= t < end and t <= newest:
            index.setdefault(_identity(md), []).append((t, md))
    results = []
    for q in queries:
        ms = q["MetricStat"]
        period = int(ms["Period"])
        if period not in (1, 5, 10, 20, 30, 60) and period % 60:
            raise _validation(f"The parameter MetricDataQueries.member.1.MetricStat.Period must "
                              f"be 1, 5, 10, 20, 30, 60 or a multiple of 60 (got {period}).")
        key = (ms["Metric"]["Namespace"], ms["Metric"]["MetricName"],
               tuple(sorted((x["Name"], x["Value"]) for x in ms["Metric"].get("Dimensions", []))))
        buckets: dict = {}
        for t, md in index.get(key, ()):
            k = int((t - start) // period)
            if _visible(now - (start + k * period), period):
                buckets.setdefault(k, []).append(md)
        stamps, values = [], []
        for k in sorted(buckets):
            st = Statistics([ms["Stat"]], _dt.datetime.fromtimestamp(start + k * period,
                                                                    _dt.timezone.utc))
            st.metric_data = buckets[k]
            stamps.append(st.timestamp)
            values.append(st.get_statistics_for_type(ms["Stat"]))
        if (params.get("ScanBy") or "TimestampDescending") == "TimestampDescending":
            stamps.reverse()
            values.reverse()
        if q.get("ReturnData", True):
            results.append({"id": q["Id"], "label": q.get("Label") or ms["Metric"]["MetricName"],
                            "timestamps": stamps, "values": values})
    # Paging: the token is "query index.point index" to resume at.
    qi, pi = (int(x) for x in (params.get("NextToken") or "0.0").split("."))
    page, budget = [], limit
    while qi < len(results) and budget > 0:
        r = results[qi]
        take = slice(pi, pi + budget)
        part = {**r, "timestamps": r["timestamps"][take], "values": r["values"][take]}
        budget -= len(part["values"])
        pi += len(part["values"])
        done = pi >= len(r["values"])
        page.append({**part, "status_code": "Complete" if done else "PartialData"})
        if done:
            qi, pi = qi + 1, 0
    out = {"MetricDataResults": page}
    if qi < len(results):
        out["NextToken"] = f"{qi}.{pi}"
    return ActionResult(out)


def record_activity(group: str, instance_id: str, at: float, *, launch: bool = True) -> None:
    """Auto Scaling's record of launching (or terminating) ``instance_id`` in ``group`` at
    ``at``, worded as the API reports it."""
    what = (f"Launching a new EC2 instance: {instance_id}" if launch
            else f"Terminating EC2 instance: {instance_id}")
    ACTIVITIES.setdefault(group, []).append({
        "ActivityId": f"act-{len(ACTIVITIES.get(group, []))}-{instance_id}",
        "AutoScalingGroupName": group, "Description": what,
        "Cause": "At %s a user request update of AutoScalingGroup constraints changed the "
                 "desired capacity." % _dt.datetime.fromtimestamp(at, _dt.timezone.utc)
                 .strftime("%Y-%m-%dT%H:%M:%SZ"),
        "StartTime": _dt.datetime.fromtimestamp(at, _dt.timezone.utc),
        "EndTime": _dt.datetime.fromtimestamp(at + 60, _dt.timezone.utc),
        "StatusCode": "Successful", "Progress": 100, "Details": "{}"})


def describe_scaling_activities(self):
    from moto.core.responses import ActionResult

    group = self._get_param("AutoScalingGroupName")
    size = int(self._get_param("MaxRecords") or 100)
    if not 1 <= size <= 100:
        raise ValidationError("MaxRecords must be between 1 and 100")
    cut = _now() - ACTIVITY_RETENTION_S
    found = sorted((a for a in ACTIVITIES.get(group, []) if a["StartTime"].timestamp() >= cut),
                   key=lambda a: a["StartTime"], reverse=True)
    off = int(self._get_param("NextToken") or 0)
    out = {"Activities": found[off:off + size]}
    if off + size < len(found):
        out["NextToken"] = str(off + size)
    return ActionResult(out)


def install_history(monkeypatch) -> None:
    """CloudWatch retention/visibility/paging/delay and Auto Scaling activities, for one
    test."""
    from moto.autoscaling.responses import AutoScalingResponse
    from moto.cloudwatch.models import CloudWatchBackend
    from moto.cloudwatch.responses import CloudWatchResponse

    monkeypatch.setattr(CloudWatchBackend, "get_filtered_metrics", get_filtered_metrics)
    monkeypatch.setattr(CloudWatchResponse, "get_metric_data", get_metric_data_response)
    monkeypatch.setattr(AutoScalingResponse, "describe_scaling_activities",
                        describe_scaling_activities)
    here = sys.modules[__name__]
    monkeypatch.setattr(here, "ACTIVITIES", {})
    monkeypatch.setattr(here, "CLOCK", [None])
    monkeypatch.setattr(here, "METRIC_DELAY_S", [AGENT_DELAY_S])
