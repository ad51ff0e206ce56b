"""A cluster with a window, on one offering: every purchase model priced over the window
(``gpulease.policy.windows``), the priority band's cheapest kept, as a policy candidate.

Options are compared by what the work item costs in all (``WindowOption.total_usd``), across
models and across offerings and clouds: the candidate's objective is that total (plus its
dataset moves), never a total divided by the months its run spans.

The candidate's costs are the work item's price as **one-time money** (docs/policy.md, "Windows:
one-time money"): the whole total, counted once, in the breakdown's columns: a reservation in
``reserved_usd``, on-demand in ``on_demand_usd``, spot in ``spot_usd`` + ``spot_rework_usd``, a
Capacity Block / flex-start / calendar-mode reservation in ``window_usd``. Only a commitment
bought for the work item is a monthly bill (``reserved_usd``, its total over its term).
"""
from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple, Optional

from gpulease import money
from gpulease.clock import format_utc
from gpulease.model import (Alternative, CostBreakdown, NodeBlock, PurchaseMix,
                            WindowDecision)
from gpulease.policy import windows as W
from gpulease.policy.templates import Facts, choose_template
from gpulease.purchase import (CALENDAR, CAPACITY_BLOCK, COMMITMENT, FLEX_START,
                               FUTURE_RESERVATION, LABELS, ON_DEMAND, RESERVATION, RESERVED, SPOT)
from gpulease.quotes import sold_as, stale_rate
from gpulease.quotes.model import Quote

#: the purchase mix column each window model bills as (the node groups carry these).
MIX_OF = {ON_DEMAND: ON_DEMAND, FLEX_START: ON_DEMAND, SPOT: SPOT,
          RESERVATION: RESERVED, COMMITMENT: RESERVED, CAPACITY_BLOCK: RESERVED,
          CALENDAR: RESERVED}
#: quote kind -> the purchase option an offering must be sold with (C1).
OPTION_OF = {CAPACITY_BLOCK: CAPACITY_BLOCK, FLEX_START: FLEX_START,
             CALENDAR: FUTURE_RESERVATION}
#: plain words for messages.
WORDS = {ON_DEMAND: LABELS[ON_DEMAND], SPOT: LABELS[SPOT], FLEX_START: LABELS[FLEX_START],
         RESERVATION: "a capacity reservation at the on-demand rate",
         COMMITMENT: "a commitment", CAPACITY_BLOCK: "a Capacity Block",
         CALENDAR: "a calendar-mode reservation"}


#: the source a pinned block's quote names.
PINNED_SOURCE = "capacity_block pinned in the stack config"


def pin_of(spec, o):
    """The Capacity Block pinned for the cluster when it is on offering ``o`` (None else)."""
    pin = getattr(spec, "capacity_block", None)
    if pin is None or spec.window is None or (pin.region, pin.instance_type) != (
            o.region, o.instance_type) or CAPACITY_BLOCK not in OPTION_OF:
        return None
    return pin


def pin_quote(pin, o):
    """The pinned block as an offering (its fee is paid: it never expires)."""
    from gpulease.quotes.model import parse_time

    start, end = parse_time(pin.start), parse_time(pin.end)
    return Quote(kind=CAPACITY_BLOCK, cloud=o.cloud, region=pin.region,
                 instance_type=pin.instance_type,
                 quoted_at=parse_time(pin.quoted_at) if pin.quoted_at else start,
                 source=PINNED_SOURCE, start=start, end=end,
                 instance_count=pin.instance_count, upfront_usd=pin.upfront_fee_usd,
                 zone=pin.availability_zone, offering_id=pin.offering_id, live=True,
                 pinned=True)


def ended_pins(stack, now) -> tuple:
    """(cluster name, pin) of every window cluster whose pinned Capacity Block has ended at
    ``now``: its work item is over - the block is spent (and `pulumi refresh` drops it from
    the state), so the cluster is retired: nothing declared, charged or bought again."""
    from gpulease.quotes.model import utc

    t = utc(now).timestamp()
    return tuple((c.name, c.capacity_block) for c in stack.clusters
                 if c.window is not None and c.capacity_block is not None
                 and t >= c.capacity_block.end_epoch)


def work_item(spec, o, ctx, *, nodes: int, gang: bool, tcp_gang: bool) -> W.WorkItem:
    """The work item on offering ``o``. Checkpointed work may finish what a Capacity Block
    cannot hold on the band's continuous model: a reservation at the on-demand rate for
    guaranteed work, else on-demand."""
    rules, w = ctx.rules, spec.window
    lam = ctx.spot_risk(o)[0]
    sells = getattr(o, "sells", lambda option: True)
    guaranteed = spec.priority > rules.reserved_above_priority
    reservable = rules.reserve_at_on_demand_rate and sells(RESERVATION)
    if guaranteed:
        rest_model, rest_rate = RESERVATION, o.on_demand_usd if reservable else None
    else:
        rest_model, rest_rate = ON_DEMAND, o.price(ON_DEMAND)
        if rest_rate is None and reservable:
            rest_model, rest_rate = RESERVATION, o.on_demand_usd
    return W.WorkItem(
        checkpointed=spec.interruptible, remainder_rate=rest_rate, remainder_model=rest_model,
        nodes=nodes, duration_hours=w.duration_hours, earliest_start=w.earliest_start,
        deadline=w.deadline, now=judged_at(spec, o, ctx.now), gang=gang,
        interruptions_per_hour=lam,
        lost_hours=((spec.checkpoint_minutes or 0.0) / 2.0 + rules.spot_restart_minutes) / 60.0,
        spot_outage_hours=rules.spot_outage_hours,
        spot_allowed=SPOT in W.allowed_models(spec.priority, spec.interruptible,
                                             reserved_above=rules.reserved_above_priority,
                                             spot_below=rules.spot_below_priority),
        communication_share=rules.tcp_communication_share if tcp_gang else 0.0,
        flex_start_queue_hours=rules.flex_start_queue_hours,
        quote_max_age_hours=rules.quote_max_age_hours, cloud=o.cloud, region=o.region,
        instance_type=o.instance_type)


def judged_at(spec, o, now):
    """When the window is judged: ``now``, or - once its pinned block has started - the block's
    start (the block is bought and running: the plan continues it, the remainder of the work
    included, instead of re-pricing a window that has shrunk)."""
    from gpulease.quotes.model import parse_time, utc

    pin = pin_of(spec, o)
    if pin is None:
        return now
    return min(utc(now), parse_time(pin.start))


def price_options(spec, o, ctx, item: W.WorkItem) -> list[W.WindowOption]:
    """Every model priced on the offering; models the offering is not sold with say so."""
    rules = ctx.rules
    term = rules.commitment_term
    terms = ("1y", "3y") if term == "auto" else () if term == "none" else (term,)
    sells = getattr(o, "sells", lambda option: True)
    rates = W.WindowRates(
        on_demand=o.price(ON_DEMAND), spot=ctx.spot_rate(o),
        commit_1y=o.price(RESERVED, "1y"), commit_3y=o.price(RESERVED, "3y"),
        reservation=(o.on_demand_usd if rules.reserve_at_on_demand_rate and sells(RESERVATION)
                     else None))
    quotes = []
    if ctx.quotes is not None:
        for kind, option in OPTION_OF.items():
            if sold_as(o, option):
                quotes += ctx.quotes.for_offering(kind, o.cloud, o.region, o.instance_type)
    pin = pin_of(spec, o)
    if pin is not None:   # the block bought is the only Capacity Block of the window
        quotes = [q for q in quotes if q.kind != CAPACITY_BLOCK] + [pin_quote(pin, o)]
    opts = W.price_window(item, rates, quotes, terms=terms or ("1y",))
    out = []
    for opt in opts:
        why = None
        if opt.model == COMMITMENT and not terms:
            why = "no commitment (gpulease:policy.commitment_term: none)"
        elif opt.model in (ON_DEMAND, SPOT, COMMITMENT):
            why = getattr(o, "unavailable", lambda m: None)(
                RESERVED if opt.model == COMMITMENT else opt.model)
        elif opt.model == RESERVATION and not sells(RESERVATION):
            why = f"{o.instance_type} is not sold as a capacity reservation"
        elif opt.model in OPTION_OF and not sold_as(o, OPTION_OF[opt.model]):
            why = f"{o.instance_type} is not sold as {WORDS[opt.model]}"
        if why:
            opt = replace(opt, unavailable=why if why.startswith(("not sold", "no "))
                          else f"not sold ({why})")
        out.append(opt)
    return out


def monthly(opt: W.WindowOption) -> tuple[float, int]:
    """(USD the plan counts, months it is spread over): a commitment bills every month of its
    term (its total / its months); anything else is one-time money, counted whole (1): never
    divided by the months its run spans."""
    if opt.model == COMMITMENT:
        return opt.total_usd / opt.lock_in_months, opt.lock_in_months
    return opt.total_usd, 1


def one_time(opt: Optional[W.WindowOption]) -> bool:
    """True when the option's price is one-time money (everything but a commitment)."""
    return opt is not None and opt.model != COMMITMENT


def objective_of(opt: W.WindowOption, egress: float) -> float:
    """What the environment solve compares a window candidate by: the work item's total (every
    model, offering and cloud alike) plus its dataset moves, once per month its run spans."""
    return opt.total_usd + egress * W.months_spanned(opt)


def costs_of(opt: W.WindowOption, egress: float) -> CostBreakdown:
    per, months = monthly(opt)
    if opt.model == SPOT:
        # rework_usd: what the interruptions cost beyond the spot hours - under the deadline
        # rule, the expected on-demand fallback (restarts on spot are in compute_usd)
        return CostBreakdown(spot_usd=opt.compute_usd / months,
                             spot_rework_usd=opt.rework_usd / months, egress_usd=egress)
    col = {ON_DEMAND: "on_demand_usd", RESERVATION: "reserved_usd",
           COMMITMENT: "reserved_usd"}.get(opt.model, "window_usd")
    return CostBreakdown(**{col: per}, egress_usd=egress)


def mix_of(opt: W.WindowOption) -> PurchaseMix:
    return PurchaseMix(**{MIX_OF[opt.model]: opt.nodes})


def infeasible_reason(opts, allowed: frozenset, spec, rules) -> str:
    shown = [o for o in opts if o.model in allowed]
    parts = [f"{o.model}: {o.unavailable or 'no price'}" for o in shown][:4]
    band = ("guaranteed capacity only" if spec.priority > rules.reserved_above_priority
            else "spot allowed" if SPOT in allowed else "no spot")
    return f"window (priority {spec.priority}, {band}: " + "; ".join(parts) + ")"


def decision_of(spec, opt: W.WindowOption, opts, allowed: frozenset, now) -> WindowDecision:
    per, months = monthly(opt)
    return WindowDecision(
        window=spec.window, model=opt.model, start=opt.start, end=opt.end,
        run_hours=opt.run_hours, total_usd=opt.total_usd, monthly_usd=per, months=months,
        nodes=opt.nodes, billed_node_hours=opt.billed_node_hours, estimated=opt.estimated,
        quote=opt.quote.as_dict() if opt.quote is not None else None,
        options=tuple(dict(x.as_dict(), allowed=x.model in allowed) for x in opts),
        judged_at=now, lock_in_months=opt.lock_in_months,
        remainder=opt.as_dict()["remainder"], bought_from=opt.bought_from,
        bought_until=opt.bought_until, blocks=tuple(opt.blocks))


def block_of(opt: W.WindowOption, costs: CostBreakdown) -> NodeBlock:
    share = CostBreakdown(**{k: getattr(costs, k) for k in (
        "reserved_usd", "on_demand_usd", "spot_usd", "spot_rework_usd", "window_usd")})
    return NodeBlock(first=1, nodes=opt.nodes,
                     hours_per_month=min(opt.run_hours, 730.0),
                     purchase=MIX_OF[opt.model], costs=share)


_money = money.fmt   # THE money text (gpulease.money)


def _sizes_text() -> str:
    """The Capacity Block sizes AWS sells, as text ("1-64" or "1, 2, 4, ... 64")."""
    from gpulease import quotes

    s = quotes.CB_INSTANCE_COUNTS
    if list(s) == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}-{s[-1]}"
    return ", ".join(map(str, s))


def rationale(spec, d: WindowDecision, rules) -> str:
    """Why this model for the window: what it is, when it runs, what it costs and what the
    next allowed model would have cost; quotes named with their source and date."""
    w = spec.window
    head = (f"Window {format_utc(w.earliest_start)} to {format_utc(w.deadline)}, "
            f"{w.duration_hours:g} h of work (judged at {format_utc(d.judged_at)}): "
            f"{WORDS[d.model]}")
    q = d.quote
    if q is not None:
        when = "quoted" if q["live"] else "published"
        what = (f"offering {q['offering_id']} in {q['zone']}" if q.get("offering_id")
                else f"the rate ${q['hourly_usd']:,.4f} per node-hour")
        head += f" ({what}, {q['source']}, {when} {q['quoted_at'][:10]}" + (
            "; availability not checked" if d.estimated else "") + ")"
        stale = stale_rate(q, d.judged_at)
        if stale:
            head += f" [{stale}]"
    if d.blocks and sum(d.blocks) != d.nodes:
        head += (f", one block of {sum(d.blocks)} instances for {d.nodes} nodes (AWS sells "
                 "blocks of "
                 f"{_sizes_text()} instances: rounded up, the extra instances paid and idle)")
    head += f", running {format_utc(d.start)} to {format_utc(d.end)}"
    if d.remainder is not None:
        r = d.remainder
        head += (f", the last {r['hours']:.2f} h (one restart's lost work included) on "
                 f"{WORDS[r['model']]} {r['start']} to {r['end']} ({_money(r['usd'])})")
    head += f": {_money(d.total_usd)}"
    rule = next((o.get("deadline_rule") for o in d.options if o["model"] == d.model), None)
    if rule:
        head += (f" (expected under the deadline rule: {rule['fallback_share']:.1%} of the "
                 f"node-hours on on-demand fallback, {_money(rule['fallback_usd'])}; it switches "
                 f"to on-demand by {rule['latest_switch']} at the latest, so the work is done by "
                 f"{rule['guaranteed_by']}, deadline {format_utc(w.deadline)})")
    if d.months > 1:
        head += f" ({_money(d.monthly_usd)} a month over {d.months} months)"
    others = sorted((o for o in d.options if o["allowed"] and o["feasible"]
                     and o["model"] != d.model), key=lambda o: o["total_usd"])
    if others:
        nxt = others[0]
        head += (f"; next {WORDS[nxt['model']]} {_money(nxt['total_usd'])} "
                 f"(+{_money(nxt['total_usd'] - d.total_usd)})")
    if spec.priority > rules.reserved_above_priority:
        head += (f". Priority {spec.priority} > {rules.reserved_above_priority} needs "
                 "guaranteed capacity: a reservation, a Capacity Block, a calendar-mode "
                 "reservation or a commitment")
    return head + "."


def alternatives(spec, d: WindowDecision, o, rules) -> list:
    """The chosen offering's other window models, each with why it was not chosen."""
    out = []
    for opt in d.options:
        if opt["model"] == d.model:
            continue
        if not opt["allowed"]:
            why = (f"priority {spec.priority} > {rules.reserved_above_priority} needs "
                   "guaranteed capacity" if spec.priority > rules.reserved_above_priority
                   else f"not interruptible (no {spec.config_path}.checkpoint_minutes)"
                   if not spec.interruptible else
                   f"priority {spec.priority} >= {rules.spot_below_priority}: spot only below "
                   f"{rules.spot_below_priority}")
        elif not opt["feasible"]:
            why = f"window ({opt['model']}: {opt['unavailable']})"
        else:
            why = f"cost (+{_money(opt['total_usd'] - d.total_usd)} for the window, {opt['model']})"
        months = max(1, -(-opt["run_hours"] // 730)) if opt["total_usd"] is not None else 1
        mix = PurchaseMix(**{MIX_OF[opt["model"]]: opt["nodes"] or d.nodes})
        out.append(((opt["total_usd"] is None, opt["total_usd"] or 0.0), Alternative(
            o.cloud, o.region, o.instance_type, mix,
            None if opt["total_usd"] is None else opt["total_usd"] / months, why)))
    return out


class WindowCandidate(NamedTuple):
    """What a window makes of a cluster on one offering: the fields of its policy candidate
    (``candidates.evaluate`` builds the ``Candidate``; this module stays below it)."""

    template: str
    #: None = feasible; else the first rule it breaks
    rejected: Optional[str]
    #: (the WindowOption kept or None, every option priced, the allowed models)
    window: tuple
    purchase: Optional[PurchaseMix] = None
    costs: Optional[CostBreakdown] = None
    #: the commitment term of the option kept ("none" when it commits nothing; with no option
    #: kept, the candidate default "1y")
    term: str = "1y"
    #: the total the work item costs (``objective_of``): what candidates are compared by
    objective_usd: Optional[float] = None


def window_candidate(spec, o, ctx, forced, *, nodes: int, distributed: bool, network: str,
                     gang: bool, tcp_gang: bool, egress: float, ds,
                     rejected: Optional[str]) -> WindowCandidate:
    """The candidate of a cluster with a window on offering ``o`` (``candidates.evaluate``)."""
    rules = ctx.rules
    item = work_item(spec, o, ctx, nodes=nodes, gang=gang, tcp_gang=tcp_gang)
    opts = price_options(spec, o, ctx, item)
    allowed = W.allowed_models(spec.priority, spec.interruptible,
                               reserved_above=rules.reserved_above_priority,
                               spot_below=rules.spot_below_priority)
    pin = pin_of(spec, o)
    if pin is not None and judged_at(spec, o, ctx.now) < ctx.now:
        # the pinned block has started: it is bought and running, the plan continues it
        allowed = frozenset({CAPACITY_BLOCK}) & allowed or frozenset({CAPACITY_BLOCK})
    best = W.cheapest(opts, allowed)
    reason = rejected
    if best is None and reason is None:
        reason = infeasible_reason(opts, allowed, spec, rules)
    spot = best is not None and best.model == SPOT
    facts = Facts(nodes=nodes, distributed=distributed, rdma=o.has_rdma,
                  rdma_fabric=network != "none", dataset=bool(spec.dataset),
                  dataset_tb=ds.size_tb if ds is not None else 0.0, spot=spot,
                  interruptible=spec.interruptible,
                  spot_allowed=spec.interruptible
                  and spec.priority <= rules.reserved_above_priority,
                  priority=spec.priority, production=ctx.stack.is_prod)
    if forced is not None:
        tmpl = forced
        unmet = tmpl.unmet(facts)
        if unmet and reason is None:
            reason = f"template {tmpl.name} needs {' and '.join(unmet)}"
    else:
        tmpl = choose_template(facts)
    if best is None:
        return WindowCandidate(template=tmpl.name, rejected=reason,
                               window=(None, tuple(opts), allowed))
    costs = costs_of(best, egress)
    term = ("1y" if best.lock_in_months == 12 else "3y" if best.lock_in_months == 36
            else "none")
    return WindowCandidate(template=tmpl.name, rejected=reason,
                           window=(best, tuple(opts), allowed), purchase=mix_of(best),
                           costs=costs, term=term, objective_usd=objective_of(best, egress))
