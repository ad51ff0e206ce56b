"""Purchase models are one table (gpulease/purchase.py): its views, its labels, and no model
name spelled as a string anywhere else in the package (issue 31 item 3); one ISO-UTC time
formatter (gpulease.clock.format_utc, item 4)."""
from __future__ import annotations

import ast
import datetime as dt
import time
from collections import Counter
from pathlib import Path

import pytest

from gpulease import purchase as P
from gpulease.clock import format_utc

PACKAGE = Path(P.__file__).resolve().parent


# ---- the table and its views -------------------------------------------------------------------
def test_views_keep_todays_orders():
    # node groups are declared and nodes numbered reserved first (billed whether used or not)
    assert P.NODE_MODELS == ("reserved", "on_demand", "spot")
    # `explain` lists a window's options in this order
    assert P.WINDOW_MODELS == ("on_demand", "reservation", "spot", "flex_start", "calendar",
                               "capacity_block", "commitment")
    # ties between equal window totals: the one that prepays and locks in least
    assert sorted(P.WINDOW_PREFERENCE, key=P.WINDOW_PREFERENCE.get) == [
        "on_demand", "spot", "flex_start", "reservation", "calendar", "capacity_block",
        "commitment"]
    assert P.GUARANTEED == {"reservation", "calendar", "capacity_block", "commitment"}
    assert P.WINDOW_ONLY == {"capacity_block", "flex_start", "calendar"}
    # the catalog's documented order (catalog rows' purchase_options)
    assert P.CATALOG_OPTIONS == ("on_demand", "spot", "reservation", "commitment",
                                 "future_reservation", "flex_start", "capacity_block")
    assert P.MODEL_OPTIONS == {"reserved": ("reservation", "commitment"),
                               "on_demand": ("on_demand",), "spot": ("spot",)}
    assert (P.RESERVED, P.ON_DEMAND, P.SPOT) == P.NODE_MODELS
    assert (P.MIXED, P.WINDOW, P.MONTHLY) == ("mixed", "window", "monthly")


def test_each_model_has_its_label():
    assert P.LABELS == {
        "reserved": "reserved", "on_demand": "on-demand", "spot": "spot",
        "reservation": "capacity reservation", "commitment": "1-/3-year commitment",
        "future_reservation": "future reservation", "flex_start": "flex-start",
        "calendar": "calendar-mode reservation", "capacity_block": "Capacity Block"}
    assert all(P.label(m.name) == m.label for m in P.TABLE)
    with pytest.raises(KeyError, match="unknown purchase model 'ondemand'; known: reserved"):
        P.get("ondemand")


def test_every_name_has_its_constant_and_one_row():
    names = [m.name for m in P.TABLE]
    assert len(names) == len(set(names))
    assert set(names) == {P.RESERVED, P.ON_DEMAND, P.SPOT, P.RESERVATION, P.COMMITMENT,
                          P.FUTURE_RESERVATION, P.FLEX_START, P.CALENDAR, P.CAPACITY_BLOCK}
    assert P.get("spot").scopes == (P.MONTHLY, P.WINDOW)
    assert P.get("capacity_block").scopes == (P.WINDOW,)
    assert P.get("future_reservation").scopes == ()


def test_the_views_are_what_the_modules_read():
    from gpulease.bootstrap import render
    from gpulease.cli import ui
    from gpulease.planner import html
    from gpulease.policy import windows
    from gpulease.quotes import QUOTE_KINDS

    assert windows.WINDOW_MODELS is P.WINDOW_MODELS
    assert windows.GUARANTEED is P.GUARANTEED
    assert render.NODE_PURCHASE_MODELS == P.NODE_MODELS + (P.MIXED,)
    assert ui.PURCHASE_WORDS == html.MODEL_WORDS == (
        ("reserved", "reserved"), ("on_demand", "on-demand"), ("spot", "spot"))
    assert set(QUOTE_KINDS) == P.WINDOW_ONLY


# ---- no purchase-model string outside the table ------------------------------------------------
#: the words the scan looks for: every model, the AWS mixed-instances group, the window bucket
WORDS = frozenset(m.name for m in P.TABLE) | {P.MIXED, P.WINDOW}

#: files that may spell the names: the table itself and the two schemas of outside documents
SCHEMAS = {
    "purchase.py": "the table",
    "config.py": "the stack config schema (pydantic models)",
    "config/": "the stack config schema, once config.py is a package",
    "catalog/schema.py": "the catalog schema: the price columns (PriceKey) are catalog columns",
}
#: files other issue-31 branches own and convert (or move out of the package): remove the entry
#: when the branch lands (the test fails on an entry with nothing left to allow).
PENDING: dict[str, str] = {}
#: (file, word) -> (count, why it is not a purchase model)
NOT_MODELS = {
    ("cli/explain.py", "window"): (1, "the key of a schedule window (cron) in next_holds"),
    ("cli/reap.py", "window"): (1, "a column header: the idle window in minutes"),
    ("policy/templates.py", "spot"): (2, "a template condition key, the Facts.spot field"),
    ("reaper/engine.py", "reservation"): (1, "an English word: plural(n, 'reservation')"),
    ("policy/failures.py", "window"): (1, "a word the fix hint looks for in a rejection's text"),
    ("clouds/aws/cluster.py", "reservation"): (1, "the component's output key, a resource"),
    ("inventory/aws.py", "commitment"): (1, "the Savings Plans API's field name "
                                            "(SavingsPlan.commitment, $/hour)"),
}


def _allowed(rel: str, table: dict) -> str | None:
    return next((k for k in table if rel == k or (k.endswith("/") and rel.startswith(k))), None)


def _skipped(tree: ast.AST) -> set[int]:
    """ids of constants that name no value: docstrings, ``__slots__`` entries and the attribute
    names of getattr / hasattr / setattr (fields such as ``mix.spot`` are fields, not models)."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and n.body and isinstance(n.body[0], ast.Expr) \
                and isinstance(n.body[0].value, ast.Constant):
            out.add(id(n.body[0].value))
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                             for t in n.targets):
            out |= {id(c) for c in ast.walk(n.value)}
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) \
                and n.func.id in ("getattr", "hasattr", "setattr") and len(n.args) >= 2:
            out.add(id(n.args[1]))
    return out


def _literals() -> Counter:
    found: Counter = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _skipped(tree)
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in WORDS \
                    and id(n) not in skip:
                found[rel, n.value] += 1
    return found


def test_no_purchase_model_literal_outside_the_table():
    found = _literals()
    stray = {k: n for k, n in found.items()
             if not _allowed(k[0], SCHEMAS) and not _allowed(k[0], PENDING)
             and NOT_MODELS.get(k, (None,))[0] != n}
    assert not stray, (
        "purchase-model names spelled as strings (use the constants of gpulease.purchase: "
        f"RESERVED, ON_DEMAND, SPOT, ..., MIXED, WINDOW): {sorted(stray.items())}")


def test_the_allow_lists_hold_nothing_stale():
    found = _literals()
    files = {rel for rel, _ in found}
    stale = [k for k in PENDING if not any(_allowed(rel, {k: ""}) for rel in files)]
    stale += [k for k, (n, _) in NOT_MODELS.items() if found.get(k) != n]
    assert not stale, f"allow-list entries with nothing (or something else) left: {stale}"


# ---- one time formatter ------------------------------------------------------------------------
#: hand-written ISO-UTC formatters another branch removes with the code it restructures
FORMATTERS_PENDING: dict[str, int] = {}


def _utc_formats() -> Counter:
    """strftime formats ending in "Z" and ``.replace("+00:00", "Z")``, per file."""
    found: Counter = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
                continue
            consts = [c.value for a in n.args for c in ast.walk(a)
                      if isinstance(c, ast.Constant) and isinstance(c.value, str)]
            if n.func.attr == "strftime" and any(c.endswith("Z") for c in consts):
                found[rel] += 1
            elif n.func.attr == "replace" and consts[:2] == ["+00:00", "Z"]:
                found[rel] += 1
    return found


def test_one_time_formatter():
    found = _utc_formats()
    assert found.pop("clock.py") == 1
    assert dict(found) == FORMATTERS_PENDING, (
        "write UTC times with gpulease.clock.format_utc, not a strftime of your own")


@pytest.mark.parametrize("epoch", [0.0, 1796383800.0, 1796383859.999, 1796383800.5])
def test_format_utc_writes_what_the_formatters_it_replaced_wrote(epoch):
    t = dt.datetime.fromtimestamp(epoch, dt.timezone.utc)
    assert format_utc(epoch) == t.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert format_utc(epoch, minutes=True) == t.strftime("%Y-%m-%dT%H:%MZ")
    assert format_utc(epoch) == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    # an aware datetime in another zone, a naive one taken as UTC
    cet = t.astimezone(dt.timezone(dt.timedelta(hours=1)))
    assert format_utc(cet) == format_utc(t.replace(tzinfo=None)) == format_utc(epoch)
    assert format_utc(None) is None
    assert format_utc(1796383800.0) == "2026-12-04T11:30:00Z"
    assert format_utc(1796383800.0, minutes=True) == "2026-12-04T11:30Z"
