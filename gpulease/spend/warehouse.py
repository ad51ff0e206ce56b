"""Warehouse bill sources: ``bq://project.dataset.table`` and ``athena://workgroup/database.table``.

The bill is queried where it lives, with the ONE query `gpulease spend` runs on a file
(gpulease.spend.query: the same text, produced in BigQuery's or Trino's dialect): only the
groups come back, never the rows. Before it, one metadata call reads the table's columns (the
format is told from them, as for a file): BigQuery ``tables.get``, or the AWS Glue Data
Catalog's ``GetTable`` (Athena's tables live there). Credentials are the SDKs' own chains
(gpulease.credentials); none found: exit 2 with what to set, nothing called.

The address is parsed and checked first. The name rules are the clouds' own, so a typo fails
here (exit 2, naming ``--bill``) instead of as a remote error:

* BigQuery project ids: 6-30 characters, lowercase letters, digits and hyphens, starting with a
  letter (a legacy domain-scoped id ``example.com:project`` is accepted); dataset ids: letters,
  digits and underscores, at most 1,024 characters; table ids: at most 1,024 characters
  (cloud.google.com/bigquery/docs/datasets#dataset-naming, /docs/tables#table_naming).
* Athena work group names: 1-128 of ``a-z A-Z 0-9 . _ -`` (Athena API reference, WorkGroup
  Name); database and table names (AWS Glue catalog): lowercase letters, digits and underscores,
  at most 255 characters (docs.aws.amazon.com/athena/latest/ug/tables-databases-columns-names.html).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from gpulease.errors import Finding, InputError

BIGQUERY = "bigquery"
ATHENA = "athena"

_SCHEMES = {"bq://": BIGQUERY, "athena://": ATHENA}

_BQ_PROJECT = re.compile(r"^(?:[a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_BQ_DATASET = re.compile(r"^[A-Za-z0-9_]{1,1024}$")
_BQ_TABLE = re.compile(r"^[^.`/\s]{1,1024}$")
_ATHENA_WORKGROUP = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_GLUE_NAME = re.compile(r"^[a-z0-9_]{1,255}$")

FIX = ("write the table as bq://PROJECT.DATASET.TABLE or athena://WORKGROUP/DATABASE.TABLE "
       "(docs/spend.md, \"Bill sources\")")


@dataclass(frozen=True)
class WarehouseTable:
    """A bill table in a warehouse: which one, and where."""

    warehouse: str         # BIGQUERY | ATHENA
    container: str         # BigQuery project, or Athena work group
    database: str          # BigQuery dataset, or Glue database
    table: str


def _bad(text: str, message: str) -> InputError:
    return InputError([Finding("--bill", f"{text}: {message}; {FIX}")])


def parse(text: str) -> Optional[WarehouseTable]:
    """The warehouse table ``text`` names, or None when ``text`` is not a warehouse address
    (then it is a file path). Raises InputError (exit 2) for a malformed address."""
    scheme = next((s for s in _SCHEMES if text.lower().startswith(s)), None)
    if scheme is None:
        return None
    rest = text[len(scheme):]
    if _SCHEMES[scheme] == BIGQUERY:
        parts = rest.rsplit(".", 2)
        if len(parts) != 3 or not all(parts):
            raise _bad(text, "a BigQuery table needs project, dataset and table")
        project, dataset, table = parts
        if not _BQ_PROJECT.match(project):
            raise _bad(text, f"{project!r} is not a BigQuery project id (6-30 lowercase "
                             "letters, digits or hyphens, starting with a letter)")
        if not _BQ_DATASET.match(dataset):
            raise _bad(text, f"{dataset!r} is not a BigQuery dataset id (letters, digits, "
                             "underscores)")
        if not _BQ_TABLE.match(table):
            raise _bad(text, f"{table!r} is not a BigQuery table id")
        return WarehouseTable(BIGQUERY, project, dataset, table)
    workgroup, slash, qualified = rest.partition("/")
    database, dot, table = qualified.partition(".")
    if not (slash and dot and workgroup and database and table):
        raise _bad(text, "an Athena table needs a work group, a database and a table")
    if not _ATHENA_WORKGROUP.match(workgroup):
        raise _bad(text, f"{workgroup!r} is not an Athena work group name (1-128 of "
                         "letters, digits, '.', '_', '-')")
    for what, name in (("database", database), ("table", table)):
        if not _GLUE_NAME.match(name):
            raise _bad(text, f"{name!r} is not an Athena {what} name (lowercase letters, "
                             "digits, underscores)")
    return WarehouseTable(ATHENA, workgroup, database, table)


# ---- reading the bill in place ---------------------------------------------------------------
#: What each warehouse's reader needs, for the credentials message.
NEEDS = {
    BIGQUERY: ("spend reads the bill table in BigQuery: bigquery.tables.get and "
               "bigquery.tables.getData on the table, bigquery.jobs.create on the project"),
    ATHENA: ("spend queries the bill table with Athena: athena:StartQueryExecution, "
             "GetQueryExecution, GetQueryResults and GetWorkGroup on the work group, "
             "glue:GetTable on the table, s3 read of the table's files and write to the work "
             "group's query result location"),
}

#: Athena: how long to wait for the query, and the first poll interval (doubling to 5 s).
ATHENA_TIMEOUT_S = 1800.0
ATHENA_FIRST_POLL_S = 0.2
#: rows per GetQueryResults page (the API's maximum).
ATHENA_PAGE = 1000


class WarehouseError(Exception):
    """The warehouse refused or failed the read (its own words); exit 2 names --bill."""


def address_text(t: WarehouseTable) -> str:
    if t.warehouse == BIGQUERY:
        return f"bq://{t.container}.{t.database}.{t.table}"
    return f"athena://{t.container}/{t.database}.{t.table}"


def table_ref(t: WarehouseTable) -> str:
    """The table as the warehouse's SQL names it."""
    if t.warehouse == BIGQUERY:
        return f"`{t.container}.{t.database}.{t.table}`"
    return f'"{t.database}"."{t.table}"'


def dialect(t: WarehouseTable) -> str:
    from gpulease.spend import query as Q

    return Q.BIGQUERY if t.warehouse == BIGQUERY else Q.TRINO


def preflight(t: WarehouseTable) -> None:
    """Exit 2 (CredentialsError) naming what to set when the warehouse's cloud has no
    credentials: nothing is called."""
    from gpulease import credentials
    from gpulease.clouds.aws.cloud import AWS
    from gpulease.clouds.gcp.cloud import GCP

    cloud = GCP.name if t.warehouse == BIGQUERY else AWS.name
    credentials.preflight([cloud], command="spend", needs={cloud: NEEDS[t.warehouse]})


def _bq_type(field) -> str:
    """A BigQuery schema field's type in the words gpulease.spend.sources reads (DuckDB's:
    STRUCT(a ..., b ...), a trailing [] for a REPEATED field)."""
    if field.field_type in ("RECORD", "STRUCT"):
        inner = ", ".join(f"{f.name} {_bq_type(f)}" for f in field.fields)
        text = f"STRUCT({inner})"
    else:
        text = field.field_type
    return text + "[]" if field.mode == "REPEATED" else text


class BigQueryReader:
    """``bq://PROJECT.DATASET.TABLE`` through google-cloud-bigquery (jobs.query)."""

    def __init__(self, t: WarehouseTable, endpoint: Optional[str] = None):
        import os

        from google.cloud import bigquery

        from gpulease.credentials.gcp import ENDPOINT_ENV

        self.t = t
        endpoint = endpoint or os.environ.get(ENDPOINT_ENV)
        if endpoint:
            from google.api_core.client_options import ClientOptions
            from google.auth.credentials import AnonymousCredentials

            self.client = bigquery.Client(project=t.container,
                                          credentials=AnonymousCredentials(),
                                          client_options=ClientOptions(api_endpoint=endpoint))
        else:
            self.client = bigquery.Client(project=t.container)
        self.location: Optional[str] = None
        self.partitioning = None         # tables.get's timePartitioning

    def columns(self) -> dict:
        from google.api_core import exceptions as gexc

        try:
            table = self.client.get_table(f"{self.t.container}.{self.t.database}.{self.t.table}")
        except gexc.NotFound:
            raise WarehouseError("no such table (BigQuery tables.get: 404 notFound)") from None
        except gexc.GoogleAPICallError as exc:
            raise WarehouseError(f"BigQuery tables.get failed: {_api_message(exc)}") from None
        self.location = table.location
        self.partitioning = table.time_partitioning
        return {f.name: _bq_type(f) for f in table.schema}

    def partition_floor(self, month_start) -> str:
        """The partitions that can hold a line of the month: the billing export's tables are
        partitioned by day, on ingestion (``_PARTITIONTIME``) or on ``export_time``. A line
        used from ``month_start`` on is exported then or later, so the partitions before it
        are never read (BigQuery bills the bytes it reads). No upper bound: late lines and
        corrections of the month arrive in later partitions."""
        tp = self.partitioning
        if tp is None:
            return ""
        from gpulease.spend import query as Q

        if tp.field is None:
            return f"_PARTITIONTIME >= {Q.ts(month_start)}"
        if tp.field in ("export_time", "usage_start_time"):
            return f'CAST("{tp.field}" AS TIMESTAMPTZ) >= {Q.ts(month_start)}'
        return ""

    def run(self, sql: str) -> list[tuple]:
        from google.api_core import exceptions as gexc

        try:
            rows = self.client.query_and_wait(sql, location=self.location)
            return [tuple(r.values()) for r in rows]
        except gexc.GoogleAPICallError as exc:
            raise WarehouseError(f"BigQuery rejected the query: {_api_message(exc)}") from None


def _api_message(exc) -> str:
    code = getattr(exc, "code", None)
    reason = getattr(exc, "reason", None)
    msg = getattr(exc, "message", None) or str(exc)
    return f"{msg} (HTTP {int(code) if code is not None else '?'}" + \
        (f", {reason})" if reason else ")")


class AthenaReader:
    """``athena://WORKGROUP/DATABASE.TABLE`` through boto3: the columns from the Glue Data
    Catalog, the query through Athena (the work group's result location)."""

    def __init__(self, t: WarehouseTable, *, progress=None):
        import boto3

        self.t = t
        self.athena = boto3.client("athena")
        self.glue = boto3.client("glue")
        self.progress = progress
        self.execution_id: Optional[str] = None
        self.partition_keys: list[str] = []     # the Glue table's

    def _call(self, what: str, fn, **kw):
        from botocore.exceptions import ClientError

        try:
            return fn(**kw)
        except ClientError as exc:
            err = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            raise WarehouseError(f"{what} failed: {err.get('Code', '?')}: "
                                 f"{err.get('Message', '')} (HTTP {status})") from None

    def columns(self) -> dict:
        from botocore.exceptions import ClientError

        try:
            got = self.glue.get_table(DatabaseName=self.t.database, Name=self.t.table)["Table"]
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code == "EntityNotFoundException":
                raise WarehouseError("no such table in the Glue Data Catalog (GetTable: "
                                     "EntityNotFoundException)") from None
            raise WarehouseError(f"Glue GetTable failed: {code}: "
                                 f"{exc.response.get('Error', {}).get('Message', '')}") from None
        from requests.structures import CaseInsensitiveDict

        cols = list(got.get("StorageDescriptor", {}).get("Columns", []))
        self.partition_keys = [c["Name"] for c in got.get("PartitionKeys", [])]
        cols += list(got.get("PartitionKeys", []))
        # Glue keeps names in lowercase and Athena's engine resolves identifiers whatever
        # their case (FOCUS's "BilledCost" reads column billedcost): so does this lookup
        return CaseInsensitiveDict({c["Name"]: c["Type"] for c in cols})

    def partition_floor(self, month_start) -> str:
        """AWS Data Exports partition CUR 2.0 and FOCUS by ``BILLING_PERIOD=YYYY-MM``; a line
        used in the month is in its billing period or a later one, so Athena reads no folder
        of an earlier period (it bills the bytes it scans)."""
        key = next((k for k in self.partition_keys if k.lower() == "billing_period"), None)
        return f"\"{key}\" >= '{month_start:%Y-%m}'" if key else ""

    def _output(self) -> None:
        wg = self._call("Athena GetWorkGroup", self.athena.get_work_group,
                        WorkGroup=self.t.container).get("WorkGroup")
        if not wg:
            raise WarehouseError(f"work group {self.t.container} does not exist (Athena "
                                 "GetWorkGroup)")
        conf = wg.get("Configuration") or {}
        if wg.get("State", "ENABLED") != "ENABLED":
            raise WarehouseError(f"work group {self.t.container} is {wg.get('State')}")
        if not (conf.get("ResultConfiguration") or {}).get("OutputLocation") and \
                not (conf.get("ManagedQueryResultsConfiguration") or {}).get("Enabled"):
            raise WarehouseError(f"work group {self.t.container} has no query result location; "
                                 "set one (Athena console: Workgroups, Edit, Query result "
                                 "configuration) or use a work group that has one")

    def run(self, sql: str) -> list[tuple]:
        from botocore.exceptions import ClientError

        from gpulease.retry import poll

        self._output()
        started = self._call("Athena StartQueryExecution", self.athena.start_query_execution,
                             QueryString=sql, WorkGroup=self.t.container,
                             QueryExecutionContext={"Catalog": "AwsDataCatalog",
                                                    "Database": self.t.database})
        qid = self.execution_id = started["QueryExecutionId"]
        state = {"now": "QUEUED"}

        def finished():
            ex = self._call("Athena GetQueryExecution", self.athena.get_query_execution,
                            QueryExecutionId=qid)["QueryExecution"]
            state["now"] = ex["Status"]["State"]
            if state["now"] in ("FAILED", "CANCELLED"):
                reason = ex["Status"].get("StateChangeReason", "")
                raise WarehouseError(f"Athena query {qid} {state['now'].lower()}: {reason}")
            return True if state["now"] == "SUCCEEDED" else None

        def progress(waited: float) -> None:
            if self.progress:
                self.progress(f"Athena query {qid}: {state['now'].lower()} ({waited:.0f} s)")

        if poll(finished, timeout_s=ATHENA_TIMEOUT_S, first_s=ATHENA_FIRST_POLL_S,
                progress=progress) is None:
            raise WarehouseError(f"Athena query {qid} still {state['now']} after "
                                 f"{ATHENA_TIMEOUT_S:.0f} s")
        rows: list[tuple] = []
        header = True
        pages = self.athena.get_paginator("get_query_results").paginate(
            QueryExecutionId=qid, PaginationConfig={"PageSize": ATHENA_PAGE})
        try:
            for page in pages:
                for row in page["ResultSet"]["Rows"]:
                    if header:          # a SELECT's first row holds the column names
                        header = False
                        continue
                    rows.append(tuple(d.get("VarCharValue") for d in row["Data"]))
        except ClientError as exc:
            err = exc.response.get("Error", {})
            raise WarehouseError(f"Athena GetQueryResults failed: {err.get('Code', '?')}: "
                                 f"{err.get('Message', '')}") from None
        return rows


def reader(t: WarehouseTable, *, progress=None):
    return BigQueryReader(t) if t.warehouse == BIGQUERY else AthenaReader(t, progress=progress)
