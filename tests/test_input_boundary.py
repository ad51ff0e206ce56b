"""The input boundary (gpulease/inputs.py) and the CLI's last resort (gpulease/cli/crash.py).

One set of limits for every file gpulease reads; a file that breaks one is exit 2 naming the
file and the field; an exception nobody expected is exit 1 with one line and a report file,
never a traceback on the terminal.
"""
from __future__ import annotations

import contextlib
import io
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulease import inputs
from gpulease.cli import main
from gpulease.errors import InputError


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


# ---- the last resort -------------------------------------------------------------------------
def test_an_unexpected_exception_is_one_line_and_a_report(monkeypatch, tmp_path):
    import gpulease.cli.catalog as catalog_cli

    def boom(args):
        raise RecursionError("maximum recursion depth exceeded\nwhile decoding")

    monkeypatch.setattr(catalog_cli, "run_versions", boom)
    monkeypatch.setenv("GPULEASE_CRASH_DIR", str(tmp_path / "crashes"))
    code, out, err = run(["catalog", "versions"])
    assert code == 1 and out == ""
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    (report,) = (tmp_path / "crashes").iterdir()
    assert err.startswith("error: internal error (RecursionError: maximum recursion depth "
                          "exceeded while decoding): this is a bug in gpulease, not in your "
                          f"input; the full report is in {report} — please attach it")
    text = report.read_text()
    assert "command: gpulease catalog versions" in text and "Traceback" in text
    assert "in boom" in text


def test_the_last_resort_without_a_writable_directory(monkeypatch, tmp_path):
    import gpulease.cli.catalog as catalog_cli

    monkeypatch.setattr(catalog_cli, "run_versions", lambda args: {}["x"])
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("GPULEASE_CRASH_DIR", str(blocker / "sub"))
    code, _, err = run(["catalog", "versions"])
    assert code == 1 and "Traceback" not in err
    assert "internal error (KeyError: 'x')" in err
    assert "no report could be written" in err and "set GPULEASE_CRASH_DIR" in err


# ---- bytes and text --------------------------------------------------------------------------
def _load(tmp_path, data: bytes, **kw):
    p = tmp_path / "doc.json"
    p.write_bytes(data)
    return inputs.load_json(p, field="--x", **kw)


@pytest.mark.parametrize("data,message", [
    (b'{"a": 1}'.decode().encode("utf-16"), "UTF-16/UTF-32 text (byte-order mark fffe)"),
    ('{"a": "\u00e9"}'.encode("latin-1"), "not UTF-8 text (byte 0xe9 at line 1)"),
    (b'\x89PNG\r\n\x1a\n\x00\x00', "binary data (a NUL byte at offset 8)"),
    (b'{"a": NaN}', "not valid JSON (NaN is not a number JSON allows"),
    (b'{"a": -Infinity}', "not valid JSON (-Infinity is not a number JSON allows"),
    (b'{"a": [1e999]}', "a[0]: inf is not a finite number"),
    (b'{"a": 1e16}', "a: 1e+16 is beyond \u00b11e+15"),
    (b'[' * 5000 + b']' * 5000, "--x: nested more than 64 levels deep"),
    (b'{"a": ' + b'1' * 5000 + b'}', "not valid JSON (Exceeds the limit (4300 digits)"),
])
def test_bad_documents_are_named(tmp_path, data, message):
    with pytest.raises(InputError) as exc:
        _load(tmp_path, data)
    assert message in str(exc.value) and str(tmp_path / "doc.json") in str(exc.value)
    assert exc.value.exit_code == 2


def test_size_cap_is_checked_before_reading(tmp_path):
    with pytest.raises(InputError, match=r"the file is 2,048 bytes; a thing is at most 1,024 "
                                         r"bytes: is this the right file\?"):
        _load(tmp_path, b" " * 2048, limit=1024, what="thing")


def test_a_bom_is_not_a_reason_to_refuse(tmp_path):
    assert _load(tmp_path, b'\xef\xbb\xbf{"a": 1}') == {"a": 1}


def test_yaml_aliases_that_expand_past_the_cap_are_refused(tmp_path):
    """A 'billion laughs' stack file: nine aliases of nine make 387 million values. It was a
    MemoryError; now it is a located exit 2 in well under a second."""
    lines = ["config:", "  gpulease:owner: a", "  x0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"  x{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    p = tmp_path / "Pulumi.bomb.yaml"
    p.write_text("\n".join(lines) + "\n")
    code, out, err = run(["plan", "--config", str(p)])
    assert code == 2 and out == "" and "Traceback" not in err
    assert f"{p}: " in err and "more than 2,000,000 values (YAML aliases expanding?)" in err


def test_deep_yaml_is_refused(tmp_path):
    p = tmp_path / "Pulumi.deep.yaml"
    body = "config:\n  gpulease:owner:\n"
    for depth in range(2, 80):
        body += "  " * depth + "k:\n"
    p.write_text(body + "  " * 80 + "v\n")
    code, out, err = run(["plan", "--config", str(p)])
    assert code == 2 and out == "" and "Traceback" not in err
    assert "nested more than 64 levels deep" in err and str(p) in err


# ---- properties ------------------------------------------------------------------------------
_json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-10 ** 30, max_value=10 ** 30),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=5), inner, max_size=4)),
    max_leaves=30)


def _all_numbers_sane(doc) -> bool:
    for _, v in inputs.walk(doc, max_depth=10 ** 6, max_values=10 ** 9):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if (isinstance(v, float) and not math.isfinite(v)) or abs(v) > inputs.MAX_MAGNITUDE:
                return False
    return True


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(_json_values, st.sampled_from(["utf-8", "utf-16", "latin-1"]))
def test_any_json_is_loaded_sane_or_refused_with_the_file_named(tmp_path_factory, doc, enc):
    path = tmp_path_factory.mktemp("j") / "doc.json"
    try:
        path.write_bytes(json.dumps(doc, ensure_ascii=False).encode(enc))
    except UnicodeEncodeError:
        return
    try:
        loaded = inputs.load_json(path, field="--x")
    except InputError as exc:
        assert str(path) in str(exc) and exc.exit_code == 2
        return
    assert _all_numbers_sane(loaded)
    json.dumps(loaded, allow_nan=False)   # what it gives is strict JSON again


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                 st.integers(min_value=-10 ** 20, max_value=10 ** 20),
                 st.booleans(), st.text(max_size=4), st.none()), st.booleans())
def test_money_is_finite_bounded_and_non_negative_unless_signed(value, signed):
    why = inputs.money_problem(value, signed=signed)
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value) and abs(value) <= inputs.MAX_USD
          and (signed or value >= 0))
    assert (why is None) == ok, (value, why)



# ---- SkyPilot CSVs ---------------------------------------------------------------------------
_CELLS = st.one_of(
    st.sampled_from(["", "nan", "inf", "-1", "1e308", "1e-300", "0", "7.9", "9" * 400, "abc",
                     "H100", "../../etc", "us-east-1", "use1-az1", '"', "\x00", "\u00e9",
                     "{'Gpus': [}", "8.0", "55.04"]),
    st.text(max_size=6))


@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["aws", "gcp"]),
       st.lists(st.tuples(st.integers(min_value=0, max_value=40),
                          st.integers(min_value=0, max_value=12), _CELLS), min_size=1,
                max_size=4))
def test_mutated_skypilot_csvs_import_sane_or_fail_located(tmp_path_factory, cloud, edits):
    import csv
    import datetime as dt
    import shutil
    from pathlib import Path

    from gpulease.catalog import load_catalog, parse_catalog
    from gpulease.catalog.importers.skypilot import import_skypilot

    good = Path(__file__).resolve().parent / "fixtures" / "skypilot" / "good"
    d = tmp_path_factory.mktemp("v8") / "v8"
    shutil.copytree(good, d)
    f = d / cloud / "vms.csv"
    rows = list(csv.reader(io.StringIO(f.read_text())))
    for r, c, value in edits:
        row = rows[r % len(rows)]
        row[c % len(row)] = value
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    f.write_text(buf.getvalue())
    try:
        res = import_skypilot(d, load_catalog(), version="fuzz.1",
                              now=dt.datetime(2026, 12, 9, tzinfo=dt.timezone.utc))
        cat = parse_catalog(res.doc, source=str(d))
    except InputError as exc:
        assert exc.exit_code == 2 and exc.findings
        assert all(f.path or f.source for f in exc.findings), str(exc)
        return
    for o in cat.offerings:
        for price in (o.on_demand_usd, o.spot_usd, o.commit_1y_usd, o.commit_3y_usd):
            assert price is None or (math.isfinite(price) and 0 <= price <= inputs.MAX_MAGNITUDE)


# ---- catalogs: the issue's cases through the CLI ---------------------------------------------
def _catalog_doc() -> dict:
    from gpulease.catalog import default_catalog_path

    return json.loads(default_catalog_path().read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", ["1e308", "deep", "nan-by-overflow"])
def test_catalog_cases_of_the_issue_exit_2_naming_file_and_field(case, tmp_path, monkeypatch):
    """A catalog nested 100,000 levels deep crashed every command (RecursionError); 1e308
    prices passed validation and crashed the solver, costing/tags.py and decide.py later."""
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    path = tmp_path / "catalog.json"
    if case == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
        expected = "catalog: nested more than 64 levels deep"
    else:
        doc = _catalog_doc()
        doc.pop("checksum", None)
        i = next(i for i, r in enumerate(doc["offerings"]) if r["on_demand_usd"])
        doc["offerings"][i]["on_demand_usd"] = 424242.4242
        token = "1e308" if case == "1e308" else "1e999"
        path.write_text(json.dumps(doc).replace("424242.4242", token))
        expected = (f"offerings[{i}].on_demand_usd: 1e+308 is beyond ±1e+15" if case == "1e308"
                    else f"offerings[{i}].on_demand_usd: inf is not a finite number")
    for argv in (["plan", "--stack", "dev"], ["explain", "--stack", "dev"],
                 ["catalog", "list"]):
        code, out, err = run([*argv, "--catalog", str(path)])
        assert code == 2 and out == "" and "Traceback" not in err, (argv, err)
        assert str(path) in err and expected in err, err


# ---- the walk's fast path ---------------------------------------------------------------------
class _Dict(dict):
    pass


_scalars = st.one_of(
    st.none(), st.booleans(), st.text(max_size=3),
    st.integers(min_value=-10**16, max_value=10**16),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e15, -1e15, 1e15 + 1, 10**15, 10**15 + 1, float("nan"), math.inf]))
_documents = st.recursive(
    _scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=2), inner, max_size=4),
        st.dictionaries(st.text(max_size=2), inner, max_size=2).map(_Dict)),
    max_leaves=30)


def _walked(doc, numbers, max_depth, max_values) -> bool:
    """What the locating walk says: True = nothing found."""
    try:
        return not any(numbers and inputs.number_problem(v) for _, v in
                       inputs.walk(doc, max_depth=max_depth, max_values=max_values))
    except inputs._Refused:
        return False


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_documents, st.booleans(), st.integers(1, 6), st.integers(1, 40))
def test_the_fast_check_passes_exactly_the_documents_the_walk_passes(doc, numbers, depth,
                                                                     values):
    """tree_findings skips the locating walk when ``_clean`` says the document is clean: it
    must never say so of a document the walk refuses (depth, count, NaN, infinity, beyond
    MAX_MAGNITUDE; a subclass of dict is left to the walk)."""
    clean = inputs._clean(doc, numbers, max_depth=depth, max_values=values)
    walked = _walked(doc, numbers, depth, values)
    assert clean <= walked   # never clean where the walk finds something
    if not any(isinstance(x, _Dict) for _, x in inputs.walk(doc, max_depth=10**6)):
        assert clean == walked


def test_the_shipped_catalog_is_clean_without_the_walk():
    from gpulease.catalog import default_catalog_path

    doc = json.loads(default_catalog_path().read_text())
    assert inputs._clean(doc, True) and _walked(doc, True, inputs.MAX_DEPTH, inputs.MAX_VALUES)
    doc["offerings"][3]["spot_usd"] = float("nan")
    assert not inputs._clean(doc, True)
    assert [f.path for f in inputs.tree_findings(doc, source="c")] == ["offerings[3].spot_usd"]
