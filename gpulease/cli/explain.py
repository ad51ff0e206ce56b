"""`gpulease explain`: why each cluster runs where it runs — decision, cost breakdown, alternatives."""
from __future__ import annotations

import argparse
import calendar
import datetime as dt
from typing import Any, Optional

from typing import TYPE_CHECKING

from gpulease import money
from gpulease.cli import COMMANDS, ui
from gpulease.cli.common import add_output_args, add_stack_args, load_stack, print_json
from gpulease.clock import format_utc
from gpulease.errors import ConfigError, Finding, did_you_mean
from gpulease.purchase import CALENDAR, CAPACITY_BLOCK, COMMITMENT, WINDOW

if TYPE_CHECKING:  # imported where used: `--help` must not load the model (pydantic)
    from gpulease.model import ClusterDecision, EnvironmentDecision

DESCRIPTION = """\
Explain the policy's decision for a stack: per cluster the chosen cloud, region, zone,
instance type, nodes, purchase mix, network and template, the monthly cost broken down by the
cost model (reserved, on-demand, spot, spot rework, data gravity, communication), for a demand
profile the baseline and burst parts, what each commitment term (none, 1y, 3y) would cost over
the commitment horizon and the lock-in, the rationale, and the ranked alternatives with the
reason each lost, then the environment's monthly total - the same as `gpulease plan`'s, to the
cent (docs/money.md). Offline: reads the stack file and the price catalog, and runs the Pulumi
program under mocks as `plan` does (shared infrastructure such as NAT gateways is priced
there)."""

EPILOG = """\
examples:
  gpulease explain --stack prod
  gpulease explain --stack prod --cluster pretrain
  gpulease explain --config stacks/Pulumi.staging.yaml --json
  gpulease explain --stack prod --buy-vs-rent          # buy the servers or keep renting?

exit codes: 0 ok · 2 bad input or no plan satisfies the policy (the findings are
            printed on stderr, with "did you mean" for a mistyped --cluster); with
            --buy-vs-rent also a missing gpulease:buy_vs_rent key or server quote (named)"""

_COST_ROWS = (("reserved_usd", "reserved nodes (billed every hour)"),
              ("on_demand_usd", "on-demand nodes"),
              ("spot_usd", "spot nodes"),
              ("spot_rework_usd", "spot rework (interruptions)"),
              ("egress_usd", "data gravity (egress + staged copy)"),
              ("communication_usd", "communication overhead (TCP)"),
              ("window_usd", "window purchase (Capacity Block, flex-start, calendar mode)"))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explain", help=COMMANDS["explain"],
                       description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_stack_args(p)
    p.add_argument("--cluster", metavar="NAME", help="explain only this cluster")
    from gpulease.cli.plan import _utc_time

    p.add_argument("--now", metavar="TIME", type=_utc_time,
                   help="judge quotes and windows as of this moment (RFC 3339, e.g. "
                        "2026-12-10T09:00:00Z; default: now), as `plan --now` does")
    p.add_argument("--buy-vs-rent", action="store_true",
                   help="instead of the decision: per cluster, the N-year cost of buying the "
                        "servers its demand needs against renting it with the policy's best "
                        "mix, the break-even utilisation, months to pay back and the answer at "
                        "utilisation -/+20 %% (inputs: gpulease:buy_vs_rent, or the owned pool "
                        "of the cluster's GPU; docs/buy-vs-rent.md)")
    add_output_args(p)
    p.set_defaults(func=run)


_money = ui.money
_mix = ui.purchase_mix


def select(env: EnvironmentDecision, name: Optional[str]) -> list[ClusterDecision]:
    if name is None:
        return list(env.clusters)
    names = [c.name for c in env.clusters]
    if name not in names:
        raise ConfigError([Finding("--cluster", f'no cluster "{name}" in stack {env.stack.stack}'
                                   f"{did_you_mean(name, names)}; clusters: "
                                   f"{', '.join(names) or 'none'}")])
    return [env.cluster(name)]


def add_months(day: dt.date, months: int) -> dt.date:
    """The same day ``months`` later (clamped to the month's last day)."""
    y, m = divmod(day.month - 1 + months, 12)
    year, month = day.year + y, m + 1
    return day.replace(year=year, month=month,
                       day=min(day.day, calendar.monthrange(year, month)[1]))


def commitment_doc(c: ClusterDecision, start: dt.date) -> dict[str, Any]:
    """The decision's lock-in (what buying its commitment today signs up for) and what each
    term would cost over the horizon (TermOption), with end dates from ``start``."""
    terms = []
    for t in c.terms:
        d = t.as_dict()
        d["chosen"] = t.term == c.commitment_term
        if d["chosen"] and not t.unavailable:   # this plan: its total as every view shows it
            if abs(t.horizon_monthly_usd - t.monthly_usd) < 1e-6:  # bills just the horizon
                d["horizon_monthly_usd"] = money.json_number(c.monthly_money)
            d["monthly_usd"] = money.json_number(c.monthly_money)
        d["ends"] = add_months(start, t.lock_in_months).isoformat() if t.lock_in_months else None
        terms.append(d)
    return {"term": c.commitment_term, "horizon_months": c.commitment_horizon_months,
            "committed_usd": money.json_number(c.committed_usd),
            "lock_in_months": c.lock_in_months,
            "starts": start.isoformat() if c.lock_in_months else None,
            "ends": add_months(start, c.lock_in_months).isoformat() if c.lock_in_months
            else None, "terms": terms}


def cluster_doc(c: ClusterDecision, start: Optional[dt.date] = None,
                stack=None, prices: Optional[list] = None) -> dict[str, Any]:
    o = c.offering
    start = start or dt.date.today()
    return {
        "name": c.name, "cloud": c.cloud, "region": c.region, "zone": c.zone,
        "instance_type": o.instance_type, "gpu": o.gpu, "gpus_per_node": o.gpus_per_node,
        "nodes": c.nodes, "purchase": c.purchase.as_dict(), "template": c.template,
        "network": c.network, "distributed": c.distributed,
        "commitment_term": c.commitment_term, "hourly_usd": money.json_number(c.hourly_usd),
        # a window's purchase is one-time (one_time), never in monthly_usd (docs/policy.md)
        "monthly_usd": money.json_number(c.monthly_money - one_time_money(c)),
        "one_time": one_time_json(c), "costs": c.costs.as_dict(),
        "demand": [st.as_dict() for st in c.spec.steps], "baseline_nodes": c.baseline_nodes,
        "parts": [part.as_dict() for part in c.parts],
        COMMITMENT: commitment_doc(c, start),
        "spot_risk": c.spot_risk,
        WINDOW: c.window.as_dict() if c.window is not None else None,
        "reaper": reaper_doc(c),
        "rationale": c.rationale,
        CAPACITY_BLOCK: capacity_block_doc(c, stack),
        "price_disagreements": [d.as_dict() for d in c.price_disagreements],
        "prices": [u.as_dict() for u in (prices or [])],
        # part of the cluster on an owned pool; reserved nodes existing holdings cover
        # (docs/owned.md)
        "placement": c.placement.as_dict() if c.placement is not None else None,
        "coverage": [x.as_dict() for x in c.coverage],
        "alternatives": [{
            "rank": k, "cloud": a.cloud, "region": a.region, "zone": a.zone,
            "instance_type": a.instance_type, "purchase": a.purchase.as_dict(),
            "monthly_usd": money.json_number(a.monthly_usd),
            "rejected_because": a.rejected_because} for k, a in enumerate(c.alternatives, 1)],
    }


def capacity_block_doc(c: ClusterDecision, stack=None) -> Optional[dict[str, Any]]:
    """The cluster's Capacity Block: the pin with where today is in its window, or — when the
    plan wants one and none is pinned — ``{"status": "not pinned"}``."""
    import time

    from gpulease.clouds.aws.builders import uses_capacity_block
    from gpulease.planner.plan import capacity_block_json

    pin = c.spec.capacity_block
    if pin is not None:
        return capacity_block_json(pin, time.time())
    if stack is not None and uses_capacity_block(stack, c):
        return {"status": "not pinned"}
    return None


def reaper_doc(c: ClusterDecision, now: Optional[float] = None) -> dict[str, Any]:
    """How the reaper treats the cluster: its idle window, declared schedule and when that
    schedule holds the reaper back (the next few periods), and the first-job grace."""
    import time

    from gpulease import tags
    from gpulease import cron as rs
    from gpulease.reaper.decision import BUSY_AT_REFRESH_S

    spec = c.spec
    windows = [rs.window(cron, minutes) for cron, minutes in spec.schedule]
    now = time.time() if now is None else now
    return {"idle_minutes": spec.idle_minutes,
            "schedule": [{"cron": cron, "minutes": minutes} for cron, minutes in spec.schedule],
            "schedule_lead_minutes": spec.schedule_lead_minutes,
            "first_job_grace_minutes": spec.first_job_grace_minutes,
            "next_holds": [{"from": format_utc(a, minutes=True),
                            "until": format_utc(b, minutes=True), "window": w.describe()}
                           for a, b, w in rs.next_holds(windows, now=now,
                                                        lead_minutes=spec.schedule_lead_minutes)],
            # every node publishes when it last worked (docs/reaper.md, "The busy witness")
            "busy_witness": {"tag": tags.BUSY_AT, "refresh_seconds": BUSY_AT_REFRESH_S}}


def render_reaper(c: ClusterDecision, o: ui.Out, now: Optional[float] = None) -> None:
    doc = reaper_doc(c, now)
    text = (f"marks it after {doc['idle_minutes']} idle min; a new cluster waits "
            f"{doc['first_job_grace_minutes']} min for its first job; a node that reported "
            f"itself busy ({doc['busy_witness']['tag']}: a GPU process, DCGM activity, a job "
            "heartbeat) inside that window is kept")
    if doc["schedule"]:
        text += ("; held from " + str(doc["schedule_lead_minutes"]) + " min before each declared"
                 " window to its end (" + ", ".join(f'"{w["cron"]}" for {w["minutes"]} min'
                                                     for w in doc["schedule"]) + ", UTC)")
        if doc["next_holds"]:
            h = doc["next_holds"][0]
            text += f", next {h['from']} to {h['until']}"
    o.line(("Reaper: ", "bold"), text, indent=2)


def _demand(c: ClusterDecision) -> str:
    w = c.spec.window
    if w is not None:
        return (f"{c.spec.gpus} x {c.spec.gpu}, {w.duration_hours:g} h of work between "
                f"{format_utc(w.earliest_start)} and {format_utc(w.deadline)}")
    if not c.spec.has_profile:
        return f"{c.spec.gpus} x {c.spec.gpu}, {c.spec.hours_per_month:g} h/month"
    steps = " + ".join(f"{st.gpus} GPUs {st.hours_per_month:g} h" for st in c.spec.steps)
    return f"{c.spec.gpu}, demand {steps} a month"


def render_parts(c: ClusterDecision, o: ui.Out) -> None:
    """Baseline / burst: nodes, purchase and hours per block, cost per month."""
    o.print("Demand parts (nodes in order of hours; egress stays with the cluster)", indent=2,
            style="bold")
    rows = []
    for part in c.parts:
        for b in part.blocks:
            rows.append([part.part, f"{b.first}-{b.first + b.nodes - 1}" if b.nodes > 1
                         else str(b.first), str(b.nodes), b.purchase,
                         f"{b.hours_per_month:g}", _money(b.costs.monthly_money)])
    o.print(o.table([ui.Col("part"), ui.Col("node"), ui.Col("count", right=True),
                     ui.Col("purchase"), ui.Col("h/month", right=True),
                     ui.Col("$/month", right=True)], rows, indent=4))


def render_terms(c: ClusterDecision, o: ui.Out, start: dt.date) -> None:
    """What each commitment term would cost over the horizon, and the decision's lock-in."""
    doc = commitment_doc(c, start)
    rows = []
    for term, t in zip(c.terms, doc["terms"]):
        if t["unavailable"]:
            rows.append([t["term"], "-", "-", "-", "-", "-", t["unavailable"]])
            continue
        rows.append([t["term"] + (" *" if t["chosen"] else ""), _mix(term.purchase),
                     _money(t["monthly_usd"]), _money(t["horizon_monthly_usd"]),
                     _money(t["committed_usd"]), str(t["lock_in_months"]), t["ends"] or "-"])
    o.print(f"Commitment terms over a {doc['horizon_months']}-month horizon (* = this plan's "
            "term; avg = per month over the horizon, months billed after it included)",
            indent=2, style="bold")
    o.print(o.table([ui.Col("term"), ui.Col("purchase"), ui.Col("$/month", right=True),
                     ui.Col("avg $/month", right=True), ui.Col("committed", right=True),
                     ui.Col("months", right=True), ui.Col("ends")], rows, indent=4))
    if doc["lock_in_months"]:
        o.print(f"Lock-in: {_money(doc['committed_usd'])} committed for "
                f"{doc['lock_in_months']} months ({doc['starts']} to {doc['ends']})", indent=2)
    else:
        o.print("Lock-in: none (no node at a commitment price)", indent=2)


def _quote_text(q: Optional[dict], estimated: bool) -> str:
    if q is None:
        return "-"
    if q.get("offering_id") or (q.get("start") and q["kind"] == CALENDAR):
        price = (f"fee {_money(q['upfront_usd'])}" if q.get("upfront_usd") is not None
                 else "availability")
        what = (f"{q['kind']} offering {q.get('offering_id') or ''} {q.get('zone') or ''} "
                f"{q['start']} - {q['end']}, {price}").replace("  ", " ")
    else:
        what = f"rate ${q['hourly_usd']:,.4f} per node-hour"
    when = "quoted" if q.get("live") else "published"
    return (f"{what} ({q['source']}, {when} {q['quoted_at'][:10]}"
            + ("; estimated, availability not checked" if estimated else "") + ")")


def _remainder_text(x: dict) -> str:
    r = x.get("remainder")
    if not r:
        return ""
    return (f"; then {r['hours']:.2f} h on {r['model']} {r['start']} - {r['end']} "
            f"({_money(r['usd'])})")


def _blocks_text(x: dict) -> str:
    """A Capacity Block rounded up to a size AWS sells: its count beside the nodes."""
    b = x.get("blocks") or []
    if not b or sum(b) == x["nodes"]:
        return ""
    return (f"; one block of {sum(b)} instances for {x['nodes']} nodes (rounded up to a size "
            "AWS sells)")


def one_time_money(c) -> money.Decimal:
    """The cluster's one-time window purchase (``gpulease.costing.costs.one_time_money``)."""
    from gpulease.costing.costs import one_time_money as once

    return once(c)


def one_time_json(c):
    """The cluster's one-time purchase with its dates, as plan JSON has it."""
    from gpulease.planner.plan import one_time_json as once

    return once(c)


def render_window(c: ClusterDecision, o: ui.Out) -> None:
    """Every purchase model priced for the window: allowed by the priority band, total, when
    it runs, the quote behind it (with its date and start) or why it cannot be used."""
    wd = c.window
    o.print(f"Window: {wd.window.duration_hours:g} h of work between "
            f"{format_utc(wd.window.earliest_start)} and {format_utc(wd.window.deadline)} "
            f"(judged at {format_utc(wd.judged_at)}; * = this plan)", indent=2, style="bold")
    rows = []
    for x in sorted(wd.options, key=lambda x: (not x["feasible"], x["total_usd"] or 0.0)):
        mark = " *" if x["model"] == wd.model else ""
        rows.append([x["model"] + mark, "yes" if x["allowed"] else "no",
                     _money(x["total_usd"]) if x["total_usd"] is not None else "-",
                     x["start"] or "-", x["end"] or "-",
                     (_quote_text(x["quote"], x["estimated"]) + _blocks_text(x)
                      + _remainder_text(x))
                     if x["feasible"] else (x["unavailable"] or "no price")])
    o.print(o.table([ui.Col("model"), ui.Col("allowed"), ui.Col("total", right=True),
                     ui.Col("run starts"), ui.Col("run ends"),
                     ui.Col("quote (date, start) / why not", wrap=True)], rows, indent=4))
    # the block sizes AWS sells (docs/catalog.md, "Block sizes"): a split priced, not planned
    for x in wd.options:
        for p in x.get("passed_over") or ():
            if p["why"].startswith("split into"):
                o.print(f"Capacity Block sizes: {p['why']}", indent=2)
    if wd.months > 1:   # a commitment: a monthly bill over its term
        o.print(f"{_money(wd.total_usd)} over {wd.months} months: {_money(wd.monthly_usd)} a "
                "month in the plan", indent=2)
    else:   # one-time money (docs/policy.md, "Windows: one-time money")
        o.print(f"One-time {_money(wd.total_usd)}, "
                f"{format_utc(wd.bought_from or wd.start)} to {format_utc(wd.bought_until or wd.end)}"
                ": counted whole in the plan, never divided by month", indent=2)


def spot_risk_text(r: dict) -> str:
    """One line: the rate the rework was priced with and where it comes from, dated."""
    rate = f"{r['interruptions_per_hour']:.6f} interruptions per node-hour"
    facts = []
    if r.get("band"):
        facts.append(f"Advisor band {r['band']} of spot capacity reclaimed a month (upper edge "
                     f"{r['band_max_percent']:g} %)")
    if r.get("estimated_uptime_hours"):
        facts.append(f"estimated uptime {r['estimated_uptime_hours']:g} h")
    if r.get("placement_score"):
        facts.append(f"placement score {r['placement_score']}/10")
    if r.get("obtainability") is not None:
        facts.append(f"obtainability {r['obtainability']:.2f}")
    when = (f"; {r['source']}, {'quoted' if r.get('live') else 'as of'} {r['as_of'][:10]}"
            if r.get("as_of") else "")
    return (f"{rate} in {r['zone']} ({r['basis']}" + (": " + ", ".join(facts) if facts else "")
            + when + ")")


def render_prices(uses: list, o: ui.Out) -> None:
    """The catalog prices a cluster or dataset pays: figure, source, publication date, and
    whether it is an estimate (``gpulease.catalog.provenance``)."""
    if uses:
        o.line(("Prices: ", "bold"), "; ".join(u.text() for u in uses), indent=2)


def render_cluster(c: ClusterDecision, o: ui.Out, start: Optional[dt.date] = None,
                   stack=None, prices: Optional[list] = None) -> None:
    o_ = c.offering
    start = start or dt.date.today()
    o.line(("Cluster ", "bold"), (c.name, "bold cyan"),
           f"  (priority {c.spec.priority}, {_demand(c)}"
           + (f", checkpoint every {c.spec.checkpoint_minutes} min" if c.spec.interruptible
              else ", not interruptible") + ")")
    o.print(o.table(
        [ui.Col("cloud"), ui.Col("region"), ui.Col("zone"), ui.Col("instance"),
         ui.Col("nodes"), ui.Col("purchase"), ui.Col("network"), ui.Col("template"),
         ui.Col("$/hour", right=True), ui.Col("$/month", right=True, style="bold")],
        [[c.cloud, c.region, c.zone or "-", o_.instance_type,
          ui.nodes_text(c.nodes, o_.gpus_per_node, o_.gpu), _mix(c.purchase), c.network,
          c.template, _money(c.hourly_usd),
          _money(c.monthly_money) if not one_time_money(c) else
          f"{_money(c.monthly_money - one_time_money(c))} + one-time "
          f"{_money(one_time_money(c))}"]], indent=2))
    if c.placement is not None:   # the cloud share of a cluster partly on an owned pool
        for why in c.placement.why:
            o.line(f"Owned first: {why}", indent=2)
    for x in c.coverage:          # reserved nodes existing holdings cover (docs/owned.md)
        o.line(f"Covered: {x.why}", indent=2)
    o.print("Cost breakdown (per month)" if not one_time_money(c) else
            "Cost breakdown (the window's one-time purchase; dataset moves per month)",
            indent=2, style="bold")
    costs = c.costs.as_dict()
    o.print(o.table([ui.Col("cost"), ui.Col("$/month", right=True)],
                    [[label, _money(costs[key])] for key, label in _COST_ROWS
                     if key != "window_usd" or costs[key]]
                    + [[("total", "bold"), (_money(costs["monthly_usd"]), "bold")]],
                    indent=4))
    if c.window is not None:
        render_window(c, o)
    if c.spec.has_profile:
        render_parts(c, o)
    if c.terms:
        render_terms(c, o, start)
    if c.spot_risk is not None and (c.purchase.spot or c.spec.interruptible):
        o.line(("Spot risk: ", "bold"), spot_risk_text(c.spot_risk), indent=2)
    render_prices(prices or [], o)
    o.line(("Why: ", "bold"), c.rationale, indent=2)
    block = capacity_block_doc(c, stack)
    if block is not None:
        from gpulease.cli.plan import capacity_block_text

        o.line(("Capacity Block: ", "bold"), capacity_block_text(block) if "offering_id" in block
               else "none pinned: `gpulease plan` quotes an offering and prints the lines that "
                    "pin and approve it (nothing is bought without approval)", indent=2)
    for d in c.price_disagreements:
        o.line(("Price sources disagree: ", "bold yellow"), d.text(), indent=2)
    render_reaper(c, o)
    if c.alternatives:
        o.print("Alternatives (ranked by monthly cost)", indent=2, style="bold")
        o.print(o.table(
            [ui.Col("#", right=True), ui.Col("cloud"), ui.Col("region"), ui.Col("zone"),
             ui.Col("instance"), ui.Col("purchase"), ui.Col("$/month", right=True),
             ui.Col("rejected because", wrap=True)],
            [[str(k), a.cloud, a.region, a.zone or "-", a.instance_type, _mix(a.purchase),
              _money(a.monthly_usd), a.rejected_because]
             for k, a in enumerate(c.alternatives, 1)], indent=4))


def _days(v) -> str:
    return "-" if v is None else f"{v}d"


def storage_doc(s) -> dict[str, Any]:
    lc = s.lifecycle
    return {"name": s.name, "cloud": s.cloud, "region": s.region, "size_tb": s.spec.size_tb,
            "reads_per_month": s.reads_per_month,
            "lifecycle": {"warm_after_days": lc.warm_after_days,
                          "cold_after_days": lc.cold_after_days,
                          "archive_after_days": lc.archive_after_days},
            "changed_from_config": s.chosen is not None,
            "tiers": [{"storage_class": t.storage_class, "share": round(t.share, 4),
                       "monthly_usd": money.json_number(t.monthly_usd)} for t in s.tiers],
            "storage_usd": money.json_number(s.storage_money),
            "retrieval_usd": money.json_number(s.retrieval_usd),
            "early_delete_usd": money.json_number(s.early_delete_usd),
            "monthly_usd": money.json_number(s.monthly_money), "basis": s.basis,
            "configured_lifecycle": {"warm_after_days": s.spec.warm_after_days,
                                     "cold_after_days": s.spec.cold_after_days,
                                     "archive_after_days": s.spec.archive_after_days},
            "configured_monthly_usd": money.json_number(s.configured_usd)}


def render_storage(s, o: ui.Out, prices: Optional[list] = None) -> None:
    lc = s.lifecycle
    tiers = ui.MIX_SEP.join(f"{t.storage_class} {t.share:.0%}" for t in s.tiers)
    o.line(("Storage ", "bold"), (s.name, "bold cyan"),
           f"  ({s.cloud}:{s.region}, {s.spec.size_tb:g} TB, read "
           f"{s.reads_per_month:g}x a month)")
    o.print(f"lifecycle: warm {_days(lc.warm_after_days)} / cold {_days(lc.cold_after_days)} / "
            f"archive {_days(lc.archive_after_days)}"
            + ("  (changed from the stack's)" if s.chosen is not None else "")
            + f"; tiers: {tiers}", indent=2)
    o.line((f"{_money(s.monthly_money)}/month", "bold"),
           f" = storage {_money(s.storage_money)} + retrieval "
           f"{_money(s.retrieval_usd)} + early deletion {_money(s.early_delete_usd)}", indent=2)
    if s.chosen is not None and s.configured_usd is not None:
        c = s.spec
        o.print(f"configured: warm {_days(c.warm_after_days)} / cold {_days(c.cold_after_days)} "
                f"/ archive {_days(c.archive_after_days)} would cost "
                f"{_money(s.configured_usd)}/month; chosen {_money(s.monthly_money)}/month "
                f"(saves {_money(money.usd(s.configured_usd) - s.monthly_money)})", indent=2)
    render_prices(prices or [], o)
    o.line(("Why: ", "bold"), s.basis, indent=2)


def render_text(env: EnvironmentDecision, clusters: list[ClusterDecision],
                o: Optional[ui.Out] = None, totals: Optional[dict] = None,
                prices: Optional[dict] = None) -> None:
    """The explanation as text on ``o`` (stdout by default); ``totals``: :func:`totals_doc`;
    ``prices``: the prices paid by cluster name and per dataset (:func:`explain_prices`)."""
    prices = prices or {}
    o = o or ui.out()
    s = env.stack
    o.line(("gpulease explain", "bold"), f" · stack {s.stack} ({s.source}) · catalog "
           f"{env.catalog_version} (built {env.catalog_as_of})")
    if prices.get("summary") and len(clusters) == len(env.clusters):
        from gpulease.catalog.provenance import header_text

        o.line("Prices: ", header_text(prices["summary"]))
    for c in clusters:
        o.print()
        render_cluster(c, o, stack=env.stack, prices=prices.get(c.name))
    if len(clusters) == len(env.clusters):
        for st in env.storage:
            o.print()
            render_storage(st, o, prices=prices.get(("storage", st.name)))
        t = totals if totals is not None else totals_doc(env, None)
        render_owned(env, o)
        o.print()
        shared = (f" + shared infrastructure {_money(t['shared_usd'])}"
                  if t["shared_usd"] else "")
        if t.get("owned_usd"):
            shared += f" + owned pools {_money(t['owned_usd'])}"
        o.line(("Environment: ", "bold"), f"clusters {_money(t['clusters_usd'])} + storage "
               f"{_money(t['storage_usd'])}{shared} = ",
               (f"{_money(t['monthly_usd'])}/month", "bold"),
               (f" + one-time {_money(t['one_time_usd'])} (window purchases, counted whole "
                "against the budget)" if t.get("one_time_usd") else ""),
               f"; budget {_money(t['budget_usd'])} (headroom ",
               (_money(t["headroom_usd"]), "green" if t["headroom_usd"] >= 0 else "bold red"),
               ")")
        if t.get("shared_not_priced"):
            o.print(f"(shared infrastructure not included: {t['shared_not_priced']})", indent=2)


def render_owned(env: EnvironmentDecision, o: ui.Out) -> None:
    """Owned pools and holdings (docs/owned.md): where each cluster runs and why, each pool's
    amortised and marginal $/GPU-hour and idle line, and holdings nothing uses."""
    for u in env.pools:
        o.print()
        o.line(("Owned pool ", "bold"), (u.pool, "bold cyan"),
               f"  ({u.site}, {u.gpus} x {u.gpu}, {u.kind}): amortised "
               f"{u.amortised_usd_per_gpu_hour:.4f} USD/GPU-hour, marginal "
               f"{u.marginal_usd_per_gpu_hour:.4f} (power only); {u.used_nodes} of "
               f"{u.gpus // u.gpus_per_node} nodes used; owned, idle {_money(u.idle_money)}"
               "/month")
    for p in env.placements:
        head = {"owned": "all on its owned pool", "burst": "owned pool, burst on cloud",
                "cloud": "on cloud"}[p.share]
        cost = (f", owned share {_money(p.owned_money)}/month amortised "
                f"({_money(p.owned.marginal_monthly_usd)} marginal)" if p.owned else "")
        o.line(f"{p.name}: {head}{cost}", indent=2)
        for why in p.why:
            o.line(f"- {why}", indent=4)
    if env.unused_holdings:
        o.print()
        o.print("Holdings nothing in the plan uses", style="bold")
        for h in env.unused_holdings:
            o.line(f"- {h.text()}", indent=2)


def program_ledger(loaded, args: argparse.Namespace):
    """The cost ledger of the program's own run under mocks (as `gpulease plan` runs it): the
    shared infrastructure (NAT gateways) is priced there only. Returns (ledger, None), or
    (None, why) when the program stops where the decision does not (a Capacity Block quote not
    yet pinned and approved: `plan` says so with exit 4, explain still explains)."""
    from gpulease.errors import InputError
    from gpulease.planner.plan import run as run_program

    try:
        prun = run_program(loaded.values, stack=loaded.spec.stack,
                           catalog_path=getattr(args, "catalog", None),
                           catalog_version=getattr(args, "catalog_version", None),
                           now=getattr(args, "now", None))
    except InputError as exc:
        why = (exc.findings[0].message if getattr(exc, "findings", None) else str(exc))
        return None, f"the program stops: {why.splitlines()[0] if why else type(exc).__name__}"
    return prun.result.ledger, None


def explain_prices(env: EnvironmentDecision, catalog, ledger) -> dict:
    """The prices the decision pays, as `plan` lists them (``gpulease.planner.plan.used_prices``):
    by cluster name, ``("storage", name)`` per dataset, and the environment's ``summary``."""
    from gpulease.catalog import provenance
    from gpulease.planner.plan import used_prices

    types = set() if ledger is None else {e.type for e in ledger.entries.values()}
    by = used_prices(env, catalog, types)
    out: dict = {c.name: by[c.name] for c in env.clusters}
    for s in env.storage:
        out[("storage", s.name)] = provenance.storage_prices(s, catalog)
    out["summary"] = {**provenance.summary([u for us in by.values() for u in us]),
                      "catalog_estimates": provenance.catalog_estimates(catalog)}
    return out


def totals_doc(env: EnvironmentDecision, ledger, why: Optional[str] = None) -> dict[str, Any]:
    """The environment's monthly money as `plan` totals it (``gpulease.money``): clusters and
    storage from the decision, shared infrastructure from the program's ledger; their sum is
    the ledger's total, to the cent (tests/test_money.py)."""
    from gpulease.costing.costs import HOURLY_INFRA, one_time_money

    # a window's one-time purchase is never in a monthly figure; the budget adds it whole
    # (docs/policy.md, "Windows: one-time money")
    one_time = sum((one_time_money(c) for c in env.clusters), money.ZERO)
    clusters = sum((c.monthly_money for c in env.clusters), money.ZERO) - one_time
    storage = sum((s.monthly_money for s in env.storage), money.ZERO)
    shared = None if ledger is None else sum(
        (e.monthly_usd for e in ledger.entries.values() if e.type in HOURLY_INFRA), money.ZERO)
    owned = env.owned_money   # owned pools' shares and idle lines (docs/owned.md)
    monthly = clusters + storage + (shared or money.ZERO) + owned
    budget = money.usd(env.stack.budget_monthly_usd)
    hourly = (money.usd(env.hourly_usd) if ledger is None else ledger.hourly_usd(env))
    return {"clusters_usd": clusters, "storage_usd": storage, "shared_usd": shared,
            "owned_usd": owned,
            "monthly_usd": monthly, "one_time_usd": one_time, "hourly_usd": hourly,
            "budget_usd": budget, "headroom_usd": budget - monthly - one_time,
            "shared_not_priced": why}


def run(args: argparse.Namespace) -> int:
    from gpulease.policy import decide

    loaded = load_stack(args)
    now = getattr(args, "now", None)
    env = decide(loaded.spec, loaded.catalog, now=None if now is None else
                 dt.datetime.fromtimestamp(now, dt.timezone.utc))
    p = env.placement(args.cluster) if args.cluster else None
    if p is not None and p.share == "owned":   # all on an owned pool: no cloud decision
        if args.json:
            print_json({"stack": env.stack.stack, "source": loaded.source,
                        "placement": p.as_dict()})
        else:
            o = ui.out()
            o.line(("Cluster ", "bold"), (p.name, "bold cyan"),
                   f"  (priority {p.spec.priority}): all on owned pool {p.owned.pool}, no cloud "
                   f"compute; {_money(p.owned_money)}/month amortised "
                   f"({_money(p.owned.marginal_monthly_usd)} marginal)")
            for why in p.why:
                o.line(f"- {why}", indent=2)
        return 0
    clusters = select(env, args.cluster)
    if getattr(args, "buy_vs_rent", False):
        return run_buy_vs_rent(args, env, clusters, source=loaded.source)
    # the environment's total and prices need the program's ledger (NAT gateways): the text
    # for one --cluster shows neither, so it does not run the program
    if args.json or len(clusters) == len(env.clusters):
        ledger, why = program_ledger(loaded, args)
    else:
        ledger, why = None, "not computed for one --cluster"
    totals = totals_doc(env, ledger, why)
    prices = explain_prices(env, loaded.catalog, ledger)
    from gpulease.policy.defaults import price_moving_defaults

    # defaults the stack left unset that moved the price, each priced the other way
    moved = price_moving_defaults(env, loaded.catalog, now=None if now is None else
                                  dt.datetime.fromtimestamp(now, dt.timezone.utc))
    if args.json:
        num = money.json_number
        print_json({"stack": env.stack.stack, "source": loaded.source,
                    "catalog": {"version": env.catalog_version, "as_of": env.catalog_as_of},
                    "prices": prices["summary"],
                    "clusters": [{**cluster_doc(c, stack=env.stack, prices=prices.get(c.name)),
                                  "defaults": moved.get(c.name, [])} for c in clusters],
                    "storage": [{**storage_doc(x), "prices": [
                        u.as_dict() for u in prices.get(("storage", x.name), [])]}
                                for x in env.storage],
                    "totals": {"hourly_usd": num(totals["hourly_usd"]),
                               "monthly_usd": num(totals["monthly_usd"]),
                               "clusters_usd": num(totals["clusters_usd"]),
                               "storage_usd": num(totals["storage_usd"]),
                               "shared_usd": num(totals["shared_usd"]),
                               "owned_usd": num(totals["owned_usd"]),
                               "one_time_usd": num(totals["one_time_usd"]),
                               "shared_not_priced": totals["shared_not_priced"]},
                    "budget": {"monthly_usd": num(totals["budget_usd"]),
                               "headroom_usd": num(totals["headroom_usd"])},
                    # owned pools first, then holdings (docs/owned.md)
                    "owned": {"pools": [u.as_dict() for u in env.pools],
                              "placements": [p.as_dict() for p in env.placements]},
                    "unused_holdings": [u.as_dict() for u in env.unused_holdings]})
    else:
        render_text(env, clusters, totals=totals, prices=prices)
        render_defaults(moved, [c.name for c in clusters], ui.out())
    return 0


def render_defaults(moved: dict, names: list[str], o: ui.Out) -> None:
    """`explain`'s "Defaults that moved the price" (gpulease.policy.defaults)."""
    rows = [(n, d) for n in names for d in moved.get(n, [])]
    if not rows:
        return
    o.print()
    o.print("Defaults that moved the price", style="bold")
    for name, d in rows:
        if d["saving_usd"] is None and d["alternative"] is None:
            o.line((name, "cyan"), f": {d['key']} is {d['default']} - {d['note']}", indent=2)
            continue
        if d["saving_usd"] is None:
            what = "no plan satisfies the policy with it"
        elif d["saving_usd"] > 0:
            what = f"would save {_money(d['saving_usd'])}/month"
        else:
            what = f"would cost {_money(-d['saving_usd'])}/month more"
        o.line((name, "cyan"), f": {d['key']} = {d['default']}; {d['alternative']} {what}"
               + (f" ({d['note']})" if d["note"] and d["saving_usd"] is not None else ""),
               indent=2)


# ---- --buy-vs-rent ---------------------------------------------------------------------------
_FINANCE_KEYS = ("years", "cost_of_money_rate", "lead_time_months", "resale_share")


def buy_vs_rent_inputs(env: EnvironmentDecision, clusters: list[ClusterDecision], *,
                       source: str) -> tuple[list, list[tuple[str, str]]]:
    """``([(cluster, Demand, Server, Finance)], [(cluster, why skipped)])`` from the stack's
    gpulease:buy_vs_rent and owned pools; ConfigError (exit 2) naming every missing input."""
    from gpulease.owned import buyrent as br

    cfg = env.stack.buy_vs_rent
    path = "gpulease:buy_vs_rent"
    if cfg is None:
        raise ConfigError([Finding(f"{path}.{k}", "required by `explain --buy-vs-rent` "
                                   "(docs/buy-vs-rent.md): add it to the stack file",
                                   source=source) for k in _FINANCE_KEYS],
                          headline=f"{source}: the buy-or-rent inputs are missing")
    finance = br.Finance(years=cfg.years, cost_of_money_rate=cfg.cost_of_money_rate,
                         lead_time_months=cfg.lead_time_months, resale_share=cfg.resale_share)
    rows, skipped, missing = [], [], []
    for c in clusters:
        if c.spec.window is not None:
            skipped.append((c.name, "a one-off window of work, not a monthly load: nothing "
                                    "to buy servers for"))
            continue
        server = None
        for i, q in enumerate(cfg.servers):
            if q.gpu == c.spec.gpu:
                server = br.Server(usd_per_node=q.usd_per_node, gpus_per_node=q.gpus_per_node,
                                   power_kw_per_node=q.power_kw_per_node,
                                   usd_per_kwh=q.usd_per_kwh,
                                   colo_usd_per_node_month=q.colo_usd_per_node_month,
                                   ops_usd_per_node_month=q.ops_usd_per_node_month,
                                   source=f"{path}.servers[{i}]")
                break
        if server is None:
            pool = next((p for p in env.stack.owned if p.gpu == c.spec.gpu), None)
            server = br.server_from_pool(pool) if pool is not None else None
        if server is None:
            missing.append(Finding(f"{path}.servers", f"no server quote for GPU {c.spec.gpu} "
                f"(cluster {c.name}) and no owned pool of it: add {{gpu: {c.spec.gpu}, "
                "usd_per_node, gpus_per_node, power_kw_per_node, usd_per_kwh, "
                "colo_usd_per_node_month, ops_usd_per_node_month}", source=source))
            continue
        demand = br.Demand(cluster=c.name, gpu=c.spec.gpu, peak_gpus=c.spec.gpus,
                           gpu_hours_per_month=br.gpu_hours_per_month(c.spec.steps),
                           rent_usd_per_month=float(c.monthly_money))
        rows.append((c, demand, server, finance))
    if missing:
        raise ConfigError(missing, headline=f"{source}: buy-or-rent inputs are missing")
    return rows, skipped


def buy_vs_rent_doc(a) -> dict[str, Any]:
    num = lambda v: money.json_number(money.usd(v))  # noqa: E731
    f, s = a.finance, a.server
    return {
        "cluster": a.demand.cluster, "gpu": a.demand.gpu, "peak_gpus": a.demand.peak_gpus,
        "gpu_hours_per_month": round(a.demand.gpu_hours_per_month, 4),
        "rent_monthly_usd": num(a.demand.rent_usd_per_month),
        "inputs": {"server_source": s.source, "usd_per_node": s.usd_per_node,
                   "gpus_per_node": s.gpus_per_node, "power_kw_per_node": s.power_kw_per_node,
                   "usd_per_kwh": s.usd_per_kwh,
                   "colo_usd_per_node_month": s.colo_usd_per_node_month,
                   "ops_usd_per_node_month": s.ops_usd_per_node_month, "years": f.years,
                   "cost_of_money_rate": f.cost_of_money_rate,
                   "lead_time_months": f.lead_time_months, "resale_share": f.resale_share},
        "nodes": a.nodes, "utilisation": round(a.utilisation, 6),
        "purchase_usd": num(a.purchase_usd), "resale_usd": num(a.resale_usd),
        "depreciation_monthly_usd": num(a.depreciation_usd_per_month),
        "power_full_use_monthly_usd": num(a.power_full_usd_per_month),
        "fixed_monthly_usd": num(a.fixed_usd_per_month),
        "own_present_value_usd": num(a.own_usd), "rent_present_value_usd": num(a.rent_usd),
        "verdict": a.verdict,
        "break_even_utilisation": None if a.break_even_utilisation is None
        else round(a.break_even_utilisation, 6),
        "payback_months": a.payback_months,
        "sensitivity": [{"utilisation": round(p.utilisation, 6), "capped": p.capped,
                         "own_present_value_usd": num(p.own_usd),
                         "rent_present_value_usd": num(p.rent_usd),
                         "verdict": "buy" if p.buy else "rent"} for p in a.sensitivity]}


def run_buy_vs_rent(args: argparse.Namespace, env: EnvironmentDecision,
                    clusters: list[ClusterDecision], *, source: str) -> int:
    from gpulease.owned import buyrent as br

    rows, skipped = buy_vs_rent_inputs(env, clusters, source=source)
    answers = [br.compare(d, s, f) for _, d, s, f in rows]
    if args.json:
        print_json({"stack": env.stack.stack, "source": source,
                    "clusters": [buy_vs_rent_doc(a) for a in answers],
                    "skipped": [{"cluster": n, "why": w} for n, w in skipped]})
        return 0
    o = ui.out()
    for a in answers:
        f = a.finance
        o.print(f"{a.demand.cluster}: {a.verdict.upper()} over {f.years:g} years", style="bold")
        o.line(f"  demand {a.demand.peak_gpus} x {a.demand.gpu}, "
               f"{a.demand.gpu_hours_per_month:,.0f} GPU-h/month = {a.utilisation:.1%} of "
               f"{a.nodes} server(s) of {a.server.gpus_per_node} (inputs: {a.server.source}, "
               "gpulease:buy_vs_rent)")
        o.line(f"  own:  {_money(a.purchase_usd)} purchase, {_money(a.fixed_usd_per_month)}"
               f"/month colo+ops, {_money(a.power_full_usd_per_month)}/month power at full use, "
               f"{f.lead_time_months} month(s) renting before the servers run, "
               f"{_money(a.resale_usd)} back at the end; depreciation "
               f"{_money(a.depreciation_usd_per_month)}/month")
        o.line(f"  present value at {f.cost_of_money_rate:.1%}/year: own "
               f"{_money(a.own_usd)} vs rent {_money(a.rent_usd)} "
               f"({_money(a.demand.rent_usd_per_month)}/month, the policy's mix)")
        be = a.break_even_utilisation
        o.line("  break-even utilisation: " + (
            "none (power alone costs more than renting)" if be is None else
            f"{be:.1%}" + (" (above 100 %: buying never pays)" if be > 1 else "")) +
            "; payback: " + (f"{a.payback_months} months" if a.payback_months else
                             f"not within {f.months} months"))
        o.line("  utilisation -/+20 %: " + "; ".join(
            f"{p.utilisation:.1%}{' (capped)' if p.capped else ''} -> "
            f"{'buy' if p.buy else 'rent'} ({_money(p.own_usd)} vs {_money(p.rent_usd)})"
            for p in a.sensitivity))
    for name, why in skipped:
        o.line(f"{name}: skipped - {why}")
    return 0
