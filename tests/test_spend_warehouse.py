"""`gpulease spend --bill bq://... | athena://...` (issue 33 item 3): the bill queried where it
lives with the one query `spend` runs on a file, pushed down; only the groups come back.

BigQuery: a strict fake of its REST API (tests/fakes/bigquery.py) holding the generated GCP
export, which parses the query as GoogleSQL, refuses what BigQuery refuses and runs the rest.
Athena: moto's server (Glue GetTable, Athena work groups and query executions). moto runs no
SQL: it answers GetQueryResults from a queue the test fills, here with what the same query, as
DuckDB runs it, returns from the same CUR 2.0 month; the Trino text Athena receives is checked
to parse as Trino with every function known. Both must reconcile exactly as the file does."""
from __future__ import annotations

import datetime as dt
import decimal
import json

import boto3
import duckdb
import pytest
import requests

from gpulease.cli import main
from gpulease.spend import classify as C
from gpulease.spend import query as Q
from gpulease.spend import sources as S
from gpulease.spend import warehouse as W
from tests import billgen
from tests.fakes import moto_strict
from tests.fakes.bigquery import FakeBigQuery
from tests.timeouts import HANG_S

NOW = "2026-12-04T00:00:00Z"
MONTH = "2026-10"
PROJECT, DATASET, TABLE = "acme-billing", "billing", "gcp_billing_export_v1_0123"
BQ = f"bq://{PROJECT}.{DATASET}.{TABLE}"
PARTITIONED = "gcp_billing_export_resource_v1_0123"
WORKGROUP, GLUE_DB, GLUE_TABLE = "finops", "cur_db", "cur2_export"
ATHENA = f"athena://{WORKGROUP}/{GLUE_DB}.{GLUE_TABLE}"


@pytest.fixture(scope="module")
def stack():
    """The prod stack's plan and loaded stack (tests/billgen.py)."""
    return billgen.stack_plan()


@pytest.fixture(scope="module")
def month(stack, tmp_path_factory):
    plan, loaded = stack
    paths, exp = billgen.generate(plan, loaded.catalog, tmp_path_factory.mktemp("bills"),
                                  formats=("focus", "cur2", "gcp"))
    return paths, exp


@pytest.fixture(scope="module")
def bigquery(month):
    fake = FakeBigQuery(PROJECT)
    fake.load(DATASET, TABLE, f"SELECT * FROM read_json('{month[0]['gcp']}', "
                              "format = 'newline_delimited')")
    # the detailed export's table, partitioned by ingestion day: lines land up to 6 hours
    # after their usage starts, so the month's last hours are in November's first partition
    fake.load(DATASET, PARTITIONED, f"SELECT * FROM read_json('{month[0]['gcp']}', "
                                    "format = 'newline_delimited')",
              ingestion_partitions="usage_start_time + INTERVAL 6 HOUR")
    url = fake.start()
    yield fake, url
    fake.stop()


def _spend(capsys, bill: str, *extra: str) -> tuple[int, dict | None, str]:
    rc = main(["spend", "--stack", "prod", "--bill", bill, "--month", MONTH, "--now", NOW,
               "--json", *extra])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if out.out.strip() else None), out.err


def _same_view(warehouse: dict, file: dict) -> None:
    """Everything but where it came from is identical, the config change included."""
    for key in ("total_billed_usd", "classes_usd", "rows", "unmatched_usd", "provisional",
                "conserved", "unmatched", "clusters"):
        assert warehouse[key] == file[key], key


def _recommend(capsys, bill: str, *extra: str) -> tuple[int, dict | None, str]:
    rc = main(["recommend", "--stack", "prod", "--from-bill", bill, "--json", *extra])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if out.out.strip() else None), out.err


def test_spend_without_month_from_a_warehouse_says_the_change_needs_it(bigquery, capsys,
                                                                      monkeypatch, month):
    _, url = bigquery
    monkeypatch.setenv("GPULEASE_GCP_ENDPOINT", url)
    rc = main(["spend", "--stack", "prod", "--bill", BQ, "--now", NOW, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["conserved"]
    short = next(c for c in doc["clusters"] if c["cluster"] == month[1].short)
    assert "give --month YYYY-MM" in " ".join(short["config_change"]["why"])


def test_recommend_from_bigquery_is_the_files_recommendation(month, bigquery, capsys,
                                                            monkeypatch):
    fake, url = bigquery
    monkeypatch.setenv("GPULEASE_GCP_ENDPOINT", url)
    fake.calls.clear()
    rc, doc, err = _recommend(capsys, BQ, "--month", MONTH)
    assert rc == 0, err
    assert [m for m, p in fake.calls if p.endswith("/queries")] == ["POST"]    # one query
    rc, file_doc, _ = _recommend(capsys, str(month[0]["gcp"]))
    assert doc["clusters"] == file_doc["clusters"]
    short = next(c for c in doc["clusters"] if c["name"] == month[1].short)
    assert short["profile"][0]["hours_per_month"] == month[1].short_hours[1]


def test_recommend_from_a_warehouse_needs_a_month(capsys, bigquery, monkeypatch):
    monkeypatch.setenv("GPULEASE_GCP_ENDPOINT", bigquery[1])
    rc, doc, err = _recommend(capsys, BQ)
    assert rc == 2 and doc is None and "--month" in err and "many months" in err


# ---- BigQuery ---------------------------------------------------------------------------------
def test_bigquery_one_pushed_down_query_reconciles_as_the_file(month, bigquery, capsys,
                                                               monkeypatch):
    fake, url = bigquery
    monkeypatch.setenv("GPULEASE_GCP_ENDPOINT", url)
    fake.calls.clear()
    fake.queries.clear()
    rc, doc, _ = _spend(capsys, BQ)
    assert rc == 0 and doc["conserved"] is True
    assert doc["bill"]["engine"] == W.BIGQUERY and doc["bill"]["source"] == BQ
    # one metadata call, then ONE query: no row is listed, no table read
    assert fake.calls == [
        ("GET", f"/bigquery/v2/projects/{PROJECT}/datasets/{DATASET}/tables/{TABLE}"),
        ("POST", f"/bigquery/v2/projects/{PROJECT}/queries")]
    assert len(fake.queries) == 1
    rc, file_doc, _ = _spend(capsys, str(month[0]["gcp"]))
    assert rc == 0
    _same_view(doc, file_doc)
    exp = month[1]
    assert doc["rows"]["adjustment"] == 1 and doc["provisional"]["rows"] == 1
    assert sorted(u["resource"].rsplit("/", 1)[-1] for u in doc["unmatched"]) == exp.nat_ids
    # with --month the same one query returns the nodes per hour: the config change is the file's
    short = next(c for c in doc["clusters"] if c["cluster"] == exp.short)
    assert short["config_change"] == next(c for c in file_doc["clusters"]
                                          if c["cluster"] == exp.short)["config_change"]
    assert short["config_change"]["set"]["demand"][0]["hours_per_month"] == exp.short_hours[1]


def test_bigquery_reads_no_partition_before_the_month(month, bigquery, capsys, monkeypatch):
    """An ingestion-time partitioned export: the query reads partitions from the month's first
    day on (BigQuery bills the bytes it reads), never stops at its last (late lines count)."""
    fake, url = bigquery
    monkeypatch.setenv("GPULEASE_GCP_ENDPOINT", url)
    fake.queries.clear()
    rc, doc, err = _spend(capsys, f"bq://{PROJECT}.{DATASET}.{PARTITIONED}")
    assert rc == 0, err
    assert "_PARTITIONTIME >= TIMESTAMP('2026-10-01T00:00:00Z')" in fake.queries[0]
    assert "_PARTITIONTIME <" not in fake.queries[0]
    late = fake.con.execute(f'SELECT count(*) FROM "{fake.tables[(DATASET, PARTITIONED)]}" '
                            "WHERE _PARTITIONTIME >= TIMESTAMPTZ '2026-11-01 00:00:00+00' "
                            "AND usage_start_time < TIMESTAMPTZ '2026-11-01 00:00:00+00'"
                            ).fetchone()[0]
    assert late > 0                       # the month's last hours sit in November's partition
    rc, file_doc, _ = _spend(capsys, str(month[0]["gcp"]))
    _same_view(doc, file_doc)
    # an unpartitioned table has no _PARTITIONTIME: BigQuery (and the fake) refuse it there
    fake.queries.clear()
    assert _spend(capsys, BQ)[0] == 0 and "_PARTITIONTIME" not in fake.queries[0]
    r = requests.post(f"{url}/bigquery/v2/projects/{PROJECT}/queries", timeout=HANG_S, json={
        "query": f"SELECT cost FROM `{PROJECT}.{DATASET}.{TABLE}` WHERE _PARTITIONTIME IS NULL",
        "useLegacySql": False})
    assert r.status_code == 400


def test_bigquery_query_still_running_is_waited_for(month, bigquery, capsys, monkeypatch):
    """jobs.query returns before the query ends (jobComplete false): the reader waits for it
    (getQueryResults / jobs.get) and reads the same answer; still one query."""
    fake, url = bigquery
    monkeypatch.setenv("GPULEASE_GCP_ENDPOINT", url)
    rc, done, _ = _spend(capsys, BQ)
    fake.running_polls = 2
    fake.calls.clear()
    try:
        rc2, waited, err = _spend(capsys, BQ)
    finally:
        fake.running_polls = 0
    assert rc == 0 and rc2 == 0, err
    polls = [p for m, p in fake.calls if m == "GET" and "/queries/" in p]
    assert len(polls) >= 3                  # two "still running", then the answer
    assert [m for m, p in fake.calls if p.endswith("/queries")] == ["POST"]
    _same_view(waited, done)


def test_bigquery_answer_in_pages_is_read_whole(month, bigquery, capsys, monkeypatch):
    fake, url = bigquery
    monkeypatch.setenv("GPULEASE_GCP_ENDPOINT", url)
    rc, whole, _ = _spend(capsys, BQ)
    fake.page_rows = 3
    fake.calls.clear()
    try:
        rc2, paged, _ = _spend(capsys, BQ)
    finally:
        fake.page_rows = 100_000
    assert rc == rc2 == 0
    assert any(path.startswith(f"/bigquery/v2/projects/{PROJECT}/queries/")
               for _, path in fake.calls), fake.calls
    assert [m for m, p in fake.calls if p.endswith("/queries")] == ["POST"]
    _same_view(paged, whole)


def test_the_fake_refuses_what_bigquery_refuses(month, bigquery):
    """The DuckDB text itself, a NUMERIC BigQuery cannot hold, legacy SQL, an unqualified or
    unknown table, an unknown column: each a 400/404 in BigQuery's error shape."""
    fake, url = bigquery
    post = f"{url}/bigquery/v2/projects/{PROJECT}/queries"
    con = duckdb.connect()
    src = S.open_source(con, str(month[0]["gcp"]))
    now = dt.datetime(2026, 12, 4, tzinfo=dt.timezone.utc)
    duck = C.one_query_sql(src, Q.DUCKDB, month=MONTH, now=now).replace(
        src.reader, f"`{PROJECT}.{DATASET}.{TABLE}`")
    table = f"`{PROJECT}.{DATASET}.{TABLE}`"
    cases = [
        (duck, 400, "Syntax error"),             # DuckDB's lambdas are not GoogleSQL
        (f"SELECT list_extract(labels, 1) FROM {table}", 400, "Function not found"),
        (f"SELECT json_extract_string(cost_type, '$.a') FROM {table}", 400,
         "Function not found"),
        (f"SELECT CAST(cost AS NUMERIC(38, 12)) FROM {table}", 400, "NUMERIC"),
        (f"SELECT labels[1] FROM {table}", 400, "OFFSET"),
        (f"SELECT cost FROM {TABLE}", 400, "qualified"),
        (f"SELECT cost FROM `{PROJECT}.{DATASET}.nope`", 404, "Not found: Table"),
        (f"SELECT no_such_column FROM {table}", 400, "no_such_column"),
        (f"SELEC cost FROM {table}", 400, "Syntax error"),
        (f"SELECT 'g' AS part, cost_type, sum(cost) FROM {table} GROUP BY 1, 2", 400,
         "Cannot GROUP BY literal values"),
        (f"SELECT cost_type, sum(cost) FROM {table} GROUP BY 3", 400, "out of range"),
    ]
    for sql, status, words in cases:
        r = requests.post(post, json={"query": sql, "useLegacySql": False}, timeout=HANG_S)
        assert r.status_code == status, (sql[:60], r.text[:300])
        err = r.json()["error"]
        reason = "notFound" if status == 404 else "invalidQuery"
        assert err["errors"][0]["reason"] == reason and words in err["message"], \
            (words, err["message"])
    r = requests.post(post, json={"query": f"SELECT cost FROM {table}"}, timeout=HANG_S)
    assert r.status_code == 400 and "useLegacySql" in r.json()["error"]["message"]
    r = requests.get(f"{url}/bigquery/v2/projects/{PROJECT}/datasets/{DATASET}/tables/nope",
                     timeout=HANG_S)
    assert r.status_code == 404 and r.json()["error"]["errors"][0]["reason"] == "notFound"
    # what gpulease sends passes
    good = C.one_query_sql(src, Q.BIGQUERY, month=MONTH, now=now).replace(src.reader, table)
    r = requests.post(post, json={"query": good, "useLegacySql": False}, timeout=HANG_S)
    assert r.status_code == 200, r.text[:300]


def test_bigquery_missing_table_is_exit_2_naming_the_bill(bigquery, capsys, monkeypatch):
    _, url = bigquery
    monkeypatch.setenv("GPULEASE_GCP_ENDPOINT", url)
    rc, doc, err = _spend(capsys, f"bq://{PROJECT}.{DATASET}.nope")
    assert rc == 2 and doc is None
    assert "--bill" in err and f"bq://{PROJECT}.{DATASET}.nope" in err and "no such table" in err
    assert "Traceback" not in err


def test_bigquery_without_credentials_is_exit_2_with_what_to_set(capsys, no_gcp):
    rc, doc, err = _spend(capsys, BQ)
    assert rc == 2 and doc is None
    assert "GOOGLE_APPLICATION_CREDENTIALS" in err and "bigquery.jobs.create" in err
    assert "Traceback" not in err


# ---- Athena (moto) ----------------------------------------------------------------------------
_HIVE = {"VARCHAR": "string", "DOUBLE": "double", "INTEGER": "int", "BIGINT": "bigint",
         "TIMESTAMP WITH TIME ZONE": "timestamp", "BOOLEAN": "boolean"}


def _hive(duck: str) -> str:
    u = duck.upper()
    if u.startswith("DECIMAL"):
        return u.lower().replace(" ", "")
    if u.startswith("MAP("):
        return "map<string,string>"
    return _HIVE[u]


def _athena_cell(value) -> dict:
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"VarCharValue": "true" if value else "false"}
    if isinstance(value, decimal.Decimal):
        return {"VarCharValue": format(value, "f")}
    return {"VarCharValue": str(value)}


@pytest.fixture
def athena(month, moto_url, monkeypatch):
    """A work group with a result location and the CUR 2.0 month's table in Glue."""
    moto_strict.reset(moto_url)
    for k, v in (("AWS_ENDPOINT_URL", moto_url), ("AWS_ACCESS_KEY_ID", "testing"),
                 ("AWS_SECRET_ACCESS_KEY", "testing"), ("AWS_DEFAULT_REGION", "us-east-1"),
                 ("AWS_REGION", "us-east-1")):
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    s = moto_strict.test_session()
    s.client("s3", region_name="us-east-1").create_bucket(Bucket="finops-athena-results")
    s.client("athena", region_name="us-east-1").create_work_group(
        Name=WORKGROUP, Configuration={"ResultConfiguration": {
            "OutputLocation": "s3://finops-athena-results/spend/"}})
    con = duckdb.connect()
    src = S.open_source(con, str(month[0]["cur2"]))
    glue = s.client("glue", region_name="us-east-1")
    glue.create_database(DatabaseInput={"Name": GLUE_DB})
    # Glue keeps every name in lowercase (the partition folder BILLING_PERIOD= included)
    cols = [{"Name": n.lower(), "Type": _hive(t)} for n, t in src.columns.items()
            if n != "BILLING_PERIOD"]
    glue.create_table(DatabaseName=GLUE_DB, TableInput={
        "Name": GLUE_TABLE, "StorageDescriptor": {"Columns": cols,
                                                  "Location": "s3://cur-bucket/cur2/data/"},
        "PartitionKeys": [{"Name": "billing_period", "Type": "string"}]})
    return s, src


def _queue_answer(moto_url: str, con, src, **kw) -> str:
    """What the one query returns on this month (DuckDB runs the same text), queued as moto's
    next Athena answer; returns the Trino text Athena must receive."""
    now = dt.datetime(2026, 12, 4, tzinfo=dt.timezone.utc)
    rows = con.execute(C.one_query_sql(src, Q.DUCKDB, month=MONTH, now=now, prune=_period,
                                       **kw)).fetchall()
    header = {"Data": [{"VarCharValue": c} for c in Q.OUTPUT]}
    body = {"region": "us-east-1", "results": [{
        "rows": [header] + [{"Data": [_athena_cell(v) for v in r]} for r in rows],
        "column_info": [{"Name": c, "Type": "varchar"} for c in Q.OUTPUT]}]}
    r = requests.post(f"{moto_url}/moto-api/static/athena/query-results", json=body,
                      timeout=HANG_S)
    assert r.status_code == 201
    import dataclasses
    return C.one_query_sql(dataclasses.replace(src, reader=f'"{GLUE_DB}"."{GLUE_TABLE}"'),
                           Q.TRINO, month=MONTH, now=now, prune=_period, **kw)


def _period(month_start) -> str:
    """What the Athena reader prunes a BILLING_PERIOD-partitioned table with."""
    rd = W.AthenaReader.__new__(W.AthenaReader)
    rd.partition_keys = ["billing_period"]
    return rd.partition_floor(month_start)


def test_athena_one_query_in_trino_reconciles_as_the_file(month, stack, athena, moto_url,
                                                          capsys):
    import sqlglot
    from sqlglot import exp

    s, src = athena
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    plan, _ = stack
    want_sql = _queue_answer(moto_url, con, src, hourly=True, index=C.PlanIndex.of(plan))
    rc, doc, err = _spend(capsys, ATHENA)
    assert rc == 0, err
    assert doc["bill"]["engine"] == W.ATHENA and doc["bill"]["format"] == "AWS CUR 2.0"
    client = s.client("athena", region_name="us-east-1")
    ids = client.list_query_executions(WorkGroup=WORKGROUP)["QueryExecutionIds"]
    assert len(ids) == 1                                       # one query, pushed down
    ex = client.get_query_execution(QueryExecutionId=ids[0])["QueryExecution"]
    assert ex["Query"] == want_sql
    assert ex["QueryExecutionContext"]["Database"] == GLUE_DB
    tree = sqlglot.parse_one(ex["Query"], read="trino")       # Trino parses it
    assert [f.name for f in tree.find_all(exp.Anonymous)] == []
    assert "element_at" in ex["Query"].lower() and "[" not in ex["Query"]   # no map subscript
    assert "\"billing_period\" >= '2026-10'" in ex["Query"]     # no earlier period is scanned
    rc, file_doc, _ = _spend(capsys, str(month[0]["cur2"]))
    _same_view(doc, file_doc)


def test_recommend_from_athena_is_the_files_recommendation(month, stack, athena, moto_url,
                                                           capsys):
    from gpulease.cli.recommend import bill_index
    from gpulease.policy import decide

    s, src = athena
    _, loaded = stack
    index = bill_index(loaded.spec, decide(loaded.spec, loaded.catalog))
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    _queue_answer(moto_url, con, src, groups=False, hourly=True, index=index)
    rc, doc, err = _recommend(capsys, ATHENA, "--month", MONTH)
    assert rc == 0, err
    ids = s.client("athena", region_name="us-east-1").list_query_executions(
        WorkGroup=WORKGROUP)["QueryExecutionIds"]
    assert len(ids) == 1
    rc, file_doc, _ = _recommend(capsys, str(month[0]["cur2"]))
    assert doc["clusters"] == file_doc["clusters"]


@pytest.mark.parametrize("bill, words", [
    (f"athena://{WORKGROUP}/{GLUE_DB}.nope", "no such table"),
    (f"athena://nobody/{GLUE_DB}.{GLUE_TABLE}", "work group nobody"),
])
def test_athena_bad_table_or_work_group_is_exit_2(athena, capsys, bill, words):
    rc, doc, err = _spend(capsys, bill)
    assert rc == 2 and doc is None and "--bill" in err and words in err, err
    assert "Traceback" not in err


def test_athena_work_group_without_result_location_is_exit_2(athena, capsys):
    s, _ = athena
    s.client("athena", region_name="us-east-1").create_work_group(Name="bare")
    rc, doc, err = _spend(capsys, f"athena://bare/{GLUE_DB}.{GLUE_TABLE}")
    assert rc == 2 and "no query result location" in err


def test_athena_focus_table_with_glues_lowercase_names_is_read_as_focus(month, athena):
    """Glue stores FOCUS's BilledCost as billedcost; Athena resolves "BilledCost" either way,
    so the reader tells the format and writes the query whatever the case."""
    s, _ = athena
    con = duckdb.connect()
    focus = S.open_source(con, str(month[0]["focus"]))
    s.client("glue", region_name="us-east-1").create_table(DatabaseName=GLUE_DB, TableInput={
        "Name": "focus_export", "StorageDescriptor": {
            "Columns": [{"Name": n.lower(), "Type": "string"} for n in focus.columns],
            "Location": "s3://focus-bucket/focus/data/"}})
    rd = W.AthenaReader(W.parse(f"athena://{WORKGROUP}/{GLUE_DB}.focus_export"))
    cols = rd.columns()
    assert "billedcost" in list(cols) and "BilledCost" in cols
    src = S.Source(path="athena", reader='"cur_db"."focus_export"',
                   kind=S.kind_of("athena", cols), columns=cols)
    assert src.kind == S.FOCUS
    sql = C.one_query_sql(src, Q.TRINO, month=MONTH)
    assert 'json_extract_scalar("Tags"' in sql.replace("JSON_EXTRACT_SCALAR", "json_extract_scalar")
    assert rd.partition_floor(S.month_bounds(MONTH)[0]) == ""      # not partitioned


def test_athena_without_credentials_is_exit_2(no_aws, capsys):
    rc, doc, err = _spend(capsys, ATHENA)
    assert rc == 2 and doc is None
    assert "AWS_PROFILE" in err and "athena:StartQueryExecution" in err


# ---- the one text, three dialects ------------------------------------------------------------
def test_each_format_renders_where_it_lives_and_refuses_where_it_cannot(month):
    con = duckdb.connect()
    gcp = S.open_source(con, str(month[0]["gcp"]))
    cur = S.open_source(con, str(month[0]["cur2"]))
    now = dt.datetime(2026, 12, 4, tzinfo=dt.timezone.utc)
    for src, dialect in ((gcp, Q.BIGQUERY), (cur, Q.TRINO), (gcp, Q.DUCKDB), (cur, Q.DUCKDB)):
        sql = C.one_query_sql(src, dialect, month=MONTH, now=now)
        assert "GL_" not in sql and Q.SOURCE not in sql
        assert sql.count("SELECT * FROM g UNION ALL SELECT * FROM t") == 1
    assert f"charge = {S._quote(S.USAGE)}" in Q.USAGE_LINES    # the charge kind sources name
    with pytest.raises(Q.NotInDialect):
        C.one_query_sql(gcp, Q.TRINO, month=MONTH, now=now)     # labels/credits arrays
    with pytest.raises(Q.NotInDialect):
        C.one_query_sql(cur, Q.BIGQUERY, month=MONTH, now=now)  # a MAP column
