"""A local HTTP fake of the Cloud Billing Catalog REST API (and the Compute machine/accelerator
type listings the catalog refresh reads).

It stands in for Google only: ``GET /v1/services/{id}/skus`` with ``pageSize``/``pageToken``
pagination, ``GET /compute/v1/projects/{p}/aggregated/machineTypes`` and
``.../aggregated/acceleratorTypes`` with a ``(name = "x") OR ...`` filter. SKUs have the real
REST shape (camelCase, ``unitPrice {units, nanos}`` as the API returns it) so the google-cloud
SDK parses them exactly as it parses Google's answers. Faults are injected per operation
(``fake.faults["skus"] = [429]``); every request is logged. Prices in tests are fixtures.
"""
from __future__ import annotations

import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional
from urllib.parse import parse_qs, urlparse

GCE = "6F81-5844-456A"
_ids = itertools.count(1)


def money(usd: float) -> dict:
    units = int(usd)
    return {"currencyCode": "USD", "units": str(units), "nanos": int(round((usd - units) * 1e9))}


def sku(description: str, *, group: str, usage: str, regions: list[str], usd: float,
        unit: Optional[str] = None) -> dict:
    """A Compute Engine SKU as ``services.skus.list`` returns it."""
    unit = unit or ("GiBy.h" if group == "RAM" else "h")
    sid = f"{next(_ids):04X}-{abs(hash(description)) % 0xFFFF:04X}-{len(regions):04X}"
    return {
        "name": f"services/{GCE}/skus/{sid}", "skuId": sid, "description": description,
        "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": "Compute",
                     "resourceGroup": group, "usageType": usage},
        "serviceRegions": list(regions),
        "pricingInfo": [{
            "summary": "",
            "pricingExpression": {
                "usageUnit": unit, "displayQuantity": 1,
                "tieredRates": [{"startUsageAmount": 0, "unitPrice": money(usd)}],
                "usageUnitDescription": "gibibyte hour" if unit == "GiBy.h" else "hour",
                "baseUnit": "By.s" if unit == "GiBy.h" else "s",
                "baseUnitDescription": "byte second" if unit == "GiBy.h" else "second",
                "baseUnitConversionFactor": 3865470566400 if unit == "GiBy.h" else 3600},
            "currencyConversionRate": 1, "effectiveTime": "2026-11-30T08:00:00.000000Z"}],
        "serviceProviderName": "Google",
        "geoTaxonomy": {"type": "REGIONAL", "regions": list(regions)},
    }


def machine_type(project: str, zone: str, name: str, *, cpus: int, memory_mb: int,
                 accelerator: Optional[str] = None, count: int = 0) -> dict:
    mt = {"kind": "compute#machineType", "id": str(next(_ids)), "name": name,
          "description": f"{cpus} vCPUs, {memory_mb // 1024} GB RAM", "guestCpus": cpus,
          "memoryMb": memory_mb, "maximumPersistentDisks": 128,
          "zone": zone, "isSharedCpu": False,
          "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}"
                      f"/machineTypes/{name}"}
    if accelerator:
        mt["accelerators"] = [{"guestAcceleratorType": accelerator,
                               "guestAcceleratorCount": count}]
    return mt


def accelerator_type(project: str, zone: str, name: str, description: str,
                     max_cards: int) -> dict:
    return {"kind": "compute#acceleratorType", "id": str(next(_ids)), "name": name,
            "description": description, "zone": zone, "maximumCardsPerInstance": max_cards,
            "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}"
                        f"/acceleratorTypes/{name}"}


@dataclass
class FakeBilling:
    project: str = "acme-ml"
    skus: list = field(default_factory=list)
    machine_types: list = field(default_factory=list)       # machine_type() dicts
    accelerator_types: list = field(default_factory=list)
    page_size: int = 3
    faults: dict = field(default_factory=dict)               # op -> [status, ...]
    log: list = field(default_factory=list)                  # (op, query dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: Optional[ThreadingHTTPServer] = None

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeBilling":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep pytest output clean
                pass

            def do_GET(self):  # noqa: N802 - http.server API
                fake._handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    def ops(self, op: str) -> list:
        return [q for o, q in self.log if o == op]

    # ---- request handling --------------------------------------------------------------
    def _send(self, h, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _error(self, h, status: int) -> None:
        reason = {429: "RESOURCE_EXHAUSTED", 403: "PERMISSION_DENIED", 503: "UNAVAILABLE",
                  404: "NOT_FOUND"}.get(status, "UNKNOWN")
        self._send(h, status, {"error": {"code": status, "message": f"fake {reason}",
                                         "status": reason}})

    def _page(self, items: list, q: dict) -> tuple[list, Optional[str]]:
        start = int((q.get("pageToken") or ["0"])[0] or 0)
        size = int((q.get("pageSize") or q.get("maxResults") or [self.page_size])[0])
        size = min(size, self.page_size)
        chunk = items[start:start + size]
        nxt = str(start + size) if start + size < len(items) else None
        return chunk, nxt

    def _handle(self, h) -> None:
        url = urlparse(h.path)
        q = parse_qs(url.query)
        m_sku = re.fullmatch(r"/v1/services/([^/]+)/skus", url.path)
        m_agg = re.fullmatch(r"/compute/v1/projects/([^/]+)/aggregated/(machineTypes|"
                             r"acceleratorTypes)", url.path)
        op = "skus" if m_sku else (m_agg.group(2) if m_agg else "unknown")
        with self.lock:
            self.log.append((op, {k: v[0] for k, v in q.items()}))
            faults = self.faults.get(op) or []
            status = faults.pop(0) if faults else None
        if status:
            return self._error(h, status)
        if m_sku:
            if m_sku.group(1) != GCE:
                return self._error(h, 404)
            chunk, nxt = self._page(self.skus, q)
            body = {"skus": chunk}
            if nxt:
                body["nextPageToken"] = nxt
            return self._send(h, 200, body)
        if m_agg:
            if m_agg.group(1) != self.project:
                return self._error(h, 403)
            names = set(re.findall(r'name\s*=\s*"([^"]+)"', (q.get("filter") or [""])[0]))
            kind = m_agg.group(2)
            source = self.machine_types if kind == "machineTypes" else self.accelerator_types
            chosen = [x for x in source if not names or x["name"] in names]
            # aggregated pages are by item; each page groups its items per zone scope.
            chunk, nxt = self._page(chosen, q)
            items: dict = {}
            for x in chunk:
                items.setdefault(f"zones/{x['zone']}", {}).setdefault(kind, []).append(x)
            body = {"kind": f"compute#{kind[:-1]}AggregatedList", "items": items,
                    "selfLink": f"https://www.googleapis.com/compute/v1/projects/"
                                f"{self.project}/aggregated/{kind}"}
            if nxt:
                body["nextPageToken"] = nxt
            return self._send(h, 200, body)
        return self._error(h, 404)
