"""What really ran, from the bill: each plan cluster's nodes running per hour of a month.

The compute usage lines of the normalised view (:func:`gpulease.spend.sources.normalised_sql`:
``charge`` usage, not a correction, with ``hours``) are summed per hour of their start and per
cluster, the cluster found by the same rule `gpulease spend` classifies with
(:func:`gpulease.spend.classify.owner`: gpulease's cost tags first, then the plan's resource
names). Node-hours in an hour (GPU-hours over GPUs per node where the bill counts GPU-hours,
GCP) rounded to the nearest whole node are the nodes that ran in it. `gpulease recommend
--from-bill` and `gpulease spend`'s config change turn them into a demand profile
(gpulease.recommend.profile.derive_running).

A bill whose lines hold more than one node-hour per resource and hour is not hourly (a daily
FOCUS or CUR export): exit 2, since the nodes per hour cannot be told from it.
"""
from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Optional

from gpulease import tags
from gpulease.errors import Finding, InputError
from gpulease.spend import query as Q
from gpulease.spend import sources as S
from gpulease.spend.classify import PlanIndex, owner

#: node-hours above a whole node per resource and hour tolerated before a bill counts as not
#: hourly (sums of per-second lines in floating point).
SLACK = 1e-6

FIX_TAGS = ("activate gpulease's cost-allocation tags (docs/cost-tags.md) or "
            "give the bill of the accounts and projects the stack runs in")


@dataclass(frozen=True)
class ClusterUsage:
    """One cluster's billed compute in the month."""

    #: nodes running in each hour of the month (index 0 = the month's first hour).
    nodes: tuple[int, ...]
    #: the exact node-hours billed (before rounding to whole nodes per hour).
    node_hours: float
    #: distinct resources (instances) billed.
    resources: int
    #: charge lines read.
    lines: int


@dataclass(frozen=True)
class BillUsage:
    month: str
    start: dt.datetime
    end: dt.datetime
    clusters: dict            # cluster -> ClusterUsage (clusters with billed compute only)

    @property
    def hours(self) -> int:
        return int((self.end - self.start).total_seconds() // 3600)


_USAGE = Q.USAGE_LINES


def months(con, src: S.Source) -> list[str]:
    """The months (``YYYY-MM``, UTC) in which the bill has compute usage lines."""
    rows = con.execute(f"""WITH v AS ({S.normalised_sql(src)})
SELECT DISTINCT strftime(date_trunc('month', start_ts), '%Y-%m') FROM v WHERE {_USAGE}
ORDER BY 1""").fetchall()
    return [r[0] for r in rows]


def pick_month(con, src: S.Source, month: Optional[str]) -> str:
    """``month`` when given and billed; else the bill's only month (exit 2 otherwise)."""
    found = months(con, src)
    if not found:
        raise InputError([Finding("--bill", f"{src.path}: no compute usage line with hours (no "
                                  "instance or GPU hours billed); give a bill that holds the "
                                  "clusters' usage, not only fees or credits")])
    if month is None:
        if len(found) > 1:
            raise InputError([Finding("--month", f"{src.path} holds compute usage of "
                                      f"{len(found)} months ({', '.join(found)}); say which "
                                      f"one, e.g. --month {found[-1]}")])
        return found[0]
    month = S.month_bounds(month)[0].strftime("%Y-%m")
    if month not in found:
        raise InputError([Finding("--month", f"{src.path} has no compute usage line in {month} "
                                  f"(months with usage: {', '.join(found)})")])
    return month


def read(con, src: S.Source, index: PlanIndex, gpus_per_node: Mapping[str, int], *,
         month: str) -> BillUsage:
    """Nodes per hour of ``month`` for every cluster of ``index`` that billed compute: the
    one query's hourly part (gpulease.spend.query), run by DuckDB on a bill on disk."""
    from gpulease.spend import classify as C

    sql = C.one_query_sql(src, Q.DUCKDB, month=month, groups=False, hourly=True, index=index)
    return from_rows(con.execute(sql).fetchall(), src, index, gpus_per_node, month=month)


def from_rows(rows: list, src: S.Source, index: PlanIndex, gpus_per_node: Mapping[str, int],
              *, month: str) -> BillUsage:
    """The nodes per hour from the one query's answer (its HOUR_PART and RESOURCES_PART rows,
    gpulease.spend.query.OUTPUT order; values typed, or text from a warehouse)."""
    start, end = S.month_bounds(month)
    hours = int((end - start).total_seconds() // 3600)
    per_hour: dict = defaultdict(lambda: [0.0] * hours)
    lines: dict = defaultdict(int)
    resources: dict = defaultdict(int)
    for r in rows:
        part, tag, env, rid, rname, unit = r[0], r[4], r[5], r[6], r[7], r[9]
        if part not in (Q.HOUR_PART, Q.RESOURCES_PART):
            continue
        cluster = _cluster(index, tag, env, rid, rname)
        if cluster is None:
            continue
        if part == Q.RESOURCES_PART:
            resources[cluster] += int(r[16])
            continue
        hrs, n, h, top = float(r[12]), int(r[13]), int(r[14]), r[15]
        at = dt.datetime.fromtimestamp(h, dt.timezone.utc)
        per_node = float(gpus_per_node.get(cluster) or 1) if unit == S.GPU_HOURS else 1.0
        if top is not None and float(top) / per_node > 1 + SLACK:
            raise InputError([Finding("--bill", (
                f"{src.path}: a resource of cluster {cluster} bills "
                f"{float(top) / per_node:g} node-hours in the hour starting "
                f"{at:%Y-%m-%dT%H:%MZ}: the bill is not hourly, so the nodes running per hour "
                "cannot be told; export it at hourly granularity (AWS Data Exports: time "
                "granularity Hourly; the GCP export is hourly)"))])
        k = int((at - start).total_seconds() // 3600)
        if 0 <= k < hours:
            per_hour[cluster][k] += hrs / per_node
        lines[cluster] += n
    clusters = {name: ClusterUsage(nodes=tuple(_whole(x) for x in hs),
                                   node_hours=round(sum(hs), 6), resources=resources[name],
                                   lines=lines[name])
                for name, hs in per_hour.items()}
    return BillUsage(month=month, start=start, end=end, clusters=clusters)


def _cluster(index: PlanIndex, tag, env, rid, rname) -> Optional[str]:
    name = owner(index, tag, env, rid, rname)[0]
    return None if name in (None, tags.SHARED) else name


def _whole(node_hours: float) -> int:
    """Nodes running in an hour: its node-hours to the nearest whole node (half up)."""
    return int(math.floor(node_hours + 0.5 + SLACK))


def require_clusters(usage: BillUsage, index: PlanIndex, src: S.Source, stack: str) -> None:
    """Exit 2 when none of the stack's clusters billed compute in the month."""
    if usage.clusters:
        return
    raise InputError([Finding("--bill", (
        f"{src.path}: no compute usage in {usage.month} belongs to a cluster of stack {stack} "
        f"({tags.CLUSTER} = {', '.join(index.clusters)} with {tags.ENVIRONMENT} = "
        f"{index.environment}" + (", or a resource of its plan" if index.resources else "")
        + f"); {FIX_TAGS}"))])
