"""Retries with exponential backoff and jitter for throttled or transient cloud calls.

Pure Python (no SDK imports): each adaptor says which of its exceptions are retryable and
translates the final failure into :class:`infra.errors.CloudError`.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

T = TypeVar("T")


@dataclass
class Backoff:
    """Full-jitter exponential backoff (the AWS Architecture Blog's recommended variant)."""

    attempts: int = 5
    base_s: float = 0.2
    cap_s: float = 8.0
    sleep: Callable[[float], None] = time.sleep
    #: retries performed so far (the bench and tests read it).
    retries: int = 0

    def delay(self, attempt: int) -> float:
        return random.uniform(0, min(self.cap_s, self.base_s * (2 ** attempt)))

    def call(self, fn: Callable[[], T], *, retryable: Callable[[BaseException], bool]) -> T:
        for attempt in range(self.attempts):
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - filtered by `retryable`
                if attempt == self.attempts - 1 or not retryable(exc):
                    raise
                self.retries += 1
                self.sleep(self.delay(attempt))
        raise AssertionError("unreachable")
