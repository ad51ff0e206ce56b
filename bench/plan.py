"""Offline-plan benchmark: resources per second of THE program under the mock runtime.

Run: python bench/plan.py [--sizes 1,10,50,100] [--repeat 3] [--preview] [--engine-gc [--one-shot]]
Builds a stack with N clusters on both clouds from a fixed portfolio (the prod stack's clouds,
unlimited quota and budget), runs ``infra.planner.plan.run`` on it ``--repeat`` times and prints,
per size: registered resources (components included), custom resources, the median wall time,
resources per second and the garbage-collector pause time of the median run.
``--engine-gc`` leaves the collector running during the run, as the real engine does (the mocks
pause it); with ``--one-shot`` the process is marked one-shot as the Pulumi entry point marks it
(infra/oneshot.py: the program then pauses the collector itself and freezes what it built).
"""
from __future__ import annotations

import argparse
import copy
import gc
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra.config import read_stack_file  # noqa: E402
from infra.planner.plan import run  # noqa: E402

#: (name, gpu, gpus, hours/month, priority, checkpoint minutes, distributed, dataset)
PORTFOLIO = (
    ("pretrain", "H100", 16, 730, 9, None, True, "corpus"),
    ("finetune", "A100-80GB", 8, 360, 7, 30, None, "corpus"),
    ("eval", "L4", 8, 300, 3, 15, None, "eval-sets"),
    ("research", "H200", 16, 200, 4, 30, True, "eval-sets"),
    ("vision", "L40S", 4, 400, 5, 60, None, None),
)


def stack_values(n: int) -> dict:
    """The prod stack's config with ``n`` clusters drawn round-robin from PORTFOLIO."""
    values = copy.deepcopy(read_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml"))
    values["gpulease:budget_monthly_usd"] = 1e12
    for cloud in values["gpulease:clouds"].values():
        cloud["quota_gpus"] = {}
    clusters = []
    for i in range(n):
        name, gpu, gpus, hours, prio, ckpt, dist, ds = PORTFOLIO[i % len(PORTFOLIO)]
        c = {"name": f"{name}-{i:03d}", "gpu": gpu, "gpus": gpus, "hours_per_month": hours,
             "priority": prio, "idle_minutes": 60}
        if ckpt is not None:
            c["checkpoint_minutes"] = ckpt
        if dist is not None:
            c["distributed"] = dist
        if ds is not None:
            c["dataset"] = ds
        clusters.append(c)
    values["gpulease:clusters"] = clusters
    values.pop("gpulease:reaper", None)
    return values


class _GcTimer:
    """Wall time spent inside the garbage collector (``gc.callbacks``)."""

    def __init__(self):
        self.total = 0.0
        self._t0 = 0.0

    def __call__(self, phase, info):
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.total += time.perf_counter() - self._t0


def measure(n: int, repeat: int, preview: bool, engine_gc: bool = False) -> dict:
    values = stack_values(n)
    runs = []
    for _ in range(repeat):
        gc.collect()
        timer = _GcTimer()
        gc.callbacks.append(timer)
        t0 = time.perf_counter()
        prun = run(values, stack="prod", preview=preview, pause_gc=not engine_gc)
        elapsed = time.perf_counter() - t0
        gc.callbacks.remove(timer)
        runs.append((elapsed, timer.total, len(prun.resources), len(prun.custom)))
        del prun
    runs.sort()
    elapsed, gc_s, total, custom = runs[len(runs) // 2]
    return {"clusters": n, "resources": total, "custom": custom,
            "median_s": statistics.median(r[0] for r in runs), "gc_s": gc_s,
            "per_s": total / statistics.median(r[0] for r in runs)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,10,50,100")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--preview", action="store_true",
                    help="run the mocks in preview mode (provider-computed outputs unknown)")
    ap.add_argument("--engine-gc", action="store_true",
                    help="leave the cyclic collector running during the run, as the engine does")
    ap.add_argument("--one-shot", action="store_true",
                    help="mark the process one-shot, as infra/__main__.py does under `pulumi up`")
    args = ap.parse_args(argv)
    if args.one_shot:
        from infra import oneshot

        oneshot.enable()
    print(f"{'clusters':>8} {'resources':>9} {'custom':>7} {'median s':>9} {'gc s':>6} "
          f"{'res/s':>7}")
    for n in (int(s) for s in args.sizes.split(",")):
        m = measure(n, args.repeat, args.preview, args.engine_gc)
        print(f"{m['clusters']:>8} {m['resources']:>9} {m['custom']:>7} {m['median_s']:>9.2f} "
              f"{m['gc_s']:>6.2f} {m['per_s']:>7.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
