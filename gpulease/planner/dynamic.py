"""`gpulease plan`'s view of gpulease's own dynamic providers, through Pulumi's host code.

The engine hands a dynamic resource's inputs to the provider's ``check`` twice in a first
`pulumi up`: at its preview, with the inputs that come from resources the same update creates
still unknown, and again before ``create`` with every input known. :func:`check_dynamic` does
both through :class:`gpulease.planner.dynhost.DynamicHost` (the SDK's own servicer), with the
preview run's recorded inputs (unknowns as the engine's sentinel) and the up run's. A failure
in either is what `pulumi preview` / `pulumi up` would stop at: :class:`ProviderRejected`.
No cloud is called: the host only unpickles the provider and runs its ``check``.

The preview run (:func:`run_preview`) declares only what the check needs: the clusters whose
components hold a dynamic resource, and everything the program declares before the last of
them (``the program's main (infra/__main__.py)``'s ``clusters``). Each resource it declares gets what the whole
program's preview gives it (tests/test_lifecycle_plan.py compares the two resource by
resource); a dynamic resource outside every cluster, or one the scoped run did not declare,
runs the whole program instead.
"""
from __future__ import annotations

from typing import Callable, Optional

from gpulease.errors import Finding
from gpulease.planner.mocks import UNKNOWN_MASK, ProgramRun, ProviderRejected
from gpulease.text import plural

DYNAMIC_PREFIX = "pulumi-python:dynamic/"


def is_dynamic(type_: str) -> bool:
    return type_.startswith(DYNAMIC_PREFIX)


def preview_clusters(up: ProgramRun) -> Optional[frozenset[str]]:
    """Names of the clusters whose components (``gpulease:<cloud>:GpuCluster``) hold the
    dynamic resources of ``up``; None when one lies outside every cluster component."""
    from gpulease.clouds.aws.cluster import CLUSTER_TYPE as AWS_CLUSTER
    from gpulease.clouds.gcp.cluster import CLUSTER_TYPE as GCP_CLUSTER

    by_urn = {r.urn: r for r in up.resources}
    names: set[str] = set()
    for r in up.custom:
        if not is_dynamic(r.type):
            continue
        parent = by_urn.get(r.parent)
        while parent is not None and parent.type not in (AWS_CLUSTER, GCP_CLUSTER):
            parent = by_urn.get(parent.parent)
        if parent is None:
            return None
        names.add(parent.name)
    return frozenset(names)


def run_preview(up: ProgramRun, run: Callable[..., ProgramRun]) -> ProgramRun:
    """The program as `pulumi preview` sees it, as far as the check of ``up``'s dynamic
    resources needs: ``run(clusters=...)`` runs it in preview mode (``gpulease.planner.plan.run``
    with the stack's values); the whole program (``clusters=None``) when
    :func:`preview_clusters` finds a dynamic resource outside the clusters, or the scoped run
    did not declare every dynamic resource ``up`` has."""
    scope = preview_clusters(up)
    if scope is not None:
        preview = run(clusters=scope)
        declared = {r.urn for r in preview.custom}
        if all(r.urn in declared for r in up.custom if is_dynamic(r.type)):
            return preview
    return run(clusters=None)


def _unknown_keys(inputs: dict) -> list[str]:
    from gpulease.planner.dynhost import contains_unknown

    return sorted(k for k, v in inputs.items()
                  if not k.startswith("__") and contains_unknown(v, (UNKNOWN_MASK,)))


def check_dynamic(up: ProgramRun, preview: Optional[ProgramRun], *, stack: str,
                  host=None) -> list[dict]:
    """Check every dynamic resource of ``up`` (and of ``preview``, matched by URN) through the
    host; returns one record per resource: ``{urn, type, unknown_at_preview: [property],
    checked: ["preview", "up"]}``. Raises ProviderRejected listing every check failure."""
    from gpulease.planner.dynhost import DynamicHost

    resources = [r for r in up.custom if is_dynamic(r.type)]
    if not resources:
        return []
    at_preview = {r.urn: r for r in (preview.custom if preview is not None else [])}
    findings: list[Finding] = []
    records: list[dict] = []
    own = host is None
    host = host or DynamicHost()
    try:
        for r in resources:
            record = {"urn": r.urn, "type": r.type, "unknown_at_preview": [], "checked": []}
            phases = []
            if r.urn in at_preview:
                phases.append(("preview", at_preview[r.urn].inputs))
                record["unknown_at_preview"] = _unknown_keys(at_preview[r.urn].inputs)
            phases.append(("up", r.inputs))
            for phase, inputs in phases:
                out = host.check(r.urn, {}, inputs, unknown_marks=(UNKNOWN_MASK,))
                record["checked"].append(phase)
                cmd = f"pulumi {phase} --stack {stack}"
                findings += [Finding(f"{r.type} {r.name}", f"`{cmd}` stops at the provider's "
                                     f"check: {prop}: {reason}") for prop, reason in out.failures]
            records.append(record)
    finally:
        if own:
            host.close()
    if findings:
        raise ProviderRejected(findings, headline=(
            f"`pulumi up --stack {stack}` would fail: Pulumi's dynamic-provider host rejects "
            f"{plural(len(findings), 'input')} of gpulease's own providers"))
    return records
