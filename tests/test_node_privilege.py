"""Least privilege for nodes (issue 35 item 6), as the program declares it under mocks: each node
may act only on itself, and every node group carries the program's declaration.

No policy simulator is used: moto 5.2.5 implements neither IAM SimulateCustomPolicy nor
SimulatePrincipalPolicy (its request authorizer evaluates StringEquals only: no policy
variables, no ForAllValues / Null), and GCP's Policy Simulator is a cloud service. The
statements are asserted exactly instead, here and in tests/test_aws_builders.py."""
from __future__ import annotations

import json
import re

import pytest

from gpulease import tags
from gpulease.bootstrap import cluster_members
from gpulease.bootstrap.render import render_node_files, render_user_data
from gpulease.clouds.aws import builders as aws_builders
from gpulease.clouds.gcp import builders as gcp_builders, node_iam
from tests.test_staging import make_cluster, make_env, make_storage, run

T_CUSTOM_ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
T_PIAM = "gcp:projects/iAMMember:IAMMember"
T_TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
T_MIG = "gcp:compute/instanceGroupManager:InstanceGroupManager"
T_ASG = "aws:autoscaling/group:Group"
T_POLICY = "aws:iam/rolePolicy:RolePolicy"


@pytest.fixture(scope="module")
def both():
    env = make_env([
        make_cluster("eval", "g2-standard-8", cloud="gcp", region="us-central1",
                     dataset="corpus"),
        make_cluster("tune", "g6.xlarge", cloud="aws", region="us-east-1", dataset=None,
                     index=1)], [make_storage("corpus", "us-central1", cloud="gcp")], env="dev")
    return env, run(env)


# ---- GCP ------------------------------------------------------------------------------------
def test_gcp_node_account_holds_no_compute_write_and_no_project_wide_read(both):
    env, r = both
    sa = r.one("gcp:serviceaccount/account:Account", "eval-sa")
    member = f"serviceAccount:{sa.outputs['email']}"
    mine = [b for b in r.by_type(T_PIAM) if b.inputs["member"] == member]
    role = r.one(T_CUSTOM_ROLE, "eval-node-read")
    assert sorted(b.inputs["role"] for b in mine) == sorted(
        ["roles/monitoring.metricWriter", "roles/logging.logWriter", role.outputs["name"]])
    # exactly two reads, each checked on the resource it names (a .list is checked on the
    # project, where no condition can narrow it: compute.instances.list was the role before)
    assert role.inputs["permissions"] == ["compute.instanceGroupManagers.get",
                                          "compute.instances.get"]
    assert role.inputs["roleId"] == "gpulease_node_dev_eval"
    (read,) = [b for b in mine if b.inputs["role"] == role.outputs["name"]]
    project = read.inputs["project"]
    migs = [m for m in r.by_type(T_MIG) if m.name.startswith("eval-")]
    assert sorted(m.inputs["name"] for m in migs) == ["eval-on-demand"]
    zone = migs[0].inputs["zone"]
    assert {m.inputs["baseInstanceName"] for m in migs} == {"eval"}
    zonal = f"projects/{project}/zones/{zone}"
    assert read.inputs["condition"] == {
        "title": "own-cluster-migs-and-vms-only",
        "description": f"list the members of MIGs eval-on-demand and read VMs eval-* in {zone}",
        "expression": (f'resource.name == "{zonal}/instanceGroupManagers/eval-on-demand" || '
                       f'resource.name.startsWith("{zonal}/instances/eval-")')}
    # every other binding of the node is unconditional and not compute
    assert all("condition" not in b.inputs for b in mine if b is not read)
    assert "roles/compute.viewer" not in json.dumps([b.inputs for b in r.by_type(T_PIAM)])
    # no custom role of a node holds a write, a list, or anything beyond the two reads
    for cr in r.by_type(T_CUSTOM_ROLE):
        if cr.name.endswith("-node-read"):
            assert set(cr.inputs["permissions"]) <= set(node_iam.NODE_READ_PERMISSIONS)
    assert not [cr for cr in r.by_type(T_CUSTOM_ROLE) if cr.name.endswith("-autostop-role")]


def test_gcp_read_condition_names_every_mig_of_the_cluster():
    cond = node_iam.read_condition(project="ml-project", zone="us-central1-a",
                                   base_instance_name="train",
                                   migs=["train-spot", "train-on-demand", "train-reserved"])
    z = "projects/ml-project/zones/us-central1-a"
    assert cond["expression"] == (
        f'resource.name == "{z}/instanceGroupManagers/train-on-demand" || '
        f'resource.name == "{z}/instanceGroupManagers/train-reserved" || '
        f'resource.name == "{z}/instanceGroupManagers/train-spot" || '
        f'resource.name.startsWith("{z}/instances/train-")')
    assert len(cond["title"]) <= 100


def test_gcp_the_node_scripts_make_only_fenced_calls(both):
    env, _ = both
    d = next(c for c in env.clusters if c.name == "eval")
    files = render_node_files(stack=env.stack, decision=d, purchase_model="on_demand")
    text = files["cloud-config.yaml"]
    assert "delete-instances" not in text and "instance-groups managed resize" not in text
    assert (f"computeMetadata/v1/instance/guest-attributes/"
            f"{tags.LEAVE_REQUESTED_GUEST_ATTRIBUTE}") in text
    # the only gcloud calls left: the two fenced reads of cluster_members.SOURCE, each zonal
    for key in ("usr/local/sbin/gpulease-autostop", "usr/local/sbin/gpulease-rendezvous"):
        script = files[key]
        # gcloud runs from SOURCE only (the script hands it the CLI's path)
        assert script.count('"$GCLOUD"') == script.count('"$CLUSTER_MEMBERS" "$GCLOUD"') == 1
        assert cluster_members.SOURCE in script and "MIGS=(eval-on-demand)" in script
    calls = re.findall(r'\["(instance-groups", "managed", "list-instances"|instances", '
                       r'"describe")', cluster_members.SOURCE)
    assert sorted(calls) == ['instance-groups", "managed", "list-instances"',
                             'instances", "describe"']
    assert '"--zone", zone, "--project", project' in cluster_members.SOURCE
    for word in ("instances list", "aggregated", "--filter"):
        assert word not in text, word


def test_gcp_fence_and_scripts_name_every_mig_the_program_declares():
    """Window work on spot: a spot MIG and an on-demand standby MIG at zero (issue 37 item 2).
    The read condition, the rendered scripts and the declared MIGs name the same groups."""
    from gpulease.model import PurchaseMix
    from tests.test_aws_components import spot_window
    from tests.test_gcp_components import T_MIG, make_cluster as gcp_cluster, \
        make_env as gcp_env, run as run_gcp

    c = spot_window(gcp_cluster("win", "g2-standard-8", PurchaseMix(spot=2),
                                 distributed=False), duration=6.5)
    env = gcp_env([c], [], env="dev")
    r = run_gcp(env)
    declared = sorted(m.inputs["name"] for m in r.by_type(T_MIG))
    assert declared == ["win-on-demand", "win-spot"]
    (read,) = [b for b in r.by_type(T_PIAM) if b.name == "win-node-read"]
    expr = read.inputs["condition"]["expression"]
    assert [m for m in declared if f"/instanceGroupManagers/{m}\"" in expr] == declared
    d = next(x for x in env.clusters if x.name == "win")
    for key, text in render_node_files(stack=env.stack, decision=d,
                                       purchase_model="spot").items():
        if key.endswith(("gpulease-autostop", "gpulease-rendezvous")):
            assert f"MIGS=({' '.join(declared)})" in text, key


def test_gcp_instance_templates_carry_the_declaration(both):
    env, r = both
    templates = [t for t in r.by_type(T_TEMPLATE)
                 if (t.inputs.get("labels") or {}).get(tags.CLUSTER) == "eval"]
    assert templates
    for t in templates:
        assert t.inputs["labels"][tags.DECLARED] == tags.declared_value("dev", "eval"), t.urn


def test_node_read_role_id_is_valid_for_long_names():
    rid = node_iam.custom_role_id("staging", "x" * 80 + "-name")
    assert re.fullmatch(r"[a-zA-Z0-9_.]{3,64}", rid), rid
    assert rid != node_iam.custom_role_id("staging", "x" * 80 + "-other")
    assert gcp_builders.PROJECT_ROLES == ("roles/monitoring.metricWriter",
                                          "roles/logging.logWriter")


# ---- AWS ------------------------------------------------------------------------------------
def test_aws_node_role_policy_is_exactly_the_builder(both):
    env, r = both
    (pol,) = [p for p in r.by_type(T_POLICY) if p.name == "tune-node-policy"]
    doc = json.loads(pol.inputs["policy"])
    bucket = doc["Statement"][0]["Resource"].split(":::")[1]
    assert doc == aws_builders.node_policy(
        partition="aws", dataset_bucket=None, dataset_prefix=None, checkpoint_bucket=bucket,
        checkpoint_prefix=doc["Statement"][0]["Condition"]["StringLike"]["s3:prefix"][0][:-1])
    assert "TerminateInstanceInAutoScalingGroup" not in pol.inputs["policy"]
    (allow,) = [s for s in doc["Statement"] if s["Effect"] == "Allow"
                and "ec2:CreateTags" in json.dumps(s["Action"])]
    assert allow["Resource"] == "${ec2:SourceInstanceARN}"
    (deny,) = [s for s in doc["Statement"] if s["Effect"] == "Deny"]
    assert deny["Condition"] == {"ForAnyValue:StringNotEquals": {
        "aws:TagKeys": list(tags.NODE_WRITTEN)}}


def test_aws_groups_carry_the_declaration(both):
    env, r = both
    groups = [g for g in r.by_type(T_ASG)
              if any(t["key"] == tags.CLUSTER and t["value"] == "tune" for t in g.inputs["tags"])]
    assert groups
    for g in groups:
        found = {t["key"]: t["value"] for t in g.inputs["tags"]}
        assert found[tags.DECLARED] == tags.declared_value("dev", "tune"), g.urn


def test_aws_the_autostop_asks_instead_of_terminating(both):
    env, _ = both
    d = next(c for c in env.clusters if c.name == "tune")
    text = render_user_data(stack=env.stack, decision=d, purchase_model="on_demand")
    assert "terminate-instance" not in text
    assert f'--tags "Key={tags.LEAVE_REQUESTED},Value=$now"' in text
