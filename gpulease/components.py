"""gpulease in another Pulumi program (issue 36 item 5): the typed entry point and the
components, importable from the installed package under its own name.

A team with its own Pulumi program adds gpulease's clusters to it::

    import gpulease.components as gpulease

    fleet = gpulease.declare({
        "owner": "ml-platform", "cost_center": "cc-42", "budget_monthly_usd": 20000,
        "clouds": {"aws": {"regions": ["us-east-1"]}},
        "clusters": [{"name": "train", "gpu": "H100", "gpus": 8, "hours_per_month": 200,
                      "priority": 5}],
    })
    pulumi.export("gpu_monthly_usd", fleet.monthly_usd)

:func:`declare` takes the keys of a gpulease stack file without the ``gpulease:`` namespace
(docs/config.md), runs the same steps as gpulease's own program (``infra/__main__.py``):
validation, the policy's decision, the cost transform, every cloud's components, and returns
a :class:`Fleet`. Only what gpulease declares is priced and tagged (the program's own resources
are left alone), and nothing is exported unless ``export=True``. Bad config raises
``gpulease.errors.ConfigError`` (located findings, as `gpulease plan` prints them).

The components themselves (one per cloud, same field order): ``AwsGpuCluster`` /
``AwsGpuClusterArgs`` and ``GcpGpuCluster`` / ``GcpGpuClusterArgs``, each built from a
``gpulease.model.ClusterDecision`` (docs/components.md lists their fields and what they
expose); :func:`declare` is how the policy's decision reaches them.
"""
from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Mapping, Optional

from gpulease import clock
from gpulease.catalog import Catalog
from gpulease.clouds.aws.cluster import GpuCluster as AwsGpuCluster
from gpulease.clouds.aws.cluster import GpuClusterArgs as AwsGpuClusterArgs
from gpulease.clouds.gcp.cluster import GpuCluster as GcpGpuCluster
from gpulease.clouds.gcp.cluster import GpuClusterArgs as GcpGpuClusterArgs
from gpulease.config import NAMESPACE, load_stack_catalog, parse_stack_config
from gpulease.costing import transform as cost_transform
from gpulease.model import EnvironmentDecision
from gpulease.program import deploy_clouds, export_outputs

__all__ = ["Fleet", "declare", "AwsGpuCluster", "AwsGpuClusterArgs", "GcpGpuCluster",
           "GcpGpuClusterArgs"]


@dataclass(frozen=True)
class Fleet:
    """What :func:`declare` declared: the policy's decision (clusters, storage, costs), the
    catalog it priced with, and the cost ledger of every resource it declared."""

    decision: EnvironmentDecision
    catalog: Catalog
    ledger: cost_transform.CostLedger

    @property
    def monthly_usd(self) -> Decimal:
        """The estimated monthly total of what gpulease declared (money: Decimal cents)."""
        return self.ledger.monthly_usd

    def cluster(self, name: str):
        """The decision of one cluster (cloud, region, instance type, nodes, purchase, cost)."""
        return self.decision.cluster(name)


def declare(config: Mapping[str, Any], *, stack: Optional[str] = None,
            source: str = "gpulease.components.declare(config)",
            export: bool = False) -> Fleet:
    """Declare gpulease's resources for ``config`` (stack-file keys without ``gpulease:``)
    in the running Pulumi program; ``stack`` defaults to the program's stack. ``export``:
    also export gpulease's stack outputs (clusters, totals, budget), as its own program does.
    """
    import pulumi

    from gpulease.policy import decide

    stack = stack or pulumi.get_stack()
    values = {f"{NAMESPACE}:{k}": v for k, v in config.items()}
    catalog = load_stack_catalog(values, source=source)
    spec = parse_stack_config(values, stack=stack, source=source, catalog=catalog)
    for warning in spec.warnings:
        pulumi.log.warn(str(warning))
    env = decide(spec, catalog, now=clock.now())
    declaring = {"on": True}
    ledger = cost_transform.register(spec, catalog, active=lambda: declaring["on"])
    try:
        deploy_clouds(env, catalog, spec)
    finally:
        declaring["on"] = False
    if export:
        export_outputs(env, catalog, ledger)
    return Fleet(decision=env, catalog=catalog, ledger=ledger)
