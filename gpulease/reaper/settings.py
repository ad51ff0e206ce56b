"""`gpulease:reaper` — optional per-stack reaper deployment settings."""
from __future__ import annotations

import re
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpulease.reaper import defaults

#: EventBridge schedule expressions (docs: "Schedule expressions for rules").
SCHEDULE_PATTERN = re.compile(r"^(rate\((1 (minute|hour|day)|[1-9]\d* (minutes|hours|days))\)"
                              r"|cron\([^()]+\))$")


class ReaperSettings(BaseModel):
    # strict: true/false is not a number, 12.0 is not a count (gpulease/config.py's _Strict)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    schedule: Optional[str] = Field(
        None, description='Deploy the reaper on a schedule, e.g. "rate(15 minutes)". '
                          "Absent = not deployed (run `gpulease reap` yourself).")
    threshold_pct: float = Field(defaults.THRESHOLD_PCT, gt=0, le=100,
                                 description="GPU utilization below which a node is idle.")
    grace_minutes: int = Field(defaults.GRACE_MINUTES, ge=0, le=defaults.MAX_GRACE_MINUTES,
                               description="Wait after marking before acting (at most 7 days).")
    max_actions: int = Field(defaults.MAX_ACTIONS, ge=1,
                             description="Most clusters acted on per run, shared with reapers "
                                         "running at the same time.")
    apply: bool = Field(False, description="The scheduled reaper acts (true) or only reports.")

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not SCHEDULE_PATTERN.match(v.strip()):
            raise ValueError(f'{v!r} is not an EventBridge schedule: use "rate(15 minutes)", '
                             '"rate(1 hour)" or "cron(0/15 * * * ? *)"')
        return v.strip() if v else v
