"""AWS quote sources: Capacity Block offerings, Spot Placement Scores, the Spot Instance Advisor.

- ``DescribeCapacityBlockOfferings`` (EC2 API Reference): asked for an instance type, a count
  (1-64), a duration (1-14 days in 1-day steps, then 7-day steps to 182 days) and a date range
  (start up to eight weeks ahead), AWS answers with offerings - id, Availability Zone, start,
  end, ``capacityBlockDurationHours``, ``upfrontFee`` (a string, the total), ``currencyCode``,
  ``tenancy`` - or with none.
- ``GetSpotPlacementScores``: for instance types and a target capacity, a score 1-10 per region
  or (``SingleAvailabilityZone``) per zone ID, for the top 10; 10 = very likely to succeed.
- the Spot Instance Advisor's public data file (https://spot-bid-advisor.s3.amazonaws.com/
  spot-advisor-data.json): per region, OS and type ``{"s": savings %, "r": range index}``; the
  ``ranges`` array gives each index's label and upper edge ("max", percent of spot capacity
  reclaimed in the trailing month).

Calls go through ``gpulease.catalog.fetchers.clients.aws_call`` (bounded retry of throttling,
every SDK error -> CloudError). Arguments are checked against the documented limits before any
call, so a bad request is an InputError (exit 2) naming the flag, not a cloud error.
"""
from __future__ import annotations

import datetime as dt
import json
from typing import Any, Iterable, Optional

from gpulease.catalog.fetchers.clients import AwsClients, aws_call
from gpulease.errors import CloudError, Finding, InputError
from gpulease.purchase import CAPACITY_BLOCK
from gpulease.quotes import (CB_MAX_ADVANCE_DAYS, CB_MAX_INSTANCES, valid_block_count,
                             valid_block_hours)
from gpulease.clock import format_utc
from gpulease.quotes.model import Quote, SpotRisk, utc

SPOT_ADVISOR_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"
CB_SOURCE = "aws:DescribeCapacityBlockOfferings"
SCORES_SOURCE = "aws:GetSpotPlacementScores"
ADVISOR_SOURCE = "aws:spot-advisor-data.json"
#: GetSpotPlacementScores' TargetCapacity bounds (botocore's EC2 model: 1 .. 2,000,000,000).
MAX_TARGET_CAPACITY = 2_000_000_000
#: GetSpotPlacementScores' RegionNames list holds at most 10 regions (botocore's EC2 model).
MAX_SCORE_REGIONS = 10


def check_block_request(*, instance_count: int, duration_hours: int,
                        start: Optional[dt.datetime], end: Optional[dt.datetime],
                        now: dt.datetime, flag: str = "--duration-hours") -> None:
    """Raise InputError (exit 2) for a Capacity Block search AWS would refuse or never answer."""
    bad = []
    if not valid_block_count(instance_count):
        bad.append(Finding("--count", f"a Capacity Block holds 1 to {CB_MAX_INSTANCES} instances "
                           f"(got {instance_count}); split larger clusters over several blocks"))
    if not valid_block_hours(duration_hours):
        bad.append(Finding(flag, f"{duration_hours} h is not a Capacity Block duration: whole "
                           "days, 1-14 days in 1-day steps, then 7-day steps up to 182 days "
                           "(e.g. 24, 336, 504)"))
    if start is not None and end is not None and utc(end) <= utc(start):
        bad.append(Finding("--end", f"the date range ends ({format_utc(end)}) before it starts "
                           f"({format_utc(start)})"))
    if start is not None and utc(start) > utc(now) + dt.timedelta(days=CB_MAX_ADVANCE_DAYS):
        bad.append(Finding("--start", f"{format_utc(start)} is more than "
                           f"{CB_MAX_ADVANCE_DAYS // 7} weeks ahead: Capacity Blocks start at "
                           "most eight weeks in the future"))
    if bad:
        raise InputError(bad)


def _money(text: Any, where: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise CloudError("aws", "DescribeCapacityBlockOfferings",
                         f"{where}: upfrontFee {text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise CloudError("aws", "DescribeCapacityBlockOfferings",
                         f"{where}: upfrontFee {text!r} is not a finite non-negative amount")
    return value


def capacity_block_offerings(clients: AwsClients, region: str, *, instance_type: str,
                             instance_count: int, duration_hours: int,
                             start: Optional[dt.datetime] = None,
                             end: Optional[dt.datetime] = None,
                             now: Optional[dt.datetime] = None) -> list[Quote]:
    """Every offering AWS answers for the search (all pages), as live quotes; [] when none."""
    now = utc(now or dt.datetime.now(dt.timezone.utc))
    check_block_request(instance_count=instance_count, duration_hours=duration_hours,
                        start=start, end=end, now=now)
    params: dict = {"InstanceType": instance_type, "InstanceCount": instance_count,
                    "CapacityDurationHours": int(duration_hours)}
    if start is not None:
        params["StartDateRange"] = utc(start)
    if end is not None:
        params["EndDateRange"] = utc(end)

    def call():
        pages = clients.ec2(region).get_paginator("describe_capacity_block_offerings")
        return [o for page in pages.paginate(**params)
                for o in page.get("CapacityBlockOfferings", [])]
    raw = aws_call(clients, "DescribeCapacityBlockOfferings", call)
    out = []
    for i, o in enumerate(raw):
        where = f"{region} offering {o.get('CapacityBlockOfferingId', i)}"
        try:
            s, e = utc(o["StartDate"]), utc(o["EndDate"])
            count = int(o["InstanceCount"])
        except (KeyError, TypeError, ValueError, AttributeError):
            raise CloudError("aws", "DescribeCapacityBlockOfferings",
                             f"{where}: no StartDate/EndDate/InstanceCount in the answer") from None
        currency = o.get("CurrencyCode") or "USD"
        if currency != "USD":
            raise CloudError("aws", "DescribeCapacityBlockOfferings",
                             f"{where}: priced in {currency}; gpulease plans in USD")
        if o.get("InstanceType") not in (None, instance_type):
            continue   # AWS answers for the type asked; anything else is not this quote
        out.append(Quote(kind=CAPACITY_BLOCK, cloud="aws", region=region,
                         instance_type=instance_type, quoted_at=now, source=CB_SOURCE,
                         start=s, end=e, instance_count=count,
                         upfront_usd=_money(o.get("UpfrontFee"), where),
                         zone=o.get("AvailabilityZone"),
                         offering_id=o.get("CapacityBlockOfferingId"), currency=currency,
                         tenancy=o.get("Tenancy"), live=True))
    return out


def spot_placement_scores(clients: AwsClients, region: str, *, instance_types: list[str],
                          target_capacity: int, regions: Optional[list[str]] = None,
                          single_zone: bool = True,
                          now: Optional[dt.datetime] = None) -> list[SpotRisk]:
    """Scores for ``instance_types`` (units = instances), per zone ID (``single_zone``) or per
    region, as live SpotRisk records of each type (AWS scores the set; each type gets the set's
    score, which is what a group that may launch any of them can expect)."""
    now = utc(now or dt.datetime.now(dt.timezone.utc))
    bad = []
    if not instance_types:
        bad.append(Finding("--instance-type", "name at least one instance type"))
    if not 1 <= target_capacity <= MAX_TARGET_CAPACITY:
        bad.append(Finding("--count", f"target capacity must be 1 to {MAX_TARGET_CAPACITY:,} "
                           f"(got {target_capacity})"))
    if regions and len(regions) > MAX_SCORE_REGIONS:
        bad.append(Finding("--region", f"at most {MAX_SCORE_REGIONS} regions per request (got "
                           f"{len(regions)})"))
    if bad:
        raise InputError(bad)
    params = {"InstanceTypes": list(instance_types), "TargetCapacity": target_capacity,
              "TargetCapacityUnitType": "units", "SingleAvailabilityZone": single_zone,
              "RegionNames": list(regions or [region])}

    def call():
        pages = clients.ec2(region).get_paginator("get_spot_placement_scores")
        return [s for page in pages.paginate(**params)
                for s in page.get("SpotPlacementScores", [])]
    out = []
    for s in aws_call(clients, "GetSpotPlacementScores", call):
        score = s.get("Score")
        if not isinstance(score, int) or not 1 <= score <= 10:
            raise CloudError("aws", "GetSpotPlacementScores",
                             f"score {score!r} for {s.get('Region')} is not 1-10")
        for t in instance_types:
            out.append(SpotRisk(cloud="aws", region=s.get("Region") or region, instance_type=t,
                                zone=s.get("AvailabilityZoneId"), as_of=now,
                                source=SCORES_SOURCE, placement_score=score, live=True))
    return out


def spot_advisor_bands(doc: Any, *, pairs: Iterable[tuple[str, str]], as_of: dt.datetime,
                       source: str = ADVISOR_SOURCE, live: bool = False) -> list[SpotRisk]:
    """The Advisor's band for each (region, instance type) of ``pairs`` that the document
    lists for Linux; pairs it does not list get nothing (no figure is better than a guess)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("spot_advisor"), dict) \
            or not isinstance(doc.get("ranges"), list):
        raise CloudError("aws", "spot-advisor-data.json", "not the Advisor's format (an object "
                         "with spot_advisor and ranges)")
    ranges = {}
    for r in doc["ranges"]:
        try:
            ranges[int(r["index"])] = (str(r["label"]), float(r["max"]))
        except (KeyError, TypeError, ValueError):
            raise CloudError("aws", "spot-advisor-data.json",
                             f"malformed range {r!r}") from None
    out = []
    for region, itype in sorted(set(pairs)):
        rec = (((doc["spot_advisor"].get(region) or {}).get("Linux") or {}).get(itype))
        if not isinstance(rec, dict) or rec.get("r") not in ranges:
            continue
        label, top = ranges[rec["r"]]
        out.append(SpotRisk(cloud="aws", region=region, instance_type=itype, as_of=as_of,
                            source=source, band=label, band_max_percent=top, live=live))
    return out


def fetch_spot_advisor(url: str = SPOT_ADVISOR_URL, timeout: float = 30.0) -> Any:
    """The Advisor's data file over HTTPS (public, no credentials)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - fixed https URL
            return json.loads(resp.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise CloudError("aws", "spot-advisor-data.json", f"cannot read {url} ({exc})",
                         retryable=True) from None
