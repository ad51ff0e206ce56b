"""Quote and spot-risk records, and the book that answers the policy's questions about them.

A ``Quote`` is either an **offering** (a concrete window the cloud offered: start, end, instance
count, upfront fee - an AWS Capacity Block offering, a GCP calendar-mode recommendation) or a
**rate** (USD per node-hour for any window of that kind: a published Capacity Block rate, a
flex-start or calendar-mode SKU price). Every quote carries when it was quoted (an API answer)
or published (a price page) and its source; the policy never uses an expired one.

A ``SpotRisk`` is what is known about one (cloud, region[, zone], instance type)'s spot risk:
the AWS Spot Instance Advisor band (share of spot capacity reclaimed in the trailing month),
an AWS Spot Placement Score (1-10), GCP ``advice.capacity`` obtainability (0-1) and estimated
uptime. ``interruptions_per_hour`` is what the cost model's rework uses.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Iterable, Optional

from gpulease import clock
from gpulease.clock import format_utc
from gpulease.model import HOURS_PER_MONTH

UTC = dt.timezone.utc


def utc(value: dt.datetime) -> dt.datetime:
    """A datetime in UTC (naive ones are taken as UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def parse_time(text: str, *, date_ok: bool = False) -> dt.datetime:
    """An RFC 3339 time with a zone -> aware UTC datetime, by the one reader,
    :func:`gpulease.clock.parse_time` (``date_ok``: a bare date = midnight UTC, where the
    reference documents it). Raises ValueError saying what is wrong."""
    return clock.parse_time(text, date_ok=date_ok)


@dataclass(frozen=True)
class Quote:
    """A price for capacity in a window: an offering (``start`` set) or a rate (``hourly_usd``)."""

    kind: str                      # capacity_block | flex_start | calendar
    cloud: str
    region: str
    instance_type: str
    #: when the API answered (live) or the figure was published (offline data).
    quoted_at: dt.datetime
    #: source id: a key of the data file's ``sources``, or the API that answered.
    source: str
    start: Optional[dt.datetime] = None
    end: Optional[dt.datetime] = None
    instance_count: Optional[int] = None
    #: total price of the offering, paid up front (Capacity Blocks) or for the window.
    upfront_usd: Optional[float] = None
    #: USD per node-hour (a rate, or an offering's fee / (count x hours)).
    hourly_usd: Optional[float] = None
    zone: Optional[str] = None
    offering_id: Optional[str] = None
    currency: str = "USD"
    tenancy: Optional[str] = None
    #: True = an API's answer; False = a published figure (an estimate for any window).
    live: bool = False
    note: str = ""
    #: the block pinned (and bought) in the stack config (``capacity_block:``): its fee is
    #: paid, so it never expires; the window is judged as when it was bought.
    pinned: bool = False

    @property
    def is_offering(self) -> bool:
        return self.start is not None and self.end is not None

    @property
    def hours(self) -> Optional[float]:
        if not self.is_offering:
            return None
        return (self.end - self.start).total_seconds() / 3600.0

    @property
    def node_hour_usd(self) -> Optional[float]:
        """USD per node-hour: the rate, or an offering's fee spread over its node-hours."""
        if self.hourly_usd is not None:
            return self.hourly_usd
        if self.upfront_usd is not None and self.instance_count and self.hours:
            return self.upfront_usd / (self.instance_count * self.hours)
        return None

    def age_hours(self, now: dt.datetime) -> float:
        return (utc(now) - utc(self.quoted_at)).total_seconds() / 3600.0

    def expired(self, now: dt.datetime, max_age_hours: float) -> Optional[str]:
        """Why a live offering can no longer be bought as quoted (None = still good): its start
        has passed, or it is older than ``max_age_hours`` (offerings change by the hour).
        Rates (published or read from a price list) do not expire: they are labelled with
        their date instead."""
        if not self.live or not self.is_offering or self.pinned:
            return None
        if self.is_offering and utc(self.start) <= utc(now):
            return f"its start {format_utc(self.start)} has passed"
        age = self.age_hours(now)
        if age > max_age_hours:
            return (f"quoted {format_utc(self.quoted_at)}, {age:.1f} h ago (more than "
                    f"{max_age_hours:g} h: gpulease:policy.quote_max_age_hours)")
        return None

    def as_dict(self) -> dict:
        return {"kind": self.kind, "cloud": self.cloud, "region": self.region,
                "instance_type": self.instance_type, "zone": self.zone,
                "instance_count": self.instance_count, "start": format_utc(self.start),
                "end": format_utc(self.end), "hours": self.hours, "upfront_usd": self.upfront_usd,
                "hourly_usd": self.node_hour_usd, "currency": self.currency,
                "offering_id": self.offering_id, "tenancy": self.tenancy,
                "quoted_at": format_utc(self.quoted_at), "source": self.source, "live": self.live,
                "note": self.note, **({"pinned": True} if self.pinned else {})}


@dataclass(frozen=True)
class SpotRisk:
    """What is known about spot interruptions of one instance type in one region or zone."""

    cloud: str
    region: str
    instance_type: str
    as_of: dt.datetime
    source: str
    zone: Optional[str] = None
    #: AWS Spot Instance Advisor band label ("<5%", "5-10%", ... ">20%").
    band: Optional[str] = None
    #: the band's upper edge in percent of spot capacity reclaimed per month.
    band_max_percent: Optional[float] = None
    #: AWS Spot Placement Score (1-10; 10 = a spot request very likely succeeds).
    placement_score: Optional[int] = None
    #: GCP advice.capacity obtainability (0.0-1.0; higher is better).
    obtainability: Optional[float] = None
    #: GCP advice.capacity estimated uptime of most Spot VMs before preemption (hours).
    estimated_uptime_hours: Optional[float] = None
    live: bool = False

    @property
    def interruptions_per_hour(self) -> Optional[float]:
        """Expected interruptions per node-hour: from the Advisor band's upper edge (that share
        of nodes reclaimed per 730-hour month), else from GCP's estimated uptime (one
        preemption per uptime); None when neither is known."""
        if self.band_max_percent is not None:
            return self.band_max_percent / 100.0 / HOURS_PER_MONTH
        if self.estimated_uptime_hours:
            return 1.0 / self.estimated_uptime_hours
        return None

    def as_dict(self) -> dict:
        return {"cloud": self.cloud, "region": self.region, "zone": self.zone,
                "instance_type": self.instance_type, "band": self.band,
                "band_max_percent": self.band_max_percent,
                "interruptions_per_hour": self.interruptions_per_hour,
                "placement_score": self.placement_score, "obtainability": self.obtainability,
                "estimated_uptime_hours": self.estimated_uptime_hours,
                "as_of": format_utc(self.as_of), "source": self.source, "live": self.live}


@dataclass
class QuoteBook:
    """Every quote and spot-risk record the policy may use, from the data file and the cache."""

    quotes: list[Quote] = field(default_factory=list)
    risks: list[SpotRisk] = field(default_factory=list)
    #: source id -> {"url", "title", "published"/"retrieved"} (the data file's sources).
    sources: dict = field(default_factory=dict)
    #: where the records came from, for explain ("gpulease/quotes/data/2026.12.03.json", cache).
    origins: tuple[str, ...] = ()
    version: str = ""
    _risk_index: Optional[dict] = field(default=None, repr=False)
    _fingerprint: Optional[int] = field(default=None, repr=False)

    def fingerprint(self) -> int:
        """A hash of the spot-risk records (what prices spot), for caches keyed on them."""
        if self._fingerprint is None:
            self._fingerprint = hash(tuple(sorted(
                (r.cloud, r.region, r.instance_type, r.zone or "", r.interruptions_per_hour or 0.0,
                 r.as_of.timestamp()) for r in self.risks)))
        return self._fingerprint

    def add(self, quotes: Iterable[Quote] = (), risks: Iterable[SpotRisk] = ()) -> None:
        self.quotes.extend(quotes)
        self.risks.extend(risks)
        self._risk_index = None
        self._fingerprint = None

    def for_offering(self, kind: str, cloud: str, region: str, instance_type: str) -> list[Quote]:
        return [q for q in self.quotes if (q.kind, q.cloud, q.region, q.instance_type)
                == (kind, cloud, region, instance_type)]

    def risk(self, cloud: str, region: str, instance_type: str,
             zone: Optional[str] = None) -> Optional[SpotRisk]:
        """The newest record for the zone, else for the region, merged: a zone's placement
        score / obtainability beside the region's band (the Advisor has no zones)."""
        idx = self._risk_index
        if idx is None:
            idx = {}
            for r in self.risks:
                key = (r.cloud, r.region, r.instance_type, r.zone)
                old = idx.get(key)
                if old is None or utc(r.as_of) >= utc(old.as_of):
                    idx[key] = r
            self._risk_index = idx
        region_rec = idx.get((cloud, region, instance_type, None))
        zone_rec = idx.get((cloud, region, instance_type, zone)) if zone else None
        if zone_rec is None:
            return region_rec
        if region_rec is None:
            return zone_rec
        # the zone's own figures first; what it lacks from the region's record
        import dataclasses

        fill = {f: getattr(region_rec, f) for f in (
            "band", "band_max_percent", "placement_score", "obtainability",
            "estimated_uptime_hours") if getattr(zone_rec, f) is None}
        return dataclasses.replace(zone_rec, **fill)
