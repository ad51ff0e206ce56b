"""`gpulease plan` as users run it: JSON document, diff exit codes, guardrail exit, pinning."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from gpulease import catalog as catalog_mod
from gpulease.cli import main
from gpulease.errors import EXIT_COST_INCREASE, EXIT_OK, EXIT_POLICY

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def in_project(monkeypatch):
    monkeypatch.chdir(ROOT)


def plan_json(capsys, *args) -> tuple[int, dict]:
    code = main(["plan", *args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_plan_json_is_one_document_with_the_issue_shape(capsys):
    code, plan = plan_json(capsys, "--stack", "dev")
    assert code == EXIT_OK
    assert plan["stack"] == "dev" and plan["catalog"]["version"] == catalog_mod.load_catalog().version
    (c,) = plan["clusters"]
    assert c["name"] == "sandbox" and c["purchase"]["spot"] >= 1  # dev is spot-heavy
    assert c["alternatives"] and all(a["rejected_because"] for a in c["alternatives"])
    types = {r["type"] for r in plan["resources"]}
    assert "gpulease:gcp:GpuCluster" not in types  # only custom resources are listed
    assert "gcp:compute/instanceGroupManager:InstanceGroupManager" in types
    mig = next(r for r in plan["resources"] if r["name"] == "sandbox-spot")
    assert mig["monthly_usd"] == pytest.approx(c["monthly_usd"], abs=0.01)
    assert mig["inputs"]["targetSize"] == c["purchase"]["spot"]
    assert plan["budget"]["over"] is False and plan["violations"] == []


def test_diff_against_a_saved_plan_and_fail_on_increase(capsys, tmp_path):
    code, staging = plan_json(capsys, "--stack", "staging")
    saved = tmp_path / "staging.json"
    saved.write_text(json.dumps(staging))
    # The same stack against itself: no change, exit 0 even with a 0 % threshold.
    code, doc = plan_json(capsys, "--stack", "staging", "--diff", str(saved),
                          "--fail-on-increase", "0")
    assert code == EXIT_OK
    assert doc["diff"]["total"]["delta_usd"] == 0.0
    # prod vs staging costs far more: exit 3 over a 10 % threshold, 0 without the flag.
    code = main(["plan", "--stack", "prod", "--diff", str(saved), "--fail-on-increase", "10",
                 "--json"])
    cap = capsys.readouterr()
    doc = json.loads(cap.out)                      # stdout: the JSON document only
    assert code == EXIT_COST_INCREASE
    t = doc["diff"]["total"]
    # the reason, on stderr: which total rose, by how much, how far over the threshold
    assert cap.err == (
        f"exit 3 (cost over a gate threshold (--fail-on-increase, gpulease:gate.block)): "
        f"the total monthly cost rose "
        f"+${t['delta_usd']:,.2f} from ${t['old_monthly_usd']:,.2f} (staging) to "
        f"${t['new_monthly_usd']:,.2f} (prod), {t['pct']:+.1f}%, which is "
        f"{t['pct'] - 10:.1f} points over --fail-on-increase 10%\n")
    assert main(["plan", "--stack", "prod", "--diff", "staging"]) == EXIT_OK
    cap = capsys.readouterr()
    text = cap.out
    assert "Total monthly:" in text and "added" in text
    # only rows that move money are listed; the $0.00 additions are counted, not listed
    hidden = doc["diff"]["zero_cost_changes"]
    assert hidden > 50 and f"{hidden} added or removed resources at $0.00/month not listed" in text
    assert "+$0.00" not in text
    assert text.rstrip().splitlines()[-1] == \
        "why: gpulease explain --stack prod [--cluster pretrain]"
    assert "planning prod: planning staging to compare with" in cap.err   # progress: stderr
    assert "planning prod:" not in text


def test_mandatory_guardrail_failure_exits_4(capsys, tmp_path):
    # A budget that covers the policy's decision but not the NAT gateway the plan adds:
    # the policy accepts it, the budget-cap guardrail (mandatory) does not.
    _, staging = plan_json(capsys, "--stack", "staging")
    decided = sum(c["monthly_usd"] for c in staging["clusters"]) + \
        sum(s["monthly_usd"] for s in staging["storage"])
    assert staging["totals"]["monthly_usd"] > decided + 1
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.staging.yaml").read_text())
    doc["config"]["gpulease:budget_monthly_usd"] = round(decided + 1, 2)
    f = tmp_path / "Pulumi.tight.yaml"
    f.write_text(yaml.safe_dump(doc))
    code = main(["plan", "--config", str(f), "--json"])
    cap = capsys.readouterr()
    plan = json.loads(cap.out)
    assert code == EXIT_POLICY
    assert plan["budget"]["over"] is True
    assert cap.err.startswith("exit 4 (a mandatory guardrail failed or a conformance error was "
                              "found): 1 mandatory guardrail violation (budget-cap) block")
    assert any(v["policy"] == "budget-cap" and v["level"] == "mandatory"
               for v in plan["violations"])


def test_html_report_is_written(capsys, tmp_path):
    out = tmp_path / "report.html"
    assert main(["plan", "--stack", "dev", "--html", str(out)]) == EXIT_OK
    cap = capsys.readouterr()
    assert f"wrote {out}" in cap.err and "wrote" not in cap.out
    steps = [x for x in cap.err.splitlines() if x.startswith("planning dev: ")]
    assert steps[:3] == ["planning dev: reading the stack and the price catalog",
                         "planning dev: deciding placement (policy)",
                         "planning dev: loading the Pulumi SDK and providers"]
    assert "planning dev: writing the HTML report" in steps
    # the text: the readable purchase mix, plurals, and the way to `explain`
    row = next(x for x in cap.out.splitlines() if x.startswith("  sandbox  gcp "))
    assert re.search(r" (1 node|[02-9]\d* nodes) × \d+ \S+  \d+ (reserved|on-demand|spot)"
                     r"( · \d+ (on-demand|spot))*  ", row), row
    assert "/OD" not in cap.out
    assert cap.out.rstrip().endswith("why: gpulease explain --stack dev")
    html = out.read_text()
    assert "<svg" in html and "sandbox" in html and "http://" not in html.replace(
        "http://www.w3.org/2000/svg", "")


def test_catalog_version_pins_an_old_plans_numbers(capsys, tmp_path, monkeypatch):
    shipped = catalog_mod.load_catalog()
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(shipped.path, data / f"{shipped.version}.json")
    newer = json.loads(Path(shipped.path).read_text())
    newer["version"] = "2099.01.01"
    for row in newer["offerings"]:
        for k in ("on_demand_usd", "spot_usd", "commit_1y_usd", "commit_3y_usd"):
            if row[k] is not None:
                row[k] = round(row[k] * 2, 6)
        row["zone_spot_usd"] = {z: round(v * 2, 6) for z, v in row.get("zone_spot_usd", {}).items()}
        for parts in (row.get("price_components") or {}).values():   # prices = sum of parts
            for part in parts:
                part["usd"] = round(part["usd"] * 2, 6)
    (data / "2099.01.01.json").write_text(json.dumps(newer))
    monkeypatch.setattr(catalog_mod, "DATA_DIR", data)
    _, latest = plan_json(capsys, "--stack", "dev")
    _, pinned = plan_json(capsys, "--stack", "dev", "--catalog-version", shipped.version)
    assert latest["catalog"]["version"] == "2099.01.01"
    assert pinned["catalog"]["version"] == shipped.version
    assert pinned["outputs"]["catalog_version"] == shipped.version
    assert latest["clusters"][0]["hourly_usd"] == pytest.approx(
        2 * pinned["clusters"][0]["hourly_usd"], rel=0.01)


def test_unknown_catalog_version_is_bad_input(capsys):
    assert main(["plan", "--stack", "dev", "--catalog-version", "2026.12.04"]) == 2
    err = capsys.readouterr().err
    assert 'unknown catalog version "2026.12.04" (did you mean "2026.12.03"?)' in err


def test_unknown_stack_names_the_choices(capsys):
    assert main(["plan", "--stack", "prd"]) == 2
    err = capsys.readouterr().err
    assert 'no stack "prd"' in err and '(did you mean "prod"?)' in err


def test_plan_json_of_a_stack_without_clusters_warns_on_stderr_too(tmp_path, capsys):
    """docs/cli.md: a script reading stderr sees warnings, whatever the format (issue 35)."""
    import json as _json

    from gpulease.cli import main as _main

    path = tmp_path / "Pulumi.empty.yaml"
    path.write_text("config:\n  gpulease:owner: ml\n  gpulease:cost_center: cc\n"
                    "  gpulease:budget_monthly_usd: 100\n  gpulease:clouds:\n    gcp:\n"
                    "      project: acme-ml-dev\n      regions: [us-central1]\n")
    assert _main(["plan", "--config", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert "the plan would be empty" in err and err.count("warning:") >= 1
    assert any("the plan would be empty" in str(w) for w in _json.loads(out)["warnings"])
