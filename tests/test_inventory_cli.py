"""`gpulease inventory` end to end: both clouds of the staging stack against moto + the strict
AWS fakes and the Compute fake; the file it writes is what plans read; missing credentials stop
it before any call; a refused call writes nothing."""
from __future__ import annotations

import json

import boto3
import pytest

from gpulease.cli import main
from gpulease.inventory import model
from tests.fakes import aws_inventory as fake
from tests.fakes import moto_strict
from tests.fakes.gcp_compute_inventory import FakeGcpInventory
from tests.test_inventory_aws import NOW as _NOW
from tests.test_inventory_aws import _account
from tests.test_inventory_gcp import _project

STAGING_PROJECT = "acme-ml-staging"     # stacks/Pulumi.staging.yaml: aws us-east-1, us-west-2


@pytest.fixture(scope="module")
def sp_server():
    server = fake.SavingsPlansServer()
    yield server
    server.stop()


@pytest.fixture
def clouds(moto_url, sp_server, monkeypatch, tmp_path):
    """Both clouds of the staging stack behind fakes; the cache in tmp_path."""
    moto_strict.point_boto_at(moto_url, monkeypatch)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAVINGSPLANS", sp_server.url)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    fake.reset()
    fake.install(monkeypatch)
    gcp = FakeGcpInventory(project=STAGING_PROJECT)
    monkeypatch.setenv("GPULEASE_GCP_ENDPOINT", gcp.start())
    monkeypatch.setenv(model.CACHE_ENV, str(tmp_path / "cache" / "inventory.json"))
    yield gcp
    gcp.stop()
    fake.reset()


@pytest.mark.parametrize("flag", [["--json"], ["--format", "json"]])
def test_both_clouds_written_to_the_cache_and_summarised(clouds, tmp_path, capsys, flag):
    _account()
    _project(clouds)
    assert main(["inventory", "--stack", "staging", *flag]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    cache = tmp_path / "cache" / "inventory.json"
    assert doc["file"] == str(cache) and cache.is_file()
    inv = model.load(cache)
    assert [s.cloud for s in inv.sources] == ["aws", "gcp"]
    assert inv.sources[0].scope == "123456789012" and inv.sources[1].scope == STAGING_PROJECT
    assert inv.sources[0].regions == ["us-east-1", "us-west-2"]
    ids = {h.id for h in inv.holdings}
    assert {"ri-p5", "ri-west", "cr-block000000000001", "cud-a3", "res-a3", "fr-cal"} <= ids
    assert doc["count"] == len(inv.holdings) == len(doc["holdings"])
    row = next(r for r in doc["holdings"] if r["id"] == "res-a3")
    assert (row["utilisation"], row["instances"], row["type"]) == (0.5, 2, "a3-highgpu-8g")
    compute = next(h for h in inv.holdings if h.id.startswith("1111"))
    # rates asked for the catalog's AWS GPU types: p5 and p4d are in it, m5.large is not
    assert "us-east-1/p5.48xlarge" in compute.rates
    assert not any(k.endswith("m5.large") for k in compute.rates)
    assert "wrote " in err and "as the default cache" in err


def test_table_and_out_file(clouds, tmp_path, capsys):
    _account()
    target = tmp_path / "inv" / "staging.json"
    assert main(["inventory", "--stack", "staging", "--out", str(target)]) == 0
    out, err = capsys.readouterr()
    # progress names each step on stderr
    assert "AWS us-west-2: Reserved Instances" in err and "GCP acme-ml-staging" in err
    assert f"set gpulease:inventory: {target} in stacks/Pulumi.staging.yaml" in err
    assert target.is_file() and not (tmp_path / "cache" / "inventory.json").exists()
    assert "ec2-capacity-block" in out and "cr-block000000000001" in out
    assert "100%" in out                 # the block: 8 of 8 in use
    assert f"written: {target}" in out


def test_empty_accounts_write_an_empty_inventory(clouds, capsys):
    assert main(["inventory", "--stack", "staging"]) == 0
    out = capsys.readouterr().out
    assert "nothing held" in out
    assert model.load(model.cache_path()).holdings == []


def test_a_refused_call_writes_nothing(clouds, tmp_path, capsys):
    _account()
    fake.FAULTS["DescribeReservedInstances"] = [403]
    target = tmp_path / "inv.json"
    target.write_text("{}")   # an older file stays as it was
    assert main(["inventory", "--stack", "staging", "--out", str(target)]) == 1
    err = capsys.readouterr().err
    assert "ec2:DescribeReservedInstances" in err and "UnauthorizedOperation" in err
    assert "nothing written" in err and target.read_text() == "{}"


def test_missing_credentials_exit_2_before_any_call(no_aws, no_gcp, tmp_path, capsys):  # noqa: F811
    fake.reset()
    target = tmp_path / "inv.json"
    code = main(["inventory", "--stack", "staging", "--out", str(target)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "gpulease inventory: no AWS credentials found" in err
    assert "gpulease inventory: no Google Cloud credentials found" in err
    assert "AWS_PROFILE" in err and "gcloud auth application-default login" in err
    assert "Traceback" not in err and not target.exists() and fake.CALLS == []


def test_missing_aws_credentials_reach_no_fake(clouds, monkeypatch, tmp_path, capsys):
    """The fakes run and answer; the AWS chain finds nothing: exit 2 and not one request to
    AWS's fakes or to Compute's (the check comes before every cloud's first call)."""
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    _account()
    assert main(["inventory", "--stack", "staging"]) == 2
    err = capsys.readouterr().err
    assert "gpulease inventory: no AWS credentials found (inventory reads Reserved Instances" \
        in err
    assert "Google Cloud" not in err          # the emulator needs none
    assert fake.CALLS == [] and clouds.log == []
    assert not model.cache_path().exists()


def test_out_must_be_a_file(clouds, tmp_path, capsys):
    assert main(["inventory", "--stack", "staging", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "is a directory" in err
    assert fake.CALLS == []


def test_now_is_recorded(clouds, capsys):
    """The file's date is the read's time (what the plan header shows)."""
    assert main(["inventory", "--stack", "staging"]) == 0
    inv = model.load(model.cache_path())
    assert inv.generated_at == inv.sources[0].read_at and inv.generated > _NOW
