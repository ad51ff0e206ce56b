"""Claims: how concurrent reapers (the scheduled function, a person's CLI) share --max-actions.

No cloud offers the reaper a lock it already has permission for, so the cap is kept with claim
tags/labels on the clusters themselves and a write-settle-read-count protocol:

1. before tearing clusters down, a run writes its own claim on each: key
   ``gpulease-reaper-claim-<run token>``, value ``<expires epoch>`` (``now + LEASE_S``); AWS: an
   ASG tag, GCP: a label on each instance. Every run has its own key, so claims never
   overwrite each other;
2. it waits ``SETTLE_S`` and reads every claim in the regions/projects it covers;
3. clusters with a live claim of another run count against the cap (and are never its own);
   it keeps at most ``cap - others`` of its claimed clusters, in its own order, and deletes
   its claim on the rest;
4. it acts only on clusters it kept; kept claims stay until they expire.

Why the total stays within the cap: take the run whose read came last. Every claim another run
kept was written before that run's own read, hence before the last read, and is never removed
or overwritten before it expires: the last reader saw all of them, counted them as others and
kept at most ``cap`` minus their number, none of them shared. (A single claim key overwritten
by the next writer breaks this: tests/test_reaper_concurrency.py's model check finds the
counter-example.) Failure modes (docs/reaper.md): clocks off by more than ``CLOCK_SKEW_S``; a
tag store slower to show a write than ``SETTLE_S``; two runs that see each other's claims both
stand down (nothing is torn down until the next run — the safe side).

Pure Python, no SDK imports (shipped in the scheduled functions' archives).
"""
from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Hashable, Iterable, Optional, Sequence

from gpulease import tags
from gpulease.reaper.decision import CLOCK_SKEW_S

#: how long a claim counts (10 min): longer than a reaper run (the Lambda's timeout is 300 s),
#: shorter than the shortest useful schedule (15 min), so a scheduled run finds the previous
#: run's claims expired.
LEASE_S = 600
#: wait between writing claims and reading them back, so a concurrent reaper's writes are seen.
SETTLE_S = 2.0
PREFIX = f"{tags.CLAIM}-"
_TOKEN = re.compile(r"[a-z0-9]{1,40}")
_EXPIRES = re.compile(r"[0-9]{10,12}")


@dataclass(frozen=True)
class Claim:
    """One claim as read from the cloud. ``key`` is the adaptor's cluster key."""

    key: Hashable
    token: str
    value: str


def new_token() -> str:
    """A fresh run token: 12 random hex chars. Random, not pid + time: two Lambda containers
    (pids are small and alike there) starting in the same second must not share a token."""
    return secrets.token_hex(6)


def tag_key(run_token: str) -> str:
    """The tag/label key a run claims with (a valid GCP label key, at most 63 chars)."""
    if not _TOKEN.fullmatch(run_token):
        raise ValueError(f"run token {run_token!r} is not [a-z0-9]{{1,40}}")
    return PREFIX + run_token


def token_of(key: object) -> Optional[str]:
    """The run token of a claim tag key, or None when ``key`` is not a claim key."""
    k = str(key)
    if not k.startswith(PREFIX) or not _TOKEN.fullmatch(k[len(PREFIX):]):
        return None
    return k[len(PREFIX):]


def value(now: float) -> str:
    """The claim value a run writes at ``now``: when it expires."""
    return str(int(now) + LEASE_S)


def live(raw: object, now: float) -> bool:
    """A claim counts while it has not expired (allowing for clock skew).

    A claim that expires further ahead than a lease plus the skew was not written by a reaper
    with a sane clock (or was hand-edited): it is ignored rather than blocking every reaper.
    """
    text = str(raw) if raw is not None else ""
    if not _EXPIRES.fullmatch(text):
        return False
    return now - CLOCK_SKEW_S < int(text) <= now + LEASE_S + CLOCK_SKEW_S


def expired(raw: object, now: float) -> bool:
    """Safe to delete: not live and not in the future (garbage values included)."""
    return not live(raw, now)


@dataclass(frozen=True)
class Tally:
    """Who holds which cluster, from one read of the claims."""

    mine: frozenset
    #: cluster key -> another run's token (a cluster claimed by several runs counts once).
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
        if c.token == run_token:
            mine.add(c.key)
        else:
            others.setdefault(c.key, c.token)
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
            lost[key] = "its claim was not found when read back (not yet visible?)"
        elif len(kept) < allowed:
            kept.append(key)
        else:
            lost[key] = (f"the teardown cap of {cap} is shared with other reapers: "
                         f"{len(t.others)} cluster(s) claimed by run(s) {t.other_runs()} "
                         f"within the last {LEASE_S // 60} min")
    return kept, lost
