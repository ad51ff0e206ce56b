"""Cluster templates: named, cost-optimized cluster shapes stored as data in templates/clusters/."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

#: templates/ at the repository root (the package is installed editable from the checkout).
TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "templates"
CLUSTER_TEMPLATES_DIR = TEMPLATES_DIR / "clusters"


@lru_cache(maxsize=1)
def load_templates() -> dict[str, dict]:
    """All cluster templates by name (file ``templates/clusters/<name>.yaml``)."""
    out = {}
    for p in sorted(CLUSTER_TEMPLATES_DIR.glob("*.yaml")):
        doc = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        out[doc.get("name", p.stem)] = doc
    return out


def template_names() -> list[str]:
    return sorted(load_templates())
