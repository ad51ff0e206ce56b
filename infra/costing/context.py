"""Cost context: what a component tells the stack-wide cost transform about its children.

Every gpulease ComponentResource sets ``self.cost_context`` (a :class:`CostContext`) right
after ``super().__init__`` and BEFORE it creates any child. The transform
(``infra.costing.transform``) walks a resource's parents to the nearest context, prices the
resource from the catalog (``infra.costing.costs``) and stamps the tag/label set.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from infra.costing import tags
from infra.model import ClusterDecision, StorageDecision


@dataclass
class CostContext:
    #: value of the cluster tag: a cluster name, or tags.SHARED for shared infrastructure.
    cluster: str
    template: str = "none"
    #: default purchase-model tag of children ("mixed", "spot", "on_demand", "reserved", "none").
    purchase_model: str = "none"
    decision: Optional[ClusterDecision] = None
    #: storage decision whose cost buckets under this component carry.
    storage: Optional[StorageDecision] = None
    #: compute groups (ASG / MIG) by child resource name -> purchase model they run
    #: ("mixed" for an AWS ASG blending on-demand and spot).
    roles: dict = field(default_factory=dict)
    #: child resource name that carries cluster-level costs not tied to one node group
    #: (communication overhead); usually the ASG or the first MIG.
    anchor: Optional[str] = None
    #: child resource name that carries the data-gravity cost (the work bucket when staged).
    egress_anchor: Optional[str] = None
    #: True when a reservation resource (ODCR / GCP Reservation) carries the reserved cost.
    reservation_created: bool = False
    #: idle window stamped on compute (reaper input); None for non-compute components.
    idle_minutes: Optional[int] = None

    def purchase_of(self, resource_name: str) -> str:
        return self.roles.get(resource_name, self.purchase_model)


def shared(purchase_model: str = "none") -> CostContext:
    return CostContext(cluster=tags.SHARED, purchase_model=purchase_model)
