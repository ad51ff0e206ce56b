"""AWS catalog refresh: Pricing API through botocore Stubber (real GetProducts shapes, pagination,
throttling), EC2 instance types / offerings / spot history through moto's server."""
from __future__ import annotations

import datetime as dt
import json

import boto3
import pytest

from gpulease import retry
from botocore.stub import ANY, Stubber

from gpulease.catalog import load_catalog, parse_catalog
from gpulease.catalog.fetchers.aws import (PRICING_SOURCE, SPEC_SOURCE, fetch_aws,
                                           parse_price_list_item, summarize_spot)
from gpulease.catalog.fetchers.clients import AwsClients
from gpulease.catalog.refresh import refresh

NOW = dt.datetime(2026, 12, 9, 10, 0, tzinfo=dt.timezone.utc)


def price_item(itype: str, region: str, od: str, *, r1: str | None = None,
               r3: str | None = None) -> str:
    """A GetProducts PriceList entry (a JSON string) shaped like the API reference example."""
    sku = f"SKU{abs(hash((itype, region))) % 10**8:08d}"
    reserved = {}
    for length, price in (("1yr", r1), ("3yr", r3)):
        if price is None:
            continue
        for cls, opt, hrs, upfront in (("standard", "No Upfront", price, None),
                                       ("standard", "All Upfront", "0.0000000000", "99999"),
                                       ("convertible", "No Upfront", str(float(price) * 1.3),
                                        None)):
            code = f"{sku}.{length}{cls[:2]}{opt[:2]}"
            dims = {f"{code}.6YS6EN2CT7": {
                "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "appliesTo": [],
                "rateCode": f"{code}.6YS6EN2CT7",
                "description": f"Linux/UNIX (Amazon VPC), {itype} reserved instance applied",
                "pricePerUnit": {"USD": hrs}}}
            if upfront:
                dims[f"{code}.2TG2D8R56U"] = {"unit": "Quantity", "description": "Upfront Fee",
                                               "rateCode": f"{code}.2TG2D8R56U", "appliesTo": [],
                                               "pricePerUnit": {"USD": upfront}}
            reserved[code] = {"priceDimensions": dims, "sku": sku, "offerTermCode": code,
                              "effectiveDate": "2026-11-01T00:00:00Z",
                              "termAttributes": {"LeaseContractLength": length,
                                                 "OfferingClass": cls, "PurchaseOption": opt}}
    doc = {
        "product": {"productFamily": "Compute Instance", "sku": sku, "attributes": {
            "instanceType": itype, "regionCode": region, "location": "US East (N. Virginia)",
            "operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA",
            "capacitystatus": "Used", "licenseModel": "No License required",
            "instanceFamily": "GPU instance", "usagetype": f"BoxUsage:{itype}",
            "operation": "RunInstances", "servicecode": "AmazonEC2"}},
        "serviceCode": "AmazonEC2",
        "terms": {"OnDemand": {f"{sku}.JRTCKXETXF": {
            "priceDimensions": {f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "appliesTo": [],
                "rateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7",
                "description": f"${od} per On Demand Linux {itype} Instance Hour",
                "pricePerUnit": {"USD": od}}},
            "sku": sku, "effectiveDate": "2026-11-01T00:00:00Z", "offerTermCode": "JRTCKXETXF",
            "termAttributes": {}}}},
        "version": "20261201000000", "publicationDate": "2026-12-01T00:00:00Z",
    }
    if reserved:
        doc["terms"]["Reserved"] = reserved
    return json.dumps(doc)


def base_catalog():
    def row(region, itype, gpu, n, od, spot, vcpus, mem):
        return {"cloud": "aws", "region": region, "instance_type": itype, "gpu": gpu,
                "gpus_per_node": n, "gpu_memory_gb": 80, "vcpus": vcpus, "memory_gb": mem,
                "network_gbps": 3200, "rdma": "efa", "on_demand_usd": od, "spot_usd": spot,
                "commit_1y_usd": None, "commit_3y_usd": None, "source": "hand-cited",
                "as_of": "2026-12-02"}
    return parse_catalog({"format": "gpulease-catalog/1", "version": "2026.12.02",
                          "as_of": "2026-12-02", "storage": [], "egress": [], "offerings": [
                              row("us-east-1", "p5.48xlarge", "H100", 8, 55.04, 30.0, 192, 2048),
                              row("us-east-1", "g6.xlarge", "L4", 1, 0.8048, 0.35, 4, 16),
                              row("us-west-2", "p5.48xlarge", "H100", 8, 55.04, 28.0, 192, 2048),
                          ]}, source="fixture")


def test_parse_price_list_item_picks_standard_no_upfront():
    p = parse_price_list_item(price_item("p5.48xlarge", "us-east-1", "55.0400000000",
                                         r1="36.4900000000", r3="24.1600000000"))
    assert p == {"instance_type": "p5.48xlarge", "region": "us-east-1", "on_demand_usd": 55.04,
                 "commit_1y_usd": 36.49, "commit_3y_usd": 24.16}
    assert parse_price_list_item(price_item("g6.xlarge", "us-east-1", "0.8048"))[
        "commit_1y_usd"] is None


def test_summarize_spot_median_of_latest_per_az():
    t = lambda h: dt.datetime(2026, 12, 9, h, tzinfo=dt.timezone.utc)  # noqa: E731
    hist = [
        {"AvailabilityZone": "us-east-1a", "InstanceType": "p5.48xlarge",
         "ProductDescription": "Linux/UNIX", "SpotPrice": "40.0", "Timestamp": t(4)},
        {"AvailabilityZone": "us-east-1a", "InstanceType": "p5.48xlarge",
         "ProductDescription": "Linux/UNIX", "SpotPrice": "20.0", "Timestamp": t(9)},
        {"AvailabilityZone": "us-east-1b", "InstanceType": "p5.48xlarge",
         "ProductDescription": "Linux/UNIX", "SpotPrice": "30.0", "Timestamp": t(8)},
        {"AvailabilityZone": "us-east-1c", "InstanceType": "p5.48xlarge",
         "ProductDescription": "Linux/UNIX", "SpotPrice": "25.0", "Timestamp": t(7)},
    ]
    s = summarize_spot(hist)["p5.48xlarge"]
    assert s["zones"] == {"us-east-1a": 20.0, "us-east-1b": 30.0, "us-east-1c": 25.0}
    assert s["usd"] == 25.0


@pytest.fixture(scope="module")
def moto_endpoint():
    from tests.fakes import moto_strict

    server, url = moto_strict.start_server()
    yield url
    server.stop()


def _clients(moto_endpoint, pricing_pages, *, sleeps=None, fail_region=None, filters=ANY):
    session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing")
    pricing = session.client("pricing", region_name="us-east-1")
    stub = Stubber(pricing)
    for page in pricing_pages:
        if isinstance(page, tuple):       # (error code, message)
            stub.add_client_error("get_products", service_error_code=page[0],
                                  service_message=page[1], http_status_code=400)
        else:
            tok = page.pop("_tok", None)       # the NextToken this call must send
            stub.add_response("get_products", page, {"ServiceCode": "AmazonEC2",
                                                    "Filters": filters,
                                                    "FormatVersion": "aws_v1",
                                                    "MaxResults": 100,
                                                    **({"NextToken": tok} if tok else {})})
    stub.activate()

    def ec2(region):
        if region == fail_region:
            return session.client("ec2", region_name=region, endpoint_url="http://127.0.0.1:9")
        return session.client("ec2", region_name=region, endpoint_url=moto_endpoint)
    c = AwsClients(pricing=pricing, ec2_factory=ec2, sleep=(sleeps.append if sleeps is not None
                                                            else (lambda _s: None)))
    return c, stub


def _page(items, token=None, prev_token=None):
    p = {"FormatVersion": "aws_v1", "PriceList": items}
    if token:
        p["NextToken"] = token
    if prev_token:
        p["_tok"] = prev_token
    return p


def test_pricing_pagination_and_throttling_then_moto_specs(moto_endpoint):
    sleeps = []
    pages = [("ThrottlingException", "Rate exceeded"),
             _page([price_item("p5.48xlarge", "us-east-1", "55.0400000000", r1="36.49",
                               r3="24.16")], token="tok-2"),
             _page([price_item("g6.xlarge", "us-east-1", "0.8048000000")], prev_token="tok-2")]
    filters = [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-east-1"},
               {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
               {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
               {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
               {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
               {"Type": "ANY_OF", "Field": "instanceType", "Value": "g6.xlarge,p5.48xlarge"}]
    c, stub = _clients(moto_endpoint, pages, sleeps=sleeps, filters=filters)
    lines = []
    got = fetch_aws(c, targets={"us-east-1": ["p5.48xlarge", "g6.xlarge"]},
                    reference_on_demand={}, now=NOW, progress=lines.append)
    stub.assert_no_pending_responses()
    # one backoff (gpulease.retry's full jitter for a first retry), then success
    assert len(sleeps) == 1 and 0 <= sleeps[0] <= retry.BASE_S
    p5 = got.get("us-east-1", "p5.48xlarge")
    assert p5.prices["on_demand_usd"] == 55.04 and p5.prices["commit_3y_usd"] == 24.16
    # specs and zones from moto's EC2 (DescribeInstanceTypes / ...TypeOfferings)
    assert p5.specs["efa_interfaces"] == 32 and p5.specs["network_cards"] == 32
    assert p5.specs["gpu_model"] == "H100" and p5.specs["gpus_per_node"] == 8
    assert p5.zones and all(z.startswith("use1-az") for z in p5.zones)   # zone IDs, not names
    # moto's placeholder spot price (0.00001) is far below 5 % of on-demand: rejected
    assert "spot_usd" not in p5.prices and "rejected" in p5.notes[0]
    assert any("implausible" in line for line in lines)
    assert got.get("us-east-1", "g6.xlarge").specs["rdma"] == "none"


def test_refresh_partial_failure_keeps_rows_and_round_trips(moto_endpoint, tmp_path):
    pages = [_page([price_item("p5.48xlarge", "us-east-1", "52.0000000000", r1="36.49")]),
             ("InternalErrorException", "pricing down")]     # us-west-2's call fails
    c, stub = _clients(moto_endpoint, pages, fail_region="us-west-2")
    res = refresh(base_catalog(), scope={"aws": ["us-east-1", "us-west-2"]}, aws=c,
                  version="2026.12.09", now=NOW)
    rep = res.report
    assert ("aws", "us-east-1", "p5.48xlarge") in rep.refreshed
    assert set(rep.kept) == {("aws", "us-east-1", "g6.xlarge"), ("aws", "us-west-2", "p5.48xlarge")}
    assert {f.api for f in rep.failures if f.region == "us-west-2"} >= {
        "pricing.get_products", "ec2.describe_instance_types"}
    path = tmp_path / "2026.12.09.json"
    path.write_text(json.dumps(res.doc))
    cat = load_catalog(str(path))                  # the loader the planner uses
    p5 = cat.offering("aws", "us-east-1", "p5.48xlarge")
    assert (p5.on_demand_usd, p5.commit_1y_usd, p5.spot_usd) == (52.0, 36.49, 30.0)
    row = next(r for r in res.doc["offerings"] if r["region"] == "us-east-1"
               and r["instance_type"] == "p5.48xlarge")
    assert row["price_sources"] == {"on_demand_usd": PRICING_SOURCE, "spot_usd": "kept:2026.12.02",
                                    "commit_1y_usd": PRICING_SOURCE, "commit_3y_usd": None}
    assert SPEC_SOURCE in row["source"] and "hand-cited" in row["source"]
    west = next(r for r in res.doc["offerings"] if r["region"] == "us-west-2")
    assert west["on_demand_usd"] == 55.04 and "pricing.get_products failed" in west["notes"]
    assert cat.offering("aws", "us-west-2", "p5.48xlarge").as_of == "2026-12-02"


def test_new_region_adds_rows(moto_endpoint):
    pages = [_page([price_item("g6.xlarge", "eu-central-1", "0.9100000000")])]
    c, _ = _clients(moto_endpoint, pages)
    res = refresh(base_catalog(), scope={"aws": ["eu-central-1"]}, aws=c, version="v", now=NOW)
    assert ("aws", "eu-central-1", "g6.xlarge") in res.report.added
    new = res.catalog.offering("aws", "eu-central-1", "g6.xlarge")
    assert new.on_demand_usd == 0.91 and new.spot_usd is None and new.gpu == "L4"


def test_no_credentials_is_a_clear_failure(moto_endpoint, monkeypatch, tmp_path):
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "nope"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "nope"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    from gpulease.catalog.fetchers.clients import make_aws_clients

    c = make_aws_clients()
    c.sleep = lambda _s: None
    res = refresh(base_catalog(), scope={"aws": ["us-east-1"]}, aws=c, version="v", now=NOW)
    assert res.doc is None
    msgs = [str(f) for f in res.report.failures]
    assert msgs and all("no AWS credentials found" in m for m in msgs)


def test_refreshing_the_format_2_snapshot_keeps_it_format_2(moto_endpoint):
    base = load_catalog()
    assert base.format == "gpulease-catalog/2"
    pages = [_page([price_item("p5.48xlarge", "us-east-1", "50.0000000000", r1="36.49")])]
    c, _ = _clients(moto_endpoint, pages, filters=ANY)
    res = refresh(base, scope={"aws": ["us-east-1"]}, aws=c, version="2099.01.01", now=NOW)
    cat = res.catalog
    assert cat.format == "gpulease-catalog/2"                  # validated by the /2 schema
    p5 = cat.offering("aws", "us-east-1", "p5.48xlarge")
    assert p5.on_demand_usd == 50.0 and all(z.startswith("use1-az") for z in p5.zones)
    # moto's placeholder spot is rejected: the old spot is kept, without stale zone prices
    old = base.offering("aws", "us-east-1", "p5.48xlarge")
    assert p5.spot_usd == old.spot_usd and not p5.zone_spot_usd
