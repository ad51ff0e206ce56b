"""Monthly staging copy of a dataset into an AWS cluster's work bucket (DataSync), and the AWS side
of a copy into GCP (the IAM role Storage Transfer Service federates into).

A dataset homed on GCS is read through Cloud Storage's S3-compatible XML API with the HMAC key of
a dedicated, read-only service account that this module also declares (through its own GCP
provider), so no key is ever handed to gpulease.

The policy charges ``egress_usd`` for moving a dataset once a month when a cluster runs away
from the dataset's home (README "Cost model"); nodes then read ``<work bucket>/stage/``
(``gpulease.naming.dataset_uri``). This module declares that copy. Its resources cost 0 in the
ledger: the data-gravity cost is already carried by the work bucket (``egress_anchor``).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_aws as aws
import pulumi_gcp as gcp

from gpulease.naming import StagingRoute, staging_route
from gpulease.clouds.aws import builders
from gpulease.model import ClusterDecision, StackSpec

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
#: Web identity of Storage Transfer Service's Google service account ("Configure access to a
#: source: Amazon S3", federated identity: Principal accounts.google.com, condition on
#: accounts.google.com:sub = the service account's subjectId).
GOOGLE_FEDERATION = "accounts.google.com"
#: Roles of the GCS reader behind DataSync's HMAC key. DataSync lists the source before copying
#: (ListObjectsV2 over the XML API needs storage.objects.list, and the bucket lookup
#: storage.buckets.get, both in the legacy bucket reader role, which cannot carry a condition);
#: objects are read under the viewer role conditioned to data/ (Cloud Storage docs, "IAM roles
#: for Cloud Storage", "IAM Conditions: resource.name.startsWith").
GCS_BUCKET_READER_ROLE = "roles/storage.legacyBucketReader"
GCS_OBJECT_READER_ROLE = "roles/storage.objectViewer"
#: Service account ids: 6-30 chars, ``[a-z]([-a-z0-9]*[a-z0-9])`` (IAM "Creating service
#: accounts"). "stg-" keeps them apart from the node accounts ("gpu-", gcp/builders.py).
READER_ID_PREFIX = "stg"


@dataclass(frozen=True)
class GcsHmac:
    """An HMAC key of a Google service account that may read the source bucket's data/."""

    access_id: pulumi.Input[str]
    #: the secret; wrapped with ``pulumi.Output.secret`` before it reaches a resource.
    secret: pulumi.Input[str]


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


def sts_read_policy(*, partition: str, bucket: str, prefix: str) -> dict:
    arn = f"arn:{partition}:s3:::{bucket}"
    # s3:ListBucket stays unconditioned on prefix: STS lists with the job's path as prefix,
    # but also probes the bucket; objects outside data/ stay unreadable.
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": "LocateAndList", "Effect": "Allow",
         "Action": ["s3:GetBucketLocation", "s3:ListBucket"], "Resource": arn},
        {"Sid": "ReadDataset", "Effect": "Allow", "Action": "s3:GetObject",
         "Resource": f"{arn}/{prefix}*"},
    ]}


def sts_trust_policy(subject_id: str) -> dict:
    """Only Storage Transfer Service's Google service account (by its subjectId) may assume."""
    return {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Federated": GOOGLE_FEDERATION},
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": {f"{GOOGLE_FEDERATION}:sub": subject_id}}}]}


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


def reader_account_id(stack: StackSpec, cluster: str) -> str:
    """Id of the service account DataSync reads a GCS dataset as: unique per env+cluster.

    The shape of ``gpulease.clouds.gcp.builders.service_account_id`` (which hard-codes the node
    accounts' "gpu-" prefix): ``stg-<env>-<cluster>``, and when that exceeds 30 characters the
    first 24 plus a 5-hex digest of the whole, so two long names never share an id.
    """
    base = f"{READER_ID_PREFIX}-{stack.environment}-{cluster}"
    if len(base) > 30:
        digest = hashlib.sha1(base.encode()).hexdigest()[:5]
        base = f"{base[:24].rstrip('-')}-{digest}"
    return base


# ---- resources -------------------------------------------------------------------------------
def storage_transfer_role(name: str, *, route: StagingRoute, subject_id: pulumi.Input[str],
                          provider: aws.Provider, parent: pulumi.Resource) -> pulumi.Output[str]:
    """IAM role + read policy that Storage Transfer Service assumes to read an S3 source.

    Declared by the GCP cluster that stages the data (its child), with an AWS provider of the
    source bucket's region; returns the role ARN for the transfer job's ``role_arn``.
    """
    opts = pulumi.ResourceOptions(parent=parent, provider=provider)
    role = aws.iam.Role(
        f"{name}-sts-role",
        assume_role_policy=pulumi.Output.from_input(subject_id).apply(
            lambda s: json.dumps(sts_trust_policy(s))),
        description=f"Storage Transfer Service reads {route.source_uri} for {name}",
        max_session_duration=3600, opts=opts)
    policy = aws.iam.RolePolicy(
        f"{name}-sts-read", role=role.id,
        policy=json.dumps(sts_read_policy(partition=builders.partition_of(route.source_region),
                                          bucket=route.source_bucket,
                                          prefix=route.source_prefix)), opts=opts)
    # The job must not run before the policy is attached.
    return pulumi.Output.all(role.arn, policy.id).apply(lambda v: v[0])


def gcs_reader_key(name: str, *, stack: StackSpec, route: StagingRoute, project: str,
                   parent: pulumi.Resource, bucket_dependencies: tuple = ()) -> GcsHmac:
    """Service account ``<name>-stage-reader`` that may list the dataset bucket and read its
    data/, its bucket IAM, and an HMAC key for it; returns the key (its secret a Pulumi secret).

    Declared by the AWS cluster that stages the data (its children, cost 0) through a GCP
    provider ``<name>-gcp`` of the stack's project: the mirror of the AWS role a GCP cluster
    declares for Storage Transfer Service (``storage_transfer_role``). ``bucket_dependencies``:
    the dataset bucket's resources, so its IAM is set after the bucket exists.
    """
    # gcp.layout imports here, not at module level: the GCP package imports this module
    # (storage_transfer_role), so a top-level import would be circular.
    from gpulease.clouds.gcp import builders

    provider = gcp.Provider(f"{name}-gcp", project=project,
                            opts=pulumi.ResourceOptions(parent=parent))
    opts = pulumi.ResourceOptions(parent=parent, provider=provider)
    account = gcp.serviceaccount.Account(
        f"{name}-stage-reader", account_id=reader_account_id(stack, name), project=project,
        display_name=f"gpulease {stack.environment} {name} dataset reader (DataSync)",
        description=f"DataSync reads {route.source_uri} into {route.dest_uri} with this "
                    "account's HMAC key"[:256], opts=opts)
    member = account.email.apply(lambda e: f"serviceAccount:{e}")
    iam_opts = pulumi.ResourceOptions.merge(
        opts, pulumi.ResourceOptions(depends_on=list(bucket_dependencies)))
    grants = [
        gcp.storage.BucketIAMMember(
            f"{name}-stage-reader-bucket", bucket=route.source_bucket,
            role=GCS_BUCKET_READER_ROLE, member=member, opts=iam_opts),
        gcp.storage.BucketIAMMember(
            f"{name}-stage-reader-objects", bucket=route.source_bucket,
            role=GCS_OBJECT_READER_ROLE, member=member,
            condition=builders.prefix_condition(route.source_bucket, route.source_prefix,
                                              "datasync-reads-dataset-only"), opts=iam_opts),
    ]
    # The key is created after the grants, so the first DataSync run never meets a key that
    # cannot read yet. Its secret is a secret output (additional_secret_outputs in the SDK).
    key = gcp.storage.HmacKey(
        f"{name}-stage-reader-key", service_account_email=account.email, project=project,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=grants)))
    return GcsHmac(access_id=key.access_id, secret=key.secret)


def declare_staging(name: str, *, stack: StackSpec, decision: ClusterDecision,
                    work_bucket_arn: pulumi.Input[str], provider: aws.Provider,
                    parent: pulumi.Resource,
                    gcs_hmac: Optional[GcsHmac] = None,
                    gcs_bucket_dependencies: tuple = ()) -> Optional[aws.datasync.Task]:
    """DataSync task copying the dataset into ``<work bucket>/stage/`` monthly, or None.

    A GCS source is read with ``gcs_hmac`` when given (an existing key), else with the key of
    a reader service account declared here (``gcs_reader_key``) when the stack configures
    ``gpulease:clouds.gcp.project``; without either, nothing is declared and a warning says so.
    """
    route = staging_route(stack, decision)
    if route is None:
        return None
    if route.source_cloud == "gcp" and gcs_hmac is None:
        gcp_cloud = stack.clouds.get("gcp")
        project = getattr(gcp_cloud, "project", None)
        if not project:
            pulumi.log.warn(
                f"{decision.name}: dataset {route.dataset} lives in {route.source_uri} (GCS); "
                f"the monthly copy into {route.dest_uri} needs an HMAC key of a Google service "
                "account that can read it, and gpulease:clouds.gcp.project is not configured, "
                "so gpulease cannot create one: no DataSync task is declared. Configure "
                "gpulease:clouds.gcp.project, or copy the data yourself (README, \"Staged "
                "datasets\")", resource=parent)
            return None
        gcs_hmac = gcs_reader_key(name, stack=stack, route=route, project=project,
                                  parent=parent, bucket_dependencies=gcs_bucket_dependencies)
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
    if route.source_cloud == "aws":
        source: pulumi.CustomResource = aws.datasync.S3Location(
            f"{name}-stage-source",
            s3_bucket_arn=f"arn:{builders.partition_of(route.source_region)}:s3:::"
                          f"{route.source_bucket}",
            subdirectory=f"/{route.source_prefix}",
            s3_config={"bucket_access_role_arn": role.arn}, opts=after_iam)
    else:
        source = aws.datasync.LocationObjectStorage(
            f"{name}-stage-source", server_hostname=GCS_S3_ENDPOINT, server_protocol="HTTPS",
            server_port=443, bucket_name=route.source_bucket,
            subdirectory=f"/{route.source_prefix}", access_key=gcs_hmac.access_id,
            secret_key=pulumi.Output.secret(gcs_hmac.secret), opts=after_iam)
    return aws.datasync.Task(
        f"{name}-stage", name=f"{name}-stage", source_location_arn=source.arn,
        destination_location_arn=dest.arn, task_mode=DATASYNC_TASK_MODE,
        schedule={"schedule_expression": DATASYNC_SCHEDULE}, options=dict(DATASYNC_OPTIONS),
        opts=opts)
