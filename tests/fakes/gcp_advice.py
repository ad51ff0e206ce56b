"""Compute Engine's advice API (calendarMode, capacity) beside the Billing Catalog fake.

Written from the Compute API v1 reference (``regions.advice.calendarMode``, ``.capacity``) and
"View Spot VM availability" / "Reserve capacity in calendar mode":

- ``POST /compute/v1/projects/{p}/regions/{r}/advice/calendarMode``: one spec with
  ``targetResources.specificSkuResources {machineType, instanceCount}`` and ``timeRangeSpec
  {startTimeNotEarlierThan, startTimeNotLaterThan, minDuration, maxDuration}`` (durations
  ``"<s>s"``, 1-90 days; a start range reaching past 120 days ahead is 400 INVALID_ARGUMENT). The
  answer recommends the earliest start in the range at which some zone's free capacity holds the
  count for at least ``minDuration`` (up to ``maxDuration``); when nothing fits the spec's
  recommendation has no ``location`` and lists the zones in ``otherLocations`` - Google's
  "no location is recommended".
- ``POST .../advice/capacity``: ``size``, ``instanceFlexibilityPolicy.instanceSelections`` and
  ``instanceProperties.scheduling.provisioningModel`` (SPOT; anything else is 400); answers one
  recommendation with ``scores {obtainability, estimatedUptime}`` and a shard per zone, or no
  recommendation when the machine type is not offered in the region.

Faults as in FakeBilling (``fake.faults["calendarMode"] = [429]``).
"""
from __future__ import annotations

import datetime as dt
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from tests.fakes.gcp_billing import FakeBilling

UTC = dt.timezone.utc


@dataclass
class FreeCapacity:
    """VMs of a machine type free in a zone from ``start`` to ``end`` (calendar mode)."""

    zone: str
    machine_type: str
    count: int
    start: dt.datetime
    end: dt.datetime


@dataclass
class SpotAdvice:
    zone: str
    machine_type: str
    obtainability: float
    uptime_s: int


def _ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def _secs(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)s", text or "")
    if not m:
        raise ValueError(text)
    return float(m.group(1))


def _z(ts: dt.datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class FakeAdvice(FakeBilling):
    free: list = field(default_factory=list)        # FreeCapacity
    spot: list = field(default_factory=list)        # SpotAdvice
    now: dt.datetime = dt.datetime(2026, 12, 3, 9, 0, tzinfo=UTC)

    def start(self) -> "FakeAdvice":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):  # noqa: N802
                fake._handle(self)

            def do_POST(self):  # noqa: N802
                fake._post(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def _bad(self, h, message: str) -> None:
        self._send(h, 400, {"error": {"code": 400, "message": message,
                                      "status": "INVALID_ARGUMENT"}})

    def _post(self, h) -> None:
        path = urlparse(h.path).path
        m = re.fullmatch(r"/compute/v1/projects/([^/]+)/regions/([^/]+)/advice/(calendarMode|"
                         r"capacity)", path)
        op = m.group(3) if m else "unknown"
        length = int(h.headers.get("Content-Length") or 0)
        try:
            body = json.loads(h.rfile.read(length) or b"{}")
        except ValueError:
            return self._bad(h, "Invalid JSON payload received.")
        with self.lock:
            self.log.append((op, body))
            faults = self.faults.get(op) or []
            status = faults.pop(0) if faults else None
        if status:
            return self._error(h, status)
        if not m:
            return self._error(h, 404)
        if m.group(1) != self.project:
            return self._error(h, 403)
        region = m.group(2)
        if op == "calendarMode":
            return self._calendar(h, region, body)
        return self._capacity(h, region, body)

    def _calendar(self, h, region: str, body: dict) -> None:
        specs = body.get("futureResourcesSpecs") or {}
        if len(specs) != 1:
            return self._bad(h, "Exactly one future resources spec is supported.")
        name, spec = next(iter(specs.items()))
        sku = ((spec.get("targetResources") or {}).get("specificSkuResources") or {})
        rng = spec.get("timeRangeSpec") or {}
        try:
            mt, count = sku["machineType"], int(sku["instanceCount"])
            lo, hi = _ts(rng["startTimeNotEarlierThan"]), _ts(rng["startTimeNotLaterThan"])
            dmin, dmax = _secs(rng["minDuration"]), _secs(rng["maxDuration"])
        except (KeyError, ValueError, TypeError) as exc:
            return self._bad(h, f"Invalid value for field 'futureResourcesSpecs': {exc}")
        if not 86400 <= dmin <= dmax <= 90 * 86400:
            return self._bad(h, "Duration must be between 1 and 90 days.")
        if hi > self.now + dt.timedelta(days=120) or hi < lo:
            return self._bad(h, "Start time range must end within 120 days from now.")
        allowed = {k.rsplit("/", 1)[-1] for k, v in
                   ((spec.get("locationPolicy") or {}).get("locations") or {}).items()
                   if (v or {}).get("preference", "ALLOW") == "ALLOW"}
        best = None
        for f in self.free:
            if f.machine_type != mt or f.count < count or not f.zone.startswith(region + "-"):
                continue
            if allowed and f.zone not in allowed:
                continue
            start = max(lo, f.start, self.now)
            if start > hi:
                continue
            length = min(dmax, (f.end - start).total_seconds())
            if length < dmin:
                continue
            cand = (start, f.zone, start + dt.timedelta(seconds=length))
            if best is None or cand < best:
                best = cand
        if best is None:
            zones = sorted({f.zone for f in self.free if f.zone.startswith(region + "-")})
            rec = {"otherLocations": {f"zones/{z}": {"status": "NO_CAPACITY"} for z in zones}}
        else:
            start, zone, end = best
            rec = {"location": f"zones/{zone}", "startTime": _z(start), "endTime": _z(end),
                   "recommendationType": "FUTURE_RESERVATION",
                   "recommendationId": f"rec-{zone}-{int(start.timestamp())}"}
        return self._send(h, 200, {"recommendations": [{"recommendationsPerSpec": {name: rec}}]})

    def _capacity(self, h, region: str, body: dict) -> None:
        model = (((body.get("instanceProperties") or {}).get("scheduling") or {})
                 .get("provisioningModel"))
        if model != "SPOT":
            return self._bad(h, "Capacity advice is available for provisioningModel SPOT.")
        try:
            size = int(body["size"])
        except (KeyError, TypeError, ValueError):
            return self._bad(h, "Required field 'size' not specified.")
        sels = ((body.get("instanceFlexibilityPolicy") or {}).get("instanceSelections") or {})
        types = {t for s in sels.values() for t in (s or {}).get("machineTypes") or []}
        if not types or size < 1:
            return self._bad(h, "instanceSelections and a positive size are required.")
        rows = [a for a in self.spot if a.machine_type in types
                and a.zone.startswith(region + "-")]
        if not rows:
            return self._send(h, 200, {"recommendations": []})
        best = max(rows, key=lambda a: (a.obtainability, a.uptime_s, a.zone))
        return self._send(h, 200, {"recommendations": [{
            "scores": {"obtainability": best.obtainability,
                       "estimatedUptime": f"{best.uptime_s}s"},
            "shards": [{"zone": f"zones/{best.zone}", "machineType": best.machine_type,
                        "instanceCount": size, "provisioningModel": "SPOT"}]}]})
