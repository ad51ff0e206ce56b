"""Cluster templates: named, cost-optimized cluster shapes stored as data in templates/clusters/."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Optional

import yaml

from gpulease import datafiles
from gpulease.errors import ConfigError, Finding
from gpulease.purchase import ON_DEMAND, SPOT
from gpulease.text import plural

#: templates/ at the repository root (the package is installed editable from the checkout).
TEMPLATES_DIR = datafiles.templates()
CLUSTER_TEMPLATES_DIR = TEMPLATES_DIR / "clusters"

#: Purchase rules a template may name (see README "Cluster templates").
PURCHASE_RULES = ("band", SPOT)
REQUIRED_KEYS = ("name", "order", "description", "node_roles", "purchase", "network", "storage",
                 "when", "requires")


@dataclass(frozen=True)
class Facts:
    """What a template's `when` / `requires` conditions are evaluated against (one candidate)."""

    nodes: int
    distributed: bool
    rdma: bool            # the offering has an RDMA fabric
    rdma_fabric: bool     # the cluster actually runs on it (multi-node distributed on RDMA)
    dataset: bool
    dataset_tb: float     # size of the cluster's dataset (0 without one)
    spot: bool            # the priority band's purchase mix includes spot
    interruptible: bool
    spot_allowed: bool    # interruptible and priority not above the reserved threshold
    priority: int
    production: bool = False  # the stack is a production environment (StackSpec.is_prod)


def _describe_bool(key: str, want: bool) -> str:
    return {
        "distributed": "a distributed job" if want else "a non-distributed job",
        "rdma": "an RDMA-capable offering (EFA / GPUDirect)" if want else "an offering without RDMA",
        "rdma_fabric": "a multi-node RDMA fabric" if want else "no RDMA fabric",
        "dataset": "a dataset (gpulease:clusters[].dataset)" if want else "no dataset",
        "spot": "a spot purchase" if want else "no spot purchase",
        "interruptible": "checkpoint_minutes (interruptible work)" if want
        else "non-interruptible work",
        "production": "a production environment" if want else "a non-production environment",
        "spot_allowed": "spot-eligible work (checkpoint_minutes set and priority not above the "
                        "reserved threshold)" if want else "work that may not run on spot",
    }[key]


#: condition key -> (test(facts, value), text of what is needed)
CONDITIONS = {
    "min_nodes": (lambda f, v: f.nodes >= v, lambda v: f"at least {v} nodes"),
    "max_nodes": (lambda f, v: f.nodes <= v, lambda v: f"at most {plural(v, 'node')}"),
    "min_dataset_tb": (lambda f, v: f.dataset_tb >= v,
                       lambda v: f"a dataset of at least {v} TB"),
    "min_priority": (lambda f, v: f.priority >= v, lambda v: f"priority >= {v}"),
    "max_priority": (lambda f, v: f.priority <= v, lambda v: f"priority <= {v}"),
    **{k: ((lambda k: lambda f, v: getattr(f, k) == bool(v))(k),
           (lambda k: lambda v: _describe_bool(k, bool(v)))(k))
       for k in ("distributed", "rdma", "rdma_fabric", "dataset", "spot", "interruptible",
                 "spot_allowed", "production")},
}


@dataclass(frozen=True)
class ClusterTemplate:
    name: str
    order: int
    description: str
    node_roles: tuple
    purchase_rule: str
    cache_node: Optional[str]
    network: dict
    storage: dict
    when: dict
    requires: dict
    path: str = ""
    #: sentence for the decision's rationale (str.format fields: nodes, compute_nodes, fabric,
    #: dataset, dataset_tb, checkpoint_minutes, gpu).
    rationale: str = ""

    def matches(self, facts: Facts) -> bool:
        """True when every `when` condition holds (automatic choice)."""
        return all(CONDITIONS[k][0](facts, v) for k, v in self.when.items())

    def unmet(self, facts: Facts) -> list[str]:
        """What a forced template needs that this candidate lacks (empty = it fits)."""
        return [CONDITIONS[k][1](v) for k, v in self.requires.items()
                if not CONDITIONS[k][0](facts, v)]


def _parse(doc: Mapping, path: Path) -> ClusterTemplate:
    src = str(path.relative_to(TEMPLATES_DIR.parent)) if path.is_relative_to(TEMPLATES_DIR.parent) \
        else str(path)
    findings = []
    if not isinstance(doc, Mapping):
        raise ConfigError([Finding("", "a cluster template is a YAML mapping", source=src)])
    for k in REQUIRED_KEYS:
        if k not in doc:
            findings.append(Finding(k, "required key is missing", source=src))
    if doc.get("name") and doc["name"] != path.stem:
        findings.append(Finding("name", f'"{doc["name"]}" must equal the file name "{path.stem}"',
                                source=src))
    purchase = doc.get("purchase") or {}
    if purchase.get("rule") not in PURCHASE_RULES:
        findings.append(Finding("purchase.rule", f"must be one of {', '.join(PURCHASE_RULES)} "
                                f"(got {purchase.get('rule')!r})", source=src))
    if purchase.get("cache_node") not in (None, ON_DEMAND):
        findings.append(Finding("purchase.cache_node", "must be on_demand or absent", source=src))
    for section in ("when", "requires"):
        for k in (doc.get(section) or {}):
            if k not in CONDITIONS:
                findings.append(Finding(f"{section}.{k}", "unknown condition; known: "
                                        + ", ".join(sorted(CONDITIONS)), source=src))
    if findings:
        raise ConfigError(findings, headline=f"{src}: invalid cluster template:")
    return ClusterTemplate(
        name=doc["name"], order=int(doc["order"]), description=" ".join(str(doc["description"]).split()),
        node_roles=tuple(doc["node_roles"]), purchase_rule=purchase["rule"],
        cache_node=purchase.get("cache_node"), network=dict(doc["network"]),
        storage=dict(doc["storage"]), when=dict(doc["when"] or {}),
        requires=dict(doc["requires"] or {}), path=src,
        rationale=" ".join(str(doc.get("rationale", "")).split()))


@lru_cache(maxsize=4)
def _load(directory: str) -> tuple[ClusterTemplate, ...]:
    out = []
    for p in sorted(Path(directory).glob("*.yaml")):
        out.append(_parse(yaml.safe_load(p.read_text(encoding="utf-8")) or {}, p))
    return tuple(sorted(out, key=lambda t: (t.order, t.name)))


def cluster_templates(directory: Optional[Path] = None) -> tuple[ClusterTemplate, ...]:
    """Every cluster template, in the order automatic choice tries them."""
    return _load(str(directory or CLUSTER_TEMPLATES_DIR))


def load_templates() -> dict[str, dict]:
    """All cluster templates by name, as the raw YAML documents (for renderers)."""
    out = {}
    for p in sorted(CLUSTER_TEMPLATES_DIR.glob("*.yaml")):
        doc = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        out[doc.get("name", p.stem)] = doc
    return out


def template_names() -> list[str]:
    return sorted(t.name for t in cluster_templates())


def get_template(name: str) -> ClusterTemplate:
    for t in cluster_templates():
        if t.name == name:
            return t
    raise KeyError(name)


def choose_template(facts: Facts) -> ClusterTemplate:
    """The first template (by `order`) whose `when` conditions all hold."""
    for t in cluster_templates():
        if t.matches(facts):
            return t
    raise LookupError("no cluster template matches; templates/clusters needs a catch-all "
                      "(`when: {}`)")
