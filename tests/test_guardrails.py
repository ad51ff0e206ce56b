"""Guardrail rules: each policy called directly with a passing and a failing resource, the
offline evaluation over a real program run under mocks, and the CrossGuard pack."""
from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pulumi
import pulumi_aws as aws
import pytest

from gpulease import money
from gpulease import tags
from gpulease.guardrails import rules as R
from gpulease.guardrails.evaluate import evaluate, has_mandatory
from gpulease.guardrails.rules import GuardedResource, RuleContext
from gpulease.planner.mocks import run_program

ROOT = Path(__file__).resolve().parents[1]
CTX = RuleContext(environment="dev", budget_monthly_usd=1000.0)
PROD = RuleContext(environment="prod", budget_monthly_usd=1000.0)

AWS_TAGS = {k: "x" for k in tags.REQUIRED_AWS} | {tags.MONTHLY_USD: "12.50"}
GCP_LABELS = {k: "x" for k in tags.REQUIRED_GCP} | {tags.MONTHLY_CENTS: "1250"}

LT = R.AWS_LAUNCH_TEMPLATE
GCP_IT = "gcp:compute/instanceTemplate:InstanceTemplate"
GOOD_GCP_TEMPLATE = {
    "labels": GCP_LABELS,
    "shieldedInstanceConfig": {"enableSecureBoot": True, "enableVtpm": True,
                               "enableIntegrityMonitoring": True},
    "metadata": {"enable-oslogin": "TRUE"},
    "networkInterfaces": [{"subnetwork": "s"}],
}

# (rule, resource type, passing props, failing props, expected fragment of the message)
RESOURCE_CASES = [
    ("cost-tags-required", "aws:s3/bucket:Bucket", {"tags": AWS_TAGS},
     {"tags": {tags.CLUSTER: "c"}}, "gpulease-owner"),
    ("cost-tags-required", "aws:autoscaling/group:Group",
     {"tags": [{"key": k, "value": v, "propagateAtLaunch": True} for k, v in AWS_TAGS.items()]},
     {"tags": []}, "gpulease-monthly-usd"),
    ("cost-tags-required", "gcp:storage/bucket:Bucket", {"labels": GCP_LABELS},
     {"labels": {tags.CLUSTER: "c"}}, "gpulease-monthly-cents"),
    ("s3-block-public-access", R.S3_PAB_TYPE,
     {"blockPublicAcls": True, "blockPublicPolicy": True, "ignorePublicAcls": True,
      "restrictPublicBuckets": True},
     {"blockPublicAcls": True, "blockPublicPolicy": True, "ignorePublicAcls": True},
     "restrictPublicBuckets"),
    ("imdsv2-required", LT, {"metadataOptions": {"httpTokens": "required"}},
     {"metadataOptions": {"httpTokens": "optional"}}, "'optional'"),
    ("imdsv2-required", LT, {"metadataOptions": {"httpTokens": "required"}}, {},
     "IMDSv1 allowed"),
    ("no-open-ingress", R.AWS_SG,
     {"ingress": [{"fromPort": 0, "toPort": 0, "protocol": "-1", "self": True}]},
     {"ingress": [{"fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]}]}, "0.0.0.0/0"),
    ("no-open-ingress", R.AWS_SG_RULE, {"type": "egress", "cidrBlocks": ["0.0.0.0/0"]},
     {"type": "ingress", "ipv6CidrBlocks": ["::/0"]}, "::/0"),
    ("no-open-ingress", R.AWS_SG_INGRESS, {"cidrIpv4": "10.0.0.0/16"}, {"cidrIpv4": "0.0.0.0/0"},
     "0.0.0.0/0"),
    ("no-open-ingress", R.GCP_FIREWALL,
     {"sourceRanges": ["35.235.240.0/20"], "allows": [{"protocol": "tcp"}]},
     {"sourceRanges": ["0.0.0.0/0"], "allows": [{"protocol": "tcp", "ports": ["22"]}]},
     "0.0.0.0/0"),
    ("no-open-ingress", R.GCP_FIREWALL,
     {"sourceRanges": ["0.0.0.0/0"], "denies": [{"protocol": "all"}]},
     {"direction": "INGRESS", "sourceRanges": ["::/0"], "allows": [{"protocol": "all"}]}, "::/0"),
    ("no-public-ip-gpu-nodes", LT, {"networkInterfaces": [{"associatePublicIpAddress": "false"}]},
     {"networkInterfaces": [{"associatePublicIpAddress": "true"}]}, "networkInterfaces[0]"),
    ("no-public-ip-gpu-nodes", GCP_IT, GOOD_GCP_TEMPLATE,
     {"networkInterfaces": [{"subnetwork": "s", "accessConfigs": [{}]}]}, "accessConfigs"),
    ("gcp-shielded-vm", GCP_IT, GOOD_GCP_TEMPLATE,
     {"shieldedInstanceConfig": {"enableSecureBoot": False, "enableVtpm": True,
                                 "enableIntegrityMonitoring": True}}, "enableSecureBoot"),
    ("gcp-os-login", GCP_IT, GOOD_GCP_TEMPLATE, {"metadata": {"enable-oslogin": "FALSE"}},
     "'FALSE'"),
    ("gcs-public-access-prevention", "gcp:storage/bucket:Bucket",
     {"publicAccessPrevention": "enforced", "uniformBucketLevelAccess": True},
     {"publicAccessPrevention": "inherited", "uniformBucketLevelAccess": True}, "'inherited'"),
    ("ebs-encrypted", LT,
     {"blockDeviceMappings": [{"deviceName": "/dev/sda1", "ebs": {"encrypted": "true"}}]},
     {"blockDeviceMappings": [{"deviceName": "/dev/sda1", "ebs": {"volumeSize": 200}}]},
     "/dev/sda1"),
]


@pytest.mark.parametrize("name,rtype,good,bad,fragment", RESOURCE_CASES,
                         ids=[f"{c[0]}:{c[1].split(':')[-1]}" for c in RESOURCE_CASES])
def test_resource_rule_passes_and_fails(name, rtype, good, bad, fragment):
    rule = R.RULES_BY_NAME[name]
    assert rule.applies_to(rtype)
    assert rule.check(rtype, good, CTX) == []
    msgs = rule.check(rtype, bad, CTX)
    assert msgs and any(fragment in m for m in msgs), msgs


def test_storage_protection_only_in_prod_and_only_on_visible_options():
    rule = R.RULES_BY_NAME["storage-protected-in-prod"]
    b = "aws:s3/bucket:Bucket"
    loose = RuleContext(environment="prod", protect=False, retain_on_delete=False)
    assert len(rule.check(b, {}, loose)) == 2
    assert rule.check(b, {}, RuleContext(environment="prod", protect=True,
                                         retain_on_delete=True)) == []
    assert rule.check(b, {}, RuleContext(environment="dev", protect=False,
                                         retain_on_delete=False)) == []
    # CrossGuard cannot see retainOnDelete (None): only protect is judged.
    msgs = rule.check("gcp:storage/bucket:Bucket", {},
                      RuleContext(environment="prod", protect=False, retain_on_delete=None))
    assert msgs == ["prod storage is not protected: pass ResourceOptions(protect=True)"]


def test_taggability_comes_from_the_provider_classes():
    assert R.tag_kind("aws:s3/bucket:Bucket") == "tags"
    assert R.tag_kind("gcp:compute/instanceTemplate:InstanceTemplate") == "labels"
    # No tags input on these classes: never asked for cost tags.
    assert R.tag_kind(R.S3_PAB_TYPE) is None
    assert R.tag_kind("gcp:compute/firewall:Firewall") is None
    assert R.tag_kind("pulumi:providers:aws") is None
    assert R.RULES_BY_NAME["cost-tags-required"].check(R.S3_PAB_TYPE, {}, CTX) == []


def _res(urn, typ, props, deps=()):
    return GuardedResource(urn=urn, type=typ, name=urn.split("::")[-1], props=props,
                           dependencies=tuple(deps))


def test_bucket_encryption_and_pab_are_matched_per_bucket():
    data = _res("urn:a::data", "aws:s3/bucket:Bucket", {"bucket": "gpulease-dev-data"})
    work = _res("urn:a::work", "aws:s3/bucket:Bucket", {"bucket": "gpulease-dev-work"})
    sse = _res("urn:a::data-sse", next(iter(R.S3_SSE_TYPES)), {"bucket": "gpulease-dev-data"})
    pab = _res("urn:a::work-pab", R.S3_PAB_TYPE, {"bucket": "[unknown]"}, deps=["urn:a::work"])
    res = [data, work, sse, pab]
    enc = R.check_bucket_encryption(res, CTX)
    assert [u for u, _ in enc] == ["urn:a::work"]
    assert "BucketServerSideEncryptionConfiguration" in enc[0][1]
    assert [u for u, _ in R.check_bucket_public_access_block_exists(res, CTX)] == ["urn:a::data"]


def test_budget_cap_sums_aws_dollars_and_gcp_cents():
    res = [_res("urn:1", "aws:autoscaling/group:Group",
                {"tags": [{"key": tags.MONTHLY_USD, "value": "700.25"}]}),
           _res("urn:2", "gcp:compute/instanceGroupManager:InstanceGroupManager", {}),
           _res("urn:3", "gcp:storage/bucket:Bucket", {"labels": {tags.MONTHLY_CENTS: "40000"}})]
    assert R.tagged_monthly_usd(res) == money.usd("1100.25")
    over = R.check_budget_cap(res, CTX)
    assert over and over[0][0] == "" and "$1,100.25 exceeds the budget $1,000.00 by $100.25" in over[0][1]
    assert R.check_budget_cap(res, RuleContext(budget_monthly_usd=1200.0)) == []
    near = R.check_budget_headroom(res, RuleContext(budget_monthly_usd=1200.0))
    assert near and "92%" in near[0][1]
    assert R.check_budget_headroom(res, CTX) == []  # over: budget-cap's job


def test_every_rule_is_documented_and_leveled():
    assert len({r.name for r in R.RULES}) == len(R.RULES)
    for r in R.RULES:
        assert r.level in (R.MANDATORY, R.ADVISORY), r.name
        assert r.description and r.fix, r.name
        assert (r.check is None) != (r.stack_check is None), r.name


# ---- offline evaluation over a real program run ----------------------------------------------
def _program(*, good: bool, prod: bool):
    opts = pulumi.ResourceOptions(protect=prod and good, retain_on_delete=good)
    t = dict(AWS_TAGS)
    bucket = aws.s3.Bucket("data", bucket="gpulease-dev-data", tags=t, opts=opts)
    aws.s3.BucketPublicAccessBlock("data-pab", bucket=bucket.id, block_public_acls=True,
                                   block_public_policy=True, ignore_public_acls=True,
                                   restrict_public_buckets=good)
    if good:
        aws.s3.BucketServerSideEncryptionConfiguration(
            "data-sse", bucket=bucket.id,
            rules=[{"apply_server_side_encryption_by_default": {"sse_algorithm": "aws:kms"}}])
    aws.ec2.LaunchTemplate(
        "nodes", tags=t if good else None,
        metadata_options={"http_tokens": "required" if good else "optional",
                          "http_put_response_hop_limit": 2},
        network_interfaces=[{"device_index": 0,
                             "associate_public_ip_address": "false" if good else "true"}])
    aws.ec2.SecurityGroup("sg", tags=t, ingress=[{
        "from_port": 22, "to_port": 22, "protocol": "tcp",
        "cidr_blocks": ["10.0.0.0/16" if good else "0.0.0.0/0"]}])


def test_evaluate_over_recorded_resources_under_mocks():
    good = run_program(lambda: _program(good=True, prod=True), stack="prod")
    assert evaluate(good.resources, budget_monthly_usd=1000.0, environment="prod") == []

    bad = run_program(lambda: _program(good=False, prod=True), stack="prod")
    found = evaluate(bad.resources, budget_monthly_usd=10.0, environment="prod")
    by_policy = {}
    for v in found:
        by_policy.setdefault(v["policy"], []).append(v)
        assert set(v) == {"policy", "level", "resource", "message"}
    assert set(by_policy) == {"cost-tags-required", "s3-block-public-access",
                              "s3-bucket-encryption", "imdsv2-required", "no-open-ingress",
                              "no-public-ip-gpu-nodes", "storage-protected-in-prod", "budget-cap"}
    lt_urn = bad.one(LT).urn
    assert by_policy["imdsv2-required"][0]["resource"] == lt_urn
    assert by_policy["s3-bucket-encryption"][0]["resource"] == bad.one("aws:s3/bucket:Bucket").urn
    assert has_mandatory(found)
    # dev: the same loose bucket options are not a violation.
    dev = evaluate(bad.resources, budget_monthly_usd=1e6, environment="dev")
    assert "storage-protected-in-prod" not in {v["policy"] for v in dev}
    assert "budget-cap" not in {v["policy"] for v in dev}


def test_evaluate_skips_component_resources():
    class Comp(pulumi.ComponentResource):
        def __init__(self, name):
            super().__init__("gpulease:test:Thing", name, None, None)
            self.register_outputs({})

    run = run_program(lambda: Comp("c"), stack="dev")
    assert evaluate(run.resources, budget_monthly_usd=1.0, environment="dev") == []


# ---- the CrossGuard pack ---------------------------------------------------------------------
def _load_pack():
    spec = importlib.util.spec_from_file_location("gpulease_policy_pack",
                                                  ROOT / "policy-pack" / "__main__.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # not run as __main__: the gRPC server does not start
    return mod


def test_pack_files_are_consistent():
    import yaml

    meta = yaml.safe_load((ROOT / "policy-pack" / "PulumiPolicy.yaml").read_text())
    assert meta["runtime"] == {"name": "python"}
    # no virtualenv of its own (Pulumi would then demand <pack>/venv, which a wheel install
    # inside site-packages cannot have): the pack runs in gpulease's own environment, which
    # must therefore carry what the pack imports
    reqs = [line for line in (ROOT / "policy-pack" / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert reqs == []
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.startswith("pulumi-policy") for d in deps)


def test_pack_builds_a_policy_pack_with_every_rule(monkeypatch):
    import pulumi_policy
    from pulumi_policy import policy as pp
    from pulumi.runtime.proto import analyzer_pb2 as proto

    pack = _load_pack()
    policies = pack.build_policies()
    # every rule, then the cost gate's two policies (gpulease:gate; tests/test_gate.py)
    assert [p.name for p in policies] == [r.name for r in R.RULES] + ["cost-gate",
                                                                      "cost-gate-warnings"]

    # Construct the real PolicyPack, stopping where it would start serving.
    class Served(Exception):
        pass

    captured = {}
    real = pp._PolicyAnalyzerServicer

    def spy(*a, **kw):
        captured["servicer"] = real(*a, **kw)
        return captured["servicer"]

    class FakeServer:
        def add_insecure_port(self, address):
            return 0

        def start(self):
            raise Served()

    monkeypatch.setattr(pp, "_PolicyAnalyzerServicer", spy)
    monkeypatch.setattr(pp.grpc, "server", lambda *a, **kw: FakeServer())
    monkeypatch.setattr(pp.analyzer_pb2_grpc, "add_AnalyzerServicer_to_server", lambda s, srv: None)
    with pytest.raises(Served):
        pulumi_policy.PolicyPack(name=pack.PACK_NAME, policies=policies,
                                 enforcement_level=pulumi_policy.EnforcementLevel.ADVISORY)
    info = captured["servicer"].GetAnalyzerInfo(None, None)
    levels = {p.name: p.enforcementLevel for p in info.policies}
    for r in R.RULES:
        want = proto.MANDATORY if r.level == R.MANDATORY else proto.ADVISORY
        assert levels[r.name] == want, r.name
    kinds = {p.name: p.policy_type for p in info.policies}
    assert kinds["budget-cap"] == proto.PolicyType.POLICY_TYPE_STACK
    assert kinds["imdsv2-required"] == proto.PolicyType.POLICY_TYPE_RESOURCE
    assert levels["cost-gate"] == proto.MANDATORY and levels["cost-gate-warnings"] == \
        proto.ADVISORY
    assert kinds["cost-gate"] == proto.PolicyType.POLICY_TYPE_STACK


class _Opts:
    def __init__(self, protect=False):
        self.protect = protect


def test_pack_resource_policy_reports_through_crossguard_args():
    from pulumi_policy import ResourceValidationArgs

    pack = _load_pack()
    by_name = {p.name: p for p in pack.build_policies()}
    reported = []
    args = ResourceValidationArgs(LT, {"metadataOptions": {"httpTokens": "optional"}}, "urn:lt",
                                  "lt", _Opts(), None)
    by_name["imdsv2-required"].validate(args, lambda m, u=None: reported.append((u, m)))
    assert reported and reported[0][0] == "urn:lt" and "httpTokens" in reported[0][1]

    reported.clear()
    ok = ResourceValidationArgs(LT, {"metadataOptions": {"httpTokens": "required"}}, "urn:lt",
                                "lt", _Opts(), None)
    by_name["imdsv2-required"].validate(ok, lambda m, u=None: reported.append((u, m)))
    assert reported == []

    # environment from the resource's own tag when the config does not say.
    prod_bucket = ResourceValidationArgs("aws:s3/bucket:Bucket",
                                         {"tags": {**AWS_TAGS, tags.ENVIRONMENT: "prod"}},
                                         "urn:b", "b", _Opts(protect=False), None)
    by_name["storage-protected-in-prod"].validate(prod_bucket,
                                                  lambda m, u=None: reported.append((u, m)))
    assert reported == [("urn:b", "prod storage is not protected: pass ResourceOptions(protect=True)")]


def test_pack_stack_policy_budget_from_config_or_not_applicable():
    from pulumi_policy import PolicyResource, StackValidationArgs
    from pulumi_policy.policy import _NotApplicableError

    pack = _load_pack()
    by_name = {p.name: p for p in pack.build_policies()}
    res = [PolicyResource("aws:autoscaling/group:Group",
                          {"tags": [{"key": tags.MONTHLY_USD, "value": "2000.00"}]},
                          "urn:asg", "asg", _Opts(), None, None, [], {})]
    reported = []
    by_name["budget-cap"].validate(StackValidationArgs(res, {"budget_monthly_usd": 1500}),
                                   lambda m, u=None: reported.append((u, m)))
    assert reported and reported[0][0] is None and "exceeds the budget $1,500.00" in reported[0][1]
    with pytest.raises(_NotApplicableError):
        by_name["budget-cap"].validate(StackValidationArgs(res, None), lambda m, u=None: None)
    stack = PolicyResource("pulumi:pulumi:Stack", {"budget_monthly_usd": 5000}, "urn:stack",
                           "gpulease-dev", _Opts(), None, None, [], {})
    reported.clear()
    by_name["budget-cap"].validate(StackValidationArgs(res + [stack], None),
                                   lambda m, u=None: reported.append((u, m)))
    assert reported == []


# ---- issue 14: 26 planted problems, through `gpulease plan` AND the CrossGuard pack -------------
import json as _json  # noqa: E402

import pulumi_gcp as gcp  # noqa: E402

from tests.conftest import SHIPPED_STACKS, program_run  # noqa: E402

_GOOD_SHIELDED = {"enable_secure_boot": True, "enable_vtpm": True,
                  "enable_integrity_monitoring": True}
_GOOD_METADATA = {"enable-oslogin": "TRUE", "block-project-ssh-keys": "TRUE",
                  "serial-port-enable": "FALSE"}
_NODE_SA = {"email": "gpu-dev-c@p.iam.gserviceaccount.com",
            "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}


def _aws_bucket(name="data", *, pab=True, sse=True, flags_on=True, prod=False):
    b = aws.s3.Bucket(name, bucket=f"gpulease-dev-{name}", tags=dict(AWS_TAGS),
                      opts=pulumi.ResourceOptions(protect=not prod, retain_on_delete=not prod))
    if pab:
        aws.s3.BucketPublicAccessBlock(f"{name}-pab", bucket=b.id, block_public_acls=True,
                                       block_public_policy=True, ignore_public_acls=True,
                                       restrict_public_buckets=flags_on)
    if sse:
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-sse", bucket=b.id,
            rules=[{"apply_server_side_encryption_by_default": {"sse_algorithm": "aws:kms"}}])
    return b


def _sg(ingress):
    return aws.ec2.SecurityGroup("sg", vpc_id="vpc-1", tags=dict(AWS_TAGS), ingress=ingress)


def _lt(**over):
    kw = dict(tags=dict(AWS_TAGS), metadata_options={"http_tokens": "required"},
              network_interfaces=[{"device_index": 0, "associate_public_ip_address": "false"}],
              block_device_mappings=[{"device_name": "/dev/sda1",
                                      "ebs": {"encrypted": "true", "volume_size": 200}}])
    kw.update(over)
    return aws.ec2.LaunchTemplate("nodes", **kw)


def _gcp_template(**over):
    kw = dict(machine_type="g2-standard-8", labels=dict(GCP_LABELS),
              disks=[{"source_image": "img", "boot": True}],
              network_interfaces=[{"subnetwork": "s"}], shielded_instance_config=_GOOD_SHIELDED,
              metadata=dict(_GOOD_METADATA), service_account=_NODE_SA)
    kw.update(over)
    return gcp.compute.InstanceTemplate("tpl", **kw)


def _fw(**over):
    kw = dict(network="net", direction="INGRESS", allows=[{"protocol": "tcp", "ports": ["22"]}])
    kw.update(over)
    return gcp.compute.Firewall("fw", **kw)


def _role_policy(statement):
    role = aws.iam.Role("role", tags=dict(AWS_TAGS), assume_role_policy=_json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                "Principal": {"Service": "ec2.amazonaws.com"}}]}))
    return aws.iam.RolePolicy("policy", role=role.id, policy=_json.dumps(
        {"Version": "2012-10-17", "Statement": [statement]}))


def _bucket_policy(statement):
    b = _aws_bucket()
    return aws.s3.BucketPolicy("data-policy", bucket=b.id, policy=_json.dumps(
        {"Version": "2012-10-17", "Statement": [statement]}))


_SSH = {"from_port": 22, "to_port": 22, "protocol": "tcp"}

#: (id, program, rule expected, logical name of the resource it must name ("" = the stack)).
#: The first 15 are the problems the pack caught before issue 14; the last 11 the ones it missed.
PLANTED: list[tuple[str, object, str, str]] = [
    # -- caught before issue 14 --
    ("sg-inline-0.0.0.0/0-ssh", lambda: _sg([{**_SSH, "cidr_blocks": ["0.0.0.0/0"]}]),
     "no-open-ingress", "sg"),
    ("sg-rule-::/0", lambda: aws.ec2.SecurityGroupRule(
        "rule", type="ingress", security_group_id="sg-1", ipv6_cidr_blocks=["::/0"], **_SSH),
     "no-open-ingress", "rule"),
    ("vpc-ingress-rule-0.0.0.0/0", lambda: aws.vpc.SecurityGroupIngressRule(
        "in", security_group_id="sg-1", cidr_ipv4="0.0.0.0/0", ip_protocol="tcp", from_port=22,
        to_port=22, tags=dict(AWS_TAGS)), "no-open-ingress", "in"),
    ("gcp-firewall-0.0.0.0/0", lambda: _fw(source_ranges=["0.0.0.0/0"]), "no-open-ingress", "fw"),
    ("imdsv1-allowed", lambda: _lt(metadata_options={"http_tokens": "optional"}),
     "imdsv2-required", "nodes"),
    ("launch-template-public-ip", lambda: _lt(network_interfaces=[
        {"device_index": 0, "associate_public_ip_address": "true"}]),
     "no-public-ip-gpu-nodes", "nodes"),
    ("gcp-template-external-ip", lambda: _gcp_template(network_interfaces=[
        {"subnetwork": "s", "access_configs": [{}]}]), "no-public-ip-gpu-nodes", "tpl"),
    ("s3-bucket-without-public-access-block", lambda: _aws_bucket(pab=False),
     "s3-public-access-block-exists", "data"),
    ("s3-public-access-block-flag-off", lambda: _aws_bucket(flags_on=False),
     "s3-block-public-access", "data-pab"),
    ("s3-bucket-without-encryption", lambda: _aws_bucket(sse=False), "s3-bucket-encryption",
     "data"),
    ("cost-tags-missing", lambda: aws.ec2.Vpc("vpc", cidr_block="10.0.0.0/16"),
     "cost-tags-required", "vpc"),
    ("gcp-shielded-vm-off", lambda: _gcp_template(shielded_instance_config={
        **_GOOD_SHIELDED, "enable_secure_boot": False}), "gcp-shielded-vm", "tpl"),
    ("gcp-os-login-off", lambda: _gcp_template(metadata={**_GOOD_METADATA,
                                                        "enable-oslogin": "FALSE"}),
     "gcp-os-login", "tpl"),
    ("gcs-public-access-prevention-inherited", lambda: gcp.storage.Bucket(
        "gcs", location="US", labels=dict(GCP_LABELS), uniform_bucket_level_access=True,
        public_access_prevention="inherited"), "gcs-public-access-prevention", "gcs"),
    ("prod-bucket-unprotected", lambda: _aws_bucket(prod=True), "storage-protected-in-prod",
     "data"),
    # -- missed before issue 14 --
    ("ingress-0.0.0.0/1+128.0.0.0/1", lambda: _sg([
        {**_SSH, "cidr_blocks": ["0.0.0.0/1"]}, {**_SSH, "cidr_blocks": ["128.0.0.0/1"]}]),
     "no-open-ingress", "sg"),
    ("ingress-0.0.0.0/00", lambda: _sg([{**_SSH, "cidr_blocks": ["0.0.0.0/00"]}]),
     "no-open-ingress", "sg"),
    ("ingress-::0/0", lambda: _sg([{**_SSH, "ipv6_cidr_blocks": ["::0/0"]}]),
     "no-open-ingress", "sg"),
    ("gcp-ingress-firewall-without-source", lambda: _fw(), "no-open-ingress", "fw"),
    ("iam-*:*", lambda: _role_policy({"Effect": "Allow", "Action": "*:*", "Resource": "*"}),
     "iam-least-privilege", "policy"),
    ("iam-passrole-on-*", lambda: _role_policy(
        {"Effect": "Allow", "Action": ["ec2:RunInstances", "iam:PassRole"], "Resource": "*"}),
     "iam-least-privilege", "policy"),
    ("bucket-policy-principal-*", lambda: _bucket_policy(
        {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
         "Resource": "arn:aws:s3:::gpulease-dev-data/*"}),
     "no-public-resource-policy", "data-policy"),
    ("gcs-allUsers-binding", lambda: gcp.storage.BucketIAMMember(
        "public-read", bucket="gpulease-dev-data", role="roles/storage.objectViewer",
        member="allUsers"), "no-public-gcp-members", "public-read"),
    ("gcp-serial-port-enabled", lambda: _gcp_template(metadata={
        **_GOOD_METADATA, "serial-port-enable": "TRUE"}), "gcp-serial-port-disabled", "tpl"),
    ("gcp-project-ssh-keys-allowed", lambda: _gcp_template(metadata={
        k: v for k, v in _GOOD_METADATA.items() if k != "block-project-ssh-keys"}),
     "gcp-block-project-ssh-keys", "tpl"),
    ("gcp-default-compute-service-account", lambda: _gcp_template(service_account={
        "email": "123456789012-compute@developer.gserviceaccount.com",
        "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}),
     "gcp-no-default-service-account", "tpl"),
]


def test_the_planted_list_is_26_problems_15_old_and_11_new():
    assert len(PLANTED) == 26 and len({p[0] for p in PLANTED}) == 26
    assert {p[2] for p in PLANTED[15:]} >= {"no-open-ingress", "iam-least-privilege",
                                            "no-public-resource-policy", "no-public-gcp-members",
                                            "gcp-serial-port-disabled",
                                            "gcp-block-project-ssh-keys",
                                            "gcp-no-default-service-account"}


def _plan_findings(run, *, environment="dev", budget=1e9, planned=None):
    return evaluate(run.resources, budget_monthly_usd=budget, environment=environment,
                    planned_monthly_usd=planned)


class _PackOpts:
    def __init__(self, protect=False):
        self.protect = protect


def _pack_findings(run, *, environment="dev", stack_outputs=None, config=None):
    """Every policy of the CrossGuard pack over a recorded run, called the way the analyzer
    calls them: resource policies per resource, stack policies once with every resource (the
    root stack resource, carrying the stack outputs, included); props behind pulumi_policy's
    unknown-checking proxy."""
    from pulumi_policy import PolicyResource, ResourceValidationArgs, StackValidationArgs
    from pulumi_policy.policy import _NotApplicableError
    from pulumi_policy.proxy import unknown_checking_proxy

    pack = _load_pack()
    cfg = {"environment": environment, **(config or {})}
    found: list[tuple[str, str, str]] = []
    custom = [r for r in run.resources if r.custom]
    prs = [PolicyResource(r.type, unknown_checking_proxy(dict(r.inputs)), r.urn, r.name,
                          _PackOpts(r.protect), None, None, [], {}) for r in custom]
    by_urn = {p.urn: p for p in prs}
    for r, p in zip(custom, prs):
        p.dependencies = [by_urn[d] for d in r.depends_on if d in by_urn]
    if stack_outputs is not None:
        prs.append(PolicyResource("pulumi:pulumi:Stack", unknown_checking_proxy(stack_outputs),
                                  "urn:pulumi:t::gpulease::pulumi:pulumi:Stack::gpulease-t",
                                  "gpulease-t", _PackOpts(), None, None, [], {}))
    for policy in pack.build_policies():
        def report(message, urn=None, _p=policy.name):
            found.append((_p, urn or "", message))
        if hasattr(policy, "validate") and type(policy).__name__ == "ResourceValidationPolicy":
            for r, p in zip(custom, prs):
                args = ResourceValidationArgs(r.type, p.props, r.urn, r.name,
                                              _PackOpts(r.protect), None, cfg)
                policy.validate(args, report)
        else:
            try:
                policy.validate(StackValidationArgs(prs, cfg), report)
            except _NotApplicableError:
                pass
    return found


@pytest.mark.parametrize("pid,program,rule,name", PLANTED, ids=[p[0] for p in PLANTED])
def test_every_planted_problem_is_reported_by_plan_and_pack(pid, program, rule, name):
    run = run_program(program, stack="prod" if "prod" in pid else "dev")
    env = "prod" if "prod" in pid else "dev"
    urn = next(r.urn for r in run.resources if r.name == name and r.custom)
    plan = [v for v in _plan_findings(run, environment=env) if v["policy"] == rule]
    assert plan and {v["resource"] for v in plan} == {urn}, (pid, _plan_findings(run,
                                                                                environment=env))
    assert all(v["level"] == R.MANDATORY for v in plan)
    pack = [f for f in _pack_findings(run, environment=env) if f[0] == rule]
    assert pack and {u for _, u, _ in pack} == {urn}, (pid, pack)
    assert {m for _, _, m in pack} <= {v["message"] for v in plan}


def test_ingress_ranges_compare_as_networks():
    assert R.world_open(["0.0.0.0/00"]) == ["0.0.0.0/00 (= 0.0.0.0/0)"]
    assert R.world_open(["::0/0"]) == ["::0/0 (= ::/0)"]
    assert R.world_open(["0.0.0.0/1", "128.0.0.0/1"]) == ["0.0.0.0/1 + 128.0.0.0/1 (= 0.0.0.0/0)"]
    assert R.world_open(["0.0.0.0/0"]) == ["0.0.0.0/0"]
    # Most of the space is not all of it; junk is the conformance check's business.
    assert R.world_open(["0.0.0.0/1", "128.0.0.0/2", "10.0.0.0/8"]) == []
    assert R.world_open(["0.0.0.0/0/0", "not-a-cidr", None]) == []
    fw = "gcp:compute/firewall:Firewall"
    rule = R.RULES_BY_NAME["no-open-ingress"]
    allow = {"allows": [{"protocol": "tcp"}]}
    # Sources named by tag or service account: not open; a deny rule with no source: fine.
    assert rule.check(fw, {**allow, "sourceTags": ["gpu"]}, CTX) == []
    assert rule.check(fw, {**allow, "sourceServiceAccounts": ["a@p.iam.gserviceaccount.com"]},
                      CTX) == []
    assert rule.check(fw, {"denies": [{"protocol": "all"}]}, CTX) == []
    assert rule.check(fw, {**allow, "direction": "EGRESS"}, CTX) == []


def test_ingress_split_over_separate_rules_is_caught_by_the_stack_rule():
    def program():
        sg = aws.ec2.SecurityGroup("sg", vpc_id="vpc-1", tags=dict(AWS_TAGS))
        for i, cidr in enumerate(("0.0.0.0/1", "128.0.0.0/1")):
            aws.ec2.SecurityGroupRule(f"half-{i}", type="ingress", security_group_id=sg.id,
                                      cidr_blocks=[cidr], **_SSH)
        gcp.compute.Firewall("fw-a", network="net", allows=[{"protocol": "tcp"}],
                             source_ranges=["::/1"])
        gcp.compute.Firewall("fw-b", network="net", allows=[{"protocol": "tcp"}],
                             source_ranges=["8000::/1"])
        gcp.compute.Firewall("fw-other", network="other", allows=[{"protocol": "tcp"}],
                             source_ranges=["0.0.0.0/1"])
    run = run_program(program, stack="dev")
    found = [v for v in _plan_findings(run) if v["policy"] == "no-open-ingress-combined"]
    names = sorted(next(r.name for r in run.resources if r.urn == v["resource"]) for v in found)
    assert names == ["fw-a", "fw-b", "half-0", "half-1"]
    assert "half-0, half-1 together allow 0.0.0.0/1 + 128.0.0.0/1 (= 0.0.0.0/0)" in \
        next(v["message"] for v in found if v["resource"].endswith("half-0"))
    assert not [v for v in _plan_findings(run) if v["policy"] == "no-open-ingress"]
    pack = [f for f in _pack_findings(run) if f[0] == "no-open-ingress-combined"]
    assert sorted(u for _, u, _ in pack) == sorted(v["resource"] for v in found)


IAM_CASES = [
    ({"Effect": "Allow", "Action": "*", "Resource": "arn:aws:s3:::b"}, "every action"),
    ({"Effect": "Allow", "Action": "iam:CreateAccessKey", "Resource": "*"}, "iam:CreateAccessKey"),
    ({"Effect": "Allow", "Action": "IAM:Pass*", "Resource": ["*"]}, "iam:PassRole"),
    ({"Effect": "Allow", "Action": "iam:*", "Resource": "*"},
     "iam:PassRole and iam:CreateAccessKey"),
    ({"Effect": "Allow", "NotAction": "s3:*", "Resource": "*"}, "NotAction"),
]


@pytest.mark.parametrize("stmt,fragment", IAM_CASES, ids=[c[1] for c in IAM_CASES])
def test_iam_policy_findings(stmt, fragment):
    doc = {"Version": "2012-10-17", "Statement": [stmt]}
    msgs = R.check_iam_least_privilege("aws:iam/rolePolicy:RolePolicy",
                                       {"policy": _json.dumps(doc)}, CTX)
    assert len(msgs) == 1 and fragment in msgs[0], msgs


def test_iam_policy_passes_what_the_shipped_roles_do():
    ok = [{"Effect": "Allow", "Action": "iam:PassRole",
           "Resource": "arn:aws:iam::123456789012:role/nodes"},
          {"Effect": "Deny", "Action": "*", "Resource": "*"},
          {"Effect": "Allow", "Action": "ec2:DescribeInstances", "Resource": "*"}]
    doc = _json.dumps({"Version": "2012-10-17", "Statement": ok})
    assert R.check_iam_least_privilege("aws:iam/rolePolicy:RolePolicy", {"policy": doc}, CTX) == []
    # Inline role policies and admin managed-policy attachments count too; unknown text does not.
    role = {"inlinePolicies": [{"name": "x", "policy": _json.dumps(
        {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})}]}
    assert "inlinePolicies[0].policy" in R.check_iam_least_privilege("aws:iam/role:Role", role,
                                                                      CTX)[0]
    att = {"policyArn": "arn:aws:iam::aws:policy/AdministratorAccess", "role": "r"}
    assert R.check_iam_least_privilege(R.AWS_ROLE_POLICY_ATTACHMENT, att, CTX)
    assert R.check_iam_least_privilege(R.AWS_ROLE_POLICY_ATTACHMENT, {
        "policyArn": "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"}, CTX) == []
    assert R.check_iam_least_privilege("aws:iam/rolePolicy:RolePolicy",
                                       {"policy": "[unknown]"}, CTX) == []


PUBLIC_POLICY_CASES = [
    ("aws:s3/bucketPolicy:BucketPolicy", {"Effect": "Allow", "Principal": {"AWS": "*"},
                                          "Action": "s3:GetObject", "Resource": "*"}, True),
    ("aws:s3/bucketPolicy:BucketPolicy", {"Effect": "Allow", "NotPrincipal": {"AWS": "arn:x"},
                                          "Action": "s3:GetObject", "Resource": "*"}, True),
    # The shipped TLS-only policy: a Deny to everyone is a restriction, not a grant.
    ("aws:s3/bucketPolicy:BucketPolicy", {"Effect": "Deny", "Principal": "*", "Action": "s3:*",
                                          "Resource": "*", "Condition": {
                                              "Bool": {"aws:SecureTransport": "false"}}}, False),
    # Pinned to one source ARN / account: not public (S3 "The meaning of public").
    ("aws:sns/topicPolicy:TopicPolicy", {"Effect": "Allow", "Principal": "*",
                                         "Action": "sns:Publish", "Resource": "*", "Condition": {
                                             "ArnEquals": {"aws:SourceArn": "arn:aws:events:r"}}},
     False),
    ("aws:sns/topicPolicy:TopicPolicy", {"Effect": "Allow", "Principal": "*",
                                         "Action": "sns:Publish", "Resource": "*", "Condition": {
                                             "StringLike": {"aws:SourceArn": "arn:*"}}}, True),
    ("aws:s3/bucketPolicy:BucketPolicy", {"Effect": "Allow", "Principal": "*", "Action": "s3:*",
                                          "Resource": "*", "Condition": {"IpAddress": {
                                              "aws:SourceIp": ["0.0.0.0/1", "128.0.0.0/1"]}}},
     True),
    ("aws:iam/role:Role", {"Effect": "Allow", "Principal": {"AWS": "*"},
                           "Action": "sts:AssumeRole"}, True),
]


@pytest.mark.parametrize("rtype,stmt,public", PUBLIC_POLICY_CASES)
def test_resource_policies_with_everyone_as_principal(rtype, stmt, public):
    key = "assumeRolePolicy" if rtype == "aws:iam/role:Role" else "policy"
    props = {key: _json.dumps({"Version": "2012-10-17", "Statement": [stmt]})}
    msgs = R.check_no_public_resource_policy(rtype, props, CTX)
    assert bool(msgs) is public, msgs


def test_lambda_permission_for_everyone():
    p = R.AWS_LAMBDA_PERMISSION
    assert R.check_no_public_resource_policy(p, {"principal": "*", "action": "lambda:Invoke"},
                                             CTX)
    assert R.check_no_public_resource_policy(p, {"principal": "events.amazonaws.com"}, CTX) == []
    assert R.check_no_public_resource_policy(p, {"principal": "*", "sourceArn": "arn:x"},
                                             CTX) == []


@pytest.mark.parametrize("rtype,props", [
    ("gcp:storage/bucketIAMBinding:BucketIAMBinding",
     {"role": "roles/storage.objectViewer", "members": ["user:a@b.c", "allAuthenticatedUsers"]}),
    ("gcp:storage/bucketIAMPolicy:BucketIAMPolicy", {"policyData": _json.dumps(
        {"bindings": [{"role": "roles/storage.admin", "members": ["allUsers"]}]})}),
    ("gcp:cloudrunv2/serviceIamMember:ServiceIamMember",
     {"role": "roles/run.invoker", "member": "allUsers"}),
    ("gcp:storage/bucketACL:BucketACL", {"roleEntities": ["READER:allUsers"]}),
    ("gcp:storage/defaultObjectAccessControl:DefaultObjectAccessControl",
     {"entity": "allUsers", "role": "READER"}),
])
def test_gcp_public_members_in_every_iam_shape(rtype, props):
    rule = R.RULES_BY_NAME["no-public-gcp-members"]
    assert rule.applies_to(rtype)
    assert rule.check(rtype, props, CTX)
    assert rule.check(rtype, {"member": "serviceAccount:x@p.iam.gserviceaccount.com"}, CTX) == []


def test_gcp_template_metadata_and_service_account_rules():
    t = GCP_IT
    ok = {"metadata": _GOOD_METADATA, "serviceAccount": {"email": "n@p.iam.gserviceaccount.com"}}
    for name in ("gcp-serial-port-disabled", "gcp-block-project-ssh-keys",
                 "gcp-no-default-service-account"):
        assert R.RULES_BY_NAME[name].check(t, ok, CTX) == [], name
    assert R.check_gcp_serial_port(t, {"metadata": {"serial-port-enable": "1"}}, CTX)
    assert R.check_gcp_block_project_ssh_keys(t, {"metadata": {"block-project-ssh-keys":
                                                               "false"}}, CTX)
    assert R.check_gcp_default_service_account(t, {"serviceAccount": {"email": "default"}}, CTX)
    # Scopes without an email: the provider attaches the default service account.
    assert R.check_gcp_default_service_account(t, {"serviceAccount": {"scopes": ["x"]}}, CTX)
    # No service account at all: the VM has none, which is fine.
    assert R.check_gcp_default_service_account(t, {}, CTX) == []


# ---- the budget sees every dollar ------------------------------------------------------------
def test_budget_rules_judge_the_planned_total_not_the_tags():
    res = [_res("urn:1", "gcp:compute/reservation:Reservation", {}),
           _res("urn:2", "gcp:storage/bucket:Bucket", {"labels": {tags.MONTHLY_CENTS: "10000"}})]
    ctx = RuleContext(budget_monthly_usd=1000.0, planned_monthly_usd=5100.0)
    over = R.check_budget_cap(res, ctx)
    assert over == [("", "planned monthly cost $5,100.00 exceeds the budget $1,000.00 by "
                         "$4,100.00: shrink clusters, move work to spot/reserved, or raise "
                         "gpulease:budget_monthly_usd")]
    # Without a visible planned total, the tags are used, and the message says it is a floor.
    floor = R.check_budget_cap(res, RuleContext(budget_monthly_usd=50.0))
    assert "tagged monthly cost (a lower bound" in floor[0][1] and "$100.00" in floor[0][1]
    assert R.check_budget_headroom(res, RuleContext(budget_monthly_usd=5500.0,
                                                    planned_monthly_usd=5100.0))


def test_prod_ledger_total_is_what_the_budget_rules_see():
    run = program_run("prod")
    ledger = run.result.ledger.monthly_usd
    tagged = R.tagged_monthly_usd(R_evaluate_guarded(run))
    # GCP reservations and instance group managers carry no labels: the tags miss most of it.
    assert tagged < ledger / 10
    assert money.usd(run.outputs["total_monthly_usd"]) == ledger   # to the cent
    budget = run.result.decision.stack.budget_monthly_usd
    assert ledger <= budget  # the shipped prod stack fits its budget ...
    tight = float(money.usd((tagged + ledger) / 2))  # ... a budget between the two does not
    found = _plan_findings(run, environment="prod", budget=tight, planned=ledger)
    cap = [v for v in found if v["policy"] == "budget-cap"]
    assert len(cap) == 1 and f"planned monthly cost {money.fmt(ledger)}" in cap[0]["message"]
    # The pack reads the same total from the root stack resource's outputs.
    pack = [f for f in _pack_findings(run, environment="prod",
                                      stack_outputs={**run.outputs, "budget_monthly_usd": tight})
            if f[0] == "budget-cap"]
    assert len(pack) == 1 and pack[0][2] == cap[0]["message"] and pack[0][1] == ""


def R_evaluate_guarded(run):
    from gpulease.guardrails.evaluate import guarded

    return guarded(run.resources)


def test_over_budget_stack_fails_the_pack_with_the_budget_from_the_stack_outputs():
    run = program_run("dev")
    outputs = {**run.outputs, "budget_monthly_usd": 100.0}
    pack = [f for f in _pack_findings(run, stack_outputs=outputs) if f[0] == "budget-cap"]
    assert len(pack) == 1 and "exceeds the budget $100.00" in pack[0][2]
    assert R.RULES_BY_NAME["budget-cap"].level == R.MANDATORY
    within = [f for f in _pack_findings(run, stack_outputs=run.outputs) if f[0] == "budget-cap"]
    assert within == []


def test_pack_stack_rules_see_unknowns_as_masked_values_not_as_errors():
    """One unknown bucket id in preview must not switch off s3-bucket-encryption for the
    whole stack (pulumi_policy raises UnknownValueError on access)."""
    from pulumi_policy import PolicyResource, StackValidationArgs
    from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

    pack = _load_pack()
    by_name = {p.name: p for p in pack.build_policies()}
    b = PolicyResource("aws:s3/bucket:Bucket", unknown_checking_proxy(
        {"bucket": "gpulease-dev-data", "id": UNKNOWN_STRING_VALUE}), "urn:b", "b",
        _PackOpts(), None, None, [], {})
    sse = PolicyResource(next(iter(R.S3_SSE_TYPES)), unknown_checking_proxy(
        {"bucket": UNKNOWN_STRING_VALUE}), "urn:sse", "sse", _PackOpts(), None, None, [], {})
    reported = []
    by_name["s3-bucket-encryption"].validate(StackValidationArgs([b, sse], {}),
                                             lambda m, u=None: reported.append(u))
    assert reported == ["urn:b"]  # the unmatched SSE (unknown target) is not credited to b
    sse.dependencies = [b]
    reported.clear()
    by_name["s3-bucket-encryption"].validate(StackValidationArgs([b, sse], {}),
                                             lambda m, u=None: reported.append(u))
    assert reported == []


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_shipped_stacks_have_no_mandatory_violation_in_plan_or_pack(stack):
    run = program_run(stack)
    env = run.result.decision.stack
    plan = evaluate(run.resources, budget_monthly_usd=env.budget_monthly_usd,
                    environment=env.environment,
                    planned_monthly_usd=round(run.result.ledger.monthly_usd, 2))
    assert not [v for v in plan if v["level"] == R.MANDATORY], plan
    pack = _pack_findings(run, environment=env.environment, stack_outputs=run.outputs)
    mandatory = {r.name for r in R.RULES if r.level == R.MANDATORY}
    assert not [f for f in pack if f[0] in mandatory], pack
