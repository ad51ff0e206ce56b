"""A month of synthetic bills from a plan, with known perturbations (issue 33 item 6).

:func:`generate` turns a `gpulease plan --json` document into the same month written three
ways - FOCUS 1.0 CSV, AWS CUR 2.0 Parquet (a ``BILLING_PERIOD=YYYY-MM`` folder) and the GCP
Cloud Billing detailed export as JSON lines - whatever cloud each cluster is on: a synthetic
test of the readers, not a claim that GCP clusters appear in a CUR. Every line is built once, in
DuckDB, and written out per format, so the three files hold the same charges.

What the month holds (every price comes from the plan or the catalog it was made with):

- each cluster's nodes, one line per node-hour (``split`` lines of 1/split hour each for the
  bench), at the plan's own unit price per purchase model (its cost of the model over its
  node-hours); reserved nodes bill as each format bills a commitment (FOCUS: committed usage
  at $0 billed with its effective cost, plus a purchase line; CUR: DiscountedUsage plus an
  RIFee; GCP: usage at the catalog's on-demand price with a committed-use-discount credit);
- one line per cluster for the rest of its planned cost (egress, communication, rework);
- the plan's shared resources that cost money, each one line tagged ``shared``.

The perturbations (:class:`Expected` holds what `spend` must recover):

1. ``short``: a cluster that ran 20 % fewer hours (each node's hours x 0.8);
2. ``fallback``: a cluster whose spot nodes ran a quarter of their hours on-demand, at the
   catalog's on-demand price;
3. ``nat``: the plan's NAT gateways billed untagged, under ids the plan does not know;
4. ``credit``: a commitment credit of 5 % of a reserved cluster's reserved cost;
5. ``correction``: a late correction (the month's last hour) of -10 % of a cluster's plan.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Optional

import duckdb

from gpulease import money, purchase, tags
from gpulease.spend.reconcile import planned_hours, planned_unit_prices

Q6 = Decimal("0.000001")
ACCOUNT = "123456789012"


@dataclass
class Expected:
    month: str
    short: Optional[str] = None
    short_hours: tuple[float, float] = (0.0, 0.0)       # (planned, ran)
    fallback: Optional[str] = None
    fallback_hours: float = 0.0
    nat_usd: Decimal = Decimal(0)
    nat_ids: list = field(default_factory=list)
    credit: Optional[str] = None
    credit_usd: Decimal = Decimal(0)
    correction: Optional[str] = None
    correction_usd: Decimal = Decimal(0)
    lines: int = 0


def _is_nat(r: dict) -> bool:
    return r["type"].endswith(("natGateway:NatGateway", "routerNat:RouterNat"))


def _pick(clusters, used, want):
    for c in clusters:
        if c["name"] not in used and want(c):
            used.add(c["name"])
            return c
    return None


def plan_lines(plan: dict[str, Any], catalog, month: str, *, perturb: bool = True
               ) -> tuple[list[tuple], Expected]:
    """The month as lines: (cluster tag or None, resource id, charge, correction, pricing,
    first hour, hours, unit USD per hour, hourly?, gpus per node, on-demand USD (reserved
    rows), credit USD, is a CUD credit)."""
    exp = Expected(month=month)
    used: set = set()
    clusters = [c for c in plan["clusters"] if c.get("parts")]
    if perturb:
        s = _pick(clusters, used, lambda c: planned_hours(c).get(purchase.SPOT))
        exp.fallback = s and s["name"]
        r = _pick(clusters, used, lambda c: planned_hours(c).get(purchase.RESERVED))
        exp.credit = r and r["name"]
        h = _pick(clusters, used, lambda c: True)
        exp.short = h and h["name"]
        k = _pick(clusters, used, lambda c: True)
        exp.correction = k and k["name"]
    lines = []
    hours_in_month = _hours(month)
    for c in clusters:
        name = c["name"]
        unit = {m: Decimal(repr(p)).quantize(Q6) for m, p in planned_unit_prices(c).items()}
        o = catalog.offering(c["cloud"], c["region"], c["instance_type"])
        od = Decimal(repr(o.on_demand_usd)).quantize(Q6)
        emitted = Decimal(0)
        ran = planned = 0.0
        node = 0
        for part in c["parts"]:
            for b in part["blocks"]:
                m = b["purchase"]
                for _ in range(int(b["nodes"])):
                    node += 1
                    h = int(round(float(b["hours_per_month"])))
                    planned += h
                    emitted += unit[m] * h
                    if name == exp.short:
                        h = int(round(h * 0.8))
                    ran += h
                    rid = f"{name}-{m.replace('_', '-')}-{node:04d}"
                    if name == exp.fallback and m == purchase.SPOT:
                        moved = h // 4
                        exp.fallback_hours += moved
                        lines.append((name, rid, "usage", False, purchase.ON_DEMAND, 0, moved,
                                      od, True, c["gpus_per_node"], od, None, False))
                        lines.append((name, rid, "usage", False, m, moved, h - moved, unit[m],
                                      True, c["gpus_per_node"], od, None, False))
                    else:
                        lines.append((name, rid, "usage", False, m, 0, min(h, hours_in_month),
                                      unit[m], True, c["gpus_per_node"], od, None, False))
        if name == exp.short:
            exp.short_hours = (planned, ran)
        rest = money.usd(c["monthly_usd"]) - emitted
        lines.append((name, f"{name}-other", "usage", False, None, 0, 1, rest, False, 0, None,
                      None, False))
        if name == exp.credit:
            exp.credit_usd = -money.usd(Decimal(repr(c["costs"]["reserved_usd"])) * Decimal("0.05"))
            lines.append((name, f"{name}-commitment", "credit", False, None, 0, 1,
                          exp.credit_usd, False, 0, None, None, False))
        if name == exp.correction:
            exp.correction_usd = -money.usd(Decimal(repr(c["monthly_usd"])) / 10)
            lines.append((name, f"{name}-correction", "adjustment", True, None,
                          hours_in_month - 1, 1, exp.correction_usd, False, 0, None, None,
                          False))
    for r in plan["resources"]:
        usd = money.usd(r["monthly_usd"])
        if not usd or r["cluster"] != tags.SHARED:
            continue
        if perturb and _is_nat(r):
            rid = f"nat-{len(exp.nat_ids):017x}"
            exp.nat_ids.append(rid)
            exp.nat_usd += usd
            lines.append((None, rid, "usage", False, None, 0, 1, usd, False, 0, None, None,
                          False))
        else:
            lines.append((tags.SHARED, r["physical_name"] or r["name"], "usage", False, None, 0,
                          1, usd, False, 0, None, None, False))
    return lines, exp


def _hours(month: str) -> int:
    start = dt.datetime.strptime(month, "%Y-%m")
    end = start.replace(year=start.year + (start.month == 12), month=start.month % 12 + 1)
    return int((end - start).total_seconds() // 3600)


_LINE_COLUMNS = ("cluster VARCHAR, rid VARCHAR, charge VARCHAR, correction BOOLEAN, "
                 "pricing VARCHAR, first_hour INTEGER, n INTEGER, unit DECIMAL(38,12), "
                 "hourly BOOLEAN, gpus INTEGER, od DECIMAL(38,12), credit DECIMAL(38,12), "
                 "cud BOOLEAN")


def _expand(con, lines, month: str, env: str, split: int) -> None:
    """Table ``r``: one row per line-hour (split into ``split`` rows)."""
    con.execute(f"CREATE OR REPLACE TABLE lines ({_LINE_COLUMNS})")
    con.executemany("INSERT INTO lines VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", lines)
    start = dt.datetime.strptime(month, "%Y-%m").replace(tzinfo=dt.timezone.utc)
    k = split
    con.execute(f"""
CREATE OR REPLACE TABLE r AS
SELECT l.*, ?::TIMESTAMPTZ + to_hours(l.first_hour + (h.i // {k})) AS t0,
       CASE WHEN l.hourly THEN 1.0 / {k} ELSE 0 END AS hrs,
       CAST(CASE WHEN l.hourly THEN l.unit / {k} ELSE l.unit END AS DECIMAL(38,12)) AS cost,
       CAST(CASE WHEN l.hourly THEN l.od / {k} END AS DECIMAL(38,12)) AS od_cost,
       ? AS env, row_number() OVER () AS id
FROM lines l, range(CASE WHEN l.hourly THEN l.n * {k} ELSE 1 END) h(i)""", [start, env])


def _focus(con, out: Path, month: str, env: str) -> None:
    ck, ek = tags.CLUSTER, tags.ENVIRONMENT
    reserved, spot = purchase.RESERVED, purchase.SPOT
    period = dt.datetime.strptime(month, "%Y-%m")
    pend = period.replace(year=period.year + (period.month == 12), month=period.month % 12 + 1)
    con.execute(f"""
COPY (
WITH u AS (
  SELECT r.*, pricing = '{reserved}' AS committed FROM r
  UNION ALL  -- one purchase line per reserved node line: the commitment's fee
  SELECT l.*, ?::TIMESTAMPTZ AS t0, 0 AS hrs, CAST(l.unit * l.n AS DECIMAL(38,12)) AS cost,
         NULL AS od_cost, ? AS env, -row_number() OVER () AS id, false AS committed
  FROM lines l WHERE l.pricing = '{reserved}')
SELECT NULL AS AvailabilityZone,
  CASE WHEN committed THEN 0 ELSE cost END AS BilledCost,
  '{ACCOUNT}' AS BillingAccountId, 'gpulease synthetic' AS BillingAccountName,
  'USD' AS BillingCurrency, strftime(?::TIMESTAMP, '%Y-%m-%dT%H:%M:%SZ') AS BillingPeriodEnd,
  strftime(?::TIMESTAMP, '%Y-%m-%dT%H:%M:%SZ') AS BillingPeriodStart,
  CASE WHEN hrs = 0 AND pricing = '{reserved}' THEN 'Purchase'
       WHEN charge = 'credit' THEN 'Credit' WHEN charge = 'adjustment' THEN 'Adjustment'
       ELSE 'Usage' END AS ChargeCategory,
  CASE WHEN correction THEN 'Correction' END AS ChargeClass,
  'synthetic ' || rid AS ChargeDescription,
  CASE WHEN hrs = 0 AND pricing = '{reserved}' THEN 'Recurring' WHEN hourly THEN 'Usage-Based'
       ELSE 'One-Time' END AS ChargeFrequency,
  strftime(t0 + INTERVAL 1 HOUR, '%Y-%m-%dT%H:%M:%SZ') AS ChargePeriodEnd,
  strftime(t0, '%Y-%m-%dT%H:%M:%SZ') AS ChargePeriodStart,
  CASE WHEN pricing = '{reserved}' THEN 'Usage' END AS CommitmentDiscountCategory,
  CASE WHEN pricing = '{reserved}' THEN 'commitment-' || cluster END AS CommitmentDiscountId,
  CASE WHEN pricing = '{reserved}' THEN 'commitment ' || cluster END AS CommitmentDiscountName,
  CASE WHEN committed THEN 'Used' END AS CommitmentDiscountStatus,
  CASE WHEN pricing = '{reserved}' THEN 'Reserved' END AS CommitmentDiscountType,
  CASE WHEN hourly AND hrs > 0 THEN hrs END AS ConsumedQuantity,
  CASE WHEN hourly AND hrs > 0 THEN 'Hours' END AS ConsumedUnit,
  cost AS ContractedCost, NULL AS ContractedUnitPrice,
  CASE WHEN hrs = 0 AND pricing = '{reserved}' THEN 0 ELSE cost END AS EffectiveCost,
  'gpulease synthetic' AS InvoiceIssuerName, cost AS ListCost, NULL AS ListUnitPrice,
  CASE WHEN charge <> 'usage' OR (hrs = 0 AND pricing = '{reserved}') THEN NULL
       WHEN committed THEN 'Committed' WHEN pricing = '{spot}' THEN 'Dynamic'
       ELSE 'Standard' END AS PricingCategory,
  CASE WHEN hourly AND hrs > 0 THEN hrs END AS PricingQuantity,
  CASE WHEN hourly AND hrs > 0 THEN 'Hours' END AS PricingUnit,
  'gpulease synthetic' AS ProviderName, 'gpulease synthetic' AS PublisherName,
  NULL AS RegionId, NULL AS RegionName, rid AS ResourceId, rid AS ResourceName,
  CASE WHEN hourly THEN 'Virtual Machine' END AS ResourceType,
  CASE WHEN hourly AND hrs > 0 THEN 'Compute' ELSE 'Other' END AS ServiceCategory,
  id AS Id, 'synthetic' AS ServiceName, NULL AS SkuId, NULL AS SkuPriceId,
  '{ACCOUNT}' AS SubAccountId, 'gpulease synthetic' AS SubAccountName,
  CASE WHEN cluster IS NOT NULL
       THEN json_object('{ck}', cluster, '{ek}', env)::VARCHAR END AS Tags
FROM u ORDER BY t0, id
) TO '{out}' (HEADER, DELIMITER ',')""", [period.replace(tzinfo=dt.timezone.utc), env, pend, period])


def _cur(con, out: Path, month: str, env: str) -> None:
    reserved, spot, on_demand = purchase.RESERVED, purchase.SPOT, purchase.ON_DEMAND
    ck, ek = "user:" + tags.CLUSTER, "user:" + tags.ENVIRONMENT
    folder = out / f"BILLING_PERIOD={month}"
    folder.mkdir(parents=True, exist_ok=True)
    con.execute(f"""
COPY (
WITH u AS (
  SELECT r.*, false AS fee FROM r
  UNION ALL  -- the RIFee of each reserved node line: the reservation's hours, fully used
  SELECT l.*, ?::TIMESTAMPTZ AS t0, 0 AS hrs, CAST(l.unit * l.n AS DECIMAL(38,12)) AS cost,
         NULL AS od_cost, ? AS env, -row_number() OVER () AS id, true AS fee
  FROM lines l WHERE l.pricing = '{reserved}')
SELECT t0 AS bill_billing_period_start_date,
  CASE WHEN fee THEN 'RIFee' WHEN charge = 'credit' THEN 'Credit'
       WHEN charge = 'adjustment' THEN 'Refund'
       WHEN pricing = '{reserved}' THEN 'DiscountedUsage' ELSE 'Usage' END
    AS line_item_line_item_type,
  t0 AS line_item_usage_start_date, t0 + INTERVAL 1 HOUR AS line_item_usage_end_date,
  CASE WHEN fee THEN 'HeavyUsage:p' WHEN pricing = '{spot}' THEN 'USE1-SpotUsage:p'
       WHEN pricing IN ('{on_demand}', '{reserved}') THEN 'USE1-BoxUsage:p'
       ELSE 'USE1-Other' END AS line_item_usage_type,
  'RunInstances' AS line_item_operation, rid AS line_item_resource_id,
  CAST(CASE WHEN hourly AND NOT fee THEN hrs ELSE 1 END AS DOUBLE) AS line_item_usage_amount,
  CASE WHEN pricing = '{reserved}' AND NOT fee THEN 0 ELSE cost END AS line_item_unblended_cost,
  'AmazonEC2' AS line_item_product_code,
  CASE WHEN pricing = '{reserved}' AND NOT fee THEN cost END AS reservation_effective_cost,
  CASE WHEN fee THEN 0 END AS reservation_unused_amortized_upfront_fee_for_billing_period,
  CASE WHEN fee THEN 0 END AS reservation_unused_recurring_fee,
  CAST(NULL AS DECIMAL(38,12)) AS savings_plan_savings_plan_effective_cost,
  CASE WHEN cluster IS NULL THEN map()::MAP(VARCHAR, VARCHAR)
       ELSE map(['{ck}', '{ek}'], [cluster, env]) END AS resource_tags
FROM u ORDER BY t0, id
) TO '{folder / "part-0.parquet"}' (FORMAT parquet)""",
                [dt.datetime.strptime(month, "%Y-%m").replace(tzinfo=dt.timezone.utc), env])


def _gcp(con, out: Path, month: str) -> None:
    reserved, spot = purchase.RESERVED, purchase.SPOT
    ck, ek = tags.label_key(tags.CLUSTER), tags.label_key(tags.ENVIRONMENT)
    con.execute(f"""
COPY (
SELECT '{ACCOUNT}' AS billing_account_id,
  {{'id': 'synthetic', 'description': 'Compute Engine'}} AS service,
  {{'id': 'synthetic', 'description':
     CASE WHEN charge = 'credit' THEN 'Spend-based committed use discount'
          WHEN hourly AND pricing = '{spot}' THEN 'Spot Preemptible Nvidia GPU running in Americas'
          WHEN hourly THEN 'Nvidia GPU running in Americas' ELSE 'Other' END}} AS sku,
  strftime(t0, '%Y-%m-%dT%H:%M:%SZ') AS usage_start_time,
  strftime(t0 + INTERVAL 1 HOUR, '%Y-%m-%dT%H:%M:%SZ') AS usage_end_time,
  {{'id': 'synthetic-project'}} AS project,
  CASE WHEN cluster IS NULL THEN []::STRUCT(key VARCHAR, value VARCHAR)[]
       ELSE [{{'key': '{ck}', 'value': lower(cluster)}},
             {{'key': '{ek}', 'value': lower(env)}}] END AS labels,
  {{'name': rid, 'global_name': '//compute.googleapis.com/projects/p/zones/z/instances/' || rid}}
    AS resource,
  CAST(CASE WHEN pricing = '{reserved}' THEN od_cost WHEN charge = 'credit' THEN 0 ELSE cost END
       AS DOUBLE) AS cost,
  'USD' AS currency,
  {{'amount': CAST(CASE WHEN hourly THEN hrs * gpus ELSE 1 END AS DOUBLE),
    'unit': CASE WHEN hourly THEN 'seconds' ELSE 'count' END,
    'amount_in_pricing_units': CAST(CASE WHEN hourly THEN hrs * gpus ELSE 1 END AS DOUBLE),
    'pricing_unit': CASE WHEN hourly THEN 'hour' ELSE 'count' END}} AS usage,
  CASE WHEN pricing = '{reserved}' THEN
         [{{'name': 'Committed use discount', 'amount': CAST(cost - od_cost AS DOUBLE),
            'type': 'COMMITTED_USAGE_DISCOUNT'}}]
       WHEN charge = 'credit' THEN
         [{{'name': 'Committed use discount: dollar based', 'amount': CAST(cost AS DOUBLE),
            'type': 'COMMITTED_USAGE_DISCOUNT_DOLLAR_BASE'}}]
       ELSE []::STRUCT(name VARCHAR, amount DOUBLE, type VARCHAR)[] END AS credits,
  {{'month': '{month.replace("-", "")}'}} AS invoice,
  CASE WHEN charge = 'adjustment' THEN 'adjustment' ELSE 'regular' END AS cost_type,
  CASE WHEN correction THEN {{'id': 'adj-' || id, 'description': 'late correction',
                              'mode': 'MANUAL_ADJUSTMENT', 'type': 'GENERAL_ADJUSTMENT'}} END
    AS adjustment_info
FROM r ORDER BY t0, id
) TO '{out}' (FORMAT json)""")


FORMATS = ("focus", "cur2", "gcp")


def stack_plan(stack: str = "prod"):
    """``stack``'s plan, made in-process as `gpulease spend` makes it, and its loaded stack
    (its catalog and spec): what the generated months are generated from."""
    import argparse

    from gpulease.cli.common import load_stack
    from gpulease.cli.plan import make_plan

    args = argparse.Namespace(stack=stack, config=None, catalog=None, catalog_version=None,
                              now=None)
    plan, _ = make_plan(args)
    return plan, load_stack(args, announce_warnings=False)


def generate(plan: dict[str, Any], catalog, out_dir: Path, *, month: str = "2026-10",
             split: int = 1, formats=FORMATS, perturb: bool = True) -> tuple[dict, Expected]:
    """Write the month in each format under ``out_dir``; the paths by format and what a
    reconciliation must recover."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lines, exp = plan_lines(plan, catalog, month, perturb=perturb)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    _expand(con, lines, month, plan["environment"], split)
    exp.lines = con.execute("SELECT count(*) FROM r").fetchone()[0]
    paths = {}
    if "focus" in formats:
        paths["focus"] = out_dir / "focus.csv"
        _focus(con, paths["focus"], month, plan["environment"])
    if "cur2" in formats:
        paths["cur2"] = out_dir / "cur2"
        _cur(con, paths["cur2"], month, plan["environment"])
    if "gcp" in formats:
        paths["gcp"] = out_dir / "gcp-billing.jsonl"
        _gcp(con, paths["gcp"], month)
    return paths, exp
