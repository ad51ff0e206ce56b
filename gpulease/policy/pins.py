"""Pinned Capacity Blocks against the decision: the policy chooses each cluster's offering
freely, so a cluster may land where its pinned block is not (another cloud, region or instance
type, e.g. after a price change). A block cannot move once bought, so such a plan stops
(exit 4, the rule of docs/deploy.md "Capacity Blocks" step 4) instead of ignoring the pin.

What the stack file alone decides about a pin is checked when it is read (exit 2:
``gpulease.config.parse``); what the reserved nodes need of the block (their number, a block
at all) is the AWS adaptor's (``gpulease.clouds.aws.deploy``)."""
from __future__ import annotations

from typing import Iterable

from gpulease.errors import Finding, GuardrailError

PIN_MISFIT_HEADLINE = "a pinned Capacity Block does not fit the plan (nothing was planned; exit 4):"


def pin_findings(decisions: Iterable, source: str = "") -> list[Finding]:
    """A finding per cluster whose pinned block is not where the policy put the cluster (its
    region and instance type)."""
    out = []
    for d in decisions:
        pin = getattr(d.spec, "capacity_block", None)
        if pin is None or (pin.region, pin.instance_type) == (d.region,
                                                               d.offering.instance_type):
            continue
        path = f"{d.spec.config_path}.capacity_block"
        out.append(Finding(path, (
            f'the policy put cluster "{d.name}" on {d.cloud} {d.region} '
            f"{d.offering.instance_type}, not on its pinned Capacity Block {pin.offering_id} "
            f"({pin.instance_count} x {pin.instance_type} in {pin.region}); `gpulease explain "
            f"--cluster {d.name}` says why. A block cannot move once bought, and the plan would "
            f"leave it unused: to run the cluster in it, limit {d.spec.config_path}.regions to "
            f"{pin.region}; if it was never bought, remove the pin (a bought block runs and "
            "bills to its end either way)"), source=source))
    return out


def check_pins(env) -> None:
    """Raise GuardrailError (exit 4, nothing declared) when a pin does not fit the decision."""
    findings = pin_findings(env.clusters, env.stack.source)
    if findings:
        raise GuardrailError(findings, headline=PIN_MISFIT_HEADLINE)
