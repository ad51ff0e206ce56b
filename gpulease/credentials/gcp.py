"""Google Cloud credentials: Application Default Credentials, and google-auth's errors."""
from __future__ import annotations

import os
from typing import Optional

#: The emulator variable that makes GCP clients anonymous (tests, local fakes).
ENDPOINT_ENV = "GPULEASE_GCP_ENDPOINT"


def missing() -> Optional[str]:
    """Why ``google.auth.default()`` finds no credentials, or None (an emulator needs none)."""
    if os.environ.get(ENDPOINT_ENV):
        return None
    try:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        google.auth.default()
    except DefaultCredentialsError as exc:
        return _reason(exc)
    except Exception as exc:  # noqa: BLE001 - e.g. a malformed key file
        return f"Google Cloud credentials cannot be loaded ({_first_line(exc)})"
    return None


def reason(exc: BaseException) -> Optional[str]:
    """The reason to print when ``exc`` is google-auth's "no credentials" error, else None."""
    try:
        from google.auth.exceptions import DefaultCredentialsError
    except ImportError:  # pragma: no cover - google-auth comes with google-cloud-compute
        return None
    return _reason(exc) if isinstance(exc, DefaultCredentialsError) else None


def _reason(exc: BaseException) -> str:
    """google-auth's own words only when they add something: a GOOGLE_APPLICATION_CREDENTIALS
    file that is missing or malformed. Its "were not found ... see <url>" says less than the
    hint (``Cloud.credentials_hint``)."""
    if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return f"no usable Google Cloud credentials ({_first_line(exc)})"
    return "no Google Cloud credentials found"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
