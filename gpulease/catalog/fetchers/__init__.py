"""Per-cloud fetchers that read current prices and specs from the clouds' pricing APIs.

Each fetcher returns a ``CloudFetch``: what it learnt per (region, instance type) and which
region / API calls failed. Merging that into a catalog document is ``gpulease.catalog.refresh``'s job.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

#: Price columns a fetcher may fill, and the label recorded in ``price_sources`` for each API.
PRICE_COLUMNS = ("on_demand_usd", "spot_usd", "commit_1y_usd", "commit_3y_usd")

Progress = Callable[[str], None]

#: Entries for the catalog's ``sources`` map, keyed like the row ``source`` / ``price_sources``.
API_SOURCES = {
    "aws-pricing-api": ("https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/"
                        "API_pricing_GetProducts.html",
                        "AWS Price List Query API GetProducts (AmazonEC2; Linux, Shared, "
                        "capacitystatus Used; Reserved standard No Upfront 1yr/3yr)"),
    "aws-ec2-spot-price-history": ("https://docs.aws.amazon.com/AWSEC2/latest/APIReference/"
                                   "API_DescribeSpotPriceHistory.html",
                                   "EC2 DescribeSpotPriceHistory (Linux/UNIX): median across "
                                   "AZs of the latest price per AZ"),
    "aws-ec2-describe-instance-types": ("https://docs.aws.amazon.com/AWSEC2/latest/APIReference/"
                                        "API_DescribeInstanceTypes.html",
                                        "EC2 DescribeInstanceTypes / "
                                        "DescribeInstanceTypeOfferings (specs, AZs)"),
    "gcp-cloud-billing-catalog": ("https://cloud.google.com/billing/docs/reference/rest/v1/"
                                  "services.skus/list",
                                  "Cloud Billing Catalog API, Compute Engine SKUs "
                                  "(services/6F81-5844-456A) combined per machine type"),
    "gcp-compute-machine-types": ("https://cloud.google.com/compute/docs/reference/rest/v1/"
                                  "machineTypes/aggregatedList",
                                  "Compute Engine machineTypes / acceleratorTypes "
                                  "aggregatedList (vCPUs, memory, accelerators, zones)"),
}


@dataclass(frozen=True)
class Failure:
    """One region x API that could not be read (the rows it would have refreshed are kept)."""

    cloud: str
    region: str
    api: str
    message: str

    def __str__(self) -> str:
        return f"{self.cloud} {self.region} {self.api}: {self.message}"


@dataclass(frozen=True)
class Fetched:
    """What the APIs said about one instance type in one region.

    ``prices``: column -> USD per node-hour; ``price_sources``: column -> API label;
    ``specs``: catalog columns read from the spec APIs (vcpus, memory_gb, gpu_memory_gb, ...).
    """

    cloud: str
    region: str
    instance_type: str
    prices: dict = field(default_factory=dict)
    price_sources: dict = field(default_factory=dict)
    specs: dict = field(default_factory=dict)
    zones: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    #: zone -> spot USD per node-hour (AWS zone IDs / GCP zones) where the API gives them.
    zone_spot: dict = field(default_factory=dict)


@dataclass
class CloudFetch:
    cloud: str
    rows: dict = field(default_factory=dict)            # (region, instance_type) -> Fetched
    failures: list = field(default_factory=list)        # [Failure]
    #: regions whose price API answered (rows there may be added or removed).
    priced_regions: set = field(default_factory=set)
    #: region -> instance types the capacity API says are offered there (None = not asked).
    offered: dict = field(default_factory=dict)
    calls: int = 0
    apis: tuple[str, ...] = ()

    def get(self, region: str, instance_type: str) -> Optional[Fetched]:
        return self.rows.get((region, instance_type))


__all__ = ["Failure", "Fetched", "CloudFetch", "PRICE_COLUMNS", "Progress", "API_SOURCES"]
