"""The one registry of clouds: which clouds gpulease knows, in which order, looked up by name.

A new cloud is one row here plus the files its object names (``Cloud.module_paths``; the list
is in docs/architecture.md "Adding a cloud", checked by tests/test_cloud_registry.py).
"""
from __future__ import annotations

import difflib

from gpulease.clouds.aws.cloud import AWS
from gpulease.clouds.base import Cloud
from gpulease.clouds.gcp.cloud import GCP

#: every cloud, in the order lists and messages show them.
CLOUDS: tuple[Cloud, ...] = (AWS, GCP)
_BY_NAME: dict[str, Cloud] = {c.name: c for c in CLOUDS}
_BY_PROVIDER: dict[str, Cloud] = {c.provider: c for c in CLOUDS}
#: cloud names, in CLOUDS order.
NAMES: tuple[str, ...] = tuple(_BY_NAME)
#: the order the program deploys clouds in. GCP first: AWS clusters staging a GCS dataset grant
#: a reader on the GCS bucket, which must exist first; GCP clusters reading S3 only name the
#: bucket (no AWS-side grant on it).
DEPLOY_ORDER: tuple[str, ...] = (GCP.name, AWS.name)


def get(name: str) -> Cloud:
    """The cloud called ``name``; KeyError saying which names exist (and the closest one)."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        pass
    close = difflib.get_close_matches(str(name), NAMES, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise KeyError(f"unknown cloud {name!r} (known: {', '.join(NAMES)}){hint}")


def is_cloud(name: object) -> bool:
    return name in _BY_NAME


def by_provider(package: str) -> Cloud | None:
    """The cloud whose Pulumi provider is ``package`` (the head of a type token), or None."""
    return _BY_PROVIDER.get(package)


def sdk_packages() -> dict[str, str]:
    """Pulumi provider package -> its Python SDK module (``aws`` -> ``pulumi_aws``)."""
    return {c.provider: c.sdk_package for c in CLOUDS}


__all__ = ["CLOUDS", "NAMES", "DEPLOY_ORDER", "get", "is_cloud", "by_provider", "sdk_packages"]
