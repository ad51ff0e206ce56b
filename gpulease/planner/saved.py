"""Saved plans (`gpulease plan --json > plan.json`) read back as untrusted input.

A saved plan is the baseline of the CI cost gate (`plan --diff PLAN.json --fail-on-increase
PCT`) and of `plan --against`. Whoever can edit the file can try to turn the gate off, so
nothing in it is taken on trust: it is read through the input boundary (:mod:`gpulease.inputs`:
size, encoding, depth, finite numbers), its ``format`` must be one this gpulease reads, every
resource must have the shape `plan --json` writes, every amount of money must be a finite,
non-negative number of USD, and ``totals.monthly_usd`` must equal the sum of the resources'
``monthly_usd`` (the gate compares sums of resources, never a total the file states). Any
problem is a :class:`~gpulease.errors.ConfigError` naming the file and the field: exit 2.

The plan document's shape is documented in docs/cli.md ("Plan JSON").
"""
from __future__ import annotations

from typing import Any

from gpulease import inputs, money
from gpulease.errors import ConfigError, Finding
from gpulease.planner.diff import resource_key

#: the plan formats this gpulease reads (it writes the last one).
PLAN_FORMATS = ("gpulease-plan/1",)
PLAN_FORMAT = PLAN_FORMATS[-1]
#: money keys that are differences, not amounts: they may be negative.
SIGNED_MONEY = frozenset({"headroom_usd", "budget_headroom_usd", "delta_usd"})
#: at most this many findings are listed (a broken file would list every resource).
MAX_FINDINGS = 20

HOW_TO_SAVE = ("save the baseline with `gpulease plan --stack NAME --json > plan.json`, on the "
               "target branch (docs/cli.md, \"The cost gate\")")

#: keys every resource of a plan carries, with their JSON types (C4; keys may be added).
_REQUIRED = {"urn": str, "type": str, "name": str, "cluster": str}
_OPTIONAL = {"physical_name": (str, type(None)), "cloud": str, "purchase_model": str,
             "tags": dict, "inputs": dict, "protect": bool, "retain_on_delete": bool}
_TYPE_WORDS = {str: "a string", dict: "a mapping", bool: "true or false", list: "a list",
               type(None): "null"}
MAX_TEXT = 4096


def load_saved_plan(path: str, *, flag: str) -> dict:
    """The plan document saved at ``path``, checked as untrusted input.

    ``flag`` is the option that named the file (``--diff``, ``--against``), for messages.
    Raises ConfigError (exit 2) naming the file and the field of every problem found."""
    doc = inputs.load_json(path, error=ConfigError, field=flag, what="saved plan",
                           headline=_headline(flag, str(path)))
    _raise_findings(plan_findings(doc, source=str(path)), source=str(path), flag=flag)
    return doc


def validate_plan(doc: Any, *, source: str, flag: str) -> None:
    """Raise ConfigError unless ``doc`` (a plan document already in memory) is one this
    gpulease can trust (see the module docstring)."""
    inputs.check_tree(doc, source=source, error=ConfigError, headline=_headline(flag, source))
    _raise_findings(plan_findings(doc, source=source), source=source, flag=flag)


def _raise_findings(found: list[Finding], *, source: str, flag: str) -> None:
    if found:
        if len(found) > MAX_FINDINGS:
            more = len(found) - MAX_FINDINGS
            found = found[:MAX_FINDINGS] + [Finding("resources", f"and {more} more problems",
                                                    source=source)]
        raise ConfigError(found, headline=_headline(flag, source))


def _headline(flag: str, source: str) -> str:
    return f"{flag} {source}: not a usable saved plan ({HOW_TO_SAVE}):"


def plan_findings(doc: Any, *, source: str) -> list[Finding]:
    """Every reason ``doc`` is not a trustworthy plan document (empty when it is one)."""
    out: list[Finding] = []

    def bad(path: str, message: str) -> None:
        out.append(Finding(path, message, source=source))

    if not isinstance(doc, dict):
        bad("(document)", f"a plan is a JSON object (got {_kind(doc)}): not a `gpulease plan "
            "--json` document")
        return out
    fmt = doc.get("format")
    if fmt not in PLAN_FORMATS:
        if fmt is None:
            bad("format", "missing: not a `gpulease plan --json` document (a saved plan "
                f'states its format, "{PLAN_FORMAT}")')
        elif isinstance(fmt, str) and fmt.startswith("gpulease-plan/"):
            bad("format", f"{fmt!r} is a plan format this gpulease does not read (it reads "
                f"{', '.join(PLAN_FORMATS)}): save the baseline with the same gpulease version")
        else:
            bad("format", f"{fmt!r:.60} is not a gpulease plan format (expected "
                f"{PLAN_FORMAT!r})")
        return out
    stack = doc.get("stack")
    if not isinstance(stack, str) or not 0 < len(stack) <= 200:
        bad("stack", f"must be the stack's name, a string (got {_shown(stack)})")
    catalog = doc.get("catalog")
    if catalog is not None:
        if not isinstance(catalog, dict):
            bad("catalog", f"must be a mapping (got {_kind(catalog)})")
        elif not isinstance(catalog.get("version"), (str, type(None))):
            bad("catalog.version", f"must be a string (got {_shown(catalog.get('version'))})")
    resources = doc.get("resources")
    if not isinstance(resources, list):
        bad("resources", f"must be the list of resources `plan --json` writes (got "
            f"{_kind(resources)})")
        return out
    total = money.ZERO
    money_ok = True
    seen: dict[str, int] = {}
    for i, r in enumerate(resources):
        where = f"resources[{i}]"
        if not isinstance(r, dict):
            bad(where, f"must be a mapping with urn, type, name, cluster and monthly_usd (got "
                f"{_kind(r)})")
            money_ok = False
            continue
        for key, typ in _REQUIRED.items():
            v = r.get(key)
            if key not in r:
                bad(f"{where}.{key}", "required key is missing")
            elif not isinstance(v, typ) or not v or len(v) > MAX_TEXT:
                bad(f"{where}.{key}", f"must be a non-empty string (got {_shown(v)})")
        for key, typ in _OPTIONAL.items():
            if key in r and not isinstance(r[key], typ):
                want = " or ".join(_TYPE_WORDS[t] for t in (typ if isinstance(typ, tuple)
                                                            else (typ,)))
                bad(f"{where}.{key}", f"must be {want} (got {_shown(r[key])})")
        urn = r.get("urn")
        if isinstance(urn, str) and urn:
            if not urn.startswith("urn:pulumi:"):
                bad(f"{where}.urn", f"{urn!r:.80} is not a Pulumi URN (urn:pulumi:STACK::"
                    "PROJECT::TYPE::NAME)")
            else:
                key = resource_key(urn)
                if key in seen:
                    bad(f"{where}.urn", f"the same resource as resources[{seen[key]}] (a "
                        "resource listed twice would be counted twice)")
                seen.setdefault(key, i)
        if "monthly_usd" not in r:
            bad(f"{where}.monthly_usd", "required key is missing")
            money_ok = False
        else:
            why = inputs.money_problem(r["monthly_usd"])
            if why:
                bad(f"{where}.monthly_usd", why)
                money_ok = False
            else:
                total += money.usd(r["monthly_usd"])
    # owned pools' lines (docs/owned.md): costs without a cloud resource, in the total
    owned = doc.get("owned")
    lines = owned.get("lines", []) if isinstance(owned, dict) else []
    if not isinstance(lines, list):
        bad("owned.lines", f"must be a list (got {_kind(lines)})")
        lines = []
    for i, x in enumerate(lines):
        amount = x.get("monthly_usd") if isinstance(x, dict) else None
        why = inputs.money_problem(amount) if isinstance(x, dict) else "must be a mapping"
        if why:
            bad(f"owned.lines[{i}].monthly_usd", why)
            money_ok = False
        else:
            total += money.usd(amount)
    out += _money_findings(doc, source)
    totals = doc.get("totals")
    if not isinstance(totals, dict):
        bad("totals", f"must be a mapping with monthly_usd (got {_kind(totals)})")
    elif "monthly_usd" not in totals:
        bad("totals.monthly_usd", "required key is missing")
    elif money_ok and inputs.money_problem(totals["monthly_usd"]) is None:
        stated = totals["monthly_usd"]
        if money.usd(stated) != total:   # to the cent (gpulease.money: the plan's own rule)
            bad("totals.monthly_usd", f"{money.fmt(stated)} is not the sum of the resources' "
                f"monthly_usd ({money.fmt(total)}): the file was edited or is damaged")
    return out


def _money_findings(doc: dict, source: str) -> list[Finding]:
    """Every ``*_usd`` amount in the document outside ``resources[*].monthly_usd`` (checked
    with its resource): a finite number of USD, non-negative unless it is a difference."""
    out = []
    for chain, value in inputs.walk(doc):
        if chain is None or value is None or not isinstance(chain[0], str):
            continue
        key = chain[0]
        if not key.endswith("_usd"):
            continue
        parent = chain[1]
        if key == "monthly_usd" and parent is not None and isinstance(parent[0], int) \
                and parent[1] is not None and parent[1][0] == "resources" and parent[1][1] is None:
            continue   # a resource's own amount: checked above
        if isinstance(value, (dict, list)):
            continue
        why = inputs.money_problem(value, signed=key in SIGNED_MONEY)
        if why:
            out.append(Finding(inputs.location(chain), why, source=source))
    return out


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "true/false",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _shown(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return _kind(value)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
