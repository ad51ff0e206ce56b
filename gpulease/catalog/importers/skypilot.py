"""`gpulease catalog import skypilot DIR`: SkyPilot's v8 catalog CSVs -> a gpulease catalog (/2).

DIR is laid out like ``~/.sky/catalogs/v8``: ``aws/vms.csv`` and/or ``gcp/vms.csv``. SkyPilot
lists one row per zone. AWS rows carry zone IDs (``use1-az1``) and per-zone spot prices. A GCP
GPU VM is two kinds of rows: the host machine type (no accelerator) and the accelerator
(``InstanceType`` empty, ``AcceleratorName`` / ``AcceleratorCount``); the node price is their
sum in the same zone, and the zones are those listing both. GPUs attached to N1 (T4, V100, P4,
P100) get the host SkyPilot's optimizer pairs them with (``n1_host``): every GPU count the CSV
lists becomes an offering.

Input is checked before anything is written (exit 2, every finding with ``file:line``): region
and zone names against the clouds' patterns, whole GPU counts and vCPUs, prices that are finite,
non-negative and plausible per GPU-hour (``gpulease.catalog.invariants``), and rows that contradict
each other (one instance type with two GPU models, GPU counts, vCPU or memory figures, or one
zone with two prices). Where a rule resolves a difference (zones of a region with different
on-demand prices, spot above on-demand in a zone, a host listed at 0.0) the import warns with
the rule it applied.

What SkyPilot does not carry comes from the family facts (``gpulease/catalog/families.json``:
purchase options, RDMA kind, network cards / EFA interfaces, placement) and a base catalog
(``--base``, default the shipped one: network bandwidth, local NVMe and commitment prices of the
same offering; storage, egress, NAT and spot-interruption sections). What neither has stays null
with a note.
"""
from __future__ import annotations

import ast
import csv
import datetime as dt
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from gpulease import inputs
from gpulease.catalog import FORMAT_V2, Catalog
from gpulease.catalog.families import facts_for, family_sources
from gpulease.catalog.invariants import INVARIANTS, PLAUSIBLE_USD_PER_GPU_HOUR, enforce
from gpulease.clouds import registry
from gpulease.errors import Finding, InputError
from gpulease.purchase import COMMITMENT, ON_DEMAND, SPOT

SOURCE_ID = "skypilot-import"

#: SkyPilot accelerator name -> gpulease GPU name (models gpulease plans for).
GPU_NAMES = {"T4": "T4", "A10G": "A10G", "L4": "L4", "L40S": "L40S", "V100": "V100",
             "V100-32GB": "V100", "A100": "A100", "A100-80GB": "A100-80GB", "H100": "H100",
             "H100-MEGA": "H100", "H200": "H200", "B200": "B200", "P4": "P4", "P100": "P100"}
#: memory per GPU (GB, as marketed) when neither the base nor the CSV says.
GPU_MEMORY_GB = {"T4": 16, "A10G": 24, "L4": 24, "L40S": 48, "V100": 16, "A100": 40,
                 "A100-80GB": 80, "H100": 80, "H200": 141, "B200": 180, "P4": 8, "P100": 16}
#: GCP accelerator-optimized machine series -> SkyPilot accelerator name.
GCP_SERIES = {"a2-highgpu": "A100", "a2-megagpu": "A100", "a2-ultragpu": "A100-80GB",
              "a3-highgpu": "H100", "a3-megagpu": "H100-MEGA", "a3-ultragpu": "H200",
              "a4-highgpu": "B200", "g2-standard": "L4"}
#: GPUs of g2-standard-N (https://cloud.google.com/compute/docs/gpus#l4-gpus).
G2_GPUS = {4: 1, 8: 1, 12: 1, 16: 1, 24: 2, 32: 1, 48: 4, 96: 8}
#: GCE accelerator type of each GPU attached to N1 (https://cloud.google.com/compute/docs/gpus).
N1_ACCELERATORS = {"T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100",
                   "P4": "nvidia-tesla-p4", "P100": "nvidia-tesla-p100"}
#: The N1 host of k attached GPUs, as SkyPilot's optimizer chooses it (sky/catalog/
#: gcp_catalog.py ``_NUM_ACC_TO_NUM_CPU``, 'DEFAULT' for P4): at least this many vCPUs and 4 GiB
#: per vCPU, the cheapest n1-standard / n1-highmem / n1-highcpu in the zone ...
N1_HOST_VCPUS = {"T4": {1: 4, 2: 8, 4: 48}, "V100": {1: 8, 2: 16, 4: 32, 8: 64},
                 "P100": {1: 8, 2: 16, 4: 32, 8: 64}, "P4": {1: 8, 2: 16, 4: 32, 8: 64}}
N1_HOST_GIB_PER_VCPU = 4
#: ... within GCP's limits for k GPUs of the model, (max vCPUs, max GiB)
#: (https://cloud.google.com/compute/docs/gpus, as SkyPilot's ``_NUM_ACC_TO_MAX_CPU_AND_MEMORY``).
N1_HOST_MAX = {"T4": {1: (48, 312), 2: (48, 312), 4: (96, 624)},
               "V100": {1: (12, 78), 2: (24, 156), 4: (48, 312), 8: (96, 624)},
               "P4": {1: (24, 156), 2: (48, 312), 4: (96, 624)},
               "P100": {1: (16, 104), 2: (32, 208), 4: (96, 624)}}
N1_HOST_FAMILIES = ("n1-standard-", "n1-highmem-", "n1-highcpu-")
AWS_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB",
               "Price", "SpotPrice", "Region", "AvailabilityZone")
GCP_COLUMNS = ("InstanceType", "vCPUs", "MemoryGiB", "AcceleratorName", "AcceleratorCount",
               "Region", "AvailabilityZone", "Price", "SpotPrice")
_INSTANCE_TYPE = re.compile(r"^[a-z0-9][a-z0-9.-]{0,62}$")


@dataclass
class ImportResult:
    doc: dict
    rows: int = 0
    regions: dict = field(default_factory=dict)       # cloud -> region count
    filled_from_base: int = 0
    nulls: dict = field(default_factory=dict)         # column -> rows left null
    skipped: dict = field(default_factory=dict)       # reason -> count
    #: the rules the import applied to differences it resolved (text per case).
    warnings: list = field(default_factory=list)
    #: prices each invariant dropped (gpulease/catalog/invariants.py).
    rejected: dict = field(default_factory=dict)


class _Reader:
    """CSV rows with located errors: every problem names the file, the line and the column."""

    def __init__(self, path: Path, columns: tuple[str, ...], cloud: str):
        self.path, self.columns, self.cloud = path, columns, cloud
        self.findings: list[Finding] = []

    def bad(self, line: int, msg: str) -> None:
        self.findings.append(Finding(f"{self.path}:{line}", msg))

    def rows(self):
        # the input boundary: size cap, UTF-8 (UTF-16 and binary named as such)
        try:
            text = inputs.decode(inputs.read_bytes(self.path, what="SkyPilot CSV"),
                                 source=str(self.path))
        except InputError as exc:
            self.findings += [Finding(str(self.path), f.message) for f in exc.findings]
            return
        with io.StringIO(text, newline="") as fh:
            try:
                reader = csv.DictReader(fh)
                head = reader.fieldnames or []
                missing = [c for c in self.columns if c not in head]
                if missing:
                    self.findings.append(Finding(
                        f"{self.path}:1", f"not a SkyPilot v8 vms.csv: missing columns "
                        f"{', '.join(missing)} (header: {', '.join(head) or 'empty'})"))
                    return
                for row in reader:
                    if None in row or any(v is None for v in row.values()):
                        self.bad(reader.line_num, "wrong number of fields")
                        continue
                    yield reader.line_num, row
            except (csv.Error, UnicodeDecodeError) as exc:
                self.findings.append(Finding(str(self.path), f"not a readable CSV ({exc})"))

    def number(self, line: int, row: dict, col: str, *, required: bool,
               whole: bool = False) -> Optional[float]:
        text = (row.get(col) or "").strip()
        if not text:
            if required:
                self.bad(line, f"column {col} is empty")
            return None
        try:
            v = float(text)
        except ValueError:
            self.bad(line, f"column {col}: {text!r} is not a number")
            return None
        if not math.isfinite(v) or v < 0 or inputs.number_problem(v) is not None:
            self.bad(line, f"column {col}: {text!r} is not a finite non-negative number"
                     f" up to {inputs.MAX_MAGNITUDE:.0e}")
            return None
        if whole and v != int(v):
            self.bad(line, f"column {col}: {text!r} is not a whole number (a node has whole "
                     "GPUs and vCPUs; the row is refused, not rounded)")
            return None
        return v

    def place(self, line: int, region: str, zone: str) -> bool:
        """Region and zone names as the cloud spells them (AWS zone IDs, GCP zones)."""
        ok = True
        cloud = registry.get(self.cloud)
        if not re.match(cloud.region_pattern, region):
            self.bad(line, f"column Region: {region!r} is not a {self.cloud.upper()} region name "
                     f"(like {cloud.region_example})")
            ok = False
        if not re.match(cloud.zone_pattern, zone) or (cloud.zones_in_region and ok
                                                      and not zone.startswith(region + "-")):
            want = cloud.zone_text.format(region=region)
            self.bad(line, f"column AvailabilityZone: {zone!r} is not {want}")
            ok = False
        return ok

    def itype(self, line: int, text: str) -> bool:
        if not _INSTANCE_TYPE.match(text):
            self.bad(line, f"column InstanceType: {text!r} is not an instance type name")
            return False
        return True

    def plausible(self, line: int, col: str, usd: Optional[float], gpus: int) -> bool:
        """Price per GPU-hour within the catalog's bounds (0 = no price, handled apart)."""
        if not usd:
            return True
        lo, hi = PLAUSIBLE_USD_PER_GPU_HOUR
        per = usd / gpus
        if not lo <= per <= hi:
            self.bad(line, f"column {col}: {usd!r} is {per:.3g} USD per GPU-hour, outside the "
                     f"plausible {lo}-{hi} (gpulease/catalog/invariants.py)")
            return False
        return True


def _gpu_mem_from_info(text: str) -> Optional[float]:
    try:
        info = ast.literal_eval(text) if text else None
        mib = info["Gpus"][0]["MemoryInfo"]["SizeInMiB"]
        return round(float(mib) / 1024.0)
    except (ValueError, SyntaxError, KeyError, IndexError, TypeError, MemoryError,
            RecursionError):
        return None


class _Specs:
    """First sighting of each spec per key; a second, different one is a contradiction."""

    def __init__(self, reader: _Reader):
        self.reader = reader
        self.seen: dict = {}

    def check(self, key, what: str, value, line: int) -> bool:
        first = self.seen.setdefault(key, (value, line))
        if first[0] != value:
            self.reader.bad(line, f"{what} contradicts line {first[1]}: {first[0]} there, "
                            f"{value} here (one is wrong; fix or drop the row, the import "
                            "does not guess)")
            return False
        return True


def _nonzero(v: Optional[float]) -> Optional[float]:
    return v if v else None


def read_aws(path: Path) -> tuple[dict, list[Finding], list[str]]:
    """(region, type) -> {"gpu", "count", "vcpus", "memory", "gpu_mem", "od", "zones": {az:
    spot}}; findings (exit 2) and warnings (rules applied)."""
    r = _Reader(path, AWS_COLUMNS, "aws")
    specs = _Specs(r)
    out: dict = {}
    warnings: list[str] = []
    zone_lines: dict = {}
    for line, row in r.rows():
        name = GPU_NAMES.get(row["AcceleratorName"].strip())
        if name is None:
            continue
        region, az, itype = row["Region"].strip(), row["AvailabilityZone"].strip(), \
            row["InstanceType"].strip()
        if not region or not itype or not az:
            r.bad(line, "InstanceType, Region and AvailabilityZone must be set")
            continue
        if not r.itype(line, itype) or not r.place(line, region, az):
            continue
        count = r.number(line, row, "AcceleratorCount", required=True, whole=True)
        vcpus = r.number(line, row, "vCPUs", required=True, whole=True)
        mem = r.number(line, row, "MemoryGiB", required=True)
        price = r.number(line, row, "Price", required=False)      # empty: no on-demand offer
        spot = r.number(line, row, "SpotPrice", required=False)
        if None in (count, vcpus, mem) or not count:
            if count == 0:
                r.bad(line, "column AcceleratorCount: 0 GPUs on a GPU row")
            continue
        ok = all([specs.check((itype, "gpu"), f"{itype}: GPU model", name, line),
                  specs.check((itype, "count"), f"{itype}: GPUs per node", int(count), line),
                  specs.check((itype, "vcpus"), f"{itype}: vCPUs", int(vcpus), line),
                  specs.check((itype, "mem"), f"{itype}: memory GiB", mem, line),
                  r.plausible(line, "Price", price, int(count)),
                  r.plausible(line, "SpotPrice", spot, int(count))])
        prev = zone_lines.get((region, itype, az))
        if prev is not None and prev[1] != (price, spot):
            r.bad(line, f"{itype} in {az} contradicts line {prev[0]}: price/spot "
                  f"{prev[1]} there, {(price, spot)} here")
            ok = False
        zone_lines.setdefault((region, itype, az), (line, (price, spot)))
        if not ok:
            continue
        e = out.setdefault((region, itype), {
            "gpu": name, "count": int(count), "vcpus": int(vcpus), "memory": mem,
            "gpu_mem": _gpu_mem_from_info(row.get("GpuInfo", "")), "od": None, "zones": {},
            "ods": {}})
        if price:
            e["ods"][az] = price
        e["zones"][az] = _nonzero(spot)
    for (region, itype), e in sorted(out.items()):
        ods = sorted(set(e.pop("ods").values()))
        e["od"] = ods[-1] if ods else None
        if len(ods) > 1:
            warnings.append(f"aws {region} {itype}: zones list on-demand prices {ods}; rule: "
                            f"the highest ({ods[-1]}) is the region's on-demand price")
    return out, r.findings, warnings


def read_gcp(path: Path) -> tuple[dict, dict, list[Finding], list[str]]:
    """hosts: (region, type) -> {"vcpus", "memory", "zones": {zone: (od, spot)}};
    accelerators: (region, name, count) -> {zone: (od, spot)}; findings; warnings."""
    r = _Reader(path, GCP_COLUMNS, "gcp")
    specs = _Specs(r)
    hosts: dict = {}
    accs: dict = {}
    warnings: list[str] = []
    for line, row in r.rows():
        region, zone = row["Region"].strip(), row["AvailabilityZone"].strip()
        if not region or not zone:
            r.bad(line, "Region and AvailabilityZone must be set")
            continue
        if not r.place(line, region, zone):
            continue
        od = r.number(line, row, "Price", required=False)
        spot = r.number(line, row, "SpotPrice", required=False)
        itype = row["InstanceType"].strip()
        if itype:
            if not r.itype(line, itype):
                continue
            v = r.number(line, row, "vCPUs", required=True, whole=True)
            m = r.number(line, row, "MemoryGiB", required=True)
            if v is None or m is None:
                continue
            if not (specs.check((itype, "vcpus"), f"{itype}: vCPUs", int(v), line)
                    and specs.check((itype, "mem"), f"{itype}: memory GiB", m, line)):
                continue
            zones = hosts.setdefault((region, itype), {"vcpus": int(v), "memory": m,
                                                       "zones": {}, "lines": {}})
            if zone in zones["zones"] and zones["zones"][zone] != (od, spot):
                r.bad(line, f"{itype} in {zone} contradicts line {zones['lines'][zone]}: "
                      f"price/spot {zones['zones'][zone]} there, {(od, spot)} here")
                continue
            zones["zones"][zone] = (od, spot)
            zones["lines"][zone] = line
        elif row["AcceleratorName"].strip():
            name = row["AcceleratorName"].strip()
            n = r.number(line, row, "AcceleratorCount", required=True, whole=True)
            if not n:
                if n == 0:
                    r.bad(line, "column AcceleratorCount: 0 GPUs on an accelerator row")
                continue
            if name in GPU_NAMES and not (r.plausible(line, "Price", od, int(n))
                                          and r.plausible(line, "SpotPrice", spot, int(n))):
                continue
            zs = accs.setdefault((region, name, int(n)), {})
            if zone in zs and zs[zone] != (od, spot):
                r.bad(line, f"{name} x {int(n)} in {zone} is listed twice with different "
                      f"prices: {zs[zone]} and {(od, spot)}")
                continue
            zs[zone] = (od, spot)
    for (region, itype), h in sorted(hosts.items()):
        h.pop("lines")
        zero = sorted(z for z, (o, _) in h["zones"].items() if o == 0.0)
        if zero and _gcp_shape(itype) is not None:
            warnings.append(f"gcp {region} {itype}: host listed at 0.0 in {', '.join(zero)}; "
                            "rule: a zero price is missing, never free (the node is left "
                            "unpriced there)")
    return hosts, accs, r.findings, warnings


def _gcp_shape(itype: str) -> Optional[tuple[str, int]]:
    """(SkyPilot accelerator name, count) built into an accelerator-optimized machine type."""
    parts = itype.split("-")
    series = "-".join(parts[:2])
    acc = GCP_SERIES.get(series)
    if acc is None or len(parts) < 3:
        return None
    if series == "g2-standard":
        try:
            return acc, G2_GPUS[int(parts[2])]
        except (ValueError, KeyError):
            return None
    if not parts[2].endswith("g") or not parts[2][:-1].isdigit():
        return None
    return acc, int(parts[2][:-1])


def n1_host(hosts: dict, region: str, zone: str, gpu: str, count: int) -> Optional[str]:
    """The N1 machine type k attached GPUs run on in a zone (SkyPilot's pairing, see
    ``N1_HOST_VCPUS``): the cheapest N1 host there with enough vCPUs and memory within GCP's
    limits for the GPU count; None when the zone lists none."""
    need = N1_HOST_VCPUS.get(gpu, N1_HOST_VCPUS["P4"]).get(count)
    limit = N1_HOST_MAX.get(gpu, {}).get(count)
    if need is None or limit is None:
        return None
    best = None
    for (reg, itype), h in hosts.items():
        if reg != region or not itype.startswith(N1_HOST_FAMILIES):
            continue
        od = (h["zones"].get(zone) or (None, None))[0]
        if not od or h["vcpus"] < need or h["memory"] < need * N1_HOST_GIB_PER_VCPU \
                or h["vcpus"] > limit[0] or h["memory"] > limit[1]:
            continue
        if best is None or (od, itype) < best:
            best = (od, itype)
    return None if best is None else best[1]


def _family(itype: str) -> str:
    return itype.split(".")[0] if "." in itype else "-".join(itype.split("-")[:2])


def _sum(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """host + accelerator in one zone; a part listed at 0.0 is a missing price (never free)."""
    return None if not a or not b else round(a + b, 6)


def offering_ident(row) -> tuple:
    """What makes an offering unique: (cloud, region, machine type), plus the attached
    accelerator and its count on GCP N1 (one N1 type carries different GPU shapes)."""
    get = row.get if isinstance(row, dict) else (lambda k, d=None: getattr(row, k, d))
    acc = get("accelerator_type")
    base = (get("cloud"), get("region"), get("instance_type"))
    return base + ((acc, get("gpus_per_node")) if acc else ())


def build_rows(aws: dict, gcp_hosts: dict, gcp_accs: dict, base: Optional[Catalog],
               warnings: Optional[list] = None, rejected: Optional[dict] = None, *,
               check: bool = True) -> list[dict]:
    """Offering rows (format /2) from the parsed CSVs: family facts (purchase options,
    fabric) from families.json, specs and commitments of the same offering from ``base``.
    ``check``: drop (and count in ``rejected``) the prices that break an invariant; the
    snapshot build checks after its own precedence instead."""
    base_rows = {offering_ident(o): o for o in (base.offerings if base else ())}
    by_type: dict = {}
    for o in (base.offerings if base else ()):
        by_type.setdefault((o.cloud, o.instance_type), o)
    rows: list[dict] = []
    warnings = warnings if warnings is not None else []
    rejected = rejected if rejected is not None else {}

    def finish(cloud, region, itype, gpu, count, vcpus, memory, gpu_mem, od, zone_spot, zones,
               accelerator_type=None, extra_note="", parts=None):
        ident = (cloud, region, itype) + ((accelerator_type, count) if accelerator_type else ())
        same = base_rows.get(ident)
        tmpl = same or (None if accelerator_type else by_type.get((cloud, itype)))
        facts = facts_for(cloud, itype)
        notes = [extra_note] if extra_note else []
        row = {"cloud": cloud, "region": region, "instance_type": itype, "gpu": gpu,
               "gpus_per_node": count,
               "gpu_memory_gb": (tmpl.gpu_memory_gb if tmpl else None) or gpu_mem
               or GPU_MEMORY_GB.get(gpu, 16),
               "vcpus": vcpus, "memory_gb": memory,
               "network_gbps": tmpl.network_gbps if tmpl else 0,
               "rdma": "none", "on_demand_usd": od, "spot_usd": None, "commit_1y_usd": None,
               "commit_3y_usd": None, "zones": sorted(zones)}
        if tmpl is not None and tmpl.local_nvme_gb:
            row["local_nvme_gb"] = tmpl.local_nvme_gb
        if facts is not None:
            row["rdma"] = facts.rdma
            for k in ("network_cards", "efa_interfaces", "placement"):
                if getattr(facts, k) is not None:
                    row[k] = getattr(facts, k)
            if facts.network_gbps is not None:
                row["network_gbps"] = facts.network_gbps
            row["purchase_options"] = list(facts.purchase_options)
            row["purchase_options_source"] = facts.purchase_options_source
        else:
            notes.append(f"no family facts for {_family(itype)} in families.json: purchase "
                         "options derived from the prices, fabric 'none'")
            if tmpl is not None:
                row["rdma"] = tmpl.rdma
        if not row["network_gbps"]:
            notes.append("network_gbps: not in SkyPilot's CSV nor the base catalog (0 = unknown)")
        if accelerator_type:
            row["accelerator_type"] = accelerator_type
        sells = (lambda o: facts is None or o in facts.purchase_options)
        if od is not None and not sells(ON_DEMAND):
            notes.append(f"on-demand: not sold ({facts.purchase_options_source}); SkyPilot's "
                         f"figure {od} dropped")
            row["on_demand_usd"] = od = None
        zs = {z: u for z, u in zone_spot.items() if u}
        if zs and not sells(SPOT):
            notes.append(f"spot: not sold ({facts.purchase_options_source})")
            zs = {}
        if zs:
            row["zone_spot_usd"] = {z: zs[z] for z in sorted(zs)}
            row["spot_usd"] = min(zs.values())
        else:
            notes.append("spot: SkyPilot lists no spot price here")
        ps = {ON_DEMAND: SOURCE_ID if od is not None else None,
              SPOT: SOURCE_ID if zs else None}
        for col, key in (("commit_1y_usd", "commit_1y"), ("commit_3y_usd", "commit_3y")):
            v = getattr(same, col) if same is not None else None
            if v is not None and od is not None and v < od and sells(COMMITMENT):
                row[col] = v
                sid = (same.source.split(",")[0] if same.source else "base")
                ps[key] = f"base:{sid}"
            else:
                ps[key] = None
                why = ("not sold" if not sells(COMMITMENT) else
                       "not below the imported on-demand price" if v is not None else
                       "no commitment price for this offering in the base catalog")
                notes.append(f"{key}: {why}")
        if parts:
            row["gpu_sku_usd"] = {k: v for k, v in parts.items() if v}
            ps["gpu_sku"] = SOURCE_ID
        row["source"] = SOURCE_ID
        row["price_sources"] = ps
        row["zones_source"] = SOURCE_ID
        row["notes"] = "; ".join(notes)
        for inv, col, _ in (enforce(row) if check else ()):   # gpulease/catalog/invariants.py
            rejected[inv] = rejected.get(inv, 0) + 1
            warnings.append(f"{cloud} {region} {itype}: {col} breaks the {inv} invariant; "
                            "rule: that price is dropped")
        if row["on_demand_usd"] is None and row["spot_usd"] is None and \
                row["commit_1y_usd"] is None:
            warnings.append(f"{cloud} {region} {itype}"
                            + (f" + {count} x {gpu}" if accelerator_type else "")
                            + ": no price left; rule: the offering is left out")
            return
        rows.append(row)

    for (region, itype), e in sorted(aws.items()):
        finish("aws", region, itype, e["gpu"], e["count"], e["vcpus"], e["memory"], e["gpu_mem"],
               e["od"], dict(e["zones"]), e["zones"].keys())

    # accelerator-optimized GCP types: host row + the accelerator row it bundles
    for (region, itype), h in sorted(gcp_hosts.items()):
        shape = _gcp_shape(itype)
        if shape is None:
            continue
        acc_name, n = shape
        acc = gcp_accs.get((region, acc_name, n))
        if not acc:
            continue
        zones = sorted(set(h["zones"]) & set(acc))
        if not zones:
            continue
        ods = [_sum(h["zones"][z][0], acc[z][0]) for z in zones]
        od = max((x for x in ods if x is not None), default=None)
        zone_spot = {z: _sum(h["zones"][z][1], acc[z][1]) for z in zones}
        gpu_od = max((acc[z][0] for z in zones if acc[z][0]), default=None)
        gpu_spot = min((acc[z][1] for z in zones if acc[z][1]), default=None)
        if any(0.0 in (h["zones"][z][0], h["zones"][z][1]) for z in zones):
            rejected["finite_positive"] = rejected.get("finite_positive", 0) + 1
        finish("gcp", region, itype, GPU_NAMES[acc_name], n, h["vcpus"], h["memory"], None, od,
               zone_spot, zones, extra_note=f"price = host {itype} + {n} x {acc_name} (SkyPilot "
               "lists them as separate rows)", parts={ON_DEMAND: gpu_od, SPOT: gpu_spot})

    # GPUs attached to N1: every (GPU, count) SkyPilot lists, on the host it pairs them with
    for (region, acc_name, n), acc in sorted(gcp_accs.items()):
        if acc_name not in N1_ACCELERATORS:
            continue
        by_host: dict = {}
        for zone in sorted(acc):
            host = n1_host(gcp_hosts, region, zone, acc_name, n)
            if host is not None:
                by_host.setdefault(host, []).append(zone)
        for host, zones in sorted(by_host.items()):
            h = gcp_hosts[(region, host)]
            ods = [_sum(h["zones"][z][0], acc[z][0]) for z in zones]
            od = max((x for x in ods if x is not None), default=None)
            zone_spot = {z: _sum(h["zones"][z][1], acc[z][1]) for z in zones}
            gpu_od = max((acc[z][0] for z in zones if acc[z][0]), default=None)
            gpu_spot = min((acc[z][1] for z in zones if acc[z][1]), default=None)
            finish("gcp", region, host, GPU_NAMES[acc_name], n, h["vcpus"], h["memory"], None,
                   od, zone_spot, zones, accelerator_type=N1_ACCELERATORS[acc_name],
                   extra_note=f"price = host {host} + {n} x {acc_name} (SkyPilot's host for "
                   f"{n} x {acc_name}: >= {N1_HOST_VCPUS[acc_name][n]} vCPUs, 4 GiB each)",
                   parts={ON_DEMAND: gpu_od, SPOT: gpu_spot})
    return rows


def import_skypilot(directory: Path, base: Optional[Catalog], *, version: str,
                    now: dt.datetime) -> ImportResult:
    """Read DIR/aws/vms.csv and DIR/gcp/vms.csv; raise InputError (exit 2) on malformed or
    contradictory input (nothing written)."""
    aws_csv, gcp_csv = directory / "aws" / "vms.csv", directory / "gcp" / "vms.csv"
    if not aws_csv.is_file() and not gcp_csv.is_file():
        raise InputError([Finding("DIR", f"{directory} holds neither aws/vms.csv nor "
                                  "gcp/vms.csv; pass the directory laid out like "
                                  "~/.sky/catalogs/v8")])
    findings: list[Finding] = []
    warnings: list[str] = []
    aws: dict = {}
    hosts: dict = {}
    accs: dict = {}
    if aws_csv.is_file():
        aws, f, w = read_aws(aws_csv)
        findings += f
        warnings += w
    if gcp_csv.is_file():
        hosts, accs, f, w = read_gcp(gcp_csv)
        findings += f
        warnings += w
    if findings:
        raise InputError(findings, headline=f"{directory}: cannot import the SkyPilot catalog "
                         f"({len(findings)} problem(s); nothing written):")
    rejected = {k: 0 for k in INVARIANTS}
    rows = build_rows(aws, hosts, accs, base, warnings, rejected)
    if not rows:
        raise InputError([Finding("DIR", f"{directory}: no row for a GPU gpulease plans for "
                                  f"({', '.join(sorted(set(GPU_NAMES.values())))})")])
    stamp = now.replace(microsecond=0).isoformat()
    sources = dict(base.sources) if base else {}
    sources.update(family_sources())
    sources[SOURCE_ID] = {"url": "https://github.com/skypilot-org/skypilot-catalog",
                          "title": f"SkyPilot catalog v8 CSVs read from {directory} "
                                   "(vms.csv per cloud: on-demand and per-zone spot prices, "
                                   "zones, vCPUs, memory)",
                          "retrieved": now.date().isoformat()}
    doc = {"format": FORMAT_V2, "version": version, "as_of": now.date().isoformat(),
           "description": f"Imported from SkyPilot's v8 catalog in {directory} by `gpulease "
                          "catalog import skypilot`; specs, commitments, storage and egress "
                          f"filled from catalog {base.version if base else '(none)'}.",
           "sources": sources, "offerings": rows,
           "storage": list((base.raw.get("storage") or []) if base else []),
           "egress": list((base.raw.get("egress") or []) if base else []),
           "infra": list((base.raw.get("infra") or []) if base else []),
           "spot_interruptions": dict((base.raw.get("spot_interruptions") or {}) if base else {}),
           "data_dates": {"imported": now.date().isoformat(),
                          **({"base": base.as_of} if base else {})},
           "generated_by": {"tool": "gpulease catalog import skypilot", "at": stamp,
                            "base_version": base.version if base else None,
                            "directory": str(directory)}}
    from gpulease.catalog.refresh import checksum
    doc["checksum"] = checksum(doc)
    res = ImportResult(doc=doc, rows=len(rows), warnings=warnings, rejected=rejected)
    for r in rows:
        res.regions[r["cloud"]] = res.regions.get(r["cloud"], set()) | {r["region"]}
        if any(str(v).startswith("base:") for v in r["price_sources"].values() if v):
            res.filled_from_base += 1
        for c in ("on_demand_usd", "spot_usd", "commit_1y_usd", "commit_3y_usd"):
            if r[c] is None:
                res.nulls[c] = res.nulls.get(c, 0) + 1
    res.regions = {c: len(v) for c, v in res.regions.items()}
    return res
