"""What the accounts already hold, before anything is bought (issue 32; docs/owned.md,
"Existing commitments and reservations").

After the exact cloud choice, each cluster's **reserved** nodes (the ones the policy would hold
with a new commitment or capacity reservation) are matched, clusters in config order, against
the inventory's holdings that are active at the decision's time (``Holding.active_at``):

- purchase model: a commitment (AWS Reserved Instances, GCP committed-use discounts), a
  reservation (ODCR, GCE reservation) or a Capacity Block - instance-counted holdings;
- same cloud; same region; a zonal holding only when its zone is the zone the cluster lands
  in (written as the plan writes zones: AWS zone IDs, GCE zone names);
- the instance: the holding's ``instance_type`` equals the offering's; else its
  ``instance_family`` is the offering's family (the text before the first ``.``, e.g. ``p5``);
  else (GCP) its ``accelerator_type`` is the offering's and it holds ``accelerators``;
- count: a holding covers up to its ``instances`` (GCP by accelerators: whole nodes of
  ``accelerators / gpus_per_node``), less what clusters before it in config order took.

Covered nodes buy no new commitment or reservation (the decision's ``coverage``; the cloud
components declare none for them) and are charged the holding's effective rate, which is sunk:
``(usd_per_hour + upfront_usd / (term_months x 730)) / instances`` per node-hour (GCP: per
accelerator x ``gpus_per_node``); a holding without a rate keeps the catalog's rate, and the
plan says so.

Savings Plans hold dollars an hour, not instances: AWS billing applies them to matching usage
by itself, so the policy does not re-price clusters with them (not yet: the rates the inventory
records per ``region/instance type`` would allow it); a Savings Plan whose family (EC2 Instance
Savings Plans: ``instance_family``), region and rated instance types (``rates``, when the
inventory has them) no cloud cluster of the plan runs is reported unused, with its commitment
as the monthly waste.

Every active holding nothing in the plan uses is a finding (:func:`unused`): its monthly cost
(``usd_per_hour x 730`` plus the upfront spread over the term) and, when a cluster of the plan
runs the holding's GPU in its region, the saving of pointing that cluster at it.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Optional

from gpulease.model import HOURS_PER_MONTH, Coverage, Offering, UnusedHolding
from gpulease.purchase import CAPACITY_BLOCK, COMMITMENT, RESERVATION

#: ``decide(inventory=DEFAULT)``: read ``gpulease:inventory`` or the cache (``load_for``).
DEFAULT = object()
#: purchase models a holding counts instances (or accelerators) in.
COUNTED = (COMMITMENT, RESERVATION, CAPACITY_BLOCK)


def counted(h) -> bool:
    """True for a holding of instances or accelerators; False for a $/hour commitment (a
    Savings Plan holds dollars an hour, ``instances`` 0)."""
    return h.model in COUNTED and bool(h.instances or h.accelerators)


def load(stack):
    """The stack's inventory (``gpulease.inventory.model.load_for``), or None."""
    from gpulease.inventory.model import load_for

    return load_for(stack)


def family(instance_type: str) -> str:
    return instance_type.split(".", 1)[0]


def _active(inventory, when: dt.datetime) -> list:
    if inventory is None:
        return []
    return [h for h in inventory.active(when) if h.state not in ("expired", "retired")]


def _capacity(h, o: Offering) -> int:
    """Nodes of offering ``o`` the holding can hold (0: it does not match the instance)."""
    if h.instance_type is not None and h.instance_type == o.instance_type:
        return h.instances
    if h.instance_type is None and h.instance_family is not None and h.instances and \
            h.instance_family == family(o.instance_type):
        return h.instances
    if h.accelerator_type is not None and h.accelerators and \
            h.accelerator_type == accelerator_of(o) and \
            (h.instance_type is None or h.instance_type == o.instance_type):
        return h.accelerators // o.gpus_per_node
    return 0


def accelerator_of(o: Offering) -> Optional[str]:
    """The GCE accelerator type an offering's nodes carry: attached (``accelerator_type``) or
    bundled with an accelerator-optimized series (the catalog fetcher's table, from
    https://cloud.google.com/compute/docs/gpus)."""
    if o.accelerator_type is not None:
        return o.accelerator_type
    from gpulease.catalog.fetchers.gcp import BUNDLED_ACCELERATOR

    return BUNDLED_ACCELERATOR.get(o.instance_type.rsplit("-", 1)[0])


def _where(h, o: Offering, zone: Optional[str]) -> bool:
    return h.cloud == o.cloud and h.region == o.region and (h.zone is None or h.zone == zone)


def node_rate(h, o: Offering) -> Optional[float]:
    """The holding's effective $/node-hour for offering ``o`` (None: the inventory has no
    rate)."""
    if h.usd_per_hour is None and h.upfront_usd is None:
        return None
    hourly = h.usd_per_hour or 0.0
    if h.upfront_usd:
        if not h.term_months:
            return None
        hourly += h.upfront_usd / (h.term_months * HOURS_PER_MONTH)
    if h.instances:
        return hourly / h.instances
    if h.accelerators:
        return hourly / h.accelerators * o.gpus_per_node
    return None


def monthly_cost(h) -> Optional[float]:
    """What the holding costs a month whether used or not (None: no rate in the inventory)."""
    if h.usd_per_hour is None and h.upfront_usd is None:
        return None
    out = (h.usd_per_hour or 0.0) * HOURS_PER_MONTH
    if h.upfront_usd:
        if not h.term_months:
            return None
        out += h.upfront_usd / h.term_months
    return out


def cover(specs, chosen, zones, inventory, when: dt.datetime
          ) -> dict[str, tuple[Coverage, ...]]:
    """Cluster name -> the holdings covering its reserved nodes (config order claims first);
    ``zones``: the zone each chosen candidate lands in (``decide.chosen_zone``)."""
    held = [h for h in _active(inventory, when) if counted(h)]
    if not held:
        return {}
    left = {h.id: None for h in held}
    out: dict[str, tuple[Coverage, ...]] = {}
    for spec, c, zone in zip(specs, chosen, zones):
        want = c.purchase.reserved if c.purchase is not None and c.window is None else 0
        if not want:
            continue
        o, got = c.offering, []
        for h in held:
            if not want:
                break
            if not _where(h, o, zone):
                continue
            cap = _capacity(h, o) if left[h.id] is None else left[h.id]
            if cap <= 0:
                continue
            n = min(cap, want)
            left[h.id] = cap - n
            want -= n
            rate = node_rate(h, o)
            what = h.instance_type or h.instance_family or h.accelerator_type or "?"
            got.append(Coverage(
                holding=h.id, kind=h.kind, model=h.model, nodes=n, usd_per_node_hour=rate,
                end=h.end,
                why=(f"{n} reserved node(s) covered by existing {h.kind} {h.id} ({what}, "
                     f"{h.region}{'/' + h.zone if h.zone else ''}"
                     f"{', until ' + h.end if h.end else ''}): no new purchase; charged its "
                     + (f"effective {rate:.4f} USD/node-hour" if rate is not None else
                        "rate (unknown in the inventory: the catalog's rate is shown)")
                     + ", which is sunk: paid whether they run or not")))
        if got:
            out[spec.name] = tuple(got)
    return out


def charged(c, coverage: tuple[Coverage, ...]):
    """(the candidate with its covered reserved nodes at their holdings' rates, the coverage
    with what each holding's nodes are charged a month)."""
    if not coverage or c.costs is None or not c.purchase.reserved:
        return c, coverage
    r = c.purchase.reserved
    per_node = c.costs.reserved_usd / r
    coverage = tuple(dataclasses.replace(x, monthly_usd=x.nodes * (
        x.usd_per_node_hour * HOURS_PER_MONTH if x.usd_per_node_hour is not None else per_node))
        for x in coverage)
    reserved = c.costs.reserved_usd - sum(x.nodes for x in coverage) * per_node + sum(
        x.monthly_usd for x in coverage)
    costs = dataclasses.replace(c.costs, reserved_usd=reserved)
    return dataclasses.replace(c, costs=costs, reserved_rate=reserved / (r * HOURS_PER_MONTH)), \
        coverage


def unused(inventory, coverage: dict, specs, chosen, catalog, when: dt.datetime
           ) -> tuple[UnusedHolding, ...]:
    """Active holdings nothing in the plan uses, with their monthly waste and the saving of
    pointing a cluster at them."""
    used = {x.holding for cov in coverage.values() for x in cov}
    out = []
    for h in _active(inventory, when):
        if h.id in used:
            continue
        if not counted(h):
            # a $/hour commitment (Savings Plan): billing applies it to matching usage
            runs = [c for c in chosen if c.offering.cloud == h.cloud and
                    (not h.region or c.offering.region == h.region) and
                    (h.instance_family is None or family(c.offering.instance_type) ==
                     h.instance_family) and
                    (not h.rates or f"{c.offering.region}/{c.offering.instance_type}" in
                     h.rates)]
            if runs:
                continue
        what = h.instance_type or h.instance_family or (
            f"{h.accelerators} x {h.accelerator_type}" if h.accelerator_type else
            f"{h.usd_per_hour} USD/hour" if h.usd_per_hour is not None else h.kind)
        if h.instances:
            what = f"{h.instances} x {what}"
        saving, who = None, None
        for spec, c in zip(specs, chosen):
            o = c.offering
            if o.cloud != h.cloud or (h.region and o.region != h.region) or \
                    c.purchase is None or c.window is not None:
                continue
            if not counted(h) or _capacity(h, o) <= 0:
                continue
            n = min(c.nodes, _capacity(h, o))
            if not n:
                continue
            # the cluster's nodes on the holding cost it nothing new: the saving is what they
            # cost now (per node, at the cluster's own monthly cost per node)
            saving, who = c.costs.monthly_usd / c.nodes * n, spec.name
            break
        out.append(UnusedHolding(holding=h.id, kind=h.kind, model=h.model, region=h.region,
                                 what=what, monthly_waste_usd=monthly_cost(h), end=h.end,
                                 saving_usd=saving, cluster=who))
    return tuple(out)
