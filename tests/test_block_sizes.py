"""Issue 34: Capacity Blocks in the sizes AWS sells (gpulease.quotes.CB_INSTANCE_COUNTS, one
constant): the sources behind it, rounding up or splitting a window's nodes, priced, and the
offline lookup, the quote checks and the stack pin refusing a size AWS would refuse."""
from __future__ import annotations

import datetime as dt
import gzip
import json
import pathlib

import pytest

from gpulease import quotes
from gpulease.catalog import load_catalog
from gpulease.config import parse_stack_config
from gpulease.errors import InputError
from gpulease.policy import decide
from gpulease.quotes.store import shipped_book

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
WINDOW = {"earliest_start": "2027-01-04T00:00:00Z", "deadline": "2027-01-25T00:00:00Z",
          "duration_hours": 240}
#: the list an older User Guide copy gives ("1, 2, 4, 8, 16, 32, or 64 instances").
POWERS_OF_TWO = (1, 2, 4, 8, 16, 32, 64)
P5_RATE = 39.33          # the shipped published p5.48xlarge rate (us-east-1), USD/instance-hour
BLOCK_HOURS = 264        # the shortest block covering 240 h + the 30-min stop, from 11:30 UTC


def test_the_constant_matches_the_ec2_api_model_botocore_ships():
    import botocore

    model = pathlib.Path(botocore.__file__).parent / "data/ec2/2016-11-15/service-2.json.gz"
    shapes = json.loads(gzip.decompress(model.read_bytes()))["shapes"]
    doc = shapes["DescribeCapacityBlockOfferingsRequest"]["members"]["InstanceCount"][
        "documentation"]
    assert f"up to {quotes.CB_MAX_INSTANCES} instances" in doc
    assert f"up to {quotes.CB_MAX_INSTANCES_ACROSS_BLOCKS} instances across" in doc
    # the newest official source names no list of sizes: every count up to the maximum
    assert "1, 2, 4" not in doc and quotes.CB_INSTANCE_COUNTS == tuple(range(1, 65))


@pytest.mark.parametrize("nodes,sizes,want", [
    (3, None, (3, (3,))),                       # any count 1-64 is a size AWS sells
    (64, None, (64, (64,))),
    (100, None, (None, (64, 36))),              # above 64: split only
    (256, None, (None, (64, 64, 64, 64))),
    (257, None, (None, None)),                  # above 256 across blocks: neither
    (3, POWERS_OF_TWO, (4, (2, 1))),            # the older list: round up 3 -> 4 or 2 + 1
    (5, POWERS_OF_TWO, (8, (4, 1))),
    (7, POWERS_OF_TWO, (8, (4, 2, 1))),
    (96, POWERS_OF_TWO, (None, (64, 32))),
    (0, None, (None, None)),
])
def test_block_counts_round_up_and_split(nodes, sizes, want):
    assert quotes.block_counts(nodes, sizes) == want


def _values(gpus: int, **policy) -> dict:
    return {"gpulease:owner": "ml", "gpulease:cost_center": "cc",
            "gpulease:budget_monthly_usd": 1e9,
            "gpulease:clouds": {"aws": {"regions": ["us-east-1"]}},
            "gpulease:clusters": [{"name": "pretrain", "gpu": "H100", "gpus": gpus,
                                   "priority": 9, "window": dict(WINDOW)}]}


def _block_option(gpus: int):
    cat = load_catalog()
    spec = parse_stack_config(_values(gpus), stack="t", source="stacks/Pulumi.t.yaml",
                              catalog=cat)
    d = decide(spec, cat, quotes=shipped_book(), now=NOW).clusters[0]
    return d, {o["model"]: o for o in d.window.options}["capacity_block"]


def test_a_three_node_window_is_one_three_instance_block_as_aws_sells_it():
    d, cb = _block_option(24)        # 3 x p5.48xlarge
    assert d.offering.instance_type == "p5.48xlarge"
    assert cb["feasible"] and cb["nodes"] == 3 and cb["blocks"] == [3]
    assert cb["total_usd"] == pytest.approx(P5_RATE * 3 * BLOCK_HOURS)


def test_under_the_older_list_three_nodes_round_up_to_four_and_the_split_is_priced(monkeypatch):
    monkeypatch.setattr(quotes, "CB_INSTANCE_COUNTS", POWERS_OF_TWO)
    d, cb = _block_option(24)
    assert cb["feasible"] and cb["nodes"] == 3 and cb["blocks"] == [4]
    assert cb["total_usd"] == pytest.approx(P5_RATE * 4 * BLOCK_HOURS)
    assert cb["billed_node_hours"] == pytest.approx(4 * BLOCK_HOURS)
    split = [p["why"] for p in cb["passed_over"] if p["why"].startswith("split")]
    assert split == [f"split into 2 blocks of 2 + 1 instances for {BLOCK_HOURS} h: "
                     f"${P5_RATE * 3 * BLOCK_HOURS:,.2f} (estimated) - gpulease buys one block "
                     "a cluster; not planned"]


def test_a_rounded_up_block_is_named_in_the_rationale(monkeypatch):
    monkeypatch.setattr(quotes, "CB_INSTANCE_COUNTS", POWERS_OF_TWO)
    cat = load_catalog()
    v = _values(24)
    # guaranteed capacity with no reservation at the on-demand rate: the block must win
    v["gpulease:policy"] = {"reserve_at_on_demand_rate": False, "commitment_term": "none"}
    spec = parse_stack_config(v, stack="t", source="stacks/Pulumi.t.yaml", catalog=cat)
    d = decide(spec, cat, quotes=shipped_book(), now=NOW).clusters[0]
    assert d.window.model == "capacity_block" and d.window.blocks == (4,)
    assert "one block of 4 instances for 3 nodes" in d.rationale
    assert "1, 2, 4, 8, 16, 32, 64" in d.rationale


def test_more_nodes_than_one_block_holds_are_priced_as_a_split_not_planned():
    d, cb = _block_option(8 * 65)     # 65 nodes
    assert not cb["feasible"]
    assert any(p["why"].startswith("split into 2 blocks of 64 + 1 instances")
               for p in cb["passed_over"])


def test_the_offline_lookup_refuses_a_size_aws_does_not_sell(monkeypatch):
    from gpulease.planner import mocks

    data = mocks.load_lookups()
    ask = {"instanceType": "p5.48xlarge", "instanceCount": 4, "capacityDurationHours": 264}
    now = NOW.timestamp()
    assert mocks.capacity_block_quote(ask, "us-east-1", data, now)["instanceCount"] == 4
    monkeypatch.setattr(quotes, "CB_INSTANCE_COUNTS", POWERS_OF_TWO)
    with pytest.raises(mocks._NoMatch, match="instanceCount 3 is not a Capacity Block size"):
        mocks.capacity_block_quote(dict(ask, instanceCount=3), "us-east-1", data, now)
    with pytest.raises(mocks._NoMatch, match="instanceCount 65"):
        mocks.capacity_block_quote(dict(ask, instanceCount=65), "us-east-1", data, now)


def test_quote_checks_and_the_pin_refuse_a_size_aws_does_not_sell(monkeypatch):
    from gpulease.quotes.aws import check_block_request

    check_block_request(instance_count=3, duration_hours=24, start=None, end=None, now=NOW)
    monkeypatch.setattr(quotes, "CB_INSTANCE_COUNTS", POWERS_OF_TWO)
    with pytest.raises(InputError, match="--count"):
        check_block_request(instance_count=3, duration_hours=24, start=None, end=None, now=NOW)
    from gpulease.config.schema import CapacityBlockConfig
    pin = {"offering_id": "cb-0123456789abcdef0", "region": "us-east-1",
           "availability_zone": "us-east-1a", "instance_type": "p5.48xlarge",
           "instance_count": 3, "start": "2027-01-04T11:30:00Z",
           "end": "2027-01-15T11:30:00Z", "upfront_fee_usd": 1.0}
    with pytest.raises(ValueError, match="3 is not a Capacity Block size AWS sells"):
        CapacityBlockConfig(**pin)
    assert CapacityBlockConfig(**dict(pin, instance_count=4)).instance_count == 4


def test_explain_shows_the_rounded_up_block_and_the_split(monkeypatch, tmp_path):
    import contextlib
    import io

    import yaml

    from gpulease.cli import main
    monkeypatch.setattr(quotes, "CB_INSTANCE_COUNTS", POWERS_OF_TWO)
    f = tmp_path / "Pulumi.t.yaml"
    f.write_text(yaml.safe_dump({"config": _values(24)}))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["explain", "--config", str(f), "--now", "2026-12-03T09:00:00Z"])
    text = " ".join(out.getvalue().split())
    assert code == 0, text
    assert "one block of 4 instances for 3 nodes (rounded up to a size AWS sells)" in text
    assert "Capacity Block sizes: split into 2 blocks of 2 + 1 instances" in text


def test_a_cached_offering_of_a_size_aws_does_not_sell_is_refused(monkeypatch):
    from gpulease.quotes.store import QuoteRow
    row = {"kind": "capacity_block", "cloud": "aws", "region": "us-east-1",
           "instance_type": "p5.48xlarge", "quoted_at": "2026-12-03T08:00:00Z",
           "source": "aws:DescribeCapacityBlockOfferings", "start": "2027-01-04T11:30:00Z",
           "end": "2027-01-05T11:30:00Z", "instance_count": 3, "upfront_usd": 2831.76,
           "offering_id": "cb-0123456789abcdef0", "zone": "us-east-1a", "live": True}
    assert QuoteRow(**row).instance_count == 3
    with pytest.raises(ValueError, match="a Capacity Block has 1 to 64 instances"):
        QuoteRow(**dict(row, instance_count=65))
    monkeypatch.setattr(quotes, "CB_INSTANCE_COUNTS", POWERS_OF_TWO)
    with pytest.raises(ValueError, match="the sizes AWS sells"):
        QuoteRow(**row)


def test_the_tagged_budget_fallback_counts_one_time_tags_whole():
    from gpulease.guardrails.rules import GuardedResource, RuleContext, check_budget_cap
    block = GuardedResource(urn="u1", type="aws:ec2/capacityBlockReservation:CapacityBlockReservation",
                            name="b", props={"tags": {"gpulease-monthly-usd": "0.00",
                                                      "gpulease-one-time-usd": "30000.00"}})
    fr = GuardedResource(urn="u2", type="gcp:compute/instanceTemplate:InstanceTemplate",
                         name="t", props={"labels": {"gpulease-monthly-cents": "1000",
                                                     "gpulease-one-time-cents": "500000"}})
    (msg,) = [m for _, m in check_budget_cap([block, fr], RuleContext(budget_monthly_usd=35000))]
    assert "$35,010.00 exceeds the budget $35,000.00" in msg
    assert check_budget_cap([block, fr], RuleContext(budget_monthly_usd=35010)) == []
