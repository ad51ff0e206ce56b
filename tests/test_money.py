"""One money type, one formatter (issue 25 item 2): the rounding rule at the ledger boundary,
and every view of every shipped stack - `plan` text and JSON, `explain` text and JSON, the
`--diff`, the HTML report, the Pulumi stack outputs, the budget guardrails, the cost tags and
a saved plan read back - showing the same totals to the cent."""
from __future__ import annotations

import io
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

from gpulease import money
from gpulease.cli import main, ui

ROOT = Path(__file__).resolve().parents[1]
STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


# ---- the rule -------------------------------------------------------------------------------
@pytest.mark.parametrize("value,cents", [
    (2.675, "2.68"),      # binary 2.67499999...: read as the decimal shown, half up
    (0.125, "0.13"),      # half-even would give 0.12
    (-0.125, "-0.13"),    # half away from zero
    (1.005, "1.01"),      # round(1.005, 2) == 1.0 in Python
    (0.004999, "0.00"),
    (4604.795, "4604.80"),
    (10, "10.00"),
    (Decimal("3.14159"), "3.14"),
    ("12.345", "12.35"),
])
def test_usd_rounds_half_up_from_the_decimal_shown(value, cents):
    assert money.usd(value) == Decimal(cents)
    assert str(money.usd(value)) == cents


def test_rounding_rule_is_half_up_not_python_round():
    # the cases where Python's round() (half-even on the binary value) and the rule differ
    assert round(2.675, 2) == 2.67 and money.usd(2.675) == Decimal("2.68")
    assert round(0.125, 2) == 0.12 and money.usd(0.125) == Decimal("0.13")
    assert money.ROUNDING == "ROUND_HALF_UP"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), "NaN", "Infinity"])
def test_usd_refuses_what_is_not_money(bad):
    with pytest.raises(ValueError):
        money.usd(bad)


def test_usd_refuses_booleans_and_objects():
    for bad in (True, None, [1]):
        with pytest.raises(TypeError):
            money.usd(bad)


def test_total_is_the_sum_of_the_cents_shown():
    parts = [3059.584, 1545.216]     # 3,059.58 + 1,545.22 as each is shown
    assert money.total(parts) == Decimal("4604.80")
    assert money.usd(sum(parts)) == Decimal("4604.80")
    assert money.total([0.004] * 3) == Decimal("0.00")   # each part rounds to nothing


@pytest.mark.parametrize("amount", ["0.01", "4604.80", "361359.58", "999999999999.99",
                                    "123456789.07"])
def test_json_number_round_trips_to_the_cent(amount):
    d = Decimal(amount)
    n = money.json_number(d)
    assert isinstance(n, float)
    assert money.usd(json.loads(json.dumps(n))) == d


def test_the_formatter():
    assert money.fmt(1234.5) == "$1,234.50"
    assert money.fmt(-5) == "-$5.00"
    assert money.fmt(None) == "-"
    assert money.fmt(2.675) == "$2.68"
    assert money.signed(0) == "+$0.00" and money.signed(-0.125) == "-$0.13"
    assert money.short(455935.5) == "$455,936" and money.short(0.09) == "$0.09"
    # the CLI, the HTML report and the policy's sentences use it, not a copy
    from gpulease.planner import html
    from gpulease.policy import explanation, window_choice

    assert ui.money is money.fmt and ui.signed_money is money.signed
    assert html.money is money.fmt and html.money_short is money.short
    assert explanation._money is money.fmt and window_choice._money is money.fmt


def test_cost_tags_encode_the_ledger_amount():
    from gpulease import tags

    assert tags.usd(Decimal("187")) == "187.00" and tags.usd(2.675) == "2.68"
    assert tags.cents(1234.565) == "123457" and tags.from_cents("123457") == Decimal("1234.57")


def test_a_cost_breakdown_total_is_the_sum_of_its_components_shown():
    from gpulease.model import CostBreakdown

    c = CostBreakdown(reserved_usd=3059.584, on_demand_usd=1545.216)
    assert round(c.monthly_usd, 2) == 4604.80 or round(c.monthly_usd, 2) == 4604.8
    d = c.as_dict()
    assert d["reserved_usd"] + d["on_demand_usd"] == pytest.approx(d["monthly_usd"], abs=1e-9)
    c = CostBreakdown(reserved_usd=0.004, on_demand_usd=0.004, spot_usd=0.004)
    assert c.monthly_money == Decimal("0.00")       # the float total would round to 0.01
    assert round(c.monthly_usd, 2) == 0.01


# ---- every view of every shipped stack ------------------------------------------------------
def _dollars(text: str) -> Decimal:
    return Decimal(text.replace("$", "").replace(",", ""))


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    """Per shipped stack: plan JSON (+ HTML report) and explain JSON and text from the CLI."""
    import contextlib

    out = {}
    tmp = tmp_path_factory.mktemp("money")
    for stack in STACKS:
        html = tmp / f"{stack}.html"
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            code = main(["plan", "--stack", stack, "--json", "--html", str(html)])
        assert code in (0, 4), stack   # 4: a mandatory guardrail (the plan is still whole)
        plan = json.loads(buf.getvalue())
        ex_json = io.StringIO()
        with contextlib.redirect_stdout(ex_json), contextlib.redirect_stderr(io.StringIO()):
            assert main(["explain", "--stack", stack, "--json"]) == 0
        ex_text = io.StringIO()
        with contextlib.redirect_stdout(ex_text), contextlib.redirect_stderr(io.StringIO()):
            assert main(["explain", "--stack", stack]) == 0
        out[stack] = {"plan": plan, "html": html.read_text(),
                      "explain": json.loads(ex_json.getvalue()),
                      "explain_text": ex_text.getvalue()}
    return out


def test_shipped_stacks_found():
    assert {"dev", "staging", "prod"} <= set(STACKS)


@pytest.mark.parametrize("stack", STACKS)
def test_every_view_shows_the_same_total(views, stack):
    from gpulease.cli.plan import render_diff, render_plan
    from gpulease.planner.diff import diff_plans
    from gpulease.planner.html import report_variables

    v = views[stack]
    plan = v["plan"]
    total = money.usd(plan["totals"]["monthly_usd"])
    # the resources and the owned pools' lines add up to it, to the cent (what --diff and a
    # saved plan count; docs/owned.md)
    owned = money.total(x["monthly_usd"] for x in (plan.get("owned") or {}).get("lines", []))
    assert money.total(r["monthly_usd"] for r in plan["resources"]) + owned == total
    assert money.total(plan["totals"]["by_cluster"].values()) == total
    # plan text
    o = ui.Out(io.StringIO())
    render_plan(plan, o)
    text = o.stream.getvalue()
    assert f"Total: {money.fmt(total)}/month" in text
    # the Pulumi stack outputs the program exports
    outputs = plan["outputs"]
    assert money.usd(outputs["total_monthly_usd"]) == total
    assert money.usd(outputs["budget_headroom_usd"]) == \
        money.usd(outputs["budget_monthly_usd"]) - total
    assert money.usd(plan["budget"]["headroom_usd"]) == money.usd(outputs["budget_headroom_usd"])
    # explain: JSON and text
    ex = v["explain"]
    assert money.usd(ex["totals"]["monthly_usd"]) == total, ex["totals"]
    assert money.usd(ex["budget"]["headroom_usd"]) == money.usd(plan["budget"]["headroom_usd"])
    env_line = next(ln for ln in v["explain_text"].splitlines() if ln.startswith("Environment:"))
    assert f"= {money.fmt(total)}/month" in env_line, env_line
    parts = re.findall(r"\$[\d,]+\.\d\d", env_line.split(" = ")[0])
    assert sum((_dollars(p) for p in parts), money.ZERO) == total, env_line
    # --diff against the same plan saved: the new side is the plan's total
    saved = json.loads(json.dumps(plan))
    diff = diff_plans(saved, plan)
    assert money.usd(diff["total"]["new_monthly_usd"]) == total
    assert money.usd(diff["new"]["monthly_usd"]) == total
    o = ui.Out(io.StringIO())
    render_diff(diff, o)
    assert f"{money.fmt(total)} -> {money.fmt(total)}" in o.stream.getvalue()
    # the HTML report
    assert report_variables(plan)["monthly"] == money.fmt(total)
    assert money.fmt(total) in v["html"]


@pytest.mark.parametrize("stack", STACKS)
def test_every_view_shows_the_same_cluster_totals(views, stack):
    from gpulease.planner.diff import diff_plans

    v = views[stack]
    plan = v["plan"]
    by_cluster = {k: money.usd(x) for k, x in plan["totals"]["by_cluster"].items()}
    explained = {c["name"]: c for c in v["explain"]["clusters"]}
    outputs = plan["outputs"]["clusters"]
    diff = {c["cluster"]: money.usd(c["new_monthly_usd"])
            for c in diff_plans(json.loads(json.dumps(plan)), plan)["clusters"]}
    assert plan["clusters"]
    # a cluster partly on an owned pool: its total is its cloud share plus its owned share
    owned = {p["cluster"]: money.usd(p["owned"]["monthly_usd"])
             for p in (plan.get("owned") or {}).get("placements", []) if p["owned"]}
    for c in plan["clusters"]:
        name, shown = c["name"], money.usd(c["monthly_usd"])
        mine = owned.get(name, money.ZERO)
        assert by_cluster[name] == shown + mine, name   # its resources in the ledger
        assert diff[name] == shown + mine, name         # --diff's per-cluster rows
        assert money.usd(outputs[name]["monthly_usd"]) == shown, name   # stack output
        assert money.usd(explained[name]["monthly_usd"]) == shown, name
        costs = c["costs"]
        assert money.total(x for k, x in costs.items() if k != "monthly_usd") == shown, name
        assert money.usd(costs["monthly_usd"]) == shown, name
        # explain's text: the cluster row and the breakdown's total
        m = re.search(rf"Cluster {re.escape(name)} .*?\n(.*?)\n  Cost breakdown",
                      v["explain_text"], re.S)
        assert m and money.fmt(shown) in m.group(1), name
    for s in plan["storage"]:
        assert money.usd(plan["outputs"]["storage_monthly_usd"][s["name"]]) == \
            money.usd(s["monthly_usd"])


@pytest.mark.parametrize("stack", STACKS)
def test_guardrails_judge_the_plans_total(views, stack):
    """budget-cap fires a cent over the plan's total and not at it; its message quotes the
    total as the plan shows it."""
    from gpulease.guardrails import rules as R
    from gpulease.guardrails.rules import RuleContext

    total = money.usd(views[stack]["plan"]["totals"]["monthly_usd"])
    at = RuleContext(budget_monthly_usd=float(total), planned_monthly_usd=total)
    assert R.check_budget_cap([], at) == []
    under = RuleContext(budget_monthly_usd=float(total - money.CENT), planned_monthly_usd=total)
    [(_, msg)] = R.check_budget_cap([], under)
    assert money.fmt(total) in msg and "by $0.01" in msg
    # through the JSON float the CrossGuard pack reads from the stack output
    out = RuleContext(budget_monthly_usd=float(total - money.CENT),
                      planned_monthly_usd=views[stack]["plan"]["outputs"]["total_monthly_usd"])
    assert R.check_budget_cap([], out)


@pytest.mark.parametrize("stack", STACKS)
def test_cost_tags_carry_the_ledger_amounts(views, stack):
    from gpulease import tags

    for r in views[stack]["plan"]["resources"]:
        t = r.get("tags") or {}
        if tags.MONTHLY_USD in t:
            assert money.usd(t[tags.MONTHLY_USD]) == money.usd(r["monthly_usd"]), r["urn"]
        if tags.MONTHLY_CENTS in t:
            assert tags.from_cents(t[tags.MONTHLY_CENTS]) == money.usd(r["monthly_usd"]), r["urn"]


@pytest.mark.parametrize("stack", STACKS)
def test_a_saved_plan_reads_back_to_the_cent(views, stack, tmp_path):
    from gpulease.planner.saved import load_saved_plan

    plan = views[stack]["plan"]
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(plan))
    doc = load_saved_plan(str(f), flag="--diff")
    assert money.usd(doc["totals"]["monthly_usd"]) == money.usd(plan["totals"]["monthly_usd"])
    # a total a cent off the resources' sum is refused
    plan2 = json.loads(json.dumps(plan))
    plan2["totals"]["monthly_usd"] = float(money.usd(plan["totals"]["monthly_usd"]) + money.CENT)
    f.write_text(json.dumps(plan2))
    from gpulease.errors import ConfigError

    with pytest.raises(ConfigError, match="is not the sum of the resources"):
        load_saved_plan(str(f), flag="--diff")


def test_money_in_json_has_at_most_two_decimals(views):
    """Every *_usd amount a plan or explain document carries is a number of whole cents (the
    resources are checked above; catalog prices per node-hour keep their digits)."""
    def walk(x, path=""):
        if isinstance(x, dict):
            for k, y in x.items():
                yield from walk(y, f"{path}.{k}") if not k.endswith("_usd") or \
                    isinstance(y, (dict, list)) else [(f"{path}.{k}", y)]
        elif isinstance(x, list):
            for i, y in enumerate(x):
                yield from walk(y, f"{path}[{i}]")

    for stack, v in views.items():
        for doc in (v["plan"], v["explain"]):
            for path, amount in walk({k: x for k, x in doc.items() if k != "resources"}):
                if amount is None or "price_disagreements" in path:
                    continue   # catalog prices per node-hour (used_usd, other_usd), not amounts
                assert Decimal(repr(amount)) == money.usd(amount), (stack, path, amount)
