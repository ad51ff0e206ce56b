"""GCP fetcher: Compute Engine SKUs from the Cloud Billing Catalog, combined per machine type.

GCP bills a GPU VM as components, so a machine type's hourly price is assembled from SKUs
(https://cloud.google.com/compute/gpus-pricing, /vm-instance-pricing):

- accelerator-optimized families (a2, a3, g2, a4) bundle their GPUs, but the Billing Catalog
  still lists the parts: "<FAM> Instance Core" ($/vCPU-h), "<FAM> Instance Ram" ($/GiB-h) and a GPU
  SKU ("Nvidia H100 80GB GPU", "Nvidia L4 GPU", ...) -> price = vCPUs x core + GiB x ram +
  GPUs x gpu;
- n1 with attached T4/V100: "N1 Predefined Instance Core/Ram" + the attached accelerator SKU.

``usageType`` picks the column: OnDemand, Preemptible (Spot VMs: "Spot Preemptible ..."),
Commit1Yr / Commit3Yr ("Commitment v1: A2 Cpu in ... for 1 Year", "Commitment v1: Nvidia ... GPU").
A column is filled only when every component of the machine type has a SKU of that usage type
in the region; otherwise it is kept from the snapshot and marked. ``unitPrice`` is
``units + nanos / 1e9`` of the first non-zero tier (compute SKUs have a single tier).
Machine types (vCPUs, memory, bundled accelerators, zones) come from
``MachineTypesClient.aggregated_list`` and accelerator zones from
``AcceleratorTypesClient.aggregated_list`` when a project is given; without one, the specs of the
snapshot row are used for the combination and zones are left as they were.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from gpulease.catalog.fetchers import CloudFetch, Failure, Fetched, Progress
from gpulease.catalog.fetchers.clients import GCE_SERVICE, GcpClients, gcp_call
from gpulease.errors import CloudError

if TYPE_CHECKING:
    import datetime as dt

    from gpulease.catalog import Catalog

BILLING_SOURCE = "gcp-cloud-billing-catalog"
COMPUTE_SOURCE = "gcp-compute-machine-types"

USAGE_COLUMNS = {"OnDemand": "on_demand_usd", "Preemptible": "spot_usd",
                 "Commit1Yr": "commit_1y_usd", "Commit3Yr": "commit_3y_usd"}

#: Accelerator bundled with each accelerator-optimized machine series
#: (https://cloud.google.com/compute/docs/gpus). Used when no project lets us ask Compute.
BUNDLED_ACCELERATOR = {
    "a4-highgpu": "nvidia-b200", "a3-ultragpu": "nvidia-h200-141gb",
    "a3-megagpu": "nvidia-h100-mega-80gb", "a3-highgpu": "nvidia-h100-80gb",
    "a3-edgegpu": "nvidia-h100-80gb", "a2-ultragpu": "nvidia-a100-80gb",
    "a2-highgpu": "nvidia-tesla-a100", "a2-megagpu": "nvidia-tesla-a100",
    "g2-standard": "nvidia-l4",
}
#: GPU SKU description -> accelerator type (first match wins; order matters).
_GPU_PATTERNS = (
    (r"h100 80gb mega|h100 mega 80gb|h100 80gb plus", "nvidia-h100-mega-80gb"),
    (r"h100", "nvidia-h100-80gb"),
    (r"h200", "nvidia-h200-141gb"),
    (r"b200", "nvidia-b200"),
    (r"a100 80gb", "nvidia-a100-80gb"),
    (r"a100", "nvidia-tesla-a100"),
    (r"\bl4\b", "nvidia-l4"),
    (r"\bt4\b", "nvidia-tesla-t4"),
    (r"\bv100\b", "nvidia-tesla-v100"),
)
#: SKUs that price something other than a plain VM of the type (sole tenancy, workstation
#: licences, DWS modes, custom shapes, ...).
_EXCLUDE = re.compile(r"sole tenancy|custom|premium|extended|virtual workstation|\bvws\b|"
                      r"reserved|dws|flex|calendar|licen[cs]e")
#: Machine family -> how its core/ram SKUs are named (n1 commitments carry no family name).
_FAMILY_WORDS = {"a2": "a2", "a3": "a3", "a4": "a4", "g2": "g2", "n1": "n1 predefined"}


@dataclass(frozen=True)
class SkuPrice:
    kind: str          # gpu | core | ram
    key: str           # accelerator type (gpu) or machine family (core/ram)
    column: str        # on_demand_usd | spot_usd | commit_1y_usd | commit_3y_usd
    regions: tuple[str, ...]
    usd: float
    description: str


@dataclass(frozen=True)
class Target:
    """One catalog row to price: the machine type and what it is made of (from the snapshot)."""

    instance_type: str
    vcpus: int
    memory_gb: float
    gpus: int
    accelerator_type: Optional[str] = None   # attached accelerator (n1) or None = bundled


def _unit_usd(sku: Any) -> Optional[float]:
    if not sku.pricing_info:
        return None
    expr = sku.pricing_info[0].pricing_expression
    for tier in expr.tiered_rates:
        usd = int(tier.unit_price.units or 0) + tier.unit_price.nanos / 1e9
        if usd > 0:
            return usd
    return None


def classify_sku(sku: Any) -> Optional[SkuPrice]:
    """A billing_v1.Sku -> what it prices, or None when it is not a VM component we combine."""
    desc = sku.description
    low = desc.lower()
    column = USAGE_COLUMNS.get(sku.category.usage_type)
    if column is None or _EXCLUDE.search(low):
        return None
    usd = _unit_usd(sku)
    if usd is None:
        return None
    unit = sku.pricing_info[0].pricing_expression.usage_unit
    group = sku.category.resource_group
    regions = tuple(sku.service_regions)
    if group == "GPU" or ("nvidia" in low and "gpu" in low):
        if unit != "h":
            return None
        for pat, accel in _GPU_PATTERNS:
            if re.search(pat, low):
                return SkuPrice("gpu", accel, column, regions, usd, desc)
        return None
    body = re.sub(r"^(spot preemptible|preemptible|commitment v1:)\s+", "", low)
    if column.startswith("commit"):
        m = re.match(r"(?:(a2|a3|a4|g2)\s+)?(cpu|ram)\s+in\b", body)
        if not m:
            return None
        fam, part = m.group(1) or "n1", m.group(2)
        kind = "core" if part == "cpu" else "ram"
    else:
        m = re.match(r"(a2|a3|a4|g2|n1 predefined) instance (core|ram)\b", body)
        if not m:
            return None
        fam, kind = m.group(1).split()[0], m.group(2)
    if (kind == "core" and unit != "h") or (kind == "ram" and unit != "GiBy.h"):
        return None
    return SkuPrice(kind, fam, column, regions, usd, desc)


def list_compute_skus(clients: GcpClients) -> list[SkuPrice]:
    """All Compute Engine SKUs we can use (the pager follows nextPageToken)."""
    def call():
        return [p for p in (classify_sku(s) for s in
                            clients.catalog.list_skus(parent=GCE_SERVICE)) if p]
    return gcp_call(clients, "billing.list_skus", call)


def price_table(skus: list[SkuPrice]) -> dict:
    table: dict = {}
    for s in skus:
        for r in s.regions:
            # several SKUs for one component (rare): keep the higher, never under-estimate.
            k = (s.kind, s.key, s.column, r)
            table[k] = max(table.get(k, 0.0), s.usd)
    return table


def family_of(instance_type: str) -> str:
    return instance_type.split("-", 1)[0]


def combine(target: Target, region: str, table: dict) -> tuple[dict, list[str]]:
    """Hourly prices per column for one machine type in one region, and what was missing."""
    fam = family_of(target.instance_type)
    series = "-".join(target.instance_type.split("-")[:2])
    accel = target.accelerator_type or BUNDLED_ACCELERATOR.get(series)
    prices: dict = {}
    gaps: dict[str, list[str]] = {}          # missing components -> columns
    for column in USAGE_COLUMNS.values():
        core = table.get(("core", fam, column, region))
        ram = table.get(("ram", fam, column, region))
        gpu = table.get(("gpu", accel, column, region)) if accel else None
        if core is None or ram is None or (target.gpus and gpu is None):
            what = ", ".join(n for n, v in (("core", core), ("ram", ram),
                                            (f"{accel} GPU", gpu)) if v is None)
            gaps.setdefault(what, []).append(column)
            continue
        prices[column] = round(target.vcpus * core + target.memory_gb * ram
                               + target.gpus * (gpu or 0.0), 6)
    missing = [f"no {fam} {what} SKU in {region} for {', '.join(cols)}"
               for what, cols in gaps.items()]
    return prices, missing


def _name_filter(names) -> str:
    return " OR ".join(f'(name = "{n}")' for n in sorted(names))


def machine_types(clients: GcpClients, names: set[str]) -> dict:
    """(region, machine type) -> {"vcpus", "memory_gb", "accelerator_type", "gpus", "zones"}."""
    def call():
        found: dict = {}
        pager = clients.machine_types.aggregated_list(
            request={"project": clients.project, "filter": _name_filter(names)})
        for scope, scoped in pager:
            for mt in scoped.machine_types:
                zone = mt.zone.rsplit("/", 1)[-1] or scope.split("/", 1)[-1]
                region = zone.rsplit("-", 1)[0]
                acc = mt.accelerators[0] if mt.accelerators else None
                row = found.setdefault((region, mt.name), {
                    "vcpus": mt.guest_cpus, "memory_gb": round(mt.memory_mb / 1024, 2),
                    "accelerator_type": acc.guest_accelerator_type if acc else None,
                    "gpus": acc.guest_accelerator_count if acc else 0, "zones": []})
                row["zones"].append(zone)
        return found
    return gcp_call(clients, "compute.machineTypes.aggregatedList", call)


def accelerator_zones(clients: GcpClients, names: set[str]) -> dict:
    """accelerator type -> zones offering it."""
    def call():
        zones: dict = {}
        pager = clients.accelerator_types.aggregated_list(
            request={"project": clients.project, "filter": _name_filter(names)})
        for _scope, scoped in pager:
            for at in scoped.accelerator_types:
                zones.setdefault(at.name, set()).add(at.zone.rsplit("/", 1)[-1])
        return zones
    return gcp_call(clients, "compute.acceleratorTypes.aggregatedList", call)


def fetch_gcp(clients: GcpClients, *, targets: dict[str, list[Target]],
              progress: Progress = lambda _m: None) -> CloudFetch:
    """Refresh ``targets`` (region -> Targets). One SKU listing serves every region."""
    out = CloudFetch(cloud="gcp", apis=(BILLING_SOURCE, COMPUTE_SOURCE))
    regions = sorted(targets)
    total = 1 + (1 if clients.project and clients.machine_types else 0) + len(regions)
    step = [0]

    def tick(msg: str) -> None:
        step[0] += 1
        progress(f"[{step[0]}/{total}] gcp {msg}")

    table: Optional[dict] = None
    try:
        skus = list_compute_skus(clients)
        table = price_table(skus)
        out.calls += 1
        tick(f"billing catalog: {len(skus)} usable Compute Engine SKUs")
    except CloudError as exc:
        for r in regions:
            out.failures.append(Failure("gcp", r, "billing.list_skus", str(exc)))
        tick("billing catalog: FAILED")

    specs: dict = {}
    if clients.project and clients.machine_types:
        names = {t.instance_type for ts in targets.values() for t in ts}
        accels = {t.accelerator_type for ts in targets.values() for t in ts if t.accelerator_type}
        try:
            specs = machine_types(clients, names)
            azones = accelerator_zones(clients, accels) if accels else {}
            for (region, name), s in specs.items():
                s["zones"] = sorted(s["zones"])
            for region in regions:
                out.offered[region] = {name for (r, name) in specs if r == region}
            for ts in targets.values():
                for t in ts:
                    if t.accelerator_type:
                        for (region, name), s in specs.items():
                            if name == t.instance_type:
                                s.setdefault("accel_zones", {})[t.accelerator_type] = sorted(
                                    set(s["zones"]) & azones.get(t.accelerator_type, set()))
            tick(f"compute machine types: {len(specs)} (region, type) pairs in project "
                 f"{clients.project}")
        except CloudError as exc:
            for r in regions:
                out.failures.append(Failure("gcp", r, "compute.machineTypes", str(exc)))
            specs = {}
            tick("compute machine types: FAILED")

    for region in regions:
        if table is None:
            tick(f"{region}: no prices (billing catalog unavailable)")
            continue
        out.priced_regions.add(region)
        priced = 0
        for t in targets[region]:
            s = specs.get((region, t.instance_type))
            if s is None and region in out.offered:
                continue          # Compute says the type is not offered in this region
            if s:
                t = Target(instance_type=t.instance_type, vcpus=s["vcpus"],
                           memory_gb=s["memory_gb"],
                           gpus=s["gpus"] or t.gpus,
                           accelerator_type=t.accelerator_type)
            prices, missing = combine(t, region, table)
            if prices:
                priced += 1
            zones: tuple = ()
            if s:
                zones = tuple((s.get("accel_zones") or {}).get(t.accelerator_type, s["zones"])
                              if t.accelerator_type else s["zones"])
            spec_cols = {"vcpus": t.vcpus, "memory_gb": t.memory_gb,
                         "spec_source": COMPUTE_SOURCE} if s else {}
            out.rows[(region, t.instance_type)] = Fetched(
                cloud="gcp", region=region, instance_type=t.instance_type, prices=prices,
                price_sources={c: BILLING_SOURCE for c in prices}, specs=spec_cols,
                zones=zones, notes=tuple(missing))
        tick(f"{region}: priced {priced} of {len(targets[region])} machine types")
    return out


# ---- the refresh's entry point (``Cloud.fetcher_module``) -----------------------------------------
def targets(base: "Catalog", regions: list[str]) -> dict[str, list[Target]]:
    """Region -> the machine types to refresh there (with the specs the SKUs combine with): the
    base catalog's GCP rows in that region, or one row per GCP type in a region it lacks."""
    def target(o) -> Target:
        return Target(instance_type=o.instance_type, vcpus=o.vcpus, memory_gb=o.memory_gb,
                      gpus=o.gpus_per_node, accelerator_type=o.accelerator_type)

    by_type: dict = {}
    for o in base.offerings_for(cloud="gcp"):
        by_type.setdefault(o.instance_type, o)
    out = {}
    for r in regions:
        here = base.offerings_for(cloud="gcp", region=r)
        out[r] = [target(o) for o in (here or by_type.values())]
    return out


def fetch(clients: GcpClients, base: "Catalog", regions: list[str], *, now: "dt.datetime",
          progress: Progress = lambda _m: None) -> CloudFetch:
    """`gpulease catalog refresh` on GCP: ``regions`` of ``base`` (one SKU listing for all)."""
    return fetch_gcp(clients, targets=targets(base, regions), progress=progress)

