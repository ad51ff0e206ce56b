"""Build the shipped catalog snapshot (format /2) from public price datasets; re-runnable.

    python -m infra.catalog.build.snapshot --peer ../shared/peer-catalog \
        --cyclenerd pricing.yml --vantage gpu_instances_raw.json --out infra/catalog/data/

Inputs (none is committed; each is named with the commit it was read at, see docs/catalog.md):
- ``--peer``: SkyPilot catalog v8 (GCP as published 2026-05-20; AWS GPU families, date unknown):
  rows, zones (AWS zone IDs, GCP zones) and per-zone spot prices, via
  ``infra.catalog.importers.skypilot``;
- ``--cyclenerd``: Cyclenerd/google-cloud-pricing-cost-calculator ``pricing.yml`` at commit
  fd66b26ff84fee5cdd94f341ea89206e76c06b99 (generated 2026-07-30 from the Cloud Billing
  Catalog): GCP on-demand and 1-/3-year commitment prices per machine type and region, GCS
  prices per region, internet egress per region;
- ``--vantage``: instances.vantage.sh raw export in tsaol/aws-gpu ``data/gpu_instances_raw.json``
  at commit 2d0108c7bd261c8e40493fbd35135437bd6c9099 (2025-11-30): AWS on-demand, 1-/3-year
  Standard No Upfront RI prices per region, g6e rows (SkyPilot's AWS file has no g6e);
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

from infra.catalog import TIER_CLASSES, load_catalog
from infra.catalog.importers.skypilot import build_rows, read_aws, read_gcp
from infra.catalog.refresh import checksum

VERSION, AS_OF = "2026.12.03", "2026-12-03"
HOURS = 730.0
#: AWS types gpulease plans for (the previous snapshot's, plus B200). p5.4xlarge and gr6 are
#: left out: no source here states their EFA / network-card layout.
AWS_TYPES_EXTRA = {"p6-b200.48xlarge"}
DROP_TYPES = {"p5.4xlarge", "gr6.4xlarge", "gr6.8xlarge"}
#: GCP machine types kept (a3-highgpu-1g/2g/4g are Spot / flex-start only).
GCP_DROP = {"a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g", "a3-edgegpu-8g",
            "a3-edgegpu-8g-nolssd", "a3-ultragpu-8g-nolssd", "a2-megagpu-16g"}

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


def vantage_table(path: Path) -> dict:
    """(region, type) -> {"od", "c1", "c3", "spot_avg"} from the export's 'linux' blocks."""
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
                "c3": f(res.get("yrTerm3Standard.noUpfront")), "spot_avg": f(lin.get("spot_avg"))}
    return out


def build(peer: Path, cyclenerd: Path, vantage: Path, base_path: Optional[str]) -> dict:
    import yaml

    base = load_catalog(base_path)
    aws, _ = read_aws(peer / "v8" / "aws" / "vms.csv")
    hosts, accs, _ = read_gcp(peer / "v8" / "gcp" / "vms.csv")
    rows = build_rows(aws, hosts, accs, base)
    cyc = yaml.load(cyclenerd.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader",
                                                                         yaml.SafeLoader))
    cyc_inst = cyc["compute"]["instance"]
    van = vantage_table(vantage)
    base_rows = {o.key: o for o in base.offerings}
    base_raw = {(r["cloud"], r["region"], r["instance_type"]): r for r in base.raw["offerings"]}
    out_rows = []

    for row in rows:
        key = (row["cloud"], row["region"], row["instance_type"])
        itype = row["instance_type"]
        if itype in DROP_TYPES or itype in GCP_DROP:
            continue
        notes = [n.replace("price = host", "SkyPilot's figures = host")
                 for n in row["notes"].split("; ") if n and not n.startswith("commit_")]
        ps = {"spot": None, "on_demand": None, "commit_1y": None, "commit_3y": None}
        srcs: list[str] = []
        peer_id = "skypilot-aws" if row["cloud"] == "aws" else "skypilot-gcp"
        peer_od = row["on_demand_usd"]
        if row.get("zone_spot_usd"):
            ps["spot"] = peer_id
        old = base_rows.get(key)
        oldraw = base_raw.get(key) or {}
        as_of = NEW_SOURCES[peer_id].get("published", "")
        if row["cloud"] == "aws":
            v = van.get((row["region"], itype)) or {}
            od = c1 = c3 = None
            if old is not None and old.on_demand_usd is not None:
                od, ps["on_demand"] = old.on_demand_usd, (oldraw.get("price_sources") or {}).get(
                    "on_demand") or oldraw.get("source", "").split(",")[0]
                as_of = old.as_of
            elif v.get("od"):
                od, ps["on_demand"], as_of = v["od"], "vantage-raw-2025-11", "2025-11-30"
            elif peer_od is not None:
                od, ps["on_demand"] = peer_od, peer_id
            if old is not None and old.commit_1y_usd is not None:
                c1 = old.commit_1y_usd
                ps["commit_1y"] = (oldraw.get("price_sources") or {}).get("commit_1y", "vantage-tsaol")
            elif v.get("c1"):
                c1, ps["commit_1y"] = v["c1"], "vantage-raw-2025-11"
            if old is not None and old.commit_3y_usd is not None:
                c3, ps["commit_3y"] = old.commit_3y_usd, "vantage-raw-2025-11"
            elif v.get("c3"):
                c3, ps["commit_3y"] = v["c3"], "vantage-raw-2025-11"
            if peer_od is not None and od is not None and abs(_pct(peer_od, od)) > 1:
                notes.append(f"cross-check: SkyPilot on-demand {_r(peer_od)} "
                             f"({_pct(peer_od, od):+.1f}%)")
            if v.get("od") and od is not None and ps["on_demand"] != "vantage-raw-2025-11" \
                    and abs(_pct(v["od"], od)) > 1:
                notes.append(f"cross-check: vantage 2025-11-30 on-demand {v['od']} "
                             f"({_pct(v['od'], od):+.1f}%)")
            if v.get("spot_avg") and row.get("spot_usd"):
                notes.append(f"cross-check: vantage 2025-11-30 spot mean over AZs {v['spot_avg']}")
        else:
            cost = ((cyc_inst.get(itype) or {}).get("cost") or {}).get(row["region"])
            od = c1 = c3 = None
            if cost and cost.get("hour"):
                od, ps["on_demand"], as_of = cost["hour"], "cyclenerd-gcp-2026-07", "2026-07-30"
                if cost.get("month_1y"):
                    c1, ps["commit_1y"] = cost["month_1y"] / HOURS, "cyclenerd-gcp-2026-07"
                if cost.get("month_3y"):
                    c3, ps["commit_3y"] = cost["month_3y"] / HOURS, "cyclenerd-gcp-2026-07"
                if peer_od is not None and abs(_pct(peer_od, od)) > 1:
                    notes.append(f"cross-check: SkyPilot on-demand (host + GPUs) {_r(peer_od)} "
                                 f"({_pct(peer_od, od):+.1f}%; SkyPilot's lower GPU figures "
                                 "match no on-demand SKU in the Billing Catalog export)")
                if cost.get("hour_spot") and row.get("spot_usd"):
                    notes.append(f"cross-check: Cyclenerd spot {round(cost['hour_spot'], 4)}")
            elif peer_od is not None:
                od, ps["on_demand"] = peer_od, peer_id
                notes.append("commit_1y/commit_3y: no citable commitment price for this "
                             "machine type (not in the Cyclenerd export)")
        if od is None and not row.get("zone_spot_usd"):
            continue
        row["on_demand_usd"] = _r(od)
        row["commit_1y_usd"] = _r(c1) if c1 and (od is None or c1 < od) else None
        row["commit_3y_usd"] = _r(c3) if c3 and (od is None or c3 < od) and (
            row["commit_1y_usd"] is None or c3 <= row["commit_1y_usd"]) else None
        for col, k in (("commit_1y_usd", "commit_1y"), ("commit_3y_usd", "commit_3y")):
            if row[col] is None:
                ps[k] = None
                if not any(k in n for n in notes):
                    notes.append(f"{k}: no citable price" + (" below on-demand" if (c1 if k ==
                                 "commit_1y" else c3) else ""))
        if row.get("zone_spot_usd") and od is not None:
            zs = {z: _r(u) for z, u in row["zone_spot_usd"].items() if u <= od}
            if len(zs) < len(row["zone_spot_usd"]):
                notes.append("spot above on-demand in some zones: dropped")
            if zs:
                row["zone_spot_usd"], row["spot_usd"] = zs, min(zs.values())
            else:
                row.pop("zone_spot_usd"), row.update(spot_usd=None)
                ps["spot"] = None
        if row["spot_usd"] is None and not any(n.startswith("spot") for n in notes):
            notes.append("spot: no per-zone spot price in SkyPilot's file")
        if old is not None:
            for k in ("gpu_memory_gb", "network_gbps", "rdma", "network_cards", "efa_interfaces",
                      "local_nvme_gb", "accelerator_type"):
                val = oldraw.get(k)
                if val is not None:
                    row[k] = val
        srcs = [s for s in dict.fromkeys([ps[c] for c in ("on_demand", "spot", "commit_1y",
                                                          "commit_3y")] + [peer_id]) if s]
        spec_src = "aws-ec2-ac-specs" if row["cloud"] == "aws" else "gcp-gpu-specs"
        row["source"] = ",".join(srcs + [spec_src])
        row["price_sources"] = ps
        row["zones_source"] = peer_id
        row["as_of"] = as_of or AS_OF
        row["notes"] = "; ".join(dict.fromkeys(notes))
        out_rows.append(row)

    # g6e (L40S): not in SkyPilot's AWS file; rows from the vantage export, zones assumed
    have = {(r["region"], r["instance_type"]) for r in out_rows if r["cloud"] == "aws"}
    g6_zones = {r["region"]: r["zones"] for r in out_rows if r["instance_type"] == "g6.xlarge"}
    templates = {o.instance_type: base_raw[o.key] for o in base.offerings
                 if o.instance_type.startswith("g6e.")}
    for (region, itype), v in sorted(van.items()):
        if not itype.startswith("g6e.") or region.startswith("us-gov") or (region, itype) in have:
            continue
        tmpl = templates.get(itype)
        if tmpl is None or not v.get("od") or region not in g6_zones:
            continue
        old = base_rows.get(("aws", region, itype))
        row = {k: tmpl[k] for k in ("gpu", "gpus_per_node", "gpu_memory_gb", "vcpus",
                                    "memory_gb", "network_gbps", "rdma") if k in tmpl}
        for k in ("network_cards", "efa_interfaces", "local_nvme_gb"):
            if tmpl.get(k) is not None:
                row[k] = tmpl[k]
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

    out_rows.sort(key=lambda r: (r["cloud"], r["region"], r["instance_type"]))
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
    sources.update(NEW_SOURCES)
    doc = {
        "format": "gpulease-catalog/2", "version": VERSION, "as_of": AS_OF,
        "description": "gpulease shipped price snapshot, format /2: every AWS and GCP region "
                       "where a GPU gpulease plans for is offered (per SkyPilot's catalog), zones "
                       "on every row, per-zone spot prices, storage with retrieval and minimum "
                       "durations and egress per region. Hourly USD per node (Linux). Built by "
                       "infra/catalog/build/snapshot.py; precedence and cross-checks in "
                       "docs/catalog.md.",
        "data_dates": {
            "aws_on_demand_commitments": "2025-11-30..2026-08-26 (vantage exports)",
            "aws_zones_spot": "unknown (SkyPilot AWS GPU families)",
            "gcp_on_demand_commitments": "2026-07-30 (Cloud Billing Catalog via Cyclenerd)",
            "gcp_zones_spot": "2026-05-20 (SkyPilot GCP)",
            "gcs_storage_egress": "2026-07-30", "s3_storage": "2025-09-14..2026-07-01"},
        "sources": sources, "offerings": out_rows, "storage": storage, "egress": egress,
        "infra": base.raw.get("infra") or [],
        "spot_interruptions": base.raw.get("spot_interruptions") or {},
        "generated_by": {"tool": "infra/catalog/build/snapshot.py", "at": f"{AS_OF}T00:00:00",
                         "base_version": base.version},
    }
    doc["checksum"] = checksum(doc)
    return doc


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = Path(__file__).resolve()
    peer = next((p / "shared" / "peer-catalog" for p in here.parents[3:6]
                 if (p / "shared" / "peer-catalog" / "v8").is_dir()),
                here.parents[4] / "shared" / "peer-catalog")
    ap.add_argument("--peer", default=str(peer),
                    help="SkyPilot v8 peer snapshot (default: shared/peer-catalog beside or "
                         "above the checkout)")
    ap.add_argument("--cyclenerd", required=True, help="Cyclenerd pricing.yml (commit fd66b26)")
    ap.add_argument("--vantage", required=True, help="tsaol/aws-gpu gpu_instances_raw.json "
                    "(commit 2d0108c)")
    ap.add_argument("--base", default=str(Path(__file__).resolve().parents[1] / "data"
                                          / "2026.12.02.json"))
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "data"))
    args = ap.parse_args(argv)
    doc = build(Path(args.peer), Path(args.cyclenerd), Path(args.vantage), args.base)
    from infra.catalog import parse_catalog
    cat = parse_catalog(doc, source="<built>")
    out = Path(args.out)
    path = out / f"{VERSION}.json" if out.is_dir() else out
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}: {len(cat.offerings)} offerings, "
          f"{len({(o.cloud, o.region) for o in cat.offerings})} regions, "
          f"{len(cat.storage)} storage rows, {len(cat.egress)} egress rows, "
          f"{len(cat.warnings)} warning(s)")
    for w in cat.warnings:
        print(f"  warning: {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
