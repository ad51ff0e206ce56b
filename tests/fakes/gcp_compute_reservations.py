"""A local HTTP fake of the Compute Engine v1 reservations API and its zonal operations.

Written from the Compute API reference (reservations.insert / get / delete / resize, zoneOperations.get):
inserts return a zonal Operation (RUNNING, then DONE on the next get), 400 ``invalid`` on a
name that is not RFC 1035 or a body zone / placement policy outside the URL's zone, 404
``notFound`` on get / delete / resize of a missing reservation, 409 ``alreadyExists`` on a
second insert, ``resourcePolicies`` stored as sent. It stands in for the cloud only.
"""
from __future__ import annotations

import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_ops = itertools.count(1)
BASE = "/compute/v1/projects/(?P<p>[^/]+)/zones/(?P<z>[^/]+)"


def _error(code: int, reason: str, message: str) -> tuple[int, dict]:
    return code, {"error": {"code": code, "message": message,
                            "errors": [{"domain": "global", "reason": reason,
                                        "message": message}]}}


@dataclass
class FakeReservations:
    reservations: dict = field(default_factory=dict)   # (project, zone, name) -> JSON
    operations: dict = field(default_factory=dict)     # name -> operation JSON
    log: list = field(default_factory=list)            # (method, path)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: Optional[ThreadingHTTPServer] = None

    def _operation(self, project: str, zone: str, kind: str, target: str) -> dict:
        name = f"operation-{next(_ops)}"
        op = {"kind": "compute#operation", "name": name, "operationType": kind,
              "status": "RUNNING", "progress": 0,
              "zone": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}",
              "targetLink": target,
              "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/"
                          f"{zone}/operations/{name}"}
        self.operations[name] = op
        return dict(op)

    def _link(self, p: str, z: str, n: str) -> str:
        return f"https://www.googleapis.com/compute/v1/projects/{p}/zones/{z}/reservations/{n}"

    def handle(self, method: str, path: str, body: Optional[dict]) -> tuple[int, dict]:
        with self.lock:
            self.log.append((method, path))
            m = re.fullmatch(BASE + r"/operations/(?P<op>[^/]+)", path)
            if m and method == "GET":
                op = self.operations.get(m["op"])
                if op is None:
                    return _error(404, "notFound", f"The resource '{path}' was not found")
                op["status"], op["progress"] = "DONE", 100   # done once polled
                return 200, dict(op)
            m = re.fullmatch(BASE + r"/reservations", path)
            if m and method == "POST":
                return self._insert(m["p"], m["z"], body or {})
            m = re.fullmatch(BASE + r"/reservations/(?P<n>[^/]+)(?P<resize>/resize)?", path)
            if not m:
                return _error(404, "notFound", f"no such API path {path}")
            key = (m["p"], m["z"], m["n"])
            if key not in self.reservations:
                return _error(404, "notFound", f"The resource 'projects/{m['p']}/zones/"
                                               f"{m['z']}/reservations/{m['n']}' was not found")
            if method == "GET" and not m["resize"]:
                return 200, self.reservations[key]
            if method == "DELETE" and not m["resize"]:
                del self.reservations[key]
                return 200, self._operation(*key[:2], "delete", self._link(*key))
            if method == "POST" and m["resize"]:
                count = int((body or {}).get("specificSkuCount", 0))
                if count < 1:
                    return _error(400, "invalid", "Invalid value for field "
                                                  "'specificSkuCount': must be at least 1")
                self.reservations[key]["specificReservation"]["count"] = str(count)
                return 200, self._operation(*key[:2], "resize", self._link(*key))
            return _error(405, "methodNotAllowed", f"{method} {path}")

    def _insert(self, project: str, zone: str, body: dict) -> tuple[int, dict]:
        name = body.get("name", "")
        if not NAME.fullmatch(name):
            return _error(400, "invalid", f"Invalid value for field 'resource.name': "
                                          f"'{name}'. Must be a match of regex "
                                          "'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
        if body.get("zone") and body["zone"].rsplit("/", 1)[-1] != zone:
            return _error(400, "invalid", f"Invalid value for field 'resource.zone': "
                                          f"'{body['zone']}'. Zone must match the request zone")
        region = zone.rsplit("-", 1)[0]
        for policy in (body.get("resourcePolicies") or {}).values():
            if f"/regions/{region}/resourcePolicies/" not in policy:
                return _error(400, "invalid", f"Invalid value for field "
                                              f"'resource.resourcePolicies': '{policy}'. "
                                              f"Resource policy must be in region {region}")
        count = int((body.get("specificReservation") or {}).get("count", 0))
        if count < 1:
            return _error(400, "invalid", "Invalid value for field "
                                          "'resource.specificReservation.count'")
        key = (project, zone, name)
        if key in self.reservations:
            return _error(409, "alreadyExists", f"The resource 'projects/{project}/zones/"
                                                f"{zone}/reservations/{name}' already exists")
        stored = json.loads(json.dumps(body))
        stored.update(kind="compute#reservation", status="READY",
                      zone=f"https://www.googleapis.com/compute/v1/projects/{project}/zones/"
                           f"{zone}", selfLink=self._link(project, zone, name))
        stored["specificReservation"]["count"] = str(count)
        self.reservations[key] = stored
        return 200, self._operation(project, zone, "insert", self._link(project, zone, name))

    # ---- server ----------------------------------------------------------------------------
    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _do(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                status, out = fake.handle(method, self.path.split("?", 1)[0], body)
                data = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                self._do("GET")

            def do_POST(self):  # noqa: N802
                self._do("POST")

            def do_DELETE(self):  # noqa: N802
                self._do("DELETE")

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
