"""Storage tiering: the lifecycle a dataset gets, with storage, retrieval and early-deletion costs.

Model (docs/policy.md "Storage"), for a dataset of G GB whose object ages are spread uniformly
over a horizon of H days (a rolling corpus: objects older than H are replaced, so they leave
the last tier at age H):

  share(tier)      = |[from, to) ∩ [0, H)| / H
  storage_usd      = G * Σ share(tier) * price(tier)
  retrieval_usd    = reads * G * Σ share(tier) * retrieval(tier)      (reads = whole-dataset reads
                     a month: every cluster that uses the dataset reads it once a month, be it the
                     monthly staged copy of a cluster away from home or direct reads at home)
  early_delete_usd = G * Σ price(tier) * max(0, min_days(tier) - stay(tier)) / H
                     (objects leave a tier after stay = to - from days, or at H; a class with a
                     minimum storage duration bills the remaining days: S3 prorates the
                     remainder, GCS bills it as if stored for the minimum)

The policy prices the stack's lifecycle and every shallower one (the same thresholds, cut after
hot, warm or cold) and keeps the cheapest: a dataset read every month stays where reading is
cheap. ``StorageDecision.lifecycle`` is what the components turn into bucket lifecycle rules.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from infra.catalog import TIER_CLASSES, Catalog
from infra.errors import Finding
from infra.model import StorageDecision, StorageSpec, TierShare
from infra.text import plural

_TIER_KEYS = ("warm_after_days", "cold_after_days", "archive_after_days")


def tier_bounds(spec: StorageSpec) -> list[tuple[int, int, Optional[int]]]:
    """(tier index, from_day, to_day or None) for the tiers the lifecycle uses, hot first."""
    starts = [(0, 0)] + [(i, d) for i, d in ((1, spec.warm_after_days), (2, spec.cold_after_days),
                                            (3, spec.archive_after_days)) if d is not None]
    out = []
    for k, (tier, start) in enumerate(starts):
        end = starts[k + 1][1] if k + 1 < len(starts) else None
        out.append((tier, start, end))
    return out


def shallower(spec: StorageSpec) -> list[StorageSpec]:
    """The stack's lifecycle, then the same thresholds cut after each colder tier it uses."""
    out = [spec]
    used = [k for k in _TIER_KEYS if getattr(spec, k) is not None]
    for n in range(len(used) - 1, -1, -1):
        cut = dataclasses.replace(spec, **{k: None for k in used[n:]})
        out.append(cut)
    return out


@dataclasses.dataclass(frozen=True)
class LifecycleCost:
    spec: StorageSpec
    tiers: tuple[TierShare, ...]
    retrieval_usd: float
    early_delete_usd: float

    @property
    def storage_usd(self) -> float:
        return sum(t.monthly_usd for t in self.tiers)

    @property
    def total(self) -> float:
        return self.storage_usd + self.retrieval_usd + self.early_delete_usd


def lifecycle_cost(spec: StorageSpec, prices: dict, *, reads_per_month: float) -> LifecycleCost:
    """Monthly cost of one lifecycle (``prices``: storage class -> StoragePrice)."""
    classes = TIER_CLASSES[spec.home_cloud]
    horizon = float(spec.age_horizon_days)
    gb = spec.size_tb * 1000.0
    tiers, retrieval, early = [], 0.0, 0.0
    for tier, start, end in tier_bounds(spec):
        p = prices[classes[tier]]
        lo = min(float(start), horizon)
        hi = horizon if end is None else min(float(end), horizon)
        share = max(hi - lo, 0.0) / horizon
        tiers.append(TierShare(storage_class=p.storage_class, from_day=start, to_day=end,
                               share=share, usd_per_gb_month=p.usd_per_gb_month,
                               monthly_usd=gb * share * p.usd_per_gb_month))
        retrieval += reads_per_month * gb * share * p.retrieval_usd_per_gb
        if share > 0 and p.min_storage_days:
            stay = hi - lo
            early += gb * p.usd_per_gb_month * max(0.0, p.min_storage_days - stay) / horizon
    return LifecycleCost(spec=spec, tiers=tuple(tiers), retrieval_usd=retrieval,
                         early_delete_usd=early)


def storage_decision(spec: StorageSpec, catalog: Catalog, *, index: int = 0, source: str = "",
                     reads_per_month: float = 0.0
                     ) -> tuple[Optional[StorageDecision], list[Finding]]:
    """The cheapest lifecycle (the stack's or a shallower one) and its monthly cost, or the
    findings that prevent pricing it."""
    classes = TIER_CLASSES[spec.home_cloud]
    prices = catalog.storage_prices(spec.home_cloud, spec.home_region)
    needed = [classes[t] for t, _, _ in tier_bounds(spec)]
    missing = [c for c in needed if c not in prices]
    if missing:
        return None, [Finding(
            f"gpulease:storage[{index}].home",
            f"catalog {catalog.version} has no {spec.home_cloud} {', '.join(missing)} price for "
            f"{spec.home_region}; choose a home region the catalog prices or add the rows",
            source=source)]
    options = [lifecycle_cost(s, prices, reads_per_month=reads_per_month)
               for s in shallower(spec)]
    # cheapest; on a tie the stack's own (deeper) lifecycle, which comes first
    best = min(options, key=lambda o: round(o.total, 6))
    configured = options[0]
    if best is configured:
        basis = (f"the configured lifecycle is the cheapest of {len(options)} priced"
                 if len(options) > 1 else "no colder tier configured")
    else:
        last = best.tiers[-1].storage_class
        basis = (f"kept at {last} and warmer: {plural(reads_per_month, 'whole-dataset read')} a month "
                 f"make the configured lifecycle cost ${configured.total:,.2f}/month "
                 f"(retrieval ${configured.retrieval_usd:,.2f}, early deletion "
                 f"${configured.early_delete_usd:,.2f}) against ${best.total:,.2f}")
    return StorageDecision(spec=spec, cloud=spec.home_cloud, region=spec.home_region,
                           tiers=best.tiers, chosen=best.spec if best is not configured else None,
                           reads_per_month=reads_per_month, retrieval_usd=best.retrieval_usd,
                           early_delete_usd=best.early_delete_usd, basis=basis), []
