"""Physical names: what each resource will be called in the cloud, their rules and their scopes.

A resource's physical name is its explicit name input or, when the provider auto-names it, what
the provider would generate: the logical name + ``-`` + 7 random hex characters (pulumi-aws and
pulumi-gcp autonaming; NOTES.md). Read it through :func:`physical_name` only.
"""
from __future__ import annotations

import hashlib
import ipaddress
import re
from typing import Any, Optional

from gpulease.conformance import specs
from gpulease.conformance.specs import Constraint

#: the input that carries the physical name, per type (default "name").
NAME_INPUT: dict[str, str] = {
    "aws:s3/bucket:Bucket": "bucket",
    "aws:s3/bucketV2:BucketV2": "bucket",
    "aws:cloudwatch/eventTarget:EventTarget": "targetId",
    "aws:lambda/permission:Permission": "statementId",
    "gcp:serviceaccount/account:Account": "accountId",
    "gcp:projects/iAMCustomRole:IAMCustomRole": "roleId",
}

#: types whose name the provider generates from the logical name when the input is absent.
AUTONAMED: frozenset[str] = frozenset({
    "aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2", "aws:iam/role:Role",
    "aws:iam/policy:Policy", "aws:iam/rolePolicy:RolePolicy",
    "aws:iam/instanceProfile:InstanceProfile", "aws:ec2/launchTemplate:LaunchTemplate",
    "aws:autoscaling/group:Group", "aws:ec2/securityGroup:SecurityGroup",
    "aws:ec2/placementGroup:PlacementGroup", "aws:cloudwatch/eventRule:EventRule",
    "aws:cloudwatch/logGroup:LogGroup", "aws:lambda/function:Function", "aws:sns/topic:Topic",
    "gcp:compute/network:Network", "gcp:compute/subnetwork:Subnetwork",
    "gcp:compute/firewall:Firewall", "gcp:compute/router:Router",
    "gcp:compute/routerNat:RouterNat", "gcp:compute/instanceTemplate:InstanceTemplate",
    "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate",
    "gcp:compute/instanceGroupManager:InstanceGroupManager",
    "gcp:compute/reservation:Reservation", "gcp:compute/resourcePolicy:ResourcePolicy",
    "gcp:storage/bucket:Bucket",
})

#: GCE collections: type -> (collection, scope) where scope is "global" | "region" | "zone";
#: names are unique per project, collection and scope (Compute API resource hierarchy).
GCE: dict[str, tuple[str, str]] = {
    "gcp:compute/network:Network": ("networks", "global"),
    "gcp:compute/firewall:Firewall": ("firewalls", "global"),
    "gcp:compute/instanceTemplate:InstanceTemplate": ("instanceTemplates", "global"),
    "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate": ("instanceTemplates", "region"),
    "gcp:compute/subnetwork:Subnetwork": ("subnetworks", "region"),
    "gcp:compute/router:Router": ("routers", "region"),
    "gcp:compute/resourcePolicy:ResourcePolicy": ("resourcePolicies", "region"),
    "gcp:compute/instanceGroupManager:InstanceGroupManager": ("instanceGroupManagers", "zone"),
    "gcp:compute/reservation:Reservation": ("reservations", "zone"),
    # gpulease's dynamic provider over ReservationsClient (gpulease/clouds/gcp/reservation.py):
    # the same Compute collection as the pulumi-gcp Reservation, so names collide across both.
    "pulumi-python:dynamic/gpulease:GceReservation": ("reservations", "zone"),
    "gcp:compute/instance:Instance": ("instances", "zone"),
}


def auto_name(resource: Any) -> str:
    """The provider's generated name: logical name + "-" + 7 hex characters (random in the
    provider; here derived from the URN so plans are reproducible)."""
    return f"{resource.name}-{hashlib.sha1(resource.urn.encode()).hexdigest()[:7]}"


def physical_name(resource: Any) -> Optional[str]:
    """THE way to read a resource's physical name (``RecordedResource`` or anything alike).

    The mocks' own ``physical_name`` attribute wins when present (the provider-faithful mocks
    set it); then the explicit name input; then, for a type the provider auto-names, the name
    it would generate; else the name the mock answered with."""
    explicit = getattr(resource, "physical_name", None)
    if explicit:
        return explicit
    key = NAME_INPUT.get(resource.type, "name")
    value = (resource.inputs or {}).get(key)
    if isinstance(value, str) and value:
        return value
    if resource.type in AUTONAMED:
        return auto_name(resource)
    value = (getattr(resource, "outputs", None) or {}).get(key)
    return value if isinstance(value, str) and value else None


# ---- naming rules without a machine-readable spec, each with its documentation --------------
S3_BUCKET_SPEC = ("Amazon S3 user guide, 'General purpose bucket naming rules' (botocore's "
                  "BucketName shape carries no constraint)")
_S3_CHARS = re.compile(r"[a-z0-9][a-z0-9.-]*[a-z0-9]")
_S3_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_S3_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def s3_bucket_problems(name: str) -> list[str]:
    out = []
    if not 3 <= len(name) <= 63:
        out.append(f"is {len(name)} characters; S3 bucket names are 3-63")
    if not _S3_CHARS.fullmatch(name):
        out.append("may hold only lowercase letters, digits, '.' and '-', and must begin and "
                   "end with a letter or digit")
    if ".." in name:
        out.append("must not contain two adjacent periods")
    try:
        ipaddress.IPv4Address(name)
        out.append("must not be formatted as an IP address")
    except ValueError:
        pass
    out += [f"must not start with the reserved prefix {p!r}" for p in _S3_RESERVED_PREFIXES
            if name.startswith(p)]
    out += [f"must not end with the reserved suffix {s!r}" for s in _S3_RESERVED_SUFFIXES
            if name.endswith(s)]
    return out


GCS_BUCKET_SPEC = ("Cloud Storage docs, 'Bucket naming rules' (the storage v1 discovery "
                   "document gives Bucket.name no pattern)")
_GCS_CHARS = re.compile(r"[a-z0-9][a-z0-9_.-]*[a-z0-9]")


def gcs_bucket_problems(name: str) -> list[str]:
    out = []
    if not _GCS_CHARS.fullmatch(name):
        out.append("may hold only lowercase letters, digits, '-', '_' and '.', and must begin "
                   "and end with a letter or digit")
    limit = 222 if "." in name else 63
    if not 3 <= len(name) <= limit:
        out.append(f"is {len(name)} characters; GCS bucket names are 3-63 (up to 222 with dots)")
    if "." in name and any(len(part) > 63 for part in name.split(".")):
        out.append("has a dot-separated part longer than 63 characters")
    try:
        ipaddress.IPv4Address(name)
        out.append("must not be an IP address in dotted-decimal notation")
    except ValueError:
        pass
    if name.startswith("goog") or "google" in name:
        out.append("must not begin with 'goog' or contain 'google'")
    return out


#: service-account ids: IAM REST reference, projects.serviceAccounts.create ``accountId``:
#: "must be 6-30 characters long, and match the regular expression [a-z]([-a-z0-9]*[a-z0-9])".
GCP_SERVICE_ACCOUNT_ID = Constraint(
    spec="IAM REST v1 projects.serviceAccounts.create accountId", min_len=6, max_len=30,
    pattern=r"[a-z]([-a-z0-9]*[a-z0-9])")
#: custom role ids: IAM REST reference, projects.roles.create ``roleId``: "can only contain
#: letters, digits, underscores and periods", at most 64 characters, at least 3.
GCP_CUSTOM_ROLE_ID = Constraint(spec="IAM REST v1 projects.roles.create roleId", min_len=3,
                                max_len=64, pattern=r"[a-zA-Z0-9_.]+")


def gce_name_constraint() -> Constraint:
    return specs.gce_name()
