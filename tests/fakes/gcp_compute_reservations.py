"""A local HTTP fake of the Compute Engine v1 reservations API and its zonal operations.

Written from the Compute API reference (reservations.insert / get / delete / resize,
zoneOperations.get, the Operation resource):

- insert / resize / delete answer a zonal Operation (``status`` RUNNING until it has been
  polled ``polls_until_done`` times, then DONE; ``insertTime``; ``clientOperationId`` = the
  request's ``requestId``). ``requestId`` must be a UUID other than the zero UUID (400
  ``invalid``); a request repeating a request id seen in the last 60 minutes is ignored and
  answered with the first request's operation ("the server will know to ignore the request if
  it has already been completed").
- 400 ``invalid`` on a name that is not RFC 1035, a body zone or placement policy outside the
  URL's zone/region, a count below 1; 404 ``notFound`` on get / delete / resize of a missing
  reservation; 409 ``alreadyExists`` on inserting a name that exists.
- Faults a test can ask for, each as the API shows it: an operation that finishes with an
  ``error.errors`` list (with or without ``httpErrorStatusCode``; the reservation is then not
  made), an insert that is carried out but whose answer is lost (a 503 after the work, as a
  client that timed out sees it), and a ``get`` answered with a body that is not a
  reservation.

It stands in for the cloud only; ``now`` is its clock (tests move it).
"""
from __future__ import annotations

import itertools
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional
from urllib.parse import parse_qs, urlsplit

NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_ops = itertools.count(1)
BASE = "/compute/v1/projects/(?P<p>[^/]+)/zones/(?P<z>[^/]+)"
API = "https://www.googleapis.com/compute/v1"
#: how long the API remembers a request id ("at least 60 minutes").
REQUEST_ID_WINDOW_S = 3600


def _error(code: int, reason: str, message: str) -> tuple[int, dict]:
    return code, {"error": {"code": code, "message": message,
                            "errors": [{"domain": "global", "reason": reason,
                                        "message": message}]}}


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class FakeReservations:
    reservations: dict = field(default_factory=dict)   # (project, zone, name) -> JSON
    operations: dict = field(default_factory=dict)     # name -> operation JSON
    log: list = field(default_factory=list)            # (method, path)
    #: (project, zone, requestId) -> (operation name, time first seen)
    request_ids: dict = field(default_factory=dict)
    #: polls of an operation answered RUNNING before it is DONE (1 = DONE on the first poll)
    polls_until_done: int = 1
    #: errors the next insert's operation finishes with: {"errors": [{code, message}],
    #: "http": (status, message) or None}; the reservation is not made.
    fail_next_insert: Optional[dict] = None
    #: carry out the next insert, then answer 503 as if the answer were lost
    lose_next_insert_answer: bool = False
    #: the next get of a reservation answers this JSON (or raw text) instead
    malformed_next_get: Optional[object] = None
    now: Callable[[], float] = time.time
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: Optional[ThreadingHTTPServer] = None

    def _operation(self, project: str, zone: str, kind: str, target: str,
                   request_id: Optional[str], error: Optional[dict] = None) -> dict:
        name = f"operation-{next(_ops)}"
        op = {"kind": "compute#operation", "id": str(10**12 + int(name.rsplit('-', 1)[1])),
              "name": name, "operationType": kind, "status": "RUNNING", "progress": 0,
              "insertTime": _rfc3339(self.now()),
              "zone": f"{API}/projects/{project}/zones/{zone}", "targetLink": target,
              "selfLink": f"{API}/projects/{project}/zones/{zone}/operations/{name}",
              "_polls": 0, "_error": error}
        if request_id:
            op["clientOperationId"] = request_id
        self.operations[name] = op
        return self._shown(op)

    @staticmethod
    def _shown(op: dict) -> dict:
        return {k: v for k, v in op.items() if not k.startswith("_")}

    def _poll(self, op: dict) -> dict:
        op["_polls"] += 1
        if op["status"] != "DONE" and op["_polls"] >= self.polls_until_done:
            op["status"], op["progress"] = "DONE", 100
            op["endTime"] = _rfc3339(self.now())
            err = op.get("_error")
            if err:
                op["error"] = {"errors": err["errors"]}
                if err.get("http"):
                    op["httpErrorStatusCode"], op["httpErrorMessage"] = err["http"]
            elif op.get("_apply"):
                op.pop("_apply")()
        return self._shown(op)

    def _link(self, p: str, z: str, n: str) -> str:
        return f"{API}/projects/{p}/zones/{z}/reservations/{n}"

    def _request_id(self, project: str, zone: str, query: dict) -> tuple[Optional[str], object]:
        """(request id, None) or (None, error answer); a repeated id answers its operation."""
        rid = (query.get("requestId") or [None])[0]
        if rid is None:
            return None, None
        try:
            parsed = uuid.UUID(rid)
        except ValueError:
            parsed = None
        if parsed is None or parsed.int == 0:
            return None, _error(400, "invalid", f"Invalid value for field 'requestId': '{rid}'"
                                                ". The request ID must be a valid UUID with the"
                                                " exception that zero UUID is not supported")
        seen = self.request_ids.get((project, zone, rid))
        if seen and self.now() - seen[1] < REQUEST_ID_WINDOW_S:
            return rid, (200, self._shown(self.operations[seen[0]]))
        return rid, None

    def _remember(self, project: str, zone: str, rid: Optional[str], answer: tuple) -> tuple:
        if rid and answer[0] == 200:
            self.request_ids[(project, zone, rid)] = (answer[1]["name"], self.now())
        return answer

    def handle(self, method: str, path: str, body: Optional[dict],
               query: Optional[dict] = None) -> tuple[int, object]:
        query = query or {}
        with self.lock:
            self.log.append((method, path))
            m = re.fullmatch(BASE + r"/operations/(?P<op>[^/]+)", path)
            if m and method == "GET":
                op = self.operations.get(m["op"])
                if op is None:
                    return _error(404, "notFound", f"The resource '{path}' was not found")
                return 200, self._poll(op)
            m = re.fullmatch(BASE + r"/reservations", path)
            if m and method == "POST":
                rid, replay = self._request_id(m["p"], m["z"], query)
                if replay is not None:
                    return replay
                answer = self._remember(m["p"], m["z"], rid,
                                        self._insert(m["p"], m["z"], body or {}, rid))
                if answer[0] == 200 and self.lose_next_insert_answer:
                    self.lose_next_insert_answer = False
                    return _error(503, "backendError", "The service is currently unavailable.")
                return answer
            m = re.fullmatch(BASE + r"/reservations/(?P<n>[^/]+)(?P<resize>/resize)?", path)
            if not m:
                return _error(404, "notFound", f"no such API path {path}")
            key = (m["p"], m["z"], m["n"])
            if method in ("POST", "DELETE"):
                rid, replay = self._request_id(m["p"], m["z"], query)
                if replay is not None:
                    return replay
            if key not in self.reservations:
                return _error(404, "notFound", f"The resource 'projects/{m['p']}/zones/"
                                               f"{m['z']}/reservations/{m['n']}' was not found")
            if method == "GET" and not m["resize"]:
                if self.malformed_next_get is not None:
                    bad, self.malformed_next_get = self.malformed_next_get, None
                    return 200, bad
                return 200, self.reservations[key]
            if method == "DELETE" and not m["resize"]:
                del self.reservations[key]
                return self._remember(*key[:2], rid, (200, self._operation(
                    *key[:2], "delete", self._link(*key), rid)))
            if method == "POST" and m["resize"]:
                count = int((body or {}).get("specificSkuCount", 0))
                if count < 1:
                    return _error(400, "invalid", "Invalid value for field "
                                                  "'specificSkuCount': must be at least 1")
                answer = self._operation(*key[:2], "resize", self._link(*key), rid)

                def apply(key=key, count=count):
                    self.reservations[key]["specificReservation"]["count"] = str(count)
                self.operations[answer["name"]]["_apply"] = apply
                return self._remember(*key[:2], rid, (200, answer))
            return _error(405, "methodNotAllowed", f"{method} {path}")

    def _insert(self, project: str, zone: str, body: dict,
                rid: Optional[str]) -> tuple[int, dict]:
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
        try:
            count = int((body.get("specificReservation") or {}).get("count", 0))
        except (TypeError, ValueError):
            count = 0
        if count < 1:
            return _error(400, "invalid", "Invalid value for field "
                                          "'resource.specificReservation.count'")
        key = (project, zone, name)
        if key in self.reservations:
            return _error(409, "alreadyExists", f"The resource 'projects/{project}/zones/"
                                                f"{zone}/reservations/{name}' already exists")
        failure, self.fail_next_insert = self.fail_next_insert, None
        answer = self._operation(project, zone, "insert", self._link(project, zone, name), rid,
                                 error=failure)
        if failure is None:
            stored = json.loads(json.dumps(body))
            stored.update(kind="compute#reservation", status="READY",
                          creationTimestamp=_rfc3339(self.now()),
                          zone=f"{API}/projects/{project}/zones/{zone}",
                          selfLink=self._link(project, zone, name))
            stored["specificReservation"]["count"] = str(count)
            stored["specificReservation"]["inUseCount"] = "0"
            self.reservations[key] = stored
        return 200, answer

    # ---- server ----------------------------------------------------------------------------
    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _do(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                url = urlsplit(self.path)
                status, out = fake.handle(method, url.path, body, parse_qs(url.query))
                data = out.encode() if isinstance(out, str) else json.dumps(out).encode()
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
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                         daemon=True).start()
        return f"127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
