"""Estimated monthly cost of one resource, from the decision it implements and the catalog.

Rules (README "Cost tags"): compute groups carry their nodes' cost by purchase model; a
reservation carries the reserved (committed) nodes; the cluster's anchor carries the
communication overhead; the work bucket (egress anchor) carries the data-gravity cost;
storage buckets carry their tiered storage estimate; NAT gateways their hourly price from the
catalog. Everything else costs 0 — stated, not missing.
"""
from __future__ import annotations

from decimal import Decimal
from typing import Optional

from gpulease import money

from gpulease.catalog import HOURLY_INFRA, Catalog
from gpulease.costing.context import CostContext
from gpulease.model import HOURS_PER_MONTH
from gpulease.purchase import MIXED, NODE_MODELS, ON_DEMAND, RESERVED, SPOT

RESERVATION_TYPES = frozenset({
    "aws:ec2/capacityReservation:CapacityReservation",
    "aws:ec2/capacityBlockReservation:CapacityBlockReservation",
    "gcp:compute/reservation:Reservation",
    # a reservation with a compact placement policy (gpulease.clouds.gcp.reservation)
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


def resource_monthly_usd(type_: str, name: str, ctx: Optional[CostContext],
                         catalog: Catalog) -> Decimal:
    """Monthly cost of one resource as money (``gpulease.money``; 0.00 for free resources).

    Each cost component is converted to cents once (``CostBreakdown.amount``,
    ``StorageDecision.monthly_money``) and the resource carries the sum of the components it
    holds, so a cluster's resources add up to its ``monthly_money`` to the cent."""
    if type_ in HOURLY_INFRA:
        cloud, item = HOURLY_INFRA[type_]
        price = catalog.infra_price(cloud, item)
        return money.usd(price.usd * HOURS_PER_MONTH) if price else money.ZERO
    if ctx is None:
        return money.ZERO
    if name in ctx.fixed_monthly:
        return ctx.fixed_monthly[name]
    if type_ in BUCKET_TYPES:
        total = ctx.storage.monthly_money if ctx.storage is not None else money.ZERO
        if ctx.decision is not None and name == ctx.egress_anchor:
            total += ctx.decision.costs.amount("egress_usd")
        return total
    d = ctx.decision
    if d is None:
        return money.ZERO
    c = d.costs
    if type_ in RESERVATION_TYPES:
        # a window's Capacity Block or calendar-mode reservation carries its purchase
        return (c.amount("reserved_usd") + c.amount("window_usd") if ctx.reservation_created
                else money.ZERO)
    role = ctx.roles.get(name) if type_ in COMPUTE_GROUP_TYPES else None
    total = money.ZERO
    if role is not None:
        models = NODE_MODELS if role == MIXED else (role,)
        if ON_DEMAND in models:
            total += c.amount("on_demand_usd")
        if SPOT in models:
            total += c.amount("spot_usd") + c.amount("spot_rework_usd")
        if RESERVED in models and not ctx.reservation_created:
            total += c.amount("reserved_usd")
    if name == ctx.anchor:
        total += c.amount("communication_usd")
        if not ctx.reservation_created:
            total += c.amount("window_usd")   # a flex-start run: on the node group that runs it
        if ctx.egress_anchor is None:
            total += c.amount("egress_usd")
    return total


def one_time_decision(d) -> bool:
    """True when a cluster decision's money is one-time: a window bought whole (a Capacity
    Block, flex-start, calendar mode, a reservation, on-demand or spot for the work item), not
    a commitment's monthly bill (docs/policy.md, "Windows: one-time money")."""
    w = getattr(d, "window", None) if d is not None else None
    return w is not None and w.months == 1 and not w.lock_in_months


def resource_costs(type_: str, name: str, ctx: Optional[CostContext],
                   catalog: Catalog) -> tuple[Decimal, Decimal]:
    """(monthly, one-time) money of one resource: what it carries (``resource_monthly_usd``)
    split so that a window's one-time purchase is never in a monthly figure. A resource of a
    one-time window cluster carries one-time money, except the monthly dataset moves (egress)
    and storage; everything else is monthly."""
    total = resource_monthly_usd(type_, name, ctx, catalog)
    if ctx is None or not one_time_decision(ctx.decision) or type_ in HOURLY_INFRA \
            or name in ctx.fixed_monthly or type_ in BUCKET_TYPES:
        return total, money.ZERO
    monthly = (ctx.decision.costs.amount("egress_usd")
               if name == ctx.anchor and ctx.egress_anchor is None else money.ZERO)
    return monthly, total - monthly


def one_time_money(d) -> Decimal:
    """The one-time part of a cluster decision's money (what its resources carry as one-time,
    to the cent): all but its monthly dataset moves for a one-time window, else 0."""
    if not one_time_decision(d):
        return money.ZERO
    return d.monthly_money - d.costs.amount("egress_usd")
