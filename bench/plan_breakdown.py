"""Where `gpulease plan`'s CPU time goes: dev beside the N-cluster stack, step by step.

Run: python bench/plan_breakdown.py [--clusters 50] [--repeat 3]

Issue 31's plan-speed targets (bench/plan.py --baseline) compare the N-cluster stack with dev;
this script says what the difference is made of, measured in one run:

1. ``gpulease plan --json`` of dev and of bench/plan.py's N-cluster stack, each in a fresh
   process as the command runs: CPU seconds per step the command reports (reading, policy,
   the program under mocks, costing, the preview run, guardrails, conformance, output); then,
   in another fresh process, the CPU of importing the Pulumi SDK and the provider modules that
   plan loaded (``pulumi_gcp.compute``, ``pulumi_aws.ec2``, ...: a provider's classes are
   built when its module is first used, inside the program's step).
2. In this process, the N-cluster program once more after a first run (imports done): its CPU
   time, and cProfile's own time by package (gpulease's modules, the Pulumi SDK, asyncio,
   protobuf, the providers' classes, ...).
3. The SDK alone: the same custom resources (type, name, inputs) registered under the SDK's own
   ``MockMonitor`` with mocks that only echo the inputs, no gpulease code: as untyped
   ``pulumi.CustomResource`` objects, and with the providers' classes (inputs passed as keyword
   arguments; a class creates an ``Output`` for each of its output properties). What the SDK
   and the providers cost per resource whatever gpulease does.
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import benchlib  # noqa: E402

#: the provider packages whose modules a plan loads (their import cost is measured apart)
PROVIDERS = ("pulumi_gcp", "pulumi_aws")


def child(argv: list[str]) -> int:
    """In the child: run `gpulease plan ARGV --json`; print {steps: [[step, CPU s]], total CPU s,
    resources, modules: the provider modules loaded}."""
    t0 = time.process_time()
    marks: list[tuple[str, float]] = [("start (interpreter, CLI imports)", t0)]
    from gpulease.cli import ui

    class _Steps:
        def step(self, message: str) -> None:
            marks.append((message, time.process_time()))

        def note(self, message: str) -> None:
            pass

    @contextlib.contextmanager
    def steps(*_a, **_k):
        yield _Steps()

    ui.steps = steps
    from gpulease import cli, gctuning

    gctuning.enable()      # a one-shot process, as `gpulease` marks itself (cli.console)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main(["plan", *argv, "--json"])
    marks.append(("writing the JSON document", time.process_time()))
    resources = json.loads(out.getvalue())["totals"]["resources"]
    marks.append(("end", time.process_time()))
    rows = [(a[0], b[1] - a[1]) for a, b in zip(marks, marks[1:])]
    providers = sorted(m for m in sys.modules if m.split(".")[0] in PROVIDERS)
    sys.stdout.write(json.dumps({"rc": rc, "resources": resources, "steps": rows,
                                 "total": time.process_time(), "modules": providers}) + "\n")
    return 0


def import_child(modules: list[str]) -> int:
    """In the child: CPU s of importing ``modules`` (after the SDK), by provider package."""
    import importlib

    c0 = time.process_time()
    import pulumi  # noqa: F401

    cpu = {"pulumi (the SDK)": time.process_time() - c0}
    for pkg in PROVIDERS:
        c0 = time.process_time()
        for m in modules:
            if m.split(".")[0] == pkg:
                importlib.import_module(m)
        cpu[pkg] = time.process_time() - c0
    sys.stdout.write(json.dumps(cpu) + "\n")
    return 0


def _child(flag: str, argv: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, __file__, flag, *argv], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    if p.returncode != 0 or not p.stdout.strip():
        sys.exit(f"{flag} {' '.join(argv[:4])} failed: {p.stderr[-800:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def plan_child(argv: list[str]) -> dict:
    """One `plan` in a fresh process: its steps' CPU, then (another fresh process) the CPU of
    importing the SDK and the provider modules that plan loaded."""
    doc = _child("--child", argv)
    doc["imports"] = _child("--imports", doc["modules"])
    return doc


def _median_doc(docs: list[dict]) -> dict:
    """Per step and per package, the median over the runs (steps matched by position)."""
    out = dict(docs[0])
    out["steps"] = [(name, statistics.median(d["steps"][i][1] for d in docs))
                    for i, (name, _) in enumerate(docs[0]["steps"])]
    out["total"] = statistics.median(d["total"] for d in docs)
    out["imports"] = {k: statistics.median(d["imports"].get(k, 0.0) for d in docs)
                      for k in docs[0]["imports"]}
    return out


def _label(step: str) -> str:
    step = step.split(" (")[0] if step.startswith("running the Pulumi program") else step
    return step[:58]


def print_steps(dev: dict, big: dict, n: int) -> None:
    print(f"\n1. `gpulease plan --json`, CPU s per step (a fresh process each; median "
          f"of the runs): dev {dev['resources']} resources, {n} clusters {big['resources']}")
    print(f"{'step':<60} {'dev':>6} {f'{n} cl.':>7} {'extra':>6}")
    dev_steps = {_label(s): c for s, c in dev["steps"]}
    for s, c in big["steps"]:
        d = dev_steps.get(_label(s), 0.0)
        print(f"{_label(s):<60} {d:>6.3f} {c:>7.3f} {c - d:>6.3f}")
    extra = big["total"] - dev["total"]
    per = extra / max(big["resources"] - dev["resources"], 1) * 1e3
    print(f"{'total':<60} {dev['total']:>6.3f} {big['total']:>7.3f} {extra:>6.3f}  "
          f"({per:.2f} ms per extra resource, {big['total'] / dev['total']:.2f}x dev)")
    print(f"\n   importing the SDK and the provider modules each plan loads (CPU s, a fresh "
          f"process; part of the steps above):")
    print(f"   {'package':<12} {'dev':>6} {f'{n} cl.':>7} {'extra':>6}")
    for k in sorted(big["imports"], key=lambda k: -big["imports"][k]):
        d = dev["imports"].get(k, 0.0)
        print(f"   {k:<12} {d:>6.3f} {big['imports'][k]:>7.3f} {big['imports'][k] - d:>6.3f}")


def warm_profile(n: int):
    import plan as bench_plan
    from gpulease.planner.plan import run

    values = bench_plan.stack_values(n)
    run(values, stack="prod")                      # imports, first-use caches
    cpu = []
    for _ in range(3):
        c0 = time.process_time()
        prun = run(values, stack="prod")
        cpu.append(time.process_time() - c0)
    count = len(prun.resources)
    prof = cProfile.Profile()
    prof.enable()
    run(values, stack="prod")
    prof.disable()
    own: dict[str, float] = defaultdict(float)
    for (path, _line, func), (_cc, _nc, tt, _ct, _callers) in pstats.Stats(prof).stats.items():
        own[_profile_package(path, func)] += tt
    total = sum(own.values())
    print(f"\n2. the {n}-cluster program under mocks, after a first run (imports done): "
          f"{statistics.median(cpu):.3f} s CPU for {count} resources "
          f"({statistics.median(cpu) / count * 1e3:.2f} ms per resource; median of 3).")
    print("   cProfile's own time by package (the mock monitor's thread not included):")
    for k, v in sorted(own.items(), key=lambda kv: -kv[1]):
        if v / total >= 0.005:
            print(f"   {v / total:>6.1%}  {k}")
    return prun


def _profile_package(path: str, func: str) -> str:
    if path == "~":
        return "builtins (C functions: isinstance, dict, set, protobuf's upb, ...)"
    if "site-packages/" in path:
        return "site-packages: " + path.split("site-packages/")[1].split("/")[0]
    if f"{ROOT}/gpulease" in path or f"{ROOT}/infra" in path:
        return "gpulease (this checkout)"
    if "/asyncio/" in path:
        return "stdlib: asyncio"
    return "stdlib: " + Path(path).name


def _typed(declared: list) -> tuple[list, int]:
    """The provider class of each (type, name, inputs) with its inputs as keyword arguments
    (camelCase -> snake_case, nested objects as dicts, which the classes accept); resources
    whose class or arguments cannot be matched this way are left out (counted)."""
    import importlib
    import inspect
    import re

    def snake(key: str) -> str:
        return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()

    def args(value):
        if isinstance(value, dict):
            return {snake(k): args(v) for k, v in value.items()}
        if isinstance(value, list):
            return [args(v) for v in value]
        return value

    out, left_out = [], 0
    for typ, name, inputs in declared:
        try:
            pkg, mod, cls_name = typ.split(":")
            path = mod.rpartition("/")[0].replace("/", ".")
            path = {"lambda": "lambda_"}.get(path, path)
            cls = getattr(importlib.import_module(f"pulumi_{pkg}.{path}"), cls_name)
            params = set(inspect.signature(cls._internal_init).parameters)
        except (ValueError, ImportError, AttributeError):
            left_out += 1
            continue
        kwargs = {snake(k): args(v) for k, v in inputs.items()
                  if snake(k) in params and v not in ("[unknown]", "[secret]")}
        out.append((cls, name, kwargs))
    return out, left_out


def sdk_floor(prun) -> None:
    import pulumi
    from pulumi.runtime import mocks
    from pulumi.runtime import resource as runtime_resource
    from pulumi.runtime.proto import source_pb2
    from pulumi.runtime.sync_await import _sync_await

    declared = [(r.type, r.name, dict(r.inputs)) for r in prun.resources
                if r.custom and not r.type.startswith("pulumi")]
    typed, left_out = _typed(declared)

    class Echo(mocks.Mocks):
        def new_resource(self, args):
            return f"{args.name}-id", dict(args.inputs)

        def call(self, args):
            return {}

    def once(make) -> tuple[float, int]:
        pulumi.runtime.set_mocks(Echo(), project="gpulease", stack="floor", preview=False)
        saved = runtime_resource._get_stack_trace
        runtime_resource._get_stack_trace = source_pb2.StackTrace   # as gpulease's mocks do
        gc.disable()
        c0 = time.process_time()
        try:
            made = make()
            _sync_await(pulumi.runtime.stack.wait_for_rpcs())
            return time.process_time() - c0, made
        finally:
            gc.enable()
            runtime_resource._get_stack_trace = saved
            pulumi.runtime.settings.reset_options()

    def untyped() -> int:
        for typ, name, inputs in declared:
            pulumi.CustomResource(typ, name, inputs)
        return len(declared)

    def with_classes() -> int:
        made = 0
        for cls, name, kwargs in typed:
            try:
                cls(name, **kwargs)
                made += 1
            except (TypeError, ValueError):    # an argument the conversion got wrong
                pass
        return made

    print("\n3. the Pulumi SDK alone, the same custom resources (type, name, inputs) under the "
          "SDK's MockMonitor with echo mocks, no gpulease code (median of 3 after a first run):")
    for label, make in (("untyped pulumi.CustomResource", untyped),
                        ("the providers' classes", with_classes)):
        once(make)
        runs = sorted(once(make) for _ in range(3))
        cpu, made = runs[1]
        print(f"   {label:<30} {made:>4} resources {cpu:.3f} s CPU, "
              f"{cpu / made * 1e3:.2f} ms per resource")
    if left_out:
        print(f"   ({left_out} resources have no provider class matched by name and are left "
              "out of the second line)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clusters", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3, help="fresh-process plans per stack")
    ap.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    ap.add_argument("--imports", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        return child(args.child)
    if args.imports is not None:
        return import_child(args.imports)
    import plan as bench_plan

    benchlib.header(f"bench/plan_breakdown.py: dev beside {args.clusters} clusters")
    print(benchlib.compiled(ROOT), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        big_path = bench_plan.write_stack(args.clusters, Path(tmp))
        devs, bigs = [], []
        for _ in range(args.repeat):   # interleaved, as bench/plan.py --baseline
            devs.append(plan_child(["--stack", "dev"]))
            bigs.append(plan_child(["--config", str(big_path)]))
    print_steps(_median_doc(devs), _median_doc(bigs), args.clusters)
    from gpulease import gctuning

    gctuning.enable()      # one-shot, as the command: each run's objects frozen, not collected
    prun = warm_profile(args.clusters)
    sdk_floor(prun)
    benchlib.footer()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
