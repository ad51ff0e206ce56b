"""What a team needs so its jobs land on an owned `kubernetes` pool, declared with
pulumi-kubernetes: a namespace, a ResourceQuota on the pool's GPUs and a PriorityClass per
gpulease priority band (docs/owned-kubernetes.md).

Pure builders (names, bands, object bodies) beside the one ComponentResource that assembles
them. The cost labels are stamped by the stack's cost transform (``gpulease.costing.transform``,
Kubernetes labels from ``gpulease.tags.kubernetes_labels``); the pool's monthly cost
(``gpulease.owned.cost.pool_cost``) is carried by the namespace. The component is handed its
cost context by the program (this layer sits below gpulease.costing).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import pulumi

from gpulease.model import OwnedPool
from gpulease.purchase import SPOT

#: the pool kind gpulease declares resources for; the other kinds get nothing
#: (``gpulease.config.schema.OWNED_KINDS``).
KUBERNETES = "kubernetes"
#: the GPU resource the NVIDIA device plugin advertises, as a ResourceQuota limits it: an
#: extended resource may only be quoted with the ``requests.`` prefix (Kubernetes docs,
#: "Resource Quotas" - "Resource quota for extended resources").
GPU_RESOURCE = "nvidia.com/gpu"
GPU_QUOTA_KEY = f"requests.{GPU_RESOURCE}"
#: a band's PriorityClass value is its lowest gpulease priority (1..10) times this: the order
#: of gpulease's priorities kept, far below the 1e9 ceiling of user classes and the
#: system classes' 2e9 (Kubernetes docs, "Pod Priority and Preemption").
PRIORITY_VALUE_STEP = 1000
#: gpulease priorities run 1 (lowest) .. 10 (gpulease.config.schema ClusterConfig.priority).
MIN_PRIORITY, MAX_PRIORITY = 1, 10
#: the quota object's name inside the pool's namespace.
QUOTA_NAME = "gpulease-gpus"


@dataclass(frozen=True)
class Band:
    """One priority band of the policy (docs/policy.md, "What the priority band allows")."""

    name: str
    #: gpulease priorities in the band, inclusive
    low: int
    high: int
    #: Kubernetes preemptionPolicy: the spot band (checkpointed work) never preempts others
    preemption_policy: str
    description: str

    @property
    def value(self) -> int:
        return self.low * PRIORITY_VALUE_STEP


def bands(rules: Any) -> list[Band]:
    """The policy's bands for ``rules`` (a PolicyRules: reserved_above_priority,
    spot_below_priority), lowest first; an empty band (a rule set to an end) is left out."""
    spot_high = min(rules.spot_below_priority - 1, MAX_PRIORITY)
    guaranteed_low = max(rules.reserved_above_priority + 1, MIN_PRIORITY)
    out = []
    if spot_high >= MIN_PRIORITY:
        # the policy's spot band (docs/policy.md), named like the purchase model it allows
        out.append(Band(SPOT, MIN_PRIORITY, min(spot_high, guaranteed_low - 1), "Never",
                        f"gpulease priorities {MIN_PRIORITY}-{spot_high} with checkpoints "
                        "(the spot band): preemptible, never preempts"))
    std_low, std_high = max(spot_high + 1, MIN_PRIORITY), guaranteed_low - 1
    if std_low <= std_high:
        out.append(Band("standard", std_low, std_high, "PreemptLowerPriority",
                        f"gpulease priorities {std_low}-{std_high}"))
    if guaranteed_low <= MAX_PRIORITY:
        out.append(Band("guaranteed", guaranteed_low, MAX_PRIORITY, "PreemptLowerPriority",
                        f"gpulease priorities {guaranteed_low}-{MAX_PRIORITY} (guaranteed "
                        "capacity)"))
    return out


def namespace_name(name_prefix: str, environment: str, pool: OwnedPool) -> str:
    """``<prefix>-<environment>-<pool>``: a DNS-1123 label when it fits 63 characters (the
    conformance check reports it otherwise, with the names it is made of)."""
    return f"{name_prefix}-{environment}-{pool.name}"


def priority_class_name(namespace: str, band: Band) -> str:
    """PriorityClasses are cluster-wide: named after the pool's namespace and the band."""
    return f"{namespace}-{band.name}"


def namespace_body(name: str) -> dict:
    return {"metadata": {"name": name}}


def quota_body(namespace: str, pool: OwnedPool) -> dict:
    return {"metadata": {"name": QUOTA_NAME, "namespace": namespace},
            "spec": {"hard": {GPU_QUOTA_KEY: str(pool.gpus)}}}


def priority_class_body(name: str, band: Band) -> dict:
    return {"metadata": {"name": name}, "value": band.value, "global_default": False,
            "preemption_policy": band.preemption_policy, "description": band.description}


@dataclass
class KubernetesPoolArgs:
    pool: OwnedPool
    environment: str
    name_prefix: str
    #: PolicyRules (priority bands)
    rules: Any
    #: gpulease.costing.context.CostContext the program builds (the namespace carries the
    #: pool's monthly cost); set before any child is created.
    cost_context: Any = None


class KubernetesPool(pulumi.ComponentResource):
    """A namespace, a GPU quota and the priority classes on the pool's cluster, through a
    provider bound to the pool's kubeconfig context."""

    def __init__(self, name: str, args: KubernetesPoolArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpulease:owned:KubernetesPool", name, None, opts)
        self.cost_context = args.cost_context
        import pulumi_kubernetes as k8s

        pool = args.pool
        ns = namespace_name(args.name_prefix, args.environment, pool)
        self.provider = k8s.Provider(f"{name}-provider", context=pool.kube_context,
                                     opts=pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        self.namespace = k8s.core.v1.Namespace(
            namespace_logical(name), metadata=namespace_body(ns)["metadata"], opts=child)
        body = quota_body(ns, pool)
        self.quota = k8s.core.v1.ResourceQuota(
            f"{name}-gpu-quota", metadata=body["metadata"], spec=body["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider,
                                        depends_on=[self.namespace]))
        self.priority_classes = []
        for band in bands(args.rules):
            b = priority_class_body(priority_class_name(ns, band), band)
            self.priority_classes.append(k8s.scheduling.v1.PriorityClass(
                f"{name}-{band.name}", metadata=b["metadata"], value=b["value"],
                global_default=b["global_default"], preemption_policy=b["preemption_policy"],
                description=b["description"], opts=child))
        self.register_outputs({"namespace": ns})


def namespace_logical(component: str) -> str:
    """The namespace's logical name (the cost context puts the pool's cost on it)."""
    return f"{component}-namespace"


def component_name(pool: OwnedPool) -> str:
    return f"owned-{pool.name}"
