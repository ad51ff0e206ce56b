"""Window decisions declared: AWS Capacity Block groups scheduled around the block, limited
reservations; what the plan bills for them."""
from __future__ import annotations

import datetime as dt

import pytest

from infra.catalog import load_catalog
from infra.clouds.aws import builders, deploy
from infra.config import parse_stack_config
from infra.costing import transform
from infra.errors import ConfigError
from infra.planner import mocks
from infra.planner.mocks import run_program
from infra.policy import decide
from infra.quotes.store import shipped_book

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
    from infra.errors import EXIT_POLICY, GuardrailError

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
    # the block's price, once, on the block
    assert r.ledger.by_cluster()["train"] == pytest.approx(d.monthly_usd, abs=0.01)
    assert r.ledger.get(BLOCK, "train-block").monthly_usd == pytest.approx(39.33 * 2 * 264)
    assert d.monthly_usd == pytest.approx(39.33 * 2 * 264 + d.costs.egress_usd)


def test_a_window_reservation_ends_with_its_run():
    env = env_for({**JOB, "gpu": "A100-80GB", "gpus": 16})   # p4de: no block rate quoted
    d = env.clusters[0]
    assert d.window.model == "reservation"
    r = run(env)
    odcr = r.one(ODCR, "train-odcr")
    assert odcr.inputs["endDateType"] == "limited", odcr.urn
    assert odcr.inputs["endDate"] == builders.reservation_end(d) == "2027-01-14T00:00:00Z"
    assert r.ledger.by_cluster()["train"] == pytest.approx(d.monthly_usd, abs=0.01)


def test_block_schedule_times():
    got = builders.block_schedule({"hours": 48, "start": "2027-01-04T11:30:00Z",
                                   "end": "2027-01-06T11:30:00Z", "nodes": 3})
    assert got == [("start", "2027-01-04T11:30:00Z", 3), ("drain", "2027-01-06T10:45:00Z", 0)]
