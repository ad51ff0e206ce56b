"""`--help` and `catalog list` latency: `gpulease [COMMAND] --help` and `gpulease catalog list`
(797 rows, piped) in a fresh interpreter.

Run: python bench/cli_help.py [--repeat 7] [--importtime] [--root CHECKOUT]
For each help screen (the top level and every command) it starts a new Python process
``--repeat`` times and prints the median and worst wall time, the median CPU time (user +
system of the child), the number of modules imported and which heavy packages (Pulumi, SciPy,
boto3, google-cloud, pydantic, rich, ...) were loaded. The first row is an empty interpreter
(`python -c pass`), the reference measured in the same run. Then `gpulease catalog list`, piped
as a script reads it. Targets (issue 23): `gpulease --help` <= 0.1 s, `catalog list` <= 0.3 s
(every help screen < 0.5 s, issue 15).
``--importtime`` also prints the ten slowest imports of `gpulease --help` (python -X importtime).
``--root`` measures another checkout of gpulease (e.g. an older commit) with this interpreter.
``--write`` records the figures in docs/cli-help-speed.json, which docs/cli.md's "--help speed"
table is generated from (``python -m tools.cli_reference > docs/cli.md``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import benchlib  # noqa: E402

HELP_SCREENS = ([], ["plan"], ["explain"], ["catalog"], ["catalog", "list"],
                ["catalog", "versions"], ["catalog", "refresh"], ["catalog", "import"],
                ["catalog", "quotes"], ["render"], ["reap"], ["recommend"])
#: where --write records the figures (docs/cli.md's "--help speed" table reads it)
RECORD = ROOT / "docs" / "cli-help-speed.json"
HEAVY = ("pulumi", "pulumi_aws", "pulumi_gcp", "scipy", "numpy", "boto3", "botocore", "google",
         "pydantic", "yaml", "jinja2", "rich", "requests", "moto")

#: prints the loaded module count and the heavy packages after the help screen, as JSON on stderr
_PROBE = """\
import json, os, sys
from gpulease.cli import main
try:
    main(sys.argv[1:] + ["--help"])
except SystemExit:
    pass
top = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(os.environ["HEAVY"])))
sys.stderr.write(json.dumps({"modules": len(sys.modules), "heavy": top}))
"""

TARGET_S = 0.5
TARGET_TOP_HELP_S, TARGET_CATALOG_LIST_S = 0.1, 0.3


def run_once(argv: list[str], root: Path = ROOT) -> tuple[float, float, dict]:
    env = {**os.environ, "HEAVY": json.dumps(HEAVY)}
    wall, cpu, p = benchlib.run([sys.executable, "-c", _PROBE, *argv], cwd=root, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(p.stderr[-800:])
    return wall, cpu, json.loads(p.stderr.strip().splitlines()[-1])


def baseline(repeat: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu, _ = benchlib.run([sys.executable, "-c", "pass"])
        walls.append(wall)
        cpus.append(cpu)
    return walls, cpus


def catalog_list(repeat: int, root: Path = ROOT) -> tuple[list[float], list[float], int]:
    """`python -m gpulease.cli catalog list` piped (the one-shot command): wall, CPU, lines."""
    walls, cpus, lines = [], [], 0
    for _ in range(repeat):
        wall, cpu, p = benchlib.run([sys.executable, "-m", "gpulease.cli", "catalog", "list"],
                                    cwd=root, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(p.stderr[-800:])
        walls.append(wall)
        cpus.append(cpu)
        lines = len(p.stdout.splitlines())
    return walls, cpus, lines


def importtime_top(n: int = 10, root: Path = ROOT) -> list[tuple[int, str]]:
    p = subprocess.run([sys.executable, "-X", "importtime", "-c",
                        "from gpulease.cli import main\ntry:\n main(['--help'])\n"
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
                    help="gpulease checkout to measure (its gpulease/ is imported first)")
    ap.add_argument("--write", action="store_true",
                    help=f"record the figures in {RECORD.relative_to(ROOT)} (docs/cli.md's "
                         "table; then regenerate docs/cli.md)")
    args = ap.parse_args(argv)
    record = {"measured": benchlib.machine(), "python": sys.version.split()[0],
              "cpus": os.cpu_count(), "repeat": args.repeat, "commit": _commit(args.root),
              "screens": []}

    benchlib.header(f"bench/cli_help.py: fresh interpreters (median of {args.repeat})")
    print(benchlib.compiled(args.root), flush=True)
    base, base_cpu = baseline(args.repeat)
    print(f"{'command':<34} {'median s':>9} {'worst s':>8} {'CPU s':>6} {'modules':>8}  "
          "heavy packages")
    print(f"{'(python -c pass)':<34} {statistics.median(base):>9.3f} {max(base):>8.3f} "
          f"{statistics.median(base_cpu):>6.3f} {'-':>8}  -")
    record["reference"] = {"command": "python -c pass", "wall_s": statistics.median(base),
                           "cpu_s": statistics.median(base_cpu)}
    worst, top = 0.0, (0.0, 0.0)
    for screen in HELP_SCREENS:
        times, cpus, info = [], [], {}
        for _ in range(args.repeat):
            t, c, info = run_once(screen, args.root)
            times.append(t)
            cpus.append(c)
        worst = max(worst, statistics.median(times))
        if not screen:
            top = (statistics.median(times), statistics.median(cpus))
        label = "gpulease " + " ".join(screen + ["--help"])
        print(f"{label:<34} {statistics.median(times):>9.3f} {max(times):>8.3f} "
              f"{statistics.median(cpus):>6.3f} {info.get('modules', 0):>8}  "
              f"{', '.join(info.get('heavy', [])) or 'none'}")
        record["screens"].append({"command": label, "wall_s": statistics.median(times),
                                  "worst_s": max(times), "cpu_s": statistics.median(cpus),
                                  "modules": info.get("modules", 0),
                                  "heavy": info.get("heavy", [])})
    cl_walls, cl_cpus, lines = catalog_list(args.repeat, args.root)
    cl = (statistics.median(cl_walls), statistics.median(cl_cpus))
    print(f"{'gpulease catalog list (piped)':<34} {cl[0]:>9.3f} {max(cl_walls):>8.3f} "
          f"{cl[1]:>6.3f} {'-':>8}  {lines} lines")
    record["catalog_list"] = {"command": "gpulease catalog list (piped)", "wall_s": cl[0],
                              "worst_s": max(cl_walls), "cpu_s": cl[1], "lines": lines}
    verdict = "under" if worst < TARGET_S else "OVER"
    print(f"slowest help median {worst:.3f} s: {verdict} the {TARGET_S} s target "
          f"(python {sys.version.split()[0]}, {os.cpu_count()} CPUs, repeat {args.repeat}, "
          f"{args.root})")
    ref_cpu = statistics.median(base_cpu)
    print("targets (issue 23), on CPU time (a lone process on a quiet machine: its wall time), "
          "wall time and the multiple of the empty interpreter's CPU beside:")
    print(f"  gpulease --help {top[1]:.3f} s CPU ({top[0]:.3f} s wall, {top[1] / ref_cpu:.1f}x) "
          f"<= {TARGET_TOP_HELP_S} s: {benchlib.verdict(top[1], TARGET_TOP_HELP_S)}")
    print(f"  gpulease catalog list {cl[1]:.3f} s CPU ({cl[0]:.3f} s wall, "
          f"{cl[1] / ref_cpu:.1f}x) <= {TARGET_CATALOG_LIST_S} s: "
          f"{benchlib.verdict(cl[1], TARGET_CATALOG_LIST_S)}")
    if args.importtime:
        print("\nslowest imports of `gpulease --help` (cumulative microseconds):")
        for us, name in importtime_top(root=args.root):
            print(f"  {us:>8}  {name}")
    benchlib.footer()
    if args.write:
        record["end"] = benchlib.load()
        RECORD.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {RECORD.relative_to(ROOT)}: now `python -m tools.cli_reference > "
              "docs/cli.md`")
    return 0


def _commit(root: Path) -> str:
    """The checkout's commit (and "+changes" when its tree differs), for the record."""
    def git(*a):
        return subprocess.run(["git", *a], cwd=root, capture_output=True, text=True).stdout
    head = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no").strip()
                   else "")


if __name__ == "__main__":
    sys.exit(main())
