"""Quote sources against fakes as strict as the APIs, the quote files, and `catalog quotes`."""
from __future__ import annotations

import argparse
import datetime as dt
import json

import boto3
import pytest
from botocore.exceptions import ClientError

from gpulease.catalog import load_catalog
from gpulease.catalog.fetchers.clients import AwsClients, make_aws_clients
from gpulease.errors import CatalogError, CloudError, InputError
from gpulease.quotes import aws as qa
from gpulease.quotes import block_hours_for, calendar_days_for, gcp as qg, valid_block_hours
from gpulease.quotes.store import parse_document, shipped_book, write_cache
from tests.fakes import aws_quotes, moto_strict
from tests.fakes.gcp_advice import FakeAdvice, FreeCapacity, SpotAdvice
from tests.fakes.gcp_billing import sku

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


@pytest.fixture
def ec2(moto_url, monkeypatch):
    moto_strict.point_boto_at(moto_url, monkeypatch)
    aws_quotes.install(monkeypatch)
    aws_quotes.reset(NOW)
    aws_quotes.STOCK.append(aws_quotes.Stock("us-east-1", "p5.48xlarge", "us-east-1a", 39.33))
    return make_aws_clients()


# ---- limits -------------------------------------------------------------------------------------
@pytest.mark.parametrize("hours,ok", [(24, True), (336, True), (360, False), (504, True),
                                      (182 * 24, True), (189 * 24, False), (25, False), (0, False)])
def test_block_durations_as_documented(hours, ok):
    assert valid_block_hours(hours) is ok


@pytest.mark.parametrize("work,block", [(1, 24), (240.5, 264), (337, 504), (182 * 24, 182 * 24),
                                        (182 * 24 + 1, None)])
def test_shortest_block_covering_the_work(work, block):
    assert block_hours_for(work) == block


def test_calendar_days():
    assert calendar_days_for(0.5) == 1 and calendar_days_for(25) == 2
    assert calendar_days_for(90 * 24) == 90 and calendar_days_for(90 * 24 + 1) is None


# ---- AWS: DescribeCapacityBlockOfferings ------------------------------------------------------
def test_offerings_answer_like_the_api(ec2):
    got = qa.capacity_block_offerings(ec2, "us-east-1", instance_type="p5.48xlarge",
                                      instance_count=8, duration_hours=264,
                                      start=dt.datetime(2027, 1, 4, tzinfo=UTC),
                                      end=dt.datetime(2027, 1, 25, tzinfo=UTC), now=NOW)
    assert [q.start for q in got] == [dt.datetime(2027, 1, d, 11, 30, tzinfo=UTC)
                                      for d in range(4, 4 + aws_quotes.MAX_OFFERS)]
    q = got[0]
    assert q.end - q.start == dt.timedelta(hours=264) and q.live and q.zone == "us-east-1a"
    assert q.upfront_usd == pytest.approx(39.33 * 8 * 264) and q.quoted_at == NOW
    assert q.offering_id.startswith("cb-") and q.node_hour_usd == pytest.approx(39.33)


def test_offerings_empty_answers(ec2):
    # a type with no stock, and a block that cannot end before the end of the range
    assert qa.capacity_block_offerings(ec2, "us-east-1", instance_type="p4d.24xlarge",
                                       instance_count=1, duration_hours=24, now=NOW) == []
    assert qa.capacity_block_offerings(
        ec2, "us-east-1", instance_type="p5.48xlarge", instance_count=1, duration_hours=48,
        start=dt.datetime(2027, 1, 4, tzinfo=UTC), end=dt.datetime(2027, 1, 5, tzinfo=UTC),
        now=NOW) == []


def test_offerings_page_through_next_token(ec2):
    raw = boto3.client("ec2", region_name="us-east-1")
    first = raw.describe_capacity_block_offerings(InstanceType="p5.48xlarge", InstanceCount=1,
                                                  CapacityDurationHours=24, MaxResults=2)
    assert len(first["CapacityBlockOfferings"]) == 2 and first["NextToken"]
    got = qa.capacity_block_offerings(ec2, "us-east-1", instance_type="p5.48xlarge",
                                      instance_count=1, duration_hours=24, now=NOW)
    assert len(got) == aws_quotes.MAX_OFFERS == 6     # the paginator followed the token


@pytest.mark.parametrize("kw,code", [
    (dict(InstanceType="p5.48xlarge", InstanceCount=1, CapacityDurationHours=360),
     "InvalidParameterValue"),                       # 15 days: not a 7-day step
    (dict(InstanceType="p5.48xlarge", InstanceCount=65, CapacityDurationHours=24),
     "InvalidParameterValue"),
    (dict(InstanceCount=1, CapacityDurationHours=24), "MissingParameter"),
    (dict(InstanceType="p5.48xlarge", InstanceCount=1, CapacityDurationHours=24,
          StartDateRange=dt.datetime(2027, 1, 5, tzinfo=UTC),
          EndDateRange=dt.datetime(2027, 1, 4, tzinfo=UTC)), "InvalidParameterValue"),
])
def test_the_fake_refuses_what_ec2_refuses(ec2, kw, code):
    raw = boto3.client("ec2", region_name="us-east-1")
    with pytest.raises(ClientError) as exc:
        raw.describe_capacity_block_offerings(**kw)
    assert exc.value.response["Error"]["Code"] == code


def test_the_fake_refuses_a_block_size_outside_the_one_constant(ec2, monkeypatch):
    """The fake reads gpulease.quotes.CB_INSTANCE_COUNTS: under the older list (1, 2, 4, ...)
    a 3-instance block is refused as AWS would; 4 is answered (docs/catalog.md "Block sizes")."""
    from gpulease import quotes

    raw = boto3.client("ec2", region_name="us-east-1")
    assert raw.describe_capacity_block_offerings(
        InstanceType="p5.48xlarge", InstanceCount=3, CapacityDurationHours=24)[
        "CapacityBlockOfferings"]
    monkeypatch.setattr(quotes, "CB_INSTANCE_COUNTS", (1, 2, 4, 8, 16, 32, 64))
    with pytest.raises(ClientError) as exc:
        raw.describe_capacity_block_offerings(InstanceType="p5.48xlarge", InstanceCount=3,
                                              CapacityDurationHours=24)
    assert exc.value.response["Error"]["Code"] == "InvalidParameterValue"
    got = raw.describe_capacity_block_offerings(InstanceType="p5.48xlarge", InstanceCount=4,
                                                CapacityDurationHours=24)
    assert {o["InstanceCount"] for o in got["CapacityBlockOfferings"]} == {4}


@pytest.mark.parametrize("kw,flag", [
    (dict(instance_count=65, duration_hours=24), "--count"),
    (dict(instance_count=1, duration_hours=360), "--duration-hours"),
    (dict(instance_count=1, duration_hours=24, start=dt.datetime(2027, 3, 1, tzinfo=UTC)),
     "--start"),
])
def test_bad_requests_are_input_errors_before_any_call(ec2, kw, flag):
    with pytest.raises(InputError) as exc:
        qa.capacity_block_offerings(ec2, "us-east-1", instance_type="p5.48xlarge", now=NOW, **kw)
    assert exc.value.findings[0].path == flag
    assert not [c for c in aws_quotes.CALLS if c[0] == "DescribeCapacityBlockOfferings"]


def test_beyond_eight_weeks_nothing_is_offered(ec2):
    raw = boto3.client("ec2", region_name="us-east-1")
    far = raw.describe_capacity_block_offerings(
        InstanceType="p5.48xlarge", InstanceCount=1, CapacityDurationHours=24,
        StartDateRange=NOW + dt.timedelta(weeks=9))
    assert far["CapacityBlockOfferings"] == []


def test_quotes_expire_when_they_age_or_their_start_passes(ec2):
    q = qa.capacity_block_offerings(ec2, "us-east-1", instance_type="p5.48xlarge",
                                    instance_count=1, duration_hours=24, now=NOW)[-1]
    assert q.start == dt.datetime(2026, 12, 8, 11, 30, tzinfo=UTC)   # the 6th: 3 .. 8 Dec
    assert q.expired(NOW + dt.timedelta(hours=1), 24) is None
    assert "h ago" in q.expired(NOW + dt.timedelta(hours=25), 24)
    assert "has passed" in q.expired(q.start, 1000)


def test_a_non_numeric_fee_is_a_cloud_error():
    class Pages:
        def paginate(self, **kw):
            return [{"CapacityBlockOfferings": [{
                "CapacityBlockOfferingId": "cb-x", "InstanceType": "p5.48xlarge",
                "InstanceCount": 1, "StartDate": NOW + dt.timedelta(days=1),
                "EndDate": NOW + dt.timedelta(days=2), "UpfrontFee": "n/a",
                "CurrencyCode": "USD"}]}]

    class Ec2:
        def get_paginator(self, name):
            return Pages()
    clients = AwsClients(pricing=None, ec2_factory=lambda r: Ec2(), sleep=lambda s: None)
    with pytest.raises(CloudError, match="upfrontFee 'n/a' is not a number"):
        qa.capacity_block_offerings(clients, "us-east-1", instance_type="p5.48xlarge",
                                    instance_count=1, duration_hours=24, now=NOW)


# ---- AWS: GetSpotPlacementScores and the Advisor ----------------------------------------------
def test_placement_scores_per_zone(ec2):
    aws_quotes.SCORES[("us-east-1", "use1-az1")] = 8
    aws_quotes.SCORES[("us-east-1", "use1-az4")] = 3
    aws_quotes.SCORES[("us-east-1", None)] = 6
    three = ["p5.48xlarge", "p4d.24xlarge", "p4de.24xlarge"]
    got = qa.spot_placement_scores(ec2, "us-east-1", instance_types=three, target_capacity=2,
                                   now=NOW)
    assert {(r.zone, r.placement_score) for r in got} == {("use1-az1", 8), ("use1-az4", 3)}
    region = qa.spot_placement_scores(ec2, "us-east-1", instance_types=three,
                                      target_capacity=2, single_zone=False, now=NOW)
    assert {(r.zone, r.placement_score) for r in region} == {(None, 6)}
    # "If you specify one or two instance types ... the returned placement score will always
    # be low"
    one = qa.spot_placement_scores(ec2, "us-east-1", instance_types=["p5.48xlarge"],
                                   target_capacity=2, now=NOW)
    assert max(r.placement_score for r in one) == 3


def test_placement_scores_limits(ec2):
    raw = boto3.client("ec2", region_name="us-east-1")
    with pytest.raises(ClientError) as exc:
        raw.get_spot_placement_scores(TargetCapacity=1, InstanceTypes=["p5.48xlarge"],
                                      InstanceRequirementsWithMetadata={
                                          "ArchitectureTypes": ["x86_64"]})
    assert exc.value.response["Error"]["Code"] == "InvalidParameterCombination"
    with pytest.raises(InputError):
        qa.spot_placement_scores(ec2, "us-east-1", instance_types=["p5.48xlarge"],
                                 target_capacity=0)


ADVISOR = {"ranges": [{"index": 0, "label": "<5%", "dots": 0, "max": 5},
                      {"index": 1, "label": "5-10%", "dots": 1, "max": 11},
                      {"index": 4, "label": ">20%", "dots": 4, "max": 100}],
           "spot_advisor": {"us-east-1": {"Linux": {"p5.48xlarge": {"s": 52, "r": 4},
                                                    "g6.xlarge": {"s": 49, "r": 0}}}}}


def test_advisor_bands_to_interruption_rates():
    got = {r.instance_type: r for r in qa.spot_advisor_bands(
        ADVISOR, pairs={("us-east-1", "p5.48xlarge"), ("us-east-1", "g6.xlarge"),
                        ("us-west-2", "p5.48xlarge")}, as_of=NOW)}
    assert set(got) == {"p5.48xlarge", "g6.xlarge"}            # us-west-2: not listed -> none
    assert got["p5.48xlarge"].band == ">20%"
    assert got["p5.48xlarge"].interruptions_per_hour == pytest.approx(1.0 / 730)
    assert got["g6.xlarge"].interruptions_per_hour == pytest.approx(0.05 / 730)
    with pytest.raises(CloudError, match="not the Advisor's format"):
        qa.spot_advisor_bands({"spot_advisor": {}}, pairs=set(), as_of=NOW)


# ---- GCP ----------------------------------------------------------------------------------------
@pytest.fixture
def gcp_fake():
    fake = FakeAdvice(project="acme-ml", now=NOW).start()
    fake.free.append(FreeCapacity("us-central1-b", "a3-highgpu-8g", 8,
                                  dt.datetime(2026, 12, 20, tzinfo=UTC),
                                  dt.datetime(2027, 2, 1, tzinfo=UTC)))
    fake.spot.append(SpotAdvice("us-central1-a", "a3-highgpu-8g", 0.8, 5 * 3600))
    fake.skus += [
        sku("Nvidia H100 80GB GPU attached to DWS Defined Duration VMs running in Americas",
            group="GPU", usage="OnDemand", regions=["us-central1"], usd=5.0),
        sku("DWS Defined Duration A3 Instance Core running in Americas", group="CPU",
            usage="OnDemand", regions=["us-central1"], usd=0.02),
        sku("DWS Defined Duration A3 Instance Ram running in Americas", group="RAM",
            usage="OnDemand", regions=["us-central1"], usd=0.002),
        sku("Nvidia H100 80GB GPU running in Americas", group="GPU", usage="OnDemand",
            regions=["us-central1"], usd=11.0)]
    yield fake
    fake.stop()


def test_calendar_advice_found_and_not_found(gcp_fake):
    c = qg.make_clients("acme-ml", endpoint=gcp_fake.endpoint)
    got = qg.calendar_advice(c, "us-central1", machine_type="a3-highgpu-8g", count=4,
                             start_not_earlier=dt.datetime(2026, 12, 10, tzinfo=UTC),
                             start_not_later=dt.datetime(2027, 1, 10, tzinfo=UTC),
                             min_hours=7 * 24, max_hours=7 * 24, now=NOW)
    assert len(got) == 1 and got[0].zone == "us-central1-b"
    assert got[0].start == dt.datetime(2026, 12, 20, tzinfo=UTC) and got[0].hours == 168
    assert got[0].upfront_usd is None and got[0].node_hour_usd is None   # no price in advice
    none = qg.calendar_advice(c, "us-central1", machine_type="a3-highgpu-8g", count=16,
                              start_not_earlier=dt.datetime(2026, 12, 10, tzinfo=UTC),
                              start_not_later=dt.datetime(2027, 1, 10, tzinfo=UTC),
                              min_hours=7 * 24, max_hours=7 * 24, now=NOW)
    assert none == []


def test_calendar_advice_limits(gcp_fake):
    c = qg.make_clients("acme-ml", endpoint=gcp_fake.endpoint)
    with pytest.raises(InputError, match="120 days"):
        qg.calendar_advice(c, "us-central1", machine_type="a3-highgpu-8g", count=4,
                           start_not_earlier=NOW, start_not_later=NOW + dt.timedelta(days=121),
                           min_hours=24, max_hours=24, now=NOW)
    with pytest.raises(InputError, match="1-90 days"):
        qg.calendar_advice(c, "us-central1", machine_type="a3-highgpu-8g", count=4,
                           start_not_earlier=NOW, start_not_later=NOW + dt.timedelta(days=5),
                           min_hours=91 * 24, max_hours=91 * 24, now=NOW)
    assert not gcp_fake.ops("calendarMode")


def test_capacity_advice_and_retries(gcp_fake):
    c = qg.make_clients("acme-ml", endpoint=gcp_fake.endpoint)
    c.billing.sleep = lambda s: None
    gcp_fake.faults["capacity"] = [429]
    got = qg.capacity_advice(c, "us-central1", machine_type="a3-highgpu-8g", count=2, now=NOW)
    assert [(r.zone, r.obtainability, r.estimated_uptime_hours) for r in got] == [
        ("us-central1-a", 0.8, 5.0)]
    assert got[0].interruptions_per_hour == pytest.approx(0.2)
    assert len(gcp_fake.ops("capacity")) == 2                          # retried after 429
    assert qg.capacity_advice(c, "europe-west4", machine_type="a3-highgpu-8g", count=2) == []
    gcp_fake.faults["capacity"] = [403]
    with pytest.raises(CloudError, match="403"):
        qg.capacity_advice(c, "us-central1", machine_type="a3-highgpu-8g", count=2)


def test_flex_start_rates_from_the_billing_catalog(gcp_fake):
    c = qg.make_clients("acme-ml", endpoint=gcp_fake.endpoint)
    rows = [o for o in load_catalog().offerings if o.instance_type == "a3-highgpu-8g"]
    got = qg.window_rates(c.billing, rows, now=NOW)
    assert [(q.kind, q.region) for q in got] == [("flex_start", "us-central1")]
    o = next(o for o in rows if o.region == "us-central1")
    assert got[0].hourly_usd == pytest.approx(o.vcpus * 0.02 + o.memory_gb * 0.002 + 8 * 5.0)


# ---- files --------------------------------------------------------------------------------------
def test_the_shipped_file_has_sources_and_dates():
    book = shipped_book()
    assert book.quotes and book.risks
    for q in book.quotes:
        assert q.source in book.sources and not q.live and q.hourly_usd > 0
    r = book.risk("aws", "us-east-1", "p5.48xlarge")
    assert r.band == ">20%" and r.as_of == dt.datetime(2025, 6, 28, tzinfo=UTC)


@pytest.mark.parametrize("row,path,msg", [
    ({"kind": "capacity_block", "cloud": "aws", "region": "us-east-1",
      "instance_type": "p5.48xlarge", "quoted_at": "2026-12-03", "source": "s"},
     "quotes[0] (capacity_block aws us-east-1 p5.48xlarge)", "a rate needs hourly_usd"),
    ({"kind": "capacity_block", "cloud": "aws", "region": "us-east-1",
      "instance_type": "p5.48xlarge", "quoted_at": "last tuesday", "source": "s",
      "hourly_usd": 1.0}, "quotes[0]", "not an RFC 3339 time"),
    ({"kind": "capacity_block", "cloud": "aws", "region": "us-east-1",
      "instance_type": "p5.48xlarge", "quoted_at": "2026-12-03", "source": "s",
      "start": "2027-01-02T00:00:00Z", "end": "2027-01-01T00:00:00Z", "instance_count": 99,
      "upfront_usd": 5},
     "quotes[0]", "end must be after start"),
    ({"kind": "flex_start", "cloud": "gcp", "region": "us-central1",
      "instance_type": "a3-highgpu-8g", "quoted_at": "2026-12-03", "source": "s",
      "hourly_usd": float("nan")}, "quotes[0]", "finite"),
])
def test_bad_quote_rows_are_located(row, path, msg):
    with pytest.raises(CatalogError) as exc:
        parse_document({"format": "gpulease-quotes-cache/1", "quotes": [row]}, source="q.json")
    text = str(exc.value)
    assert path in text and msg in text and "q.json" in text


def test_cache_round_trip_and_replacement(tmp_path, ec2):
    path = tmp_path / "quotes.json"
    first = qa.capacity_block_offerings(ec2, "us-east-1", instance_type="p5.48xlarge",
                                        instance_count=1, duration_hours=24, now=NOW)
    write_cache(first, [], path=path)
    again = qa.capacity_block_offerings(ec2, "us-east-1", instance_type="p5.48xlarge",
                                        instance_count=2, duration_hours=48, now=NOW)
    write_cache(again, [], path=path)
    book = parse_document(json.loads(path.read_text()), source=str(path))
    assert [q.instance_count for q in book.quotes] == [2] * aws_quotes.MAX_OFFERS  # replaced
    assert book.quotes[0] == again[0]


def test_a_damaged_cache_is_a_located_error(tmp_path):
    from gpulease.quotes.store import load_book

    p = tmp_path / "quotes.json"
    p.write_bytes(b"\xff\xfe{")          # a UTF-16 byte-order mark: named as such
    with pytest.raises(CatalogError, match="UTF-16/UTF-32 text .*save the file as UTF-8"):
        load_book(path=p)
    p.write_bytes(b'{"x": "caf\xe9"}')
    with pytest.raises(CatalogError, match="not UTF-8"):
        load_book(path=p)
    p.write_text('{"format": "gpulease-quotes-cache/1", "quotes": [], "spot_risk": 5}')
    with pytest.raises(CatalogError, match="spot_risk"):
        load_book(path=p)


# ---- the command --------------------------------------------------------------------------------
def quotes_args(**kw) -> argparse.Namespace:
    base = dict(source="auto", cloud=None, region=[], instance_type=[], gpu=None, count=None,
                duration_hours=None, start=None, end=None, gcp_project=None, no_cache=False,
                format="table", json=False, out=None, catalog=None, catalog_version=None)
    base.update(kw)
    return argparse.Namespace(**base)


def test_command_offline_json(capsys, tmp_path, monkeypatch):
    from gpulease.cli.quotes import run_quotes

    monkeypatch.setenv("GPULEASE_QUOTES_CACHE", str(tmp_path / "none.json"))
    assert run_quotes(quotes_args(source="offline", gpu="H100", region=["us-east-2"],
                                  json=True), now=NOW) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["live_clouds"] == [] and doc["offline_clouds"] == ["aws", "gcp"]
    assert {(q["instance_type"], q["status"]) for q in doc["quotes"]} == {
        ("p5.48xlarge", "published rate")}
    assert doc["quotes"][0]["quoted_at"] == "2024-12-31T00:00:00Z"


def test_command_live_caches_and_shows_offerings(capsys, tmp_path, monkeypatch, ec2):
    from gpulease.cli.quotes import run_quotes

    cache = tmp_path / "quotes.json"
    monkeypatch.setenv("GPULEASE_QUOTES_CACHE", str(cache))
    aws_quotes.SCORES[("us-east-1", "use1-az1")] = 9
    code = run_quotes(quotes_args(source="live", cloud="aws", region=["us-east-1"],
                                  instance_type=["p5.48xlarge"], count=8, duration_hours=240,
                                  start="2027-01-04T00:00:00Z", json=True),
                      aws=ec2, advisor=lambda: ADVISOR, now=NOW)
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    live = [q for q in doc["quotes"] if q["status"] == "live"]
    assert len(live) == aws_quotes.MAX_OFFERS and live[0]["hours"] == 264 and live[0]["start"] == \
        "2027-01-04T11:30:00Z"
    assert cache.is_file() and doc["cache"] == [str(cache)]
    assert any(r["placement_score"] == 3 for r in doc["spot_risk"])   # one type: "always low"


def test_command_bad_arguments_exit_2(capsys, tmp_path, monkeypatch, ec2):
    from gpulease.cli.quotes import run_quotes

    monkeypatch.setenv("GPULEASE_QUOTES_CACHE", str(tmp_path / "q.json"))
    with pytest.raises(InputError) as exc:
        run_quotes(quotes_args(source="live", cloud="aws", gpu="H10"), aws=ec2, now=NOW)
    assert 'did you mean "H100"' in str(exc.value)
    with pytest.raises(InputError):
        run_quotes(quotes_args(source="live", cloud="aws", region=["us-east-1"],
                               instance_type=["p5.48xlarge"], count=65, duration_hours=24),
                   aws=ec2, advisor=lambda: ADVISOR, now=NOW)


def test_command_every_call_failing_exits_1(capsys, tmp_path, monkeypatch):
    from gpulease.cli.quotes import run_quotes

    monkeypatch.setenv("GPULEASE_QUOTES_CACHE", str(tmp_path / "q.json"))

    class Broken:
        def get_paginator(self, name):
            raise CloudError("aws", name, "AccessDenied")
    clients = AwsClients(pricing=None, ec2_factory=lambda r: Broken(), sleep=lambda s: None)

    def no_advisor():
        raise CloudError("aws", "spot-advisor-data.json", "unreachable")
    code = run_quotes(quotes_args(source="live", cloud="aws", region=["us-east-1"],
                                  instance_type=["p5.48xlarge"], count=1, duration_hours=24),
                      aws=clients, advisor=no_advisor, now=NOW)
    assert code == 1
    err = capsys.readouterr().err
    assert "AccessDenied" in err and "every live call failed" in err


def test_the_shipped_books_cached_fingerprint_is_the_one_of_its_records():
    """shipped_book hands out the fingerprint computed once per data file (the policy's caches
    are keyed on it); it must be what the records give, and change when records are added."""
    from gpulease.quotes.model import SpotRisk

    book = shipped_book()
    cached = book.fingerprint()
    book._fingerprint = None
    assert book.fingerprint() == cached
    r = book.risks[0]
    book.add(risks=[SpotRisk(**{**r.__dict__, "band_max_percent": 99.0, "band": ">20%",
                                "zone": "elsewhere-1z"})])
    assert book.fingerprint() != cached
    assert shipped_book().fingerprint() == cached   # the shipped data itself is untouched


def test_a_data_file_added_to_the_quote_directory_is_seen(tmp_path, monkeypatch):
    import os

    from gpulease.quotes import store

    src = store.data_path()
    monkeypatch.setattr(store, "DATA_DIR", tmp_path)
    (tmp_path / "2026.01.01.json").write_bytes(src.read_bytes())
    assert store.available_versions() == ["2026.01.01"]
    (tmp_path / "2026.02.01.json").write_bytes(src.read_bytes())
    os.utime(tmp_path, ns=(1, tmp_path.stat().st_mtime_ns + 10**9))  # a coarse clock
    assert store.available_versions() == ["2026.01.01", "2026.02.01"]
    assert store.data_path() == tmp_path / "2026.02.01.json"


def test_the_cache_path_follows_the_environment_it_is_read_from(monkeypatch, tmp_path):
    """cache_path is memoised on the variables it reads: a change of any of them is seen."""
    from gpulease.quotes.store import cache_path

    monkeypatch.setenv("GPULEASE_QUOTES_CACHE", str(tmp_path / "a.json"))
    assert cache_path() == tmp_path / "a.json"
    monkeypatch.delenv("GPULEASE_QUOTES_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_path() == tmp_path / "xdg" / "gpulease" / "quotes.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_path() == tmp_path / "home" / ".cache" / "gpulease" / "quotes.json"
