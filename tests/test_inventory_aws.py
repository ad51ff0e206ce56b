"""The AWS inventory reader against moto's server (STS, EC2's transport) with the strict fakes of
DescribeReservedInstances, DescribeCapacityReservations and the Savings Plans API
(tests/fakes/aws_inventory.py: moto implements none of them)."""
from __future__ import annotations

import datetime as dt

import pytest

from gpulease.errors import CloudError
from gpulease.inventory import aws as reader
from gpulease.inventory import model
from tests.fakes import aws_inventory as fake
from tests.fakes import moto_strict

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
ACCOUNT = "123456789012"     # moto's account


@pytest.fixture(scope="module")
def sp_server():
    server = fake.SavingsPlansServer()
    yield server
    server.stop()


@pytest.fixture
def aws(moto_url, sp_server, monkeypatch):
    """boto3 pointed at moto (EC2, STS) and the Savings Plans fake; fresh fake state; no sleep
    between retries; pages of 2."""
    moto_strict.point_boto_at(moto_url, monkeypatch)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAVINGSPLANS", sp_server.url)
    fake.reset()
    fake.install(monkeypatch)
    monkeypatch.setattr(reader, "PAGE_SIZE", {k: 2 for k in reader.PAGE_SIZE})
    yield lambda: reader.make_clients(moto_strict.test_session(), sleep=lambda s: None)
    fake.reset()


def _account():
    start = NOW - dt.timedelta(days=100)
    fake.add_ri("us-east-1", "ri-p5", "p5.48xlarge", 2, start=start, hourly=55.0,
                fixed=1000.0, zone="us-east-1a")
    fake.add_ri("us-east-1", "ri-old", "p4d.24xlarge", 1, start=NOW - dt.timedelta(days=395),
                state="retired", hourly=10.0)             # ended 30 days ago: kept
    fake.add_ri("us-east-1", "ri-ancient", "p4d.24xlarge", 1, start=start - dt.timedelta(days=800),
                state="retired", hourly=10.0)             # ended long ago: left out
    fake.add_ri("us-west-2", "ri-west", "g6.12xlarge", 3, start=start, usage=1.5,
                offering_class="convertible")
    for i in range(5):                                     # 5 ODCRs: 3 pages of 2
        fake.add_capacity("us-east-1", f"cr-{i:017d}", "p5.48xlarge", 4, 4 - i % 3,
                          zone="us-east-1b", start=start, end=None)
    fake.add_capacity("us-east-1", "cr-block000000000001", "p5.48xlarge", 8, 0,
                      zone="us-east-1a", start=NOW - dt.timedelta(days=2),
                      end=NOW + dt.timedelta(days=5), block=True)
    fake.add_capacity("us-east-1", "cr-cancelled00000001", "p5.48xlarge", 1, 1,
                      zone="us-east-1a", start=start, end=None, state="cancelled")
    fake.add_plan("11111111-1111-4111-8111-111111111111", "Compute", "25.50", start=start,
                  upfront="0")
    fake.add_plan("22222222-2222-4222-8222-222222222222", "EC2Instance", "12.0", start=start,
                  region="us-east-1", family="p5")
    fake.add_plan("33333333-3333-4333-8333-333333333333", "EC2Instance", "9.0", start=start,
                  region="eu-west-1", family="p4d")       # another region: left out
    fake.add_rate("11111111-1111-4111-8111-111111111111", "us-east-1", "p5.48xlarge", "61.2")
    fake.add_rate("11111111-1111-4111-8111-111111111111", "us-east-1", "p4d.24xlarge", "21.9")
    fake.add_rate("11111111-1111-4111-8111-111111111111", "us-east-1", "p5.48xlarge", "80.0",
                  description="Windows")                  # not Linux: left out
    fake.add_rate("11111111-1111-4111-8111-111111111111", "us-west-2", "g6.12xlarge", "3.1")
    fake.add_rate("11111111-1111-4111-8111-111111111111", "us-west-2", "m5.large", "0.07")


def test_reads_every_kind_across_pages(aws):
    _account()
    holdings, source = reader.collect("", ["us-east-1", "us-west-2"], clients=aws(), now=NOW,
                                      instance_types=["p5.48xlarge", "p4d.24xlarge",
                                                      "g6.12xlarge"])
    by_id = {h.id: h for h in holdings}
    assert source.scope == ACCOUNT and source.regions == ["us-east-1", "us-west-2"]
    assert "ri-ancient" not in by_id and "cr-cancelled00000001" not in by_id
    assert "33333333-3333-4333-8333-333333333333" not in by_id

    ri = by_id["ri-p5"]
    assert (ri.kind, ri.model, ri.zone, ri.instances, ri.term_months) == \
        ("ec2-reserved-instances", "commitment", "us-east-1a", 2, 12)
    assert ri.usd_per_hour == pytest.approx(110.0) and ri.upfront_usd == pytest.approx(2000.0)
    assert ri.detail["offering_class"] == "standard" and ri.active_at(NOW)
    assert by_id["ri-old"].state == "retired" and not by_id["ri-old"].active_at(NOW)
    west = by_id["ri-west"]
    assert (west.region, west.zone, west.usd_per_hour) == ("us-west-2", None, pytest.approx(4.5))

    odcrs = [h for h in holdings if h.kind == "ec2-capacity-reservation"]
    assert len(odcrs) == 5                                 # every page read
    assert sorted(h.used_instances for h in odcrs) == [0, 0, 1, 1, 2]
    assert all(h.end is None and h.model == "reservation" for h in odcrs)
    block = by_id["cr-block000000000001"]
    assert (block.kind, block.model, block.instances, block.used_instances, block.utilisation) \
        == ("ec2-capacity-block", "capacity_block", 8, 8, 1.0)
    assert block.end == "2026-12-09T12:00:00Z"

    compute = by_id["11111111-1111-4111-8111-111111111111"]
    assert (compute.region, compute.usd_per_hour, compute.instances) == ("", 25.5, 0)
    assert compute.rates == {"us-east-1/p4d.24xlarge": 21.9, "us-east-1/p5.48xlarge": 61.2,
                             "us-west-2/g6.12xlarge": 3.1}
    assert compute.detail["savings_plan_type"] == "Compute"
    inst = by_id["22222222-2222-4222-8222-222222222222"]
    assert (inst.region, inst.instance_family, inst.rates) == ("us-east-1", "p5", {})

    # what went over the wire: state filters from the enums, pages of 2, no RI paging params
    ri_calls = [c for c in fake.CALLS if c[0] == "DescribeReservedInstances"]
    assert {c[1] for c in ri_calls} == {"us-east-1", "us-west-2"}
    assert not any(k.startswith(("MaxResults", "NextToken")) for _, _, q in ri_calls for k in q)
    cr_calls = [c for c in fake.CALLS if c[0] == "DescribeCapacityReservations"
                and c[1] == "us-east-1"]
    assert len(cr_calls) == 4                              # 7 reservations, pages of 2
    # the document validates against the schema (every holding, the kinds, the times)
    inv = model.Inventory(generated_at="2026-12-04T12:00:00Z", sources=[source],
                          holdings=holdings)
    assert model.parse(inv.as_json(), source="x").holdings == inv.holdings


def test_an_empty_account_answers_nothing(aws):
    holdings, source = reader.collect("", ["us-east-1"], clients=aws(), now=NOW,
                                      instance_types=["p5.48xlarge"])
    assert holdings == [] and source.scope == ACCOUNT
    assert not any(c[0] == "DescribeSavingsPlanRates" for c in fake.CALLS)


def test_throttling_is_retried_then_read(aws):
    _account()
    fake.FAULTS["DescribeReservedInstances"] = [503, 503]
    fake.FAULTS["DescribeCapacityReservations"] = [None, 503]      # the second page, once
    fake.FAULTS["DescribeSavingsPlans"] = [429]
    clients = aws()
    holdings, _ = reader.collect("", ["us-east-1"], clients=clients, now=NOW)
    assert {h.id for h in holdings} >= {"ri-p5", "cr-block000000000001"}
    assert clients.backoff.retries == 4
    # the failed page alone was asked again: 4 pages + 1 retry
    assert len([c for c in fake.CALLS if c[0] == "DescribeCapacityReservations"]) == 5


def test_a_refusal_names_the_permission(aws):
    fake.FAULTS["DescribeCapacityReservations"] = [403]
    with pytest.raises(CloudError) as exc:
        reader.collect("", ["us-east-1"], clients=aws(), now=NOW)
    assert exc.value.status == 403 and not exc.value.retryable
    assert "UnauthorizedOperation" in str(exc.value)
    assert "ec2:DescribeCapacityReservations" in str(exc.value)


def test_throttled_past_the_retries_fails(aws):
    fake.FAULTS["DescribeSavingsPlans"] = [429] * 10
    with pytest.raises(CloudError) as exc:
        reader.collect("123456789012", ["us-east-1"], clients=aws(), now=NOW)
    assert exc.value.status == 429 and exc.value.retryable
    assert "still failing after 5 attempts" in str(exc.value)


def test_the_fakes_refuse_what_aws_refuses(aws):
    import botocore.exceptions

    s = moto_strict.test_session()
    ec2 = s.client("ec2", region_name="us-east-1")
    sp = s.client("savingsplans", region_name="us-east-1")
    for call, code in (
            (lambda: ec2.describe_reserved_instances(Filters=[{"Name": "status",
                                                               "Values": ["active"]}]),
             "InvalidParameterValue"),
            (lambda: ec2.describe_capacity_reservations(NextToken="bogus"), "InvalidNextToken"),
            (lambda: sp.describe_savings_plans(states=["expired"]), "ValidationException"),
            (lambda: sp.describe_savings_plan_rates(savingsPlanId="nope"),
             "ResourceNotFoundException"),
            (lambda: sp.describe_savings_plans(filters=[{"name": "owner", "values": ["x"]}]),
             "ValidationException")):
        # botocore checks no enum on the client side: each of these reaches the fake
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            call()
        assert exc.value.response["Error"]["Code"] == code


def test_mocos_html_500_is_an_unparseable_answer_not_a_crash(moto_url, sp_server, monkeypatch):
    """Without the fake, moto answers DescribeCapacityReservations with an HTML 500 page
    (NOTES.md): retried like a gateway's page, then a CloudError naming the call."""
    from moto.ec2.responses import EC2Response

    moto_strict.point_boto_at(moto_url, monkeypatch)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAVINGSPLANS", sp_server.url)
    fake.reset()
    monkeypatch.setattr(EC2Response, "describe_reserved_instances",
                        fake.describe_reserved_instances)
    monkeypatch.delattr(EC2Response, "describe_capacity_reservations", raising=False)
    clients = reader.make_clients(moto_strict.test_session(), sleep=lambda s: None)
    with pytest.raises(CloudError) as exc:
        reader.collect("", ["us-east-1"], clients=clients, now=NOW)
    assert exc.value.operation == "DescribeCapacityReservations" and exc.value.retryable
    assert "unparseable answer after 5 attempts" in str(exc.value)
    assert clients.backoff.retries == 4
