"""Buy or rent (issue 32 item 5): the break-even and present values recomputed BY HAND from the
worked example's inputs (docs/buy-vs-rent.md) - independent arithmetic, not the module's helpers
- and `gpulease explain --buy-vs-rent` end to end (text, --json, exit 2 naming what is missing)."""
from __future__ import annotations

import contextlib
import io
import json
import math

import pytest
import yaml

from gpulease.cli import main
from gpulease.owned import buyrent as br
from tests.conftest import ROOT

# the worked example of docs/buy-vs-rent.md, every input named
PEAK_GPUS, HOURS = 16, 500            # one step: 16 GPUs busy 500 h a month
RENT = 30_000.0                       # the decision's monthly cost (the policy's mix)
PRICE, GPN, KW, KWH = 250_000.0, 8, 6.5, 0.15
COLO, OPS = 1_500.0, 2_000.0          # per server-month
YEARS, RATE, LEAD, RESALE = 3, 0.08, 3, 0.15


def _by_hand():
    k = -(-PEAK_GPUS // GPN)                               # 2 servers
    u0 = PEAK_GPUS * HOURS / (k * GPN * 730)               # 8000 / 11680
    rho = RENT / u0                                        # rent at 100 % use
    p = k * KW * 730 * KWH                                 # power at 100 % use
    fixed = k * (COLO + OPS)
    purchase, resale = k * PRICE, RESALE * k * PRICE
    r = 1.08 ** (1 / 12) - 1
    n = 36
    a_lead = sum(1 / (1 + r) ** m for m in range(0, 3))
    a_own = sum(1 / (1 + r) ** m for m in range(3, 36))
    d_n = 1 / (1 + r) ** n
    own = purchase + rho * u0 * a_lead + (fixed + p * u0) * a_own - resale * d_n
    rent = rho * u0 * (a_lead + a_own)
    break_even = (purchase - resale * d_n + fixed * a_own) / ((rho - p) * a_own)
    saving, total, payback = rho * u0 - p * u0 - fixed, 0.0, None
    for m in range(3, 36):
        total += saving / (1 + r) ** m
        if total >= purchase:
            payback = m + 1
            break
    return dict(k=k, u0=u0, own=own, rent=rent, break_even=break_even, payback=payback)


def _answer():
    return br.compare(br.Demand("pretrain", "A100-80GB", PEAK_GPUS, PEAK_GPUS * HOURS, RENT),
                      br.Server(PRICE, GPN, KW, KWH, COLO, OPS, "example"),
                      br.Finance(YEARS, RATE, LEAD, RESALE))


def test_break_even_recomputed_by_hand():
    h, a = _by_hand(), _answer()
    assert a.nodes == h["k"] == 2
    assert a.utilisation == pytest.approx(h["u0"], rel=1e-12)
    assert a.own_usd == pytest.approx(h["own"], rel=1e-9)
    assert a.rent_usd == pytest.approx(h["rent"], rel=1e-9)
    assert a.break_even_utilisation == pytest.approx(h["break_even"], rel=1e-9)
    assert a.payback_months == h["payback"]
    # the figures docs/buy-vs-rent.md prints
    assert round(h["break_even"], 3) == 0.520 and h["payback"] == 28
    assert (round(h["own"]), round(h["rent"])) == (763306, 967485)
    assert a.verdict == "buy"
    # at the break-even utilisation owning and renting cost the same
    be = h["break_even"]
    kw = dict(purchase=500_000.0, resale=75_000.0, fixed=7_000.0, power_full=1_423.5,
              rent_full=RENT / h["u0"], f=br.Finance(YEARS, RATE, LEAD, RESALE))
    assert br.own_cost(be, **kw) == pytest.approx(
        br.rent_cost(be, rent_full=kw["rent_full"], f=kw["f"]), rel=1e-9)


def test_sensitivity_moves_with_utilisation_and_caps_at_full_use():
    a = _answer()
    us = [p.utilisation for p in a.sensitivity]
    assert us == pytest.approx([a.utilisation * 0.8, a.utilisation, a.utilisation * 1.2])
    assert [p.buy for p in a.sensitivity] == [True, True, True]
    busy = br.compare(br.Demand("x", "A100-80GB", 16, 16 * 700, RENT),
                      br.Server(PRICE, GPN, KW, KWH, COLO, OPS), br.Finance(3, 0.08, 3, 0.15))
    assert busy.sensitivity[-1].capped and busy.sensitivity[-1].utilisation == 1.0


def test_renting_cheaper_than_power_never_breaks_even():
    a = br.compare(br.Demand("x", "A100-80GB", 8, 8 * 730, 100.0),
                   br.Server(PRICE, GPN, KW, KWH, COLO, OPS), br.Finance(3, 0.08, 0, 0.0))
    assert a.break_even_utilisation is None and a.payback_months is None
    assert a.verdict == "rent"


def test_gpu_hours_of_a_demand_profile():
    from gpulease.model import DemandStep

    # 8 GPUs all month + 8 more 200 h: 8 x 730 + 8 x 200
    assert br.gpu_hours_per_month((DemandStep(8, 730), DemandStep(16, 200))) == 8 * 730 + 1600


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _stack(tmp_path, section):
    values = yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())
    if section is not None:
        values["config"]["gpulease:buy_vs_rent"] = section
    f = tmp_path / "Pulumi.dev.yaml"
    f.write_text(yaml.safe_dump(values))
    return f


FINANCE = {"years": YEARS, "cost_of_money_rate": RATE, "lead_time_months": LEAD,
           "resale_share": RESALE}


def test_explain_buy_vs_rent_json_and_text(tmp_path):
    dev = yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())["config"]
    gpus = sorted({c["gpu"] for c in dev["gpulease:clusters"]})
    servers = [{"gpu": g, "usd_per_node": PRICE, "gpus_per_node": GPN, "power_kw_per_node": KW,
                "usd_per_kwh": KWH, "colo_usd_per_node_month": COLO,
                "ops_usd_per_node_month": OPS} for g in gpus]
    f = _stack(tmp_path, {**FINANCE, "servers": servers})
    code, out, err = _run(["explain", "--config", str(f), "--buy-vs-rent", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["clusters"], doc
    for c in doc["clusters"]:
        assert c["verdict"] in ("buy", "rent")
        assert c["inputs"]["server_source"].startswith("gpulease:buy_vs_rent.servers[")
        assert c["nodes"] == math.ceil(c["peak_gpus"] / GPN)
        assert len(c["sensitivity"]) == 3
    code, text, _ = _run(["explain", "--config", str(f), "--buy-vs-rent"])
    assert code == 0 and "break-even utilisation" in text and "utilisation -/+20 %" in text


def test_missing_inputs_exit_2_naming_the_key(tmp_path):
    code, _, err = _run(["explain", "--config", str(_stack(tmp_path, None)), "--buy-vs-rent"])
    assert code == 2
    assert "gpulease:buy_vs_rent.cost_of_money_rate" in err and "Traceback" not in err
    code, _, err = _run(["explain", "--config", str(_stack(tmp_path, FINANCE)),
                         "--buy-vs-rent"])
    assert code == 2 and "gpulease:buy_vs_rent.servers" in err and "no server quote" in err


def test_an_owned_pool_of_the_clusters_gpu_supplies_the_server(tmp_path):
    values = yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())
    cfg = values["config"]
    gpu = cfg["gpulease:clusters"][0]["gpu"]
    cfg["gpulease:owned"] = [{"name": "rack-a", "gpu": gpu, "gpus": 16, "gpus_per_node": 8,
                              "site": "colo", "kind": "none", "purchase_usd": 2 * PRICE,
                              "purchased_on": "2025-01-15", "power_kw_per_node": KW,
                              "usd_per_kwh": KWH, "colo_usd_per_month": 2 * COLO,
                              "ops_usd_per_month": 2 * OPS,
                              # too few hours for the cluster's 160 h: the policy keeps it on
                              # cloud, and the question "buy or rent" still applies to it
                              "available_hours_per_month": 100}]
    cfg["gpulease:buy_vs_rent"] = FINANCE
    # the rack's cost is in the plan (its amortised share and idle line): a budget that holds it
    cfg["gpulease:budget_monthly_usd"] = 50_000
    f = tmp_path / "Pulumi.dev.yaml"
    f.write_text(yaml.safe_dump(values))
    code, out, err = _run(["explain", "--config", str(f), "--buy-vs-rent", "--json",
                           "--cluster", cfg["gpulease:clusters"][0]["name"]])
    if code == 2 and "no server quote" in err:
        pytest.fail(err)
    assert code == 0, err
    (c,) = json.loads(out)["clusters"]
    assert c["inputs"]["server_source"] == "gpulease:owned[0]"
    assert (c["inputs"]["usd_per_node"], c["inputs"]["colo_usd_per_node_month"]) == (PRICE, COLO)
