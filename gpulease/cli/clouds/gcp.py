"""Google Cloud as the commands reach it: the clients `reap`, `recommend`, `catalog refresh` and
`catalog quotes` create there (from their flags and the environment), and what each reads
(``NEEDS``).

Shared command code asks ``gpulease.cli.common.cloud_cli(name)`` for this module; it never
compares cloud names. SDK clients are made inside the functions (``--help`` imports no SDK).
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
from typing import Any, Callable, Optional

from gpulease.errors import Finding

#: what each command reads on GCP; its "no credentials" message says it (docs/reaper.md,
#: docs/catalog.md list the full permissions).
NEEDS = {
    "reap": "reap reads instance groups, Cloud Monitoring metrics and reservations",
    "recommend": "recommend reads the clusters' GPU metrics from Cloud Monitoring",
    "catalog refresh": "refresh reads the Cloud Billing Catalog and Compute machine types",
    "catalog quotes": "quotes read Compute Engine calendar-mode and Spot capacity advice",
}


# ---- reap ----------------------------------------------------------------------------------
def _project(args: argparse.Namespace) -> Optional[str]:
    return args.project or os.environ.get("GOOGLE_CLOUD_PROJECT")


def reap_arg_findings(args: argparse.Namespace) -> list[Finding]:
    """What `reap --cloud gcp` lacks to run: a project."""
    if not _project(args):
        return [Finding("--project", "GCP needs a project: pass --project P or set "
                        "GOOGLE_CLOUD_PROJECT")]
    return []


def reap_by_default(args: argparse.Namespace) -> bool:
    """`reap` without --cloud reads GCP when a project is known (--project or
    $GOOGLE_CLOUD_PROJECT)."""
    return bool(_project(args))


def reap_adaptors(args: argparse.Namespace) -> tuple[list, list[Finding]]:
    """The reaper adaptor of the project (every zone), or a finding when its clients cannot be
    created (unless the credentials are missing: the credentials check says that)."""
    from gpulease import credentials
    from gpulease.reaper.gcp import ENDPOINT_ENV, GcpReaper

    project = _project(args)
    try:
        return [GcpReaper.for_project(project)], []
    except Exception as exc:  # noqa: BLE001 - google.auth raises its own hierarchy
        if credentials.missing("gcp"):   # said by the credentials check, with what to set
            return [], []
        return [], [Finding("--project", f"cannot create GCP clients for {project!r}: "
                            f"{type(exc).__name__}: {exc}; {credentials.FIX['gcp']}, "
                            f"or point {ENDPOINT_ENV} at an emulator")]


# ---- recommend -----------------------------------------------------------------------------
def recommend_adaptor(where: str) -> Any:
    """The reaper adaptor reading a cluster's metrics in project ``where``."""
    from gpulease.reaper.gcp import GcpReaper

    if not where:
        raise ValueError("the stack sets no gpulease:clouds.gcp.project")
    return GcpReaper.for_project(where)


# ---- catalog refresh -----------------------------------------------------------------------
def refresh_clients(args: argparse.Namespace) -> Any:
    """The refresh's GCP clients: the Billing Catalog, and Compute for specs with
    --gcp-project (Application Default Credentials; GPULEASE_GCP_ENDPOINT honoured)."""
    from gpulease.catalog.fetchers.clients import make_gcp_clients

    return make_gcp_clients(project=args.gcp_project)


# ---- catalog quotes ------------------------------------------------------------------------
def collect_quotes(clients: Any, offerings: list, req: Any, now: dt.datetime,
                   progress: Callable[[str], None], out: Any, *,
                   advisor: Optional[Callable[[], Any]] = None) -> None:
    """Flex-start and calendar-mode prices, calendar-mode and Spot capacity advice for
    ``offerings`` (``clients``: the test's, else real ones for --gcp-project or
    $GOOGLE_CLOUD_PROJECT are made). ``advisor`` is AWS's Spot Instance Advisor: unused."""
    from gpulease.quotes import collect
    from gpulease.quotes.gcp import make_clients

    project = req.gcp_project or os.environ.get("GOOGLE_CLOUD_PROJECT")
    collect.collect_gcp(clients or make_clients(project), offerings, req, now, progress, out)


__all__ = ["NEEDS", "reap_arg_findings", "reap_by_default", "reap_adaptors",
           "recommend_adaptor", "refresh_clients", "collect_quotes"]
