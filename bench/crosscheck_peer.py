"""Cross-check the shipped price catalog against a peer catalog (SkyPilot schema v8 CSVs).

The peer is third-party data used only to spot transcription errors in our own rows: rows are
matched by (cloud, region, instance_type); the peer lists one row per zone, so the region
minimum is taken. SkyPilot prices a GCP accelerator-optimized or N1+GPU machine as a VM row
(host only) plus an accelerator row (InstanceType empty, AcceleratorName/AcceleratorCount),
so the peer figure for such a machine is the sum of the two.

Usage: python bench/crosscheck_peer.py [--peer ../shared/peer-catalog] [--catalog PATH] [--json]
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from gpulease.catalog import Catalog, load_catalog
from gpulease.errors import GpuleaseError
from gpulease.model import Offering

#: shared/peer-catalog beside the checkout, or above a worktree (/work/wt/<branch>).
DEFAULT_PEER = next((p / "shared" / "peer-catalog" for p in Path(__file__).resolve().parents[1:4]
                     if (p / "shared" / "peer-catalog").is_dir()),
                    Path(__file__).resolve().parents[2] / "shared" / "peer-catalog")
#: rows whose on-demand price differs by more than this share are listed as "off".
OFF_THRESHOLD_PCT = 10.0

#: our canonical GPU name -> the peer's AcceleratorName for GCP accelerator rows.
_GCP_PEER_GPU = {"A100": "A100", "A100-80GB": "A100-80GB", "H100": "H100", "H200": "H200",
                 "L4": "L4", "T4": "T4", "V100": "V100", "B200": "B200", "P4": "P4",
                 "P100": "P100"}
#: GPUs GCP attaches to N1 hosts: each (region, GPU, count) the peer lists is one offering.
_N1_GPUS = ("T4", "V100", "P4", "P100")

PeerKey = tuple[str, str, str]          # (cloud, region, instance_type)
AccKey = tuple[str, str, int]           # (region, accelerator name, count)


@dataclass(frozen=True)
class PeerPrice:
    on_demand: Optional[float]
    spot: Optional[float]


@dataclass(frozen=True)
class Match:
    cloud: str
    region: str
    instance_type: str
    ours_on_demand: Optional[float]
    peer_on_demand: Optional[float]
    on_demand_diff_pct: Optional[float]
    ours_spot: Optional[float]
    peer_spot: Optional[float]
    spot_diff_pct: Optional[float]


def _num(text: str) -> Optional[float]:
    text = (text or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value > 0 else None


def _min(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _fold(table: dict, key, od: Optional[float], spot: Optional[float]) -> None:
    """Keep the region minimum of the per-zone peer rows."""
    prev = table.get(key)
    if prev is None:
        table[key] = PeerPrice(od, spot)
    else:
        table[key] = PeerPrice(_min(prev.on_demand, od), _min(prev.spot, spot))


def _read_csv(path: Path) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(path)
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def load_peer(peer_dir: Path) -> tuple[dict[PeerKey, PeerPrice], dict[AccKey, PeerPrice]]:
    """Machine rows keyed by (cloud, region, type) and GCP accelerator rows, region minimum."""
    machines: dict[PeerKey, PeerPrice] = {}
    accelerators: dict[AccKey, PeerPrice] = {}
    for row in _read_csv(peer_dir / "v8" / "aws" / "vms.csv"):
        _fold(machines, ("aws", row["Region"], row["InstanceType"]), _num(row["Price"]),
              _num(row["SpotPrice"]))
    for row in _read_csv(peer_dir / "v8" / "gcp" / "vms.csv"):
        if row["InstanceType"]:
            _fold(machines, ("gcp", row["Region"], row["InstanceType"]), _num(row["Price"]),
                  _num(row["SpotPrice"]))
        elif row["AcceleratorName"] and row["AcceleratorCount"]:
            try:
                count = int(float(row["AcceleratorCount"]))
            except ValueError:
                continue
            _fold(accelerators, (row["Region"], row["AcceleratorName"], count),
                  _num(row["Price"]), _num(row["SpotPrice"]))
    return machines, accelerators


def _peer_accelerator_name(o: Offering) -> Optional[str]:
    # A3 Mega carries the same H100 silicon as A3 High but SkyPilot prices it as its own
    # accelerator ("H100-MEGA"), matching the separate GCP SKU.
    if o.instance_type.startswith("a3-megagpu"):
        return "H100-MEGA"
    return _GCP_PEER_GPU.get(o.gpu)


def peer_price(o: Offering, machines: dict[PeerKey, PeerPrice],
               accelerators: dict[AccKey, PeerPrice]) -> Optional[PeerPrice]:
    """The peer's price for the same node, or None when the peer has no comparable row."""
    vm = machines.get(o.key)
    if vm is None:
        return None
    if o.cloud != "gcp":
        return vm
    name = _peer_accelerator_name(o)
    acc = accelerators.get((o.region, name, o.gpus_per_node)) if name else None
    if acc is None:
        return None

    def add(a: Optional[float], b: Optional[float]) -> Optional[float]:
        return None if a is None or b is None else a + b

    return PeerPrice(add(vm.on_demand, acc.on_demand), add(vm.spot, acc.spot))


def _pct(ours: Optional[float], peer: Optional[float]) -> Optional[float]:
    if ours is None or peer is None:
        return None
    return (ours - peer) / peer * 100.0


def compare(catalog: Catalog, machines: dict[PeerKey, PeerPrice],
            accelerators: dict[AccKey, PeerPrice]) -> list[Match]:
    out = []
    for o in sorted(catalog.offerings, key=lambda x: x.key):
        peer = peer_price(o, machines, accelerators)
        if peer is None:
            continue
        out.append(Match(o.cloud, o.region, o.instance_type, o.on_demand_usd, peer.on_demand,
                         _pct(o.on_demand_usd, peer.on_demand), o.spot_usd, peer.spot,
                         _pct(o.spot_usd, peer.spot)))
    return out


def _p90(values: list[float]) -> Optional[float]:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, int(0.9 * len(s)))], 2)


def summarize(matches: list[Match], offerings: int, peer_keys: Optional[int] = None) -> dict:
    od = [abs(m.on_demand_diff_pct) for m in matches if m.on_demand_diff_pct is not None]
    sp = [abs(m.spot_diff_pct) for m in matches if m.spot_diff_pct is not None]
    out = {
        "catalog_rows": offerings,
        "rows_matched": len(matches),
        "on_demand_compared": len(od),
        "on_demand_median_abs_diff_pct": round(statistics.median(od), 2) if od else None,
        "on_demand_p90_abs_diff_pct": _p90(od),
        "on_demand_rows_over_threshold": sum(1 for d in od if d > OFF_THRESHOLD_PCT),
        "spot_compared": len(sp),
        "spot_median_abs_diff_pct": round(statistics.median(sp), 2) if sp else None,
        "spot_p90_abs_diff_pct": _p90(sp),
        "spot_rows_over_threshold": sum(1 for d in sp if d > OFF_THRESHOLD_PCT),
        "threshold_pct": OFF_THRESHOLD_PCT,
    }
    if peer_keys is not None:
        out["peer_rows"] = peer_keys
        out["peer_coverage_pct"] = round(100.0 * len(matches) / peer_keys, 1) if peer_keys else None
    return out


def peer_gpu_keys(machines: dict, accelerators: dict) -> int:
    """How many (cloud, region, type) GPU rows the peer has that gpulease could carry."""
    aws = sum(1 for k in machines if k[0] == "aws")
    gcp = sum(1 for (c, region, t) in machines if c == "gcp" and t.split("-")[0] in
              ("a2", "a3", "a4", "g2"))
    n1 = sum(1 for (region, name, count) in accelerators if name in _N1_GPUS)
    return aws + gcp + n1


def _fmt(v: Optional[float], spec: str = "10.4f") -> str:
    return format(v, spec) if v is not None else " " * (int(spec.split(".")[0]) - 1) + "-"


def render(matches: list[Match], summary: dict) -> str:
    lines = [f"{'cloud':5} {'region':16} {'instance_type':16} {'ours_od':>10} {'peer_od':>10} "
             f"{'od_%':>7} {'ours_spot':>10} {'peer_spot':>10} {'spot_%':>7}"]
    for m in matches:
        flag = " *" if (m.on_demand_diff_pct is not None
                        and abs(m.on_demand_diff_pct) > OFF_THRESHOLD_PCT) else ""
        lines.append(f"{m.cloud:5} {m.region:16} {m.instance_type:16} {_fmt(m.ours_on_demand)} "
                     f"{_fmt(m.peer_on_demand)} {_fmt(m.on_demand_diff_pct, '7.1f')} "
                     f"{_fmt(m.ours_spot)} {_fmt(m.peer_spot)} {_fmt(m.spot_diff_pct, '7.1f')}"
                     f"{flag}")
    s = summary
    lines += [
        "",
        f"rows matched: {s['rows_matched']} of {s['catalog_rows']} catalog rows",
        f"peer coverage: {s.get('peer_coverage_pct')}% of {s.get('peer_rows')} peer GPU rows",
        f"on-demand: {s['on_demand_compared']} compared, median |diff| "
        f"{s['on_demand_median_abs_diff_pct']}%, p90 {s['on_demand_p90_abs_diff_pct']}%, "
        f"{s['on_demand_rows_over_threshold']} rows "
        f">{s['threshold_pct']:.0f}% off (marked *)",
        f"spot: {s['spot_compared']} compared, median |diff| {s['spot_median_abs_diff_pct']}%, "
        f"p90 {s['spot_p90_abs_diff_pct']}%, "
        f"{s['spot_rows_over_threshold']} rows >{s['threshold_pct']:.0f}% off",
    ]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", default=str(DEFAULT_PEER),
                    help="peer catalog directory holding v8/aws/vms.csv and v8/gcp/vms.csv")
    ap.add_argument("--catalog", default=None, help="our catalog file (default: newest shipped)")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    args = ap.parse_args(argv)
    try:
        catalog = load_catalog(args.catalog)
    except GpuleaseError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    try:
        machines, accelerators = load_peer(Path(args.peer))
    except FileNotFoundError as exc:
        print(f"--peer {args.peer}: cannot read {exc}; pass the directory that holds "
              "v8/aws/vms.csv and v8/gcp/vms.csv", file=sys.stderr)
        return 2
    except (KeyError, csv.Error) as exc:
        print(f"--peer {args.peer}: not a SkyPilot v8 catalog ({exc!r}); expected the "
              "v8 vms.csv columns", file=sys.stderr)
        return 2
    matches = compare(catalog, machines, accelerators)
    summary = summarize(matches, len(catalog.offerings), peer_gpu_keys(machines, accelerators))
    if args.json:
        print(json.dumps({"catalog": catalog.version, "summary": summary,
                          "rows": [asdict(m) for m in matches]}, indent=1))
    else:
        print(f"catalog {catalog.version} vs peer {args.peer}")
        print(render(matches, summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
