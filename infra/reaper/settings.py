"""`gpulease:reaper` — optional per-stack reaper deployment settings."""
from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field


class ReaperSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schedule: Optional[str] = Field(
        None, description='Deploy the reaper on a schedule, e.g. "rate(15 minutes)". '
                          "Absent = not deployed (run `gpulease reap` yourself).")
    threshold_pct: float = Field(5.0, gt=0, le=100,
                                 description="GPU utilization below which a node is idle.")
    grace_minutes: int = Field(30, ge=0, description="Wait after marking before acting.")
    max_actions: int = Field(10, ge=1, description="Most clusters acted on per run.")
    apply: bool = Field(False, description="The scheduled reaper acts (true) or only reports.")
