"""Cross-cloud dataset staging: what one cloud declares in the other so a dataset homed there can
be copied into a cluster's work bucket.

A GCP cluster staging from S3 declares the AWS IAM role Storage Transfer Service federates into
(``storage_transfer_role``); an AWS cluster staging from GCS declares a read-only Google service
account and its HMAC key, which DataSync reads the bucket with (``gcs_reader_key``). Each cloud's
own staging module (``gpulease.clouds.<cloud>.staging``) declares its copy and calls the one it
needs from here, so neither cloud's components import the other's. This module reads only each
cloud's plain-Python ``cloud`` module (ARN partitions, GCS IAM conditions).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_gcp as gcp

from gpulease.clouds.aws.cloud import partition_of
from gpulease.clouds.gcp.cloud import prefix_condition
from gpulease.naming import StagingRoute

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


def reader_account_id(environment: str, cluster: str) -> str:
    """Id of the service account DataSync reads a GCS dataset as: unique per env+cluster.

    The shape of ``gpulease.clouds.gcp.builders.service_account_id`` (which hard-codes the node
    accounts' "gpu-" prefix): ``stg-<env>-<cluster>``, and when that exceeds 30 characters the
    first 24 plus a 5-hex digest of the whole, so two long names never share an id.
    """
    base = f"{READER_ID_PREFIX}-{environment}-{cluster}"
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
        policy=json.dumps(sts_read_policy(partition=partition_of(route.source_region),
                                          bucket=route.source_bucket,
                                          prefix=route.source_prefix)), opts=opts)
    # The job must not run before the policy is attached.
    return pulumi.Output.all(role.arn, policy.id).apply(lambda v: v[0])


def gcs_reader_key(name: str, *, environment: str, route: StagingRoute, project: str,
                   parent: pulumi.Resource, bucket_dependencies: tuple = ()) -> GcsHmac:
    """Service account ``<name>-stage-reader`` that may list the dataset bucket and read its
    data/, its bucket IAM, and an HMAC key for it; returns the key (its secret a Pulumi secret).

    Declared by the AWS cluster that stages the data (its children, cost 0) through a GCP
    provider ``<name>-gcp`` of the stack's project: the mirror of the AWS role a GCP cluster
    declares for Storage Transfer Service (``storage_transfer_role``). ``bucket_dependencies``:
    the dataset bucket's resources, so its IAM is set after the bucket exists.
    """
    provider = gcp.Provider(f"{name}-gcp", project=project,
                            opts=pulumi.ResourceOptions(parent=parent))
    opts = pulumi.ResourceOptions(parent=parent, provider=provider)
    account = gcp.serviceaccount.Account(
        f"{name}-stage-reader", account_id=reader_account_id(environment, name), project=project,
        display_name=f"gpulease {environment} {name} dataset reader (DataSync)",
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
            condition=prefix_condition(route.source_bucket, route.source_prefix,
                                       "datasync-reads-dataset-only"), opts=iam_opts),
    ]
    # The key is created after the grants, so the first DataSync run never meets a key that
    # cannot read yet. Its secret is a secret output (additional_secret_outputs in the SDK).
    key = gcp.storage.HmacKey(
        f"{name}-stage-reader-key", service_account_email=account.email, project=project,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=grants)))
    return GcsHmac(access_id=key.access_id, secret=key.secret)
