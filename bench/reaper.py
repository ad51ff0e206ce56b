"""Bench: the reaper over 500 clusters / 5,000 instances on moto's server — wall time and API calls.

    python bench/reaper.py [--clusters 500] [--nodes 10] [--stock-moto] [--witness]

Mix: 60% idle, 30% busy, 10% without metrics. Pass 1 marks the idle clusters, pass 2 (after
the grace period, simulated time) re-checks utilization since the mark, claims the clusters
(the claim protocol shared with concurrent reapers, with its real settle wait), re-reads group
membership and scales them to zero. Only the reaper passes are timed (building 5,000 instances
in moto is not).

--witness: the same world twice in one invocation, first without the nodes' busy witness (the
reference), then with every instance publishing one (contract C10: the instance tag
``gpulease-busy-witness`` from the launch template, ``gpulease-busy-at`` written at its first
check after boot and not since): what reading it costs the reaper in time and API calls.

moto's GetMetricData scans every stored datum for every query and every period
(O(queries x periods x datums): ~10^9 steps at this size). Unless --stock-moto is given, the
bench swaps that one moto method for an indexed equivalent and first checks on a sample that
both return identical results, so the figure measures the reaper rather than moto's scan.
"""
from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import sys
import time
from collections import Counter
from datetime import timedelta

import boto3
from botocore.awsrequest import AWSResponse
from moto.server import ThreadedMotoServer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from gpulease import tags  # noqa: E402
from gpulease.reaper import decision as d  # noqa: E402
from gpulease.reaper import engine  # noqa: E402
from gpulease.reaper.aws import METRIC, NAMESPACE, AwsReaper  # noqa: E402

REGION = "us-east-1"
PERIOD = 300          # GetMetricData Period; the agent's 60-s samples are folded into 5-min maxima
IDLE_MINUTES = 30
GRACE = 30


def indexed_get_metric_data(original):
    """Same results as moto's get_metric_data for MetricStat queries, via a (name, dims) index."""
    from moto.cloudwatch.models import Statistics

    def fast(self, queries, start_time, end_time, scan_by="TimestampAscending"):
        if any("MetricStat" not in q for q in queries):
            return original(self, queries, start_time, end_time, scan_by)
        start_time = start_time.replace(microsecond=0)
        end_time = end_time.replace(microsecond=0)
        if start_time >= end_time:
            return original(self, queries, start_time, end_time, scan_by)
        index: dict = {}
        for md in self.get_all_metrics():
            if start_time <= md.timestamp < end_time:
                key = (md.name, tuple(sorted((x.name, x.value) for x in md.dimensions)))
                index.setdefault(key, []).append(md)
        out = []
        for q in queries:
            ms = q["MetricStat"]
            delta = timedelta(seconds=int(ms["Period"]))
            dims = tuple(sorted((x["Name"], x["Value"]) for x in ms["Metric"].get("Dimensions", [])))
            buckets: dict = {}
            for md in index.get((ms["Metric"]["MetricName"], dims), []):
                if md.namespace != ms["Metric"]["Namespace"] and not dims:
                    continue
                k = int((md.timestamp - start_time) / delta)
                buckets.setdefault(k, []).append(md)
            vals, stamps = [], []
            for k in sorted(buckets):
                st = Statistics([ms["Stat"]], start_time + k * delta)
                st.metric_data = buckets[k]
                vals.append(st.get_statistics_for_type(ms["Stat"]))
                stamps.append(st.timestamp)
            if scan_by == "TimestampDescending":
                vals.reverse()
                stamps.reverse()
            if q.get("ReturnData", True):
                out.append({"id": q["Id"], "label": q.get("Label") or f"{ms['Metric']['MetricName']} {ms['Stat']}",
                            "values": vals, "timestamps": stamps, "status_code": "Complete"})
        return out
    return fast


def build(n_clusters: int, n_nodes: int, witness: bool = False) -> dict:
    asg = boto3.client("autoscaling", region_name=REGION)
    ec2 = boto3.client("ec2", region_name=REGION)
    cw = boto3.client("cloudwatch", region_name=REGION)
    ec2.create_launch_template(LaunchTemplateName="gpu-lt", LaunchTemplateData={
        "ImageId": "ami-12c6146b", "InstanceType": "g6.xlarge"})
    kinds = {}
    for c in range(n_clusters):
        name = f"c{c:04d}"
        # (first-job grace 0: the passes run in simulated time right after creation, while the
        # groups' CreatedTime is real time; without it every idle cluster is held as new)
        kv = {tags.CLUSTER: name, tags.ENVIRONMENT: "bench", tags.IDLE_MINUTES: str(IDLE_MINUTES),
              tags.DECLARED: tags.declared_value("bench", name),
              tags.FIRST_JOB_GRACE: "0"}
        asg.create_auto_scaling_group(
            AutoScalingGroupName=name, LaunchTemplate={"LaunchTemplateName": "gpu-lt"},
            MinSize=n_nodes, MaxSize=n_nodes, DesiredCapacity=n_nodes,
            AvailabilityZones=[f"{REGION}a"],
            Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True, "ResourceId": name,
                   "ResourceType": "auto-scaling-group"} for k, v in kv.items()])
        kinds[name] = "idle" if c % 10 < 6 else "busy" if c % 10 < 9 else "nodata"
    launched = []
    paginator = ec2.get_paginator("describe_instances")
    ids_by_asg: dict = {}
    for page in paginator.paginate():
        for r in page["Reservations"]:
            for i in r["Instances"]:
                launched.append(i["LaunchTime"].timestamp())
                group = {t["Key"]: t["Value"] for t in i.get("Tags", [])}.get(tags.CLUSTER)
                ids_by_asg.setdefault(group, []).append(i["InstanceId"])
    t0 = max(launched)
    if witness:   # every node: the launch template's tag, and its first check after boot
        every = sorted(i for ids in ids_by_asg.values() for i in ids)
        for off in range(0, len(every), 500):
            ec2.create_tags(Resources=every[off:off + 500], Tags=[
                {"Key": tags.BUSY_WITNESS, "Value": "1"},
                {"Key": tags.BUSY_AT, "Value": str(int(min(launched)) + 60)}])
    data = []
    for name, ids in ids_by_asg.items():
        if kinds.get(name) == "nodata":
            continue
        value = 1.0 if kinds[name] == "idle" else 72.0
        for iid in ids:
            t = min(launched) - 60
            while t < t0 + 120 * 60:
                data.append({"MetricName": METRIC, "Value": value, "Timestamp":
                             dt.datetime.fromtimestamp(t, dt.timezone.utc),
                             "Dimensions": [{"Name": "InstanceId", "Value": iid}]})
                t += PERIOD
    for off in range(0, len(data), 1000):
        cw.put_metric_data(Namespace=NAMESPACE, MetricData=data[off:off + 1000])
    return {"t0": t0, "kinds": kinds, "instances": sum(len(v) for v in ids_by_asg.values()),
            "datums": len(data)}


def check_equivalence(original, fast) -> None:
    from moto.cloudwatch.models import cloudwatch_backends

    backend = cloudwatch_backends["123456789012"][REGION]
    ids = {x.value for md in backend.get_all_metrics()[:5000] for x in md.dimensions}
    queries = [{"Id": f"n{k}", "MetricStat": {"Metric": {
        "Namespace": NAMESPACE, "MetricName": METRIC,
        "Dimensions": [{"Name": "InstanceId", "Value": i}]}, "Period": PERIOD, "Stat": "Maximum"}}
        for k, i in enumerate(sorted(ids)[:10])]
    sample = backend.get_all_metrics()[0].timestamp
    end = dt.datetime.now(dt.timezone.utc).replace(tzinfo=sample.tzinfo) + timedelta(hours=2)
    start = end - timedelta(hours=3)
    a, b = original(backend, queries, start, end), fast(backend, queries, start, end)
    assert a == b, "indexed GetMetricData differs from moto's"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clusters", type=int, default=500)
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--stock-moto", action="store_true",
                    help="keep moto's O(queries x periods x datums) GetMetricData")
    ap.add_argument("--witness", action="store_true",
                    help="run without, then with every node publishing its busy witness")
    args = ap.parse_args()
    if not args.witness:
        return run_world(args, witness=False)[0]
    code, ref = run_world(args, witness=False)
    code2, got = run_world(args, witness=True)
    print(f"busy witness: {got['wall']:.1f} s wall / {got['cpu']:.1f} s CPU and "
          f"{got['calls']} API calls with it, {ref['wall']:.1f} s / {ref['cpu']:.1f} s and "
          f"{ref['calls']} without (same invocation, the reference first): "
          f"x{got['cpu'] / ref['cpu']:.2f} CPU, +{got['calls'] - ref['calls']} calls")
    return code or code2


def run_world(args, *, witness: bool) -> tuple[int, dict]:
    """Build the world in a fresh moto server and run the two reaper passes on it."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(AWS_ENDPOINT_URL=f"http://{host}:{port}", AWS_ACCESS_KEY_ID="bench",
                      AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION=REGION)
    # moto's backends are process-wide: a second world starts from an empty account
    import urllib.request
    urllib.request.urlopen(urllib.request.Request(f"http://{host}:{port}/moto-api/reset",
                                                  method="POST"))
    from moto.cloudwatch.models import CloudWatchBackend
    original = CloudWatchBackend.get_metric_data
    try:
        t = time.perf_counter()
        world = build(args.clusters, args.nodes, witness=witness)
        print(f"{'with' if witness else 'without'} the busy witness")
        print(f"setup: {args.clusters} clusters, {world['instances']} instances, "
              f"{world['datums']} metric datums in {time.perf_counter() - t:.1f} s (not timed)")
        if not args.stock_moto:
            fast = indexed_get_metric_data(original)
            check_equivalence(original, fast)
            CloudWatchBackend.get_metric_data = fast
            print("moto GetMetricData: indexed equivalent (identical results checked on a sample)")

        reaper = AwsReaper.for_region(REGION)

        def no_odcr(**_):  # moto has no capacity-reservation model
            return (AWSResponse("http://moto/", 200, {}, None),
                    {"CapacityReservations": [],
                     "ResponseMetadata": {"HTTPStatusCode": 200, "RequestId": "bench-odcr"}})
        reaper.ec2.meta.events.register("before-call.ec2.DescribeCapacityReservations", no_odcr)
        policy = d.Policy(grace_minutes=GRACE, period_s=PERIOD)
        # pass 1 after the window, the 5 min waited for late data and the 5 min a node's boot
        # witness (written a minute after launch) may stand for: both runs mark at pass 1
        passes = [("pass 1 (mark)", world["t0"] + 47 * 60),
                  ("pass 2 (re-check + scale to zero)", world["t0"] + (47 + GRACE + 5) * 60)]
        total_calls: Counter = Counter()
        total = cpu = 0.0
        for label, now in passes:
            before = Counter(reaper.calls)
            t, c = time.perf_counter(), time.process_time()
            report = engine.run([reaper], policy=policy, apply=True, max_actions=args.clusters,
                                environments=["bench"], now=now)
            took = time.perf_counter() - t
            total += took
            cpu += time.process_time() - c
            calls = Counter(reaper.calls)
            calls.subtract(before)
            total_calls.update(calls)
            states = Counter(o.state for o in report.outcomes)
            print(f"{label}: {took:.1f} s, {sum(calls.values())} API calls "
                  f"({', '.join(f'{k} {v}' for k, v in sorted(calls.items()) if v)}); "
                  f"states {dict(states)}")
        expect_idle = sum(1 for k in world["kinds"].values() if k == "idle")
        print(f"total: {total:.1f} s for {args.clusters} clusters / {world['instances']} "
              f"instances, {sum(total_calls.values())} API calls, retries "
              f"{reaper.backoff.retries}; reaped {states.get(d.REAPED, 0)}/{expect_idle} idle "
              f"clusters (target < 30 s)")
        ok = states.get(d.REAPED, 0) == expect_idle
        return (0 if ok else 1), {"wall": total, "cpu": cpu,
                                  "calls": sum(total_calls.values())}
    finally:
        server.stop()
        CloudWatchBackend.get_metric_data = original


if __name__ == "__main__":
    sys.exit(main())
