"""`gpulease spend`'s config change: what to write in the stack so that next month's plan matches
what the bill says really ran (issue 33 item 5).

Per cluster, from the reconciliation's causes:

- ``hours`` (node-hours run differ from the plan's): the cluster's ``demand``, derived from the
  nodes billed per hour (gpulease.spend.usage) by the profile `gpulease recommend --from-bill`
  prints (gpulease.recommend.profile.derive_running): the same code, the same steps;
- ``purchase_model`` with spot that fell back to on-demand: ``priority`` raised to
  ``gpulease:policy.spot_below_priority``, the lowest priority the policy never plans on spot,
  so the plan prices on-demand (or reserved) capacity, as the bill did.

Each change is a YAML snippet naming the stack file and the cluster's config path, and the same
in the JSON (``config_change``: null when the plan already matches).
"""
from __future__ import annotations

from typing import Any, Optional

from gpulease import purchase
from gpulease.errors import InputError
from gpulease.recommend import profile as pf


def _causes(cluster: dict) -> dict:
    return {c["kind"]: c for c in cluster["causes"]}


def add(doc: dict[str, Any], plan: dict[str, Any], spec, source: str, read_usage) -> None:
    """Set ``config_change`` on every cluster of ``doc``. ``read_usage()``: the bill's usage per
    hour (gpulease.spend.usage.BillUsage), read only when a cluster's hours differ; it raises
    InputError when the month cannot be told (the change then says so)."""
    specs = {c.name: c for c in spec.clusters}
    by_plan = {c["name"]: c for c in plan.get("clusters", ())}
    usage: Any = None
    for c in doc["clusters"]:
        c["config_change"] = None
        cs, planned = specs.get(c["cluster"]), by_plan.get(c["cluster"])
        if cs is None or planned is None:
            continue
        causes = _causes(c)
        sets, why, lines = {}, [], []
        if "hours" in causes:
            if usage is None:
                try:
                    usage = read_usage()
                except InputError as exc:
                    usage = exc
            _demand(c["cluster"], planned, usage, causes["hours"], sets, why, lines)
        fell = causes.get("purchase_model")
        if fell and fell.get("from") == purchase.SPOT and fell.get("to") == purchase.ON_DEMAND:
            _priority(cs, spec, fell, sets, why, lines)
        if why:
            c["config_change"] = {"file": source, "path": cs.config_path,
                                  "cluster": cs.name, "set": sets, "why": why,
                                  "yaml": _yaml(source, cs, lines)}


def _demand(name: str, planned: dict, usage, cause: dict, sets: dict, why: list,
            lines: list) -> None:
    if isinstance(usage, InputError):
        why.append(f"{cause['text']}; no demand derived: "
                   + "; ".join(str(f) for f in usage.findings))
        return
    got = usage.clusters.get(name)
    hours = usage.hours
    der = pf.derive_running(got.nodes if got else (0,) * hours, start=usage.start.timestamp(),
                            end=usage.end.timestamp(),
                            gpus_per_node=int(planned.get("gpus_per_node") or 1),
                            instances=got.resources if got else 0,
                            lines=got.lines if got else 0)
    why.append(cause["text"])
    if not der.profile:
        why.append(der.note)
        sets["remove"] = True
        lines.append(f"    # {der.note}: remove the cluster, or keep it scaled to zero")
        return
    sets["demand"] = [s.as_dict() for s in der.profile]
    body = pf.render_yaml(name, der, replaces=f"the plan's {cause['planned_node_hours']:g} "
                          f"node-hours a month; {usage.month} billed "
                          f"{cause['billed_node_hours']:g}")
    lines.extend(body.rstrip("\n").split("\n")[2:])    # after "gpulease:clusters:" / "- name:"


def _priority(cs, spec, fell: dict, sets: dict, why: list, lines: list) -> None:
    floor = _spot_below(spec)
    if cs.priority >= floor:
        return
    sets["priority"] = floor
    text = (f"{fell['text']}: plan it {purchase.label(purchase.ON_DEMAND)} (purchase model "
            f"{purchase.ON_DEMAND}, not {purchase.SPOT}) with priority {floor}, the lowest "
            "the policy never plans on spot")
    why.append(text)
    lines.append(f"    priority: {floor}   # was {cs.priority}; purchase model "
                 f"{purchase.ON_DEMAND}, not {purchase.SPOT}: gpulease:policy."
                 f"spot_below_priority is {floor} ({fell['node_hours']:g} node-hours fell back "
                 "to on-demand)")


def _spot_below(spec) -> int:
    rules = getattr(spec, "policy", None)
    if rules is None:
        from gpulease.policy.rules import PolicyRules

        rules = PolicyRules()
    return int(rules.spot_below_priority)


def _yaml(source: str, cs, lines: list) -> str:
    head = [f"# {source}, config {cs.config_path} ({cs.name})", "gpulease:clusters:",
            f"  - name: {cs.name}"]
    return "\n".join(head + lines) + "\n"


def text_lines(doc: dict[str, Any]) -> list[str]:
    """The table view's lines: every cluster's snippet, or nothing when the plan matches."""
    out: list[str] = []
    for c in doc["clusters"]:
        ch: Optional[dict] = c.get("config_change")
        if ch:
            out += ch["yaml"].rstrip("\n").split("\n") + [""]
    return out
