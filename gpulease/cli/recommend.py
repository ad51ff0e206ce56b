"""`gpulease recommend`: each cluster's demand profile sized from the GPU use it reported."""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import time
from typing import Callable, Optional

from gpulease.cli import COMMANDS, ui
from gpulease.cli.common import (add_output_args, add_stack_args, cloud_cli, cloud_needs,
                                 load_stack, print_json)
from gpulease.errors import ConfigError, Finding, InputError
from gpulease.recommend import profile as pf

DESCRIPTION = """\
Read the GPU utilization each cluster of the stack reported over the last --window-days
(CloudWatch CWAgent nvidia_smi_utilization_gpu per instance; Cloud Monitoring
agent.googleapis.com/gpu/utilization), where the current plan puts it, found by the gpulease
tags/labels. Per hour a node is busy when its maximum GPU utilization reached the reaper
threshold; the busy GPUs per hour give a load-duration curve, reduced to a baseline (a low
percentile of busy GPUs, always on) and a few burst steps up to the peak. Prints the `demand`
to paste into gpulease:clusters and the monthly saving against the current plan (the policy
re-run with the cluster's demand replaced). Reads only; changes nothing.

With --from-bill SOURCE the demand comes from the bill instead of the metrics: the compute
usage lines of one month (FOCUS, AWS CUR 2.0 or the GCP billing export, read as `gpulease
spend` reads them, matched to the clusters by gpulease's cost tags) give each cluster's
node-hours per hour, i.e. the nodes that ran each hour, and the same derivation turns them into
the `demand` to paste ("source": "bill" in the JSON). No cloud is called."""

EPILOG = """\
examples:
  gpulease recommend --stack prod
  gpulease recommend --stack prod --window-days 14 --json
  gpulease recommend --stack staging --threshold 10 --max-steps 3
  gpulease recommend --stack prod --from-bill cur2/ --month 2026-11    from what was billed

emulators: AWS_ENDPOINT_URL=http://127.0.0.1:5000; GPULEASE_GCP_ENDPOINT=http://127.0.0.1:8085
exit codes: 0 ok · 1 a cloud call failed for some cluster (the others are still reported) ·
            2 bad input: stack, arguments, no plan, no credentials for a cloud the plan uses (the
            message says what to set), clients that cannot be created (nothing read);
            with --from-bill: a missing or unreadable bill, a month with no compute usage
            in it, a bill in which no cluster of the stack appears, a bill that is not hourly"""


def max_steps_limit() -> int:
    """The most steps a demand profile may have (the config's limit)."""
    from gpulease.config import MAX_DEMAND_STEPS

    return MAX_DEMAND_STEPS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("recommend", help=COMMANDS["recommend"], description=DESCRIPTION,
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_stack_args(p)
    p.add_argument("--window-days", metavar="N", type=int,
                   help=f"days of history to read, 1..{pf.MAX_WINDOW_DAYS} (default "
                        f"{pf.DEFAULT_WINDOW_DAYS})")
    p.add_argument("--threshold", metavar="PCT", type=float,
                   help="GPU utilization %% at which a node counts as busy (default: the "
                        "stack's gpulease:reaper threshold_pct, else 5)")
    p.add_argument("--max-steps", metavar="K", type=int, default=pf.DEFAULT_MAX_STEPS,
                   help="most steps in a profile, baseline included (default %(default)s)")
    p.add_argument("--from-bill", metavar="SOURCE",
                   help="size the demand from a billed month instead of the GPU metrics: a "
                        "FOCUS CSV/Parquet file or folder, a CUR 2.0 Parquet folder, a GCP "
                        "billing export, or a warehouse table bq://PROJECT.DATASET.TABLE / "
                        "athena://WORKGROUP/DATABASE.TABLE with --month (as `gpulease spend "
                        "--bill` reads)")
    p.add_argument("--month", metavar="YYYY-MM",
                   help="with --from-bill: the month to read (UTC; default: the bill's only "
                        "month)")
    add_output_args(p)
    p.set_defaults(func=run)


def _validate(args: argparse.Namespace) -> None:
    bad = []
    if args.from_bill is not None:
        for flag, value in (("--window-days", args.window_days), ("--threshold", args.threshold)):
            if value is not None:
                bad.append(Finding(flag, "reads GPU metrics: it does not apply with --from-bill "
                                   "(the bill's node-hours are the demand); drop one of them"))
    elif args.month is not None:
        bad.append(Finding("--month", "applies only with --from-bill SOURCE (the metrics "
                           "window is --window-days)"))
    if args.window_days is None:
        args.window_days = pf.DEFAULT_WINDOW_DAYS
    if not 1 <= args.window_days <= pf.MAX_WINDOW_DAYS:
        bad.append(Finding("--window-days", f"must be 1..{pf.MAX_WINDOW_DAYS} (got "
                           f"{args.window_days}): Cloud Monitoring keeps points and Auto "
                           "Scaling keeps activities six weeks"))
    if args.threshold is not None and not 0 < args.threshold <= 100:
        bad.append(Finding("--threshold", f"must be > 0 and <= 100 (got {args.threshold:g})"))
    top = max_steps_limit()
    if not 2 <= args.max_steps <= top:
        bad.append(Finding("--max-steps", f"must be 2..{top}: a baseline and a peak at least "
                           f"(got {args.max_steps})"))
    if bad:
        raise ConfigError(bad, headline="gpulease recommend: bad arguments:")


def adaptors(spec, decision) -> dict:
    """The reaper adaptors for every place the plan uses (clients created once, here).
    A client that cannot be created is bad input: exit 2 before anything is read."""
    from gpulease import credentials
    from gpulease.recommend.engine import location

    places = sorted({location(d, spec) for d in decision.clusters})
    credentials.preflight([cloud for cloud, _ in places], command="recommend",
                          needs=cloud_needs("recommend"))
    out, bad = {}, []
    for place in places:
        cloud, where = place
        try:
            out[place] = cloud_cli(cloud).recommend_adaptor(where)
        except Exception as exc:  # noqa: BLE001 - botocore / google.auth raise their own types
            bad.append(Finding(f"gpulease:clouds.{cloud}", f"cannot create {cloud} clients for "
                               f"{where!r}: {type(exc).__name__}: {exc}"))
    if bad:
        raise ConfigError(bad, headline="gpulease recommend: cannot reach the clouds:")
    return out


#: "now" of the command: the window ends at the last full hour before it (tests that wrote a
#: history pin it to the moment they wrote it, so an hour that turns mid-test moves nothing).
clock: Callable[[], float] = time.time


def run(args: argparse.Namespace, *, now: Optional[float] = None) -> int:
    _validate(args)
    from gpulease.policy import decide
    from gpulease.recommend import engine

    if args.from_bill is not None:
        return run_from_bill(args)
    loaded = load_stack(args)
    spec = loaded.spec
    threshold = args.threshold if args.threshold is not None else \
        float(getattr(spec.reaper, "threshold_pct", 5.0) if spec.reaper is not None else 5.0)
    decision = decide(spec, loaded.catalog)
    ads = adaptors(spec, decision)
    with ui.steps(f"recommending demand for {loaded.source}",
                  piped_lines=not args.json) as steps:
        report = engine.run(spec, loaded.catalog, decision, ads,
                            now=clock() if now is None else now,
                            window_days=args.window_days, threshold_pct=threshold,
                            max_steps=args.max_steps, progress=steps.step)
    _show(args, report)
    if report.exit_code:
        ui.exit_reason(report.exit_code, "a cloud call failed for " + ", ".join(
            f"{c.name} ({c.cloud} {c.region})" for c in report.failed)
            + "; the other clusters are reported")
    return report.exit_code


def _show(args: argparse.Namespace, report) -> None:
    if args.json:
        print_json(report.as_json())
    else:
        render_text(report)


def run_from_bill(args: argparse.Namespace) -> int:
    """`recommend --from-bill`: the demand of each cluster from the nodes billed per hour."""
    import duckdb

    from gpulease.policy import decide
    from gpulease.recommend import engine
    from gpulease.spend import sources as S
    from gpulease.spend import usage as U

    if args.month is not None:
        S.month_bounds(args.month)          # a malformed --month: exit 2 before anything runs
    from gpulease.spend import warehouse as W

    with _named_from_bill():
        table = W.parse(args.from_bill)             # a malformed bq:// or athena://: exit 2
    if table is not None:
        if args.month is None:
            raise ConfigError([Finding("--month", (
                f"{args.from_bill}: a warehouse table holds many months; say which one, e.g. "
                "--month 2026-11"))])
        W.preflight(table)                          # no credentials: exit 2, nothing called
    loaded = load_stack(args)
    spec = loaded.spec
    decision = decide(spec, loaded.catalog)
    if table is not None:
        return _from_warehouse(args, table, loaded, decision)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    with _named_from_bill():
        src = S.open_source(con, args.from_bill)    # missing or unknown: exit 2
        index = bill_index(spec, decision)
        with ui.steps(f"recommending demand for {loaded.source} from {src.path}",
                      piped_lines=not args.json) as steps:
            steps.step(f"reading {src.path} ({S.FORMAT_LABELS[src.kind]}) with DuckDB")
            try:
                month = U.pick_month(con, src, args.month)
                usage = U.read(con, src, index, gpus_per_node(decision), month=month)
            except duckdb.Error as exc:
                raise ConfigError([Finding("--bill", f"{src.path}: unreadable as "
                                           f"{S.FORMAT_LABELS[src.kind]} "
                                           f"({S._first_line(exc)}); {S.FIX}")]) from None
            U.require_clusters(usage, index, src, spec.stack)
            report = engine.run_from_bill(spec, loaded.catalog, decision, usage,
                                          max_steps=args.max_steps, progress=steps.step)
    _show(args, report)
    return report.exit_code


def _from_warehouse(args: argparse.Namespace, table, loaded, decision) -> int:
    """`recommend --from-bill bq://... | athena://...`: the nodes per hour of --month from the
    one query's hourly part, pushed down (gpulease.cli.spend.warehouse_answer)."""
    import datetime as dt

    from gpulease.cli.spend import warehouse_answer
    from gpulease.recommend import engine
    from gpulease.spend import usage as U
    from gpulease.spend import warehouse as W

    spec = loaded.spec
    where = W.address_text(table)
    with _named_from_bill():
        index = bill_index(spec, decision)
        with ui.steps(f"recommending demand for {loaded.source} from {where}",
                      piped_lines=not args.json) as steps:
            src, answer = warehouse_answer(
                table, "--bill", steps, month=args.month,
                now=dt.datetime.now(dt.timezone.utc), index=index, groups=False, hourly=True)
            usage = U.from_rows(answer, src, index, gpus_per_node(decision), month=args.month)
            U.require_clusters(usage, index, src, spec.stack)
            report = engine.run_from_bill(spec, loaded.catalog, decision, usage,
                                          max_steps=args.max_steps, progress=steps.step)
    _show(args, report)
    return report.exit_code


@contextlib.contextmanager
def _named_from_bill():
    """The bill readers name their flag --bill (`gpulease spend`'s); here it is --from-bill."""
    try:
        yield
    except InputError as exc:
        raise type(exc)([dataclasses.replace(f, path="--from-bill") if f.path == "--bill"
                         else f for f in exc.findings], headline=exc.headline) from None


def bill_index(spec, decision):
    """What the bill is matched with: the environment and cluster names (gpulease's cost tags;
    without the plan's resource names, which only `gpulease spend`'s full plan has)."""
    from gpulease.spend.classify import PlanIndex

    return PlanIndex(environment=spec.environment,
                     clusters=tuple(d.name for d in decision.clusters), resources={})


def gpus_per_node(decision) -> dict:
    return {d.name: int(d.offering.gpus_per_node) for d in decision.clusters}


def render_text(report, o: Optional[ui.Out] = None) -> None:
    o = o or ui.out()
    for c in report.clusters:
        where = (f"billed in {report.month}" if report.source == "bill" else
                 f"{c.window_days}-day window")
        o.line((c.name, "cyan"), f" ({c.cloud} {c.region}, {where})")
        if c.error:
            o.line(("  error:", "bold red"), f" {c.error}")
            o.print()
            continue
        if c.source == "bill":
            _bill_line(c, o)
        else:
            _metrics_line(c, o)
        cur = c.current
        o.print(f"  now: {cur['gpus']} GPUs x {cur['hours_per_month']:g} h/month"
                + (" (a demand profile)" if cur.get("demand") else ""))
        o.print()
        for line in c.yaml.rstrip("\n").split("\n"):
            o.print("  " + line)
        o.print()
        if c.saving_usd is not None:
            verb = "saves" if c.saving_usd >= 0 else "costs"
            o.line("  ", (f"{verb} {ui.money(abs(c.saving_usd))}/month", "bold"),
                   " against the current plan" + (f" ({c.saving_note})" if c.saving_note
                                                  else ""))
        elif c.saving_note:
            o.print(f"  saving: {c.saving_note}")
        o.print()


def _metrics_line(c, o: ui.Out) -> None:
    ob = c.observed
    o.print(f"  {ob.get('instances', 0)} instance(s), {c.samples:,} hourly samples, "
            f"{ob.get('hours_observed', 0)} h observed; busy GPUs: mean "
            f"{ob.get('mean_busy_gpus', 0):g}, baseline {ob.get('baseline_gpus', 0)} "
            f"(p{ob.get('baseline_percentile', pf.BASELINE_PERCENTILE):g}), peak "
            f"{ob.get('peak_gpus', 0)} for {ob.get('peak_hours_per_month', 0):g} h/month "
            f"(threshold {ob.get('threshold_pct', 0):g}%)")


def _bill_line(c, o: ui.Out) -> None:
    ob = c.observed
    gpn = ob.get("gpus_per_node") or 1
    o.print(f"  {ob.get('instances', 0)} instance(s), {c.samples:,} billed line(s), "
            f"{ob.get('busy_gpu_hours', 0) // gpn:,} node-hours in {ob.get('hours_with_data', 0)}"
            f" of {ob.get('hours', 0)} h; running GPUs: mean {ob.get('mean_busy_gpus', 0):g}, "
            f"baseline {ob.get('baseline_gpus', 0)} "
            f"(p{ob.get('baseline_percentile', pf.BASELINE_PERCENTILE):g}), peak "
            f"{ob.get('peak_gpus', 0)} for {ob.get('peak_hours_per_month', 0):g} h/month")
