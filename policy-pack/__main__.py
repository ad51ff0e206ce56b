"""gpulease guardrails as a CrossGuard policy pack: the SAME rule functions `gpulease plan` runs.

Usage: ``pulumi preview --policy-pack policy-pack [--policy-pack-config cfg.json]``.
Config (per policy, see policy-config.example.json): ``budget-cap`` / ``budget-headroom`` take
``budget_monthly_usd``; ``storage-protected-in-prod`` takes ``environment``.
Differences from `gpulease plan` (documented in README "Guardrails"):
- CrossGuard's PolicyResourceOptions expose ``protect`` but not ``retainOnDelete``, so
  storage-protected-in-prod checks protect only here (the offline plan checks both).
- Without configured ``environment`` the environment is read from each resource's own
  ``gpulease-environment`` tag/label; without a configured budget the budget rules read the
  ``budget_monthly_usd`` stack output, and otherwise report themselves not applicable.
- The budget rules judge the ``total_monthly_usd`` stack output (the program's cost ledger:
  every resource it priced, GCP reservations and instance group managers included). The engine
  hands stack policies every resource of the deployment with its outputs, the root
  ``pulumi:pulumi:Stack`` resource included, whose outputs are the stack outputs (pulumi
  ``stepGenerator.AnalyzeResources``; ``stepExecutor.ExecuteRegisterResourceOutputs`` sets them in
  preview too). Only without that output do they fall back to the cost tags, and say so.
- The cost gate (``gpulease:gate``, docs/guardrails.md "Thresholds") is two stack policies:
  ``cost-gate`` (mandatory: a block threshold crossed and not acknowledged) and
  ``cost-gate-warnings`` (advisory: warn thresholds crossed, acknowledged blocks). They judge
  the same plan numbers `gpulease plan` judges, with the same function
  (gpulease.guardrails.gate.evaluate): the ``total_monthly_usd`` stack output against the
  baseline plan named by ``baseline_plan`` (the base branch's saved `gpulease plan --json`,
  read through the same untrusted-input checks as `plan --diff`); thresholds from the ``gate``
  stack output (the stack's ``gpulease:gate``) unless the policy config gives ``warn`` /
  ``block`` / ``acknowledged``; acknowledgements passed in from the policy config's ``ack``
  and the ``GPULEASE_GATE_ACK`` environment variable (Pulumi starts the pack with the CLI's
  environment).
- During preview a property that is still unknown makes CrossGuard skip a RESOURCE rule for that
  resource with an advisory note (pulumi_policy's UnknownValueError). Stack rules see unknowns as
  ``[unknown]``, as `gpulease plan` does, so one unknown id cannot switch off a whole stack rule.
"""
from __future__ import annotations

from typing import Any, Optional

from pulumi_policy import (EnforcementLevel, PolicyConfigSchema, PolicyPack,
                           ResourceValidationPolicy, StackValidationPolicy)

from gpulease import tags
from gpulease.planner.mocks import UNKNOWN_MASK
from gpulease.guardrails.rules import (MANDATORY, RULES, GuardedResource, Rule, RuleContext,
                                       tag_dict, tag_kind)

PACK_NAME = "gpulease-guardrails"
STACK_TYPE = "pulumi:pulumi:Stack"

_THRESHOLDS_SCHEMA = {"type": "object", "additionalProperties": False,
                      "properties": {m: {"type": "number", "minimum": 0}
                                     for m in ("delta_usd", "delta_pct", "total_usd")}}
_GATE_SCHEMA = PolicyConfigSchema(properties={
    "baseline_plan": {"type": "string"},
    "ack": {"type": "array", "items": {"type": "string"}},
    "warn": _THRESHOLDS_SCHEMA, "block": _THRESHOLDS_SCHEMA,
    "acknowledged": {"type": "array", "items": {"type": "string"}},
})
GATE_POLICY = "cost-gate"
GATE_WARNINGS_POLICY = "cost-gate-warnings"

_CONFIG_SCHEMAS = {
    "budget-cap": PolicyConfigSchema(properties={"budget_monthly_usd": {"type": "number",
                                                                        "minimum": 0}}),
    "budget-headroom": PolicyConfigSchema(properties={"budget_monthly_usd": {"type": "number",
                                                                             "minimum": 0}}),
    "storage-protected-in-prod": PolicyConfigSchema(properties={"environment": {"type": "string"}}),
}


def level(rule: Rule) -> EnforcementLevel:
    return EnforcementLevel.MANDATORY if rule.level == MANDATORY else EnforcementLevel.ADVISORY


def _environment(config: Any, resource_type: str, props: Any) -> str:
    env = (config or {}).get("environment")
    if env:
        return str(env)
    kind = tag_kind(resource_type)
    return str(tag_dict(props, kind).get(tags.ENVIRONMENT, "")) if kind else ""


def _stack_output(resources: list, key: str) -> Optional[float]:
    """A numeric output of the root stack resource; None when absent or not a number yet."""
    for r in resources:
        if r.resource_type == STACK_TYPE:
            value = plain(r.props).get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
    return None


def _budget(config: Any, resources: list) -> Optional[float]:
    value = (config or {}).get("budget_monthly_usd")
    if value is None:
        return _stack_output(resources, "budget_monthly_usd")
    return float(value)


def plain(value: Any) -> Any:
    """A plain copy of a CrossGuard property value, unknowns shown as ``[unknown]``.

    pulumi_policy wraps props in proxies that raise UnknownValueError on an unknown value;
    ``proxy["__target"]`` is its documented escape hatch (pulumi_policy/proxy.py)."""
    from pulumi_policy import proxy as pp

    if isinstance(value, (pp._DictProxy, pp._ListProxy)):  # noqa: SLF001
        value = value["__target"]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if pp._is_unknown(value):  # noqa: SLF001
        return UNKNOWN_MASK
    return value


def resource_validator(rule: Rule):
    def validate(args, report_violation) -> None:
        if not rule.applies_to(args.resource_type):
            return
        ctx = RuleContext(environment=_environment(args.get_config(), args.resource_type,
                                                   args.props),
                          protect=bool(args.opts.protect) if args.opts else None,
                          retain_on_delete=None)  # not exposed by CrossGuard
        for message in rule.check(args.resource_type, args.props, ctx):  # type: ignore[misc]
            report_violation(message, args.urn)
    return validate


def guarded(resources: list) -> list[GuardedResource]:
    """CrossGuard PolicyResource -> GuardedResource (dependencies include property deps)."""
    out = []
    for r in resources:
        deps = {d.urn for d in (r.dependencies or [])}
        for ds in (r.property_dependencies or {}).values():
            deps.update(d.urn for d in ds)
        out.append(GuardedResource(
            urn=r.urn, type=r.resource_type, name=r.name, props=plain(r.props),
            protect=bool(r.opts.protect) if r.opts else None, retain_on_delete=None,
            dependencies=tuple(sorted(deps)), parent=r.parent.urn if r.parent else ""))
    return out


def stack_validator(rule: Rule):
    def validate(args, report_violation) -> None:
        budget = _budget(args.get_config(), args.resources)
        if rule.name.startswith("budget-") and budget is None:
            args.not_applicable("no budget_monthly_usd in the policy config or stack outputs")
        ctx = RuleContext(environment=str((args.get_config() or {}).get("environment", "")),
                          budget_monthly_usd=budget,
                          planned_monthly_usd=_stack_output(args.resources, "total_monthly_usd"),
                          planned_one_time_usd=_stack_output(args.resources,
                                                             "total_one_time_usd"))
        for urn, message in rule.stack_check(guarded(args.resources), ctx):  # type: ignore[misc]
            report_violation(message, urn or None)
    return validate


def gate_verdict(config: Any, resources: list) -> tuple[Optional[dict], str]:
    """The cost gate over the stack (gpulease.guardrails.gate.evaluate on a plan-shaped
    document: ``totals.monthly_usd`` from the ``total_monthly_usd`` stack output, ``diff.total``
    against ``baseline_plan``): (the gate object, "") or (None, why it cannot be judged).
    Raises ConfigError when the baseline plan is unusable."""
    import os

    from gpulease.guardrails import gate
    from gpulease.planner.diff import plan_total, total_change

    config = plain(config) if config is not None else {}
    if any(k in config for k in ("warn", "block", "acknowledged")):
        settings = {k: config.get(k) for k in ("warn", "block", "acknowledged")}
    else:
        settings = next((plain(r.props).get("gate") for r in resources
                         if r.resource_type == STACK_TYPE), None)
    if not isinstance(settings, dict) or not gate.is_configured(settings):
        return None, "no gpulease:gate thresholds (stack output `gate` or policy config)"
    total = _stack_output(resources, "total_monthly_usd")
    if total is None:
        return None, "no total_monthly_usd stack output (not a gpulease program?)"
    once = _stack_output(resources, "total_one_time_usd") or 0
    plan: dict = {"totals": {"monthly_usd": total, "one_time_usd": once}, "diff": None}
    if config.get("baseline_plan"):
        from gpulease.planner.diff import one_time_total
        from gpulease.planner.saved import load_saved_plan

        baseline = load_saved_plan(str(config["baseline_plan"]),
                                   flag=f"{GATE_POLICY}.baseline_plan")
        plan["diff"] = {"total": total_change(plan_total(baseline), total,
                                              one_time_total(baseline), once)}
    acks = [str(a) for a in config.get("ack") or ()] + gate.parse_labels(
        os.environ.get(gate.ACK_ENV))
    return gate.evaluate(settings, plan, acks=acks), ""


def gate_validator(*, blocks: bool):
    """``cost-gate`` (blocks=True: the unacknowledged blocks, and an unusable baseline) or
    ``cost-gate-warnings`` (the crossed warn thresholds and the acknowledged blocks)."""
    from gpulease.errors import ConfigError
    from gpulease.guardrails import gate

    def validate(args, report_violation) -> None:
        try:
            verdict, why = gate_verdict(args.get_config(), args.resources)
        except ConfigError as exc:
            if blocks:   # fail closed: a baseline that does not check out judges nothing
                report_violation("the baseline plan is unusable: " + "; ".join(
                    f"{f.path}: {f.message}" for f in exc.findings))
                return
            args.not_applicable("the baseline plan is unusable (cost-gate reports it)")
        if verdict is None:
            args.not_applicable(why)
        for r in verdict["results"]:
            if (r["level"] == gate.BLOCK) if blocks else (r in gate.warnings(verdict)):
                report_violation(f"[{r['level']}] {r['message']}")
    return validate


def build_policies() -> list:
    policies: list = []
    for rule in RULES:
        common = dict(name=rule.name, description=rule.description,
                      enforcement_level=level(rule), config_schema=_CONFIG_SCHEMAS.get(rule.name),
                      remediation_steps=rule.fix or None)
        if rule.is_stack:
            policies.append(StackValidationPolicy(validate=stack_validator(rule), **common))
        else:
            policies.append(ResourceValidationPolicy(validate=resource_validator(rule), **common))
    policies.append(StackValidationPolicy(
        name=GATE_POLICY, enforcement_level=EnforcementLevel.MANDATORY,
        description="The monthly cost is within gpulease:gate's block thresholds ($ increase, "
                    "% increase, total), or the block is acknowledged",
        validate=gate_validator(blocks=True), config_schema=_GATE_SCHEMA,
        remediation_steps="lower the cost, raise gpulease:gate.block, or acknowledge the change "
                          "with a label listed in gpulease:gate.acknowledged (GPULEASE_GATE_ACK)"))
    policies.append(StackValidationPolicy(
        name=GATE_WARNINGS_POLICY, enforcement_level=EnforcementLevel.ADVISORY,
        description="gpulease:gate's warn thresholds and acknowledged blocks, recorded",
        validate=gate_validator(blocks=False), config_schema=_GATE_SCHEMA))
    return policies


if __name__ == "__main__":
    # PolicyPack() starts the analyzer gRPC server and blocks: only when Pulumi runs the pack.
    PolicyPack(name=PACK_NAME, policies=build_policies(),
               enforcement_level=EnforcementLevel.ADVISORY)
