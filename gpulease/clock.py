"""The moment the program and the policy judge time-dependent things at, and how a time is written.

`pulumi up` runs at the real now. `gpulease plan --now TIME` runs the very same program under
the planner's mocks as of TIME (``gpulease.planner.mocks.run_program`` sets it for the run), so
the decision (``gpulease.policy.decide(now=...)``: which quotes are fresh, whether a window is
still ahead) and the offline lookups answer for the same moment.
"""
from __future__ import annotations

import datetime as dt
from typing import Optional, Union

_override: Optional[float] = None


def set_now(epoch: Optional[float]) -> None:
    """Judge time as of ``epoch`` seconds (None = the real now again)."""
    global _override
    _override = epoch


def now() -> dt.datetime:
    """The moment, aware UTC."""
    if _override is not None:
        return dt.datetime.fromtimestamp(_override, dt.timezone.utc)
    return dt.datetime.now(dt.timezone.utc)


def format_utc(t: Union[dt.datetime, float, None], *, minutes: bool = False) -> Optional[str]:
    """``2026-12-04T11:30:00Z`` (``2026-12-04T11:30Z`` with ``minutes``): the one way gpulease
    writes a UTC time. ``t``: a datetime (naive ones are taken as UTC) or epoch seconds (None
    stays None); fractions of the last unit are cut, not rounded."""
    if t is None:
        return None
    if not isinstance(t, dt.datetime):
        t = dt.datetime.fromtimestamp(t, dt.timezone.utc)
    elif t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ" if minutes
                                                  else "%Y-%m-%dT%H:%M:%SZ")
