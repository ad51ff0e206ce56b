"""The cost gate's thresholds (gpulease:gate; issue 36 item 3): the pure judgement just below,
at and above every threshold, without a diff and on a fall; the config key; `gpulease plan`
with --ack / GPULEASE_GATE_ACK; and the CrossGuard pack blocking the same plan as CI, an
acknowledgement turning both into a recorded warning."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpulease import money
from gpulease.cli import main
from gpulease.errors import EXIT_BAD_INPUT, EXIT_COST_INCREASE, EXIT_OK, ConfigError
from gpulease.guardrails import gate as G

ROOT = Path(__file__).resolve().parents[1]


def doc(old, new, *, total=None):
    """A plan-shaped document: the diff of two monthly totals (old None: no diff)."""
    from gpulease.planner.diff import total_change

    return {"totals": {"monthly_usd": new if total is None else total},
            "diff": None if old is None else {"total": total_change(old, new)}}


def one(settings, plan, **kw):
    g = G.evaluate(settings, plan, **kw)
    assert len(g["results"]) == 1, g
    return g, g["results"][0]


# ---- the pure judgement ----------------------------------------------------------------------
# (metric, threshold, old, new, crossed?)  a rise of 1000.00: below / at / above by a cent
EDGES = [
    ("delta_usd", 999.99, 1000.00, 2000.00, True),
    ("delta_usd", 1000.00, 1000.00, 2000.00, False),     # at the threshold: passes
    ("delta_usd", 1000.01, 1000.00, 2000.00, False),
    ("delta_pct", 99.99, 1000.00, 2000.00, True),         # +100.00 %
    ("delta_pct", 100.0, 1000.00, 2000.00, False),
    ("delta_pct", 100.01, 1000.00, 2000.00, False),
    ("total_usd", 1999.99, 1000.00, 2000.00, True),
    ("total_usd", 2000.00, 1000.00, 2000.00, False),
    ("total_usd", 2000.01, 1000.00, 2000.00, False),
]


@pytest.mark.parametrize("metric,threshold,old,new,crossed", EDGES)
@pytest.mark.parametrize("kind", G.KINDS)
def test_each_threshold_just_below_at_and_above(kind, metric, threshold, old, new, crossed):
    g, r = one({kind: {metric: threshold}}, doc(old, new))
    want = (G.BLOCK if kind == "block" else G.WARN) if crossed else G.OK
    assert (g["level"], r["level"]) == (want, want)
    assert r["rule"] == f"gpulease:gate.{kind}.{metric}" and r["threshold"] == threshold
    assert r["value"] == {"delta_usd": 1000.0, "delta_pct": 100.0, "total_usd": 2000.0}[metric]
    assert ("more than" in r["message"]) == crossed and ("within" in r["message"]) != crossed
    assert G.blocks(g) == (crossed and kind == "block")


def test_money_is_compared_in_cents_not_floats():
    # 0.1 + 0.2 in floats is 0.30000000000000004: a threshold of 0.30 must not be crossed
    g, r = one({"block": {"delta_usd": 0.3}}, doc(0.1, 0.1 + 0.2 + 0.1))
    assert r["value"] == 0.3 and r["level"] == G.OK
    g, r = one({"block": {"total_usd": 0.3}}, doc(None, 0.1 + 0.2))
    assert r["level"] == G.OK


def test_a_block_wins_over_a_warn_and_ok_names_the_lowest_threshold():
    settings = {"warn": {"delta_usd": 100}, "block": {"delta_usd": 500}}
    _, r = one(settings, doc(1000, 1050))
    assert (r["level"], r["rule"], r["threshold"]) == (G.OK, "gpulease:gate.warn.delta_usd", 100)
    _, r = one(settings, doc(1000, 1200))
    assert (r["level"], r["rule"]) == (G.WARN, "gpulease:gate.warn.delta_usd")
    _, r = one(settings, doc(1000, 1600))
    assert (r["level"], r["rule"], r["threshold"]) == (G.BLOCK, "gpulease:gate.block.delta_usd",
                                                       500)
    assert r["message"] == ("the monthly cost rose +$600.00 ($1,000.00 -> $1,600.00, +60.00%): "
                            "more than gpulease:gate.block.delta_usd $500.00 (no acknowledgement "
                            "possible: gpulease:gate.acknowledged lists none)")


def test_without_a_diff_delta_thresholds_are_not_judged_and_the_total_is():
    settings = {"warn": {"delta_pct": 1}, "block": {"delta_usd": 1, "total_usd": 100}}
    g = G.evaluate(settings, doc(None, 150))
    assert [r["rule"] for r in g["results"]] == ["gpulease:gate.block.total_usd"]
    assert g["level"] == G.BLOCK
    assert g["not_judged"] == [
        {"rule": "gpulease:gate.block.delta_usd",
         "reason": "no baseline to compare with (plan --diff BASE)"},
        {"rule": "gpulease:gate.warn.delta_pct",
         "reason": "no baseline to compare with (plan --diff BASE)"}]
    assert G.evaluate(settings, doc(None, 50))["level"] == G.OK


def test_a_fall_crosses_no_delta_threshold():
    settings = {"block": {"delta_usd": 0, "delta_pct": 0}}
    g = G.evaluate(settings, doc(2000, 1500))
    assert g["level"] == G.OK
    by = {r["rule"]: r for r in g["results"]}
    assert by["gpulease:gate.block.delta_usd"]["value"] == -500.0
    assert by["gpulease:gate.block.delta_pct"]["value"] == -25.0
    assert by["gpulease:gate.block.delta_usd"]["message"].startswith(
        "the monthly cost fell -$500.00 ($2,000.00 -> $1,500.00, -25.00%): within")
    # no change at all, threshold 0: passes (a rise must be more than the threshold)
    assert G.evaluate(settings, doc(2000, 2000))["level"] == G.OK
    # a cent more: blocked on the dollars; the percentage is the diff's, to two decimals, and
    # +0.0005 % is +0.00 %, which crosses no %-threshold (docs/guardrails.md says so)
    assert [r["level"] for r in G.evaluate(settings, doc(2000, 2000.01))["results"]] == \
        [G.BLOCK, G.OK]
    assert [r["level"] for r in G.evaluate(settings, doc(2000, 2000.10))["results"]] == \
        [G.BLOCK, G.BLOCK]                                       # +0.01 %


def test_a_rise_from_nothing_crosses_any_percentage():
    g, r = one({"block": {"delta_pct": 1_000_000}}, doc(0, 5))
    assert r["level"] == G.BLOCK and r["value"] is None
    g, r = one({"block": {"delta_pct": 0}}, doc(0, 0))          # nothing to nothing: no rise
    assert r["level"] == G.OK


def test_acknowledgement_turns_blocks_into_recorded_warnings_only_when_listed():
    settings = {"warn": {"delta_pct": 5}, "block": {"delta_usd": 100, "total_usd": 100},
                "acknowledged": ["cost-increase-approved"]}
    plan = doc(1000, 1500)
    g = G.evaluate(settings, plan, acks=["needs-review", "Cost-Increase-Approved"])
    assert g["level"] == G.ACKNOWLEDGED and not G.blocks(g)
    assert g["acknowledged_by"] == ["cost-increase-approved"]
    assert g["acks_passed"] == ["needs-review", "Cost-Increase-Approved"]
    levels = [r["level"] for r in g["results"]]
    assert levels == [G.ACKNOWLEDGED, G.WARN, G.ACKNOWLEDGED]
    assert [r["level"] for r in G.warnings(g)] == levels
    assert "acknowledged by 'cost-increase-approved' (gpulease:gate.acknowledged), a recorded " \
           "warning instead of a block" in g["results"][0]["message"]
    # labels that are not listed acknowledge nothing, and the message says so
    g = G.evaluate(settings, plan, acks=["lgtm"])
    assert g["level"] == G.BLOCK and g["acknowledged_by"] == []
    assert g["results"][0]["message"].endswith(
        "(acknowledgements passed in: 'lgtm'; none is listed in gpulease:gate.acknowledged: "
        "'cost-increase-approved')")
    assert G.evaluate(settings, plan)["results"][0]["message"].endswith(
        "(to acknowledge it, pass one of 'cost-increase-approved' with --ack or "
        "GPULEASE_GATE_ACK)")
    # an acknowledgement with nothing blocked records nothing
    g = G.evaluate(settings, doc(99, 99.5), acks=["cost-increase-approved"])
    assert g["level"] == G.OK and g["acknowledged_by"] == []


def test_the_flag_form_is_a_block_on_delta_pct_and_the_stricter_one_wins():
    plan = doc(1000, 1150)                                       # +15 %
    g, r = one(None, plan, fail_on_increase=10)
    assert (r["level"], r["rule"], r["threshold"]) == (G.BLOCK, G.FLAG_RULE, 10.0)
    g, r = one({"block": {"delta_pct": 20}}, plan, fail_on_increase=10)
    assert (r["level"], r["rule"]) == (G.BLOCK, G.FLAG_RULE)
    g, r = one({"block": {"delta_pct": 12}}, plan, fail_on_increase=50)
    assert (r["level"], r["rule"]) == (G.BLOCK, "gpulease:gate.block.delta_pct")
    g, r = one(None, doc(1000, 1100), fail_on_increase=10)     # exactly 10 %: passes
    assert r["level"] == G.OK
    # the flag agrees with the diff's own `exceeds` (the old gate) on every edge
    from gpulease.planner.diff import exceeds

    for old, new, pct in [(1000, 1100, 10), (1000, 1100.01, 10), (0, 1, 50), (500, 400, 0),
                          (1000, 1000, 0), (0, 0, 0)]:
        d = doc(old, new)
        assert G.blocks(G.evaluate(None, d, fail_on_increase=pct)) == exceeds(d["diff"], pct)


def test_labels_from_the_environment():
    assert G.parse_labels(" a, b ,,\nc ") == ["a", "b", "c"]
    assert G.parse_labels("") == [] and G.parse_labels(None) == []


# ---- the config key --------------------------------------------------------------------------
def _dev_values(**gate):
    values = yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())["config"]
    if gate:
        values["gpulease:gate"] = gate
    return values


def test_the_config_key_parses_into_the_spec_and_refuses_bad_thresholds():
    from gpulease.catalog import load_catalog
    from gpulease.config import parse_stack_config

    cat = load_catalog()
    spec = parse_stack_config(_dev_values(block={"delta_pct": 10}, acknowledged=["ok-cost"]),
                              stack="dev", source="Pulumi.dev.yaml", catalog=cat)
    assert spec.gate == {"warn": None, "block": {"delta_usd": None, "delta_pct": 10.0,
                                                 "total_usd": None},
                         "acknowledged": ["ok-cost"]}
    assert parse_stack_config(_dev_values(), stack="dev", source="x", catalog=cat).gate is None
    for bad, path in [({"block": {"delta_usd": -1}}, "gpulease:gate.block.delta_usd"),
                      ({"block": {"delta_pc": 10}}, "gpulease:gate.block.delta_pc"),
                      ({"warn": {"total_usd": "lots"}}, "gpulease:gate.warn.total_usd"),
                      ({"acknowledged": [""]}, "gpulease:gate.acknowledged[0]"),
                      ({"acknowledged": True}, "gpulease:gate.acknowledged")]:
        with pytest.raises(ConfigError) as exc:
            parse_stack_config(_dev_values(**bad), stack="dev", source="Pulumi.dev.yaml",
                               catalog=cat)
        paths = [f.path for f in exc.value.findings]
        assert path in paths, (bad, paths)


# ---- `gpulease plan` and the pack on the same plan -------------------------------------------
@pytest.fixture(scope="module")
def dev_plan(tmp_path_factory):
    """The dev stack's plan and a baseline one resource cheaper (a valid saved plan: its total
    is the sum of its resources)."""
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["plan", "--config", str(ROOT / "stacks" / "Pulumi.dev.yaml"),
                     "--json"]) == EXIT_OK
    plan = json.loads(buf.getvalue())
    base = json.loads(buf.getvalue())
    dearest = max(base["resources"], key=lambda r: r["monthly_usd"])
    base["resources"].remove(dearest)
    base["totals"]["monthly_usd"] = float(money.total(r["monthly_usd"]
                                                      for r in base["resources"]))
    path = tmp_path_factory.mktemp("gate") / "base-plan.json"
    path.write_text(json.dumps(base))
    return plan, path, money.usd(dearest["monthly_usd"])


def _gated_stack(tmp_path, rise):
    """dev with a block just below the rise, a warn on any %, an acknowledgement label."""
    gate = {"warn": {"delta_pct": 0}, "block": {"delta_usd": float(rise - money.CENT)},
            "acknowledged": ["cost-increase-approved"]}
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())
    doc["config"]["gpulease:gate"] = gate
    f = tmp_path / "Pulumi.dev.yaml"
    f.write_text(yaml.safe_dump(doc))
    return f, doc["config"]


def test_plan_blocks_and_an_acknowledgement_is_a_recorded_warning(dev_plan, tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv(G.ACK_ENV, raising=False)
    plan, base, rise = dev_plan
    f, _ = _gated_stack(tmp_path, rise)
    assert rise > 1
    code = main(["plan", "--config", str(f), "--diff", str(base), "--json"])
    cap = capsys.readouterr()
    g = json.loads(cap.out)["gate"]
    assert code == EXIT_COST_INCREASE and g["level"] == G.BLOCK
    block = g["results"][0]
    assert block["rule"] == "gpulease:gate.block.delta_usd" and block["value"] == float(rise)
    assert cap.err.splitlines()[-1] == (
        "exit 3 (cost over a gate threshold (--fail-on-increase, gpulease:gate.block)): "
        + block["message"])
    assert f"warning: cost gate [warn]: {g['results'][1]['message']}" in cap.err
    # the same plan, the label passed in: exit 0, the block recorded as a warning
    code = main(["plan", "--config", str(f), "--diff", str(base), "--json",
                 "--ack", "needs-review", "--ack", "cost-increase-approved"])
    cap = capsys.readouterr()
    g = json.loads(cap.out)["gate"]
    assert code == EXIT_OK and g["level"] == G.ACKNOWLEDGED
    assert g["acknowledged_by"] == ["cost-increase-approved"]
    assert f"warning: cost gate [acknowledged]: {g['results'][0]['message']}" in cap.err
    assert "exit 3" not in cap.err
    # the text form, the label from the environment (CI passes the PR's labels)
    monkeypatch.setenv(G.ACK_ENV, "size/M,cost-increase-approved")
    code = main(["plan", "--config", str(f), "--diff", str(base)])
    cap = capsys.readouterr()
    assert code == EXIT_OK
    assert "Cost gate (gpulease:gate): acknowledged block, exit 0" in cap.out
    assert "  [acknowledged] the monthly cost rose" in cap.out


def test_plan_without_a_diff_lists_what_it_cannot_judge_and_refuses_an_empty_ack(
        tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv(G.ACK_ENV, raising=False)
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())
    doc["config"]["gpulease:gate"] = {"block": {"delta_pct": 10, "total_usd": 1}}
    f = tmp_path / "Pulumi.dev.yaml"
    f.write_text(yaml.safe_dump(doc))
    assert main(["plan", "--config", str(f), "--ack", " "]) == EXIT_BAD_INPUT
    assert "--ack: an empty label acknowledges nothing" in capsys.readouterr().err
    code = main(["plan", "--config", str(f)])
    out = capsys.readouterr().out
    assert code == EXIT_COST_INCREASE
    assert "Cost gate (gpulease:gate): BLOCKED, exit 3" in out
    assert "[not judged] gpulease:gate.block.delta_pct: no baseline to compare with" in out
    assert "more than gpulease:gate.block.total_usd $1.00" in out


def _pack_gate(run, base, *, config=None, env_ack=None, monkeypatch=None):
    from tests.test_guardrails import _pack_findings

    if monkeypatch is not None:
        if env_ack is None:
            monkeypatch.delenv(G.ACK_ENV, raising=False)
        else:
            monkeypatch.setenv(G.ACK_ENV, env_ack)
    found = _pack_findings(run, stack_outputs=dict(run.outputs),
                           config={"baseline_plan": str(base), **(config or {})})
    return [f for f in found if f[0].startswith("cost-gate")]


def test_the_pack_blocks_the_same_plan_and_the_acknowledgement_turns_both_into_a_warning(
        dev_plan, tmp_path, capsys, monkeypatch):
    from gpulease.planner.plan import run

    monkeypatch.chdir(ROOT)
    monkeypatch.delenv(G.ACK_ENV, raising=False)
    plan, base, rise = dev_plan
    f, values = _gated_stack(tmp_path, rise)
    prun = run(values, stack="dev")
    assert prun.outputs["gate"]["block"]["delta_usd"] == float(rise - money.CENT)
    # the pack's total is the plan's total to the cent
    assert money.usd(prun.outputs["total_monthly_usd"]) == money.usd(plan["totals"]["monthly_usd"])

    main(["plan", "--config", str(f), "--diff", str(base), "--json"])
    ci = json.loads(capsys.readouterr().out)["gate"]
    pack = _pack_gate(prun, base, monkeypatch=monkeypatch)
    # CI: exit 3 on the block; the pack: the same message from the mandatory policy, and the
    # warn threshold from the advisory one
    assert ("cost-gate", "", f"[block] {ci['results'][0]['message']}") in pack
    assert ("cost-gate-warnings", "", f"[warn] {ci['results'][1]['message']}") in pack
    assert len(pack) == 2

    # acknowledged in both: CI exits 0, the pack's mandatory policy reports nothing
    code = main(["plan", "--config", str(f), "--diff", str(base), "--json", "--ack",
                 "cost-increase-approved"])
    ci = json.loads(capsys.readouterr().out)["gate"]
    assert code == EXIT_OK and ci["level"] == G.ACKNOWLEDGED
    for how in ({"config": {"ack": ["cost-increase-approved"]}},
                {"env_ack": "wip,Cost-Increase-Approved"}):
        pack = _pack_gate(prun, base, monkeypatch=monkeypatch, **how)
        assert not [p for p in pack if p[0] == "cost-gate"], (how, pack)
        assert ("cost-gate-warnings", "", f"[acknowledged] {ci['results'][0]['message']}") \
            in pack, how


def test_the_pack_fails_closed_on_a_bad_baseline_and_skips_without_thresholds(tmp_path,
                                                                             monkeypatch):
    from pulumi_policy import PolicyResource, StackValidationArgs
    from pulumi_policy.policy import _NotApplicableError

    from tests.test_guardrails import _load_pack, _Opts

    monkeypatch.delenv(G.ACK_ENV, raising=False)
    pack = _load_pack()
    by_name = {p.name: p for p in pack.build_policies()}
    assert by_name["cost-gate"].enforcement_level.value == "mandatory"
    assert by_name["cost-gate-warnings"].enforcement_level.value == "advisory"

    def stack(outputs):
        return [PolicyResource("pulumi:pulumi:Stack", outputs, "urn:stack", "s", _Opts(), None,
                               None, [], {})]

    outputs = {"total_monthly_usd": 1200.0, "gate": {"block": {"total_usd": 1000}}}
    reported = []
    by_name["cost-gate"].validate(StackValidationArgs(stack(outputs), {}),
                                  lambda m, u=None: reported.append(m))
    assert reported == ["[block] the monthly total is $1,200.00: more than "
                        "gpulease:gate.block.total_usd $1,000.00 (no acknowledgement possible: "
                        "gpulease:gate.acknowledged lists none)"]
    # the policy config's thresholds replace the stack output's
    reported.clear()
    by_name["cost-gate"].validate(StackValidationArgs(stack(outputs), {
        "block": {"total_usd": 1200}}), lambda m, u=None: reported.append(m))
    assert reported == []
    # an edited baseline: the mandatory policy fails, naming the file and the field
    bad = tmp_path / "base.json"
    bad.write_text(json.dumps({"format": "gpulease-plan/1", "resources": [],
                               "totals": {"monthly_usd": 5}}))
    reported.clear()
    by_name["cost-gate"].validate(StackValidationArgs(stack(outputs), {"baseline_plan": str(bad)}),
                                  lambda m, u=None: reported.append(m))
    assert len(reported) == 1 and reported[0].startswith("the baseline plan is unusable: ")
    assert "totals.monthly_usd" in reported[0]
    with pytest.raises(_NotApplicableError):
        by_name["cost-gate-warnings"].validate(
            StackValidationArgs(stack(outputs), {"baseline_plan": str(bad)}),
            lambda m, u=None: None)
    # no thresholds anywhere: not applicable
    with pytest.raises(_NotApplicableError):
        by_name["cost-gate"].validate(StackValidationArgs(stack({"total_monthly_usd": 5.0}), {}),
                                      lambda m, u=None: None)


def test_the_pull_request_comment_shows_the_gate():
    from gpulease.pipeline.markdown import render

    g = G.evaluate({"block": {"delta_usd": 10}, "warn": {"total_usd": 1},
                    "acknowledged": ["ok-cost"]}, doc(100, 150), acks=["ok-cost"])
    body = render({"stack": "prod", "totals": {"monthly_usd": 150.0}, "gate": g})
    assert "Cost gate: **block acknowledged** (a recorded warning)" in body
    assert "- `acknowledged` the monthly cost rose +$50.00 ($100.00 -&gt; $150.00, +50.00%): " \
           "more than gpulease:gate.block.delta_usd $10.00; acknowledged by 'ok-cost'" in body
    assert "- `warn` the monthly total is $150.00: more than gpulease:gate.warn.total_usd $1.00" \
        in body
    assert "Cost gate" not in render({"stack": "prod", "totals": {"monthly_usd": 1.0}})


def test_ci_passes_the_pull_request_labels_in():
    action = yaml.safe_load((ROOT / ".github/actions/gpulease-comment/action.yml").read_text())
    (step,) = action["runs"]["steps"]
    assert step["env"][G.ACK_ENV] == "${{ join(github.event.pull_request.labels.*.name, ',') }}"
    script = (ROOT / "ci" / "gpulease-comment.sh").read_text()
    assert 'export GPULEASE_GATE_ACK="$CI_MERGE_REQUEST_LABELS"' in script   # GitLab's labels


def test_an_ack_with_nothing_to_acknowledge_is_a_warning(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv(G.ACK_ENV, raising=False)
    assert main(["plan", "--stack", "dev", "--json", "--ack", "cost-increase-approved"]) == \
        EXIT_OK
    cap = capsys.readouterr()
    assert "gate" not in json.loads(cap.out)
    assert "warning: --ack: nothing to acknowledge: the stack sets no gpulease:gate " \
           "thresholds" in cap.err


# ---- one-time window purchases move the gate (issue 34's split must not hide them) ------------
def _diff_with_purchase(old_once: float, new_once: float, monthly: float = 1_000.0) -> dict:
    from gpulease.planner.diff import diff_plans

    def plan(once: float) -> dict:
        return {"format": "gpulease-plan/1", "stack": "dev", "resources": [
            {"urn": "urn:pulumi:dev::gpulease::aws:ec2/instance:Instance::a", "type": "t",
             "name": "a", "monthly_usd": monthly}],
            "totals": {"monthly_usd": monthly, "one_time_usd": once}}
    d = diff_plans(plan(old_once), plan(new_once))
    return {"totals": {"monthly_usd": monthly, "one_time_usd": new_once}, "diff": d}


def test_a_block_bought_in_a_change_crosses_the_delta_thresholds():
    """The monthly cost is unchanged; the change buys an $83,064.96 Capacity Block. Counted
    whole (the budget's rule), it is a rise of $83,064.96 from $1,000.00."""
    p = _diff_with_purchase(0, 83_064.96)
    assert p["diff"]["total"]["delta_usd"] == 0          # the monthly view is unchanged
    assert p["diff"]["total"]["whole_delta_usd"] == 83_064.96
    _, r = one({"block": {"delta_usd": 10_000}}, p)
    assert r["level"] == G.BLOCK and r["value"] == 83_064.96
    assert "monthly plus one-time purchases, counted whole" in r["message"]
    assert "one-time $0.00 -> $83,064.96" in r["message"]
    _, pct = one({"block": {"delta_pct": 50}}, p)
    assert pct["level"] == G.BLOCK and pct["value"] == pytest.approx(8306.5, abs=0.01)
    # the flag form judges the same figure
    g = G.evaluate({}, p, fail_on_increase=10)
    assert G.blocks(g)


def test_the_total_threshold_counts_one_time_purchases_whole():
    p = _diff_with_purchase(0, 83_064.96)
    _, r = one({"block": {"total_usd": 50_000}}, p)
    assert r["level"] == G.BLOCK and r["value"] == 84_064.96


def test_the_same_block_in_both_plans_moves_nothing():
    p = _diff_with_purchase(83_064.96, 83_064.96)
    _, r = one({"block": {"delta_usd": 0.01}}, p)
    assert r["level"] == G.OK and r["value"] == 0


def test_the_cli_diff_gate_exits_3_on_a_purchase(tmp_path, capsys):
    """`plan --diff BASE --fail-on-increase` on the same numbers (the diff's own gate)."""
    from gpulease.cli.plan import gate as diff_gate
    p = _diff_with_purchase(0, 83_064.96)
    g = diff_gate(p["diff"], 10)
    assert g["exceeded"] and "monthly plus one-time purchases" in g["reason"]
