"""Append-only JSONL audit log of every reaper decision and action."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import IO, Any, Optional

DEFAULT_PATH = "~/.gpulease/reap-audit.jsonl"


class AuditLog:
    """One JSON object per line; the file is only ever opened for appending.

    ``path="-"`` writes the lines to stdout (the scheduled Lambda: its stdout is CloudWatch Logs).
    """

    def __init__(self, path: Optional[str] = DEFAULT_PATH, *, run_id: Optional[str] = None):
        self.run_id = run_id or f"{int(time.time())}-{os.getpid()}"
        self.path = path
        self._fh: Optional[IO[str]] = None
        if path == "-":
            self._fh = sys.stdout
        elif path:
            p = Path(os.path.expanduser(path))
            p.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(p, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, event: str, **fields: Any) -> None:
        if self._fh is None:
            return
        record = {"ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "run": self.run_id,
                  "event": event, **fields}
        self._fh.write(json.dumps(record, sort_keys=False, default=str) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None and self._fh is not sys.stdout:
            self._fh.close()
        self._fh = None

    def __enter__(self) -> "AuditLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
