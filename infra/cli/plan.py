"""`gpulease plan`: the offline, cost-tagged plan of a stack (the same program `pulumi up` runs)."""
from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from infra.cli.common import (add_json_arg, add_stack_args, load_stack, print_json, progress)
from infra.errors import (EXIT_COST_INCREASE, EXIT_OK, EXIT_POLICY, ConfigError, Finding)

DESCRIPTION = """\
Run the gpulease Pulumi program offline, in-process under Pulumi's mock runtime (no cloud,
no credentials, no Pulumi CLI), and print what `pulumi up` would create: the policy's choice
per cluster, every resource with its cost tags and estimated monthly cost, storage tiers,
totals against the environment's budget, guardrail violations, and conformance findings
(every input the cloud APIs constrain, checked against the specs botocore,
google-cloud-compute and google-cloud-storage ship)."""

EPILOG = """\
examples:
  gpulease plan --stack dev
  gpulease plan --stack prod --json > prod-plan.json
  gpulease plan --stack prod --diff staging
  gpulease plan --stack prod --diff prod-plan.json --fail-on-increase 10
  gpulease plan --stack prod --html report.html --monitoring monitoring/
  gpulease plan --config path/to/Pulumi.mystack.yaml --catalog my-prices.json

exit codes: 0 ok · 2 bad input · 3 cost increase over --fail-on-increase ·
            4 a mandatory guardrail failed or a conformance error was found (4 wins
              over 3: a plan the clouds would reject cannot be deployed at any cost)"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="offline cost-tagged plan of a stack",
                       description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_stack_args(p)
    add_json_arg(p)
    p.add_argument("--diff", metavar="STACK|PLAN.json",
                   help="compare costs with another stack or a saved `plan --json` file")
    p.add_argument("--fail-on-increase", metavar="PCT", type=float,
                   help="with --diff: exit 3 when the total monthly cost rises more than PCT %%")
    p.add_argument("--html", metavar="PATH", help="also write a self-contained HTML report")
    p.add_argument("--monitoring", metavar="DIR",
                   help="also write Prometheus alert rules and a Grafana dashboard for the plan")
    p.add_argument("--show-inputs", action="store_true",
                   help="print each resource's declared inputs in the text output")
    p.set_defaults(func=run)


def make_plan(args: argparse.Namespace, stack_arg: str | None = None):
    """Validate, decide, run the program under mocks, evaluate guardrails.

    Returns (plan document, the program run)."""
    from infra.planner.plan import build_plan, run as run_program
    from infra.policy import decide

    loaded = load_stack(args, stack_arg=stack_arg, announce_warnings=False)
    decide(loaded.spec, loaded.catalog)  # located policy errors before anything runs
    t0 = time.perf_counter()
    prun = run_program(loaded.values, stack=loaded.spec.stack,
                       catalog_path=getattr(args, "catalog", None),
                       catalog_version=getattr(args, "catalog_version", None))
    plan = build_plan(prun, stack=loaded.spec.stack)
    plan["source"] = loaded.source
    plan["violations"] = _violations(prun, loaded.spec)
    plan["conformance"] = _conformance(prun)
    plan["elapsed_s"] = round(time.perf_counter() - t0, 2)
    return plan, prun


def _violations(prun, spec) -> list[dict]:
    from infra.guardrails.evaluate import evaluate

    ledger = getattr(prun.result, "ledger", None)
    return evaluate(prun.resources, budget_monthly_usd=spec.budget_monthly_usd,
                    environment=spec.environment,
                    planned_monthly_usd=round(ledger.monthly_usd, 2) if ledger else None)


def _conformance(prun) -> list[dict]:
    from infra.conformance import check

    return check(prun.resources)


def blocks_deploy(plan: dict[str, Any]) -> bool:
    """A mandatory guardrail violation or a conformance error: exit 4."""
    return any(v.get("level") == "mandatory" for v in plan.get("violations", ())) or any(
        f.get("level") == "error" for f in plan.get("conformance", ()))


def _load_other(args: argparse.Namespace, ref: str) -> dict[str, Any]:
    p = Path(ref)
    if ref.endswith(".json") or p.is_file():
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError([Finding("--diff", f"cannot read {ref}: {exc.strerror}")]) from None
        except json.JSONDecodeError as exc:
            raise ConfigError([Finding("--diff", f"{ref} is not a saved `gpulease plan --json` "
                                       f"document (line {exc.lineno}: {exc.msg})")]) from None
    other = argparse.Namespace(**{**vars(args), "stack": ref, "config": None})
    return make_plan(other, stack_arg=ref)[0]


def run(args: argparse.Namespace) -> int:
    if args.fail_on_increase is not None and not args.diff:
        raise ConfigError([Finding("--fail-on-increase", "needs --diff STACK|PLAN.json")])
    label = args.stack or args.config
    if not args.json:
        progress(f"planning {label} offline (Pulumi program under mocks) ...")
    plan, prun = make_plan(args)
    code = EXIT_OK
    diff = None
    if args.diff:
        from infra.planner.diff import diff_plans, exceeds, render_diff_text

        other = _load_other(args, args.diff)
        diff = diff_plans(other, plan)
        if args.fail_on_increase is not None and exceeds(diff, args.fail_on_increase):
            code = EXIT_COST_INCREASE
    if args.html:
        from infra.planner.html import write_html

        written = write_html(plan, args.html)  # creates missing directories; exit 2 if unwritable
        if not args.json:
            progress(f"wrote {written}")
    if args.monitoring:
        from infra.monitoring import write_monitoring

        # creates the directory; exit 2 when it is a file or unwritable
        for path in write_monitoring(prun.result.decision, args.monitoring):
            if not args.json:
                progress(f"wrote {path}")
    if blocks_deploy(plan):
        code = EXIT_POLICY  # wins over EXIT_COST_INCREASE (see EPILOG)
    if args.json:
        doc = dict(plan)
        if diff is not None:
            doc["diff"] = diff
        print_json(doc)
    else:
        print(render_text(plan, show_inputs=args.show_inputs))
        if diff is not None:
            print()
            print(render_diff_text(diff))
    return code


# ---- text rendering -------------------------------------------------------------------------
def _money(v: float | None) -> str:
    return "-" if v is None else f"${v:,.2f}"


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)] if rows else [len(h) for h in headers]
    fmt = "  ".join("{:<%d}" % w for w in widths)
    out = [fmt.format(*headers), fmt.format(*["-" * w for w in widths])]
    out += [fmt.format(*[str(x) for x in r]) for r in rows]
    return "\n".join(out)


def render_text(plan: dict[str, Any], *, show_inputs: bool = False) -> str:
    lines = [f"gpulease plan — stack {plan['stack']} ({plan.get('source', '')}), catalog "
             f"{plan['catalog']['version']} (prices as of {plan['catalog']['as_of']})", ""]
    rows = []
    for c in plan["clusters"]:
        p = c["purchase"]
        rows.append([c["name"], c["cloud"], c["region"], c["instance_type"],
                     f"{c['nodes']}x{c['gpus_per_node']} {c['gpu']}",
                     f"R{p['reserved']}/OD{p['on_demand']}/S{p['spot']}", c["template"],
                     c["network"], _money(c["hourly_usd"]), _money(c["monthly_usd"])])
    lines.append("Clusters")
    lines.append(_table(rows, ["cluster", "cloud", "region", "instance", "nodes x gpus",
                               "purchase", "template", "network", "$/hour", "$/month"]))
    for c in plan["clusters"]:
        lines.append(f"  {c['name']}: {c['rationale']}")
    lines.append("")
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in plan["resources"]:
        groups[r["cluster"]].append(r)
    lines.append(f"Resources ({len(plan['resources'])}), grouped by cluster")
    for cluster in sorted(groups, key=lambda k: (k == "shared", k)):
        res = groups[cluster]
        total = sum(r["monthly_usd"] for r in res)
        lines.append(f"  [{cluster}]  {len(res)} resources, {_money(total)}/month")
        for r in sorted(res, key=lambda r: (-r["monthly_usd"], r["type"], r["name"])):
            tagn = len(r["tags"])
            lines.append(f"    {_money(r['monthly_usd']):>14}  {r['type']:<52} {r['name']}"
                         + (f"  ({tagn} tags, {r['purchase_model']})" if tagn else ""))
            if show_inputs:
                lines.append("        " + json.dumps(r["inputs"], sort_keys=True)[:2000])
    lines.append("")
    if plan["storage"]:
        lines.append("Storage tiers")
        srows = []
        for s in plan["storage"]:
            for t in s["tiers"]:
                days = f"{t['from_day']}-{t['to_day'] if t['to_day'] is not None else '∞'} d"
                srows.append([s["name"], f"{s['cloud']}:{s['region']}", t["storage_class"], days,
                              f"{t['share'] * 100:.0f}%", f"${t['usd_per_gb_month']}/GB",
                              _money(t["monthly_usd"])])
        lines.append(_table(srows, ["storage", "home", "class", "age", "share", "price",
                                    "$/month"]))
        lines.append("")
    tot = plan["totals"]
    lines.append("Cost by purchase model: " + ", ".join(
        f"{k} {_money(v)}" for k, v in tot["by_purchase_model"].items()) or "none")
    if tot["by_storage_tier"]:
        lines.append("Cost by storage tier:   " + ", ".join(
            f"{k} {_money(v)}" for k, v in tot["by_storage_tier"].items()))
    b = plan["budget"]
    lines.append(f"Total: {_money(tot['hourly_usd'])}/hour with every node up, "
                 f"{_money(tot['monthly_usd'])}/month estimated")
    verdict = "OVER BUDGET by " + _money(-b["headroom_usd"]) if b["over"] else \
        f"headroom {_money(b['headroom_usd'])}"
    lines.append(f"Budget: {_money(b['monthly_usd'])}/month — {verdict}")
    if plan["violations"]:
        lines.append("")
        lines.append(f"Guardrail violations ({len(plan['violations'])})")
        for v in plan["violations"]:
            lines.append(f"  [{v['level']}] {v['policy']}: {v['resource']}: {v['message']}")
    else:
        lines.append("Guardrails: no violations")
    lines += render_conformance(plan.get("conformance", []))
    if plan.get("warnings"):
        lines.append("")
        lines.append(f"Warnings ({len(plan['warnings'])})")
        lines += [f"  {w}" for w in plan["warnings"]]
    return "\n".join(lines)


def render_conformance(findings: list[dict]) -> list[str]:
    if not findings:
        return ["Conformance: every constrained input matches its API spec"]
    errors = sum(1 for f in findings if f["level"] == "error")
    out = ["", f"Conformance findings ({errors} errors, {len(findings) - errors} warnings)"]
    for f in findings:
        where = f"{f['resource']}" + (f" ({f['physical_name']})" if f.get("physical_name") else "")
        out.append(f"  [{f['level']}] {f['rule']}: {where}: {f['path']}: {f['message']}")
        out.append(f"      spec: {f['spec']}")
    return out
