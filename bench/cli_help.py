"""`--help` latency benchmark: wall time of `gpulease [COMMAND] --help` in a fresh interpreter.

Run: python bench/cli_help.py [--repeat 7] [--importtime] [--root CHECKOUT]
For each help screen (the top level and every command) it starts a new Python process
``--repeat`` times and prints the median and worst wall time, the number of modules imported and
which heavy packages (Pulumi, SciPy, boto3, google-cloud, pydantic, rich, ...) were loaded. The
first row is an empty interpreter (`python -c pass`) for scale. The target is < 0.5 s (issue 15).
``--importtime`` also prints the ten slowest imports of `gpulease --help` (python -X importtime).
``--root`` measures another checkout of gpulease (e.g. an older commit) with this interpreter.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HELP_SCREENS = ([], ["plan"], ["explain"], ["catalog"], ["catalog", "list"],
                ["catalog", "refresh"], ["catalog", "import"], ["render"], ["reap"])
HEAVY = ("pulumi", "pulumi_aws", "pulumi_gcp", "scipy", "numpy", "boto3", "botocore", "google",
         "pydantic", "yaml", "jinja2", "rich", "requests", "moto")

#: prints the loaded module count and the heavy packages after the help screen, as JSON on stderr
_PROBE = """\
import json, os, sys
from infra.cli import main
try:
    main(sys.argv[1:] + ["--help"])
except SystemExit:
    pass
top = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(os.environ["HEAVY"])))
sys.stderr.write(json.dumps({"modules": len(sys.modules), "heavy": top}))
"""

TARGET_S = 0.5


def run_once(argv: list[str], root: Path = ROOT) -> tuple[float, dict]:
    env = {**os.environ, "HEAVY": json.dumps(HEAVY)}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", _PROBE, *argv], cwd=root, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t0
    return elapsed, json.loads(p.stderr.strip().splitlines()[-1])


def baseline(repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - t0)
    return times


def importtime_top(n: int = 10, root: Path = ROOT) -> list[tuple[int, str]]:
    p = subprocess.run([sys.executable, "-X", "importtime", "-c",
                        "from infra.cli import main\ntry:\n main(['--help'])\n"
                        "except SystemExit:\n pass"], cwd=root, capture_output=True, text=True,
                       check=True)
    rows = []
    for line in p.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "cumulative" not in line:
            _, cum, name = [x.strip() for x in line.split(":", 1)[1].split("|")]
            rows.append((int(cum), name))
    return sorted(rows, reverse=True)[:n]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--importtime", action="store_true")
    ap.add_argument("--root", type=Path, default=ROOT,
                    help="gpulease checkout to measure (its infra/ is imported first)")
    args = ap.parse_args(argv)

    base = baseline(args.repeat)
    print(f"{'help screen':<34} {'median s':>9} {'worst s':>8} {'modules':>8}  heavy packages")
    print(f"{'(python -c pass)':<34} {statistics.median(base):>9.3f} {max(base):>8.3f} "
          f"{'-':>8}  -")
    worst = 0.0
    for screen in HELP_SCREENS:
        times, info = [], {}
        for _ in range(args.repeat):
            t, info = run_once(screen, args.root)
            times.append(t)
        worst = max(worst, statistics.median(times))
        label = "gpulease " + " ".join(screen + ["--help"])
        print(f"{label:<34} {statistics.median(times):>9.3f} {max(times):>8.3f} "
              f"{info.get('modules', 0):>8}  {', '.join(info.get('heavy', [])) or 'none'}")
    verdict = "under" if worst < TARGET_S else "OVER"
    print(f"slowest median {worst:.3f} s: {verdict} the {TARGET_S} s target "
          f"(python {sys.version.split()[0]}, {os.cpu_count()} CPUs, repeat {args.repeat}, "
          f"{args.root})")
    if args.importtime:
        print("\nslowest imports of `gpulease --help` (cumulative microseconds):")
        for us, name in importtime_top(root=args.root):
            print(f"  {us:>8}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
