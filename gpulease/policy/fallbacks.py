"""Fallback instance types of a decided cluster: the equivalents a node group may launch instead."""
from __future__ import annotations

import math

from gpulease.catalog import Catalog
from gpulease.model import Offering, PurchaseMix


def efa_card_count(offering: Offering) -> int:
    """Network cards that carry an EFA device on this type (0 when the type has no EFA)."""
    if offering.rdma != "efa":
        return 0
    n = offering.efa_interfaces or offering.network_cards or 1
    return max(1, int(n))


def fallback_types(offering: Offering, purchase: PurchaseMix, network: str,
                   catalog: Catalog) -> tuple[str, ...]:
    """The decided type first, then its equivalents, cheapest on demand first (then by name).

    An equivalent has the same GPU model and count per node in the same cloud and region, is
    not dearer on demand (so the plan's cost stays an upper bound), has a spot price (the
    fallbacks exist to widen the spot pools), and — when the cluster runs on EFA — as many EFA
    cards, because one launch template's network interfaces must fit every type. Purely
    reserved clusters keep only the decided type: their capacity is the reservation.
    """
    out = [offering.instance_type]
    if purchase.spot == 0 and purchase.on_demand == 0:
        return tuple(out)
    cards = efa_card_count(offering)
    for cand in sorted(catalog.offerings_for(gpu=offering.gpu, cloud=offering.cloud,
                                             region=offering.region),
                       key=lambda x: (x.on_demand_usd or math.inf, x.instance_type)):
        if cand.instance_type in out or cand.gpus_per_node != offering.gpus_per_node:
            continue
        if cand.spot_usd is None or cand.on_demand_usd is None or offering.on_demand_usd is None:
            continue
        if cand.on_demand_usd > offering.on_demand_usd:
            continue
        if network == "efa" and efa_card_count(cand) != cards:
            continue
        out.append(cand.instance_type)
    return tuple(out)
