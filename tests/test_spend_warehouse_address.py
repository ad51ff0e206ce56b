"""Warehouse bill addresses (issue 33 item 3, first step): parsing and exit-2 errors."""

import pytest

from gpulease.errors import EXIT_BAD_INPUT, InputError
from gpulease.spend import warehouse as W


def test_bigquery_address_parses():
    t = W.parse("bq://my-billing-1.billing_export.gcp_billing_export_v1_0123")
    assert t == W.WarehouseTable(W.BIGQUERY, "my-billing-1", "billing_export",
                                 "gcp_billing_export_v1_0123")


def test_bigquery_domain_scoped_project():
    t = W.parse("bq://example.com:billing-1.ds.tbl")
    assert (t.container, t.database, t.table) == ("example.com:billing-1", "ds", "tbl")


def test_athena_address_parses():
    t = W.parse("athena://primary/cur_db.cur2_export")
    assert t == W.WarehouseTable(W.ATHENA, "primary", "cur_db", "cur2_export")


def test_a_file_path_is_not_a_warehouse():
    assert W.parse("bills/focus.csv") is None
    assert W.parse("/tmp/bq.parquet") is None


@pytest.mark.parametrize("text, names", [
    ("bq://proj.only", "project, dataset and table"),
    ("bq://Bad_Project.ds.tbl", "'Bad_Project'"),
    ("bq://my-project.bad-ds.tbl", "'bad-ds'"),
    ("athena://primary/cur_db", "work group, a database and a table"),
    ("athena://primary/CurDb.tbl", "'CurDb'"),
    ("athena://bad group/db.tbl", "'bad group'"),
])
def test_malformed_address_is_exit_2_naming_the_flag(text, names):
    with pytest.raises(InputError) as info:
        W.parse(text)
    assert info.value.exit_code == EXIT_BAD_INPUT
    message = info.value.render()
    assert "--bill" in message and text in message and names in message
    assert "bq://PROJECT.DATASET.TABLE" in message
