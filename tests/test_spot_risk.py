"""Spot priced by its risk: per region / zone and instance type, from the quote data."""
from __future__ import annotations

import datetime as dt

import pytest

from gpulease.catalog import load_catalog
from gpulease.model import CloudSpec, ClusterSpec, PurchaseMix, StackSpec
from gpulease.policy import decide
from gpulease.policy.rules import PolicyRules
from gpulease.quotes.model import QuoteBook, SpotRisk
from gpulease.quotes.store import shipped_book
from tests.test_policy_fixtures import catalog, cluster, offering, stack

UTC = dt.timezone.utc
AS_OF = dt.datetime(2026, 12, 1, tzinfo=UTC)


def risk(region, itype, *, band=None, top=None, uptime=None, score=None, zone=None,
         cloud="aws") -> SpotRisk:
    return SpotRisk(cloud=cloud, region=region, instance_type=itype, as_of=AS_OF, source="t",
                    zone=zone, band=band, band_max_percent=top, estimated_uptime_hours=uptime,
                    placement_score=score)


def two_regions():
    return catalog([offering("aws", "us-east-1", "p5.48xlarge", od=98.0, spot=20.0, c1=None, c3=None),
                    offering("aws", "us-west-2", "p5.48xlarge", od=98.0, spot=21.0, c1=None,
                             c3=None)])


def test_a_region_where_spot_barely_runs_no_longer_looks_as_good():
    spec = cluster(priority=2, hours=300, checkpoint=60)
    stk = stack([spec], clouds={"aws": ("us-east-1", "us-west-2")})
    # the catalog's one rate per cloud: the cheaper spot price wins
    flat = decide(stk, two_regions(), quotes=QuoteBook()).clusters[0]
    assert flat.region == "us-east-1" and flat.purchase == PurchaseMix(spot=1)
    # us-east-1's spot is preempted every 2 hours on average, us-west-2's in the <5% band
    book = QuoteBook(risks=[risk("us-east-1", "p5.48xlarge", uptime=2.0),
                            risk("us-west-2", "p5.48xlarge", band="<5%", top=5)])
    d = decide(stk, two_regions(), quotes=book).clusters[0]
    assert d.region == "us-west-2"
    lost = (60 / 2 + 10) / 60
    assert d.costs.spot_rework_usd == pytest.approx(0.05 / 730 * 300 * lost * 21.0)
    assert d.spot_risk["band"] == "<5%" and d.spot_risk["basis"] == "Spot Instance Advisor band"
    east = next(a for a in d.alternatives if a.region == "us-east-1")
    east_cost = 20.0 * 300 * (1 + 0.5 * lost)
    assert east.monthly_usd == pytest.approx(east_cost)


def test_the_stack_override_still_wins():
    spec = cluster(priority=2, hours=300, checkpoint=60)
    stk = stack([spec], clouds={"aws": ("us-east-1",)},
                rules=PolicyRules(spot_interruptions_per_hour=0.01))
    book = QuoteBook(risks=[risk("us-east-1", "p5.48xlarge", uptime=2.0)])
    d = decide(stk, two_regions(), quotes=book).clusters[0]
    assert d.spot_risk["interruptions_per_hour"] == 0.01
    assert d.spot_risk["basis"] == "gpulease:policy.spot_interruptions_per_hour"


def test_a_zone_record_merges_with_the_region_band():
    book = QuoteBook(risks=[risk("us-east-1", "p5.48xlarge", band=">20%", top=100),
                            risk("us-east-1", "p5.48xlarge", score=7, zone="use1-az4")])
    r = book.risk("aws", "us-east-1", "p5.48xlarge", "use1-az4")
    assert (r.zone, r.placement_score, r.band) == ("use1-az4", 7, ">20%")
    assert r.interruptions_per_hour == pytest.approx(1 / 730)
    assert book.risk("aws", "us-east-1", "p5.48xlarge", "use1-az1").placement_score is None


def test_shipped_data_prices_real_types_by_their_band(capsys):
    cat = load_catalog()
    spec = ClusterSpec(name="sweep", gpu="H100", gpus=8, hours_per_month=200, priority=2,
                       checkpoint_minutes=30, index=0)
    stk = StackSpec(stack="t", environment="t", owner="o", cost_center="c",
                    budget_monthly_usd=1e9, clouds={"aws": CloudSpec("aws", ("us-west-2",))},
                    storage=(), clusters=(spec,), policy=PolicyRules(), source="t")
    d = decide(stk, cat).clusters[0]
    assert d.purchase.spot == 1 and d.offering.instance_type == "p5.48xlarge"
    rec = shipped_book().risk("aws", "us-west-2", "p5.48xlarge")
    assert d.spot_risk["band"] == rec.band and d.spot_risk["as_of"] == "2025-06-28T00:00:00Z"
    lost = (30 / 2 + 10) / 60
    assert d.costs.spot_rework_usd == pytest.approx(
        rec.interruptions_per_hour * 200 * lost * d.offering.spot_in(d.zone))
    from gpulease.cli import ui
    from gpulease.cli.explain import render_cluster

    render_cluster(d, ui.out())
    text = capsys.readouterr().out
    assert f"Spot risk: {rec.interruptions_per_hour:.6f} interruptions per node-hour" in text
    assert f"Advisor band {rec.band}" in text and "as of 2025-06-28" in text
