"""Spend benchmark: what `gpulease spend` costs to read and classify a large bill (issue 33 item 7).

Run: python bench/spend.py [--rows 1000000,10000000] [--keep DIR]
     python bench/spend.py --rows 2000            (a quick check)

Per size, a synthetic FOCUS 1.0 month is written as one Parquet file (DuckDB's COPY, into a
temporary folder deleted at the end; ``--keep DIR`` writes there instead and leaves it): clusters
of nodes billed in fractions of a node-hour (as tests/billgen.py's ``split`` bills them), tagged
with gpulease's cost tags as a JSON ``Tags`` object, beside untagged lines, commitment
purchases and credits, so that every branch of the FOCUS mapping runs. Then, each in a fresh
child process (so each has its own peak resident memory, ``ru_maxrss``):

- **spend**: what `gpulease spend` runs on the bill - ``sources.open_source`` (recognise the
  format), ``classify.read_groups`` (the normalised view grouped in DuckDB, plus the source's
  own total) and ``classify.classify`` (every group in one class, the classes checked against
  the total) - against a plan index of the synthetic clusters. Not timed: the plan itself (a
  separate figure, bench/plan.py) and the reconciliation with it, which reads only the groups
  (tens, whatever the rows).
- **reference**: the engine alone, one grouped sum over the same file:
  ``SELECT ChargeCategory, ResourceId, sum(BilledCost) ... GROUP BY ALL``.

Printed per size and measurement: wall and CPU seconds of the measured part (imports and the
process start excluded), the peak memory of the child, spend's ratio to the reference; then the
targets: spend within 3x the reference, under 2 GiB, and linear in rows (the largest size's
time over the smallest's, against the rows' ratio, within a factor of 1.5).
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import benchlib  # noqa: E402

#: issue 33 item 7's targets
RATIO_TARGET = 3.0
MEMORY_TARGET_GIB = 2.0
#: growth counts as linear when (time ratio) / (rows ratio) is within [1/x, x]
LINEAR_SLACK = 1.5

CLUSTERS = ("pretrain", "finetune", "eval", "research", "vision")
NODES_PER_CLUSTER = 16
ENVIRONMENT = "bench"
MONTH = "2026-10"


def generate(path: Path, rows: int) -> None:
    """A FOCUS month of ``rows`` lines as Parquet at ``path``.

    Line i: 97 % node usage of cluster i mod 5 (one of 16 nodes, a tenth of a node-hour, spot,
    on-demand or committed), 1 % untagged usage (NAT gateways), 1 % commitment purchases, 1 %
    credits. Prices are placeholders: the bench times the reading, not the money."""
    import duckdb

    clusters = "[" + ", ".join(f"'{c}'" for c in CLUSTERS) + "]"
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"""
COPY (
WITH g AS (
  SELECT i, i % 100 AS kind, {clusters}[1 + i % {len(CLUSTERS)}] AS cluster,
         (i // {len(CLUSTERS)}) % {NODES_PER_CLUSTER} AS node, i % 3 AS model,
         TIMESTAMPTZ '{MONTH}-01 00:00:00+00' + to_hours((i * 744) // {rows}) AS t0
  FROM range({rows}) r(i))
SELECT i AS Id,
  CASE WHEN kind = 98 THEN 'Purchase' WHEN kind = 99 THEN 'Credit' ELSE 'Usage' END
    AS ChargeCategory,
  CAST(NULL AS VARCHAR) AS ChargeClass,
  t0 AS ChargePeriodStart, t0 + INTERVAL 1 HOUR AS ChargePeriodEnd,
  CAST(CASE WHEN kind = 99 THEN -0.5 WHEN kind < 97 AND model = 2 THEN 0
            ELSE 0.1 + (i % 7) * 0.01 END AS DECIMAL(18, 6)) AS BilledCost,
  CAST(CASE WHEN kind = 99 THEN -0.5 ELSE 0.1 + (i % 7) * 0.01 END AS DECIMAL(18, 6))
    AS EffectiveCost,
  CASE WHEN kind = 97 THEN 'nat-' || (i % 4) ELSE cluster || '-node-' || node END AS ResourceId,
  CASE WHEN kind = 97 THEN 'nat-' || (i % 4) ELSE cluster || '-node-' || node END
    AS ResourceName,
  CASE WHEN kind < 97 AND model = 2 OR kind = 98 THEN 'commitment-' || cluster END
    AS CommitmentDiscountId,
  CASE WHEN kind >= 97 THEN NULL WHEN model = 0 THEN 'Dynamic' WHEN model = 1 THEN 'Standard'
       ELSE 'Committed' END AS PricingCategory,
  CASE WHEN kind < 97 THEN 'Compute' ELSE 'Networking' END AS ServiceCategory,
  CASE WHEN kind < 97 THEN 0.1 END AS ConsumedQuantity,
  CASE WHEN kind < 97 THEN 'Hours' END AS ConsumedUnit,
  CASE WHEN kind <> 97 THEN json_object('gpulease-cluster', cluster,
                                        'gpulease-environment', '{ENVIRONMENT}')::VARCHAR
  END AS Tags
FROM g
) TO '{path}' (FORMAT parquet)""")
    con.close()


def _spend(path: str) -> dict:
    import duckdb

    from gpulease.spend import classify as C
    from gpulease.spend import sources as S

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    src = S.open_source(con, path)
    groups, total, rows = C.read_groups(con, src, month=MONTH)
    index = C.PlanIndex(environment=ENVIRONMENT, clusters=CLUSTERS, resources={})
    bill = C.classify(groups, index, source_total=total, source_rows=rows, kind=src.kind)
    if not bill.conserved:
        raise SystemExit(f"spend: the classes do not add up to the bill's total ({path})")
    return {"rows": rows, "groups": len(groups),
            "matched_rows": bill.rows[C.MATCHED], "unmatched_rows": bill.rows[C.UNMATCHED]}


def _reference(path: str) -> dict:
    import duckdb

    con = duckdb.connect()
    out = con.execute("SELECT ChargeCategory, ResourceId, sum(BilledCost) "
                      f"FROM read_parquet('{path}') GROUP BY ALL").fetchall()
    return {"groups": len(out)}


MEASURES = {"spend": _spend, "reference": _reference}


def child(measure: str, path: str) -> None:
    """Run one measurement in this (fresh) process; print its figures as one JSON line."""
    fn = MEASURES[measure]
    import duckdb  # noqa: F401  (the import is not part of the figure)
    import gpulease.spend.classify  # noqa: F401
    import sqlglot  # noqa: F401  (imported by gpulease.spend.query on first use)

    out, wall, cpu = benchlib.timed(fn, path)
    # ru_maxrss: kilobytes on Linux
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"wall": wall, "cpu": cpu, "peak": peak, **out}))


def measure(measure: str, path: Path) -> dict:
    p = subprocess.run([sys.executable, __file__, "--child", measure, str(path)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{measure} on {path} exited {p.returncode}: {p.stderr[-800:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _gib(b: float) -> str:
    return f"{b / 2**30:.2f} GiB"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1000000,10000000",
                    help="comma-separated bill sizes in rows (default 1000000,10000000)")
    ap.add_argument("--keep", metavar="DIR", help="write the bills into DIR and leave them")
    ap.add_argument("--child", nargs=2, metavar=("MEASURE", "FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    try:
        sizes = [int(s.replace("_", "")) for s in args.rows.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--rows {args.rows!r}: give whole numbers separated by commas, "
                 "e.g. --rows 1000000,10000000")
    if not sizes or min(sizes) < 100:
        ap.error(f"--rows {args.rows!r}: every size must be at least 100 rows")
    benchlib.header("gpulease spend: reading and classifying a FOCUS month (bench/spend.py)")
    print("spend = sources.open_source + classify.read_groups + classify.classify (no plan, "
          "no reconcile); reference = one DuckDB grouped sum over the same file; each in a "
          "fresh process, imports excluded\n", flush=True)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpulease-spend-"))
    work.mkdir(parents=True, exist_ok=True)
    results = {}
    try:
        for n in sizes:
            path = work / f"focus-{n}.parquet"
            t0 = time.perf_counter()
            generate(path, n)
            size = path.stat().st_size
            print(f"{n:,} rows: generated in {time.perf_counter() - t0:.1f} s "
                  f"({size / 2**20:.1f} MiB Parquet)", flush=True)
            ref = measure("reference", path)
            sp = measure("spend", path)
            if sp["rows"] != n:
                sys.exit(f"spend read {sp['rows']} rows of {n}")
            results[n] = (sp, ref)
            print(f"  reference  wall {ref['wall']:7.2f} s  CPU {ref['cpu']:7.2f} s  "
                  f"peak {_gib(ref['peak'])}", flush=True)
            print(f"  spend      wall {sp['wall']:7.2f} s  CPU {sp['cpu']:7.2f} s  "
                  f"peak {_gib(sp['peak'])}  ({sp['groups']} groups; "
                  f"{sp['matched_rows']:,} matched, {sp['unmatched_rows']:,} unmatched rows)",
                  flush=True)
            print(f"  ratio      wall {sp['wall'] / ref['wall']:.2f}x  "
                  f"CPU {sp['cpu'] / ref['cpu']:.2f}x", flush=True)
            if not args.keep:
                path.unlink()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("\ntargets (issue 33 item 7):")
    for n, (sp, ref) in results.items():
        ratio = sp["cpu"] / ref["cpu"]
        print(f"  {n:,} rows: spend CPU / reference CPU {ratio:.2f}x <= {RATIO_TARGET:g}x: "
              f"{benchlib.verdict(ratio, RATIO_TARGET)}; peak {_gib(sp['peak'])} <= "
              f"{MEMORY_TARGET_GIB:g} GiB: "
              f"{benchlib.verdict(sp['peak'] / 2**30, MEMORY_TARGET_GIB)}")
    if len(results) >= 2:
        lo, hi = min(results), max(results)
        growth = results[hi][0]["cpu"] / results[lo][0]["cpu"]
        expected = hi / lo
        off = max(growth / expected, expected / growth)
        print(f"  linear: spend CPU {hi:,} / {lo:,} rows = {growth:.1f} (rows x{expected:g}; "
              f"within x{LINEAR_SLACK:g}): {benchlib.verdict(off, LINEAR_SLACK)}")
    else:
        print("  linear: needs two sizes (--rows A,B)")
    benchlib.footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
