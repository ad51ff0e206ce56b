"""Stacks and decisions built directly (no config file, no policy): the one set of test builders.

The component, staging, bootstrap and monitoring tests build a :class:`StackSpec`, the policy's
:class:`ClusterDecision` / :class:`StorageDecision` and the :class:`EnvironmentDecision` the
cloud components read. Each builder takes keyword arguments for what a test varies; a test file
binds its own fixture defaults with ``functools.partial`` (its catalog, its cost figures).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Union

from gpulease.catalog import Catalog, load_catalog
from gpulease.model import (CloudSpec, ClusterDecision, ClusterSpec, CostBreakdown,
                            EnvironmentDecision, Offering, PurchaseMix, StackSpec,
                            StorageDecision, StorageSpec, TierShare)


@lru_cache(maxsize=1)
def shipped_catalog() -> Catalog:
    """The default shipped catalog (what a stack without ``gpulease:catalog`` plans with)."""
    return load_catalog()


# ---- stacks --------------------------------------------------------------------------------------
#: a cloud's CloudSpec in the tests' stacks unless a test says otherwise
CLOUD_DEFAULTS = {"aws": {"regions": ("us-east-1",)},
                  "gcp": {"regions": ("us-central1", "europe-west4"), "project": "acme-test"}}


def make_stack(env: str = "staging", *, clouds=("aws",), storage=(), clusters=(),
               owner: str = "ml-platform", cost_center: str = "cc-1", budget: float = 1e6,
               source: Optional[str] = None, bootstrap=None, **cloud_fields) -> StackSpec:
    """A stack named ``env``. ``clouds``: cloud names (each a CloudSpec of
    :data:`CLOUD_DEFAULTS` updated with ``cloud_fields``, e.g. ``network=``, ``regions=``) or
    CloudSpec objects as they are. ``source`` defaults to ``stacks/Pulumi.<env>.yaml``."""
    specs = {}
    for c in clouds:
        spec = c if isinstance(c, CloudSpec) else CloudSpec(
            cloud=c, **{**CLOUD_DEFAULTS[c], **cloud_fields})
        specs[spec.cloud] = spec
    return StackSpec(stack=env, environment=env, owner=owner, cost_center=cost_center,
                     budget_monthly_usd=budget, clouds=specs, storage=tuple(storage),
                     clusters=tuple(clusters), bootstrap=bootstrap,
                     source=f"stacks/Pulumi.{env}.yaml" if source is None else source)


# ---- decisions -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class UnitCosts:
    """A decision's monthly costs: USD per node of each purchase model, plus the cluster's
    egress and inter-node communication (the cost tags and ledger read them)."""

    reserved: float
    on_demand: float
    spot: float
    spot_rework: float
    egress: float
    communication: float
    #: communication of a cluster that is not distributed (None: ``communication``)
    communication_single: Optional[float] = None

    def breakdown(self, purchase: PurchaseMix, distributed: bool) -> CostBreakdown:
        comm = self.communication
        if not distributed and self.communication_single is not None:
            comm = self.communication_single
        return CostBreakdown(reserved_usd=self.reserved * purchase.reserved,
                             on_demand_usd=self.on_demand * purchase.on_demand,
                             spot_usd=self.spot * purchase.spot,
                             spot_rework_usd=self.spot_rework * purchase.spot,
                             egress_usd=self.egress, communication_usd=comm)


#: the AWS component tests' figures
AWS_COSTS = UnitCosts(reserved=1000.0, on_demand=500.0, spot=200.0, spot_rework=10.0,
                      egress=33.0, communication=12.0)
#: the GCP component tests' figures (no communication cost on one node)
GCP_COSTS = UnitCosts(reserved=100.0, on_demand=200.0, spot=80.0, spot_rework=5.0,
                      egress=12.0, communication=3.0, communication_single=0.0)
#: ``zone=FIRST_ZONE``: the offering's first zone, as the policy always decides one
FIRST_ZONE = "<first zone>"


def find_offering(catalog: Catalog, cloud: str, itype: str, region: Optional[str]) -> Offering:
    """The catalog's row of ``itype`` in ``region`` (None: the first row of that type)."""
    if region is not None:
        return catalog.offering(cloud, region, itype)
    return next(o for o in catalog.offerings if o.cloud == cloud and o.instance_type == itype)


def make_cluster(name: str = "train", itype: str = "p5.48xlarge",
                 purchase: PurchaseMix = PurchaseMix(reserved=2, on_demand=1, spot=1), *,
                 cloud: str = "aws", region: Optional[str] = "us-east-1",
                 catalog: Optional[Catalog] = None, offering: Optional[Offering] = None,
                 nodes: Optional[int] = None, distributed: Optional[bool] = None,
                 network: Optional[str] = None, dataset: Optional[str] = None, zone: Optional[str] = None, idle: int = 45,
                 hours: float = 200.0, priority: int = 6, index: int = 0, schedule: tuple = (),
                 costs: Union[UnitCosts, CostBreakdown] = AWS_COSTS,
                 template: str = "distributed-rdma", hourly: float = 9.0,
                 rationale: str = "test fixture") -> ClusterDecision:
    """A cluster of ``nodes`` (default ``purchase.total``) nodes of ``itype`` (or ``offering``),
    decided as given. ``distributed`` defaults to more than one node; the fabric is the
    offering's RDMA kind when distributed, else "none" (``network`` overrides it)."""
    o = offering or find_offering(catalog or shipped_catalog(), cloud, itype, region)
    nodes = purchase.total if nodes is None else nodes
    dist = nodes > 1 if distributed is None else distributed
    spec = ClusterSpec(name=name, gpu=o.gpu, gpus=o.gpus_per_node * nodes,
                       hours_per_month=hours, priority=priority, checkpoint_minutes=30,
                       distributed=dist, dataset=dataset, idle_minutes=idle, index=index,
                       schedule=tuple(schedule))
    if zone == FIRST_ZONE:
        zone = o.zones[0] if o.zones else (f"{o.region}-b" if o.cloud == "gcp"
                                           else f"{o.region}b")
    return ClusterDecision(
        spec=spec, offering=o, nodes=nodes, purchase=purchase,
        network=network if network is not None else (o.rdma if dist else "none"),
        template=template, hourly_usd=hourly,
        costs=costs.breakdown(purchase, dist) if isinstance(costs, UnitCosts) else costs,
        rationale=rationale, zone=zone, distributed=dist)


#: two-tier lifecycles of the component tests' datasets
AWS_TIERS = (TierShare("STANDARD", 0, 30, 0.5, 0.023, 117.76),
             TierShare("STANDARD_IA", 30, None, 0.5, 0.0125, 64.0))
GCP_TIERS = (TierShare("STANDARD", 0, 30, 0.5, 0.02, 100.0),
             TierShare("NEARLINE", 30, None, 0.5, 0.01, 50.0))


def make_storage(name: str = "corpus", region: str = "us-east-1", *, cloud: str = "aws",
                 tiers: Optional[tuple] = None, size_tb: float = 10,
                 **spec_fields) -> StorageDecision:
    """A dataset homed in ``region`` of ``cloud``, kept in ``tiers`` (default: the cloud's two
    tiers above); ``spec_fields`` go to its StorageSpec (``warm_after_days=`` ...)."""
    spec = StorageSpec(name=name, size_tb=size_tb, home_cloud=cloud, home_region=region,
                       **spec_fields)
    if tiers is None:
        tiers = AWS_TIERS if cloud == "aws" else GCP_TIERS
    return StorageDecision(spec=spec, cloud=cloud, region=region, tiers=tuple(tiers))


def make_env(clusters=(), storage=(), *, catalog: Optional[Catalog] = None,
             stack: Optional[StackSpec] = None, **stack_fields) -> EnvironmentDecision:
    """The decision of ``clusters`` and ``storage`` decisions. ``stack``: the stack as given,
    else :func:`make_stack` of their specs and ``stack_fields``; the catalog's version and
    date are recorded (default: the shipped catalog)."""
    catalog = catalog or shipped_catalog()
    if stack is None:
        stack = make_stack(storage=[s.spec for s in storage],
                           clusters=[c.spec for c in clusters], **stack_fields)
    return EnvironmentDecision(stack=stack, clusters=tuple(clusters), storage=tuple(storage),
                               catalog_version=catalog.version, catalog_as_of=catalog.as_of)


# ---- one cluster on one offering (the bootstrap tests) ------------------------------------------
#: ``purchase_model=`` of :func:`one_cluster_stack`: two nodes bought this way
MIXES = {"spot": PurchaseMix(spot=2), "on_demand": PurchaseMix(on_demand=2),
         "reserved": PurchaseMix(reserved=2), "mixed": PurchaseMix(on_demand=1, spot=1)}


def one_cluster_stack(offering: Offering, *, environment: str = "dev", bootstrap=None,
                      dataset: Optional[str] = "lake", idle_minutes: int = 45, nodes: int = 2,
                      purchase_model: str = "mixed", ssh_via_iap: bool = False,
                      network: Optional[str] = None, home_region: Optional[str] = None,
                      schedule: tuple = ()) -> tuple[StackSpec, ClusterDecision]:
    """A one-cluster stack on ``offering`` (dataset "lake", homed in the cluster's region unless
    ``home_region``) and the decision placing it there."""
    from gpulease.bootstrap.settings import BootstrapSettings

    decision = make_cluster(
        offering=offering, purchase=MIXES[purchase_model], nodes=nodes,
        network=network if network is not None else offering.rdma, dataset=dataset,
        idle=idle_minutes, hours=300, priority=4, schedule=schedule, costs=CostBreakdown(),
        template="distributed-rdma" if nodes > 1 else "single-node-dev", hourly=0.0)
    cloud = CloudSpec(cloud=offering.cloud, regions=(offering.region,),
                      project="ml-project" if offering.cloud == "gcp" else None,
                      ssh_via_iap=ssh_via_iap)
    lake = StorageSpec(name="lake", size_tb=10, home_cloud=offering.cloud,
                       home_region=home_region or offering.region)
    stack = make_stack(environment, clouds=(cloud,), storage=(lake,), clusters=(decision.spec,),
                       cost_center="cc-42", budget=1e7, source="",
                       bootstrap=bootstrap or BootstrapSettings())
    return stack, decision
