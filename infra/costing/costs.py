"""Estimated monthly cost of one resource, from the decision it implements and the catalog.

Rules (README "Cost tags"): compute groups carry their nodes' cost by purchase model; a
reservation carries the reserved (committed) nodes; the cluster's anchor carries the
communication overhead; the work bucket (egress anchor) carries the data-gravity cost;
storage buckets carry their tiered storage estimate; NAT gateways their hourly price from the
catalog. Everything else costs 0 — stated, not missing.
"""
from __future__ import annotations

from typing import Optional

from infra.catalog import Catalog
from infra.costing.context import CostContext
from infra.model import HOURS_PER_MONTH

RESERVATION_TYPES = frozenset({
    "aws:ec2/capacityReservation:CapacityReservation",
    "aws:ec2/capacityBlockReservation:CapacityBlockReservation",
    "gcp:compute/reservation:Reservation",
    # a reservation with a compact placement policy (infra.clouds.gcp.reservation)
    "pulumi-python:dynamic/gpulease:GceReservation",
    # a window's calendar-mode future reservation (docs/policy.md, "Windows")
    "gcp:compute/futureReservation:FutureReservation",
})
BUCKET_TYPES = frozenset({
    "aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2", "gcp:storage/bucket:Bucket",
})
#: node groups: they carry their nodes' cost (other resources may have a role only for the
#: purchase-model tag, e.g. an instance template).
COMPUTE_GROUP_TYPES = frozenset({
    "aws:autoscaling/group:Group",
    "gcp:compute/instanceGroupManager:InstanceGroupManager",
    "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager",
})
#: billable infrastructure priced per hour from the catalog's `infra` rows.
HOURLY_INFRA = {
    "aws:ec2/natGateway:NatGateway": ("aws", "nat_gateway_hour"),
    "gcp:compute/routerNat:RouterNat": ("gcp", "cloud_nat_gateway_hour"),
}


def resource_monthly_usd(type_: str, name: str, ctx: Optional[CostContext],
                         catalog: Catalog) -> float:
    """Monthly USD of one resource (0.0 for free resources)."""
    if type_ in HOURLY_INFRA:
        cloud, item = HOURLY_INFRA[type_]
        price = catalog.infra_price(cloud, item)
        return price.usd * HOURS_PER_MONTH if price else 0.0
    if ctx is None:
        return 0.0
    if type_ in BUCKET_TYPES:
        total = ctx.storage.monthly_usd if ctx.storage is not None else 0.0
        if ctx.decision is not None and name == ctx.egress_anchor:
            total += ctx.decision.costs.egress_usd
        return total
    d = ctx.decision
    if d is None:
        return 0.0
    c = d.costs
    if type_ in RESERVATION_TYPES:
        # a window's Capacity Block or calendar-mode reservation carries its purchase
        return c.reserved_usd + c.window_usd if ctx.reservation_created else 0.0
    role = ctx.roles.get(name) if type_ in COMPUTE_GROUP_TYPES else None
    total = 0.0
    if role is not None:
        models = {"mixed": ("on_demand", "spot", "reserved")}.get(role, (role,))
        if "on_demand" in models:
            total += c.on_demand_usd
        if "spot" in models:
            total += c.spot_usd + c.spot_rework_usd
        if "reserved" in models and not ctx.reservation_created:
            total += c.reserved_usd
    if name == ctx.anchor:
        total += c.communication_usd
        if not ctx.reservation_created:
            total += c.window_usd   # a flex-start run: on the node group that runs it
        if ctx.egress_anchor is None:
            total += c.egress_usd
    return total
