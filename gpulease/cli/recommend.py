"""`gpulease recommend`: each cluster's demand profile sized from the GPU use it reported."""
from __future__ import annotations

import argparse
import time
from typing import Callable, Optional

from gpulease.cli import COMMANDS, ui
from gpulease.cli.common import (add_output_args, add_stack_args, cloud_cli, cloud_needs,
                                 load_stack, print_json)
from gpulease.errors import ConfigError, Finding
from gpulease.recommend import profile as pf

DESCRIPTION = """\
Read the GPU utilization each cluster of the stack reported over the last --window-days
(CloudWatch CWAgent nvidia_smi_utilization_gpu per instance; Cloud Monitoring
agent.googleapis.com/gpu/utilization), where the current plan puts it, found by the gpulease
tags/labels. Per hour a node is busy when its maximum GPU utilization reached the reaper
threshold; the busy GPUs per hour give a load-duration curve, reduced to a baseline (a low
percentile of busy GPUs, always on) and a few burst steps up to the peak. Prints the `demand`
to paste into gpulease:clusters and the monthly saving against the current plan (the policy
re-run with the cluster's demand replaced). Reads only; changes nothing."""

EPILOG = """\
examples:
  gpulease recommend --stack prod
  gpulease recommend --stack prod --window-days 14 --json
  gpulease recommend --stack staging --threshold 10 --max-steps 3

emulators: AWS_ENDPOINT_URL=http://127.0.0.1:5000; GPULEASE_GCP_ENDPOINT=http://127.0.0.1:8085
exit codes: 0 ok · 1 a cloud call failed for some cluster (the others are still reported) ·
            2 bad input: stack, arguments, no plan, no credentials for a cloud the plan uses (the
            message says what to set), clients that cannot be created (nothing read)"""


def max_steps_limit() -> int:
    """The most steps a demand profile may have (the config's limit)."""
    from gpulease.config import MAX_DEMAND_STEPS

    return MAX_DEMAND_STEPS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("recommend", help=COMMANDS["recommend"], description=DESCRIPTION,
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_stack_args(p)
    p.add_argument("--window-days", metavar="N", type=int, default=pf.DEFAULT_WINDOW_DAYS,
                   help=f"days of history to read, 1..{pf.MAX_WINDOW_DAYS} (default "
                        "%(default)s)")
    p.add_argument("--threshold", metavar="PCT", type=float,
                   help="GPU utilization %% at which a node counts as busy (default: the "
                        "stack's gpulease:reaper threshold_pct, else 5)")
    p.add_argument("--max-steps", metavar="K", type=int, default=pf.DEFAULT_MAX_STEPS,
                   help="most steps in a profile, baseline included (default %(default)s)")
    add_output_args(p)
    p.set_defaults(func=run)


def _validate(args: argparse.Namespace) -> None:
    bad = []
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
    if args.json:
        print_json(report.as_json())
    else:
        render_text(report)
    if report.exit_code:
        ui.exit_reason(report.exit_code, "a cloud call failed for " + ", ".join(
            f"{c.name} ({c.cloud} {c.region})" for c in report.failed)
            + "; the other clusters are reported")
    return report.exit_code


def render_text(report, o: Optional[ui.Out] = None) -> None:
    o = o or ui.out()
    for c in report.clusters:
        o.line((c.name, "cyan"), f" ({c.cloud} {c.region}, {c.window_days}-day window)")
        if c.error:
            o.line(("  error:", "bold red"), f" {c.error}")
            o.print()
            continue
        ob = c.observed
        o.print(f"  {ob.get('instances', 0)} instance(s), {c.samples:,} hourly samples, "
                f"{ob.get('hours_observed', 0)} h observed; busy GPUs: mean "
                f"{ob.get('mean_busy_gpus', 0):g}, baseline {ob.get('baseline_gpus', 0)} "
                f"(p{ob.get('baseline_percentile', pf.BASELINE_PERCENTILE):g}), peak "
                f"{ob.get('peak_gpus', 0)} for {ob.get('peak_hours_per_month', 0):g} h/month "
                f"(threshold {ob.get('threshold_pct', 0):g}%)")
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
