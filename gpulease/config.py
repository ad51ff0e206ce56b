"""The one reader of stack configuration: `gpulease:*` keys -> strict typed model -> StackSpec.

Both the Pulumi program (values from ``pulumi.Config``) and the CLI (values read from
``stacks/Pulumi.<stack>.yaml``) go through :func:`parse_stack_config`, which validates
everything, collects every finding, and raises one :class:`ConfigError` listing them all.
"""
from __future__ import annotations

import json
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Iterable, Iterator, Literal, Mapping, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpulease import inputs
from gpulease.bootstrap.settings import BootstrapSettings
from gpulease.catalog import Catalog
from gpulease.errors import ConfigError, Finding, InputError, did_you_mean
from gpulease.inputs import MAX_STACK_FILE_BYTES, MAX_USD
from gpulease.model import (HOURS_PER_MONTH, MAX_CHECKPOINT_MINUTES, MAX_CLUSTER_GPUS,
                            MAX_IDLE_MINUTES, CapacityBlockPin, CloudSpec, ClusterSpec, DemandStep,
                            StackSpec, StorageSpec, Window, parse_utc)
from gpulease.policy.rules import PolicyRules
from gpulease.quotes import CB_MAX_INSTANCES
from gpulease import cron as rs
from gpulease.reaper.settings import ReaperSettings

NAMESPACE = "gpulease"
#: names of clusters and storage entries: they become parts of cloud resource names (GCE names
#: end with a letter or digit, so no trailing '-').
NAME_PATTERN = r"^[a-z]([a-z0-9-]{0,28}[a-z0-9])?$"
_NAME_RULE = ("lowercase letters, digits and '-', starting with a letter, not ending with '-', "
              "at most 30 characters")
#: the environment name goes into every tag, label, bucket and service-account name.
ENVIRONMENT_PATTERN = NAME_PATTERN
_ENVIRONMENT_RULE = _NAME_RULE
#: owner and cost center are stamped as AWS tag values and GCP label values as written: the
#: stricter GCP label rule (lowercase, [a-z0-9_-], at most 63) keeps both clouds identical.
LABEL_VALUE_PATTERN = r"^[a-z0-9_-]{1,63}$"
_LABEL_VALUE_RULE = ("1-63 lowercase letters, digits, '_' or '-' (a GCP label value; AWS tags "
                     "carry the same text)")
#: GCP project ids: 6-30 characters, lowercase letters, digits and hyphens, starting with a letter,
#: not ending with a hyphen (Resource Manager docs, "Creating and managing projects").
GCP_PROJECT_PATTERN = r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$"
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
#: A UTC time as RFC 3339 (quoted in YAML: unquoted, YAML reads it as a date object).
UTC_TIME_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|\+00:00)$"
AWS_ZONE_PATTERN = r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$"


class CapacityBlockConfig(_Strict):
    """A Capacity Block for ML pinned for the cluster's reserved nodes (AWS): chosen once from a
    quote (`gpulease plan` prints the lines to add), then used verbatim by every later run, and
    bought only with ``purchase_approved: true`` (docs/deploy.md, "Capacity Blocks")."""

    offering_id: str = Field(..., pattern=CAPACITY_BLOCK_ID_PATTERN,
                             description="The quote's CapacityBlockOfferingId (`cb-` and 17 hex "
                                         "digits).")
    region: str = Field(..., description="AWS region of the offering: must be the region the "
                                         "plan puts the cluster in.")
    availability_zone: str = Field(..., pattern=AWS_ZONE_PATTERN,
                                   description="The offering's Availability Zone (the block's "
                                               "nodes launch only there).")
    instance_type: str = Field(..., description="Instance type of the offering: must be the "
                                                "cluster's decided instance type.")
    instance_count: int = Field(..., ge=1, le=CB_MAX_INSTANCES,
                                description="Instances in the block: must be the cluster's "
                                            "reserved nodes (1-64).")
    start: str = Field(..., pattern=UTC_TIME_PATTERN,
                       description='Start of the block, RFC 3339 UTC, quoted ("2026-12-04T11:30'
                                   ':00Z").')
    end: str = Field(..., pattern=UTC_TIME_PATTERN,
                     description="End of the block: 1-14 days after start in whole days, or 7-day"
                                 " steps up to 182 days.")
    upfront_fee_usd: float = Field(..., ge=0, description="The quote's upfront fee in USD (paid "
                                                          "once at purchase, never refunded).")
    quoted_at: Optional[str] = Field(None, pattern=UTC_TIME_PATTERN,
                                     description="When the quote was read (RFC 3339 UTC).")
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
                                       '(daily at 02:00) or "0 9 * * mon-fri".')
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
    allow_prepaid_replacement: list[Annotated[str, Field(pattern=NAME_PATTERN)]] = Field(
        default_factory=list,
        description="Clusters whose prepaid or committed resources (a Capacity Block, a GCP "
                    "commitment, a reservation a node group uses) the next `pulumi up` may "
                    "replace or delete. Empty (the default): `gpulease plan --against` stops "
                    "with exit 4 before such a change, and Capacity Blocks are `protect`ed.")


TOP_LEVEL_KEYS = tuple(StackConfigModel.model_fields)

#: what each pattern validates, for messages: pattern -> (what, rule).
_PATTERN_RULES = {
    NAME_PATTERN: ("name", _NAME_RULE),
    LABEL_VALUE_PATTERN: ("tag/label value", _LABEL_VALUE_RULE),
    GCP_PROJECT_PATTERN: ("GCP project id", "6-30 lowercase letters, digits or '-', starting with "
                                            "a letter, not ending with '-'"),
    VPC_ID_PATTERN: ("VPC id", 'the id EC2 shows, e.g. "vpc-0123456789abcdef0"'),
    SUBNET_ID_PATTERN: ("subnet id", 'the id EC2 shows, e.g. "subnet-0123456789abcdef0"'),
    CAPACITY_BLOCK_ID_PATTERN: ("Capacity Block offering id", 'the quote\'s id, e.g. '
                                                             '"cb-0123456789abcdef0"'),
    UTC_TIME_PATTERN: ("UTC time", 'RFC 3339 in UTC, quoted, e.g. "2026-12-04T11:30:00Z"'),
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


# ---- messages -------------------------------------------------------------------------------
def _loc_to_path(loc: tuple) -> str:
    out = f"{NAMESPACE}:{loc[0]}" if loc else NAMESPACE
    for part in loc[1:]:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _model_for(loc: tuple) -> Optional[type[BaseModel]]:
    """The pydantic model that owns the mapping at ``loc`` (for did-you-mean on unknown keys)."""
    model: Any = StackConfigModel
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        if field is None:
            return None
        ann = field.annotation
        for cand in (ann, *getattr(ann, "__args__", ())):
            for inner in (cand, *getattr(cand, "__args__", ())):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    model = inner
                    break
            else:
                continue
            break
        else:
            return None
    return model


class _Shown:
    """A bad value as the user wrote it: scalars that Pulumi passes as strings ("-1", "NaN",
    "true") are shown bare, other values by repr."""

    _BARE = re.compile(r"-?(\d+(\.\d*)?([eE][-+]?\d+)?|NaN|Infinity)|true|false")

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        v = self.value
        if isinstance(v, str) and self._BARE.fullmatch(v.strip()):
            return v.strip()
        return repr(v)


def _message(err: dict) -> str:
    t, ctx, value = err["type"], err.get("ctx") or {}, _Shown(err.get("input"))
    if t == "missing":
        return "required key is missing"
    if t == "extra_forbidden":
        return "unknown key"
    if t in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<",
              "less_than_equal": "<="}[t]
        bound = next(iter(ctx.values()))
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"must be {op} {bound} (got {value!r})"
    if t in ("int_type", "int_parsing", "int_from_float", "float_type", "float_parsing"):
        what = "a whole number" if t.startswith("int") else "a number"
        raw = err.get("input")
        if isinstance(raw, bool) or (isinstance(raw, str) and raw.strip() in ("true", "false")):
            return (f"must be {what} (got {str(raw).lower()}: true/false is not a number; "
                    "write the number)")
        if t == "int_type" and isinstance(raw, float):
            return (f"must be a whole number (got {raw!r}: a count has no fraction; write "
                    f"{int(raw) if raw.is_integer() else 'a whole number'})")
        if isinstance(raw, str) and _number(raw) is not None and t.endswith("_type"):
            return f"must be {what}, not text (got {raw!r}: write it without quotes)"
        return f"must be {what} (got {value!r})"
    if t in ("bool_type", "bool_parsing"):
        return f"must be true or false (got {value!r})"
    if t == "string_type":
        return f"must be a string (got {value!r})"
    if t == "list_type":
        return f"must be a list (got {value!r})"
    if t in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping of keys to values (got {value!r})"
    if t == "literal_error":
        return f"must be one of {ctx.get('expected')} (got {value!r})"
    if t == "string_pattern_mismatch":
        what, rule = _PATTERN_RULES.get(ctx.get("pattern"), ("name", _NAME_RULE))
        text = f"{value!r} is not a valid {what}: use {rule}"
        if ctx.get("pattern") == LABEL_VALUE_PATTERN and isinstance(value.value, str):
            from gpulease.tags import label_value

            suggestion = label_value(value.value)
            if suggestion and suggestion != value:
                text += f' (e.g. "{suggestion}")'
        return text
    if t == "value_error":
        return str(ctx.get("error", err.get("msg", t)))
    if t == "finite_number":
        return f"must be a finite number (got {value!r})"
    if t == "dict_type" and isinstance(value.value, list):
        return f"must be a mapping of keys to values, not a list (got {value!r})"
    if t == "too_short":
        return "must not be empty"
    if t == "too_long":
        return (f"must have at most {ctx.get('max_length')} entries (got "
                f"{ctx.get('actual_length')})")
    return err.get("msg", t)


def _findings_from_validation(exc: ValidationError, source: str) -> list[Finding]:
    findings = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        msg = _message(err)
        if err["type"] == "extra_forbidden":
            owner = _model_for(loc[:-1])
            hint = did_you_mean(str(loc[-1]), owner.model_fields) if owner else ""
            if len(loc) == 1 and hint:
                hint = hint.replace('"', '"gpulease:', 1)
            findings.append(Finding(_loc_to_path(loc), f"unknown key{hint}", source=source))
            continue
        findings.append(Finding(_loc_to_path(loc), msg, source=source))
    return findings


# ---- parsing --------------------------------------------------------------------------------
def _decode(key: str, value: Any) -> Any:
    """A config value as the program sees it through `pulumi.Config`: strings, with mappings and
    lists JSON-encoded. Structured keys are decoded from JSON; scalars stay strings and pydantic
    converts them to the field's type ("5000" -> 5000.0), so a file read by the CLI and the
    values the engine passes parse identically."""
    if value is None:
        return None
    if not isinstance(value, str):
        try:
            value = json.dumps(value)
        except (TypeError, ValueError):
            return value  # reported by the schema ("must be a string", ...)
    if key in STRUCTURED_KEYS and value.strip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _key_findings(values: Mapping[Any, Any], source: str) -> tuple[dict[str, Any], list[Finding]]:
    """The ``gpulease:*`` values, and findings for keys that look meant for gpulease but are not
    (a typo in the namespace, no namespace): such keys would otherwise be ignored silently."""
    data: dict[str, Any] = {}
    findings: list[Finding] = []
    ours = [f"{NAMESPACE}:{k}" for k in TOP_LEVEL_KEYS]
    for key, value in values.items():
        if not isinstance(key, str):
            findings.append(Finding("config", f"config keys are strings like \"{NAMESPACE}:owner\" "
                                    f"(got {key!r}); quote the key", source=source))
            continue
        ns, sep, name = key.partition(":")
        if not sep:
            findings.append(Finding(key, "a config key needs a namespace: gpulease's keys are "
                                    f'written "{NAMESPACE}:<key>"{did_you_mean(key, ours)}',
                                    source=source))
            continue
        if ns != NAMESPACE:
            hint = did_you_mean(ns, [NAMESPACE])
            if hint:
                findings.append(Finding(key, f'unknown namespace "{ns}"{hint}; gpulease reads '
                                        f'only "{NAMESPACE}:" keys', source=source))
            continue  # another provider's or project's config (aws:region, gcp:project, ...)
        if not name:
            findings.append(Finding(key, f'"{key}" names no key: write "{NAMESPACE}:<key>"',
                                    source=source))
            continue
        data[name] = _decode(name, value)
    return data, findings


def _region_ok(region: str, known: list[str]) -> bool:
    return region in known


def _matches_residency(region: str, allow: list[str]) -> bool:
    return any(region == a or region.startswith(a) for a in allow)


def parse_stack_config(values: Mapping[str, Any], *, stack: str, source: str,
                       catalog: Catalog) -> StackSpec:
    """Validate ``{"gpulease:key": value}`` (other namespaces ignored) into a StackSpec.

    Raises ConfigError with every finding (errors and warnings) when anything is wrong.
    """
    data, findings = _key_findings(values, source)

    def bad(path: str, msg: str, level: str = "error") -> None:
        findings.append(Finding(path, msg, level=level, source=source))

    references = _reference_findings(data, catalog, source) + _demand_findings(data, source)
    if "environment" not in data and not re.fullmatch(ENVIRONMENT_PATTERN, stack):
        from gpulease.tags import label_value

        suggestion = label_value(stack).replace("_", "-").strip("-")[:30].rstrip("-") or "dev"
        if not suggestion[0].isalpha():
            suggestion = ("env-" + suggestion)[:30].rstrip("-")
        bad("gpulease:environment", f'the environment defaults to the stack name "{stack}", '
            f"which is not a valid environment name ({_ENVIRONMENT_RULE}): every tag, label, "
            f'bucket and protect decision derives from it; set gpulease:environment: '
            f'"{suggestion}" or rename the stack')
    try:
        model = StackConfigModel.model_validate(data)
    except ValidationError as exc:
        structural = _findings_from_validation(exc, source)
        seen = {f.path for f in structural}
        raise ConfigError(sorted(findings + structural
                                 + [f for f in references if f.path not in seen],
                                 key=_finding_order),
                          headline=_headline(source)) from None
    findings.extend(references)

    clouds: dict[str, CloudSpec] = {}
    cfg = model.clouds
    if cfg.aws is None and cfg.gcp is None:
        bad("gpulease:clouds", "configure at least one cloud (aws or gcp)")
    for cname, ccfg in (("aws", cfg.aws), ("gcp", cfg.gcp)):
        if ccfg is None:
            continue
        for r, n in ccfg.quota_gpus.items():
            if r not in ccfg.regions:
                bad(f"gpulease:clouds.{cname}.quota_gpus.{r}",
                    f'quota for "{r}", which is not in gpulease:clouds.{cname}.regions'
                    f"{did_you_mean(r, ccfg.regions)}")
            if n < 0:
                bad(f"gpulease:clouds.{cname}.quota_gpus.{r}", f"must be >= 0 (got {n})")
        if cname == "aws":
            if ccfg.subnet_ids and not ccfg.vpc_id:
                bad("gpulease:clouds.aws.subnet_ids", "subnet_ids need vpc_id")
            for k, r in enumerate(ccfg.local_zones):
                if r not in ccfg.regions:
                    bad(f"gpulease:clouds.aws.local_zones[{k}]",
                        f'"{r}" is not in gpulease:clouds.aws.regions'
                        f"{did_you_mean(r, ccfg.regions)}; list regions whose Local Zones may "
                        "be used")
            clouds["aws"] = CloudSpec(
                cloud="aws", regions=tuple(ccfg.regions), quota_gpus=dict(ccfg.quota_gpus),
                network=ccfg.vpc_id, subnets=tuple(ccfg.subnet_ids),
                capacity_reservations=ccfg.capacity_reservations,
                capacity_blocks=ccfg.capacity_blocks,
                local_zone_regions=tuple(ccfg.local_zones))
        else:
            if ccfg.subnetwork and not ccfg.network:
                bad("gpulease:clouds.gcp.subnetwork", "subnetwork needs network")
            clouds["gcp"] = CloudSpec(
                cloud="gcp", regions=tuple(ccfg.regions), quota_gpus=dict(ccfg.quota_gpus),
                project=ccfg.project, network=ccfg.network,
                subnets=(ccfg.subnetwork,) if ccfg.subnetwork else (),
                spot_termination_action=ccfg.spot_termination_action,
                ssh_via_iap=ccfg.ssh_via_iap)

    storage: list[StorageSpec] = []
    names: set[str] = set()
    for i, s in enumerate(model.storage):
        path = f"gpulease:storage[{i}]"
        if s.name in names:
            bad(f"{path}.name", f'duplicate storage name "{s.name}"')
        names.add(s.name)
        hc, _, hr = s.home.partition(":")
        if hc not in ("aws", "gcp") or not hr:
            bad(f"{path}.home", f'must be "<cloud>:<region>", e.g. "aws:us-east-1" (got "{s.home}")')
        elif hc not in clouds:
            bad(f"{path}.home", f'cloud "{hc}" is not configured under gpulease:clouds')
        elif hr not in catalog.regions(hc):
            bad(f"{path}.home", f'region "{hr}" is not in the catalog'
                f"{did_you_mean(hr, catalog.regions(hc))}")
        days = [(k, getattr(s, k)) for k in ("warm_after_days", "cold_after_days",
                                             "archive_after_days")]
        present = [(k, d) for k, d in days if d is not None]
        for (k1, d1), (k2, d2) in zip(present, present[1:]):
            if d2 <= d1:
                bad(f"{path}.{k2}", f"must be greater than {k1} ({d1}) (got {d2})")
        storage.append(StorageSpec(
            name=s.name, size_tb=s.size_tb, home_cloud=hc, home_region=hr,
            warm_after_days=s.warm_after_days, cold_after_days=s.cold_after_days,
            archive_after_days=s.archive_after_days, age_horizon_days=s.age_horizon_days,
            noncurrent_days=s.noncurrent_days))

    clusters: list[ClusterSpec] = []
    cnames: set[str] = set()
    gpus = catalog.gpus
    for i, c in enumerate(model.clusters):
        path = f"gpulease:clusters[{i}]"
        if c.name in cnames:
            bad(f"{path}.name", f'duplicate cluster name "{c.name}"')
        cnames.add(c.name)
        allowed = [r for cl in clouds.values() for r in cl.regions]
        for j, r in enumerate(c.regions):
            if not any(a == r or a.startswith(r) for a in catalog.regions()):
                bad(f"{path}.regions[{j}]", f'"{r}" matches no catalog region'
                    f"{did_you_mean(r, catalog.regions())}")
        if c.gpu in gpus and allowed:
            cands = [o for o in catalog.offerings_for(gpu=c.gpu)
                     if o.cloud in clouds and o.region in clouds[o.cloud].regions
                     and (not c.regions or _matches_residency(o.region, c.regions))]
            if not cands:
                where = [f"{cl}: {', '.join(spec.regions)}" for cl, spec in clouds.items()]
                bad(f"{path}", f'no offering can satisfy cluster "{c.name}": no {c.gpu} in the '
                    f"configured regions ({'; '.join(where)})"
                    + (f" within residency {c.regions}" if c.regions else "")
                    + f"; {c.gpu} is offered in: "
                    + ", ".join(sorted({f'{o.cloud}:{o.region}' for o in catalog.offerings_for(gpu=c.gpu)})))
        if c.template is not None:
            from gpulease.policy.templates import template_names

            tn = template_names()
            if c.template not in tn:
                bad(f"{path}.template", f'unknown template "{c.template}"'
                    f"{did_you_mean(c.template, tn)}; templates: {', '.join(tn)}")
        window = None
        if c.window is not None and c.gpus is not None:
            from gpulease.quotes.model import parse_time

            try:
                window = Window(parse_time(c.window.earliest_start),
                                parse_time(c.window.deadline), c.window.duration_hours)
            except ValueError:
                continue  # reported by _window_findings
            steps = (DemandStep(c.gpus, min(c.window.duration_hours, HOURS_PER_MONTH)),)
        else:
            steps = tuple(DemandStep(d.gpus, d.hours_per_month) for d in c.demand) or (
                (DemandStep(c.gpus, c.hours_per_month),)
                if c.gpus is not None and c.hours_per_month is not None else ())
        if not steps:
            continue  # reported by _demand_findings
        pin = _capacity_block_pin(c.capacity_block, f"{path}.capacity_block", clouds, catalog,
                                  bad, window=window is not None)
        clusters.append(ClusterSpec(
            name=c.name, gpu=c.gpu, gpus=steps[-1].gpus, hours_per_month=steps[0].hours_per_month,
            priority=c.priority, checkpoint_minutes=c.checkpoint_minutes,
            distributed=c.distributed, dataset=c.dataset, regions=tuple(c.regions),
            idle_minutes=c.idle_minutes, template=c.template, index=i,
            schedule=tuple((w.cron, w.minutes) for w in c.schedule),
            schedule_lead_minutes=c.schedule_lead_minutes,
            first_job_grace_minutes=c.first_job_grace_minutes,
            demand=steps if len(steps) > 1 else (), capacity_block=pin, window=window))
    if not model.clusters:
        bad("gpulease:clusters", "no clusters configured; the plan would be empty",
            level="warning")

    for j, name in enumerate(model.allow_prepaid_replacement):
        if name not in cnames:
            bad(f"gpulease:allow_prepaid_replacement[{j}]", f'"{name}" names no cluster of this '
                "stack: it only lets `pulumi up` delete the prepaid resources of a cluster you "
                "removed", level="warning")

    if model.catalog_version and model.catalog_version != catalog.version:
        bad("gpulease:catalog_version", f'stack pins catalog "{model.catalog_version}" but '
            f'catalog "{catalog.version}" was loaded')

    errors = [f for f in findings if f.level == "error"]
    if errors:
        raise ConfigError(sorted(findings, key=_finding_order), headline=_headline(source))
    return StackSpec(
        stack=stack, environment=model.environment or stack, owner=model.owner,
        cost_center=model.cost_center, budget_monthly_usd=model.budget_monthly_usd,
        clouds=clouds, storage=tuple(storage), clusters=tuple(clusters), policy=model.policy,
        reaper=model.reaper, bootstrap=model.bootstrap, source=source,
        name_prefix=model.name_prefix, catalog_version=model.catalog_version,
        allow_prepaid_replacement=tuple(model.allow_prepaid_replacement),
        warnings=tuple(sorted((f for f in findings if f.level != "error"), key=_finding_order)))


def _capacity_block_pin(cfg: Optional[CapacityBlockConfig], path: str, clouds: dict,
                        catalog: Catalog, bad, window: bool = False) -> Optional[CapacityBlockPin]:
    """The pin of a cluster's Capacity Block, with what can be checked before the policy runs
    (the adaptor checks it against the decision: region, instance type, reserved nodes). A
    cluster with a window may pin the block the policy chose for it without
    gpulease:clouds.aws.capacity_blocks (that switch is for monthly loads)."""
    if cfg is None:
        return None
    aws_cloud = clouds.get("aws")
    if aws_cloud is None:
        bad(path, "a Capacity Block is an AWS purchase: configure gpulease:clouds.aws")
    elif not aws_cloud.capacity_blocks and not window:
        bad(path, "pinned, but gpulease:clouds.aws.capacity_blocks is false: set it to true "
                  "to use the block, or remove the pin")
    elif cfg.region not in aws_cloud.regions:
        bad(f"{path}.region", f'"{cfg.region}" is not in gpulease:clouds.aws.regions'
            f"{did_you_mean(cfg.region, aws_cloud.regions)}")
    if not cfg.availability_zone.startswith(cfg.region):
        bad(f"{path}.availability_zone", f'"{cfg.availability_zone}" is not a zone of region '
            f'"{cfg.region}"')
    types = {o.instance_type for o in catalog.offerings_for() if o.cloud == "aws"}
    if cfg.instance_type not in types:
        bad(f"{path}.instance_type", f'unknown AWS instance type "{cfg.instance_type}"'
            f"{did_you_mean(cfg.instance_type, sorted(types))}")
    from gpulease.quotes import CB_MAX_DAYS, valid_block_hours

    start, end = parse_utc(cfg.start), parse_utc(cfg.end)
    if end <= start:
        bad(f"{path}.end", f"must be after start ({cfg.start}) (got {cfg.end})")
    elif not valid_block_hours((end - start) / 3600.0):
        bad(f"{path}.end", f"the block lasts {(end - start) / 86400.0:g} days; Capacity Blocks "
                           f"last 1-14 whole days or a multiple of 7 days up to {CB_MAX_DAYS} "
                           "(EC2 User Guide, \"Capacity Blocks for ML\")")
    return CapacityBlockPin(
        offering_id=cfg.offering_id, region=cfg.region,
        availability_zone=cfg.availability_zone, instance_type=cfg.instance_type,
        instance_count=cfg.instance_count, start=cfg.start, end=cfg.end,
        upfront_fee_usd=cfg.upfront_fee_usd, purchase_approved=cfg.purchase_approved,
        quoted_at=cfg.quoted_at)


def _finding_order(f: Finding) -> tuple:
    """Findings in config order: by top-level key as written in the model, then by path."""
    key = f.path.partition(":")[2].split(".")[0].split("[")[0]
    order = TOP_LEVEL_KEYS.index(key) if key in TOP_LEVEL_KEYS else -1
    nums = tuple(int(n) for n in re.findall(r"\[(\d+)\]", f.path))
    return (order, nums, f.path)


def _reference_findings(data: dict, catalog: Catalog, source: str) -> list[Finding]:
    """Checks of names against the catalog and the config itself (GPU, regions, datasets).

    Tolerant of malformed input, so these findings are reported together with type errors.
    """
    out: list[Finding] = []

    def bad(path: str, msg: str) -> None:
        out.append(Finding(path, msg, source=source))

    clouds = data.get("clouds") if isinstance(data.get("clouds"), dict) else {}
    for cname in ("aws", "gcp"):
        ccfg = clouds.get(cname)
        regions = ccfg.get("regions") if isinstance(ccfg, dict) else None
        if not isinstance(regions, list):
            continue
        known = catalog.regions(cname)
        for i, r in enumerate(regions):
            if isinstance(r, str) and r not in known:
                bad(f"gpulease:clouds.{cname}.regions[{i}]",
                    f'region "{r}" is not in the catalog{did_you_mean(r, known)}; '
                    f"known {cname} regions: {', '.join(known)}")
    storage = data.get("storage") if isinstance(data.get("storage"), list) else []
    names = sorted({s.get("name") for s in storage if isinstance(s, dict)
                    and isinstance(s.get("name"), str)})
    clusters = data.get("clusters") if isinstance(data.get("clusters"), list) else []
    gpus = catalog.gpus
    for i, c in enumerate(clusters):
        if not isinstance(c, dict):
            continue
        gpu, ds = c.get("gpu"), c.get("dataset")
        if isinstance(gpu, str) and gpu not in gpus:
            bad(f"gpulease:clusters[{i}].gpu", f'unknown GPU "{gpu}"{did_you_mean(gpu, gpus)}; '
                f"the catalog has: {', '.join(gpus)}")
        if isinstance(ds, str) and ds not in names:
            bad(f"gpulease:clusters[{i}].dataset", f'names no storage entry: "{ds}"'
                f"{did_you_mean(ds, names)}; add it under gpulease:storage or fix the name")
    return out


def _number(value: Any) -> Optional[float]:
    """A config number as pydantic will read it (numbers and numeric strings), else None (the
    schema reports the value)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _demand_findings(data: dict, source: str) -> list[Finding]:
    """Checks of each cluster's size keys against its demand profile, on the raw values (so they
    are reported together with type errors): without demand, gpus and hours_per_month are
    required; with demand, GPUs strictly increase and hours strictly decrease along the steps,
    hours_per_month is left out and gpus, if given, equals the last step's."""
    out: list[Finding] = []
    clusters = data.get("clusters") if isinstance(data.get("clusters"), list) else []
    for i, c in enumerate(clusters):
        if not isinstance(c, dict):
            continue
        path = f"gpulease:clusters[{i}]"

        def bad(key: str, msg: str) -> None:
            out.append(Finding(f"{path}.{key}", msg, source=source))

        demand = c.get("demand")
        window = c.get("window")
        if window is not None:
            out.extend(_window_findings(window, c, path, source))
            continue
        if demand is None:
            for key in ("gpus", "hours_per_month"):
                if c.get(key) is None:
                    bad(key, "required key is missing (or describe the load as steps with "
                             f"{path}.demand)")
            continue
        if not isinstance(demand, list):
            continue  # "must be a list", from the schema
        if not demand:
            bad("demand", "an empty demand profile describes no load: give at least one step "
                          "{gpus, hours_per_month}, or leave demand out and set gpus and "
                          "hours_per_month")
            continue
        steps = [(_number(d.get("gpus")), _number(d.get("hours_per_month")))
                 if isinstance(d, dict) else (None, None) for d in demand]
        for j in range(1, len(steps)):
            (g0, h0), (g1, h1) = steps[j - 1], steps[j]
            if g0 is not None and g1 is not None and g1 <= g0:
                bad(f"demand[{j}].gpus", f"must be more than the step before ({path}.demand"
                    f"[{j - 1}].gpus = {g0:g}) (got {g1:g}): each step reads \"at least G GPUs "
                    "busy H hours a month\", so GPUs go up from step to step; merge or reorder "
                    "the steps")
            if h0 is not None and h1 is not None and h1 >= h0:
                bad(f"demand[{j}].hours_per_month", f"must be fewer than the step before "
                    f"({path}.demand[{j - 1}].hours_per_month = {h0:g}) (got {h1:g}): more GPUs "
                    "are busy for fewer hours, so hours go down from step to step; merge or "
                    "reorder the steps")
        if c.get("hours_per_month") is not None:
            bad("hours_per_month", f"leave it out when {path}.demand is given: each step has "
                f"its own hours (the first step's are the baseline's)")
        peak = steps[-1][0]
        gpus = _number(c.get("gpus"))
        if gpus is not None and peak is not None and gpus != peak:
            bad("gpus", f"must equal the last demand step's gpus ({peak:g}), the peak (got "
                f"{gpus:g}); or leave gpus out")
    return out


def _window_findings(window: Any, c: dict, path: str, source: str) -> list[Finding]:
    """A window's own rules, on the raw values: RFC 3339 times, the deadline after the earliest
    start, the work fitting between them; with a window `gpus` is required and
    `hours_per_month` / `demand` are left out."""
    from gpulease.quotes.model import parse_time

    out: list[Finding] = []

    def bad(key: str, msg: str) -> None:
        out.append(Finding(f"{path}.{key}", msg, source=source))

    for key in ("hours_per_month", "demand"):
        if c.get(key) is not None:
            bad(key, f"leave it out when {path}.window is given: the window says how long the "
                     "work runs (a work item is priced over its window, not per month)")
    if c.get("gpus") is None:
        bad("gpus", f"required key is missing ({path}.window needs the GPUs the work runs on)")
    if not isinstance(window, dict):
        return out      # "must be a mapping", from the schema
    times = {}
    for key in ("earliest_start", "deadline"):
        v = window.get(key)
        if isinstance(v, str):
            try:
                times[key] = parse_time(v)
            except ValueError:
                bad(f"window.{key}", f"{v!r} is not an RFC 3339 time: write it like "
                                     "2027-01-04T00:00:00Z (or a date, 2027-01-04 = midnight "
                                     "UTC)")
    if len(times) == 2:
        span = (times["deadline"] - times["earliest_start"]).total_seconds() / 3600.0
        if span <= 0:
            bad("window.deadline", f"must be after {path}.window.earliest_start "
                                   f"({window['earliest_start']}) (got {window['deadline']})")
        else:
            hours = _number(window.get("duration_hours"))
            if hours is not None and hours > span + 1e-9:
                bad("window.duration_hours", f"{hours:g} h of work does not fit in the window "
                    f"({span:g} h from earliest_start to deadline): move the deadline, start "
                    "earlier or split the work")
    return out


def _headline(source: str) -> str:
    return (f"{source or 'stack config'}: invalid stack configuration — fix the keys below "
            "(reference: docs/config.md) and run again:")


def catalog_selection(values: Mapping[str, Any]) -> tuple[Optional[str], Optional[str]]:
    """(path, version) of the catalog the stack asks for, before full validation."""
    path = values.get(f"{NAMESPACE}:catalog")
    version = values.get(f"{NAMESPACE}:catalog_version")
    return (path if isinstance(path, str) else None,
            version if isinstance(version, str) else None)


def load_stack_catalog(values: Mapping[str, Any], *, source: str,
                       path: Optional[str] = None, version: Optional[str] = None) -> Catalog:
    """The catalog a stack plans with: ``path`` / ``version`` (--catalog / --catalog-version)
    win over the stack's gpulease:catalog / gpulease:catalog_version. A catalog the stack file
    asks for that cannot be loaded is reported at the stack file's key (then the catalog's own
    findings), not as if it came from a flag."""
    from gpulease.catalog import load_catalog
    from gpulease.errors import CatalogError

    if path or version:
        return load_catalog(path, version)
    c_path, c_version = catalog_selection(values)
    if c_path and c_version:
        raise ConfigError([Finding(f"{NAMESPACE}:catalog", f"gives a catalog file and "
                                   f"{NAMESPACE}:catalog_version a shipped version: keep one",
                                   source=source)], headline=_headline(source))
    try:
        return load_catalog(c_path, c_version)
    except CatalogError as exc:
        if not (c_path or c_version):
            raise
        key = f"{NAMESPACE}:catalog" if c_path else f"{NAMESPACE}:catalog_version"
        what = f"the catalog file {c_path!r}" if c_path else f"catalog version {c_version!r}"
        first = Finding(key, f"{what} cannot be used (below); fix the key or remove it to plan "
                        "with the default catalog", source=source)
        raise CatalogError([first, *exc.findings], headline=_headline(source)) from None


# ---- stack files ----------------------------------------------------------------------------
def find_project_dir(start: Optional[Path] = None) -> Path:
    """The directory holding Pulumi.yaml, searching upward from ``start`` (default: cwd)."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "Pulumi.yaml").is_file():
            return d
    raise ConfigError([Finding("--stack", f"no Pulumi.yaml in {here} or above: run gpulease "
                               "from the project directory, or pass --config PATH")])


def stack_file(stack: str, project_dir: Optional[Path] = None) -> Path:
    root = project_dir or find_project_dir()
    stacks_dir = root / "stacks"
    try:
        proj = yaml.safe_load((root / "Pulumi.yaml").read_text(encoding="utf-8")) or {}
        if isinstance(proj, dict) and isinstance(proj.get("stackConfigDir", "stacks"), str):
            stacks_dir = root / proj.get("stackConfigDir", "stacks")
    except (OSError, ValueError, yaml.YAMLError):   # Pulumi itself reports a broken Pulumi.yaml
        pass
    path = stacks_dir / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        have = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in stacks_dir.glob("Pulumi.*.yaml"))
        raise ConfigError([Finding("--stack", f'no stack "{stack}": {path} does not exist'
                                   f"{did_you_mean(stack, have)}; stacks: {', '.join(have)}")])
    return path


def read_stack_file(path: Path) -> dict[str, Any]:
    """The ``config:`` mapping of a Pulumi stack file (values as YAML gives them).

    Refuses, with located findings, what no Pulumi stack file holds: non-UTF-8 text, files over
    MAX_STACK_FILE_BYTES, non-string keys, and YAML values that are not plain data (``!!binary``,
    dates, sets): Pulumi passes config to programs as strings and JSON.
    """
    source = display_path(path)
    raw = inputs.read_bytes(path, error=ConfigError, field="config", what="stack file",
                            limit=MAX_STACK_FILE_BYTES)
    text = inputs.decode(raw, source=source, error=ConfigError, field="config")
    try:
        doc = yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        raise ConfigError([yaml_syntax_finding(text, exc, source)]) from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a bad !!timestamp
        raise ConfigError([Finding("config", f"not valid YAML: {exc}", source=source)]) from None
    except RecursionError:
        raise ConfigError([Finding("config", f"nested more than {inputs.MAX_DEPTH} levels deep; "
                                   "no stack file nests so deep", source=source)]) from None
    with located(source, text):
        # depth and size after YAML aliases are expanded (numbers: the schema, with every
        # finding)
        inputs.check_tree(doc, source=source, error=ConfigError, headline=_headline(source),
                          numbers=False)
        if doc is None:
            doc = {}
        if not isinstance(doc, dict) or not isinstance(doc.get("config", {}), dict):
            raise ConfigError([Finding("config", "a stack file is a mapping with a `config:` "
                                       "mapping of keys", source=source)])
        config = dict(doc.get("config") or {})
        findings = list(_plain_data_findings(config, source))
        if findings:
            raise ConfigError(findings, headline=_headline(source))
    return config


# ---- positions of findings in the stack file ------------------------------------------------
def yaml_marks(text: str) -> dict[str, tuple[Any, Any]]:
    """Config path (``gpulease:clusters[2].gpus``, the paths findings name) -> (mark of its key,
    None for a list item; its value's node) for every key and list item of a stack file's
    ``config:``, from PyYAML's node graph (``yaml.compose``: nodes keep their start marks, loaded
    values do not). ``"config"`` is the ``config:`` key itself. A node reached again through a
    YAML alias is not walked twice (an alias bomb stays one walk of the file)."""
    try:
        root = yaml.compose(text, Loader=_YAML_LOADER)  # noqa: S506 - a SafeLoader
    except (yaml.YAMLError, ValueError, RecursionError):
        return {}
    out: dict[str, tuple[Any, Any]] = {}
    if not isinstance(root, yaml.MappingNode):
        return out
    top = None
    for k, v in root.value:
        if isinstance(k, yaml.ScalarNode) and k.value == "config":
            out["config"], top = (k.start_mark, v), v
    if not isinstance(top, yaml.MappingNode):
        return out
    seen: set = set()
    todo: list = [(str(k.value), k.start_mark, v) for k, v in reversed(top.value)
                  if isinstance(k, yaml.ScalarNode)]
    while todo:
        path, key_mark, node = todo.pop()
        out[path] = (key_mark, node)
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            todo += [(f"{path}.{k.value}", k.start_mark, v) for k, v in reversed(node.value)
                     if isinstance(k, yaml.ScalarNode)]
        elif isinstance(node, yaml.SequenceNode):
            todo += [(f"{path}[{i}]", None, v) for i, v in reversed(list(enumerate(node.value)))]
    return out


#: findings about a key itself (not its value): located at the key.
_ABOUT_THE_KEY = re.compile(r"unknown key|unknown namespace|a config key needs|keys are strings|"
                            r"config keys are strings|\"[^\"]*\" names no key")


def _enclosing(path: str) -> str:
    """``gpulease:clusters[2].gpus`` -> ``gpulease:clusters[2]`` -> ``gpulease:clusters``."""
    return re.sub(r"(\.[^.\[\]]*|\[\d+\])$", "", path)


def locate(findings: Iterable[Finding], source: str, text: str) -> list[Finding]:
    """Each finding on ``source`` (the stack file whose text is ``text``) with the file's
    ``:LINE:COLUMN`` added to its source, as compilers print them: the value's position for a
    bad value, the key's for an unknown key or a mapping or list, the item's for a list item. A
    path the file does not hold (a missing key) points at the nearest enclosing key or item it
    does hold. Findings on other sources, or already located, are returned unchanged."""
    findings = list(findings)
    if not any(f.source == source for f in findings):
        return findings
    marks = yaml_marks(text)
    out = []
    for f in findings:
        path = f.path
        while f.source == source and path not in marks and _enclosing(path) != path:
            path = _enclosing(path)
        if path not in marks:
            path = "config"    # a top-level key the file lacks: its `config:` mapping
        if f.source != source or path not in marks:
            out.append(f)
            continue
        key, node = marks[path]
        value_itself = (path == f.path and isinstance(node, yaml.ScalarNode)
                        and not _ABOUT_THE_KEY.match(f.message))
        mark = node.start_mark if value_itself or key is None else key
        out.append(Finding(f.path, f.message, level=f.level,
                           source=f"{source}:{mark.line + 1}:{mark.column + 1}"))
    return out


@contextmanager
def located(source: str, text: Optional[str] = None, *,
            path: Optional[Path] = None) -> Iterator[None]:
    """Re-raise an input error's findings on ``source`` with their line and column
    (:func:`locate`) in ``text``, or in the file at ``path`` read only when there is an error."""
    try:
        yield
    except InputError as exc:
        if text is None:
            try:
                text = Path(path).read_text(encoding="utf-8") if path is not None else ""
            except (OSError, UnicodeDecodeError):
                text = ""
        found = locate(exc.findings, source, text)
        if found == exc.findings:
            raise
        raise type(exc)(found, headline=exc.headline) from None


def yaml_syntax_finding(text: str, exc: "yaml.YAMLError", source: str) -> Finding:
    """A YAML syntax error as ``FILE:LINE:COLUMN: KEY: not valid YAML: ...`` — the position is
    PyYAML's mark (where the parser stopped), the key the one whose value was being read there
    (``gpulease:clusters[0].gpu``, from the events parsed before the error), and a tab in the
    indentation gets the fix: YAML indents with spaces only."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where, hint = source, ""
    if mark is not None:
        where = f"{source}:{mark.line + 1}:{mark.column + 1}"
        lines = text.split("\n")
        line = lines[mark.line] if mark.line < len(lines) else ""
        lead = line[:len(line) - len(line.lstrip(" \t"))]
        if "\t" in lead or "tab" in problem or "'\\t'" in problem:
            col = (lead.index("\t") if "\t" in lead else mark.column) + 1
            hint = (f"; line {mark.line + 1} is indented with a tab (column {col}): YAML "
                    "indents with spaces only, so replace the tab with spaces")
        problem = problem.replace("'\\t'", "a tab")
        m = re.match(r"\s*(?:-\s+)?([^\s:#'\"][^#]*?)\s*:(?:\s|$)", line)
        line_key = m.group(1) if m else ""
    else:
        line_key = ""
    return Finding(_key_before_error(text, line_key, mark.line if mark else -1) or "config",
                   f"not valid YAML: {problem}{hint}", source=where)


def _key_before_error(text: str, line_key: str = "", error_line: int = -1) -> str:
    """The config path (``gpulease:clusters[1].gpus``) whose value PyYAML was reading when it
    stopped on a syntax error: replays the event stream up to the error (the parser is lazy, so
    the events before it are exactly the document read so far)."""
    frames: list[list] = []   # [kind, key_or_index, awaiting_key, line of the key]

    def consumed() -> None:   # a value (scalar or collection) completed in the top frame
        if frames and frames[-1][0] == "map":
            frames[-1][2] = not frames[-1][2]

    try:
        for ev in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                if frames and frames[-1][0] == "seq":
                    frames[-1][1] += 1
                frames.append(["map", None, True, -1] if isinstance(ev, yaml.MappingStartEvent)
                              else ["seq", -1, False, -1])
            elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                frames.pop()
                consumed()
            elif isinstance(ev, (yaml.ScalarEvent, yaml.AliasEvent)):
                top = frames[-1] if frames else None
                if top and top[0] == "map" and top[2]:
                    top[1], top[3] = getattr(ev, "value", None), ev.start_mark.line
                elif top and top[0] == "seq":
                    top[1] += 1
                    continue
                consumed()
    except yaml.YAMLError:
        pass
    parts: list[str] = []
    for kind, key, awaiting, _ in frames:
        if kind == "seq":
            parts.append(f"[{max(key, 0)}]")
        elif not awaiting and key is not None:   # a key whose value was being read
            parts.append(str(key))
    top = frames[-1] if frames else None
    if line_key and top and top[0] == "map" and (top[2] or error_line > top[3]):
        parts.append(line_key)   # stopped at a key of its own line (before its value began)
    if parts[:1] == ["config"]:  # the stack file's `config:` is not part of config paths
        parts = parts[1:]
    return "".join(p if p.startswith("[") or i == 0 else "." + p for i, p in enumerate(parts))


#: libyaml's loader when PyYAML has it (a 1 MiB file in ~0.1 s instead of ~1 s), else pure Python.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_PLAIN = (str, int, float, bool, type(None))


def _plain_data_findings(config: dict, source: str):
    """Findings for keys and values a Pulumi stack config cannot hold (not plain JSON data)."""
    stack: list[tuple[str, Any]] = [(str(k) if isinstance(k, str) else repr(k), v)
                                    for k, v in config.items() if isinstance(k, str)]
    for k in config:
        if not isinstance(k, str):
            yield Finding("config", f"config keys are strings like \"{NAMESPACE}:owner\" (got "
                          f"{k!r}); quote the key", source=source)
    while stack:
        path, v = stack.pop()
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str):
                    yield Finding(path, f"keys are strings (got {k!r}); quote the key",
                                  source=source)
                    continue
                stack.append((f"{path}.{k}", x))
        elif isinstance(v, list):
            stack.extend((f"{path}[{i}]", x) for i, x in enumerate(v))
        elif not isinstance(v, _PLAIN):
            kind = {"bytes": "binary data (!!binary)", "date": "a date", "datetime": "a timestamp",
                    "set": "a set (!!set)"}.get(type(v).__name__, type(v).__name__)
            yield Finding(path, f"{kind} is not a config value: use a string, number, true/false, "
                          "a list or a mapping (quote dates)", source=source)


def stack_name_from_path(path: Path) -> str:
    m = re.fullmatch(r"Pulumi\.(.+)\.yaml", Path(path).name)
    return m.group(1) if m else Path(path).stem


def display_path(path: Path) -> str:
    """Path as users see it: relative to the project dir when inside it."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(find_project_dir(p.parent)))
    except (ConfigError, ValueError):
        return str(path)


def values_for_pulumi(values: Mapping[str, Any]) -> dict[str, str]:
    """Config values as the Pulumi engine hands them to a program (objects as JSON strings)."""
    out = {}
    for k, v in values.items():
        if not isinstance(k, str) or v is None:
            continue
        out[k] = v if isinstance(v, str) else json.dumps(v)
    return out
