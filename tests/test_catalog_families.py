"""Every catalog row holds to its family's documented facts (gpulease/catalog/families.json):
purchase options, RDMA / GPUDirect kind, EFA interfaces and network cards, placement."""
from __future__ import annotations

import re

import pytest

from gpulease.catalog import load_catalog
from gpulease.catalog.families import facts_for, family_of, load_families
from gpulease.model import RDMA_KINDS
from gpulease.purchase import CATALOG_OPTIONS
from gpulease.policy import decide
from tests.test_policy_fixtures import cluster, stack

CAT = load_catalog()
FAM = load_families()
ISO = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def test_every_fact_cites_a_dated_source():
    srcs = FAM["sources"]
    for sid, s in srcs.items():
        assert s["url"].startswith("https://") and ISO.match(s["retrieved"]), sid
        assert len(s["title"]) > 40, sid            # says what the source states
    for (cloud, fam), f in FAM["families"].items():
        for key in ("purchase_options_source", "labels_source"):
            assert all(x in srcs for x in f[key].split(",")), (fam, key)
        for t in [f] + list((f.get("types") or {}).values()):
            assert set(t.get("purchase_options", CATALOG_OPTIONS)) <= set(CATALOG_OPTIONS)
            assert t.get("rdma", "none") in RDMA_KINDS, fam


def test_every_shipped_row_is_held_to_its_family():
    checked = 0
    for o in CAT.offerings:
        f = facts_for(o.cloud, o.instance_type)
        assert f is not None, f"{o.key}: family {family_of(o.cloud, o.instance_type)} has no facts"
        where = f"{o.cloud} {o.region} {o.instance_type}"
        assert o.rdma == f.rdma, where
        assert o.purchase_options == f.purchase_options, where
        assert f.purchase_options_source.split(",")[0] in CAT.sources, where
        assert (o.network_cards, o.efa_interfaces) == (f.network_cards, f.efa_interfaces), where
        assert o.placement == f.placement, where
        if f.network_gbps is not None:
            assert o.network_gbps == f.network_gbps, where
        checked += 1
    assert checked == len(CAT.offerings) > 900


@pytest.mark.parametrize("itype,rdma", [
    ("a3-highgpu-1g", "none"), ("a3-highgpu-2g", "none"), ("a3-highgpu-4g", "none"),
    ("a3-highgpu-8g", "gpudirect-tcpx"), ("a3-megagpu-8g", "gpudirect-tcpxo"),
    ("a3-ultragpu-8g", "rdma"), ("a2-highgpu-8g", "none"), ("g2-standard-96", "none")])
def test_gpudirect_labels_match_googles_documented_families(itype, rdma):
    # https://cloud.google.com/compute/docs/gpus/gpu-network-bandwidth: TCPX on the 8-GPU A3
    # High only (1-4 GPU A3 VMs have one physical NIC), TCPXO on A3 Mega, RDMA on A3 Ultra / A4
    rows = [o for o in CAT.offerings if o.instance_type == itype]
    assert rows and {o.rdma for o in rows} == {rdma}


@pytest.mark.parametrize("itype,efa", [
    ("g4dn.xlarge", None), ("g4dn.8xlarge", 1), ("g4dn.metal", 1), ("g5.4xlarge", None),
    ("g5.8xlarge", 1), ("g5.48xlarge", 1), ("p3.16xlarge", None), ("p3dn.24xlarge", 1),
    ("p4d.24xlarge", 4), ("p5.48xlarge", 32), ("p5en.48xlarge", 16),
    ("p6-b200.48xlarge", 8), ("g6e.48xlarge", 4)])
def test_efa_interfaces_match_aws_documentation(itype, efa):
    rows = [o for o in CAT.offerings if o.instance_type == itype]
    assert rows and {o.efa_interfaces for o in rows} == {efa}
    assert {o.rdma for o in rows} == {"efa" if efa else "none"}


def test_series_google_does_not_sell_on_demand_have_no_on_demand_price():
    for o in CAT.offerings:
        if o.instance_type.startswith(("a3-ultragpu", "a4-highgpu", "a3-highgpu-1g",
                                       "a3-highgpu-2g", "a3-highgpu-4g")):
            assert not o.sells("on_demand") and o.on_demand_usd is None, o.key
            assert not o.sells("reservation"), o.key
    assert any(o.instance_type == "a3-ultragpu-8g" for o in CAT.offerings)


def test_capacity_blocks_are_recorded_for_the_documented_families():
    blocks = {o.instance_type for o in CAT.offerings if o.sells("capacity_block")}
    assert blocks == {"p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge",
                      "p5en.48xlarge", "p6-b200.48xlarge"}


def test_no_plan_declares_on_demand_or_reserved_where_the_offering_is_not_sold_so():
    # H200 / H100 work of every kind, GCP only: A3 Ultra and the small A3 High shapes are
    # spot / flex-start / future-reservation offerings, never on-demand VMs.
    clouds = {"gcp": tuple(sorted({o.region for o in CAT.offerings_for(cloud="gcp")}))}
    specs = [cluster("steady", gpu="H200", gpus=8, priority=6),
             cluster("batch", gpu="H200", gpus=8, priority=2, checkpoint=30, hours=200),
             cluster("small", gpu="H100", gpus=4, priority=2, checkpoint=30, hours=100),
             cluster("big", gpu="H100", gpus=16, priority=9, distributed=True)]
    for spec in specs:
        try:
            env = decide(stack([spec], clouds=clouds), CAT)
        except Exception as exc:          # no plan at all is fine; a wrong one is not
            assert "not sold" in str(exc) or "no price" in str(exc), exc
            continue
        for c in env.clusters:
            for model in ("reserved", "on_demand", "spot"):
                if getattr(c.purchase, model):
                    assert c.offering.buyable(model), (spec.name, c.offering.key, model)
