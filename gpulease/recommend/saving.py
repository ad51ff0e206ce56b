"""The monthly saving of a recommended profile: the policy re-run with the cluster's new demand."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from gpulease.recommend.profile import Step

if TYPE_CHECKING:  # the policy and the catalog load only when a saving is computed
    from gpulease.catalog import Catalog
    from gpulease.model import EnvironmentDecision, StackSpec


@dataclass(frozen=True)
class Profile:
    """A cluster's recommended demand: ``steps`` empty = no demand seen (the cluster could go)."""

    cluster: str
    steps: tuple[Step, ...]


def with_profile(spec: "StackSpec", profile: Profile) -> "StackSpec":
    """The stack with the cluster's demand replaced by ``profile``, exactly as the config reader
    builds a cluster from a ``demand`` list (gpus = the last step's, hours_per_month = the
    first step's); no steps = the cluster removed."""
    from gpulease.model import DemandStep

    names = [c.name for c in spec.clusters]
    if profile.cluster not in names:
        raise KeyError(f"no cluster {profile.cluster!r} in {spec.source or spec.stack}")
    clusters = []
    for c in spec.clusters:
        if c.name != profile.cluster:
            clusters.append(c)
            continue
        steps = profile.steps
        if not steps:
            continue
        demand = tuple(DemandStep(s.gpus, s.hours_per_month) for s in steps)
        clusters.append(dataclasses.replace(c, gpus=steps[-1].gpus,
                                            hours_per_month=steps[0].hours_per_month,
                                            demand=demand if len(demand) > 1 else ()))
    return dataclasses.replace(spec, clusters=tuple(clusters))


def saving_usd(spec: "StackSpec", catalog: "Catalog", profile: Profile, *,
               current: Optional["EnvironmentDecision"] = None) -> float:
    """Monthly saving (USD, positive = cheaper) of the environment's plan with the cluster's
    demand replaced by ``profile``, against its current plan: ``gpulease.policy.decide`` runs on
    both, so quotas, the budget and every other cluster are weighed as in `gpulease plan`.

    Raises ``PolicyError`` when either plan is infeasible.
    """
    from gpulease.policy import decide

    before = current if current is not None else decide(spec, catalog)
    after = decide(with_profile(spec, profile), catalog)
    return round(round(before.monthly_usd, 2) - round(after.monthly_usd, 2), 2)


def apply_to_values(values: dict, profile: Profile) -> dict:
    """The raw stack ``config:`` mapping with the cluster's entry changed as the printed YAML
    says (``demand`` replaces ``gpus`` and ``hours_per_month``; no steps: the entry removed)."""
    out = dict(values)
    key = "gpulease:clusters"
    entries: Sequence = out.get(key) or []
    new = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("name") != profile.cluster:
            new.append(entry)
            continue
        if not profile.steps:
            continue
        rest = {k: v for k, v in entry.items() if k not in ("gpus", "hours_per_month", "demand")}
        rest["demand"] = [s.as_dict() for s in profile.steps]
        new.append(rest)
    out[key] = new
    return out
