"""gpulease in another Pulumi program (issue 36 item 5): a program outside the repository
imports `gpulease.components`, declares its own resource and gpulease's fleet beside it, and
is planned under Pulumi's mock runtime - gpulease's resources priced and tagged, the
program's own left alone."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from gpulease import tags
from tests.timeouts import HANG_S

PROGRAM = textwrap.dedent('''
    """A team's own Pulumi program (not gpulease's): its artifacts bucket, and GPU clusters
    from gpulease."""
    import pulumi
    import pulumi_aws as aws

    import gpulease.components as gpulease

    CONFIG = {
        "owner": "ml-platform", "cost_center": "cc-42", "budget_monthly_usd": 60000,
        "clouds": {"aws": {"regions": ["us-east-1"]}},
        "clusters": [{"name": "train", "gpu": "H100", "gpus": 8, "hours_per_month": 200,
                      "priority": 5, "checkpoint_minutes": 30}],
    }


    def main():
        aws.s3.BucketV2("team-artifacts", bucket="acme-team-artifacts",
                        tags={"team": "ml-platform"})
        fleet = gpulease.declare(CONFIG)
        pulumi.export("gpu_monthly_usd", float(fleet.monthly_usd))
        pulumi.export("train_instance", fleet.cluster("train").offering.instance_type)
''')

RUNNER = textwrap.dedent('''
    import importlib.util, json, sys
    from gpulease.planner.mocks import run_program

    spec = importlib.util.spec_from_file_location("team_program", sys.argv[1])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    run = run_program(mod.main, stack="dev", project="team-infra")
    print(json.dumps({"outputs": run.outputs, "resources": [
        {"type": r.type, "name": r.name, "tags": (r.inputs or {}).get("tags")}
        for r in run.resources]}, default=str))
''')


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    outside = tmp_path_factory.mktemp("team-infra")
    (outside / "infra").mkdir()                       # their own infra/ folder, as is common
    (outside / "infra" / "__main__.py").write_text(PROGRAM)
    (outside / "run.py").write_text(RUNNER)
    r = subprocess.run([sys.executable, str(outside / "run.py"),
                        str(outside / "infra" / "__main__.py")], cwd=outside,
                       capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_outside_program_declares_gpulease_clusters(planned):
    types = {r["type"] for r in planned["resources"]}
    assert "gpulease:aws:GpuCluster" in types
    assert any(t.startswith("aws:autoscaling/group") or t.startswith("aws:ec2/launchTemplate")
               for t in types)
    assert planned["outputs"]["gpu_monthly_usd"] > 0
    assert planned["outputs"]["train_instance"].startswith("p5")


def test_only_gpulease_resources_are_priced_and_tagged(planned):
    own = [r for r in planned["resources"] if r["name"] == "team-artifacts"]
    assert own and own[0]["tags"] == {"team": "ml-platform"}
    lt = [r for r in planned["resources"] if r["type"] == "aws:ec2/launchTemplate:LaunchTemplate"]
    assert lt and all(tags.CLUSTER in (r["tags"] or {}) for r in lt)
    # gpulease's own stack outputs are not exported unless asked
    assert "total_monthly_usd" not in planned["outputs"]


def test_bad_config_is_a_located_config_error():
    from gpulease.components import declare
    from gpulease.errors import ConfigError
    from gpulease.planner.mocks import run_program

    with pytest.raises(ConfigError, match=r"gpulease:clusters\[0\]\.gpu"):
        run_program(lambda: declare({"owner": "a", "cost_center": "b",
                                     "budget_monthly_usd": 1,
                                     "clouds": {"aws": {"regions": ["us-east-1"]}},
                                     "clusters": [{"name": "x", "gpu": "H1000", "gpus": 1,
                                                   "hours_per_month": 1, "priority": 1}]}),
                    stack="dev", project="team-infra")
