"""Concurrent reapers share one --max-actions (issue 14): the claim protocol, proven three ways.

1. A model check (hypothesis): any interleaving of any number of reapers running
   ``gpulease.reaper.claims`` over a linearizable tag store never acts on more than the cap.
2. Two real reapers racing on moto's server (threads), in the worst interleaving (both write
   their claims before either reads) and in free-running races.
3. The same race on GCP's fake (labels on instances, fingerprint-guarded withdrawal).
"""
from __future__ import annotations

import random
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulease import tags
from gpulease.reaper import claims as cl
from gpulease.reaper import decision as d
from gpulease.reaper import engine
from gpulease.reaper.aws import AwsReaper
from gpulease.reaper.gcp import GcpReaper
from gpulease.retry import Backoff
from tests.fakes import moto_strict
from tests.fakes.gcp_compute_monitoring import FakeGcp
from tests.test_reaper_aws import REGION, Env
from tests.timeouts import HANG_S

NOW = 1_800_000_000.0


# ---- 1. the protocol itself, against a model of the tag store ------------------------------------
class Store:
    """Tags per cluster: each run writes its own key (never anyone else's), deletes only it."""

    def __init__(self):
        self.tags: dict = {}            # cluster -> {run token: expires}

    def read(self) -> list:
        return [cl.Claim(key=k, token=tok, value=v) for k, runs in self.tags.items()
                for tok, v in runs.items()]

    def write(self, key, token, value) -> None:
        self.tags.setdefault(key, {})[token] = value

    def delete(self, key, token) -> None:
        self.tags.get(key, {}).pop(token, None)


class ModelReaper:
    """The engine's claim phase (gpulease.reaper.engine._claim), one store operation per step."""

    def __init__(self, name: str, candidates: list, cap: int):
        self.token, self.candidates, self.cap = name, candidates, cap
        self.value = cl.value(NOW)
        self.steps = self._steps()
        self.kept: list = []

    def _steps(self):
        store = yield
        pre = cl.tally(store.read(), run_token=self.token, now=NOW)
        budget = max(0, self.cap - len(pre.others))
        written = [k for k in self.candidates if k not in pre.others][:budget]
        for key in written:
            store = yield
            store.write(key, self.token, self.value)
        store = yield
        kept, lost = cl.settle(written, cl.tally(store.read(), run_token=self.token, now=NOW),
                               cap=self.cap)
        self.kept = kept
        for key in lost:
            store = yield
            store.delete(key, self.token)

    def start(self) -> None:
        next(self.steps)

    def step(self, store: Store) -> bool:
        try:
            self.steps.send(store)
            return True
        except StopIteration:
            return False


def test_one_shared_claim_key_would_break_the_cap():
    """Why every run has its own claim key: with one key per cluster, a later writer hides an
    earlier run's kept claim and the total exceeds the cap (the model check found this)."""
    class SharedKeyStore(Store):
        def write(self, key, token, value):
            self.tags[key] = {token: value}      # last writer wins

    store = SharedKeyStore()
    a, b = ModelReaper("a", ["x", "y"], 2), ModelReaper("b", ["z", "y"], 2)
    a.start(), b.start()
    a.step(store), b.step(store)                 # both read: nothing claimed yet
    while a.step(store):                         # a claims x, y and keeps both
        pass
    while b.step(store):                         # b claims z, overwrites y, keeps z
        pass
    assert len(set(a.kept) | set(b.kept)) == 3   # 3 > cap 2
    store = Store()                              # the real design: the same schedule is safe
    a, b = ModelReaper("a", ["x", "y"], 2), ModelReaper("b", ["z", "y"], 2)
    a.start(), b.start()
    a.step(store), b.step(store)
    while a.step(store):
        pass
    while b.step(store):
        pass
    assert len(set(a.kept) | set(b.kept)) <= 2


@settings(max_examples=400, deadline=None)
@given(cap=st.integers(1, 4), n=st.integers(2, 4), clusters=st.integers(1, 8),
       data=st.data())
def test_no_interleaving_exceeds_the_cap(cap, n, clusters, data):
    keys = [f"asg-{i}" for i in range(clusters)]
    reapers = []
    for k in range(n):
        mine = data.draw(st.permutations(keys), label=f"order-{k}")
        take = data.draw(st.integers(0, clusters), label=f"candidates-{k}")
        reapers.append(ModelReaper(f"run{k}", list(mine[:take]), cap))
    store = Store()
    for r in reapers:
        r.start()
    live = list(reapers)
    while live:
        r = live[data.draw(st.integers(0, len(live) - 1), label="who")]
        if not r.step(store):
            live.remove(r)
    acted = set().union(*(set(r.kept) for r in reapers))
    assert len(acted) <= cap
    # a kept claim is still there at the end: nobody removed it
    for r in reapers:
        for key in r.kept:
            assert store.tags[key].get(r.token) == r.value


def test_sequential_reapers_get_the_whole_cap_between_them():
    store = Store()
    a = ModelReaper("a", ["x", "y", "z"], 2)
    b = ModelReaper("b", ["z", "w"], 2)
    for r in (a, b):
        r.start()
        while r.step(store):
            pass
    assert (a.kept, b.kept) == (["x", "y"], [])


@pytest.mark.parametrize("raw,alive", [
    (str(int(NOW) + 600), True),
    (str(int(NOW) - 10), True),                # inside the clock-skew allowance
    (str(int(NOW) - 301), False),              # expired
    (str(int(NOW) + 600 + 301), False),        # too far ahead: not a sane claim
    ("garbage", False), ("", False), (None, False), ("1e12", False), ("-1800000000", False),
])
def test_claim_liveness(raw, alive):
    assert cl.live(raw, NOW) is alive


@pytest.mark.parametrize("key,token", [
    ("gpulease-reaper-claim-abc123", "abc123"), ("gpulease-reaper-claim-", None),
    ("gpulease-reaper-claim-ABC", None), ("gpulease-reaper-claim", None),
    ("gpulease-idle-since", None), ("gpulease-reaper-claim-a-b", None),
])
def test_claim_keys(key, token):
    assert cl.token_of(key) == token


def test_claim_key_is_a_valid_label_key():
    key = cl.tag_key(cl.new_token())
    assert len(key) <= 63 and key == tags.label_key(key)
    with pytest.raises(ValueError):
        cl.tag_key("Not-A-Token")


# ---- 2. two reapers racing on moto ---------------------------------------------------------------
@pytest.fixture
def aws(moto_url, monkeypatch):
    moto_strict.point_boto_at(moto_url, monkeypatch)
    return Env()


def marked_clusters(env: Env, count: int, environment: str = "dev") -> tuple[list, float]:
    groups, t0 = [], None
    for i in range(count):
        asg, ids, launched = env.cluster(environment, f"c{i}")
        env.util(ids, launched - 60, launched + 240 * 60, 0.0)
        groups.append(asg)
        t0 = launched if t0 is None else max(t0, launched)
    run_at([new_reaper()], policy=d.Policy(), apply=True, environments=[environment],
               now=t0 + 40 * 60, settle_s=0)
    assert all(tags.IDLE_SINCE in env.group_tags(g) for g in groups)
    return groups, t0


def run_at(reapers, *, now, **kw):
    """engine.run at a simulated ``now``; moto publishes metrics late as of that time."""
    moto_strict.set_clock(now)
    return engine.run(reapers, now=now, **kw)


def new_reaper() -> AwsReaper:
    return AwsReaper.for_region(REGION, backoff=Backoff(sleep=lambda s: None))


def race(reapers, envs, *, now, cap, sleep, settle_s=1.0):
    reports = [None] * len(reapers)
    moto_strict.set_clock(now)

    def go(k):
        reports[k] = run_at([reapers[k]], policy=d.Policy(), apply=True,
                                environments=[envs[k]], max_actions=cap, now=now,
                                settle_s=settle_s, sleep=sleep, run_token=f"racer{k}")
    threads = [threading.Thread(target=go, args=(k,)) for k in range(len(reapers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_S)
    assert all(reports), "a racer did not finish"
    return reports


def lockstep(reapers) -> threading.Barrier:
    """Force the worst interleaving: every racer reads the claims before any writes, and
    writes before any reads them back. Returns the barrier the settle wait must use."""
    before_write = threading.Barrier(len(reapers))
    for r in reapers:
        first_read = r.claims

        def read(first_read=first_read, calls=[]):
            out = first_read()
            if not calls:
                calls.append(1)
                before_write.wait(HANG_S)
            return out
        r.claims = read
    return threading.Barrier(len(reapers))


def reaped(reports) -> list:
    return [(o.environment, o.cluster) for rep in reports for o in rep.outcomes
            if o.state == d.REAPED]


def test_worst_interleaving_never_exceeds_the_cap(aws):
    """The scheduled reapers of two environments in one region, racing: both write their
    claims before either reads them back."""
    dev, t0 = marked_clusters(aws, 3, "dev")
    stg, t1 = marked_clusters(aws, 3, "staging")
    racers = [new_reaper(), new_reaper()]
    both_wrote = lockstep(racers)
    reports = race(racers, ["dev", "staging"], now=max(t0, t1) + 75 * 60,
                   cap=2, sleep=lambda s: both_wrote.wait(HANG_S))
    # each claimed 2, each then saw the other's 2: both stand down (the safe side)
    assert reaped(reports) == []
    skipped = [o for rep in reports for o in rep.outcomes if "shared with other" in o.reason]
    assert len(skipped) == 4
    # all withdrawn (claim keys are "<CLAIM>-<run token>")
    assert [k for g in dev + stg for k in aws.group_tags(g) if k.startswith(tags.CLAIM)] == []
    assert all(aws.group(g)["DesiredCapacity"] == 2 for g in dev + stg)
    # the next run gets the whole cap
    nxt = run_at([new_reaper()], policy=d.Policy(), apply=True, environments=None,
                     max_actions=2, now=max(t0, t1) + 76 * 60, settle_s=0)
    assert len(reaped([nxt])) == 2


def test_racing_for_the_same_clusters_never_exceeds_the_cap(aws):
    groups, t0 = marked_clusters(aws, 5)
    racers = [new_reaper(), new_reaper()]
    both_wrote = lockstep(racers)
    reports = race(racers, ["dev", "dev"], now=t0 + 75 * 60, cap=2,
                   sleep=lambda s: both_wrote.wait(HANG_S))
    done = reaped(reports)
    assert len(set(done)) <= 2
    assert sum(aws.group(g)["DesiredCapacity"] == 0 for g in groups) == len(set(done))


def test_free_running_races_never_exceed_the_cap(aws):
    dev, t0 = marked_clusters(aws, 4, "dev")
    stg, t1 = marked_clusters(aws, 4, "staging")
    rng = random.Random(14)
    total = 0
    for lap in range(3):
        now = max(t0, t1) + 75 * 60 + lap * (cl.LEASE_S + d.CLOCK_SKEW_S + 60)
        reports = race([new_reaper(), new_reaper()], ["dev", "staging"], now=now, cap=2,
                       sleep=lambda s: time.sleep(rng.uniform(0, 0.05)))
        done = reaped(reports)
        assert len(done) <= 2 and len(set(done)) == len(done)
        total += len(done)
    assert sum(aws.group(g)["DesiredCapacity"] == 0 for g in dev + stg) == total


def test_a_reaper_right_after_another_finds_the_cap_in_use(aws):
    groups, t0 = marked_clusters(aws, 4)
    first = run_at([new_reaper()], policy=d.Policy(), apply=True, environments=["dev"],
                       max_actions=2, now=t0 + 75 * 60, settle_s=0, run_token="lambda1")
    second = run_at([new_reaper()], policy=d.Policy(), apply=True, environments=["dev"],
                        max_actions=2, now=t0 + 77 * 60, settle_s=0, run_token="cli1")
    assert len(reaped([first])) == 2 and reaped([second]) == []
    held = [o for o in second.outcomes if o.nodes]
    assert len(held) == 2 and all("in use by other reapers" in o.reason and "lambda1" in o.reason
                                  for o in held)
    # after the lease, the cap is free again
    third = run_at([new_reaper()], policy=d.Policy(), apply=True, environments=["dev"],
                       max_actions=2, now=t0 + 75 * 60 + cl.LEASE_S + d.CLOCK_SKEW_S + 1,
                       settle_s=0, run_token="cli2")
    assert len(reaped([third])) == 2


# ---- 3. the same race on GCP ---------------------------------------------------------------
def test_worst_interleaving_on_gcp_never_exceeds_the_cap():
    fake = FakeGcp(project="acme-ml")
    url = fake.start()
    try:
        t0 = time.time() - 6 * 3600
        for env in ("dev", "staging"):
            for i in range(2):
                for iid in fake.add_mig("europe-west4-a", f"{env}-c{i}-mig", 2, launched=t0,
                                        labels={tags.CLUSTER: f"c{i}", tags.ENVIRONMENT: env,
                                                tags.DECLARED: tags.declared_value(env, f"c{i}"),
                                                tags.IDLE_MINUTES: "30",
                                                tags.FIRST_JOB_GRACE: "0"}):
                    fake.put_points(iid, t0, t0 + 4 * 3600, 0.0)

        def reaper():
            return GcpReaper.for_project("acme-ml", endpoint=url,
                                         backoff=Backoff(sleep=lambda s: None))
        fake.clock = t0 + 40 * 60       # the fake publishes metrics late as of this time
        engine.run([reaper()], policy=d.Policy(), apply=True, environments=None,
                   now=t0 + 40 * 60, settle_s=0)
        racers = [reaper(), reaper()]
        both_wrote = lockstep(racers)
        fake.clock = t0 + 75 * 60
        reports = race(racers, ["dev", "staging"], now=t0 + 75 * 60, cap=1,
                       sleep=lambda s: both_wrote.wait(HANG_S))
        assert reaped(reports) == []
        left = [(name, k) for name, inst in fake.instances.items() for k in inst["labels"]
                if k.startswith(tags.CLAIM)]
        left += [(name, k) for name, mig in fake.migs.items()
                 for k in (mig.get("labels") or {}) if k.startswith(tags.CLAIM)]
        assert left == [], f"claims not withdrawn: {left}"
        fake.clock = t0 + 76 * 60
        nxt = engine.run([reaper()], policy=d.Policy(), apply=True, environments=None,
                         max_actions=1, now=t0 + 76 * 60, settle_s=0)
        if len(reaped([nxt])) != 1:  # full reasons (an assert message would be truncated)
            pytest.fail("expected one teardown:\n" + "\n".join(
                f"{o.environment}/{o.cluster}: {o.state}: {o.reason}" for o in nxt.outcomes))
        assert sorted(m["targetSize"] for m in fake.migs.values()) == [0, 2, 2, 2]
    finally:
        fake.stop()
