"""AWS fetcher: EC2 prices from the Price List Query API, spot history and GPU specs from EC2.

- On-demand and commitment prices: ``pricing.get_products`` (ServiceCode AmazonEC2) filtered to
  plain Linux, shared tenancy, no pre-installed software, ``capacitystatus=Used`` (the other
  capacity statuses price unused/allocated Capacity Reservations, not instances) and to the
  catalog's instance types (``ANY_OF``). PriceList items are JSON strings: the hourly price is
  ``terms.OnDemand.*.priceDimensions.*.pricePerUnit.USD``; commitment prices are the Reserved
  terms with ``LeaseContractLength`` 1yr/3yr, ``OfferingClass`` standard and ``PurchaseOption``
  No Upfront (hourly, no upfront fee - comparable with the hourly on-demand price).
  (AWS Price List Query API: GetProducts; "Reading the service price list file".)
- Spot: ``ec2.describe_spot_price_history`` over a recent window; the latest price per AZ, then
  every AZ's price is kept by zone ID and the row's spot price is the cheapest AZ's (the policy
  places a spot cluster in that AZ; ``summarize_spot`` still reports the median for reference). Prices outside (5 %, 100 %] of on-demand are rejected as implausible (AWS caps
  spot at the on-demand price and advertises "up to 90 % off").
- Specs and zones: ``describe_instance_type_offerings`` (AZs) and ``describe_instance_types``
  (GpuInfo, VCpuInfo, MemoryInfo, NetworkInfo.EfaSupported / EfaInfo / MaximumNetworkCards,
  InstanceStorageInfo).
"""
from __future__ import annotations

import datetime as dt
import json
import re
import statistics
from typing import TYPE_CHECKING, Any, Iterable, Optional

from gpulease.catalog.fetchers import CloudFetch, Failure, Fetched, Progress
from gpulease.catalog.fetchers.clients import AwsClients, aws_call
from gpulease.errors import CloudError
from gpulease.purchase import SPOT

if TYPE_CHECKING:
    from gpulease.catalog import Catalog

PRICING_SOURCE = "aws-pricing-api"
SPOT_SOURCE = "aws-ec2-spot-price-history"
SPEC_SOURCE = "aws-ec2-describe-instance-types"
#: How far back spot history is read (the API returns the price in effect at StartTime too).
SPOT_WINDOW = dt.timedelta(hours=6)
SPOT_PLAUSIBLE = (0.05, 1.0)

_BASE_FILTERS = (("operatingSystem", "Linux"), ("tenancy", "Shared"), ("preInstalledSw", "NA"),
                 ("capacitystatus", "Used"))


# ---- Price List parsing (pure) -----------------------------------------------------------------
def _hourly(term: dict) -> Optional[float]:
    for dim in (term.get("priceDimensions") or {}).values():
        if dim.get("unit") == "Hrs":
            usd = float((dim.get("pricePerUnit") or {}).get("USD", "0") or 0)
            if usd > 0:
                return usd
    return None


def parse_price_list_item(item: Any) -> Optional[dict]:
    """One GetProducts PriceList entry -> {instance_type, region, on_demand_usd, commit_*}."""
    doc = json.loads(item) if isinstance(item, str) else item
    attrs = (doc.get("product") or {}).get("attributes") or {}
    itype = attrs.get("instanceType")
    if not itype:
        return None
    terms = doc.get("terms") or {}
    out: dict = {"instance_type": itype, "region": attrs.get("regionCode"),
                 "on_demand_usd": None, "commit_1y_usd": None, "commit_3y_usd": None}
    od = [p for p in (_hourly(t) for t in (terms.get("OnDemand") or {}).values()) if p]
    if od:
        out["on_demand_usd"] = max(od)
    for term in (terms.get("Reserved") or {}).values():
        ta = term.get("termAttributes") or {}
        if ta.get("OfferingClass") != "standard" or ta.get("PurchaseOption") != "No Upfront":
            continue
        col = {"1yr": "commit_1y_usd", "3yr": "commit_3y_usd"}.get(ta.get("LeaseContractLength"))
        price = _hourly(term)
        if col and price:
            out[col] = price
    return out


def summarize_spot(history: Iterable[dict]) -> dict[str, dict]:
    """SpotPriceHistory entries -> {instance_type: {"usd": median of latest per AZ, "zones": {az: usd}}}."""
    latest: dict[tuple[str, str], tuple[Any, float]] = {}
    for h in history:
        key = (h["InstanceType"], h["AvailabilityZone"])
        ts = h.get("Timestamp")
        ts = ts.isoformat() if hasattr(ts, "isoformat") else str(ts)
        if key not in latest or ts > latest[key][0]:
            latest[key] = (ts, float(h["SpotPrice"]))
    per_type: dict[str, dict] = {}
    for (itype, az), (_, usd) in sorted(latest.items()):
        per_type.setdefault(itype, {"zones": {}})["zones"][az] = usd
    for v in per_type.values():
        v["usd"] = round(statistics.median(v["zones"].values()), 6)
    return per_type


def specs_from_instance_type(it: dict) -> dict:
    """describe_instance_types entry -> catalog columns (specs only, no prices)."""
    gpus = (it.get("GpuInfo") or {}).get("Gpus") or []
    net = it.get("NetworkInfo") or {}
    perf = net.get("NetworkPerformance") or ""
    m = re.search(r"([\d.]+)\s*Gigabit", perf)
    efa = bool(net.get("EfaSupported"))
    specs = {
        "vcpus": int((it.get("VCpuInfo") or {}).get("DefaultVCpus", 0)),
        "memory_gb": round((it.get("MemoryInfo") or {}).get("SizeInMiB", 0) / 1024, 1),
        "network_cards": int(net.get("MaximumNetworkCards", 1)),
        "efa_interfaces": int((net.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0)) if efa else 0,
        "local_nvme_gb": float((it.get("InstanceStorageInfo") or {}).get("TotalSizeInGB", 0)),
        "rdma": "efa" if efa else "none",
        "spec_source": SPEC_SOURCE,
    }
    if m:
        specs["network_gbps"] = float(m.group(1))
    if gpus:
        specs["gpus_per_node"] = sum(int(g.get("Count", 0)) for g in gpus)
        specs["gpu_model"] = gpus[0].get("Name")
        specs["gpu_memory_gb"] = round(gpus[0].get("MemoryInfo", {}).get("SizeInMiB", 0) / 1024, 1)
    return specs


# ---- API calls ---------------------------------------------------------------------------------
def _paginate(clients: AwsClients, client: Any, operation: str, key: str, counter: list,
              page_size: Optional[int] = None, **params: Any) -> list:
    """Every ``key`` item of ``operation``'s pages, through boto3's paginator for it (which
    carries the next-page token). A throttled page is retried by ``aws_call`` with the one retry
    policy, restarting the listing: a paginator's iteration cannot continue after an error."""
    paginator = client.get_paginator(operation)
    config = {"PageSize": page_size} if page_size else {}

    def listing() -> list:
        items: list = []
        for page in paginator.paginate(**params, PaginationConfig=config):
            counter[0] += 1
            items.extend(page.get(key) or [])
        return items

    return aws_call(clients, f"{client.meta.service_model.service_name}.{operation}", listing)


def get_products(clients: AwsClients, region: str, instance_types: list[str],
                 counter: list) -> list[dict]:
    filters = [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region}]
    filters += [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in _BASE_FILTERS]
    filters.append({"Type": "ANY_OF", "Field": "instanceType", "Value": ",".join(instance_types)})
    items = _paginate(clients, clients.pricing, "get_products", "PriceList", counter,
                      page_size=100, ServiceCode="AmazonEC2", Filters=filters,
                      FormatVersion="aws_v1")
    return [p for p in (parse_price_list_item(i) for i in items) if p and p["region"] == region]


def fetch_aws(clients: AwsClients, *, targets: dict[str, list[str]],
              reference_on_demand: Optional[dict] = None, now: Optional[dt.datetime] = None,
              progress: Progress = lambda _m: None) -> CloudFetch:
    """Refresh ``targets`` (region -> instance types). Failures are recorded per region x API."""
    now = now or dt.datetime.now(dt.timezone.utc)
    ref = reference_on_demand or {}
    out = CloudFetch(cloud="aws", apis=(PRICING_SOURCE, SPOT_SOURCE, SPEC_SOURCE))
    total = len(targets) * 3
    step = 0
    for region, types in sorted(targets.items()):
        types = sorted(set(types))
        rows: dict[str, dict] = {t: {"prices": {}, "sources": {}, "specs": {}, "zones": (),
                                     "notes": []} for t in types}
        counter = [0]

        def tick(api: str, msg: str) -> None:
            nonlocal step
            step += 1
            progress(f"[{step}/{total}] aws {region} {api}: {msg}")

        # 1. prices
        try:
            products = get_products(clients, region, types, counter)
            for p in products:
                r = rows.get(p["instance_type"])
                if r is None:
                    continue
                for col in ("on_demand_usd", "commit_1y_usd", "commit_3y_usd"):
                    if p[col]:
                        r["prices"][col] = p[col]
                        r["sources"][col] = PRICING_SOURCE
            out.priced_regions.add(region)
            tick("pricing", f"{len(products)} products in {counter[0]} page(s)")
        except CloudError as exc:
            out.failures.append(Failure("aws", region, "pricing.get_products", str(exc)))
            tick("pricing", "FAILED")
        # 2. where offered + specs
        ec2 = None
        offered: Optional[set] = None
        zone_ids: dict[str, str] = {}
        try:
            ec2 = clients.ec2(region)
            # Zone IDs (use1-az1) name the same physical zone in every account; zone names
            # (us-east-1a) are shuffled per account (EC2 User Guide, "AZ IDs").
            azs = aws_call(clients, "ec2.describe_availability_zones",
                           lambda: ec2.describe_availability_zones())
            counter[0] += 1
            zone_ids.update({z["ZoneName"]: z["ZoneId"] for z in azs.get("AvailabilityZones") or []
                             if z.get("ZoneName") and z.get("ZoneId")})
            offs = _paginate(clients, ec2, "describe_instance_type_offerings",
                             "InstanceTypeOfferings", counter, LocationType="availability-zone",
                             Filters=[{"Name": "instance-type", "Values": types}])
            zones: dict[str, list] = {}
            for o in offs:
                zid = zone_ids.get(o["Location"])
                if zid:
                    zones.setdefault(o["InstanceType"], []).append(zid)
            offered = set(zones)
            for t, zs in zones.items():
                if t in rows:
                    rows[t]["zones"] = tuple(sorted(zs))
            if offered:
                specs = _paginate(clients, ec2, "describe_instance_types", "InstanceTypes",
                                  counter, InstanceTypes=sorted(offered))
                for it in specs:
                    if it["InstanceType"] in rows:
                        rows[it["InstanceType"]]["specs"] = specs_from_instance_type(it)
            out.offered[region] = offered
            tick("ec2 specs", f"{len(offered)} of {len(types)} types offered")
        except CloudError as exc:
            out.failures.append(Failure("aws", region, "ec2.describe_instance_types", str(exc)))
            tick("ec2 specs", "FAILED")
        # 3. spot
        spot_types = sorted(offered) if offered is not None else types
        if ec2 is not None and spot_types:
            try:
                hist = _paginate(clients, ec2, "describe_spot_price_history",
                                 "SpotPriceHistory", counter, InstanceTypes=spot_types,
                                 ProductDescriptions=["Linux/UNIX"],
                                 StartTime=now - SPOT_WINDOW, EndTime=now)
                summary = summarize_spot(hist)
                rejected = 0
                for t, s in summary.items():
                    r = rows.get(t)
                    if r is None:
                        continue
                    od = r["prices"].get("on_demand_usd") or ref.get((region, t))
                    lo, hi = SPOT_PLAUSIBLE
                    if od and not (lo * od < s["usd"] <= hi * od):
                        rejected += 1
                        r["notes"].append(f"spot {s['usd']} rejected: outside {int(lo*100)}-"
                                          f"{int(hi*100)}% of on-demand {od}")
                        continue
                    # the policy places spot in the cheapest zone: keep every zone's price
                    # (by zone ID, only zones that offer the type) and the minimum.
                    per_zone = {zone_ids[z]: usd for z, usd in s["zones"].items()
                                if z in zone_ids and (not r["zones"] or zone_ids[z] in r["zones"])}
                    if per_zone:
                        r["zone_spot"] = per_zone
                        r["prices"]["spot_usd"] = min(per_zone.values())
                    else:
                        r["prices"]["spot_usd"] = s["usd"]
                    r["sources"]["spot_usd"] = SPOT_SOURCE
                tick(SPOT, f"{len(hist)} history points, {len(summary)} types"
                     + (f", {rejected} implausible price(s) rejected" if rejected else ""))
            except CloudError as exc:
                out.failures.append(Failure("aws", region, "ec2.describe_spot_price_history",
                                            str(exc)))
                tick(SPOT, "FAILED")
        else:
            tick(SPOT, "skipped (no EC2 answer)")
        out.calls += counter[0]
        for t, r in rows.items():
            if r["prices"] or r["specs"] or r["zones"]:
                out.rows[(region, t)] = Fetched(
                    cloud="aws", region=region, instance_type=t, prices=r["prices"],
                    price_sources=r["sources"], specs=r["specs"], zones=r["zones"],
                    zone_spot=dict(r.get("zone_spot") or {}), notes=tuple(r["notes"]))
    return out


# ---- the refresh's entry point (``Cloud.fetcher_module``) -----------------------------------------
def targets(base: "Catalog", regions: list[str]) -> dict[str, list[str]]:
    """Region -> the instance types to refresh there: the base catalog's AWS types in that
    region, or all of its AWS types in a region it lacks."""
    all_types = base.instance_types("aws")
    out = {}
    for r in regions:
        here = [o.instance_type for o in base.offerings_for(cloud="aws", region=r)]
        out[r] = here or all_types
    return out


def fetch(clients: AwsClients, base: "Catalog", regions: list[str], *, now: dt.datetime,
          progress: Progress = lambda _m: None) -> CloudFetch:
    """`gpulease catalog refresh` on AWS: ``regions`` of ``base``, spot prices checked against
    its on-demand prices."""
    ref = {(o.region, o.instance_type): o.on_demand_usd for o in base.offerings_for(cloud="aws")}
    return fetch_aws(clients, targets=targets(base, regions), reference_on_demand=ref, now=now,
                     progress=progress)

