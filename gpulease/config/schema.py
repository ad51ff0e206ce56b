"""The stack config's schema: the pydantic models of every `gpulease:*` key (types, bounds,
descriptions: docs/config.md is generated from them) and the patterns names and ids follow."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, field_validator,
                      model_validator)

from gpulease import clock
from gpulease import cron as rs
from gpulease.bootstrap.settings import BootstrapSettings
# GCP project ids: the pattern lives with the GCP cloud object (the GCE reservation provider
# checks ids with it too)
from gpulease.clouds.gcp.cloud import GCP_PROJECT_PATTERN
from gpulease.errors import did_you_mean
from gpulease.inputs import MAX_USD
from gpulease.model import (HOURS_PER_MONTH, MAX_CHECKPOINT_MINUTES, MAX_CLUSTER_GPUS,
                            MAX_IDLE_MINUTES, CloudSpec)
from gpulease.policy.rules import PolicyRules
from gpulease.quotes import CB_MAX_INSTANCES
from gpulease.reaper.settings import ReaperSettings

NAMESPACE = "gpulease"
#: names of clusters and storage entries: they become parts of cloud resource names (GCE names
#: end with a letter or digit, so no trailing '-').
NAME_PATTERN = r"^[a-z]([a-z0-9-]{0,28}[a-z0-9])?$"
_NAME_RULE = ("lowercase letters, digits and '-', starting with a letter, not ending with '-', "
              "at most 30 characters")
#: the environment name goes into every tag, label, bucket and service-account name.
ENVIRONMENT_PATTERN = NAME_PATTERN
ENVIRONMENT_RULE = _NAME_RULE
#: owner and cost center are stamped as AWS tag values and GCP label values as written: the
#: stricter GCP label rule (lowercase, [a-z0-9_-], at most 63) keeps both clouds identical.
LABEL_VALUE_PATTERN = r"^[a-z0-9_-]{1,63}$"
_LABEL_VALUE_RULE = ("1-63 lowercase letters, digits, '_' or '-' (a GCP label value; AWS tags "
                     "carry the same text)")
#: EC2 resource ids: prefix, '-', 8 or 17 hex digits.
VPC_ID_PATTERN = r"^vpc-([0-9a-f]{8}|[0-9a-f]{17})$"
SUBNET_ID_PATTERN = r"^subnet-([0-9a-f]{8}|[0-9a-f]{17})$"
#: sanity bounds of a stack file (beyond them the input is a mistake, not a plan); the generic
#: ones (size, depth, values, magnitude, money) are the input boundary's, gpulease/inputs.py.
MAX_LIFECYCLE_DAYS = 100 * 365
#: most steps a demand profile may have: a load-duration curve read off a usage graph needs a
#: few; the policy prices (steps + 1)(steps + 2) / 2 purchase blends per offering.
MAX_DEMAND_STEPS = 8
#: longest work item a window may hold: a year (the longest Capacity Block is 182 days, a
#: calendar-mode reservation 90; longer work is a monthly load).
MAX_WINDOW_HOURS = 366 * 24


class _Strict(BaseModel):
    # allow_inf_nan=False: NaN or Infinity in a price, size or budget is a mistake, never a plan.
    # strict=True: a value has the JSON type of its key -- YAML's true/false is not a number,
    # 16.0 is not a count, "16" is not a number. (Nested keys keep their types through
    # `pulumi up`: Pulumi passes a structured key as JSON.)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


class AwsCloudConfig(_Strict):
    regions: list[str] = Field(..., min_length=1, description="AWS regions gpulease may use.")
    quota_gpus: dict[str, Annotated[int, Field(ge=0, le=MAX_CLUSTER_GPUS)]] = Field(
        default_factory=dict, description="GPU quota per region (absent region = unlimited).")
    vpc_id: Optional[str] = Field(None, pattern=VPC_ID_PATTERN,
                                  description="Existing VPC to use instead of creating one.")
    subnet_ids: list[Annotated[str, Field(pattern=SUBNET_ID_PATTERN)]] = Field(
        default_factory=list, description="Existing private subnets (with vpc_id).")
    capacity_reservations: Optional[bool] = Field(
        None, description="Create On-Demand Capacity Reservations for reserved nodes. "
                          "Default: yes, except in dev stacks.")
    capacity_blocks: bool = Field(False, description="Use EC2 Capacity Blocks for ML for the "
                                                     "reserved part instead of ODCRs.")
    local_zones: list[str] = Field(
        default_factory=list,
        description="Regions (of `regions`) whose AWS Local Zones (e.g. usw2-lax1-az1) clusters "
                    "may land in. Off by default: a Local Zone is a metro extension with a "
                    "smaller service set and capacity, and must be opted into in the account "
                    "(ModifyAvailabilityZoneGroup) before use; docs/policy.md 'Zones'.")

    def spec(self, bad) -> CloudSpec:
        """The stack's AWS, after the checks across this section's fields (subnets need their
        VPC; Local Zones only in listed regions); ``bad(path, message)`` records a finding."""
        if self.subnet_ids and not self.vpc_id:
            bad("gpulease:clouds.aws.subnet_ids", "subnet_ids need vpc_id")
        for k, r in enumerate(self.local_zones):
            if r not in self.regions:
                bad(f"gpulease:clouds.aws.local_zones[{k}]",
                    f'"{r}" is not in gpulease:clouds.aws.regions'
                    f"{did_you_mean(r, self.regions)}; list regions whose Local Zones may "
                    "be used")
        return CloudSpec(
            cloud="aws", regions=tuple(self.regions), quota_gpus=dict(self.quota_gpus),
            network=self.vpc_id, subnets=tuple(self.subnet_ids),
            capacity_reservations=self.capacity_reservations,
            capacity_blocks=self.capacity_blocks,
            local_zone_regions=tuple(self.local_zones))


class GcpCloudConfig(_Strict):
    project: str = Field(..., pattern=GCP_PROJECT_PATTERN, description="GCP project id.")
    regions: list[str] = Field(..., min_length=1, description="GCP regions gpulease may use.")
    quota_gpus: dict[str, Annotated[int, Field(ge=0, le=MAX_CLUSTER_GPUS)]] = Field(
        default_factory=dict, description="GPU quota per region.")
    network: Optional[str] = Field(None, description="Existing VPC network (self link or name).")
    subnetwork: Optional[str] = Field(None, description="Existing subnetwork (with network).")
    spot_termination_action: Literal["STOP", "DELETE"] = Field(
        "DELETE", description="What happens to a preempted Spot VM.")
    ssh_via_iap: bool = Field(False, description="Allow SSH from IAP's range only "
                                                 "(35.235.240.0/20).")

    def spec(self, bad) -> CloudSpec:
        """The stack's GCP, after the checks across this section's fields (a subnetwork needs
        its network); ``bad(path, message)`` records a finding."""
        if self.subnetwork and not self.network:
            bad("gpulease:clouds.gcp.subnetwork", "subnetwork needs network")
        return CloudSpec(
            cloud="gcp", regions=tuple(self.regions), quota_gpus=dict(self.quota_gpus),
            project=self.project, network=self.network,
            subnets=(self.subnetwork,) if self.subnetwork else (),
            spot_termination_action=self.spot_termination_action,
            ssh_via_iap=self.ssh_via_iap)


class CloudsConfig(_Strict):
    aws: Optional[AwsCloudConfig] = Field(None, description="AWS; left out = not used.")
    gcp: Optional[GcpCloudConfig] = Field(None, description="GCP; left out = not used.")


class StorageConfig(_Strict):
    name: str = Field(..., pattern=NAME_PATTERN, description="Storage name (clusters refer to it).")
    size_tb: float = Field(..., gt=0, le=1_000_000, description="Dataset size in TB (10^12 bytes).")
    home: str = Field(..., description="Where the data lives: `<cloud>:<region>`, e.g. "
                                       "`gcp:europe-west4`.")
    warm_after_days: Optional[int] = Field(30, gt=0, le=MAX_LIFECYCLE_DAYS,
        description="Age in days at which objects move to the warm class (S3 STANDARD_IA / GCS "
                    "NEARLINE); null = never.")
    cold_after_days: Optional[int] = Field(90, gt=0, le=MAX_LIFECYCLE_DAYS,
        description="Age in days of the cold class (S3 GLACIER_IR / GCS COLDLINE); null = never.")
    archive_after_days: Optional[int] = Field(365, gt=0, le=MAX_LIFECYCLE_DAYS,
        description="Age in days of the archive class (S3 DEEP_ARCHIVE / GCS ARCHIVE); null = "
                    "never.")
    age_horizon_days: int = Field(365, gt=0, le=MAX_LIFECYCLE_DAYS,
        description="Assumed age spread of objects, for the per-tier cost estimate.")
    noncurrent_days: int = Field(30, gt=0, le=MAX_LIFECYCLE_DAYS,
        description="Keep old checkpoint versions this long.")


class DemandStepConfig(_Strict):
    """One step of a demand profile: "at least `gpus` GPUs are busy `hours_per_month` hours a
    month", read off a usage graph. Steps go up in GPUs and down in hours; the first is the
    baseline, the later ones the burst (docs/policy.md, "Demand profiles")."""

    gpus: int = Field(..., gt=0, le=MAX_CLUSTER_GPUS,
                      description="GPUs busy at least this step's hours (more than the step "
                                  "before).")
    hours_per_month: float = Field(..., gt=0, le=HOURS_PER_MONTH,
                                   description="Hours a month at least this step's GPUs are "
                                               "busy (fewer than the step before; 730 = always).")


#: EC2 Capacity Block offering ids: "cb-" and 17 hexadecimal digits.
CAPACITY_BLOCK_ID_PATTERN = r"^cb-[0-9a-f]{17}$"


def _time(value: str) -> str:
    """A pin's time: read by gpulease.clock.parse_time (RFC 3339 with a zone, a calendar time,
    inside the years gpulease accepts), kept in the one UTC form (clock.format_utc)."""
    return clock.format_utc(clock.parse_time(value))


#: A time as RFC 3339 with a zone (quoted in YAML: unquoted, YAML reads it as a date object).
Rfc3339Time = Annotated[str, AfterValidator(_time)]
AWS_ZONE_PATTERN = r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$"


class CapacityBlockConfig(_Strict):
    """A Capacity Block for ML pinned for the cluster's reserved nodes (AWS): chosen once from a
    quote (`gpulease plan` prints the lines to add), then used verbatim by every later run, and
    bought only with ``purchase_approved: true`` (docs/deploy.md, "Capacity Blocks")."""

    offering_id: str = Field(..., pattern=CAPACITY_BLOCK_ID_PATTERN,
                             description="The quote's CapacityBlockOfferingId (`cb-` and 17 hex "
                                         "digits); one cluster's only: no two clusters pin one "
                                         "offering.")
    region: str = Field(..., description="AWS region of the offering: in "
                                         "gpulease:clouds.aws.regions and the cluster's `regions`,"
                                         " and the region the plan puts the cluster in (else "
                                         "exit 4).")
    availability_zone: str = Field(..., pattern=AWS_ZONE_PATTERN,
                                   description="The offering's Availability Zone (the block's "
                                               "nodes launch only there).")
    instance_type: str = Field(..., description="Instance type of the offering: one with the "
                                                "cluster's `gpu`, and the cluster's decided "
                                                "instance type (else exit 4).")
    instance_count: int = Field(..., ge=1, le=CB_MAX_INSTANCES,
                                description="Instances in the block, a size AWS sells (1-64): "
                                            "the cluster's reserved nodes (a window's block: "
                                            "its count as the plan prints it).")

    @field_validator("instance_count")
    @classmethod
    def _sold_size(cls, v: int) -> int:
        from gpulease.quotes import CB_INSTANCE_COUNTS, valid_block_count

        if not valid_block_count(v):
            raise ValueError(f"{v} is not a Capacity Block size AWS sells ("
                             + ", ".join(map(str, CB_INSTANCE_COUNTS)) + ")")
        return v
    start: Rfc3339Time = Field(..., description="Start of the block, RFC 3339 with a zone, "
                                                'quoted ("2026-12-04T11:30:00Z"); with a '
                                                "`window`, not before its earliest_start and "
                                                "before its deadline.")
    end: Rfc3339Time = Field(..., description="End of the block: 1-14 days after start in "
                                              "whole days, or 7-day steps up to 182 days; with a "
                                              "`window`, no whole day past its deadline (the next "
                                              "shorter block would not reach it).")
    upfront_fee_usd: float = Field(..., ge=0, le=MAX_USD, allow_inf_nan=False,
                                   description="The quote's upfront fee in USD (paid once at "
                                               "purchase, never refunded).")
    quoted_at: Optional[Rfc3339Time] = Field(None, description="When the quote was read (RFC "
                                                               "3339 with a zone).")
    purchase_approved: bool = Field(False, description="Explicit approval to buy this offering "
                                                       "with the next `pulumi up`; without it "
                                                       "the plan stops with exit 4.")


class WindowConfig(_Strict):
    """When a cluster's work can run: `duration_hours` of work on all its GPUs, starting at or
    after `earliest_start`, done by `deadline` (docs/policy.md, "Windows"). The policy prices
    the work item once over the window - on-demand, spot with its rework, a Capacity Block, a
    flex-start run, a calendar-mode reservation, a commitment - and keeps the cheapest the
    priority allows."""

    earliest_start: str = Field(..., description="RFC 3339 time the work may start at the "
                                                 "earliest, e.g. `2027-01-04T00:00:00Z` (a bare "
                                                 "date is midnight UTC).")
    deadline: str = Field(..., description="RFC 3339 time by which the work must be done.")
    duration_hours: float = Field(..., gt=0, le=MAX_WINDOW_HOURS,
                                  description="Hours of work on all the cluster's GPUs (at most "
                                              f"{MAX_WINDOW_HOURS // 24} days).")


class ScheduleWindowConfig(_Strict):
    """A declared work window: it starts whenever `cron` matches (UTC) and lasts `minutes`.
    The reaper does not act on the cluster from `schedule_lead_minutes` before a window's start
    until its end (docs/reaper.md, "Declared schedules, the first-job grace, prepaid groups:
    holds")."""

    cron: str = Field(..., description='Five-field cron expression in UTC, e.g. "0 2 * * *" '
                                       '(daily at 02:00) or "0 9 * * mon-fri"; one that can '
                                       'never fall due ("0 0 30 2 *") is refused.')
    minutes: int = Field(..., gt=0, le=rs.MAX_WINDOW_MINUTES,
                         description="Length of the window in minutes (at most a week).")

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str) -> str:
        try:
            return rs.parse_cron(v).text
        except rs.CronError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _fits_a_label(self) -> "ScheduleWindowConfig":
        try:
            rs.window(self.cron, self.minutes)
        except rs.CronError as exc:
            raise ValueError(str(exc)) from None
        return self


class ClusterConfig(_Strict):
    name: str = Field(..., pattern=NAME_PATTERN, description="Cluster name.")
    gpu: str = Field(..., description="GPU model as the catalog names it, e.g. H100, A100-80GB, L4 "
                                      "(`gpulease catalog list`).")
    gpus: Optional[int] = Field(None, gt=0, le=MAX_CLUSTER_GPUS,
                                description="Total GPUs in the cluster (the peak); nodes = GPUs / "
                                            "GPUs per node, rounded up. Required without demand "
                                            "(and with a window); with demand it may be left out "
                                            "or must equal the last step's gpus.")
    hours_per_month: Optional[float] = Field(None, gt=0, le=HOURS_PER_MONTH,
                                             description="Hours per month all the cluster's GPUs "
                                                         "run (730 = always on); decides whether a"
                                                         " commitment pays. Required without "
                                                         "demand or window; left out with demand "
                                                         "(each step has its own hours) and with "
                                                         "a window.")
    demand: list[DemandStepConfig] = Field(
        default_factory=list, max_length=MAX_DEMAND_STEPS,
        description="Demand profile instead of gpus + hours_per_month: a load-duration curve of "
                    f"up to {MAX_DEMAND_STEPS} steps, e.g. `[{{gpus: 16, hours_per_month: 730}}, "
                    "{gpus: 64, hours_per_month: 200}]` = 16 GPUs always busy, 64 for 200 h a "
                    "month. The policy buys each step's nodes separately: commitment for the "
                    "baseline, on-demand or spot for the burst.")
    priority: int = Field(..., ge=1, le=10, description="1 (lowest) .. 10 (highest): above 8 needs "
                                                        "guaranteed (reserved) capacity, below 5 "
                                                        "may run on spot (gpulease:policy).")
    checkpoint_minutes: Optional[int] = Field(
        None, gt=0, le=MAX_CHECKPOINT_MINUTES,
        description="Checkpoint interval in minutes; absent = not interruptible (never spot).")
    distributed: Optional[bool] = Field(None, description="One job across all nodes (needs an RDMA "
                                                          "fabric past one node). Default: more "
                                                          "than one node.")
    dataset: Optional[str] = Field(None, description="Name of a gpulease:storage entry the cluster "
                                                     "reads; away from its home the data is staged "
                                                     "monthly (egress charged).")
    regions: list[str] = Field(default_factory=list,
                               description="Residency allow-list: exact regions (`europe-west4`) or"
                                           " prefixes (`europe-`, `eu-`).")
    idle_minutes: int = Field(60, gt=0, le=MAX_IDLE_MINUTES,
                              description="Minutes of idle GPUs before the reaper marks the cluster"
                                          " (at most a week).")
    window: Optional[WindowConfig] = Field(
        None, description="A work item with a window instead of a monthly load: `{earliest_start, "
                          "deadline, duration_hours}`; then `gpus` is required and "
                          "`hours_per_month` / `demand` are left out (docs/policy.md, "
                          "\"Windows\").")
    schedule: list[ScheduleWindowConfig] = Field(
        default_factory=list, max_length=rs.MAX_WINDOWS,
        description="When work is due, as windows `{cron, minutes}` (UTC), e.g. `[{cron: \"0 2 * * "
                    "*\", minutes: 120}]` for a nightly job at 02:00: the reaper never scales the "
                    "cluster from `schedule_lead_minutes` before a window until its end. Carried as "
                    "tags/labels gpulease-schedule-0..3.")
    schedule_lead_minutes: int = Field(
        rs.DEFAULT_LEAD_MINUTES, ge=0, le=rs.MAX_LEAD_MINUTES,
        description="How long before a declared window the reaper stops acting on the cluster.")
    first_job_grace_minutes: int = Field(
        rs.DEFAULT_FIRST_JOB_GRACE_MINUTES, ge=0, le=rs.MAX_FIRST_JOB_GRACE_MINUTES,
        description="How long after its node group is created a cluster waits for its first job "
                    "before the reaper may mark it idle.")
    template: Optional[str] = Field(None, description="Force a cluster template "
                                                      "(templates/clusters/) instead of the "
                                                      "policy's choice.")
    capacity_block: Optional[CapacityBlockConfig] = Field(
        None, description="The pinned EC2 Capacity Block of the reserved nodes (with "
                          "gpulease:clouds.aws.capacity_blocks): later runs use it verbatim.")


#: a calendar date (a purchase date), ISO 8601.
DATE_PATTERN = r"^\d{4}-\d{2}-\d{2}$"
#: what an owned pool runs its jobs with (only a `kubernetes` pool gets declared resources).
OWNED_KINDS = ("kubernetes", "slurm", "ssh", "none")
#: longest straight-line depreciation a pool may use (GPU servers are refreshed in 3-5 years).
MAX_DEPRECIATION_YEARS = 10
#: most GPUs one node of an owned pool has (an HGX/DGX board has 8; NVL72 racks expose 4 per
#: tray): 16 keeps the check a sanity bound, not a product list.
MAX_OWNED_GPUS_PER_NODE = 16


class OwnedPoolConfig(_Strict):
    name: str = Field(..., pattern=NAME_PATTERN, description="Pool name (unique among pools "
                                                             "and clusters' references).")
    gpu: str = Field(..., description="GPU model as the catalog names it, e.g. A100-80GB.")
    gpus: int = Field(..., gt=0, le=MAX_CLUSTER_GPUS, description="GPUs in the pool.")
    gpus_per_node: int = Field(..., gt=0, le=MAX_OWNED_GPUS_PER_NODE,
                               description="GPUs per node (divides `gpus`).")
    site: str = Field(..., min_length=1, max_length=200,
                      description="Where it is (free text: a data centre, a colocation cage).")
    kind: Literal[OWNED_KINDS] = Field(..., description="How jobs reach it: `kubernetes` "
        "(gpulease declares a namespace, a GPU ResourceQuota and priority classes), `slurm`, "
        "`ssh` or `none` (nothing declared).")
    kube_context: Optional[str] = Field(None, min_length=1, max_length=253,
        description="kubeconfig context of the pool's cluster (required for `kubernetes`).")
    purchase_usd: float = Field(..., ge=0, le=MAX_USD, description="What the pool's hardware "
                                                                   "cost, in USD.")
    purchased_on: str = Field(..., pattern=DATE_PATTERN,
                              description="Purchase (or commissioning) date, YYYY-MM-DD.")
    depreciation_years: float = Field(3, gt=0, le=MAX_DEPRECIATION_YEARS,
                                      description="Straight-line depreciation period in years.")
    power_kw_per_node: float = Field(..., ge=0, le=1000,
                                     description="Average draw of one node in kW (under load).")
    usd_per_kwh: float = Field(..., ge=0, le=100, description="Electricity price, USD per kWh "
                                                              "(with the site's PUE folded in).")
    colo_usd_per_month: float = Field(..., ge=0, le=MAX_USD,
                                      description="Colocation / hosting per month, whole pool.")
    ops_usd_per_month: float = Field(..., ge=0, le=MAX_USD,
                                     description="Operations (staff, support) per month, whole "
                                                 "pool.")
    available_hours_per_month: Optional[float] = Field(
        None, gt=0, le=HOURS_PER_MONTH, description="Hours a month the pool can run jobs "
                                                    "(default: all 730).")
    regions_equivalent: list[str] = Field(default_factory=list,
        description="Residency allow-list entries the site satisfies (e.g. `eu`, "
                    "`europe-west4`): a cluster restricted to those may run here.")
    rdma: bool = Field(False, description="Its nodes share an RDMA fabric (a distributed job "
                                          "across nodes may run here).")


class GateThresholdsConfig(_Strict):
    """Thresholds of one kind (``warn`` or ``block``); each optional, each crossed by a value
    **more than** it (docs/guardrails.md "Thresholds")."""

    delta_usd: Optional[float] = Field(None, ge=0, le=MAX_USD,
                                       description="Monthly $ increase over the baseline "
                                                   "(`plan --diff BASE`).")
    delta_pct: Optional[float] = Field(None, ge=0, le=1_000_000,
                                       description="Monthly % increase over the baseline (a "
                                                   "rise from $0 crosses any).")
    total_usd: Optional[float] = Field(None, ge=0, le=MAX_USD,
                                       description="The plan's monthly total in USD (judged "
                                                   "with or without a baseline).")


class GateConfig(_Strict):
    """The cost gate's thresholds: `gpulease plan` and the CrossGuard pack judge them from the
    same plan numbers (gpulease/guardrails/gate.py; docs/guardrails.md "Thresholds")."""

    warn: Optional[GateThresholdsConfig] = Field(
        None, description="Thresholds that print a warning (stderr, the plan's `gate` object, "
                          "an advisory policy in the pack); exit 0.")
    block: Optional[GateThresholdsConfig] = Field(
        None, description="Thresholds that block: `gpulease plan` exits 3 and the pack's "
                          "mandatory `cost-gate` policy fails `pulumi preview`, unless "
                          "acknowledged.")
    acknowledged: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(
        default_factory=list, max_length=20,
        description="Acknowledgement labels (e.g. the pull-request label "
                    "`cost-increase-approved`): when one of them is passed in (`plan --ack "
                    "LABEL`, env GPULEASE_GATE_ACK, the pack's `ack` config), a block becomes a "
                    "recorded warning. Compared case-insensitively; labels passed in that are "
                    "not listed are ignored. Empty: blocks cannot be acknowledged.")


#: longest lead time from order to running nodes `explain --buy-vs-rent` accepts (months).
MAX_LEAD_TIME_MONTHS = 60


class BuyServerConfig(_Strict):
    gpu: str = Field(..., description="GPU model as the catalog names it, e.g. A100-80GB: the "
                                      "clusters of this GPU are weighed against buying these.")
    usd_per_node: float = Field(..., gt=0, le=MAX_USD, description="Purchase price of one "
                                "server (node), USD, as quoted (hardware, installation).")
    gpus_per_node: int = Field(..., gt=0, le=MAX_OWNED_GPUS_PER_NODE,
                               description="GPUs per server.")
    power_kw_per_node: float = Field(..., ge=0, le=1000, description="Average draw of one "
                                     "server under load, kW.")
    usd_per_kwh: float = Field(..., ge=0, le=100, description="Electricity price, USD per kWh "
                                                              "(the site's PUE folded in).")
    colo_usd_per_node_month: float = Field(..., ge=0, le=MAX_USD,
                                           description="Colocation / hosting per server-month.")
    ops_usd_per_node_month: float = Field(..., ge=0, le=MAX_USD, description="Operations "
                                          "(staff, support contract) per server-month.")


class BuyVsRentConfig(_Strict):
    years: float = Field(..., gt=0, le=MAX_DEPRECIATION_YEARS, description="Horizon of the "
                         "comparison and straight-line depreciation period, years (the "
                         "hardware's refresh cycle).")
    cost_of_money_rate: float = Field(..., ge=0, le=1, description="Annual cost of money "
                                      "(discount rate) as a fraction, e.g. 0.08: every cash "
                                      "flow is valued at its present value.")
    lead_time_months: int = Field(..., ge=0, le=MAX_LEAD_TIME_MONTHS, description="Months from "
                                  "order to running nodes; the cluster rents meanwhile.")
    resale_share: float = Field(..., ge=0, le=1, description="Share of the purchase price "
                                "recovered at the end of the horizon (resale or trade-in at "
                                "refresh), e.g. 0.15.")
    servers: list[BuyServerConfig] = Field(default_factory=list, description="Server quotes by "
        "GPU model; a cluster whose GPU matches an owned pool (gpulease:owned) uses the pool's "
        "figures when no quote is given here.")


class StackConfigModel(_Strict):
    # Top-level scalars arrive as strings from `pulumi up` ("40000"), so this level converts
    # them; _decode turns YAML's true into "true", which no number parses from.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=False)

    environment: Optional[str] = Field(None, pattern=ENVIRONMENT_PATTERN,
                                       description="Environment name (default: the stack name). It "
                                                   "goes into every tag, label, bucket and "
                                                   "service-account name; `prod` or `production` "
                                                   "protects storage (`protect`) and turns off node"
                                                   " autostop.")
    owner: str = Field(..., pattern=LABEL_VALUE_PATTERN,
                       description="Team or person that owns the stack (a tag/label value).")
    cost_center: str = Field(..., pattern=LABEL_VALUE_PATTERN,
                             description="Cost center for the bill (a tag/label value).")
    budget_monthly_usd: float = Field(..., ge=0, le=MAX_USD, description="Monthly budget in USD: the policy "
                                                             "refuses a plan above it and the "
                                                             "budget guardrail checks every dollar "
                                                             "of the plan.")
    clouds: CloudsConfig = Field(..., description="Clouds and regions gpulease may use (at least "
                                                  "one of aws, gcp).")
    storage: list[StorageConfig] = Field(default_factory=list,
        description="Datasets: one bucket each in its home region, tiered by age.")
    clusters: list[ClusterConfig] = Field(default_factory=list,
        description="GPU clusters: the policy chooses cloud, region, zone, instance type, node "
                    "count, purchase mix and template for each.")
    policy: PolicyRules = Field(default_factory=PolicyRules,
        description="Policy rule overrides (docs/policy.md).")
    reaper: ReaperSettings = Field(default_factory=ReaperSettings,
        description="Idle-cluster reaper options (docs/reaper.md).")
    bootstrap: BootstrapSettings = Field(default_factory=BootstrapSettings,
                                         description="Node bootstrap options (docs/bootstrap.md).")
    name_prefix: str = Field("gpulease", pattern=r"^[a-z][a-z0-9-]{0,19}$",
                             description="Prefix of globally unique names: buckets are "
                                         "`<prefix>-<environment>-<storage>`.")
    catalog_version: Optional[str] = Field(None, description="Pin the price catalog version "
                                                             "(`gpulease catalog versions`); a plan"
                                                             " then reproduces that version's "
                                                             "numbers.")
    catalog: Optional[str] = Field(None, description="Path of a custom catalog file "
                                                     "(docs/catalog.md).")
    owned: list[OwnedPoolConfig] = Field(default_factory=list,
        description="GPUs the organisation already owns (on-premises or colocated pools): the "
                    "policy fills them first, at their amortised cost (docs/owned.md).")
    buy_vs_rent: Optional[BuyVsRentConfig] = Field(None, description="Inputs of `gpulease "
        "explain --buy-vs-rent`: the horizon, cost of money, lead time, resale share and server "
        "quotes (docs/buy-vs-rent.md).")
    inventory: Optional[str] = Field(None, description="Inventory file of what the accounts "
        "already paid for (`gpulease inventory --out FILE`); default: the inventory cache, "
        "when present (docs/inventory.md).")
    allow_prepaid_replacement: list[Annotated[str, Field(pattern=NAME_PATTERN)]] = Field(
        default_factory=list,
        description="Clusters whose prepaid or committed resources (a Capacity Block, a GCP "
                    "commitment, a GCP future reservation, a reservation a node group uses) "
                    "the next `pulumi up` may "
                    "replace or delete. Empty (the default): `gpulease plan --against` stops "
                    "with exit 4 before such a change, and Capacity Blocks are `protect`ed. A "
                    "name that is no cluster of the stack is a warning (a removed cluster's "
                    "name lets its prepaid resources go); under `plan --against`, one that is "
                    "no cluster of the stack nor of PREVIOUS is exit 2 (with a did-you-mean).")
    gate: Optional[GateConfig] = Field(
        None, description="Cost gate thresholds: `warn` / `block` on the monthly $ increase, % "
                          "increase and total, and the labels that acknowledge a block "
                          "(docs/guardrails.md \"Thresholds\").")


TOP_LEVEL_KEYS = tuple(StackConfigModel.model_fields)

#: what each pattern validates, for messages: pattern -> (what, rule).
PATTERN_RULES = {
    NAME_PATTERN: ("name", _NAME_RULE),
    LABEL_VALUE_PATTERN: ("tag/label value", _LABEL_VALUE_RULE),
    GCP_PROJECT_PATTERN: ("GCP project id", "6-30 lowercase letters, digits or '-', starting with "
                                            "a letter, not ending with '-'"),
    VPC_ID_PATTERN: ("VPC id", 'the id EC2 shows, e.g. "vpc-0123456789abcdef0"'),
    SUBNET_ID_PATTERN: ("subnet id", 'the id EC2 shows, e.g. "subnet-0123456789abcdef0"'),
    CAPACITY_BLOCK_ID_PATTERN: ("Capacity Block offering id", 'the quote\'s id, e.g. '
                                                             '"cb-0123456789abcdef0"'),
    DATE_PATTERN: ("date", 'YYYY-MM-DD, quoted, e.g. "2025-03-31"'),
    AWS_ZONE_PATTERN: ("Availability Zone name", 'e.g. "us-east-1a"'),
    StackConfigModel.model_fields["name_prefix"].metadata[0].pattern: (
        "name prefix", "lowercase letters, digits and '-', starting with a letter, at most 20 "
                       "characters"),
}


def _is_structured(annotation: Any) -> bool:
    """True when a field holds a mapping or a list (Pulumi passes those as JSON strings)."""
    for cand in (annotation, *getattr(annotation, "__args__", ())):
        origin = getattr(cand, "__origin__", cand)
        if origin in (list, dict) or (isinstance(cand, type) and issubclass(cand, BaseModel)):
            return True
    return False


#: top-level keys whose value is a mapping or a list.
STRUCTURED_KEYS = frozenset(k for k, f in StackConfigModel.model_fields.items()
                            if _is_structured(f.annotation))
