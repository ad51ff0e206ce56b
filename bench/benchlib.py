"""What every bench script prints around its figures: the machine, the date, the load, CPU time.

The build machine has 2 cores shared with other work, so wall time is noisy; the scripts report
CPU time (user + system, of this process or of the child processes they start) next to wall
time, the load average when they start and end, and for each figure a reference measured in
the same run, so that a figure can be re-checked as a ratio on a busy machine.
"""
from __future__ import annotations

import datetime as dt
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from typing import Callable, Sequence


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def machine() -> str:
    """One line: date (UTC), CPUs, Python, platform, load average."""
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"{now} · {os.cpu_count()} CPUs · Python {platform.python_version()} · "
            f"{platform.system()} {platform.machine()} · {load()}")


def header(title: str) -> None:
    print(f"{title}\n{machine()}", flush=True)


def compiled(root) -> str:
    """Compile gpulease's modules under ``root`` to bytecode (``__pycache__``, ignored by git),
    as an installed package has them (pip compiles what it installs), so that a command's
    time does not include compiling gpulease from source: with PYTHONDONTWRITEBYTECODE set, as
    on this build machine, a checkout never gets them and every command recompiles what it
    imports (~0.04 s of `catalog list`). Returns a line for the output."""
    import compileall
    from pathlib import Path

    # the package is gpulease from 0.2 on, infra before (an old checkout measured beside)
    pkg = "gpulease" if (Path(root) / "gpulease").is_dir() else "infra"
    ok = compileall.compile_dir(str(Path(root) / pkg), quiet=1)
    return (f"bytecode: {pkg}'s modules compiled under {root} (as installed)" if ok else
            f"bytecode: compiling {root}/{pkg} failed: imports compile from source")


def footer() -> None:
    print(f"\nend: {load()}", flush=True)


def cpu() -> float:
    """CPU seconds (user + system) of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn: Callable, *args, **kw):
    """(result, wall s, CPU s) of one call."""
    c0, t0 = cpu(), time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0, cpu() - c0


def run(cmd: Sequence[str], **kw) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall s, CPU s of the child and its children, the completed process) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(list(cmd), **kw)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), p


def median_run(cmd: Sequence[str], repeat: int, **kw) -> tuple[float, float]:
    """Median wall and median CPU seconds of ``repeat`` runs of a command."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, c, p = run(cmd, **kw)
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)} exited {p.returncode}: {(p.stderr or '')[-500:]}")
        walls.append(wall)
        cpus.append(c)
    return statistics.median(walls), statistics.median(cpus)


def verdict(value: float, target: float) -> str:
    """"met" when ``value`` <= ``target`` (lower is better), else "OVER"."""
    return "met" if value <= target else "OVER"
