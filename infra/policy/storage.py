"""Storage tiering estimate: share of a dataset in each storage class and its monthly cost.

Assumption (README "Cost model"): object ages are spread uniformly over ``age_horizon_days``,
so the share of data in a tier is the part of [0, horizon) its age range covers. Minimum
storage durations (30/90/180/365 days for the colder classes) are met by construction when the
thresholds are at least that long, and retrieval fees are not modelled.
"""
from __future__ import annotations

from typing import Optional

from infra.catalog import TIER_CLASSES, Catalog
from infra.errors import Finding
from infra.model import StorageDecision, StorageSpec, TierShare


def tier_bounds(spec: StorageSpec) -> list[tuple[int, int, Optional[int]]]:
    """(tier index, from_day, to_day or None) for the tiers the lifecycle uses, hot first."""
    starts = [(0, 0)] + [(i, d) for i, d in ((1, spec.warm_after_days), (2, spec.cold_after_days),
                                            (3, spec.archive_after_days)) if d is not None]
    out = []
    for k, (tier, start) in enumerate(starts):
        end = starts[k + 1][1] if k + 1 < len(starts) else None
        out.append((tier, start, end))
    return out


def storage_decision(spec: StorageSpec, catalog: Catalog, *, index: int = 0,
                     source: str = "") -> tuple[Optional[StorageDecision], list[Finding]]:
    """Tiers with their shares and monthly cost, or the findings that prevent pricing them."""
    classes = TIER_CLASSES[spec.home_cloud]
    horizon = float(spec.age_horizon_days)
    gb = spec.size_tb * 1000.0
    tiers, findings = [], []
    for tier, start, end in tier_bounds(spec):
        cls = classes[tier]
        lo = min(float(start), horizon)
        hi = horizon if end is None else min(float(end), horizon)
        share = max(hi - lo, 0.0) / horizon
        try:
            price = catalog.storage_price(spec.home_cloud, spec.home_region, cls).usd_per_gb_month
        except KeyError:
            findings.append(Finding(
                f"gpulease:storage[{index}].home",
                f"catalog {catalog.version} has no {spec.home_cloud} {cls} price for "
                f"{spec.home_region}; choose a home region the catalog prices or add the row",
                source=source))
            continue
        tiers.append(TierShare(storage_class=cls, from_day=start, to_day=end, share=share,
                               usd_per_gb_month=price, monthly_usd=gb * share * price))
    if findings:
        return None, findings
    return StorageDecision(spec=spec, cloud=spec.home_cloud, region=spec.home_region,
                           tiers=tuple(tiers)), []
