"""The mock runtime answers as the providers do: auto-names, preview unknowns, data lookups."""
from __future__ import annotations

import re

import pulumi
import pulumi_aws as aws
import pulumi_gcp as gcp
import pytest

from gpulease.planner import mocks
from gpulease.planner.mocks import (AutoName, ProviderRejected, autoname_rule, generated_name,
                                    run_program)
from gpulease.planner.plan import build_plan
from tests.conftest import SHIPPED_STACKS, program_run

#: GCE resource names ("Naming resources": RFC 1035, [a-z]([-a-z0-9]*[a-z0-9])?, 1-63 chars).
GCE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
#: service account ids ("Create service accounts": 6-30 chars, same alphabet).
SA_ID = re.compile(r"[a-z]([-a-z0-9]{4,28}[a-z0-9])")
#: S3 / GCS bucket names without dots (S3 "Bucket naming rules", GCS "Bucket names").
BUCKET = re.compile(r"[a-z0-9][-a-z0-9]{1,61}[a-z0-9]")


# ---- auto-naming rules, as read in the providers' sources -------------------------------------
@pytest.mark.parametrize("token,rule", [
    ("gcp:compute/instanceTemplate:InstanceTemplate", AutoName()),          # SetAutonaming(255)
    ("gcp:compute/resourcePolicy:ResourcePolicy", AutoName()),
    ("gcp:compute/network:Network", AutoName(maxlen=63, lowercase=True)),  # lowercaseAutoName
    ("gcp:compute/subnetwork:Subnetwork", AutoName(maxlen=63, lowercase=True)),
    ("gcp:storage/bucket:Bucket", AutoName(maxlen=222)),
    ("gcp:serviceaccount/account:Account", AutoName("accountId", 30)),
    ("aws:s3/bucket:Bucket", AutoName("bucket", 63, lowercase=True)),
    ("aws:iam/role:Role", AutoName(maxlen=64)),
    ("aws:ec2/launchTemplate:LaunchTemplate", AutoName()),
    ("aws:sns/topic:Topic", AutoName(maxlen=80)),
    # no name input at all: nothing to auto-name
    ("gcp:projects/iAMMember:IAMMember", None),
    ("aws:ec2/vpc:Vpc", None),
    ("aws:iam/rolePolicyAttachment:RolePolicyAttachment", None),
])
def test_autoname_rules_follow_the_providers(token, rule):
    assert autoname_rule(token) == rule


def test_generated_names_are_logical_name_dash_seven_hex_and_seeded():
    rule = AutoName(maxlen=63, lowercase=True)
    a = generated_name(rule, "Train-Net", seed="s1", type_token="t")
    assert re.fullmatch(r"train-net-[0-9a-f]{7}", a)
    assert a == generated_name(rule, "Train-Net", seed="s1", type_token="t")
    assert a != generated_name(rule, "Train-Net", seed="s2", type_token="t")
    # no lowercasing where the provider does not lowercase (instance templates)
    assert generated_name(AutoName(), "A_b", seed="s", type_token="t").startswith("A_b-")


def test_an_underscore_in_a_logical_name_reaches_the_gce_name():
    """The defect of issue 12: `<c>-on_demand-template` was auto-named with its `_`."""
    def program():
        gcp.compute.InstanceTemplate("finetune-on_demand-template", machine_type="a2-highgpu-1g",
                                     disks=[{"boot": True, "source_image": "x"}],
                                     network_interfaces=[{"network": "default"}])
    run = program_run_of(program)
    (tpl,) = run.custom
    assert tpl.physical_name.startswith("finetune-on_demand-template-")
    assert not GCE_NAME.fullmatch(tpl.physical_name)


def test_an_autoname_that_cannot_fit_fails_like_the_provider():
    def program():
        gcp.compute.Network("n" * 60, auto_create_subnetworks=False)
    with pytest.raises(ProviderRejected) as exc:
        program_run_of(program)
    msg = str(exc.value)
    assert "plus 7 random characters, longer than its maximum length 63" in msg
    assert "gcp:compute/network:Network " + "n" * 60 in msg
    assert exc.value.exit_code == 2


def test_explicit_names_are_the_physical_names():
    def program():
        aws.s3.Bucket("data-bucket", bucket="acme-data")
        gcp.serviceaccount.Account("sa", account_id="gpu-dev-train")
        aws.ec2.Vpc("vpc", cidr_block="10.0.0.0/16")
    run = program_run_of(program)
    names = {r.name: r.physical_name for r in run.custom}
    assert names == {"data-bucket": "acme-data", "sa": "gpu-dev-train", "vpc": None}


def program_run_of(program, **kw):
    return run_program(program, stack="dev", **kw)


# ---- the shipped stacks: every physical name is one the cloud accepts ---------------------------
def _gce_named(r) -> bool:
    return r.type.startswith("gcp:compute/")


def test_every_shipped_stack_resource_has_its_physical_name(shipped_run):
    stack, run = shipped_run
    for r in run.custom:
        rule = autoname_rule(r.type)
        if rule is None:
            continue
        assert r.physical_name, r.urn
        explicit = r.inputs.get(rule.field)
        assert r.physical_name == explicit if explicit else \
            re.fullmatch(re.escape(r.name) + r"-[0-9a-f]{7}", r.physical_name, re.I), r.urn


def test_shipped_stacks_use_only_names_gcp_accepts(shipped_run):
    stack, run = shipped_run
    for r in run.custom:
        if r.physical_name is None:
            continue
        if _gce_named(r):
            assert GCE_NAME.fullmatch(r.physical_name), (r.urn, r.physical_name)
        if r.type == "gcp:serviceaccount/account:Account":
            assert SA_ID.fullmatch(r.physical_name), (r.urn, r.physical_name)
        if r.type in ("gcp:storage/bucket:Bucket", "aws:s3/bucket:Bucket"):
            assert BUCKET.fullmatch(r.physical_name), (r.urn, r.physical_name)


def test_plan_json_shows_physical_names(shipped_run):
    stack, run = shipped_run
    plan = build_plan(run, stack=stack)
    by_urn = {r.urn: r for r in run.custom}
    assert all("physical_name" in x for x in plan["resources"])
    for x in plan["resources"]:
        assert x["physical_name"] == by_urn[x["urn"]].physical_name
    assert any(x["physical_name"] for x in plan["resources"])


def test_bucket_and_gce_names_are_unique_per_stack(shipped_run):
    stack, run = shipped_run
    seen: dict = {}
    for r in run.custom:
        if r.physical_name is None:
            continue
        key = (r.type.split(":")[0], r.type, r.physical_name)
        assert key not in seen, (r.urn, seen.get(key))
        seen[key] = r.urn


assert SHIPPED_STACKS  # the fixtures above run every shipped stack


# ---- preview mode: what `pulumi preview` sees ------------------------------------------------
def _assert_known_inputs_equal(preview, up, path):
    if preview == mocks.UNKNOWN_MASK:
        return 1                               # computed from a provider output: unknown
    assert type(preview) is type(up), (path, preview, up)
    if isinstance(up, dict):
        assert set(preview) == set(up), (path, set(preview) ^ set(up))
        return sum(_assert_known_inputs_equal(preview[k], up[k], f"{path}.{k}") for k in up)
    if isinstance(up, list):
        assert len(preview) == len(up), path
        return sum(_assert_known_inputs_equal(p, u, f"{path}[{i}]")
                   for i, (p, u) in enumerate(zip(preview, up)))
    assert preview == up, (path, preview, up)
    return 0


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_preview_declares_the_same_resources_with_the_same_inputs(stack):
    """No resource is declared inside an apply, no decision reads a value only known after
    create: `pulumi preview` and `pulumi up` see the same resources and known inputs."""
    from gpulease.config import read_stack_file
    from gpulease.planner.plan import run
    from tests.conftest import ROOT

    up = program_run(stack)
    preview = run(read_stack_file(ROOT / "stacks" / f"Pulumi.{stack}.yaml"), stack=stack,
                  preview=True)
    assert preview.preview and not up.preview
    up_by = {r.urn: r for r in up.resources}
    pre_by = {r.urn: r for r in preview.resources}
    assert set(pre_by) == set(up_by), set(pre_by) ^ set(up_by)
    unknown = 0
    for urn, r in up_by.items():
        p = pre_by[urn]
        assert (p.type, p.parent, p.physical_name, p.protect) == \
            (r.type, r.parent, r.physical_name, r.protect), urn
        unknown += _assert_known_inputs_equal(p.inputs, r.inputs, urn)
    # the mode is real: inputs built from ids / ARNs / emails are unknown in preview
    assert unknown > 0
    for r in preview.custom:
        for key in ("arn", "selfLink", "email", "accessId"):
            if key not in r.inputs:   # computed by the provider: unknown until created
                assert r.outputs.get(key) in (None, mocks.UNKNOWN_MASK), (r.urn, key)
    # the same decision and the same cost either way
    assert preview.result.ledger.monthly_usd == pytest.approx(up.result.ledger.monthly_usd)
