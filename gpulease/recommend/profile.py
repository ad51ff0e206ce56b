"""Demand profile from observed GPU use: busy nodes per hour -> load-duration curve -> a few steps.

Pure (no cloud SDK, pydantic or Pulumi): the adaptors read the series, this module turns them into
the ``demand`` steps of ``gpulease:clusters`` (docs/recommend.md has the formulas and a worked
example). Times are epoch seconds (UTC); a series is ``((period start, max GPU %), ...)`` per
instance, one point per hour.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from gpulease.clock import format_utc
from gpulease.model import HOURS_PER_MONTH, DemandStep

#: the aggregation period: one hour. A 30-day window then needs 720 points per instance, and
#: CloudWatch answers it from any retention tier (60-s data lasts 15 days, 5-min 63 days, 1-h 455
#: days; an older start needs a period that is a multiple of 300 / 3600 s: GetMetricData API
#: reference, Period).
PERIOD_S = 3600
DEFAULT_WINDOW_DAYS = 30
#: the longest window: Cloud Monitoring keeps time-series points for six weeks (the documented
#: floor; "Quotas and limits", Data retention) and Auto Scaling keeps scaling activities - how
#: burst nodes terminated more than two weeks ago are found on AWS - for six weeks.
MAX_WINDOW_DAYS = 42
#: the baseline is the busy-GPU level met in at least (100 - this) % of the observed hours.
BASELINE_PERCENTILE = 10
#: steps of the recommended profile (baseline included): "a few" a person can read.
DEFAULT_MAX_STEPS = 4


#: a recommended step is the config's step: at least ``gpus`` GPUs busy ``hours_per_month``.
Step = DemandStep


@dataclass(frozen=True)
class Hourly:
    """Nodes per hour of the window (index 0 = the hour starting at ``start``)."""

    start: float
    #: nodes whose maximum GPU utilization in the hour reached the threshold.
    busy: tuple[int, ...]
    #: nodes with at least one usable sample in the hour.
    present: tuple[int, ...]
    #: (instance, hour) samples used.
    samples: int
    #: instances with at least one usable sample.
    instances: int


@dataclass(frozen=True)
class Derivation:
    """What :func:`derive` found: the profile, the figures behind it, and why it is empty."""

    profile: tuple[Step, ...]
    observed: dict
    samples: int
    #: set when the profile is empty: "no data" or "idle" and why.
    note: str = ""
    #: "profile" | "idle" | "no-data".
    kind: str = "profile"
    extra: dict = field(default_factory=dict)


def _usable(v: object) -> bool:
    # NaN/inf/negative utilization is garbage, not "idle" (the reaper's rule too).
    return isinstance(v, (int, float)) and math.isfinite(v) and v >= 0


def hourly(series: Mapping[str, Sequence[tuple[float, float]]], *, start: float, hours: int,
           threshold_pct: float) -> Hourly:
    """Busy and reporting nodes per hour: a node is busy in an hour when the maximum of its
    GPU-utilization samples in that hour (already the maximum over its GPUs) is >= the threshold."""
    busy, present = [0] * hours, [0] * hours
    samples = instances = 0
    for points in series.values():
        top: dict[int, float] = {}
        for t, v in points:
            if not _usable(v):
                continue
            k = int((t - start) // PERIOD_S)
            if 0 <= k < hours:
                top[k] = max(top.get(k, v), v)
        samples += len(top)
        instances += 1 if top else 0
        for k, v in top.items():
            present[k] += 1
            if v >= threshold_pct:
                busy[k] += 1
    return Hourly(start, tuple(busy), tuple(present), samples, instances)


def duration_counts(busy: Sequence[int]) -> list[int]:
    """``H[k]`` = hours with at least k busy nodes, k = 0..max (``H[0]`` = all hours)."""
    top = max(busy, default=0)
    hist = [0] * (top + 1)
    for b in busy:
        hist[b] += 1
    out = [0] * (top + 1)
    run = 0
    for k in range(top, -1, -1):
        run += hist[k]
        out[k] = run
    return out


def baseline_level(counts: Sequence[int], percentile: float) -> int:
    """The largest k whose level is met in at least (100 - percentile) % of the hours."""
    need = (1 - percentile / 100.0) * counts[0]
    return max(k for k in range(len(counts)) if counts[k] >= need - 1e-9)


def segment(values: Sequence[float], groups: int) -> list[tuple[int, int]]:
    """Split a non-increasing sequence into at most ``groups`` contiguous ranges ``[i, j)`` that
    minimise the squared deviation of each value from its range's mean (exact, by dynamic
    programming over runs of equal values)."""
    runs: list[list] = []   # [value, count, first index]
    for i, v in enumerate(values):
        if runs and runs[-1][0] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1, i])
    m = len(runs)
    if m <= groups:
        return [(r[2], r[2] + r[1]) for r in runs]
    w, s, q = [0.0] * (m + 1), [0.0] * (m + 1), [0.0] * (m + 1)
    for i, (v, n, _) in enumerate(runs):
        w[i + 1], s[i + 1], q[i + 1] = w[i] + n, s[i] + n * v, q[i] + n * v * v

    def cost(i: int, j: int) -> float:  # runs i..j-1
        ww, ss = w[j] - w[i], s[j] - s[i]
        return (q[j] - q[i]) - ss * ss / ww
    inf = float("inf")
    best = [[inf] * (m + 1) for _ in range(groups + 1)]
    cut = [[0] * (m + 1) for _ in range(groups + 1)]
    best[0][0] = 0.0
    for g in range(1, groups + 1):
        for j in range(1, m + 1):
            for i in range(g - 1, j):
                if best[g - 1][i] < inf:
                    c = best[g - 1][i] + cost(i, j)
                    if c < best[g][j] - 1e-12:
                        best[g][j], cut[g][j] = c, i
    g = min(range(1, groups + 1), key=lambda k: (best[k][m], k))
    bounds, j = [], m
    while g > 0:
        i = cut[g][j]
        bounds.append((runs[i][2], runs[j - 1][2] + runs[j - 1][1]))
        j, g = i, g - 1
    return bounds[::-1]


def _hours(x: float) -> float:
    return max(round(x, 1), 0.1)


def _burst_steps(levels: Sequence[float], first_level: int, gpus_per_node: int,
                 groups: int) -> list[Step]:
    """Steps for the burst levels ``first_level..`` (monthly hours per node level): each range
    of levels becomes one step at its highest level with the mean hours of its levels (so the
    node-hours a month are kept); ranges whose rounded hours tie are merged."""
    ranges = segment(levels, groups) if levels else []
    merged: list[list[int]] = []
    for i, j in ranges:
        merged.append([i, j])
        while len(merged) > 1:
            a, b = merged[-2], merged[-1]
            ha = _hours(sum(levels[a[0]:a[1]]) / (a[1] - a[0]))
            hb = _hours(sum(levels[b[0]:b[1]]) / (b[1] - b[0]))
            if hb < ha:
                break
            merged[-2:] = [[a[0], b[1]]]
    return [Step((first_level + j - 1) * gpus_per_node,
                 _hours(sum(levels[i:j]) / (j - i))) for i, j in merged]


def derive(series: Mapping[str, Sequence[tuple[float, float]]], *, start: float, end: float,
           gpus_per_node: int, threshold_pct: float, percentile: float = BASELINE_PERCENTILE,
           max_steps: int = DEFAULT_MAX_STEPS) -> Derivation:
    """The demand profile of one cluster from its instances' hourly maximum GPU utilization.

    1. busy nodes per hour n(h) (:func:`hourly`); the observed span runs from the first hour
       any instance reported to the end of the window (a cluster created mid-window is not
       diluted by the hours before it existed; later hours without data count as 0 busy);
    2. H[k] = hours with n(h) >= k; monthly hours of level k: 730 x H[k] / span;
    3. baseline b = the largest k with H[k] >= (1 - percentile/100) x span: one step
       (b x GPUs per node, 730 h) - the reaper and the autostop keep it running;
    4. the levels b+1..peak are split into at most ``max_steps`` - 1 ranges (all of them when
       there is no baseline) of least squared error; each range is a step at its top level with
       the mean monthly hours of its levels.
    """
    _check_steps(max_steps)
    hours = int(round((end - start) / PERIOD_S))
    h = hourly(series, start=start, hours=hours, threshold_pct=threshold_pct)
    observed = _observed(start, end, hours, gpus_per_node, percentile,
                         hours_with_data=sum(1 for p in h.present if p), instances=h.instances,
                         threshold_pct=threshold_pct)
    first = next((k for k, p in enumerate(h.present) if p), None)
    if first is None:
        return Derivation((), observed, h.samples, kind="no-data",
                          note=f"no GPU utilization data in the {hours // 24}-day window")
    busy = h.busy[first:]
    span = len(busy)
    return _from_busy(busy, observed, h.samples, gpus_per_node=gpus_per_node,
                      percentile=percentile, max_steps=max_steps,
                      monthly=lambda c: HOURS_PER_MONTH * c / span,
                      idle=f"no GPU reached {threshold_pct:g}% in {span} observed hour(s) "
                           f"({h.instances} instance(s) reported)")


def derive_running(nodes: Sequence[int], *, start: float, end: float, gpus_per_node: int,
                   instances: int = 0, lines: int = 0, percentile: float = BASELINE_PERCENTILE,
                   max_steps: int = DEFAULT_MAX_STEPS) -> Derivation:
    """The demand profile of one cluster from the nodes it ran each hour of a billed month
    (``nodes[k]``: the hour starting at ``start`` + k h; gpulease.spend.usage reads them).

    The same steps as :func:`derive`, with "running" for "busy", and the month's hours kept as
    billed: level k's monthly hours are the hours it ran, H[k], not rescaled to a 730-hour
    month, so that a plan with these hours bills what this month billed (`gpulease spend`
    compares billed node-hours with planned node-hours the same way). Two corrections: a
    cluster first billed mid-month is extrapolated to the whole month (H[k] x month hours /
    hours from its first billed hour), and a level is capped at 730 h (always on: a 31-day
    month bills 744)."""
    _check_steps(max_steps)
    hours = len(nodes)
    running = sum(1 for n in nodes if n)
    observed = _observed(start, end, hours, gpus_per_node, percentile,
                         hours_with_data=running, instances=instances, threshold_pct=None)
    observed["measure"] = "running"
    first = next((k for k, n in enumerate(nodes) if n), None)
    month = format_utc(start, minutes=True)[:7]
    if first is None:
        return Derivation((), observed, lines, kind="idle",
                          note=f"no compute hours billed in {month}: the cluster did not run")
    busy = tuple(nodes[first:])
    span = len(busy)
    return _from_busy(busy, observed, lines, gpus_per_node=gpus_per_node, percentile=percentile,
                      max_steps=max_steps,
                      monthly=lambda c: min(HOURS_PER_MONTH, c * hours / span), idle="")


def _check_steps(max_steps: int) -> None:
    if max_steps < 2:
        raise ValueError(f"max_steps must be at least 2 (a baseline and a peak), got {max_steps}")


def _observed(start: float, end: float, hours: int, gpus_per_node: int, percentile: float, *,
              hours_with_data: int, instances: int, threshold_pct) -> dict:
    return {
        "window_start": format_utc(start, minutes=True),
        "window_end": format_utc(end, minutes=True), "hours": hours,
        "hours_observed": 0, "hours_with_data": hours_with_data,
        "instances": instances, "gpus_per_node": gpus_per_node,
        "threshold_pct": threshold_pct, "baseline_percentile": percentile,
        "baseline_gpus": 0, "peak_gpus": 0, "peak_hours_per_month": 0.0,
        "mean_busy_gpus": 0.0, "busy_gpu_hours": 0, "curve": []}


def _from_busy(busy: Sequence[int], observed: dict, samples: int, *, gpus_per_node: int,
               percentile: float, max_steps: int, monthly: Callable[[int], float],
               idle: str) -> Derivation:
    """Steps 2-4 of :func:`derive` over the observed span ``busy`` (nodes per hour);
    ``monthly``: level k's hours in the span -> its monthly hours."""
    span = len(busy)
    counts = duration_counts(busy)
    peak = len(counts) - 1
    per_month = [monthly(c) for c in counts]
    observed.update(
        hours_observed=span, peak_gpus=peak * gpus_per_node,
        peak_hours_per_month=round(per_month[peak], 1) if peak else 0.0,
        mean_busy_gpus=round(sum(busy) * gpus_per_node / span, 2),
        busy_gpu_hours=sum(busy) * gpus_per_node,
        curve=[{"gpus": k * gpus_per_node, "hours_per_month": round(per_month[k], 1)}
               for k in range(1, peak + 1)])
    if peak == 0:
        return Derivation((), observed, samples, kind="idle", note=idle)
    base = baseline_level(counts, percentile)
    observed["baseline_gpus"] = base * gpus_per_node
    steps: list[Step] = [Step(base * gpus_per_node, HOURS_PER_MONTH)] if base else []
    burst_groups = max(1, max_steps - len(steps))
    if base < peak:
        steps += _burst_steps(per_month[base + 1:], base + 1, gpus_per_node, burst_groups)
    return Derivation(tuple(steps), observed, samples)


def _num(x: float) -> str:
    return f"{x:g}" if x != int(x) else str(int(x))


def render_yaml(name: str, d: Derivation, *, replaces: str = "") -> str:
    """The config change to paste into ``gpulease:clusters`` (the cluster's other keys stay)."""
    o = d.observed
    if not d.profile:
        why = d.note or "nothing observed"
        advice = ("nothing to commit: remove the cluster, or keep it and let the reaper keep it "
                  "scaled to zero" if d.kind == "idle" else
                  "nothing to recommend: check that the GPU agent reports (docs/recommend.md)")
        return f"# {name}: {why}\n# {advice}\n"
    lines = ["gpulease:clusters:", f"  - name: {name}",
             "    demand:" + (f"   # replaces {replaces}" if replaces else "")]
    body = [f"{{gpus: {s.gpus}, hours_per_month: {_num(s.hours_per_month)}}}"
            for s in d.profile]
    width = max(len(b) for b in body)
    base = o.get("baseline_gpus", 0)
    for k, (step, text) in enumerate(zip(d.profile, body)):
        if k == 0 and base and step.gpus == base:
            note = (f"baseline: {o.get('measure', 'busy')} in at least "
                    f"{100 - o['baseline_percentile']:g}% of the hours, kept running")
            if len(d.profile) == 1:
                note += " (also the peak)"
        elif k == len(d.profile) - 1:
            note = (f"peak: {step.gpus} GPUs {o.get('measure', 'busy')} "
                    f"{_num(o['peak_hours_per_month'])} h/month")
        else:
            note = "burst"
        lines.append(f"      - {text.ljust(width)}   # {note}")
    return "\n".join(lines) + "\n"
