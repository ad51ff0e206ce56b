"""The one retry policy for cloud calls: exponential backoff with full jitter, one constant set.

Every caller that retries a throttled or transient cloud call uses :class:`Backoff`: the reaper's
AWS / GCP adaptors (and `recommend`, through them), the pricing-API fetchers of `catalog refresh`
and `catalog quotes` (``gpulease.catalog.fetchers.clients``), and the GCP reservation provider.
Pure Python (no SDK imports): each caller says which of its exceptions are retryable and
translates the final failure into its own error (:class:`gpulease.errors.CloudError`).
SDK-level retries stay off where gpulease retries (botocore ``total_max_attempts: 1``), so a call
is retried by one policy and counted once.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

T = TypeVar("T")


#: tries per call (the first one included)
ATTEMPTS = 5
#: the first retry waits up to this long; each later one up to twice the previous bound ...
BASE_S = 0.2
#: ... and never more than this
CAP_S = 8.0


@dataclass
class Backoff:
    """Full-jitter exponential backoff ("Exponential Backoff And Jitter", AWS Architecture Blog,
    2015: sleep = uniform(0, min(cap, base * 2**attempt)))."""

    attempts: int = ATTEMPTS
    base_s: float = BASE_S
    cap_s: float = CAP_S
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


def poll(check: Callable[[], T | None], *, timeout_s: float, first_s: float = 0.2,
         cap_s: float = 5.0, progress: Callable[[float], None] | None = None,
         sleep: Callable[[float], None] = time.sleep) -> T | None:
    """Wait for a long-running cloud job (an Athena query): call ``check`` until it returns
    something other than None, sleeping ``first_s`` doubling to ``cap_s`` between calls, at
    most ``timeout_s`` in all (then None). ``progress(waited_s)`` after each unfinished check.
    A wait, not a retry: ``check`` raises to stop it."""
    waited, pause = 0.0, first_s
    while True:
        got = check()
        if got is not None:
            return got
        if waited >= timeout_s:
            return None
        if progress is not None:
            progress(waited)
        sleep(pause)
        waited += pause
        pause = min(pause * 2, cap_s)
