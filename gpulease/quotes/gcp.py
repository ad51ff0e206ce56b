"""GCP quote sources: calendar-mode advice, Spot capacity advice, flex-start / calendar prices.

- ``advice.calendarMode`` (Compute API v1; ``compute_v1.AdviceClient.calendar_mode`` in
  google-cloud-compute 1.48): for a machine type, a count, a start-time range and a duration
  range, Google recommends where and when to create a calendar-mode future reservation
  (``recommendationsPerSpec[spec] = {startTime, endTime, location, recommendationType}``);
  no recommendation = no capacity in that range. The answer carries no price.
- ``advice.capacity`` (Compute API v1, "View Spot VM availability"; not in google-cloud-compute
  1.48, so called over REST): for Spot VMs of a machine type, ``recommendations[].scores =
  {obtainability: 0.0-1.0, estimatedUptime: "<seconds>s"}`` and the zones (``shards``).
- prices: the Cloud Billing Catalog lists flex-start as "DWS Defined Duration" SKUs and
  calendar mode as "... Calendar Mode" SKUs (GPU, vCPU and RAM per machine family, per
  region); a machine type's node-hour price is vCPUs x core + GiB x RAM + GPUs x GPU, as for
  every other GCP price (``gpulease.catalog.fetchers.gcp``).

Calls go through ``gpulease.catalog.fetchers.clients.gcp_call`` (retry 429/503, every SDK error ->
CloudError); ``GPULEASE_GCP_ENDPOINT=http://host:port`` sends every call to a local fake.
"""
from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from gpulease.catalog.fetchers.clients import GCE_SERVICE, GcpClients, gcp_call
from gpulease.catalog.fetchers.gcp import (_GPU_PATTERNS, BUNDLED_ACCELERATOR, _unit_usd,
                                           family_of)
from gpulease.errors import CloudError, Finding, InputError
from gpulease.purchase import CALENDAR, FLEX_START
from gpulease.quotes import (CALENDAR_MAX_ADVANCE_DAYS, CALENDAR_MAX_DAYS, CALENDAR_MIN_DAYS)
from gpulease.clock import format_utc
from gpulease.quotes.model import Quote, SpotRisk, parse_time, utc

ADVICE_SOURCE = "gcp:advice.calendarMode"
CAPACITY_SOURCE = "gcp:advice.capacity"
BILLING_SOURCE = "gcp:cloudbilling.skus"
ENDPOINT_ENV = "GPULEASE_GCP_ENDPOINT"
TIMEOUT_S = 30.0


@dataclass
class QuoteClients:
    """The GCP clients `catalog quotes` needs: Advice (calendar mode), a REST session for
    ``advice.capacity``, the Billing Catalog for SKU prices."""

    advice: Any
    http: Any
    base_url: str
    billing: Optional[GcpClients] = None
    project: Optional[str] = None


def make_clients(project: Optional[str], endpoint: Optional[str] = None) -> QuoteClients:
    """Real clients (Application Default Credentials) or a local endpoint's (anonymous)."""
    from google.cloud import compute_v1

    from gpulease.catalog.fetchers.clients import make_gcp_clients

    endpoint = endpoint or os.environ.get(ENDPOINT_ENV)
    billing = make_gcp_clients(project=project, endpoint=endpoint)
    if endpoint:
        import requests
        from google.auth.credentials import AnonymousCredentials
        from google.cloud.compute_v1.services.advice.transports import AdviceRestTransport

        scheme, _, host = endpoint.partition("://")
        if not host:
            scheme, host = "http", endpoint
        advice = compute_v1.AdviceClient(transport=AdviceRestTransport(
            host=host, url_scheme=scheme, credentials=AnonymousCredentials()))
        return QuoteClients(advice=advice, http=requests.Session(),
                            base_url=f"{scheme}://{host}", billing=billing, project=project)
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError
    from google.auth.transport.requests import AuthorizedSession

    try:
        creds, _ = google.auth.default(
            scopes=["https://www.googleapis.com/auth/compute.readonly"])
        advice = compute_v1.AdviceClient()
    except DefaultCredentialsError as exc:
        from gpulease.credentials import FIX

        raise CloudError("gcp", "credentials", "no Google Cloud credentials found "
                         f"({str(exc).splitlines()[0]}); {FIX['gcp']}") from None
    return QuoteClients(advice=advice, http=AuthorizedSession(creds),
                        base_url="https://compute.googleapis.com", billing=billing,
                        project=project)


def _duration(hours: float) -> str:
    return f"{int(round(hours * 3600))}s"


def _seconds(text: Any) -> Optional[float]:
    """A protobuf Duration in JSON ("3600s", "1.5s") -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)s\s*", str(text or ""))
    return float(m.group(1)) if m else None


def calendar_advice(clients: QuoteClients, region: str, *, machine_type: str, count: int,
                    start_not_earlier: dt.datetime, start_not_later: dt.datetime,
                    min_hours: float, max_hours: float, zones: Iterable[str] = (),
                    now: Optional[dt.datetime] = None) -> list[Quote]:
    """Google's calendar-mode recommendations for ``count`` VMs, as live offering quotes
    without a price (``upfront_usd`` None: the price is the calendar-mode rate of the SKUs,
    ``window_rates``); [] when Google has none."""
    now = utc(now or dt.datetime.now(dt.timezone.utc))
    bad = []
    if not clients.project:
        bad.append(Finding("--gcp-project", "calendar-mode advice needs a project: pass "
                           "--gcp-project or set GOOGLE_CLOUD_PROJECT"))
    if count < 1:
        bad.append(Finding("--count", f"at least 1 VM (got {count})"))
    if not CALENDAR_MIN_DAYS * 24 <= min_hours <= max_hours <= CALENDAR_MAX_DAYS * 24:
        bad.append(Finding("--duration-hours", f"a calendar-mode reservation lasts "
                           f"{CALENDAR_MIN_DAYS}-{CALENDAR_MAX_DAYS} days (got {min_hours:g}-"
                           f"{max_hours:g} h)"))
    if utc(start_not_later) > now + dt.timedelta(days=CALENDAR_MAX_ADVANCE_DAYS):
        bad.append(Finding("--end", f"availability is visible up to {CALENDAR_MAX_ADVANCE_DAYS} "
                           f"days ahead "
                           f"({format_utc(now + dt.timedelta(days=CALENDAR_MAX_ADVANCE_DAYS))})"))
    if utc(start_not_later) < utc(start_not_earlier):
        bad.append(Finding("--end", "the start range ends before it starts"))
    if bad:
        raise InputError(bad)
    from google.cloud import compute_v1

    spec = compute_v1.FutureResourcesSpec(
        target_resources=compute_v1.FutureResourcesSpecTargetResources(
            specific_sku_resources=compute_v1.FutureResourcesSpecSpecificSKUResources(
                machine_type=machine_type, instance_count=count)),
        time_range_spec=compute_v1.FlexibleTimeRange(
            start_time_not_earlier_than=format_utc(start_not_earlier),
            start_time_not_later_than=format_utc(start_not_later),
            min_duration=_duration(min_hours), max_duration=_duration(max_hours)),
        location_policy=compute_v1.FutureResourcesSpecLocationPolicy(locations={
            f"zones/{z}": compute_v1.FutureResourcesSpecLocationPolicyLocation(preference="ALLOW")
            for z in zones}))
    request = compute_v1.CalendarModeAdviceRequest(future_resources_specs={"spec": spec})

    def call():
        return clients.advice.calendar_mode(
            project=clients.project, region=region,
            calendar_mode_advice_request_resource=request)
    resp = gcp_call(clients.billing or GcpClients(catalog=None), "advice.calendarMode", call)
    out = []
    for rec in resp.recommendations:
        r = rec.recommendations_per_spec.get("spec")
        if r is None or not r.start_time or not r.end_time or not r.location:
            continue   # "If not set, it means that no location is recommended"
        try:
            start, end = parse_time(r.start_time), parse_time(r.end_time)
        except ValueError as exc:
            raise CloudError("gcp", "advice.calendarMode", f"unreadable time ({exc})") from None
        zone = r.location.rsplit("/", 1)[-1]
        out.append(Quote(kind=CALENDAR, cloud="gcp", region=region, instance_type=machine_type,
                         quoted_at=now, source=ADVICE_SOURCE, start=start, end=end,
                         instance_count=count, zone=zone,
                         offering_id=r.recommendation_id or None, live=True,
                         note="availability only: the advice carries no price"))
    return out


def capacity_advice(clients: QuoteClients, region: str, *, machine_type: str, count: int,
                    zones: Iterable[str] = (),
                    now: Optional[dt.datetime] = None) -> list[SpotRisk]:
    """``advice.capacity`` for ``count`` Spot VMs of ``machine_type``: one SpotRisk per zone the
    recommendation names (obtainability, estimated uptime)."""
    now = utc(now or dt.datetime.now(dt.timezone.utc))
    if not clients.project:
        raise InputError([Finding("--gcp-project", "capacity advice needs a project: pass "
                                  "--gcp-project or set GOOGLE_CLOUD_PROJECT")])
    body = {"instanceProperties": {"scheduling": {"provisioningModel": "SPOT"}},
            "instanceFlexibilityPolicy": {"instanceSelections": {
                "gpulease": {"machineTypes": [machine_type]}}},
            "size": count,
            "distributionPolicy": {"targetShape": "ANY_SINGLE_ZONE",
                                   **({"zones": [{"zone": f"zones/{z}"} for z in zones]}
                                      if zones else {})}}
    url = f"{clients.base_url}/compute/v1/projects/{clients.project}/regions/{region}" \
          "/advice/capacity"

    def call():
        resp = clients.http.post(url, json=body, timeout=TIMEOUT_S)
        if resp.status_code in (429, 503):
            from google.api_core import exceptions as gexc

            raise gexc.from_http_status(resp.status_code, resp.text[:200])
        if resp.status_code != 200:
            raise CloudError("gcp", "advice.capacity",
                             f"HTTP {resp.status_code}: {' '.join(resp.text[:300].split())}")
        try:
            return resp.json()
        except ValueError:
            raise CloudError("gcp", "advice.capacity", "the answer is not JSON") from None
    doc = gcp_call(clients.billing or GcpClients(catalog=None), "advice.capacity", call)
    out = []
    for rec in doc.get("recommendations") or []:
        scores = rec.get("scores") or {}
        ob = scores.get("obtainability")
        up = _seconds(scores.get("estimatedUptime"))
        if ob is not None and not (isinstance(ob, (int, float)) and 0 <= ob <= 1):
            raise CloudError("gcp", "advice.capacity", f"obtainability {ob!r} is not 0.0-1.0")
        for shard in rec.get("shards") or [{}]:
            zone = (shard.get("zone") or "").rsplit("/", 1)[-1] or None
            out.append(SpotRisk(cloud="gcp", region=region, instance_type=machine_type, zone=zone,
                                as_of=now, source=CAPACITY_SOURCE,
                                obtainability=float(ob) if ob is not None else None,
                                estimated_uptime_hours=up / 3600.0 if up else None, live=True))
    return out


# ---- prices from the Billing Catalog ----------------------------------------------------------
_DWS = re.compile(r"dws defined duration")
_CALENDAR = re.compile(r"calendar mode")


def classify_window_sku(sku: Any) -> Optional[tuple]:
    """(kind, part, key, regions, usd) for a flex-start ("DWS Defined Duration") or calendar-
    mode SKU of a GPU, vCPU or RAM; None for anything else."""
    low = sku.description.lower()
    kind = FLEX_START if _DWS.search(low) else CALENDAR if _CALENDAR.search(low) else None
    if kind is None:
        return None
    usd = _unit_usd(sku)
    if usd is None:
        return None
    unit = sku.pricing_info[0].pricing_expression.usage_unit
    regions = tuple(sku.service_regions)
    if "gpu" in low and unit == "h":
        for pat, accel in _GPU_PATTERNS:
            if re.search(pat, low):
                return (kind, "gpu", accel, regions, usd)
        return None
    m = re.search(r"\b(a2|a3|a4|g2)\b.*\b(core|cpu|ram)\b", low)
    if not m:
        return None
    part = "ram" if m.group(2) == "ram" else "core"
    if (part == "core" and unit != "h") or (part == "ram" and unit != "GiBy.h"):
        return None
    return (kind, part, m.group(1), regions, usd)


def window_rates(billing: GcpClients, offerings: Iterable[Any],
                 now: Optional[dt.datetime] = None) -> list[Quote]:
    """Flex-start and calendar-mode node-hour prices of GCP ``offerings`` (catalog rows: type,
    region, vCPUs, memory, GPUs), where the Billing Catalog has every component's SKU."""
    now = utc(now or dt.datetime.now(dt.timezone.utc))

    def call():
        return [c for c in (classify_window_sku(s) for s in
                            billing.catalog.list_skus(parent=GCE_SERVICE)) if c]
    table: dict = {}
    for kind, part, key, regions, usd in gcp_call(billing, "billing.list_skus", call):
        for r in regions:
            k = (kind, part, key, r)
            table[k] = max(table.get(k, 0.0), usd)
    out = []
    for o in offerings:
        if o.cloud != "gcp":
            continue
        fam = family_of(o.instance_type)
        series = "-".join(o.instance_type.split("-")[:2])
        accel = o.accelerator_type or BUNDLED_ACCELERATOR.get(series)
        for kind in (FLEX_START, CALENDAR):
            core = table.get((kind, "core", fam, o.region))
            ram = table.get((kind, "ram", fam, o.region))
            gpu = table.get((kind, "gpu", accel, o.region))
            if core is None or ram is None or gpu is None:
                continue
            usd = o.vcpus * core + o.memory_gb * ram + o.gpus_per_node * gpu
            out.append(Quote(kind=kind, cloud="gcp", region=o.region,
                             instance_type=o.instance_type, quoted_at=now, source=BILLING_SOURCE,
                             hourly_usd=round(usd, 6), live=True,
                             note=f"{o.vcpus} vCPU x {core:g} + {o.memory_gb:g} GiB x {ram:g} + "
                                  f"{o.gpus_per_node} GPU x {gpu:g}"))
    return out
