"""Pull-request comments on GitHub and GitLab (issue 36 item 2): which comment to create,
update, hide or delete, and the REST calls that do it.

Behaviours (the conventions Infracost users know, ``--behavior``):

- ``update`` (default): one sticky comment per stack, created once and edited in place;
- ``hide-and-new``: earlier gpulease comments of the stack are minimized ("outdated"), then a
  new one is posted (GitHub only: GitLab has no way to hide a note through its API);
- ``delete-and-new``: earlier ones deleted, then a new one;
- ``new``: always a new comment.

``--skip-no-diff``: post nothing when the monthly cost does not change; ``--only-if-increase``:
post nothing unless it rises. Either way an existing sticky comment is still brought up to
date under ``update`` (a stale "rises by $X" must not stay), and nothing else is touched.

gpulease's comments are found by the marker of :mod:`gpulease.pipeline.markdown` (one per stack),
never by author. Tokens come from the environment only (``GITHUB_TOKEN``, ``GITLAB_TOKEN``)
and are never printed. Plain ``urllib`` (no SDK): the endpoints are four per forge.
"""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from gpulease.errors import CloudError
from gpulease.pipeline.markdown import marker
from gpulease.retry import Backoff

BEHAVIORS = ("update", "hide-and-new", "delete-and-new", "new")
#: seconds one HTTP call may take
TIMEOUT_S = 30
#: items per page asked for (both APIs allow at most 100)
PER_PAGE = 100
#: most pages read before giving up (10,000 comments on one pull request is not a real one)
MAX_PAGES = 100


@dataclass(frozen=True)
class Comment:
    id: str
    body: str
    #: GitHub's GraphQL node id (what minimizeComment takes); '' on GitLab
    node_id: str = ""


@dataclass
class Outcome:
    """What was done: ``action`` is created / updated / skipped / nothing; ``id`` the comment
    written; ``hidden`` / ``deleted`` the earlier ones."""

    action: str
    reason: str
    id: Optional[str] = None
    hidden: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"action": self.action, "reason": self.reason, "id": self.id,
                "hidden": self.hidden, "deleted": self.deleted}


class Forge:
    """The four calls a behaviour needs (GitHub and GitLab implement them)."""

    name = ""
    can_hide = False

    def list(self) -> list[Comment]:
        raise NotImplementedError

    def create(self, body: str) -> Comment:
        raise NotImplementedError

    def update(self, comment: Comment, body: str) -> Comment:
        raise NotImplementedError

    def delete(self, comment: Comment) -> None:
        raise NotImplementedError

    def hide(self, comment: Comment) -> None:
        raise NotImplementedError


def post(forge: Forge, body: str, *, stack: str, behavior: str = "update",
         delta_usd: Optional[float] = None, skip_no_diff: bool = False,
         only_if_increase: bool = False) -> Outcome:
    """Apply ``behavior`` for ``body`` (a comment of :func:`markdown.render`)."""
    if behavior not in BEHAVIORS:
        raise ValueError(f"unknown behavior {behavior!r}")
    if behavior == "hide-and-new" and not forge.can_hide:
        raise ValueError(f"{forge.name} cannot hide comments through its API: use update, "
                         "delete-and-new or new")
    tag = marker(stack)
    ours = [c for c in forge.list() if c.body.startswith(tag)]
    quiet = None
    if only_if_increase and (delta_usd is None or delta_usd <= 0):
        quiet = "the monthly cost does not rise" if delta_usd is not None else \
            "no baseline to compare with (plan --diff BASE)"
    elif skip_no_diff and (delta_usd is None or delta_usd == 0):
        quiet = "the monthly cost does not change" if delta_usd is not None else \
            "no baseline to compare with (plan --diff BASE)"
    if behavior == "update" and ours:
        current = ours[-1]
        if current.body == body:
            return Outcome("nothing", "the comment already says this", current.id)
        forge.update(current, body)
        return Outcome("updated", "the stack's comment, edited in place"
                       + (f" ({quiet}, but it must not stay stale)" if quiet else ""),
                       current.id)
    if quiet:
        return Outcome("skipped", quiet)
    out = Outcome("created", f"behavior {behavior}")
    if behavior == "hide-and-new":
        for c in ours:
            forge.hide(c)
            out.hidden.append(c.id)
    elif behavior == "delete-and-new":
        for c in ours:
            forge.delete(c)
            out.deleted.append(c.id)
    out.id = forge.create(body).id
    return out


# ---- HTTP -----------------------------------------------------------------------------------
class _Http:
    """JSON over HTTPS with the one retry policy (429 and 5xx retried); errors as CloudError
    with the status, the token never in a message."""

    def __init__(self, forge: str, base: str, headers: dict[str, str],
                 opener: Optional[Callable] = None, backoff: Optional[Backoff] = None):
        self.forge, self.base = forge, base.rstrip("/")
        self.headers = {"Accept": "application/json", "User-Agent": "gpulease", **headers}
        self.open = opener or urllib.request.urlopen
        self.backoff = backoff or Backoff()

    def call(self, method: str, path: str, body: Any = None) -> tuple[Any, dict]:
        url = path if path.startswith("http") else self.base + path
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self.headers)
        if data is not None:
            headers["Content-Type"] = "application/json"

        def once():
            req = urllib.request.Request(url, data=data, method=method, headers=headers)
            with self.open(req, timeout=TIMEOUT_S) as resp:
                raw = resp.read()
                return (json.loads(raw) if raw else None), dict(resp.headers)

        def retryable(exc: BaseException) -> bool:
            return isinstance(exc, urllib.error.HTTPError) and (exc.code == 429 or
                                                                 exc.code >= 500) \
                or isinstance(exc, (urllib.error.URLError, TimeoutError)) and \
                not isinstance(exc, urllib.error.HTTPError)

        try:
            return self.backoff.call(once, retryable=retryable)
        except urllib.error.HTTPError as exc:
            detail = ""
            try:
                detail = json.loads(exc.read() or b"{}").get("message", "")
            except (ValueError, AttributeError):
                pass
            raise CloudError(self.forge, f"{method} {urllib.parse.urlsplit(url).path}",
                             f"HTTP {exc.code} {detail}".strip(), status=exc.code) from None
        except (urllib.error.URLError, TimeoutError) as exc:
            raise CloudError(self.forge, f"{method} {urllib.parse.urlsplit(url).path}",
                             f"no answer ({getattr(exc, 'reason', exc)})") from None


_LINK_NEXT = re.compile(r'<([^>]+)>;\s*rel="next"')


class GitHub(Forge):
    """Issue comments of a pull request (REST v3) and minimizeComment (GraphQL) to hide."""

    name, can_hide = "github", True

    def __init__(self, repo: str, number: int, token: str, *,
                 api: str = "https://api.github.com", opener=None, backoff=None):
        self.repo, self.number = repo, number
        self.http = _Http("github", api, {"Authorization": f"Bearer {token}",
                                          "X-GitHub-Api-Version": "2022-11-28"},
                          opener, backoff)

    def list(self) -> list[Comment]:
        out: list[Comment] = []
        url: Optional[str] = (f"/repos/{self.repo}/issues/{self.number}/comments"
                              f"?per_page={PER_PAGE}")
        for _ in range(MAX_PAGES):
            if url is None:
                break
            page, headers = self.http.call("GET", url)
            out += [Comment(str(c["id"]), c.get("body") or "", c.get("node_id", ""))
                    for c in page or []]
            m = _LINK_NEXT.search(headers.get("Link", "") or headers.get("link", ""))
            url = m.group(1) if m else None
        return out

    def create(self, body: str) -> Comment:
        c, _ = self.http.call("POST", f"/repos/{self.repo}/issues/{self.number}/comments",
                              {"body": body})
        return Comment(str(c["id"]), c.get("body", ""), c.get("node_id", ""))

    def update(self, comment: Comment, body: str) -> Comment:
        c, _ = self.http.call("PATCH", f"/repos/{self.repo}/issues/comments/{comment.id}",
                              {"body": body})
        return Comment(str(c["id"]), c.get("body", ""), c.get("node_id", ""))

    def delete(self, comment: Comment) -> None:
        self.http.call("DELETE", f"/repos/{self.repo}/issues/comments/{comment.id}")

    def hide(self, comment: Comment) -> None:
        query = ("mutation($id: ID!) { minimizeComment(input: {subjectId: $id, classifier: "
                 "OUTDATED}) { minimizedComment { isMinimized } } }")
        doc, _ = self.http.call("POST", "/graphql", {"query": query,
                                                     "variables": {"id": comment.node_id}})
        if not isinstance(doc, dict) or doc.get("errors"):
            raise CloudError("github", "minimizeComment",
                             "; ".join(e.get("message", "?") for e in (doc or {}).get("errors", []))
                             or "no answer")


class GitLab(Forge):
    """Notes of a merge request (REST v4)."""

    name, can_hide = "gitlab", False

    def __init__(self, project: str, iid: int, token: str, *,
                 api: str = "https://gitlab.com/api/v4", opener=None, backoff=None):
        self.project = urllib.parse.quote(str(project), safe="")
        self.iid = iid
        self.http = _Http("gitlab", api, {"PRIVATE-TOKEN": token}, opener, backoff)

    def _notes(self) -> str:
        return f"/projects/{self.project}/merge_requests/{self.iid}/notes"

    def list(self) -> list[Comment]:
        out: list[Comment] = []
        page: Optional[str] = "1"
        for _ in range(MAX_PAGES):
            if not page:
                break
            notes, headers = self.http.call(
                "GET", f"{self._notes()}?per_page={PER_PAGE}&page={page}&sort=asc"
                       "&order_by=created_at")
            out += [Comment(str(n["id"]), n.get("body") or "") for n in notes or []
                    if not n.get("system")]
            page = headers.get("X-Next-Page") or headers.get("x-next-page")
        return out

    def create(self, body: str) -> Comment:
        n, _ = self.http.call("POST", self._notes(), {"body": body})
        return Comment(str(n["id"]), n.get("body", ""))

    def update(self, comment: Comment, body: str) -> Comment:
        n, _ = self.http.call("PUT", f"{self._notes()}/{comment.id}", {"body": body})
        return Comment(str(n["id"]), n.get("body", ""))

    def delete(self, comment: Comment) -> None:
        self.http.call("DELETE", f"{self._notes()}/{comment.id}")
