"""`gpulease recommend` on GCP: a month of Cloud Monitoring history in the local fake, read through
the reaper's adaptor and turned into profiles (steady, bursty, idle, nightly).

The fake keeps each series with the labels its VM had, also after the VM is deleted (Monitoring's
``metadata.user_labels``), parses the filter clause by clause, drops points older than the
retention and pages at ``pageSize`` points (tests/fakes/gcp_compute_monitoring.py).
"""
from __future__ import annotations

import time

import pytest

from gpulease import tags
from gpulease.errors import CloudError
from gpulease.recommend import profile as pf
from gpulease.recommend.engine import window
from gpulease.reaper.gcp import METRIC, GcpReaper
from gpulease.retry import Backoff
from tests.fakes import gcp_compute_monitoring as fakes
from tests.fakes.gcp_compute_monitoring import FakeGcp

ZONE = "us-central1-b"
GPN = 8
H = 3600


@pytest.fixture
def gcp():
    fake = FakeGcp(project="acme-ml-prod")
    fake.url = fake.start()
    fake.window = window(time.time(), pf.DEFAULT_WINDOW_DAYS)
    yield fake
    assert fake.mutations == []          # recommend only reads
    fake.stop()


def labels(cluster: str, env: str = "prod") -> dict:
    return {tags.CLUSTER: cluster, tags.ENVIRONMENT: env, tags.IDLE_MINUTES: "60"}


def ran(fake, iid: str, hours, value) -> None:
    """The Ops Agent's points of ``iid`` for ``hours`` of the window, every 20 minutes, for
    each GPU (Monitoring keeps one series per GPU; the reader reduces them per instance)."""
    start = fake.window[0]
    for h in hours:
        v = value(h) if callable(value) else value
        for m in (0, 20, 40):
            for g in range(GPN):
                fake.points.append((iid, g, start + h * H + m * 60 + 5, v))


def usage(fake, *clusters, env="prod") -> dict:
    a = GcpReaper.for_project(fake.project, endpoint=fake.url,
                              backoff=Backoff(sleep=lambda s: None))
    start, end = fake.window
    return a.usage(env, list(clusters), start, end, pf.PERIOD_S)


def derive(fake, series) -> pf.Derivation:
    start, end = fake.window
    return pf.derive(series, start=start, end=end, gpus_per_node=GPN, threshold_pct=5.0)


def steps(d):
    return [(s.gpus, s.hours_per_month) for s in d.profile]


HOURS = pf.DEFAULT_WINDOW_DAYS * 24


def test_steady(gcp):
    ids = gcp.add_mig(ZONE, "pretrain-reserved", 4, labels=labels("pretrain"),
                      launched=gcp.window[0] - 86400)
    for iid in ids:
        ran(gcp, iid, range(HOURS), 93.0)
    found = usage(gcp, "pretrain")
    assert set(found) == {"pretrain"} and set(found["pretrain"]) == set(ids)
    d = derive(gcp, found["pretrain"])
    assert steps(d) == [(32, 730.0)] and d.samples == 4 * HOURS


def test_bursty_with_deleted_burst_vms(gcp):
    """2 reserved VMs always busy; every day 6 spot VMs for 4 h (3 of them 10 h), deleted
    afterwards: only their series remain, with the labels they had."""
    base = gcp.add_mig(ZONE, "pretrain-reserved", 2, labels=labels("pretrain"),
                       launched=gcp.window[0] - 86400)
    for iid in base:
        ran(gcp, iid, range(HOURS), 71.0)
    burst = []
    for day in range(30):
        for k in range(6):
            iid = gcp.add_history(labels=labels("pretrain"))
            burst.append(iid)
            ran(gcp, iid, range(day * 24, day * 24 + (10 if k < 3 else 4)), 64.0)
    found = usage(gcp, "pretrain")["pretrain"]
    assert set(found) == set(base) | set(burst)
    d = derive(gcp, found)
    assert steps(d) == [(16, 730.0), (40, round(730 * 10 / 24, 1)), (64, round(730 * 4 / 24, 1))]


def test_idle(gcp):
    ids = gcp.add_mig(ZONE, "eval-ondemand", 2, labels=labels("eval"),
                      launched=gcp.window[0] - 86400)
    for iid in ids:
        ran(gcp, iid, range(HOURS), 1.0)
    d = derive(gcp, usage(gcp, "eval")["eval"])
    assert (d.profile, d.kind, d.observed["instances"]) == ((), "idle", 2)


def test_nightly(gcp):
    for night in range(30):
        for _ in range(6):
            iid = gcp.add_history(labels=labels("nightly"))
            ran(gcp, iid, range(night * 24, night * 24 + 8), 97.0)
    d = derive(gcp, usage(gcp, "nightly")["nightly"])
    assert steps(d) == [(48, round(730 * 8 / 24, 1))]


def test_series_are_selected_by_environment_and_cluster_labels(gcp):
    mine = gcp.add_mig(ZONE, "pretrain-spot", 1, labels=labels("pretrain"),
                       launched=gcp.window[0])
    theirs = gcp.add_mig(ZONE, "stg-pretrain", 1, labels=labels("pretrain", "staging"),
                         launched=gcp.window[0])
    other = gcp.add_mig(ZONE, "eval-spot", 1, labels=labels("eval"), launched=gcp.window[0])
    for iid in mine + theirs + other:
        ran(gcp, iid, range(48), 50.0)
    found = usage(gcp, "pretrain", "absent")
    assert set(found) == {"pretrain"} and set(found["pretrain"]) == set(mine)
    flt, group_by, period = gcp.series_queries[0]
    assert flt == (f'metric.type = "{METRIC}" AND resource.type = "gce_instance" AND '
                   f'metadata.user_labels."{tags.ENVIRONMENT}" = "prod" AND '
                   f'metadata.user_labels."{tags.CLUSTER}" = "pretrain"')
    assert (group_by, period) == (("resource.label.instance_id",), "3600s")


def test_a_month_of_points_is_paged(gcp, monkeypatch):
    monkeypatch.setattr(fakes, "MAX_PAGE_POINTS", 250)
    ids = gcp.add_mig(ZONE, "pretrain-reserved", 3, labels=labels("pretrain"),
                      launched=gcp.window[0])
    for iid in ids:
        ran(gcp, iid, range(HOURS), 60.0)
    found = usage(gcp, "pretrain")["pretrain"]
    assert all(len(found[i]) == HOURS for i in ids)
    pages = [p for m, p in gcp.log if p.endswith("/timeSeries")]
    assert len(pages) == -(-3 * HOURS // 250)


def test_a_failed_page_is_retried_alone_and_every_try_counted(gcp, monkeypatch):
    """The listing is google-api-core's page iterator; each page's request is one checked,
    counted, retried call: a 503 on the second page is asked again for that page only."""
    monkeypatch.setattr(fakes, "MAX_PAGE_POINTS", 250)
    ids = gcp.add_mig(ZONE, "pretrain-reserved", 3, labels=labels("pretrain"),
                      launched=gcp.window[0])
    for iid in ids:
        ran(gcp, iid, range(HOURS), 60.0)
    gcp.faults["timeSeries"] = [None, 503, 503]     # page 1 answered, page 2 fails twice
    a = GcpReaper.for_project(gcp.project, endpoint=gcp.url,
                              backoff=Backoff(sleep=lambda s: None))
    found = a.usage("prod", ["pretrain"], *gcp.window, pf.PERIOD_S)["pretrain"]
    assert all(len(found[i]) == HOURS for i in ids)
    pages = -(-3 * HOURS // 250)
    assert pages > 2
    asked = [p for m, p in gcp.log if p.endswith("/timeSeries")]
    assert len(asked) == pages + 2                   # restarting the listing would be + 4
    assert a.calls["monitoring.timeSeries.list"] == pages + 2
    assert a.backoff.retries == 2


def test_points_past_the_retention_are_gone(gcp):
    gcp.clock = gcp.window[1] + 20 * 86400      # "now" is 20 days after the window's end
    ids = gcp.add_mig(ZONE, "pretrain-reserved", 1, labels=labels("pretrain"),
                      launched=gcp.window[0])
    ran(gcp, ids[0], range(HOURS), 60.0)
    found = usage(gcp, "pretrain")["pretrain"][ids[0]]
    # retention 42 days: the first 8 days of the window (50 - 42) have expired
    assert len(found) == HOURS - 8 * 24


def test_a_malformed_filter_is_rejected_like_monitoring_does(gcp):
    a = GcpReaper.for_project(gcp.project, endpoint=gcp.url, backoff=Backoff(sleep=lambda s: None))
    with pytest.raises(CloudError, match="400"):
        a._series('metric.type = "x" OR resource.type = "gce_instance"', *gcp.window,
                  pf.PERIOD_S, None)


def test_a_persistent_5xx_is_a_cloud_error_after_retries(gcp):
    gcp.faults["timeSeries"] = [503] * 5
    with pytest.raises(CloudError, match="gave up after 5 attempts"):
        usage(gcp, "pretrain")
