"""Window decisions declared: AWS Capacity Block groups scheduled around the block, limited
reservations; what the plan bills for them."""
from __future__ import annotations

import datetime as dt

import pytest

from gpulease import money
from gpulease.catalog import load_catalog
from gpulease.clouds.aws import builders
from gpulease.clouds.aws.deploy import deploy
from gpulease.config import parse_stack_config
from gpulease.costing import transform
from gpulease.errors import ConfigError
from gpulease.planner import mocks
from gpulease.planner.mocks import run_program
from gpulease.policy import decide
from gpulease.quotes.store import shipped_book
from tests.timeouts import HANG_S

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
CATALOG = load_catalog()
ASG = "aws:autoscaling/group:Group"
SCHEDULE = "aws:autoscaling/schedule:Schedule"
ODCR = "aws:ec2/capacityReservation:CapacityReservation"
BLOCK = "aws:ec2/capacityBlockReservation:CapacityBlockReservation"


def env_for(cluster: dict, gcp: bool = False):
    values = {"gpulease:owner": "ml", "gpulease:cost_center": "cc",
              "gpulease:budget_monthly_usd": 1e9, "gpulease:environment": "staging",
              "gpulease:clouds": {"aws": {"regions": ["us-east-1"]}},
              "gpulease:clusters": [cluster]}
    spec = parse_stack_config(values, stack="staging", source="stacks/Pulumi.staging.yaml",
                              catalog=CATALOG)
    return decide(spec, CATALOG, quotes=shipped_book(), now=NOW)


def run(env):
    holder = {}

    def program():
        holder["ledger"] = transform.register(env.stack, CATALOG)
        return deploy(env, CATALOG)
    r = run_program(program, stack=env.stack.stack)
    r.ledger = holder["ledger"]
    return r


JOB = {"name": "train", "gpu": "H100", "gpus": 16, "priority": 9,
       "window": {"earliest_start": "2027-01-04T00:00:00Z", "deadline": "2027-01-25T00:00:00Z",
                  "duration_hours": 240}}


PIN = {"offering_id": "cb-0123456789abcdef0", "region": "us-east-1",
       "availability_zone": "us-east-1a", "instance_type": "p5.48xlarge", "instance_count": 2,
       "start": "2027-01-04T11:30:00Z", "end": "2027-01-15T11:30:00Z",
       "upfront_fee_usd": 20766.24, "purchase_approved": True}


def offer(asked):
    def answer(args, region):  # stands in for DescribeCapacityBlockOfferings
        asked.append(args)
        return {"capacityBlockOfferingId": "cb-0123456789abcdef0", "id": "cb",
                "availabilityZone": "us-east-1a", "currencyCode": "USD",
                "upfrontFee": "20766.24", "tenancy": "default", **args}
    return answer


def test_a_window_block_is_never_bought_without_approval(monkeypatch):
    from gpulease.errors import EXIT_POLICY, GuardrailError

    asked = []
    monkeypatch.setitem(mocks.KNOWN_CALLS,
                        "aws:ec2/getCapacityBlockOffering:getCapacityBlockOffering", offer(asked))
    env = env_for(JOB)
    assert env.clusters[0].window.model == "capacity_block"
    with pytest.raises(GuardrailError) as exc:
        run(env)
    assert exc.value.exit_code == EXIT_POLICY
    # the block the policy priced was quoted: 11 days from 11:30 UTC on Jan 4
    assert asked == [{"capacityDurationHours": 264, "instanceCount": 2,
                      "instanceType": "p5.48xlarge", "startDateRange": "2027-01-04T11:30:00Z",
                      "endDateRange": "2027-01-15T11:30:00Z"}]
    assert "purchase_approved: true" in str(exc.value)


def test_an_approved_window_block_is_declared_empty_and_scheduled_around_it(monkeypatch):
    asked = []
    monkeypatch.setitem(mocks.KNOWN_CALLS,
                        "aws:ec2/getCapacityBlockOffering:getCapacityBlockOffering", offer(asked))
    env = env_for({**JOB, "capacity_block": PIN})
    d = env.clusters[0]
    assert d.window.model == "capacity_block" and d.purchase.reserved == 2
    r = run(env)
    assert asked == []                                   # a pin is used verbatim
    assert r.one(BLOCK, "train-block").inputs["capacityBlockOfferingId"] == \
        "cb-0123456789abcdef0"
    assert not r.by_type(ODCR)
    basg = r.one(ASG, "train-block-asg")
    assert basg.inputs["desiredCapacity"] == 0 and basg.inputs["maxSize"] == 2, basg.urn
    sched = {s.name: s.inputs for s in r.by_type(SCHEDULE)}
    assert sched["train-block-start"]["startTime"] == "2027-01-04T11:30:00Z"
    assert sched["train-block-start"]["desiredCapacity"] == 2
    # AWS starts terminating 30 min before the end; gpulease drains 15 min before that
    assert sched["train-block-drain"]["startTime"] == "2027-01-15T10:45:00Z"
    assert sched["train-block-drain"]["desiredCapacity"] == 0
    # prepaid until the block's end: the reaper and autostop leave its nodes alone (C3)
    from gpulease import tags

    group_tags = {t["key"]: t["value"] for t in basg.inputs["tags"]}
    assert group_tags[tags.BILLED_UNTIL] == "20270115t1130z"
    assert tags.BILLED_UNTIL not in {t["key"]: t for t in r.one(ASG, "train-asg").inputs[
        "tags"]} if r.by_type(ASG) and any(a.name == "train-asg" for a in r.by_type(ASG)) \
        else True
    # the block's price, once, on the block
    # the block's price, once, on the block, one-time: never in a monthly figure or tag
    assert r.ledger.by_cluster()["train"] + r.ledger.one_time_by_cluster()["train"] == \
        d.monthly_money
    assert r.ledger.get(BLOCK, "train-block").one_time_usd == money.usd(39.33 * 2 * 264)
    assert r.ledger.get(BLOCK, "train-block").monthly_usd == 0
    block_tags = r.one(BLOCK, "train-block").inputs["tags"]
    assert block_tags[tags.MONTHLY_USD] == "0.00"
    assert block_tags[tags.ONE_TIME_USD] == f"{39.33 * 2 * 264:.2f}"
    assert d.monthly_usd == pytest.approx(39.33 * 2 * 264 + d.costs.egress_usd)


def test_a_window_reservation_ends_with_its_run():
    env = env_for({**JOB, "gpu": "A100-80GB", "gpus": 16})   # p4de: no block rate quoted
    d = env.clusters[0]
    assert d.window.model == "reservation"
    r = run(env)
    odcr = r.one(ODCR, "train-odcr")
    assert odcr.inputs["endDateType"] == "limited", odcr.urn
    assert odcr.inputs["endDate"] == builders.reservation_end(d) == "2027-01-14T00:00:00Z"
    assert r.ledger.by_cluster().get("train", 0) + r.ledger.one_time_by_cluster()["train"] \
        == d.monthly_money


def test_block_schedule_times():
    got = builders.block_schedule({"hours": 48, "start": "2027-01-04T11:30:00Z",
                                   "end": "2027-01-06T11:30:00Z", "nodes": 3})
    assert got == [("start", "2027-01-04T11:30:00Z", 3), ("drain", "2027-01-06T10:45:00Z", 0)]


# ---- GCP --------------------------------------------------------------------------------------
def gcp_env(cluster: dict, quotes):
    from gpulease.quotes.model import QuoteBook  # noqa: F401 (quotes is a QuoteBook)

    values = {"gpulease:owner": "ml", "gpulease:cost_center": "cc",
              "gpulease:budget_monthly_usd": 1e9, "gpulease:environment": "staging",
              "gpulease:clouds": {"gcp": {"project": "acme-ml-dev", "regions": ["us-central1"]}},
              "gpulease:clusters": [cluster]}
    spec = parse_stack_config(values, stack="staging", source="stacks/Pulumi.staging.yaml",
                              catalog=CATALOG)
    return decide(spec, CATALOG, quotes=quotes, now=NOW)


def run_gcp(env):
    from gpulease.clouds.gcp.deploy import deploy as gcp_deploy

    holder = {}

    def program():
        holder["ledger"] = transform.register(env.stack, CATALOG)
        return gcp_deploy(env, CATALOG)
    r = run_program(program, stack=env.stack.stack)
    r.ledger = holder["ledger"]
    return r


GCP_JOB = {"name": "tune", "gpu": "H100", "gpus": 16, "priority": 6,
           "window": {"earliest_start": "2027-01-04T00:00:00Z",
                      "deadline": "2027-01-12T00:00:00Z", "duration_hours": 100}}
MIG = "gcp:compute/instanceGroupManager:InstanceGroupManager"
TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"


def test_a_flex_start_window_is_an_empty_mig_and_a_resize_request():
    from gpulease import tags
    from gpulease.quotes.model import Quote, QuoteBook

    flex = Quote(kind="flex_start", cloud="gcp", region="us-central1",
                 instance_type="a3-highgpu-8g", quoted_at=NOW, source="gcp:cloudbilling.skus",
                 hourly_usd=38.0, live=True)
    env = gcp_env(GCP_JOB, QuoteBook(quotes=[flex]))
    d = env.clusters[0]
    assert d.window.model == "flex_start" and d.purchase.on_demand == 2
    r = run_gcp(env)
    tpl = r.one(TEMPLATE, "tune-on-demand-template").inputs["scheduling"]
    assert tpl["provisioningModel"] == "FLEX_START" and tpl["automaticRestart"] is False
    assert tpl["instanceTerminationAction"] == "DELETE"
    assert tpl["maxRunDuration"] == {"seconds": 360000}
    mig = r.one(MIG, "tune-on_demand")
    assert mig.inputs["targetSize"] == 0, mig.urn
    req = r.one("gcp:compute/resizeRequest:ResizeRequest", "tune-flex-start")
    assert req.inputs["resizeBy"] == 2 and req.inputs["requestedRunDuration"] == {
        "seconds": "360000"}
    labels = r.one(TEMPLATE, "tune-on-demand-template").inputs["labels"]
    # billed until the run's end: 24 h of queue allowance + 100 h
    assert labels[tags.label_key(tags.BILLED_UNTIL)] == "20270109t0400z"
    assert r.ledger.by_cluster().get("tune", 0) + r.ledger.one_time_by_cluster()["tune"] == \
        d.monthly_money
    assert r.ledger.get(MIG, "tune-on_demand").one_time_usd == money.usd(2 * 38 * 100)


def test_a_calendar_window_is_a_future_reservation_the_reserved_mig_consumes():
    from gpulease.quotes.model import Quote, QuoteBook

    rate = Quote(kind="calendar", cloud="gcp", region="us-central1",
                 instance_type="a3-highgpu-8g", quoted_at=NOW, source="gcp:cloudbilling.skus",
                 hourly_usd=40.0, live=True)
    advice = Quote(kind="calendar", cloud="gcp", region="us-central1",
                   instance_type="a3-highgpu-8g", quoted_at=NOW, source="gcp:advice.calendarMode",
                   start=dt.datetime(2027, 1, 5, tzinfo=UTC),
                   end=dt.datetime(2027, 1, 10, tzinfo=UTC), instance_count=2,
                   zone="us-central1-b", offering_id="rec-1", live=True)
    env = gcp_env({**GCP_JOB, "priority": 9}, QuoteBook(quotes=[rate, advice]))
    d = env.clusters[0]
    assert d.window.model == "calendar" and d.purchase.reserved == 2
    assert d.zone == "us-central1-b"
    r = run_gcp(env)
    fr = r.one("gcp:compute/futureReservation:FutureReservation", "tune-reservation").inputs
    assert fr["reservationMode"] == "CALENDAR"
    assert fr["timeWindow"] == {"startTime": "2027-01-05T00:00:00Z",
                                "endTime": "2027-01-10T00:00:00Z"}      # 5 whole days
    assert fr["specificSkuProperties"]["totalCount"] == "2"
    aff = r.one(TEMPLATE, "tune-reserved-template").inputs["reservationAffinity"]
    assert aff["specificReservation"]["values"] == [fr["reservationName"]]
    assert not r.by_type("gcp:compute/reservation:Reservation")
    assert r.ledger.get("gcp:compute/futureReservation:FutureReservation",
                        "tune-reservation").one_time_usd == money.usd(2 * 40 * 120)


def test_window_resources_conform_to_the_api_specs(monkeypatch):
    """The inputs the window components add (scheduled actions, limited ODCRs, FLEX_START
    templates, resize requests, future reservations) pass the same conformance check as every
    plan: botocore's and compute_v1's enums and names."""
    from gpulease.conformance import check
    from gpulease.quotes.model import Quote, QuoteBook

    monkeypatch.setitem(mocks.KNOWN_CALLS,
                        "aws:ec2/getCapacityBlockOffering:getCapacityBlockOffering",
                        lambda args, region: {"capacityBlockOfferingId": "cb-0123456789abcdef0",
                                              "id": "cb", "availabilityZone": "us-east-1a",
                                              "currencyCode": "USD", "upfrontFee": "1",
                                              "tenancy": "default", **args})
    runs = [run(env_for({**JOB, "capacity_block": PIN})),
            run(env_for({**JOB, "gpu": "A100-80GB", "gpus": 16}))]
    flex = Quote(kind="flex_start", cloud="gcp", region="us-central1",
                 instance_type="a3-highgpu-8g", quoted_at=NOW, source="t", hourly_usd=38.0,
                 live=True)
    runs.append(run_gcp(gcp_env(GCP_JOB, QuoteBook(quotes=[flex]))))
    for r in runs:
        assert check(r.resources) == []


def test_block_nodes_checkpoint_before_the_drain(tmp_path):
    """A Capacity Block node's watcher runs the checkpoint hook once at its drain time (10 min
    before the group scales in, 15 min before AWS's own termination), without any notice."""
    import subprocess

    from gpulease.bootstrap import render as R

    d = env_for(JOB).clusters[0]
    drain = R.window_drain_at(d, "reserved")
    # 2027-01-15 11:30 - 30 min (AWS) - 15 min (drain) - 10 min (checkpoint)
    assert drain == int(dt.datetime(2027, 1, 15, 10, 35, tzinfo=UTC).timestamp())
    assert R.window_drain_at(d, "mixed") == 0
    files = R.render_node_files(stack=env_for(JOB).stack, decision=d, purchase_model="reserved")
    script = tmp_path / "watcher.sh"
    script.write_text(files["usr/local/sbin/gpulease-spot-watcher"])
    log = tmp_path / "hook.log"
    hook = tmp_path / "hook.sh"
    hook.write_text(f'#!/bin/sh\necho "ran $GPULEASE_NOTICE_ACTION $GPULEASE_NOTICE_DEADLINE" '
                    f'>> {log}\n')
    hook.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "GPULEASE_CHECKPOINT_HOOK": str(hook),
           "GPULEASE_STATE_DIR": str(tmp_path / "state"), "GPULEASE_POLL_SECONDS": "0.05",
           "GPULEASE_MAX_POLLS": "3", "GPULEASE_METADATA_URL": "http://127.0.0.1:9",
           "GPULEASE_DRAIN_AT": "1"}      # long past: drain now
    for _ in range(2):
        proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                              timeout=HANG_S)
        assert proc.returncode == 0, proc.stderr
    assert log.read_text().splitlines() == ["ran window-end 601"]   # once, deadline = +10 min


# ---- the commands ------------------------------------------------------------------------------
def _stack_file(tmp_path, cluster: dict):
    import yaml

    doc = {"config": {"gpulease:owner": "ml", "gpulease:cost_center": "cc",
                      "gpulease:budget_monthly_usd": 1000000,
                      "gpulease:clouds": {"aws": {"regions": ["us-east-1"]}},
                      "gpulease:clusters": [cluster]}}
    f = tmp_path / "Pulumi.windows.yaml"
    f.write_text(yaml.safe_dump(doc))
    return f


def test_plan_and_explain_judge_the_window_at_now(tmp_path, capsys, monkeypatch):
    """`plan --now` / `explain --now`: the same moment for the decision and the program; an
    unapproved block stops the plan with exit 4 and the lines to add; explain shows the quote
    with its date and the block's start."""
    import json
    from pathlib import Path

    from gpulease.cli import main
    from gpulease.errors import EXIT_POLICY

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    f = _stack_file(tmp_path, JOB)
    now = ["--now", "2026-12-03T09:00:00Z"]
    assert main(["explain", "--config", str(f), *now, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    w = doc["clusters"][0]["window"]
    assert w["model"] == "capacity_block" and w["start"] == "2027-01-04T11:30:00Z"
    assert w["judged_at"] == "2026-12-03T09:00:00Z"
    assert w["quote"]["source"] == "aws-capacity-blocks-pricing"
    code = main(["plan", "--config", str(f), *now, "--json"])
    cap = capsys.readouterr()
    assert code == EXIT_POLICY, cap.err
    assert "purchase_approved" in cap.err
    # once the window has passed, nothing can meet it: exit 2 with the reason
    late = ["--now", "2027-01-24T00:00:00Z"]
    assert main(["explain", "--config", str(f), *late]) == 2
    assert "window (priority 9" in capsys.readouterr().err
