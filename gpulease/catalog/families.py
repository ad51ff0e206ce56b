"""Per-family facts from the providers' documentation (``families.json``, beside this module):
how an instance family can be bought, its inter-node fabric, network cards / EFA interfaces and
placement.

One source of truth for the snapshot build and the SkyPilot importer; every fact cites a source
id of the file's ``sources`` map (URL, what it says, the date it was read).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from gpulease.clouds import registry
from gpulease import datafiles

FAMILIES_PATH = datafiles.package_path("catalog", "families.json")


@dataclass(frozen=True)
class FamilyFacts:
    cloud: str
    family: str
    instance_type: str
    purchase_options: tuple[str, ...]
    purchase_options_source: str
    rdma: str
    #: None = keep the row's own figure (the specification pages transcribed per type).
    network_gbps: Optional[float]
    network_cards: Optional[int]
    efa_interfaces: Optional[int]
    #: "cluster" (AWS cluster placement group), "compact" (GCP COLLOCATED policy), None.
    placement: Optional[str]
    labels_source: str


def family_of(cloud: str, instance_type: str) -> str:
    """``p5.48xlarge`` -> ``p5``; ``a3-highgpu-8g`` -> ``a3-highgpu``; ``n1-highmem-8`` -> ``n1``."""
    return registry.get(cloud).family_of(instance_type)


@lru_cache(maxsize=1)
def load_families(path: str = str(FAMILIES_PATH)) -> dict:
    """The parsed file: {"sources": {...}, "families": {(cloud, family): entry}}."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    fams = {(f["cloud"], f["family"]): f for f in doc["families"]}
    return {"sources": doc["sources"], "families": fams, "about": doc.get("about", "")}


def facts_for(cloud: str, instance_type: str) -> Optional[FamilyFacts]:
    """The documented facts of an instance type (family default + per-type override), or None
    when its family is not recorded."""
    fam = family_of(cloud, instance_type)
    entry = load_families()["families"].get((cloud, fam))
    if entry is None:
        return None
    merged = {**entry, **(entry.get("types") or {}).get(instance_type, {})}
    return FamilyFacts(
        cloud=cloud, family=fam, instance_type=instance_type,
        purchase_options=tuple(merged["purchase_options"]),
        purchase_options_source=merged["purchase_options_source"],
        rdma=merged["rdma"], network_gbps=merged.get("network_gbps"),
        network_cards=merged.get("network_cards"), efa_interfaces=merged.get("efa_interfaces"),
        placement=merged.get("placement"), labels_source=merged["labels_source"])


def family_sources() -> dict:
    """The source entries the facts cite (merged into a built catalog's ``sources``)."""
    return dict(load_families()["sources"])


__all__ = ["FamilyFacts", "facts_for", "family_of", "family_sources", "load_families",
           "FAMILIES_PATH"]
