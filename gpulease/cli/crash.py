"""The CLI's last resort: an exception nobody expected becomes one line and a report file.

A traceback on the terminal tells a user nothing they can act on and hides the one line that
matters. :func:`report` writes the whole story (version, command line, Python, platform,
traceback) to a file and returns a one-line reason naming it; the CLI prints that line and
exits 1. The file goes to ``$GPULEASE_CRASH_DIR`` when set, else the system's temporary
directory.
"""
from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
import traceback
from typing import Optional, Sequence

from gpulease.clock import format_utc

#: environment variable naming the directory crash reports are written to.
CRASH_DIR_ENV = "GPULEASE_CRASH_DIR"


def _summary(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > 160:
        text = text[:157] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def write(exc: BaseException, argv: Sequence[str]) -> tuple[Optional[str], Optional[str]]:
    """(path of the report written, None) or (None, why it could not be written)."""
    from gpulease import __version__

    body = "".join([
        f"gpulease {__version__} crash report, {format_utc(time.time())}\n",
        f"command: gpulease {' '.join(argv)}\n",
        f"cwd: {os.getcwd()}\n",
        f"python: {sys.version.split()[0]} ({sys.executable})\n",
        f"platform: {platform.platform()}\n\n",
        *traceback.format_exception(type(exc), exc, exc.__traceback__),
    ])
    directory = os.environ.get(CRASH_DIR_ENV) or tempfile.gettempdir()
    try:
        os.makedirs(directory, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix="gpulease-crash-", suffix=".txt", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(body)
    except OSError as err:
        return None, f"{directory}: {err.strerror or err}"
    return path, None


def report(exc: BaseException, argv: Sequence[str]) -> str:
    """The one line the CLI prints for an unexpected exception (after writing the report)."""
    path, why_not = write(exc, argv)
    where = f"the full report is in {path}" if path else \
        f"no report could be written ({why_not}; set {CRASH_DIR_ENV} to a writable directory)"
    return (f"internal error ({_summary(exc)}): this is a bug in gpulease, not in your input; "
            f"{where} — please attach it to an issue")
