"""Purchase models: the one ordered table every module reads (issue 31 item 3).

A purchase model is a way of paying for GPU capacity. Three vocabularies name them, and each is
a view of the one table :data:`TABLE` below, so a new model is one row:

- **node models** (``NODE_MODELS``): how a cluster's monthly nodes are bought - reserved
  (a commitment or capacity reservation), on-demand, spot - in the order node groups are
  declared and nodes are numbered (reserved first: billed whether used or not);
- **window models** (``WINDOW_MODELS``): every way a work item with a window can be bought,
  in the order `explain` lists them; ties between equal totals go to the one that prepays and
  locks in least (``WINDOW_PREFERENCE``);
- **catalog purchase options** (``CATALOG_OPTIONS``): how the providers sell an offering, as
  catalog rows record it (``purchase_options``), with the options that make a node model
  buyable (``MODEL_OPTIONS``).

Plain Python, no third-party import: the scheduled reaper bundle reads it too.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

#: the billing month the cost model uses (AWS and GCP both bill 730 h a month).
MONTHLY = "monthly"
#: bought for one window of work (a run with a start, an end and a deadline).
WINDOW = "window"

# The names, one constant each: code compares and keys by these, never by the string.
RESERVED, ON_DEMAND, SPOT = "reserved", "on_demand", "spot"
RESERVATION, COMMITMENT, FUTURE_RESERVATION = "reservation", "commitment", "future_reservation"
FLEX_START, CALENDAR, CAPACITY_BLOCK = "flex_start", "calendar", "capacity_block"
#: a node group or bootstrap serving several node models at once (an AWS mixed-instances ASG)
MIXED = "mixed"


@dataclass(frozen=True)
class PurchaseModel:
    """One way to pay for capacity.

    ``name``: the identifier in config, catalog, plan JSON, tags and labels. ``label``: the word
    in messages. ``node_order``: position among a cluster's node groups (None: not a node
    model). ``window_order``: position among a window's options (None: not a window model).
    ``window_preference``: tie-break among equal window totals, lower wins. ``catalog_order``:
    position among the purchase options catalog rows record (``Offering.options``; None: not
    one). ``buyable_by``: for a node
    model, the catalog options any one of which makes it buyable. ``prepaid``: paid whether the
    capacity is used or not (ahead, or by the hour regardless of use). ``guaranteed``: capacity
    held for the run (what a priority above the reserved band needs)."""

    name: str
    label: str
    node_order: Optional[int] = None
    window_order: Optional[int] = None
    window_preference: Optional[int] = None
    catalog_order: Optional[int] = None
    buyable_by: tuple[str, ...] = ()
    prepaid: bool = False
    guaranteed: bool = False
    #: introduced with purchase windows (bench/policy.py compares the plan without them)
    window_only: bool = False

    @property
    def scopes(self) -> tuple[str, ...]:
        return tuple(s for s, on in ((MONTHLY, self.node_order is not None),
                                     (WINDOW, self.window_order is not None)) if on)


#: The table. Order of rows is irrelevant: each view sorts by its own column.
TABLE: tuple[PurchaseModel, ...] = (
    PurchaseModel(RESERVED, "reserved", node_order=0, buyable_by=(RESERVATION, COMMITMENT),
                  prepaid=True, guaranteed=True),
    PurchaseModel(ON_DEMAND, "on-demand", node_order=1, window_order=0, window_preference=0,
                  catalog_order=0, buyable_by=(ON_DEMAND,)),
    PurchaseModel(SPOT, "spot", node_order=2, window_order=2, window_preference=1,
                  catalog_order=1, buyable_by=(SPOT,)),
    PurchaseModel(RESERVATION, "capacity reservation", window_order=1, window_preference=3,
                  catalog_order=2, prepaid=True, guaranteed=True),
    PurchaseModel(FLEX_START, "flex-start", window_order=3, window_preference=2, catalog_order=5,
                  window_only=True),
    PurchaseModel(CALENDAR, "calendar-mode reservation", window_order=4, window_preference=4,
                  prepaid=True, guaranteed=True, window_only=True),
    PurchaseModel(CAPACITY_BLOCK, "Capacity Block", window_order=5, window_preference=5,
                  catalog_order=6, prepaid=True, guaranteed=True, window_only=True),
    PurchaseModel(COMMITMENT, "1-/3-year commitment", window_order=6, window_preference=6,
                  catalog_order=3, prepaid=True, guaranteed=True),
    PurchaseModel(FUTURE_RESERVATION, "future reservation", catalog_order=4, prepaid=True,
                  guaranteed=True),
)

BY_NAME: dict[str, PurchaseModel] = {m.name: m for m in TABLE}

#: node models in node-group order: ("reserved", "on_demand", "spot")
NODE_MODELS: tuple[str, ...] = tuple(m.name for m in sorted(
    (m for m in TABLE if m.node_order is not None), key=lambda m: m.node_order))
#: window models in the order `explain` lists them
WINDOW_MODELS: tuple[str, ...] = tuple(m.name for m in sorted(
    (m for m in TABLE if m.window_order is not None), key=lambda m: m.window_order))
#: window model -> tie-break rank (lower wins: prepays and locks in least)
WINDOW_PREFERENCE: dict[str, int] = {m.name: m.window_preference for m in TABLE
                                     if m.window_preference is not None}
#: window models holding capacity for the run
GUARANTEED: frozenset[str] = frozenset(m.name for m in TABLE
                                       if m.guaranteed and m.window_order is not None)
#: the models purchase windows introduced
WINDOW_ONLY: frozenset[str] = frozenset(m.name for m in TABLE if m.window_only)
#: catalog purchase options, in the catalog's documented order
CATALOG_OPTIONS: tuple[str, ...] = tuple(m.name for m in sorted(
    (m for m in TABLE if m.catalog_order is not None), key=lambda m: m.catalog_order))
#: node model -> the catalog options that make it buyable (any one)
MODEL_OPTIONS: dict[str, tuple[str, ...]] = {n: BY_NAME[n].buyable_by for n in NODE_MODELS}
#: words for models and options in messages
LABELS: dict[str, str] = {m.name: m.label for m in TABLE}


def get(name: str) -> PurchaseModel:
    """The row for ``name`` (KeyError naming the known models)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown purchase model {name!r}; known: {', '.join(BY_NAME)}") from None


def label(name: str) -> str:
    return get(name).label


assert NODE_MODELS == (RESERVED, ON_DEMAND, SPOT), "node models vs their constants"
assert all(o in CATALOG_OPTIONS for n in NODE_MODELS for o in MODEL_OPTIONS[n])
