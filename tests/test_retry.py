"""One retry policy (issue 25 item 7): gpulease/retry.py's Backoff, with one constant set, is what
every cloud caller retries with; no module keeps a backoff loop of its own."""
from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from gpulease import retry
from gpulease.retry import Backoff

ROOT = Path(__file__).resolve().parents[1]


class Throttled(Exception):
    pass


def test_retries_only_what_is_retryable_up_to_the_attempts():
    slept: list[float] = []
    calls = []

    def fn():
        calls.append(1)
        raise Throttled()

    b = Backoff(sleep=slept.append)
    with pytest.raises(Throttled):
        b.call(fn, retryable=lambda e: isinstance(e, Throttled))
    assert len(calls) == retry.ATTEMPTS and b.retries == retry.ATTEMPTS - 1
    assert len(slept) == retry.ATTEMPTS - 1
    calls.clear()
    with pytest.raises(ValueError):
        b.call(lambda: calls.append(1) or (_ for _ in ()).throw(ValueError()),
               retryable=lambda e: isinstance(e, Throttled))
    assert len(calls) == 1     # not retryable: raised at once


def test_waits_are_full_jitter_within_the_bounds():
    random.seed(7)
    b = Backoff()
    for attempt in range(8):
        bound = min(retry.CAP_S, retry.BASE_S * 2 ** attempt)
        waits = [b.delay(attempt) for _ in range(200)]
        assert all(0 <= w <= bound for w in waits)
        assert max(waits) > bound / 2       # jitter spreads over the whole range


def test_success_after_a_throttle_returns_the_answer():
    answers = iter([Throttled(), "ok"])

    def fn():
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    slept: list[float] = []
    assert Backoff(sleep=slept.append).call(fn, retryable=lambda e: True) == "ok"
    assert len(slept) == 1


def _calls(tree: ast.AST, name: str) -> list[int]:
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
            and (getattr(n.func, "attr", None) == name or getattr(n.func, "id", None) == name)]


def test_no_module_keeps_a_backoff_loop_of_its_own():
    """A sleep between tries of a cloud call belongs to gpulease/retry.py. (The reaper engine's
    settle wait before re-reading a group is a wait, not a retry: listed.)"""
    allowed = {"gpulease/retry.py": "the policy", "gpulease/reaper/engine.py": "settle before re-read"}
    found = {}
    for path in (ROOT / "gpulease").rglob("*.py"):
        rel = str(path.relative_to(ROOT))
        lines = _calls(ast.parse(path.read_text(encoding="utf-8")), "sleep")
        if lines and rel not in allowed:
            found[rel] = lines
    assert found == {}, found


def test_the_callers_use_the_one_policy():
    for rel in ("gpulease/catalog/fetchers/clients.py", "gpulease/reaper/aws.py", "gpulease/reaper/gcp.py",
                "gpulease/clouds/gcp/reservation.py"):
        text = (ROOT / rel).read_text(encoding="utf-8")
        assert "from gpulease.retry import Backoff" in text, rel


def test_no_hand_written_page_loop_where_an_sdk_pager_exists():
    """Listings page through the SDKs' pagers (boto3 paginators, google-api-core page
    iterators), never a `while` loop of our own around a next-page token."""
    tokens = {"NextToken", "nextToken", "pageToken", "nextPageToken", "next_page_token",
              "NextMarker", "Marker"}
    found = {}
    for path in (ROOT / "gpulease").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.While) and any(
                    isinstance(x, ast.Constant) and x.value in tokens for x in ast.walk(node)):
                found.setdefault(str(path.relative_to(ROOT)), []).append(node.lineno)
    assert found == {}, found


def test_poll_waits_doubling_to_the_cap_and_gives_up_at_the_timeout():
    from gpulease.retry import poll

    answers = iter([None, None, None, None, "done"])
    slept: list[float] = []
    seen: list[float] = []
    assert poll(lambda: next(answers), timeout_s=60, first_s=0.5, cap_s=1.5,
                progress=seen.append, sleep=slept.append) == "done"
    assert slept == [0.5, 1.0, 1.5, 1.5] and seen == [0.0, 0.5, 1.5, 3.0]
    slept.clear()
    assert poll(lambda: None, timeout_s=2.0, first_s=1.0, sleep=slept.append) is None
    assert slept == [1.0, 1.0 * 2] and sum(slept) >= 2.0
