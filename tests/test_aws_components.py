"""AWS components under Pulumi mocks: every property of issue 4, asserted per resource URN."""
from __future__ import annotations

import base64
import copy
import dataclasses
import gzip
import json
import re
from functools import partial

import botocore.session
import pytest

from gpulease.catalog import load_catalog
from gpulease.clouds.aws.deploy import deploy
from gpulease import money
from gpulease import tags
from gpulease.costing import transform
from gpulease.errors import ConfigError, GuardrailError
from gpulease.model import (CapacityBlockPin, ClusterDecision, EnvironmentDecision, PurchaseMix,
                            parse_utc)
from gpulease.planner import mocks
from gpulease.planner.mocks import run_program
from tests import builders

ASG = "aws:autoscaling/group:Group"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
SG = "aws:ec2/securityGroup:SecurityGroup"
ODCR = "aws:ec2/capacityReservation:CapacityReservation"
BUCKET = "aws:s3/bucket:Bucket"

_BOTO = botocore.session.get_session()
EC2 = _BOTO.get_service_model("ec2")
S3 = _BOTO.get_service_model("s3")
AUTOSCALING = _BOTO.get_service_model("autoscaling")


def enum(model, shape):
    return set(model.shape_for(shape).enum)


# ---- building decisions directly (no policy dependency) ----------------------------------------
CATALOG = load_catalog()


# this file's fixture defaults on the shared builders (tests/builders.py)
make_env = partial(builders.make_env, catalog=CATALOG, cost_center="cc-ml", budget=100000.0)
make_cluster = partial(builders.make_cluster, catalog=CATALOG, dataset="corpus",
                       rationale="test")
make_storage = builders.make_storage


def pinned(c: ClusterDecision, **changes) -> ClusterDecision:
    """``c`` with an approved Capacity Block pinned for its reserved nodes (CONTRACTS C2)."""
    pin = CapacityBlockPin(**{**dict(
        offering_id="cb-0123456789abcdef0", region=c.region, availability_zone="us-east-1a",
        instance_type=c.offering.instance_type, instance_count=c.purchase.reserved,
        start="2026-12-05T11:30:00Z", end="2026-12-14T11:30:00Z", upfront_fee_usd=16990.56,
        purchase_approved=True), **changes})
    return dataclasses.replace(c, spec=dataclasses.replace(c.spec, capacity_block=pin))


def run(env: EnvironmentDecision, stack_name=None):
    holder = {}

    def program():
        holder["ledger"] = transform.register(env.stack, CATALOG)
        return deploy(env, CATALOG)
    r = run_program(program, stack=stack_name or env.stack.stack)
    r.ledger = holder["ledger"]
    return r


@pytest.fixture(scope="module")
def staging():
    """A 4-node distributed p5 cluster (2 reserved, 1 on-demand, 1 spot) and its dataset."""
    return run(make_env([make_cluster()], [make_storage()]))


# ---- compute ---------------------------------------------------------------------------------
def test_one_provider_per_region_and_everything_uses_it():
    env = make_env([make_cluster("a", "p5.48xlarge"),
                    make_cluster("b", "p5en.48xlarge", region="us-west-2", dataset=None,
                                 purchase=PurchaseMix(spot=2))],
                   [make_storage()])
    r = run(env)
    provs = {p.name for p in r.by_type("pulumi:providers:aws")}
    assert provs == {"aws-us-east-1", "aws-us-west-2"}
    for p in r.by_type("pulumi:providers:aws"):
        assert p.inputs["region"] == p.name[4:], p.urn
    for res in r.custom:
        if res.type.startswith("aws:"):
            assert "pulumi:providers:aws::aws-us-" in res.provider, f"{res.urn} has no region provider"
    assert {n.name for n in r.by_type("gpulease:aws:Network")} == {"aws-us-east-1-net",
                                                                    "aws-us-west-2-net"}
    comp = r.one("gpulease:aws:GpuCluster", "b")
    assert r.one(ASG, "b-asg").parent == comp.urn


def test_efa_launch_template(staging):
    lt = staging.one(LT, "train-lt")
    nis = lt.inputs["networkInterfaces"]
    assert len(nis) == CATALOG.offering("aws", "us-east-1", "p5.48xlarge").efa_interfaces, lt.urn
    assert nis[0]["interfaceType"] == "efa" and nis[0]["networkCardIndex"] == 0, lt.urn
    assert {n["interfaceType"] for n in nis[1:]} == {"efa-only"}, lt.urn
    assert [n["networkCardIndex"] for n in nis] == list(range(len(nis))), lt.urn
    sg = staging.one(SG, "train-sg")
    assert all(n["securityGroups"] == [f"{sg.name}-id"] for n in nis), lt.urn
    assert all(not n.get("associatePublicIpAddress") for n in nis), lt.urn
    assert lt.inputs["instanceType"] == "p5.48xlarge", lt.urn


def test_imdsv2_required_with_container_hop_limit_and_encrypted_gp3_root(staging):
    lt = staging.one(LT, "train-lt")
    assert lt.inputs["metadataOptions"] == {"httpEndpoint": "enabled", "httpTokens": "required",
                                            "httpPutResponseHopLimit": 2}, lt.urn
    (root,) = lt.inputs["blockDeviceMappings"]
    assert root["deviceName"] == "/dev/sda1", lt.urn
    assert root["ebs"]["volumeType"] == "gp3" and root["ebs"]["encrypted"] == "true", lt.urn
    assert lt.inputs["imageId"] == "ami-0123456789abcdef0", lt.urn
    profile = staging.one("aws:iam/instanceProfile:InstanceProfile", "train-profile")
    assert lt.inputs["iamInstanceProfile"]["arn"] == profile.outputs["arn"], lt.urn
    assert profile.outputs["arn"].endswith(f":instance-profile/{profile.physical_name}")


def test_ami_comes_from_the_public_dlami_parameter(staging):
    names = [a["name"] for tok, a in staging.calls if tok == "aws:ssm/getParameter:getParameter"]
    assert names and all(n.startswith("/aws/service/deeplearning/ami/x86_64/") for n in names)


def test_security_group_self_referencing_and_https_egress_only(staging):
    sg = staging.one(SG, "train-sg")
    (ing,) = sg.inputs["ingress"]
    assert ing["self"] is True and ing["protocol"] == "-1", sg.urn
    assert not ing.get("cidrBlocks") and not ing.get("ipv6CidrBlocks"), sg.urn
    egress = sg.inputs["egress"]
    assert any(e.get("self") and e["protocol"] == "-1" for e in egress), sg.urn
    open_world = [e for e in egress if e.get("cidrBlocks")]
    assert open_world == [{"protocol": "tcp", "fromPort": 443, "toPort": 443,
                           "cidrBlocks": ["0.0.0.0/0"], "description": "HTTPS"}], sg.urn
    assert sg.inputs["vpcId"] == "aws-us-east-1-net-vpc-id", sg.urn


def test_no_public_ips_and_no_ssh_anywhere(staging):
    for s in staging.by_type("aws:ec2/subnet:Subnet"):
        assert s.inputs.get("mapPublicIpOnLaunch") is False, s.urn
    for sg in staging.by_type(SG):
        for rule in sg.inputs.get("ingress", []):
            assert not rule.get("cidrBlocks"), sg.urn
            assert rule.get("fromPort", 0) != 22, sg.urn


def test_distributed_cluster_in_one_az_cluster_placement_group(staging):
    pg = staging.one("aws:ec2/placementGroup:PlacementGroup", "train-pg")
    assert pg.inputs["strategy"] == "cluster", pg.urn
    asg = staging.one(ASG, "train-asg")
    assert asg.inputs["placementGroup"] == "train-pg-id", asg.urn
    assert asg.inputs["vpcZoneIdentifiers"] == ["aws-us-east-1-net-private-0-id"], asg.urn


def test_single_node_cluster_spreads_over_azs_without_placement_group():
    c = make_cluster("solo", "g6.xlarge", purchase=PurchaseMix(spot=1), dataset=None)
    r = run(make_env([c], env="dev"))
    assert not r.by_type("aws:ec2/placementGroup:PlacementGroup")
    asg = r.one(ASG, "solo-asg")
    assert len(asg.inputs["vpcZoneIdentifiers"]) >= 2, asg.urn   # one subnet per catalog zone
    assert "placementGroup" not in asg.inputs, asg.urn
    lt = r.one(LT, "solo-lt")
    assert [n["interfaceType"] for n in lt.inputs["networkInterfaces"]] == ["interface"], lt.urn


def test_mixed_instances_policy(staging):
    asg = staging.one(ASG, "train-asg")
    mip = asg.inputs["mixedInstancesPolicy"]
    dist = mip["instancesDistribution"]
    assert dist == {"onDemandBaseCapacity": 3, "onDemandPercentageAboveBaseCapacity": 0,
                    "onDemandAllocationStrategy": "prioritized",
                    "spotAllocationStrategy": "price-capacity-optimized"}, asg.urn
    overrides = [o["instanceType"] for o in mip["launchTemplate"]["overrides"]]
    assert overrides[0] == "p5.48xlarge", asg.urn
    assert mip["launchTemplate"]["launchTemplateSpecification"]["launchTemplateId"] == "train-lt-id"
    assert asg.inputs["capacityRebalance"] is True, asg.urn
    assert asg.inputs["desiredCapacity"] == 4 and asg.inputs["maxSize"] == 4, asg.urn
    assert asg.inputs["minSize"] == 0, asg.urn
    assert set(asg.ignore_changes) == {"desiredCapacity", "minSize"}, asg.urn


def test_overrides_are_equivalent_gpus_in_the_same_region():
    c = make_cluster("inf", "g6.8xlarge", purchase=PurchaseMix(on_demand=1, spot=2),
                     distributed=False, dataset=None)
    r = run(make_env([c]))
    asg = r.one(ASG, "inf-asg")
    types = [o["instanceType"] for o in
             asg.inputs["mixedInstancesPolicy"]["launchTemplate"]["overrides"]]
    assert types[0] == "g6.8xlarge", asg.urn
    for t in types:
        o = CATALOG.offering("aws", "us-east-1", t)
        assert (o.gpu, o.gpus_per_node) == ("L4", 1), (asg.urn, t)


def test_odcr_targets_the_reserved_nodes(staging):
    odcr = staging.one(ODCR, "train-odcr")
    assert odcr.inputs["instanceType"] == "p5.48xlarge", odcr.urn
    assert odcr.inputs["instanceCount"] == 2, odcr.urn
    assert odcr.inputs["instanceMatchCriteria"] == "targeted", odcr.urn
    assert odcr.inputs["instancePlatform"] == "Linux/UNIX", odcr.urn
    subnet = staging.one("aws:ec2/subnet:Subnet", "aws-us-east-1-net-private-0")
    assert odcr.inputs["availabilityZone"] == _zone_name(subnet), odcr.urn
    pg = staging.one("aws:ec2/placementGroup:PlacementGroup", "train-pg")
    assert odcr.inputs["placementGroupArn"] == pg.outputs["arn"], odcr.urn
    lt = staging.one(LT, "train-lt")
    assert lt.inputs["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": "train-odcr-id"}}, lt.urn
    asg = staging.one(ASG, "train-asg")
    assert asg.inputs["capacityReservationSpecification"] == {
        "capacityReservationPreference": "capacity-reservations-first",
        "capacityReservationTarget": {"capacityReservationIds": ["train-odcr-id"]}}, asg.urn


@pytest.mark.parametrize("env,flag,expect", [("dev", None, False), ("dev", True, True),
                                             ("prod", None, True), ("prod", False, False)])
def test_reservations_skipped_in_dev_unless_asked(env, flag, expect):
    c = make_cluster(purchase=PurchaseMix(reserved=1, spot=1))
    r = run(make_env([c], [make_storage()], env=env, capacity_reservations=flag))
    assert bool(r.by_type(ODCR)) is expect, [x.urn for x in r.by_type(ODCR)]
    asg = r.one(ASG, "train-asg")
    assert asg.inputs["mixedInstancesPolicy"]["instancesDistribution"][
        "onDemandBaseCapacity"] == 1, asg.urn
    assert ("capacityReservationSpecification" in r.one(LT, "train-lt").inputs) is expect


def test_capacity_blocks_for_the_reserved_part(monkeypatch):
    """A pinned, approved block is declared verbatim: no offering lookup (a new offering id
    would buy a second block), protected against replacement."""
    offers = []
    monkeypatch.setitem(mocks.KNOWN_CALLS,
                        "aws:ec2/getCapacityBlockOffering:getCapacityBlockOffering",
                        lambda args, region: offers.append(args) or {})
    c = pinned(make_cluster(purchase=PurchaseMix(reserved=2, spot=2), hours=200))
    r = run(make_env([c], [make_storage()], capacity_blocks=True))
    assert offers == []
    blk = r.one("aws:ec2/capacityBlockReservation:CapacityBlockReservation", "train-block")
    assert blk.inputs["capacityBlockOfferingId"] == "cb-0123456789abcdef0", blk.urn
    assert blk.protect is True, blk.urn
    assert not r.by_type(ODCR)
    lt = r.one(LT, "train-block-lt")
    assert lt.inputs["instanceMarketOptions"] == {"marketType": "capacity-block"}, lt.urn
    basg = r.one(ASG, "train-block-asg")
    assert basg.inputs["desiredCapacity"] == 2, basg.urn
    assert basg.inputs["capacityReservationSpecification"][
        "capacityReservationPreference"] == "capacity-reservations-only", basg.urn
    main = r.one(ASG, "train-asg")
    assert main.inputs["desiredCapacity"] == 2, main.urn
    assert main.inputs["mixedInstancesPolicy"]["instancesDistribution"][
        "onDemandBaseCapacity"] == 0, main.urn
    # the block carries the reserved cost, the block group none of it
    assert r.ledger.get("aws:ec2/capacityBlockReservation:CapacityBlockReservation",
                        "train-block").monthly_usd == pytest.approx(2000.0)
    assert r.ledger.get(ASG, "train-block-asg").monthly_usd == 0.0


def test_allow_prepaid_replacement_lifts_the_blocks_protection():
    c = pinned(make_cluster(purchase=PurchaseMix(reserved=2, spot=2)))
    env = make_env([c], [make_storage()], capacity_blocks=True)
    env = dataclasses.replace(env, stack=dataclasses.replace(
        env.stack, allow_prepaid_replacement=("train",)))
    blk = run(env).one("aws:ec2/capacityBlockReservation:CapacityBlockReservation")
    assert blk.protect is False, blk.urn


def test_an_unpinned_block_is_quoted_and_never_bought():
    """Without a pin the program quotes an offering and stops (exit 4): nothing is declared.
    Offline the offering is an estimate from the published rate (issue 34): the message says so,
    names the rate's source and date and how to get a real quote, and offers no id to pin."""
    env = make_env([make_cluster(purchase=PurchaseMix(reserved=2, spot=2))], [make_storage()],
                   capacity_blocks=True)
    holder = {}

    def program():
        transform.register(env.stack, CATALOG)
        holder["deployed"] = deploy(env, CATALOG)
    with pytest.raises(GuardrailError) as exc:
        run_program(program, stack="staging", now=parse_utc("2026-12-03T13:00:00Z"))
    assert exc.value.exit_code == 4 and "deployed" not in holder
    text = str(exc.value)
    quote = mocks.capacity_block_quote(
        {"capacityDurationHours": 216, "instanceCount": 2, "instanceType": "p5.48xlarge"},
        "us-east-1", mocks.load_lookups(), parse_utc("2026-12-03T13:00:00Z"))
    assert ('cluster "train" needs a Capacity Block: 2 x p5.48xlarge in us-east-1, '
            "2026-12-05T11:30:00Z -> 2026-12-14T11:30:00Z, about $16,990.56 upfront. This is an "
            "ESTIMATE from the published rate $39.3300 per instance-hour "
            "(aws-capacity-blocks-pricing, published 2024-12-31)") in text
    assert "never pinned or approved" in text and "gpulease catalog quotes --source live" in text
    assert quote["capacityBlockOfferingId"] not in text and "offering_id:" not in text


def test_an_unapproved_pin_stops_and_a_pin_that_no_longer_fits_too():
    c = pinned(make_cluster(purchase=PurchaseMix(reserved=2, spot=2)), purchase_approved=False)
    with pytest.raises(GuardrailError, match="capacity_block.purchase_approved: pinned Capacity "
                                             "Block cb-0123456789abcdef0 .* is not approved"):
        run(make_env([c], [make_storage()], capacity_blocks=True))
    c = pinned(make_cluster(purchase=PurchaseMix(reserved=2, spot=2)), instance_count=1)
    with pytest.raises(GuardrailError) as exc:
        run(make_env([c], [make_storage()], capacity_blocks=True))
    assert ("the pinned block no longer fits the plan: instance_count is 1, the plan needs 2"
            in str(exc.value)) and "the only way forward is buying another" in str(exc.value)


def test_spot_events_go_to_sns(staging):
    rules = staging.by_type("aws:cloudwatch/eventRule:EventRule")
    patterns = {json.loads(x.inputs["eventPattern"])["detail-type"][0] for x in rules}
    assert patterns == {"EC2 Spot Instance Interruption Warning",
                        "EC2 Instance Rebalance Recommendation"}
    topic = staging.one("aws:sns/topic:Topic")
    for t in staging.by_type("aws:cloudwatch/eventTarget:EventTarget"):
        assert t.inputs["arn"] == topic.outputs["arn"], t.urn
    assert topic.outputs["arn"] == f"arn:aws:sns:us-east-1:123456789012:{topic.physical_name}"
    pol = json.loads(staging.one("aws:sns/topicPolicy:TopicPolicy").inputs["policy"])
    assert pol["Statement"][0]["Principal"] == {"Service": "events.amazonaws.com"}


def test_no_spot_events_when_no_spot():
    c = make_cluster(purchase=PurchaseMix(reserved=2))
    r = run(make_env([c], [make_storage()]))
    assert not r.by_type("aws:cloudwatch/eventRule:EventRule")


def test_iam_least_privilege(staging):
    role = staging.one("aws:iam/role:Role", "train-role")
    trust = json.loads(role.inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}, role.urn
    pol = json.loads(staging.one("aws:iam/rolePolicy:RolePolicy", "train-node-policy")
                     .inputs["policy"])
    by_sid = {s["Sid"]: s for s in pol["Statement"]}
    assert by_sid["ReadDataset"]["Resource"] == "arn:aws:s3:::gpulease-staging-corpus/data/*"
    assert by_sid["ReadWriteCheckpoints"]["Resource"] == \
        "arn:aws:s3:::gpulease-staging-corpus/checkpoints/train/*"
    att = staging.one("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "train-ssm")
    assert att.inputs["policyArn"] == "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
    assert not [a for a in staging.by_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
                if "FullAccess" in a.inputs["policyArn"] or "Administrator" in a.inputs["policyArn"]]


def test_cluster_away_from_its_data_gets_a_work_bucket():
    c = make_cluster("far", "p5en.48xlarge", region="us-west-2", purchase=PurchaseMix(spot=2))
    r = run(make_env([c], [make_storage()], env="prod"))
    wb = r.one(BUCKET, "far-work-bucket")
    assert wb.inputs["bucket"] == "gpulease-prod-far-work", wb.urn
    assert wb.protect and wb.retain_on_delete, wb.urn
    assert r.one("gpulease:aws:Storage", "far-work").parent == \
        r.one("gpulease:aws:GpuCluster", "far").urn
    pol = json.loads(r.one("aws:iam/rolePolicy:RolePolicy", "far-node-policy").inputs["policy"])
    by_sid = {s["Sid"]: s for s in pol["Statement"]}
    assert by_sid["ReadDataset"]["Resource"] == "arn:aws:s3:::gpulease-prod-far-work/stage/*"
    assert by_sid["ReadWriteCheckpoints"]["Resource"] == \
        "arn:aws:s3:::gpulease-prod-far-work/checkpoints/far/*"
    # the work bucket carries the data-gravity (egress) cost, the cluster's ASG does not
    assert r.ledger.get(BUCKET, "far-work-bucket").monthly_usd == pytest.approx(33.0)
    assert r.ledger.get(ASG, "far-asg").monthly_usd == pytest.approx(2 * 210.0 + 12.0)
    lc = r.one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
               "far-work-lifecycle")
    assert [x["id"] for x in lc.inputs["rules"]] == ["expire-noncurrent",
                                                     "abort-incomplete-uploads"], lc.urn


def test_existing_vpc_and_subnets_are_used():
    c = make_cluster("x", "g6.xlarge", purchase=PurchaseMix(spot=2), distributed=False,
                     dataset=None)
    r = run(make_env([c], network="vpc-0abc", subnets=("subnet-1", "subnet-2")))
    assert not r.by_type("aws:ec2/vpc:Vpc") and not r.by_type("aws:ec2/natGateway:NatGateway")
    asg = r.one(ASG, "x-asg")
    assert asg.inputs["vpcZoneIdentifiers"] == ["subnet-1", "subnet-2"], asg.urn
    assert r.one(SG, "x-sg").inputs["vpcId"] == "vpc-0abc"


def test_existing_vpc_with_clusters_in_two_regions_is_a_config_error():
    env = make_env([make_cluster("a", purchase=PurchaseMix(spot=1), dataset=None),
                    make_cluster("b", "p5en.48xlarge", region="us-west-2",
                                 purchase=PurchaseMix(spot=1), dataset=None)],
                   network="vpc-0abc", subnets=("subnet-1",))
    with pytest.raises(ConfigError) as exc:
        deploy(env, CATALOG)
    assert str(exc.value).startswith(
        'stacks/Pulumi.staging.yaml: gpulease:clouds.aws.vpc_id: VPC "vpc-0abc" is used, but '
        "the plan puts AWS clusters in us-east-1, us-west-2;")


def test_created_network_is_private_with_nat_and_s3_endpoint(staging):
    nat = staging.one("aws:ec2/natGateway:NatGateway")
    pub = staging.one("aws:ec2/subnet:Subnet", "aws-us-east-1-net-public")
    assert nat.inputs["subnetId"] == f"{pub.name}-id", nat.urn
    rt = staging.one("aws:ec2/routeTable:RouteTable", "aws-us-east-1-net-private-rt")
    assert rt.inputs["routes"] == [{"cidrBlock": "0.0.0.0/0",
                                    "natGatewayId": f"{nat.name}-id"}], rt.urn
    ep = staging.one("aws:ec2/vpcEndpoint:VpcEndpoint")
    assert ep.inputs["serviceName"] == "com.amazonaws.us-east-1.s3", ep.urn
    assert ep.inputs["vpcEndpointType"] == "Gateway", ep.urn


def test_decided_zone_is_used_for_subnet_and_reservation():
    c = make_cluster(zone="us-east-1d")
    r = run(make_env([c], [make_storage()]))
    subnets = [s for s in r.by_type("aws:ec2/subnet:Subnet") if "private" in s.name]
    assert [s.inputs["availabilityZone"] for s in subnets] == ["us-east-1d"]
    assert r.one(ODCR).inputs["availabilityZone"] == "us-east-1d"


def test_user_data_is_the_rendered_bootstrap(staging):
    lt = staging.one(LT, "train-lt")
    raw = base64.b64decode(lt.inputs["userData"])
    assert len(raw) <= 16 * 1024, f"{lt.urn}: user data {len(raw)} bytes > EC2's 16 KB limit"
    text = gzip.decompress(raw).decode()
    assert text.startswith("#cloud-config"), lt.urn


# ---- cost context -----------------------------------------------------------------------------
def test_cost_tags_and_costs_add_up(staging):
    asg = staging.one(ASG, "train-asg")
    got = {t["key"]: t for t in asg.inputs["tags"]}
    for k in tags.REQUIRED_AWS + (tags.IDLE_MINUTES,):
        assert got[k]["propagateAtLaunch"] is True, (asg.urn, k)
    assert got[tags.CLUSTER]["value"] == "train" and got[tags.IDLE_MINUTES]["value"] == "45"
    assert got[tags.PURCHASE_MODEL]["value"] == "mixed"
    per_cluster = staging.ledger.by_cluster()
    assert per_cluster["train"] == pytest.approx(2000 + 500 + 210 + 33 + 12)
    assert staging.ledger.get(ODCR, "train-odcr").monthly_usd == pytest.approx(2000.0)
    assert staging.ledger.get(BUCKET, "corpus-bucket").cluster == tags.SHARED
    assert staging.ledger.get(BUCKET, "corpus-bucket").monthly_usd == money.usd("181.76")
    for res in staging.custom:
        if isinstance(res.inputs.get("tags"), dict):
            assert set(tags.REQUIRED_AWS) <= set(res.inputs["tags"]), res.urn


# ---- storage ---------------------------------------------------------------------------------
def _storage_children(r, name):
    comp = r.one("gpulease:aws:Storage", name)
    return [x for x in r.custom if x.parent == comp.urn]


@pytest.mark.parametrize("env,protect", [("staging", False), ("prod", True)])
def test_storage_bucket_guard_rails(env, protect):
    r = run(make_env([], [make_storage(warm_after_days=30, cold_after_days=120)], env=env))
    b = r.one(BUCKET, "corpus-bucket")
    assert b.inputs["bucket"] == f"gpulease-{env}-corpus", b.urn
    for x in _storage_children(r, "corpus"):
        assert x.retain_on_delete, x.urn
        assert x.protect is protect, x.urn
    pab = r.one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    for flag in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                 "restrictPublicBuckets"):
        assert pab.inputs[flag] is True, (pab.urn, flag)
    ver = r.one("aws:s3/bucketVersioning:BucketVersioning")
    assert ver.inputs["versioningConfiguration"] == {"status": "Enabled"}, ver.urn
    sse = r.one("aws:s3/bucketServerSideEncryptionConfiguration:"
                "BucketServerSideEncryptionConfiguration")
    assert sse.inputs["rules"] == [{"applyServerSideEncryptionByDefault": {
        "sseAlgorithm": "aws:kms"}, "bucketKeyEnabled": True}], sse.urn
    own = r.one("aws:s3/bucketOwnershipControls:BucketOwnershipControls")
    assert own.inputs["rule"] == {"objectOwnership": "BucketOwnerEnforced"}, own.urn
    pol = json.loads(r.one("aws:s3/bucketPolicy:BucketPolicy").inputs["policy"])
    assert pol["Statement"][0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert pol["Statement"][0]["Resource"][0] == f"arn:aws:s3:::{b.inputs['bucket']}"
    lc = r.one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
    rules = {x["id"]: x for x in lc.inputs["rules"]}
    assert [(t["days"], t["storageClass"]) for t in rules["tiering"]["transitions"]] == [
        (30, "STANDARD_IA"), (120, "GLACIER_IR"), (365, "DEEP_ARCHIVE")], lc.urn
    assert rules["expire-noncurrent"]["noncurrentVersionExpiration"] == {"noncurrentDays": 30}
    assert not r.by_type("gpulease:aws:GpuCluster") and not r.by_type("gpulease:aws:Network")


def test_bad_storage_days_fail_with_the_config_path():
    env = make_env([], [make_storage(warm_after_days=7)])
    with pytest.raises(ConfigError) as exc:
        deploy(env, CATALOG)
    assert "gpulease:storage[0].warm_after_days: S3 moves objects to STANDARD_IA no earlier " \
           "than day 30 (got 7)" in str(exc.value)


def test_gcp_only_decision_declares_nothing_on_aws():
    env = make_env([], [])
    assert deploy(env, CATALOG) == []


# ---- every literal checked against botocore's service models ---------------------------------
def _asg_doc_values(member):
    doc = AUTOSCALING.shape_for("InstancesDistribution").members[member].documentation
    return set(re.findall(r"<dt>([a-z-]+)", doc))


def _literals(r):
    out = []
    for x in r.custom:
        i = x.inputs
        if x.type == LT:
            out += [("ec2", "InstanceType", i["instanceType"])]
            out += [("ec2", "NetworkInterfaceType", n["interfaceType"])
                    for n in i["networkInterfaces"]]
            out += [("ec2", "VolumeType", b["ebs"]["volumeType"])
                    for b in i["blockDeviceMappings"]]
            out += [("ec2", "LaunchTemplateHttpTokensState", i["metadataOptions"]["httpTokens"])]
            if "instanceMarketOptions" in i:
                out += [("ec2", "MarketType", i["instanceMarketOptions"]["marketType"])]
        elif x.type == ASG:
            mip = i.get("mixedInstancesPolicy")
            if mip:
                d = mip["instancesDistribution"]
                out += [("asg", "SpotAllocationStrategy", d["spotAllocationStrategy"]),
                        ("asg", "OnDemandAllocationStrategy", d["onDemandAllocationStrategy"])]
                out += [("ec2", "InstanceType", o["instanceType"])
                        for o in mip["launchTemplate"]["overrides"]]
            if "capacityReservationSpecification" in i:
                out += [("autoscaling", "CapacityReservationPreference",
                         i["capacityReservationSpecification"]["capacityReservationPreference"])]
        elif x.type == ODCR:
            out += [("ec2", "InstanceType", i["instanceType"]),
                    ("ec2", "InstanceMatchCriteria", i["instanceMatchCriteria"]),
                    ("ec2", "CapacityReservationInstancePlatform", i["instancePlatform"]),
                    ("ec2", "EndDateType", i["endDateType"])]
        elif x.type == "aws:ec2/placementGroup:PlacementGroup":
            out += [("ec2", "PlacementStrategy", i["strategy"])]
        elif x.type.endswith("BucketLifecycleConfiguration"):
            for rule in i["rules"]:
                out += [("s3", "ExpirationStatus", rule["status"])]
                out += [("s3", "TransitionStorageClass", t["storageClass"])
                        for t in rule.get("transitions", [])]
        elif x.type.endswith("BucketServerSideEncryptionConfiguration"):
            out += [("s3", "ServerSideEncryption",
                     rule["applyServerSideEncryptionByDefault"]["sseAlgorithm"])
                    for rule in i["rules"]]
        elif x.type.endswith("BucketOwnershipControls"):
            out += [("s3", "ObjectOwnership", i["rule"]["objectOwnership"])]
        elif x.type.endswith("BucketVersioning"):
            out += [("s3", "BucketVersioningStatus", i["versioningConfiguration"]["status"])]
    return out


def test_every_literal_is_valid_for_botocore(staging):
    r2 = run(make_env([make_cluster("g", "g6.8xlarge", purchase=PurchaseMix(on_demand=1, spot=3),
                                    distributed=False, dataset=None)]))
    lits = _literals(staging) + _literals(r2)
    kinds = {(svc, shape) for svc, shape, _ in lits}
    assert ("ec2", "NetworkInterfaceType") in kinds and ("s3", "TransitionStorageClass") in kinds
    models = {"ec2": EC2, "s3": S3, "autoscaling": AUTOSCALING}
    for svc, shape, value in lits:
        if svc == "asg":
            valid = _asg_doc_values(shape)
        else:
            valid = enum(models[svc], shape)
        assert value in valid, f"{value!r} is not a valid {svc} {shape}"


# ---- every AWS offering of the shipped catalog ------------------------------------------------
def test_a_cluster_for_every_aws_offering_in_the_catalog():
    offers = CATALOG.offerings_for(cloud="aws")
    assert len(offers) >= 10
    clusters = []
    for i, o in enumerate(offers):
        dist = o.rdma == "efa"
        purchase = PurchaseMix(reserved=1, on_demand=0, spot=1) if o.spot_usd else \
            PurchaseMix(reserved=1, on_demand=1)
        clusters.append(make_cluster(f"c{i}", o.instance_type, region=o.region,
                                     purchase=purchase, distributed=dist, dataset=None,
                                     index=i))
    r = run(make_env(clusters, env="prod"))
    valid_types = enum(EC2, "InstanceType")
    valid_ni = enum(EC2, "NetworkInterfaceType")
    for i, o in enumerate(offers):
        lt = r.one(LT, f"c{i}-lt")
        assert lt.inputs["instanceType"] == o.instance_type in valid_types, lt.urn
        nis = lt.inputs["networkInterfaces"]
        assert {n["interfaceType"] for n in nis} <= valid_ni, lt.urn
        expected = (o.efa_interfaces or o.network_cards or 1) if o.rdma == "efa" else 1
        assert len(nis) == expected, lt.urn
        assert (nis[0]["interfaceType"] == "efa") is (o.rdma == "efa"), lt.urn
        assert r.one(ODCR, f"c{i}-odcr").inputs["instanceType"] == o.instance_type
        asg = r.one(ASG, f"c{i}-asg")
        assert asg.inputs["desiredCapacity"] == 2, asg.urn
        assert bool(asg.inputs.get("placementGroup")) is (o.rdma == "efa"), asg.urn


# ---- zones and lookups answered from data (gpulease/planner/data/lookups.json) --------------------
def test_a_zone_id_places_subnet_by_id_and_reservation_by_its_name():
    c = make_cluster(zone="use1-az4")
    r = run(make_env([c], [make_storage()]))
    (sub,) = [s for s in r.by_type("aws:ec2/subnet:Subnet") if "private" in s.name]
    assert sub.inputs["availabilityZoneId"] == "use1-az4" and "availabilityZone" not in sub.inputs
    # the lookup maps IDs to names consistently: the 4th zone ID is the account's "d"
    assert r.one(ODCR).inputs["availabilityZone"] == "us-east-1d"


@pytest.mark.parametrize("zone", ["us-east-1z", "use1-az9"])
def test_a_zone_the_region_does_not_have_is_a_located_error(zone):
    with pytest.raises(ConfigError) as exc:
        run(make_env([make_cluster(zone=zone)], [make_storage()]))
    assert (f'stacks/Pulumi.staging.yaml: gpulease:clusters[0]: cluster "train" is placed in '
            f'zone "{zone}", which us-east-1 does not have') in str(exc.value)


def test_no_capacity_block_offering_is_a_located_error():
    """Today's main assumed an offering always exists; a real preview fails without one."""
    lookups = copy.deepcopy(mocks.load_lookups())
    lookups["aws"]["capacity_block_offerings"] = []
    env = make_env([make_cluster(purchase=PurchaseMix(reserved=2, spot=2))], [make_storage()],
                   capacity_blocks=True)

    def program():
        transform.register(env.stack, CATALOG)
        return deploy(env, CATALOG)
    with pytest.raises(ConfigError) as exc:
        run_program(program, stack="staging", lookups=lookups)
    text = str(exc.value)
    assert text.startswith("stacks/Pulumi.staging.yaml: gpulease:clusters[0]: no EC2 Capacity "
                           "Block offering for 2 x p5.48xlarge for 216 h in us-east-1 (")
    assert "set gpulease:clouds.aws.capacity_blocks: false" in text


def test_the_pinned_block_lands_in_its_zone():
    c = pinned(make_cluster(purchase=PurchaseMix(reserved=2, spot=2)),
               availability_zone="us-east-1b")
    r = run(make_env([c], [make_storage()], capacity_blocks=True))
    assert not [a for t, a in r.calls if t.endswith("getCapacityBlockOffering")]
    basg = r.one(ASG, "train-block-asg")
    (sub,) = [s for s in r.by_type("aws:ec2/subnet:Subnet")
              if f"{s.name}-id" in basg.inputs["vpcZoneIdentifiers"]]
    assert _zone_name(sub) == "us-east-1b"


def _zone_name(subnet) -> str:
    """A subnet's AZ name: declared by name, or by zone ID mapped as the region's
    getAvailabilityZones answers (the offline data: gpulease/planner/data/lookups.json)."""
    if "availabilityZone" in subnet.inputs:
        return subnet.inputs["availabilityZone"]
    from gpulease.planner.mocks import load_lookups

    zid = subnet.inputs["availabilityZoneId"]
    region = [r for r, zs in load_lookups()["aws"]["zones"].items()
              if any(z["id"] == zid for z in zs)][0]
    return {z["id"]: z["name"] for z in load_lookups()["aws"]["zones"][region]}[zid]


# ---- issue 37 item 2: window work on spot gets an on-demand group at zero -----------------------
def spot_window(c: ClusterDecision, duration: float = 6.0) -> ClusterDecision:
    """``c`` as window work the policy put on spot (a 10 h window, ``duration`` h of work)."""
    from gpulease.model import Window, WindowDecision
    from gpulease.purchase import SPOT

    import datetime as dt

    start = dt.datetime(2026, 12, 10, 8, tzinfo=dt.timezone.utc)
    end = dt.datetime(2026, 12, 10, 18, tzinfo=dt.timezone.utc)
    w = Window(start, end, duration)
    wd = WindowDecision(window=w, model=SPOT, start=start, end=start, run_hours=duration,
                        total_usd=100.0, monthly_usd=100.0, months=1, nodes=c.nodes,
                        billed_node_hours=duration * c.nodes, estimated=False, quote=None,
                        options=(), judged_at=start)
    return dataclasses.replace(c, window=wd, spec=dataclasses.replace(c.spec, window=w))


def test_spot_window_work_declares_an_on_demand_group_at_zero():
    from gpulease import deadline
    from gpulease.purchase import ON_DEMAND, SPOT

    c = spot_window(make_cluster("win", "g6.xlarge", purchase=PurchaseMix(spot=2), nodes=2,
                                 distributed=False, dataset=None))
    r = run(make_env([c], env="dev"))
    spot, od = r.one(ASG, "win-asg"), r.one(ASG, "win-od-asg")
    assert od.inputs["desiredCapacity"] == 0 and od.inputs["maxSize"] == 2, od.urn
    assert set(od.ignore_changes) == {"desiredCapacity", "minSize"}, od.urn
    dist = od.inputs["mixedInstancesPolicy"]["instancesDistribution"]
    assert dist["onDemandBaseCapacity"] == 2 and dist["onDemandPercentageAboveBaseCapacity"] \
        == 100, od.urn
    assert od.inputs["mixedInstancesPolicy"]["launchTemplate"]["overrides"] == \
        spot.inputs["mixedInstancesPolicy"]["launchTemplate"]["overrides"]
    assert od.inputs["vpcZoneIdentifiers"] == spot.inputs["vpcZoneIdentifiers"]
    st = {t["key"]: t["value"] for t in spot.inputs["tags"]}
    ot = {t["key"]: t["value"] for t in od.inputs["tags"]}
    assert st[tags.DEADLINE_GROUP] == SPOT and ot[tags.DEADLINE_GROUP] == ON_DEMAND
    for t in (st, ot):
        assert t[tags.CLUSTER] == "win" and set(tags.REQUIRED_AWS) <= set(t)
        assert t[tags.DEADLINE_START] == "20261210t0800z"
        assert t[tags.DEADLINE] == "20261210t1800z"
        assert t[tags.DEADLINE_WORK_MINUTES] == "360"
        # checkpoint every 30 min (half lost on average) + the policy's 10 min restart
        assert t[tags.DEADLINE_RESTART_MINUTES] == "25"
        assert t[tags.DEADLINE_PROGRESS].startswith("s3://")
        assert t[tags.DEADLINE_PROGRESS].endswith("/" + deadline.PROGRESS_OBJECT)
    # priced at zero: it runs nothing until the deadline step switches to it
    assert ot[tags.PURCHASE_MODEL] == ON_DEMAND and ot[tags.MONTHLY_USD] == "0.00"
    assert ot.get(tags.ONE_TIME_USD, "0.00") == "0.00"
    od_e, spot_e = r.ledger.get(ASG, "win-od-asg"), r.ledger.get(ASG, "win-asg")
    assert od_e.monthly_usd == money.ZERO and od_e.one_time_usd == money.ZERO
    # (a window's cost is one-time: on the spot group)
    assert st[tags.PURCHASE_MODEL] == SPOT
    assert spot_e.monthly_usd + spot_e.one_time_usd > money.ZERO
    assert r.one(LT, "win-od-lt")


def test_no_on_demand_group_without_spot_window_work():
    c = make_cluster("plain", "g6.xlarge", purchase=PurchaseMix(spot=2), nodes=2,
                     distributed=False, dataset=None)
    r = run(make_env([c], env="dev"))
    assert [a.name for a in r.by_type(ASG)] == ["plain-asg"]
    assert tags.DEADLINE_GROUP not in {t["key"] for t in r.one(ASG, "plain-asg").inputs["tags"]}
