"""The primary GCP network: an existing VPC from config, or a VPC + subnet per region + Cloud NAT.

GPU nodes get no external IP, so egress (package mirrors, container registries) goes through
Cloud NAT and Google APIs (GCS, Monitoring, Logging) through Private Google Access.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_gcp as gcp

from gpulease.clouds.gcp.builders import DEFAULT_MTU, primary_subnet_cidr
from gpulease.costing import context as cost_context
from gpulease.model import CloudSpec

NETWORK_TYPE = "gpulease:gcp:Network"


@dataclass(frozen=True)
class NetworkArgs:
    cloud: CloudSpec
    #: regions that run at least one cluster (each gets a subnet, router and NAT).
    regions: tuple[str, ...]
    #: MTU of a created VPC (``builders.primary_mtu``).
    mtu: int = DEFAULT_MTU
    environment: str = "dev"


def existing_subnet_for(subnets: tuple[str, ...], region: str) -> Optional[str]:
    """The configured subnetwork for a region: one whose self link names it, else the only one."""
    for s in subnets:
        if f"/regions/{region}/" in s:
            return s
    return subnets[0] if len(subnets) == 1 else None


class Network(pulumi.ComponentResource):
    """``network`` (self link or name) and ``subnets`` (region -> subnetwork) for the clusters."""

    network: pulumi.Input[str]
    subnets: dict[str, pulumi.Input[str]]
    created: bool

    def __init__(self, name: str, args: NetworkArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(NETWORK_TYPE, name, None, opts)
        self.cost_context = cost_context.shared()
        child = pulumi.ResourceOptions(parent=self)
        self.subnets = {}
        if args.cloud.network:
            # Bring-your-own network: its routing/NAT are the owner's; only subnets are looked up.
            self.created = False
            self.network = args.cloud.network
            for region in args.regions:
                sub = existing_subnet_for(args.cloud.subnets, region)
                if sub is not None:
                    self.subnets[region] = sub
            self.register_outputs({"network": self.network})
            return

        self.created = True
        vpc = gcp.compute.Network(
            f"{name}-vpc", auto_create_subnetworks=False, routing_mode="REGIONAL",
            mtu=args.mtu, description=f"gpulease {args.environment} primary network",
            opts=child)
        self.network = vpc.self_link
        for i, region in enumerate(sorted(args.regions)):
            sub = gcp.compute.Subnetwork(
                f"{name}-{region}", region=region, network=vpc.id,
                ip_cidr_range=primary_subnet_cidr(i),
                # Nodes have no external IP: reach GCS / Monitoring / Logging privately.
                private_ip_google_access=True,
                log_config={"aggregation_interval": "INTERVAL_10_MIN", "flow_sampling": 0.5,
                            "metadata": "INCLUDE_ALL_METADATA"},
                opts=child)
            self.subnets[region] = sub.self_link
            router = gcp.compute.Router(f"{name}-{region}-router", region=region,
                                        network=vpc.id, opts=child)
            gcp.compute.RouterNat(
                f"{name}-{region}-nat", region=region, router=router.name,
                nat_ip_allocate_option="AUTO_ONLY",
                source_subnetwork_ip_ranges_to_nat="LIST_OF_SUBNETWORKS",
                subnetworks=[{"name": sub.id, "source_ip_ranges_to_nats": ["ALL_IP_RANGES"]}],
                log_config={"enable": True, "filter": "ERRORS_ONLY"},
                opts=child)
        self.register_outputs({"network": self.network})
