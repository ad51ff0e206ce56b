"""The cloud registry: each cloud's answers (today's behaviour), every module it names imports,
no cloud-name comparison in shared code, and docs/architecture.md names a new cloud's files."""
from __future__ import annotations

import ast
import base64
import gzip
import importlib
import re
import subprocess
import sys
import typing
from decimal import Decimal
from pathlib import Path

import pytest

from gpulease import model, tags
from gpulease.clouds import registry
from gpulease.clouds.base import Cloud

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "gpulease"
AWS, GCP = registry.get("aws"), registry.get("gcp")


# ---- the registry ------------------------------------------------------------------------
def test_names_order_and_lookup():
    assert registry.NAMES == ("aws", "gcp") == model.CLOUDS
    assert registry.DEPLOY_ORDER == ("gcp", "aws")
    assert set(registry.DEPLOY_ORDER) == set(registry.NAMES)
    # the schema's Literal spells the same names
    assert typing.get_args(model.Cloud) == registry.NAMES
    # and the catalog and quote file schemas take theirs from the registry
    from gpulease.catalog import schema
    from gpulease.quotes import store

    for row in (schema.OfferingRow, schema.StorageRow, schema.EgressRow, schema.InfraRow,
                store.QuoteRow, store.RiskRow):
        assert typing.get_args(row.model_fields["cloud"].annotation) == registry.NAMES, row
    key = typing.get_args(schema.CatalogDoc.model_fields["spot_interruptions"].annotation)[0]
    assert typing.get_args(key) == registry.NAMES
    assert all(isinstance(c, Cloud) for c in registry.CLOUDS)
    with pytest.raises(KeyError, match=r"unknown cloud 'gpc' \(known: aws, gcp\); did you mean "
                                       r"'gcp'\?"):
        registry.get("gpc")
    with pytest.raises(KeyError, match=r"unknown cloud 'azure' \(known: aws, gcp\)") as exc:
        registry.get("azure")
    assert "did you mean" not in str(exc.value)
    assert registry.by_provider("aws") is AWS and registry.by_provider("random") is None
    assert registry.sdk_packages() == {"aws": "pulumi_aws", "gcp": "pulumi_gcp"}


@pytest.mark.parametrize("cloud,answers", [
    (AWS, dict(title="AWS", tag_style="tags", node_group="Auto Scaling group",
               node_templates="launch templates", url_scheme="s3", location_scope="region",
               notice_window_seconds=120, poll_seconds=5, metadata_url="http://169.254.169.254",
               tier_classes=("STANDARD", "STANDARD_IA", "GLACIER_IR", "DEEP_ARCHIVE"),
               min_transition_days=(("STANDARD_IA", 30), ("ONEZONE_IA", 30)))),
    (GCP, dict(title="Google Cloud", tag_style="labels", node_group="managed instance group",
               node_templates="instance templates", url_scheme="gs", location_scope="project",
               notice_window_seconds=30, poll_seconds=2,
               metadata_url="http://metadata.google.internal",
               tier_classes=("STANDARD", "NEARLINE", "COLDLINE", "ARCHIVE"),
               min_transition_days=())),
])
def test_each_cloud_answers(cloud, answers):
    for field, want in answers.items():
        assert getattr(cloud, field) == want, field


@pytest.mark.parametrize("cloud,region,zone,continent", [
    (AWS, "us-east-1", "us-east-1a", "north-america"),
    (AWS, "ap-southeast-2", "ap-southeast-2a", "oceania"),
    (AWS, "ap-northeast-1", "ap-northeast-1a", "asia"),
    (AWS, "il-central-1", "il-central-1a", "middle-east"),
    (GCP, "us-central1", "us-central1-a", "north-america"),
    (GCP, "australia-southeast1", "australia-southeast1-a", "oceania"),
    (GCP, "northamerica-northeast1", "northamerica-northeast1-a", "north-america"),
    (GCP, "europe-west4", "europe-west4-a", "europe"),
])
def test_zone_and_continent(cloud, region, zone, continent):
    assert cloud.default_zone(region) == zone
    assert cloud.continent_of(region) == continent
    assert re.match(cloud.region_pattern, region)


@pytest.mark.parametrize("cloud,instance_type,family", [
    (AWS, "p5.48xlarge", "p5"), (AWS, "p6-b200.48xlarge", "p6-b200"),
    (GCP, "a3-highgpu-8g", "a3-highgpu"), (GCP, "n1-highmem-8", "n1"), (GCP, "g2-standard-4",
                                                                          "g2-standard"),
])
def test_family(cloud, instance_type, family):
    assert cloud.family_of(instance_type) == family


@pytest.mark.parametrize("cloud,region,good,bad,text", [
    (AWS, "us-east-1", ("use1-az1", "usw2-lax1-az1"), ("us-east-1a",),
     "AWS zone IDs like use1-az1"),
    (GCP, "us-central1", ("us-central1-a",), ("usc1-az1",),
     "GCP zones of us-central1 like us-central1-a"),
])
def test_zone_spelling_and_storage_classes(cloud, region, good, bad, text):
    assert re.match(cloud.region_pattern, cloud.region_example)
    assert all(re.match(cloud.zone_pattern, z) for z in good)
    assert not any(re.match(cloud.zone_pattern, z) for z in bad)
    assert cloud.zones_text.format(region=region) == text
    # every lifecycle tier class is a class the store accepts
    assert set(cloud.tier_classes) <= set(cloud.storage_classes)


def test_tags_and_labels():
    assert AWS.tag_value("Team A.1") == "Team A.1"
    assert GCP.tag_value("Team A.1") == tags.label_value("Team A.1") == "team-a-1"
    values = {tags.CLUSTER: "Train.1", tags.ENVIRONMENT: "dev"}
    assert AWS.cost_tags(values, Decimal("12.5")) == {**values, tags.MONTHLY_USD: "12.50"}
    assert GCP.cost_tags(values, Decimal("12.5")) == {
        tags.CLUSTER: "train-1", tags.ENVIRONMENT: "dev", tags.MONTHLY_CENTS: "1250"}


def test_node_groups_user_data_and_windows():
    assert AWS.node_group_models(("reserved", "spot")) == ("mixed",)
    assert AWS.node_group_models(("reserved", "on_demand")) == ("reserved", "on_demand")
    assert AWS.node_group_models(("spot",)) == ("spot",)
    assert GCP.node_group_models(("reserved", "spot")) == ("reserved", "spot")
    assert gzip.decompress(base64.b64decode(AWS.encode_user_data("#cloud-config\n"))) == \
        b"#cloud-config\n"
    assert GCP.encode_user_data("#cloud-config\n") == "#cloud-config\n"
    assert AWS.window_options_by_default("p5.48xlarge") == {"capacity_block"}
    assert AWS.window_options_by_default("g6.xlarge") == frozenset()
    assert GCP.window_options_by_default("a3-highgpu-8g") == {"flex_start", "future_reservation"}
    assert GCP.window_options_by_default("n1-standard-8") == frozenset()
    assert [f for f, _ in AWS.node_files] == ["amazon-cloudwatch-agent.json.j2"]
    assert [f for f, _ in GCP.node_files] == ["ops-agent.yaml.j2"]


def test_project_sshd_and_location():
    class Spec:
        project, ssh_via_iap = "p-1", True
    assert (AWS.project(Spec()), GCP.project(Spec()), GCP.project(None)) == ("", "p-1", "")
    assert (AWS.keeps_sshd(Spec()), GCP.keeps_sshd(Spec()), GCP.keeps_sshd(None)) == \
        (False, True, False)
    assert AWS.location(region="us-east-1", cloud_spec=Spec()) == "us-east-1"
    assert GCP.location(region="us-central1", cloud_spec=Spec()) == "p-1"


def test_credentials_hints_are_todays_texts():
    from gpulease import credentials

    assert credentials.CLOUD_NAMES == {"aws": "AWS", "gcp": "Google Cloud"}
    assert credentials.FIX["aws"].startswith("set AWS_PROFILE to a profile in ~/.aws/config "
                                             "(`aws configure` or `aws sso login` writes one)")
    assert credentials.FIX["gcp"] == ("run `gcloud auth application-default login`, or set "
                                      "GOOGLE_APPLICATION_CREDENTIALS to a service-account key "
                                      "file")


def test_shared_tables_come_from_the_registry():
    from gpulease import program
    from gpulease.bootstrap import render
    from gpulease.catalog import MIN_TRANSITION_DAYS, TIER_CLASSES

    assert program.CLOUD_ADAPTORS == {"aws": "gpulease.clouds.aws.deploy",
                                      "gcp": "gpulease.clouds.gcp.deploy"}
    assert program.DEPLOY_ORDER == ("gcp", "aws")
    assert render.NOTICE_WINDOW_SECONDS == {"aws": 120, "gcp": 30}
    assert TIER_CLASSES["gcp"][1] == "NEARLINE"
    assert MIN_TRANSITION_DAYS == {("aws", "STANDARD_IA"): 30, ("aws", "ONEZONE_IA"): 30}


# ---- module paths ----------------------------------------------------------------------------
def module_paths() -> list[str]:
    return sorted({m for c in registry.CLOUDS for m in c.module_paths.values()})


@pytest.mark.parametrize("path", module_paths())
def test_every_module_path_imports(path):
    mod = importlib.import_module(path)
    if path.endswith(".deploy"):
        assert callable(mod.deploy)
    if path.endswith("_deploy"):
        assert callable(mod.prepare)
    if path.endswith(".fetchers." + path.rsplit(".", 1)[-1]):
        assert callable(mod.fetch) and callable(mod.targets)
    if path.startswith("gpulease.credentials."):
        assert callable(mod.missing) and callable(mod.reason)


#: what every cloud's command module (``Cloud.cli_module``) answers.
CLI_FUNCTIONS = ("reap_arg_findings", "reap_by_default", "reap_adaptors", "recommend_adaptor",
                 "refresh_clients", "collect_quotes")


def test_every_cloud_answers_each_command():
    from gpulease.cli.common import cloud_cli, cloud_needs

    for c in registry.CLOUDS:
        mod = cloud_cli(c.name)
        assert mod.__name__ == c.cli_module
        assert all(callable(getattr(mod, f)) for f in CLI_FUNCTIONS), c.name
        assert set(mod.NEEDS) == {"reap", "recommend", "catalog refresh", "catalog quotes"}
    # the texts the commands printed before they moved to the per-cloud modules
    assert cloud_needs("reap") == {
        "aws": "reap reads Auto Scaling groups, CloudWatch metrics and capacity reservations",
        "gcp": "reap reads instance groups, Cloud Monitoring metrics and reservations"}
    assert cloud_needs("catalog refresh")["gcp"] == ("refresh reads the Cloud Billing Catalog "
                                                     "and Compute machine types")
    with pytest.raises(KeyError, match="unknown cloud 'azure'"):
        cloud_cli("azure")


def test_registry_imports_no_pulumi_pydantic_or_sdk():
    """The reaper bundles import the registry through gpulease.model: plain Python only."""
    code = ("import sys; import gpulease.model, gpulease.clouds.registry; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('pulumi', 'pydantic', 'boto3', "
            "'botocore', 'google', 'yaml', 'jinja2')]; print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_reaper_bundles_carry_the_registry():
    from gpulease.reaper import aws_deploy, bundle, gcp_deploy

    for files in (aws_deploy.LAMBDA_FILES, gcp_deploy.GCP_FUNCTION_FILES):
        for c in registry.CLOUDS:
            assert f"clouds/{c.name}/cloud.py" in files
        assert {"clouds/base.py", "clouds/registry.py"} <= set(files)
        assert files[:len(bundle.SHARED_FILES)] == bundle.SHARED_FILES
    # each bundle carries its own cloud's adaptor and no other's
    assert "reaper/aws.py" in aws_deploy.LAMBDA_FILES
    assert "reaper/gcp.py" not in aws_deploy.LAMBDA_FILES
    assert "reaper/gcp.py" in gcp_deploy.GCP_FUNCTION_FILES
    assert "reaper/aws.py" not in gcp_deploy.GCP_FUNCTION_FILES


# ---- no cloud-name comparison outside the per-cloud files ------------------------------------
#: files that are a cloud's own (they may name it).
def per_cloud(rel: str) -> bool:
    for name in registry.NAMES:
        if rel.startswith((f"clouds/{name}/", f"credentials/{name}.py", f"cli/clouds/{name}.py")):
            return True
        if rel in (f"reaper/{name}.py", f"reaper/{name}_deploy.py", f"catalog/fetchers/{name}.py",
                   f"quotes/{name}.py", f"inventory/{name}.py"):
            return True
    return rel in ("reaper/lambda_handler.py", "reaper/gcp_function.py", "clouds/registry.py")


#: what remains, with the reason; file -> reason. A file fixed leaves this list (checked below).
ALLOWED = {
    "model.py": "the schema's Literal of cloud names (checked equal to registry.NAMES)",
}


def _cloud_name_uses(tree: ast.AST) -> list[tuple[int, str]]:
    names = set(registry.NAMES)

    def is_name(node) -> bool:
        return isinstance(node, ast.Constant) and node.value in names

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            if any(is_name(x) for x in [node.left, *node.comparators]):
                out.append((node.lineno, "comparison"))
            for op, right in zip(node.ops, node.comparators):   # x in ("aws", ...)
                if isinstance(op, (ast.In, ast.NotIn)) and isinstance(
                        right, (ast.Tuple, ast.List, ast.Set)) and any(map(is_name, right.elts)):
                    out.append((node.lineno, "membership"))
        elif isinstance(node, ast.Dict) and any(is_name(k) for k in node.keys if k is not None):
            out.append((node.lineno, "dict key"))
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(map(is_name, node.elts)):
            out.append((node.lineno, "tuple"))
    return out


def scan() -> dict[str, list[tuple[int, str]]]:
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if per_cloud(rel):
            continue
        hits = _cloud_name_uses(ast.parse(path.read_text(encoding="utf-8"), rel))
        if hits:
            found[rel] = hits
    return found


def test_no_cloud_name_comparison_outside_the_per_cloud_files():
    found = scan()
    unexpected = {f: h for f, h in found.items() if f not in ALLOWED}
    assert not unexpected, ("compare, key or list clouds through gpulease.clouds.registry "
                            f"(or add a reasoned entry to ALLOWED): {unexpected}")
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"no cloud names left in {stale}: remove them from ALLOWED"


def test_the_scan_sees_each_pattern():
    code = ('a = x == "aws"\nb = {"gcp": 1}\nc = ("aws", "gcp")\nd = y in ("gcp",)\n'
            'e = "aws" != z\n')
    assert [k for _, k in _cloud_name_uses(ast.parse(code))].count("comparison") >= 2
    kinds = {k for _, k in _cloud_name_uses(ast.parse(code))}
    assert kinds == {"comparison", "dict key", "tuple", "membership"}


# ---- docs/architecture.md "Adding a cloud" ---------------------------------------------------
def test_architecture_lists_the_files_a_new_cloud_adds():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert "## Adding a cloud" in text
    section = text.split("## Adding a cloud", 1)[1].split("\n## ", 1)[0]
    for c in registry.CLOUDS:
        for path in c.module_paths.values():
            generic = path.replace(f".{c.name}.", ".<cloud>.").replace(f".{c.name}", ".<cloud>")
            file = generic.replace(".", "/") + ".py"
            assert file in section, f"docs/architecture.md 'Adding a cloud' misses {file}"
    for shared in ("gpulease/clouds/registry.py", "gpulease/clouds/base.py"):
        assert shared in section


# ---- the config's per-cloud sections build their own CloudSpec -----------------------------
def test_each_cloud_config_section_checks_itself():
    from gpulease.config.schema import CloudsConfig

    found = []
    cfg = CloudsConfig.model_validate({
        "aws": {"regions": ["us-east-1"], "subnet_ids": ["subnet-0123456789abcdef0"],
                "local_zones": ["us-west-2"]},
        "gcp": {"project": "acme-ml-dev", "regions": ["us-central1"], "subnetwork": "s"}})
    specs = {c: getattr(cfg, c).spec(lambda path, msg: found.append((path, msg)))
             for c in registry.NAMES}
    assert found == [
        ("gpulease:clouds.aws.subnet_ids", "subnet_ids need vpc_id"),
        ("gpulease:clouds.aws.local_zones[0]", '"us-west-2" is not in gpulease:clouds.aws.'
         'regions (did you mean "us-east-1"?); list regions whose Local Zones may be used'),
        ("gpulease:clouds.gcp.subnetwork", "subnetwork needs network")]
    assert {c: s.cloud for c, s in specs.items()} == {c: c for c in registry.NAMES}
    assert specs["aws"].subnets == ("subnet-0123456789abcdef0",)
    assert specs["gcp"].project == "acme-ml-dev" and specs["gcp"].subnets == ("s",)


def test_injected_clients_are_keyed_by_cloud_name():
    """refresh / the commands take clients per cloud (``aws=...``): a key naming no cloud is a
    TypeError, not silently a cloud without clients."""
    from gpulease.catalog import load_catalog
    from gpulease.catalog.refresh import refresh
    from gpulease.cli.common import check_cloud_clients

    with pytest.raises(TypeError, match=r"unknown clouds \['azure'\]"):
        refresh(load_catalog(None), scope={}, version="v", azure=object())
    with pytest.raises(TypeError, match=r"unknown clouds \['gpc'\]"):
        check_cloud_clients({"aws": None, "gpc": object()})
    check_cloud_clients({c: None for c in registry.NAMES})
