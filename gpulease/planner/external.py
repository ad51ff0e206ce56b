"""Cost a real `pulumi preview --json` or `pulumi stack export` (issue 36 item 1).

A team that runs the Pulumi CLI has the engine's own view of the stack: the preview document
(Pulumi's ``PreviewDigest``, sdk/go/common/display/json.go: ``steps[]`` of ``PreviewStep`` -
``op``, ``urn``, ``provider``, ``oldState`` / ``newState`` (``apitype.ResourceV3``: ``urn``,
``custom``, ``type``, ``inputs``, ``outputs``, ...), ``diffReasons``, ``replaceReasons``,
``detailedDiff`` - then ``changeSummary``, ``diagnostics``, ``duration``) or the state export
(``{"version": 3, "deployment": {"resources": [...]}}``). `gpulease plan --from-preview FILE`
/ `--from-state FILE` prices THOSE resources, in this order:

1. the cost gpulease's transform stamped on the resource (``gpulease-monthly-usd`` tag on AWS,
   ``gpulease-monthly-cents`` label on GCP): what the program computed when the engine ran it;
2. for a resource of gpulease's that carries no tags (IAM, dynamic providers, ...), the
   offline plan of the same stack, matched by URN;
3. an EC2 or Compute Engine instance the catalog prices (on-demand, 730 h a month);
4. anything else is listed as **unknown** (type and URN), never counted as $0.

Steps that delete (``delete``, ``delete-replaced``, ``discard``, ``discard-replaced``,
``remove-pending-replace``) leave the resource out of the result; the rest (``same``,
``create``, ``update``, ``replace``, ``create-replacement``, ``read``, ``import``, ...) keep
its ``newState``. Values the engine does not know yet (the unknown sentinels of
``resource.Unknown*Value``) stay as they are: no price depends on them.
"""
from __future__ import annotations

from typing import Any, Optional

from gpulease import inputs as boundary
from gpulease import money
from gpulease.errors import ConfigError, Finding
from gpulease.planner.against import _secret, _stack_of, _tagged_cluster, _tagged_cost

#: every StepOp the engine writes (sdk/go/common/display: deploy.Op* labels)
KEEP_OPS = ("same", "create", "update", "replace", "create-replacement", "read",
            "read-replacement", "refresh", "import", "import-replacement")
DROP_OPS = ("delete", "delete-replaced", "discard", "discard-replaced",
            "remove-pending-replace")
#: the engine's "not known yet" sentinels (sdk/go/common/resource/properties.go)
UNKNOWNS = ("04da6b54-80e4-46f7-96ec-b56ff0331ba9",   # string
            "3eeb2bf0-c639-47a8-9e75-3b44932eb421",   # number
            "1c4a061d-8072-4f0a-a4cb-0ff528b18fe7")   # bool
INSTANCE_TYPES = {"aws:ec2/instance:Instance": "instanceType",
                  "gcp:compute/instance:Instance": "machineType"}


def _bad(flag: str, path: str, what: str) -> ConfigError:
    return ConfigError([Finding(flag, f"{path}: {what}")],
                       headline=f"{flag} {path}: not a document gpulease can cost:")


def _urn_ok(urn: Any) -> bool:
    return isinstance(urn, str) and urn.startswith("urn:pulumi:") and urn.count("::") >= 3


def load_preview(path: str) -> dict:
    """A `pulumi preview --json` document as ``{"kind": "preview", "source", "stack",
    "resources": {urn: {...}}, "ops": {op: count}, "removed": [urn, ...]}`` (exit 2, naming
    the file and the step, when it is not one)."""
    flag = "--from-preview"
    doc = boundary.load_json(path, error=ConfigError, field=flag, what="preview document",
                             headline=f"{flag} {path}: not a `pulumi preview --json` document:")
    if not isinstance(doc, dict) or not isinstance(doc.get("steps", []), list):
        raise _bad(flag, path, "is not a `pulumi preview --json` document (an object with "
                               "\"steps\")")
    out: dict[str, dict] = {}
    ops: dict[str, int] = {}
    removed: list[str] = []
    stacks = set()
    for i, step in enumerate(doc.get("steps") or []):
        where = f"steps[{i}]"
        if not isinstance(step, dict) or step.get("op") not in KEEP_OPS + DROP_OPS:
            raise _bad(flag, path, f"{where}.op is {step.get('op') if isinstance(step, dict) else step!r}"
                                   f"; the engine writes one of {', '.join(KEEP_OPS + DROP_OPS)}")
        urn = step.get("urn")
        if not _urn_ok(urn):
            raise _bad(flag, path, f"{where}.urn {urn!r} is not a Pulumi URN "
                                   "(urn:pulumi:STACK::PROJECT::TYPE::NAME)")
        op = step["op"]
        ops[op] = ops.get(op, 0) + 1
        stacks.add(_stack_of(urn))
        if op in DROP_OPS:
            removed.append(urn)
            continue
        state = step.get("newState")
        if not isinstance(state, dict):
            raise _bad(flag, path, f"{where} ({op}) has no newState object")
        if not state.get("custom") or state.get("type") == "pulumi:pulumi:Stack":
            continue                                   # components and the stack itself
        if not isinstance(state.get("type"), str) or not isinstance(state.get("inputs", {}),
                                                                     dict):
            raise _bad(flag, path, f"{where}.newState has no type or its inputs are not an object")
        out[urn] = _resource(urn, state, op)
    if len(stacks) > 1:
        raise _bad(flag, path, f"mixes stacks {sorted(s or '?' for s in stacks)}: cost one "
                               "stack's preview at a time")
    return {"kind": "preview", "source": path, "stack": next(iter(stacks), None),
            "resources": out, "ops": ops, "removed": removed}


def load_state(path: str) -> dict:
    """A `pulumi stack export` as the same shape (every live custom resource kept)."""
    from gpulease.planner.against import load_previous

    prev = load_previous(path)
    if prev["kind"] != "state":
        raise _bad("--from-state", path, "is not a `pulumi stack export` file (\"deployment\")")
    res = {urn: {**r, "op": "same"} for urn, r in prev["resources"].items()}
    return {"kind": "state", "source": path, "stack": prev["stack"], "resources": res,
            "ops": {"same": len(res)}, "removed": []}


def _resource(urn: str, state: dict, op: str) -> dict:
    inputs = _secret(state.get("inputs") or {})
    return {"urn": urn, "type": state["type"], "name": urn.rsplit("::", 1)[-1],
            "inputs": inputs, "op": op, "monthly_usd": _tagged_cost(inputs),
            "cluster": _tagged_cluster(inputs)}


def _region_of(r: dict) -> Optional[str]:
    i = r["inputs"]
    zone = i.get("availabilityZone") or i.get("zone")
    if isinstance(zone, str) and zone not in UNKNOWNS:
        return zone[:-1] if r["type"].startswith("aws:") else zone.rsplit("-", 1)[0]
    return None


def _instance_price(r: dict, catalog) -> Optional[float]:
    """On-demand $/month of an EC2 / GCE instance the catalog lists (its region from its zone;
    without one, the cheapest region is NOT assumed: unknown)."""
    key = INSTANCE_TYPES.get(r["type"])
    itype = r["inputs"].get(key) if key else None
    region = _region_of(r)
    if not isinstance(itype, str) or region is None:
        return None
    itype = itype.rsplit("/", 1)[-1]
    for o in catalog.offerings:
        if o.instance_type == itype and o.region == region and o.on_demand_usd is not None:
            return money.json_number(o.on_demand_usd * 730.0)
    return None


def cost(external: dict, plan: dict, catalog) -> dict:
    """The offline ``plan`` re-based on ``external``'s resources: each priced as the module
    docstring says, totals recomputed through the money type; the plan's own resources that
    the document lacks, and the document's that the plan lacks, listed."""
    offline = {r["urn"]: r for r in plan["resources"]}
    resources, unknown = [], []
    by_cluster: dict[str, Any] = {}
    total = money.ZERO
    for urn in sorted(external["resources"]):
        r = external["resources"][urn]
        basis, amount = "tag", r["monthly_usd"]
        mine = offline.get(urn)
        if amount is None and mine is not None:
            basis, amount = "offline plan", mine["monthly_usd"]
        if amount is None:
            amount = _instance_price(r, catalog)
            basis = "catalog on-demand" if amount is not None else "unknown"
        cluster = mine["cluster"] if mine is not None and r["cluster"] == "shared" \
            else r["cluster"]
        entry = {**(mine or {"physical_name": None, "protect": False,
                            "retain_on_delete": False, "ignore_changes": [], "autoname": None,
                            "purchase_model": "none",
                            "cloud": r["type"].split(":", 1)[0]}),
                 "urn": urn, "type": r["type"], "name": r["name"], "op": r["op"],
                 "cluster": cluster, "monthly_usd": amount, "basis": basis,
                 "tags": (mine or {}).get("tags") or {}, "inputs": r["inputs"]}
        if amount is None:
            unknown.append({"urn": urn, "type": r["type"]})
        else:
            d = money.usd(amount)
            total += d
            by_cluster[cluster] = by_cluster.get(cluster, money.ZERO) + d
        resources.append(entry)
    doc = dict(plan)
    doc["resources"] = resources
    totals = dict(plan.get("totals") or {})
    totals.update(monthly_usd=money.json_number(total), resources=len(resources),
                  by_cluster={k: money.json_number(v) for k, v in sorted(by_cluster.items())})
    doc["totals"] = totals
    budget = dict(plan.get("budget") or {})
    if "monthly_usd" in budget:
        head = money.usd(budget["monthly_usd"]) - total
        budget.update(headroom_usd=money.json_number(head), over=head < 0)
        doc["budget"] = budget
    doc["external"] = {
        "kind": external["kind"], "source": external["source"], "stack": external["stack"],
        "ops": dict(sorted(external["ops"].items())), "removed": sorted(external["removed"]),
        "unknown": unknown,
        "only_in_plan": sorted(set(offline) - set(external["resources"])),
        "only_in_document": sorted(u for u, r in external["resources"].items()
                                   if u not in offline),
        "priced_by": {b: sum(1 for r in resources if r["basis"] == b)
                      for b in ("tag", "offline plan", "catalog on-demand", "unknown")},
    }
    return doc
