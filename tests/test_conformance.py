"""Conformance (issue 12 item 2): every rule on a planted bad resource, the shipped and stress
stacks clean, the spec plumbing (botocore models, compute_v1 enums, google-cloud-storage), and
`gpulease plan` exiting 4 with located findings."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pulumi
import pulumi_aws as aws
import pulumi_gcp as gcp
import pytest
import yaml

from gpulease import tags
from gpulease.cli import main
from gpulease.conformance import check, has_errors, physical_name, specs
from tools import conformance_specs as generate
from gpulease.conformance import names as N
from gpulease.conformance import tables
from gpulease.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_POLICY
from gpulease.planner.mocks import run_program
from tests.conftest import ROOT, SHIPPED_STACKS, program_run
from tests.timeouts import HANG_S

FINDING_KEYS = {"level", "rule", "resource", "type", "name", "physical_name", "path", "value",
                "message", "spec"}


def findings(program, stack="dev"):
    return check(run_program(program, stack=stack).resources)


def only(found, rule):
    return [f for f in found if f["rule"] == rule]


_T = {"gpulease-cluster": "c"}


# ---- the specs themselves --------------------------------------------------------------------
def test_shipped_specs_are_what_the_installed_libraries_say():
    """gpulease/conformance/data/specs.json regenerated from botocore, google-cloud-compute and
    google-cloud-storage is byte for byte the shipped file (a new table row, a changed
    REFS_OUTSIDE_TABLES or a new library pin must regenerate it)."""
    fresh = generate.render(generate.generate())
    shipped = specs.DATA.read_text(encoding="utf-8")
    if fresh != shipped:
        old, new = json.loads(shipped), json.loads(fresh)
        differ = sorted(k for k in set(old["constraints"]) | set(new["constraints"])
                        if old["constraints"].get(k) != new["constraints"].get(k))
        pytest.fail(f"{specs.DATA} is stale (libraries {old['libraries']} -> "
                    f"{new['libraries']}; {len(differ)} constraints differ, e.g. {differ[:3]}): "
                    f"run `{specs.REGENERATE}`")
    assert specs.libraries() == json.loads(fresh)["libraries"]


def test_a_reference_the_data_lacks_says_how_to_regenerate():
    with pytest.raises(KeyError, match="tools.conformance_specs"):
        specs.aws_param("ec2", "CreateLaunchTemplate", "LaunchTemplateData.NoSuchMember")


def test_the_plan_reads_constants_without_importing_the_client_libraries():
    """`gpulease plan` checks conformance from the shipped data: google-cloud-compute,
    google-cloud-storage and botocore are imported only to call an API (issue 23 item 2)."""
    import subprocess
    import sys

    probe = ("import sys\nfrom gpulease.cli import main\ntry:\n    main(['plan', '--stack', 'prod'])\n"
             "except SystemExit as e:\n    assert e.code == 0, e.code\n"
             "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('botocore', 'boto3')"
             " or m.startswith(('google.cloud', 'google.api_core')))\n"
             "sys.stderr.write('HEAVY=' + ','.join(heavy))\n")
    p = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                       timeout=HANG_S)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Conformance: every constrained input matches" in p.stdout
    assert p.stderr.rsplit("HEAVY=", 1)[1] == "", p.stderr.rsplit("HEAVY=", 1)[1][:500]


def test_specs_come_from_the_installed_libraries():
    c = specs.aws_param("ec2", "CreateLaunchTemplate",
                        "LaunchTemplateData.InstanceMarketOptions.MarketType")
    assert "spot" in c.enum and "capacity-block" in c.enum
    assert "botocore" in c.spec and "ec2 2016-11-15" in c.spec and "MarketType enum" in c.spec
    role = specs.aws_param("iam", "CreateRole", "RoleName")
    assert (role.min_len, role.max_len) == (1, 64)
    asg = specs.aws_param("autoscaling", "CreateAutoScalingGroup",
                          "MixedInstancesPolicy.InstancesDistribution.SpotAllocationStrategy")
    assert "price-capacity-optimized" in asg.enum and "documentation" in asg.spec
    assert "SPOT" in specs.gcp_enum("Scheduling", "ProvisioningModel").enum
    assert "UNDEFINED_PROVISIONING_MODEL" not in specs.gcp_enum("Scheduling",
                                                                "ProvisioningModel").enum
    assert specs.gce_name().pattern == "[a-z]([-a-z0-9]*[a-z0-9])?"
    assert specs.gce_name().max_len == 63
    assert specs.gce_base_instance_name().max_len == 58
    assert (specs.gcp_range("Network", "mtu").minimum,
            specs.gcp_range("Network", "mtu").maximum) == (1300, 8896)
    assert "ARCHIVE" in specs.gcs_storage_classes().enum
    assert specs.gcs_lifecycle_actions().enum == ("Delete", "SetStorageClass",
                                                  "AbortIncompleteMultipartUpload")
    # the shipped data says what the generator reads from the library
    assert generate.gcp_enum("Scheduling", "ProvisioningModel") == specs.gcp_enum(
        "Scheduling", "ProvisioningModel")


def test_every_table_row_resolves_to_a_real_constraint():
    for rtype, rows in {**tables.AWS, **tables.GCP}.items():
        for row in rows:
            c = row.constraint()
            assert c.enum or c.pattern or c.max_len or c.min_len or c.maximum is not None, \
                (rtype, row.path, c.spec)


def test_java_patterns_translate_and_unicode_classes_only_where_underscore_is_allowed():
    import botocore.loaders

    used = set()
    for service in ("iam", "autoscaling", "events", "lambda", "logs", "ec2", "datasync"):
        model = botocore.loaders.Loader().load_service_model(service, "service-2")
        for shape in model["shapes"].values():
            p = shape.get("pattern")
            if p and ("\\p{L}" in p or "\\p{N}" in p):
                used.add(p)
                # \p{L} / \p{N} become \w, which adds "_": only sound where "_" is allowed
                # (explicitly, or through \p{P}, whose connector punctuation includes "_").
                assert "_" in p or "\\p{P}" in p, p
                translated = generate.java_pattern(p)
                assert translated is None or "\\p{" not in translated
    assert used
    # every pattern the tables use translates (none is silently dropped)
    for rows in {**tables.AWS}.values():
        for row in rows:
            c = row.constraint()
            assert "\\p{" not in (c.pattern or "")
    tag = generate.java_pattern("[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]+")
    import re

    assert re.fullmatch(tag, "gpulease-owner é 1_:/=+@")
    assert not re.fullmatch(tag, "bad#key")
    xml = generate.java_pattern("[\\u0020-\\uD7FF\\uE000-\\uFFFD\\uD800\\uDC00-\\uDBFF\\uDFFF\\r\\n\\t]*")
    assert re.fullmatch(xml, "ok \U0001F600") and not re.fullmatch(xml, "\x00")


# ---- each rule on a planted bad resource ------------------------------------------------------
def _lt(**kw):
    return aws.ec2.LaunchTemplate("nodes", name="gpulease-nodes", tags=dict(_T), **kw)


def _tpl(name="gpu-template", **kw):
    args = dict(name=name, machine_type="a3-highgpu-8g",
                disks=[{"source_image": "img", "boot": True}],
                network_interfaces=[{"subnetwork": "s"}])
    args.update(kw)
    return gcp.compute.InstanceTemplate(name, **args)


# (id, program, rule, input path, fragment of the message, fragment of the spec)
PLANTED = [
    ("aws-enum-market-type", lambda: _lt(instance_market_options={"market_type": "spotty"}),
     "enum", "instanceMarketOptions.marketType", 'did you mean "spot"', "MarketType enum"),
    ("aws-enum-instance-type", lambda: _lt(instance_type="p5.96xlarge"), "enum", "instanceType",
     '"p5.96xlarge" is not a valid value', "InstanceType enum"),
    ("aws-enum-interruption", lambda: _lt(instance_market_options={
        "market_type": "spot", "spot_options": {"instance_interruption_behavior": "pause"}}),
     "enum", "instanceMarketOptions.spotOptions.instanceInterruptionBehavior", "valid:",
     "InstanceInterruptionBehavior"),
    ("aws-enum-volume-type", lambda: _lt(block_device_mappings=[
        {"device_name": "/dev/sda1", "ebs": {"volume_type": "gp4"}}]), "enum",
     "blockDeviceMappings[0].ebs.volumeType", 'did you mean "gp3"', "VolumeType"),
    ("aws-enum-imds", lambda: _lt(metadata_options={"http_tokens": "require"}), "enum",
     "metadataOptions.httpTokens", 'did you mean "required"', "HttpTokens"),
    ("aws-asg-spot-strategy", lambda: aws.autoscaling.Group(
        "asg", name="gpulease-asg", max_size=1, min_size=0, mixed_instances_policy={
            "instances_distribution": {"spot_allocation_strategy": "price-capacity-optimised"},
            "launch_template": {"launch_template_specification": {"launch_template_id": "lt-1"},
                                "overrides": [{"instance_type": "p5.48xlarge"}]}}),
     "enum", "mixedInstancesPolicy.instancesDistribution.spotAllocationStrategy",
     'did you mean "price-capacity-optimized"', "autoscaling 2011-01-01"),
    ("aws-asg-override-instance-type", lambda: aws.autoscaling.Group(
        "asg", name="gpulease-asg", max_size=1, min_size=0, mixed_instances_policy={
            "launch_template": {"launch_template_specification": {"launch_template_id": "lt-1"},
                                "overrides": [{"instance_type": "p5.48xlargee"}]}}),
     "enum", "mixedInstancesPolicy.launchTemplate.overrides[0].instanceType",
     'did you mean "p5.48xlarge"', "ec2 2016-11-15"),
    ("aws-placement-strategy", lambda: aws.ec2.PlacementGroup("pg", strategy="clustered"),
     "enum", "strategy", 'did you mean "cluster"', "PlacementStrategy"),
    ("aws-capacity-reservation-platform", lambda: aws.ec2.CapacityReservation(
        "odcr", instance_type="p5.48xlarge", instance_platform="Linux", instance_count=1,
        availability_zone="us-east-1a"), "enum", "instancePlatform", "valid:",
     "CapacityReservationInstancePlatform"),
    ("s3-lifecycle-storage-class", lambda: aws.s3.BucketLifecycleConfiguration(
        "lc", bucket="b", rules=[{"id": "t", "status": "Enabled", "transitions": [
            {"days": 30, "storage_class": "GLACIER_DEEP"}]}]), "enum",
     "rules[0].transitions[0].storageClass", "valid:", "TransitionStorageClass"),
    ("iam-role-name-length", lambda: aws.iam.Role("role", name="r" * 65,
                                                  assume_role_policy="{\"Statement\": []}"),
     "length", "name", "the maximum is 64", "roleNameType"),
    ("iam-profile-name-pattern", lambda: aws.iam.InstanceProfile("ip", name="gpu nodes!"),
     "pattern", "name", "does not match", "instanceProfileNameType"),
    ("iam-session-range", lambda: aws.iam.Role("role", name="r", max_session_duration=60,
                                               assume_role_policy="{\"Statement\": []}"),
     "range", "maxSessionDuration", "below the minimum 3600", "roleMaxSessionDurationType"),
    ("lambda-memory-range", lambda: aws.lambda_.Function(
        "fn", name="fn", role="arn:aws:iam::1:role/r", runtime="python3.12", handler="h.h",
        memory_size=64, code=pulumi.AssetArchive({})), "range", "memorySize",
     "below the minimum 128", "MemorySize"),
    ("lambda-runtime-enum", lambda: aws.lambda_.Function(
        "fn", name="fn", role="arn:aws:iam::1:role/r", runtime="python3.99", handler="h.h",
        code=pulumi.AssetArchive({})), "enum", "runtime", "valid:", "Runtime enum"),
    ("events-rule-name-pattern", lambda: aws.cloudwatch.EventRule(
        "rule", name="reaper schedule", schedule_expression="rate(15 minutes)"), "pattern",
     "name", "does not match", "RuleName"),
    ("launch-template-name-length", lambda: aws.ec2.LaunchTemplate("lt", name="lt"), "length",
     "name", "the minimum is 3", "LaunchTemplateName"),
    ("s3-bucket-name", lambda: aws.s3.Bucket("b", bucket="Gpulease_Prod"), "name", "bucket",
     "lowercase letters", "bucket naming rules"),
    ("s3-bucket-name-too-long", lambda: aws.s3.Bucket("b", bucket="g" * 64), "name", "bucket",
     "3-63", "bucket naming rules"),
    ("s3-bucket-name-ip", lambda: aws.s3.Bucket("b", bucket="192.168.1.1"), "name", "bucket",
     "IP address", "bucket naming rules"),
    ("aws-tag-key-length", lambda: aws.ec2.Vpc("vpc", cidr_block="10.0.0.0/16",
                                               tags={"k" * 129: "v"}),
     "tag-key", "tags." + "k" * 129, "the maximum is 128", "TagKey"),
    ("aws-tag-value-length", lambda: aws.ec2.Vpc("vpc", cidr_block="10.0.0.0/16",
                                                 tags={"owner": "v" * 257}),
     "tag-value", "tags.owner", "the maximum is 256", "TagValue"),
    ("aws-tag-key-chars", lambda: aws.ec2.Vpc("vpc", cidr_block="10.0.0.0/16",
                                              tags={"cost#center": "x"}),
     "tag-key", "tags.cost#center", "does not match", "tagKeyType"),
    ("aws-tag-reserved-prefix", lambda: aws.ec2.Vpc("vpc", cidr_block="10.0.0.0/16",
                                                    tags={"aws:owner": "x"}),
     "tag-key", "tags.aws:owner", "reserved 'aws:' prefix", "Tagging AWS resources"),
    ("aws-tag-count", lambda: aws.ec2.Vpc("vpc", cidr_block="10.0.0.0/16",
                                          tags={f"k{i}": "v" for i in range(51)}),
     "tag-count", "tags", "51 tags", "tag limits"),
    ("aws-asg-tag-list", lambda: aws.autoscaling.Group(
        "asg", name="gpulease-asg", max_size=1, min_size=0,
        tags=[{"key": "o" * 129, "value": "x", "propagate_at_launch": True}]),
     "tag-key", "tags[0]", "the maximum is 128", "TagKey"),
    ("cidr-malformed", lambda: aws.ec2.Subnet("sub", vpc_id="vpc-1", cidr_block="10.0.0.0/33"),
     "cidr", "cidrBlock", "not a valid CIDR", "ipaddress"),
    ("cidr-gcp-firewall", lambda: gcp.compute.Firewall(
        "fw", name="fw", network="n", allows=[{"protocol": "tcp"}], source_ranges=["10.0.0/8"]),
     "cidr", "sourceRanges[0]", "not a valid CIDR", "ipaddress"),
    ("policy-json", lambda: aws.iam.RolePolicy("p", role="r", policy="{not json"), "json",
     "policy", "not valid JSON", "IAM JSON policy"),
    ("gcp-enum-provisioning-model", lambda: _tpl(scheduling={"provisioning_model": "SPOTT"}),
     "enum", "scheduling.provisioningModel", 'did you mean "SPOT"',
     "compute_v1.Scheduling.ProvisioningModel"),
    ("gcp-enum-termination", lambda: _tpl(scheduling={"instance_termination_action": "HALT"}),
     "enum", "scheduling.instanceTerminationAction", "valid:",
     "Scheduling.InstanceTerminationAction"),
    ("gcp-enum-nic", lambda: _tpl(network_interfaces=[{"subnetwork": "s", "nic_type": "GVNICC"}]),
     "enum", "networkInterfaces[0].nicType", 'did you mean "GVNIC"', "NetworkInterface.NicType"),
    ("gcp-enum-reservation-affinity", lambda: _tpl(reservation_affinity={"type": "SPECIFIC"}),
     "enum", "reservationAffinity.type", "valid:", "ConsumeReservationType"),
    ("gcp-enum-collocation", lambda: gcp.compute.ResourcePolicy(
        "pp", name="pp", region="us-central1",
        group_placement_policy={"collocation": "COLOCATED", "vm_count": 2}),
     "enum", "groupPlacementPolicy.collocation", 'did you mean "COLLOCATED"', "Collocation"),
    ("gcp-mtu-range", lambda: gcp.compute.Network("net", name="net", mtu=9000,
                                                  auto_create_subnetworks=False),
     "range", "mtu", "above the maximum 8896", "Network.mtu"),
    ("gcp-routing-mode", lambda: gcp.compute.Network("net", name="net", routing_mode="REGION",
                                                     auto_create_subnetworks=False),
     "enum", "routingMode", 'did you mean "REGIONAL"', "RoutingMode"),
    ("gcp-firewall-direction", lambda: gcp.compute.Firewall(
        "fw", name="fw", network="n", direction="INBOUND", allows=[{"protocol": "tcp"}],
        source_tags=["x"]), "enum", "direction", "valid:", "Firewall.Direction"),
    ("gcp-nat-option", lambda: gcp.compute.RouterNat(
        "nat", name="nat", router="r", region="us-central1", nat_ip_allocate_option="AUTO",
        source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES"), "enum",
     "natIpAllocateOption", 'did you mean "AUTO_ONLY"', "NatIpAllocateOption"),
    ("gcs-storage-class", lambda: gcp.storage.Bucket("b", name="gpulease-b", location="US",
                                                     storage_class="COLD"),
     "enum", "storageClass", "valid:", "Bucket.STORAGE_CLASSES"),
    ("gcs-lifecycle-action", lambda: gcp.storage.Bucket(
        "b", name="gpulease-b", location="US", lifecycle_rules=[{
            "action": {"type": "SetClass", "storage_class": "NEARLINE"}, "condition": {"age": 30}}]),
     "enum", "lifecycleRules[0].action.type", 'did you mean "SetStorageClass"', "LifecycleRule"),
    ("gcs-lifecycle-target-class", lambda: gcp.storage.Bucket(
        "b", name="gpulease-b", location="US", lifecycle_rules=[{
            "action": {"type": "SetStorageClass", "storage_class": "GLACIER"},
            "condition": {"age": 30}}]),
     "enum", "lifecycleRules[0].action.storageClass", "valid:", "STORAGE_CLASSES"),
    ("gce-name-underscore", lambda: _tpl(name="finetune-on_demand-template"), "name", "name",
     "does not match", "RFC 1035"),
    ("gce-name-too-long", lambda: gcp.compute.Network("net", name="n" * 64,
                                                      auto_create_subnetworks=False),
     "name", "name", "the maximum is 63", "RFC 1035"),
    ("gce-auto-name-from-logical-name", lambda: gcp.compute.ResourcePolicy(
        "train-on_demand-placement", region="us-central1",
        group_placement_policy={"collocation": "COLLOCATED", "vm_count": 2}),
     "name", "name", "does not match", "RFC 1035"),
    ("gce-base-instance-name", lambda: gcp.compute.InstanceGroupManager(
        "mig", name="mig", zone="us-central1-a", base_instance_name="b" * 59,
        versions=[{"instance_template": "t"}]), "name", "baseInstanceName",
     "the maximum is 58", "base_instance_name"),
    ("gcs-bucket-name", lambda: gcp.storage.Bucket("b", name="gpulease-google-data",
                                                   location="US"),
     "name", "name", "contain 'google'", "Bucket naming rules"),
    ("gcp-service-account-id", lambda: gcp.serviceaccount.Account("sa", account_id="gpu-Pre"),
     "name", "accountId", "does not match", "serviceAccounts.create accountId"),
    ("gcp-service-account-id-length", lambda: gcp.serviceaccount.Account(
        "sa", account_id="gpu-prod-pretrain-extra-long-id"), "name", "accountId",
     "the maximum is 30", "accountId"),
    ("gcp-custom-role-id", lambda: gcp.projects.IAMCustomRole(
        "role", role_id="gpulease-reaper", title="t", permissions=["compute.instances.get"]),
     "name", "roleId", "does not match", "roles.create roleId"),
    ("gcp-label-key-case", lambda: gcp.storage.Bucket("b", name="gpulease-b", location="US",
                                                      labels={"Owner": "x"}),
     "label-key", "labels.Owner", "lowercase", "Requirements for labels"),
    ("gcp-label-value-dot", lambda: gcp.storage.Bucket("b", name="gpulease-b", location="US",
                                                       labels={"cost": "12.34"}),
     "label-value", "labels.cost", "at most 63 lowercase", "Requirements for labels"),
    ("gcp-label-key-digit", lambda: gcp.storage.Bucket("b", name="gpulease-b", location="US",
                                                       labels={"1team": "x"}),
     "label-key", "labels.1team", "starting with a letter", "Requirements for labels"),
    ("gcp-label-count", lambda: gcp.storage.Bucket("b", name="gpulease-b", location="US",
                                                   labels={f"k{i}": "v" for i in range(65)}),
     "label-count", "labels", "65 labels", "Requirements for labels"),
    ("gcp-metadata-key", lambda: _tpl(metadata={"user data": "x"}), "metadata-key",
     "metadata.user data", "[a-zA-Z0-9-_]+", "compute_v1.Items.key"),
]


@pytest.mark.parametrize("pid,program,rule,path,fragment,spec", PLANTED,
                         ids=[p[0] for p in PLANTED])
def test_each_rule_reports_a_planted_bad_resource(pid, program, rule, path, fragment, spec):
    found = findings(program)
    hits = [f for f in found if f["rule"] == rule and f["path"] == path]
    assert hits, (pid, found)
    f = hits[0]
    assert set(f) == FINDING_KEYS
    assert f["level"] == "error" and fragment in f["message"], f
    assert spec in f["spec"], f
    assert f["resource"].startswith("urn:pulumi:") and f["type"].count(":") == 2
    assert has_errors(found)


def test_the_same_resources_with_valid_values_pass():
    def good():
        _lt(instance_type="p5.48xlarge", metadata_options={"http_tokens": "required"},
            instance_market_options={"market_type": "spot", "spot_options": {
                "instance_interruption_behavior": "terminate"}},
            block_device_mappings=[{"device_name": "/dev/sda1", "ebs": {"volume_type": "gp3"}}],
            # what it launches carries the attribution tags (the billed-tags rule)
            tag_specifications=[{"resource_type": "volume",
                                 "tags": {k: "v" for k in tags.REQUIRED}}])
        aws.ec2.PlacementGroup("pg", strategy="cluster")
        aws.s3.Bucket("b", bucket="gpulease-prod-corpus", tags={"gpulease-owner": "ml"})
        aws.iam.Role("role", name="gpulease-prod-reaper", max_session_duration=3600,
                     assume_role_policy="{\"Statement\": []}")
        _tpl(scheduling={"provisioning_model": "SPOT", "instance_termination_action": "STOP"},
             reservation_affinity={"type": "ANY_RESERVATION"},
             metadata={"enable-oslogin": "TRUE", "block-project-ssh-keys": "TRUE"})
        gcp.compute.Network("net", name="net", mtu=8896, routing_mode="REGIONAL",
                            auto_create_subnetworks=False)
        gcp.storage.Bucket("gb", name="gpulease-prod-data", location="US", storage_class="STANDARD",
                           labels={"gpulease-monthly-cents": "1234"}, lifecycle_rules=[{
                               "action": {"type": "SetStorageClass", "storage_class": "NEARLINE"},
                               "condition": {"age": 30}}])
        gcp.serviceaccount.Account("sa", account_id="gpu-prod-pretrain")
        aws.ec2.Subnet("sub", vpc_id="vpc-1", cidr_block="10.64.0.0/19")
    assert findings(good) == []


def test_cidr_with_host_bits_is_a_warning_not_an_error():
    found = findings(lambda: aws.ec2.Subnet("sub", vpc_id="vpc-1", cidr_block="10.0.0.1/24"))
    assert [(f["rule"], f["level"]) for f in found] == [("cidr", "warning")]
    assert "write 10.0.0.0/24" in found[0]["message"] and not has_errors(found)


def test_values_unknown_at_preview_are_skipped_not_guessed():
    def program():
        net = gcp.compute.Network("net", name="net", auto_create_subnetworks=False)
        aws.iam.RolePolicy("p", role="r", policy=net.id.apply(lambda _: "{not json"))
    run = run_program(program, stack="dev")
    pol = next(r for r in run.resources if r.name == "p")
    assert pol.inputs["policy"] == "{not json"  # known under these mocks ...
    pol.inputs["policy"] = "[unknown]"  # ... and a preview would not know it
    assert [f for f in check(run.resources) if f["rule"] == "json"] == []


# ---- uniqueness ---------------------------------------------------------------------------------
def test_name_collisions_are_errors_in_the_scope_the_cloud_requires():
    def program():
        aws.s3.Bucket("data-a", bucket="gpulease-prod-corpus")
        aws.s3.Bucket("data-b", bucket="gpulease-prod-corpus")
        gcp.storage.Bucket("gcs-a", name="gpulease-prod-corpus", location="US")  # other cloud
        gcp.compute.Network("net-a", name="gpu-net", auto_create_subnetworks=False)
        gcp.compute.Network("net-b", name="gpu-net", auto_create_subnetworks=False)
        other = gcp.Provider("other-project", project="acme-other")
        gcp.compute.Network("net-c", name="gpu-net", auto_create_subnetworks=False,
                            opts=pulumi.ResourceOptions(provider=other))
        gcp.compute.Firewall("gpu-net", name="gpu-net", network="n", source_tags=["a"],
                             allows=[{"protocol": "tcp"}])  # another collection: fine
        gcp.compute.Subnetwork("sub-a", name="sub", region="us-central1", network="n",
                               ip_cidr_range="10.0.0.0/24")
        gcp.compute.Subnetwork("sub-b", name="sub", region="europe-west4", network="n",
                               ip_cidr_range="10.1.0.0/24")  # another region: fine
        gcp.serviceaccount.Account("sa-a", account_id="gpu-prod-nodes")
        gcp.serviceaccount.Account("sa-b", account_id="gpu-prod-nodes")
    found = only(findings(program), "unique")
    by_name = sorted(f["name"] for f in found)
    assert by_name == ["data-a", "data-b", "net-a", "net-b", "sa-a", "sa-b"], found
    msg = next(f["message"] for f in found if f["name"] == "data-a")
    assert "is also used by urn:pulumi:" in msg and "S3 bucket names (global)" in msg
    assert all(f["level"] == "error" for f in found)


def test_physical_name_prefers_the_mocks_attribute_then_inputs_then_the_provider_auto_name():
    r = SimpleNamespace(type="gcp:compute/network:Network", name="gpu_net", urn="urn:x",
                        inputs={}, outputs={"name": "gpu_net"})
    auto = physical_name(r)
    assert auto.startswith("gpu_net-") and len(auto) == len("gpu_net") + 8
    assert auto == N.auto_name(r)  # deterministic per URN
    r.inputs = {"name": "gpu-net"}
    assert physical_name(r) == "gpu-net"
    r.physical_name = "gpu-net-1a2b3c4"  # what the provider-faithful mocks record
    assert physical_name(r) == "gpu-net-1a2b3c4"
    sa = SimpleNamespace(type="gcp:serviceaccount/account:Account", name="sa", urn="u",
                         inputs={"accountId": "gpu-prod"}, outputs={})
    assert physical_name(sa) == "gpu-prod"
    b = SimpleNamespace(type="aws:s3/bucket:Bucket", name="b", urn="u",
                        inputs={"bucket": "gpulease-dev-data"}, outputs={})
    assert physical_name(b) == "gpulease-dev-data"


# ---- shipped and stress stacks ---------------------------------------------------------------
@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_shipped_stacks_conform(stack):
    found = check(program_run(stack).resources)
    assert found == [], found


def _stress_stack(env: str, prefix: str, cluster_name, storage: dict, *,
                  capacity_blocks=False) -> dict:
    """Every purchase model (reserved, on-demand, spot), single-node and distributed, on both
    clouds, with the names the caller chooses."""
    clusters = []
    i = 0
    for cloud, region in (("aws", "us-east-1"), ("gcp", "us-central1")):
        for model, prio, ckpt in (("reserved", 9, None), ("ondemand", 7, None), ("spot", 3, 15)):
            for dist in (False, True):
                c = {"name": cluster_name(cloud, model, dist, i), "gpu": "H100",
                     "gpus": 16 if dist else 8,
                     "hours_per_month": 730 if model == "reserved" else 300,
                     "priority": prio, "distributed": dist, "dataset": storage[cloud],
                     "regions": [region]}
                if ckpt:
                    c["checkpoint_minutes"] = ckpt
                if capacity_blocks and cloud == "aws" and model == "reserved":
                    # the reserved p5 nodes as a pinned, approved Capacity Block (CONTRACTS C2)
                    c["capacity_block"] = {
                        "offering_id": f"cb-{i:017x}", "region": region,
                        "availability_zone": "us-east-1a", "instance_type": "p5.48xlarge",
                        "instance_count": c["gpus"] // 8, "start": "2026-12-05T11:30:00Z",
                        "end": "2026-12-14T11:30:00Z", "upfront_fee_usd": 1000.0,
                        "purchase_approved": True}
                clusters.append(c)
                i += 1
    return {"config": {
        "gpulease:environment": env, "gpulease:name_prefix": prefix,
        "gpulease:owner": "ml-platform-team-2026", "gpulease:cost_center": "cc-4711-ml",
        "gpulease:budget_monthly_usd": 5000000,
        "gpulease:clouds": {
            "aws": {"regions": ["us-east-1"], "capacity_reservations": True,
                    "capacity_blocks": capacity_blocks},
            "gcp": {"project": "acme-ml-stress-01", "regions": ["us-central1"]}},
        "gpulease:storage": [{"name": storage["aws"], "size_tb": 5, "home": "aws:us-east-1"},
                             {"name": storage["gcp"], "size_tb": 5, "home": "gcp:us-central1"}],
        "gpulease:clusters": clusters,
        "gpulease:reaper": {"schedule": "rate(15 minutes)", "grace_minutes": 30}}}


def _thirty(prefix: str, i: int) -> str:
    return (prefix + "-" + "x" * 30)[:28] + f"{i:02d}"


STRESS = {
    "models-short-names": _stress_stack(
        "stress-1", "gl", lambda c, m, d, i: f"{c}{i}-{m}-{'d' if d else 's'}",
        {"aws": "data-01", "gcp": "data-02"}),
    "models-capacity-blocks": _stress_stack(
        "stress-2", "gl", lambda c, m, d, i: f"{c}-{m}-{i}", {"aws": "d1", "gcp": "d2"},
        capacity_blocks=True),
    # 30-character cluster and storage names with digits and dashes (the config maximum); a
    # 20-character environment and a short prefix keep bucket names within 63.
    "max-cluster-and-storage-names": _stress_stack(
        "env-2026-research-01", "gl",
        lambda c, m, d, i: _thirty(f"{c}-{m}-{'dist' if d else 'one'}-2026", i),
        {"aws": _thirty("dataset-aws-2026-eu", 1), "gcp": _thirty("dataset-gcp-2026-us", 2)}),
}


@pytest.mark.parametrize("name", list(STRESS))
def test_stress_stacks_conform(name, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    f = tmp_path / f"Pulumi.{name}.yaml"
    f.write_text(yaml.safe_dump(STRESS[name]))
    code = main(["plan", "--config", str(f), "--json"])
    plan = json.loads(capsys.readouterr().out)
    models = {(c["cloud"], m) for c in plan["clusters"] for m, n in c["purchase"].items() if n}
    assert models == {(cl, m) for cl in ("aws", "gcp") for m in ("reserved", "on_demand", "spot")}
    assert plan["conformance"] == [], plan["conformance"]
    assert code == EXIT_OK, [v for v in plan["violations"] if v["level"] == "mandatory"]


def test_names_at_every_maximum_are_caught_not_silently_cut(tmp_path, capsys, monkeypatch):
    """A 20-character prefix, a 30-character environment and two 30-character storage names
    that differ only at the end: `<prefix>-<env>-<storage>` is 82 characters. Today's storage
    components cut it to 63 (issue 12), which ends the name with '-' and gives both AWS
    storages the SAME bucket name. The plan must not pass: either the config is rejected (exit
    2) or conformance reports the colliding names (exit 4)."""
    monkeypatch.chdir(ROOT)
    doc = _stress_stack("env-2026-research-platform-001", "gpulease-ml-2026-x1",
                        lambda c, m, d, i: f"{c}-{m}-{i}",
                        {"aws": _thirty("dataset-aws-2026-eu", 1), "gcp": "d2"})
    doc["config"]["gpulease:storage"].append(
        {"name": _thirty("dataset-aws-2026-eu", 3), "size_tb": 1, "home": "aws:us-east-1"})
    f = tmp_path / "Pulumi.longest.yaml"
    f.write_text(yaml.safe_dump(doc))
    code = main(["plan", "--config", str(f), "--json"])
    out = capsys.readouterr().out
    # Names that do not fit are shortened with a digest (gpulease.naming.fit_name), never cut:
    # the plan is accepted, every bucket name is valid and no two are the same.
    assert code == EXIT_OK, out
    plan = json.loads(out)
    assert plan["conformance"] == []
    names = [r["physical_name"] for r in plan["resources"]
             if r["type"] in ("aws:s3/bucket:Bucket", "gcp:storage/bucket:Bucket")]
    assert len(names) == len(set(names)) and all(len(n) <= 63 for n in names)


# ---- `gpulease plan` integration ---------------------------------------------------------------
def _stack_with_bad_instance_type(tmp_path: Path) -> tuple[Path, Path]:
    """staging with a catalog whose p5 rows carry a type name EC2 does not have
    (`p5.48xlarge-x`): the config, the policy and the mocks accept it, the botocore model's
    InstanceType enum does not, so `pulumi up` would fail at CreateLaunchTemplate."""
    from gpulease.catalog import default_catalog_path

    cat = json.loads(default_catalog_path().read_text())
    for row in cat["offerings"]:
        if row["instance_type"] == "p5.48xlarge":
            row["instance_type"] = "p5.48xlarge-x"
    cat.pop("checksum", None)
    cpath = tmp_path / "catalog.json"
    cpath.write_text(json.dumps(cat))
    return ROOT / "stacks" / "Pulumi.staging.yaml", cpath


def test_plan_exits_4_and_lists_located_conformance_findings(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    stack, cat = _stack_with_bad_instance_type(tmp_path)
    code = main(["plan", "--config", str(stack), "--catalog", str(cat), "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert code == EXIT_POLICY
    hits = [x for x in plan["conformance"] if x["path"].endswith("instanceType")]
    assert hits and all(set(h) == FINDING_KEYS and h["rule"] == "enum" for h in hits)
    # the launch template and the ASG's mixed-instances override both carry the type
    assert {h["type"] for h in hits} == {"aws:ec2/launchTemplate:LaunchTemplate",
                                         "aws:autoscaling/group:Group"}
    assert all(h["value"] == "p5.48xlarge-x" and h["spec"].startswith("botocore ") and " ec2 " in h["spec"]
               for h in hits)
    assert plan["violations"] == [] or all(v["level"] != "mandatory" for v in plan["violations"])
    code = main(["plan", "--config", str(stack), "--catalog", str(cat)])
    text = capsys.readouterr().out
    assert code == EXIT_POLICY
    assert "Conformance findings (" in text and "p5.48xlarge-x" in text
    assert f"[error] enum: {hits[0]['resource']}" in text


def test_exit_4_wins_over_exit_3(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    stack, cat = _stack_with_bad_instance_type(tmp_path)
    # staging costs far more than dev: a 0 % threshold is exceeded (exit 3), and 4 wins
    code = main(["plan", "--config", str(stack), "--catalog", str(cat), "--diff", "dev",
                 "--fail-on-increase", "0"])
    err = capsys.readouterr().err
    assert code == EXIT_POLICY
    assert "exit 3 (cost over a gate threshold" in err and "(exit 4 wins over exit 3)" in err


def test_clean_plan_text_says_so(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["plan", "--stack", "dev"]) == EXIT_OK
    assert "Conformance: every constrained input matches its API spec" in capsys.readouterr().out


def test_the_planted_list_covers_every_rule_and_both_clouds():
    rules = {p[2] for p in PLANTED} | {"unique"}  # uniqueness has its own test above
    assert rules == {"enum", "length", "pattern", "range", "name", "tag-key", "tag-value",
                     "tag-count", "label-key", "label-value", "label-count", "cidr", "json",
                     "metadata-key", "unique"}
    assert {p[0].split("-")[0] for p in PLANTED} >= {"aws", "gcp", "gcs", "gce", "s3", "iam"}


def test_every_constrained_type_the_shipped_stacks_declare_has_a_table():
    """Types with constrained inputs in the shipped stacks are mapped (or named by a generic
    rule); a new type in the program must be added to gpulease/conformance/tables.py or to the
    documented list of types with no constrained input."""
    unconstrained = {
        "aws:ec2/routeTableAssociation:RouteTableAssociation", "aws:ec2/natGateway:NatGateway",
        "aws:ec2/internetGateway:InternetGateway", "aws:ec2/securityGroup:SecurityGroup",
        "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "aws:sns/topic:Topic",
        "aws:s3/bucketPolicy:BucketPolicy", "aws:sns/topicPolicy:TopicPolicy",
        "aws:ec2/subnet:Subnet", "aws:ec2/routeTable:RouteTable", "aws:s3/bucket:Bucket",
        "gcp:compute/router:Router", "gcp:serviceaccount/account:Account",
        "gcp:projects/iAMCustomRole:IAMCustomRole", "gcp:projects/iAMMember:IAMMember",
        "gcp:storage/bucketIAMMember:BucketIAMMember", "gcp:storage/bucketObject:BucketObject",
        "gcp:cloudfunctionsv2/function:Function", "gcp:cloudrunv2/serviceIamMember:ServiceIamMember",
        "gcp:cloudscheduler/job:Job", "pulumi:providers:aws", "pulumi:providers:gcp"}
    declared = {r.type for s in SHIPPED_STACKS for r in program_run(s).custom}
    mapped = set(tables.AWS) | set(tables.GCP) | set(tables.CIDR_INPUTS)
    assert declared - mapped - unconstrained == set()
