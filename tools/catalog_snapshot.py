"""Build the shipped catalog snapshot (format /2) from public price datasets; re-runnable.

    python -m tools.catalog_snapshot --peer ../shared/peer-catalog \
        --cyclenerd pricing.yml --vantage gpu_instances_raw.json \
        --vantage-2026 all_gpu_instances.js --out gpulease/catalog/data/

Inputs (none is committed; each is named with the commit it was read at, see docs/catalog.md):
- ``--peer``: SkyPilot catalog v8 (GCP as published 2026-05-20; AWS GPU families, date unknown):
  rows, zones (AWS zone IDs, GCP zones) and per-zone spot prices, via
  ``gpulease.catalog.importers.skypilot``;
- ``--cyclenerd``: Cyclenerd/google-cloud-pricing-cost-calculator ``pricing.yml`` at commit
  fd66b26ff84fee5cdd94f341ea89206e76c06b99 (generated 2026-07-30 from the Cloud Billing
  Catalog): GCP on-demand and 1-/3-year commitment prices per machine type and region, GCS
  prices per region, internet egress per region;
- ``--vantage``: instances.vantage.sh raw export in tsaol/aws-gpu ``data/gpu_instances_raw.json``
  at commit 2d0108c7bd261c8e40493fbd35135437bd6c9099 (2025-11-30): AWS on-demand, 1-/3-year
  Standard No Upfront RI prices per region, g6e rows (SkyPilot's AWS file has no g6e);
- ``--vantage-2026`` (2026.12.03.2 only): tsaol/aws-gpu ``data/all_gpu_instances.js`` at commit
  77fcd9fe1d0652fd07b830e5ed030d61da87923e (instances.vantage.sh, 2026-01-21): the 1-year
  Standard No Upfront RI where the 2025-11-30 export lists none;
- ``--base``: the previous snapshot (2026.12.02): specs, its cited AWS prices (kept where it
  has them: they are the freshest), S3 prices, NAT, spot interruption assumptions.

Precedence per column and the cross-checks recorded in each row's notes are in docs/catalog.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Optional

from gpulease.catalog import TIER_CLASSES, load_catalog
from gpulease.catalog.families import facts_for, family_sources
from gpulease.catalog.importers.skypilot import build_rows, offering_ident, read_aws, read_gcp
from gpulease.catalog.invariants import INVARIANTS, enforce
from gpulease.catalog.refresh import checksum

#: the checkout this tool writes into (tools/ ships in the sdist, never in the wheel)
ROOT = Path(__file__).resolve().parents[1]
#: the shipped snapshots: the base the build starts from and where it writes
CATALOG_DATA = ROOT / "gpulease" / "catalog" / "data"

VERSION, AS_OF = "2026.12.03.2", "2026-12-03"
#: the snapshots this builder writes: 2026.12.03.1 (byte for byte, without ``--vantage-2026``)
#: and 2026.12.03.2 (+ the 2026-01-21 vantage export's 1-year RIs where the 2025-11-30 raw
#: export has none, and every commitment left null says which sources were read for it)
VERSIONS = ("2026.12.03.1", "2026.12.03.2")
TSAOL_2026 = "vantage-tsaol-2026-01"
HOURS = 730.0
#: AWS types gpulease plans for (the previous snapshot's, plus B200). p5.4xlarge and gr6 are
#: left out: no source here states their EFA / network-card layout.
AWS_TYPES_EXTRA = {"p6-b200.48xlarge"}
DROP_TYPES = {"p5.4xlarge", "gr6.4xlarge", "gr6.8xlarge"}
#: GCP machine types left out (no family facts recorded for A3 Edge, the -nolssd variants and
#: a2-megagpu-16g). a3-highgpu-1g/2g/4g are kept: sold as Spot / flex-start only (families.json).
GCP_DROP = {"a3-edgegpu-8g", "a3-edgegpu-8g-nolssd", "a3-ultragpu-8g-nolssd", "a2-megagpu-16g"}

#: Retrieval $/GB and minimum storage days per class (provider pricing pages; see sources).
S3_CLASS_FACTS = {"STANDARD": (0.0, 0), "STANDARD_IA": (0.01, 30), "GLACIER_IR": (0.03, 90),
                  "DEEP_ARCHIVE": (0.02, 180)}
GCS_CLASS_FACTS = {"STANDARD": (0.0, 0), "NEARLINE": (0.01, 30), "COLDLINE": (0.02, 90),
                   "ARCHIVE": (0.05, 365)}
CYCLENERD_CLASS = {"STANDARD": "standard", "NEARLINE": "nearline", "COLDLINE": "coldline",
                   "ARCHIVE": "archiv"}

NEW_SOURCES = {
    "skypilot-gcp": {
        "url": "https://github.com/skypilot-org/skypilot-catalog/blob/master/catalogs/v8/gcp/vms.csv",
        "title": "SkyPilot catalog v8, GCP as published 2026-05-20 (shared/peer-catalog): host "
                 "machine and accelerator rows per zone, on-demand and spot",
        "retrieved": AS_OF, "published": "2026-05-20"},
    "skypilot-aws": {
        "url": "https://github.com/skypilot-org/skypilot-catalog/blob/master/catalogs/v8/aws/vms.csv",
        "title": "SkyPilot catalog v8, AWS GPU families, date unknown (shared/peer-catalog; "
                 "search-index copy at commit 00148f2af3672e2229b4f7bf8157d5a3f36e3c35): "
                 "on-demand per region, spot per zone ID",
        "retrieved": AS_OF},
    "cyclenerd-gcp-2026-07": {
        "url": "https://github.com/Cyclenerd/google-cloud-pricing-cost-calculator/blob/"
               "fd66b26ff84fee5cdd94f341ea89206e76c06b99/pricing.yml",
        "title": "Cyclenerd pricing.yml generated 2026-07-30 from the Cloud Billing Catalog API: "
                 "compute.instance.<type>.cost.<region>.{hour,hour_spot,month_1y,month_3y} "
                 "(730 h/month), storage.bucket.<class>.cost.<region>.month, "
                 "compute.network.traffic.egress.internet.cost.0-1.<region>.month",
        "retrieved": AS_OF, "published": "2026-07-30"},
    TSAOL_2026: {
        "url": "https://github.com/tsaol/aws-gpu/blob/"
               "77fcd9fe1d0652fd07b830e5ed030d61da87923e/data/all_gpu_instances.js",
        "title": "instances.vantage.sh EC2 data as exported to tsaol/aws-gpu "
                 "data/all_gpu_instances.js at commit 77fcd9f ('Last updated: 2026-01-21'): "
                 "Linux on-demand and 'reserved' per region; 'reserved' = the 1-year Standard "
                 "No Upfront Reserved Instance (equal to the 2025-11-30 raw export's "
                 "yrTerm1Standard.noUpfront in all 785 (region, type) pairs both list, checked "
                 "2026-12-03); no 3-year figure",
        "retrieved": AS_OF, "published": "2026-01-21"},
    "s3-pricing": {
        "url": "https://aws.amazon.com/s3/pricing/",
        "title": "Amazon S3 pricing: retrieval per GB (S3 Standard-IA $0.01, Glacier Instant "
                 "Retrieval $0.03, Glacier Deep Archive standard $0.02) and minimum storage "
                 "durations (30/90/180 days; also https://docs.aws.amazon.com/AmazonS3/latest/"
                 "userguide/storage-class-intro.html). Transcribed from the page as known to "
                 "the author: the stored copies reachable here did not include the table",
        "retrieved": AS_OF},
    "gcs-retrieval": {
        "url": "https://cloud.google.com/storage/pricing#retrieval-pricing",
        "title": "Cloud Storage retrieval fees per GB (Nearline $0.01, Coldline $0.02, Archive "
                 "$0.05) and minimum storage durations 30/90/365 days (also "
                 "https://cloud.google.com/storage/docs/storage-classes). Fees transcribed "
                 "from the page as known to the author; durations confirmed in the stored "
                 "storage-classes page",
        "retrieved": AS_OF},
}


def _pct(a: float, b: float) -> float:
    return (a - b) / b * 100.0


def _r(v: Optional[float], nd: int = 4) -> Optional[float]:
    return None if v is None else round(float(v), nd)


def tsaol_table(path: Path) -> dict:
    """(region, type) -> {"od", "c1"} from tsaol/aws-gpu ``data/all_gpu_instances.js`` (a JS
    file holding one JSON array; "reserved" = the 1-year Standard No Upfront RI)."""
    text = path.read_text(encoding="utf-8")
    out = {}
    for it in json.loads(text[text.index("["):text.rindex("]") + 1]):
        for region, p in (it.get("pricing") or {}).items():
            out[(region, it["name"])] = {"od": p.get("onDemand"), "c1": p.get("reserved")}
    return out


#: what was searched for a commitment price that is still missing (one wording, every row)
SEARCHED = ("searched 2026-12-03: the docs, pages, code and issues corpora and public GitHub "
            "mirrors, for a published rate")


def _gap_note(row: dict, missing: list[str], van: dict, ts: dict, cyc_inst: dict) -> str:
    """Why a commitment the cloud sells has no price in this snapshot, naming the sources read."""
    cols, it, region = "/".join(missing), row["instance_type"], row["region"]
    if row["cloud"] == "aws":
        key = (region, it)
        have = ("the 2025-11-30 raw export has no row for this region" if key not in van else
                "the 2025-11-30 raw export lists no Reserved Instance here")
        t = ts.get(key)
        have += (", nor has the 2026-01-21 export one" if t is None else
                 "; the 2026-01-21 export gives the 1-year Standard RI only (no 3-year figure)"
                 if t.get("c1") else "; the 2026-01-21 export lists on-demand only")
        return (f"{cols}: sold (Compute Savings Plans cover every EC2 family: "
                f"aws-purchase-options) but no citable price: in AWS's price list as mirrored by "
                f"instances.vantage.sh, {have}; Savings Plans rates are published only in AWS's "
                f"Savings Plans price list, and no copy of it was found ({SEARCHED})")
    if row.get("accelerator_type"):
        return (f"{cols}: sold (a GENERAL_PURPOSE commitment for the N1 host plus a commitment "
                f"for the GPUs with an attached reservation: gcp-cud) but no citable price: the "
                f"host's commitment SKUs are in the Cyclenerd export, the GPU's ('Commitment v1: "
                f"Nvidia Tesla {row['gpu']} GPU running in <region> for 1 Year / 3 Years') are in "
                f"no source read here (Cyclenerd's pricing.yml has no GPU rows, SkyPilot lists "
                f"on-demand and spot only; {SEARCHED})")
    costs = (cyc_inst.get(it) or {}).get("cost") or {}
    if not cyc_inst.get(it):
        have = (f"the Cyclenerd export (fd66b26) has no {it} machine type, SkyPilot lists "
                f"on-demand and spot only")
    elif region not in costs:
        have = (f"the Cyclenerd export prices {it} with 1-/3-year commitments in "
                f"{len(costs)} other regions ({', '.join(sorted(costs))}), not in {region}")
    else:
        have = (f"the Cyclenerd export prices {it} on demand but with no commitment in any "
                f"region (its SKU mapping, build/mapping.csv, names the 'Commitment v1: Nvidia "
                f"Tesla A100 80GB ... 1 Year / 3 Year' SKUs, which the Billing Catalog export "
                f"did not price)" if it.startswith("a2-ultragpu") else
                f"the Cyclenerd export lists {it} here without a commitment price")
    return (f"{cols}: sold (resource-based commitment: gcp-cud) but no citable price: {have} "
            f"({SEARCHED})")


def vantage_table(path: Path) -> dict:
    """(region, type) -> {"od", "c1", "c3", "c1conv", "c3conv", "spot_avg"} from the export's
    'linux' blocks (c = Standard, cconv = Convertible Reserved Instances, No Upfront)."""
    out = {}
    for it in json.loads(path.read_text(encoding="utf-8")):
        for region, p in (it.get("pricing") or {}).items():
            lin = p.get("linux") or {}
            res = lin.get("reserved") or {}

            def f(x):
                try:
                    v = float(x)
                    return v if v > 0 else None
                except (TypeError, ValueError):
                    return None
            out[(region, it["instance_type"])] = {
                "od": f(lin.get("ondemand")), "c1": f(res.get("yrTerm1Standard.noUpfront")),
                "c3": f(res.get("yrTerm3Standard.noUpfront")), "spot_avg": f(lin.get("spot_avg")),
                "c1conv": f(res.get("yrTerm1Convertible.noUpfront")),
                "c3conv": f(res.get("yrTerm3Convertible.noUpfront"))}
    return out


def _facts_set_network(row: dict) -> bool:
    f = facts_for(row["cloud"], row["instance_type"])
    return f is not None and f.network_gbps is not None


def _cyc_cost(cyc_inst: dict, itype: str, region: str) -> dict:
    return ((cyc_inst.get(itype) or {}).get("cost") or {}).get(region) or {}


def _component(part: str, usd: float, source: str, as_of: str) -> dict:
    return {"part": part, "usd": round(float(usd), 6), "source": source, "as_of": as_of}


def _cheapest_zone_parts(hosts: dict, accs: dict, region: str, host: str, acc_key: tuple,
                         zones: dict) -> Optional[tuple[str, float, float]]:
    """(zone, host spot, GPU spot) of the cheapest spot zone of a GCP row (SkyPilot rows)."""
    if not zones:
        return None
    z = min(zones, key=lambda k: (zones[k], k))
    h = hosts[(region, host)]["zones"][z][1]
    g = accs[acc_key][z][1]
    return (z, h, g) if h and g else None


def build(peer: Path, cyclenerd: Path, vantage: Path, base_path: Optional[str],
          version: str = VERSION, tsaol: Optional[Path] = None) -> tuple[dict, dict]:
    """The snapshot document and the build report (rows each invariant rejected, the
    importer's rules applied). ``version`` is one of VERSIONS; 2026.12.03.2 needs ``tsaol``
    (the 2026-01-21 export), 2026.12.03.1 does not read it."""
    import yaml

    if version not in VERSIONS:
        raise SystemExit(f"--version must be one of {', '.join(VERSIONS)}")
    v2 = version != "2026.12.03.1"
    if v2 and tsaol is None:
        raise SystemExit(f"{version} needs --vantage-2026 (tsaol/aws-gpu "
                         "data/all_gpu_instances.js at commit 77fcd9f)")
    ts = tsaol_table(tsaol) if v2 and tsaol is not None else {}

    base = load_catalog(base_path)
    aws, f1, w1 = read_aws(peer / "v8" / "aws" / "vms.csv")
    hosts, accs, f2, w2 = read_gcp(peer / "v8" / "gcp" / "vms.csv")
    if f1 or f2:
        raise SystemExit("the peer CSVs do not import cleanly:\n" + "\n".join(
            f"  {f}" for f in f1 + f2))
    warnings = w1 + w2
    rejected = {k: 0 for k in INVARIANTS}
    rows = build_rows(aws, hosts, accs, base, warnings, rejected, check=False)
    cyc = yaml.load(cyclenerd.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader",
                                                                         yaml.SafeLoader))
    cyc_inst = cyc["compute"]["instance"]
    van = vantage_table(vantage)
    base_rows = {offering_ident(o): o for o in base.offerings}
    base_raw = {offering_ident(r): r for r in base.raw["offerings"]}
    out_rows = []
    CYC, CYC_DATE = "cyclenerd-gcp-2026-07", "2026-07-30"
    PEER_GCP_DATE = NEW_SOURCES["skypilot-gcp"]["published"]

    for row in rows:
        key = offering_ident(row)
        itype = row["instance_type"]
        if itype in DROP_TYPES or itype in GCP_DROP:
            continue
        opts = set(row.get("purchase_options") or ())
        sells = opts.__contains__
        notes = [n.replace("price = host", "SkyPilot's figures = host")
                 for n in row["notes"].split("; ") if n and not n.startswith("commit_")]
        ps = {"spot": None, "on_demand": None, "commit_1y": None, "commit_3y": None}
        checks: list[dict] = []
        comps: dict = {}
        peer_id = "skypilot-aws" if row["cloud"] == "aws" else "skypilot-gcp"
        peer_od = row["on_demand_usd"]
        if row.get("zone_spot_usd"):
            ps["spot"] = peer_id
        old = base_rows.get(key)
        oldraw = base_raw.get(key) or {}
        as_of = NEW_SOURCES[peer_id].get("published", "")
        od = c1 = c3 = None
        if row["cloud"] == "aws":
            v = van.get((row["region"], itype)) or {}
            if not sells("on_demand"):
                pass
            elif old is not None and old.on_demand_usd is not None:
                od, ps["on_demand"] = old.on_demand_usd, (oldraw.get("price_sources") or {}).get(
                    "on_demand") or oldraw.get("source", "").split(",")[0]
                as_of = old.as_of
            elif v.get("od"):
                od, ps["on_demand"], as_of = v["od"], "vantage-raw-2025-11", "2025-11-30"
            elif peer_od is not None:
                od, ps["on_demand"] = peer_od, peer_id
            if sells("commitment"):
                if old is not None and old.commit_1y_usd is not None:
                    c1 = old.commit_1y_usd
                    ps["commit_1y"] = (oldraw.get("price_sources") or {}).get(
                        "commit_1y", "vantage-tsaol")
                elif v.get("c1"):
                    c1, ps["commit_1y"] = v["c1"], "vantage-raw-2025-11"
                elif v.get("c1conv"):
                    c1, ps["commit_1y"] = v["c1conv"], "vantage-raw-2025-11"
                    notes.append("commit_1y = 1-year Convertible Reserved Instance, No Upfront "
                                 "(AWS publishes no 1-year Standard RI for this type here)")
                elif (ts.get((row["region"], itype)) or {}).get("c1"):
                    c1, ps["commit_1y"] = ts[(row["region"], itype)]["c1"], TSAOL_2026
                    notes.append("commit_1y = 1-year Standard Reserved Instance, No Upfront, "
                                 "from the 2026-01-21 export (the 2025-11-30 raw export has no "
                                 "Reserved Instance for this region)")
                if old is not None and old.commit_3y_usd is not None:
                    c3, ps["commit_3y"] = old.commit_3y_usd, "vantage-raw-2025-11"
                elif v.get("c3"):
                    c3, ps["commit_3y"] = v["c3"], "vantage-raw-2025-11"
                elif v.get("c3conv"):
                    c3, ps["commit_3y"] = v["c3conv"], "vantage-raw-2025-11"
                    notes.append("commit_3y = 3-year Convertible Reserved Instance, No Upfront "
                                 "(no 3-year Standard RI published for this type here)")
            if peer_od is not None and od is not None and abs(_pct(peer_od, od)) > 1:
                checks.append({"column": "on_demand", "source": peer_id, "usd": _r(peer_od),
                               "as_of": None, "diff_pct": round(_pct(peer_od, od), 1)})
            if v.get("od") and od is not None and ps["on_demand"] != "vantage-raw-2025-11" \
                    and abs(_pct(v["od"], od)) > 1:
                checks.append({"column": "on_demand", "source": "vantage-raw-2025-11",
                               "usd": _r(v["od"]), "as_of": "2025-11-30",
                               "diff_pct": round(_pct(v["od"], od), 1)})
            if v.get("spot_avg") and row.get("spot_usd"):
                notes.append(f"cross-check: vantage 2025-11-30 spot mean over AZs {v['spot_avg']}")
        else:
            accel = row.get("accelerator_type")
            n = row["gpus_per_node"]
            gpu_od = (row.get("gpu_sku_usd") or {}).get("on_demand")
            if accel:        # N1 host + attached GPUs: host SKUs + GPU SKUs
                host = _cyc_cost(cyc_inst, itype, row["region"])
                acc_name = row["gpu"]
                if sells("on_demand") and gpu_od:
                    if host.get("hour"):
                        parts = [_component(f"host {itype} (N1 vCPU + memory SKUs)",
                                            host["hour"], CYC, CYC_DATE),
                                 _component(f"{n} x {acc_name} GPU SKU", gpu_od, peer_id,
                                            PEER_GCP_DATE)]
                        ps["on_demand"], as_of = f"{CYC},{peer_id}", PEER_GCP_DATE
                    else:
                        parts = [_component(f"host {itype}", peer_od - gpu_od, peer_id,
                                            PEER_GCP_DATE),
                                 _component(f"{n} x {acc_name} GPU SKU", gpu_od, peer_id,
                                            PEER_GCP_DATE)] if peer_od else []
                        ps["on_demand"] = peer_id
                    if parts:
                        od = sum(p["usd"] for p in parts)
                        comps["on_demand"] = parts
                if not v2:
                    notes.append("commit_1y/commit_3y: no citable price (an N1 + GPU commitment "
                                 "is the host's CUD plus the GPU's; the sources read here "
                                 "publish the host's, not the GPU's)")
            else:
                cost = _cyc_cost(cyc_inst, itype, row["region"])
                if sells("on_demand") and cost.get("hour"):
                    od, ps["on_demand"], as_of = cost["hour"], CYC, CYC_DATE
                    comps["on_demand"] = [_component(
                        f"machine type {itype}: vCPU, memory, {n} x {row['gpu']} GPU"
                        + (" and bundled local SSD" if row.get("local_nvme_gb") else "")
                        + " SKUs, summed by the Billing Catalog export", od, CYC, CYC_DATE)]
                    if peer_od is not None and abs(_pct(peer_od, od)) > 1:
                        checks.append({"column": "on_demand", "source": peer_id,
                                       "usd": _r(peer_od), "as_of": PEER_GCP_DATE,
                                       "diff_pct": round(_pct(peer_od, od), 1)})
                elif sells("on_demand") and peer_od is not None and gpu_od:
                    od, ps["on_demand"] = peer_od, peer_id
                    comps["on_demand"] = [
                        _component(f"host {itype} (vCPU + memory SKUs)", peer_od - gpu_od,
                                   peer_id, PEER_GCP_DATE),
                        _component(f"{n} x {row['gpu']} GPU SKU", gpu_od, peer_id,
                                   PEER_GCP_DATE)]
                if sells("commitment") and cost.get("month_1y"):
                    c1, ps["commit_1y"] = cost["month_1y"] / HOURS, CYC
                    comps["commit_1y"] = [_component(
                        f"machine type {itype}: 1-year resource-based commitment SKUs "
                        "(month_1y / 730)", c1, CYC, CYC_DATE)]
                if sells("commitment") and cost.get("month_3y"):
                    c3, ps["commit_3y"] = cost["month_3y"] / HOURS, CYC
                    comps["commit_3y"] = [_component(
                        f"machine type {itype}: 3-year resource-based commitment SKUs "
                        "(month_3y / 730)", c3, CYC, CYC_DATE)]
                if sells("commitment") and not cost.get("month_1y") and not v2:
                    notes.append("commit_1y/commit_3y: no citable commitment price for this "
                                 "machine type here (not in the Cyclenerd export)")
                if cost.get("hour_spot") and row.get("spot_usd"):
                    checks.append({"column": "spot", "source": CYC,
                                   "usd": round(cost["hour_spot"], 4), "as_of": CYC_DATE,
                                   "diff_pct": round(_pct(cost["hour_spot"],
                                                          row["spot_usd"]), 1)})
        if od is None and not sells("on_demand"):
            notes.append(f"on-demand: not sold ({row.get('purchase_options_source')})")
        row["on_demand_usd"] = _r(od)
        # a commitment not below on-demand (or 3y above 1y): the invariant pass drops it
        row["commit_1y_usd"] = _r(c1) if c1 else None
        row["commit_3y_usd"] = _r(c3) if c3 else None
        missing = [k for col, k in (("commit_1y_usd", "commit_1y"), ("commit_3y_usd", "commit_3y"))
                   if row[col] is None]
        if v2 and missing and sells("commitment"):
            notes.append(_gap_note(row, missing, van, ts, cyc_inst))
        for col, k in (("commit_1y_usd", "commit_1y"), ("commit_3y_usd", "commit_3y")):
            if row[col] is None:
                ps[k] = None
                comps.pop(k, None)
                if not sells("commitment"):
                    if not any("commitment" in n and "not sold" in n for n in notes):
                        notes.append(f"commitments: not sold "
                                     f"({row.get('purchase_options_source')})")
                elif not any(k in n for n in notes):
                    notes.append(f"{k}: no citable price" + (" below on-demand" if (
                        c1 if k == "commit_1y" else c3) else ""))
        if row.get("zone_spot_usd"):     # zones above on-demand: the invariant pass below
            row["zone_spot_usd"] = {z: _r(u) for z, u in row["zone_spot_usd"].items()}
            row["spot_usd"] = min(row["zone_spot_usd"].values())
        if row["cloud"] == "gcp" and row.get("spot_usd"):
            acc_name = "H100-MEGA" if itype.startswith("a3-megagpu") else row["gpu"]
            cz = _cheapest_zone_parts(hosts, accs, row["region"], itype,
                                      (row["region"], acc_name, row["gpus_per_node"]),
                                      row["zone_spot_usd"])
            if cz is not None and abs(cz[1] + cz[2] - row["spot_usd"]) < 5e-4:
                comps["spot"] = [
                    _component(f"host {itype} spot SKUs in {cz[0]}", cz[1], peer_id,
                               PEER_GCP_DATE),
                    _component(f"{row['gpus_per_node']} x {row['gpu']} spot GPU SKU in "
                               f"{cz[0]}", cz[2], peer_id, PEER_GCP_DATE)]
        if row["spot_usd"] is None and not any(n.startswith("spot") for n in notes):
            notes.append("spot: no per-zone spot price in SkyPilot's file")
        if old is not None:
            for k in ("gpu_memory_gb", "network_gbps", "local_nvme_gb", "accelerator_type"):
                val = oldraw.get(k)
                if val is not None and not (k == "network_gbps" and _facts_set_network(row)):
                    row[k] = val
        if row.get("gpu_sku_usd"):
            row["gpu_sku_usd"] = {k: _r(v) for k, v in row["gpu_sku_usd"].items()
                                  if v and (k != "on_demand" or row["on_demand_usd"])
                                  and (k != "spot" or row["spot_usd"])}
            ps["gpu_sku"] = peer_id if row["gpu_sku_usd"] else None
            if not row["gpu_sku_usd"]:
                row.pop("gpu_sku_usd")
        ps = {k: v for k, v in ps.items() if k != "gpu_sku" or v}
        srcs = [s for s in dict.fromkeys(
            [x for c in ("on_demand", "spot", "commit_1y", "commit_3y")
             for x in (ps[c] or "").split(",")] + [peer_id]) if s]
        spec_src = "aws-ec2-ac-specs" if row["cloud"] == "aws" else "gcp-gpu-specs"
        row["source"] = ",".join(srcs + [spec_src])
        row["price_sources"] = ps
        row["zones_source"] = peer_id
        row["as_of"] = as_of or AS_OF
        if comps:
            row["price_components"] = comps
        if checks:
            row["cross_checks"] = checks
        row["notes"] = "; ".join(dict.fromkeys(notes))
        out_rows.append(row)

    # g6e (L40S): not in SkyPilot's AWS file; rows from the vantage export, zones assumed
    have = {(r["region"], r["instance_type"]) for r in out_rows if r["cloud"] == "aws"}
    g6_zones = {r["region"]: r["zones"] for r in out_rows if r["instance_type"] == "g6.xlarge"}
    templates = {o.instance_type: base_raw[offering_ident(o)] for o in base.offerings
                 if o.instance_type.startswith("g6e.")}
    for (region, itype), v in sorted(van.items()):
        if not itype.startswith("g6e.") or region.startswith("us-gov") or (region, itype) in have:
            continue
        tmpl = templates.get(itype)
        if tmpl is None or not v.get("od") or region not in g6_zones:
            continue
        old = base_rows.get(("aws", region, itype))
        row = {k: tmpl[k] for k in ("gpu", "gpus_per_node", "gpu_memory_gb", "vcpus",
                                    "memory_gb", "network_gbps") if k in tmpl}
        if tmpl.get("local_nvme_gb") is not None:
            row["local_nvme_gb"] = tmpl["local_nvme_gb"]
        facts = facts_for("aws", itype)
        row["rdma"] = facts.rdma
        for k in ("network_cards", "efa_interfaces", "placement"):
            if getattr(facts, k) is not None:
                row[k] = getattr(facts, k)
        row["purchase_options"] = list(facts.purchase_options)
        row["purchase_options_source"] = facts.purchase_options_source
        od = old.on_demand_usd if old is not None else v["od"]
        c1 = old.commit_1y_usd if old is not None and old.commit_1y_usd else v.get("c1")
        c3 = old.commit_3y_usd if old is not None and old.commit_3y_usd else v.get("c3")
        spot = old.spot_usd if old is not None and old.spot_usd else v.get("spot_avg")
        row.update({"cloud": "aws", "region": region, "instance_type": itype,
                    "on_demand_usd": _r(od), "spot_usd": _r(spot) if spot and spot <= od else None,
                    "commit_1y_usd": _r(c1) if c1 and c1 < od else None,
                    "commit_3y_usd": _r(c3) if c3 and c3 < od else None,
                    "zones": list(g6_zones[region]),
                    "zones_source": "assumed: the AZ IDs SkyPilot lists for g6.xlarge in this "
                                    "region (no source read here lists g6e AZs)"})
        src = "vantage-tsaol" if old is not None else "vantage-raw-2025-11"
        row["price_sources"] = {"on_demand": src, "spot": "vantage-raw-2025-11" if row["spot_usd"]
                                else None,
                                "commit_1y": src if row["commit_1y_usd"] else None,
                                "commit_3y": "vantage-raw-2025-11" if row["commit_3y_usd"] else None}
        row["source"] = ",".join(dict.fromkeys([src, "vantage-raw-2025-11", "aws-ec2-ac-specs"]))
        row["as_of"] = "2026-08-26" if old is not None else "2025-11-30"
        row["notes"] = ("g6e is not in SkyPilot's AWS file: prices from the vantage export; "
                        "zones ASSUMED from g6 in the same region (check with "
                        "`gpulease catalog refresh`); spot = mean over the region's AZs "
                        "(no per-zone figure)")
        out_rows.append(row)

    # ---- invariants: a price that breaks one is dropped, and counted -------------------------
    for row in out_rows:
        for inv, _, _ in enforce(row):
            rejected[inv] += 1
    out_rows.sort(key=lambda r: (r["cloud"], r["region"], r["instance_type"],
                                 r.get("accelerator_type") or "", r["gpus_per_node"]))
    regions = sorted({(r["cloud"], r["region"]) for r in out_rows})

    # ---- storage ------------------------------------------------------------------------------
    storage = []
    base_storage = {(s.cloud, s.region, s.storage_class): s for s in base.storage}
    bucket = cyc["storage"]["bucket"]
    for cloud, region in regions:
        for cls in TIER_CLASSES[cloud]:
            if cloud == "gcp":
                retr, days = GCS_CLASS_FACTS[cls]
                cost = (bucket[CYCLENERD_CLASS[cls]]["cost"]).get(region)
                est = cost is None
                usd = (cost or bucket[CYCLENERD_CLASS[cls]]["cost"]["us-central1"])["month"]
                row = {"cloud": cloud, "region": region, "storage_class": cls,
                       "usd_per_gb_month": round(usd, 6), "min_storage_days": days,
                       "retrieval_usd_per_gb": retr,
                       "source": "cyclenerd-gcp-2026-07" + (",gcs-retrieval" if retr or days
                                                            else ""),
                       "as_of": "2026-07-30"}
                if est:
                    row["estimate"] = True
                    row["notes"] = "no figure for this region in the export: us-central1's price"
            else:
                retr, days = S3_CLASS_FACTS[cls]
                own = base_storage.get((cloud, region, cls))
                ref = own or base_storage[("aws", "us-east-1", cls)]
                row = {"cloud": cloud, "region": region, "storage_class": cls,
                       "usd_per_gb_month": ref.usd_per_gb_month, "min_storage_days": days,
                       "retrieval_usd_per_gb": retr,
                       "source": ",".join(dict.fromkeys(ref.source.split(",")
                                                        + (["s3-pricing"] if retr else []))),
                       "as_of": AS_OF}
                if own is None:
                    row["estimate"] = True
                    row["notes"] = ("no regional figure in any source read here: the us-east-1 "
                                    "price (regional S3 prices run up to ~1.8x it, e.g. "
                                    "sa-east-1); refresh before relying on it")
            storage.append(row)

    # ---- egress -------------------------------------------------------------------------------
    egress = []
    inet = cyc["compute"]["network"]["traffic"]["egress"]["internet"]["cost"]["0-1"]
    us_eu = ("us-", "eu-")
    for cloud, region in regions:
        if cloud == "aws":
            known = region.startswith(us_eu)
            for kind, usd, src in (("internet", 0.09, "leanops-aws-transfer"),
                                   ("inter_cloud", 0.09, "leanops-aws-transfer"),
                                   ("inter_region", 0.02, "redress-aws-interregion")):
                row = {"cloud": cloud, "region": region, "kind": kind, "usd_per_gb": usd,
                       "source": src}
                if kind == "inter_cloud":
                    row["notes"] = "to GCP: internet egress (no private interconnect assumed)"
                if not known:
                    row["estimate"] = True
                    row["notes"] = ("the sources price US/EU regions; other AWS regions charge "
                                    "more (up to ~0.15-0.16 $/GB): refresh before relying on it")
                egress.append(row)
        else:
            cost = inet.get(region)
            usd = (cost or inet["us-central1"])["month"]
            for kind, val, src in (("internet", usd, "cyclenerd-gcp-2026-07"),
                                   ("inter_cloud", usd, "cyclenerd-gcp-2026-07"),
                                   ("inter_region", 0.02, "brainagents-gcp-egress"),
                                   ("inter_continent", 0.08, "brainagents-gcp-egress")):
                row = {"cloud": cloud, "region": region, "kind": kind, "usd_per_gb": val,
                       "source": src}
                if kind == "inter_cloud":
                    row["notes"] = "to AWS: internet egress, first 1 TB/month tier"
                if kind in ("inter_region", "inter_continent"):
                    row["notes"] = "upper end of the source's range (conservative)"
                if kind in ("internet", "inter_cloud") and cost is None:
                    row["estimate"] = True
                    row["notes"] = "no figure for this region in the export: us-central1's"
                egress.append(row)

    sources = dict(base.sources)
    sources.update({k: v for k, v in NEW_SOURCES.items() if v2 or k != TSAOL_2026})
    sources.update(family_sources())
    doc = {
        "format": "gpulease-catalog/2", "version": version, "as_of": AS_OF,
        "description": "gpulease shipped price snapshot, format /2: every AWS and GCP region "
                       "where a GPU gpulease plans for is offered (per SkyPilot's catalog), zones "
                       "on every row, per-zone spot prices, storage with retrieval and minimum "
                       "durations and egress per region. Hourly USD per node (Linux). Built by "
                       "tools/catalog_snapshot.py; precedence and cross-checks in "
                       "docs/catalog.md.",
        "data_dates": {
            "aws_on_demand_commitments": "2025-11-30..2026-08-26 (vantage exports)" if not v2
            else "2025-11-30..2026-08-26 (vantage exports of 2025-11-30, 2026-01-21, 2026-08-26)",
            "aws_zones_spot": "unknown (SkyPilot AWS GPU families)",
            "gcp_on_demand_commitments": "2026-07-30 (Cloud Billing Catalog via Cyclenerd)",
            "gcp_zones_spot": "2026-05-20 (SkyPilot GCP)",
            "gcs_storage_egress": "2026-07-30", "s3_storage": "2025-09-14..2026-07-01"},
        "sources": sources, "offerings": out_rows, "storage": storage, "egress": egress,
        "infra": base.raw.get("infra") or [],
        "spot_interruptions": base.raw.get("spot_interruptions") or {},
        "generated_by": {"tool": "tools/catalog_snapshot.py", "at": f"{AS_OF}T00:00:00",
                         "base_version": base.version,
                         "invariants_rejected": rejected,
                         "import_rules_applied": len(warnings)},
    }
    doc["checksum"] = checksum(doc)
    return doc, {"invariants_rejected": rejected, "warnings": warnings}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    peer = next((p / "shared" / "peer-catalog" for p in (ROOT, *ROOT.parents[:2])
                 if (p / "shared" / "peer-catalog" / "v8").is_dir()),
                ROOT.parent / "shared" / "peer-catalog")
    ap.add_argument("--peer", default=str(peer),
                    help="SkyPilot v8 peer snapshot (default: shared/peer-catalog beside or "
                         "above the checkout)")
    ap.add_argument("--cyclenerd", required=True, help="Cyclenerd pricing.yml (commit fd66b26)")
    ap.add_argument("--vantage", required=True, help="tsaol/aws-gpu gpu_instances_raw.json "
                    "(commit 2d0108c)")
    ap.add_argument("--vantage-2026", help="tsaol/aws-gpu data/all_gpu_instances.js (commit "
                    "77fcd9f, 2026-01-21); needed for 2026.12.03.2")
    ap.add_argument("--version", default=VERSION, choices=VERSIONS,
                    help=f"snapshot to build (default {VERSION})")
    ap.add_argument("--base", default=str(CATALOG_DATA / "2026.12.02.json"))
    ap.add_argument("--out", default=str(CATALOG_DATA))
    args = ap.parse_args(argv)
    doc, report = build(Path(args.peer), Path(args.cyclenerd), Path(args.vantage), args.base,
                        args.version, Path(args.vantage_2026) if args.vantage_2026 else None)
    from gpulease.catalog import parse_catalog
    cat = parse_catalog(doc, source="<built>")
    out = Path(args.out)
    path = out / f"{args.version}.json" if out.is_dir() else out
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}: {len(cat.offerings)} offerings, "
          f"{len({(o.cloud, o.region) for o in cat.offerings})} regions, "
          f"{len(cat.storage)} storage rows, {len(cat.egress)} egress rows, "
          f"{len(cat.warnings)} warning(s)")
    for w in cat.warnings:
        print(f"  warning: {w}")
    print("rows each invariant rejected in the build inputs (gpulease/catalog/invariants.py): "
          + ", ".join(f"{k} {v}" for k, v in report["invariants_rejected"].items()))
    print(f"{len(report['warnings'])} importer rule(s) applied to the peer CSVs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
