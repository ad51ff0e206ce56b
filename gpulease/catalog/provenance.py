"""Which prices a plan used, how old each is and which are estimates (issue 25 item 3).

A catalog's ``as_of`` is the day its snapshot was built; the prices inside it are older, and
each source says when it was published (``sources[id].published``; docs/catalog.md). A price's
**date** here is the oldest ``published`` date among the sources it comes from (a figure is as
old as its oldest input); a price whose sources state no publication date is **undated**, never
given the build date. A price is an **estimate** when the catalog flags its row (``estimate:
true``: storage and egress rows with no regional figure in any source, the row's notes say what
was assumed) or when it is a published quote standing in for an offer nobody was asked for (a
Capacity Block or other window rate that is not ``live``: availability not checked).

`gpulease plan` shows the oldest and newest date and the estimates in its header and carries
``prices`` (and ``clusters[].prices``) in its JSON; `gpulease explain` shows each cluster's
(docs/catalog.md, "Dates and estimates").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

from gpulease.catalog import HOURLY_INFRA
from gpulease.purchase import LABELS, ON_DEMAND, SPOT

#: catalog price columns of an offering, by what the plan calls them.
COLUMN_WORDS = {ON_DEMAND: LABELS[ON_DEMAND], SPOT: LABELS[SPOT], "commit_1y": "1y commitment",
                "commit_3y": "3y commitment"}


@dataclass(frozen=True)
class PriceUse:
    """One price a plan pays: what it prices, the figure, its sources, its date, and why it is
    an estimate (None = it is not)."""

    what: str
    usd: float
    unit: str
    source: str
    date: Optional[str]
    estimate: Optional[str] = None
    cluster: Optional[str] = None

    def as_dict(self) -> dict[str, Any]:
        return {"what": self.what, "usd": self.usd, "unit": self.unit, "source": self.source,
                "date": self.date, "estimate": self.estimate, "cluster": self.cluster}

    def text(self) -> str:
        """``on-demand 0.8048 $/node-hour (vantage-raw-2025-11, 2025-11-30)``."""
        when = self.date or "date unknown"
        est = f"; estimate: {self.estimate}" if self.estimate else ""
        return (f"{self.what} {self.usd:.10g} $/{self.unit} ({self.source or 'no source'}, "
                f"{when}{est})")


def source_date(sources: dict, ids: str) -> Optional[str]:
    """The oldest publication date of the comma-separated source ids; None when none is dated
    (a source's ``retrieved`` day says when it was read, not how old its prices are)."""
    dates = []
    for sid in (ids or "").split(","):
        src = sources.get(sid.strip()) if isinstance(sources, dict) else None
        pub = src.get("published") if isinstance(src, dict) else None
        if isinstance(pub, str) and pub:
            dates.append(pub[:10])
    return min(dates) if dates else None


def _column_source(offering, column: str) -> str:
    for col, ids in getattr(offering, "price_sources", ()) or ():
        if col == column and ids:
            return ids
    return offering.source


def _offering_price(o, column: str, zone: Optional[str]) -> Optional[float]:
    if column == SPOT and zone:
        for z, usd in o.zone_spot_usd:
            if z == zone:
                return usd
    return getattr(o, f"{column}_usd")


def cluster_prices(c, catalog, storage_by_name: Optional[dict] = None) -> list[PriceUse]:
    """The prices one cluster decision pays: its offering's columns, the egress its dataset
    crosses, and a window's quote."""
    sources, o, out = catalog.sources, c.offering, []
    where = f"{o.cloud}:{o.region} {o.instance_type}"
    for col in c.price_columns:
        usd = _offering_price(o, col, c.zone)
        if usd is None:
            continue
        ids = _column_source(o, col)
        spot_zone = f" in {c.zone}" if col == SPOT and c.zone else ""
        out.append(PriceUse(what=f"{where} {COLUMN_WORDS[col]}{spot_zone}", usd=usd,
                            unit="node-hour", source=ids, date=source_date(sources, ids),
                            cluster=c.name))
    if c.costs.egress_usd and c.spec.dataset and storage_by_name:
        s = storage_by_name.get(c.spec.dataset)
        row = None if s is None else catalog.egress_price(s.cloud, s.region, o.cloud, o.region)
        if row is not None:
            out.append(PriceUse(
                what=f"egress {s.cloud}:{s.region} -> {o.cloud}:{o.region} "
                     f"({row.kind.replace('_', '-')})", usd=row.usd_per_gb,
                unit="GB", source=row.source, date=source_date(sources, row.source),
                estimate=_row_estimate(row), cluster=c.name))
    w = getattr(c, "window", None)
    q = getattr(w, "quote", None) if w is not None else None
    if q and q.get("hourly_usd") is not None:
        out.append(PriceUse(
            what=f"{w.model.replace('_', ' ')} {q.get('cloud')}:{q.get('region')} "
                 f"{q.get('instance_type')}", usd=q["hourly_usd"], unit="node-hour",
            source=q.get("source") or "", date=(q.get("quoted_at") or "")[:10] or None,
            estimate=None if q.get("live") else "a published rate, availability not checked",
            cluster=c.name))
    return out


def _row_estimate(row) -> Optional[str]:
    return "no regional figure in any source (the catalog row's notes)" if row.estimate else None


def storage_prices(s, catalog) -> list[PriceUse]:
    """The storage-class prices one dataset's tiers pay."""
    out = []
    for t in s.tiers:
        try:
            row = catalog.storage_price(s.cloud, s.region, t.storage_class)
        except KeyError:
            continue
        out.append(PriceUse(what=f"storage {s.cloud}:{s.region} {t.storage_class}",
                            usd=row.usd_per_gb_month, unit="GB-month", source=row.source,
                            date=source_date(catalog.sources, row.source),
                            estimate=_row_estimate(row)))
    return out


def infra_prices(types: Iterable[str], catalog) -> list[PriceUse]:
    """The hourly infrastructure prices (NAT gateways) of the resource types a plan declares."""
    out = []
    for typ in sorted(set(types) & set(HOURLY_INFRA)):
        cloud, item = HOURLY_INFRA[typ]
        p = catalog.infra_price(cloud, item)
        if p is not None:
            out.append(PriceUse(what=f"{cloud} {item.replace('_', ' ').replace('nat', 'NAT')}",
                                usd=p.usd,
                                unit=p.unit, source=p.source,
                                date=source_date(catalog.sources, p.source)))
    return out


def summary(uses: list[PriceUse]) -> dict[str, Any]:
    """Oldest and newest date, the undated and the estimated prices (each once)."""
    seen, unique = set(), []
    for u in uses:
        key = (u.what, u.source)
        if key not in seen:
            seen.add(key)
            unique.append(u)
    dates = [u.date for u in unique if u.date]
    return {"oldest": min(dates) if dates else None, "newest": max(dates) if dates else None,
            "count": len(unique),
            "undated": [u.as_dict() for u in unique if not u.date],
            "estimates": [u.as_dict() for u in unique if u.estimate]}


def catalog_estimates(catalog) -> int:
    """How many storage / egress prices the catalog itself flags as estimates."""
    return (sum(1 for s in catalog.storage if s.estimate)
            + sum(1 for e in catalog.egress if e.estimate))


def header_text(s: dict[str, Any]) -> str:
    """One line for a plan's header: how many prices it pays, the span of their dates, which
    are undated and which are estimates (``summary`` + ``catalog_estimates``)."""
    if not s["count"]:
        return "no catalog price used"
    span = ("published " + (s["oldest"] if s["oldest"] == s["newest"] else
                            f"{s['oldest']} to {s['newest']}")) if s["oldest"] else "none dated"
    parts = [f"{s['count']} used, {span}"]
    if s["undated"]:
        parts.append(f"date unknown: {_listed(s['undated'])}")
    if s["estimates"]:
        parts.append(f"estimates: {_listed(s['estimates'])}")
    else:
        flagged = s.get("catalog_estimates") or 0
        parts.append("no estimate among them" + (
            f" (the catalog's {flagged} estimated storage/egress prices are not used)"
            if flagged else ""))
    return "; ".join(parts)


def _listed(items: list[dict], shown: int = 4) -> str:
    names = [f"{u['what']} ({u['source']})" for u in items]
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"{len(names)} (" + ", ".join(names[:shown]) + more + ")"
