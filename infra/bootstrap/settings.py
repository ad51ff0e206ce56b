"""`gpulease:bootstrap` — node bootstrap options."""
from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field


class BootstrapSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    autostop_minutes: Optional[int] = Field(
        None, ge=0, description="Node-side autostop after this many idle minutes (second line "
                                "of defence behind the reaper). Absent = 2 x idle_minutes, "
                                "except in prod where it is off; 0 = off.")
    checkpoint_signal: str = Field(
        "SIGUSR1", description="Signal sent to the training process on a spot notice.")
