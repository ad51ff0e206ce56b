"""Deterministic names of things outside Pulumi's autonaming: buckets and their prefixes.

Buckets get explicit, predictable names so that node bootstrap files, IAM policies and the
offline plan can refer to them as plain strings. Data layout inside a storage bucket:
``data/`` holds the dataset, ``checkpoints/<cluster>/`` each cluster's checkpoints.

A bucket name longer than the clouds allow is shortened without losing uniqueness (never cut):
the first characters, ``-`` and 8 hex characters of the SHA-256 of the full name
(:func:`fit_name`); names two buckets would share, or that S3 / GCS reject, are located errors
(:func:`check_bucket_names`, exit 2).
"""
from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass
from typing import Optional

from gpulease import deadline
from gpulease.clouds import registry
from gpulease.errors import ConfigError, Finding
from gpulease.model import ClusterDecision, EnvironmentDecision, StackSpec

DATA_PREFIX = "data/"
CHECKPOINT_PREFIX = "checkpoints/"
STAGE_PREFIX = "stage/"


#: S3 ("Bucket naming rules") and GCS ("Bucket names", names without dots): 3-63 characters.
BUCKET_MAX = 63
#: hex characters of the digest that keeps a shortened name unique.
DIGEST_LEN = 8
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")


def fit_name(full: str, limit: int = BUCKET_MAX) -> str:
    """``full`` when it fits, else its first characters + ``-`` + 8 hex of its SHA-256.

    Two different full names never share a shortened name unless their digests collide
    (2^-32); :func:`check_bucket_names` still compares the final names.
    """
    if len(full) <= limit:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:DIGEST_LEN]
    return f"{full[:limit - DIGEST_LEN - 1].rstrip('-')}-{digest}"


def bucket_name(stack: StackSpec, storage_name: str) -> str:
    """Bucket of a `gpulease:storage` entry (S3 and GCS: 3-63 chars, lowercase)."""
    return fit_name(f"{stack.name_prefix}-{stack.environment}-{storage_name}")


def work_bucket_name(stack: StackSpec, cluster_name: str) -> str:
    """Per-cluster bucket in the cluster's own region: staged dataset copy and checkpoints.

    Exists only when :func:`needs_work_bucket` says so.
    """
    return fit_name(f"{stack.name_prefix}-{stack.environment}-{cluster_name}-work")


def bucket_rule_broken(name: str) -> Optional[str]:
    """Why S3 or GCS would reject a bucket name (names without dots), or None.

    S3 User Guide "General purpose bucket naming rules" (3-63 chars of a-z 0-9 . -, letter or
    digit at both ends, not an IP address, no ``xn--`` / ``sthree-`` prefix, no ``-s3alias`` /
    ``--ol-s3`` suffix); Cloud Storage "Bucket names" (no ``goog`` prefix, no ``google``).
    """
    if not _BUCKET_RE.fullmatch(name):
        return ("3-63 lowercase letters, digits and '-', starting and ending with a letter or "
                "digit")
    try:
        ipaddress.ip_address(name)
        return "must not look like an IP address"
    except ValueError:
        pass
    for prefix in ("xn--", "sthree-", "goog"):
        if name.startswith(prefix):
            return f"must not start with {prefix!r}"
    for suffix in ("-s3alias", "--ol-s3"):
        if name.endswith(suffix):
            return f"must not end with {suffix!r}"
    if "google" in name or "g00gle" in name:
        return "must not contain 'google'"
    return None


def planned_buckets(env: EnvironmentDecision) -> list[tuple[str, str, str]]:
    """Every bucket the decision creates: (bucket name, config path, what it is)."""
    stack = env.stack
    out = []
    for i, s in enumerate(stack.storage):
        if any(d.name == s.name for d in env.storage):
            out.append((bucket_name(stack, s.name), f"gpulease:storage[{i}].name",
                        f'storage "{s.name}"'))
    for c in env.clusters:
        if needs_work_bucket(stack, c):
            out.append((work_bucket_name(stack, c.name), f"{c.spec.config_path}.name",
                        f'the work bucket of cluster "{c.name}"'))
    return out


def check_bucket_names(env: EnvironmentDecision) -> None:
    """Raise one ConfigError for every bucket name S3 / GCS reject or two buckets share."""
    stack = env.stack
    findings: list[Finding] = []
    seen: dict[str, tuple[str, str]] = {}
    env_key = "gpulease:environment" if stack.environment != stack.stack else \
        f"the stack name ({stack.stack!r}; or set gpulease:environment)"
    for name, path, what in planned_buckets(env):
        why = bucket_rule_broken(name)
        if why:
            findings.append(Finding(path, f'{what} gets bucket name "{name}" '
                                    f"({stack.name_prefix}-<environment>-...), which S3 and "
                                    f"GCS reject: {why}; change gpulease:name_prefix, {env_key} "
                                    "or this name", source=stack.source))
        if name in seen:
            other_path, other = seen[name]
            findings.append(Finding(path, f'{what} and {other} ({other_path}) would both use '
                                    f'bucket "{name}"; rename one of them', source=stack.source))
        else:
            seen[name] = (path, what)
    if findings:
        raise ConfigError(findings, headline="bucket names S3 / GCS would refuse:")


def needs_work_bucket(stack: StackSpec, decision: ClusterDecision) -> bool:
    """A cluster away from its dataset's home (or with no dataset) gets a work bucket."""
    ds = stack.storage_by_name(decision.spec.dataset) if decision.spec.dataset else None
    return ds is None or (ds.home_cloud, ds.home_region) != (decision.cloud, decision.region)


def _uri(cloud: str, bucket: str, prefix: str) -> str:
    return f"{registry.get(cloud).url_scheme}://{bucket}/{prefix}"


def dataset_uri(stack: StackSpec, decision: ClusterDecision) -> Optional[str]:
    """Where the cluster's nodes read the dataset from (its home, or the staged copy)."""
    if not decision.spec.dataset:
        return None
    if needs_work_bucket(stack, decision):
        return _uri(decision.cloud, work_bucket_name(stack, decision.name), STAGE_PREFIX)
    return _uri(decision.cloud, bucket_name(stack, decision.spec.dataset), DATA_PREFIX)


def checkpoint_bucket(stack: StackSpec, decision: ClusterDecision) -> str:
    if needs_work_bucket(stack, decision):
        return work_bucket_name(stack, decision.name)
    return bucket_name(stack, decision.spec.dataset)  # type: ignore[arg-type]


def checkpoint_prefix(cluster: str) -> str:
    """A cluster's checkpoint prefix in its checkpoint bucket: ``checkpoints/<cluster>/``."""
    return f"{CHECKPOINT_PREFIX}{cluster}/"


def progress_object(cluster: str) -> str:
    """The object a cluster's nodes publish their progress to (``gpulease-progress``, beside
    the checkpoints) in its checkpoint bucket; the GCP reaper's deadline step derives it from
    the cluster label (a label cannot hold the URI)."""
    return f"{checkpoint_prefix(cluster)}{deadline.PROGRESS_OBJECT}"


def checkpoint_uri(stack: StackSpec, decision: ClusterDecision) -> str:
    return _uri(decision.cloud, checkpoint_bucket(stack, decision),
                checkpoint_prefix(decision.name))


@dataclass(frozen=True)
class StagingRoute:
    """Where a cluster's staged dataset copy comes from and goes to (cloud-neutral)."""

    dataset: str
    source_cloud: str
    source_region: str
    source_bucket: str
    source_prefix: str
    dest_cloud: str
    dest_region: str
    dest_bucket: str
    dest_prefix: str

    @property
    def source_uri(self) -> str:
        return _uri(self.source_cloud, self.source_bucket, self.source_prefix)

    @property
    def dest_uri(self) -> str:
        return _uri(self.dest_cloud, self.dest_bucket, self.dest_prefix)


def staging_route(stack: StackSpec, decision: ClusterDecision) -> Optional[StagingRoute]:
    """The monthly copy the policy charges for, or None (at home, or no dataset).

    Exactly when ``dataset_uri`` points the nodes at ``stage/``.
    """
    if not decision.spec.dataset or not needs_work_bucket(stack, decision):
        return None
    ds = stack.storage_by_name(decision.spec.dataset)
    if ds is None:
        return None
    return StagingRoute(
        dataset=ds.name, source_cloud=ds.home_cloud, source_region=ds.home_region,
        source_bucket=bucket_name(stack, ds.name), source_prefix=DATA_PREFIX,
        dest_cloud=decision.cloud, dest_region=decision.region,
        dest_bucket=work_bucket_name(stack, decision.name),
        dest_prefix=STAGE_PREFIX)
