"""`gpulease spend`: the stack's plan beside what the clouds billed (issue 33)."""
from __future__ import annotations

import argparse
import datetime as dt
import html
from typing import Any

from gpulease.cli import COMMANDS, spend_change, ui
from gpulease.cli.common import (FORMATS, add_output_args, add_stack_args, load_stack,
                                 print_json)
from gpulease.errors import EXIT_FAILED, EXIT_OK, ConfigError, Finding

DESCRIPTION = """\
Read a month of the clouds' bill with an embedded engine (DuckDB: no server, no key), put every
charge line in exactly one class, and set the spend beside the stack's plan (the same offline
plan `gpulease plan` runs), per cluster and for shared resources: planned, billed, effective
(commitments amortised, the cluster's credits and corrections included), the difference in $
and %, and its causes: node-hours run against planned, the purchase model used against the
planned one (spot that fell back to on-demand), the unit price against the plan's, commitment
use, credits, corrections, and untagged spend.

Bills: a FOCUS 1.0-1.2 CSV or Parquet file or folder (AWS Data Exports' FOCUS export, GCP's
FOCUS view), an AWS CUR 2.0 Parquet folder (Data Exports), or a GCP Cloud Billing export
(standard or detailed) as JSON lines or Parquet, as BigQuery exports it. The format is told from
the columns.

Or the table the bill lives in, queried in place: bq://PROJECT.DATASET.TABLE (BigQuery: the GCP
billing export) or athena://WORKGROUP/DATABASE.TABLE (Athena: a CUR 2.0 or FOCUS export). The
warehouse runs the same query DuckDB runs on a file, in its own dialect: one query, pushed down;
only the groups (and, with --month, the nodes billed per hour for the config change) come back,
never the rows. Credentials are the SDKs' own (Application Default Credentials; botocore's
chain); none found: exit 2 with what to set.

Classes: matched (gpulease's cost tags of this environment first, then a resource id or name of
the plan), unmatched, credit, tax, adjustment (corrections included). They add up to the bill's
own total to the cent (`conserved` in the JSON; exit 1 if not). Lines younger than 48 hours and
corrections are provisional: the view says how many and how much.

Last, the config change that makes next month's plan match what really ran, per cluster, as
YAML naming the stack file and the config path (`config_change` in the JSON): the demand
derived from the nodes billed per hour when the hours differ (as `gpulease recommend
--from-bill` derives it), a priority out of the spot band when spot fell back to on-demand.
docs/spend.md has the details."""

EPILOG = """\
examples:
  gpulease spend --stack prod --bill exports/focus/                  a FOCUS folder
  gpulease spend --stack prod --bill cur2/BILLING_PERIOD=2026-11/ --month 2026-11
  gpulease spend --stack prod --bill gcp-billing.jsonl --format json    for scripts
  gpulease spend --stack prod --bill focus.parquet --format html --out spend.html
  gpulease spend --stack prod --bill bq://acme-billing.billing.gcp_billing_export_v1_0123
  gpulease spend --stack prod --bill athena://finops/cur_db.cur2_export --month 2026-11

exit codes: 0 ok · 1 the classes do not add up to the bill's total (a bug: please report) ·
            2 bad input: stack, a missing or unreadable bill, a bill in no format this reads,
            a malformed --month or warehouse address, no credentials for the warehouse, a
            table or work group the warehouse does not have, a query it refused (the message
            names the path and the fix; nothing read)"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("spend", help=COMMANDS["spend"], description=DESCRIPTION,
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_stack_args(p)
    p.add_argument("--bill", metavar="SOURCE", required=True,
                   help="the bill: a FOCUS CSV/Parquet file or folder, a CUR 2.0 Parquet "
                        "folder, a GCP billing export (JSON lines or Parquet), or a warehouse "
                        "table: bq://PROJECT.DATASET.TABLE, athena://WORKGROUP/DATABASE.TABLE")
    p.add_argument("--month", metavar="YYYY-MM",
                   help="only lines whose usage started in this month (UTC); default: every "
                        "line of the source")
    p.add_argument("--now", dest="as_of", metavar="TIME",
                   help="judge 'younger than 48 hours' as of this UTC time "
                        "(YYYY-MM-DDTHH:MM:SSZ; default: now)")
    add_output_args(p, formats=FORMATS)
    p.set_defaults(func=run)


def _now(text: str | None) -> dt.datetime:
    if text is None:
        return dt.datetime.now(dt.timezone.utc)
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError([Finding("--now", f"{text!r} is not a time; write "
                                   "YYYY-MM-DDTHH:MM:SSZ, e.g. 2026-12-04T09:00:00Z")]) from None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def catalog_prices(plan: dict, catalog) -> dict:
    """cluster -> purchase model -> the catalog's USD per node-hour."""
    from gpulease import purchase

    out = {}
    for c in plan.get("clusters", ()):
        try:
            o = catalog.offering(c["cloud"], c["region"], c["instance_type"])
        except Exception:   # noqa: BLE001 - an offering gone from the catalog: no reference
            continue
        out[c["name"]] = {purchase.ON_DEMAND: o.on_demand_usd, purchase.SPOT: o.spot_usd,
                          purchase.RESERVED: o.commit_1y_usd}
    return out


def run(args: argparse.Namespace) -> int:
    import duckdb

    from gpulease.cli.plan import make_plan
    from gpulease.spend import classify as C
    from gpulease.spend import reconcile as R
    from gpulease.spend import sources as S

    from gpulease.spend import warehouse as W

    now = _now(args.as_of)
    S.month_bounds(args.month)            # a malformed --month: exit 2 before anything runs
    table = W.parse(args.bill)            # a malformed bq:// or athena:// address: exit 2
    label = args.stack or args.config
    if table is not None:
        W.preflight(table)                # no credentials: exit 2 naming what to set
        return _warehouse(args, table, now, label)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    src = S.open_source(con, args.bill)   # a missing or unknown bill: exit 2, nothing planned
    with ui.steps(f"spend of {label}", piped_lines=args.format == "table") as steps:
        plan, prun = make_plan(args, steps=steps)
        steps.step(f"reading {src.path} ({S.FORMAT_LABELS[src.kind]}) with DuckDB")
        try:
            groups, total, rows = C.read_groups(con, src, month=args.month, now=now)
        except duckdb.Error as exc:
            raise ConfigError([Finding("--bill", f"{src.path}: unreadable as "
                                       f"{S.FORMAT_LABELS[src.kind]} ({S._first_line(exc)}); "
                                       f"{S.FIX}")]) from None
        steps.step("classifying every line and reconciling with the plan")
        bill = C.classify(groups, C.PlanIndex.of(plan), source_total=total, source_rows=rows,
                          kind=src.kind)
        loaded = load_stack(args, announce_warnings=False)
        doc = R.reconcile(plan, bill, catalog_prices=catalog_prices(plan, loaded.catalog),
                          source=src.path, month=args.month)
        doc["bill"]["engine"] = "duckdb"
        spend_change.add(doc, plan, loaded.spec, loaded.source,
                         lambda: _usage(con, src, plan, args.month, steps))
    return _print(args, doc)


def warehouse_answer(table, flag_path: str, steps, *, month, now: dt.datetime, index,
                     groups: bool, hourly: bool):
    """The bill where it lives (gpulease.spend.warehouse): one metadata call for its columns,
    then the one query, pushed down. Returns (source, its answer rows). Exit 2 naming
    ``flag_path`` (``--bill``) for a table, work group or query the warehouse refuses."""
    from gpulease.spend import classify as C
    from gpulease.spend import query as Q
    from gpulease.spend import sources as S
    from gpulease.spend import warehouse as W

    where = W.address_text(table)

    def bad(message: str) -> ConfigError:
        return ConfigError([Finding(flag_path, f"{where}: {message}")])

    steps.step(f"reading the columns of {where}")
    rd = W.reader(table, progress=steps.step)
    try:
        columns = rd.columns()
    except W.WarehouseError as exc:
        raise bad(f"{exc}; check the address and that the table exists") from None
    kind = S.kind_of(where, columns)
    src = S.Source(path=where, reader=W.table_ref(table), kind=kind, columns=columns)
    try:
        sql = C.one_query_sql(src, W.dialect(table), month=month, now=now, groups=groups,
                              hourly=hourly, index=index, prune=rd.partition_floor)
    except Q.NotInDialect as exc:
        raise bad(f"a {S.FORMAT_LABELS[kind]} table holds {exc}, which gpulease does not "
                  f"read from {table.warehouse.title()}; export it to files and give their "
                  "folder") from None
    steps.step(f"querying {where} ({S.FORMAT_LABELS[kind]}): one query, pushed down")
    try:
        return src, rd.run(sql)
    except W.WarehouseError as exc:
        raise bad(str(exc)) from None


def _warehouse(args: argparse.Namespace, table, now: dt.datetime, label: str) -> int:
    """`spend` of a bill in BigQuery or Athena: the view from the one query's answer, and,
    with --month, the nodes per hour for the config change from the same answer."""
    from gpulease.cli.plan import make_plan
    from gpulease.errors import InputError
    from gpulease.spend import classify as C
    from gpulease.spend import reconcile as R
    from gpulease.spend import usage as U
    from gpulease.spend import warehouse as W

    where = W.address_text(table)
    with ui.steps(f"spend of {label}", piped_lines=args.format == "table") as steps:
        plan, _ = make_plan(args, steps=steps)
        index = C.PlanIndex.of(plan)
        hourly = args.month is not None
        src, answer = warehouse_answer(table, "--bill", steps, month=args.month, now=now,
                                       index=index, groups=True, hourly=hourly)
        groups, total, rows = C.groups_of(answer)
        steps.step("classifying every line and reconciling with the plan")
        bill = C.classify(groups, index, source_total=total, source_rows=rows, kind=src.kind)
        loaded = load_stack(args, announce_warnings=False)
        doc = R.reconcile(plan, bill, catalog_prices=catalog_prices(plan, loaded.catalog),
                          source=where, month=args.month)
        doc["bill"]["engine"] = table.warehouse

        def usage():
            if not hourly:
                raise InputError([Finding("--month", (
                    f"{where}: a warehouse table holds many months; give --month YYYY-MM to "
                    "read the nodes billed per hour of one (in the same query)"))])
            return U.from_rows(answer, src, index, _gpus_per_node(plan), month=args.month)

        spend_change.add(doc, plan, loaded.spec, loaded.source, usage)
    return _print(args, doc)


def _print(args: argparse.Namespace, doc: dict[str, Any]) -> int:
    if args.format == "json":
        print_json(doc)
    elif args.format == "html":
        ui.out().stream.write(render_html(doc))
    else:
        render_table(doc, ui.out())
    if not doc["conserved"]:
        ui.error(f"the classes add up to {doc['classes_usd']} but the bill's total is "
                 f"{doc['total_billed_usd']}: a line was counted twice or lost (a bug)")
        return ui.exit_reason(EXIT_FAILED, "the classes do not add up to the bill's total")
    return EXIT_OK


def _usage(con, src, plan: dict, month, steps):
    """The bill's nodes per hour for the config change (its month: --month, else the only
    one)."""
    from gpulease.spend import classify as C
    from gpulease.spend import usage as U

    steps.step("reading the nodes billed per hour for the config change")
    month = U.pick_month(con, src, month)
    return U.read(con, src, C.PlanIndex.of(plan), _gpus_per_node(plan), month=month)


def _gpus_per_node(plan: dict) -> dict:
    """cluster -> GPUs per node, from the plan (a GCP bill counts GPU-hours)."""
    return {c["name"]: int(c.get("gpus_per_node") or 1) for c in plan.get("clusters", ())}


def _cause_text(c: dict) -> str:
    return "; ".join(x["text"] for x in c["causes"]) or "-"


def render_table(doc: dict[str, Any], o: ui.Out) -> None:
    b = doc["bill"]
    o.line(("spend", "bold"), f" {doc['stack']} · {b['format']} {b['source']}"
           + (f" · {b['month']}" if b["month"] else "") + f" · {b['source_rows']:,} rows")
    o.print(o.table(
        [ui.Col("cluster", style="cyan"), ui.Col("planned", right=True),
         ui.Col("billed", right=True), ui.Col("effective", right=True, style="bold"),
         ui.Col("diff", right=True), ui.Col("diff %", right=True), ui.Col("causes", wrap=True)],
        [[c["cluster"], ui.money(c["planned_usd"]), ui.money(c["billed_usd"]),
          ui.money(c["effective_usd"]), ui.money(c["diff_usd"]),
          "-" if c["diff_pct"] is None else f"{c['diff_pct']:+.1f}%", _cause_text(c)]
         for c in doc["clusters"]]))
    rows = doc["rows"]
    o.print("lines by class: " + " · ".join(
        f"{k} {rows[k]:,} ({ui.money(doc['classes_usd'][k])})" for k in rows))
    o.print(f"total billed {ui.money(doc['total_billed_usd'])}"
            + (" (the classes add up to it to the cent)" if doc["conserved"] else
               " (THE CLASSES DO NOT ADD UP)")
            + f"; planned {ui.money(doc['planned_total_usd'])}")
    if doc["unmatched"]:
        o.print(f"unmatched {ui.money(doc['unmatched_usd'])}, largest:")
        o.print(o.table([ui.Col("resource"), ui.Col("$", right=True), ui.Col("why")],
                        [[u["resource"], ui.money(u["usd"]), u["why"]]
                         for u in doc["unmatched"]], indent=2))
    p = doc["provisional"]
    if p["rows"]:
        o.print(f"provisional: {p['rows']:,} lines, {ui.money(p['usd'])} ({p['why']})")
    change = spend_change.text_lines(doc)
    if change:
        o.print()
        o.line(("config change", "bold"), " (what makes next month's plan match what ran):")
        for line in change:
            o.print("  " + line if line else "")


def render_html(doc: dict[str, Any]) -> str:
    """A small self-contained page with the same table."""
    e = html.escape
    rows = "".join(
        f"<tr><td>{e(c['cluster'])}</td><td>{e(ui.money(c['planned_usd']))}</td>"
        f"<td>{e(ui.money(c['billed_usd']))}</td><td>{e(ui.money(c['effective_usd']))}</td>"
        f"<td>{e(ui.money(c['diff_usd']))}</td>"
        f"<td>{'-' if c['diff_pct'] is None else e(format(c['diff_pct'], '+.1f'))}%</td>"
        f"<td>{e(_cause_text(c))}</td></tr>" for c in doc["clusters"])
    classes = "".join(f"<li>{e(k)}: {n:,} lines, {e(ui.money(doc['classes_usd'][k]))}</li>"
                      for k, n in doc["rows"].items())
    change = spend_change.text_lines(doc)
    changes = ("<h2>Config change for next month's plan</h2><p>What makes the plan match what "
               "ran (docs/spend.md, \"The config change\"):</p><pre>"
               + e("\n".join(change).rstrip("\n")) + "</pre>") if change else ""
    b = doc["bill"]
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>gpulease spend "
            f"{e(str(doc['stack']))}</title><style>body{{font-family:sans-serif}}"
            f"td,th{{padding:2px 8px;text-align:right}}td:first-child,td:last-child"
            f"{{text-align:left}}</style></head><body>"
            f"<h1>Spend of {e(str(doc['stack']))}</h1><p>{e(b['format'])} {e(b['source'])}"
            f"{(' · ' + e(b['month'])) if b['month'] else ''}</p>"
            f"<table><tr><th>cluster</th><th>planned</th><th>billed</th><th>effective</th>"
            f"<th>diff</th><th>diff %</th><th>causes</th></tr>{rows}</table>"
            f"<p>Total billed {e(ui.money(doc['total_billed_usd']))}; unmatched "
            f"{e(ui.money(doc['unmatched_usd']))}.</p><ul>{classes}</ul>{changes}"
            f"</body></html>\n")
