"""Cross-checks on the raw config values (names against the catalog and the config itself, the
size keys against a demand profile or a window): tolerant of malformed input, so their findings
are reported together with the schema's type errors."""
from __future__ import annotations

from typing import Any

from gpulease.catalog import Catalog
from gpulease.clouds import registry
from gpulease.config.messages import number
from gpulease.errors import Finding, did_you_mean


def reference_findings(data: dict, catalog: Catalog, source: str) -> list[Finding]:
    """Checks of names against the catalog and the config itself (GPU, regions, datasets).

    Tolerant of malformed input, so these findings are reported together with type errors.
    """
    out: list[Finding] = []

    def bad(path: str, msg: str) -> None:
        out.append(Finding(path, msg, source=source))

    clouds = data.get("clouds") if isinstance(data.get("clouds"), dict) else {}
    for cname in registry.NAMES:
        ccfg = clouds.get(cname)
        regions = ccfg.get("regions") if isinstance(ccfg, dict) else None
        if not isinstance(regions, list):
            continue
        known = catalog.regions(cname)
        for i, r in enumerate(regions):
            if isinstance(r, str) and r not in known:
                bad(f"gpulease:clouds.{cname}.regions[{i}]",
                    f'region "{r}" is not in the catalog{did_you_mean(r, known)}; '
                    f"known {cname} regions: {', '.join(known)}")
    storage = data.get("storage") if isinstance(data.get("storage"), list) else []
    names = sorted({s.get("name") for s in storage if isinstance(s, dict)
                    and isinstance(s.get("name"), str)})
    clusters = data.get("clusters") if isinstance(data.get("clusters"), list) else []
    gpus = catalog.gpus
    for i, c in enumerate(clusters):
        if not isinstance(c, dict):
            continue
        gpu, ds = c.get("gpu"), c.get("dataset")
        if isinstance(gpu, str) and gpu not in gpus:
            bad(f"gpulease:clusters[{i}].gpu", f'unknown GPU "{gpu}"{did_you_mean(gpu, gpus)}; '
                f"the catalog has: {', '.join(gpus)}")
        if isinstance(ds, str) and ds not in names:
            bad(f"gpulease:clusters[{i}].dataset", f'names no storage entry: "{ds}"'
                f"{did_you_mean(ds, names)}; add it under gpulease:storage or fix the name")
    return out


def demand_findings(data: dict, source: str) -> list[Finding]:
    """Checks of each cluster's size keys against its demand profile, on the raw values (so they
    are reported together with type errors): without demand, gpus and hours_per_month are
    required; with demand, GPUs strictly increase and hours strictly decrease along the steps,
    hours_per_month is left out and gpus, if given, equals the last step's."""
    out: list[Finding] = []
    clusters = data.get("clusters") if isinstance(data.get("clusters"), list) else []
    for i, c in enumerate(clusters):
        if not isinstance(c, dict):
            continue
        path = f"gpulease:clusters[{i}]"

        def bad(key: str, msg: str) -> None:
            out.append(Finding(f"{path}.{key}", msg, source=source))

        demand = c.get("demand")
        window = c.get("window")
        if window is not None:
            out.extend(_window_findings(window, c, path, source))
            continue
        if demand is None:
            for key in ("gpus", "hours_per_month"):
                if c.get(key) is None:
                    bad(key, "required key is missing (or describe the load as steps with "
                             f"{path}.demand)")
            continue
        if not isinstance(demand, list):
            continue  # "must be a list", from the schema
        if not demand:
            bad("demand", "an empty demand profile describes no load: give at least one step "
                          "{gpus, hours_per_month}, or leave demand out and set gpus and "
                          "hours_per_month")
            continue
        steps = [(number(d.get("gpus")), number(d.get("hours_per_month")))
                 if isinstance(d, dict) else (None, None) for d in demand]
        for j in range(1, len(steps)):
            (g0, h0), (g1, h1) = steps[j - 1], steps[j]
            if g0 is not None and g1 is not None and g1 <= g0:
                bad(f"demand[{j}].gpus", f"must be more than the step before ({path}.demand"
                    f"[{j - 1}].gpus = {g0:g}) (got {g1:g}): each step reads \"at least G GPUs "
                    "busy H hours a month\", so GPUs go up from step to step; merge or reorder "
                    "the steps")
            if h0 is not None and h1 is not None and h1 >= h0:
                bad(f"demand[{j}].hours_per_month", f"must be fewer than the step before "
                    f"({path}.demand[{j - 1}].hours_per_month = {h0:g}) (got {h1:g}): more GPUs "
                    "are busy for fewer hours, so hours go down from step to step; merge or "
                    "reorder the steps")
        if c.get("hours_per_month") is not None:
            bad("hours_per_month", f"leave it out when {path}.demand is given: each step has "
                f"its own hours (the first step's are the baseline's)")
        peak = steps[-1][0]
        gpus = number(c.get("gpus"))
        if gpus is not None and peak is not None and gpus != peak:
            bad("gpus", f"must equal the last demand step's gpus ({peak:g}), the peak (got "
                f"{gpus:g}); or leave gpus out")
    return out


def _window_findings(window: Any, c: dict, path: str, source: str) -> list[Finding]:
    """A window's own rules, on the raw values: RFC 3339 times, the deadline after the earliest
    start, the work fitting between them; with a window `gpus` is required and
    `hours_per_month` / `demand` are left out."""
    # Imported here for speed (as in parse._cluster): the quote model loads only for a stack
    # with a window.
    from gpulease.quotes.model import parse_time

    out: list[Finding] = []

    def bad(key: str, msg: str) -> None:
        out.append(Finding(f"{path}.{key}", msg, source=source))

    for key in ("hours_per_month", "demand"):
        if c.get(key) is not None:
            bad(key, f"leave it out when {path}.window is given: the window says how long the "
                     "work runs (a work item is priced over its window, not per month)")
    if c.get("gpus") is None:
        bad("gpus", f"required key is missing ({path}.window needs the GPUs the work runs on)")
    if not isinstance(window, dict):
        return out      # "must be a mapping", from the schema
    times = {}
    for key in ("earliest_start", "deadline"):
        v = window.get(key)
        if isinstance(v, str):
            try:
                times[key] = parse_time(v, date_ok=True)
            except ValueError as exc:
                bad(f"window.{key}", str(exc))
    if len(times) == 2:
        span = (times["deadline"] - times["earliest_start"]).total_seconds() / 3600.0
        if span <= 0:
            bad("window.deadline", f"must be after {path}.window.earliest_start "
                                   f"({window['earliest_start']}) (got {window['deadline']})")
        else:
            hours = number(window.get("duration_hours"))
            if hours is not None and hours > span + 1e-9:
                bad("window.duration_hours", f"{hours:g} h of work does not fit in the window "
                    f"({span:g} h from earliest_start to deadline): move the deadline, start "
                    "earlier or split the work")
    return out
