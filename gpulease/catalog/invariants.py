"""Price invariants every catalog row must hold, at load (errors naming the row) and in the build
(rows or columns that break one are dropped and counted per invariant, docs/catalog.md).

- ``finite_positive``: every price is a finite number above zero;
- ``per_gpu_plausible``: every price per GPU-hour lies within ``PLAUSIBLE_USD_PER_GPU_HOUR``;
- ``gpu_sku_floor``: a node costs at least the GPU SKUs it carries (``gpu_sku_usd``, per
  purchase model: the accelerator's own Billing Catalog SKUs on GCP);
- ``components_sum``: a price built from components (``price_components``) equals their sum;
- ``spot_le_on_demand``: spot (the row's and every zone's) is not above on-demand;
- ``commitment_lt_on_demand``: a commitment is below on-demand, and 3 years not above 1 year.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Optional

from gpulease.purchase import ON_DEMAND, SPOT

#: Plausible USD per GPU-hour, any purchase model (one constant; docs/catalog.md). The cheapest
#: GPU hour in any source read here is a spot T4 at ~0.10 (SkyPilot GCP, 2026-05-20) and the
#: dearest an on-demand GCP A3 Mega GPU in asia at ~15 (10x margins); outside them a figure is a
#: transcription slip (a price per month or per 1,000 hours, a dropped decimal point, 1e-300).
PLAUSIBLE_USD_PER_GPU_HOUR = (0.01, 60.0)

INVARIANTS = ("finite_positive", "per_gpu_plausible", "gpu_sku_floor", "components_sum",
              "spot_le_on_demand", "commitment_lt_on_demand")
#: price column -> purchase-model key of ``gpu_sku_usd`` / ``price_components``.
PRICE_KEYS = {"on_demand_usd": ON_DEMAND, "spot_usd": SPOT, "commit_1y_usd": "commit_1y",
              "commit_3y_usd": "commit_3y"}
#: how close a built price must be to the sum of its components (USD per hour; rounding).
SUM_TOLERANCE = 5e-4


def _num(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _bad_number(v: Any) -> bool:
    x = _num(v)
    return x is None or not math.isfinite(x) or x <= 0


def price_problems(row: dict) -> list[tuple[str, str, str]]:
    """(invariant, column, message) for every invariant the row's prices break."""
    out: list[tuple[str, str, str]] = []
    gpus = row.get("gpus_per_node")
    gpus = gpus if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus > 0 else None
    prices: list[tuple[str, Any]] = [(c, row.get(c)) for c in PRICE_KEYS if row.get(c) is not None]
    zone_spot = row.get("zone_spot_usd") or {}
    if isinstance(zone_spot, dict):
        prices += [(f"zone_spot_usd[{z}]", u) for z, u in sorted(zone_spot.items())]
    lo, hi = PLAUSIBLE_USD_PER_GPU_HOUR
    for col, v in prices:
        if _bad_number(v):
            out.append(("finite_positive", col, f"{col} {v!r} is not a finite price above zero"))
            continue
        if gpus:
            per = float(v) / gpus
            if not lo <= per <= hi:
                out.append(("per_gpu_plausible", col,
                            f"{col} {v} is {per:.4g} USD per GPU-hour ({gpus} GPUs), outside "
                            f"the plausible {lo}-{hi} (gpulease/catalog/invariants.py "
                            "PLAUSIBLE_USD_PER_GPU_HOUR): a transcription slip"))
    floor = row.get("gpu_sku_usd") or {}
    if isinstance(floor, dict):
        for col, key in PRICE_KEYS.items():
            f, v = _num(floor.get(key)), _num(row.get(col))
            if f is not None and v is not None and v + SUM_TOLERANCE < f:
                out.append(("gpu_sku_floor", col,
                            f"{col} {v} is below the {f} its GPUs alone cost (gpu_sku_usd."
                            f"{key}): the node price leaves out the accelerator"))
        if key_zone_floor := _num(floor.get(SPOT)):
            for z, u in sorted(zone_spot.items()) if isinstance(zone_spot, dict) else ():
                if _num(u) is not None and _num(u) + SUM_TOLERANCE < key_zone_floor:
                    out.append(("gpu_sku_floor", f"zone_spot_usd[{z}]",
                                f"zone_spot_usd[{z}] {u} is below the {key_zone_floor} its "
                                "GPUs alone cost on spot (gpu_sku_usd.spot)"))
    comps = row.get("price_components") or {}
    if isinstance(comps, dict):
        for col, key in PRICE_KEYS.items():
            parts = comps.get(key)
            v = _num(row.get(col))
            if not isinstance(parts, list) or not parts or v is None:
                continue
            usd = [_num(p.get("usd")) if isinstance(p, dict) else None for p in parts]
            if any(u is None for u in usd):
                continue
            total = sum(usd)  # type: ignore[arg-type]
            if abs(total - v) > SUM_TOLERANCE:
                out.append(("components_sum", col,
                            f"{col} {v} is not the sum of its price_components.{key} "
                            f"({total:.6g})"))
    od = _num(row.get("on_demand_usd"))
    spot = _num(row.get("spot_usd"))
    if od is not None and spot is not None and spot > od:
        out.append(("spot_le_on_demand", "spot_usd",
                    f"spot_usd {spot} is above on_demand_usd {od} (AWS and GCP never charge "
                    "more for spot than on-demand)"))
    if od is not None and isinstance(zone_spot, dict):
        for z, u in sorted(zone_spot.items()):
            if _num(u) is not None and _num(u) > od:
                out.append(("spot_le_on_demand", f"zone_spot_usd[{z}]",
                            f"zone_spot_usd[{z}] {u} is above on_demand_usd {od}"))
    for col in ("commit_1y_usd", "commit_3y_usd"):
        v = _num(row.get(col))
        if od is not None and v is not None and v >= od:
            out.append(("commitment_lt_on_demand", col,
                        f"{col} {v} is not below on_demand_usd {od} (a commitment that costs as "
                        "much as on-demand is a stale or swapped figure)"))
    c1, c3 = _num(row.get("commit_1y_usd")), _num(row.get("commit_3y_usd"))
    if c1 is not None and c3 is not None and c3 > c1:
        out.append(("commitment_lt_on_demand", "commit_3y_usd",
                    f"commit_3y_usd {c3} is above commit_1y_usd {c1}"))
    return out


def enforce(row: dict) -> list[tuple[str, str, str]]:
    """Drop every price of ``row`` that breaks an invariant (a column becomes null, a zone's
    spot price is removed), note why in ``notes`` and return what was dropped. Used by the
    snapshot build and the SkyPilot importer, which count the drops per invariant."""
    dropped: list[tuple[str, str, str]] = []
    for _ in range(4):           # each pass removes what the previous one exposed; bounded
        problems = price_problems(row)
        if not problems:
            break
        for inv, col, msg in problems:
            dropped.append((inv, col, msg))
            row["notes"] = "; ".join(x for x in (row.get("notes"), f"dropped by the {inv} "
                                                 f"invariant: {msg}") if x)
            if col.startswith("zone_spot_usd["):
                zs = row.get("zone_spot_usd") or {}
                zs.pop(col[len("zone_spot_usd["):-1], None)
                if zs:
                    row["spot_usd"] = min(zs.values())
                else:
                    row.pop("zone_spot_usd", None)
                    row["spot_usd"] = None
                continue
            row[col] = None
            key = PRICE_KEYS.get(col)
            if key:
                (row.get("price_components") or {}).pop(key, None)
                if isinstance(row.get("price_sources"), dict):
                    row["price_sources"][key] = None
            if col == "spot_usd":
                row.pop("zone_spot_usd", None)
    return dropped


def count_problems(rows: Iterable[dict]) -> dict[str, int]:
    """How many rows break each invariant (a row counts once per invariant)."""
    counts = {k: 0 for k in INVARIANTS}
    for r in rows:
        for inv in {p[0] for p in price_problems(r)}:
            counts[inv] += 1
    return counts


__all__ = ["PLAUSIBLE_USD_PER_GPU_HOUR", "INVARIANTS", "PRICE_KEYS", "price_problems",
           "count_problems", "enforce"]
