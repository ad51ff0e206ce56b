"""Bill sources: find a bill's format and map it onto one normalised row view, in SQL.

Three formats, each read by DuckDB in place (no server, no copy):

- **FOCUS 1.0-1.2** (the FinOps Foundation's schema; AWS Data Exports' FOCUS export, GCP's FOCUS
  view): CSV or Parquet, a file or a folder. ``Tags`` is a JSON object (CSV) or a map.
- **AWS CUR 2.0** (Data Exports, Parquet folders such as ``BILLING_PERIOD=2026-12/``):
  ``line_item_*`` columns and the ``resource_tags`` map, user tags as ``user:<key>``.
- **GCP Cloud Billing export** (BigQuery's standard or detailed export, as JSON lines or
  Parquet): ``labels`` as ``[{key, value}]``, ``resource.name`` (detailed), ``credits`` as
  ``[{name, amount, type, ...}]`` inside each row, ``cost_type`` (regular, tax, adjustment,
  rounding_error).

Each maps onto the columns of :data:`COLUMNS` (one "charge line" per row; a GCP row's credits
are charge lines of their own, so a credit is counted once, as a credit). The mapping is one
SQL text per format, written in DuckDB's dialect; the warehouse path (issue 33 item 3, not built
yet) would transpile the same text with sqlglot.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from gpulease import purchase, tags
from gpulease.errors import Finding, InputError
from gpulease.spend import query as Q

FOCUS, CUR, GCP = "focus", "cur2", "gcp-export"
FORMAT_LABELS = {FOCUS: "FOCUS", CUR: "AWS CUR 2.0", GCP: "GCP Cloud Billing export"}

#: charge kinds of the normalised view (FOCUS's ChargeCategory, lowercase).
USAGE, PURCHASE, CREDIT, TAX, ADJUSTMENT = "usage", "purchase", "credit", "tax", "adjustment"
#: what a row's ``hours`` count: node-hours (FOCUS, CUR: instance hours) or GPU-hours (GCP:
#: its GPU SKUs bill per accelerator).
NODE_HOURS, GPU_HOURS = "node", "gpu"

#: the normalised view's columns (docs/spend.md, "The normalised row").
COLUMNS = ("charge", "correction", "start_ts", "billed", "effective", "resource_id",
           "resource_name", "cluster_tag", "env_tag", "pricing", "hours", "hour_unit")

#: exact decimal arithmetic for money inside the engine (26 integer digits, 12 decimals: bills
#: carry up to 10 decimals per line).
DEC = "DECIMAL(38,12)"

_EXTENSIONS = {".parquet": "parquet", ".csv": "csv", ".gz": "csv", ".json": "json",
               ".jsonl": "json", ".ndjson": "json"}

FIX = ("give a FOCUS 1.0-1.2 CSV or Parquet file or folder, an AWS CUR 2.0 Parquet folder, or a "
       "GCP billing export as JSON lines or Parquet (docs/spend.md, \"Bill sources\")")


@dataclass(frozen=True)
class Source:
    """A bill on disk: where it is, how DuckDB reads it, which format it is."""

    path: str
    reader: str            # the FROM clause that reads the files
    kind: str              # FOCUS | CUR | GCP
    columns: dict          # column name -> DuckDB type


def _bad(path: str, message: str) -> InputError:
    return InputError([Finding("--bill", f"{path}: {message}; {FIX}")])


_quote = Q.quote


def _reader(path: Path) -> str:
    """The DuckDB table function that reads ``path`` (a file or a folder of one file type)."""
    if path.is_dir():
        for ext, fmt in (("parquet", "parquet"), ("csv", "csv"), ("csv.gz", "csv"),
                         ("jsonl", "json"), ("json", "json"), ("ndjson", "json")):
            files = sorted(path.rglob(f"*.{ext}"))
            if files:
                return _reader_for(fmt, str(path / "**" / f"*.{ext}"), folder=True)
        raise _bad(str(path), "the folder holds no .parquet, .csv, .csv.gz or .json(l) file")
    fmt = _EXTENSIONS.get(path.suffix.lower())
    if fmt is None:
        raise _bad(str(path), f"unknown file type {path.suffix or '(no extension)'!r}")
    return _reader_for(fmt, str(path), folder=False)


def _reader_for(fmt: str, pattern: str, *, folder: bool) -> str:
    p = _quote(pattern)
    if fmt == "parquet":
        return f"read_parquet({p}, union_by_name = true, hive_partitioning = {str(folder).lower()})"
    if fmt == "csv":
        # every column as text, cast below: a bill's amounts stay exact decimals, never floats
        return (f"read_csv({p}, header = true, all_varchar = true, nullstr = ['NULL', ''], "
                f"union_by_name = true)")
    return f"read_json({p}, format = 'newline_delimited', union_by_name = true)"


def open_source(con, path: str) -> Source:
    """The bill at ``path``, its format recognised from its columns (exit 2 otherwise)."""
    import duckdb

    p = Path(path)
    if not p.exists():
        raise _bad(path, "no such file or folder")
    reader = _reader(p)
    try:
        described = con.execute(f"DESCRIBE SELECT * FROM {reader}").fetchall()
    except duckdb.Error as exc:
        raise _bad(path, f"unreadable ({_first_line(exc)})") from None
    columns = {row[0]: row[1] for row in described}
    return Source(path=path, reader=reader, kind=kind_of(path, columns), columns=columns)


def kind_of(path: str, columns: dict) -> str:
    """The bill's format, told from its columns (exit 2 naming ``path`` otherwise)."""
    if "BilledCost" in columns and "ChargePeriodStart" in columns:
        kind = FOCUS
    elif "line_item_unblended_cost" in columns:
        kind = CUR
    elif "cost" in columns and "sku" in columns and "usage_start_time" in columns:
        kind = GCP
    else:
        shown = ", ".join(sorted(columns)[:8]) + (" ..." if len(columns) > 8 else "")
        raise _bad(path, f"not a bill this command reads (columns: {shown}); FOCUS has "
                   "BilledCost and ChargePeriodStart, CUR 2.0 line_item_unblended_cost, the GCP "
                   "export cost, sku and usage_start_time")
    return kind


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


# ---- the per-format mappings -----------------------------------------------------------------
def _has(src: Source, *names: str) -> bool:
    return all(n in src.columns for n in names)


def _col(src: Source, name: str, cast: str = "VARCHAR") -> str:
    """A column, or a typed NULL when this export does not have it (optional FOCUS columns,
    standard vs detailed GCP export)."""
    return f'"{name}"' if name in src.columns else f"CAST(NULL AS {cast})"


def _focus_tag(src: Source, key: str) -> str:
    """The value of tag ``key`` in FOCUS ``Tags``: a JSON object (CSV, or text in Parquet) or a
    map; AWS's FOCUS export may keep the ``user:`` prefix of user tags."""
    if "Tags" not in src.columns:
        return "CAST(NULL AS VARCHAR)"
    if src.columns["Tags"].upper().startswith("MAP"):
        return (f"coalesce(GL_MAP(\"Tags\", {_quote(key)}), "
                f"GL_MAP(\"Tags\", {_quote('user:' + key)}))")
    return (f"coalesce(GL_JSON(\"Tags\", {_quote(key)}), "
            f"GL_JSON(\"Tags\", {_quote('user:' + key)}))")


def _focus(src: Source) -> str:
    charge = ("CASE lower(\"ChargeCategory\") " + " ".join(
        f"WHEN {_quote(c)} THEN {_quote(c)}" for c in (USAGE, PURCHASE, CREDIT, TAX, ADJUSTMENT))
        + f" ELSE {_quote(USAGE)} END")
    pricing = (f"CASE WHEN lower(\"ChargeCategory\") <> {_quote(USAGE)} THEN NULL "
               f"WHEN {_col(src, 'CommitmentDiscountId')} IS NOT NULL "
               f"OR {_col(src, 'PricingCategory')} = 'Committed' THEN {_quote(purchase.RESERVED)} "
               f"WHEN {_col(src, 'PricingCategory')} = 'Dynamic' THEN {_quote(purchase.SPOT)} "
               f"WHEN {_col(src, 'PricingCategory')} = 'Standard' "
               f"THEN {_quote(purchase.ON_DEMAND)} END")
    compute_hours = (f"lower(\"ChargeCategory\") = {_quote(USAGE)} "
                     f"AND {_col(src, 'ServiceCategory')} = 'Compute' "
                     f"AND lower({_col(src, 'ConsumedUnit')}) IN ('hours', 'hour', 'hrs')")
    return f"""
SELECT {charge} AS charge,
       coalesce(lower({_col(src, 'ChargeClass')}) = 'correction', false) AS correction,
       CAST("ChargePeriodStart" AS TIMESTAMPTZ) AS start_ts,
       GL_DEC("BilledCost") AS billed,
       GL_DEC(coalesce({_col(src, 'EffectiveCost')}, "BilledCost")) AS effective,
       CAST({_col(src, 'ResourceId')} AS VARCHAR) AS resource_id,
       CAST({_col(src, 'ResourceName')} AS VARCHAR) AS resource_name,
       {_focus_tag(src, tags.CLUSTER)} AS cluster_tag,
       {_focus_tag(src, tags.ENVIRONMENT)} AS env_tag,
       {pricing} AS pricing,
       CASE WHEN {compute_hours} THEN CAST({_col(src, 'ConsumedQuantity')} AS DOUBLE) END AS hours,
       CASE WHEN {compute_hours} THEN {_quote(NODE_HOURS)} END AS hour_unit
FROM raw"""


#: CUR 2.0 line item types by the charge kind they are (AWS Data Exports, "Line item details").
CUR_TYPES = {
    TAX: ("Tax",),
    CREDIT: ("Credit", "EdpDiscount", "BundledDiscount", "PrivateRateDiscount", "Discount",
             "DistributorDiscount", "SavingsPlanNegation"),
    ADJUSTMENT: ("Refund",),
    PURCHASE: ("RIFee", "SavingsPlanUpfrontFee", "SavingsPlanRecurringFee", "Fee"),
}


def _cur(src: Source) -> str:
    t = '"line_item_line_item_type"'
    charge = "CASE " + " ".join(
        f"WHEN {t} IN ({', '.join(_quote(x) for x in types)}) THEN {_quote(kind)}"
        for kind, types in CUR_TYPES.items()) + f" ELSE {_quote(USAGE)} END"
    usage_type = _col(src, "line_item_usage_type")
    effective = (f"CASE {t} "
                 f"WHEN 'SavingsPlanCoveredUsage' THEN "
                 f"{_col(src, 'savings_plan_savings_plan_effective_cost', 'DOUBLE')} "
                 f"WHEN 'DiscountedUsage' THEN {_col(src, 'reservation_effective_cost', 'DOUBLE')} "
                 f"WHEN 'SavingsPlanNegation' THEN 0 WHEN 'SavingsPlanUpfrontFee' THEN 0 "
                 f"WHEN 'RIFee' THEN coalesce("
                 f"{_col(src, 'reservation_unused_amortized_upfront_fee_for_billing_period', 'DOUBLE')}"
                 f", 0) + coalesce({_col(src, 'reservation_unused_recurring_fee', 'DOUBLE')}, 0) "
                 f"END")
    instance = f"({usage_type} LIKE '%BoxUsage%' OR {usage_type} LIKE '%SpotUsage%')"
    pricing = (f"CASE WHEN {t} IN ('DiscountedUsage', 'SavingsPlanCoveredUsage') "
               f"THEN {_quote(purchase.RESERVED)} "
               f"WHEN {t} = 'Usage' AND {usage_type} LIKE '%SpotUsage%' "
               f"THEN {_quote(purchase.SPOT)} "
               f"WHEN {t} = 'Usage' AND {usage_type} LIKE '%BoxUsage%' "
               f"THEN {_quote(purchase.ON_DEMAND)} END")
    rtags = '"resource_tags"' if "resource_tags" in src.columns else None

    def tag(key: str) -> str:
        return f"GL_MAP({rtags}, {_quote('user:' + key)})" if rtags else "CAST(NULL AS VARCHAR)"

    hours_rows = f"{t} IN ('Usage', 'DiscountedUsage', 'SavingsPlanCoveredUsage') AND {instance}"
    return f"""
SELECT {charge} AS charge,
       {t} = 'Refund' AS correction,
       CAST("line_item_usage_start_date" AS TIMESTAMPTZ) AS start_ts,
       GL_DEC("line_item_unblended_cost") AS billed,
       GL_DEC(coalesce({effective}, "line_item_unblended_cost")) AS effective,
       CAST({_col(src, 'line_item_resource_id')} AS VARCHAR) AS resource_id,
       CAST(NULL AS VARCHAR) AS resource_name,
       {tag(tags.CLUSTER)} AS cluster_tag,
       {tag(tags.ENVIRONMENT)} AS env_tag,
       {pricing} AS pricing,
       CASE WHEN {hours_rows} THEN CAST({_col(src, 'line_item_usage_amount', 'DOUBLE')} AS DOUBLE)
       END AS hours,
       CASE WHEN {hours_rows} THEN {_quote(NODE_HOURS)} END AS hour_unit
FROM raw"""


#: GCP credit type of a committed use discount (Cloud Billing export schema, credits.type).
GCP_CUD = "COMMITTED_USAGE_DISCOUNT"


def _gcp(src: Source) -> str:
    labels = '"labels"' if "labels" in src.columns else None

    def label(key: str) -> str:
        if not labels:
            return "CAST(NULL AS VARCHAR)"
        return f"GL_LABEL({labels}, {_quote(tags.label_key(key))})"

    has_resource = "resource" in src.columns and "name" in src.columns["resource"]
    rname = "CAST(\"resource\".name AS VARCHAR)" if has_resource else "CAST(NULL AS VARCHAR)"
    rid = ("CAST(\"resource\".global_name AS VARCHAR)"
           if has_resource and "global_name" in src.columns["resource"] else
           "CAST(NULL AS VARCHAR)")
    credits = "\"credits\"" if "credits" in src.columns else None
    cost_type = _col(src, "cost_type")
    adjusted = ("\"adjustment_info\".id IS NOT NULL" if "adjustment_info" in src.columns
                else "false")
    sku = "CAST(\"sku\".description AS VARCHAR)"
    charge = (f"CASE WHEN {cost_type} = 'tax' THEN {_quote(TAX)} "
              f"WHEN {cost_type} IN ('adjustment', 'rounding_error') OR {adjusted} "
              f"THEN {_quote(ADJUSTMENT)} "
              f"WHEN GL_ILIKE({sku}, 'Commitment%') THEN {_quote(PURCHASE)} "
              f"ELSE {_quote(USAGE)} END")
    cud = f"GL_HAS({credits}, {_quote(GCP_CUD)})" if credits else "false"
    # the effective (amortised) cost of a row covered by a resource-based committed use
    # discount is its cost net of that credit; the credit line itself then carries no
    # effective cost, so the commitment is counted once
    cud_amount = f"GL_CREDITS({credits}, {_quote(GCP_CUD)})" if credits else "0"
    pricing = (f"CASE WHEN {charge} <> {_quote(USAGE)} THEN NULL "
               f"WHEN GL_ILIKE({sku}, '%Preemptible%') THEN {_quote(purchase.SPOT)} "
               f"WHEN {cud} THEN {_quote(purchase.RESERVED)} "
               f"ELSE {_quote(purchase.ON_DEMAND)} END")
    gpu_hours = (f"{charge} = {_quote(USAGE)} AND GL_ILIKE({sku}, '%GPU%') "
                 f"AND \"usage\".pricing_unit = 'hour'")
    base = f"""
SELECT {charge} AS charge,
       {cost_type} = 'adjustment' OR {adjusted} AS correction,
       CAST("usage_start_time" AS TIMESTAMPTZ) AS start_ts,
       GL_DEC("cost") AS billed,
       GL_DEC("cost") + {cud_amount} AS effective,
       {rid} AS resource_id,
       {rname} AS resource_name,
       {label(tags.CLUSTER)} AS cluster_tag,
       {label(tags.ENVIRONMENT)} AS env_tag,
       {pricing} AS pricing,
       CASE WHEN {gpu_hours} THEN CAST("usage".amount_in_pricing_units AS DOUBLE) END AS hours,
       CASE WHEN {gpu_hours} THEN {_quote(GPU_HOURS)} END AS hour_unit
FROM raw"""
    if not credits:
        return base
    # each credit of a row is a charge line of its own (class "credit"), with its row's labels
    credit_lines = f"""
SELECT {_quote(CREDIT)} AS charge, false AS correction,
       CAST("usage_start_time" AS TIMESTAMPTZ) AS start_ts,
       GL_DEC(c.amount) AS billed,
       -- a resource-based CUD is already in its row's effective cost (see above)
       CASE WHEN c.type = {_quote(GCP_CUD)} THEN GL_DEC(0) ELSE GL_DEC(c.amount)
       END AS effective,
       {rid} AS resource_id, {rname} AS resource_name,
       {label(tags.CLUSTER)} AS cluster_tag, {label(tags.ENVIRONMENT)} AS env_tag,
       CAST(NULL AS VARCHAR) AS pricing, CAST(NULL AS DOUBLE) AS hours,
       CAST(NULL AS VARCHAR) AS hour_unit
FROM {Q.CREDIT_FROM}"""
    return base + "\nUNION ALL" + credit_lines


_MAPPINGS = {FOCUS: _focus, CUR: _cur, GCP: _gcp}


def mapping_sql(src: Source) -> str:
    """The mapping of ``src``'s lines (read from ``raw``) onto :data:`COLUMNS`, in DuckDB's
    dialect with gpulease.spend.query's placeholders: the one text every engine runs."""
    return _MAPPINGS[src.kind](src)


def normalised_sql(src: Source) -> str:
    """The normalised view of every line of a bill on disk, as DuckDB runs it."""
    return Q.render(f"WITH raw AS (SELECT * FROM {Q.SOURCE}) {mapping_sql(src)}", Q.DUCKDB,
                    src.reader)


#: each format's column of when a line was used (the month filter's column).
START_COLUMNS = {FOCUS: "ChargePeriodStart", CUR: "line_item_usage_start_date",
                 GCP: "usage_start_time"}


def total_expr(src: Source) -> str:
    """A raw line's billed amount, from the raw columns (not the normalised view), so the
    classification can be checked against the bill's own total. A GCP row's credits are
    inside the row."""
    if src.kind == FOCUS:
        return 'GL_DEC("BilledCost")'
    if src.kind == CUR:
        return 'GL_DEC("line_item_unblended_cost")'
    credits = 'GL_CREDITS("credits")' if "credits" in src.columns else "0"
    return f'GL_DEC("cost") + {credits}'


def one_query(src: Source, dialect: str, *, cutoff: dt.datetime,
              bounds: Optional[tuple[dt.datetime, dt.datetime]], groups: bool = True,
              hourly: bool = False, resource_names=(), prune: str = "") -> str:
    """The one query over ``src`` (gpulease.spend.query.grouped_sql) in ``dialect``."""
    text = Q.grouped_sql(mapping_sql(src), total_expr(src), START_COLUMNS[src.kind],
                         cutoff=cutoff, bounds=bounds, groups=groups, hourly=hourly,
                         resource_names=resource_names, prune=prune)
    return Q.render(text, dialect, src.reader)


def month_bounds(month: Optional[str]) -> Optional[tuple[dt.datetime, dt.datetime]]:
    """``YYYY-MM`` as [first instant, first instant of the next month) in UTC (exit 2 when
    malformed)."""
    if month is None:
        return None
    try:
        start = dt.datetime.strptime(month, "%Y-%m").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        raise InputError([Finding("--month", f"{month!r} is not a month; write YYYY-MM, e.g. "
                                  "--month 2026-11")]) from None
    end = start.replace(year=start.year + (start.month == 12), month=start.month % 12 + 1)
    return start, end
