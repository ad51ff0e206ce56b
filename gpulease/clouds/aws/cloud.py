"""AWS as the shared code sees it: its Cloud object (words, encodings, defaults, module paths)."""
from __future__ import annotations

import base64
import gzip
from dataclasses import dataclass
from typing import Any, Mapping

from gpulease import tags
from gpulease.clouds.base import Cloud
from gpulease.purchase import (CAPACITY_BLOCK, COMMITMENT, MIXED, ON_DEMAND, RESERVATION,
                               SPOT)

#: AWS user data is limited to 16 KB before base64 (EC2 User Guide, "Run commands when you launch
#: an EC2 instance with user data input"); a full cloud-config is ~20 KB, so on AWS it travels
#: gzip-compressed (cloud-init decompresses gzip user data, `cloudinit.user_data.convert_string`).
USER_DATA_LIMIT = 16384

#: Types sold as EC2 Capacity Blocks for ML (EC2 User Guide, "Capacity Blocks for ML",
#: supported instance types: p6-b200, p5, p5e, p5en, p4d, p4de, trn1, trn2 - the GPU ones the
#: catalog has).
CAPACITY_BLOCK_TYPES = frozenset({"p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge",
                                  "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge"})

#: region prefix -> continent (AWS region names: ``<area>-<direction>-<n>``).
_CONTINENTS = {"us": "north-america", "ca": "north-america", "mx": "north-america",
               "sa": "south-america", "eu": "europe", "ap": "asia", "me": "middle-east",
               "il": "middle-east", "af": "africa"}
#: Asia Pacific regions in Oceania (Sydney, Melbourne, Auckland).
_OCEANIA = ("ap-southeast-2", "ap-southeast-4", "ap-southeast-6")


def partition_of(region: str) -> str:
    """ARN partition of a region (AWS General Reference, "Amazon Resource Names")."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


@dataclass(frozen=True)
class AwsCloud(Cloud):
    def default_zone(self, region: str) -> str:
        return f"{region}a"

    def continent_of(self, region: str) -> str:
        if region.startswith(_OCEANIA):
            return "oceania"
        head = region.split("-", 1)[0]
        return _CONTINENTS.get(head, head)

    def family_of(self, instance_type: str) -> str:
        return instance_type.split(".", 1)[0]       # p5.48xlarge -> p5

    def tag_value(self, value: object) -> str:
        return str(value)                              # tags keep their values

    def cost_tags(self, values: Mapping[str, str], monthly_usd: Any,
                  one_time_usd: Any = 0) -> dict[str, str]:
        out = dict(values)
        out[tags.MONTHLY_USD] = tags.usd(monthly_usd)
        if one_time_usd:
            out[tags.ONE_TIME_USD] = tags.usd(one_time_usd)
        return out

    def node_group_models(self, used: tuple[str, ...]) -> tuple[str, ...]:
        # one Auto Scaling group blends spot with the on-demand/reserved base (a mixed
        # instances policy); without spot, one group per model
        if SPOT in used and len(used) > 1:
            return (MIXED,)
        return used

    def encode_user_data(self, cloud_config: str) -> str:
        """Launch template ``user_data`` (base64): base64 of the gzip-compressed cloud-config,
        which keeps it under the 16 KB limit; cloud-init recognises the gzip magic."""
        # mtime=0: byte-identical output between runs, so plans do not show a spurious diff.
        raw = gzip.compress(cloud_config.encode(), compresslevel=9, mtime=0)
        if len(raw) >= USER_DATA_LIMIT:
            raise ValueError(f"compressed user data is {len(raw)} bytes; EC2 allows "
                             f"{USER_DATA_LIMIT}")
        return base64.b64encode(raw).decode()

    def window_options_by_default(self, instance_type: str) -> frozenset[str]:
        return frozenset({CAPACITY_BLOCK}) if instance_type in CAPACITY_BLOCK_TYPES \
            else frozenset()


AWS = AwsCloud(
    name="aws", title="AWS", provider="aws", sdk_package="pulumi_aws", tag_style="tags",
    node_group="Auto Scaling group", node_templates="launch templates", url_scheme="s3",
    location_scope="region", region_pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d+$",
    region_example="us-east-1",
    # zone IDs (the same in every account): use1-az1, usw2-lax1-az1 (Local Zone)
    zone_pattern=r"^[a-z]{2,5}\d(-[a-z]+\d+)?-az\d+$", zones_in_region=False,
    zone_text="an AWS zone ID like use1-az1", zones_text="AWS zone IDs like use1-az1",
    # S3 PutBucketLifecycleConfiguration Transition.StorageClass
    storage_classes=("STANDARD", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING",
                     "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE"),
    tier_classes=("STANDARD", "STANDARD_IA", "GLACIER_IR", "DEEP_ARCHIVE"),
    # S3 moves objects to STANDARD_IA / ONEZONE_IA no earlier than day 30 (S3 User Guide,
    # "Transitioning objects using Amazon S3 Lifecycle", constraints)
    min_transition_days=(("STANDARD_IA", 30), ("ONEZONE_IA", 30)),
    # S3 Glacier Flexible Retrieval and Deep Archive objects are restored before they are read
    restore_classes=("GLACIER", "DEEP_ARCHIVE"),
    window_models=frozenset({CAPACITY_BLOCK}), quote_picks_zone=False,
    price_precedence=(
        (ON_DEMAND, "the previous snapshot's cited AWS prices, then the vantage export (AWS "
                    "Price List), then SkyPilot"),
        (SPOT, "SkyPilot's per-zone spot prices (by zone ID) place a cluster in its zone")),
    # Spot notice: two minutes through `spot/instance-action` (EC2 User Guide, "Spot Instance
    # interruption notices"); poll often enough that the hook still has most of it left
    notice_window_seconds=120, poll_seconds=5, metadata_url="http://169.254.169.254",
    node_files=(("amazon-cloudwatch-agent.json.j2",
                 "/opt/aws/amazon-cloudwatch-agent/etc/amazon-cloudwatch-agent.json"),),
    credentials_hint="set AWS_PROFILE to a profile in ~/.aws/config (`aws configure` or `aws sso "
                     "login` writes one), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and "
                     "AWS_SESSION_TOKEN for temporary keys)",
    deploy_module="gpulease.clouds.aws.deploy", reaper_module="gpulease.reaper.aws",
    reaper_deploy_module="gpulease.reaper.aws_deploy",
    quotes_module="gpulease.quotes.aws", fetcher_module="gpulease.catalog.fetchers.aws",
    credentials_module="gpulease.credentials.aws", cli_module="gpulease.cli.clouds.aws",
    inventory_kinds=(("ec2-reserved-instances", COMMITMENT), ("savings-plan", COMMITMENT),
                     ("ec2-capacity-reservation", RESERVATION),
                     ("ec2-capacity-block", CAPACITY_BLOCK)),
    inventory_module="gpulease.inventory.aws",
)

__all__ = ["AWS", "AwsCloud", "CAPACITY_BLOCK_TYPES", "USER_DATA_LIMIT"]
