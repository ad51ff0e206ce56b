"""Append-only JSONL audit log of every reaper decision and action.

A reaper that cannot record what it does must not do it: when a record cannot be written
(disk full, the file gone read-only, the directory unwritable), :class:`AuditLog` keeps the
reason in ``failed`` instead of raising, and the adaptors wrapped by :func:`guarded` refuse
every call that changes a cloud (mark, unmark, claim, scale, destroy) from then on. Reads go
on, so the run still reports what it found; the CLI prints its JSON and exits 1.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import IO, Any, Callable, Optional

from gpulease.clock import format_utc
from gpulease.errors import CloudError

DEFAULT_PATH = "~/.gpulease/reap-audit.jsonl"

#: adaptor methods that change something in a cloud: refused once the audit log failed.
#: (``release`` is not among them: it only removes this run's own claim, undoing a change.)
MUTATING = frozenset({"mark", "unmark", "claim", "scale_to_zero", "scale_to_baseline"})


class AuditLog:
    """One JSON object per line; the file is only ever opened for appending.

    ``path="-"`` writes the lines to stdout (the scheduled Lambda: its stdout is CloudWatch Logs).
    A write that fails sets ``failed`` (a one-line reason) and turns later writes into no-ops;
    nothing here raises on I/O errors, so a full disk never hides the run's report.
    """

    def __init__(self, path: Optional[str] = DEFAULT_PATH, *, run_id: Optional[str] = None):
        self.run_id = run_id or f"{int(time.time())}-{os.getpid()}"
        self.path = path
        self.failed: Optional[str] = None
        self.written = 0
        self._fh: Optional[IO[str]] = None
        if path == "-":
            self._fh = sys.stdout
        elif path:
            p = Path(os.path.expanduser(path))
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(p, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
            except OSError as exc:
                self._fail("cannot open", exc)

    def _fail(self, what: str, exc: OSError) -> None:
        if self.failed is None:
            reason = exc.strerror or type(exc).__name__
            self.failed = f"{what} {self.path}: {reason}"

    def write(self, event: str, **fields: Any) -> bool:
        """Append one record; False when it could not be written (see ``failed``)."""
        if self._fh is None:
            return self.path is None   # no log asked for: nothing to lose
        record = {"ts": format_utc(time.time()), "run": self.run_id,
                  "event": event, **fields}
        try:
            self._fh.write(json.dumps(record, sort_keys=False, default=str) + "\n")
            self._fh.flush()
        except OSError as exc:
            self._fail(f"cannot write the {event!r} record to", exc)
            self._abandon()
            return False
        self.written += 1
        return True

    def _abandon(self) -> None:
        """Drop a handle whose buffer cannot be flushed (closing it would raise again)."""
        fh, self._fh = self._fh, None
        if fh is not None and fh is not sys.stdout:
            try:
                fh.close()
            except OSError:
                pass

    def close(self) -> None:
        if self._fh is not None and self._fh is not sys.stdout:
            try:
                self._fh.close()
            except OSError as exc:
                self._fail("cannot write to", exc)
        self._fh = None

    def __enter__(self) -> "AuditLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Guarded:
    """An adaptor whose cloud-changing calls are refused once ``audit`` has failed."""

    def __init__(self, adaptor: Any, audit: AuditLog):
        self._adaptor, self._audit = adaptor, audit

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._adaptor, name)
        if name not in MUTATING or not callable(value):
            return value

        def call(*args: Any, **kw: Any) -> Any:
            if self._audit.failed:
                raise CloudError(self._adaptor.cloud, name, refusal(self._audit))
            return value(*args, **kw)
        return call


def refusal(audit: AuditLog) -> str:
    return (f"not done: the audit log failed ({audit.failed}); a reaper that cannot record "
            "what it does does not act")


def guarded(adaptor: Any, audit: AuditLog) -> Any:
    """``adaptor`` with mark / unmark / claim / scale refused once ``audit`` cannot be written."""
    return _Guarded(adaptor, audit)


def guarded_call(fn: Callable[..., Any], audit: AuditLog, *, cloud: str,
                 operation: str) -> Callable[..., Any]:
    """A callable (the stack destroyer) refused, like the adaptors' actions, once the audit
    log failed."""
    def call(*args: Any, **kw: Any) -> Any:
        if audit.failed:
            raise CloudError(cloud, operation, refusal(audit))
        return fn(*args, **kw)
    return call
