"""GCS buckets: the Storage component per `gpulease:storage` entry, and the shared bucket builder.

Data outlives stacks: every bucket is ``retain_on_delete`` (a `pulumi destroy` leaves it in the
project) and ``protect``-ed in prod; ``force_destroy`` stays False so even a manual delete
refuses a non-empty bucket.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_gcp as gcp

from gpulease import naming
from gpulease.clouds.gcp.builders import lifecycle_rules
from gpulease import tags
from gpulease.costing.context import CostContext
from gpulease.model import StackSpec, StorageDecision, StorageSpec

STORAGE_TYPE = "gpulease:gcp:Storage"


def bucket_options(protect: bool, parent: pulumi.Resource) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(parent=parent, retain_on_delete=True, protect=protect)


def make_bucket(resource_name: str, *, bucket_name: str, region: str, protect: bool,
                lifecycle: list[dict], parent: pulumi.Resource,
                purpose: str) -> gcp.storage.Bucket:
    """A private, versioned, regional bucket with the given lifecycle rules."""
    return gcp.storage.Bucket(
        resource_name,
        name=bucket_name,
        # Regional location next to the compute that reads it; GCS reports locations upper-case.
        location=region.upper(),
        storage_class="STANDARD",
        uniform_bucket_level_access=True,
        public_access_prevention="enforced",
        versioning={"enabled": True},
        lifecycle_rules=lifecycle,
        force_destroy=False,
        labels={tags.PURPOSE: tags.label_value(purpose)},
        opts=bucket_options(protect, parent))


@dataclass(frozen=True)
class StorageArgs:
    stack: StackSpec
    decision: StorageDecision


class Storage(pulumi.ComponentResource):
    """One dataset bucket (`data/` + `checkpoints/<cluster>/`) with tiered lifecycle."""

    bucket: gcp.storage.Bucket
    bucket_name: str

    def __init__(self, name: str, args: StorageArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(STORAGE_TYPE, name, None, opts)
        self.cost_context = CostContext(cluster=tags.SHARED, storage=args.decision)
        spec: StorageSpec = args.decision.spec
        self.bucket_name = naming.bucket_name(args.stack, spec.name)
        self.bucket = make_bucket(
            f"{name}-bucket", bucket_name=self.bucket_name, region=args.decision.region,
            protect=args.stack.is_prod, lifecycle=lifecycle_rules(args.decision.lifecycle),
            parent=self, purpose="dataset")
        self.register_outputs({"bucket": self.bucket.name, "url": self.bucket.url})
