"""Warehouse bill sources: ``bq://project.dataset.table`` and ``athena://workgroup/database.table``.

Only the address is parsed and checked here (first step of issue 33 item 3); the pushed-down
query is not issued yet. The name rules are the clouds' own, so a typo fails here (exit 2,
naming ``--bill``) instead of as a remote error:

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
