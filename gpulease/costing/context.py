"""Cost context: what a component tells the stack-wide cost transform about its children.

Every gpulease ComponentResource sets ``self.cost_context`` (a :class:`CostContext`) right
after ``super().__init__`` and BEFORE it creates any child. The transform
(``gpulease.costing.transform``) walks a resource's parents to the nearest context, prices the
resource from the catalog (``gpulease.costing.costs``) and stamps the tag/label set.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from gpulease import tags
from gpulease.model import ClusterDecision, StorageDecision
from gpulease.purchase import RESERVED


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
    #: clusters with a demand profile: child resource name -> the tags.DEMAND_PART value of
    #: the nodes it runs or reserves.
    parts: dict = field(default_factory=dict)
    #: clusters with a demand profile: node group (or instance template) name -> its floor
    #: (tags.BASELINE_NODES, what the reaper keeps): baseline nodes plus reserved burst nodes.
    baseline_nodes: dict = field(default_factory=dict)
    #: a window's node groups (and GCP templates) -> when their nodes stop being billed (epoch
    #: seconds; tags.BILLED_UNTIL): a Capacity Block's or calendar-mode reservation's end, a
    #: flex-start run's end (docs/policy.md, "Windows").
    billed_until: dict = field(default_factory=dict)
    #: child resource name -> the monthly cost it carries whatever the decision (money): an
    #: owned pool's whole monthly cost on its Kubernetes namespace (gpulease.owned.kubernetes).
    fixed_monthly: dict = field(default_factory=dict)

    #: window work on spot (issue 37): node group name -> the tags.DEADLINE_* values the
    #: reaper's deadline step reads (:meth:`stamp_deadline`).
    deadline: dict = field(default_factory=dict)

    def stamp_deadline(self, resource_name: str, role: str, *, restart_minutes: float,
                       progress_uri: Optional[str] = None,
                       progress_bucket: Optional[str] = None) -> None:
        """One of the two groups of a window job on spot (``role``: gpulease.purchase SPOT or
        ON_DEMAND; gpulease.deadline.controls): the job's start, deadline, work and restart
        overhead in whole minutes (integers: valid GCP label values), and where its progress
        is (AWS: an s3:// URI; GCP: the bucket's name - a label cannot hold a URI, the object
        is gpulease.naming.progress_object of the cluster)."""
        import math

        w = self.decision.window
        values = {tags.DEADLINE_GROUP: role,
                  tags.DEADLINE_START: tags.timestamp_label(w.start.timestamp()),
                  tags.DEADLINE: tags.timestamp_label(w.window.deadline.timestamp()),
                  tags.DEADLINE_WORK_MINUTES: str(math.ceil(w.window.duration_hours * 60)),
                  tags.DEADLINE_RESTART_MINUTES: str(math.ceil(restart_minutes))}
        if progress_uri:
            values[tags.DEADLINE_PROGRESS] = progress_uri
        if progress_bucket:
            values[tags.DEADLINE_PROGRESS_BUCKET] = progress_bucket
        self.deadline[resource_name] = values

    def purchase_of(self, resource_name: str) -> str:
        return self.roles.get(resource_name, self.purchase_model)

    def stamp_demand(self, resource_name: str, models, *, floor: bool = False) -> None:
        """Record the demand part of the nodes of purchase ``models`` a resource runs or
        reserves (and with ``floor`` its floor: baseline and reserved nodes), for clusters with a demand profile;
        a one-step cluster has no parts and gets neither tag."""
        d = self.decision
        if d is None or not d.spec.has_profile:
            return
        blocks = [b for b in d.node_blocks if b.purchase in models]
        if not blocks:
            return
        self.parts[resource_name] = tags.part_value(b.part for b in blocks)
        if floor:
            # Reserved nodes bill every hour, a burst step's included: never scaled away.
            self.baseline_nodes[resource_name] = sum(
                b.nodes for b in blocks if b.part == "baseline" or b.purchase == RESERVED)


def shared(purchase_model: str = "none") -> CostContext:
    return CostContext(cluster=tags.SHARED, purchase_model=purchase_model)
