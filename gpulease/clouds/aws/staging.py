"""Monthly staging copy of a dataset into an AWS cluster's work bucket (DataSync).

A dataset homed on GCS is read through Cloud Storage's S3-compatible XML API with the HMAC key of
a dedicated, read-only service account declared through its own GCP provider
(``gpulease.clouds.staging.gcs_reader_key``), so no key is ever handed to gpulease.

The policy charges ``egress_usd`` for moving a dataset once a month when a cluster runs away
from the dataset's home (README "Cost model"); nodes then read ``<work bucket>/stage/``
(``gpulease.naming.dataset_uri``). This module declares that copy. Its resources cost 0 in the
ledger: the data-gravity cost is already carried by the work bucket (``egress_anchor``).
"""
from __future__ import annotations

import json
from typing import Optional

import pulumi
import pulumi_aws as aws

from gpulease.naming import StagingRoute
from gpulease.clouds.aws import builders
from gpulease.clouds.staging import GcsHmac, gcs_reader_key
from gpulease.model import ClusterDecision

#: DataSync schedule: 03:00 UTC on the 1st of every month (EventBridge cron syntax, which
#: DataSync task schedules use: DataSync User Guide, "Scheduling your task").
DATASYNC_SCHEDULE = "cron(0 3 1 * ? *)"
#: Cloud Storage's XML API, which speaks the S3 protocol with HMAC keys (Cloud Storage docs,
#: "Simple migration from Amazon S3"); DataSync reads it as an object-storage location.
GCS_S3_ENDPOINT = "storage.googleapis.com"
#: Enhanced mode: agentless transfers between S3 locations and from other clouds into S3
#: (DataSync CreateTask ``TaskMode``; agent_arns optional since 2025-05-29). Enhanced mode
#: supports only ONLY_FILES_TRANSFERRED / NONE verification, not POINT_IN_TIME_CONSISTENT.
DATASYNC_TASK_MODE = "ENHANCED"
DATASYNC_OPTIONS = {
    "verify_mode": "ONLY_FILES_TRANSFERRED",
    # The staged copy mirrors data/: objects removed at home disappear from stage/ (the work
    # bucket is versioned, so they linger as noncurrent versions until the lifecycle expires them).
    "preserve_deleted_files": "REMOVE",
    "transfer_mode": "CHANGED",
    "overwrite_mode": "ALWAYS",
}


# ---- pure policy builders -------------------------------------------------------------------
def s3_read_statements(*, partition: str, bucket: str, prefix: str, sid: str) -> list[dict]:
    """List the prefix, read its objects, locate the bucket (every S3 copy tool needs the three:
    STS "Configure access to a source: Amazon S3", DataSync "Providing DataSync access to S3")."""
    arn = f"arn:{partition}:s3:::{bucket}"
    return [
        {"Sid": f"{sid}Bucket", "Effect": "Allow",
         "Action": ["s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads"],
         "Resource": arn},
        {"Sid": f"{sid}Objects", "Effect": "Allow",
         "Action": ["s3:GetObject", "s3:GetObjectTagging", "s3:GetObjectVersion",
                    "s3:GetObjectVersionTagging"],
         "Resource": f"{arn}/{prefix}*"},
    ]


def datasync_trust_policy(account_id: str) -> dict:
    """DataSync in this account only (confused-deputy guard: DataSync User Guide, "Cross-service
    confused deputy prevention", aws:SourceAccount)."""
    return {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": "datasync.amazonaws.com"},
        "Action": "sts:AssumeRole",
        "Condition": {"StringEquals": {"aws:SourceAccount": account_id}}}]}


def datasync_policy(*, partition: str, route: StagingRoute) -> dict:
    """Read the source's data/ (when it is S3), write the work bucket's stage/."""
    stmts: list[dict] = []
    if route.source_cloud == "aws":
        stmts += s3_read_statements(partition=partition, bucket=route.source_bucket,
                                    prefix=route.source_prefix, sid="ReadSource")
    dest = f"arn:{partition}:s3:::{route.dest_bucket}"
    stmts += [
        {"Sid": "StageBucket", "Effect": "Allow",
         "Action": ["s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads"],
         "Resource": dest},
        {"Sid": "StageObjects", "Effect": "Allow",
         "Action": ["s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetObject",
                    "s3:GetObjectTagging", "s3:ListMultipartUploadParts", "s3:PutObject",
                    "s3:PutObjectTagging"],
         "Resource": f"{dest}/{route.dest_prefix}*"},
    ]
    return {"Version": "2012-10-17", "Statement": stmts}


# ---- resources -------------------------------------------------------------------------------
def _source_location(name: str, route: StagingRoute, *, role: aws.iam.Role,
                     gcs_hmac: Optional[GcsHmac],
                     opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """DataSync's source: the S3 dataset read with the task's role, or GCS read with the key."""
    if route.source_cloud == "aws":
        return aws.datasync.S3Location(
            f"{name}-stage-source",
            s3_bucket_arn=f"arn:{builders.partition_of(route.source_region)}:s3:::"
                          f"{route.source_bucket}",
            subdirectory=f"/{route.source_prefix}",
            s3_config={"bucket_access_role_arn": role.arn}, opts=opts)
    return aws.datasync.LocationObjectStorage(
        f"{name}-stage-source", server_hostname=GCS_S3_ENDPOINT, server_protocol="HTTPS",
        server_port=443, bucket_name=route.source_bucket,
        subdirectory=f"/{route.source_prefix}", access_key=gcs_hmac.access_id,
        secret_key=pulumi.Output.secret(gcs_hmac.secret), opts=opts)


def declare_staging(name: str, *, route: Optional[StagingRoute], environment: str,
                    gcp_project: Optional[str], decision: ClusterDecision,
                    work_bucket_arn: pulumi.Input[str], provider: aws.Provider,
                    parent: pulumi.Resource,
                    gcs_hmac: Optional[GcsHmac] = None,
                    gcs_bucket_dependencies: tuple = ()) -> Optional[aws.datasync.Task]:
    """DataSync task copying the dataset into ``<work bucket>/stage/`` monthly, or None.

    A GCS source is read with ``gcs_hmac`` when given (an existing key), else with the key of
    a reader service account declared here (``gcs_reader_key``) in ``gcp_project`` (the
    stack's ``gpulease:clouds.gcp.project``); without either, nothing is declared and a warning
    says so. ``route``: the copy (``gpulease.naming.staging_route``), None = none.
    """
    if route is None:
        return None
    if route.source_cloud == "gcp" and gcs_hmac is None:
        if not gcp_project:
            pulumi.log.warn(
                f"{decision.name}: dataset {route.dataset} lives in {route.source_uri} (GCS); "
                f"the monthly copy into {route.dest_uri} needs an HMAC key of a Google service "
                "account that can read it, and gpulease:clouds.gcp.project is not configured, "
                "so gpulease cannot create one: no DataSync task is declared. Configure "
                "gpulease:clouds.gcp.project, or copy the data yourself (README, \"Staged "
                "datasets\")", resource=parent)
            return None
        gcs_hmac = gcs_reader_key(name, environment=environment, route=route,
                                  project=gcp_project, parent=parent,
                                  bucket_dependencies=gcs_bucket_dependencies)
    partition = builders.partition_of(decision.region)
    opts = pulumi.ResourceOptions(parent=parent, provider=provider)
    account = aws.get_caller_identity_output(
        opts=pulumi.InvokeOutputOptions(parent=parent, provider=provider)).account_id
    role = aws.iam.Role(
        f"{name}-datasync-role",
        assume_role_policy=account.apply(lambda a: json.dumps(datasync_trust_policy(a))),
        description=f"DataSync stages {route.source_uri} into {route.dest_uri}", opts=opts)
    policy = aws.iam.RolePolicy(
        f"{name}-datasync-policy", role=role.id,
        policy=json.dumps(datasync_policy(partition=partition, route=route)), opts=opts)
    after_iam = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[policy]))
    # DataSync subdirectories are absolute, with the prefix's trailing slash.
    dest = aws.datasync.S3Location(
        f"{name}-stage-dest", s3_bucket_arn=work_bucket_arn,
        subdirectory=f"/{route.dest_prefix}", s3_config={"bucket_access_role_arn": role.arn},
        opts=after_iam)
    source = _source_location(name, route, role=role, gcs_hmac=gcs_hmac, opts=after_iam)
    return aws.datasync.Task(
        f"{name}-stage", name=f"{name}-stage", source_location_arn=source.arn,
        destination_location_arn=dest.arn, task_mode=DATASYNC_TASK_MODE,
        schedule={"schedule_expression": DATASYNC_SCHEDULE}, options=dict(DATASYNC_OPTIONS),
        opts=opts)
