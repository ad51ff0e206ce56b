"""Defaults that moved the price (issue 34 item 6): what a cluster's cost would be had a default
the stack left unset been set the other way, so `explain` can name it with its saving.

Checked defaults:

- ``distributed``: unset, a cluster of more than one node is one job across all its nodes
  (RDMA fabric, compact placement), which rules out the cheaper non-RDMA offerings; the
  alternative is ``distributed: false`` (independent jobs per node);
- ``policy.commitment_term``: unset, the policy's default term; the alternatives are the other
  explicit terms (``1y``, ``3y``, ``none``) for the stack's committed baselines;
- the spot risk: a cluster whose interruption rate is the catalog's default for its cloud is
  named (the figure is an assumption), without a saving: a measured rate (`gpulease catalog
  quotes`) is what would change it, and no alternative value can be assumed.

Each alternative is priced by deciding the stack again with that one change (the same policy,
catalog and moment); a saving is the cluster's monthly cost now minus with the change (positive:
the change is cheaper). An alternative that makes the stack infeasible is reported as such.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

from gpulease.errors import InputError
from gpulease.model import ClusterDecision, EnvironmentDecision

#: the explicit values a default term is compared with
TERMS = ("1y", "3y", "none")


def _decide(stack, catalog, now) -> Optional[EnvironmentDecision]:
    from gpulease.policy import decide

    try:
        return decide(stack, catalog, now=now)
    except InputError:
        return None


def _cost(env: Optional[EnvironmentDecision], name: str) -> Optional[float]:
    if env is None:
        return None
    for c in env.clusters:
        if c.name == name:
            return float(c.monthly_money)
    return None


def price_moving_defaults(env: EnvironmentDecision, catalog, now=None) -> dict[str, list[dict]]:
    """cluster name -> ``[{"key", "default", "alternative", "saving_usd" (None: infeasible or
    not priced), "note"}]`` for every default of the list above that the cluster used."""
    stack = env.stack
    out: dict[str, list[dict]] = {c.name: [] for c in env.clusters}
    for c in env.clusters:
        if c.spec.distributed is None and c.distributed:
            spec = dataclasses.replace(c.spec, distributed=False)
            alt = dataclasses.replace(stack, clusters=tuple(
                spec if s.name == c.name else s for s in stack.clusters))
            out[c.name].append(_row("distributed", "true (more than one node)", "false",
                                    float(c.monthly_money), _cost(_decide(alt, catalog, now),
                                                                  c.name),
                                    "independent jobs per node need no RDMA fabric"))
        risk = getattr(c, "spot_risk", None)
        basis = (risk.get("basis", "") if isinstance(risk, dict) else
                 getattr(risk, "basis", "")) if risk is not None else ""
        if c.purchase.spot and "default" in str(basis):
            out[c.name].append({"key": "spot risk", "default": str(basis), "alternative": None,
                                "saving_usd": None,
                                "note": "an assumed interruption rate; `gpulease catalog quotes "
                                        "--source live` measures it"})
    policy = stack.policy
    fields_set = getattr(policy, "model_fields_set", set())
    committed = [c for c in env.clusters if getattr(c, "committed_usd", 0)]
    if policy is not None and "commitment_term" not in fields_set and committed:
        for term in TERMS:
            if term == getattr(policy, "commitment_term", None):
                continue
            alt_env = _decide(dataclasses.replace(
                stack, policy=policy.model_copy(update={"commitment_term": term})), catalog, now)
            for c in committed:
                out[c.name].append(_row("policy.commitment_term",
                                        f"{policy.commitment_term} (the default)", term,
                                        float(c.monthly_money), _cost(alt_env, c.name), ""))
    return {k: v for k, v in out.items() if v}


def _row(key: str, default: str, alternative: str, now_usd: float, alt_usd: Optional[float],
         note: str) -> dict[str, Any]:
    return {"key": key, "default": default, "alternative": alternative,
            "saving_usd": None if alt_usd is None else round(now_usd - alt_usd, 2),
            "note": note if alt_usd is not None else
            (note + "; " if note else "") + "no plan satisfies the policy with it"}
