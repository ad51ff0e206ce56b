"""Every charge line of a bill in exactly one class, and the classes adding up to the bill.

Classes (:data:`CLASSES`), decided in this order:

1. ``tax``, ``credit``, ``adjustment``: by the line's charge kind (a correction is an
   adjustment whatever its kind). Credits and adjustments that carry the stack's cost tags (or
   a resource of the plan) are also *attributed* to their cluster, for its effective cost; they
   stay in their class, counted once.
2. ``matched``: usage and purchases carrying gpulease's cost tags for this stack's environment
   (``gpulease-cluster``, ``gpulease-environment``: gpulease/tags.py), else whose resource id
   or name is a resource of the plan (its physical name, or an instance of a node group whose
   name starts with the group's).
3. ``unmatched``: the rest (untagged spend; spend tagged for another environment).

Lines that started less than :data:`PROVISIONAL_HOURS` before now, and corrections, are
*provisional*: the clouds still change them. Amounts are exact decimals summed in the engine and
rounded to the cent once, by gpulease.money; the classes' exact sums add up to the source's
exact total, which :func:`classify` checks.
"""
from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Optional

from gpulease import tags
from gpulease.spend import sources as S

MATCHED, UNMATCHED, CREDIT, TAX, ADJUSTMENT = "matched", "unmatched", "credit", "tax", "adjustment"
CLASSES = (MATCHED, UNMATCHED, CREDIT, TAX, ADJUSTMENT)
#: Billing data for the last 48 hours is incomplete in both clouds' exports (AWS Data Exports
#: refresh up to three times a day and restate; GCP's export can lag a day or more).
PROVISIONAL_HOURS = 48

BY_TAG, BY_RESOURCE = "tag", "resource"


@dataclass(frozen=True)
class Group:
    """Charge lines that share everything classification reads, summed in the engine."""

    charge: str
    correction: bool
    provisional: bool
    cluster_tag: Optional[str]
    env_tag: Optional[str]
    resource_id: Optional[str]
    resource_name: Optional[str]
    pricing: Optional[str]
    hour_unit: Optional[str]
    billed: Decimal
    effective: Decimal
    hours: float
    rows: int


@dataclass
class Line:
    """One group with its class and, when known, the plan cluster it belongs to."""

    group: Group
    cls: str
    cluster: Optional[str] = None
    how: Optional[str] = None
    note: str = ""


@dataclass
class Classified:
    lines: list[Line]
    source_total: Decimal
    source_rows: int
    kind: str
    totals: dict = field(default_factory=dict)     # class -> exact Decimal
    rows: dict = field(default_factory=dict)       # class -> charge lines

    @property
    def classified_total(self) -> Decimal:
        return sum(self.totals.values(), Decimal(0))

    @property
    def conserved(self) -> bool:
        return self.classified_total == self.source_total


def read_groups(con, src: S.Source, *, month: Optional[str] = None,
                now: Optional[dt.datetime] = None) -> tuple[list[Group], Decimal, int]:
    """Run the one query over a bill on disk (DuckDB): the groups, the source's exact total
    and row count."""
    from gpulease.spend import query as Q

    sql = one_query_sql(src, Q.DUCKDB, month=month, now=now)
    return groups_of(con.execute(sql).fetchall())


def one_query_sql(src: S.Source, dialect: str, *, month: Optional[str] = None,
                  now: Optional[dt.datetime] = None, groups: bool = True,
                  hourly: bool = False, index: Optional["PlanIndex"] = None,
                  prune=None) -> str:
    """The one query for ``src`` in ``dialect``: the groups and the source's total
    (``groups``), and the nodes per hour of the month (``hourly``: gpulease.spend.usage; of
    the lines tagged, or of ``index``'s resources). ``prune(month_start)``: the warehouse
    table's partition condition for a month (gpulease.spend.warehouse), or None."""
    now = now or dt.datetime.now(dt.timezone.utc)
    names = tuple(index.resources) if index is not None else ()
    bounds = S.month_bounds(month)
    return S.one_query(src, dialect, cutoff=now - dt.timedelta(hours=PROVISIONAL_HOURS),
                       bounds=bounds, groups=groups, hourly=hourly, resource_names=names,
                       prune=prune(bounds[0]) if (prune and bounds) else "")


def _dec(value: Any) -> Decimal:
    return Decimal(str(value)) if value is not None else Decimal(0)


def groups_of(rows: list) -> tuple[list[Group], Decimal, int]:
    """The one query's answer (gpulease.spend.query.OUTPUT, in order) as groups, the source's
    total and its row count. Values may come as text (a warehouse's answer) or typed (DuckDB)."""
    from gpulease.spend import query as Q

    groups, total, count = [], Decimal(0), 0
    for r in rows:
        if r[0] == Q.TOTAL_PART:
            total, count = _dec(r[10]), int(r[13])
            continue
        if r[0] != Q.GROUP_PART:
            continue        # the nodes per hour (gpulease.spend.usage.from_rows)
        groups.append(Group(charge=r[1], correction=_bool(r[2]), provisional=_bool(r[3]),
                            cluster_tag=r[4], env_tag=r[5], resource_id=r[6],
                            resource_name=r[7], pricing=r[8], hour_unit=r[9],
                            billed=_dec(r[10]), effective=_dec(r[11]),
                            hours=float(r[12] or 0), rows=int(r[13])))
    return groups, total, count


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.lower() == "true"
    return bool(value)


@dataclass(frozen=True)
class PlanIndex:
    """What of the plan classification needs: its environment, clusters, and the physical
    names of its resources."""

    environment: str
    clusters: tuple[str, ...]
    #: physical name -> cluster ("shared" for shared resources)
    resources: dict

    @classmethod
    def of(cls, plan: dict[str, Any]) -> "PlanIndex":
        resources = {}
        for r in plan.get("resources", ()):
            name = r.get("physical_name")
            if name:
                resources[str(name)] = r.get("cluster") or tags.SHARED
        return cls(environment=str(plan.get("environment") or ""),
                   clusters=tuple(c["name"] for c in plan.get("clusters", ())),
                   resources=resources)

    def cluster_of_tag(self, value: str) -> Optional[str]:
        """The plan cluster (or "shared") a tag/label value names; GCP labels are encoded
        (gpulease.tags.label_value)."""
        for name in self.clusters + (tags.SHARED,):
            if value == name or value == tags.label_value(name):
                return name
        return None

    def env_matches(self, value: Optional[str]) -> bool:
        return value is None or value in (self.environment, tags.label_value(self.environment))

    def cluster_of_resource(self, rid: Optional[str], rname: Optional[str]) -> Optional[str]:
        for candidate in (rname, rid):
            if not candidate:
                continue
            for name, cluster in self.resources.items():
                if candidate == name or candidate.startswith(name + "-") \
                        or candidate.endswith("/" + name) or candidate.endswith(":" + name):
                    return cluster
        return None


def classify(groups: list[Group], index: PlanIndex, *, source_total: Decimal, source_rows: int,
             kind: str) -> Classified:
    lines = []
    for g in groups:
        cluster, how, note = _owner(g, index)
        if g.charge == S.TAX:
            cls = TAX
        elif g.charge == S.ADJUSTMENT or g.correction:
            cls = ADJUSTMENT
        elif g.charge == S.CREDIT:
            cls = CREDIT
        elif cluster is not None:
            cls = MATCHED
        else:
            cls = UNMATCHED
        lines.append(Line(group=g, cls=cls, cluster=cluster, how=how, note=note))
    totals: dict = {c: Decimal(0) for c in CLASSES}
    rows: dict = defaultdict(int)
    for line in lines:
        totals[line.cls] += line.group.billed
        rows[line.cls] += line.group.rows
    return Classified(lines=lines, source_total=source_total, source_rows=source_rows,
                      kind=kind, totals=totals, rows={c: rows.get(c, 0) for c in CLASSES})


def _owner(g: Group, index: PlanIndex) -> tuple[Optional[str], Optional[str], str]:
    return owner(index, g.cluster_tag, g.env_tag, g.resource_id, g.resource_name)


def owner(index: PlanIndex, cluster_tag: Optional[str], env_tag: Optional[str],
          resource_id: Optional[str], resource_name: Optional[str]
          ) -> tuple[Optional[str], Optional[str], str]:
    """The plan cluster (or "shared") a line belongs to, how it was matched, and why not."""
    if cluster_tag is not None:
        cluster = index.cluster_of_tag(cluster_tag)
        if cluster is not None and index.env_matches(env_tag):
            return cluster, BY_TAG, ""
        if cluster is None:
            return None, None, f"tagged for cluster {cluster_tag!r}, not in this plan"
        return None, None, f"tagged for environment {env_tag!r}, not {index.environment!r}"
    cluster = index.cluster_of_resource(resource_id, resource_name)
    if cluster is not None:
        return cluster, BY_RESOURCE, ""
    return None, None, "no gpulease cost tag, not a resource of the plan"
