"""The moment the program and the policy judge time-dependent things at (quotes, windows).

`pulumi up` runs at the real now. `gpulease plan --now TIME` runs the very same program under
the planner's mocks as of TIME (``gpulease.planner.mocks.run_program`` sets it for the run), so
the decision (``gpulease.policy.decide(now=...)``: which quotes are fresh, whether a window is
still ahead) and the offline lookups answer for the same moment.
"""
from __future__ import annotations

import datetime as dt
from typing import Optional

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
