"""Monthly staging copy of a dataset into a GCP cluster's work bucket (Storage Transfer Service).

The policy charges ``egress_usd`` for moving the dataset once a month when the cluster runs
away from its home; nodes read ``<work bucket>/stage/``. The transfer job and its IAM are
children of the cluster and cost 0 in the ledger (the work bucket carries the egress cost).
"""
from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_aws as aws
import pulumi_gcp as gcp

from gpulease.clouds.staging import storage_transfer_role
from gpulease.naming import StagingRoute
from gpulease.clouds.gcp import builders
from gpulease.model import ClusterDecision

#: Storage Transfer Service has no calendar-month schedule: a repeat interval of 30 days
#: (STS ``Schedule.repeatInterval``, a duration in seconds, minimum 1 hour).
REPEAT_INTERVAL = f"{30 * 24 * 3600}s"
#: A fixed start date keeps the job input stable across `pulumi up` runs; a start date in the
#: past makes the first run happen on the day after creation (TransferJob ``schedule_start_date``).
SCHEDULE_START = {"year": 2026, "month": 1, "day": 1}
START_TIME_UTC = {"hours": 3, "minutes": 0, "seconds": 0, "nanos": 0}
#: Transfer options: copy what differs, and delete from stage/ what left data/ so the staged
#: copy mirrors the dataset (deleteObjectsUniqueInSink is scoped to the sink path).
TRANSFER_OPTIONS = {"overwrite_when": "DIFFERENT", "delete_objects_unique_in_sink": True}
#: Roles of the STS service agent ("Configure access to a source / sink: Cloud Storage"):
#: storage.buckets.get (+ objects.list) comes from the legacy bucket reader role, which cannot
#: carry a condition; object access is granted separately, conditioned on the prefix.
BUCKET_READER_ROLE = "roles/storage.legacyBucketReader"
SOURCE_OBJECT_ROLE = "roles/storage.objectViewer"
SINK_OBJECT_ROLE = "roles/storage.objectUser"


def transfer_job_name(environment: str, cluster: str) -> str:
    """Explicit job name. Left unset, pulumi-gcp would auto-name it ``<logical>-<hex>``, which
    STS rejects: names must match ``transferJobs/^(?!OPI)[A-Za-z0-9-._~]*[A-Za-z0-9]$``, at most
    128 characters (TransferJob ``name``; "The TransferJob name must be in the pattern of
    transferJobs/[^/]+")."""
    return f"transferJobs/gpulease-{environment}-{cluster}-stage"


def transfer_schedule() -> dict:
    return {"schedule_start_date": dict(SCHEDULE_START), "start_time_of_day": dict(START_TIME_UTC),
            "repeat_interval": REPEAT_INTERVAL}


def _source(name: str, route: StagingRoute, *, agent, iam_opts: pulumi.ResourceOptions,
            parent: pulumi.Resource) -> tuple[dict, list]:
    """The transfer spec's source, and the grants that let Storage Transfer Service read it."""
    if route.source_cloud == "gcp":
        grants = [
            gcp.storage.BucketIAMMember(
                f"{name}-stage-sts-source-bucket", bucket=route.source_bucket,
                role=BUCKET_READER_ROLE, member=agent.member, opts=iam_opts),
            gcp.storage.BucketIAMMember(
                f"{name}-stage-sts-source-objects", bucket=route.source_bucket,
                role=SOURCE_OBJECT_ROLE, member=agent.member,
                condition=builders.prefix_condition(route.source_bucket, route.source_prefix,
                                                  "sts-reads-dataset-only"), opts=iam_opts),
        ]
        return {"gcs_data_source": {"bucket_name": route.source_bucket,
                                    "path": route.source_prefix}}, grants
    # Federated identity, no long-lived AWS keys: STS assumes the role with
    # AssumeRoleWithWebIdentity as its Google service account ("Configure access to a
    # source: Amazon S3", federated identity). IAM is global; the provider's region is the
    # source bucket's.
    provider = aws.Provider(f"{name}-aws-{route.source_region}", region=route.source_region,
                            opts=pulumi.ResourceOptions(parent=parent))
    role_arn = storage_transfer_role(name, route=route, subject_id=agent.subject_id,
                                     provider=provider, parent=parent)
    return {"aws_s3_data_source": {"bucket_name": route.source_bucket,
                                   "path": route.source_prefix, "role_arn": role_arn}}, []


def declare_staging(name: str, *, route: Optional[StagingRoute], environment: str,
                    aws_configured: bool, decision: ClusterDecision, project: str,
                    work_bucket: Optional[gcp.storage.Bucket], parent: pulumi.Resource,
                    bucket_dependencies: tuple = ()) -> Optional[gcp.storage.TransferJob]:
    """STS job copying the dataset into ``<work bucket>/stage/`` every 30 days, or None.

    ``route``: the copy (``gpulease.naming.staging_route``), None = none; ``aws_configured``:
    the stack configures AWS (an S3 source needs the role declared there)."""
    if route is None or work_bucket is None:
        return None
    if route.source_cloud not in ("gcp", "aws"):
        return None
    if route.source_cloud == "aws" and not aws_configured:
        pulumi.log.warn(f"{decision.name}: dataset {route.dataset} lives in {route.source_uri} "
                        "but gpulease:clouds.aws is not configured, so gpulease cannot declare "
                        "the IAM role Storage Transfer Service needs: no transfer job declared",
                        resource=parent)
        return None
    agent = gcp.storage.get_transfer_project_service_account_output(
        project=project, opts=pulumi.InvokeOutputOptions(parent=parent))
    iam_opts = pulumi.ResourceOptions(parent=parent,
                                      depends_on=[work_bucket, *bucket_dependencies])
    grants = [
        gcp.storage.BucketIAMMember(
            f"{name}-stage-sts-sink-bucket", bucket=route.dest_bucket, role=BUCKET_READER_ROLE,
            member=agent.member, opts=iam_opts),
        gcp.storage.BucketIAMMember(
            f"{name}-stage-sts-sink-objects", bucket=route.dest_bucket, role=SINK_OBJECT_ROLE,
            member=agent.member,
            condition=builders.prefix_condition(route.dest_bucket, route.dest_prefix,
                                              "sts-writes-stage-only"), opts=iam_opts),
    ]
    spec: dict = {
        "gcs_data_sink": {"bucket_name": route.dest_bucket, "path": route.dest_prefix},
        "transfer_options": dict(TRANSFER_OPTIONS),
    }
    source, source_grants = _source(name, route, agent=agent, iam_opts=iam_opts, parent=parent)
    spec.update(source)
    grants += source_grants
    return gcp.storage.TransferJob(
        f"{name}-stage", name=transfer_job_name(environment, decision.name), project=project,
        description=f"gpulease {environment}/{decision.name}: stage {route.source_uri} "
                    f"into {route.dest_uri}"[:1024],
        transfer_spec=spec, schedule=transfer_schedule(),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=grants))
