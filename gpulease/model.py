"""Pure domain types shared by every stage: stack spec -> decision -> components -> plan.

Everything here is immutable and free of Pulumi and cloud SDK imports, so tests build these
objects directly and every stage can be exercised on its own.
"""
from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal, Optional

from gpulease import money
from gpulease.clouds import registry
from gpulease.clock import format_utc
from gpulease.purchase import (CATALOG_OPTIONS, COMMITMENT, LABELS, MODEL_OPTIONS, NODE_MODELS,
                               ON_DEMAND, RESERVATION, RESERVED, SPOT)
#: the longest idle window a cluster may ask for (one constant, in gpulease.limits)
from gpulease.limits import MAX_IDLE_MINUTES  # noqa: F401 (re-exported)

#: a cloud's name (the schema's spelling of ``gpulease.clouds.registry.NAMES``).
Cloud = Literal["aws", "gcp"]
CLOUDS: tuple[str, ...] = registry.NAMES

#: Inter-node fabric an offering supports. "none" = plain TCP over the VPC network.
RdmaKind = Literal["efa", "gpudirect-tcpx", "gpudirect-tcpxo", "rdma", "none"]
RDMA_KINDS: tuple[str, ...] = ("efa", "gpudirect-tcpx", "gpudirect-tcpxo", "rdma", "none")

#: How an offering can be bought, as the providers document it per instance family (catalog
#: rows carry ``purchase_options``; sources and dates in gpulease/catalog/families.json):
#: on-demand VMs, spot, a capacity reservation (AWS ODCR, GCP reservation) billed at the
#: on-demand rate, a 1-/3-year commitment (AWS Savings Plans / RIs, GCP resource-based CUDs),
#: a GCP future reservation (calendar mode or AI Hypercomputer), GCP flex-start (Dynamic
#: Workload Scheduler) and AWS EC2 Capacity Blocks for ML: ``purchase.CATALOG_OPTIONS``; the
#: models the policy plans nodes with: ``purchase.NODE_MODELS`` (one table, gpulease.purchase).

#: Hours in the billing month the cost model uses (AWS and GCP both bill 730 h/month).
HOURS_PER_MONTH = 730.0

#: Commitment terms a stack may price reserved nodes at: "none" = no commitment (a guaranteed node
#: is a plain capacity reservation, billed at the on-demand rate and cancellable any time).
COMMITMENT_TERMS: tuple[str, ...] = ("none", "1y", "3y")
#: Months a commitment of each term bills, whether or not the capacity is still needed.
TERM_MONTHS = {"none": 0, "1y": 12, "3y": 36}

#: Parts of a cluster's demand: the baseline (the nodes of the first demand step, the ones busy
#: the most hours) and the burst above it (the nodes of the later steps).
DEMAND_PARTS: tuple[str, ...] = ("baseline", "burst")

#: most GPUs one cluster may ask for (beyond it the input is a mistake, not a plan).
MAX_CLUSTER_GPUS = 100_000
#: longest checkpoint interval, and longest spot restart, in minutes: a day.
MAX_CHECKPOINT_MINUTES = 24 * 60


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
    #: per-zone spot prices where the source has them, as (zone, USD per node-hour) pairs.
    zone_spot_usd: tuple[tuple[str, float], ...] = ()
    #: how the offering can be bought (``CATALOG_OPTIONS``), from the providers' documentation;
    #: empty = not recorded (older catalogs): derived from the prices (``options``).
    purchase_options: tuple[str, ...] = ()
    #: where the purchase options come from (source id of the family's documentation).
    purchase_options_source: str = ""
    #: placement the type supports: "cluster" (AWS placement group), "compact" (GCP), None.
    placement: Optional[str] = None
    #: other sources' figures for this offering's prices (``PriceCheck``), from the catalog.
    price_checks: tuple["PriceCheck", ...] = ()
    #: which sources each price column comes from, as (column, comma-separated source ids)
    #: pairs (the row's ``price_sources``); empty = the row's ``source`` for every column.
    price_sources: tuple[tuple[str, str], ...] = ()
    #: True when a stack allows the AWS Local Zones of this region
    #: (``gpulease:clouds.aws.local_zones``); off, a Local Zone is never a candidate.
    local_zones_allowed: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.cloud, self.region, self.instance_type)

    @property
    def options(self) -> tuple[str, ...]:
        """The purchase options: as recorded, else what the prices imply (an on-demand price:
        on-demand and a plain reservation at that rate; spot; a commitment price)."""
        if self.purchase_options:
            return self.purchase_options
        return derived_purchase_options(self.on_demand_usd, self.spot_usd or (
            min(u for _, u in self.zone_spot_usd) if self.zone_spot_usd else None),
            self.commit_1y_usd, self.commit_3y_usd)

    def sells(self, option: str) -> bool:
        """True when the provider sells this offering that way (``purchase.CATALOG_OPTIONS``)."""
        if option not in CATALOG_OPTIONS:
            raise ValueError(f"unknown purchase option {option!r}")
        return option in self.options

    def buyable(self, model: str) -> bool:
        """True when a purchase model the policy plans (reserved / on_demand / spot) can be
        bought for this offering: on-demand needs "on_demand", spot "spot", reserved a
        "reservation" or a "commitment"."""
        return any(self.sells(o) for o in MODEL_OPTIONS[model])

    def unavailable(self, *models: str) -> Optional[str]:
        """Why purchase models cannot be bought for this offering (None = all can), for
        messages: "a3-ultragpu-8g is not sold on-demand (sold as: spot, ...; source)"."""
        gone = [m for m in models if not self.buyable(m)]
        if not gone:
            return None
        sold = ", ".join(LABELS[o] for o in self.options) or "nothing recorded"
        what = " or ".join({ON_DEMAND: "on-demand", SPOT: "as spot",
                            RESERVED: "as a reservation or commitment"}[m] for m in gone)
        src = f"; {self.purchase_options_source}" if self.purchase_options_source else ""
        return f"{self.instance_type} is not sold {what} (sold as: {sold}{src})"

    def spot_in(self, zone: str) -> Optional[float]:
        """Spot price in one zone: the zone's own price, else the region's spot price."""
        for z, usd in self.zone_spot_usd:
            if z == zone:
                return usd
        return self.spot_usd

    def zone_for(self, model: str) -> str:
        """The zone a cluster of this offering lands in (zone ID on AWS, zone name on GCP).

        Spot: the zone with the cheapest spot price (ties: first in zone order); otherwise the
        first zone the catalog records. A catalog row without zones (format /1) falls back to
        the region's first zone by naming convention.
        """
        zones = self.regular_zones
        if model == SPOT and self.zone_spot_usd:
            order = {z: i for i, z in enumerate(zones)}
            pairs = [p for p in self.zone_spot_usd if p[0] in order]
            if pairs:
                return min(pairs, key=lambda p: (p[1], order[p[0]], p[0]))[0]
        if zones:
            return zones[0]
        if self.zones:       # only in Local Zones the stack does not allow: the policy rejects it
            return self.zones[0]
        return registry.get(self.cloud).default_zone(self.region)

    @property
    def regular_zones(self) -> tuple[str, ...]:
        """The zones a cluster may land in: without AWS Local Zones (``usw2-lax1-az1``, a metro
        extension without the region's full service set) unless the stack allows them
        (``local_zones_allowed``). Empty = only Local Zones offer it, and they are not allowed."""
        if self.local_zones_allowed:
            return self.zones
        return tuple(z for z in self.zones if not is_local_zone(z))

    @property
    def local_zones(self) -> tuple[str, ...]:
        return tuple(z for z in self.zones if is_local_zone(z))

    def disagreements(self, columns=None) -> tuple["PriceCheck", ...]:
        """Price checks over ``PRICE_DISAGREEMENT_PCT`` (all columns, or those given:
        on_demand / spot / commit_1y / commit_3y)."""
        return tuple(c for c in self.price_checks
                     if abs(c.diff_pct) > PRICE_DISAGREEMENT_PCT
                     and (columns is None or c.column in columns))

    @property
    def cheapest_spot_usd(self) -> Optional[float]:
        """Spot price in the zone a spot cluster would land in (see ``zone_for``); None when
        no zone it may land in has a spot price."""
        if self.zone_spot_usd:
            zone = self.zone_for(SPOT)
            return next((u for z, u in self.zone_spot_usd if z == zone), None)
        return self.spot_usd

    @property
    def has_rdma(self) -> bool:
        return self.rdma != "none"

    def price(self, model: str, commitment_term: str = "1y") -> Optional[float]:
        """Hourly price per node for a purchase model (``reserved`` uses the commitment term);
        None when there is no price or the offering is not sold that way."""
        if model == ON_DEMAND:
            return self.on_demand_usd if self.sells(ON_DEMAND) else None
        if model == SPOT:
            return self.spot_usd if self.sells(SPOT) else None
        if model == RESERVED:
            if commitment_term == "none" or not self.sells(COMMITMENT):
                return None
            return self.commit_3y_usd if commitment_term == "3y" else self.commit_1y_usd
        raise ValueError(f"unknown purchase model {model!r}")

    def is_commitment(self, commitment_term: str) -> bool:
        """True when a reserved node of this offering is bought at a commitment price for the
        term (locked in for the term's months); False = a plain capacity reservation."""
        return self.price(RESERVED, commitment_term) is not None

    def reservation_rate(self, commitment_term: str = "1y",
                         plain_at_on_demand: bool = True) -> Optional[float]:
        """Hourly price of one reserved node: the commitment rate, or - with no commitment
        price - a plain capacity reservation, which both clouds bill at the on-demand rate for
        every hour whether used or not (AWS On-Demand Capacity Reservations; GCP reservations
        without a committed-use discount)."""
        rate = self.price(RESERVED, commitment_term)
        if rate is None and plain_at_on_demand and self.sells(RESERVATION):
            return self.on_demand_usd
        return rate


#: Two sources for one price that differ by more than this share (percent of the figure used)
#: are flagged: `plan` lists them, `explain` shows both figures and why one was used.
PRICE_DISAGREEMENT_PCT = 20.0


#: AWS Local Zone IDs carry a metro part (``usw2-lax1-az1``); AZ IDs (``use1-az4``) and GCP
#: zones (``us-central1-a``) do not.
_AWS_LOCAL_ZONE_ID = re.compile(r"^[a-z]{2,5}\d-[a-z]+\d+-az\d+$")


def is_local_zone(zone: str) -> bool:
    """True for an AWS Local Zone ID (``usw2-lax1-az1``)."""
    return bool(_AWS_LOCAL_ZONE_ID.match(zone))


@dataclass(frozen=True)
class PriceCheck:
    """One price of an offering as two sources state it: the figure used (its source, date) and
    another's, with the difference in percent of the one used."""

    column: str                  # on_demand | spot | commit_1y | commit_3y
    used_usd: Optional[float]
    used_source: str
    used_as_of: str
    other_usd: float
    other_source: str
    other_as_of: str
    diff_pct: float
    #: why the used figure wins (the catalog's precedence for this cloud and column).
    why: str = ""

    def as_dict(self) -> dict:
        return {"column": self.column, "used_usd": self.used_usd,
                "used_source": self.used_source, "used_as_of": self.used_as_of,
                "other_usd": self.other_usd, "other_source": self.other_source,
                "other_as_of": self.other_as_of, "diff_pct": self.diff_pct, "why": self.why}

    def text(self) -> str:
        used = "-" if self.used_usd is None else f"{self.used_usd:g}"
        return (f"{self.column.replace('_', '-')} {used} $/h from {self.used_source} "
                f"({self.used_as_of or 'date unknown'}) is used; {self.other_source} says "
                f"{self.other_usd:g} ({self.other_as_of or 'date unknown'}, "
                f"{self.diff_pct:+.1f}%)" + (f"; why: {self.why}" if self.why else ""))


def derived_purchase_options(on_demand: Optional[float], spot: Optional[float],
                             commit_1y: Optional[float], commit_3y: Optional[float]
                             ) -> tuple[str, ...]:
    """Purchase options a row without a recorded list implies by its prices (catalogs older
    than 2026.12.03.1 and hand-written rows): what is priced is sold, and anything sold
    on-demand can also be reserved at the on-demand rate (AWS ODCR, GCP reservations)."""
    out = []
    if on_demand is not None:
        out += [ON_DEMAND]
    if spot is not None:
        out += [SPOT]
    if on_demand is not None:
        out += [RESERVATION]
    if commit_1y is not None or commit_3y is not None:
        out += [COMMITMENT]
    return tuple(out)


@dataclass(frozen=True)
class StoragePrice:
    cloud: str
    region: str
    storage_class: str
    usd_per_gb_month: float
    min_storage_days: int = 0
    source: str = ""
    #: USD per GB read back from this class (0 for the hot class).
    retrieval_usd_per_gb: float = 0.0
    #: True when the figure is not the region's own (see the row's notes).
    estimate: bool = False


#: Egress kinds: same cloud, other region (same continent unless ``inter_continent`` is
#: priced); same cloud across continents; to the other cloud; to the internet.
EGRESS_KINDS: tuple[str, ...] = ("inter_region", "inter_continent", "inter_cloud", "internet")


@dataclass(frozen=True)
class EgressPrice:
    """Data transfer price per GB leaving ``region`` (None = the cloud-wide figure)."""

    cloud: str
    kind: str
    usd_per_gb: float
    source: str = ""
    region: Optional[str] = None
    estimate: bool = False


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
    #: AWS: regions whose Local Zones clusters may land in (``gpulease:clouds.aws.local_zones``).
    local_zone_regions: tuple[str, ...] = ()
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
class DemandStep:
    """One step of a cluster's load-duration curve: at least ``gpus`` GPUs are busy
    ``hours_per_month`` hours a month (``gpulease:clusters[].demand[]``)."""

    gpus: int
    hours_per_month: float

    def as_dict(self) -> dict:
        return {"gpus": self.gpus, "hours_per_month": self.hours_per_month}


@dataclass(frozen=True)
class Window:
    """When a cluster's work can run (``gpulease:clusters[].window``): ``duration_hours`` of
    work on all its nodes, starting at or after ``earliest_start`` and done by ``deadline``
    (aware UTC datetimes). The policy prices the work item once, over the window, with every
    purchase model that can meet it (``gpulease.policy.windows``)."""

    earliest_start: _dt.datetime
    deadline: _dt.datetime
    duration_hours: float

    @property
    def span_hours(self) -> float:
        return (self.deadline - self.earliest_start).total_seconds() / 3600.0

    def as_dict(self) -> dict:
        return {"earliest_start": format_utc(self.earliest_start),
                "deadline": format_utc(self.deadline),
                "duration_hours": self.duration_hours}


@dataclass(frozen=True)
class NodeStep:
    """The nodes of one demand step on an offering: node k (1-based) runs the hours of the first
    step whose GPUs exceed (k - 1) x GPUs per node, so a step may own no node of its own."""

    step: int          # index into ClusterSpec.steps
    first: int         # 1-based index of its first node
    nodes: int
    hours_per_month: float

    @property
    def part(self) -> str:
        return "baseline" if self.step == 0 else "burst"


@dataclass(frozen=True)
class CapacityBlockPin:
    """A Capacity Block chosen once and pinned in the stack config (CONTRACTS C2): later runs
    declare exactly this offering, and it is bought only when ``purchase_approved``.
    ``start`` / ``end`` / ``quoted_at`` are RFC 3339 UTC strings as written."""

    offering_id: str
    region: str
    availability_zone: str
    instance_type: str
    instance_count: int
    start: str
    end: str
    upfront_fee_usd: float
    purchase_approved: bool = False
    quoted_at: Optional[str] = None

    @property
    def start_epoch(self) -> float:
        return parse_utc(self.start)

    @property
    def end_epoch(self) -> float:
        return parse_utc(self.end)

    @property
    def hours(self) -> float:
        return (self.end_epoch - self.start_epoch) / 3600.0

    def as_dict(self) -> dict:
        return {"offering_id": self.offering_id, "region": self.region,
                "availability_zone": self.availability_zone,
                "instance_type": self.instance_type, "instance_count": self.instance_count,
                "start": self.start, "end": self.end,
                "upfront_fee_usd": money.json_number(self.upfront_fee_usd),
                "quoted_at": self.quoted_at, "purchase_approved": self.purchase_approved}


def parse_utc(text: str) -> float:
    """Epoch seconds of an RFC 3339 time with a zone (``2026-12-04T11:30:00Z``), read and
    range-checked by :func:`gpulease.clock.parse_time` (ValueError otherwise)."""
    from gpulease.clock import parse_epoch

    return parse_epoch(text)


@dataclass(frozen=True)
class ClusterSpec:
    """One cluster of the stack. ``gpus`` is the peak; ``hours_per_month`` the hours of the first
    demand step (with one step: all GPUs run those hours, the classic form)."""

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
    #: the load-duration curve when it has more than one step (GPUs strictly increasing, hours
    #: strictly decreasing, the last step = ``gpus``); empty = one step (gpus, hours_per_month).
    demand: tuple[DemandStep, ...] = ()
    #: when the work can run (a one-off work item priced over its window); None = a monthly
    #: load (hours_per_month / demand).
    window: Optional[Window] = None
    #: the pinned Capacity Block of the reserved nodes (AWS), None = none pinned.
    capacity_block: Optional[CapacityBlockPin] = None
    #: declared work windows, (cron expression in UTC, minutes) each (gpulease/cron.py).
    schedule: tuple[tuple[str, int], ...] = ()
    #: the reaper does not act this many minutes before a declared window.
    schedule_lead_minutes: int = 60
    #: a new cluster cannot be marked idle this many minutes after its node group is created.
    first_job_grace_minutes: int = 120

    @property
    def steps(self) -> tuple[DemandStep, ...]:
        return self.demand or (DemandStep(self.gpus, self.hours_per_month),)

    @property
    def has_profile(self) -> bool:
        """True when the demand has more than one step (baseline plus burst)."""
        return len(self.steps) > 1

    def node_steps(self, gpus_per_node: int) -> tuple[NodeStep, ...]:
        """The demand steps as node counts on nodes of ``gpus_per_node`` GPUs (steps that own no
        node are left out; hours strictly decrease along the result)."""
        out, before = [], 0
        for i, st in enumerate(self.steps):
            upto = -(-st.gpus // gpus_per_node)
            if upto > before:
                out.append(NodeStep(i, before + 1, upto - before, st.hours_per_month))
                before = upto
        return tuple(out)

    @property
    def interruptible(self) -> bool:
        return self.checkpoint_minutes is not None

    @property
    def config_path(self) -> str:
        return f"gpulease:clusters[{self.index}]"


@dataclass(frozen=True)
class OwnedPool:
    """GPUs the organisation already owns (``gpulease:owned[index]``): what the pool holds,
    where, how jobs reach it, and what it costs (``gpulease.owned.cost`` prices it)."""

    index: int
    name: str
    gpu: str
    gpus: int
    gpus_per_node: int
    site: str
    #: kubernetes | slurm | ssh | none
    kind: str
    purchase_usd: float
    #: YYYY-MM-DD
    purchased_on: str
    depreciation_years: float
    power_kw_per_node: float
    usd_per_kwh: float
    colo_usd_per_month: float
    ops_usd_per_month: float
    available_hours_per_month: float = HOURS_PER_MONTH
    regions_equivalent: tuple[str, ...] = ()
    rdma: bool = False
    kube_context: Optional[str] = None

    @property
    def nodes(self) -> int:
        return self.gpus // self.gpus_per_node

    @property
    def config_path(self) -> str:
        return f"gpulease:owned[{self.index}]"


@dataclass(frozen=True)
class OwnedShare:
    """The part of a cluster's demand placed on an owned pool (``gpulease.policy.owned``;
    docs/owned.md): whole nodes of the pool, charged the pool's amortised $/GPU-hour for the
    GPU-hours of those nodes (never $0); the marginal figure (power only) is shown beside it."""

    pool: str
    site: str
    #: kubernetes | slurm | ssh | none (how jobs reach the pool)
    kind: str
    gpu: str
    gpus_per_node: int
    nodes: int
    #: the owned share of the demand: (GPUs, hours a month) per step, as configured
    steps: tuple[DemandStep, ...]
    #: GPU-hours a month of the share's whole nodes (nodes x gpus_per_node x hours per step)
    gpu_hours_per_month: float
    amortised_usd_per_gpu_hour: float
    marginal_usd_per_gpu_hour: float

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def monthly_usd(self) -> float:
        """What the plan charges the cluster for its owned share (amortised)."""
        return self.gpu_hours_per_month * self.amortised_usd_per_gpu_hour

    @property
    def marginal_monthly_usd(self) -> float:
        """What running the share adds to the organisation's bill (power only)."""
        return self.gpu_hours_per_month * self.marginal_usd_per_gpu_hour

    @property
    def monthly_money(self) -> Decimal:
        return money.usd(self.monthly_usd)

    def as_dict(self) -> dict:
        return {"pool": self.pool, "site": self.site, "kind": self.kind, "gpu": self.gpu,
                "gpus_per_node": self.gpus_per_node, "nodes": self.nodes, "gpus": self.gpus,
                "demand": [st.as_dict() for st in self.steps],
                "gpu_hours_per_month": round(self.gpu_hours_per_month, 4),
                "amortised_usd_per_gpu_hour": round(self.amortised_usd_per_gpu_hour, 6),
                "marginal_usd_per_gpu_hour": round(self.marginal_usd_per_gpu_hour, 6),
                "monthly_usd": money.json_number(self.monthly_money),
                "marginal_monthly_usd": money.json_number(self.marginal_monthly_usd)}


@dataclass(frozen=True)
class Placement:
    """Where one configured cluster runs (``gpulease.policy.owned``): its owned share (None:
    none) and the GPUs left for the cloud policy (0: nothing on cloud), with why."""

    #: the cluster as configured (its cloud decision, if any, carries the reduced spec)
    spec: ClusterSpec
    owned: Optional[OwnedShare]
    cloud_gpus: int
    #: one sentence per owned pool: why it took the cluster, part of it, or none of it
    why: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def share(self) -> str:
        """``owned`` (all on a pool), ``burst`` (part on a pool, the rest on cloud) or
        ``cloud``."""
        if self.owned is None:
            return "cloud"
        return "burst" if self.cloud_gpus else "owned"

    @property
    def owned_money(self) -> Decimal:
        return self.owned.monthly_money if self.owned is not None else money.ZERO

    def as_dict(self) -> dict:
        return {"cluster": self.name, "share": self.share, "configured_gpus": self.spec.gpus,
                "owned": self.owned.as_dict() if self.owned is not None else None,
                "cloud_gpus": self.cloud_gpus, "why": list(self.why)}


@dataclass(frozen=True)
class OwnedPoolUse:
    """One owned pool in the plan: its prices, what the clusters use and what sits idle.

    The idle line (docs/owned.md, "Idle capacity"): the GPU-hours no cluster uses still carry
    the pool's depreciation, colocation and operations, so the plan shows them as an "owned,
    idle" cost of ``idle_gpu_hours x (amortised - marginal)`` $/GPU-hour (an idle GPU draws no
    marginal power); clusters' shares plus the idle line add up to the pool's monthly cost at
    the power its clusters draw."""

    pool: str
    site: str
    kind: str
    gpu: str
    gpus: int
    gpus_per_node: int
    used_nodes: int
    gpu_hours_per_month: float
    used_gpu_hours: float
    amortised_usd_per_gpu_hour: float
    marginal_usd_per_gpu_hour: float
    depreciation_usd_per_month: float
    power_usd_per_month: float
    fixed_usd_per_month: float
    depreciated: bool
    as_of: str

    @property
    def idle_gpu_hours(self) -> float:
        return max(0.0, self.gpu_hours_per_month - self.used_gpu_hours)

    @property
    def idle_usd(self) -> float:
        return self.idle_gpu_hours * max(0.0, self.amortised_usd_per_gpu_hour -
                                         self.marginal_usd_per_gpu_hour)

    @property
    def idle_money(self) -> Decimal:
        return money.usd(self.idle_usd)

    def as_dict(self) -> dict:
        return {"name": self.pool, "site": self.site, "kind": self.kind, "gpu": self.gpu,
                "gpus": self.gpus, "gpus_per_node": self.gpus_per_node,
                "used_nodes": self.used_nodes,
                "gpu_hours_per_month": round(self.gpu_hours_per_month, 4),
                "used_gpu_hours": round(self.used_gpu_hours, 4),
                "idle_gpu_hours": round(self.idle_gpu_hours, 4),
                "amortised_usd_per_gpu_hour": round(self.amortised_usd_per_gpu_hour, 6),
                "marginal_usd_per_gpu_hour": round(self.marginal_usd_per_gpu_hour, 6),
                "depreciation_usd_per_month": money.json_number(self.depreciation_usd_per_month),
                "power_usd_per_month": money.json_number(self.power_usd_per_month),
                "fixed_usd_per_month": money.json_number(self.fixed_usd_per_month),
                "depreciated": self.depreciated, "as_of": self.as_of,
                "idle_usd": money.json_number(self.idle_money)}


@dataclass(frozen=True)
class Coverage:
    """Reserved nodes of a cluster an existing holding (``gpulease:inventory``) already pays
    for: no new commitment or reservation is bought for them; they are charged at the
    holding's effective rate, which is sunk (paid whether they run or not)."""

    holding: str
    kind: str
    #: the holding's purchase model (gpulease.purchase: commitment, reservation, ...)
    model: str
    nodes: int
    #: $/node-hour the covered nodes are charged (the holding's rate; None: unknown, the
    #: catalog's rate for the term is charged instead and the plan says so)
    usd_per_node_hour: Optional[float]
    end: Optional[str]
    why: str = ""
    #: what the covered nodes are charged a month (sunk)
    monthly_usd: float = 0.0

    def as_dict(self) -> dict:
        return {"holding": self.holding, "kind": self.kind, "model": self.model,
                "nodes": self.nodes, "usd_per_node_hour": self.usd_per_node_hour,
                "monthly_usd": money.json_number(self.monthly_usd),
                "end": self.end, "sunk": True, "why": self.why}


@dataclass(frozen=True)
class UnusedHolding:
    """An active holding nothing in the plan uses: money paid for nothing (a finding)."""

    holding: str
    kind: str
    model: str
    region: str
    what: str
    #: what it costs a month unused (None: the inventory gives no rate)
    monthly_waste_usd: Optional[float]
    end: Optional[str]
    #: what pointing a matching cluster at it would save a month, and which cluster
    saving_usd: Optional[float] = None
    cluster: Optional[str] = None

    def text(self) -> str:
        waste = ("of unknown cost (the inventory has no rate)" if self.monthly_waste_usd is None
                 else f"wasting {money.usd(self.monthly_waste_usd)} USD/month")
        out = (f"unused {self.kind} {self.holding} ({self.what}, {self.region or 'any region'}"
               f"{', until ' + self.end if self.end else ''}): nothing in the plan uses it, "
               f"{waste}")
        if self.cluster is not None and self.saving_usd is not None:
            out += (f"; pointing cluster {self.cluster} at it would save "
                    f"{money.usd(self.saving_usd)} USD/month")
        return out

    def as_dict(self) -> dict:
        return {"holding": self.holding, "kind": self.kind, "model": self.model,
                "region": self.region, "what": self.what,
                "monthly_waste_usd": money.json_number(self.monthly_waste_usd),
                "end": self.end, "cluster": self.cluster,
                "saving_usd": money.json_number(self.saving_usd), "text": self.text()}


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
    #: gpulease.policy.rules.PolicyRules (kept untyped here to avoid a dependency cycle).
    policy: object = None
    #: gpulease.reaper.settings.ReaperSettings or None.
    reaper: object = None
    #: gpulease.bootstrap.settings.BootstrapSettings or None.
    bootstrap: object = None
    #: file the spec came from (for messages), e.g. ``stacks/Pulumi.dev.yaml``.
    source: str = ""
    #: prefix of globally unique names (buckets).
    name_prefix: str = "gpulease"
    catalog_version: Optional[str] = None
    #: non-fatal findings of the config (``gpulease.errors.Finding``), shown by `gpulease plan`.
    warnings: tuple = ()
    #: clusters whose prepaid / committed resources the next `pulumi up` may replace or delete
    #: (``gpulease:allow_prepaid_replacement``); none by default.
    allow_prepaid_replacement: tuple[str, ...] = ()
    #: GPUs already owned (``gpulease:owned``), in config order.
    owned: tuple[OwnedPool, ...] = ()
    #: ``gpulease:inventory`` as written (None: the default inventory cache, if any).
    inventory: Optional[str] = None
    #: ``gpulease:gate`` as plain data (``gpulease.guardrails.gate``), None when not set.
    gate: Optional[dict] = None
    #: ``gpulease:buy_vs_rent`` (gpulease.config.schema.BuyVsRentConfig) or None.
    buy_vs_rent: object = None

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
        return {RESERVED: self.reserved, ON_DEMAND: self.on_demand, SPOT: self.spot}


@dataclass(frozen=True)
class CostBreakdown:
    """Monthly USD by component of the cost model (see README "Cost model")."""

    reserved_usd: float = 0.0
    on_demand_usd: float = 0.0
    spot_usd: float = 0.0
    spot_rework_usd: float = 0.0
    egress_usd: float = 0.0
    communication_usd: float = 0.0
    #: a work item's window purchase (Capacity Block fee, flex-start, calendar-mode
    #: reservation), per month of its run (docs/policy.md, "Windows").
    window_usd: float = 0.0

    @property
    def monthly_usd(self) -> float:
        """The policy's float total (comparisons between candidates); views show
        :attr:`monthly_money`."""
        return (self.reserved_usd + self.on_demand_usd + self.spot_usd + self.spot_rework_usd
                + self.egress_usd + self.communication_usd + self.window_usd)

    def amount(self, key: str) -> Decimal:
        """One component (``"reserved_usd"``, ...) as money: converted once at the ledger
        boundary (``gpulease.money.usd``)."""
        return money.usd(getattr(self, key))

    @property
    def monthly_money(self) -> Decimal:
        """The total as money: the sum of the converted components (what the resources that
        carry them add up to in the ledger, to the cent)."""
        return sum((self.amount(k) for k in COST_KEYS), money.ZERO)

    def as_dict(self) -> dict:
        d = {k: money.json_number(self.amount(k)) for k in COST_KEYS}
        d["monthly_usd"] = money.json_number(self.monthly_money)
        return d


#: the components of a CostBreakdown, in the order views list them.
COST_KEYS = ("reserved_usd", "on_demand_usd", "spot_usd", "spot_rework_usd", "egress_usd",
             "communication_usd", "window_usd")


@dataclass(frozen=True)
class NodeBlock:
    """Consecutive nodes of a decided cluster (in node order: most hours first) that run the same
    hours and are bought the same way, with what they cost a month.

    ``costs`` is the block's share of the cluster's cost: its reserved / on-demand / spot nodes,
    the rework its spot nodes' interruptions cause (in a gang: to every node running with them),
    and its share of the TCP communication overhead; egress stays with the cluster.
    """

    first: int
    nodes: int
    hours_per_month: float
    purchase: str
    part: str = "baseline"
    step: int = 0
    costs: CostBreakdown = CostBreakdown()

    def as_dict(self) -> dict:
        return {"first_node": self.first, "nodes": self.nodes,
                "hours_per_month": self.hours_per_month, "purchase": self.purchase,
                "part": self.part, "step": self.step,
                "monthly_usd": money.json_number(self.costs.monthly_money)}


@dataclass(frozen=True)
class DemandPart:
    """The baseline or the burst of a decided cluster: its nodes, how they are bought, the hours
    each block runs and what the part costs a month (egress stays with the cluster)."""

    part: str
    blocks: tuple[NodeBlock, ...]

    @property
    def nodes(self) -> int:
        return sum(b.nodes for b in self.blocks)

    @property
    def purchase(self) -> PurchaseMix:
        counts = {RESERVED: 0, ON_DEMAND: 0, SPOT: 0}
        for b in self.blocks:
            counts[b.purchase] += b.nodes
        return PurchaseMix(**counts)

    @property
    def costs(self) -> CostBreakdown:
        keys = ("reserved_usd", "on_demand_usd", "spot_usd", "spot_rework_usd",
                "communication_usd", "window_usd")
        return CostBreakdown(**{k: sum(getattr(b.costs, k) for b in self.blocks) for k in keys})

    @property
    def node_hours(self) -> float:
        """Node-hours a month the part's nodes run (reserved ones are billed 730 h anyway)."""
        return sum(b.nodes * b.hours_per_month for b in self.blocks)

    def as_dict(self) -> dict:
        return {"part": self.part, "nodes": self.nodes, "purchase": self.purchase.as_dict(),
                "node_hours": round(self.node_hours, 2),
                "blocks": [b.as_dict() for b in self.blocks],
                "costs": self.costs.as_dict(),
                "monthly_usd": money.json_number(self.costs.monthly_money)}


@dataclass(frozen=True)
class TermOption:
    """What one commitment term would cost a cluster on its chosen offering, over the horizon.

    ``purchase``: the blend that is cheapest over the horizon with this term's rates;
    ``monthly_usd``: its bill per month; ``horizon_monthly_usd``: the average per month over the
    horizon, counting the months a commitment bills after the horizon ends;
    ``committed_usd``: the total the commitment locks in (reserved nodes at a commitment price x
    the months billed); ``lock_in_months``: the months billed (0 = nothing locked in).
    ``unavailable``: why the term cannot be used (None = it can).
    """

    term: str
    purchase: PurchaseMix
    monthly_usd: float
    horizon_monthly_usd: float
    committed_usd: float
    lock_in_months: int
    unavailable: Optional[str] = None

    def as_dict(self) -> dict:
        return {"term": self.term, "purchase": self.purchase.as_dict(),
                "monthly_usd": money.json_number(self.monthly_usd),
                "horizon_monthly_usd": money.json_number(self.horizon_monthly_usd),
                "committed_usd": money.json_number(self.committed_usd),
                "lock_in_months": self.lock_in_months, "unavailable": self.unavailable}


@dataclass(frozen=True)
class WindowDecision:
    """How a cluster's window is bought (``gpulease.policy.window_choice``): the model, when its
    run is, what it costs in all and per month, the quote the price comes from, and every model
    priced for the window (``options``: WindowOption.as_dict + ``allowed`` by the priority band).
    """

    window: Window
    model: str
    start: _dt.datetime
    end: _dt.datetime
    run_hours: float
    total_usd: float
    monthly_usd: float
    months: int
    nodes: int
    billed_node_hours: float
    estimated: bool
    quote: Optional[dict]
    options: tuple
    judged_at: _dt.datetime
    lock_in_months: int = 0
    #: the part a Capacity Block cannot hold, on another model (checkpointed work): {model,
    #: hours, usd, start, end, node_hour_usd}; None = the block holds the run.
    remainder: Optional[dict] = None
    #: the capacity bought and its time (a block, a calendar-mode reservation, a reservation or
    #: flex-start run): its nodes are billed until ``bought_until`` (C3:
    #: ``gpulease-billed-until``); None for on-demand, spot and commitments.
    bought_from: Optional[_dt.datetime] = None
    bought_until: Optional[_dt.datetime] = None
    #: the Capacity Block's instance count as AWS sells it (``gpulease.quotes.CB_INSTANCE_
    #: COUNTS``; above ``nodes`` when rounded up); () for other models.
    blocks: tuple = ()

    def as_dict(self) -> dict:
        return {**self.window.as_dict(), "model": self.model, "start": format_utc(self.start),
                "end": format_utc(self.end), "run_hours": round(self.run_hours, 4),
                "total_usd": money.json_number(self.total_usd),
                "monthly_usd": money.json_number(self.monthly_usd),
                "months": self.months, "nodes": self.nodes,
                "billed_node_hours": round(self.billed_node_hours, 4),
                "estimated": self.estimated, "quote": self.quote,
                "judged_at": format_utc(self.judged_at), "lock_in_months": self.lock_in_months,
                "bought_from": format_utc(self.bought_from),
                "bought_until": format_utc(self.bought_until),
                "remainder": self.remainder, "blocks": list(self.blocks),
                "options": list(self.options)}


@dataclass(frozen=True)
class Alternative:
    cloud: str
    region: str
    instance_type: str
    purchase: PurchaseMix
    monthly_usd: Optional[float]
    rejected_because: str
    #: the zone this alternative would land in (None = the offering's default zone).
    zone: Optional[str] = None


class Deferred:
    """A value computed when it is first read (:class:`Lazy`): ``Deferred(fn)`` calls ``fn()``
    once. The policy defers what only a person reads (a decision's rationale, alternatives and
    commitment terms): a plan or a program that never shows them never builds them."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn


class Lazy:
    """A dataclass field that may be given a :class:`Deferred`: reading it computes the value
    once and keeps it, so every reader (``==``, ``repr``, ``dataclasses.replace`` / ``asdict``,
    views) sees the value itself. ``default``: the field's default (``Lazy.REQUIRED``: none)."""

    REQUIRED = object()

    def __init__(self, default=REQUIRED):
        self.default = default

    def __set_name__(self, owner, name):
        # the instance keeps the value (or the Deferred) under the field's own name, so
        # ``type(d)(**d.__dict__)`` still copies a decision; this data descriptor is read first
        self.slot = name

    def __get__(self, obj, objtype=None):
        if obj is None:
            if self.default is Lazy.REQUIRED:
                raise AttributeError(self.slot)   # dataclasses: the field has no default
            return self.default
        value = obj.__dict__[self.slot]
        if type(value) is Deferred:
            value = value.fn()
            obj.__dict__[self.slot] = value
        return value

    def __set__(self, obj, value):   # dataclass __init__ (object.__setattr__) only: frozen
        obj.__dict__[self.slot] = value

    @staticmethod
    def state(obj) -> dict:
        """``obj``'s ``__dict__`` with every Lazy field computed: what pickling and copying keep
        (a Deferred holds everything that would build the value, the policy's whole context)."""
        out = dict(obj.__dict__)
        for klass in type(obj).__mro__:
            for name, attr in vars(klass).items():
                if isinstance(attr, Lazy):
                    out[attr.slot] = getattr(obj, name)
        return out


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
    #: why this choice (may be given Deferred: built when first read)
    rationale: str = Lazy()
    #: what else was priced and why it lost (may be given Deferred)
    alternatives: tuple[Alternative, ...] = Lazy(())
    #: the one zone the cluster lands in (AWS zone ID like use1-az4, GCP zone like
    #: us-central1-b); always set by the policy: the cheapest spot zone for spot clusters.
    zone: Optional[str] = None
    commitment_term: str = "1y"
    distributed: bool = False
    #: the nodes by demand step and purchase model (empty = derived: one step, by purchase
    #: model in the order reserved, on-demand, spot; see ``node_blocks``).
    blocks: tuple[NodeBlock, ...] = ()
    #: what each commitment term would cost over the horizon (``gpulease explain``; may be
    #: given Deferred).
    terms: tuple[TermOption, ...] = Lazy(())
    commitment_horizon_months: int = 12
    #: total the decision's commitment locks in (reserved nodes at a commitment price x months).
    committed_usd: float = 0.0
    lock_in_months: int = 0
    #: what the cost model assumed about spot interruptions of the offering (rate, basis,
    #: Advisor band / placement score / GCP advice, as of, source); None = no spot price.
    spot_risk: Optional[dict] = None
    #: how the cluster's window is bought (None = a monthly load).
    window: Optional[WindowDecision] = None
    #: instance types its node group may launch, the decided type first, then equivalents by
    #: on-demand price (``gpulease.policy.fallbacks``); empty = the decided type only.
    fallback_types: tuple[str, ...] = ()
    #: where the cluster as configured runs when part of it is on an owned pool (its ``spec``
    #: is then the burst: the GPUs left for the cloud); None = all on cloud.
    placement: Optional[Placement] = None
    #: reserved nodes existing holdings already pay for (no new commitment or reservation).
    coverage: tuple[Coverage, ...] = ()

    def __getstate__(self) -> dict:
        return Lazy.state(self)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def covered_nodes(self) -> int:
        """Reserved nodes existing holdings cover (no new purchase for them)."""
        return sum(c.nodes for c in self.coverage)

    @property
    def buys_reservation(self) -> bool:
        """True when the decision needs a NEW commitment/reservation: reserved nodes that no
        existing holding covers."""
        return self.purchase.reserved > self.covered_nodes

    @property
    def price_disagreements(self) -> tuple["PriceCheck", ...]:
        """Prices this decision pays whose sources disagree beyond PRICE_DISAGREEMENT_PCT."""
        return self.offering.disagreements(set(self.price_columns))

    @property
    def price_columns(self) -> tuple[str, ...]:
        """The catalog price columns of its offering this decision pays: the commitment term's
        (or on-demand, for a plain reservation), on-demand, spot."""
        p, o, cols = self.purchase, self.offering, []
        if p.reserved:
            cols.append(f"commit_{self.commitment_term}" if o.is_commitment(self.commitment_term)
                        else ON_DEMAND)
        if p.on_demand and ON_DEMAND not in cols:
            cols.append(ON_DEMAND)
        if p.spot:
            cols.append(SPOT)
        return tuple(cols)

    @property
    def node_blocks(self) -> tuple[NodeBlock, ...]:
        """The decision's blocks; for a decision built without them (one demand step), one block
        per purchase model, in node order reserved, on-demand, spot, costed by model."""
        if self.blocks:
            return self.blocks
        c, out, first = self.costs, [], 1
        for model in NODE_MODELS:
            n = getattr(self.purchase, model)
            if not n:
                continue
            share = CostBreakdown(**({"reserved_usd": c.reserved_usd} if model == RESERVED else
                                     {"on_demand_usd": c.on_demand_usd} if model == ON_DEMAND
                                     else {"spot_usd": c.spot_usd,
                                           "spot_rework_usd": c.spot_rework_usd}))
            out.append(NodeBlock(first=first, nodes=n, hours_per_month=self.spec.hours_per_month,
                                 purchase=model, costs=share))
            first += n
        return tuple(out)

    @property
    def parts(self) -> tuple[DemandPart, ...]:
        """The baseline and (with a demand profile) the burst, in that order."""
        out = []
        for part in DEMAND_PARTS:
            blocks = tuple(b for b in self.node_blocks if b.part == part)
            if blocks:
                out.append(DemandPart(part, blocks))
        return tuple(out)

    @property
    def baseline_nodes(self) -> int:
        """Nodes of the first demand step: the floor idle capacity is never scaled below."""
        return sum(b.nodes for b in self.node_blocks if b.part == "baseline")

    @property
    def standing_nodes(self) -> int:
        """Nodes started when the cluster is created: the baseline, and every reserved node
        (billed every hour whether it runs or not)."""
        return sum(b.nodes for b in self.node_blocks
                   if b.part == "baseline" or b.purchase == RESERVED)

    @property
    def cloud(self) -> str:
        return self.offering.cloud

    @property
    def region(self) -> str:
        return self.offering.region

    @property
    def monthly_usd(self) -> float:
        return self.costs.monthly_usd

    @property
    def monthly_money(self) -> Decimal:
        """What the cluster costs a month as every view shows it (``CostBreakdown``)."""
        return self.costs.monthly_money


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
    """How a dataset is stored: the lifecycle the policy chose and what it costs a month.

    ``lifecycle`` is the StorageSpec the components build bucket lifecycle rules from: the
    stack's entry with the tier thresholds the policy chose (a dataset that clusters read
    every month is not aged into classes where reading it is dear).
    """

    spec: StorageSpec
    cloud: str
    region: str
    tiers: tuple[TierShare, ...]
    #: the chosen lifecycle (None = the stack's own thresholds, ``spec``).
    chosen: Optional[StorageSpec] = None
    #: whole-dataset reads a month by clusters (staged copies and direct reads).
    reads_per_month: float = 0.0
    #: monthly retrieval fees for those reads, by the tier shares.
    retrieval_usd: float = 0.0
    #: monthly early-deletion (minimum storage duration) charges of the lifecycle.
    early_delete_usd: float = 0.0
    #: why this lifecycle (one sentence for the plan and explain).
    basis: str = ""
    #: monthly cost of the lifecycle the stack configured (storage + retrieval + early
    #: deletion), shown beside the chosen one; None = not priced.
    configured_usd: Optional[float] = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def lifecycle(self) -> StorageSpec:
        return self.chosen or self.spec

    @property
    def storage_usd(self) -> float:
        return sum(t.monthly_usd for t in self.tiers)

    @property
    def monthly_usd(self) -> float:
        return self.storage_usd + self.retrieval_usd + self.early_delete_usd

    @property
    def storage_money(self) -> Decimal:
        """The tiers as money: each tier converted once (``gpulease.money.usd``), then added."""
        return money.total(t.monthly_usd for t in self.tiers)

    @property
    def monthly_money(self) -> Decimal:
        """What the dataset costs a month as every view shows it (its bucket carries it)."""
        return self.storage_money + money.usd(self.retrieval_usd) + money.usd(
            self.early_delete_usd)


@dataclass(frozen=True)
class EnvironmentDecision:
    stack: StackSpec
    clusters: tuple[ClusterDecision, ...]
    storage: tuple[StorageDecision, ...]
    catalog_version: str
    catalog_as_of: str
    #: (cluster name, CapacityBlockPin) of window clusters whose pinned block had ended when the
    #: decision was made: retired - nothing declared, charged or bought (docs/policy.md,
    #: "After the window")
    retired: tuple = ()
    #: every configured cluster's placement when the stack has owned pools (config order)
    placements: tuple[Placement, ...] = ()
    #: the stack's owned pools: prices, use and the idle line
    pools: tuple[OwnedPoolUse, ...] = ()
    #: active holdings of the inventory nothing in the plan uses (findings)
    unused_holdings: tuple[UnusedHolding, ...] = ()
    #: the inventory the decision read: (where from, generated_at), None = none
    inventory: Optional[tuple[str, str]] = None

    def placement(self, name: str) -> Optional[Placement]:
        for p in self.placements:
            if p.name == name:
                return p
        return None

    @property
    def owned_usd(self) -> float:
        """What the owned pools cost the plan a month: the clusters' shares (amortised) and
        each pool's idle line."""
        return sum(p.owned.monthly_usd for p in self.placements if p.owned is not None) + \
            sum(u.idle_usd for u in self.pools)

    @property
    def owned_money(self) -> Decimal:
        return (sum((p.owned_money for p in self.placements), money.ZERO)
                + sum((u.idle_money for u in self.pools), money.ZERO))

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
        return sum(c.monthly_usd for c in self.clusters) + \
            sum(s.monthly_usd for s in self.storage) + self.owned_usd

    @property
    def monthly_money(self) -> Decimal:
        """Clusters, storage and owned pools as money (shared infrastructure such as NAT
        gateways is priced by the program's cost ledger only: `gpulease plan`'s total
        includes it)."""
        return (sum((c.monthly_money for c in self.clusters), money.ZERO)
                + sum((s.monthly_money for s in self.storage), money.ZERO) + self.owned_money)
