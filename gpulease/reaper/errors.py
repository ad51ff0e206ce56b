"""The reaper's own error types: what each adaptor turns SDK errors and malformed answers into.

Plain Python (no SDK imports), shipped in the scheduled functions' archives. Everything the
engine sees from an adaptor is a :class:`gpulease.errors.CloudError`; these subclasses say *what*
went wrong so the engine can report it per cluster and retry what is worth retrying.
"""
from __future__ import annotations

from typing import Optional

from gpulease.errors import CloudError


class TransientError(CloudError):
    """Throttling, 5xx, a gateway's HTML page, a dropped connection: worth retrying."""

    def __init__(self, cloud: str, operation: str, message: str, retryable: bool = True, *,
                 status: Optional[int] = None):
        super().__init__(cloud, operation, message, retryable=retryable, status=status)


class MalformedResponse(TransientError):
    """An answer that is not what the API documents (HTML, non-JSON, truncated, fields missing).

    A proxy or captive portal answering in the cloud's place is the usual cause, so it is
    retried like any transient error; it is never read as an empty result.
    """


class GroupGone(CloudError):
    """The compute group (ASG / MIG) no longer exists: deleted by someone else mid-run."""
