"""`gpulease catalog import skypilot DIR`: SkyPilot's v8 catalog CSVs -> a gpulease catalog (/2).

DIR is laid out like ``~/.sky/catalogs/v8``: ``aws/vms.csv`` and/or ``gcp/vms.csv``. SkyPilot
lists one row per zone. AWS rows carry zone IDs (``use1-az1``) and per-zone spot prices. A GCP
GPU VM is two kinds of rows: the host machine type (no accelerator) and the accelerator
(``InstanceType`` empty, ``AcceleratorName`` / ``AcceleratorCount``); the node price is their
sum in the same zone, and the zones are those listing both.

What SkyPilot does not carry comes from a base catalog (``--base``, default the shipped one):
network, RDMA kind, EFA cards, local NVMe and commitment prices of the same
(cloud, region, type); storage, egress, NAT and spot-interruption sections. What neither has
stays null with a note.
"""
from __future__ import annotations

import ast
import csv
import io
import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from infra import inputs
from infra.catalog import FORMAT_V2, Catalog
from infra.errors import Finding, InputError

SOURCE_ID = "skypilot-import"

#: SkyPilot accelerator name -> gpulease GPU name (models gpulease plans for).
GPU_NAMES = {"T4": "T4", "A10G": "A10G", "L4": "L4", "L40S": "L40S", "V100": "V100",
             "V100-32GB": "V100", "A100": "A100", "A100-80GB": "A100-80GB", "H100": "H100",
             "H100-MEGA": "H100", "H200": "H200", "B200": "B200"}
#: memory per GPU (GB, as marketed) when neither the base nor the CSV says.
GPU_MEMORY_GB = {"T4": 16, "A10G": 24, "L4": 24, "L40S": 48, "V100": 16, "A100": 40,
                 "A100-80GB": 80, "H100": 80, "H200": 141, "B200": 180}
#: GCP accelerator-optimized machine series -> (SkyPilot accelerator name, GCE accelerator).
GCP_SERIES = {"a2-highgpu": "A100", "a2-megagpu": "A100", "a2-ultragpu": "A100-80GB",
              "a3-highgpu": "H100", "a3-megagpu": "H100-MEGA", "a3-ultragpu": "H200",
              "a4-highgpu": "B200", "g2-standard": "L4"}
#: GPUs of g2-standard-N (https://cloud.google.com/compute/docs/gpus#l4-gpus).
G2_GPUS = {4: 1, 8: 1, 12: 1, 16: 1, 24: 2, 32: 1, 48: 4, 96: 8}
#: Inter-node fabric by family (AWS EC2 accelerated-computing docs; GCP accelerator-optimized
#: machine docs), with AWS network cards / EFA interfaces. Used when the base has no such row.
FABRIC = {
    "p6-b200": ("efa", 3200, 8), "p5en": ("efa", 3200, 16), "p5e": ("efa", 3200, 32),
    "p5": ("efa", 3200, 32), "p4de": ("efa", 400, 4), "p4d": ("efa", 400, 4),
    "p3dn": ("efa", 100, 1),
    "a3-highgpu": ("gpudirect-tcpx", 1000, None), "a3-megagpu": ("gpudirect-tcpxo", 1800, None),
    "a3-ultragpu": ("rdma", 3200, None), "a4-highgpu": ("rdma", 3200, None),
}
AWS_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB",
               "Price", "SpotPrice", "Region", "AvailabilityZone")
GCP_COLUMNS = ("InstanceType", "vCPUs", "MemoryGiB", "AcceleratorName", "AcceleratorCount",
               "Region", "AvailabilityZone", "Price", "SpotPrice")


@dataclass
class ImportResult:
    doc: dict
    rows: int = 0
    regions: dict = field(default_factory=dict)       # cloud -> region count
    filled_from_base: int = 0
    nulls: dict = field(default_factory=dict)         # column -> rows left null
    skipped: dict = field(default_factory=dict)       # reason -> count


class _Reader:
    """CSV rows with located errors: every problem names the file, the line and the column."""

    def __init__(self, path: Path, columns: tuple[str, ...]):
        self.path, self.columns = path, columns
        self.findings: list[Finding] = []

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
                        self.findings.append(Finding(f"{self.path}:{reader.line_num}",
                                                     "wrong number of fields"))
                        continue
                    yield reader.line_num, row
            except (csv.Error, UnicodeDecodeError) as exc:
                self.findings.append(Finding(str(self.path), f"not a readable CSV ({exc})"))

    def number(self, line: int, row: dict, col: str, *, required: bool) -> Optional[float]:
        text = (row.get(col) or "").strip()
        if not text:
            if required:
                self.findings.append(Finding(f"{self.path}:{line}", f"column {col} is empty"))
            return None
        try:
            v = float(text)
        except ValueError:
            self.findings.append(Finding(f"{self.path}:{line}",
                                         f"column {col}: {text!r} is not a number"))
            return None
        if v != v or v in (float("inf"), float("-inf")) or v < 0 \
                or inputs.number_problem(v) is not None:
            self.findings.append(Finding(f"{self.path}:{line}", f"column {col}: {text!r} is "
                                         "not a finite non-negative number"
                                         f" up to {inputs.MAX_MAGNITUDE:.0e}"))
            return None
        return v


def _gpu_mem_from_info(text: str) -> Optional[float]:
    try:
        info = ast.literal_eval(text) if text else None
        mib = info["Gpus"][0]["MemoryInfo"]["SizeInMiB"]
        return round(float(mib) / 1024.0)
    except (ValueError, SyntaxError, KeyError, IndexError, TypeError):
        return None


def read_aws(path: Path) -> tuple[dict, list[Finding]]:
    """(region, type) -> {"gpu", "count", "vcpus", "memory", "gpu_mem", "od", "zones": {az: spot}}."""
    r = _Reader(path, AWS_COLUMNS)
    out: dict = {}
    for line, row in r.rows():
        name = GPU_NAMES.get(row["AcceleratorName"].strip())
        if name is None:
            continue
        vals = {c: r.number(line, row, c, required=True)
                for c in ("AcceleratorCount", "vCPUs", "MemoryGiB")}
        price = r.number(line, row, "Price", required=False)   # empty: no on-demand offer
        spot = r.number(line, row, "SpotPrice", required=False)
        region, az, itype = row["Region"].strip(), row["AvailabilityZone"].strip(), \
            row["InstanceType"].strip()
        if not region or not itype or not az:
            r.findings.append(Finding(f"{path}:{line}", "InstanceType, Region and "
                                      "AvailabilityZone must be set"))
            continue
        if None in vals.values():
            continue
        e = out.setdefault((region, itype), {
            "gpu": name, "count": int(vals["AcceleratorCount"]), "vcpus": int(vals["vCPUs"]),
            "memory": vals["MemoryGiB"], "gpu_mem": _gpu_mem_from_info(row.get("GpuInfo", "")),
            "od": price, "zones": {}})
        if price is not None:
            e["od"] = max(e["od"] or 0.0, price)
        e["zones"][az] = spot
    return out, r.findings


def read_gcp(path: Path) -> tuple[dict, dict, list[Finding]]:
    """hosts: (region, type) -> {"vcpus", "memory", "zones": {zone: (od, spot)}};
    accelerators: (region, name, count) -> {zone: (od, spot)}."""
    r = _Reader(path, GCP_COLUMNS)
    hosts: dict = {}
    accs: dict = {}
    for line, row in r.rows():
        region, zone = row["Region"].strip(), row["AvailabilityZone"].strip()
        od = r.number(line, row, "Price", required=False)
        spot = r.number(line, row, "SpotPrice", required=False)
        if not region or not zone:
            r.findings.append(Finding(f"{path}:{line}", "Region and AvailabilityZone must be set"))
            continue
        itype = row["InstanceType"].strip()
        if itype:
            v = r.number(line, row, "vCPUs", required=True)
            m = r.number(line, row, "MemoryGiB", required=True)
            if v is None or m is None:
                continue
            hosts.setdefault((region, itype), {"vcpus": int(v), "memory": m, "zones": {}})[
                "zones"][zone] = (od, spot)
        elif row["AcceleratorName"].strip():
            n = r.number(line, row, "AcceleratorCount", required=True)
            if n is None:
                continue
            accs.setdefault((region, row["AcceleratorName"].strip(), int(n)), {})[zone] = (od, spot)
    return hosts, accs, r.findings


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


def _family(itype: str) -> str:
    return itype.split(".")[0] if "." in itype else "-".join(itype.split("-")[:2])


def _sum(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None else round(a + b, 6)


def build_rows(aws: dict, gcp_hosts: dict, gcp_accs: dict, base: Optional[Catalog]) -> list[dict]:
    """Offering rows (format /2) from the parsed CSVs, specs and commitments from ``base``."""
    base_rows = {(o.cloud, o.region, o.instance_type): o for o in (base.offerings if base else ())}
    by_type: dict = {}
    for o in (base.offerings if base else ()):
        by_type.setdefault((o.cloud, o.instance_type), o)
    rows: list[dict] = []

    def finish(cloud, region, itype, gpu, count, vcpus, memory, gpu_mem, od, zone_spot, zones,
               accelerator_type=None, extra_note=""):
        same = base_rows.get((cloud, region, itype))
        tmpl = same or by_type.get((cloud, itype))
        fam = _family(itype)
        rdma, gbps, cards = FABRIC.get(fam, ("none", None, None))
        notes = [extra_note] if extra_note else []
        row = {"cloud": cloud, "region": region, "instance_type": itype, "gpu": gpu,
               "gpus_per_node": count,
               "gpu_memory_gb": (tmpl.gpu_memory_gb if tmpl else None) or gpu_mem
               or GPU_MEMORY_GB.get(gpu, 16),
               "vcpus": vcpus, "memory_gb": memory,
               "network_gbps": tmpl.network_gbps if tmpl else (gbps or 0),
               "rdma": tmpl.rdma if tmpl else rdma,
               "on_demand_usd": od, "spot_usd": None, "commit_1y_usd": None,
               "commit_3y_usd": None, "zones": sorted(zones)}
        if tmpl is None and gbps is None:
            notes.append("network_gbps: not in SkyPilot's CSV nor the base catalog (0 = unknown)")
        if tmpl is not None:
            for k in ("network_cards", "efa_interfaces"):
                if getattr(tmpl, k) is not None:
                    row[k] = getattr(tmpl, k)
            if tmpl.local_nvme_gb:
                row["local_nvme_gb"] = tmpl.local_nvme_gb
        elif cards:
            row["network_cards"] = row["efa_interfaces"] = cards
        if tmpl is None and fam in FABRIC:
            notes.append(f"rdma/network/EFA cards from gpulease's family table for {fam} (no "
                         "base row; check with `gpulease catalog refresh`, which reads "
                         "DescribeInstanceTypes)")
        if accelerator_type or (tmpl is not None and tmpl.accelerator_type):
            row["accelerator_type"] = accelerator_type or tmpl.accelerator_type
        zs = {z: u for z, u in zone_spot.items() if u is not None and (od is None or u <= od)}
        dropped = sorted(z for z, u in zone_spot.items() if u is not None and z not in zs)
        if dropped:
            notes.append(f"spot in {', '.join(dropped)} above on-demand: dropped")
        if zs:
            row["zone_spot_usd"] = {z: zs[z] for z in sorted(zs)}
            row["spot_usd"] = min(zs.values())
        else:
            notes.append("spot: SkyPilot lists no spot price here")
        ps = {"on_demand": SOURCE_ID if od is not None else None,
              "spot": SOURCE_ID if zs else None}
        srcs = [SOURCE_ID]
        for col, key in (("commit_1y_usd", "commit_1y"), ("commit_3y_usd", "commit_3y")):
            v = getattr(same, col) if same is not None else None
            if v is not None and od is not None and v < od:
                row[col] = v
                sid = (same.source.split(",")[0] if same.source else "base")
                ps[key] = f"base:{sid}"
            else:
                ps[key] = None
                why = ("not below the imported on-demand price" if v is not None else
                       "no commitment price for this row in the base catalog")
                notes.append(f"{key}: {why}")
        if same is not None and same.source:
            srcs += [s for s in same.source.split(",") if s and s not in srcs]
        row["source"] = ",".join(srcs[:1])
        row["price_sources"] = ps
        row["zones_source"] = SOURCE_ID
        row["notes"] = "; ".join(notes)
        rows.append(row)

    for (region, itype), e in sorted(aws.items()):
        zone_spot = {z: s for z, s in e["zones"].items()}
        finish("aws", region, itype, e["gpu"], e["count"], e["vcpus"], e["memory"], e["gpu_mem"],
               e["od"], zone_spot, e["zones"].keys())

    gcp_n1 = [o for o in (base.offerings if base else ()) if o.cloud == "gcp"
              and o.accelerator_type]
    n1_shapes = {(o.instance_type, o.gpu, o.gpus_per_node, o.accelerator_type) for o in gcp_n1}
    for (region, itype), h in sorted(gcp_hosts.items()):
        shape = _gcp_shape(itype)
        pairs = []
        if shape is not None:
            acc_name, n = shape
            pairs.append((acc_name, n, GPU_NAMES[acc_name], None))
        for t, gpu, n, accel in sorted(n1_shapes):
            if t == itype:
                pairs.append((gpu, n, gpu, accel))
        for acc_name, n, gpu, accel in pairs:
            acc = gcp_accs.get((region, acc_name, n))
            if not acc:
                continue
            zones = sorted(set(h["zones"]) & set(acc))
            if not zones:
                continue
            ods = [_sum(h["zones"][z][0], acc[z][0]) for z in zones]
            od = max((x for x in ods if x is not None), default=None)
            zone_spot = {z: _sum(h["zones"][z][1], acc[z][1]) for z in zones}
            finish("gcp", region, itype, gpu, n, h["vcpus"], h["memory"], None, od, zone_spot,
                   zones, accelerator_type=accel,
                   extra_note=f"price = host {itype} + {n} x {acc_name} (SkyPilot lists them "
                              "as separate rows)")
    return rows


def import_skypilot(directory: Path, base: Optional[Catalog], *, version: str,
                    now: dt.datetime) -> ImportResult:
    """Read DIR/aws/vms.csv and DIR/gcp/vms.csv; raise InputError (exit 2) on malformed input."""
    aws_csv, gcp_csv = directory / "aws" / "vms.csv", directory / "gcp" / "vms.csv"
    if not aws_csv.is_file() and not gcp_csv.is_file():
        raise InputError([Finding("DIR", f"{directory} holds neither aws/vms.csv nor "
                                  "gcp/vms.csv; pass the directory laid out like "
                                  "~/.sky/catalogs/v8")])
    findings: list[Finding] = []
    aws: dict = {}
    hosts: dict = {}
    accs: dict = {}
    if aws_csv.is_file():
        aws, f = read_aws(aws_csv)
        findings += f
    if gcp_csv.is_file():
        hosts, accs, f = read_gcp(gcp_csv)
        findings += f
    if findings:
        raise InputError(findings, headline=f"{directory}: cannot import the SkyPilot catalog "
                         f"({len(findings)} problem(s); nothing written):")
    rows = build_rows(aws, hosts, accs, base)
    if not rows:
        raise InputError([Finding("DIR", f"{directory}: no row for a GPU gpulease plans for "
                                  f"({', '.join(sorted(set(GPU_NAMES.values())))})")])
    stamp = now.replace(microsecond=0).isoformat()
    sources = dict(base.sources) if base else {}
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
    from infra.catalog.refresh import checksum
    doc["checksum"] = checksum(doc)
    res = ImportResult(doc=doc, rows=len(rows))
    for r in rows:
        res.regions[r["cloud"]] = res.regions.get(r["cloud"], set()) | {r["region"]}
        if any(str(v).startswith("base:") for v in r["price_sources"].values() if v):
            res.filled_from_base += 1
        for c in ("on_demand_usd", "spot_usd", "commit_1y_usd", "commit_3y_usd"):
            if r[c] is None:
                res.nulls[c] = res.nulls.get(c, 0) + 1
    res.regions = {c: len(v) for c, v in res.regions.items()}
    return res
