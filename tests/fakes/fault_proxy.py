"""A local fault-injecting HTTP proxy in front of moto's server or the GCP fake, for reaper tests.

It forwards every request to its upstream unchanged and, when a rule matches, answers instead
with what gateways, proxies and throttled APIs really send (or runs a hook that changes the
upstream's resources mid-run). It stands for the network and the cloud's front door only:
no gpulease logic. Rules match an *operation*: the AWS query/EC2 ``Action=`` parameter, the
``X-Amz-Target`` of awsJson (CloudWatch as botocore 1.44 calls it), the rpc-v2-cbor operation
in the path, or the REST path (GCP).

Fault kinds (``Rule.reply``):
- ``"html"``: an HTML error page with ``status`` (default 502), in ``style`` ``"nginx"``
  (``<html>...``, what nginx and many load balancers send) or ``"doctype"``
  (``<!doctype html>...``, what werkzeug/Flask, Envoy error pages and captive portals send);
- ``"non-json-200"``: HTTP 200 with an HTML page (a captive portal or proxy login page);
- ``"truncated-200"``: the upstream's real 200 answer cut in half (a dropped connection);
- ``"throttle"``: the cloud's own throttling error for that protocol (AWS query: 400
  ``Throttling``; EC2: 400 ``RequestLimitExceeded``; AWS awsJson / rpc-v2-cbor: 400
  ``ThrottlingException`` with the query-compatible ``Throttling`` header; GCP: 429
  ``RESOURCE_EXHAUSTED`` / ``rateLimitExceeded``);
- ``"body"``: ``status`` with the rule's own ``page`` and ``content_type`` (the cloud's own
  error document, e.g. an S3 AccessDenied quoting the caller's ARN);
- ``None``: forward (use with ``hook`` to change resources before or after the real call).
"""
from __future__ import annotations

import http.client
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional
from urllib.parse import parse_qs, urlparse

from tests.timeouts import HANG_S

NGINX_502 = (b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center>"
             b"<h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n"
             b"</html>\r\n")
DOCTYPE_503 = (b"<!doctype html>\n<html lang=en>\n<title>503 Service Unavailable</title>\n"
               b"<h1>Service Unavailable</h1>\n<p>The server is temporarily unable to service "
               b"your request.</p>\n")
PORTAL_200 = (b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>"
              b"<form action=\"/login\">Please sign in to continue</form></body></html>\n")
_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
        "transfer-encoding", "upgrade", "content-length"}


def _cbor_text(s: str) -> bytes:
    data = s.encode()
    n = len(data)
    head = bytes([0x60 + n]) if n < 24 else bytes([0x78, n]) if n < 256 else \
        bytes([0x79]) + n.to_bytes(2, "big")
    return head + data


def cbor_map(d: dict) -> bytes:
    """CBOR (RFC 8949) of a small str -> str map: enough for an rpc-v2-cbor error body."""
    assert len(d) < 24
    return bytes([0xA0 + len(d)]) + b"".join(_cbor_text(k) + _cbor_text(v) for k, v in d.items())


@dataclass(frozen=True)
class Seen:
    """A request as the proxy received it."""

    method: str
    path: str
    query: str
    headers: dict
    body: bytes

    @property
    def protocol(self) -> str:
        if "rpc-v2-cbor" in self.headers.get("smithy-protocol", ""):
            return "cbor"
        if "x-amz-target" in self.headers:
            return "json"
        if self.path.startswith(("/compute/", "/v3/")):
            return "gcp"
        return "query"

    @property
    def operation(self) -> str:
        if self.protocol == "cbor":
            return self.path.rsplit("/operation/", 1)[-1]
        if self.protocol == "json":
            return self.headers["x-amz-target"].rsplit(".", 1)[-1]
        if self.protocol == "query":
            form = parse_qs(self.body.decode("utf-8", "replace")) or parse_qs(self.query)
            return (form.get("Action") or [""])[0]
        return self.path


@dataclass
class Rule:
    #: regex searched in the operation (``"DescribeAutoScalingGroups"``, ``"/timeSeries"``).
    match: str
    reply: Optional[str] = None
    #: regex searched in the request body (e.g. one ASG's name), or None for any body.
    body: Optional[str] = None
    status: int = 502
    style: str = "nginx"
    #: ``reply="body"``: the answer's body and Content-Type
    page: bytes = b""
    content_type: str = "application/xml"
    #: how many matching requests it applies to (None = all).
    times: Optional[int] = 1
    #: called with the request: before forwarding / answering (``when="before"``) or after the
    #: upstream answered (``"after"``) — resources changing mid-run.
    hook: Optional[Callable[[Seen], None]] = None
    when: str = "before"
    #: only from the n-th matching request on (0 = the first).
    skip: int = 0
    fired: int = 0
    seen: int = 0


@dataclass
class FaultProxy:
    upstream: str                              # http://host:port
    rules: list = field(default_factory=list)
    log: list = field(default_factory=list)    # (operation, status it answered)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: Optional[ThreadingHTTPServer] = None

    def add(self, match: str, reply: Optional[str] = None, **kw) -> Rule:
        rule = Rule(match=match, reply=reply, **kw)
        with self.lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self.lock:
            self.rules.clear()
            self.log.clear()

    def injected(self) -> list:
        """(operation, status) of the answers the proxy made up (not forwarded)."""
        return [(op, st) for op, st, made in self.log if made]

    def _pick(self, seen: Seen) -> Optional[Rule]:
        with self.lock:
            for rule in self.rules:
                if not re.search(rule.match, seen.operation):
                    continue
                if rule.body is not None and not re.search(
                        rule.body, seen.body.decode("utf-8", "replace")):
                    continue
                rule.seen += 1
                if rule.seen <= rule.skip:
                    continue
                if rule.times is not None and rule.fired >= rule.times:
                    continue
                rule.fired += 1
                return rule
        return None

    # ---- answers --------------------------------------------------------------------------
    @staticmethod
    def _throttle(seen: Seen) -> tuple[int, dict, bytes]:
        if seen.protocol == "gcp":
            body = {"error": {"code": 429, "message": "Quota exceeded for quota metric 'Read "
                              "requests' and limit 'Read requests per minute'",
                              "status": "RESOURCE_EXHAUSTED",
                              "errors": [{"reason": "rateLimitExceeded",
                                          "domain": "usageLimits", "message": "Rate exceeded"}]}}
            return 429, {"Content-Type": "application/json"}, json.dumps(body).encode()
        if seen.protocol == "json":  # awsJson1_0, query-compatible (CloudWatch)
            return 400, {"Content-Type": "application/x-amz-json-1.0",
                         "x-amzn-query-error": "Throttling;Sender"}, json.dumps(
                {"__type": "com.amazonaws.cloudwatch#ThrottlingException",
                 "message": "Rate exceeded"}).encode()
        if seen.protocol == "cbor":
            return 400, {"Content-Type": "application/cbor", "smithy-protocol": "rpc-v2-cbor",
                         "x-amzn-query-error": "Throttling;Sender"}, cbor_map(
                {"__type": "com.amazonaws.cloudwatch#ThrottlingException",
                 "message": "Rate exceeded"})
        xml = (b'<ErrorResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><Error>'
               b"<Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message>"
               b"</Error><RequestId>f00d-proxy</RequestId></ErrorResponse>")
        if "/ec2/aws4_request" in seen.headers.get("authorization", ""):  # EC2's own error shape
            xml = (b"<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request "
                   b"limit exceeded.</Message></Error></Errors><RequestID>f00d</RequestID>"
                   b"</Response>")
        return 400, {"Content-Type": "text/xml"}, xml

    def _forward(self, seen: Seen) -> tuple[int, dict, bytes]:
        up = urlparse(self.upstream)
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=HANG_S)
        try:
            path = seen.path + (f"?{seen.query}" if seen.query else "")
            headers = {k: v for k, v in seen.headers.items() if k.lower() not in _HOP}
            headers["Content-Length"] = str(len(seen.body))
            conn.request(seen.method, path, body=seen.body or None, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            return resp.status, {k: v for k, v in resp.getheaders()
                                 if k.lower() not in _HOP}, body
        finally:
            conn.close()

    def handle(self, seen: Seen) -> tuple[int, dict, bytes, bool]:
        rule = self._pick(seen)
        if rule and rule.hook and rule.when == "before":
            rule.hook(seen)
        if rule is None or rule.reply is None:
            status, headers, body = self._forward(seen)
            if rule and rule.hook and rule.when == "after":
                rule.hook(seen)
            return status, headers, body, False
        if rule.reply == "html":
            page = NGINX_502 if rule.style == "nginx" else DOCTYPE_503
            return rule.status, {"Content-Type": "text/html"}, page, True
        if rule.reply == "body":
            return rule.status, {"Content-Type": rule.content_type}, rule.page, True
        if rule.reply == "non-json-200":
            return 200, {"Content-Type": "text/html; charset=utf-8"}, PORTAL_200, True
        if rule.reply == "truncated-200":
            status, headers, body = self._forward(seen)
            return 200, headers, body[: max(1, len(body) // 2)], True
        if rule.reply == "throttle":
            return (*self._throttle(seen), True)
        raise ValueError(f"unknown fault kind {rule.reply!r}")

    # ---- HTTP -----------------------------------------------------------------------------
    def start(self) -> str:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _any(self) -> None:
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                seen = Seen(self.command, url.path, url.query,
                            {k.lower(): v for k, v in self.headers.items()}, body)
                status, headers, out, made = proxy.handle(seen)
                with proxy.lock:
                    proxy.log.append((seen.operation, status, made))
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _any  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()
