"""EC2's Capacity Block and Spot Placement Score APIs inside the tests' moto server.

moto 5.2 implements neither ``DescribeCapacityBlockOfferings`` nor ``GetSpotPlacementScores``
(both answer an HTML 500 "not implemented"). These handlers are written from the EC2 API
Reference and the EC2 User Guide and are as strict as the documented API:

DescribeCapacityBlockOfferings
- ``CapacityDurationHours`` is required; it must be whole days, 1-14 days in 1-day steps, then
  7-day steps up to 182 days, else ``InvalidParameterValue``;
- ``InstanceType`` (or ``InstanceTypePreferences``) is required (``MissingParameter``);
  ``InstanceCount`` must be a count AWS sells (``gpulease.quotes.CB_INSTANCE_COUNTS``: 1 to 64,
  "Each Capacity Block can have up to 64 instances"; docs/catalog.md "Block sizes");
- ``EndDateRange`` before ``StartDateRange`` is ``InvalidParameterValue``; a start more than
  eight weeks ahead finds nothing ("start time up to eight weeks in the future");
- every block ends at 11:30 UTC; the answer lists up to ``MAX_OFFERS`` (6) offerings (the
  earliest that fit; the newer User Guide copy: "we provide the details of up to 6 available
  blocks" - an older copy said 3, docs/catalog.md "Block sizes"),
  ``UpfrontFee`` is a decimal string (the total), ``CurrencyCode`` USD, ``Tenancy`` default;
  an instance type or zone with no stock answers an empty list; ``MaxResults`` / ``NextToken``
  page the answer.

GetSpotPlacementScores
- ``TargetCapacity`` is required (1 .. 2,000,000,000); ``InstanceTypes`` and
  ``InstanceRequirementsWithMetadata`` are exclusive (``InvalidParameterCombination``) and one
  is required; at most 10 ``RegionNames``;
- scores are 1-10, the top 10 regions or (``SingleAvailabilityZone``) zone IDs; "If you specify
  one or two instance types ... the returned placement score will always be low": with fewer
  than three types a score is capped at 3 here.

State is module-level (the server runs in this process): ``STOCK`` (what can be booked),
``SCORES`` and ``CLOCK`` (the fake's now, settable so a test can let quotes age).
"""
from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass

UTC = dt.timezone.utc


@dataclass
class Stock:
    region: str
    instance_type: str
    availability_zone: str
    usd_per_instance_hour: float
    max_instances: int = 64


#: offerings one answer lists at most (EC2 User Guide, "Find and purchase Capacity Blocks", the
#: copy matching the API model of 2025-04-30: "up to 6 available blocks").
MAX_OFFERS = 6
#: what can be booked; tests replace the list.
STOCK: list[Stock] = []
#: (region, zone ID or None for the region) -> score for the types asked.
SCORES: dict = {}
#: the fake's clock.
CLOCK = {"now": dt.datetime(2026, 12, 3, 9, 0, tzinfo=UTC)}
#: every request the fake answered: (action, params).
CALLS: list = []


def reset(now: dt.datetime = dt.datetime(2026, 12, 3, 9, 0, tzinfo=UTC)) -> None:
    STOCK.clear()
    SCORES.clear()
    CALLS.clear()
    CLOCK["now"] = now


def _err(code: str, msg: str):
    from moto.ec2.exceptions import EC2ClientError

    return EC2ClientError(code, msg)


def _time(text, name: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise _err("InvalidParameterValue", f"Value ({text}) for parameter {name} is invalid. "
                                            "Expected a timestamp.") from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _valid_duration(hours: int) -> bool:
    if hours <= 0 or hours % 24:
        return False
    days = hours // 24
    return days <= 14 or (days <= 182 and days % 7 == 0)


def describe_capacity_block_offerings(self):
    from moto.core.responses import ActionResult

    p = self._get_params()
    CALLS.append(("DescribeCapacityBlockOfferings", p))
    if p.get("CapacityDurationHours") in (None, ""):
        raise _err("MissingParameter", "The request must contain the parameter "
                                       "CapacityDurationHours")
    try:
        hours = int(p["CapacityDurationHours"])
    except (TypeError, ValueError):
        raise _err("InvalidParameterValue", f"Value ({p['CapacityDurationHours']}) for "
                   "parameter CapacityDurationHours is invalid.") from None
    if not _valid_duration(hours):
        raise _err("InvalidParameterValue", f"Value ({hours}) for parameter CapacityDurationHours "
                   "is invalid. You must specify the duration in 1-day increments up to 14 days, "
                   "and in 7-day increments up to 182 days.")
    prefs = p.get("InstanceTypePreferences") or []
    itype = p.get("InstanceType") or (prefs[0].get("InstanceType") if prefs else None)
    if not itype:
        raise _err("MissingParameter", "The request must contain the parameter InstanceType")
    from gpulease.quotes import CB_INSTANCE_COUNTS, CB_MAX_INSTANCES

    count = int(p.get("InstanceCount") or 1)
    if count not in CB_INSTANCE_COUNTS:
        raise _err("InvalidParameterValue", f"Value ({count}) for parameter InstanceCount is "
                   f"invalid. Each Capacity Block can have up to {CB_MAX_INSTANCES} instances.")
    now = CLOCK["now"]
    start = _time(p["StartDateRange"], "StartDateRange") if p.get("StartDateRange") else now
    end = _time(p["EndDateRange"], "EndDateRange") if p.get("EndDateRange") else None
    if end is not None and end <= start:
        raise _err("InvalidParameterValue", "The EndDateRange must be after the StartDateRange.")
    start = max(start, now)
    horizon = now + dt.timedelta(weeks=8)
    offers = []
    for s in STOCK:
        if (s.region, s.instance_type) != (self.region, itype) or count > s.max_instances:
            continue
        day = start.replace(hour=11, minute=30, second=0, microsecond=0)
        if day < start:
            day += dt.timedelta(days=1)
        while day <= horizon and len(offers) < MAX_OFFERS:
            block_end = day + dt.timedelta(hours=hours)
            if end is not None and block_end > end:
                break
            oid = "cb-" + hashlib.sha256(f"{s.region}{s.availability_zone}{itype}{count}"
                                         f"{day.isoformat()}{hours}".encode()).hexdigest()[:17]
            offers.append({
                "CapacityBlockOfferingId": oid, "InstanceType": itype,
                "AvailabilityZone": s.availability_zone, "InstanceCount": count,
                "StartDate": day, "EndDate": block_end,
                "CapacityBlockDurationHours": hours, "CapacityBlockDurationMinutes": 0,
                "UpfrontFee": f"{s.usd_per_instance_hour * count * hours:.2f}",
                "CurrencyCode": "USD", "Tenancy": "default"})
            day += dt.timedelta(days=1)
    offers.sort(key=lambda o: (o["StartDate"], o["AvailabilityZone"]))
    offers = offers[:MAX_OFFERS]
    size = int(p.get("MaxResults") or 1000)
    if not 1 <= size <= 1000:
        raise _err("InvalidParameterValue", f"Value ({size}) for parameter MaxResults is invalid.")
    first = int(p.get("NextToken") or 0)
    page = offers[first:first + size]
    out = {"CapacityBlockOfferings": page}
    if first + size < len(offers):
        out["NextToken"] = str(first + size)
    return ActionResult(out)


def get_spot_placement_scores(self):
    from moto.core.responses import ActionResult

    p = self._get_params()
    CALLS.append(("GetSpotPlacementScores", p))
    if p.get("TargetCapacity") in (None, ""):
        raise _err("MissingParameter", "The request must contain the parameter TargetCapacity")
    target = int(p["TargetCapacity"])
    if not 1 <= target <= 2_000_000_000:
        raise _err("InvalidParameterValue", f"Value ({target}) for parameter TargetCapacity is "
                                            "invalid.")
    types = p.get("InstanceTypes") or []
    if types and p.get("InstanceRequirementsWithMetadata"):
        raise _err("InvalidParameterCombination", "InstanceTypes and "
                   "InstanceRequirementsWithMetadata cannot be specified together.")
    if not types and not p.get("InstanceRequirementsWithMetadata"):
        raise _err("MissingParameter", "The request must contain the parameter InstanceTypes "
                                       "or InstanceRequirementsWithMetadata")
    regions = p.get("RegionNames") or [self.region]
    if len(regions) > 10:
        raise _err("InvalidParameterValue", "RegionNames can contain at most 10 regions.")
    single = str(p.get("SingleAvailabilityZone", "false")).lower() == "true"
    rows = []
    for (region, zone), score in SCORES.items():
        if region not in regions or (zone is not None) != single:
            continue
        score = min(score, 3) if len(types) < 3 else score
        row = {"Region": region, "Score": score}
        if zone is not None:
            row["AvailabilityZoneId"] = zone
        rows.append(row)
    rows.sort(key=lambda r: (-r["Score"], r["Region"], r.get("AvailabilityZoneId", "")))
    return ActionResult({"SpotPlacementScores": rows[:10]})


def install(monkeypatch) -> None:
    """Add both actions to moto's EC2 for one test (monkeypatch undoes it)."""
    from moto.ec2.responses import EC2Response

    monkeypatch.setattr(EC2Response, "describe_capacity_block_offerings",
                        describe_capacity_block_offerings, raising=False)
    monkeypatch.setattr(EC2Response, "get_spot_placement_scores", get_spot_placement_scores,
                        raising=False)
