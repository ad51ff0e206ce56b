"""Catalog document -> Catalog: schema validation, cross-row rules, and the load-time warnings."""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Optional

from pydantic import ValidationError

from gpulease.catalog import TIER_CLASSES, Catalog
from gpulease.catalog.schema import (FORMAT_V2, CatalogDoc, EgressRow, InfraRow,
                                     OfferingRow, StorageRow, findings_from, row_label)
from gpulease.clouds import registry
from gpulease.errors import CatalogError, Finding
from gpulease.model import (EgressPrice, InfraPrice, Offering, PriceCheck, StoragePrice,
                            derived_purchase_options)

_PRICES = ("on_demand_usd", "spot_usd", "commit_1y_usd", "commit_3y_usd")
#: how many rows a summary warning names before "and N more".
_LISTED = 5


def _listed(items: list[str]) -> str:
    more = f" and {len(items) - _LISTED} more" if len(items) > _LISTED else ""
    return ", ".join(items[:_LISTED]) + more


def _source_text(raw: dict, sid: Optional[str]) -> str:
    """'<title> (<url>, read <date>)' of a source id for messages; the id when unknown."""
    if not sid:
        return ""
    src = (raw.get("sources") or {}).get(sid) if isinstance(raw.get("sources"), dict) else None
    if not isinstance(src, dict):
        return f"source {sid}"
    when = src.get("retrieved") or src.get("published")
    return f"{src.get('url') or sid}" + (f", read {when}" if when else "")


#: why the catalog keeps one source's figure over another (docs/catalog.md "Sources and
#: precedence"), per (cloud, price column): each cloud's ``Cloud.price_precedence``; shown by
#: `explain` beside disagreeing figures.
PRECEDENCE = {(c.name, column): why for c in registry.CLOUDS for column, why in c.price_precedence}


def _price_checks(raw: dict, r) -> tuple:
    """The row's cross-checks as PriceCheck: the figure used (its source and date) beside the
    other source's."""
    if not r.cross_checks:
        return ()
    out = []
    for c in r.cross_checks:
        used = getattr(r, f"{c.column}_usd", None)
        sid = (r.price_sources or {}).get(c.column) or r.source.split(",")[0]
        srcs = raw.get("sources") if isinstance(raw.get("sources"), dict) else {}
        dates = [(srcs.get(x) or {}).get("published") for x in (sid or "").split(",")
                 if isinstance(srcs.get(x), dict)]
        when = min((d for d in dates if isinstance(d, str)), default=None) or r.as_of
        out.append(PriceCheck(
            column=c.column, used_usd=None if used is None else float(used),
            used_source=sid or "", used_as_of=when or str(raw.get("as_of", "")),
            other_usd=float(c.usd), other_source=c.source, other_as_of=c.as_of or "",
            diff_pct=float(c.diff_pct), why=PRECEDENCE.get((r.cloud, c.column), "")))
    return tuple(out)


def validate(raw: Any, *, source: str) -> Catalog:
    errors: list[Finding] = []
    warnings: list[Finding] = []

    def warn(path: str, msg: str) -> None:
        warnings.append(Finding(path, msg, level="warning", source=source))

    if not isinstance(raw, dict):
        raise CatalogError([Finding("", f"a catalog is a JSON object (got {type(raw).__name__})",
                                    source=source)],
                           headline=f"{source}: invalid catalog (see docs/catalog.md):")
    doc = None
    try:
        doc = CatalogDoc.model_validate(raw)
    except ValidationError as exc:
        errors += findings_from(exc, prefix="", source=source)
    v2 = raw.get("format") == FORMAT_V2

    # ---- rows -----------------------------------------------------------------------------
    def rows(section: str) -> list:
        value = raw.get(section)
        return value if isinstance(value, list) else []

    offerings: list[Offering] = []
    seen: dict = {}
    priced_regions: set = set()
    for i, row in enumerate(rows("offerings")):
        label = row_label(row, "offerings")
        where = f"offerings[{i}]" + (f" ({label})" if label else "")
        try:
            r = OfferingRow.model_validate(row)
        except ValidationError as exc:
            errors += findings_from(exc, prefix=f"offerings[{i}]", source=source, label=label)
            continue
        key = (r.cloud, r.region, r.instance_type) + (
            (r.accelerator_type, r.gpus_per_node) if r.accelerator_type else ())
        if key in seen:
            errors.append(Finding(where, f"duplicate row (first at offerings[{seen[key]}])",
                                  source=source))
            continue
        seen[key] = i
        if v2 and not r.zones:
            errors.append(Finding(f"{where}.zones", "format /2 needs the zones where the type is "
                                  "offered (AWS zone IDs, GCP zone names)", source=source))
            continue
        priced_regions.add((r.cloud, r.region))
        zone_spot = tuple((z, float(r.zone_spot_usd[z])) for z in r.zones if z in r.zone_spot_usd)
        spot = r.spot_usd
        if spot is None and zone_spot:
            spot = min(u for _, u in zone_spot)
        options = (tuple(r.purchase_options) if r.purchase_options is not None else
                   derived_purchase_options(r.on_demand_usd, spot, r.commit_1y_usd,
                                            r.commit_3y_usd))
        offerings.append(Offering(
            cloud=r.cloud, region=r.region, instance_type=r.instance_type, gpu=r.gpu,
            gpus_per_node=r.gpus_per_node, gpu_memory_gb=float(r.gpu_memory_gb),
            vcpus=r.vcpus, memory_gb=float(r.memory_gb), network_gbps=float(r.network_gbps),
            rdma=r.rdma,
            on_demand_usd=None if r.on_demand_usd is None else float(r.on_demand_usd),
            spot_usd=None if spot is None else float(spot),
            commit_1y_usd=None if r.commit_1y_usd is None else float(r.commit_1y_usd),
            commit_3y_usd=None if r.commit_3y_usd is None else float(r.commit_3y_usd),
            source=r.source, as_of=r.as_of or str(raw.get("as_of", "")), zones=tuple(r.zones),
            accelerator_type=r.accelerator_type, network_cards=r.network_cards,
            efa_interfaces=r.efa_interfaces, local_nvme_gb=float(r.local_nvme_gb),
            zone_spot_usd=zone_spot, purchase_options=options,
            purchase_options_source=_source_text(raw, r.purchase_options_source),
            placement=r.placement, price_checks=_price_checks(raw, r),
            price_sources=tuple((k, v) for k, v in sorted((r.price_sources or {}).items())
                                if v)))
        # soft problems
        nulls = [c for c in _PRICES if getattr(r, c) is None]
        if nulls and not r.notes:
            warn(where, f"null {', '.join(nulls)} without a note saying why")
        if r.on_demand_usd is None and r.commit_1y_usd is None and r.commit_3y_usd is None \
                and spot is None:
            warn(where, "no price at all: the policy can never choose it")

    storage: list[StoragePrice] = []
    storage_keys: dict = {}
    no_retrieval: list[str] = []
    for i, row in enumerate(rows("storage")):
        label = row_label(row, "storage")
        try:
            r = StorageRow.model_validate(row)
        except ValidationError as exc:
            errors += findings_from(exc, prefix=f"storage[{i}]", source=source, label=label)
            continue
        key = (r.cloud, r.region, r.storage_class)
        if key in storage_keys:
            errors.append(Finding(f"storage[{i}] ({label})", "duplicate row (first at "
                                  f"storage[{storage_keys[key]}])", source=source))
            continue
        storage_keys[key] = i
        if v2 and r.retrieval_usd_per_gb is None and r.storage_class != "STANDARD":
            no_retrieval.append(f"{r.cloud}:{r.region} {r.storage_class}")
        storage.append(StoragePrice(
            cloud=r.cloud, region=r.region, storage_class=r.storage_class,
            usd_per_gb_month=float(r.usd_per_gb_month), min_storage_days=r.min_storage_days,
            source=r.source, retrieval_usd_per_gb=float(r.retrieval_usd_per_gb or 0.0),
            estimate=r.estimate))

    egress: list[EgressPrice] = []
    egress_keys: dict = {}
    for i, row in enumerate(rows("egress")):
        label = row_label(row, "egress")
        try:
            r = EgressRow.model_validate(row)
        except ValidationError as exc:
            errors += findings_from(exc, prefix=f"egress[{i}]", source=source, label=label)
            continue
        key = (r.cloud, r.region, r.kind)
        if key in egress_keys:
            errors.append(Finding(f"egress[{i}] ({label})", "duplicate row (first at "
                                  f"egress[{egress_keys[key]}])", source=source))
            continue
        egress_keys[key] = i
        egress.append(EgressPrice(cloud=r.cloud, kind=r.kind, usd_per_gb=float(r.usd_per_gb),
                                  source=r.source, region=r.region, estimate=r.estimate))

    infra: list[InfraPrice] = []
    for i, row in enumerate(rows("infra")):
        label = row_label(row, "infra")
        try:
            r = InfraRow.model_validate(row)
        except ValidationError as exc:
            errors += findings_from(exc, prefix=f"infra[{i}]", source=source, label=label)
            continue
        infra.append(InfraPrice(cloud=r.cloud, item=r.item, unit=r.unit, usd=float(r.usd),
                                source=r.source))

    # ---- cross-row rules -----------------------------------------------------------------
    by_region: dict = defaultdict(dict)
    for s in storage:
        by_region[(s.cloud, s.region)][s.storage_class] = s
    for (cloud, region), classes in sorted(by_region.items()):
        tiers = [classes[c] for c in TIER_CLASSES[cloud] if c in classes]
        prices = [t.usd_per_gb_month for t in tiers]
        if prices != sorted(prices, reverse=True):
            warn(f"storage ({cloud} {region})", "colder classes should not cost more per "
                 f"GB-month: {', '.join(f'{t.storage_class} {t.usd_per_gb_month}' for t in tiers)}")
    if v2 and not errors:
        hot = {c: TIER_CLASSES[c][0] for c in TIER_CLASSES}
        missing_storage = sorted(f"{c}:{r}" for c, r in priced_regions
                                 if hot[c] not in by_region.get((c, r), {}))
        if missing_storage:
            warn("storage", "every region with an offering should have storage prices (a "
                 "cluster there with a dataset away from home cannot be priced); no "
                 f"{'/'.join(sorted(set(hot.values())))} row for {_listed(missing_storage)}")
        missing_egress = []
        for c, r in sorted(priced_regions):
            for kinds in (("inter_region",), ("inter_cloud", "internet")):
                if not any((c, reg, k) in egress_keys for k in kinds for reg in (r, None)):
                    missing_egress.append(f"{c}:{r} {kinds[0]}")
        if missing_egress:
            warn("egress", "every region with an offering should have egress prices; missing "
                 f"{_listed(missing_egress)}")

    if errors:
        raise CatalogError(errors, headline=f"{source}: invalid catalog (see docs/catalog.md):")
    assert doc is not None
    if not v2:
        no_zones = [o for o in offerings if not o.zones]
        if no_zones:
            warn("offerings", f"{len(no_zones)} of {len(offerings)} rows record no zones "
                 "(format /1): clusters go to the region's first zone by naming convention, "
                 "which may not offer the type")
    known = set(doc.sources)
    unknown: set = set()
    for section in ("offerings", "storage", "egress", "infra"):
        for row in rows(section):
            for sid in str(row.get("source") or "").split(","):
                sid = sid.strip()
                if sid and known and sid not in known:
                    unknown.add(sid)
    if unknown:
        warn("sources", f"rows cite sources missing from the sources map: {_listed(sorted(unknown))}")
    estimates = [f"{s.cloud}:{s.region} {s.storage_class}" for s in storage if s.estimate] + \
                [f"{e.cloud}:{e.region or '*'} {e.kind}" for e in egress if e.estimate]
    if estimates:
        warn("storage/egress", f"{len(estimates)} storage/egress prices are estimates (no "
             "regional figure in any source; see each row's notes): "
             f"{_listed(estimates)}")
    if no_retrieval:
        warn("storage", f"{len(no_retrieval)} cold storage rows have no retrieval price, so "
             f"reading from them is priced as free: {_listed(no_retrieval)}")
    if doc.checksum:
        from gpulease.catalog.refresh import checksum
        if doc.checksum != checksum(raw):
            warn("checksum", "the data no longer matches the file's checksum: it was edited "
                 "after it was generated")
    return Catalog(version=doc.version, as_of=doc.as_of, path=source,
                   offerings=tuple(offerings), storage=tuple(storage), egress=tuple(egress),
                   infra=tuple(infra),
                   sources={k: v.model_dump(exclude_none=True) for k, v in doc.sources.items()},
                   spot_interruptions={k: v.model_dump() for k, v in
                                       doc.spot_interruptions.items()},
                   raw=raw, format=doc.format, warnings=tuple(warnings),
                   data_dates=dict(doc.data_dates))
