"""`--destroy`: refused without the Pulumi CLI; storage survives a stack destroy by construction."""
from __future__ import annotations

import json

import pytest

from gpulease.errors import CloudError, ConfigError
from gpulease.reaper import destroy

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


# ---- issue 14: destroy must succeed for prod, whose storage is protected ----------------------
def prod_resources() -> list[dict]:
    """The prod stack's resources as Pulumi would hold them (URNs and protect flags from THE
    program run under mocks)."""
    from tests.conftest import program_run

    run = program_run("prod")
    return [{"urn": r.urn, "protect": bool(r.protect)} for r in run.resources]


def test_destroy_leaves_protected_storage_and_succeeds(monkeypatch, tmp_path):
    from tests.fakes import pulumi_cli

    resources = prod_resources()
    protected = [r for r in resources if r["protect"]]
    assert protected, "prod protects its storage: the case this test is about"
    bin_dir = tmp_path / "bin"
    pulumi_cli.install(bin_dir, {"prod": resources})
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    lines: list = []
    destroy.destroyer(destroy.PROJECT_DIR, on_output=lines.append)("prod")
    calls = [json.loads(x) for x in (bin_dir / "calls.jsonl").read_text().splitlines()]
    (cmd,) = [c for c in calls if "destroy" in c]
    assert "--exclude-protected" in cmd and "--stack" in cmd and "prod" in cmd
    state = json.loads((bin_dir / "state.json").read_text())
    assert state["prod"] == protected            # the protected storage is still managed
    assert any("deleted" in x for x in lines)


def test_without_exclude_protected_the_same_destroy_fails(monkeypatch, tmp_path):
    """The fake refuses like the engine does: what a plain destroy (today's main) ran into."""
    import pulumi.automation as auto

    from tests.fakes import pulumi_cli

    bin_dir = tmp_path / "bin"
    pulumi_cli.install(bin_dir, {"prod": prod_resources()})
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    stack = auto.select_stack(stack_name="prod", work_dir=str(destroy.PROJECT_DIR))
    with pytest.raises(auto.errors.CommandError, match="marked for protection"):
        stack.destroy()


def test_destroy_of_an_unknown_stack_is_a_cloud_error(monkeypatch, tmp_path):
    from tests.fakes import pulumi_cli

    bin_dir = tmp_path / "bin"
    pulumi_cli.install(bin_dir, {"prod": []})
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    with pytest.raises(CloudError, match="no stack named 'devx' found"):
        destroy.destroyer(destroy.PROJECT_DIR)("devx")
