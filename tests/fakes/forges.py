"""A local HTTP fake of the GitHub and GitLab endpoints `gpulease comment` calls, written from
their documented behaviour (it stands in for the forges only):

GitHub REST v3 ("Issue comments"; docs.github.com/en/rest/issues/comments) and GraphQL:
- ``GET /repos/O/R/issues/N/comments?per_page=&page=``: oldest first, ``per_page`` at most 100
  (larger is capped, as GitHub does), a ``Link: <...>; rel="next"`` header while more pages
  remain; an unknown repository or number is 404 ``{"message": "Not Found"}``;
- ``POST`` the same path ``{"body"}``: 201 with ``id``, ``node_id``, ``body``; a missing body
  or one above 65,536 characters is 422 "Validation Failed";
- ``PATCH /repos/O/R/issues/comments/ID`` ``{"body"}``: 200; unknown ID 404;
- ``DELETE /repos/O/R/issues/comments/ID``: 204, no content; unknown ID 404;
- ``POST /graphql`` ``minimizeComment(input: {subjectId, classifier})``: the classifier is one
  of the ReportedContentClassifiers enum (SPAM, ABUSE, OFF_TOPIC, OUTDATED, DUPLICATE,
  RESOLVED); an unknown node id answers 200 with ``errors`` (GraphQL's way), NOT_FOUND;
- every call needs ``Authorization: Bearer TOKEN`` (else 401 "Bad credentials").

GitLab REST v4 ("Notes", docs.gitlab.com/api/notes):
- ``GET /api/v4/projects/ID/merge_requests/IID/notes?per_page=&page=&sort=&order_by=``:
  ``per_page`` at most 100, ``X-Next-Page`` (empty on the last page), ``X-Page``, ``X-Total``;
  ``sort`` asc|desc and ``order_by`` created_at|updated_at, else 400; system notes (``"system":
  true``) are listed too; the project may be its id or its URL-encoded path;
- ``POST`` ``{"body"}``: 201; a missing body 400 "body is missing"; above 1,000,000 characters
  400 "Note is too long";
- ``PUT .../notes/ID`` 200, ``DELETE .../notes/ID`` 204; unknown ID 404;
- every call needs ``PRIVATE-TOKEN`` (else 401 "401 Unauthorized").

Faults: ``fake.faults = [502, ...]`` answers the next requests with those statuses first.
Every request is logged (``fake.log``: method, path, headers).
"""
from __future__ import annotations

import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional
from urllib.parse import parse_qs, unquote, urlparse

GITHUB_MAX_BODY = 65_536
GITLAB_MAX_BODY = 1_000_000
CLASSIFIERS = {"SPAM", "ABUSE", "OFF_TOPIC", "OUTDATED", "DUPLICATE", "RESOLVED"}


@dataclass
class Note:
    id: int
    body: str
    node_id: str = ""
    system: bool = False
    minimized: bool = False
    author: str = "gpulease-bot"


@dataclass
class FakeForges:
    token: str = "t0ken-secret"
    #: (owner/repo, number) -> comments; (project id or path, iid) -> notes
    github: dict = field(default_factory=dict)
    gitlab: dict = field(default_factory=dict)
    faults: list = field(default_factory=list)
    log: list = field(default_factory=list)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1000))
    server: Optional[ThreadingHTTPServer] = None

    # ---- setup ----------------------------------------------------------------------------
    def pull_request(self, repo: str, number: int, bodies=()) -> list:
        notes = self.github.setdefault((repo, number), [])
        for b in bodies:
            i = next(self._ids)
            notes.append(Note(i, b, node_id=f"IC_kwDO{i}"))
        return notes

    def merge_request(self, project: str, iid: int, bodies=(), system=()) -> list:
        notes = self.gitlab.setdefault((project, iid), [])
        for b in bodies:
            notes.append(Note(next(self._ids), b))
        for b in system:
            notes.append(Note(next(self._ids), b, system=True))
        return notes

    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_a):
                pass

            def _answer(self, status: int, doc=None, headers=None):
                raw = b"" if doc is None else json.dumps(doc).encode()
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                if doc is not None:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _body(self):
                n = int(self.headers.get("Content-Length") or 0)
                try:
                    return json.loads(self.rfile.read(n) or b"null")
                except ValueError:
                    return None

            def _handle(self):
                fake.log.append((self.command, self.path, dict(self.headers)))
                if fake.faults:
                    status = fake.faults.pop(0)
                    return self._answer(status, {"message": f"injected {status}"})
                url = urlparse(self.path)
                if url.path.startswith("/api/v4/"):
                    return fake._gitlab(self, url)
                return fake._github(self, url)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    # ---- GitHub ----------------------------------------------------------------------------
    def _github(self, h, url):
        if h.headers.get("Authorization") != f"Bearer {self.token}":
            return h._answer(401, {"message": "Bad credentials"})
        q = parse_qs(url.query)
        if url.path == "/graphql" and h.command == "POST":
            return self._graphql(h, h._body())
        m = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/(\d+)/comments", url.path)
        if m:
            notes = self.github.get((m.group(1), int(m.group(2))))
            if notes is None:
                return h._answer(404, {"message": "Not Found"})
            if h.command == "GET":
                per = min(100, int(q.get("per_page", ["30"])[0]))
                page = int(q.get("page", ["1"])[0])
                chunk = notes[(page - 1) * per:page * per]
                headers = {}
                if page * per < len(notes):
                    nxt = f"http://{h.headers['Host']}{url.path}?per_page={per}&page={page + 1}"
                    headers["Link"] = f'<{nxt}>; rel="next"'
                return h._answer(200, [self._gh(n) for n in chunk], headers)
            if h.command == "POST":
                body = (h._body() or {}).get("body")
                bad = self._gh_body(body)
                if bad:
                    return h._answer(422, bad)
                i = next(self._ids)
                n = Note(i, body, node_id=f"IC_kwDO{i}")
                notes.append(n)
                return h._answer(201, self._gh(n))
            return h._answer(404, {"message": "Not Found"})
        m = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/comments/(\d+)", url.path)
        if m:
            found = [(k, n) for k, ns in self.github.items() if k[0] == m.group(1)
                     for n in ns if n.id == int(m.group(2))]
            if not found:
                return h._answer(404, {"message": "Not Found"})
            key, n = found[0]
            if h.command == "PATCH":
                body = (h._body() or {}).get("body")
                bad = self._gh_body(body)
                if bad:
                    return h._answer(422, bad)
                n.body = body
                return h._answer(200, self._gh(n))
            if h.command == "DELETE":
                self.github[key].remove(n)
                return h._answer(204)
        return h._answer(404, {"message": "Not Found"})

    @staticmethod
    def _gh(n: Note) -> dict:
        return {"id": n.id, "node_id": n.node_id, "body": n.body,
                "user": {"login": n.author}}

    @staticmethod
    def _gh_body(body) -> Optional[dict]:
        if not isinstance(body, str) or not body:
            return {"message": "Validation Failed", "errors": [{"resource": "IssueComment",
                                                                 "code": "missing_field",
                                                                 "field": "body"}]}
        if len(body) > GITHUB_MAX_BODY:
            return {"message": "Validation Failed", "errors": [
                {"resource": "IssueComment", "code": "custom", "field": "body",
                 "message": "body is too long (maximum is 65536 characters)"}]}
        return None

    def _graphql(self, h, doc):
        q = (doc or {}).get("query", "")
        if "minimizeComment" not in q:
            return h._answer(200, {"errors": [{"message": "unsupported by the fake"}]})
        cls = re.search(r"classifier:\s*(\w+)", q)
        if not cls or cls.group(1) not in CLASSIFIERS:
            return h._answer(200, {"errors": [{"message": "Argument 'classifier' has an "
                                                         "invalid value"}]})
        node = ((doc or {}).get("variables") or {}).get("id")
        for ns in self.github.values():
            for n in ns:
                if n.node_id == node:
                    n.minimized = True
                    return h._answer(200, {"data": {"minimizeComment": {
                        "minimizedComment": {"isMinimized": True}}}})
        return h._answer(200, {"data": {"minimizeComment": None}, "errors": [
            {"type": "NOT_FOUND", "message": f"Could not resolve to a node with the global id "
                                             f"of '{node}'"}]})

    # ---- GitLab ----------------------------------------------------------------------------
    def _gitlab(self, h, url):
        if h.headers.get("PRIVATE-TOKEN") != self.token:
            return h._answer(401, {"message": "401 Unauthorized"})
        m = re.fullmatch(r"/api/v4/projects/([^/]+)/merge_requests/(\d+)/notes(?:/(\d+))?",
                         url.path)
        if not m:
            return h._answer(404, {"message": "404 Not Found"})
        notes = self.gitlab.get((unquote(m.group(1)), int(m.group(2))))
        if notes is None:
            return h._answer(404, {"message": "404 Project Not Found"})
        q = parse_qs(url.query)
        if m.group(3) is None:
            if h.command == "GET":
                if q.get("sort", ["desc"])[0] not in ("asc", "desc") or \
                        q.get("order_by", ["created_at"])[0] not in ("created_at", "updated_at"):
                    return h._answer(400, {"error": "sort, order_by does not have a valid "
                                                    "value"})
                per = min(100, int(q.get("per_page", ["20"])[0]))
                page = int(q.get("page", ["1"])[0])
                ordered = notes if q.get("sort", ["desc"])[0] == "asc" else notes[::-1]
                chunk = ordered[(page - 1) * per:page * per]
                more = page * per < len(notes)
                return h._answer(200, [self._gl(n) for n in chunk],
                                 {"X-Next-Page": str(page + 1) if more else "",
                                  "X-Page": str(page), "X-Total": str(len(notes))})
            if h.command == "POST":
                body = (h._body() or {}).get("body")
                if not isinstance(body, str) or not body:
                    return h._answer(400, {"message": "400 Bad request - body is missing"})
                if len(body) > GITLAB_MAX_BODY:
                    return h._answer(400, {"message": {"note": ["is too long"]}})
                n = Note(next(self._ids), body)
                notes.append(n)
                return h._answer(201, self._gl(n))
            return h._answer(405, {"message": "405 Method Not Allowed"})
        found = [n for n in notes if n.id == int(m.group(3))]
        if not found:
            return h._answer(404, {"message": "404 Not found"})
        n = found[0]
        if h.command == "PUT":
            body = (h._body() or {}).get("body")
            if not isinstance(body, str) or not body:
                return h._answer(400, {"message": "400 Bad request - body is missing"})
            n.body = body
            return h._answer(200, self._gl(n))
        if h.command == "DELETE":
            notes.remove(n)
            return h._answer(204)
        return h._answer(405, {"message": "405 Method Not Allowed"})

    @staticmethod
    def _gl(n: Note) -> dict:
        return {"id": n.id, "body": n.body, "system": n.system,
                "author": {"username": n.author}}
