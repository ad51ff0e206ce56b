"""Offline-plan benchmark: what `gpulease plan` costs, fixed and per resource.

Run: python bench/plan.py [--sizes 10,50,100,200] [--repeat 2] [--target-resources 1260]
     python bench/plan.py --in-process [--sizes ...] [--preview] [--engine-gc [--one-shot]]
     python bench/plan.py --baseline OLD_CHECKOUT [--sizes 50] [--repeat 3]

Default: the real command, ``python -m gpulease.cli plan --config FILE --json`` (a one-shot process:
imports, policy, the program under mocks, costing, guardrails, conformance, output), on stacks of
N clusters on both clouds from a fixed portfolio (the prod stack's clouds, unlimited quota and
budget). Per size: the plan's resources, the median CPU time (user + system of the child) and
wall time; then a least-squares fit of CPU time against resources (fixed cost, ms per
resource, R^2), the plan whose resources are nearest ``--target-resources`` (issue 15's
1,260-resource plan), and references measured in the same run: an empty interpreter and an
interpreter that only imports what a plan needs (the Pulumi SDK, both providers, gpulease).
Targets (issue 23): fixed cost <= 3 s, <= 2 ms per resource, the 1,260-resource plan <= 5 s.

``--baseline OLD_CHECKOUT`` plans dev and the N-cluster stack with this checkout and another
one (its own package: ``gpulease``, or ``infra`` before 0.2), run by run in turn, and prints them
side by side: issue 31's targets are the N=50 stack in <= 1.6x dev's CPU and <= 2 ms per resource
over dev, measured beside the old main.

``--in-process`` runs ``gpulease.planner.plan.run`` in this process instead (no imports, no
output) and prints the garbage collector's share; ``--engine-gc`` leaves the collector running
during the run, as the real engine does (the mocks pause it); with ``--one-shot`` the process is
marked one-shot as the Pulumi entry point marks it (gpulease/gctuning.py: the program then pauses
the collector itself and freezes what it built).
"""
from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import benchlib  # noqa: E402
from gpulease.config import read_stack_file  # noqa: E402
from gpulease.planner.plan import run  # noqa: E402

TARGET_FIXED_S, TARGET_MS_PER_RESOURCE, TARGET_PLAN_S = 3.0, 2.0, 5.0
#: issue 31: the 50-cluster stack in at most this many times dev's plan
RATIO_TARGET = 1.6
#: what every plan imports before it does anything: the reference floor of the fixed cost
IMPORTS = ("import pulumi, pulumi_aws, pulumi_gcp, gpulease.program, gpulease.planner.plan, "
           "gpulease.policy, gpulease.conformance, gpulease.guardrails.evaluate")

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


def in_process(args) -> int:
    if args.one_shot:
        from gpulease import gctuning

        gctuning.enable()
    print(f"{'clusters':>8} {'resources':>9} {'custom':>7} {'median s':>9} {'gc s':>6} "
          f"{'res/s':>7}")
    for n in (int(s) for s in args.sizes.split(",")):
        m = measure(n, args.repeat, args.preview, args.engine_gc)
        print(f"{m['clusters']:>8} {m['resources']:>9} {m['custom']:>7} {m['median_s']:>9.2f} "
              f"{m['gc_s']:>6.2f} {m['per_s']:>7.0f}", flush=True)
    return 0


def write_stack(n: int, directory: Path) -> Path:
    """stacks/Pulumi.bench<n>.yaml under ``directory``: the prod stack with N clusters."""
    path = directory / "stacks" / f"Pulumi.bench{n}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"config": stack_values(n)}, sort_keys=False),
                    encoding="utf-8")
    return path


def cli_plan(path: Path, repeat: int) -> tuple[int, float, float]:
    """(resources, median wall s, median CPU s) of `gpulease plan --config PATH --json`."""
    cmd = [sys.executable, "-m", "gpulease.cli", "plan", "--config", str(path), "--json"]
    walls, cpus, resources = [], [], 0
    for _ in range(repeat):
        wall, cpu, p = benchlib.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"gpulease plan exited {p.returncode}: {p.stderr[-800:]}")
        resources = json.loads(p.stdout)["totals"]["resources"]
        walls.append(wall)
        cpus.append(cpu)
    return resources, statistics.median(walls), statistics.median(cpus)


def fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares y = a + b x: (a, b, R^2)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    ss_tot = sum((y - my) ** 2 for y in ys) or 1.0
    return a, b, 1 - ss_res / ss_tot


def cli(args) -> int:
    benchlib.header(f"bench/plan.py: `gpulease plan` as a command (median of {args.repeat})")
    print(benchlib.compiled(ROOT), flush=True)
    base_wall, base_cpu = benchlib.median_run([sys.executable, "-c", "pass"], args.repeat)
    imp_wall, imp_cpu = benchlib.median_run([sys.executable, "-c", IMPORTS], args.repeat,
                                            cwd=ROOT, capture_output=True, text=True)
    print(f"references: empty interpreter {base_cpu:.3f} s CPU ({base_wall:.3f} s wall); "
          f"importing the SDK, providers and gpulease {imp_cpu:.3f} s CPU ({imp_wall:.3f} s)")
    print(f"{'clusters':>8} {'resources':>9} {'CPU s':>8} {'wall s':>8} {'ms/resource':>12}")
    xs, ys, rows = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            res, wall, cpu = cli_plan(write_stack(n, Path(tmp)), args.repeat)
            xs.append(res)
            ys.append(cpu)
            rows.append((n, res, cpu, wall))
            print(f"{n:>8} {res:>9} {cpu:>8.2f} {wall:>8.2f} {cpu / res * 1e3:>12.2f}",
                  flush=True)
        a, b, r2 = fit(xs, ys)
        print(f"fit over {len(xs)} sizes: CPU = {a:.2f} s + {b * 1e3:.2f} ms x resources "
              f"(R^2 {r2:.3f}); fixed cost {a / imp_cpu:.1f}x the import reference")
        # the plan nearest the target's size (resources grow linearly with clusters)
        per = (xs[-1] - xs[0]) / (rows[-1][0] - rows[0][0])
        n_t = max(1, round(rows[0][0] + (args.target_resources - xs[0]) / per))
        res_t, wall_t, cpu_t = cli_plan(write_stack(n_t, Path(tmp)), args.repeat)
    print(f"{n_t} clusters: {res_t} resources in {cpu_t:.2f} s CPU ({wall_t:.2f} s wall)")
    print("\ntargets (issue 23):")
    print(f"  fixed cost {a:.2f} s <= {TARGET_FIXED_S} s: {benchlib.verdict(a, TARGET_FIXED_S)}")
    print(f"  {b * 1e3:.2f} ms per resource <= {TARGET_MS_PER_RESOURCE} ms: "
          f"{benchlib.verdict(b * 1e3, TARGET_MS_PER_RESOURCE)}")
    print(f"  {res_t}-resource plan {cpu_t:.2f} s CPU <= {TARGET_PLAN_S} s: "
          f"{benchlib.verdict(cpu_t, TARGET_PLAN_S)}")
    benchlib.footer()
    return 0


def checkout_plan(checkout: Path, args: list[str]) -> tuple[int, float]:
    """(resources, CPU s) of one `plan ... --json` run by the checkout at ``checkout``, with its
    own package: ``gpulease`` (0.2 on), or ``infra`` (the 0.1 layout, e.g. main 6863268)."""
    pkg = "gpulease" if (checkout / "gpulease" / "cli").is_dir() else "infra"
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    _, cpu, p = benchlib.run([sys.executable, "-m", f"{pkg}.cli", "plan", *args, "--json"],
                             cwd=checkout, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{checkout}: plan exited {p.returncode}: {p.stderr[-800:]}")
    return json.loads(p.stdout)["totals"]["resources"], cpu


def side_by_side(args) -> int:
    """This checkout and ``--baseline`` in one run, interleaved run by run: dev's plan and the
    N-cluster stack's, CPU time (median), the ratio to dev and the ms per resource over dev
    (issue 31: <= RATIO_TARGET x dev and <= TARGET_MS_PER_RESOURCE ms per resource)."""
    benchlib.header(f"bench/plan.py --baseline: {args.baseline} beside {ROOT} "
                    f"(median of {args.repeat}, CPU s of the child)")
    sides = {"this": ROOT, "baseline": Path(args.baseline).resolve()}
    for where in sides.values():
        print(benchlib.compiled(where), flush=True)
    n = int(args.sizes.split(",")[-1])
    runs: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        big = write_stack(n, Path(tmp))
        for _ in range(args.repeat):
            for side, where in sides.items():
                for what, argv in (("dev", ["--stack", "dev"]), ("big", ["--config", str(big)])):
                    runs.setdefault((side, what), []).append(checkout_plan(where, argv))
    print(f"{'checkout':>9} {'dev res':>7} {'dev s':>6} {f'{n} clusters res':>17} {'s':>6} "
          f"{'x dev':>6} {'ms/extra resource':>18}")
    for side in sides:
        dev_n, big_n = runs[(side, "dev")][0][0], runs[(side, "big")][0][0]
        dev = statistics.median(c for _, c in runs[(side, "dev")])
        cpu = statistics.median(c for _, c in runs[(side, "big")])
        ms = (cpu - dev) / max(big_n - dev_n, 1) * 1e3
        print(f"{side:>9} {dev_n:>7} {dev:>6.2f} {big_n:>17} {cpu:>6.2f} {cpu / dev:>6.2f} "
              f"{ms:>18.2f}  {benchlib.verdict(cpu / dev, RATIO_TARGET)} (x dev), "
              f"{benchlib.verdict(ms, TARGET_MS_PER_RESOURCE)} (ms)")
    benchlib.footer()
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=None,
                    help="cluster counts (default 10,50,100,200; in-process 1,10,50,100)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="runs per size (default 2; in-process 3)")
    ap.add_argument("--target-resources", type=int, default=1260)
    ap.add_argument("--in-process", action="store_true",
                    help="run the program in this process (no imports, no output)")
    ap.add_argument("--preview", action="store_true",
                    help="in-process: the mocks in preview mode (provider-computed outputs "
                         "unknown)")
    ap.add_argument("--engine-gc", action="store_true",
                    help="in-process: leave the cyclic collector running during the run, as "
                         "the engine does")
    ap.add_argument("--one-shot", action="store_true",
                    help="in-process: mark the process one-shot, as infra/__main__.py does "
                         "under `pulumi up`")
    ap.add_argument("--baseline", metavar="CHECKOUT",
                    help="also plan with another checkout (e.g. an old main), interleaved, and "
                         "print dev's plan and the largest --sizes stack side by side "
                         "(default size 50)")
    args = ap.parse_args(argv)
    if args.baseline:
        args.sizes = args.sizes or "50"
        args.repeat = args.repeat or 3
        return side_by_side(args)
    if args.in_process:
        args.sizes = args.sizes or "1,10,50,100"
        args.repeat = args.repeat or 3
        return in_process(args)
    args.sizes = args.sizes or "10,50,100,200"
    args.repeat = args.repeat or 2
    return cli(args)


if __name__ == "__main__":
    raise SystemExit(main())
