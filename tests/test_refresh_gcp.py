"""GCP catalog refresh against a local fake of the Cloud Billing Catalog + Compute REST APIs."""
from __future__ import annotations

import datetime as dt
import json
import warnings

import pytest

from gpulease import retry

from gpulease.catalog import load_catalog, parse_catalog
from gpulease.catalog.fetchers.clients import GcpClients, make_gcp_clients
from gpulease.catalog.fetchers.gcp import (BILLING_SOURCE, Target, classify_sku, combine,
                                           fetch_gcp, price_table)
from gpulease.catalog.refresh import refresh
from gpulease.errors import CloudError
from tests.fakes.gcp_billing import FakeBilling, accelerator_type, machine_type, sku

warnings.filterwarnings("ignore", category=FutureWarning)

NOW = dt.datetime(2026, 12, 9, 10, 0, tzinfo=dt.timezone.utc)
R = "us-central1"
# --- fixture unit prices of the fake cloud (USD per vCPU-h / GiB-h / GPU-h) --------------------
G2 = {"OnDemand": (0.024, 0.0028, 0.56), "Preemptible": (0.0096, 0.0011, 0.22),
      "Commit1Yr": (0.015, 0.0018, 0.35), "Commit3Yr": (0.011, 0.0012, 0.25)}
A2 = {"OnDemand": (0.031611, 0.004237, 2.933908), "Preemptible": (0.0126, 0.0017, 1.17)}
N1 = {"OnDemand": (0.031611, 0.004237), "Preemptible": (0.0069, 0.00093)}
T4 = {"OnDemand": 0.35, "Preemptible": 0.14, "Commit1Yr": 0.22}
PREFIX = {"OnDemand": "", "Preemptible": "Spot Preemptible "}


def _skus() -> list[dict]:
    out = []
    for usage, (core, ram, gpu) in G2.items():
        if usage.startswith("Commit"):
            yrs = "1 Year" if usage == "Commit1Yr" else "3 Years"
            out += [sku(f"Commitment v1: G2 Cpu in Americas for {yrs}", group="CPU", usage=usage,
                        regions=[R], usd=core),
                    sku(f"Commitment v1: G2 Ram in Americas for {yrs}", group="RAM", usage=usage,
                        regions=[R], usd=ram),
                    sku(f"Commitment v1: Nvidia L4 GPU running in Americas for {yrs}",
                        group="GPU", usage=usage, regions=[R], usd=gpu)]
        else:
            p = PREFIX[usage]
            out += [sku(f"{p}G2 Instance Core running in Americas", group="CPU", usage=usage,
                        regions=[R], usd=core),
                    sku(f"{p}G2 Instance Ram running in Americas", group="RAM", usage=usage,
                        regions=[R], usd=ram),
                    sku(f"{'Nvidia L4 GPU attached to Spot Preemptible VMs' if p else 'Nvidia L4 GPU'}"
                        " running in Americas", group="GPU", usage=usage, regions=[R], usd=gpu)]
    for usage, (core, ram, gpu) in A2.items():
        p = PREFIX[usage]
        out += [sku(f"{p}A2 Instance Core running in Americas", group="CPU", usage=usage,
                    regions=[R], usd=core),
                sku(f"{p}A2 Instance Ram running in Americas", group="RAM", usage=usage,
                    regions=[R], usd=ram),
                sku(f"{p}Nvidia Tesla A100 GPU running in Americas", group="GPU", usage=usage,
                    regions=[R], usd=gpu)]
    for usage, (core, ram) in N1.items():
        p = PREFIX[usage]
        out += [sku(f"{p}N1 Predefined Instance Core running in Americas", group="N1Standard",
                    usage=usage, regions=[R], usd=core),
                sku(f"{p}N1 Predefined Instance Ram running in Americas", group="N1Standard",
                    usage=usage, regions=[R], usd=ram, unit="GiBy.h")]
    for usage, usd in T4.items():
        desc = {"OnDemand": "Nvidia Tesla T4 GPU running in Americas",
                "Preemptible": "Nvidia Tesla T4 GPU attached to Spot Preemptible VMs running in "
                               "Americas",
                "Commit1Yr": "Commitment v1: Nvidia Tesla T4 GPU running in Americas for 1 Year"}
        out.append(sku(desc[usage], group="GPU", usage=usage, regions=[R], usd=usd))
    # noise the combination must ignore
    out += [sku("Nvidia L4 Virtual Workstation GPU running in Americas", group="GPU",
                usage="OnDemand", regions=[R], usd=9.99),
            sku("G2 Sole Tenancy Instance Core running in Americas", group="CPU",
                usage="OnDemand", regions=[R], usd=9.99),
            sku("Storage PD Capacity", group="SSD", usage="OnDemand", regions=[R], usd=0.04,
                unit="GiBy.mo")]
    return out


def _base_catalog(with_n1: bool = True):
    rows = [
        {"cloud": "gcp", "region": R, "instance_type": "g2-standard-8", "gpu": "L4",
         "gpus_per_node": 1, "gpu_memory_gb": 24, "vcpus": 8, "memory_gb": 32,
         "network_gbps": 16, "rdma": "none", "on_demand_usd": 0.85, "spot_usd": 0.34,
         "commit_1y_usd": None, "commit_3y_usd": None, "source": "hand", "as_of": "2026-12-02"},
        {"cloud": "gcp", "region": R, "instance_type": "a2-highgpu-1g", "gpu": "A100",
         "gpus_per_node": 1, "gpu_memory_gb": 40, "vcpus": 12, "memory_gb": 85,
         "network_gbps": 24, "rdma": "none", "on_demand_usd": 3.67, "spot_usd": 1.47,
         "commit_1y_usd": 2.31, "commit_3y_usd": 1.29, "source": "hand", "as_of": "2026-12-02"},
        {"cloud": "aws", "region": "us-east-1", "instance_type": "g6.xlarge", "gpu": "L4",
         "gpus_per_node": 1, "gpu_memory_gb": 24, "vcpus": 4, "memory_gb": 16,
         "network_gbps": 10, "rdma": "none", "on_demand_usd": 0.8048, "spot_usd": None,
         "commit_1y_usd": None, "commit_3y_usd": None, "source": "hand", "as_of": "2026-12-02"},
    ]
    if with_n1:
        rows.append({"cloud": "gcp", "region": R, "instance_type": "n1-standard-8",
                     "accelerator_type": "nvidia-tesla-t4", "gpu": "T4", "gpus_per_node": 1,
                     "gpu_memory_gb": 16, "vcpus": 8, "memory_gb": 30, "network_gbps": 16,
                     "rdma": "none", "on_demand_usd": 0.73, "spot_usd": 0.2,
                     "commit_1y_usd": None, "commit_3y_usd": None, "source": "hand",
                     "as_of": "2026-12-02"})
    return parse_catalog({"format": "gpulease-catalog/1", "version": "2026.12.02",
                          "as_of": "2026-12-02", "offerings": rows, "storage": [],
                          "egress": []}, source="fixture")


@pytest.fixture
def fake():
    f = FakeBilling()
    f.skus = _skus()
    zones = [f"{R}-a", f"{R}-b", f"{R}-c"]
    for z in zones:
        f.machine_types += [
            machine_type(f.project, z, "g2-standard-8", cpus=8, memory_mb=32768,
                         accelerator="nvidia-l4", count=1),
            machine_type(f.project, z, "n1-standard-8", cpus=8, memory_mb=30720)]
    f.machine_types.append(machine_type(f.project, f"{R}-c", "a2-highgpu-1g", cpus=12,
                                        memory_mb=87040, accelerator="nvidia-tesla-a100",
                                        count=1))
    f.accelerator_types += [accelerator_type(f.project, z, "nvidia-tesla-t4", "NVIDIA T4", 4)
                            for z in zones[:2]]
    f.start()
    yield f
    f.stop()


def clients(fake: FakeBilling, project=None) -> GcpClients:
    c = make_gcp_clients(project=project, endpoint=fake.endpoint)
    c.sleep = lambda _s: None
    return c


def test_classify_real_sku_shapes():
    table = price_table([p for p in (classify_sku(_sdk(s)) for s in _skus()) if p])
    assert table[("core", "g2", "on_demand_usd", R)] == pytest.approx(0.024)
    assert table[("ram", "n1", "spot_usd", R)] == pytest.approx(0.00093)
    assert table[("gpu", "nvidia-tesla-t4", "commit_1y_usd", R)] == pytest.approx(0.22)
    assert table[("gpu", "nvidia-l4", "spot_usd", R)] == pytest.approx(0.22)
    # workstation / sole-tenancy / storage SKUs never price a VM
    assert all(v != pytest.approx(9.99) for v in table.values())


def _sdk(raw: dict):
    from google.cloud import billing_v1
    return billing_v1.Sku.from_json(json.dumps(raw))


def test_combine_bundled_family_and_missing_component():
    table = price_table([p for p in (classify_sku(_sdk(s)) for s in _skus()) if p])
    prices, missing = combine(Target("g2-standard-8", 8, 32, 1), R, table)
    core, ram, gpu = G2["OnDemand"]
    assert prices["on_demand_usd"] == pytest.approx(8 * core + 32 * ram + gpu)
    assert set(prices) == {"on_demand_usd", "spot_usd", "commit_1y_usd", "commit_3y_usd"}
    prices, missing = combine(Target("a2-highgpu-1g", 12, 85, 1), R, table)
    assert "commit_1y_usd" not in prices and missing == [
        f"no a2 core, ram, nvidia-tesla-a100 GPU SKU in {R} for commit_1y_usd, commit_3y_usd"]


def test_fetch_paginates_and_uses_compute_specs(fake):
    c = clients(fake, project=fake.project)
    targets = {R: [Target("g2-standard-8", 8, 32, 1),
                   Target("n1-standard-8", 8, 30, 1, accelerator_type="nvidia-tesla-t4"),
                   Target("a2-highgpu-1g", 12, 85, 1)]}
    lines = []
    got = fetch_gcp(c, targets=targets, progress=lines.append)
    assert len(fake.ops("skus")) == -(-len(fake.skus) // fake.page_size) > 1   # every page read
    assert all(q.get("pageToken") for q in fake.ops("skus")[1:])
    n1 = got.get(R, "n1-standard-8")
    core, ram = N1["OnDemand"]
    assert n1.prices["on_demand_usd"] == pytest.approx(8 * core + 30 * ram + T4["OnDemand"])
    assert n1.zones == (f"{R}-a", f"{R}-b")          # T4 only in a, b
    assert "commit_1y_usd" not in n1.prices          # no N1 commitment SKU in the fake
    a2 = got.get(R, "a2-highgpu-1g")
    assert a2.zones == (f"{R}-c",) and a2.specs["memory_gb"] == 85.0
    assert any("billing catalog" in line for line in lines) and lines[-1].startswith("[")


def test_refresh_round_trips_through_the_planner_loader(fake, tmp_path):
    base = _base_catalog()
    res = refresh(base, scope={"gcp": [R]}, gcp=clients(fake, fake.project), version="2026.12.09",
                  now=NOW)
    path = tmp_path / "2026.12.09.json"
    path.write_text(json.dumps(res.doc))
    cat = load_catalog(str(path))
    g2 = cat.offering("gcp", R, "g2-standard-8")
    core, ram, gpu = G2["Commit3Yr"]
    assert g2.commit_3y_usd == pytest.approx(8 * core + 32 * ram + gpu)
    assert g2.as_of == "2026-12-09" and BILLING_SOURCE in g2.source
    row = next(r for r in res.doc["offerings"] if r["instance_type"] == "a2-highgpu-1g")
    assert row["price_sources"]["on_demand_usd"] == BILLING_SOURCE
    assert row["price_sources"]["commit_1y_usd"] == "kept:2026.12.02"
    assert row["commit_1y_usd"] == 2.31 and "kept from catalog 2026.12.02" in row["notes"]
    # the AWS row is out of scope and untouched
    assert cat.offering("aws", "us-east-1", "g6.xlarge").on_demand_usd == 0.8048
    assert res.doc["sources"][BILLING_SOURCE]["url"].startswith("https://cloud.google.com/")


def test_throttled_then_success(fake):
    fake.faults["skus"] = [429, 503]
    slept = []
    c = clients(fake)
    c.sleep = slept.append
    got = fetch_gcp(c, targets={R: [Target("g2-standard-8", 8, 32, 1)]})
    assert not got.failures and got.get(R, "g2-standard-8").prices
    # two retries, each waiting within gpulease.retry's full-jitter bound for its attempt
    assert len(slept) == 2
    assert all(0 <= s <= min(retry.CAP_S, retry.BASE_S * 2 ** i) for i, s in enumerate(slept))


def test_billing_down_keeps_rows_and_reports(fake):
    fake.faults["skus"] = [403]
    res = refresh(_base_catalog(), scope={"gcp": [R]}, gcp=clients(fake), version="v", now=NOW)
    assert res.doc is None and not res.report.anything_refreshed
    assert any("403" in str(f) and f.api == "billing.list_skus" for f in res.report.failures)


def test_no_project_uses_snapshot_specs_and_removes_nothing(fake):
    res = refresh(_base_catalog(), scope={"gcp": [R]}, gcp=clients(fake), version="v", now=NOW)
    assert not fake.ops("machineTypes") and not res.report.removed
    a2 = res.catalog.offering("gcp", R, "a2-highgpu-1g")
    core, ram, gpu = A2["OnDemand"]
    assert a2.on_demand_usd == pytest.approx(12 * core + 85 * ram + gpu, abs=1e-6)


def test_type_not_offered_in_region_is_removed(fake):
    fake.machine_types = [m for m in fake.machine_types if m["name"] != "a2-highgpu-1g"]
    res = refresh(_base_catalog(), scope={"gcp": [R]}, gcp=clients(fake, fake.project),
                  version="v", now=NOW)
    assert res.report.removed == [("gcp", R, "a2-highgpu-1g")]
    assert ("gcp", R, "a2-highgpu-1g") not in {o.key for o in res.catalog.offerings}


def test_missing_credentials_become_cloud_error(monkeypatch, tmp_path):
    monkeypatch.delenv("GPULEASE_GCP_ENDPOINT", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    with pytest.raises(CloudError) as exc:
        make_gcp_clients()
    assert "credentials" in str(exc.value) and "gcloud auth application-default login" in str(
        exc.value)
