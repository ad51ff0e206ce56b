"""Purchase options (CONTRACTS C1): how each offering can be bought, checked at load, obeyed by
the policy and said in `explain`."""
from __future__ import annotations

import pytest

from gpulease.errors import CatalogError, PolicyError
from gpulease.model import Offering, PurchaseMix
from gpulease.policy import decide
from gpulease.purchase import CATALOG_OPTIONS
from tests.test_policy_fixtures import catalog, cluster, offering, stack

#: how Google documents A3 Ultra: reservation-bound (future reservations, with commitments),
#: flex-start and spot; no on-demand VMs (catalog data: gpulease/catalog/families.json).
ULTRA = ["spot", "commitment", "future_reservation", "flex_start"]


def ultra(**kw):
    row = offering("gcp", "us-central1", "a3-ultragpu-8g", gpu="H200", od=None, spot=40.0,
                   c1=None, c3=None, rdma="rdma", **kw)
    row["purchase_options"] = list(ULTRA)
    row["purchase_options_source"] = "gcp-consumption-options"
    return row


def h200_on_demand(od=90.0):
    return offering("aws", "us-east-1", "p5en.48xlarge", gpu="H200", od=od, spot=None, c1=None,
                    c3=None, rdma="efa")


def test_the_option_vocabulary_is_the_contract():
    assert CATALOG_OPTIONS == ("on_demand", "spot", "reservation", "commitment",
                               "future_reservation", "flex_start", "capacity_block")


def test_rows_without_options_derive_them_from_their_prices():
    cat = catalog([offering("aws", "us-east-1", "p5.48xlarge", od=10.0, spot=None, c1=6.0,
                            c3=None)])
    o = cat.offerings[0]
    assert o.purchase_options == ("on_demand", "reservation", "commitment")
    assert o.sells("reservation") and not o.sells("spot") and not o.sells("capacity_block")
    # an Offering built by hand (no catalog) answers the same
    bare = Offering("aws", "r", "t", "H100", 8, 80, 96, 1024, 100, "none", 10.0, None, None, None)
    assert bare.options == ("on_demand", "reservation") and bare.buyable("reserved")
    with pytest.raises(ValueError, match="unknown purchase option 'lease'"):
        bare.sells("lease")


def test_recorded_options_are_loaded_with_their_source():
    cat = catalog([ultra()])
    o = cat.offerings[0]
    assert o.purchase_options == tuple(ULTRA)
    assert not o.buyable("on_demand") and o.buyable("spot") and o.buyable("reserved")
    assert o.unavailable("on_demand") == (
        "a3-ultragpu-8g is not sold on-demand (sold as: spot, 1-/3-year commitment, future "
        "reservation, flex-start; source gcp-consumption-options)")


@pytest.mark.parametrize("column,value,option", [
    ("on_demand_usd", 50.0, "on_demand"), ("commit_1y_usd", 30.0, "commitment")])
def test_a_price_for_a_way_the_offering_is_not_sold_is_refused(column, value, option):
    row = ultra()
    row["purchase_options"] = [o for o in ULTRA if o != option]
    row[column] = value
    with pytest.raises(CatalogError) as e:
        catalog([row])
    msg = str(e.value)
    assert "offerings[0] (gcp us-central1 a3-ultragpu-8g)" in msg
    assert f"{column} is priced but purchase_options has no {option}" in msg


def test_unknown_duplicate_or_empty_options_are_refused():
    for opts, want in ((["on_demand", "lease"], "purchase_options"),
                       (["spot", "spot"], "lists an option twice"),
                       ([], "purchase_options is empty")):
        row = ultra(zones=())
        row.update(spot_usd=None, purchase_options=opts)
        with pytest.raises(CatalogError, match=want):
            catalog([row])


def test_no_plan_declares_on_demand_for_an_offering_not_sold_on_demand():
    # The on-demand-only AWS row is dearer; with A3 Ultra unsold on demand the steady cluster
    # must take it, and explain says why A3 Ultra was out.
    cat = catalog([ultra(), h200_on_demand(od=90.0)])
    d = decide(stack([cluster(gpu="H200", priority=6, hours=730)]), cat).clusters[0]
    assert d.offering.instance_type == "p5en.48xlarge"
    rej = {a.instance_type: a.rejected_because for a in d.alternatives}
    assert rej["a3-ultragpu-8g"] == (
        "not sold (a3-ultragpu-8g is not sold on-demand (sold as: spot, 1-/3-year commitment, "
        "future reservation, flex-start; source gcp-consumption-options); the catalog has no "
        "commitment price for it; spot is not allowed for this cluster's priority or "
        "checkpointing)")


def test_spot_band_work_may_use_it_and_explain_names_the_missing_models():
    cat = catalog([ultra()])
    d = decide(stack([cluster(gpu="H200", priority=2, hours=200, checkpoint=30)]),
               cat).clusters[0]
    assert d.offering.instance_type == "a3-ultragpu-8g" and d.purchase == PurchaseMix(spot=1)
    assert ("Purchase options: a3-ultragpu-8g is not sold on-demand (sold as: spot"
            in d.rationale)
    unsold = [a for a in d.alternatives if a.rejected_because.startswith("not sold")]
    assert {a.purchase for a in unsold} == {PurchaseMix(on_demand=1)}
    assert all(a.monthly_usd is None for a in unsold)


def test_guaranteed_work_cannot_reserve_what_is_not_sold():
    row = ultra()
    row["purchase_options"] = ["spot", "flex_start"]     # like a3-highgpu-1g/2g/4g
    cat = catalog([row])
    with pytest.raises(PolicyError) as e:
        decide(stack([cluster(gpu="H200", priority=9)]), cat)
    msg = str(e.value)
    assert "not sold (a3-ultragpu-8g is not sold as a reservation or commitment" in msg
    assert "priority 9 > 8 needs guaranteed capacity" in msg
    assert "docs/catalog.md 'Purchase options'" in msg


def test_a_plain_reservation_needs_the_reservation_option():
    row = offering("aws", "us-east-1", "p5.48xlarge", od=60.0, spot=None, c1=None, c3=None)
    row["purchase_options"] = ["on_demand"]           # sold on demand, not reservable
    o = catalog([row]).offerings[0]
    assert o.reservation_rate("1y") is None and o.price("on_demand") == 60.0
    row["purchase_options"] = ["on_demand", "reservation"]
    assert catalog([row]).offerings[0].reservation_rate("1y") == 60.0
