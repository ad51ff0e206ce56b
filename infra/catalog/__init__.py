"""The price catalog: one loader for the versioned JSON data file, and the queries on it.

Prices live here and nowhere else. Cloud code and the policy ask the catalog; fetchers in
``infra/catalog/fetchers/`` refresh the data file from the clouds' pricing APIs.
The file format is documented in README.md ("Catalog format").
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Optional

from infra.errors import CatalogError, Finding, did_you_mean
from infra.model import (CLOUDS, RDMA_KINDS, EgressPrice, InfraPrice, Offering, StoragePrice)

FORMAT = "gpulease-catalog/1"
DATA_DIR = Path(__file__).resolve().parent / "data"

#: Storage classes per tier, hot -> warm -> cold -> archive (the lifecycle order).
TIER_CLASSES: dict[str, tuple[str, str, str, str]] = {
    "aws": ("STANDARD", "STANDARD_IA", "GLACIER_IR", "DEEP_ARCHIVE"),
    "gcp": ("STANDARD", "NEARLINE", "COLDLINE", "ARCHIVE"),
}
TIER_NAMES = ("hot", "warm", "cold", "archive")

#: Columns of an offering row (also the `gpulease catalog list --json` row shape).
OFFERING_COLUMNS = (
    "cloud", "region", "instance_type", "gpu", "gpus_per_node", "gpu_memory_gb", "vcpus",
    "memory_gb", "network_gbps", "rdma", "on_demand_usd", "spot_usd", "commit_1y_usd",
    "commit_3y_usd",
)
_OPTIONAL_OFFERING = ("source", "as_of", "zones", "accelerator_type", "network_cards",
                      "efa_interfaces", "local_nvme_gb", "notes", "price_sources")
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
        for s in self.storage:
            if (s.cloud, s.region, s.storage_class) == (cloud, region, storage_class):
                return s
        raise KeyError(f"catalog {self.version} has no {cloud} {storage_class} price for {region}")

    def egress_usd_per_gb(self, from_cloud: str, from_region: str, to_cloud: str,
                          to_region: str) -> float:
        """Price of moving one GB from the dataset's home to where a cluster runs."""
        if (from_cloud, from_region) == (to_cloud, to_region):
            return 0.0
        kind = "inter_region" if from_cloud == to_cloud else "internet"
        for e in self.egress:
            if e.cloud == from_cloud and e.kind == kind:
                return e.usd_per_gb
        raise KeyError(f"catalog {self.version} has no {from_cloud} {kind} egress price")

    def infra_price(self, cloud: str, item: str) -> Optional[InfraPrice]:
        for p in self.infra:
            if p.cloud == cloud and p.item == item:
                return p
        return None

    def spot_interruptions_per_hour(self, cloud: str) -> float:
        return float(self.spot_interruptions.get(cloud, {}).get("interruptions_per_hour", 0.0))

    def rows(self, *, gpu: Optional[str] = None, cloud: Optional[str] = None) -> list[dict]:
        """Offerings as `catalog list --json` rows."""
        return [{c: getattr(o, c) for c in OFFERING_COLUMNS}
                for o in self.offerings_for(gpu=gpu, cloud=cloud)]


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


@lru_cache(maxsize=16)
def _load_cached(path: str, _mtime: int) -> Catalog:
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except json.JSONDecodeError as exc:
        raise CatalogError([Finding("catalog", f"{path}: not valid JSON (line {exc.lineno}: "
                                    f"{exc.msg}); see README 'Catalog format'")]) from None
    return parse_catalog(raw, source=path)


def parse_catalog(raw: dict, source: str = "<catalog>") -> Catalog:
    """Validate a catalog document; all problems are reported at once as a CatalogError."""
    findings: list[Finding] = []

    def bad(path: str, msg: str) -> None:
        findings.append(Finding(path, msg, source=source))

    if not isinstance(raw, dict):
        raise CatalogError([Finding("", "catalog must be a JSON object", source=source)])
    if raw.get("format") != FORMAT:
        bad("format", f'must be "{FORMAT}" (got {raw.get("format")!r})')
    for key in ("version", "as_of"):
        if not isinstance(raw.get(key), str) or not raw.get(key):
            bad(key, "required string is missing")

    offerings: list[Offering] = []
    seen: set = set()
    for i, row in enumerate(raw.get("offerings") or []):
        where = f"offerings[{i}]"
        if not isinstance(row, dict):
            bad(where, "must be an object")
            continue
        missing = [c for c in OFFERING_COLUMNS if c not in row]
        unknown = [c for c in row if c not in OFFERING_COLUMNS and c not in _OPTIONAL_OFFERING]
        if missing:
            bad(where, f"missing columns: {', '.join(missing)}")
            continue
        if unknown:
            bad(where, f"unknown columns: {', '.join(unknown)}")
        if row["cloud"] not in CLOUDS:
            bad(f"{where}.cloud", f"must be one of {', '.join(CLOUDS)} (got {row['cloud']!r})")
        if row["rdma"] not in RDMA_KINDS:
            bad(f"{where}.rdma", f"must be one of {', '.join(RDMA_KINDS)} (got {row['rdma']!r})")
        for c in _PRICE_COLUMNS:
            v = row[c]
            if v is not None and (not isinstance(v, (int, float)) or v <= 0):
                bad(f"{where}.{c}", f"must be a positive number or null (got {v!r})")
        if not isinstance(row["gpus_per_node"], int) or row["gpus_per_node"] <= 0:
            bad(f"{where}.gpus_per_node", "must be a positive integer")
        key = (row["cloud"], row["region"], row["instance_type"])
        if key in seen:
            bad(where, f"duplicate row for {'/'.join(key)}")
        seen.add(key)
        try:
            offerings.append(Offering(
                cloud=row["cloud"], region=row["region"], instance_type=row["instance_type"],
                gpu=row["gpu"], gpus_per_node=int(row["gpus_per_node"]),
                gpu_memory_gb=float(row["gpu_memory_gb"]), vcpus=int(row["vcpus"]),
                memory_gb=float(row["memory_gb"]), network_gbps=float(row["network_gbps"]),
                rdma=row["rdma"],
                **{c: (None if row[c] is None else float(row[c])) for c in _PRICE_COLUMNS},
                source=str(row.get("source", "")), as_of=str(row.get("as_of", raw.get("as_of", ""))),
                zones=tuple(row.get("zones") or ()),
                accelerator_type=row.get("accelerator_type"),
                network_cards=row.get("network_cards"), efa_interfaces=row.get("efa_interfaces"),
                local_nvme_gb=float(row.get("local_nvme_gb") or 0.0),
            ))
        except (TypeError, ValueError) as exc:
            bad(where, f"bad value: {exc}")

    storage = []
    for i, row in enumerate(raw.get("storage") or []):
        try:
            storage.append(StoragePrice(
                cloud=row["cloud"], region=row["region"], storage_class=row["storage_class"],
                usd_per_gb_month=float(row["usd_per_gb_month"]),
                min_storage_days=int(row.get("min_storage_days", 0)),
                source=str(row.get("source", ""))))
        except (KeyError, TypeError, ValueError) as exc:
            bad(f"storage[{i}]", f"bad row: {exc!r}; needs cloud, region, storage_class, "
                "usd_per_gb_month")
    egress = []
    for i, row in enumerate(raw.get("egress") or []):
        try:
            if row["kind"] not in ("inter_region", "internet"):
                bad(f"egress[{i}].kind", 'must be "inter_region" or "internet"')
            egress.append(EgressPrice(cloud=row["cloud"], kind=row["kind"],
                                      usd_per_gb=float(row["usd_per_gb"]),
                                      source=str(row.get("source", ""))))
        except (KeyError, TypeError, ValueError) as exc:
            bad(f"egress[{i}]", f"bad row: {exc!r}; needs cloud, kind, usd_per_gb")
    infra = []
    for i, row in enumerate(raw.get("infra") or []):
        try:
            infra.append(InfraPrice(cloud=row["cloud"], item=row["item"], unit=row["unit"],
                                    usd=float(row["usd"]), source=str(row.get("source", ""))))
        except (KeyError, TypeError, ValueError) as exc:
            bad(f"infra[{i}]", f"bad row: {exc!r}; needs cloud, item, unit, usd")
    if not offerings and not findings:
        bad("offerings", "the catalog has no offerings")
    if findings:
        raise CatalogError(findings, headline=f"{source}: invalid catalog (see README 'Catalog format'):")
    return Catalog(version=raw["version"], as_of=raw["as_of"], path=source,
                   offerings=tuple(offerings), storage=tuple(storage), egress=tuple(egress),
                   infra=tuple(infra), sources=dict(raw.get("sources") or {}),
                   spot_interruptions=dict(raw.get("spot_interruptions") or {}), raw=raw)


def clear_cache() -> None:
    _load_cached.cache_clear()


__all__ = ["Catalog", "load_catalog", "parse_catalog", "available_versions", "TIER_CLASSES",
           "TIER_NAMES", "OFFERING_COLUMNS", "FORMAT", "DATA_DIR", "resolve_catalog_path",
           "default_catalog_path", "clear_cache"]

