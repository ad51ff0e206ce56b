"""A local HTTP fake of the Cloud Storage JSON API's object reads (what the reaper calls).

It stands in for the cloud only (no gpulease logic): ``objects.get`` at
``GET /storage/v1/b/BUCKET/o/OBJECT`` and at the media path google-cloud-storage downloads from
(``GET /download/storage/v1/b/BUCKET/o/OBJECT?alt=media``), the object name percent-encoded in
the path as the client sends it. With ``alt=media`` the answer is the object's bytes, otherwise
its metadata (an ``storage#object`` resource). As Cloud Storage does:

- a missing bucket or object is a 404 in the JSON API's documented error shape
  (``{"error": {"errors": [{"domain": "global", "reason": "notFound", "message": ...}],
  "code": 404, "message": ...}}``, "HTTP status and error codes for JSON");
- a ``Range: bytes=FIRST-LAST`` / ``bytes=FIRST-`` / ``bytes=-SUFFIX`` header is honoured
  (RFC 9110: 206 with ``Content-Range``, LAST past the end cut to the end; a FIRST at or past
  the end is a 416; a header that is not a byte range is ignored: 200 with the whole object);
- media answers carry ``x-goog-hash`` (crc32c and md5 of the whole object, base64),
  ``x-goog-generation`` and ``x-goog-stored-content-length``, so the client's checksum check of
  a whole download runs;
- any other method or path is a 404 (the fake has no route), never an empty 200.

Faults can be injected (``fake.faults["get"] = [503]``). Objects are written with
:meth:`FakeGcs.put` (the node's side: ``gpulease-progress`` through the checkpoint mount).
Every request is logged as (method, path, Range header).
"""
from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional
from urllib.parse import parse_qs, unquote, urlparse

import google_crc32c

_generations = itertools.count(1_796_000_000_000_001)
_PATH = re.compile(r"/(?:download/)?storage/v1/b/([^/]+)/o/([^/]+)")
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def _error(code: int, message: str, reason: str) -> tuple[int, dict, bytes]:
    body = {"error": {"errors": [{"domain": "global", "reason": reason, "message": message}],
                      "code": code, "message": message}}
    return code, {"Content-Type": "application/json; charset=UTF-8"}, json.dumps(body).encode()


@dataclass
class FakeGcs:
    buckets: dict = field(default_factory=dict)    # bucket -> {object name: (bytes, generation)}
    faults: dict = field(default_factory=dict)     # op -> [status, ...] returned first
    log: list = field(default_factory=list)        # (method, path, Range header or None)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: Optional[ThreadingHTTPServer] = None
    url: str = ""

    # ---- state (what a real bucket holds) -------------------------------------------------
    def create_bucket(self, name: str) -> None:
        self.buckets.setdefault(name, {})

    def put(self, bucket: str, name: str, data: bytes) -> None:
        """Write an object (a new generation); the bucket must exist, as in GCS."""
        with self.lock:
            self.buckets[bucket][name] = (bytes(data), next(_generations))

    def delete(self, bucket: str, name: str) -> None:
        with self.lock:
            self.buckets[bucket].pop(name, None)

    def read(self, bucket: str, name: str) -> bytes:
        return self.buckets[bucket][name][0]

    # ---- HTTP -----------------------------------------------------------------------------
    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                with fake.lock:
                    status, headers, body = fake.route(self.command, self.path,
                                                       self.headers.get("Range"))
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        return self.url

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    def route(self, method: str, raw_path: str, range_header: Optional[str]
              ) -> tuple[int, dict, bytes]:
        url = urlparse(raw_path)
        self.log.append((method, url.path, range_header))
        m = _PATH.fullmatch(url.path)
        if not m or method != "GET":
            return _error(404, f"fake has no route {method} {url.path}", "notFound")
        queue = self.faults.get("get")
        if queue:
            status = queue.pop(0)
            if status is not None:
                return _error(status, f"injected {status}",
                              "forbidden" if status == 403 else "backendError")
        bucket, name = unquote(m.group(1)), unquote(m.group(2))
        if bucket not in self.buckets:
            return _error(404, "The specified bucket does not exist.", "notFound")
        if name not in self.buckets[bucket]:
            return _error(404, f"No such object: {bucket}/{name}", "notFound")
        data, generation = self.buckets[bucket][name]
        q = parse_qs(url.query)
        if q.get("alt") != ["media"]:
            if url.path.startswith("/download/"):
                return _error(400, "alt=media is required on the download path", "invalid")
            return 200, {"Content-Type": "application/json; charset=UTF-8"}, json.dumps({
                "kind": "storage#object", "bucket": bucket, "name": name,
                "generation": str(generation), "size": str(len(data)),
                "contentType": "application/json",
                "md5Hash": base64.b64encode(hashlib.md5(data).digest()).decode(),
                "crc32c": _crc32c(data)}).encode()
        headers = {"Content-Type": "application/json",
                   "x-goog-hash": f"crc32c={_crc32c(data)},"
                                  f"md5={base64.b64encode(hashlib.md5(data).digest()).decode()}",
                   "x-goog-generation": str(generation),
                   "x-goog-stored-content-length": str(len(data)),
                   "x-goog-stored-content-encoding": "identity"}
        r = _RANGE.fullmatch((range_header or "").strip())
        if not r or (not r.group(1) and not r.group(2)):
            return 200, headers, data                     # no (byte) range: the whole object
        first, last = r.groups()
        if first:
            start = int(first)
            end = min(int(last), len(data) - 1) if last else len(data) - 1
            if last and int(last) < start:
                return 200, headers, data                 # invalid range: ignored (RFC 9110)
        else:
            start, end = max(len(data) - int(last), 0), len(data) - 1
        if start >= len(data):
            return _error(416, "Request range not satisfiable", "requestedRangeNotSatisfiable")
        headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        return 206, headers, data[start:end + 1]


def _crc32c(data: bytes) -> str:
    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()
