"""`--destroy`: refused without the Pulumi CLI; storage survives a stack destroy by construction."""
from __future__ import annotations

import pytest

from infra.errors import CloudError, ConfigError
from infra.reaper import destroy

BUCKET_TYPES = ("aws:s3/bucketV2:BucketV2", "aws:s3/bucket:Bucket", "gcp:storage/bucket:Bucket")


def test_require_cli_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("PULUMI_HOME", str(tmp_path))
    with pytest.raises(ConfigError) as info:
        destroy.require_cli(tmp_path)
    text = str(info.value)
    assert "needs the Pulumi CLI" in text and "https://www.pulumi.com/docs/install/" in text
    assert f"{tmp_path} has no Pulumi.yaml" in text and info.value.exit_code == 2


def test_cli_found_in_pulumi_home(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    fake = tmp_path / "bin" / "pulumi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PULUMI_HOME", str(tmp_path))
    assert destroy.pulumi_cli() == str(fake)
    destroy.require_cli(destroy.PROJECT_DIR)   # Pulumi.yaml is there: no error


def test_destroy_without_cli_is_a_cloud_error_not_a_traceback(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CloudError, match="Pulumi CLI not found"):
        destroy.destroyer(destroy.PROJECT_DIR)("dev")


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_storage_is_retained_on_destroy_by_construction(stack):
    from tests.conftest import program_run

    run = program_run(stack)
    buckets = [r for r in run.resources if r.type in BUCKET_TYPES]
    assert buckets, f"{stack}: no bucket declared"
    for b in buckets:
        assert b.retain_on_delete, f"{b.urn} would be deleted by `pulumi destroy`"
