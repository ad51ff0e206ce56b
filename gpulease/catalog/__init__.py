"""The price catalog: one loader for the versioned JSON data file, and the queries on it.

Prices live here and nowhere else. Cloud code and the policy ask the catalog; fetchers in
``gpulease/catalog/fetchers/`` refresh the data file from the clouds' pricing APIs.
The file format (/1 and /2) is documented in docs/catalog.md; the schema is ``schema.py``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from gpulease import datafiles
from gpulease.clouds import registry
from gpulease.errors import CatalogError, Finding, did_you_mean
from gpulease.model import EgressPrice, InfraPrice, Offering, StoragePrice

#: format of the 2026.12.02 snapshot (no zones); tests and old files use it.
FORMAT = "gpulease-catalog/1"
#: format written by the build script, `catalog import` and `catalog refresh` from 2026.12.03 on.
FORMAT_V2 = "gpulease-catalog/2"
DATA_DIR = datafiles.package_path("catalog", "data")

#: Storage classes per tier, hot -> warm -> cold -> archive (the lifecycle order), per cloud
#: (``Cloud.tier_classes``).
TIER_CLASSES: dict[str, tuple[str, str, str, str]] = {c.name: c.tier_classes
                                                      for c in registry.CLOUDS}
TIER_NAMES = ("hot", "warm", "cold", "archive")
#: Earliest age (days) a lifecycle rule may move an object into a class (``Cloud.
#: min_transition_days``, e.g. S3's day 30 for STANDARD_IA / ONEZONE_IA); every other transition
#: from day 1 (the stack's keys are > 0). Minimum storage durations (early deletion) are per
#: storage row, ``min_storage_days``.
MIN_TRANSITION_DAYS: dict[tuple[str, str], int] = {
    (c.name, cls): days for c in registry.CLOUDS for cls, days in c.min_transition_days}
#: Billable infrastructure priced per hour by the catalog's `infra` rows: Pulumi resource type
#: -> (cloud, item) of its row (the cost of each such resource, and the prices a plan used); the
#: cloud is the one whose provider the type token names.
HOURLY_INFRA: dict[str, tuple[str, str]] = {
    t: (registry.by_provider(t.split(":", 1)[0]).name, item) for t, item in {
        "aws:ec2/natGateway:NatGateway": "nat_gateway_hour",
        "gcp:compute/routerNat:RouterNat": "cloud_nat_gateway_hour",
    }.items()}

#: Columns of an offering row (also the `gpulease catalog list --json` row shape).
OFFERING_COLUMNS = (
    "cloud", "region", "instance_type", "gpu", "gpus_per_node", "gpu_memory_gb", "vcpus",
    "memory_gb", "network_gbps", "rdma", "on_demand_usd", "spot_usd", "commit_1y_usd",
    "commit_3y_usd", "zones", "zone_spot_usd", "purchase_options",
)
_PRICE_COLUMNS = ("on_demand_usd", "spot_usd", "commit_1y_usd", "commit_3y_usd")


@dataclass(frozen=True)
class Catalog:
    version: str
    as_of: str
    path: str
    offerings: tuple[Offering, ...]
    storage: tuple[StoragePrice, ...]
    egress: tuple[EgressPrice, ...]
    infra: tuple[InfraPrice, ...] = ()
    sources: dict = field(default_factory=dict)
    #: per cloud: {"interruptions_per_hour": float, "source": str}
    spot_interruptions: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict, compare=False, repr=False)
    format: str = FORMAT
    #: soft problems found at load (``Finding`` with level "warning"), shown by `plan`.
    warnings: tuple = ()
    #: when the data was published, per source kind ({"aws_on_demand": "2025-11-30", ...}).
    data_dates: dict = field(default_factory=dict)

    # ---- queries ------------------------------------------------------------------------
    def offerings_for(self, *, gpu: Optional[str] = None, cloud: Optional[str] = None,
                      region: Optional[str] = None) -> list[Offering]:
        return [o for o in self.offerings
                if (gpu is None or o.gpu == gpu) and (cloud is None or o.cloud == cloud)
                and (region is None or o.region == region)]

    def offering(self, cloud: str, region: str, instance_type: str) -> Offering:
        for o in self.offerings:
            if o.key == (cloud, region, instance_type):
                return o
        raise KeyError((cloud, region, instance_type))

    @property
    def gpus(self) -> list[str]:
        return sorted({o.gpu for o in self.offerings})

    def regions(self, cloud: Optional[str] = None) -> list[str]:
        return sorted({o.region for o in self.offerings if cloud is None or o.cloud == cloud}
                      | {s.region for s in self.storage if cloud is None or s.cloud == cloud})

    def instance_types(self, cloud: Optional[str] = None) -> list[str]:
        return sorted({o.instance_type for o in self.offerings if cloud is None or o.cloud == cloud})

    def storage_price(self, cloud: str, region: str, storage_class: str) -> StoragePrice:
        idx = self.__dict__.get("_storage_idx")
        if idx is None:
            idx = {(s.cloud, s.region, s.storage_class): s for s in self.storage}
            object.__setattr__(self, "_storage_idx", idx)
        hit = idx.get((cloud, region, storage_class))
        if hit is not None:
            return hit
        raise KeyError(f"catalog {self.version} has no {cloud} {storage_class} price for {region}")

    def egress_usd_per_gb(self, from_cloud: str, from_region: str, to_cloud: str,
                          to_region: str) -> float:
        """Price of moving one GB from the dataset's home to where a cluster runs.

        Same cloud: ``inter_region`` (``inter_continent`` first when the regions are on
        different continents and the catalog prices it); other cloud: ``inter_cloud``, else
        ``internet`` (traffic between clouds leaves over the internet). A row for the source
        region wins over the cloud-wide row (``region`` null).
        """
        row = self.egress_price(from_cloud, from_region, to_cloud, to_region)
        return 0.0 if row is None else row.usd_per_gb

    def egress_price(self, from_cloud: str, from_region: str, to_cloud: str,
                     to_region: str) -> Optional[EgressPrice]:
        """The egress row :meth:`egress_usd_per_gb` prices with (None: same region, free);
        KeyError when the catalog has none."""
        if (from_cloud, from_region) == (to_cloud, to_region):
            return None
        if from_cloud == to_cloud:
            kinds = (["inter_continent"] if continent_of(from_cloud, from_region)
                     != continent_of(to_cloud, to_region) else []) + ["inter_region"]
        else:
            kinds = ["inter_cloud", "internet"]
        index = self._egress_index()
        for kind in kinds:
            for region in (from_region, None):
                hit = index.get((from_cloud, region, kind))
                if hit is not None:
                    return hit
        raise KeyError(f"catalog {self.version} has no {from_cloud} {kinds[-1]} egress price "
                       f"for {from_region}")

    def _egress_index(self) -> dict:
        idx = self.__dict__.get("_egress_idx")
        if idx is None:
            idx = {(e.cloud, e.region, e.kind): e for e in self.egress}
            object.__setattr__(self, "_egress_idx", idx)
        return idx

    def storage_prices(self, cloud: str, region: str) -> dict:
        """storage class -> StoragePrice for one region."""
        return {s.storage_class: s for s in self.storage if (s.cloud, s.region) == (cloud, region)}

    def infra_price(self, cloud: str, item: str) -> Optional[InfraPrice]:
        for p in self.infra:
            if p.cloud == cloud and p.item == item:
                return p
        return None

    def spot_interruptions_per_hour(self, cloud: str) -> float:
        return float(self.spot_interruptions.get(cloud, {}).get("interruptions_per_hour", 0.0))

    def rows(self, *, gpu: Optional[str] = None, cloud: Optional[str] = None) -> list[dict]:
        """Offerings as `catalog list --json` rows."""
        out = []
        for o in self.offerings_for(gpu=gpu, cloud=cloud):
            row = {c: getattr(o, c) for c in OFFERING_COLUMNS}   # purchase_options: below
            row["zones"] = list(o.zones)
            row["zone_spot_usd"] = dict(o.zone_spot_usd)
            row["purchase_options"] = list(o.options)
            out.append(row)
        return out


# ---- loading ----------------------------------------------------------------------------------
def available_versions(data_dir: Optional[Path] = None) -> list[str]:
    """Versions of the shipped catalog files, oldest first (file name = ``<version>.json``)."""
    return sorted(p.stem for p in (data_dir or DATA_DIR).glob("*.json"))


def default_catalog_path() -> Path:
    env = os.environ.get("GPULEASE_CATALOG")
    if env:
        return Path(env)
    versions = available_versions()
    if not versions:
        raise CatalogError([Finding("catalog", f"no catalog file in {DATA_DIR}")])
    return DATA_DIR / f"{versions[-1]}.json"


def resolve_catalog_path(path: Optional[str] = None, version: Optional[str] = None) -> Path:
    if path and version:
        raise CatalogError([Finding("--catalog-version", "give either --catalog PATH or "
                                    "--catalog-version V, not both")])
    if path:
        return Path(path)
    if version:
        versions = available_versions()
        if version not in versions:
            raise CatalogError([Finding(
                "catalog_version",
                f'unknown catalog version "{version}"{did_you_mean(version, versions)}; '
                f"shipped versions: {', '.join(versions) or 'none'}")])
        return DATA_DIR / f"{version}.json"
    return default_catalog_path()


def load_catalog(path: Optional[str] = None, version: Optional[str] = None) -> Catalog:
    p = resolve_catalog_path(path, version).resolve()
    try:
        stat = p.stat()
    except OSError as exc:
        raise CatalogError([Finding("catalog", f"cannot read {p}: {exc.strerror}; pass an "
                                    "existing file with --catalog PATH")], ) from None
    return _load_cached(str(p), stat.st_mtime_ns)


def read_document(path: str) -> dict:
    """The JSON document of a catalog file, read through the input boundary (gpulease/inputs.py:
    size, UTF-8, strict JSON, depth, finite numbers); problems are located errors (exit 2)."""
    from gpulease import inputs

    return inputs.load_json(path, error=CatalogError, field="catalog", what="catalog",
                            hint="; see docs/catalog.md 'File format', or pass another --catalog")


@lru_cache(maxsize=16)
def _load_cached(path: str, _mtime: int) -> Catalog:
    from gpulease.catalog.validate import validate

    # read_document walked the document through the input boundary's limits already:
    # parse_catalog would walk it again (a tenth of `catalog list`)
    return validate(read_document(path), source=path)


def continent_of(cloud: str, region: str) -> str:
    """Continent of a region, from the providers' naming (for inter-continent egress)."""
    return registry.get(cloud).continent_of(region)


def parse_catalog(raw: Any, source: str = "<catalog>") -> Catalog:
    """Validate a catalog document (format /1 or /2) against the schema in ``schema.py``.

    All errors are reported at once as a CatalogError; soft problems become
    ``Catalog.warnings``.
    """
    from gpulease import inputs
    from gpulease.catalog.validate import validate

    # a document built in memory (an import) meets the same limits as a file
    inputs.check_tree(raw, source=source, error=CatalogError,
                      headline=f"{source}: invalid catalog (see docs/catalog.md):")
    return validate(raw, source=source)


def clear_cache() -> None:
    _load_cached.cache_clear()


__all__ = ["Catalog", "load_catalog", "parse_catalog", "available_versions", "TIER_CLASSES",
           "TIER_NAMES", "MIN_TRANSITION_DAYS", "OFFERING_COLUMNS", "FORMAT", "FORMAT_V2", "DATA_DIR",
           "resolve_catalog_path", "default_catalog_path", "clear_cache", "read_document",
           "continent_of"]

