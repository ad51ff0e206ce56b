"""Deterministic names of things outside Pulumi's autonaming: buckets and their prefixes.

Buckets get explicit, predictable names so that node bootstrap files, IAM policies and the
offline plan can refer to them as plain strings. Data layout inside a storage bucket:
``data/`` holds the dataset, ``checkpoints/<cluster>/`` each cluster's checkpoints.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from infra.model import ClusterDecision, StackSpec

DATA_PREFIX = "data/"
CHECKPOINT_PREFIX = "checkpoints/"
STAGE_PREFIX = "stage/"


def bucket_name(stack: StackSpec, storage_name: str) -> str:
    """Bucket of a `gpulease:storage` entry (S3 and GCS: 3-63 chars, lowercase)."""
    return f"{stack.name_prefix}-{stack.environment}-{storage_name}"[:63]


def work_bucket_name(stack: StackSpec, cluster_name: str) -> str:
    """Per-cluster bucket in the cluster's own region: staged dataset copy and checkpoints.

    Exists only when :func:`needs_work_bucket` says so.
    """
    return f"{stack.name_prefix}-{stack.environment}-{cluster_name}-work"[:63]


def needs_work_bucket(stack: StackSpec, decision: ClusterDecision) -> bool:
    """A cluster away from its dataset's home (or with no dataset) gets a work bucket."""
    ds = stack.storage_by_name(decision.spec.dataset) if decision.spec.dataset else None
    return ds is None or (ds.home_cloud, ds.home_region) != (decision.cloud, decision.region)


def _uri(cloud: str, bucket: str, prefix: str) -> str:
    return f"{'s3' if cloud == 'aws' else 'gs'}://{bucket}/{prefix}"


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


def checkpoint_uri(stack: StackSpec, decision: ClusterDecision) -> str:
    return _uri(decision.cloud, checkpoint_bucket(stack, decision),
                f"{CHECKPOINT_PREFIX}{decision.name}/")


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
