"""A strict local fake of BigQuery's REST API v2, enough for google-cloud-bigquery's
``Client.get_table`` and ``Client.query_and_wait`` (issue 33 item 3).

Written from the API reference (cloud.google.com/bigquery/docs/reference/rest/v2, as of
2026-12-04): ``tables.get``, ``jobs.query``, ``jobs.get``, ``jobs.getQueryResults``, their
response shapes (``rows: [{"f": [{"v": ...}]}]``, every value as a string or null), paging
(``pageToken`` + ``jobReference`` when the answer outgrows a page), a query still running
when jobs.query returns (``jobComplete: false``, polled through getQueryResults and jobs.get:
``running_polls``), and their errors in Google's
JSON error body (``{"error": {"code", "message", "errors": [{"reason", ...}], "status"}}``):
404 ``notFound`` for a table (in tables.get or in a query), dataset or job that does not exist, 400 ``invalidQuery`` for SQL
BigQuery would not run.

Stricter than a pass-through, as BigQuery is:
- the query is parsed as GoogleSQL (sqlglot, dialect "bigquery", errors raised): a syntax
  error is a 400;
- ``useLegacySql`` must be false (legacy SQL reads another language);
- every table must be named ``project.dataset.table`` and exist (CTE names excepted);
- a function sqlglot does not know as a GoogleSQL function is "Function not found" (400):
  DuckDB's ``list_filter``, ``list_extract``, ``json_extract_string`` ... fail here, as there;
- ``NUMERIC(P, S)`` / ``BIGNUMERIC(P, S)`` outside BigQuery's limits (NUMERIC: S <= 9,
  P - S <= 29; BIGNUMERIC: S <= 38, P - S <= 38) is a 400;
- an array subscript without OFFSET / SAFE_OFFSET / ORDINAL / SAFE_ORDINAL is a 400;
- ``GROUP BY n`` naming a literal of the select list ("Cannot GROUP BY literal values") or a
  position past its end is a 400;
- a column the table does not have fails when the query runs (400 ``invalidQuery``).
The query is then run by DuckDB on the table's rows, after sqlglot writes it in DuckDB's
dialect: the fake stands in for BigQuery's engine, not for gpulease's SQL.
"""
from __future__ import annotations

import datetime as dt
import decimal
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional
from urllib.parse import parse_qs, urlparse

import duckdb

#: rows per response page (BigQuery pages at 10 MB by default; tests shrink it to page).
DEFAULT_PAGE_ROWS = 100_000


def _error(code: int, reason: str, message: str, status: str) -> tuple[int, dict]:
    return code, {"error": {"code": code, "message": message,
                            "errors": [{"message": message, "domain": "global",
                                        "reason": reason}],
                            "status": status}}


def not_found(message: str) -> tuple[int, dict]:
    return _error(404, "notFound", message, "NOT_FOUND")


def invalid_query(message: str) -> tuple[int, dict]:
    return _error(400, "invalidQuery", message, "INVALID_ARGUMENT")


def _bq_type(duck: str) -> dict:
    """A DuckDB type as a BigQuery schema field's type / mode / fields."""
    t = duck.strip()
    if t.endswith("[]"):
        inner = _bq_type(t[:-2])
        return {**inner, "mode": "REPEATED"}
    if t.upper().startswith("STRUCT("):
        body = t[len("STRUCT("):-1]
        fields, depth, cur = [], 0, ""
        for ch in body:
            if ch == "," and depth == 0:
                fields.append(cur)
                cur = ""
                continue
            depth += ch == "("
            depth -= ch == ")"
            cur += ch
        fields.append(cur)
        out = []
        for f in fields:
            name, _, ftype = f.strip().partition(" ")
            out.append({"name": name.strip('"'), **_bq_type(ftype)})
        return {"type": "RECORD", "mode": "NULLABLE", "fields": out}
    u = t.upper()
    mapping = {"VARCHAR": "STRING", "DOUBLE": "FLOAT", "FLOAT": "FLOAT", "BIGINT": "INTEGER",
               "INTEGER": "INTEGER", "BOOLEAN": "BOOLEAN", "DATE": "DATE",
               "TIMESTAMP WITH TIME ZONE": "TIMESTAMP", "TIMESTAMP": "TIMESTAMP",
               "JSON": "JSON"}
    if u.startswith("DECIMAL"):
        return {"type": "NUMERIC", "mode": "NULLABLE"}
    if u not in mapping:
        raise ValueError(f"no BigQuery type for {duck}")
    return {"type": mapping[u], "mode": "NULLABLE"}


def _cell(value, field: dict):
    """A value as jobs.query returns it: a string (numbers, booleans, timestamps as
    microseconds since the epoch with useInt64Timestamp), a record as {"f": [...]}, an array
    as [{"v": ...}], or null."""
    if value is None:
        return None
    if field.get("mode") == "REPEATED":
        return [{"v": _cell(v, {**field, "mode": "NULLABLE"})} for v in value]
    if field["type"] == "RECORD":
        return {"f": [{"v": _cell(value.get(f["name"]), f)} for f in field["fields"]]}
    if field["type"] == "BOOLEAN":
        return "true" if value else "false"
    if field["type"] == "TIMESTAMP":
        if isinstance(value, dt.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=dt.timezone.utc)
            return str(int(value.timestamp() * 1_000_000))
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    return str(value)


class FakeBigQuery:
    """One project's tables, loaded from DuckDB-readable files; an HTTP server on 127.0.0.1."""

    def __init__(self, project: str, *, location: str = "US",
                 page_rows: int = DEFAULT_PAGE_ROWS, running_polls: int = 0):
        self.project = project
        self.location = location
        self.page_rows = page_rows
        #: a query still runs when jobs.query's wait (timeoutMs, 10 s by default) ends: its
        #: answer is jobComplete false, no rows, and this many getQueryResults calls say the
        #: same (jobs.get: state RUNNING) before it is done
        self.running_polls = running_polls
        self.con = duckdb.connect()
        self.con.execute("SET TimeZone = 'UTC'")
        self.tables: dict[tuple[str, str], str] = {}     # (dataset, table) -> DuckDB table
        self.queries: list[str] = []                     # every jobs.query text, in order
        self.calls: list[tuple[str, str]] = []           # (method, path) of every request
        self.jobs: dict[str, dict] = {}
        self.partitioned: set[tuple[str, str]] = set()   # ingestion-time partitioned tables
        self._lock = threading.Lock()
        self._server: Optional[ThreadingHTTPServer] = None

    # ---- set-up ------------------------------------------------------------------------------
    def load(self, dataset: str, table: str, select_sql: str, *,
             ingestion_partitions: Optional[str] = None) -> None:
        """Create ``dataset.table`` from a DuckDB SELECT (e.g. over read_json of an export).
        ``ingestion_partitions``: an expression over the rows giving each one's day of
        ingestion: the table is then partitioned by ingestion time (timePartitioning DAY, no
        field) and has BigQuery's ``_PARTITIONTIME`` pseudo-column (not in its schema, not in
        ``SELECT *`` there)."""
        name = f"t_{dataset}__{table}"
        if ingestion_partitions:
            select_sql = (f"SELECT *, CAST(date_trunc('day', {ingestion_partitions}) AS "
                          f"TIMESTAMPTZ) AS _PARTITIONTIME FROM ({select_sql})")
            self.partitioned.add((dataset, table))
        self.con.execute(f'CREATE OR REPLACE TABLE "{name}" AS {select_sql}')
        self.tables[(dataset, table)] = name

    def schema(self, dataset: str, table: str) -> list[dict]:
        name = self.tables[(dataset, table)]
        cols = self.con.execute(f'DESCRIBE "{name}"').fetchall()
        return [{"name": c[0], **_bq_type(c[1])} for c in cols if c[0] != "_PARTITIONTIME"]

    # ---- the server --------------------------------------------------------------------------
    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                url = urlparse(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    self._reply(*_error(400, "parseError", "Parse Error", "INVALID_ARGUMENT"))
                    return
                with fake._lock:
                    fake.calls.append((method, url.path))
                    status, out = fake.route(method, url.path, parse_qs(url.query), body)
                self._reply(status, out)

            def do_GET(self):  # noqa: N802
                self._handle("GET")

            def do_POST(self):  # noqa: N802
                self._handle("POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    # ---- routes ------------------------------------------------------------------------------
    def route(self, method: str, path: str, q: dict, body: dict) -> tuple[int, dict]:
        parts = path.strip("/").split("/")
        if parts[:2] != ["bigquery", "v2"] or len(parts) < 4 or parts[2] != "projects":
            return not_found(f"Not found: URL {path}")
        project, rest = parts[3], parts[4:]
        if project != self.project:
            return not_found(f"Not found: Project {project}")
        if method == "GET" and len(rest) == 4 and rest[0] == "datasets" and rest[2] == "tables":
            return self._table(rest[1], rest[3])
        if method == "POST" and rest == ["queries"]:
            return self._query(body)
        if method == "GET" and len(rest) == 2 and rest[0] == "queries":
            return self._results(rest[1], q)
        if method == "GET" and len(rest) == 2 and rest[0] == "jobs":
            return self._job(rest[1])
        return not_found(f"Not found: URL {path}")

    def _table(self, dataset: str, table: str) -> tuple[int, dict]:
        if not any(d == dataset for d, _ in self.tables):
            return not_found(f"Not found: Dataset {self.project}:{dataset}")
        if (dataset, table) not in self.tables:
            return not_found(f"Not found: Table {self.project}:{dataset}.{table}")
        rows = self.con.execute(
            f'SELECT count(*) FROM "{self.tables[(dataset, table)]}"').fetchone()[0]
        out = {"kind": "bigquery#table", "id": f"{self.project}:{dataset}.{table}",
               "tableReference": {"projectId": self.project, "datasetId": dataset,
                                  "tableId": table},
               "schema": {"fields": self.schema(dataset, table)},
               "numRows": str(rows), "type": "TABLE", "location": self.location}
        if (dataset, table) in self.partitioned:
            out["timePartitioning"] = {"type": "DAY"}
        return 200, out

    def _query(self, body: dict) -> tuple[int, dict]:
        sql = body.get("query")
        if not isinstance(sql, str) or not sql.strip():
            return _error(400, "invalid", "Required parameter is missing: query",
                          "INVALID_ARGUMENT")
        if body.get("useLegacySql", True) is not False:
            return invalid_query("gpulease's fake runs GoogleSQL only: set useLegacySql false "
                                 "(legacy SQL is another language)")
        loc = body.get("location")
        if loc is not None and loc != self.location:
            return not_found(f"Not found: Dataset in location {loc}")
        self.queries.append(sql)
        try:
            duck = self._check(sql)
            described = self.con.execute(f"DESCRIBE {duck}").fetchall()
            names, types = [d[0] for d in described], [d[1] for d in described]
            rows = self.con.execute(duck).fetchall()
        except _Missing as exc:
            return not_found(str(exc))
        except _Rejected as exc:
            return invalid_query(str(exc))
        except duckdb.Error as exc:
            return invalid_query(str(exc).strip().splitlines()[0])
        fields = [{"name": n, **_result_type(t)} for n, t in zip(names, types)]
        job_id = f"job_{uuid.uuid4().hex}"
        job = {"id": job_id, "sql": sql, "fields": fields,
               "rows": [{"f": [{"v": _cell(v, f)} for v, f in zip(r, fields)]} for r in rows],
               "created": dt.datetime.now(dt.timezone.utc), "pending": self.running_polls}
        self.jobs[job_id] = job
        if job["pending"]:
            return 200, self._running(job, "bigquery#queryResponse")
        max_results = body.get("maxResults")
        return 200, self._page(job, 0, int(max_results) if max_results else None,
                               kind="bigquery#queryResponse")

    def _page(self, job: dict, start: int, max_results: Optional[int], *, kind: str) -> dict:
        size = min(self.page_rows, max_results) if max_results is not None else self.page_rows
        rows = job["rows"][start:start + size]
        out = {"kind": kind, "schema": {"fields": job["fields"]},
               "jobReference": {"projectId": self.project, "jobId": job["id"],
                                "location": self.location},
               "totalRows": str(len(job["rows"])), "jobComplete": True, "cacheHit": False,
               "totalBytesProcessed": "0"}
        if rows:
            out["rows"] = rows
        if start + size < len(job["rows"]):
            out["pageToken"] = str(start + size)
        return out

    def _running(self, job: dict, kind: str) -> dict:
        return {"kind": kind, "jobComplete": False,
                "jobReference": {"projectId": self.project, "jobId": job["id"],
                                 "location": self.location}}

    def _results(self, job_id: str, q: dict) -> tuple[int, dict]:
        job = self.jobs.get(job_id)
        if job is None:
            return not_found(f"Not found: Job {self.project}:{self.location}.{job_id}")
        if job["pending"]:
            job["pending"] -= 1
            return 200, self._running(job, "bigquery#getQueryResultsResponse")
        token = (q.get("pageToken") or [None])[0]
        start = int(token) if token else int((q.get("startIndex") or ["0"])[0])
        mr = (q.get("maxResults") or [None])[0]
        max_results = int(mr) if mr is not None else None
        if max_results == 0:
            out = self._page(job, 0, 0, kind="bigquery#getQueryResultsResponse")
            out.pop("pageToken", None)
            return 200, out
        return 200, self._page(job, start, max_results, kind="bigquery#getQueryResultsResponse")

    def _job(self, job_id: str) -> tuple[int, dict]:
        job = self.jobs.get(job_id)
        if job is None:
            return not_found(f"Not found: Job {self.project}:{self.location}.{job_id}")
        ms = str(int(job["created"].timestamp() * 1000))
        return 200, {"kind": "bigquery#job", "id": f"{self.project}:{self.location}.{job_id}",
                     "jobReference": {"projectId": self.project, "jobId": job_id,
                                      "location": self.location},
                     "configuration": {"query": {"query": job["sql"], "useLegacySql": False}},
                     "status": {"state": "RUNNING" if job["pending"] else "DONE"},
                     "statistics": {"creationTime": ms, "startTime": ms, "endTime": ms,
                                    "query": {"totalBytesProcessed": "0",
                                              "statementType": "SELECT"}}}

    # ---- strictness --------------------------------------------------------------------------
    def _check(self, sql: str) -> str:
        """The query in DuckDB's dialect over the fake's tables, or _Rejected for what
        BigQuery would refuse."""
        import sqlglot
        from sqlglot import exp
        from sqlglot.errors import ParseError

        try:
            tree = sqlglot.parse_one(sql, read="bigquery")
        except ParseError as exc:
            raise _Rejected(f"Syntax error: {str(exc).splitlines()[0]}") from None
        ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
        for node in tree.find_all(exp.Anonymous):
            raise _Rejected(f"Function not found: {node.name}")
        for node in tree.find_all(exp.DataType):
            _check_numeric(node)
        for select in tree.find_all(exp.Select):
            group = select.args.get("group")
            for g in (group.expressions if group else ()):
                if isinstance(g, exp.Literal) and not g.is_string:
                    cols = select.expressions
                    k = int(g.this)
                    if not 1 <= k <= len(cols):
                        raise _Rejected(f"GROUP BY position {k} is out of range")
                    if isinstance(cols[k - 1].unalias(), exp.Literal):
                        raise _Rejected("Cannot GROUP BY literal values")
        for node in tree.find_all(exp.Bracket):
            if not node.args.get("offset") and not node.args.get("safe") and \
                    not _is_offset(node):
                raise _Rejected("Array element access with array[position] is not supported. "
                                "Use array[OFFSET(zero_based_offset)] or "
                                "array[ORDINAL(one_based_ordinal)]")

        def swap(node):
            if isinstance(node, exp.DataType) and node.this == exp.DataType.Type.DECIMAL \
                    and not node.expressions:
                # BigQuery's NUMERIC is NUMERIC(38, 9); DuckDB's bare DECIMAL is (18, 3)
                return exp.DataType.build("DECIMAL(38, 9)", dialect="duckdb")
            if isinstance(node, exp.Table) and not node.args.get("joins"):
                name = node.name
                if not node.args.get("db") and name in ctes:
                    return node
                if isinstance(node.this, exp.Unnest) or node.find(exp.Unnest):
                    return node
                project, dataset = node.catalog, node.db
                if not (project and dataset):
                    raise _Rejected(f"Table \"{node.sql(dialect='bigquery')}\" must be "
                                    "qualified with a dataset (e.g. dataset.table)")
                if project != self.project:
                    raise _Missing(f"Not found: Project {project}")
                if (dataset, name) not in self.tables:
                    raise _Missing(f"Not found: Table {project}:{dataset}.{name} was not "
                                   f"found in location {self.location}")
                alias = node.alias
                new = exp.to_table(f'"{self.tables[(dataset, name)]}"', dialect="duckdb")
                if alias:
                    new.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
                return new
            return node

        return tree.transform(swap).sql(dialect="duckdb")


def _is_offset(node) -> bool:
    from sqlglot import exp

    idx = node.expressions[0] if node.expressions else None
    return isinstance(idx, exp.Anonymous) and idx.name.upper() in (
        "OFFSET", "SAFE_OFFSET", "ORDINAL", "SAFE_ORDINAL")


def _check_numeric(node) -> None:
    from sqlglot import exp

    kind = node.this
    if kind not in (exp.DataType.Type.DECIMAL, exp.DataType.Type.BIGDECIMAL):
        return
    params = [int(p.this.this) if isinstance(p.this, exp.Literal) else int(p.name)
              for p in node.expressions]
    if not params:
        return
    p, s = params[0], params[1] if len(params) > 1 else 0
    if kind == exp.DataType.Type.DECIMAL and (s > 9 or p - s > 29 or p < 1):
        raise _Rejected(f"Invalid NUMERIC type parameters ({p}, {s}): NUMERIC allows scale "
                        "0-9 and precision - scale <= 29")
    if kind == exp.DataType.Type.BIGDECIMAL and (s > 38 or p - s > 38 or p < 1):
        raise _Rejected(f"Invalid BIGNUMERIC type parameters ({p}, {s})")


def _result_type(duck: str) -> dict:
    u = duck.upper()
    if u.startswith("DECIMAL"):
        return {"type": "NUMERIC", "mode": "NULLABLE"}
    if u in ("HUGEINT", "BIGINT", "INTEGER"):
        return {"type": "INTEGER", "mode": "NULLABLE"}
    return _bq_type(duck)


class _Rejected(Exception):
    pass


class _Missing(Exception):
    pass
