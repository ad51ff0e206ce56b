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

The policy searches the lifecycles over the catalog's tiers and keeps the cheapest: every subset
of the colder tiers (warm, cold, archive: each may be skipped) with transition days from
``CANDIDATE_DAYS``, the stack's own days and each class's minimum storage duration, increasing,
never before a class's documented earliest transition (``MIN_TRANSITION_DAYS``: S3 Standard-IA
from day 30) - retrieval and early deletion charged for the reads declared. A dataset read every
month stays where reading is cheap; one never read goes as cold as early as it pays. Ties go to
the stack's own lifecycle, then to fewer tiers and later transitions. ``StorageDecision`` keeps
the configured lifecycle's cost beside the chosen one (``configured_usd``), which `explain`
shows; ``lifecycle`` is what the components turn into bucket lifecycle rules.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Optional

from gpulease import money
from gpulease.catalog import MIN_TRANSITION_DAYS, TIER_CLASSES, Catalog
from gpulease.clouds import registry
from gpulease.errors import Finding
from gpulease.model import StorageDecision, StorageSpec, TierShare
from gpulease.text import plural

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


#: Transition days the lifecycle search tries, besides the stack's own and each class's
#: minimum storage duration (days after which a transition costs no early deletion).
CANDIDATE_DAYS = (1, 30, 60, 90, 120, 180, 270, 365, 540, 730, 1095)


#: Classes whose objects must be restored (hours) before anything can read them (S3 Glacier
#: Flexible Retrieval and Deep Archive; GCS Archive stays online): the search uses them only for
#: a dataset no cluster reads.
RESTORE_CLASSES = frozenset((c.name, cls) for c in registry.CLOUDS for cls in c.restore_classes)


def candidate_lifecycles(spec: StorageSpec, prices: dict, *,
                         reads_per_month: float = 0.0) -> list[StorageSpec]:
    """Every lifecycle the search prices: the stack's first, then each subset of the colder
    tiers with increasing transition days from the candidate set, no transition earlier than
    the class allows (``MIN_TRANSITION_DAYS``), none past the age horizon (a tier no object
    reaches is the same as no tier) and, for a dataset that is read, no class that needs a
    restore before reading (``RESTORE_CLASSES``)."""
    cloud = spec.home_cloud
    classes = TIER_CLASSES[cloud]
    days = set(CANDIDATE_DAYS) | {d for d in (spec.warm_after_days, spec.cold_after_days,
                                             spec.archive_after_days) if d is not None}
    days |= {p.min_storage_days for p in prices.values() if p.min_storage_days}
    days = sorted(d for d in days if 0 < d < spec.age_horizon_days)
    out = [spec]
    seen = {(spec.warm_after_days, spec.cold_after_days, spec.archive_after_days)}
    for mask in range(8):
        tiers = [t for t in (1, 2, 3) if mask >> (t - 1) & 1]
        if any(classes[t] not in prices or (reads_per_month > 0 and (cloud, classes[t])
                                            in RESTORE_CLASSES) for t in tiers):
            continue
        allowed = [[d for d in days if d >= MIN_TRANSITION_DAYS.get((cloud, classes[t]), 1)]
                   for t in tiers]
        for combo in itertools.product(*allowed):
            if any(b <= a for a, b in zip(combo, combo[1:])):
                continue
            keys = dict(zip(tiers, combo))
            key = (keys.get(1), keys.get(2), keys.get(3))
            if key in seen:
                continue
            seen.add(key)
            out.append(dataclasses.replace(spec, warm_after_days=key[0], cold_after_days=key[1],
                                           archive_after_days=key[2]))
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
               for s in candidate_lifecycles(spec, prices, reads_per_month=reads_per_month)]
    # cheapest (to the cent); ties: the stack's own (first), then fewer tiers, later transitions
    best = min(options, key=lambda o: (round(o.total, 2), o is not options[0], len(o.tiers),
                                       [-(t.from_day or 0) for t in o.tiers]))
    configured = options[0]
    if best is configured:
        basis = f"the configured lifecycle is the cheapest of {len(options)} priced"
    else:
        steps = ", ".join(f"{t.storage_class} from day {t.from_day}" for t in best.tiers[1:])
        basis = (f"{'STANDARD only' if len(best.tiers) == 1 else 'STANDARD, then ' + steps}: "
                 f"the cheapest of {len(options)} lifecycles over the catalog's tiers with "
                 f"{plural(reads_per_month, 'whole-dataset read')} a month, "
                 f"{money.fmt(best.total)}/month against {money.fmt(configured.total)} for "
                 f"the configured one (retrieval {money.fmt(configured.retrieval_usd)}, early "
                 f"deletion {money.fmt(configured.early_delete_usd)})")
    return StorageDecision(spec=spec, cloud=spec.home_cloud, region=spec.home_region,
                           tiers=best.tiers, chosen=best.spec if best is not configured else None,
                           reads_per_month=reads_per_month, retrieval_usd=best.retrieval_usd,
                           early_delete_usd=best.early_delete_usd, basis=basis,
                           configured_usd=configured.total), []
