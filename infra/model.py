"""Pure domain types shared by every stage: stack spec -> decision -> components -> plan.

Everything here is immutable and free of Pulumi and cloud SDK imports, so tests build these
objects directly and every stage can be exercised on its own.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

Cloud = Literal["aws", "gcp"]
CLOUDS: tuple[str, ...] = ("aws", "gcp")

#: Inter-node fabric an offering supports. "none" = plain TCP over the VPC network.
RdmaKind = Literal["efa", "gpudirect-tcpx", "gpudirect-tcpxo", "rdma", "none"]
RDMA_KINDS: tuple[str, ...] = ("efa", "gpudirect-tcpx", "gpudirect-tcpxo", "rdma", "none")

PurchaseModel = Literal["reserved", "on_demand", "spot"]
PURCHASE_MODELS: tuple[str, ...] = ("reserved", "on_demand", "spot")

#: Hours in the billing month the cost model uses (AWS and GCP both bill 730 h/month).
HOURS_PER_MONTH = 730.0

#: Longest idle window a cluster may ask for (one week): the config rejects more, and the reaper
#: treats a larger `gpulease-idle-minutes` tag value as invalid.
MAX_IDLE_MINUTES = 7 * 24 * 60


# --------------------------------------------------------------------------------------------
# Catalog rows
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Offering:
    """One rentable GPU node type in one region, with its hourly prices (USD per node-hour)."""

    cloud: str
    region: str
    instance_type: str
    gpu: str
    gpus_per_node: int
    gpu_memory_gb: float
    vcpus: int
    memory_gb: float
    network_gbps: float
    rdma: str
    on_demand_usd: Optional[float]
    spot_usd: Optional[float]
    commit_1y_usd: Optional[float]
    commit_3y_usd: Optional[float]
    source: str = ""
    as_of: str = ""
    #: zones of the region where the type is offered (empty = not recorded).
    zones: tuple[str, ...] = ()
    #: GCP only: accelerator type attached to an N1 VM (``nvidia-tesla-t4``); None when built in.
    accelerator_type: Optional[str] = None
    #: AWS only: number of network cards and how many of them can carry an EFA interface.
    network_cards: Optional[int] = None
    efa_interfaces: Optional[int] = None
    #: instance-store NVMe capacity in GB (0 = none).
    local_nvme_gb: float = 0.0

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.cloud, self.region, self.instance_type)

    @property
    def has_rdma(self) -> bool:
        return self.rdma != "none"

    def price(self, model: str, commitment_term: str = "1y") -> Optional[float]:
        """Hourly price per node for a purchase model (``reserved`` uses the commitment term)."""
        if model == "on_demand":
            return self.on_demand_usd
        if model == "spot":
            return self.spot_usd
        if model == "reserved":
            return self.commit_3y_usd if commitment_term == "3y" else self.commit_1y_usd
        raise ValueError(f"unknown purchase model {model!r}")

    def reservation_rate(self, commitment_term: str = "1y",
                         plain_at_on_demand: bool = True) -> Optional[float]:
        """Hourly price of one reserved node: the commitment rate, or - with no commitment
        price - a plain capacity reservation, which both clouds bill at the on-demand rate for
        every hour whether used or not (AWS On-Demand Capacity Reservations; GCP reservations
        without a committed-use discount)."""
        rate = self.price("reserved", commitment_term)
        if rate is None and plain_at_on_demand:
            return self.on_demand_usd
        return rate


@dataclass(frozen=True)
class StoragePrice:
    cloud: str
    region: str
    storage_class: str
    usd_per_gb_month: float
    min_storage_days: int = 0
    source: str = ""


@dataclass(frozen=True)
class EgressPrice:
    """Data transfer price. kind: ``inter_region`` (same cloud) or ``internet`` (cross-cloud)."""

    cloud: str
    kind: str
    usd_per_gb: float
    source: str = ""


@dataclass(frozen=True)
class InfraPrice:
    """Billable supporting infrastructure (NAT gateway hours, ...), per unit."""

    cloud: str
    item: str
    unit: str
    usd: float
    source: str = ""


# --------------------------------------------------------------------------------------------
# Stack specification (validated config)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CloudSpec:
    cloud: str
    regions: tuple[str, ...]
    quota_gpus: dict = field(default_factory=dict)
    #: GCP project id (None on AWS).
    project: Optional[str] = None
    #: existing network to use instead of creating one (AWS: vpc id; GCP: network self link/name).
    network: Optional[str] = None
    #: existing subnets (AWS subnet ids) / subnetwork (GCP) to use with ``network``.
    subnets: tuple[str, ...] = ()
    #: AWS: create On-Demand Capacity Reservations even in a dev stack.
    capacity_reservations: Optional[bool] = None
    #: AWS: request EC2 Capacity Blocks for ML for the reserved part.
    capacity_blocks: bool = False
    #: GCP: what happens to a preempted Spot VM (STOP | DELETE).
    spot_termination_action: str = "DELETE"
    #: GCP: allow SSH from IAP's range (35.235.240.0/20); off by default.
    ssh_via_iap: bool = False


@dataclass(frozen=True)
class StorageSpec:
    name: str
    size_tb: float
    home_cloud: str
    home_region: str
    warm_after_days: Optional[int] = 30
    cold_after_days: Optional[int] = 90
    archive_after_days: Optional[int] = 365
    #: assumed age spread of the objects (days) used to estimate the share in each tier.
    age_horizon_days: int = 365
    #: keep noncurrent checkpoint object versions this many days.
    noncurrent_days: int = 30

    @property
    def home(self) -> str:
        return f"{self.home_cloud}:{self.home_region}"


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    gpu: str
    gpus: int
    hours_per_month: float
    priority: int
    checkpoint_minutes: Optional[int] = None
    #: None = decided from the node count (more than one node => distributed).
    distributed: Optional[bool] = None
    dataset: Optional[str] = None
    #: residency allow-list: exact regions ("europe-west4") or prefixes ("eu", "europe-").
    regions: tuple[str, ...] = ()
    idle_minutes: int = 60
    template: Optional[str] = None
    #: index in ``gpulease:clusters`` (for error messages that point at the config path).
    index: int = 0

    @property
    def interruptible(self) -> bool:
        return self.checkpoint_minutes is not None

    @property
    def config_path(self) -> str:
        return f"gpulease:clusters[{self.index}]"


@dataclass(frozen=True)
class StackSpec:
    """The whole validated stack configuration."""

    stack: str
    environment: str
    owner: str
    cost_center: str
    budget_monthly_usd: float
    clouds: dict  # cloud name -> CloudSpec
    storage: tuple[StorageSpec, ...]
    clusters: tuple[ClusterSpec, ...]
    #: infra.policy.rules.PolicyRules (kept untyped here to avoid a dependency cycle).
    policy: object = None
    #: infra.reaper.settings.ReaperSettings or None.
    reaper: object = None
    #: infra.bootstrap.settings.BootstrapSettings or None.
    bootstrap: object = None
    #: file the spec came from (for messages), e.g. ``stacks/Pulumi.dev.yaml``.
    source: str = ""
    #: prefix of globally unique names (buckets).
    name_prefix: str = "gpulease"
    catalog_version: Optional[str] = None
    #: non-fatal findings of the config (``infra.errors.Finding``), shown by `gpulease plan`.
    warnings: tuple = ()

    @property
    def is_prod(self) -> bool:
        return self.environment in ("prod", "production")

    @property
    def is_dev(self) -> bool:
        return self.environment in ("dev", "development", "sandbox")

    def storage_by_name(self, name: str) -> Optional[StorageSpec]:
        for s in self.storage:
            if s.name == name:
                return s
        return None


# --------------------------------------------------------------------------------------------
# Decisions (what the policy module produces)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PurchaseMix:
    reserved: int = 0
    on_demand: int = 0
    spot: int = 0

    @property
    def total(self) -> int:
        return self.reserved + self.on_demand + self.spot

    def as_dict(self) -> dict:
        return {"reserved": self.reserved, "on_demand": self.on_demand, "spot": self.spot}


@dataclass(frozen=True)
class CostBreakdown:
    """Monthly USD by component of the cost model (see README "Cost model")."""

    reserved_usd: float = 0.0
    on_demand_usd: float = 0.0
    spot_usd: float = 0.0
    spot_rework_usd: float = 0.0
    egress_usd: float = 0.0
    communication_usd: float = 0.0

    @property
    def monthly_usd(self) -> float:
        return (self.reserved_usd + self.on_demand_usd + self.spot_usd + self.spot_rework_usd
                + self.egress_usd + self.communication_usd)

    def as_dict(self) -> dict:
        d = {k: round(getattr(self, k), 2) for k in (
            "reserved_usd", "on_demand_usd", "spot_usd", "spot_rework_usd", "egress_usd",
            "communication_usd")}
        d["monthly_usd"] = round(self.monthly_usd, 2)
        return d


@dataclass(frozen=True)
class Alternative:
    cloud: str
    region: str
    instance_type: str
    purchase: PurchaseMix
    monthly_usd: Optional[float]
    rejected_because: str


@dataclass(frozen=True)
class ClusterDecision:
    spec: ClusterSpec
    offering: Offering
    nodes: int
    purchase: PurchaseMix
    #: fabric used between nodes: the offering's RDMA kind, or "none" for TCP only.
    network: str
    template: str
    hourly_usd: float
    costs: CostBreakdown
    rationale: str
    alternatives: tuple[Alternative, ...] = ()
    zone: Optional[str] = None
    commitment_term: str = "1y"
    distributed: bool = False

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def cloud(self) -> str:
        return self.offering.cloud

    @property
    def region(self) -> str:
        return self.offering.region

    @property
    def monthly_usd(self) -> float:
        return self.costs.monthly_usd


@dataclass(frozen=True)
class TierShare:
    storage_class: str
    from_day: int
    to_day: Optional[int]
    share: float  # fraction of the data estimated in this tier
    usd_per_gb_month: float
    monthly_usd: float


@dataclass(frozen=True)
class StorageDecision:
    spec: StorageSpec
    cloud: str
    region: str
    tiers: tuple[TierShare, ...]

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def monthly_usd(self) -> float:
        return sum(t.monthly_usd for t in self.tiers)


@dataclass(frozen=True)
class EnvironmentDecision:
    stack: StackSpec
    clusters: tuple[ClusterDecision, ...]
    storage: tuple[StorageDecision, ...]
    catalog_version: str
    catalog_as_of: str

    def cluster(self, name: str) -> ClusterDecision:
        for c in self.clusters:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def hourly_usd(self) -> float:
        return sum(c.hourly_usd for c in self.clusters)

    @property
    def monthly_usd(self) -> float:
        return sum(c.monthly_usd for c in self.clusters) + sum(s.monthly_usd for s in self.storage)
