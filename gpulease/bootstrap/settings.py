"""`gpulease:bootstrap` — node bootstrap options."""
from __future__ import annotations

import signal
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpulease.model import MAX_IDLE_MINUTES

#: signals a training process can be asked to checkpoint with (catchable, not job control).
CHECKPOINT_SIGNALS = ("SIGUSR1", "SIGUSR2", "SIGTERM", "SIGINT", "SIGHUP")


class BootstrapSettings(BaseModel):
    # strict: true/false is not a number, 12.0 is not a count (gpulease/config.py's _Strict)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    autostop_minutes: Optional[int] = Field(
        None, ge=0, le=2 * MAX_IDLE_MINUTES,
        description="Node-side autostop after this many idle minutes (second line "
                    "of defence behind the reaper). Absent = 1.25 x the cluster's idle_minutes (rounded up), "
                    "except in prod where it is off; 0 = off.")
    checkpoint_signal: str = Field(
        "SIGUSR1", description="Signal sent to the training process on a spot notice "
                               f"(one of {', '.join(CHECKPOINT_SIGNALS)}).")

    @field_validator("checkpoint_signal")
    @classmethod
    def _signal(cls, v: str) -> str:
        name = v.strip().upper()
        if not name.startswith("SIG"):
            name = "SIG" + name
        if name not in CHECKPOINT_SIGNALS or not hasattr(signal, name):
            raise ValueError(f"{v!r} is not a checkpoint signal: use one of "
                             f"{', '.join(CHECKPOINT_SIGNALS)}")
        return name
