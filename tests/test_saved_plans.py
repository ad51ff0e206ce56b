"""Saved plans are untrusted input (issue 24): the CI cost gate cannot be fooled or crashed by
its baseline file, and `--json` is always strict JSON.

Every hostile baseline of the issue is refused with exit 2 naming the file and the field,
before anything is planned; a hypothesis search over mutated saved plans finds no other
outcome; and a metamorphic test checks the gate itself: a baseline that is honest for a cheaper
stack makes the gate fail when the stack gets dearer.
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import math
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulease.cli import main
from gpulease.errors import EXIT_BAD_INPUT, EXIT_COST_INCREASE, EXIT_OK, ConfigError
from gpulease.planner.diff import diff_plans, exceeds
from gpulease.planner.saved import load_saved_plan

ROOT = Path(__file__).resolve().parents[1]


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def strict_json(text: str):
    """json.loads that refuses NaN / Infinity (what every JSON parser but Python's does)."""
    def refuse(name):
        raise AssertionError(f"{name} in a --json document: not JSON")
    return json.loads(text, parse_constant=refuse)


@lru_cache(maxsize=None)
def _plan_text(*argv: str) -> str:
    code, out, err = run(["plan", *argv, "--json"])
    assert code == EXIT_OK, err
    return out


def saved(stack: str = "dev") -> dict:
    return json.loads(_plan_text("--stack", stack))


# ---- the hostile baselines -----------------------------------------------------------
SENTINEL = 424242.4242


def _with(token: str, *, key: str = "totals", field: str = "monthly_usd",
          encoding: str = "utf-8") -> bytes:
    """The honest dev plan with one number written as ``token`` (NaN, 1e999, ...)."""
    doc = saved()
    (doc[key] if key in doc else doc["outputs"])[field] = SENTINEL
    return json.dumps(doc).replace(str(SENTINEL), token).encode(encoding)


def _hostile() -> list[tuple[str, object, str]]:
    """(id, file content: bytes, or a function making them, expected finding)."""
    def edit(fn, encoding="utf-8"):
        def make():
            doc = saved()
            fn(doc)
            return json.dumps(doc, ensure_ascii=False).encode(encoding)
        return make

    def priced(doc):
        return next(i for i, r in enumerate(doc["resources"]) if r["monthly_usd"] > 0)

    return [
        ("negative-total", b'{"resources": [], "totals": {"monthly_usd": -1000}}',
         "format: missing: not a `gpulease plan --json` document"),
        ("negative-total-in-a-plan", edit(lambda d: d["totals"].update(monthly_usd=-1000)),
         "totals.monthly_usd: must be >= 0 USD (got -1000)"),
        ("nan-total", lambda: _with("NaN"), "not valid JSON (NaN is not a number JSON allows"),
        ("infinity-total", lambda: _with("Infinity"),
         "not valid JSON (Infinity is not a number JSON allows"),
        ("overflowing-total", lambda: _with("1e999"),
         "totals.monthly_usd: inf is not a finite number"),
        ("overflowing-output", lambda: _with("-1e999", key="outputs", field="total_hourly_usd"),
         "outputs.total_hourly_usd: -inf is not a finite number"),
        ("huge-int", lambda: _with("9" * 400),
         "totals.monthly_usd: a 400-digit number is beyond ±1e+15"),
        ("1e9-with-no-resources", edit(lambda d: (d.update(resources=[]),
                                                  d["totals"].update(monthly_usd=1e9))),
         "totals.monthly_usd: $1,000,000,000.00 is not the sum of the resources' monthly_usd "
         "($0.00): the file was edited or is damaged"),
        ("total-above-its-resources", edit(lambda d: d["totals"].update(monthly_usd=99999.0)),
         "totals.monthly_usd: $99,999.00 is not the sum of the resources' monthly_usd ("),
        ("latin-1", edit(lambda d: d.update(stack="d\u00e9v"), encoding="latin-1"),
         "--diff: not UTF-8 text (byte 0xe9 at line 1); save the file as UTF-8"),
        ("utf-16", lambda: saved_text().encode("utf-16"),
         "--diff: UTF-16/UTF-32 text (byte-order mark fffe); save the file as UTF-8"),
        ("utf-16-no-bom", lambda: saved_text().encode("utf-16-le"),
         "--diff: UTF-16 text without a byte-order mark (a NUL byte at offset 1)"),
        ("deep", b"[" * 100_000 + b"]" * 100_000, "--diff: nested more than 64 levels deep"),
        ("deep-but-parses", b'{"format": "gpulease-plan/1", "x": ' + b"[" * 500 + b"]" * 500
         + b"}", "x" + "[0]" * 63 + ": nested more than 64 levels deep"),
        ("resources-are-strings", edit(lambda d: d.update(resources=["a", "b"])),
         "resources[0]: must be a mapping with urn, type, name, cluster and monthly_usd (got a "
         "string)"),
        ("missing-urn", edit(lambda d: d["resources"][0].pop("urn")),
         "resources[0].urn: required key is missing"),
        ("urn-not-a-string", edit(lambda d: d["resources"][0].update(urn=12)),
         "resources[0].urn: must be a non-empty string (got 12)"),
        ("urn-not-a-urn", edit(lambda d: d["resources"][0].update(urn="x")),
         "resources[0].urn: 'x' is not a Pulumi URN"),
        ("monthly-usd-abc", edit(lambda d: d["resources"][priced(d)].update(monthly_usd="abc")),
         ".monthly_usd: must be a number of USD (got 'abc')"),
        ("monthly-usd-negative", edit(lambda d: d["resources"][priced(d)].update(
            monthly_usd=-5.0)), ".monthly_usd: must be >= 0 USD (got -5.0)"),
        ("cluster-a-list", edit(lambda d: d["resources"][0].update(cluster=[1])),
         "resources[0].cluster: must be a non-empty string (got a list)"),
        ("resource-twice", edit(lambda d: d["resources"].append(dict(d["resources"][0]))),
         "the same resource as resources[0] (a resource listed twice would be counted twice)"),
        ("other-format", edit(lambda d: d.update(format="gpulease-plan/9")),
         "format: 'gpulease-plan/9' is a plan format this gpulease does not read"),
        ("a-list", b"[]", "(document): a plan is a JSON object (got a list)"),
        ("empty-file", b"", "--diff: not valid JSON (line 1 column 1: Expecting value)"),
    ]


def saved_text() -> str:
    return _plan_text("--stack", "dev")


@pytest.mark.parametrize("case", _hostile(), ids=lambda c: c[0])
def test_hostile_baselines_are_refused_before_planning(case, tmp_path):
    name, content, expected = case
    path = tmp_path / "old.json"
    path.write_bytes(content() if callable(content) else content)
    code, out, err = run(["plan", "--stack", "dev", "--diff", str(path),
                          "--fail-on-increase", "10"])
    assert code == EXIT_BAD_INPUT, (code, err)
    assert out == "" and "Traceback" not in err
    assert str(path) in err and expected in err, err
    assert "planning dev: reading the stack" not in err      # refused before the plan ran


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "NaN", "1e999", "ten"])
def test_fail_on_increase_takes_only_finite_non_negative_numbers(value):
    with pytest.raises(SystemExit) as exc:     # argparse's own exit: usage, then the error
        run(["plan", "--stack", "dev", "--diff", "staging", f"--fail-on-increase={value}"])
    assert exc.value.code == EXIT_BAD_INPUT


@pytest.mark.parametrize("value", ["nan", "-inf", "ten"])
def test_fail_on_increase_error_names_the_flag(value, capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--stack", "dev", "--diff", "staging", f"--fail-on-increase={value}"])
    out, err = capsys.readouterr()
    assert out == ""
    assert "--fail-on-increase: must be a finite number >= 0 (a percentage, e.g. 10)" in err
    assert f"(got {value!r})" in err


def test_honest_saved_plan_loads_and_its_totals_are_the_resources_sum(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(saved_text())
    doc = load_saved_plan(str(path), flag="--diff")
    assert doc["totals"]["monthly_usd"] == pytest.approx(
        sum(r["monthly_usd"] for r in doc["resources"]), abs=0.01)
    # a UTF-8 byte-order mark (Windows editors) is not a reason to refuse a plan
    path.write_bytes(b"\xef\xbb\xbf" + saved_text().encode())
    assert load_saved_plan(str(path), flag="--diff")["stack"] == "dev"


def test_a_baseline_that_is_not_a_file(tmp_path):
    with pytest.raises(ConfigError, match="is a directory, not a saved plan"):
        load_saved_plan(str(tmp_path), flag="--diff")
    with pytest.raises(ConfigError, match="cannot read .*No such file"):
        load_saved_plan(str(tmp_path / "gone.json"), flag="--against")


# ---- property: any mutation of a saved plan loads or is refused cleanly ----------------------
def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-10 ** 20, max_value=10 ** 20),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["urn:pulumi:dev::gpulease::x::y", "gpulease-plan/1", "shared", "1e308"]))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=5)


@lru_cache(maxsize=1)
def _gate_paths() -> tuple:
    """The paths of the honest dev plan that the gate reads (the resources' money and
    identity, totals, outputs), not the resources' declared inputs and tags."""
    return tuple(p for p in _paths(saved()) if p and p[0] in (
        "format", "stack", "catalog", "resources", "totals", "budget", "outputs")
        and "inputs" not in p and "tags" not in p)


#: a mutation: (index into _gate_paths(), what to do, the value for "replace" / "scale").
mutations = st.lists(st.tuples(
    st.integers(min_value=0, max_value=10 ** 6),
    st.sampled_from(["replace", "replace", "delete", "scale"]),
    st.one_of(_values, st.sampled_from([-1, 0, 2, 1e300, float("nan")]))),
    min_size=1, max_size=3)


def _mutate(doc: dict, steps) -> dict:
    paths = _gate_paths()
    for index, kind, value in steps:
        path = paths[index % len(paths)]
        node = doc
        try:
            for part in path[:-1]:
                node = node[part]
            old = node[path[-1]]
            if kind == "delete":
                del node[path[-1]]
            elif kind == "scale" and isinstance(old, (int, float)) and not isinstance(old, bool) \
                    and isinstance(value, (int, float)) and not isinstance(value, bool):
                node[path[-1]] = old * value
            else:
                node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue      # an earlier step removed or replaced this path
    return doc


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutations)
def test_mutated_saved_plans_load_or_are_refused_naming_file_and_field(tmp_path_factory, steps):
    doc = _mutate(saved(), steps)
    path = tmp_path_factory.mktemp("sp") / "old.json"
    path.write_text(json.dumps(doc))          # NaN / Infinity written as JSON extensions
    new = saved()
    try:
        old = load_saved_plan(str(path), flag="--diff")
    except ConfigError as exc:
        text = str(exc)
        assert text.startswith(f"--diff {path}: not a usable saved plan"), text[:2000]
        assert all(f.source == str(path) and f.path for f in exc.findings), text[:2000]
        return
    # loaded: every amount the gate uses is a finite, non-negative number, and the gate
    # computes a finite diff from the resources (never from a stated total)
    diff = diff_plans(old, new)
    strict_json(json.dumps(diff, allow_nan=False))
    t = diff["total"]
    assert t["old_monthly_usd"] >= 0 and math.isfinite(t["delta_usd"])
    assert t["old_monthly_usd"] == pytest.approx(
        sum(r["monthly_usd"] for r in old["resources"]), abs=0.01)
    exceeds(diff, 10.0)


# ---- metamorphic: an honest baseline of a cheaper stack makes the gate fail ------------------
def _dearer(doc: dict, factor: float) -> dict:
    doc = copy.deepcopy(doc)
    for c in doc["config"]["gpulease:clusters"]:
        if "hours_per_month" in c:
            c["hours_per_month"] = min(730, round(c["hours_per_month"] * factor))
        for step in c.get("demand", ()):
            step["hours_per_month"] = min(730, round(step["hours_per_month"] * factor))
    for s in doc["config"].get("gpulease:storage", ()):
        s["size_tb"] = s["size_tb"] * factor
    return doc


@pytest.mark.parametrize("stack,factor", [("dev", 2.0), ("staging", 1.5)])
def test_gate_fails_when_the_stack_gets_dearer_than_an_honest_baseline(stack, factor, tmp_path):
    """The baseline is the honest plan of the stack as it is; the change under review makes it
    dearer (more hours, more data). Whatever threshold lies below the true rise, exit 3; at or
    above it, exit 0. The gate never passes a plan dearer than an honest baseline allows."""
    base = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    old_path = tmp_path / "base.json"
    old_path.write_text(_plan_text("--stack", stack))
    dear = tmp_path / f"Pulumi.{stack}.yaml"
    dear.write_text(yaml.safe_dump(_dearer(base, factor)))
    code, out, err = run(["plan", "--config", str(dear), "--diff", str(old_path), "--json"])
    assert code == EXIT_OK, err
    total = strict_json(out)["diff"]["total"]
    assert total["new_monthly_usd"] > total["old_monthly_usd"] > 0
    rise = total["pct"]
    for pct, want in ((0, EXIT_COST_INCREASE), (rise * 0.9, EXIT_COST_INCREASE),
                      (rise + 0.1, EXIT_OK)):
        code, out, err = run(["plan", "--config", str(dear), "--diff", str(old_path),
                              "--fail-on-increase", f"{pct:.3f}", "--json"])
        assert code == want, (pct, rise, err)
        strict_json(out)
