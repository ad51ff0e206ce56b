"""Money: one type (``decimal.Decimal`` US dollars, whole cents) and one formatter.

The policy prices in floats (a vectorised numpy pass; fractions of a cent matter there when
two offerings are compared). Money leaves the policy at the **ledger boundary**: every cost
component a resource carries (reserved, on-demand, spot nodes, spot rework, egress,
communication, a window purchase, a storage tier, retrieval, early deletion, a NAT gateway's
hours) is converted once by :func:`usd` and from then on only added as ``Decimal`` cents. A
cluster's total is the sum of its converted components, a resource's amount the sum of the
components it carries, a plan's total the sum of its resources' amounts - so `plan`,
`explain`, `--diff`, the HTML report, `--json`, the stack outputs and the budget guardrails
show the same totals to the cent (tests/test_money.py checks every shipped stack).

**The rounding rule** (:data:`ROUNDING`): a float is read as the shortest decimal that names
it (``repr``: 2.675 is "2.675", not the binary 2.67499999...) and rounded to the cent half
**up** (away from zero): 2.675 -> 2.68, 0.125 -> 0.13, -0.125 -> -0.13. Half-up is how a
person rounds the figure they read; half-even (banker's) rounding would turn 0.125 into 0.12.

In JSON (``plan --json``, ``explain --json``, the stack outputs) money stays a **number** with
at most two decimals (:func:`json_number`): saved plans are read back as numbers
(``gpulease.planner.saved``), and any amount up to ``gpulease.inputs.MAX_USD`` (1e12, 15 digits with
the cents) survives the float round trip exactly, so a reader that applies :func:`usd` gets
the same cents back. docs/money.md says the same for users.
"""
from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal
from typing import Iterable, Optional, Union

#: the rounding rule at the ledger boundary (see the module docstring).
ROUNDING = ROUND_HALF_UP
CENT = Decimal("0.01")
ZERO = Decimal("0.00")

Amount = Union[Decimal, float, int, str]


def usd(value: Amount) -> Decimal:
    """``value`` in US dollars as a Decimal of whole cents, by :data:`ROUNDING`.

    A float is read as its shortest decimal (``repr``), an int exactly, a Decimal or a numeric
    string as written. NaN, infinities and booleans are refused (ValueError / TypeError):
    money that is not a number is a bug upstream, never silently zero."""
    if isinstance(value, bool):
        raise TypeError(f"not an amount of money: {value!r}")
    if isinstance(value, Decimal):
        d = value
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a finite amount of money: {value!r}")
        d = Decimal(repr(value))
    elif isinstance(value, (int, str)):
        d = Decimal(value)
    else:
        raise TypeError(f"not an amount of money: {value!r}")
    if not d.is_finite():
        raise ValueError(f"not a finite amount of money: {value!r}")
    return d.quantize(CENT, rounding=ROUNDING)


def total(values: Iterable[Amount]) -> Decimal:
    """The sum of amounts, each converted by :func:`usd` first (the sum of the cents shown)."""
    return sum((usd(v) for v in values), ZERO)


def json_number(value: Optional[Amount]) -> Optional[float]:
    """An amount for a JSON document: a number with at most two decimals (None stays None).
    ``float(Decimal("4604.80"))`` is 4604.8, which :func:`usd` reads back as 4604.80."""
    return None if value is None else float(usd(value))


def cents(value: Amount) -> int:
    """An amount in whole US cents (GCP cost labels)."""
    return int(usd(value) * 100)


def fmt(value: Optional[Amount]) -> str:
    """THE money text: ``$1,234.56``, ``-$5.00``; ``-`` when unknown (None)."""
    if value is None:
        return "-"
    d = usd(value)
    return f"{'-' if d < 0 else ''}${abs(d):,.2f}"


def signed(value: Amount) -> str:
    """A change: ``+$1,234.56`` / ``-$5.00`` (zero is ``+$0.00``)."""
    d = usd(value)
    return f"{'-' if d < 0 else '+'}${abs(d):,.2f}"


def short(value: Optional[Amount]) -> str:
    """Chart labels: whole dollars from $100 up (``$455,936``), cents below (``$0.09``).
    Never a total a reader compares (those use :func:`fmt`)."""
    if value is None:
        return "-"
    d = usd(value)
    if abs(d) >= 100:
        whole = d.quantize(Decimal(1), rounding=ROUNDING)
        return f"{'-' if whole < 0 else ''}${abs(whole):,.0f}"
    return fmt(d)
