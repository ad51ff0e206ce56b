"""AWS credentials: botocore's own chain, and its "no credentials" errors."""
from __future__ import annotations

from typing import Optional


def missing() -> Optional[str]:
    """Why botocore's chain (environment, ``AWS_PROFILE`` / shared files, SSO, container and
    instance metadata) finds no credentials, or None when it finds some."""
    try:
        import boto3

        found = boto3.session.Session().get_credentials()
    except Exception as exc:  # noqa: BLE001 - a broken profile: botocore's own words
        return f"the AWS configuration cannot be read ({type(exc).__name__}: {exc})"
    return None if found is not None else "no AWS credentials found"


def reason(exc: BaseException) -> Optional[str]:
    """The reason to print when ``exc`` is botocore's "no credentials" error, else None."""
    try:
        from botocore.exceptions import NoCredentialsError, PartialCredentialsError
    except ImportError:  # pragma: no cover - boto3 is a runtime dependency
        return None
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return "no AWS credentials found"
    return None
