"""The one reconciliation query, written once and produced in each engine's dialect.

`gpulease spend` reads a bill with ONE query per source: the charge lines grouped by everything
classification reads (gpulease.spend.classify.Group) and, in the same statement, the source's
own total and row count summed from its raw columns (the conservation check). The same text runs
in the embedded engine (DuckDB, for files) and is pushed down to the warehouse the bill lives in
(BigQuery for ``bq://``, Athena's Trino engine for ``athena://``): only the groups come back,
never the rows.

One source of truth: the query is written in DuckDB's dialect (gpulease.spend.sources' per-format
mappings plus :func:`grouped_sql`) and produced for the other engines by sqlglot. sqlglot renders
the portable parts (casts, types, CASE, string functions) right; the constructs it renders wrong
or not at all are written as placeholder calls, ``GL_*(...)``, which sqlglot passes through as
unknown functions and :func:`render` then replaces with each engine's own form
(docs/spend.md, "Warehouse bills", lists them with the reason):

=================  ==========================  ===============================  ==========================
placeholder        DuckDB                      BigQuery                         Trino (Athena)
=================  ==========================  ===============================  ==========================
GL_DEC(x)          CAST(x AS DECIMAL(38,12))   CAST(x AS NUMERIC)               CAST(x AS DECIMAL(38,12))
GL_TS('iso')       CAST('iso' AS TIMESTAMPTZ)  TIMESTAMP('iso')                 from_iso8601_timestamp('iso')
GL_MAP(m, 'k')     m['k']                      (no MAP type)                    element_at(m, 'k')
GL_JSON(j, 'k')    json_extract_string         JSON_VALUE(j, '$."k"')           json_extract_scalar(j, '$["k"]')
GL_LABEL(a, 'k')   list_filter ... value       (SELECT value FROM UNNEST(a)..)  (no arrays of labels here)
GL_CREDITS(a, t)   list_sum(list_transform..)  (SELECT SUM(amount) ...)         (no credit arrays here)
GL_HAS(a, 't')     list_contains(...)          EXISTS(SELECT 1 FROM UNNEST..)   (no credit arrays here)
GL_ILIKE(x, 'p')   x ILIKE 'p'                 LOWER(x) LIKE LOWER('p')         lower(x) LIKE lower('p')
=================  ==========================  ===============================  ==========================

Why not sqlglot alone (sqlglot 30, checked 2026-12-04): DuckDB's ``m['k']`` becomes Trino's
``m['k']``, which fails the query when a row lacks the key (Trino's subscript raises; element_at
returns NULL); ``list_extract(list_filter(...), 1)`` becomes an ``[OFFSET]`` that fails on an
empty array in BigQuery (SAFE_OFFSET returns NULL); ``DECIMAL(38,12)`` becomes a NUMERIC BigQuery
rejects (NUMERIC's scale is at most 9); ``GROUP BY ALL`` is not Trino's. The grouped query
therefore groups by ordinals, which every engine reads alike.

BigQuery's billing export stores ``cost`` and ``credits.amount`` as FLOAT64: NUMERIC (scale 9)
keeps every digit the float has for amounts below 10^20.
"""
from __future__ import annotations

import datetime as dt
from typing import Callable, Optional

DUCKDB, BIGQUERY, TRINO = "duckdb", "bigquery", "trino"
DIALECTS = (DUCKDB, BIGQUERY, TRINO)

#: the placeholder the source's table (or DuckDB table function) stands in for in the text.
SOURCE = "gl_source"
#: the one query's output columns, in order. ``part``: GROUP_PART rows are the classification's
#: groups, the TOTAL_PART row the source's own total and row count; with the nodes per hour
#: (``hourly``), HOUR_PART rows are the compute usage per cluster tag / resource and hour
#: (``h``: the hour's start, epoch seconds; ``top``: the most node-hours one resource billed in
#: it) and RESOURCES_PART rows the distinct resources billed in the month.
OUTPUT = ("part", "charge", "correction", "provisional", "cluster_tag", "env_tag",
          "resource_id", "resource_name", "pricing", "hour_unit", "billed", "effective",
          "hours", "n", "h", "top", "resources")
GROUP_PART, TOTAL_PART, HOUR_PART, RESOURCES_PART = "g", "t", "h", "r"


class NotInDialect(Exception):
    """A construct the bill's format needs that the engine holding it has no form for here."""


def quote(text: str) -> str:
    """A SQL string literal (the same in every engine here)."""
    return "'" + text.replace("'", "''") + "'"


def ts(value: dt.datetime) -> str:
    """A UTC instant as the placeholder literal."""
    utc = value.astimezone(dt.timezone.utc)
    return f"GL_TS({quote(utc.strftime('%Y-%m-%dT%H:%M:%S') + 'Z')})"


#: each output column's NULL, typed as its non-null values are (UNION ALL needs one type).
_NULLS = {"part": "CAST(NULL AS VARCHAR)", "charge": "CAST(NULL AS VARCHAR)",
          "correction": "CAST(NULL AS BOOLEAN)", "provisional": "CAST(NULL AS BOOLEAN)",
          "cluster_tag": "CAST(NULL AS VARCHAR)", "env_tag": "CAST(NULL AS VARCHAR)",
          "resource_id": "CAST(NULL AS VARCHAR)", "resource_name": "CAST(NULL AS VARCHAR)",
          "pricing": "CAST(NULL AS VARCHAR)", "hour_unit": "CAST(NULL AS VARCHAR)",
          "billed": "GL_DEC(NULL)", "effective": "GL_DEC(NULL)", "hours": "CAST(NULL AS DOUBLE)",
          "n": "CAST(NULL AS BIGINT)", "h": "CAST(NULL AS BIGINT)", "top": "CAST(NULL AS DOUBLE)",
          "resources": "CAST(NULL AS BIGINT)"}


def _part(name: str, part: str, source: str, group_by: str = "", **values: str) -> str:
    """One part of the answer: a CTE selecting every OUTPUT column in order, ``values`` where
    given, a typed NULL elsewhere."""
    unknown = set(values) - set(OUTPUT)
    if unknown:
        raise ValueError(f"not output columns: {sorted(unknown)}")
    cols = [f"{quote(part)} AS part"] + [
        f"{values.get(c, _NULLS[c])} AS {c}" for c in OUTPUT[1:]]
    return (f"{name} AS (\nSELECT " + ",\n       ".join(cols) + f"\nFROM {source}"
            + (f"\nGROUP BY {group_by}" if group_by else "") + ")")


#: the compute usage lines the nodes per hour are read from (gpulease.spend.usage; 'usage' is
#: gpulease.spend.sources.USAGE, which imports this module).
USAGE_LINES = "charge = 'usage' AND NOT correction AND hour_unit IS NOT NULL AND hours IS NOT NULL"


def resource_filter(names) -> str:
    """A condition on ``res`` (a line's resource id, else name) true for every resource
    gpulease.spend.classify.PlanIndex.cluster_of_resource can match to one of ``names`` (and
    a few more: the match is re-checked in Python), so untagged lines of resources that are
    not the plan's never leave the warehouse."""
    terms = []
    for n in sorted(set(names)):
        terms += [f"res = {quote(n)}", f"GL_STARTS(res, {quote(n + '-')})",
                  f"GL_ENDS(res, {quote('/' + n)})", f"GL_ENDS(res, {quote(':' + n)})"]
    return "(" + " OR ".join(terms) + ")" if terms else "FALSE"


def grouped_sql(normalised: str, total_expr: str, start_column: str, *,
                cutoff: dt.datetime,
                bounds: Optional[tuple[dt.datetime, dt.datetime]],
                groups: bool = True, hourly: bool = False,
                resource_names=(), prune: str = "") -> str:
    """The one query, in DuckDB's dialect with placeholders: ``normalised`` reads ``raw`` (the
    source's lines of the month) onto gpulease.spend.sources.COLUMNS; ``total_expr`` sums a raw
    line's billed amount; ``start_column`` is the raw column the month filter reads.
    ``groups``: the classification's groups and the total; ``hourly``: the nodes per hour (of
    tagged lines, and of untagged lines of ``resource_names``). ``prune``: a condition on the
    table's partitions, true for every partition that can hold a line of the month (a
    warehouse then reads only those: gpulease.spend.warehouse's ``partition_floor``)."""
    start = f'CAST("{start_column}" AS TIMESTAMPTZ)'
    where = (f"WHERE {start} >= {ts(bounds[0])} AND {start} < {ts(bounds[1])}"
             if bounds else "")
    if where and prune:
        where += f" AND {prune}"
    ctes = [f"raw AS (SELECT * FROM {SOURCE} {where})", f"v AS ({normalised})"]
    parts = []
    if groups:
        ctes.append(_part(
            "g", GROUP_PART, "v", "2, 3, 4, 5, 6, 7, 8, 9, 10", charge="charge",
            correction="correction", provisional=f"(correction OR start_ts > {ts(cutoff)})",
            cluster_tag="cluster_tag", env_tag="env_tag",
            resource_id="CASE WHEN cluster_tag IS NULL THEN resource_id END",
            resource_name="CASE WHEN cluster_tag IS NULL THEN resource_name END",
            pricing="pricing", hour_unit="hour_unit", billed="sum(billed)",
            effective="sum(effective)", hours="coalesce(sum(hours), 0)", n="count(*)"))
        ctes.append(_part("t", TOTAL_PART, "raw", billed=f"sum({total_expr})",
                          effective=f"sum({total_expr})", n="count(*)"))
        parts += ["g", "t"]
    if hourly:
        ctes.append(f"""u AS (
SELECT cluster_tag, env_tag, rid, rname, res, hour_unit, h, sum(hours) AS hrs, count(*) AS n
FROM (SELECT cluster_tag, env_tag, hour_unit, hours,
             CASE WHEN cluster_tag IS NULL THEN resource_id END AS rid,
             CASE WHEN cluster_tag IS NULL THEN resource_name END AS rname,
             coalesce(resource_id, resource_name) AS res, GL_HOUR(start_ts) AS h
      FROM v WHERE {USAGE_LINES}) AS w
WHERE cluster_tag IS NOT NULL OR {resource_filter(resource_names)}
GROUP BY 1, 2, 3, 4, 5, 6, 7)""")
        who = {"cluster_tag": "cluster_tag", "env_tag": "env_tag", "resource_id": "rid",
               "resource_name": "rname"}
        ctes.append(_part("hh", HOUR_PART, "u", "cluster_tag, env_tag, rid, rname, hour_unit, h",
                          hour_unit="hour_unit", hours="sum(hrs)", n="sum(n)", h="h",
                          top="max(CASE WHEN res IS NOT NULL THEN hrs END)", **who))
        ctes.append(_part("rr", RESOURCES_PART, "u", "cluster_tag, env_tag, rid, rname",
                          resources="count(DISTINCT res)", **who))
        parts += ["hh", "rr"]
    body = " UNION ALL ".join(f"SELECT * FROM {p}" for p in parts)
    return "WITH " + ",\n".join(ctes) + "\n" + body


# ---- the placeholders, per engine ------------------------------------------------------------
def _dec(d: str, a: list[str]) -> str:
    return f"CAST({a[0]} AS NUMERIC)" if d == BIGQUERY else f"CAST({a[0]} AS DECIMAL(38, 12))"


def _ts(d: str, a: list[str]) -> str:
    if d == BIGQUERY:
        return f"TIMESTAMP({a[0]})"
    if d == TRINO:
        return f"from_iso8601_timestamp({a[0]})"
    return f"CAST({a[0]} AS TIMESTAMPTZ)"


def _map(d: str, a: list[str]) -> str:
    if d == TRINO:
        return f"element_at({a[0]}, {a[1]})"
    if d == DUCKDB:
        return f"{a[0]}[{a[1]}]"
    raise NotInDialect("a MAP column (BigQuery has no MAP type)")


def _json_path(key_literal: str, style: str) -> str:
    key = key_literal[1:-1].replace("''", "'")
    return quote(f'$."{key}"' if style == "dot" else f'$["{key}"]')


def _json(d: str, a: list[str]) -> str:
    if d == BIGQUERY:
        return f"JSON_VALUE({a[0]}, {_json_path(a[1], 'dot')})"
    if d == TRINO:
        return f"json_extract_scalar({a[0]}, {_json_path(a[1], 'bracket')})"
    return f"json_extract_string({a[0]}, {_json_path(a[1], 'dot')})"


def _label(d: str, a: list[str]) -> str:
    if d == BIGQUERY:
        return (f"(SELECT ANY_VALUE(l.value) FROM UNNEST({a[0]}) AS l "
                f"WHERE l.key = {a[1]})")
    if d == DUCKDB:
        return f"list_extract(list_filter({a[0]}, lambda x: x.key = {a[1]}), 1).value"
    raise NotInDialect("an array of labels (a GCP billing export)")


def _credits(d: str, a: list[str]) -> str:
    """The sum of a row's credit amounts (all, or of one type), 0 without any."""
    typed = len(a) > 1
    if d == BIGQUERY:
        cond = f" WHERE c.type = {a[1]}" if typed else ""
        return (f"COALESCE((SELECT SUM(CAST(c.amount AS NUMERIC)) FROM UNNEST({a[0]}) AS c"
                f"{cond}), 0)")
    if d == DUCKDB:
        items = f"coalesce({a[0]}, [])"
        if typed:
            items = f"list_filter({items}, lambda c: c.type = {a[1]})"
        return (f"coalesce(list_sum(list_transform({items}, lambda c: "
                f"CAST(c.amount AS DECIMAL(38, 12)))), 0)")
    raise NotInDialect("an array of credits (a GCP billing export)")


def _has(d: str, a: list[str]) -> str:
    if d == BIGQUERY:
        return f"EXISTS(SELECT 1 FROM UNNEST({a[0]}) AS c WHERE c.type = {a[1]})"
    if d == DUCKDB:
        return (f"list_contains(list_transform(coalesce({a[0]}, []), lambda c: c.type), "
                f"{a[1]})")
    raise NotInDialect("an array of credits (a GCP billing export)")


def _ilike(d: str, a: list[str]) -> str:
    if d == DUCKDB:
        return f"{a[0]} ILIKE {a[1]}"
    return f"LOWER({a[0]}) LIKE LOWER({a[1]})"


def _hour(d: str, a: list[str]) -> str:
    """The start of a timestamp's hour, as whole seconds since the epoch."""
    if d == BIGQUERY:
        return f"UNIX_SECONDS(TIMESTAMP_TRUNC({a[0]}, HOUR))"
    if d == TRINO:
        return f"CAST(to_unixtime(date_trunc('hour', {a[0]})) AS BIGINT)"
    return f"CAST(epoch(date_trunc('hour', {a[0]})) AS BIGINT)"


def _starts(d: str, a: list[str]) -> str:
    return f"starts_with({a[0]}, {a[1]})"


def _ends(d: str, a: list[str]) -> str:
    if d == BIGQUERY:
        return f"ENDS_WITH({a[0]}, {a[1]})"
    if d == TRINO:      # Trino has starts_with, no ends_with
        return f"(substr({a[0]}, -length({a[1]})) = {a[1]})"
    return f"ends_with({a[0]}, {a[1]})"


PLACEHOLDERS: dict[str, Callable[[str, list[str]], str]] = {
    "GL_DEC": _dec, "GL_TS": _ts, "GL_MAP": _map, "GL_JSON": _json, "GL_LABEL": _label,
    "GL_CREDITS": _credits, "GL_HAS": _has, "GL_ILIKE": _ilike, "GL_HOUR": _hour,
    "GL_STARTS": _starts, "GL_ENDS": _ends,
}

#: how each engine unnests a GCP row's credits into lines of their own (a FROM clause over
#: ``raw``; each credit is ``c``).
CREDIT_ROWS = {
    DUCKDB: "(SELECT *, unnest(credits) AS c FROM raw)",
    BIGQUERY: "raw CROSS JOIN UNNEST(raw.credits) AS c",
}
CREDIT_FROM = "gl_credit_rows"


def render(text: str, dialect: str, source: str) -> str:
    """``text`` (DuckDB's dialect with placeholders) as ``dialect``'s SQL reading ``source``
    (a table name quoted for that engine, or a DuckDB table function). Raises NotInDialect."""
    import sqlglot
    from sqlglot import exp

    if dialect not in DIALECTS:
        raise ValueError(dialect)
    tree = sqlglot.parse_one(text, read=DUCKDB)

    def swap(node):
        if isinstance(node, exp.Anonymous) and str(node.this).upper() in PLACEHOLDERS:
            args = [x.sql(dialect=dialect) for x in node.expressions]
            return sqlglot.parse_one(PLACEHOLDERS[str(node.this).upper()](dialect, args),
                                     read=dialect)
        return node

    tree = tree.transform(swap)
    if dialect == DUCKDB:
        # DuckDB materialises a CTE read twice (``raw``: by the mapping and by the total),
        # copying every column of every line; inlined, each reader scans only what it needs
        for cte in tree.find_all(exp.CTE):
            cte.set("materialized", False)
    out = tree.sql(dialect=dialect)
    if CREDIT_FROM in out:
        if dialect not in CREDIT_ROWS:
            raise NotInDialect("an array of credits (a GCP billing export)")
        out = out.replace(CREDIT_FROM, CREDIT_ROWS[dialect])
    return out.replace(SOURCE, source)
