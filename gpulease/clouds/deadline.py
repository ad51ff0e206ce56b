"""What both clouds' programs need for window work on spot (issue 37 item 2): whether a cluster
gets the second (on-demand) group, and the restart overhead its groups are tagged with."""
from __future__ import annotations

from typing import Optional

from gpulease import deadline
from gpulease.model import ClusterDecision, StackSpec


def restart_minutes(stack: StackSpec, c: ClusterDecision) -> Optional[float]:
    """The restart overhead of a switch for window work on spot (gpulease.deadline.controls):
    the policy's lost work per interruption (half a checkpoint interval plus the stack's
    ``spot_restart_minutes``); None for any other cluster (no second group)."""
    if not deadline.controls(c):
        return None
    from gpulease.policy.rules import PolicyRules

    rules = stack.policy if stack.policy is not None else PolicyRules()
    return deadline.restart_minutes(c.spec.checkpoint_minutes, rules.spot_restart_minutes)
