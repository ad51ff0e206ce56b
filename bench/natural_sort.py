"""Natural sort: gpulease's own key (``gpulease.cli.ui.natural_key``) against natsort, the maintained
library, on the strings gpulease sorts, and what natsort would cost to import.

Run: PYTHONPATH=DIR python bench/natural_sort.py [--random 20000] [--repeat 7]
natsort is not a gpulease dependency: put an unpacked natsort wheel on PYTHONPATH
(``pip download natsort --no-deps -d DIR && unzip -o -d DIR DIR/natsort-*.whl``).

It sorts every instance type, region, zone, GPU model and accelerator type of the default
catalog (and ``--random`` random strings of letters, digits, dots, dashes and spaces) with
gpulease's key and with natsort's keys (``natsort_keygen`` with ``ns.DEFAULT``,
``ns.IGNORECASE``, and ``ns.IGNORECASE`` plus gpulease's one domain rule, EC2's bare
``.xlarge`` read as ``.1xlarge``) and prints how many positions differ. Then the CPU time of a
fresh interpreter importing natsort, against an empty interpreter (``python -c pass``, the
reference measured in the same run) and one importing gpulease's table module
(``gpulease.cli.ui``), median of ``--repeat`` runs each.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import benchlib  # noqa: E402


def strings() -> list[str]:
    from gpulease.catalog import load_catalog

    out: set = set()
    for o in load_catalog().offerings:
        out |= {o.instance_type, o.region, o.cloud, str(o.gpu), str(o.accelerator_type)}
        out |= set(o.zones or ())
    return sorted(out)


def differing(values: list[str], key_a, key_b) -> tuple[int, list]:
    a, b = sorted(values, key=key_a), sorted(values, key=key_b)
    diff = [(x, y) for x, y in zip(a, b) if x != y]
    return len(diff), diff[:2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--random", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    try:
        import natsort
        from natsort import natsort_keygen, ns
    except ImportError:
        print("natsort is not importable: see the docstring (PYTHONPATH=DIR)", file=sys.stderr)
        return 2
    from gpulease.cli.ui import _XLARGE, natural_key

    benchlib.header(f"natural sort: gpulease's key vs natsort {natsort.__version__}")
    rng = random.Random(1)
    alphabet = "ab.-Xx19 0"
    randoms = sorted({"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
                      for _ in range(args.random)})
    sets = {"catalog strings": strings(), "random strings": randoms}
    keys = {"natsort ns.DEFAULT": natsort_keygen(alg=ns.DEFAULT),
            "natsort ns.IGNORECASE": natsort_keygen(alg=ns.IGNORECASE),
            "natsort ns.IGNORECASE + .xlarge key": natsort_keygen(
                key=lambda s: _XLARGE.sub(".1xlarge", s), alg=ns.IGNORECASE)}
    for label, values in sets.items():
        print(f"\n{label} ({len(values):,}): positions where the order differs from gpulease's")
        for name, key in keys.items():
            n, first = differing(values, natural_key, key)
            print(f"  {name:<38} {n:>6,}" + (f"   first: {first}" if n else ""))
    import compileall

    # bytecode for both, as pip leaves an installed package (a checkout on this machine has
    # none: PYTHONDONTWRITEBYTECODE)
    print("\n" + benchlib.compiled(ROOT))
    compileall.compile_dir(str(Path(natsort.__file__).parent), quiet=1)
    print(f"import CPU time, median of {args.repeat} fresh interpreters:")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}
    rows = [("python -c pass (reference)", "pass"), ("import natsort", "import natsort"),
            ("import gpulease.cli.ui", "import gpulease.cli.ui")]
    base = None
    for label, code in rows:
        wall, cpu = benchlib.median_run([sys.executable, "-c", code], args.repeat, env=env,
                                        capture_output=True, text=True)
        base = cpu if base is None else base
        extra = "" if cpu is base else f"   (+{(cpu - base) * 1000:.1f} ms over the reference)"
        print(f"  {label:<30} CPU {cpu * 1000:6.1f} ms   wall {wall * 1000:6.1f} ms{extra}")
    benchlib.footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
