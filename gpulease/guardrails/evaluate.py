"""Run every guardrail rule over the resources a mocked program run recorded (`gpulease plan`)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Optional, Sequence

from gpulease.guardrails.rules import RULES, GuardedResource, Rule, RuleContext


def guarded(resources: Iterable[Any]) -> list[GuardedResource]:
    """RecordedResource (gpulease.planner.mocks) -> GuardedResource; component resources skipped."""
    out = []
    for r in resources:
        if not getattr(r, "custom", True):
            continue
        out.append(GuardedResource(
            urn=r.urn, type=r.type, name=r.name, props=r.inputs or {},
            protect=bool(r.protect), retain_on_delete=bool(r.retain_on_delete),
            dependencies=tuple(getattr(r, "depends_on", ()) or ()), parent=r.parent or ""))
    return out


def evaluate_guarded(resources: Sequence[GuardedResource], ctx: RuleContext,
                     rules: Optional[Sequence[Rule]] = None) -> list[dict]:
    """Violations ``{"policy", "level", "resource", "message"}`` in rule order, then resource order."""
    found: list[dict] = []
    for rule in rules or RULES:
        if rule.is_stack:
            for urn, msg in rule.stack_check(resources, ctx):  # type: ignore[misc]
                found.append({"policy": rule.name, "level": rule.level, "resource": urn,
                              "message": msg})
            continue
        for r in resources:
            if not rule.applies_to(r.type):
                continue
            rctx = replace(ctx, protect=r.protect, retain_on_delete=r.retain_on_delete)
            for msg in rule.check(r.type, r.props, rctx):  # type: ignore[misc]
                found.append({"policy": rule.name, "level": rule.level, "resource": r.urn,
                              "message": msg})
    return found


def evaluate(resources: list, *, budget_monthly_usd: float, environment: str,
             planned_monthly_usd: Optional[float] = None,
             planned_one_time_usd: Optional[float] = None) -> list[dict]:
    """The plan's ``violations``: every rule over the recorded resources of one program run.

    ``planned_monthly_usd`` is the run's cost-ledger total (``ProgramRun.result.ledger``): the
    budget rules judge it, so costs on resources that cannot carry labels still count."""
    ctx = RuleContext(environment=environment, budget_monthly_usd=budget_monthly_usd,
                      planned_monthly_usd=planned_monthly_usd,
                      planned_one_time_usd=planned_one_time_usd)
    return evaluate_guarded(guarded(resources), ctx)


def has_mandatory(violations: Iterable[dict]) -> bool:
    return any(v.get("level") == "mandatory" for v in violations)
