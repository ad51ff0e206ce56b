"""Guardrail rules: each policy called directly with a passing and a failing resource, the
offline evaluation over a real program run under mocks, and the CrossGuard pack."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pulumi
import pulumi_aws as aws
import pytest

from infra.costing import tags
from infra.guardrails import rules as R
from infra.guardrails.evaluate import evaluate, has_mandatory
from infra.guardrails.rules import GuardedResource, RuleContext
from infra.planner.mocks import run_program

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
    assert R.tagged_monthly_usd(res) == pytest.approx(1100.25)
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
    assert meta["runtime"]["name"] == "python"
    reqs = (ROOT / "policy-pack" / "requirements.txt").read_text().split()
    assert "-e" in reqs and ".." in reqs and any(r.startswith("pulumi-policy==") for r in reqs)


def test_pack_builds_a_policy_pack_with_every_rule(monkeypatch):
    import pulumi_policy
    from pulumi_policy import policy as pp
    from pulumi.runtime.proto import analyzer_pb2 as proto

    pack = _load_pack()
    policies = pack.build_policies()
    assert [p.name for p in policies] == [r.name for r in R.RULES]

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
