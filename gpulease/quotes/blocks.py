"""A bought Capacity Block's timeline: the block a window decision buys, when its node group
scales in, and when its nodes checkpoint before that (the AWS components schedule the first
two, the node bootstrap the third)."""
from __future__ import annotations

import datetime as _dt
from typing import Optional

from gpulease.clock import format_utc
from gpulease.purchase import CAPACITY_BLOCK
from gpulease.quotes import CB_TERMINATION_LEAD_MINUTES
from gpulease.quotes.model import parse_time

#: minutes before AWS begins to terminate a block's instances (30 min before its end) at which
#: gpulease scales the block's group in: the nodes' shutdown runs the checkpoint hook. gpulease's
#: margin, not an AWS figure.
BLOCK_DRAIN_MINUTES = 15
#: minutes before that scale-in at which the block's nodes run the checkpoint hook (their spot
#: watcher: ``GPULEASE_DRAIN_AT``); gpulease's margin for a checkpoint write.
BLOCK_CHECKPOINT_MINUTES = 10


def window_block(decision) -> Optional[dict]:
    """The Capacity Block a window decision buys: {hours, start, end, nodes, count}, the block's
    own time (a remainder run on other capacity is not part of it) and its instance count as
    AWS sells it (``count`` >= ``nodes`` when rounded up); None when the window is not a
    block."""
    w = getattr(decision, "window", None)
    if w is None or w.model != CAPACITY_BLOCK or w.bought_from is None:
        return None
    hours = round((w.bought_until - w.bought_from).total_seconds() / 3600.0)
    return {"hours": hours, "start": format_utc(w.bought_from),
            "end": format_utc(w.bought_until),
            "nodes": w.nodes, "count": sum(getattr(w, "blocks", ()) or ()) or w.nodes}


def block_schedule(block: dict) -> list[tuple[str, str, int]]:
    """Scheduled actions of a window's block group: (name suffix, start time, desired size):
    up to the block's nodes at its start, down to 0 ``BLOCK_DRAIN_MINUTES`` before AWS's own
    termination starts (EC2 User Guide, "Work with Capacity Blocks": 30 minutes before the
    end)."""
    end = parse_time(block["end"]) - _dt.timedelta(
        minutes=CB_TERMINATION_LEAD_MINUTES + BLOCK_DRAIN_MINUTES)
    return [("start", block["start"], block["nodes"]), ("drain", format_utc(end), 0)]


def checkpoint_at(decision) -> int:
    """When a bought block's nodes checkpoint (epoch seconds): ``BLOCK_CHECKPOINT_MINUTES``
    before its group's drain (block_schedule); 0 when the decision buys no block."""
    block = window_block(decision)
    if block is None:
        return 0
    drain = dict((k, t) for k, t, _ in block_schedule(block))["drain"]
    return int(parse_time(drain).timestamp()) - 60 * BLOCK_CHECKPOINT_MINUTES


def due_schedule(block: dict, now: float) -> tuple[list[tuple[str, str, int]], int, list[str]]:
    """The scheduled actions still ahead at ``now`` (epoch seconds), the group's desired size now
    and a note per action left out: the Auto Scaling API rejects a start time in the past
    (PutScheduledUpdateGroupAction: "Given start time is in the past"), so a start that has
    passed is left out and the group starts at the size that action set; a past drain leaves
    the group at 0."""
    ahead, size, notes = [], 0, []
    for suffix, when, nodes in block_schedule(block):
        if parse_time(when).timestamp() <= now:
            size = nodes
            notes.append(f"scheduled action {suffix} at {when} has passed: left out (the Auto "
                         f"Scaling API rejects a start time in the past); the group is declared "
                         f"at {nodes} node(s), the size it set")
        else:
            ahead.append((suffix, when, nodes))
    return ahead, size, notes
