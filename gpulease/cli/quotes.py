"""`gpulease catalog quotes`: Capacity Block offerings, flex-start / calendar-mode prices and
spot risk, read live from the clouds (and cached with their time of quote) or offline."""
from __future__ import annotations

import argparse
import datetime as dt
from typing import Any, Optional

from gpulease.clouds import registry
from gpulease.cli import ui
from gpulease.cli.common import (add_catalog_args, add_output_args, check_cloud_clients,
                                 cloud_cli, cloud_needs, print_json, progress)
from gpulease.errors import EXIT_FAILED, EXIT_OK, Finding, InputError, did_you_mean

DESCRIPTION = """\
Quotes for capacity in a time window and for spot risk, with the time each was quoted:
EC2 Capacity Block offerings (DescribeCapacityBlockOfferings: start, end, upfront fee), GCP
flex-start and calendar-mode prices (Cloud Billing Catalog SKUs) and calendar-mode availability
(advice.calendarMode), Spot Placement Scores, the Spot Instance Advisor's interruption bands
and GCP Spot capacity advice (obtainability, estimated uptime). The policy prices work items
with a window (`gpulease:clusters[].window`) from these quotes (docs/policy.md, "Windows").

--source live asks the clouds (credentials needed) and adds the answers to the cache
($GPULEASE_QUOTES_CACHE, default ~/.cache/gpulease/quotes.json); --source offline shows the
shipped dated data file (published rates, Advisor bands) and the cache; auto (the default) asks
each cloud whose credentials are found and answers offline for the others. A quote is a price at
a time, never a purchase: buying a block needs approval in the stack config."""

EPILOG = """\
examples:
  gpulease catalog quotes --source offline --gpu H100
  gpulease catalog quotes --instance-type p5.48xlarge --count 8 --duration-hours 240
  gpulease catalog quotes --cloud gcp --gcp-project acme-ml --gpu H100 --count 4 --json

Credentials: AWS from the boto3 chain (ec2:DescribeCapacityBlockOfferings,
ec2:GetSpotPlacementScores); GCP from Application Default Credentials (compute.advice.*,
billing catalog read). AWS_ENDPOINT_URL / GPULEASE_GCP_ENDPOINT point them at emulators.

exit codes: 0 ok (also when a cloud answered that it has nothing) · 1 every live call failed ·
            2 bad arguments (durations, counts and dates outside the APIs' limits), or
            --source live without credentials for a cloud (the message says what to set)"""

#: live asks per run above which a filter is required (each GCP machine type is a call).
MAX_LIVE_TARGETS = 60


def register(csub: argparse._SubParsersAction) -> None:
    qp = csub.add_parser("quotes", help="Capacity Block / flex-start / calendar-mode quotes and "
                                        "spot risk, live or offline, with their dates",
                         description=DESCRIPTION, epilog=EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    qp.add_argument("--source", choices=("auto", "live", "offline"), default="auto",
                    help="live: ask the clouds; offline: the shipped data file and the cache; "
                         "auto (default): live where credentials are found")
    qp.add_argument("--cloud", choices=registry.NAMES, help="one cloud only")
    qp.add_argument("--region", action="append", default=[], metavar="R",
                    help="only this region (repeatable)")
    qp.add_argument("--instance-type", action="append", default=[], metavar="T",
                    help="only this instance / machine type (repeatable)")
    qp.add_argument("--gpu", help="only offerings of this GPU model (e.g. H100)")
    qp.add_argument("--count", type=int, metavar="N",
                    help="nodes to quote for (Capacity Blocks 1-64, calendar mode, scores)")
    qp.add_argument("--duration-hours", type=float, metavar="H",
                    help="hours of work: the shortest block / calendar reservation covering "
                         "them is asked for")
    qp.add_argument("--start", metavar="TIME", help="earliest start (RFC 3339, e.g. "
                                                    "2027-01-04T00:00:00Z; default now)")
    qp.add_argument("--end", metavar="TIME", help="latest end (RFC 3339)")
    qp.add_argument("--gcp-project", metavar="ID",
                    help="GCP project for the advice API (default: $GOOGLE_CLOUD_PROJECT)")
    qp.add_argument("--no-cache", action="store_true", help="do not add live answers to the "
                                                            "cache")
    add_output_args(qp)   # --format table|json, --out FILE, --json (C5; written by the CLI)
    add_catalog_args(qp)
    qp.set_defaults(func=run_quotes)


def _time(flag: str, text: Optional[str]) -> Optional[dt.datetime]:
    from gpulease.quotes.model import parse_time

    if text is None:
        return None
    try:
        return parse_time(text)
    except ValueError as exc:
        raise InputError([Finding(flag, str(exc))]) from None


def _check(args: argparse.Namespace, catalog) -> None:
    bad = []
    if args.count is not None and args.count < 1:
        bad.append(Finding("--count", f"at least 1 node (got {args.count})"))
    if args.duration_hours is not None and not 0 < args.duration_hours <= 182 * 24:
        bad.append(Finding("--duration-hours", f"1 h to 182 days (got {args.duration_hours:g})"))
    gpus = catalog.gpus
    if args.gpu and args.gpu not in gpus:
        bad.append(Finding("--gpu", f'unknown GPU "{args.gpu}"{did_you_mean(args.gpu, gpus)}'))
    regions = catalog.regions(args.cloud)
    for r in args.region:
        if r not in regions:
            bad.append(Finding("--region", f'unknown region "{r}"{did_you_mean(r, regions)}'))
    types = catalog.instance_types(args.cloud)
    for t in args.instance_type:
        if t not in types:
            bad.append(Finding("--instance-type", f'unknown type "{t}"'
                               f"{did_you_mean(t, types)}"))
    if bad:
        raise InputError(bad)


def run_quotes(args: argparse.Namespace, *, advisor: Any = None,
               now: Optional[dt.datetime] = None, **clients: Any) -> int:
    """The command. Tests inject clients per cloud (``aws``: AwsClients, ``gcp``:
    QuoteClients); otherwise each cloud's ``collect_quotes`` (gpulease/cli/clouds/<cloud>.py)
    makes real ones."""
    from gpulease.catalog import load_catalog
    from gpulease.errors import CloudError
    from gpulease.quotes import collect
    from gpulease.quotes.model import QuoteBook
    from gpulease.quotes.store import cache_path, load_book, write_cache

    check_cloud_clients(clients)
    now = now or dt.datetime.now(dt.timezone.utc)
    catalog = load_catalog(args.catalog, args.catalog_version)
    _check(args, catalog)
    req = collect.QuoteRequest(
        clouds=(args.cloud,) if args.cloud else registry.NAMES, regions=tuple(args.region),
        instance_types=tuple(args.instance_type), gpu=args.gpu, count=args.count,
        duration_hours=args.duration_hours, start=_time("--start", args.start),
        end=_time("--end", args.end), gcp_project=args.gcp_project)
    if req.start and req.end and req.end <= req.start:
        raise InputError([Finding("--end", "must be after --start")])
    offerings = collect.targets(catalog, req)
    collect.check_limits(offerings, req, now)   # offline refuses what live would (exit 2)
    live_clouds = []
    if args.source != "offline":
        from gpulease import credentials

        need = [c for c in req.clouds if clients.get(c) is None]
        if args.source == "live":   # asked for live answers: no credentials is bad input
            credentials.preflight(need, command="catalog quotes --source live",
                                  needs=cloud_needs("catalog quotes"), only_flag="--cloud")
        live_clouds = [c for c in req.clouds
                       if c not in need or args.source == "live" or not credentials.missing(c)]
    got = collect.Collected()
    asked = [o for o in offerings if o.cloud in live_clouds]
    if len(asked) > MAX_LIVE_TARGETS:
        raise InputError([Finding("--gpu", f"{len(asked)} offerings to ask live (at most "
                                  f"{MAX_LIVE_TARGETS}); narrow with --gpu, --instance-type or "
                                  "--region")])
    with ui.steps("asking the clouds for quotes", enabled=bool(asked)) as steps:
        for cloud in live_clouds:
            mine = [o for o in asked if o.cloud == cloud]
            if not mine:
                continue
            try:
                cloud_cli(cloud).collect_quotes(clients.get(cloud), mine, req, now, steps.step,
                                                got, advisor=advisor)
            except CloudError as exc:
                got.failures.append(collect.Failure(cloud, "clients", str(exc)))
    for f in got.failures:
        ui.warning(str(f))
    for s in got.skipped:
        ui.warning(f"not asked: {s}")
    if live_clouds and (got.quotes or got.risks) and not args.no_cache:
        path = write_cache(got.quotes, got.risks)
        progress(f"cached {ui.plural(len(got.quotes), 'quote')} and "
                 f"{ui.plural(len(got.risks), 'spot-risk record')} in {path}")
    book = load_book(cache=True)
    if args.no_cache and (got.quotes or got.risks):
        book.add(got.quotes, got.risks)
    keys = {(o.cloud, o.region, o.instance_type) for o in offerings}
    quotes = [q for q in book.quotes if (q.cloud, q.region, q.instance_type) in keys]
    risks = [r for r in book.risks if (r.cloud, r.region, r.instance_type) in keys]
    report = _report(quotes, risks, book, now=now, live=live_clouds,
                     offline=[c for c in req.clouds if c not in live_clouds], got=got)
    failed_all = bool(live_clouds) and got.calls > 0 and len(got.failures) >= got.calls
    _emit(args, report, now)
    if failed_all:
        return ui.exit_reason(EXIT_FAILED, "every live call failed (warnings above); the "
                              "offline answer is shown")
    return EXIT_OK


def _report(quotes, risks, book, *, now, live, offline, got) -> dict:
    from gpulease.policy.rules import PolicyRules
    from gpulease.clock import format_utc

    max_age = PolicyRules().quote_max_age_hours

    def status(q) -> str:
        why = q.expired(now, max_age)
        if why:
            return f"expired: {why}"
        return "live" if q.live else "published rate"
    qrows = []
    for q in sorted(quotes, key=lambda q: (q.kind, q.cloud, q.region, q.instance_type,
                                            q.start or now, q.zone or "")):
        d = q.as_dict()
        d["status"] = status(q)
        qrows.append(d)
    rrows = [r.as_dict() for r in sorted(risks, key=lambda r: (r.cloud, r.region,
                                                               r.instance_type, r.zone or ""))]
    return {"now": format_utc(now), "live_clouds": live, "offline_clouds": offline,
            "data_file": book.origins[0] if book.origins else None,
            "cache": list(book.origins[1:]), "quotes": qrows, "spot_risk": rrows,
            "sources": book.sources, "failures": [str(f) for f in got.failures],
            "not_asked": got.skipped, "api_calls": got.calls}


def _emit(args, report: dict, now) -> None:
    # --out FILE is the CLI's (gpulease.cli.common.report_to): this prints on stdout either way
    if getattr(args, "json", False) or args.format == "json":
        print_json(report)
    else:
        _table(report)


def _table(report: dict) -> None:
    o = ui.out()
    where = []
    if report["live_clouds"]:
        where.append("live: " + ", ".join(report["live_clouds"]))
    if report["offline_clouds"]:
        where.append("offline: " + ", ".join(report["offline_clouds"]))
    o.line(("quotes", "bold"), f" as of {report['now']} · " + " · ".join(where)
           + f" · data file {report['data_file']}"
           + (f" · cache {', '.join(report['cache'])}" if report["cache"] else ""))
    rows = report["quotes"]
    if rows:
        o.print(o.table(
            [ui.Col("kind"), ui.Col("cloud"), ui.Col("region"), ui.Col("type", style="cyan"),
             ui.Col("zone"), ui.Col("nodes", right=True), ui.Col("start"), ui.Col("end"),
             ui.Col("price", right=True, style="bold"), ui.Col("$/node-h", right=True),
             ui.Col("quoted"), ui.Col("source"), ui.Col("status", wrap=True)],
            [[r["kind"], r["cloud"], r["region"], r["instance_type"], r["zone"] or "-",
              str(r["instance_count"] or "-"), r["start"] or "any", r["end"] or "any",
              ui.money(r["upfront_usd"]) if r["upfront_usd"] is not None else "-",
              f"{r['hourly_usd']:.4f}" if r["hourly_usd"] is not None else "-",
              r["quoted_at"][:10], r["source"], r["status"]] for r in rows]))
    else:
        o.print("no quotes for these offerings (live: none answered; offline: none published)")
    risks = report["spot_risk"]
    if risks:
        o.print("")
        o.print(o.table(
            [ui.Col("cloud"), ui.Col("region"), ui.Col("zone"), ui.Col("type", style="cyan"),
             ui.Col("band"), ui.Col("interruptions/node-h", right=True),
             ui.Col("score", right=True), ui.Col("obtainability", right=True),
             ui.Col("uptime h", right=True), ui.Col("as of"), ui.Col("source")],
            [[r["cloud"], r["region"], r["zone"] or "-", r["instance_type"], r["band"] or "-",
              f"{r['interruptions_per_hour']:.6f}" if r["interruptions_per_hour"] is not None
              else "-", str(r["placement_score"] or "-"),
              f"{r['obtainability']:.2f}" if r["obtainability"] is not None else "-",
              f"{r['estimated_uptime_hours']:g}" if r["estimated_uptime_hours"] else "-",
              r["as_of"][:10], r["source"]] for r in risks]))
    for s in report["not_asked"]:
        o.print(f"not asked: {s}")
