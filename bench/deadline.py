"""Deadline-aware spot, replayed (issue 37): the Uniform Progress rule (gpulease/deadline.py)
against always-on-demand, greedy (spot until forced onto on-demand) and the offline optimum,
on spot availability traces.

Run: python bench/deadline.py [--traces PATH] [--generated 12] [--nodes 1,4,16]
     [--slack 4,12,22] [--work 48] [--restart 0.2] [--spot-price FRACTION] [--stride-hours 72]

Traces:
- **generated** (always): ``--generated`` seeded traces per availability level (high, medium,
  low), a two-regime Markov chain (spot there / gone, with mean durations per level) whose
  "there" ticks offer between ``nodes`` and 16 nodes; 5-minute ticks.
- **public** (``--traces PATH``): the availability traces the paper's authors released,
  skypilot-org/spot-traces (``availability/**.json``: ``{"metadata": {"gap_seconds": N},
  "data": [available instances per tick]}``, as its README documents). The repository states
  no licence, so gpulease does not ship them: clone it and give the path. A job starts every
  ``--stride-hours`` along each trace. A trace whose samples never exceed 1 is replayed for 1
  node only.

The job: ``--work`` hours of compute, a deadline ``--slack`` hours later, ``--restart`` hours
per (re)start (the paper's setting: 48 h of work, 4 to 22 h of slack, 0.05-0.2 h restarts).
Costs are in on-demand node-hours, printed against running the whole job on on-demand; the spot
price is a fraction of on-demand: ``--spot-price``, else the shipped catalog's p3.2xlarge
(1 x V100, the traces' instance type) in us-east-1 (printed with its source).
Every figure: mean cost against always-on-demand, the worst trace, deadline misses, how often
Uniform Progress was dearer than greedy, and its gap to the optimum. Time and load are
printed: the replay is CPU-bound Python (the optimum a numpy dynamic programme).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchlib  # noqa: E402
from gpulease import deadline as dl  # noqa: E402

#: availability levels of the generated traces: (name, mean hours spot is there, mean hours
#: it is gone) - high / medium / low, spanning the public traces' 12-91 % availability.
LEVELS = (("high", 10.0, 1.5), ("medium", 4.0, 4.0), ("low", 1.5, 6.0))
GEN_GAP_HOURS = 5 / 60


def generated(level: tuple, ticks: int, nodes: int, rnd: random.Random) -> list[int]:
    _, up, down = level
    out, there = [], rnd.random() < up / (up + down)
    for _ in range(ticks):
        out.append(rnd.randint(nodes, 16) if there else rnd.randint(0, max(0, nodes - 1)))
        mean = up if there else down
        if rnd.random() < GEN_GAP_HOURS / mean:
            there = not there
    return out


def public(path: Path) -> list[tuple[str, float, list[int]]]:
    files = sorted(path.rglob("*.json")) if path.is_dir() else [path]
    out = []
    for f in files:
        if "preemption" in f.parts:
            continue                        # availability traces only (documented above)
        doc = json.loads(f.read_text(encoding="utf-8"))
        out.append((str(f.relative_to(path) if path.is_dir() else f.name),
                    doc["metadata"]["gap_seconds"] / 3600.0, [int(x) for x in doc["data"]]))
    return out


def catalog_spot_fraction() -> tuple[float, str]:
    from gpulease.catalog import load_catalog

    cat = load_catalog()
    for o in cat.offerings:
        if o.instance_type == "p3.2xlarge" and o.region == "us-east-1" and o.spot_usd:
            return o.spot_usd / o.on_demand_usd, (
                f"catalog {cat.version}: p3.2xlarge us-east-1 spot ${o.spot_usd:.4f} / "
                f"on-demand ${o.on_demand_usd:.4f}")
    raise SystemExit("the catalog has no p3.2xlarge spot price in us-east-1: pass --spot-price")


def run_case(job: dl.Job, trace: list[int], gap: float, spot: float) -> dict:
    res = {n: dl.replay(p, job, trace, gap, spot_price=spot) for n, p in dl.POLICIES.items()}
    opt = dl.offline_optimum(job, trace, gap, spot_price=spot)
    base = job.nodes * (job.work_hours + job.restart_hours)
    row = {n: (o.cost_od_hours / base, o.met_deadline) for n, o in res.items()}
    row["optimum"] = (opt.cost_od_hours / base, True) if opt else (math.nan, False)
    return row


def summarise(label: str, rows: list[dict], every: list | None = None) -> None:
    if every is not None:
        every.extend(rows)
    if not rows:
        return
    up = [r["uniform_progress"][0] for r in rows]
    gr = [r["greedy"][0] for r in rows]
    op = [r["optimum"][0] for r in rows if r["optimum"][1]]
    miss = {n: sum(1 for r in rows if not r[n][1]) for n in ("uniform_progress", "greedy")}
    missed_feasible = sum(1 for r in rows if r["optimum"][1] and not r["uniform_progress"][1])
    dearer = sum(1 for r in rows if r["uniform_progress"][0] > r["greedy"][0] + 1e-9)
    print(f"  {label:<44} n={len(rows):>3}  UP {1 - statistics.mean(up):6.1%} saved "
          f"(worst {1 - max(up):6.1%}) · greedy {1 - statistics.mean(gr):6.1%} · optimum "
          f"{1 - statistics.mean(op) if op else math.nan:6.1%} · misses UP {miss['uniform_progress']}"
          f" (optimum met {missed_feasible} of them) greedy {miss['greedy']} · UP dearer than "
          f"greedy on {dearer}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, help="a skypilot-org/spot-traces checkout (or one "
                                                "of its availability folders or files)")
    ap.add_argument("--generated", type=int, default=12, help="generated traces per level")
    ap.add_argument("--nodes", default="1,4,16")
    ap.add_argument("--slack", default="4,12,22", help="hours of slack past the work")
    ap.add_argument("--work", type=float, default=48.0)
    ap.add_argument("--restart", type=float, default=0.2)
    ap.add_argument("--spot-price", type=float, help="spot as a fraction of on-demand")
    ap.add_argument("--stride-hours", type=float, default=72.0,
                    help="hours between job starts along a public trace")
    ap.add_argument("--seed", type=int, default=37)
    a = ap.parse_args(argv)
    benchlib.header("bench/deadline.py: Uniform Progress vs greedy, always-on-demand, optimum")
    if a.spot_price is not None:
        spot, source = a.spot_price, "--spot-price"
    else:
        spot, source = catalog_spot_fraction()
    print(f"spot price {spot:.3f} of on-demand ({source}); work {a.work} h, restart "
          f"{a.restart} h; cost = 1 - saved against always-on-demand\n")
    nodes = [int(x) for x in a.nodes.split(",")]
    slacks = [float(x) for x in a.slack.split(",")]
    t0 = time.perf_counter()
    rnd = random.Random(a.seed)
    gen_all: list[dict] = []
    pub_all: list[dict] = []
    print("generated traces (5-minute ticks):")
    for level in LEVELS:
        for n in nodes:
            for s in slacks:
                job = dl.Job(a.work, a.work + s, a.restart, nodes=n)
                ticks = math.ceil((job.deadline_hours + a.work) / GEN_GAP_HOURS)
                rows = [run_case(job, generated(level, ticks, n, rnd), GEN_GAP_HOURS, spot)
                        for _ in range(a.generated)]
                summarise(f"{level[0]}, {n} node(s), slack {s:g} h", rows, gen_all)
    if a.traces:
        print(f"\npublic traces ({a.traces}):")
        for name, gap, data in public(a.traces):
            most = max(data) if data else 0
            for n in [x for x in nodes if x <= max(1, most)]:
                for s in slacks:
                    job = dl.Job(a.work, a.work + s, a.restart, nodes=n)
                    span = math.ceil(job.deadline_hours / gap)
                    stride = max(1, round(a.stride_hours / gap))
                    rows = [run_case(job, data[i:i + span * 2], gap, spot)
                            for i in range(0, max(1, len(data) - span), stride)]
                    summarise(f"{name} {n}n slack {s:g}h", rows, pub_all)
    print()
    summarise("ALL generated", gen_all)
    summarise("ALL public", pub_all)
    print(f"\nelapsed {time.perf_counter() - t0:.1f} s")
    benchlib.footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
