"""Claims: how concurrent reapers (the scheduled function, a person's CLI) share --max-actions.

No cloud offers the reaper a lock it already has permission for, so the cap is kept with a
claim tag/label on the clusters themselves and a write-settle-read-count protocol:

1. before tearing clusters down, a reaper writes ``gpulease-reaper-claim=<expires>-<token>``
   on each (AWS: ASG tag; GCP: label on each instance), ``expires = now + LEASE_S``;
2. it waits ``SETTLE_S`` and reads every claim in the regions/projects it covers;
3. clusters whose live claim belongs to another run count against the cap; it keeps at most
   ``cap - others`` of its own claims, in its own order, and withdraws the rest (a conditional
   delete: AWS DeleteTags with the value, GCP setLabels with the label fingerprint);
4. it acts only on clusters it kept; kept claims stay until they expire.

Why the total stays within the cap: take the reaper whose read came last. Every claim another
reaper kept was written before that reaper's own read, hence before the last read, and is never
withdrawn before it expires: the last reader saw all of them and kept at most ``cap`` minus
their number. Failure modes (docs/reaper.md): clocks off by more than ``CLOCK_SKEW_S``; a tag
store slower to show a write than ``SETTLE_S``; two reapers that see each other's claims both
withdraw (nothing is torn down until the next run — the safe side).

Pure Python, no SDK imports (shipped in the scheduled functions' archives).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Hashable, Iterable, Optional, Sequence

from infra.reaper.decision import CLOCK_SKEW_S

#: how long a claim counts (10 min): longer than a reaper run (the Lambda's timeout is 300 s),
#: shorter than the shortest useful schedule (15 min), so a scheduled run finds the previous
#: run's claims expired.
LEASE_S = 600
#: wait between writing claims and reading them back, so a concurrent reaper's writes are seen.
SETTLE_S = 2.0
_VALUE = re.compile(r"([0-9]{10,12})-([a-z0-9]{1,40})")


@dataclass(frozen=True)
class Claim:
    """One claim as read from the cloud. ``key`` is the adaptor's cluster key."""

    key: Hashable
    value: str


def token(run_id: str) -> str:
    """A label-safe run token ([a-z0-9], at most 20 chars) from the audit run id."""
    t = re.sub(r"[^a-z0-9]", "", run_id.lower())[:20]
    return t or "run"


def value(run_token: str, now: float) -> str:
    """The claim value a run writes at ``now``."""
    return f"{int(now) + LEASE_S}-{run_token}"


def parse(raw: object) -> Optional[tuple[int, str]]:
    """(expires epoch, token), or None for anything that is not a claim value."""
    m = _VALUE.fullmatch(str(raw)) if raw is not None else None
    return (int(m.group(1)), m.group(2)) if m else None


def live(raw: object, now: float) -> bool:
    """A claim counts while it has not expired (allowing for clock skew).

    A claim that expires further ahead than a lease plus the skew was not written by a reaper
    with a sane clock (or was hand-edited): it is ignored rather than blocking every reaper.
    """
    p = parse(raw)
    return p is not None and now - CLOCK_SKEW_S < p[0] <= now + LEASE_S + CLOCK_SKEW_S


@dataclass(frozen=True)
class Tally:
    """Who holds which cluster, from one read of the claims."""

    mine: frozenset
    #: cluster key -> the other run's token (a cluster with claims by several runs counts once).
    others: dict

    def other_runs(self) -> str:
        runs = sorted(set(self.others.values()))
        return ", ".join(runs[:3]) + (f" (+{len(runs) - 3} more)" if len(runs) > 3 else "")


def tally(claims: Iterable[Claim], *, run_token: str, now: float) -> Tally:
    mine: set = set()
    others: dict = {}
    for c in claims:
        if not live(c.value, now):
            continue
        who = parse(c.value)[1]
        if who == run_token:
            mine.add(c.key)
        else:
            others.setdefault(c.key, who)
    # A cluster another run also claims is theirs: two runs never both count it as their own.
    return Tally(mine=frozenset(mine - set(others)), others=others)


def settle(order: Sequence[Hashable], t: Tally, *, cap: int) -> tuple[list, dict]:
    """Which of this run's claimed clusters (in ``order``) it may act on, and why not the rest."""
    allowed = max(0, cap - len(t.others))
    kept: list = []
    lost: dict = {}
    for key in order:
        if key in t.others:
            lost[key] = f"another reaper (run {t.others[key]}) claimed it at the same time"
        elif key not in t.mine:
            lost[key] = "its claim was not found when read back (overwritten or not yet visible)"
        elif len(kept) < allowed:
            kept.append(key)
        else:
            lost[key] = (f"the teardown cap of {cap} is shared with other reapers: "
                         f"{len(t.others)} cluster(s) claimed by run(s) {t.other_runs()} "
                         f"within the last {LEASE_S // 60} min")
    return kept, lost
