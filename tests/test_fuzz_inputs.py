"""Property: any mutation of a shipped stack file plans (exit 0), or is refused as bad input (exit
2) or by a mandatory guardrail (exit 4) — never a traceback, never NaN / Infinity / negative money.
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import math
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulease.cli import main

ROOT = Path(__file__).resolve().parents[1]
STACKS = {name: yaml.safe_load((ROOT / "stacks" / f"Pulumi.{name}.yaml").read_text())
          for name in ("dev", "staging", "prod")}

#: money fields that may legitimately be negative (a difference, not an amount).
SIGNED = {"headroom_usd", "delta_usd", "budget_headroom_usd"}

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-10 ** 13, max_value=10 ** 13),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "x" * 300, "Prod", "12345", "Not A Project!", "us-east-9", "H100",
                     "gcp:europe-west4", "aws:us-east-1", "rate(1 minute)", "-1", ".inf",
                     "sandbox-data", "é", "a_b", "true"]),
    st.text(max_size=20),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


@st.composite
def mutated(draw):
    name = draw(st.sampled_from(sorted(STACKS)))
    doc = copy.deepcopy(STACKS[name])
    paths = [p for p in _paths(doc["config"]) if p]
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(paths))
        node = doc["config"]
        try:
            for part in path[:-1]:
                node = node[part]
            kind = draw(st.sampled_from(["replace", "replace", "delete", "rename"]))
            if kind == "delete" or (kind == "rename" and isinstance(node, list)):
                del node[path[-1]]
            elif kind == "rename":
                node[str(path[-1]) + draw(st.sampled_from(["x", "_", ":a", ""]))] = \
                    node.pop(path[-1])
            else:
                node[path[-1]] = draw(values)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced this path
    return name, doc


def _money_problems(node, key="") -> list[str]:
    out = []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _money_problems(v, str(k))
    elif isinstance(node, list):
        for v in node:
            out += _money_problems(v, key)
    elif isinstance(node, float) and not math.isfinite(node):
        out.append(f"{key}={node}")
    elif (isinstance(node, (int, float)) and not isinstance(node, bool) and node < 0
          and "usd" in key and key not in SIGNED):
        out.append(f"{key}={node}")
    return out


def _no_constants(name: str):
    raise AssertionError(f"{name} in --json output (not valid JSON)")


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated())
def test_mutated_stack_files_plan_or_fail_cleanly(tmp_path_factory, case):
    name, doc = case
    path = tmp_path_factory.mktemp("fz") / f"Pulumi.{name}.yaml"
    try:
        path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    except yaml.YAMLError:
        return
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", "--config", str(path), "--json"])  # an exception fails the test
    assert code in (0, 2, 4), (code, err.getvalue())
    if code == 2:
        assert out.getvalue() == "" and err.getvalue().startswith("error: "), err.getvalue()
        return
    plan = json.loads(out.getvalue(), parse_constant=_no_constants)
    assert _money_problems(plan) == []
    if code == 4:
        assert any(v.get("level") == "mandatory" for v in plan["violations"])


# ---- the catalog ------------------------------------------------------------------------------
def _catalog_doc() -> dict:
    from gpulease.catalog import default_catalog_path

    return json.loads(default_catalog_path().read_text(encoding="utf-8"))


CATALOG = _catalog_doc()
_SECTIONS = ("offerings", "storage", "egress", "infra")
_used = {("gcp", "us-central1"), ("gcp", "us-east4"), ("aws", "us-east-1")}  # dev + staging
_FOCUS = {sec: [i for i, row in enumerate(CATALOG.get(sec) or [])
                if isinstance(row, dict) and ((row.get("cloud"), row.get("region")) in _used
                                              or "region" not in row)]
          for sec in _SECTIONS}


@st.composite
def mutated_catalog(draw):
    doc = copy.deepcopy(CATALOG)
    where = draw(st.sampled_from(["top", *[s for s in _SECTIONS if _FOCUS[s]]]))
    if where == "top":
        key = draw(st.sampled_from(sorted(doc)))
        doc[key] = draw(values)
    else:
        row = doc[where][draw(st.sampled_from(_FOCUS[where]))]
        key = draw(st.sampled_from(sorted(row)))
        row[key] = draw(st.one_of(values, st.floats(min_value=-10, max_value=10)))
    doc.pop("checksum", None)  # a hand-edited file: the loader warns, the plan continues
    return draw(st.sampled_from(["dev", "staging"])), doc


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated_catalog())
def test_mutated_catalogs_plan_or_fail_cleanly(tmp_path_factory, case):
    stack, doc = case
    path = tmp_path_factory.mktemp("cat") / "catalog.json"
    try:
        path.write_text(json.dumps(doc))  # NaN/Infinity are written as JSON extensions
    except (TypeError, ValueError):
        return
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", "--stack", stack, "--catalog", str(path), "--json"])
    assert code in (0, 2, 4), (code, err.getvalue())
    if code == 2:
        assert out.getvalue() == "" and err.getvalue().startswith("error: "), err.getvalue()
        return
    plan = json.loads(out.getvalue(), parse_constant=_no_constants)
    assert _money_problems(plan) == []
