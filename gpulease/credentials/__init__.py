"""Cloud credentials: one check and one "what to set" per cloud, for every command that calls one.

`gpulease plan`, `explain` and `render` never need credentials. `catalog refresh`, `catalog quotes
--source live`, `reap` and `recommend` call AWS and/or GCP: each checks, before its first call,
that the SDK's own credential chain finds something (``preflight``), and stops with exit 2 and the
variables to set when it does not (nothing is called, nothing written). The CLI's last resort
(``gpulease.cli.main``) also turns a credentials error the SDKs raise later (botocore
``NoCredentialsError`` / ``PartialCredentialsError``, google-auth ``DefaultCredentialsError``)
into the same message, exit 2.

The checks are the SDKs' own, one module per cloud (``gpulease.credentials.<cloud>``, named by
the cloud's ``credentials_module``): ``boto3.session.Session().get_credentials()`` walks botocore's chain
(environment, ``AWS_PROFILE`` / shared files, SSO, container and instance metadata) and answers
None when nothing is found; ``google.auth.default()`` raises ``DefaultCredentialsError`` when no
Application Default Credentials exist. Emulators count as credentials: ``AWS_ENDPOINT_URL`` still
needs (any) keys, as botocore signs every request; ``GPULEASE_GCP_ENDPOINT`` needs none.
"""
from __future__ import annotations

import importlib
from typing import Iterable, Optional

from gpulease.clouds import registry
from gpulease.errors import CredentialsError

#: What to set, per cloud (the one text every command prints): ``Cloud.credentials_hint``.
FIX = {c.name: c.credentials_hint for c in registry.CLOUDS}
#: Names used in messages.
CLOUD_NAMES = {c.name: c.title for c in registry.CLOUDS}


def missing(cloud: str) -> Optional[str]:
    """Why ``cloud``'s SDK finds no credentials on this machine, or None when it finds some."""
    if not registry.is_cloud(cloud):
        raise ValueError(f"unknown cloud {cloud!r}")
    return _check(registry.get(cloud)).missing()


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
        for cloud in registry.CLOUDS:
            reason = _check(cloud).reason(cur)
            if reason:
                return CredentialsError(message(cloud.name, reason, command=command))
        cur = cur.__cause__ or cur.__context__
    return None


def _check(cloud):
    """The cloud's credentials check (``Cloud.credentials_module``: gpulease.credentials.<cloud>)."""
    return importlib.import_module(cloud.credentials_module)


__all__ = ["FIX", "CLOUD_NAMES", "missing", "message", "problems", "preflight", "from_exception"]
