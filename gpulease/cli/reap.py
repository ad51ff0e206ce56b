"""`gpulease reap`: find idle gpulease clusters by GPU utilization and stop paying for them."""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from gpulease import tags
from gpulease.clouds import registry
from gpulease.cli import COMMANDS, ui
from gpulease.cli.common import (add_catalog_args, add_output_args, cloud_cli, cloud_needs,
                                 print_json, progress)
from gpulease.errors import ConfigError, Finding
from gpulease.limits import MAX_IDLE_MINUTES
from gpulease.reaper import defaults
from gpulease.reaper.audit import DEFAULT_PATH

# The reaper itself (gpulease.reaper.decision / engine, pydantic for its settings) is imported
# when the command runs: `gpulease reap --help` needs only the constants above.
if TYPE_CHECKING:
    from gpulease.reaper import engine

DESCRIPTION = """\
Find gpulease clusters (by their gpulease-cluster + gpulease-environment tags/labels) whose
every node stayed below the GPU-utilization threshold for the cluster's idle window, and scale
their compute to zero. Dry run by default. With --apply: the first idle detection marks the
cluster (gpulease-idle-since), a marked cluster that turns busy is unmarked, and after the
grace period utilization is re-checked right before compute is scaled to zero (ASG min/desired
0, MIG size 0) or, with a baseline, down to it. In a cluster that is not idle as a whole, idle
nodes above their group's floor are marked and removed one by one the same way. Declared
schedules, a new cluster's first-job grace and prepaid groups hold the reaper back. Metrics
are judged up to 5 minutes back (they arrive late). Launch/instance templates and storage are
never touched; the opt-out tag gpulease-keep always wins. No stack file needed."""

EPILOG = """\
examples:
  gpulease reap --all                              dry run, every environment, AWS us-east-1
  gpulease reap --stack dev --region us-west-2 --apply
  gpulease reap --stack prod --cloud gcp --project acme-ml-prod --json
  gpulease reap --stack dev --destroy --apply      pulumi destroy of the idle env's stack

emulators: AWS_ENDPOINT_URL=http://127.0.0.1:5000 (boto3 honours it);
           GPULEASE_GCP_ENDPOINT=http://127.0.0.1:8085 (Compute + Monitoring REST, no auth)
exit codes: 0 ok · 1 a cloud call failed for some cluster (others still handled; the failed
            clusters are named on stderr, the JSON document and the audit record are still
            written), or the audit log could not be written (nothing is changed after that;
            the JSON document is still printed) · 2 bad input or no credentials for a cloud
            to read (the message says what to set; nothing done)"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reap", help=COMMANDS["reap"],
                       description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    who = p.add_mutually_exclusive_group()
    who.add_argument("--stack", metavar="ENV", action="append",
                     help="environment (value of the gpulease-environment tag); repeatable")
    who.add_argument("--all", action="store_true", help="every gpulease environment")
    p.add_argument("--cloud", choices=registry.NAMES,
                   help="only this cloud (default: AWS, plus GCP when a project is known)")
    p.add_argument("--region", metavar="R", action="append",
                   help="AWS region; repeatable (default: $AWS_REGION, $AWS_DEFAULT_REGION, "
                        "else us-east-1)")
    p.add_argument("--project", metavar="P",
                   help="GCP project (default: $GOOGLE_CLOUD_PROJECT); all zones are scanned")
    p.add_argument("--idle-minutes", metavar="N", type=int,
                   help="idle window for every cluster, 1..%d (default: each cluster's "
                        "gpulease-idle-minutes tag)" % MAX_IDLE_MINUTES)
    p.add_argument("--threshold", metavar="PCT", type=float, default=defaults.THRESHOLD_PCT,
                   help="GPU utilization %% below which a node is idle (default %(default)s)")
    p.add_argument("--grace-minutes", metavar="N", type=int, default=defaults.GRACE_MINUTES,
                   help="wait after marking before acting (default %(default)s)")
    p.add_argument("--max-actions", metavar="N", type=int, default=defaults.MAX_ACTIONS,
                   help="most clusters torn down per run, shared with any reaper running at "
                        "the same time in the same region/project (default %(default)s)")
    p.add_argument("--apply", action="store_true", help="act (default: dry run, nothing changes)")
    p.add_argument("--destroy", action="store_true",
                   help="tear the idle environment's whole stack down with the Pulumi "
                        "Automation API instead of scaling to zero (needs the Pulumi CLI)")
    p.add_argument("--work-dir", metavar="DIR",
                   help="Pulumi project directory: its stacks validate --stack, --destroy "
                        "runs there (default: the project around the working directory, else "
                        "the gpulease checkout)")
    p.add_argument("--audit-log", metavar="PATH", default=DEFAULT_PATH,
                   help="append-only JSONL audit log (default %(default)s; '-' = stdout)")
    add_catalog_args(p)
    add_output_args(p)
    p.set_defaults(func=run)


def _validate(args: argparse.Namespace) -> None:
    bad = []
    if not args.stack and not args.all:
        bad.append(Finding("--stack", "say which environments: --stack ENV (repeatable) or --all"))
    if not 0 < args.threshold <= 100:
        bad.append(Finding("--threshold", f"must be > 0 and <= 100 (got {args.threshold:g})"))
    if args.idle_minutes is not None and not 0 < args.idle_minutes <= MAX_IDLE_MINUTES:
        bad.append(Finding("--idle-minutes", f"must be > 0 and <= {MAX_IDLE_MINUTES} (7 days) "
                           f"(got {args.idle_minutes})"))
    if not 0 <= args.grace_minutes <= defaults.MAX_GRACE_MINUTES:
        bad.append(Finding("--grace-minutes", f"must be >= 0 and <= {defaults.MAX_GRACE_MINUTES} "
                           f"(7 days) (got {args.grace_minutes})"))
    if args.max_actions < 1:
        bad.append(Finding("--max-actions", f"must be >= 1 (got {args.max_actions})"))
    if args.cloud:
        bad += cloud_cli(args.cloud).reap_arg_findings(args)
    if args.audit_log and args.audit_log != "-":
        path = Path(os.path.expanduser(args.audit_log))
        parent = path.parent
        if path.is_dir():
            bad.append(Finding("--audit-log", f"{path} is a directory; pass a file path"))
        elif parent.exists() and not os.access(parent, os.W_OK):
            bad.append(Finding("--audit-log", f"{parent} is not writable; pass another path"))
        elif path.exists() and not os.access(path, os.W_OK):
            bad.append(Finding("--audit-log", f"{path} is not writable; pass another path"))
    bad += _stack_findings(args)
    if bad:
        raise ConfigError(bad, headline="gpulease reap: bad arguments:")


def _project_dir(args: argparse.Namespace) -> Path:
    """--work-dir, else the Pulumi project around the working directory, else the checkout."""
    from gpulease.config import find_project_dir
    from gpulease.reaper.destroy import PROJECT_DIR

    if args.work_dir:
        return Path(args.work_dir)
    try:
        return find_project_dir()
    except ConfigError:
        return PROJECT_DIR


def _stack_findings(args: argparse.Namespace) -> list:
    """Each --stack must name a stack of the project (a typo would silently find nothing)."""
    from gpulease.config import stack_file

    out = []
    for env in dict.fromkeys(args.stack or ()):
        try:
            stack_file(env, _project_dir(args))
        except ConfigError as exc:
            out += [Finding(f.path, f.message + " (reap every environment with --all)")
                    for f in exc.findings]
    return out


def adaptors(args: argparse.Namespace) -> list:
    """The cloud adaptors for this run (clients are created here, once, and passed in).

    A client that cannot be created (a malformed AWS_ENDPOINT_URL or region, no Google
    credentials) is bad input: exit 2 before anything runs.
    """
    from gpulease import credentials

    out: list = []
    bad: list = []
    clouds = []
    for cloud in registry.NAMES:
        part = cloud_cli(cloud)
        if args.cloud == cloud or (args.cloud is None and part.reap_by_default(args)):
            clouds.append(cloud)
            made, why = part.reap_adaptors(args)
            out += made
            bad += why
    if bad:
        bad += [Finding("credentials", m) for m in
                credentials.problems(clouds, command="reap", needs=cloud_needs("reap"))]
        raise ConfigError(bad, headline="gpulease reap: cannot reach the clouds:")
    credentials.preflight(clouds, command="reap", needs=cloud_needs("reap"),
                          only_flag="--cloud")
    return out


def _pricer(args: argparse.Namespace):
    """Reserved prices from the catalog, loaded only if a reservation needs pricing."""
    from gpulease.catalog import load_catalog
    from gpulease.errors import CatalogError
    from gpulease.reaper import engine

    cache: dict = {}

    def price(cloud: str, region: str, instance_type: str):
        if "fn" not in cache:
            try:
                cache["fn"] = engine.catalog_pricer(load_catalog(args.catalog,
                                                                 args.catalog_version))
            except CatalogError as exc:
                progress(f"warning: reservations are listed without prices: {exc}")
                cache["fn"] = lambda *a: None
        return cache["fn"](cloud, region, instance_type)
    return price


def run(args: argparse.Namespace) -> int:
    from gpulease.reaper import decision as d
    from gpulease.reaper import engine
    from gpulease.reaper.audit import AuditLog, guarded, guarded_call

    _validate(args)
    destroy = None
    if args.destroy and args.apply:
        from gpulease.reaper.destroy import destroyer, require_cli

        work_dir = _project_dir(args)
        require_cli(work_dir)
        destroy = destroyer(work_dir, on_output=progress)
    policy = d.Policy(threshold_pct=args.threshold, grace_minutes=args.grace_minutes,
                      idle_minutes=args.idle_minutes, destroy=args.destroy)
    ads = adaptors(args)
    where = ", ".join(f"{a.cloud}:{a.label}" for a in ads)
    title = (f"reaping {'all environments' if args.all else ', '.join(args.stack)} "
             f"({'APPLY' if args.apply else 'dry run'})")
    with ui.steps(title, piped_lines=not args.json) as steps, \
            AuditLog(args.audit_log) as audit:
        steps.step(f"reading GPU utilization in {where}")
        # every cloud-changing call is refused once the audit log cannot be written
        report = engine.run([guarded(a, audit) for a in ads], policy=policy, apply=args.apply,
                            max_actions=args.max_actions,
                            environments=None if args.all else args.stack, audit=audit,
                            pricer=_pricer(args),
                            destroyer=None if destroy is None else guarded_call(
                                destroy, audit, cloud="pulumi", operation="destroy"))
    if args.json:
        doc = report.as_json()
        doc["audit_log"] = {"path": args.audit_log, "written": audit.failed is None,
                            "error": audit.failed}
        print_json(doc)
    else:
        render_text(report, audit_path=args.audit_log, audit_error=audit.failed)
    if audit.failed:
        acted = sum(1 for o in report.outcomes if o.applied)
        return ui.exit_reason(1, f"the audit log could not be written ({audit.failed}): "
                              + ("nothing was changed" if not acted else
                                 f"{ui.plural(acted, 'change')} made before it failed, none "
                                 "after")
                              + "; free space or pass another --audit-log and run again")
    if report.exit_code:
        failed = [f"{o.environment}/{o.cluster} ({o.cloud} {o.region})"
                  for o in report.outcomes if o.state == d.ERROR]
        ui.exit_reason(report.exit_code,
                       f"a cloud call failed for {ui.plural(len(failed), 'cluster')}: "
                       + ", ".join(failed) + ("; the other clusters were handled"
                                              if len(report.outcomes) > len(failed) else ""))
    return report.exit_code


def _verb(o: engine.Outcome) -> str:
    from gpulease.reaper import decision as d

    if o.action == d.NONE:
        return "-"
    return o.action if o.applied else f"would {o.action}"


def _state_style(state: str) -> str:
    from gpulease.reaper import decision as d

    return {d.IDLE: "yellow", d.MARKED: "yellow", d.REAPED: "green", d.BUSY: "",
            d.ERROR: "bold red", d.SKIPPED: "dim", d.INSUFFICIENT: "dim"}.get(state, "")


def render_text(report: engine.Report, *, audit_path: Optional[str] = None,
                audit_error: Optional[str] = None, o: Optional[ui.Out] = None) -> None:
    """The reap report as text on ``o`` (stdout by default)."""
    o = o or ui.out()
    outcomes = ui.natural_sorted(report.outcomes,
                                 key=lambda x: (x.environment, x.cluster, x.cloud, x.region))
    if not outcomes:
        o.print("no gpulease clusters found")
    else:
        o.print(o.table(
            [ui.Col("cluster", style="cyan"), ui.Col("env"), ui.Col("cloud"), ui.Col("region"),
             ui.Col("state"), ui.Col("action"), ui.Col("nodes", right=True),
             ui.Col("max GPU", right=True), ui.Col("window", right=True)],
            [[x.cluster, x.environment, x.cloud, x.region,
              (x.state, _state_style(x.state)), _verb(x), str(x.nodes),
              "-" if x.max_gpu_utilization is None else f"{x.max_gpu_utilization:.1f}%",
              "-" if x.window_minutes is None else f"{x.window_minutes}m"] for x in outcomes]))
        o.print()
        for x in outcomes:
            o.line((f"{x.environment}/{x.cluster}", "cyan"), f": {x.reason}")
            for r in x.reservations:
                cost = f"{ui.money(r.usd_per_day)}/day while unused" if r.usd_per_day is not None \
                    else r.note
                o.print(f"keeps billing: reservation {r.id} ({r.count} x "
                        f"{r.instance_type}, {r.zone or r.region}): {cost}", indent=4)
    if report.undeclared:
        o.print()
        o.line(("not declared by the program", "bold yellow"),
               f": {ui.plural(len(report.undeclared), 'group')} tagged like a cluster, left "
               f"alone (only groups carrying {tags.DECLARED} count; docs/reaper.md)")
        for u in report.undeclared:
            o.print(f"{u['environment']}/{u['cluster']} ({u['cloud']} {u['region']}): "
                    f"{u['reason']}", indent=4)
    o.print()
    if report.apply:
        o.print("applied.", style="bold")
    else:
        o.line(("dry run:", "bold"), " nothing changed (pass --apply to act)")
    if audit_error:
        o.line(("audit log NOT written", "bold red"), f": {audit_error}; nothing was acted on "
               "after that")
    elif audit_path:
        o.print(f"audit log: {audit_path}")
    if report.failed:
        o.line(("some clusters FAILED", "bold red"),
               " (state error): see reasons above; exit code 1")
