"""Commitment terms (1y / 3y / none / auto over a horizon) and `gpulease explain` of a profile."""
from __future__ import annotations

import datetime as dt
import json

import pytest
import yaml

from gpulease.cli import main
from gpulease.cli.explain import add_months, commitment_doc
from gpulease.model import ClusterSpec, DemandStep
from gpulease.policy import decide
from gpulease.policy.candidates import billed_months
from gpulease.policy.rules import PolicyRules
from tests.test_policy_fixtures import catalog, offering, stack

#: TEST FIXTURE prices: commitment 1y = 60 % and 3y = 40 % of on-demand.
ROW = offering("aws", "us-east-1", "t", gpn=8, od=10.0, spot=3.0, c1=6.0, c3=4.0, rdma="efa")
PROFILE = ClusterSpec(name="train", gpu="H100", gpus=32, hours_per_month=730, priority=7,
                      distributed=True, demand=(DemandStep(16, 730.0), DemandStep(32, 250.0)))


def decided(term, horizon=12, spec=PROFILE):
    env = decide(stack([spec], rules=PolicyRules(commitment_term=term,
                                                 commitment_horizon_months=horizon)),
                 catalog([ROW]))
    return env.clusters[0]


@pytest.mark.parametrize("horizon,expect", [(6, 12), (12, 12), (13, 24), (36, 36)])
def test_a_one_year_term_bills_whole_years(horizon, expect):
    assert billed_months("1y", horizon) == expect
    assert billed_months("3y", horizon) == 36
    assert billed_months("none", horizon) == 0


def test_fixed_terms_price_the_baseline_at_their_rate():
    one, three, none = decided("1y"), decided("3y"), decided("none")
    # 2 baseline nodes x 730 h reserved; 2 burst nodes x 250 h: 34 % < 60 % / 40 % break-even
    assert one.costs.reserved_usd == pytest.approx(2 * 6.0 * 730)
    assert three.costs.reserved_usd == pytest.approx(2 * 4.0 * 730)
    assert one.costs.on_demand_usd == three.costs.on_demand_usd == pytest.approx(2 * 10.0 * 250)
    # without a commitment a reservation bills on-demand for 730 h: on-demand is cheaper
    assert none.purchase.reserved == 0 and none.costs.on_demand_usd == pytest.approx(
        2 * 10.0 * 730 + 2 * 10.0 * 250)
    assert (one.committed_usd, one.lock_in_months) == (pytest.approx(12 * 2 * 6.0 * 730), 12)
    assert (three.committed_usd, three.lock_in_months) == (pytest.approx(36 * 2 * 4.0 * 730), 36)
    assert (none.committed_usd, none.lock_in_months) == (0.0, 0)


@pytest.mark.parametrize("horizon,term", [
    (6, "none"),    # 1y bills 12 months for 6 of use: 2x the rate > on-demand
    (12, "1y"),     # 3y would bill 36 months: 4.0 * 3 = 12 > 6
    (18, "1y"),     # 1y twice (24 months): 6 * 24/18 = 8.0 == 3y 4 * 36/18 = 8.0: shorter wins
    (24, "1y"),     # 6.0 vs 4 * 1.5 = 6.0: tie, less lock-in
    (30, "3y"),     # 1y: 6 * 36/30 = 7.2; 3y: 4 * 36/30 = 4.8
    (36, "3y"),
])
def test_auto_picks_the_cheapest_term_over_the_horizon(horizon, term):
    c = decided("auto", horizon)
    assert c.commitment_term == term
    avg = {t.term: t.horizon_monthly_usd for t in c.terms}
    assert avg[term] == pytest.approx(min(avg.values()))
    assert c.monthly_usd == pytest.approx(next(t.monthly_usd for t in c.terms if t.term == term))
    assert "Commitment term auto" in c.rationale


def test_auto_weighs_months_billed_after_the_horizon():
    c = decided("auto", 18)
    by = {t.term: t for t in c.terms}
    # 3y: the baseline's 2 x 4.0 x 730 billed 36 months, spread over 18
    assert by["3y"].horizon_monthly_usd == pytest.approx(
        by["3y"].monthly_usd + 2 * 4.0 * 730 * (36 / 18 - 1))
    assert by["3y"].committed_usd == pytest.approx(36 * 2 * 4.0 * 730)
    assert by["none"].lock_in_months == 0 and by["none"].committed_usd == 0.0


def test_commitment_doc_dates_and_chosen_row():
    c = decided("1y", 36)
    doc = commitment_doc(c, dt.date(2026, 12, 31))
    assert (doc["starts"], doc["ends"]) == ("2026-12-31", "2027-12-31")
    assert [t["term"] for t in doc["terms"] if t["chosen"]] == ["1y"]
    ends = {t["term"]: t["ends"] for t in doc["terms"]}
    assert ends == {"none": None, "1y": "2027-12-31", "3y": "2029-12-31"}
    assert add_months(dt.date(2027, 1, 31), 1) == dt.date(2027, 2, 28)


def _files(tmp_path, policy):
    cpath = tmp_path / "cat.json"
    cpath.write_text(json.dumps(catalog([ROW]).raw))
    spath = tmp_path / "Pulumi.x.yaml"
    spath.write_text(yaml.safe_dump({"config": {
        "gpulease:owner": "ml", "gpulease:cost_center": "cc",
        "gpulease:budget_monthly_usd": 100000, "gpulease:policy": policy,
        "gpulease:clouds": {"aws": {"regions": ["us-east-1"]}},
        "gpulease:clusters": [{"name": "train", "gpu": "H100", "priority": 7,
                               "distributed": True,
                               "demand": [{"gpus": 16, "hours_per_month": 730},
                                          {"gpus": 32, "hours_per_month": 250}]}]}}))
    return str(spath), str(cpath)


def test_explain_shows_parts_terms_and_lock_in(tmp_path, capsys):
    s, c = _files(tmp_path, {"commitment_term": "auto", "commitment_horizon_months": 30})
    assert main(["explain", "--config", s, "--catalog", c]) == 0
    out = capsys.readouterr().out
    assert "Cluster train  (priority 7, H100, demand 16 GPUs 730 h + 32 GPUs 250 h a month" in out
    rows = [line.split() for line in out.splitlines()]
    assert "Demand parts (nodes in order of hours; egress stays with the cluster)" in out
    assert ["baseline", "1-2", "2", "reserved", "730", "$5,840.00"] in rows
    assert ["burst", "3-4", "2", "on_demand", "250", "$5,000.00"] in rows
    assert "Commitment terms over a 30-month horizon" in out
    three = next(r for r in rows if r[:2] == ["3y", "*"])
    assert three[-3:] == ["$210,240.00", "36", add_months(dt.date.today(), 36).isoformat()]
    assert "Lock-in: $210,240.00 committed for 36 months" in out


def test_explain_json_has_the_per_term_comparison(tmp_path, capsys):
    s, c = _files(tmp_path, {"commitment_term": "auto", "commitment_horizon_months": 30})
    assert main(["explain", "--config", s, "--catalog", c, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["clusters"][0]
    assert d["demand"] == [{"gpus": 16, "hours_per_month": 730.0},
                           {"gpus": 32, "hours_per_month": 250.0}]
    assert [p["part"] for p in d["parts"]] == ["baseline", "burst"] and d["baseline_nodes"] == 2
    com = d["commitment"]
    assert com["term"] == "3y" and com["horizon_months"] == 30
    assert com["committed_usd"] == pytest.approx(36 * 2 * 4.0 * 730)
    assert com["ends"] == add_months(dt.date.fromisoformat(com["starts"]), 36).isoformat()
    terms = {t["term"]: t for t in com["terms"]}
    assert set(terms) == {"none", "1y", "3y"} and terms["3y"]["chosen"]
    assert terms["1y"]["horizon_monthly_usd"] == pytest.approx(
        terms["1y"]["monthly_usd"] + 2 * 6.0 * 730 * (36 / 30 - 1), abs=0.01)
    assert min(t["horizon_monthly_usd"] for t in terms.values()) == \
        terms["3y"]["horizon_monthly_usd"]
