"""Test fixtures for the policy tests: small synthetic catalogs and stacks (prices are made up)."""
from __future__ import annotations

from typing import Optional

from gpulease.catalog import TIER_CLASSES, parse_catalog
from gpulease.model import CloudSpec, ClusterSpec, StackSpec, StorageSpec
from gpulease.policy.rules import PolicyRules

#: synthetic storage $/GB-month per tier (hot..archive) and egress $/GB — TEST FIXTURES ONLY.
STORAGE_PRICES = (0.02, 0.01, 0.004, 0.001)
EGRESS = {"inter_region": 0.02, "internet": 0.09}


def offering(cloud: str, region: str, itype: str, gpu: str = "H100", gpn: int = 8, *,
             od: Optional[float] = 10.0, spot: Optional[float] = 4.0,
             c1: Optional[float] = 6.0, c3: Optional[float] = 4.5, rdma: str = "none",
             zones=()) -> dict:
    return {"cloud": cloud, "region": region, "instance_type": itype, "gpu": gpu,
            "gpus_per_node": gpn, "gpu_memory_gb": 80, "vcpus": 96, "memory_gb": 1024,
            "network_gbps": 100, "rdma": rdma, "on_demand_usd": od, "spot_usd": spot,
            "commit_1y_usd": c1, "commit_3y_usd": c3, "zones": list(zones)}


def catalog(offerings: list[dict], *, interruptions: float = 0.05, extra_regions=()):
    regions = {(o["cloud"], o["region"]) for o in offerings} | set(extra_regions)
    storage = [{"cloud": c, "region": r, "storage_class": cls, "usd_per_gb_month": p}
               for c, r in sorted(regions) for cls, p in zip(TIER_CLASSES[c], STORAGE_PRICES)]
    egress = [{"cloud": c, "kind": k, "usd_per_gb": v} for c in ("aws", "gcp")
              for k, v in EGRESS.items()]
    return parse_catalog({
        "format": "gpulease-catalog/1", "version": "test.1", "as_of": "2026-12-01",
        "offerings": offerings, "storage": storage, "egress": egress,
        "spot_interruptions": {c: {"interruptions_per_hour": interruptions, "source": "test"}
                               for c in ("aws", "gcp")}}, source="<test catalog>")


def cluster(name: str = "c", *, index: int = 0, gpu: str = "H100", gpus: int = 8,
            hours: float = 730, priority: int = 6, checkpoint: Optional[int] = None,
            distributed: Optional[bool] = None, dataset: Optional[str] = None,
            regions=(), template: Optional[str] = None) -> ClusterSpec:
    return ClusterSpec(name=name, gpu=gpu, gpus=gpus, hours_per_month=hours, priority=priority,
                       checkpoint_minutes=checkpoint, distributed=distributed, dataset=dataset,
                       regions=tuple(regions), template=template, index=index)


def stack(clusters, *, clouds=None, storage=(), budget: float = 1e9, quotas=None,
          rules: Optional[PolicyRules] = None) -> StackSpec:
    if clouds is None:
        clouds = {"aws": ("us-east-1", "us-west-2"), "gcp": ("us-central1", "europe-west4")}
    quotas = quotas or {}
    specs = {c: CloudSpec(cloud=c, regions=tuple(rs),
                          quota_gpus={r: q for (qc, r), q in quotas.items() if qc == c},
                          project="p" if c == "gcp" else None)
             for c, rs in clouds.items()}
    clusters = tuple(c if c.index == i else ClusterSpec(**{**c.__dict__, "index": i})
                     for i, c in enumerate(clusters))
    return StackSpec(stack="test", environment="test", owner="o", cost_center="cc",
                     budget_monthly_usd=budget, clouds=specs, storage=tuple(storage),
                     clusters=clusters, policy=rules or PolicyRules(),
                     source="stacks/Pulumi.test.yaml")


def dataset(name: str = "data", size_tb: float = 10, home: str = "aws:us-east-1", **kw):
    c, r = home.split(":")
    return StorageSpec(name=name, size_tb=size_tb, home_cloud=c, home_region=r, **kw)
