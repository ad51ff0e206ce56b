"""A process that runs one command (or one Pulumi program) and exits: garbage collection and
exit-time work it can skip.

CPython's cyclic collector walks every tracked object of a generation it collects. A plan keeps
what it built (modules, the decision, the recorded resources) until the process ends, so walking
it again and again frees nothing: measured with ``bench/plan.py --gc`` and on ``gpulease plan
--stack prod``, the collection right after the mocked run (whose collector is paused) and the
ones that follow took more CPU than the program itself, and interpreter teardown another ~1 s.
So:

- :func:`collector_paused` pauses the collector while a block builds many long-lived objects
  (the decision, the program's resources; reference counting still frees acyclic garbage);
  the program under the real engine pauses it in a one-shot process only (``bench/plan.py
  --in-process --engine-gc``: 50 clusters 5.9 -> 3.7 s CPU, peak memory 249 -> 257 MB);
- in a one-shot process, :func:`settle` (also on leaving :func:`collector_paused`) moves every
  object alive now to the permanent generation (``gc.freeze``): later collections walk only
  what is allocated afterwards;
- :func:`exit` flushes stdout / stderr, runs the ``atexit`` handlers and ends the process with
  ``os._exit``, skipping module teardown and the final collections. It falls back to a normal
  exit while another non-daemon thread runs (interpreter shutdown would wait for it).

In-process callers (tests, a long-lived service importing gpulease) are not one-shot: nothing is
frozen there, so garbage from one plan never outlives it.
"""
from __future__ import annotations

import atexit
import contextlib
import gc
import os
import sys
import threading

_one_shot = False


def enable() -> None:
    """Mark this process as one-shot (the `gpulease` console entry, the Pulumi entry point)."""
    global _one_shot
    _one_shot = True


def is_one_shot() -> bool:
    return _one_shot


def settle() -> None:
    """In a one-shot process, move every object alive now out of the collector's reach."""
    if _one_shot:
        gc.freeze()


@contextlib.contextmanager
def collector_paused(*, only_one_shot: bool = False):
    """Pause the cyclic collector for the block; on leaving, settle (one-shot) and resume it if
    it ran before. ``only_one_shot``: pause only in a one-shot process (elsewhere a no-op)."""
    if only_one_shot and not _one_shot:
        yield
        return
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        settle()
        if was_enabled:
            gc.enable()


def exit(code: int) -> None:  # noqa: A001 - mirrors sys.exit
    """End a one-shot process with ``code`` without interpreter teardown (``sys.exit``
    elsewhere, or while another non-daemon thread is running)."""
    others = [t for t in threading.enumerate()
              if t is not threading.current_thread() and not t.daemon]
    if not _one_shot or others:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or a broken pipe: nothing more can be written
            pass
    atexit._run_exitfuncs()
    os._exit(code)
