"""AWS as the commands reach it: the clients `reap`, `recommend`, `catalog refresh` and `catalog
quotes` create there (from their flags and the environment), and what each reads (``NEEDS``).

Shared command code asks ``gpulease.cli.common.cloud_cli(name)`` for this module; it never
compares cloud names. SDK clients are made inside the functions (``--help`` imports no SDK).
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
from typing import Any, Callable, Optional

from gpulease.errors import Finding

#: what each command reads on AWS; its "no credentials" message says it (docs/reaper.md,
#: docs/catalog.md list the full permissions).
NEEDS = {
    "reap": "reap reads Auto Scaling groups, CloudWatch metrics and capacity reservations",
    "recommend": "recommend reads the clusters' GPU metrics from CloudWatch",
    "catalog refresh": "refresh reads the AWS Price List and EC2 instance types",
    "catalog quotes": "quotes read Capacity Block offerings and Spot placement scores",
}


# ---- reap ----------------------------------------------------------------------------------
def reap_arg_findings(args: argparse.Namespace) -> list[Finding]:
    """What `reap --cloud aws` lacks to run (nothing: a region has a default)."""
    return []


def reap_by_default(args: argparse.Namespace) -> bool:
    """`reap` without --cloud reads AWS (in the default region when none is given)."""
    return True


def _regions(args: argparse.Namespace) -> list[str]:
    if args.region:
        return list(dict.fromkeys(args.region))
    env = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return [env or "us-east-1"]


def reap_adaptors(args: argparse.Namespace) -> tuple[list, list[Finding]]:
    """One reaper adaptor per --region (else $AWS_REGION, $AWS_DEFAULT_REGION, us-east-1), and
    a finding per region whose clients cannot be created."""
    from gpulease.reaper.aws import AwsReaper

    out: list = []
    bad: list[Finding] = []
    for region in _regions(args):
        try:
            out.append(AwsReaper.for_region(region))
        except Exception as exc:  # noqa: BLE001 - botocore raises ValueError and its own
            bad.append(Finding("--region", f"cannot create AWS clients for {region!r}: "
                               f"{exc}; check --region, AWS_REGION and AWS_ENDPOINT_URL"))
    return out, bad


# ---- recommend -----------------------------------------------------------------------------
def recommend_adaptor(where: str) -> Any:
    """The reaper adaptor reading a cluster's metrics in region ``where``."""
    from gpulease.reaper.aws import AwsReaper

    return AwsReaper.for_region(where)


# ---- catalog refresh -----------------------------------------------------------------------
def refresh_clients(args: argparse.Namespace) -> Any:
    """The refresh's AWS clients (boto3's own credential chain; AWS_ENDPOINT_URL honoured)."""
    from gpulease.catalog.fetchers.clients import make_aws_clients

    return make_aws_clients()


# ---- catalog quotes ------------------------------------------------------------------------
def collect_quotes(clients: Any, offerings: list, req: Any, now: dt.datetime,
                   progress: Callable[[str], None], out: Any, *,
                   advisor: Optional[Callable[[], Any]] = None) -> None:
    """Capacity Block offerings, Spot placement scores and the Spot Instance Advisor's bands
    for ``offerings`` (``clients``: the test's, else real ones are made)."""
    from gpulease.catalog.fetchers.clients import make_aws_clients
    from gpulease.quotes import collect

    collect.collect_aws(clients or make_aws_clients(), offerings, req, now, progress, out,
                        advisor=advisor)


__all__ = ["NEEDS", "reap_arg_findings", "reap_by_default", "reap_adaptors",
           "recommend_adaptor", "refresh_clients", "collect_quotes"]
