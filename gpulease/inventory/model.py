"""What the organisation already paid for: the inventory file's schema (issue 32).

`gpulease inventory --stack ENV` reads the accounts (AWS Reserved Instances, Savings Plans,
On-Demand Capacity Reservations, Capacity Blocks; GCP commitments, reservations and future
reservations) and writes one dated JSON document; offline plans read it back
(``gpulease:inventory: FILE``, else the default cache, :func:`cache_path`) so the policy fills
what is already paid for before it buys, and reports commitments nothing uses.

The document (format ``gpulease-inventory/1``)::

    {"format": "gpulease-inventory/1",
     "generated_at": "2026-12-04T15:00:00Z",
     "sources": [{"cloud": "aws", "scope": "123456789012", "regions": ["us-east-1"],
                  "read_at": "2026-12-04T15:00:00Z", "reads": ["DescribeReservedInstances"]}],
     "holdings": [{"id": "...", "cloud": "aws", "kind": "ec2-reserved-instances",
                   "model": "commitment", "region": "us-east-1", ...}]}

A holding's ``kind`` is the provider's product (:data:`KINDS`), its ``model`` the purchase
model it is (``gpulease.purchase``: commitment, reservation, capacity_block,
future_reservation). This module is the contract between the readers (``gpulease.inventory``'s
per-cloud collectors), the policy (what covers a cluster) and the plan header; it holds no
cloud calls and no policy.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpulease import clock, purchase
from gpulease.clouds import registry
from gpulease.errors import ConfigError, Finding

FORMAT = "gpulease-inventory/1"
#: the default cache `gpulease inventory` writes and plans read (like the quotes cache).
CACHE_ENV = "GPULEASE_INVENTORY_CACHE"
#: an inventory larger than this is not one (10,000 holdings are ~5 MB).
MAX_FILE_BYTES = 64 * 1024 * 1024

#: the provider products a holding may be: kind -> (cloud, purchase model), from each cloud's
#: object (``Cloud.inventory_kinds``).
KINDS: dict[str, tuple[str, str]] = {kind: (c.name, model) for c in registry.CLOUDS
                                     for kind, model in c.inventory_kinds}
#: RFC 3339 with a zone, as the APIs answer and the inventory stores (UTC "Z").
TIME_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$"

def _checked_time(value: str) -> str:
    clock.parse_time(value)   # a calendar time inside the years gpulease accepts
    return value


Time = Annotated[str, Field(pattern=TIME_PATTERN), AfterValidator(_checked_time)]
Usd = Annotated[float, Field(ge=0, le=1e12)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


class Holding(_Strict):
    """One thing already bought. Amounts in USD; times RFC 3339 with a zone."""

    id: str = Field(..., min_length=1, max_length=256, description="The provider's id "
                    "(reservedInstancesId, savingsPlanId, cr-..., commitment or reservation "
                    "name).")
    cloud: str = Field(..., description="Cloud name (gpulease.clouds.registry).")
    kind: str = Field(..., description="Provider product, a key of KINDS.")
    model: str = Field(..., description="Purchase model (gpulease.purchase) the kind is.")
    scope: str = Field("", max_length=256, description="AWS account id or GCP project id.")
    region: str = Field("", max_length=64, description="Region ('' for a regionless Savings "
                        "Plan).")
    zone: Optional[str] = Field(None, max_length=64, description="Zone, when zonal.")
    instance_type: Optional[str] = Field(None, max_length=64, description="EC2 instance type "
                                         "or GCE machine type, when the holding names one.")
    instance_family: Optional[str] = Field(None, max_length=64, description="EC2 instance "
                                           "family (an EC2 Instance Savings Plan) or GCE "
                                           "commitment type (e.g. ACCELERATOR_OPTIMIZED_A3).")
    instances: int = Field(0, ge=0, le=1_000_000, description="Instances held (0: a $/hour "
                           "commitment such as a Savings Plan).")
    accelerator_type: Optional[str] = Field(None, max_length=64, description="GCE accelerator "
                                            "type a commitment/reservation holds, e.g. "
                                            "nvidia-h100-80gb.")
    accelerators: int = Field(0, ge=0, le=10_000_000, description="Accelerators held (GCE).")
    start: Optional[Time] = None
    end: Optional[Time] = Field(None, description="When the term ends (None: open-ended, e.g. "
                                "an ODCR without an end date).")
    state: str = Field("", max_length=64, description="The provider's state, lower case "
                       "(active, scheduled, expired, retired, payment-pending, ...).")
    usd_per_hour: Optional[Usd] = Field(None, description="Recurring cost per hour of the whole "
                                        "holding (a Savings Plan's commitment; an RI's recurring "
                                        "charge times its count), when the API says.")
    upfront_usd: Optional[Usd] = Field(None, description="Paid up front for the whole holding.")
    used_instances: Optional[int] = Field(None, ge=0, le=1_000_000, description="Instances "
                                          "running in it now (ODCR: total - available).")
    term_months: Optional[int] = Field(None, ge=0, le=120)
    rates: dict[str, Usd] = Field(default_factory=dict, description="A Savings Plan's rate per "
                                  "instance-hour, keyed ``region/instance type`` "
                                  "(DescribeSavingsPlanRates, Linux, shared tenancy), for the "
                                  "GPU types the stack's catalog offers.")
    detail: dict[str, str] = Field(default_factory=dict, description="Other provider fields, "
                                   "as text (payment option, offering class, plan type...).")

    @field_validator("cloud")
    @classmethod
    def _known_cloud(cls, v: str) -> str:
        if not registry.is_cloud(v):
            raise ValueError(f"unknown cloud {v!r} (known: {', '.join(registry.NAMES)})")
        return v

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        if v not in KINDS:
            raise ValueError(f"unknown kind {v!r} (known: {', '.join(KINDS)})")
        return v

    def model_post_init(self, _ctx: Any) -> None:
        cloud, model = KINDS[self.kind]
        if self.cloud != cloud:
            raise ValueError(f"a {self.kind} holding is on {cloud}, not {self.cloud}")
        if self.model != model:
            raise ValueError(f"a {self.kind} holding is a {model}, not {self.model}")

    def active_at(self, t: dt.datetime) -> bool:
        """True when the term covers ``t`` (an aware datetime)."""
        s = parse_time(self.start) if self.start else None
        e = parse_time(self.end) if self.end else None
        return (s is None or s <= t) and (e is None or t < e)

    def ended_by(self, t: dt.datetime) -> bool:
        return self.end is not None and parse_time(self.end) <= t

    @property
    def utilisation(self) -> Optional[float]:
        """Share of the held instances in use now (None when unknown)."""
        if self.used_instances is None or not self.instances:
            return None
        return min(1.0, self.used_instances / self.instances)


class Source(_Strict):
    cloud: str
    scope: str = Field("", max_length=256)
    regions: list[str] = Field(default_factory=list)
    read_at: Time
    reads: list[str] = Field(default_factory=list, description="API operations called.")


class Inventory(_Strict):
    format: str = Field(FORMAT, pattern="^" + FORMAT.replace(".", r"\.") + "$")
    generated_at: Time
    sources: list[Source] = Field(default_factory=list)
    holdings: list[Holding] = Field(default_factory=list)
    #: where it was read from (not part of the document)
    origin: str = Field("", exclude=True)

    @cached_property
    def generated(self) -> dt.datetime:
        return parse_time(self.generated_at)

    def active(self, t: dt.datetime) -> list[Holding]:
        return [h for h in self.holdings if h.active_at(t)]

    def as_json(self) -> dict:
        return self.model_dump(mode="json", exclude={"origin"}, exclude_none=True)


#: an inventory older than this is called stale in the plan header (commitments and
#: reservations are bought and expire between reads; docs/inventory.md "Freshness").
STALE_DAYS = 7


def plan_header(inv: Optional[Inventory], now: dt.datetime) -> Optional[dict]:
    """The plan's ``inventory`` object: which file, read when, how many holdings (active at
    ``now``), its age in days and whether it is stale; None when the plan uses none."""
    if inv is None:
        return None
    age = (now - inv.generated).total_seconds() / 86400
    return {"file": inv.origin, "generated_at": inv.generated_at,
            "holdings": len(inv.holdings), "active": len(inv.active(now)),
            "sources": [f"{s.cloud} {s.scope}".strip() for s in inv.sources],
            "age_days": round(age, 1), "stale": age > STALE_DAYS}


def header_text(doc: Optional[dict]) -> Optional[str]:
    """"inventory.json read 2026-12-04T15:00:00Z, 12 holdings (9 active)" (+ stale advice),
    the plan header's line; None when no inventory was used."""
    if not doc:
        return None
    from gpulease.text import plural

    text = (f"{doc['file']} read {doc['generated_at']}, {plural(doc['holdings'], 'holding')} "
            f"({doc['active']} active)")
    if doc.get("sources"):
        text += " of " + ", ".join(doc["sources"])
    if doc.get("stale"):
        text += (f"; {doc['age_days']:g} days old: run `gpulease inventory` again before "
                 "deciding on it")
    return text


def parse_time(text: str) -> dt.datetime:
    """An RFC 3339 time with a zone, by the one reader (gpulease.clock.parse_time)."""
    return clock.parse_time(text)


def cache_path() -> Path:
    """``$GPULEASE_INVENTORY_CACHE``, else ``$XDG_CACHE_HOME/gpulease/inventory.json``
    (``~/.cache/...``)."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(str(Path.home()), ".cache")
    return Path(base, "gpulease", "inventory.json")


def _headline(path: str) -> str:
    return f"{path}: invalid inventory file (see docs/inventory.md):"


def parse(raw: Any, *, source: str) -> Inventory:
    """Validate an inventory document (every finding at once; ConfigError, exit 2)."""
    if not isinstance(raw, dict):
        raise ConfigError([Finding("", f"an inventory is a JSON object (got "
                                       f"{type(raw).__name__})", source=source)],
                          headline=_headline(source))
    try:
        inv = Inventory.model_validate(raw)
    except ValidationError as exc:
        from gpulease.catalog.schema import findings_from

        raise ConfigError(findings_from(exc, prefix="", source=source),
                          headline=_headline(source)) from None
    return inv.model_copy(update={"origin": source})


def load(path: Path) -> Inventory:
    """Read an inventory file through the input boundary (size, UTF-8, strict JSON)."""
    from gpulease import inputs

    raw = inputs.load_json(path, error=ConfigError, field="", what="inventory file",
                           limit=MAX_FILE_BYTES, headline=_headline(str(path)),
                           hint="; write it again with `gpulease inventory --stack ENV`")
    return parse(raw, source=str(path))


def load_for(stack) -> Optional[Inventory]:
    """The inventory a stack plans with: ``gpulease:inventory`` (a path, relative to the working
    directory like ``gpulease:catalog``; a file it names must exist: exit 2 at that key), else
    the default cache (:func:`cache_path`) when it exists, else None (nothing known to be paid
    for)."""
    named = getattr(stack, "inventory", None)
    if named:
        path = Path(named)
        if not path.is_file():
            raise ConfigError([Finding("gpulease:inventory", f"names {named!r}, which is not a "
                                       "file; write it with `gpulease inventory --stack "
                                       f"{stack.stack} --out {named}` or remove the key",
                                       source=stack.source)],
                              headline=f"{stack.source}: invalid configuration:")
        return load(path)
    cached = cache_path()
    return load(cached) if cached.is_file() else None


def write(inv: Inventory, path: Path) -> Path:
    """Write atomically (a temp file renamed over the target)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".inventory-", dir=str(path.parent))
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(inv.as_json(), fh, indent=1, allow_nan=False, sort_keys=False)
        fh.write("\n")
    os.replace(tmp, path)
    return path
