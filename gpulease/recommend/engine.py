"""One `gpulease recommend` run: each cluster's GPU use where the plan puts it -> profile -> saving.

Cloud-neutral: the reaper's adaptors (``gpulease.reaper.aws`` / ``gpulease.reaper.gcp``, the one place
SDK clients are created and errors translated, with their retries) read the series; this module
derives and prices. A cloud failure costs the clusters read through that adaptor, never the
others, and never escapes as a traceback.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from gpulease.clouds import registry
from gpulease.errors import CloudError, GpuleaseError
from gpulease.recommend import profile as pf
from gpulease.recommend.saving import Profile, saving_usd


METRICS, BILL = "metrics", "bill"


@dataclass
class ClusterResult:
    name: str
    cloud: str
    region: str
    window_days: int
    samples: int = 0
    observed: dict = field(default_factory=dict)
    profile: tuple = ()
    current: dict = field(default_factory=dict)
    yaml: str = ""
    #: monthly saving of the profile's plan against the current plan (None: not computed).
    saving_usd: Optional[float] = None
    saving_note: str = ""
    #: why the profile is empty ("no-data" / "idle" kinds).
    note: str = ""
    kind: str = "profile"
    #: a cloud failure: nothing was derived for this cluster.
    error: Optional[str] = None
    #: where the demand was read: "metrics" (GPU utilization) or "bill" (billed node-hours).
    source: str = METRICS

    def as_json(self) -> dict:
        return {"name": self.name, "cloud": self.cloud, "region": self.region,
                "window_days": self.window_days, "samples": self.samples,
                "observed": self.observed, "profile": [s.as_dict() for s in self.profile],
                "current": self.current, "yaml": self.yaml, "saving_usd": self.saving_usd,
                "saving_note": self.saving_note, "kind": self.kind, "note": self.note,
                "error": self.error, "source": self.source}


@dataclass
class Report:
    stack: str
    environment: str
    window_days: int
    clusters: list = field(default_factory=list)
    source: str = METRICS
    #: the billed month read (source "bill").
    month: Optional[str] = None

    @property
    def failed(self) -> list:
        return [c for c in self.clusters if c.error]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def as_json(self) -> dict:
        return {"stack": self.stack, "environment": self.environment,
                "window_days": self.window_days, "source": self.source, "month": self.month,
                "clusters": [c.as_json() for c in self.clusters]}


def window(now: float, days: int) -> tuple[float, float]:
    """``[start, end)``: ``days`` whole days ending at the last full hour before ``now``."""
    end = math.floor(now / pf.PERIOD_S) * pf.PERIOD_S
    return end - days * 86400, end


def location(decision, spec) -> tuple[str, str]:
    """Where a decided cluster's metrics are read: (aws, region) or (gcp, project)."""
    cloud = registry.get(decision.cloud)
    return cloud.name, cloud.location(region=decision.region,
                                      cloud_spec=spec.clouds.get(cloud.name))


def _num(x: float) -> str:
    return f"{x:g}"


def current_of(cluster) -> dict:
    out = {"gpus": cluster.gpus, "hours_per_month": cluster.hours_per_month}
    if cluster.demand:
        out["demand"] = [s.as_dict() for s in cluster.demand]
    return out


def _replaces(current: dict) -> str:
    if current.get("demand"):
        return "the current demand"
    return f"gpus: {current['gpus']} and hours_per_month: {_num(current['hours_per_month'])}"


def run(spec, catalog, decision, adaptors: Mapping[tuple, Any], *, now: float,
        window_days: int = pf.DEFAULT_WINDOW_DAYS, threshold_pct: float = 5.0,
        max_steps: int = pf.DEFAULT_MAX_STEPS, percentile: float = pf.BASELINE_PERCENTILE,
        progress: Optional[Callable[[str], None]] = None) -> Report:
    """Recommend a demand profile for every cluster of ``spec`` (decided in ``decision``).

    ``adaptors``: ``{("aws", region) | ("gcp", project): adaptor}`` for every location the plan
    uses; an adaptor's ``usage(environment, clusters, start, end, period_s)`` answers
    ``{cluster: {instance id: ((period start, max %), ...)}}``.
    """
    say = progress or (lambda _m: None)
    start, end = window(now, window_days)
    report = Report(stack=spec.stack, environment=spec.environment, window_days=window_days)
    by_place: dict[tuple, list] = {}
    for d in decision.clusters:
        by_place.setdefault(location(d, spec), []).append(d)
    read: dict[tuple, tuple[Optional[dict], Optional[str]]] = {}
    for place, ds in sorted(by_place.items()):
        ad = adaptors.get(place)
        names = [d.name for d in ds]
        say(f"reading {window_days} days of GPU utilization of {', '.join(names)} "
            f"in {place[0]}:{place[1]}")
        if ad is None:
            read[place] = (None, f"no {place[0]} client for {place[1]}")
            continue
        try:
            read[place] = (ad.usage(spec.environment, names, start, end, pf.PERIOD_S), None)
        except CloudError as exc:
            read[place] = (None, str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug must not cost the other clouds
            read[place] = (None, f"internal error {type(exc).__name__}: {exc} (a gpulease bug: "
                                 "please report it)")
    for d in decision.clusters:
        place = location(d, spec)
        usage, err = read[place]
        res = ClusterResult(name=d.name, cloud=place[0], region=d.region,
                            window_days=window_days, current=current_of(d.spec))
        report.clusters.append(res)
        if err is not None:
            res.error = err
            continue
        der = pf.derive((usage or {}).get(d.name, {}), start=start, end=end,
                        gpus_per_node=int(d.offering.gpus_per_node),
                        threshold_pct=threshold_pct, percentile=percentile,
                        max_steps=max_steps)
        _finish(res, der, spec, catalog, decision, say)
    return report


def _finish(res: ClusterResult, der: pf.Derivation, spec, catalog, decision,
            say: Callable[[str], None]) -> None:
    """The derivation into the result: its figures, the YAML to paste, the monthly saving."""
    res.samples, res.observed, res.profile = der.samples, der.observed, der.profile
    res.kind, res.note = der.kind, der.note
    res.yaml = pf.render_yaml(res.name, der, replaces=_replaces(res.current))
    if der.kind == "no-data":
        res.saving_note = "no data: no saving computed"
        return
    say(f"pricing the {res.name} profile against the current plan")
    try:
        res.saving_usd = saving_usd(spec, catalog, Profile(res.name, der.profile),
                                    current=decision)
        if der.kind == "idle":
            res.saving_note = "the saving of removing the cluster"
    except GpuleaseError as exc:
        first = getattr(exc, "findings", None)
        res.saving_note = ("the profile's plan is infeasible: "
                           + (str(first[0]) if first else str(exc)))


def run_from_bill(spec, catalog, decision, usage, *, max_steps: int = pf.DEFAULT_MAX_STEPS,
                  percentile: float = pf.BASELINE_PERCENTILE,
                  progress: Optional[Callable[[str], None]] = None) -> Report:
    """Recommend a demand profile for every cluster of ``spec`` from a billed month.

    ``usage``: what gpulease.spend.usage.read answers - ``month``, ``start``, ``end`` and
    ``clusters`` ``{cluster: (nodes per hour, resources, lines)}`` (attributes ``nodes``,
    ``resources``, ``lines``); a cluster absent from it billed no compute that month (idle).
    """
    say = progress or (lambda _m: None)
    start, end = usage.start.timestamp(), usage.end.timestamp()
    days = int(round((end - start) / 86400))
    report = Report(stack=spec.stack, environment=spec.environment, window_days=days,
                    source=BILL, month=usage.month)
    for d in decision.clusters:
        place = location(d, spec)
        res = ClusterResult(name=d.name, cloud=place[0], region=d.region, window_days=days,
                            current=current_of(d.spec), source=BILL)
        report.clusters.append(res)
        got = usage.clusters.get(d.name)
        hours = int(round((end - start) / pf.PERIOD_S))
        der = pf.derive_running(got.nodes if got else (0,) * hours, start=start, end=end,
                                gpus_per_node=int(d.offering.gpus_per_node),
                                instances=got.resources if got else 0,
                                lines=got.lines if got else 0, percentile=percentile,
                                max_steps=max_steps)
        _finish(res, der, spec, catalog, decision, say)
    return report
