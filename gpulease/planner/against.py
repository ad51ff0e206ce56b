"""`gpulease plan --against PREVIOUS`: what the next `pulumi up` would do to each resource.

PREVIOUS is what the last `pulumi up` left: a saved `gpulease plan --json` document, or a
`pulumi stack export` file (``{"version": 3, "deployment": {"resources": [...]}}``, Pulumi's
``apitype.UntypedDeployment`` / ``ResourceV3``). Each resource of the new plan is matched by URN
and classified as the engine would:

- **create** / **delete**: in the new plan only / in PREVIOUS only;
- **replace**: an input changed whose Terraform schema forces a new resource (``ForceNew`` /
  ``RequiresReplace``: ``gpulease/planner/data/replace_on_change.json``, read from the upstream
  providers' sources), named in ``replaced_by``; gpulease's own dynamic resources are asked
  through Pulumi's host code (``gpulease.planner.dynhost``: the provider's ``diff``);
- **update**: other inputs changed (``properties``); **unchanged**: none did.

As the engine does, an input the provider auto-named keeps the name the state holds, inputs the
resource's ``ignore_changes`` lists are not compared, and defaults the provider filled
(``__defaults`` in a state) count as unchanged when the program still leaves them unset.

Each row carries its monthly cost before and after; replacing a prepaid Capacity Block also
costs its upfront fee again. A replace or delete of a prepaid or committed resource (a Capacity
Block, a GCP commitment, a reservation a node group uses) of a cluster not listed in
``gpulease:allow_prepaid_replacement`` is **blocked**: `gpulease plan` exits 4 with the reason.
"""
from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Optional

from gpulease import money
from gpulease import tags
from gpulease.errors import ConfigError, Finding
from gpulease.datafiles import package_path
from gpulease.purchase import CAPACITY_BLOCK

ACTIONS = ("create", "update", "replace", "delete", "unchanged")
REPLACE_DATA = package_path("planner", "data", "replace_on_change.json")
#: Pulumi's secret signature in states (``apitype.SecretV1``)
SECRET_SIG_KEY = "4dabf18193072939515e22adb298388d"
SECRET_MASK = "[secret]"
#: types that are paid up front or committed: replacing or deleting one loses money.
PREPAID_TYPES = {
    "aws:ec2/capacityBlockReservation:CapacityBlockReservation":
        "a prepaid Capacity Block (not refundable; a replacement buys a second block)",
    "gcp:compute/regionCommitment:RegionCommitment":
        "a committed use contract (billed for its whole term)",
    "gcp:compute/futureReservation:FutureReservation":
        "a future reservation (capacity secured ahead of its window, e.g. calendar mode: a "
        "replacement gives it up and requests it again, which may not be granted)",
}
#: reservations: committed capacity when a node group uses them
RESERVATION_TYPES = {
    "aws:ec2/capacityReservation:CapacityReservation",
    "gcp:compute/reservation:Reservation",
    "pulumi-python:dynamic/gpulease:GceReservation",
}
OPT_IN_KEY = "gpulease:allow_prepaid_replacement"


@lru_cache(maxsize=1)
def replace_data() -> dict:
    """The replace-forcing inputs per type (``replace_on_change.json``)."""
    return json.loads(REPLACE_DATA.read_text(encoding="utf-8"))


# ---- reading PREVIOUS ------------------------------------------------------------------------
def _bad(path: str, what: str) -> ConfigError:
    return ConfigError([Finding("--against", f"{path}: {what}")], headline=(
        f"--against {path}: not a saved `gpulease plan --json` document or a `pulumi stack "
        "export` file:"))


def _secret(value: Any) -> Any:
    """A state's secret value: its plaintext when exported with --show-secrets, else a mask."""
    if isinstance(value, dict):
        if value.get(SECRET_SIG_KEY) is not None:
            if "plaintext" in value:
                try:
                    return _secret(json.loads(value["plaintext"]))
                except (TypeError, ValueError):
                    return SECRET_MASK
            return SECRET_MASK
        return {k: _secret(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_secret(v) for v in value]
    return value


def _stack_of(urn: str) -> Optional[str]:
    head = urn.split("::", 1)[0].split(":")
    return head[2] if len(head) >= 3 and head[:2] == ["urn", "pulumi"] else None


def load_previous(path: str) -> dict:
    """PREVIOUS as ``{"kind": "plan"|"state", "source", "stack", "resources": {urn: {...}}}``.

    Untrusted input: read through the input boundary (``gpulease.inputs``: size, encoding, depth,
    finite numbers); a saved plan is checked as ``gpulease.planner.saved`` checks every saved plan
    (C4), a stack export for the shape Pulumi writes. A clear error naming the file and what is
    wrong (exit 2)."""
    from gpulease import inputs
    from gpulease.planner.saved import validate_plan

    headline = (f"--against {path}: not a saved `gpulease plan --json` document or a `pulumi "
                "stack export` file:")
    doc = inputs.load_json(path, error=ConfigError, field="--against",
                           what="previous plan or stack export", headline=headline)
    if isinstance(doc, dict) and "deployment" in doc:
        return _from_state(path, doc)
    if isinstance(doc, dict) and "format" in doc:
        validate_plan(doc, source=path, flag="--against")
        return _from_plan(path, doc)
    raise _bad(path, "is neither a `gpulease plan --json` document (\"format\": "
                     "\"gpulease-plan/1\") nor a `pulumi stack export` (\"deployment\")")


def _from_plan(path: str, doc: dict) -> dict:
    """A saved plan validate_plan accepted (shapes, finite non-negative money)."""
    out: dict[str, dict] = {}
    for r in doc["resources"]:
        out[r["urn"]] = {"urn": r["urn"], "type": r["type"], "inputs": r.get("inputs") or {},
                         "outputs": None, "id": None, "protect": bool(r.get("protect")),
                         "monthly_usd": float(r.get("monthly_usd") or 0.0),
                         "cluster": r.get("cluster") or tags.SHARED,
                         "physical_name": r.get("physical_name"), "name": r.get("name")}
    return {"kind": "plan", "source": path, "stack": doc.get("stack"), "resources": out,
            "clusters": {c.get("name"): c for c in doc.get("clusters") or []
                         if isinstance(c, dict)}}


def _from_state(path: str, doc: dict) -> dict:
    version = doc.get("version")
    dep = doc.get("deployment")
    if version not in (1, 2, 3) or not isinstance(dep, dict):
        raise _bad(path, f"is a stack export of version {version!r}: gpulease reads versions "
                         "1-3 (`pulumi stack export` writes 3)")
    res = dep.get("resources") or []
    if not isinstance(res, list):
        raise _bad(path, 'deployment.resources is not a list')
    out: dict[str, dict] = {}
    stacks = set()
    for i, r in enumerate(res):
        where = f"deployment.resources[{i}]"
        if not isinstance(r, dict) or not isinstance(r.get("urn"), str) \
                or not isinstance(r.get("type"), str):
            raise _bad(path, f"{where} is not a resource with a urn and a type")
        if not r.get("custom") or r.get("delete") or r["type"] == "pulumi:pulumi:Stack":
            continue  # components, the stack, and resources pending deletion
        for key in ("inputs", "outputs"):
            if not isinstance(r.get(key, {}), dict):
                raise _bad(path, f"{where}.{key} is not an object")
        inputs = _secret(r.get("inputs") or {})
        stacks.add(_stack_of(r["urn"]))
        out[r["urn"]] = {"urn": r["urn"], "type": r["type"], "inputs": inputs,
                         "outputs": _secret(r.get("outputs") or {}), "id": r.get("id"),
                         "protect": bool(r.get("protect")),
                         "monthly_usd": _tagged_cost(inputs), "cluster": _tagged_cluster(inputs),
                         "physical_name": None, "name": r["urn"].rsplit("::", 1)[-1]}
    return {"kind": "state", "source": path,
            "stack": next(iter(stacks)) if len(stacks) == 1 else None, "resources": out,
            "clusters": {}}


def _tag_map(inputs: dict) -> dict:
    t = inputs.get("tags")
    if isinstance(t, list):   # ASG tags: [{key, value, propagateAtLaunch}]
        return {x.get("key"): x.get("value") for x in t if isinstance(x, dict)}
    if isinstance(t, dict):
        return t
    lab = inputs.get("labels")
    return lab if isinstance(lab, dict) else {}


def _tagged_cost(inputs: dict) -> Optional[float]:
    """The monthly cost gpulease stamped on a resource (AWS dollars, GCP cents), or None."""
    t = _tag_map(inputs)
    try:
        if t.get(tags.MONTHLY_USD) is not None:
            return money.json_number(str(t[tags.MONTHLY_USD]))
        if t.get(tags.MONTHLY_CENTS) is not None:
            return money.json_number(tags.from_cents(str(t[tags.MONTHLY_CENTS])))
    except (TypeError, ValueError, ArithmeticError):
        return None
    return None


def _tagged_cluster(inputs: dict) -> str:
    return str(_tag_map(inputs).get(tags.CLUSTER) or tags.SHARED)


# ---- comparing inputs ------------------------------------------------------------------------
def _norm(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def changed_paths(old: Any, new: Any, path: tuple = ()) -> list[str]:
    """Dotted input paths (camelCase keys, list items without index) whose values differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new)):
            if k in old and k in new:
                out += changed_paths(old[k], new[k], path + (k,))
            else:
                out.append(".".join(path + (k,)))
        return out
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [".".join(path)]
        out = []
        for a, b in zip(old, new):
            out += changed_paths(a, b, path)
        return sorted(set(out))
    if old == SECRET_MASK or new == SECRET_MASK:
        return []          # a secret the export did not reveal: not compared
    return [] if _norm(old) == _norm(new) else [".".join(path)]


def forcing(type_: str, paths: list[str]) -> tuple[list[str], list[str]]:
    """The replace-forcing properties among changed ``paths`` (and those that may force)."""
    entry = replace_data()["types"].get(type_)
    if entry is None:
        return [], []
    hard, maybe = set(entry["replace"]), set(entry["conditional"])

    def hit(p: str, keys: set) -> Optional[str]:
        parts = p.split(".")
        for n in range(1, len(parts) + 1):
            if ".".join(parts[:n]) in keys:
                return ".".join(parts[:n])
        return next((k for k in sorted(keys) if k.startswith(p + ".")), None)

    forced = sorted({h for p in paths if (h := hit(p, hard))})
    cond = sorted({h for p in paths if (h := hit(p, maybe))} - set(forced))
    return forced, cond


def _prepare_old(old: dict) -> dict:
    inputs = dict(old["inputs"])
    inputs.pop("__defaults", None)
    return inputs


def _align(new: dict, old: dict, old_res: dict, autoname: Optional[str],
           ignore: list[str]) -> dict:
    """The new inputs as the engine compares them: the auto-named input keeps the state's name,
    ignored inputs and provider-filled defaults the program leaves unset take the old value."""
    out = dict(new)
    if autoname and autoname in old:
        out[autoname] = old[autoname]
    for key in ignore:
        top = key.split(".")[0].split("[")[0]
        if top in old:
            out[top] = old[top]
        else:
            out.pop(top, None)
    defaults = old_res["inputs"].get("__defaults") or []
    for key in defaults if isinstance(defaults, list) else []:
        if key not in new and key in old:
            out[key] = old[key]
    return out


# ---- the comparison -----------------------------------------------------------------------------
def opt_in_findings(allow: tuple, clusters, previous: dict, source: str = "") -> list[Finding]:
    """Names in ``gpulease:allow_prepaid_replacement`` that are neither a cluster of the stack
    (``clusters``: the config's names) nor a cluster PREVIOUS holds resources of (a removed
    cluster, whose prepaid resources the opt-in lets go): exit 2, with a did-you-mean. Reading
    the stack alone cannot tell a typo from a removed cluster, so there it is a warning."""
    from gpulease.errors import did_you_mean

    known = list(dict.fromkeys([*clusters, *(r.get("cluster") for r in
                                             previous["resources"].values())]))
    known = [k for k in known if k and k != tags.SHARED]
    return [Finding(f"{OPT_IN_KEY}[{j}]", (
        f'"{name}" names no cluster of this stack nor of {previous["source"]}'
        f"{did_you_mean(name, known)}: it would opt nothing in; list a cluster by its name "
        f"(clusters: {', '.join(known) or 'none'}), or remove it"), source=source)
        for j, name in enumerate(allow) if name not in known]


def compare(previous: dict, plan: dict, *, allow: tuple = (), stack: str = "",
            host=None) -> dict:
    """Per-resource actions of the next `pulumi up`, their cost effect, and what is blocked."""
    from gpulease.planner.dynamic import is_dynamic
    from gpulease.planner.mocks import UNKNOWN_MASK

    if previous.get("stack") and stack and previous["stack"] != stack:
        raise ConfigError([Finding("--against", (
            f"{previous['source']} is of stack \"{previous['stack']}\", this plan is of stack "
            f"\"{stack}\": compare a stack with its own previous plan or state"))])
    old_all = previous["resources"]
    new_all = {r["urn"]: r for r in plan["resources"]}
    rows: list[dict] = []
    own_host = None
    try:
        for urn in sorted(set(old_all) | set(new_all)):
            old, new = old_all.get(urn), new_all.get(urn)
            row = {"urn": urn, "type": (new or old)["type"],
                   "name": (new or old).get("name") or urn.rsplit("::", 1)[-1],
                   "cluster": (new or {}).get("cluster") or (old or {}).get("cluster")
                   or tags.SHARED,
                   "properties": [], "replaced_by": [], "may_replace": [],
                   "old_monthly_usd": None if old is None else old["monthly_usd"],
                   "new_monthly_usd": None if new is None else new["monthly_usd"]}
            if old is None:
                row["action"] = "create"
            elif new is None:
                row["action"] = "delete"
            elif is_dynamic(row["type"]):
                if own_host is None and host is None:
                    from gpulease.planner.dynhost import DynamicHost

                    own_host = DynamicHost()
                h = host or own_host
                # as the engine: Check(old inputs, new inputs), then Diff(state, checked inputs)
                checked = h.check(urn, old["inputs"], new["inputs"],
                                  unknown_marks=(UNKNOWN_MASK,)).inputs
                d = h.diff(urn, old.get("id") or "", old.get("outputs") or old["inputs"],
                           checked, old_inputs=old["inputs"], unknown_marks=(UNKNOWN_MASK,))
                row["properties"] = changed_paths(_prepare_old(old), new["inputs"])
                row["properties"] = [p for p in row["properties"] if p != "__provider"]
                row["replaced_by"] = sorted(d.replaces)
                row["action"] = ("replace" if d.replaces else "update" if d.changes else
                                 "unchanged")
            else:
                before = _prepare_old(old)
                after = _align(new["inputs"], before, old, new.get("autoname"),
                               new.get("ignore_changes") or [])
                paths = changed_paths(before, after)
                forced, maybe = forcing(row["type"], paths)
                if row["type"].startswith("pulumi:providers:"):
                    forced = [p for p in paths if p in ("region", "project")]
                row.update(properties=paths, replaced_by=forced, may_replace=maybe,
                           action="replace" if forced else "update" if paths else "unchanged")
            rows.append(row)
    finally:
        if own_host is not None:
            own_host.close()
    _costs(rows, plan)
    blocked, allowed = _prepaid(rows, previous, plan, allow)
    counts = {a: sum(1 for r in rows if r["action"] == a) for a in ACTIONS}
    before = money.total(r["old_monthly_usd"] or 0 for r in rows)
    after = money.total(r["new_monthly_usd"] or 0 for r in rows)
    one_time = money.total(r.get("one_time_usd") or 0 for r in rows)
    return {
        "previous": {"kind": previous["kind"], "source": previous["source"],
                     "stack": previous.get("stack")},
        "counts": counts,
        "resources": [r for r in rows if r["action"] != "unchanged"],
        "unchanged": counts["unchanged"],
        "monthly_usd": {"before": money.json_number(before),
                        "after": money.json_number(after),
                        "delta": money.json_number(after - before)},
        "one_time_usd": money.json_number(one_time),
        "blocked": blocked, "allowed": allowed,
        "replace_data": {k: {"repository": v["repository"], "commit": v["commit"]}
                         for k, v in replace_data()["sources"].items()},
    }


def _costs(rows: list[dict], plan: dict) -> None:
    """Each row's cost effect. A state records a resource's monthly cost only where gpulease
    could stamp it (a tag or label); for the others (GCP MIGs, dynamic resources) the old cost
    is taken to be the new plan's (``old_cost_assumed``), or unknown for a deletion."""
    fees = {c["name"]: (c.get(CAPACITY_BLOCK) or {}).get("upfront_fee_usd")
            for c in plan.get("clusters", [])}
    for r in rows:
        if r["old_monthly_usd"] is None and r["action"] not in ("create", "delete"):
            r["old_monthly_usd"], r["old_cost_assumed"] = r["new_monthly_usd"], True
        o, n = r["old_monthly_usd"], r["new_monthly_usd"]
        r["delta_usd"] = money.json_number(money.usd(n or 0) - money.usd(o or 0))
        if r["action"] in ("create", "replace") and \
                r["type"] == "aws:ec2/capacityBlockReservation:CapacityBlockReservation":
            r["one_time_usd"] = fees.get(r["cluster"])


def _in_use(res: dict, previous: dict) -> bool:
    """A reservation another resource of PREVIOUS refers to (by id, name or the plan's id)."""
    marks = {m for m in (res.get("id"), res.get("physical_name"),
                         res["inputs"].get("name"), f"{res.get('name')}-id")
             if isinstance(m, str) and len(m) > 3}
    if not marks:
        return False
    for other in previous["resources"].values():
        if other is res:
            continue
        text = json.dumps(other["inputs"], sort_keys=True)
        if any(f'"{m}"' in text for m in marks):
            return True
    return False


def _prepaid(rows: list[dict], previous: dict, plan: dict,
             allow: tuple) -> tuple[list[dict], list[dict]]:
    """Replacements and deletions the next `pulumi up` must not do: of prepaid or committed
    resources (unless their cluster opts in), and of protected ones, which the engine refuses
    (a replacement when the program still protects the resource, a deletion when the state
    does: https://github.com/pulumi/pulumi/pull/8873)."""
    new_protect = {r["urn"]: bool(r.get("protect")) for r in plan["resources"]}
    blocked, allowed = [], []
    for r in rows:
        if r["action"] not in ("replace", "delete"):
            continue
        old = previous["resources"][r["urn"]]
        refused = new_protect.get(r["urn"]) if r["action"] == "replace" else old["protect"]
        why = PREPAID_TYPES.get(r["type"])
        if why is None and r["type"] in RESERVATION_TYPES and _in_use(old, previous):
            why = "a reservation a node group uses (its capacity may not come back)"
        if why is not None:
            r["prepaid"] = why
        if refused:
            r["protected"] = True
        if why is None and not refused:
            continue
        item = {"urn": r["urn"], "type": r["type"], "name": r["name"], "cluster": r["cluster"],
                "action": r["action"], "replaced_by": r["replaced_by"], "protected": refused,
                "prepaid": why,
                "why": "; ".join(x for x in (why, "protected: `pulumi up` refuses to "
                                             f"{r['action']} it" if refused else None) if x)}
        (allowed if why and not refused and r["cluster"] in allow else blocked).append(item)
    return blocked, allowed


def blocked_reason(result: dict) -> str:
    """Exit 4's reason: each blocked replacement or deletion, and the opt-in."""
    items = [f"{b['action']} {b['name']} ({b['why']}"
             + (f"; forced by {', '.join(b['replaced_by'])}" if b["replaced_by"] else "") + ")"
             for b in result["blocked"]]
    clusters = sorted({b["cluster"] for b in result["blocked"] if b["prepaid"]})
    out = "the next `pulumi up` would " + "; ".join(items) + "."
    if clusters:
        out += (f" Nothing prepaid or committed is replaced or deleted without opting in: list "
                f"{', '.join(clusters)} in {OPT_IN_KEY} if that is intended.")
    if any(b["protected"] and not b["prepaid"] for b in result["blocked"]):
        out += (" A protected resource is replaced only when the program stops protecting it, "
                "and deleted only after `pulumi state unprotect`.")
    return out
