"""Table tests of the pure GCP builders (NIC layouts, MTUs, names, lifecycle, scheduling)."""
from __future__ import annotations

import re

import pytest
from google.cloud import compute_v1

from gpulease.catalog import TIER_CLASSES
from gpulease.clouds.gcp import builders
from gpulease.errors import ConfigError
from gpulease.model import (ClusterDecision, ClusterSpec, CostBreakdown, Offering, PurchaseMix,
                            StorageSpec)


def offering(instance_type: str, rdma: str = "none", gpus: int = 8,
             accelerator_type=None, zones=()) -> Offering:
    """Test fixture offering (prices are placeholders; no price is read here)."""
    return Offering(cloud="gcp", region="us-central1", instance_type=instance_type, gpu="X",
                    gpus_per_node=gpus, gpu_memory_gb=80, vcpus=208, memory_gb=1872,
                    network_gbps=200, rdma=rdma, on_demand_usd=1.0, spot_usd=0.5,
                    commit_1y_usd=0.8, commit_3y_usd=0.6, accelerator_type=accelerator_type,
                    zones=tuple(zones))


A3_HIGH = offering("a3-highgpu-8g", "gpudirect-tcpx")
A3_MEGA = offering("a3-megagpu-8g", "gpudirect-tcpxo")
A3_ULTRA = offering("a3-ultragpu-8g", "rdma")
A4 = offering("a4-highgpu-8g", "rdma")
A2 = offering("a2-highgpu-1g", gpus=1)
G2 = offering("g2-standard-8", gpus=1)
N1_T4 = offering("n1-standard-8", gpus=1, accelerator_type="nvidia-tesla-t4")


def decision(o: Offering, purchase: PurchaseMix, distributed: bool = True, zone=None):
    spec = ClusterSpec(name="train", gpu="X", gpus=purchase.total * o.gpus_per_node,
                       hours_per_month=730, priority=5, index=2)
    return ClusterDecision(spec=spec, offering=o, nodes=purchase.total, purchase=purchase,
                           network=o.rdma, template="t", hourly_usd=0.0, costs=CostBreakdown(),
                           rationale="test", zone=zone, distributed=distributed)


@pytest.mark.parametrize("o, total, gpu_nets, mtu, types", [
    (A3_HIGH, 5, 4, builders.GPUDIRECT_MTU, {"GVNIC"}),
    (A3_MEGA, 9, 8, builders.GPUDIRECT_MTU, {"GVNIC"}),
    (A3_ULTRA, 10, 2, builders.RDMA_MTU, {"GVNIC", "MRDMA"}),
    (A4, 10, 2, builders.RDMA_MTU, {"GVNIC", "MRDMA"}),
    (A2, 1, 0, None, {"GVNIC"}),
    (G2, 1, 0, None, {"GVNIC"}),
    (N1_T4, 1, 0, None, {None}),
])
def test_nic_layout_table(o, total, gpu_nets, mtu, types):
    nics = builders.nic_layout(o)
    assert len(nics) == total, o.instance_type
    assert [n["index"] for n in nics] == list(range(total))
    assert nics[0]["network"] == "primary"
    nets = builders.extra_networks(nics)
    assert len(nets) == gpu_nets, (o.instance_type, nets)
    assert {n["nic_type"] for n in nics} == types
    for net in nets.values():
        assert net["mtu"] == mtu


def test_rdma_layout_puts_eight_mrdma_nics_on_one_roce_network_with_eight_subnets():
    nics = builders.nic_layout(A3_ULTRA)
    mrdma = [n for n in nics if n["nic_type"] == "MRDMA"]
    assert len(mrdma) == 8 and {n["network"] for n in mrdma} == {"rdma"}
    assert len({n["subnet"] for n in mrdma}) == 8
    nets = builders.extra_networks(nics)
    assert nets["rdma"]["rdma"] is True and nets["gvnic-1"]["rdma"] is False


def test_single_node_decision_without_fabric_gets_only_the_primary_nic():
    assert len(builders.nic_layout(A3_MEGA, "none")) == 1


def test_nic_types_are_compute_api_values():
    valid = {e.name for e in compute_v1.NetworkInterface.NicType}
    for o in (A3_HIGH, A3_MEGA, A3_ULTRA, A2, N1_T4):
        for nic in builders.nic_layout(o):
            assert nic["nic_type"] is None or nic["nic_type"] in valid


@pytest.mark.parametrize("pairs, mtu", [
    ([(A2, "none")], 1460), ([(A2, "none"), (A3_HIGH, "gpudirect-tcpx")], 8244),
    ([(A3_MEGA, "gpudirect-tcpxo"), (A3_ULTRA, "rdma")], 8896), ([(A3_HIGH, "none")], 1460)])
def test_primary_mtu(pairs, mtu):
    assert builders.primary_mtu(pairs) == mtu


def test_rdma_network_profile_url():
    assert builders.rdma_network_profile("p", "us-central1-b") == \
        "projects/p/global/networkProfiles/us-central1-b-vpc-roce"


def test_cidrs_do_not_overlap():
    prim = {builders.primary_subnet_cidr(i) for i in range(10)}
    extra = {builders.extra_subnet_cidr(i) for i in range(10)}
    assert len(prim) == 10 and len(extra) == 10
    assert all(c.startswith("10.") for c in prim) and all(c.startswith("192.168.") for c in extra)


@pytest.mark.parametrize("model, action, expected", [
    ("spot", "STOP", {"provisioning_model": "SPOT", "instance_termination_action": "STOP",
                      "preemptible": True, "automatic_restart": False}),
    ("spot", "DELETE", {"provisioning_model": "SPOT", "instance_termination_action": "DELETE"}),
    ("on_demand", "DELETE", {"provisioning_model": "STANDARD", "automatic_restart": True}),
    ("reserved", "DELETE", {"provisioning_model": "STANDARD"}),
])
def test_scheduling(model, action, expected):
    s = builders.scheduling(model, action)
    assert s["on_host_maintenance"] == "TERMINATE"
    for k, v in expected.items():
        assert s[k] == v, (model, k)
    if model != "spot":
        assert "instance_termination_action" not in s
    assert s["provisioning_model"] in {e.name for e in compute_v1.Scheduling.ProvisioningModel}
    assert s["on_host_maintenance"] in {e.name for e in compute_v1.Scheduling.OnHostMaintenance}


def test_scheduling_rejects_unknown_model():
    with pytest.raises(ValueError):
        builders.scheduling("mixed", "STOP")


@pytest.mark.parametrize("o, expected", [
    (N1_T4, [{"type": "nvidia-tesla-t4", "count": 1}]), (A2, []), (A3_MEGA, []), (G2, [])])
def test_guest_accelerators_only_for_n1(o, expected):
    assert builders.guest_accelerators(o) == expected


@pytest.mark.parametrize("o, disk", [(A3_ULTRA, "hyperdisk-balanced"), (A4, "hyperdisk-balanced"),
                                     (A3_MEGA, "pd-balanced"), (N1_T4, "pd-balanced")])
def test_boot_disk_type(o, disk):
    assert builders.boot_disk_type(o) == disk


@pytest.mark.parametrize("o, mix, model, expected", [
    (A3_MEGA, PurchaseMix(on_demand=4), "on_demand", 4),
    (A3_MEGA, PurchaseMix(reserved=4), "reserved", 4),        # the reservation carries it
    (A3_MEGA, PurchaseMix(spot=1, on_demand=3), "spot", None),  # one VM: nothing to collocate
    (N1_T4, PurchaseMix(spot=4), "spot", None),                # N1 has no compact placement
    (G2, PurchaseMix(spot=6), "spot", 6),
])
def test_placement_vm_count(o, mix, model, expected):
    assert builders.placement_vm_count(decision(o, mix), model) == expected


def test_placement_not_for_non_distributed_clusters():
    assert builders.placement_vm_count(decision(A3_MEGA, PurchaseMix(on_demand=2), False),
                                     "on_demand") is None


def test_placement_limit_is_a_config_error_naming_the_cluster():
    big = decision(A3_MEGA, PurchaseMix(on_demand=builders.COMPACT_PLACEMENT_MAX_VMS + 1))
    with pytest.raises(ConfigError) as exc:
        builders.placement_vm_count(big, "on_demand")
    assert "gpulease:clusters[2]" in str(exc.value) and "1500" in str(exc.value)


def test_cluster_zone_prefers_decision_then_catalog():
    o = offering("a3-megagpu-8g", "gpudirect-tcpxo", zones=("us-central1-c", "us-central1-a"))
    assert builders.cluster_zone(decision(o, PurchaseMix(spot=2))) == "us-central1-c"
    assert builders.cluster_zone(decision(o, PurchaseMix(spot=2), zone="us-central1-a")) == \
        "us-central1-a"
    assert builders.cluster_zone(decision(A2, PurchaseMix(spot=2))) is None


@pytest.mark.parametrize("env, cluster", [
    ("dev", "a"), ("prod", "pretrain"), ("production", "a-very-long-cluster-name-of-30c"),
    ("staging", "x" * 30)])
def test_service_account_id_is_valid_and_unique(env, cluster):
    sa = builders.service_account_id(env, cluster)
    assert re.fullmatch(r"[a-z][-a-z0-9]{4,28}[a-z0-9]", sa), sa
    other = builders.service_account_id(env, cluster + "2")
    assert other != sa


def test_split_gs_uri_and_prefix_condition():
    assert builders.split_gs_uri("gs://b/checkpoints/c/") == ("b", "checkpoints/c/")
    with pytest.raises(ValueError):
        builders.split_gs_uri("s3://b/x")
    cond = builders.prefix_condition("b", "data/", "t")
    assert 'startsWith("projects/_/buckets/b/objects/data/")' in cond["expression"]


def test_lifecycle_rules_walk_the_tiers_down():
    spec = StorageSpec(name="corpus", size_tb=1, home_cloud="gcp", home_region="us-central1",
                       warm_after_days=30, cold_after_days=90, archive_after_days=365,
                       noncurrent_days=14)
    rules = builders.lifecycle_rules(spec)
    moves = [(r["action"]["storage_class"], r["condition"]["age"],
              r["condition"]["matches_storage_classes"]) for r in rules
             if r["action"]["type"] == "SetStorageClass"]
    assert moves == [("NEARLINE", 30, ["STANDARD"]), ("COLDLINE", 90, ["STANDARD", "NEARLINE"]),
                     ("ARCHIVE", 365, ["STANDARD", "NEARLINE", "COLDLINE"])]
    assert {m[0] for m in moves} <= set(TIER_CLASSES["gcp"])
    cleanup = [r for r in rules if r["action"]["type"] == "Delete"]
    assert cleanup == [{"action": {"type": "Delete"},
                        "condition": {"days_since_noncurrent_time": 14, "with_state": "ARCHIVED"}}]


def test_lifecycle_rules_skip_absent_tiers_and_reject_unordered_ages():
    spec = StorageSpec(name="s", size_tb=1, home_cloud="gcp", home_region="r",
                       warm_after_days=None, cold_after_days=60, archive_after_days=None)
    rules = builders.lifecycle_rules(spec, noncurrent=False)
    assert rules == [{"action": {"type": "SetStorageClass", "storage_class": "COLDLINE"},
                      "condition": {"age": 60, "matches_storage_classes": ["STANDARD"]}}]
    bad = StorageSpec(name="s", size_tb=1, home_cloud="gcp", home_region="r",
                      warm_after_days=90, cold_after_days=30, archive_after_days=None)
    with pytest.raises(ConfigError):
        builders.lifecycle_rules(bad)
