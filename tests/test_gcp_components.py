"""The GCP components under Pulumi mocks: every property of issue 5, asserted per resource URN."""
from __future__ import annotations

import importlib.util
import inspect
import re
from functools import partial

import pulumi_gcp
import pytest
from google.cloud import compute_v1

from gpulease import money
from gpulease.catalog import TIER_CLASSES, parse_catalog
from gpulease.clouds.gcp import deploy as gcp_adaptor
from gpulease.clouds.gcp import cluster as cluster_mod
from gpulease.clouds.gcp import builders
from gpulease import tags
from gpulease.errors import ConfigError
from gpulease.costing import transform as cost_transform
from gpulease.model import EnvironmentDecision, PurchaseMix
from gpulease.planner import mocks
from gpulease.planner.mocks import run_program
from tests import builders as shared

BOOTSTRAP_PRESENT = importlib.util.find_spec("gpulease.bootstrap.render") is not None

T_IT = "gcp:compute/instanceTemplate:InstanceTemplate"
T_MIG = "gcp:compute/instanceGroupManager:InstanceGroupManager"
T_FW = "gcp:compute/firewall:Firewall"
T_NET = "gcp:compute/network:Network"
T_SUB = "gcp:compute/subnetwork:Subnetwork"
T_BUCKET = "gcp:storage/bucket:Bucket"
T_RES = "gcp:compute/reservation:Reservation"
#: a reservation with a compact placement policy (gpulease.clouds.gcp.reservation)
T_DYN_RES = "pulumi-python:dynamic/gpulease:GceReservation"
T_POL = "gcp:compute/resourcePolicy:ResourcePolicy"
T_BIAM = "gcp:storage/bucketIAMMember:BucketIAMMember"
T_PIAM = "gcp:projects/iAMMember:IAMMember"


def _row(instance_type, gpu, gpus, rdma, region="us-central1", accelerator_type=None,
         zones=("us-central1-a",)):
    # TEST FIXTURE prices: placeholders so the fixture catalog parses; no test asserts on them.
    row = {"cloud": "gcp", "region": region, "instance_type": instance_type, "gpu": gpu,
           "gpus_per_node": gpus, "gpu_memory_gb": 80, "vcpus": 208, "memory_gb": 1872,
           "network_gbps": 200, "rdma": rdma, "on_demand_usd": 10.0, "spot_usd": 4.0,
           "commit_1y_usd": 7.0, "commit_3y_usd": 5.0, "source": "test-fixture"}
    if accelerator_type:
        row["accelerator_type"] = accelerator_type
    if zones:
        row["zones"] = list(zones)
    return row


FIXTURE_CATALOG = parse_catalog({
    "format": "gpulease-catalog/1", "version": "test-fixture", "as_of": "2026-01-01",
    "offerings": [
        _row("a3-highgpu-8g", "H100", 8, "gpudirect-tcpx", zones=["us-central1-c"]),
        _row("a3-megagpu-8g", "H100", 8, "gpudirect-tcpxo", region="europe-west4",
             zones=["europe-west4-b"]),
        _row("a3-megagpu-8g", "H100", 8, "gpudirect-tcpxo", zones=()),  # no zones recorded
        _row("a3-ultragpu-8g", "H200", 8, "rdma", zones=["us-central1-b"]),
        _row("a2-highgpu-1g", "A100", 1, "none"),
        _row("g2-standard-8", "L4", 1, "none"),
        _row("n1-standard-8", "T4", 1, "none", accelerator_type="nvidia-tesla-t4"),
    ],
    "storage": [{"cloud": "gcp", "region": r, "storage_class": c, "usd_per_gb_month": 0.01}
                for r in ("us-central1", "europe-west4") for c in TIER_CLASSES["gcp"]],
    "egress": [{"cloud": "gcp", "kind": "inter_region", "usd_per_gb": 0.02},
               {"cloud": "gcp", "kind": "internet", "usd_per_gb": 0.12}],
}, source="test-fixture")


@pytest.fixture(autouse=True)
def _bootstrap(monkeypatch):
    """Use the real bootstrap renderer; before it lands, a clearly fake cloud-config."""
    if not BOOTSTRAP_PRESENT:
        monkeypatch.setattr(cluster_mod, "render_user_data",
                            lambda *, stack, decision, purchase_model:
                            f"#cloud-config\n# test fixture {decision.name} {purchase_model}\n")


def test_bootstrap_renderer_is_present():
    assert BOOTSTRAP_PRESENT, "gpulease/bootstrap/render.py (render_user_data) has not landed yet"


# this file's fixture defaults on the shared test builders (tests/builders.py, imported as
# `shared`: `builders` here is gpulease.clouds.gcp.builders)
make_env = partial(shared.make_env, catalog=FIXTURE_CATALOG, env="prod", clouds=("gcp",),
                   spot_termination_action="STOP")
make_cluster = partial(shared.make_cluster, cloud="gcp", region=None, catalog=FIXTURE_CATALOG,
                       costs=shared.GCP_COSTS, hours=730, priority=5, hourly=1.0)
make_storage = partial(shared.make_storage, cloud="gcp",
                       warm_after_days=30, cold_after_days=90, archive_after_days=365)


def run(env: EnvironmentDecision, catalog=FIXTURE_CATALOG, *, transform: bool = True):
    def program():
        ledger = cost_transform.register(env.stack, catalog) if transform else None
        gcp_adaptor.deploy(env, catalog)
        return ledger
    return run_program(program, stack=env.stack.stack)


def children_of(prun, component_type: str, name: str):
    comp = prun.one(component_type, name)
    return [r for r in prun.resources if r.parent == comp.urn]


# ---- a representative prod environment, run once ----------------------------------------
@pytest.fixture(scope="module")
def prod():
    corpus = make_storage("corpus", "us-central1")
    clusters = [
        make_cluster("pretrain", "a3-highgpu-8g", PurchaseMix(reserved=2, on_demand=2, spot=2),
                     dataset="corpus", distributed=True, index=0),
        make_cluster("mega", "a3-megagpu-8g", PurchaseMix(on_demand=4), dataset="corpus",
                     index=1),
        make_cluster("ultra", "a3-ultragpu-8g", PurchaseMix(spot=2), index=2),
        make_cluster("eval", "n1-standard-8", PurchaseMix(spot=3), dataset="corpus",
                     distributed=False, index=3),
    ]
    env = make_env(clusters, [corpus], env="prod")
    import gpulease.clouds.gcp.cluster as cm
    if not BOOTSTRAP_PRESENT:
        saved = cm.render_user_data
        cm.render_user_data = lambda *, stack, decision, purchase_model: \
            f"#cloud-config\n# test fixture {decision.name} {purchase_model}\n"
        try:
            return env, run(env)
        finally:
            cm.render_user_data = saved
    return env, run(env)


def test_explicit_provider_with_project(prod):
    _, r = prod
    p = r.one("pulumi:providers:gcp", "gcp")
    assert p.inputs["project"] == "acme-test", p.urn
    for res in r.custom:
        if res.type.startswith("gcp:"):
            assert "pulumi:providers:gcp::gcp::" in res.provider, res.urn


def test_one_gpu_cluster_component_per_gcp_cluster(prod):
    env, r = prod
    comps = r.by_type("gpulease:gcp:GpuCluster")
    assert sorted(c.name for c in comps) == sorted(c.name for c in env.clusters)


def test_primary_network_vpc_subnets_router_nat(prod):
    _, r = prod
    vpc = r.one(T_NET, "gcp-network-vpc")
    assert vpc.inputs["autoCreateSubnetworks"] is False, vpc.urn
    assert vpc.inputs["mtu"] == builders.RDMA_MTU, vpc.urn  # ultra is in the network
    for region in ("us-central1", "europe-west4"):
        sub = r.one(T_SUB, f"gcp-network-{region}")
        assert sub.inputs["region"] == region and sub.inputs["privateIpGoogleAccess"] is True, \
            sub.urn
        nat = r.one("gcp:compute/routerNat:RouterNat", f"gcp-network-{region}-nat")
        assert nat.inputs["natIpAllocateOption"] == "AUTO_ONLY", nat.urn
        assert nat.inputs["sourceSubnetworkIpRangesToNat"] == "LIST_OF_SUBNETWORKS", nat.urn
        r.one("gcp:compute/router:Router", f"gcp-network-{region}-router")


def test_gpu_nic_networks_per_fabric(prod):
    _, r = prod
    for cluster, count, mtu in (("pretrain", 4, 8244), ("mega", 8, 8244)):
        nets = [n for n in r.by_type(T_NET) if re.fullmatch(f"{cluster}-gpu-\\d", n.name)]
        assert len(nets) == count, cluster
        for n in nets:
            assert n.inputs["mtu"] == mtu and n.inputs["autoCreateSubnetworks"] is False, n.urn
            assert "networkProfile" not in n.inputs, n.urn
    roce = r.one(T_NET, "ultra-rdma")
    assert roce.inputs["networkProfile"] == \
        "projects/acme-test/global/networkProfiles/us-central1-b-vpc-roce", roce.urn
    assert roce.inputs["mtu"] == builders.RDMA_MTU, roce.urn
    roce_subs = [s for s in r.by_type(T_SUB) if re.fullmatch(r"ultra-rdma-\d", s.name)]
    assert len(roce_subs) == 8
    r.one(T_NET, "ultra-gvnic-1")
    assert not [n for n in r.by_type(T_NET) if n.name.startswith("eval-")], "n1 needs no GPU NICs"


def test_template_nics_follow_the_layout_and_have_no_external_ip(prod):
    env, r = prod
    for c in env.clusters:
        for m in builders.models_with_nodes(c):
            tpl = r.one(T_IT, f"{c.name}-{m.replace('_', '-')}-template")
            nics = tpl.inputs["networkInterfaces"]
            want = builders.nic_layout(c.offering, c.network)
            assert len(nics) == len(want), tpl.urn
            for got, exp in zip(nics, want):
                assert not got.get("accessConfigs"), f"{tpl.urn}: external IP"
                assert got.get("nicType") == exp["nic_type"], tpl.urn
                assert got.get("subnetwork"), tpl.urn


def test_firewall_internal_by_service_account_and_nothing_from_anywhere(prod):
    _, r = prod
    for fw in r.by_type(T_FW):
        assert "0.0.0.0/0" not in (fw.inputs.get("sourceRanges") or []), fw.urn
        assert fw.inputs["direction"] == "INGRESS", fw.urn
        if fw.name.endswith("-internal"):
            assert fw.inputs["sourceServiceAccounts"] == fw.inputs["targetServiceAccounts"], \
                fw.urn
            assert "sourceRanges" not in fw.inputs, fw.urn
    assert not [f for f in r.by_type(T_FW) if "ssh" in f.name], "SSH is off by default"
    # a firewall rule on every non-RoCE network a cluster owns, plus its primary one
    assert len([f for f in r.by_type(T_FW) if f.name.startswith("pretrain-")]) == 5


def test_ssh_only_from_iap_when_enabled():
    env = make_env([make_cluster("dev1", "g2-standard-8", PurchaseMix(spot=1))], env="dev",
                   ssh_via_iap=True)
    r = run(env)
    ssh = r.one(T_FW, "dev1-iap-ssh")
    assert ssh.inputs["sourceRanges"] == ["35.235.240.0/20"], ssh.urn
    assert ssh.inputs["allows"] == [{"protocol": "tcp", "ports": ["22"]}], ssh.urn
    assert ssh.inputs["targetServiceAccounts"], ssh.urn


def test_compact_placement_for_distributed_clusters(prod):
    _, r = prod
    pols = {p.name: p for p in r.by_type(T_POL)}
    assert set(pols) == {"pretrain-reserved-placement", "pretrain-on-demand-placement",
                         "pretrain-spot-placement", "mega-on-demand-placement",
                         "ultra-spot-placement"}
    mega = pols["mega-on-demand-placement"]
    assert mega.inputs["groupPlacementPolicy"] == {"collocation": "COLLOCATED", "vmCount": 4}, \
        mega.urn
    tpl = r.one(T_IT, "mega-on-demand-template")
    assert tpl.inputs["resourcePolicies"] == mega.outputs["selfLink"], tpl.urn
    # reserved nodes too (README "Known limits" on main): the reservation carries the policy
    reserved = pols["pretrain-reserved-placement"]
    assert reserved.inputs["groupPlacementPolicy"] == {"collocation": "COLLOCATED",
                                                       "vmCount": 2}, reserved.urn
    assert r.one(T_IT, "pretrain-reserved-template").inputs["resourcePolicies"] == \
        reserved.outputs["selfLink"]
    assert r.one(T_DYN_RES, "pretrain-reservation").inputs["placement_policy"] == \
        reserved.outputs["selfLink"]
    assert "resourcePolicies" not in r.one(T_IT, "eval-spot-template").inputs


def test_instance_templates(prod):
    env, r = prod
    for c in env.clusters:
        for m in builders.models_with_nodes(c):
            tpl = r.one(T_IT, f"{c.name}-{m.replace('_', '-')}-template")
            i = tpl.inputs
            assert i["machineType"] == c.offering.instance_type, tpl.urn
            sched = i["scheduling"]
            assert sched["onHostMaintenance"] == "TERMINATE", tpl.urn
            assert sched["provisioningModel"] == ("SPOT" if m == "spot" else "STANDARD"), tpl.urn
            if m == "spot":
                assert sched["instanceTerminationAction"] == "STOP", tpl.urn
            assert i["shieldedInstanceConfig"] == {"enableSecureBoot": True, "enableVtpm": True,
                                                   "enableIntegrityMonitoring": True}, tpl.urn
            md = i["metadata"]
            assert md["enable-oslogin"] == "TRUE" and md["serial-port-enable"] == "FALSE", tpl.urn
            assert md["user-data"].startswith("#cloud-config"), tpl.urn
            assert i["serviceAccount"]["email"].endswith("@plan.iam.gserviceaccount.com"), tpl.urn
            acc = i.get("guestAccelerators")
            if c.offering.instance_type.startswith("n1-"):
                assert acc == [{"type": "nvidia-tesla-t4", "count": 1}], tpl.urn
            else:
                assert not acc, tpl.urn
            assert i["disks"][0]["boot"] is True, tpl.urn
            # labels: stamped by the stack-wide cost transform, encoded label-safe
            assert i["labels"][tags.CLUSTER] == c.name, tpl.urn
            assert i["labels"][tags.PURCHASE_MODEL] == m, tpl.urn


def test_migs_per_purchase_model(prod):
    env, r = prod
    pre = env.cluster("pretrain")
    for m in ("reserved", "on_demand", "spot"):
        mig = r.one(T_MIG, f"pretrain-{m}")
        assert mig.inputs["name"] == f"pretrain-{m.replace('_', '-')}", mig.urn
        assert mig.inputs["baseInstanceName"] == "pretrain", mig.urn
        assert mig.inputs["targetSize"] == getattr(pre.purchase, m), mig.urn
        assert mig.inputs["zone"] == "us-central1-c", mig.urn
        assert "targetSize" in mig.ignore_changes, mig.urn
        tpl = r.one(T_IT, f"pretrain-{m.replace('_', '-')}-template")
        assert mig.inputs["versions"][0]["instanceTemplate"] == tpl.outputs["selfLink"], mig.urn
    assert [m.name for m in r.by_type(T_MIG) if m.name.startswith("eval")] == ["eval-spot"]


def test_zone_from_the_catalog(prod):
    _, r = prod
    mig = r.one(T_MIG, "mega-on_demand")
    assert mig.inputs["zone"] == "europe-west4-b", mig.urn
    # the zone is checked against the region's zones (compute.zones.list), once per region
    asked = [a["region"] for t, a in r.calls if t == "gcp:compute/getZones:getZones"]
    assert sorted(asked) == ["europe-west4", "us-central1"]


def test_no_zone_known_is_a_located_error_not_region_a():
    """Today's main placed such a cluster in "<region>-a" whether or not it offers the type."""
    env = make_env([make_cluster("nozone", "a3-megagpu-8g", PurchaseMix(on_demand=2),
                                 region="us-central1")], env="dev")
    with pytest.raises(ConfigError) as exc:
        run(env)
    assert str(exc.value) == ("stacks/Pulumi.dev.yaml: gpulease:clusters[0]: no zone is known "
                              "for a3-megagpu-8g in us-central1 (the catalog row lists none): "
                              "refresh the catalog")


def test_a_zone_the_region_does_not_have_is_a_located_error():
    env = make_env([make_cluster("ghost", "a3-highgpu-8g", PurchaseMix(on_demand=2),
                                 zone="us-central1-e")], env="dev")
    with pytest.raises(ConfigError) as exc:
        run(env)
    assert ('gpulease:clusters[0]: cluster "ghost" is placed in zone "us-central1-e", which '
            "us-central1 does not have (its zones: us-central1-a, us-central1-b, us-central1-c, "
            "us-central1-f)") in str(exc.value)


def test_reservation_consumed_by_the_reserved_template(prod):
    _, r = prod
    res = r.one(T_DYN_RES, "pretrain-reservation")
    assert res.inputs["count"] == 2 and res.inputs["machine_type"] == "a3-highgpu-8g", res.urn
    assert res.inputs["zone"] == "us-central1-c" and res.inputs["project"] == "acme-test"
    assert res.physical_name == res.inputs["name"] == "gpulease-prod-pretrain-reserved"
    assert res.inputs["__provider"] == mocks.SECRET_MASK or res.inputs["__provider"]
    tpl = r.one(T_IT, "pretrain-reserved-template")
    aff = tpl.inputs["reservationAffinity"]
    assert aff["type"] == "SPECIFIC_RESERVATION", tpl.urn
    assert aff["specificReservation"] == {"key": "compute.googleapis.com/reservation-name",
                                          "values": [res.outputs["name"]]}, tpl.urn
    assert "reservationAffinity" not in r.one(T_IT, "pretrain-spot-template").inputs
    assert len(r.by_type(T_DYN_RES)) == 1 and not r.by_type(T_RES)


def test_reservation_carries_guest_accelerators_for_n1():
    env = make_env([make_cluster("t4", "n1-standard-8", PurchaseMix(reserved=2))], env="dev")
    r = run(env)
    props = r.one(T_RES, "t4-reservation").inputs["specificReservation"]["instanceProperties"]
    assert props["guestAccelerators"] == [{"acceleratorType": "nvidia-tesla-t4",
                                           "acceleratorCount": 1}]


def test_least_privilege_service_account(prod):
    env, r = prod
    roles = sorted(p.inputs["role"] for p in r.by_type(T_PIAM)
                   if p.name.startswith("pretrain-"))
    # the project roles, and the node's one compute read (tests/test_node_privilege.py)
    read = r.one("gcp:projects/iAMCustomRole:IAMCustomRole", "pretrain-node-read")
    assert roles == sorted(builders.PROJECT_ROLES + (read.outputs["name"],))
    for p in r.by_type(T_PIAM):
        assert p.inputs["role"] not in ("roles/owner", "roles/editor"), p.urn
        assert p.inputs["project"] == "acme-test", p.urn
    ds = r.one(T_BIAM, "pretrain-dataset-read")
    assert ds.inputs["bucket"] == "gpulease-prod-corpus", ds.urn
    assert ds.inputs["role"] == "roles/storage.objectViewer", ds.urn
    assert "objects/data/" in ds.inputs["condition"]["expression"], ds.urn
    ck = r.one(T_BIAM, "pretrain-checkpoints")
    assert ck.inputs["role"] == "roles/storage.objectUser", ck.urn
    assert 'objects/checkpoints/pretrain/")' in ck.inputs["condition"]["expression"], ck.urn
    assert ds.inputs["member"].startswith("serviceAccount:"), ds.urn


def test_storage_bucket_properties(prod):
    _, r = prod
    b = r.one(T_BUCKET, "corpus-bucket")
    i = b.inputs
    assert i["name"] == "gpulease-prod-corpus" and i["location"] == "US-CENTRAL1", b.urn
    assert i["uniformBucketLevelAccess"] is True, b.urn
    assert i["publicAccessPrevention"] == "enforced", b.urn
    assert i["versioning"] == {"enabled": True}, b.urn
    assert i["forceDestroy"] is False, b.urn
    assert b.retain_on_delete is True and b.protect is True, b.urn
    classes = [x["action"].get("storageClass") for x in i["lifecycleRules"]
               if x["action"]["type"] == "SetStorageClass"]
    assert classes == ["NEARLINE", "COLDLINE", "ARCHIVE"], b.urn
    assert any(x["action"]["type"] == "Delete" and x["condition"]["daysSinceNoncurrentTime"] == 30
               for x in i["lifecycleRules"]), b.urn


def test_work_bucket_only_when_dataset_is_elsewhere(prod):
    _, r = prod
    # ultra has no dataset -> work bucket; mega's dataset lives in another region -> work bucket
    names = {b.name for b in r.by_type(T_BUCKET)}
    assert names == {"corpus-bucket", "ultra-work", "mega-work"}
    wb = r.one(T_BUCKET, "mega-work")
    assert wb.inputs["name"] == "gpulease-prod-mega-work", wb.urn
    assert wb.inputs["location"] == "EUROPE-WEST4", wb.urn
    assert wb.retain_on_delete and wb.protect, wb.urn
    assert wb.inputs["publicAccessPrevention"] == "enforced", wb.urn
    ds = r.one(T_BIAM, "mega-dataset-read")
    assert ds.inputs["bucket"] == "gpulease-prod-mega-work", ds.urn
    assert "objects/stage/" in ds.inputs["condition"]["expression"], ds.urn


def test_dev_buckets_are_retained_but_not_protected():
    st = make_storage("data", "us-central1")
    env = make_env([make_cluster("c", "g2-standard-8", PurchaseMix(spot=1), dataset="data")],
                   [st], env="dev")
    r = run(env)
    b = r.one(T_BUCKET, "data-bucket")
    assert b.retain_on_delete is True and b.protect is False, b.urn


def test_cost_context_roles_and_ledger(prod):
    env, r = prod
    ledger = r.result
    pre = env.cluster("pretrain")
    # money (gpulease.money): each component converted to cents once, then added
    assert ledger.get(T_MIG, "pretrain-spot").monthly_usd == \
        pre.costs.amount("spot_usd") + pre.costs.amount("spot_rework_usd")
    assert ledger.get(T_MIG, "pretrain-on_demand").monthly_usd == \
        pre.costs.amount("on_demand_usd")
    assert ledger.get(T_DYN_RES, "pretrain-reservation").monthly_usd == \
        pre.costs.amount("reserved_usd")
    # the reservation carries the committed nodes; the first MIG (anchor) the communication
    # cost, and the egress too since pretrain has no work bucket (its dataset is local)
    assert ledger.get(T_MIG, "pretrain-reserved").monthly_usd == \
        pre.costs.amount("communication_usd") + pre.costs.amount("egress_usd")
    assert ledger.get(T_IT, "pretrain-spot-template").purchase_model == "spot"
    by_cluster = ledger.by_cluster()
    for c in env.clusters:
        assert by_cluster[c.name] == c.monthly_money, c.name
    assert ledger.get(T_BUCKET, "corpus-bucket").cluster == tags.SHARED
    assert ledger.get(T_BUCKET, "corpus-bucket").monthly_usd == money.usd(150)
    # the work bucket carries the data-gravity cost
    assert ledger.get(T_BUCKET, "mega-work").monthly_usd == money.usd(12)


def test_every_labelable_resource_is_labelled(prod):
    _, r = prod
    checked = 0
    for res in r.custom:
        if not res.type.startswith("gcp:"):
            continue
        _, mod, cls = res.type.split(":")
        module = getattr(pulumi_gcp, mod.split("/")[0])
        if "labels" not in inspect.signature(getattr(module, cls)._internal_init).parameters:
            continue
        missing = [k for k in tags.REQUIRED_GCP if k not in (res.inputs.get("labels") or {})]
        assert not missing, f"{res.urn} lacks {missing}"
        checked += 1
    assert checked == len(r.by_type(T_IT)) + len(r.by_type(T_BUCKET)) == 9


def test_emitted_values_are_valid_api_values(prod):
    _, r = prod
    enums = {
        "provisioningModel": {e.name for e in compute_v1.Scheduling.ProvisioningModel},
        "onHostMaintenance": {e.name for e in compute_v1.Scheduling.OnHostMaintenance},
        "instanceTerminationAction": {e.name for e in
                                      compute_v1.Scheduling.InstanceTerminationAction},
    }
    machine_types = set(FIXTURE_CATALOG.instance_types("gcp"))
    accelerators = {o.accelerator_type for o in FIXTURE_CATALOG.offerings if o.accelerator_type}
    nic_types = {e.name for e in compute_v1.NetworkInterface.NicType}
    for tpl in r.by_type(T_IT):
        for k, allowed in enums.items():
            if k in tpl.inputs["scheduling"]:
                assert tpl.inputs["scheduling"][k] in allowed, (tpl.urn, k)
        assert tpl.inputs["machineType"] in machine_types, tpl.urn
        for a in tpl.inputs.get("guestAccelerators") or []:
            assert a["type"] in accelerators, tpl.urn
        for nic in tpl.inputs["networkInterfaces"]:
            assert nic.get("nicType", "GVNIC") in nic_types, tpl.urn
        aff = tpl.inputs.get("reservationAffinity")
        if aff:
            assert aff["type"] in {e.name for e in
                                   compute_v1.ReservationAffinity.ConsumeReservationType}
    for pol in r.by_type(T_POL):
        assert pol.inputs["groupPlacementPolicy"]["collocation"] in {
            e.name for e in compute_v1.ResourcePolicyGroupPlacementPolicy.Collocation}, pol.urn
    # storage classes: the GCP tier classes, which pulumi-gcp documents as valid bucket classes
    doc = inspect.getdoc(pulumi_gcp.storage.Bucket._internal_init) or \
        inspect.getsource(pulumi_gcp.storage.bucket)
    for b in r.by_type(T_BUCKET):
        for rule in b.inputs["lifecycleRules"]:
            cls = rule["action"].get("storageClass")
            if cls:
                assert cls in TIER_CLASSES["gcp"] and cls in doc, (b.urn, cls)


def test_existing_network_is_used_and_nothing_is_created():
    env = make_env([make_cluster("byo", "a2-highgpu-1g", PurchaseMix(on_demand=1))], env="dev",
                   network="projects/acme-test/global/networks/shared",
                   subnets=("projects/acme-test/regions/us-central1/subnetworks/gpu",))
    r = run(env)
    assert not r.by_type(T_NET) and not r.by_type("gcp:compute/routerNat:RouterNat")
    nic = r.one(T_IT, "byo-on-demand-template").inputs["networkInterfaces"][0]
    assert nic["network"] == "projects/acme-test/global/networks/shared"
    assert nic["subnetwork"] == "projects/acme-test/regions/us-central1/subnetworks/gpu"
    fw = r.one(T_FW, "byo-internal")
    assert fw.inputs["network"] == "projects/acme-test/global/networks/shared", fw.urn


def test_existing_network_without_subnet_in_region_is_a_config_error():
    from gpulease.errors import ConfigError

    env = make_env([make_cluster("byo", "a3-megagpu-8g", PurchaseMix(on_demand=1))], env="dev",
                   network="shared",
                   subnets=("projects/p/regions/us-central1/subnetworks/a",
                            "projects/p/regions/us-east4/subnetworks/b"))
    with pytest.raises(ConfigError) as exc:
        run(env)
    msg = str(exc.value)
    assert "gpulease:clouds.gcp.subnetwork" in msg and "europe-west4" in msg
    assert "stacks/Pulumi.dev.yaml" in msg


def test_nothing_on_gcp_declares_nothing():
    env = make_env([], env="dev")
    r = run(env)
    assert not [x for x in r.resources if x.type.startswith(("gcp:", "gpulease:gcp", "pulumi:providers:gcp"))]


def _every_offering(catalog):
    offerings = [o for o in catalog.offerings if o.cloud == "gcp"]
    assert offerings, f"catalog {catalog.version} has no GCP offerings"
    clusters = []
    for i, o in enumerate(offerings):
        mix = PurchaseMix(reserved=1, on_demand=1, spot=2)
        name = f"c{i}"
        # The policy always decides a zone (catalog zone, else a naming-convention default);
        # decisions built here do the same so no getZones call is needed.
        zone = o.zones[0] if o.zones else f"{o.region}-b"
        clusters.append(make_cluster(name, o.instance_type, mix, catalog=catalog,
                                     region=o.region, index=i, zone=zone))
    return clusters


def _check_every_offering(catalog):
    clusters = _every_offering(catalog)
    env = make_env(clusters, env="staging")
    r = run(env, catalog)
    assert len(r.by_type("gpulease:gcp:GpuCluster")) == len(clusters)
    machine_types = set(catalog.instance_types("gcp"))
    accelerators = {o.accelerator_type for o in catalog.offerings if o.accelerator_type}
    for c in clusters:
        for m in ("reserved", "on_demand", "spot"):
            tpl = r.one(T_IT, f"{c.name}-{m.replace('_', '-')}-template")
            assert tpl.inputs["machineType"] == c.offering.instance_type in machine_types
            assert len(tpl.inputs["networkInterfaces"]) == len(
                builders.nic_layout(c.offering, c.network)), tpl.urn
            for a in tpl.inputs.get("guestAccelerators") or []:
                assert a["type"] in accelerators and a["type"].startswith("nvidia-"), tpl.urn
            r.one(T_MIG, f"{c.name}-{m}")
        r.one(T_RES, f"{c.name}-reservation")


def test_gpu_cluster_for_every_offering_of_the_fixture_catalog():
    _check_every_offering(FIXTURE_CATALOG)


def test_gpu_cluster_for_every_gcp_offering_of_the_shipped_catalog():
    from gpulease.catalog import available_versions, load_catalog

    assert available_versions(), "no shipped catalog in gpulease/catalog/data/ yet"
    _check_every_offering(load_catalog())


# ---- issue 37 item 2: window work on spot gets an on-demand MIG at zero -------------------------
def test_spot_window_work_declares_an_on_demand_mig_at_zero():
    from gpulease import deadline as dl
    from gpulease import money, naming
    from gpulease.purchase import ON_DEMAND, SPOT
    from tests.test_aws_components import spot_window

    c = spot_window(make_cluster("win", "g2-standard-8", PurchaseMix(spot=2),
                                 distributed=False), duration=6.5)
    env = make_env([c], [], env="dev")
    r = run(env)
    migs = {m.name: m for m in r.by_type(T_MIG)}
    assert set(migs) == {"win-spot", "win-on_demand"}
    od, spot = migs["win-on_demand"], migs["win-spot"]
    assert od.inputs["targetSize"] == 0 and spot.inputs["targetSize"] == 2
    assert list(od.ignore_changes) == ["targetSize"]
    assert od.inputs["zone"] == spot.inputs["zone"]
    tpls = {t.name: t.inputs["properties"] if "properties" in t.inputs else t.inputs
            for t in r.by_type(T_IT)}
    labels = {n: t["labels"] for n, t in tpls.items()}
    od_l = labels[next(n for n in labels if "on-demand" in n or ON_DEMAND in n)]
    spot_l = labels[next(n for n in labels if "spot" in n)]
    assert spot_l[tags.DEADLINE_GROUP] == SPOT
    assert od_l[tags.DEADLINE_GROUP] == tags.label_value(ON_DEMAND)
    for lab in (spot_l, od_l):
        assert lab[tags.DEADLINE_START] == "20261210t0800z"
        assert lab[tags.DEADLINE] == "20261210t1800z"
        assert lab[tags.DEADLINE_WORK_MINUTES] == "390"
        assert lab[tags.DEADLINE_RESTART_MINUTES] == "25"
        assert tags.DEADLINE_PROGRESS not in lab           # a label cannot hold a URI
        # ... but the checkpoint bucket's name: the reaper reads gpulease-progress.json there
        assert lab[tags.DEADLINE_PROGRESS_BUCKET] == tags.label_value(
            lab[tags.DEADLINE_PROGRESS_BUCKET]) == naming.checkpoint_bucket(env.stack, c)
    assert (f"gs://{spot_l[tags.DEADLINE_PROGRESS_BUCKET]}/{naming.progress_object('win')}"
            == naming.checkpoint_uri(env.stack, c) + dl.PROGRESS_OBJECT)
    # the on-demand template is priced at zero, the spot one is not
    assert od_l[tags.MONTHLY_CENTS] == "0" and od_l[tags.PURCHASE_MODEL] == \
        tags.label_value(ON_DEMAND)
    od_e, spot_e = r.result.get(T_MIG, "win-on_demand"), r.result.get(T_MIG, "win-spot")
    assert od_e.monthly_usd == money.ZERO and od_e.one_time_usd == money.ZERO
    # (a window's cost is one-time: on the spot MIG)
    assert spot_e.monthly_usd + spot_e.one_time_usd > money.ZERO
