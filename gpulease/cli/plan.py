"""`gpulease plan`: the offline, cost-tagged plan of a stack (the same program `pulumi up` runs)."""
from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any, Optional

from gpulease import __version__, clock
from gpulease.cli import COMMANDS, ui
from gpulease.cli.common import FORMATS, add_output_args, add_stack_args, load_stack, print_json
from gpulease.errors import EXIT_COST_INCREASE, EXIT_OK, EXIT_POLICY, ConfigError, Finding
from gpulease.purchase import CAPACITY_BLOCK

DESCRIPTION = """\
Run the gpulease Pulumi program offline, in-process under Pulumi's mock runtime (no cloud,
no credentials, no Pulumi CLI), and print what `pulumi up` would create: the policy's choice
per cluster, every resource with its cost tags and estimated monthly cost, storage tiers,
totals against the environment's budget, guardrail violations, and conformance findings
(every input the cloud APIs constrain, checked against the specs botocore,
google-cloud-compute and google-cloud-storage ship).

The text lists the resources that cost money and counts the free ones (--all-resources lists
every resource). With `--diff` the text is the cost diff, per resource and per cluster (before,
after, change), a summary of the plan and, with --fail-on-increase, the gate's verdict with its
reason; --show-plan prints the whole plan before it, --diff-all lists free additions and
removals too. With gpulease:gate set, the cost gate's thresholds (warn / block on the monthly $
increase, % increase and total) are judged and printed, warnings on stderr too; --ack LABEL
(or GPULEASE_GATE_ACK) passes in a pull-request label that acknowledges a block
(docs/guardrails.md "Thresholds"). Progress goes to stderr; `--format json` (or `--json`) prints one document on
stdout, `--format html` the HTML report; `--out FILE` writes either to FILE. `gpulease
explain` tells why each cluster was placed where it is."""

EPILOG = """\
examples:
  gpulease plan --stack dev                         the plan of stacks/Pulumi.dev.yaml
  gpulease plan --stack prod --json > prod-plan.json   save it for a later --diff
  gpulease plan --stack prod --diff staging         what prod costs over staging
  gpulease plan --stack prod --diff prod-plan.json --fail-on-increase 10   CI cost gate
  gpulease plan --stack prod --diff prod-plan.json --ack cost-increase-approved
                                                    gpulease:gate, a block acknowledged
  gpulease plan --stack prod --against prod-plan.json   what the next `pulumi up` does to
                                                        each resource (or: a `pulumi stack
                                                        export` file)
  gpulease plan --stack prod --now 2026-12-10T09:00:00Z   as of a moment (quotes, windows)
  gpulease plan --stack prod --format json --out prod-plan.json    the same as --json > FILE
  gpulease plan --stack prod --html report.html --monitoring monitoring/
  gpulease plan --config stacks/Pulumi.dev.yaml --catalog-version 2026.12.03

exit codes (the reason is printed on stderr):
  0 ok (gate warnings and acknowledged blocks included) · 2 bad input (nothing planned) ·
  3 the total monthly cost rose more than --fail-on-increase, or crossed a gpulease:gate
  block threshold that no --ack acknowledged · 4 a mandatory guardrail failed or a
  conformance error was found, a Capacity Block would be bought without a pinned, approved
  quote, a pinned block does not fit the plan (another cloud, region, type or node count:
  docs/deploy.md), or (--against) the next `pulumi up` would replace or delete a prepaid or
  committed resource
  (4 wins over 3: a plan the clouds would reject cannot be deployed at any cost)"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help=COMMANDS["plan"],
                       description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_stack_args(p)
    add_output_args(p, formats=FORMATS + ("markdown",))
    p.add_argument("--diff", metavar="STACK|PLAN.json",
                   help="compare costs with another stack or a saved `plan --json` file; the "
                        "text shows the diff (--show-plan: the whole plan too)")
    p.add_argument("--show-plan", action="store_true",
                   help="with --diff: print the whole plan before the diff")
    p.add_argument("--diff-all", action="store_true",
                   help="with --diff: also list resources added or removed at $0.00/month "
                        "and clusters whose cost did not change")
    p.add_argument("--fail-on-increase", metavar="PCT", type=percent,
                   help="with --diff: exit 3 when the total monthly cost rises more than PCT %% "
                        "(a finite number >= 0; docs/cli.md \"The cost gate\" says what the "
                        "gate trusts)")
    p.add_argument("--ack", metavar="LABEL", action="append", default=[],
                   help="an acknowledgement passed in, e.g. a pull-request label (repeatable; "
                        "also GPULEASE_GATE_ACK=label1,label2): when gpulease:gate.acknowledged "
                        "lists it, a block threshold crossed is a recorded warning, exit 0")
    p.add_argument("--against", metavar="PREVIOUS",
                   help="what the next `pulumi up` would do to each resource against a previous "
                        "`gpulease plan --json` file or a `pulumi stack export` file: create, "
                        "update, replace (with the property forcing it), delete, unchanged, and "
                        "the cost effect; exit 4 if it would replace or delete a prepaid or "
                        "committed resource (opt in: gpulease:allow_prepaid_replacement); exit 2 "
                        "if PREVIOUS is another project's or stack's, or contradicts itself")
    p.add_argument("--html", metavar="PATH", help="also write a self-contained HTML report "
                   "(what --format html prints)")
    p.add_argument("--monitoring", metavar="DIR",
                   help="also write Prometheus alert rules and a Grafana dashboard for the plan")
    p.add_argument("--all-resources", action="store_true",
                   help="list every resource, free ones too (default: the free ones are "
                        "counted by type)")
    p.add_argument("--now", metavar="TIME", type=_utc_time,
                   help="plan as of this RFC 3339 UTC time (e.g. 2026-12-10T09:00:00Z): what the "
                        "offline lookups answer then (Capacity Block quotes expire and change "
                        "daily) and where pinned blocks are in their window (default: now)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--from-preview", metavar="FILE",
                     help="cost the resources of a real `pulumi preview --json` document instead "
                          "of the offline run's (gpulease's cost tags, else the offline plan by "
                          "URN, else the catalog for EC2/GCE instances; others listed as "
                          "unknown, never $0; docs/pipeline.md)")
    src.add_argument("--from-state", metavar="FILE",
                     help="the same for a `pulumi stack export` file")
    p.add_argument("--run-meta", metavar="FILE",
                   help="write the run's metadata (seconds the program took, the moment it was "
                        "judged at, gpulease's version) to FILE as JSON; the plan itself holds "
                        "none, so two runs of an unchanged stack print the same plan")
    p.add_argument("--show-inputs", action="store_true",
                   help="print each resource's declared inputs in the text output (lists "
                        "every resource)")
    p.set_defaults(func=run)


def _utc_time(text: str) -> float:
    from gpulease.clock import parse_epoch

    try:
        return parse_epoch(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def percent(text: str) -> float:
    """--fail-on-increase: a finite, non-negative percentage (nan, inf or -5 would let any
    rise through or fail every plan)."""
    import math

    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (a percentage, e.g. "
                                         f"10) (got {text!r})")
    return value


def make_plan(args: argparse.Namespace, stack_arg: str | None = None,
              steps: Optional[ui.Steps] = None):
    """Validate, decide, run the program under mocks, evaluate guardrails.

    ``steps`` is told each step (progress on stderr). Returns (plan document, the program run)."""
    step = steps.step if steps is not None else (lambda _m: None)
    step("reading the stack and the price catalog")
    loaded = load_stack(args, stack_arg=stack_arg, announce_warnings=False)
    from gpulease.inventory.model import load_for

    # what the accounts already paid for (gpulease:inventory, else the cache): exit 2 here
    # when the key names no file or the file is not an inventory
    inventory = load_for(loaded.spec)
    step("deciding placement (policy)")
    from gpulease.policy import decide

    import datetime as _dt

    now = getattr(args, "now", None)
    # located policy errors before anything runs (judged at the same moment as the program)
    decide(loaded.spec, loaded.catalog, now=None if now is None else
           _dt.datetime.fromtimestamp(now, _dt.timezone.utc))
    step("loading the Pulumi SDK and providers")
    from gpulease.planner.plan import build_plan, run as run_program

    t0 = time.perf_counter()
    step(f"running the Pulumi program under mocks ({loaded.source})")
    prun = run_program(loaded.values, stack=loaded.spec.stack,
                       catalog_path=getattr(args, "catalog", None),
                       catalog_version=getattr(args, "catalog_version", None),
                       now=getattr(args, "now", None), source=loaded.source)
    step("costing every resource")
    plan = build_plan(prun, stack=loaded.spec.stack)
    plan["source"] = loaded.source
    plan["inventory"] = _inventory_header(inventory, prun.now)
    plan["dynamic_providers"] = _check_dynamic(args, loaded, prun, step)
    step("checking guardrails")
    plan["violations"] = _violations(prun, loaded.spec)
    step("checking conformance with the cloud APIs' specs")
    plan["conformance"] = _conformance(prun)
    # run metadata stays out of the plan (two runs of an unchanged stack print the same
    # document): `--run-meta FILE` writes it
    args._run_meta = {"elapsed_s": round(time.perf_counter() - t0, 2),
                      "judged_at": clock.format_utc(prun.now),
                      "gpulease_version": __version__}
    return plan, prun


def _inventory_header(inventory, now: Optional[float]) -> Optional[dict]:
    """The plan's ``inventory`` object (None: the plan used none), judged at the plan's
    moment."""
    import datetime as _dt

    from gpulease.inventory.model import plan_header

    at = _dt.datetime.now(_dt.timezone.utc) if not now else \
        _dt.datetime.fromtimestamp(now, _dt.timezone.utc)
    return plan_header(inventory, at)


def _check_dynamic(args: argparse.Namespace, loaded, prun, step) -> list[dict]:
    """gpulease's own dynamic providers checked through Pulumi's host code, as the engine
    checks them at `pulumi preview` (inputs from resources the update creates unknown) and at
    `pulumi up` (docs/offline-plan.md); exit 2 when either would stop there."""
    from gpulease.planner.dynamic import check_dynamic, is_dynamic, run_preview
    from gpulease.planner.plan import run as run_program

    if not any(is_dynamic(r.type) for r in prun.custom):
        return []
    step("running the program as `pulumi preview` sees it (provider outputs unknown) for the "
         "clusters holding a dynamic resource")
    preview = run_preview(prun, lambda clusters: run_program(
        loaded.values, stack=loaded.spec.stack, catalog_path=getattr(args, "catalog", None),
        catalog_version=getattr(args, "catalog_version", None), preview=True, now=prun.now,
        clusters=clusters, source=loaded.source))
    step("checking gpulease's dynamic providers through Pulumi's host code")
    return check_dynamic(prun, preview, stack=loaded.spec.stack)


def _violations(prun, spec) -> list[dict]:
    from gpulease.guardrails.evaluate import evaluate

    ledger = getattr(prun.result, "ledger", None)
    return evaluate(prun.resources, budget_monthly_usd=spec.budget_monthly_usd,
                    environment=spec.environment,
                    planned_monthly_usd=ledger.monthly_usd if ledger else None,
                    planned_one_time_usd=ledger.one_time_usd if ledger else None)


def _conformance(prun) -> list[dict]:
    from gpulease.conformance import check

    return check(prun.resources)


def blocks_deploy(plan: dict[str, Any]) -> bool:
    """A mandatory guardrail violation or a conformance error: exit 4."""
    return any(v.get("level") == "mandatory" for v in plan.get("violations", ())) or any(
        f.get("level") == "error" for f in plan.get("conformance", ()))


def is_saved_plan(ref: str) -> bool:
    """--diff REF names a saved plan file (else a stack): a .json name, a path, or a file."""
    return ref.endswith(".json") or "/" in ref or Path(ref).exists()


def load_baseline(ref: str) -> Optional[dict[str, Any]]:
    """The saved plan --diff names, checked as untrusted input before anything is planned
    (gpulease.planner.saved); None when REF names a stack (planned later). A REF that is
    neither is bad input."""
    if is_saved_plan(ref):
        from gpulease.planner.saved import load_saved_plan

        return load_saved_plan(ref, flag="--diff")
    from gpulease.config import stack_file

    try:
        stack_file(ref)
    except ConfigError as exc:
        raise ConfigError([Finding("--diff", f"{ref!r} is neither a saved plan file nor a stack: "
                                   + "; ".join(f.message for f in exc.findings))]) from None
    return None


def _plan_other(args: argparse.Namespace, ref: str,
                steps: Optional[ui.Steps] = None) -> dict[str, Any]:
    other = argparse.Namespace(**{**vars(args), "stack": ref, "config": None})
    if steps is not None:
        steps.step(f"planning {ref} to compare with")
    return make_plan(other, stack_arg=ref)[0]


def run(args: argparse.Namespace) -> int:
    if args.fail_on_increase is not None and not args.diff:
        raise ConfigError([Finding("--fail-on-increase", "needs --diff STACK|PLAN.json")])
    if args.diff_all and not args.diff:
        raise ConfigError([Finding("--diff-all", "needs --diff STACK|PLAN.json")])
    if args.show_plan and not args.diff:
        raise ConfigError([Finding("--show-plan", "needs --diff STACK|PLAN.json (without "
                                   "--diff the plan is what is shown)")])
    acks = _acks(args)
    label = args.stack or args.config
    diff = None
    against = None
    # a saved baseline is read (and refused, exit 2) before the plan runs
    baseline = load_baseline(args.diff) if args.diff else None
    with ui.steps(f"planning {label}", piped_lines=not args.json) as steps:
        previous = None
        if getattr(args, "against", None):
            from gpulease.planner.against import load_previous

            steps.step(f"reading {args.against}")
            previous = load_previous(args.against)
        external = None
        if getattr(args, "from_preview", None) or getattr(args, "from_state", None):
            from gpulease.planner import external as ext_mod

            steps.step(f"reading {args.from_preview or args.from_state}")
            external = (ext_mod.load_preview(args.from_preview) if args.from_preview
                        else ext_mod.load_state(args.from_state))
        plan, prun = make_plan(args, steps=steps)
        if previous is not None:
            from gpulease.planner.against import check_identity, plan_project

            # another project's or stack's state, before anything is compared or written
            check_identity(previous, stack=plan["stack"], project=plan_project(plan))
            _check_opt_ins(prun.result.decision, previous)
        if external is not None:
            flag = "--from-preview" if args.from_preview else "--from-state"
            if external["stack"] and external["stack"] != plan["stack"]:
                raise ConfigError([Finding(flag, f"{external['source']} is of stack "
                                           f"\"{external['stack']}\", this plan of stack "
                                           f"\"{plan['stack']}\": cost a stack's own preview")])
            steps.step("costing the document's resources")
            plan = ext_mod.cost(external, plan, prun.result.catalog)
        if getattr(args, "run_meta", None):
            _write_run_meta(args.run_meta, {"stack": plan["stack"], **args._run_meta})
            steps.note(f"wrote {args.run_meta}")
        if previous is not None:
            from gpulease.planner.against import compare

            steps.step(f"comparing with {args.against} as the next `pulumi up` would")
            against = compare(previous, plan, stack=plan["stack"],
                              allow=prun.result.decision.stack.allow_prepaid_replacement)
        if args.diff:
            from gpulease.planner.diff import diff_plans

            other = baseline if baseline is not None else _plan_other(args, args.diff, steps)
            steps.step("comparing costs")
            diff = diff_plans(other, plan)
        if args.html:
            from gpulease.planner.html import write_html

            steps.step("writing the HTML report")
            # creates missing directories; exit 2 if unwritable
            written = write_html(plan, args.html)
            steps.note(f"wrote {written}")
        if args.monitoring:
            from gpulease.monitoring import write_monitoring

            steps.step("writing alert rules and the dashboard")
            # creates the directory; exit 2 when it is a file or unwritable
            for path in write_monitoring(prun.result.decision, args.monitoring):
                steps.note(f"wrote {path}")
    if diff is not None and args.fail_on_increase is not None:
        diff["gate"] = gate(diff, args.fail_on_increase)
    from gpulease.guardrails.gate import is_configured

    settings = prun.result.decision.stack.gate
    configured = is_configured(settings)   # else only --fail-on-increase: its own line
    thresholds = judge_gate(plan, diff, settings, acks=acks,
                            fail_on_increase=args.fail_on_increase)
    if thresholds is None and args.ack:
        ui.warning("--ack: nothing to acknowledge: the stack sets no gpulease:gate thresholds "
                   "and --fail-on-increase is not given")
    if thresholds is not None:
        from gpulease.guardrails.gate import warnings as gate_warnings

        for r in gate_warnings(thresholds):
            ui.warning(f"cost gate [{r['level']}]: {r['message']}")
    if args.format != "table":
        # the document holds the warnings; stderr carries them too, for a script that reads
        # stderr (docs/cli.md: warnings go to stderr whatever the format)
        for w in plan.get("warnings") or ():
            ui.warning(str(w))
    if args.format == "json":
        doc = dict(plan)
        if diff is not None:
            doc["diff"] = diff
        if against is not None:
            doc["against"] = against
        if thresholds is not None:
            doc["gate"] = thresholds
        print_json(doc)
    elif args.format == "html":
        from gpulease.planner.html import render_html

        ui.out().stream.write(render_html(plan))
    elif args.format == "markdown":
        from gpulease.pipeline.markdown import render as render_markdown

        doc = dict(plan)
        if diff is not None:
            doc["diff"] = diff
        if against is not None:
            doc["against"] = against
        if thresholds is not None:
            doc["gate"] = thresholds
        ui.out().stream.write(render_markdown(doc))
    else:
        o = ui.out()
        if diff is None or args.show_plan:
            render_plan(plan, o, all_resources=args.all_resources or args.show_inputs,
                        show_inputs=args.show_inputs)
            o.print()
        if diff is not None:
            render_diff(diff, o, show_all=args.diff_all)
            if not args.show_plan:
                o.print()
                render_summary(plan, o)
            if diff.get("gate") and not configured:
                o.print()
                render_gate(diff["gate"], o)
            o.print()
        if thresholds is not None and configured:
            render_thresholds(thresholds, o)
            o.print()
        if against is not None:
            render_against(against, o)
            o.print()
        o.line(("why:", "bold"), " " + explain_hint(args, plan))
    return _exit(plan, diff, args, against, thresholds)


def _acks(args: argparse.Namespace) -> list[str]:
    """The acknowledgements passed in: every --ack, then GPULEASE_GATE_ACK's labels."""
    import os

    from gpulease.guardrails.gate import ACK_ENV, parse_labels

    for value in args.ack or ():
        if not value.strip():
            raise ConfigError([Finding("--ack", "an empty label acknowledges nothing: pass the "
                                       "label as gpulease:gate.acknowledged lists it, e.g. "
                                       "--ack cost-increase-approved")])
    return [v.strip() for v in args.ack or ()] + parse_labels(os.environ.get(ACK_ENV))


def judge_gate(plan: dict, diff: Optional[dict], settings: Optional[dict], *,
               acks: list[str], fail_on_increase: Optional[float]) -> Optional[dict]:
    """The plan's ``gate`` object (gpulease.guardrails.gate), judged from the same numbers the
    JSON carries (``totals``, ``diff.total``); None when neither gpulease:gate sets a
    threshold nor --fail-on-increase is given (then --ack has nothing to acknowledge)."""
    from gpulease.guardrails.gate import evaluate, is_configured

    if not is_configured(settings) and fail_on_increase is None:
        return None
    doc = {"totals": plan["totals"], "diff": diff}
    return evaluate(settings, doc, acks=acks, fail_on_increase=fail_on_increase)


def render_thresholds(g: dict, o: ui.Out) -> None:
    """The gate's verdict per threshold (gpulease:gate), the rules it could not judge."""
    from gpulease.guardrails.gate import ACKNOWLEDGED, BLOCK, OK, WARN

    head = {BLOCK: ("BLOCKED, exit 3", "bold red"), ACKNOWLEDGED:
            ("acknowledged block, exit 0", "yellow"), WARN: ("warning", "yellow"),
            OK: ("passed", "green")}[g["level"]]
    o.line(("Cost gate (gpulease:gate): ", "bold"), head)
    colors = {BLOCK: "red", ACKNOWLEDGED: "yellow", WARN: "yellow", OK: "green"}
    for r in g["results"]:
        o.line("  ", (f"[{r['level']}]", colors[r["level"]]), f" {r['message']}")
    for n in g["not_judged"]:
        o.line("  ", ("[not judged]", "dim"), f" {n['rule']}: {n['reason']}")


def gate(diff: dict, pct: float) -> dict:
    """The cost gate's verdict on a diff (``diff["gate"]`` in the JSON): the threshold, whether
    the total rose past it (exit 3), and the reason, the same sentence stderr prints."""
    from gpulease.planner.diff import exceeds

    from gpulease.guardrails.gate import whole_change

    over = exceeds(diff, pct)
    delta, change = whole_change(diff["total"])
    what = _what_rose(diff["total"])
    if over:
        reason = increase_reason(diff, pct)
    elif delta < 0.005:
        reason = f"{what} did not rise ({ui.signed_money(delta)}, {_pct_text(change)})"
    else:
        reason = (f"{what} rose {ui.signed_money(delta)} "
                  f"({_pct_text(change)}), within --fail-on-increase {pct:g}%")
    return {"fail_on_increase": pct, "exceeded": over, "reason": reason}


def render_gate(g: dict, o: ui.Out) -> None:
    head = f"Cost gate (--fail-on-increase {g['fail_on_increase']:g}%): "
    if g["exceeded"]:
        o.line((head, "bold"), ("FAILED, exit 3", "bold red"), f" — {g['reason']}")
    else:
        o.line((head, "bold"), ("passed", "green"), f" — {g['reason']}")


def render_summary(plan: dict[str, Any], o: ui.Out) -> None:
    """What the diff text shows of the plan itself: its total against the budget and whether
    guardrails, conformance and warnings have anything to say (--show-plan prints it all)."""
    tot, b = plan["totals"], plan["budget"]
    mandatory = sum(1 for v in plan.get("violations", ()) if v.get("level") == "mandatory")
    advisory = len(plan.get("violations", ())) - mandatory
    errors = sum(1 for f in plan.get("conformance", ()) if f.get("level") == "error")
    warnings = len(plan.get("warnings", ()))
    checks = []
    if mandatory or advisory:
        checks.append((f"guardrails: {ui.plural(mandatory, 'mandatory violation')}, "
                       f"{ui.plural(advisory, 'advisory')}", "red" if mandatory else "yellow"))
    else:
        checks.append(("guardrails: no violations", "green"))
    checks.append((f"conformance: {ui.plural(errors, 'error')}", "red") if errors
                  else ("conformance: ok", "green"))
    if warnings:
        checks.append((ui.plural(warnings, "warning"), "yellow"))
    once = (f" + one-time {ui.money(tot['one_time_usd'])}" if tot.get("one_time_usd") else "")
    parts: list = [("Plan", "bold"), f" of {plan['stack']}: {ui.money(tot['monthly_usd'])}/month"
                   f"{once} ({plural_resources(tot)}) · budget {ui.money(b['monthly_usd'])} · "]
    for i, c in enumerate(checks):
        parts += ([" · "] if i else []) + [c]
    o.line(*parts)
    o.print("--show-plan prints the whole plan", indent=2)


def plural_resources(tot: dict) -> str:
    return ui.plural(int(tot.get("resources") or 0), "resource")


def explain_hint(args: argparse.Namespace, plan: dict[str, Any]) -> str:
    """The `gpulease explain` command that tells why this plan's clusters run where they run."""
    import shlex

    target = f"--stack {shlex.quote(args.stack)}" if args.stack else \
        f"--config {shlex.quote(args.config)}"
    names = [c["name"] for c in plan.get("clusters", ())]
    cluster = f" [--cluster {names[0]}]" if len(names) > 1 else ""
    return f"gpulease explain {target}{cluster}"


def _check_opt_ins(decided, previous: dict) -> None:
    """Exit 2 (before anything is written) when gpulease:allow_prepaid_replacement names a
    cluster neither the stack nor PREVIOUS has (``planner.against.opt_in_findings``)."""
    from gpulease.config.messages import headline
    from gpulease.planner.against import opt_in_findings

    stack = decided.stack
    if previous.get("stack") and previous["stack"] != stack.stack:
        return      # another stack's: compare() refuses it with that reason
    bad = opt_in_findings(stack.allow_prepaid_replacement,
                          [c.name for c in stack.clusters] + [n for n, _ in decided.retired],
                          previous, source=stack.source)
    if bad:
        raise ConfigError(bad, headline=headline(stack.source))


def _write_run_meta(path: str, meta: dict) -> None:
    """--run-meta FILE: the run's metadata as JSON (directories created; exit 2 if not
    writable)."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ConfigError([Finding("--run-meta", f"cannot write {path}: {exc.strerror or exc}; "
                                   "give a writable file path")]) from None


def _exit(plan: dict[str, Any], diff: Optional[dict], args: argparse.Namespace,
          against: Optional[dict] = None, thresholds: Optional[dict] = None) -> int:
    """The exit code, with its reason on stderr: 4 (guardrail / conformance / prepaid
    replacement) wins over 3 (a gate block no acknowledgement turned into a warning)."""
    from gpulease.guardrails.gate import BLOCK, FLAG_RULE

    code = EXIT_OK
    if thresholds is None and diff is not None and args.fail_on_increase is not None:
        thresholds = judge_gate({"totals": plan.get("totals") or {}}, diff, None, acks=[],
                                fail_on_increase=args.fail_on_increase)
    if thresholds is not None and thresholds["level"] == BLOCK:
        blocked = [r for r in thresholds["results"] if r["level"] == BLOCK]
        if [r["rule"] for r in blocked] == [FLAG_RULE] and diff is not None:
            why = increase_reason(diff, args.fail_on_increase)
        else:
            why = "; ".join(r["message"] for r in blocked)
        code = ui.exit_reason(EXIT_COST_INCREASE, why)
    if blocks_deploy(plan):
        code = ui.exit_reason(EXIT_POLICY, blocking_reason(plan)
                              + ("" if code == EXIT_OK else " (exit 4 wins over exit 3)"))
    if against is not None and against["blocked"]:
        from gpulease.planner.against import blocked_reason

        code = ui.exit_reason(EXIT_POLICY, blocked_reason(against))
    return code


def increase_reason(diff: dict, pct: float) -> str:
    """Which total rose, by how much, and how far over the --fail-on-increase threshold."""
    from gpulease.guardrails.gate import whole_change

    t, o, n = diff["total"], diff["old"], diff["new"]
    delta, change = whole_change(t)
    old_once, new_once = t.get("old_one_time_usd") or 0, t.get("new_one_time_usd") or 0
    rise = (f"{_what_rose(t)} rose {ui.signed_money(delta)} from "
            f"{ui.money(t['old_monthly_usd'] + old_once)} ({o['stack']}) to "
            f"{ui.money(t['new_monthly_usd'] + new_once)} ({n['stack']})")
    if change is None:
        return f"{rise}: a rise from nothing exceeds any --fail-on-increase {pct:g}%"
    return (f"{rise}, {change:+.1f}%, which is {change - pct:.1f} points over "
            f"--fail-on-increase {pct:g}%")


def _what_rose(t: dict) -> str:
    """What the gate judges: the monthly total, or with one-time purchases in either plan the
    monthly total plus those purchases counted whole (docs/guardrails.md)."""
    if t.get("old_one_time_usd") or t.get("new_one_time_usd"):
        return "the total cost (monthly plus one-time purchases, counted whole)"
    return "the total monthly cost"


def blocking_reason(plan: dict[str, Any]) -> str:
    """Which mandatory guardrails and conformance rules fail, counted by name."""
    parts = []
    mandatory = Counter(v["policy"] for v in plan.get("violations", ())
                        if v.get("level") == "mandatory")
    if mandatory:
        parts.append(f"{ui.plural(sum(mandatory.values()), 'mandatory guardrail violation')} ("
                     + ", ".join(_counted(mandatory)) + ")")
    errors = [f for f in plan.get("conformance", ()) if f.get("level") == "error"]
    if errors:
        rules = Counter(f"{f['rule']} at {f['resource']}.{f['path']}" for f in errors)
        parts.append(f"{ui.plural(len(errors), 'conformance error')} ("
                     + ", ".join(_counted(rules, limit=3)) + ")")
    return " and ".join(parts) + " block the deploy; fix them and plan again"


def _counted(counter: Counter, limit: int = 6) -> list[str]:
    items = [f"{k} ×{n}" if n > 1 else k for k, n in counter.most_common()]
    return items[:limit] + ([f"{len(items) - limit} more"] if len(items) > limit else [])


# ---- text rendering -------------------------------------------------------------------------
def _age(t: dict) -> str:
    return f"day {t['from_day']}+" if t["to_day"] is None else \
        f"day {t['from_day']}–{t['to_day']}"


def _budget_cell(b: dict, total: float) -> list:
    used = f" ({total / b['monthly_usd'] * 100:.1f}% used)" if b["monthly_usd"] else ""
    if b["over"]:
        return [("OVER BUDGET", "bold red"), f" by {ui.money(-b['headroom_usd'])}{used}"]
    return [f"headroom {ui.money(b['headroom_usd'])}{used}"]


def render_plan(plan: dict[str, Any], o: ui.Out, *, all_resources: bool = False,
                show_inputs: bool = False) -> None:
    """The plan as text on ``o`` (stdout): clusters, resources, storage, totals, findings."""
    cat = plan["catalog"]
    o.line(("gpulease plan", "bold"), f" · stack {plan['stack']} ({plan.get('source', '')}) · "
           f"catalog {cat['version']} (built {cat['as_of']})")
    if plan.get("prices"):
        o.line("Prices: ", prices_text(plan["prices"]))
    if plan.get("inventory"):
        from gpulease.inventory.model import header_text

        text = header_text(plan["inventory"])
        o.line("Inventory: ", (text, "yellow") if plan["inventory"].get("stale") else text)
    if plan.get("external"):
        x = plan["external"]
        by = ", ".join(f"{n} by {b}" for b, n in x["priced_by"].items() if n)
        o.line("Costed from: ", f"{x['source']} ({x['kind']}; {by})")
        if x["unknown"]:
            o.line(("Unknown cost: ", "yellow"), f"{len(x['unknown'])} resource(s) gpulease "
                   "cannot price: " + ", ".join(sorted({u['type'] for u in x['unknown']})))
        if x["only_in_plan"] or x["only_in_document"]:
            o.line("Drift: ", f"{len(x['only_in_plan'])} resource(s) of the offline plan not in "
                   f"the document, {len(x['only_in_document'])} in the document not in the plan")
    o.print()
    o.print("Clusters", style="bold")
    o.print(o.table(
        [ui.Col("cluster", style="cyan"), ui.Col("cloud"), ui.Col("region"), ui.Col("zone"),
         ui.Col("instance"), ui.Col("nodes"), ui.Col("purchase"), ui.Col("template", wrap=True),
         ui.Col("network", wrap=True), ui.Col("$/hour", right=True),
         ui.Col("$/month", right=True, style="bold")],
        [[c["name"], c["cloud"], c["region"], c.get("zone") or "-", c["instance_type"],
          ui.nodes_text(c["nodes"], c["gpus_per_node"], c["gpu"]), ui.purchase_mix(c["purchase"]),
          c["template"], c["network"], ui.money(c["hourly_usd"]),
          ui.money(c["monthly_usd"]) if not c.get("one_time") else
          f"{ui.money(c['monthly_usd'])} + one-time {ui.money(c['one_time']['usd'])}"]
         for c in plan["clusters"]], indent=2))
    for c in plan["clusters"]:
        o.print()
        o.line((c["name"], "cyan"), f": {c['rationale']}", indent=2)
        if c.get("one_time"):
            t = c["one_time"]
            o.line(("  " + c["name"], "cyan"),
                   f": one-time {ui.money(t['usd'])} ({ui.model_word(t['model'])}), "
                   f"{t['from']} to {t['until']}: never in a $/month figure; the budget "
                   "counts it whole (docs/policy.md, \"Windows: one-time money\")")
        if c.get(CAPACITY_BLOCK):
            o.line(("  " + c["name"], "cyan"),
                   ": Capacity Block " + capacity_block_text(c[CAPACITY_BLOCK]))
        for x in c.get("coverage") or ():
            o.line(("  " + c["name"], "cyan"), f": {x['why']}")
    _render_owned(plan, o)
    o.print()
    _render_resources(plan, o, all_resources=all_resources, show_inputs=show_inputs)
    if plan["storage"]:
        o.print()
        o.print("Storage tiers", style="bold")
        o.print(o.table(
            [ui.Col("storage", style="cyan"), ui.Col("home"), ui.Col("class"), ui.Col("age"),
             ui.Col("share", right=True), ui.Col("$/GB-month", right=True),
             ui.Col("$/month", right=True, style="bold")],
            [row for s in plan["storage"] for row in _storage_rows(s)], indent=2))
        for s in plan["storage"]:
            if s.get("basis"):
                o.print(f"  {s['name']}: {s['basis']}")
    o.print()
    tot, b = plan["totals"], plan["budget"]
    rows = [["Cost by purchase model", ui.MIX_SEP.join(
        f"{ui.model_word(k)} {ui.money(v)}" for k, v in tot["by_purchase_model"].items())
        or "none"]]
    if tot["by_storage_tier"]:
        rows.append(["Cost by storage tier", ui.MIX_SEP.join(
            f"{k} {ui.money(v)}" for k, v in tot["by_storage_tier"].items())])
    for label, value in rows:
        o.line(f"{label}: ", value)
    once = tot.get("one_time_usd") or 0
    if once:   # never inside a $/month figure (docs/policy.md, "Windows: one-time money")
        o.line("Total: ", (f"{ui.money(tot['monthly_usd'])}/month", "bold"),
               " + ", (f"one-time {ui.money(once)}", "bold"),
               f" (window purchases; the budget counts them whole in the month they are "
               f"bought: {ui.money(tot['monthly_usd'] + once)}) estimated · "
               f"{ui.money(tot['hourly_usd'])}/hour with every node up")
    else:
        o.line("Total: ", (f"{ui.money(tot['monthly_usd'])}/month", "bold"),
               f" estimated · {ui.money(tot['hourly_usd'])}/hour with every node up")
    o.line(f"Budget: {ui.money(b['monthly_usd'])}/month · ",
           *_budget_cell(b, tot["monthly_usd"] + (tot.get("one_time_usd") or 0)))
    o.print()
    render_findings(plan, o)


def _render_owned(plan: dict[str, Any], o: ui.Out) -> None:
    """Owned pools (docs/owned.md): each pool's amortised and marginal $/GPU-hour and idle
    line, and where each cluster runs (owned, burst on cloud, or cloud) and why."""
    owned = plan.get("owned") or {}
    if not owned.get("pools"):
        return
    o.print()
    o.print("Owned pools (charged at the amortised $/GPU-hour; marginal = power only)",
            style="bold")
    o.print(o.table(
        [ui.Col("pool", style="cyan"), ui.Col("site", wrap=True), ui.Col("GPUs"),
         ui.Col("used nodes", right=True), ui.Col("amortised $/GPU-h", right=True),
         ui.Col("marginal $/GPU-h", right=True), ui.Col("owned, idle $/month", right=True)],
        [[u["name"], u["site"], f"{u['gpus']} x {u['gpu']}",
          f"{u['used_nodes']}/{u['gpus'] // u['gpus_per_node']}",
          f"{u['amortised_usd_per_gpu_hour']:.4f}", f"{u['marginal_usd_per_gpu_hour']:.4f}",
          ui.money(u["idle_usd"])] for u in owned["pools"]], indent=2))
    for p in owned.get("placements") or ():
        share = p.get("owned")
        where = ("all on owned pool " + share["pool"] if p["share"] == "owned" else
                 f"{share['gpus']} GPUs on owned pool {share['pool']}, {p['cloud_gpus']} GPUs "
                 "(the burst) on cloud" if p["share"] == "burst" else "on cloud")
        cost = (f" · owned share {ui.money(share['monthly_usd'])}/month amortised "
                f"({ui.money(share['marginal_monthly_usd'])} marginal)" if share else "")
        o.line((p["cluster"], "cyan"), f": {where}{cost}", indent=2)
        for why in p.get("why") or ():
            o.line(f"- {why}", indent=4)


def prices_text(prices: dict) -> str:
    """The plan header's line on the prices it pays: their dates and estimates
    (``gpulease.catalog.provenance``; docs/catalog.md "Dates and estimates")."""
    from gpulease.catalog.provenance import header_text

    return header_text(prices)


def capacity_block_text(b: dict) -> str:
    """One line about a pinned Capacity Block: offering, nodes, zone, window, fee, approval."""
    from gpulease.model import parse_utc

    days = (parse_utc(b["end"]) - parse_utc(b["start"])) / 86400.0
    state = f" · {b['status']}" if b.get("status") else ""
    return (f"{b['offering_id']} (pinned): {b['instance_count']} x "
            f"{b['instance_type']} in {b['availability_zone']}, window {b['start']} -> "
            f"{b['end']} ({ui.plural(days, 'day')}), upfront {ui.money(b['upfront_fee_usd'])}, "
            + ("purchase approved" if b["purchase_approved"] else "NOT approved") + state)


def _storage_rows(s: dict[str, Any]) -> list[list[str]]:
    """A dataset's tiers, then what reading it and deleting early cost (when they do)."""
    home = f"{s['cloud']}:{s['region']}"
    rows = [[s["name"], home, t["storage_class"], _age(t), f"{t['share'] * 100:.0f}%",
             f"${t['usd_per_gb_month']}", ui.money(t["monthly_usd"])] for t in s["tiers"]]
    if s.get("retrieval_usd"):
        reads = s.get("reads_per_month") or 0
        rows.append([s["name"], home, "retrieval", f"{ui.plural(reads, 'read')}/month", "", "",
                     ui.money(s["retrieval_usd"])])
    if s.get("early_delete_usd"):
        rows.append([s["name"], home, "early deletion", "", "", "",
                     ui.money(s["early_delete_usd"])])
    return rows


def _render_resources(plan: dict[str, Any], o: ui.Out, *, all_resources: bool,
                      show_inputs: bool) -> None:
    res = plan["resources"]
    priced = [r for r in res if r["monthly_usd"] >= 0.005]
    free = [r for r in res if r["monthly_usd"] < 0.005]
    listed = res if all_resources else priced
    o.line(("Resources", "bold"), f": {len(res):,} declared, {len(priced):,} with a monthly "
           f"cost, {len(free):,} free")
    order = {c["name"]: i for i, c in enumerate(plan["clusters"])}
    listed = sorted(listed, key=lambda r: (r["cluster"] == "shared",
                                           order.get(r["cluster"], len(order)),
                                           ui.natural_key(r["cluster"]), -r["monthly_usd"],
                                           ui.natural_key(r["type"]), ui.natural_key(r["name"])))
    cols = [ui.Col("cluster", style="cyan"), ui.Col("type"), ui.Col("name"),
            ui.Col("purchase"), ui.Col("tags", right=True), ui.Col("$/month", right=True)]
    if not show_inputs:
        o.print(o.table(cols, [_resource_row(r) for r in listed], indent=2))
    else:   # a block per resource: its row, then its inputs (a table cannot span a row)
        for r in listed:
            cells = [c if isinstance(c, str) else c[0] for c in _resource_row(r)]
            o.line(("  " + cells[0], "cyan"), "  " + "  ".join(x for x in cells[1:] if x))
            o.print("inputs: " + json.dumps(r["inputs"], sort_keys=True)[:2000], indent=6)
    if free and not all_resources:
        kinds = Counter(ui.short_type(r["type"]).rsplit(":", 1)[-1] for r in free)
        o.line(f"  + {ui.plural(len(free), 'free resource')} (", *_free_kinds(kinds),
               "); --all-resources lists them")


def _free_kinds(kinds: Counter) -> list:
    items = [f"{n} {k}" for k, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))]
    shown = items[:8]
    return [", ".join(shown) + (f", {len(items) - 8} more types" if len(items) > 8 else "")]


def _resource_row(r: dict) -> list:
    cost = ui.money(r["monthly_usd"])
    return [r["cluster"], ui.short_type(r["type"]), r["name"],
            ui.model_word(r["purchase_model"]) if r.get("purchase_model") not in (None, "none")
            else "",
            str(len(r["tags"])) if r.get("tags") else "",
            (cost, "dim") if r["monthly_usd"] < 0.005 else (cost, "bold")]


def render_findings(plan: dict[str, Any], o: ui.Out) -> None:
    """Guardrail violations, conformance findings and warnings (or that there are none)."""
    vs = plan["violations"]
    if vs:
        o.print(f"Guardrail violations ({len(vs)})", style="bold")
        for v in vs:
            where = f"{v['resource']}: " if v.get("resource") else ""
            o.line("  ", (f"[{v['level']}]", "red" if v["level"] == "mandatory" else "yellow"),
                   f" {v['policy']}: {where}{v['message']}")
    else:
        o.line("Guardrails: ", ("no violations", "green"))
    render_conformance(plan.get("conformance", []), o)
    render_dynamic(plan.get("dynamic_providers") or [], o)
    render_disagreements(plan, o)
    if plan.get("owned_pools"):
        o.print()
        o.print(f"Owned pools ({len(plan['owned_pools'])})", style="bold")
        for line in plan["owned_pools"]:
            o.line("  ", line)
    if plan.get("warnings"):
        o.print()
        o.print(f"Warnings ({len(plan['warnings'])})", style="bold")
        for w in plan["warnings"]:
            o.line("  ", (str(w), "yellow"))


def render_dynamic(records: list[dict], o: ui.Out) -> None:
    """One line: gpulease's own dynamic providers passed Pulumi's host at preview and up."""
    if not records:
        return
    unknown = sorted({k for r in records for k in r["unknown_at_preview"]})
    verb = "passes" if len(records) == 1 else "pass"
    o.line("Dynamic providers: ", (f"{ui.plural(len(records), 'resource')} {verb} Pulumi's host "
                                    "check at preview and up", "green"),
           f" (unknown at preview: {', '.join(unknown)})" if unknown else "")


def render_disagreements(plan: dict[str, Any], o: ui.Out) -> None:
    """Prices the plan pays whose two sources differ by more than PRICE_DISAGREEMENT_PCT."""
    from gpulease.model import PRICE_DISAGREEMENT_PCT

    rows = [(c, d) for c in plan.get("clusters", []) for d in c.get("price_disagreements", [])]
    if not rows:
        return
    o.print()
    o.print(f"Price sources disagree ({len(rows)}; over {PRICE_DISAGREEMENT_PCT:g}%, the "
            "figure used is priced; why: gpulease explain)", style="bold")
    for c, d in rows:
        used = "-" if d["used_usd"] is None else f"{d['used_usd']:g}"
        o.line("  ", (f"{c['name']}", "yellow"),
               f": {c['cloud']}:{c['region']} {c['instance_type']} "
               f"{d['column'].replace('_', '-')} {used} $/h ({d['used_source']}, "
               f"{d['used_as_of']}) vs {d['other_usd']:g} ({d['other_source']}, "
               f"{d['other_as_of'] or 'date unknown'}, {d['diff_pct']:+.1f}%)")


def render_conformance(findings: list[dict], o: ui.Out) -> None:
    if not findings:
        o.line("Conformance: ", ("every constrained input matches its API spec", "green"))
        return
    errors = sum(1 for f in findings if f["level"] == "error")
    o.print()
    o.print(f"Conformance findings ({ui.plural(errors, 'error')}, "
            f"{ui.plural(len(findings) - errors, 'warning')})", style="bold")
    for f in findings:
        where = f"{f['resource']}" + (f" ({f['physical_name']})" if f.get("physical_name") else "")
        o.line("  ", (f"[{f['level']}]", "red" if f["level"] == "error" else "yellow"),
               f" {f['rule']}: {where}: {f['path']}: {f['message']}")
        o.print(f"spec: {f['spec']}", indent=6)


def render_diff(diff: dict, o: ui.Out, *, show_all: bool = False) -> None:
    """The cost diff: resources and clusters whose monthly cost changed (all with show_all),
    a summary line of what was hidden, and the total."""
    from gpulease.planner.diff import shown_clusters, shown_rows

    old, new, t = diff["old"], diff["new"], diff["total"]
    o.line(("Monthly cost diff", "bold"), f": {old['stack']} (catalog {old['catalog_version']})"
           f" -> {new['stack']} (catalog {new['catalog_version']})")
    rows = shown_rows(diff, show_all=show_all)
    marks = {"added": ("+", "green"), "removed": ("-", "red"), "changed": ("~", "yellow")}
    if rows:
        o.print(o.table(
            [ui.Col(""), ui.Col("cluster", style="cyan"), ui.Col("type"), ui.Col("name"),
             ui.Col("before", right=True), ui.Col("after", right=True),
             ui.Col("change", right=True)],
            [[marks[r["change"]], r["cluster"], ui.short_type(r["type"]), r["name"],
              ui.money(r["old_monthly_usd"]), ui.money(r["new_monthly_usd"]),
              (ui.signed_money(r["delta_usd"]), "red" if r["delta_usd"] > 0 else "green")]
             for r in rows], indent=2))
    else:
        o.print("no resource changes cost", indent=2)
    c = diff["counts"]
    hidden = len(diff["resources"]) - len(rows)
    o.print(f"{c['added']} added, {c['removed']} removed, {c['changed']} changed, "
            f"{c['unchanged']} unchanged"
            + (f"; {ui.plural(hidden, 'added or removed resource', 'added or removed resources')}"
               f" at $0.00/month not listed (--diff-all lists them)" if hidden else ""),
            indent=2)
    clusters = shown_clusters(diff, show_all=show_all)
    if clusters:
        o.print()
        o.print(o.table(
            [ui.Col("cluster", style="cyan"), ui.Col("before", right=True),
             ui.Col("after", right=True), ui.Col("change", right=True),
             ui.Col("%", right=True)],
            [[x["cluster"], ui.money(x["old_monthly_usd"]), ui.money(x["new_monthly_usd"]),
              ui.signed_money(x["delta_usd"]), _pct_text(x["pct"])] for x in clusters],
            indent=2))
    o.print()
    o.line("Total monthly: ", f"{ui.money(t['old_monthly_usd'])} -> ",
           (ui.money(t["new_monthly_usd"]), "bold"),
           f" ({ui.signed_money(t['delta_usd'])}, {_pct_text(t['pct'])})")


def render_against(a: dict, o: ui.Out) -> None:
    """The next `pulumi up` against PREVIOUS: every resource it would touch, why, what it
    costs, and the prepaid resources it would lose."""
    prev, c = a["previous"], a["counts"]
    o.line(("Next `pulumi up`", "bold"), f" against {prev['source']} (a previous "
           f"{'plan' if prev['kind'] == 'plan' else 'stack export'}): "
           + ", ".join(f"{c[k]} to {k}" for k in ("create", "update", "replace", "delete"))
           + f", {c['unchanged']} unchanged")
    marks = {"create": ("+", "green"), "delete": ("-", "red"), "update": ("~", "yellow"),
             "replace": ("+-", "red")}
    if a["resources"]:
        o.print(o.table(
            [ui.Col(""), ui.Col("cluster", style="cyan"), ui.Col("type"), ui.Col("name"),
             ui.Col("why", wrap=True), ui.Col("before", right=True), ui.Col("after", right=True)],
            [[marks[r["action"]], r["cluster"], ui.short_type(r["type"]), r["name"],
              _against_why(r), "" if r["old_monthly_usd"] is None else
              ui.money(r["old_monthly_usd"]),
              "" if r["new_monthly_usd"] is None else ui.money(r["new_monthly_usd"])]
             for r in a["resources"]], indent=2))
    m = a["monthly_usd"]
    o.line("  Monthly: ", f"{ui.money(m['before'])} -> ", (ui.money(m["after"]), "bold"),
           f" ({ui.signed_money(m['delta'])})"
           + (f"; one-time {ui.money(a['one_time_usd'])} (prepaid purchases)"
              if a["one_time_usd"] else ""))
    for b in a["allowed"]:
        o.line("  ", ("[allowed]", "yellow"), f" {b['action']} {b['name']}: {b['why']} "
               f"(gpulease:allow_prepaid_replacement lists {b['cluster']})")
    for b in a["blocked"]:
        o.line("  ", ("[blocked]", "red"), f" {b['action']} {b['name']}: {b['why']}")


def _against_why(r: dict) -> str:
    if r["action"] == "replace":
        return "replaced: " + ", ".join(r["replaced_by"]) + " changed"
    if r["action"] == "update":
        shown = r["properties"][:4]
        more = len(r["properties"]) - len(shown)
        return "updates " + ", ".join(shown) + (f" +{more}" if more > 0 else "") + (
            f" (may replace: {', '.join(r['may_replace'])})" if r.get("may_replace") else "")
    return {"create": "new", "delete": "no longer declared"}[r["action"]]


def _pct_text(p: Optional[float]) -> str:
    return "new" if p is None else f"{p:+.1f}%"
