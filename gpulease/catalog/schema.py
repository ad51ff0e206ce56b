"""The catalog file's schema (pydantic): types, ranges and cross-field rules, as located findings.

Two formats load: ``gpulease-catalog/1`` (the 2026.12.02 snapshot: no zones, one spot price per
region, cloud-wide egress) and ``gpulease-catalog/2`` (zones on every row, per-zone spot prices,
storage retrieval fees and minimum durations, egress per region). Hard problems are errors
(the file does not load, exit 2); soft ones are warnings carried on ``Catalog.warnings``.
Every finding names the row: ``offerings[12] (aws us-east-1 p5.48xlarge).spot_usd``.
"""
from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr,
                      ValidationError, model_validator)

from gpulease.clouds import registry
from gpulease.errors import Finding
from gpulease.catalog.invariants import price_problems
from gpulease.model import CLOUDS, EGRESS_KINDS, RDMA_KINDS
from gpulease.purchase import CATALOG_OPTIONS, COMMITMENT, ON_DEMAND, SPOT

FORMAT_V1 = "gpulease-catalog/1"
FORMAT_V2 = "gpulease-catalog/2"
FORMATS = (FORMAT_V1, FORMAT_V2)

#: Storage classes each cloud's API accepts, in lifecycle order (``Cloud.storage_classes``).
STORAGE_CLASSES = {c.name: c.storage_classes for c in registry.CLOUDS}
VERSION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]{0,63}$")
ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

#: Plausibility bounds (a row outside is an error: a transcription slip, not a machine).
MAX_GPUS_PER_NODE = 16
MAX_GPU_MEMORY_GB = 300.0
MAX_VCPUS = 1024
MAX_MEMORY_GB = 32768.0
MAX_NETWORK_GBPS = 10000.0

Money = Annotated[Union[StrictInt, StrictFloat], Field(ge=0, allow_inf_nan=False)]
Positive = Annotated[Union[StrictInt, StrictFloat], Field(gt=0, allow_inf_nan=False)]
Text = Annotated[StrictStr, Field(max_length=4000)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceRow(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    url: Optional[StrictStr] = None
    title: Optional[StrictStr] = None
    retrieved: Optional[StrictStr] = None
    published: Optional[StrictStr] = None


PriceKey = Literal["on_demand", "spot", "commit_1y", "commit_3y"]


class PriceComponent(_Strict):
    """One part of a node's price (a host's SKUs, a GPU SKU, ...) with its source and date."""

    part: Annotated[StrictStr, Field(min_length=1, max_length=300)]
    usd: Positive
    source: Annotated[StrictStr, Field(max_length=200)] = ""
    as_of: Optional[Annotated[StrictStr, Field(max_length=40)]] = None


class CrossCheck(_Strict):
    """Another source's figure for one price of the row (the row keeps the one its precedence
    picked; docs/catalog.md 'Sources that disagree')."""

    column: PriceKey
    source: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    usd: Positive
    as_of: Optional[Annotated[StrictStr, Field(max_length=40)]] = None
    diff_pct: Annotated[Union[StrictInt, StrictFloat], Field(allow_inf_nan=False)]


class OfferingRow(_Strict):
    cloud: Literal[CLOUDS]  # type: ignore[valid-type]
    region: Annotated[StrictStr, Field(min_length=1, max_length=64)]
    instance_type: Annotated[StrictStr, Field(min_length=1, max_length=64)]
    gpu: Annotated[StrictStr, Field(min_length=1, max_length=32)]
    gpus_per_node: Annotated[StrictInt, Field(ge=1, le=MAX_GPUS_PER_NODE)]
    gpu_memory_gb: Annotated[Union[StrictInt, StrictFloat],
                             Field(gt=0, le=MAX_GPU_MEMORY_GB, allow_inf_nan=False)]
    vcpus: Annotated[StrictInt, Field(ge=1, le=MAX_VCPUS)]
    memory_gb: Annotated[Union[StrictInt, StrictFloat],
                         Field(gt=0, le=MAX_MEMORY_GB, allow_inf_nan=False)]
    network_gbps: Annotated[Union[StrictInt, StrictFloat],
                            Field(ge=0, le=MAX_NETWORK_GBPS, allow_inf_nan=False)]
    rdma: Literal["efa", "gpudirect-tcpx", "gpudirect-tcpxo", "rdma", "none"]
    on_demand_usd: Optional[Positive]
    spot_usd: Optional[Positive]
    commit_1y_usd: Optional[Positive]
    commit_3y_usd: Optional[Positive]
    source: Text = ""
    as_of: Text = ""
    zones: list[Annotated[StrictStr, Field(min_length=1, max_length=64)]] = []
    zone_spot_usd: dict[StrictStr, Positive] = {}
    zones_source: Optional[Text] = None
    accelerator_type: Optional[StrictStr] = None
    network_cards: Optional[Annotated[StrictInt, Field(ge=1, le=64)]] = None
    efa_interfaces: Optional[Annotated[StrictInt, Field(ge=0, le=64)]] = None
    local_nvme_gb: Annotated[Union[StrictInt, StrictFloat], Field(ge=0, allow_inf_nan=False)] = 0
    notes: Text = ""
    price_sources: dict[StrictStr, Optional[StrictStr]] = {}
    #: how the offering can be bought (gpulease.purchase.CATALOG_OPTIONS); absent = derived from
    #: the prices (catalogs before 2026.12.03.1).
    purchase_options: Optional[list[Literal[CATALOG_OPTIONS]]] = None  # type: ignore[valid-type]
    #: source id (``sources`` map) of the documentation the purchase options come from.
    purchase_options_source: Optional[Annotated[StrictStr, Field(max_length=200)]] = None
    #: placement the type supports: AWS cluster placement group / GCP compact placement policy.
    placement: Optional[Literal["cluster", "compact"]] = None
    #: per purchase model, what the node's GPUs alone cost (their own SKUs): the price floor.
    gpu_sku_usd: dict[PriceKey, Positive] = {}
    #: per purchase model, the parts the price is the sum of, each with its source and date.
    price_components: dict[PriceKey, list[PriceComponent]] = {}
    #: other sources' figures for the same prices.
    cross_checks: list[CrossCheck] = []

    @model_validator(mode="after")
    def _consistent(self) -> "OfferingRow":
        od = self.on_demand_usd
        problems = [msg for _, _, msg in price_problems({
            "gpus_per_node": self.gpus_per_node, "on_demand_usd": od, "spot_usd": self.spot_usd,
            "commit_1y_usd": self.commit_1y_usd, "commit_3y_usd": self.commit_3y_usd,
            "zone_spot_usd": self.zone_spot_usd, "gpu_sku_usd": self.gpu_sku_usd,
            "price_components": {k: [{"usd": p.usd} for p in v]
                                 for k, v in self.price_components.items()}})]
        opts = self.purchase_options
        if opts is not None:
            if not opts:
                problems.append("purchase_options is empty (list how the offering is sold, "
                                f"from {', '.join(CATALOG_OPTIONS)})")
            if len(set(opts)) != len(opts):
                problems.append("purchase_options lists an option twice")
            for col, opt in (("on_demand_usd", ON_DEMAND), ("spot_usd", SPOT),
                             ("commit_1y_usd", COMMITMENT), ("commit_3y_usd", COMMITMENT)):
                if getattr(self, col) is not None and opt not in opts:
                    problems.append(f"{col} is priced but purchase_options has no {opt} (a "
                                    "price for a way the offering is not sold; drop the price "
                                    "or fix the options)")
            if self.zone_spot_usd and SPOT not in opts:
                problems.append("zone_spot_usd is priced but purchase_options has no spot")
        if len(set(self.zones)) != len(self.zones):
            problems.append("zones lists a zone twice")
        cloud = registry.get(self.cloud)
        bad = [z for z in self.zones if not re.match(cloud.zone_pattern, z)
               or (cloud.zones_in_region and not z.startswith(self.region + "-"))]
        if bad:
            problems.append(f"zones {bad} are not {cloud.zones_text.format(region=self.region)}")
        stray = sorted(set(self.zone_spot_usd) - set(self.zones))
        if stray:
            problems.append(f"zone_spot_usd names zones not in zones: {stray}")
        if self.zone_spot_usd and self.spot_usd is not None:
            low = min(self.zone_spot_usd.values())
            if not math.isclose(self.spot_usd, low, rel_tol=0, abs_tol=1e-9):
                problems.append(f"spot_usd {self.spot_usd} must equal the cheapest zone's spot "
                                f"price {low} (the policy places spot in the cheapest zone)")
        if self.efa_interfaces and self.network_cards and self.efa_interfaces > self.network_cards:
            problems.append("efa_interfaces exceeds network_cards")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class StorageRow(_Strict):
    cloud: Literal[CLOUDS]  # type: ignore[valid-type]
    region: Annotated[StrictStr, Field(min_length=1, max_length=64)]
    storage_class: StrictStr
    usd_per_gb_month: Money
    min_storage_days: Annotated[StrictInt, Field(ge=0, le=3650)] = 0
    retrieval_usd_per_gb: Optional[Money] = None
    source: Text = ""
    as_of: Text = ""
    estimate: StrictBool = False
    notes: Text = ""

    @model_validator(mode="after")
    def _known_class(self) -> "StorageRow":
        known = STORAGE_CLASSES[self.cloud]
        if self.storage_class not in known:
            raise ValueError(f'storage_class "{self.storage_class}" is not a {self.cloud} class '
                             f"({', '.join(known)})")
        return self


class EgressRow(_Strict):
    cloud: Literal[CLOUDS]  # type: ignore[valid-type]
    kind: Literal["inter_region", "inter_continent", "inter_cloud", "internet"]
    usd_per_gb: Money
    region: Optional[Annotated[StrictStr, Field(min_length=1, max_length=64)]] = None
    source: Text = ""
    as_of: Text = ""
    estimate: StrictBool = False
    notes: Text = ""


class InfraRow(_Strict):
    cloud: Literal[CLOUDS]  # type: ignore[valid-type]
    item: Annotated[StrictStr, Field(min_length=1)]
    unit: Annotated[StrictStr, Field(min_length=1)]
    usd: Money
    source: Text = ""


class SpotInterruption(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    interruptions_per_hour: Annotated[Union[StrictInt, StrictFloat],
                                      Field(ge=0, le=1, allow_inf_nan=False)]
    source: Text = ""


class CatalogDoc(_Strict):
    format: Literal["gpulease-catalog/1", "gpulease-catalog/2"]
    version: Annotated[StrictStr, Field(pattern=VERSION.pattern)]
    as_of: Annotated[StrictStr, Field(pattern=ISO_DATE.pattern)]
    description: Text = ""
    sources: dict[StrictStr, SourceRow] = {}
    offerings: Annotated[list[Any], Field(min_length=1)]
    storage: list[Any] = []
    egress: list[Any] = []
    infra: list[Any] = []
    spot_interruptions: dict[Literal[CLOUDS], SpotInterruption] = {}  # type: ignore[valid-type]
    #: format /2: the dates the data was published, per source kind (shown by `catalog
    #: versions` and `plan`).
    data_dates: dict[StrictStr, StrictStr] = {}
    generated_by: Optional[dict[StrictStr, Any]] = None
    checksum: Optional[StrictStr] = None


# ---- turning pydantic errors into located findings ------------------------------------------
def _loc_text(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("int", "float", "str", "bool", "function-after[_consistent()]",
                      "function-after[_known_class()]") or "[" in str(part):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out


def _message(err: dict) -> str:
    msg = err.get("msg", "invalid")
    msg = msg.removeprefix("Value error, ")
    inp = err.get("input")
    if err.get("type") in ("finite_number",) or (isinstance(inp, float)
                                                 and not math.isfinite(inp)):
        return "must be a finite number (NaN and Infinity are not prices)"
    if err.get("type") not in ("missing", "value_error") and not isinstance(inp, (dict, list)):
        msg += f" (got {inp!r})"
    return msg


def findings_from(exc: ValidationError, *, prefix: str, source: str,
                  label: str = "") -> list[Finding]:
    """One finding per pydantic error (deduplicated across the int/float union branches)."""
    seen: dict[str, str] = {}
    for err in exc.errors(include_url=False):
        loc = _loc_text(tuple(err.get("loc", ())))
        path = prefix + (("." + loc) if loc and prefix else loc)
        if label:
            path = path.replace(prefix, f"{prefix} ({label})", 1) if prefix else path
        msg = _message(err)
        # a union of int | float reports both branches; keep the more telling message
        if path in seen and "finite" not in msg and "greater" not in msg and "less" not in msg:
            continue
        seen[path] = msg
    return [Finding(p, m, source=source) for p, m in seen.items()]


def row_label(row: Any, kind: str) -> str:
    if not isinstance(row, dict):
        return ""
    keys = {"offerings": ("cloud", "region", "instance_type"),
            "storage": ("cloud", "region", "storage_class"),
            "egress": ("cloud", "region", "kind"), "infra": ("cloud", "item")}[kind]
    parts = [str(row.get(k)) for k in keys if isinstance(row.get(k), (str, int, float))]
    return " ".join(parts)


__all__ = ["CatalogDoc", "OfferingRow", "StorageRow", "EgressRow", "InfraRow", "SourceRow",
           "SpotInterruption", "FORMAT_V1", "FORMAT_V2", "FORMATS", "STORAGE_CLASSES",
           "findings_from", "row_label", "CLOUDS", "RDMA_KINDS",
           "EGRESS_KINDS"]
