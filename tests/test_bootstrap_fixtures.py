"""Test fixtures for the bootstrap tests: stacks and cluster decisions built directly (no policy)."""
from __future__ import annotations

from typing import Optional

from gpulease.bootstrap.settings import BootstrapSettings
from gpulease.model import (ClusterDecision, ClusterSpec, CloudSpec, CostBreakdown, Offering,
                            PurchaseMix, StackSpec, StorageSpec)

_MIX = {"spot": PurchaseMix(spot=2), "on_demand": PurchaseMix(on_demand=2),
        "reserved": PurchaseMix(reserved=2), "mixed": PurchaseMix(on_demand=1, spot=1)}


def make_stack(offering: Offering, *, environment: str = "dev",
               bootstrap: Optional[BootstrapSettings] = None, dataset: Optional[str] = "lake",
               idle_minutes: int = 45, nodes: int = 2, purchase_model: str = "mixed",
               ssh_via_iap: bool = False, network: Optional[str] = None,
               home_region: Optional[str] = None,
               schedule: tuple = ()) -> tuple[StackSpec, ClusterDecision]:
    """A one-cluster stack on ``offering`` and the decision placing it there."""
    spec = ClusterSpec(name="train", gpu=offering.gpu, gpus=nodes * offering.gpus_per_node,
                       hours_per_month=300, priority=4, checkpoint_minutes=30,
                       dataset=dataset, idle_minutes=idle_minutes, schedule=tuple(schedule))
    cloud = CloudSpec(cloud=offering.cloud, regions=(offering.region,),
                      project="ml-project" if offering.cloud == "gcp" else None,
                      ssh_via_iap=ssh_via_iap)
    stack = StackSpec(
        stack=environment, environment=environment, owner="ml-platform", cost_center="cc-42",
        budget_monthly_usd=1e7, clouds={offering.cloud: cloud},
        storage=(StorageSpec(name="lake", size_tb=10, home_cloud=offering.cloud,
                             home_region=home_region or offering.region),),
        clusters=(spec,), bootstrap=bootstrap or BootstrapSettings())
    decision = ClusterDecision(
        spec=spec, offering=offering, nodes=nodes, purchase=_MIX[purchase_model],
        network=network if network is not None else offering.rdma,
        template="distributed-rdma" if nodes > 1 else "single-node-dev", hourly_usd=0.0,
        costs=CostBreakdown(), rationale="test fixture", zone=None, distributed=nodes > 1)
    return stack, decision
