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
import re
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
BLOCK_TYPE = "aws:ec2/capacityBlockReservation:CapacityBlockReservation"


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


#: ``urn:pulumi:<stack>::<project>::<qualified type>::<name>`` (Pulumi's ``resource.URN``:
#: stack and project names are letters, digits, ``-``, ``_`` and ``.``; the qualified type is
#: the parents' types and the resource's own joined by ``$``; the name is the rest)
URN_SHAPE = "urn:pulumi:STACK::PROJECT::TYPE::NAME"
_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
_TYPE_RE = re.compile(r"[^\s:$]+(?::[^\s:$]+)*")


def parse_urn(urn: Any) -> Optional[tuple[str, str, str, str]]:
    """``(stack, project, type, name)`` of a well-formed Pulumi URN (the type without its
    parents' types), else None."""
    if not isinstance(urn, str) or not urn.startswith("urn:pulumi:"):
        return None
    parts = urn[len("urn:pulumi:"):].split("::", 3)
    if len(parts) != 4 or not parts[3]:
        return None
    stack, project, qualified, name = parts
    types = qualified.split("$")
    if not (_NAME_RE.fullmatch(stack) and _NAME_RE.fullmatch(project)
            and all(_TYPE_RE.fullmatch(t) for t in types)):
        return None
    return stack, project, types[-1], name


def load_previous(path: str) -> dict:
    """PREVIOUS as ``{"kind": "plan"|"state", "source", "stack", "project", "organization",
    "resources": {urn: {...}}, "clusters"}``.

    Untrusted input: read through the input boundary (``gpulease.inputs``: size, encoding, depth,
    finite numbers); a saved plan is checked as ``gpulease.planner.saved`` checks every saved plan
    (C4), a stack export for the shape Pulumi writes. Both must be consistent in themselves:
    every URN well formed, of the resource's own type, all of one stack and project (and of the
    organisation, project and stack the export names, where it names them), a saved plan's
    ``stack`` that of its URNs, its Capacity Blocks those its clusters pinned. A clear error
    naming the file and what is wrong (exit 2). The identity is compared with the plan's by
    :func:`check_identity`."""
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


def _export_hint(stack: str = "STACK") -> str:
    return (f"export the planned stack's own state (`pulumi stack export --stack {stack} > "
            f"FILE`) or save its plan (`gpulease plan --stack {stack} --json > FILE`)")


class _Identity:
    """The one (stack, project) every URN of PREVIOUS must have: the first resource's; a
    resource of another is a file mixing two stacks (exit 2). One pass, constant work per
    resource."""

    def __init__(self, path: str, prefix: str):
        self.path, self.prefix = path, prefix
        self.first: Optional[tuple[str, str, str]] = None      # (stack, project, where)

    def check(self, i: int, r: dict) -> tuple[str, str, str, str]:
        where = f"{self.prefix}[{i}]"
        parts = parse_urn(r["urn"])
        if parts is None:
            raise _bad(self.path, f"{where}.urn {r['urn']!r:.100} is not a Pulumi URN "
                                  f"({URN_SHAPE}): the file was edited or is damaged")
        stack, project, type_, _name = parts
        if type_ != r["type"]:
            raise _bad(self.path, f"{where}: its URN names type {type_!r:.100}, its type field "
                                  f"is {r['type']!r:.100}: the file was edited or is damaged")
        if self.first is None:
            self.first = (stack, project, where)
        elif (stack, project) != self.first[:2]:
            raise _bad(self.path, (
                f"mixes two stacks: {where} is of stack \"{stack}\" of project \"{project}\", "
                f"{self.first[2]} of stack \"{self.first[0]}\" of project \"{self.first[1]}\"; "
                + _export_hint(self.first[0])))
        return parts


def _from_plan(path: str, doc: dict) -> dict:
    """A saved plan validate_plan accepted (shapes, finite non-negative money)."""
    out: dict[str, dict] = {}
    ident = _Identity(path, "resources")
    for i, r in enumerate(doc["resources"]):
        ident.check(i, r)
        out[r["urn"]] = {"urn": r["urn"], "type": r["type"], "inputs": r.get("inputs") or {},
                         "outputs": None, "id": None, "protect": bool(r.get("protect")),
                         "monthly_usd": float(r.get("monthly_usd") or 0.0),
                         "cluster": r.get("cluster") or tags.SHARED,
                         "physical_name": r.get("physical_name"), "name": r.get("name")}
    if ident.first is not None and ident.first[0] != doc.get("stack"):
        raise _bad(path, (
            f"says it is a plan of stack \"{doc.get('stack')}\" but its resources are of stack "
            f"\"{ident.first[0]}\" ({ident.first[2]}.urn): the file was edited or is damaged; "
            + _export_hint(str(doc.get("stack")))))
    clusters = {c.get("name"): c for c in doc.get("clusters") or [] if isinstance(c, dict)}
    _check_blocks(path, doc, out)
    return {"kind": "plan", "source": path, "stack": doc.get("stack"),
            "project": ident.first[1] if ident.first else None, "organization": None,
            "resources": out, "clusters": clusters}


def _check_blocks(path: str, doc: dict, resources: dict) -> None:
    """A saved plan's Capacity Blocks are the blocks its clusters pinned: a block resource of
    another offering than its cluster's pin, or a pinned block (window not over) with no block
    resource, is a file that contradicts itself - read either way it could hide a second
    prepaid purchase (exit 2)."""
    blocks: dict[str, list[tuple[str, Any]]] = {}
    for urn, r in resources.items():
        if r["type"] == BLOCK_TYPE:
            blocks.setdefault(r["cluster"], []).append(
                (urn, r["inputs"].get("capacityBlockOfferingId")))
    for j, c in enumerate(doc.get("clusters") or []):
        pin = c.get(CAPACITY_BLOCK) if isinstance(c, dict) else None
        if not isinstance(pin, dict) or pin.get("offering_id") is None:
            continue
        want, name = pin["offering_id"], c.get("name")
        where = f"clusters[{j}].{CAPACITY_BLOCK}.offering_id"
        mine = blocks.get(name, [])
        for urn, got in mine:
            if got != want:
                raise _bad(path, (
                    f"contradicts itself: {where} is {want!r:.80}, the block it bought, but "
                    f"resource {urn.rsplit('::', 1)[-1]!r:.80} of cluster {name!r:.80} has "
                    f"capacityBlockOfferingId {got!r:.80}: the file was edited or is damaged "
                    "(compared as it is, a second prepaid block could pass unseen); "
                    + _export_hint(str(doc.get("stack")))))
        if not mine and pin.get("status") != "window ended":
            raise _bad(path, (
                f"contradicts itself: {where} is {want!r:.80}, a block its cluster {name!r:.80} "
                "holds, but no Capacity Block resource of that cluster is in resources: the "
                "file was edited or is damaged (compared as it is, a second prepaid block "
                "could pass unseen); " + _export_hint(str(doc.get("stack")))))


def _from_state(path: str, doc: dict) -> dict:
    version = doc.get("version")
    dep = doc.get("deployment")
    if version not in (1, 2, 3) or not isinstance(dep, dict):
        raise _bad(path, f"is a stack export of version {version!r}: gpulease reads versions "
                         "1-3 (`pulumi stack export` writes 3)")
    res = dep.get("resources")
    if res is None:
        res = []        # Pulumi omits an empty stack's resources (omitempty)
    if not isinstance(res, list):
        raise _bad(path, "deployment.resources is not a list (`pulumi stack export` writes "
                         "the list of resources)")
    out: dict[str, dict] = {}
    ident = _Identity(path, "deployment.resources")
    for i, r in enumerate(res):
        where = f"deployment.resources[{i}]"
        if not isinstance(r, dict) or not isinstance(r.get("urn"), str) \
                or not isinstance(r.get("type"), str):
            raise _bad(path, f"{where} is not a resource with a urn and a type")
        ident.check(i, r)
        if not r.get("custom") or r.get("delete") or r["type"] == "pulumi:pulumi:Stack":
            continue  # components, the stack, and resources pending deletion
        for key in ("inputs", "outputs"):
            if not isinstance(r.get(key, {}), dict):
                raise _bad(path, f"{where}.{key} is not an object")
        if r["urn"] in out:
            raise _bad(path, f"{where}.urn is listed twice (a live resource has one URN): the "
                             "file was edited or is damaged")
        inputs = _secret(r.get("inputs") or {})
        out[r["urn"]] = {"urn": r["urn"], "type": r["type"], "inputs": inputs,
                         "outputs": _secret(r.get("outputs") or {}), "id": r.get("id"),
                         "protect": bool(r.get("protect")),
                         "monthly_usd": _tagged_cost(inputs), "cluster": _tagged_cluster(inputs),
                         "physical_name": None, "name": r["urn"].rsplit("::", 1)[-1]}
    stack, project = (ident.first[0], ident.first[1]) if ident.first else (None, None)
    org = None
    # a Pulumi Cloud stack's export names its fully-qualified stack in its secrets provider
    # (``{"type": "service", "state": {"url", "owner", "project", "stack"}}``)
    sp = dep.get("secrets_providers")
    state = sp.get("state") if isinstance(sp, dict) else None
    if isinstance(state, dict):
        named = {k: state.get(k) for k in ("owner", "project", "stack")
                 if isinstance(state.get(k), str) and state.get(k)}
        org = named.get("owner")
        for key, have in (("project", project), ("stack", stack)):
            if key in named and have is not None and named[key] != have:
                raise _bad(path, (
                    f"names {key} \"{named[key]}\" (deployment.secrets_providers.state.{key}) "
                    f"but its resources are of {key} \"{have}\" ({ident.first[2]}.urn): the "
                    "file was edited or is damaged; " + _export_hint(named.get("stack", "STACK"))))
        stack = stack or named.get("stack")
        project = project or named.get("project")
    return {"kind": "state", "source": path, "stack": stack, "project": project,
            "organization": org, "resources": out, "clusters": {}}


def check_identity(previous: dict, *, stack: str, project: Optional[str]) -> None:
    """Exit 2 unless PREVIOUS is of the planned stack of this program's Pulumi project (the
    organisation is named where the export carries one): another project's or stack's state
    compared as ours would show every resource created and deleted, or hide a change."""
    found = [(k, previous.get(k), want) for k, want in (("project", project), ("stack", stack))]
    wrong = [(k, have, want) for k, have, want in found if have and want and have != want]
    if not wrong:
        return
    org = previous.get("organization")
    what = ", ".join(f'{k} "{have}"' for k, have, _ in found if have)
    raise ConfigError([Finding("--against", (
        f"{previous['source']} is of {what}" + (f" (organisation \"{org}\")" if org else "")
        + "; this plan is of " + ", ".join(f'{k} "{want}"' for k, _, want in found if want)
        + (" (Pulumi.yaml `name`)" if any(k == "project" for k, _, _ in wrong) else "")
        + ": compare a stack with its own previous plan or state - " + _export_hint(stack)))],
        headline=f"--against {previous['source']}: not the state of the planned stack:")


def plan_project(plan: dict) -> str:
    """The Pulumi project of the plan's URNs (the program's: ``planner.mocks.PROJECT``)."""
    from gpulease.planner.mocks import PROJECT

    for r in plan.get("resources") or ():
        parts = parse_urn(r.get("urn"))
        if parts is not None:
            return parts[1]
    return PROJECT


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

    check_identity(previous, stack=stack, project=plan_project(plan))
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
                     "stack": previous.get("stack"), "project": previous.get("project"),
                     "organization": previous.get("organization")},
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


def _in_use(res: dict, refs: dict[str, set]) -> bool:
    """A reservation another resource of PREVIOUS refers to (by id, name or the plan's id):
    ``refs`` maps each string found in PREVIOUS's inputs (values and keys) to the URNs holding
    it (:func:`_references`)."""
    marks = {m for m in (res.get("id"), res.get("physical_name"),
                         res["inputs"].get("name"), f"{res.get('name')}-id")
             if isinstance(m, str) and len(m) > 3}
    return any(refs.get(m, set()) - {res["urn"]} for m in marks)


def _references(previous: dict) -> dict[str, set]:
    """Every string in PREVIOUS's inputs (values and keys, at any depth) -> the URNs whose
    inputs hold it: built once, so finding which reservations are in use is linear in the
    size of PREVIOUS (a scan of every other resource per reservation was quadratic: 2,500
    reservations took a minute, bench/against.py)."""
    refs: dict[str, set] = {}
    for urn, r in previous["resources"].items():
        stack = [r["inputs"]]
        while stack:
            v = stack.pop()
            if isinstance(v, str):
                refs.setdefault(v, set()).add(urn)
            elif isinstance(v, dict):
                for k, x in v.items():
                    if isinstance(k, str):
                        refs.setdefault(k, set()).add(urn)
                    stack.append(x)
            elif isinstance(v, list):
                stack.extend(v)
    return refs


def _prepaid(rows: list[dict], previous: dict, plan: dict,
             allow: tuple) -> tuple[list[dict], list[dict]]:
    """Replacements and deletions the next `pulumi up` must not do: of prepaid or committed
    resources (unless their cluster opts in), and of protected ones, which the engine refuses
    (a replacement when the program still protects the resource, a deletion when the state
    does: https://github.com/pulumi/pulumi/pull/8873)."""
    new_protect = {r["urn"]: bool(r.get("protect")) for r in plan["resources"]}
    blocked, allowed = [], []
    refs: Optional[dict] = None
    for r in rows:
        if r["action"] not in ("replace", "delete"):
            continue
        old = previous["resources"][r["urn"]]
        refused = new_protect.get(r["urn"]) if r["action"] == "replace" else old["protect"]
        why = PREPAID_TYPES.get(r["type"])
        if why is None and r["type"] in RESERVATION_TYPES:
            refs = _references(previous) if refs is None else refs
            if _in_use(old, refs):
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
