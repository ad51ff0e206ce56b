"""Cloud credentials: one check and one "what to set" per cloud, for every command that calls one.

`gpulease plan`, `explain` and `render` never need credentials. `catalog refresh`, `catalog quotes
--source live`, `reap` and `recommend` call AWS and/or GCP: each checks, before its first call,
that the SDK's own credential chain finds something (``preflight``), and stops with exit 2 and the
variables to set when it does not (nothing is called, nothing written). The CLI's last resort
(``gpulease.cli.main``) also turns a credentials error the SDKs raise later (botocore
``NoCredentialsError`` / ``PartialCredentialsError``, google-auth ``DefaultCredentialsError``)
into the same message, exit 2.

The checks are the SDKs' own: ``boto3.session.Session().get_credentials()`` walks botocore's chain
(environment, ``AWS_PROFILE`` / shared files, SSO, container and instance metadata) and answers
None when nothing is found; ``google.auth.default()`` raises ``DefaultCredentialsError`` when no
Application Default Credentials exist. Emulators count as credentials: ``AWS_ENDPOINT_URL`` still
needs (any) keys, as botocore signs every request; ``GPULEASE_GCP_ENDPOINT`` needs none.
"""
from __future__ import annotations

import os
from typing import Iterable, Optional

from gpulease.errors import CredentialsError

#: What to set, per cloud (the one text every command prints).
FIX = {
    "aws": "set AWS_PROFILE to a profile in ~/.aws/config (`aws configure` or `aws sso login` "
           "writes one), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN "
           "for temporary keys)",
    "gcp": "run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS "
           "to a service-account key file",
}
#: Names used in messages.
CLOUD_NAMES = {"aws": "AWS", "gcp": "Google Cloud"}
#: The emulator variable that makes GCP clients anonymous (tests, local fakes).
GCP_ENDPOINT_ENV = "GPULEASE_GCP_ENDPOINT"


def missing(cloud: str) -> Optional[str]:
    """Why ``cloud``'s SDK finds no credentials on this machine, or None when it finds some."""
    if cloud == "aws":
        try:
            import boto3

            found = boto3.session.Session().get_credentials()
        except Exception as exc:  # noqa: BLE001 - a broken profile: botocore's own words
            return f"the AWS configuration cannot be read ({type(exc).__name__}: {exc})"
        return None if found is not None else "no AWS credentials found"
    if cloud == "gcp":
        if os.environ.get(GCP_ENDPOINT_ENV):
            return None
        try:
            import google.auth
            from google.auth.exceptions import DefaultCredentialsError

            google.auth.default()
        except DefaultCredentialsError as exc:
            return _gcp_reason(exc)
        except Exception as exc:  # noqa: BLE001 - e.g. a malformed key file
            return f"Google Cloud credentials cannot be loaded ({_first_line(exc)})"
        return None
    raise ValueError(f"unknown cloud {cloud!r}")


def message(cloud: str, reason: str, *, command: str, needs: str = "") -> str:
    """'gpulease reap: no AWS credentials found (reap reads ...); set AWS_PROFILE ...'."""
    why = f" ({needs})" if needs else ""
    return f"gpulease {command}: {reason}{why}; {FIX[cloud]}"


def preflight(clouds: Iterable[str], *, command: str, needs: Optional[dict] = None,
              only_flag: str = "") -> None:
    """Exit 2 (CredentialsError) naming what to set for every cloud in ``clouds`` that has no
    credentials. ``needs``: per cloud, what the command reads there (shown in the message);
    ``only_flag`` (e.g. "--cloud"): when another cloud of ``clouds`` has credentials, say that
    ``only_flag CLOUD`` runs the command on that one alone."""
    reasons = {c: missing(c) for c in dict.fromkeys(clouds)}
    lines = [message(c, r, command=command, needs=(needs or {}).get(c, ""))
             for c, r in reasons.items() if r]
    if lines:
        fine = [c for c, r in reasons.items() if not r]
        if only_flag and fine:
            lines.append(f"or pass {only_flag} {fine[0]} to run on {CLOUD_NAMES[fine[0]]} only")
        raise CredentialsError("\n".join(lines))


def problems(clouds: Iterable[str], *, command: str, needs: Optional[dict] = None) -> list[str]:
    """One message per cloud in ``clouds`` without credentials (empty: all have some)."""
    out = []
    for cloud in dict.fromkeys(clouds):
        reason = missing(cloud)
        if reason:
            out.append(message(cloud, reason, command=command, needs=(needs or {}).get(cloud, "")))
    return out


def from_exception(exc: BaseException, *, command: str) -> Optional[CredentialsError]:
    """The CredentialsError for an SDK "no credentials" exception (anywhere in ``exc``'s cause /
    context chain), or None when ``exc`` is something else."""
    seen = set()
    cur: Optional[BaseException] = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        cloud = _cloud_of(cur)
        if cloud:
            reason = "no AWS credentials found" if cloud == "aws" else _gcp_reason(cur)
            return CredentialsError(message(cloud, reason, command=command))
        cur = cur.__cause__ or cur.__context__
    return None


def _cloud_of(exc: BaseException) -> Optional[str]:
    try:
        from botocore.exceptions import NoCredentialsError, PartialCredentialsError

        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            return "aws"
    except ImportError:  # pragma: no cover - boto3 is a runtime dependency
        pass
    try:
        from google.auth.exceptions import DefaultCredentialsError

        if isinstance(exc, DefaultCredentialsError):
            return "gcp"
    except ImportError:  # pragma: no cover - google-auth comes with google-cloud-compute
        pass
    return None


def _gcp_reason(exc: BaseException) -> str:
    """google-auth's own words only when they add something: a GOOGLE_APPLICATION_CREDENTIALS
    file that is missing or malformed. Its "were not found ... see <url>" says less than FIX."""
    if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return f"no usable Google Cloud credentials ({_first_line(exc)})"
    return "no Google Cloud credentials found"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = ["FIX", "CLOUD_NAMES", "missing", "message", "problems", "preflight", "from_exception"]
