"""The monthly dataset copy into a work bucket's stage/, under mocks (the nodes' own grants:
tests/test_node_privilege.py)."""
from __future__ import annotations

import json
import re
from functools import partial

import pytest

from gpulease import money
from gpulease import naming
from gpulease.catalog import load_catalog
from gpulease.clouds.aws import deploy as aws_adaptor
from gpulease.clouds.gcp import deploy as gcp_adaptor
from gpulease.clouds import staging as cross_staging
from gpulease.clouds.aws import staging as aws_staging
from gpulease.clouds.gcp import staging as gcp_staging
from gpulease.costing import transform
from gpulease.model import (CloudSpec, CostBreakdown, EnvironmentDecision, PurchaseMix,
                            StackSpec, TierShare)
from gpulease.planner.mocks import KNOWN_CALLS, SECRET_MASK, run_program
from tests import builders

CATALOG = load_catalog()
STS_TOKEN = "gcp:storage/getTransferProjectServiceAccount:getTransferProjectServiceAccount"
STS_ANSWER = KNOWN_CALLS[STS_TOKEN]({}, "")

T_JOB = "gcp:storage/transferJob:TransferJob"
T_BIAM = "gcp:storage/bucketIAMMember:BucketIAMMember"
T_ROLE = "aws:iam/role:Role"
T_POLICY = "aws:iam/rolePolicy:RolePolicy"
T_S3LOC = "aws:datasync/s3Location:S3Location"
T_OBJLOC = "aws:datasync/locationObjectStorage:LocationObjectStorage"
T_TASK = "aws:datasync/task:Task"
TRANSFER_TYPES = (T_JOB, T_TASK, T_S3LOC, T_OBJLOC)


# ---- decisions built directly (no policy), both clouds configured ----------------------------
# this file's fixture defaults on the shared builders (tests/builders.py): both clouds, each
# cluster one on-demand node in the offering's first zone (the policy always decides a zone)
STAGING_CLOUDS = (CloudSpec(cloud="aws", regions=("us-east-1", "us-west-2")),
                  CloudSpec(cloud="gcp", regions=("us-central1", "europe-west4"),
                            project="acme-test"))
make_env = partial(builders.make_env, catalog=CATALOG, clouds=STAGING_CLOUDS)
make_storage = partial(builders.make_storage,
                       tiers=(TierShare("STANDARD", 0, None, 1.0, 0.02, 200.0),))
make_cluster = partial(builders.make_cluster, catalog=CATALOG, purchase=PurchaseMix(on_demand=1),
                       distributed=False, zone=builders.FIRST_ZONE, idle=30, hours=200,
                       costs=CostBreakdown(on_demand_usd=700.0, egress_usd=123.45),
                       template="single-node-dev", hourly=3.5)


def run(env: EnvironmentDecision, *, gcs_hmac=None):
    """Both adaptors, in the program's order, with the cost transform (ledger on the run)."""
    holder = {}

    def program():
        holder["ledger"] = transform.register(env.stack, CATALOG)
        aws_adaptor.deploy(env, CATALOG, gcs_hmac=gcs_hmac)
        gcp_adaptor.deploy(env, CATALOG)
    r = run_program(program, stack=env.stack.stack)
    r.ledger = holder["ledger"]
    return r


def cluster_of(r, res) -> str:
    """Name of the GpuCluster component a resource sits under (walking parents)."""
    by_urn = {x.urn: x for x in r.resources}
    cur = res
    while cur is not None:
        if cur.type.endswith(":GpuCluster"):
            return cur.name
        cur = by_urn.get(cur.parent)
    return ""


def assert_costs_unchanged(r, env):
    by_cluster = r.ledger.by_cluster()
    for c in env.clusters:
        assert by_cluster[c.name] == c.monthly_money, c.name
    for t in TRANSFER_TYPES + (T_ROLE, T_POLICY, T_BIAM):
        for res in r.by_type(t):
            e = r.ledger.get(t, res.name)
            assert e is not None and e.monthly_usd == 0.0, res.urn


# ---- GCS -> GCS --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gcs_to_gcs():
    env = make_env([make_cluster("away", "g2-standard-8", cloud="gcp", region="europe-west4",
                                 dataset="corpus"),
                    make_cluster("home", "g2-standard-8", cloud="gcp", region="us-central1",
                                 dataset="corpus", index=1)],
                   [make_storage("corpus", "us-central1", cloud="gcp")], env="staging")
    return env, run(env)


def test_gcs_to_gcs_transfer_job(gcs_to_gcs):
    env, r = gcs_to_gcs
    job = r.one(T_JOB, "away-stage")
    assert cluster_of(r, job) == "away", job.urn
    spec = job.inputs["transferSpec"]
    assert spec["gcsDataSource"] == {"bucketName": "gpulease-staging-corpus", "path": "data/"}, \
        job.urn
    assert spec["gcsDataSink"] == {"bucketName": naming.work_bucket_name(env.stack, "away"),
                                   "path": "stage/"}, job.urn
    assert "awsS3DataSource" not in spec, job.urn
    assert spec["transferOptions"] == {"overwriteWhen": "DIFFERENT",
                                       "deleteObjectsUniqueInSink": True}, job.urn
    assert job.inputs["schedule"]["repeatInterval"] == f"{30 * 86400}s", job.urn
    assert job.inputs["schedule"]["scheduleStartDate"] == {"year": 2026, "month": 1, "day": 1}
    assert job.inputs["project"] == "acme-test", job.urn
    # nodes read exactly where the job writes
    assert naming.dataset_uri(env.stack, env.clusters[0]) == \
        f"gs://{spec['gcsDataSink']['bucketName']}/{spec['gcsDataSink']['path']}"


def test_gcs_to_gcs_service_agent_iam(gcs_to_gcs):
    env, r = gcs_to_gcs
    agent = STS_ANSWER["member"]
    work = naming.work_bucket_name(env.stack, "away")
    grants = {g.name: g for g in r.by_type(T_BIAM) if g.name.startswith("away-stage-sts-")}
    assert set(grants) == {"away-stage-sts-sink-bucket", "away-stage-sts-sink-objects",
                           "away-stage-sts-source-bucket", "away-stage-sts-source-objects"}
    for g in grants.values():
        assert g.inputs["member"] == agent, g.urn
    sink = grants["away-stage-sts-sink-objects"]
    assert sink.inputs["bucket"] == work and sink.inputs["role"] == "roles/storage.objectUser"
    assert 'objects/stage/")' in sink.inputs["condition"]["expression"], sink.urn
    src = grants["away-stage-sts-source-objects"]
    assert src.inputs["bucket"] == "gpulease-staging-corpus", src.urn
    assert src.inputs["role"] == "roles/storage.objectViewer", src.urn
    assert 'objects/data/")' in src.inputs["condition"]["expression"], src.urn
    for k in ("away-stage-sts-sink-bucket", "away-stage-sts-source-bucket"):
        assert grants[k].inputs["role"] == "roles/storage.legacyBucketReader", grants[k].urn
        assert "condition" not in grants[k].inputs, grants[k].urn  # legacy roles take none
    job = r.one(T_JOB, "away-stage")
    assert {g.urn for g in grants.values()} <= set(job.depends_on), job.urn
    assert (STS_TOKEN, {"project": "acme-test"}) in [(t, {k: v for k, v in a.items() if v})
                                                     for t, a in r.calls]


def test_no_transfer_when_the_cluster_sits_at_home(gcs_to_gcs):
    _, r = gcs_to_gcs
    for t in TRANSFER_TYPES:
        assert not [x.urn for x in r.by_type(t) if cluster_of(r, x) == "home"], t
    assert not [g.urn for g in r.by_type(T_BIAM) if g.name.startswith("home-stage")]


def test_gcs_to_gcs_costs_unchanged(gcs_to_gcs):
    assert_costs_unchanged(gcs_to_gcs[1], gcs_to_gcs[0])


# ---- S3 -> GCS --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3_to_gcs():
    env = make_env([make_cluster("evalgcp", "g2-standard-8", cloud="gcp", region="europe-west4",
                                 dataset="evals")],
                   [make_storage("evals", "us-east-1", cloud="aws")], env="staging")
    return env, run(env)


def test_s3_to_gcs_job_federates_into_an_aws_role(s3_to_gcs):
    env, r = s3_to_gcs
    job = r.one(T_JOB, "evalgcp-stage")
    src = job.inputs["transferSpec"]["awsS3DataSource"]
    role = r.one(T_ROLE, "evalgcp-sts-role")
    assert src["bucketName"] == "gpulease-staging-evals" and src["path"] == "data/", job.urn
    assert src["roleArn"] == role.outputs["arn"], job.urn
    assert "awsAccessKey" not in src, job.urn  # no long-lived keys
    assert cluster_of(r, role) == "evalgcp", role.urn
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert trust == [{"Effect": "Allow", "Principal": {"Federated": "accounts.google.com"},
                      "Action": "sts:AssumeRoleWithWebIdentity",
                      "Condition": {"StringEquals": {
                          "accounts.google.com:sub": STS_ANSWER["subjectId"]}}}], role.urn


def test_s3_to_gcs_role_reads_only_the_dataset(s3_to_gcs):
    _, r = s3_to_gcs
    pol = r.one(T_POLICY, "evalgcp-sts-read")
    doc = json.loads(pol.inputs["policy"])
    actions = {a for s in doc["Statement"] for a in ([s["Action"]] if isinstance(s["Action"], str)
                                                     else s["Action"])}
    assert actions == {"s3:GetBucketLocation", "s3:ListBucket", "s3:GetObject"}, pol.urn
    get = next(s for s in doc["Statement"] if s["Action"] == "s3:GetObject")
    assert get["Resource"] == "arn:aws:s3:::gpulease-staging-evals/data/*", pol.urn


def test_s3_to_gcs_aws_resources_use_the_source_region_provider(s3_to_gcs):
    _, r = s3_to_gcs
    prov = r.one("pulumi:providers:aws", "evalgcp-aws-us-east-1")
    assert prov.inputs["region"] == "us-east-1", prov.urn
    for t in (T_ROLE, T_POLICY):
        for res in r.by_type(t):
            if cluster_of(r, res) == "evalgcp":
                assert "::evalgcp-aws-us-east-1::" in res.provider, res.urn
    # only the sink is a GCS bucket here: no GCS source grants
    assert not [g.urn for g in r.by_type(T_BIAM) if "stage-sts-source" in g.name]


def test_s3_to_gcs_costs_unchanged_and_tags_stamped(s3_to_gcs):
    env, r = s3_to_gcs
    assert_costs_unchanged(r, env)
    role = r.one(T_ROLE, "evalgcp-sts-role")
    assert role.inputs["tags"]["gpulease-cluster"] == "evalgcp", role.urn


def test_s3_to_gcs_needs_aws_configured(monkeypatch):
    env = make_env([make_cluster("evalgcp", "g2-standard-8", cloud="gcp", region="europe-west4",
                                 dataset="evals")],
                   [make_storage("evals", "us-east-1", cloud="aws")], env="staging")
    stack = env.stack
    no_aws = StackSpec(**{**stack.__dict__, "clouds": {"gcp": stack.clouds["gcp"]}})
    env = EnvironmentDecision(**{**env.__dict__, "stack": no_aws})
    warned = []
    monkeypatch.setattr(gcp_staging.pulumi.log, "warn",
                        lambda msg, *a, **k: warned.append(msg))

    def program():
        gcp_adaptor.deploy(env, CATALOG)
    r = run_program(program, stack="staging")
    assert not r.by_type(T_JOB) and not r.by_type(T_ROLE)
    assert any("gpulease:clouds.aws is not configured" in w for w in warned), warned


# ---- S3 -> S3 across regions ----------------------------------------------------------------
@pytest.fixture(scope="module")
def s3_to_s3():
    env = make_env([make_cluster("west", "g6.xlarge", cloud="aws", region="us-west-2",
                                 dataset="corpus"),
                    make_cluster("east", "g6.xlarge", cloud="aws", region="us-east-1",
                                 dataset="corpus", index=1)],
                   [make_storage("corpus", "us-east-1", cloud="aws")], env="staging")
    return env, run(env)


def test_s3_to_s3_datasync_task_monthly(s3_to_s3):
    env, r = s3_to_s3
    task = r.one(T_TASK, "west-stage")
    assert cluster_of(r, task) == "west", task.urn
    assert task.inputs["schedule"] == {"scheduleExpression": "cron(0 3 1 * ? *)"}, task.urn
    assert task.inputs["taskMode"] == "ENHANCED", task.urn
    assert task.inputs["options"]["verifyMode"] == "ONLY_FILES_TRANSFERRED", task.urn
    assert task.inputs["options"]["preserveDeletedFiles"] == "REMOVE", task.urn
    src = r.one(T_S3LOC, "west-stage-source")
    dst = r.one(T_S3LOC, "west-stage-dest")
    assert task.inputs["sourceLocationArn"] == src.outputs["arn"], task.urn
    assert task.inputs["destinationLocationArn"] == dst.outputs["arn"], task.urn
    assert src.inputs["s3BucketArn"] == "arn:aws:s3:::gpulease-staging-corpus", src.urn
    assert src.inputs["subdirectory"] == "/data/", src.urn
    work = r.one("aws:s3/bucket:Bucket", "west-work-bucket")
    assert dst.inputs["s3BucketArn"] == work.outputs["arn"], dst.urn
    assert dst.inputs["subdirectory"] == "/stage/", dst.urn
    for res in (task, src, dst):
        assert "::aws-us-west-2::" in res.provider, res.urn  # the task's (cluster's) region


def test_s3_to_s3_datasync_role(s3_to_s3):
    env, r = s3_to_s3
    role = r.one(T_ROLE, "west-datasync-role")
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]
    assert trust["Principal"] == {"Service": "datasync.amazonaws.com"}, role.urn
    assert trust["Condition"]["StringEquals"]["aws:SourceAccount"] == "123456789012", role.urn
    for loc in ("west-stage-source", "west-stage-dest"):
        res = r.one(T_S3LOC, loc)
        assert res.inputs["s3Config"]["bucketAccessRoleArn"] == role.outputs["arn"], res.urn
    doc = json.loads(r.one(T_POLICY, "west-datasync-policy").inputs["policy"])
    resources = {s["Sid"]: s["Resource"] for s in doc["Statement"]}
    work = naming.work_bucket_name(env.stack, "west")
    assert resources["ReadSourceObjects"] == "arn:aws:s3:::gpulease-staging-corpus/data/*"
    assert resources["StageObjects"] == f"arn:aws:s3:::{work}/stage/*"
    writes = next(s for s in doc["Statement"] if s["Sid"] == "StageObjects")["Action"]
    assert "s3:PutObject" in writes and "s3:DeleteObject" in writes
    src_actions = next(s for s in doc["Statement"] if s["Sid"] == "ReadSourceObjects")["Action"]
    assert not [a for a in src_actions if a.startswith(("s3:Put", "s3:Delete"))], src_actions


def test_s3_to_s3_nothing_for_the_cluster_at_home(s3_to_s3):
    _, r = s3_to_s3
    for t in TRANSFER_TYPES + (T_ROLE,):
        assert not [x.urn for x in r.by_type(t) if x.name.startswith("east-stage")
                    or x.name.startswith("east-datasync")], t
    assert not [x for x in r.by_type("aws:s3/bucket:Bucket") if x.name == "east-work-bucket"]


def test_s3_to_s3_costs_unchanged(s3_to_s3):
    assert_costs_unchanged(s3_to_s3[1], s3_to_s3[0])


# ---- GCS -> S3 --------------------------------------------------------------------------------
def _gcs_to_s3_env():
    return make_env([make_cluster("awsjob", "g6.xlarge", cloud="aws", region="us-east-1",
                                  dataset="corpus")],
                    [make_storage("corpus", "us-central1", cloud="gcp")], env="staging")


def test_gcs_to_s3_with_an_explicit_hmac_key():
    env = _gcs_to_s3_env()
    r = run(env, gcs_hmac=cross_staging.GcsHmac(access_id="GOOG1EXAMPLEACCESSID",
                                              secret="not-a-real-secret"))
    src = r.one(T_OBJLOC, "awsjob-stage-source")
    assert src.inputs["serverHostname"] == "storage.googleapis.com", src.urn
    assert src.inputs["serverProtocol"] == "HTTPS" and src.inputs["serverPort"] == 443, src.urn
    assert src.inputs["bucketName"] == "gpulease-staging-corpus", src.urn
    assert src.inputs["subdirectory"] == "/data/", src.urn
    assert src.inputs["accessKey"] == "GOOG1EXAMPLEACCESSID", src.urn
    assert src.inputs["secretKey"] == SECRET_MASK, src.urn  # never in the plan in clear
    assert "agentArns" not in src.inputs, src.urn  # agentless (Enhanced mode)
    task = r.one(T_TASK, "awsjob-stage")
    assert task.inputs["sourceLocationArn"] == src.outputs["arn"], task.urn
    assert task.inputs["taskMode"] == "ENHANCED", task.urn
    dst = r.one(T_S3LOC, "awsjob-stage-dest")
    assert dst.inputs["subdirectory"] == "/stage/", dst.urn
    doc = json.loads(r.one(T_POLICY, "awsjob-datasync-policy").inputs["policy"])
    assert not [s for s in doc["Statement"] if s["Sid"].startswith("ReadSource")], \
        "an S3 read grant for a GCS source"
    assert not r.by_type(T_S3LOC) or "awsjob-stage-source" not in [x.name for x in
                                                                   r.by_type(T_S3LOC)]
    assert_costs_unchanged(r, env)


T_SA = "gcp:serviceaccount/account:Account"
T_HMAC = "gcp:storage/hmacKey:HmacKey"
T_GCP_PROVIDER = "pulumi:providers:gcp"
READER_TYPES = (T_SA, T_BIAM, T_HMAC, T_GCP_PROVIDER)


def gcp_resources_under(r, cluster: str) -> list[str]:
    return [x.urn for x in r.resources if cluster_of(r, x) == cluster
            and (x.type.startswith("gcp:") or x.type == T_GCP_PROVIDER)]


@pytest.fixture(scope="module")
def gcs_to_s3():
    """GCP configured (acme-test), no key passed: gpulease declares the reader and its key."""
    env = _gcs_to_s3_env()
    return env, run(env)


def test_gcs_to_s3_declares_a_reader_account_with_its_own_gcp_provider(gcs_to_s3):
    env, r = gcs_to_s3
    prov = r.one(T_GCP_PROVIDER, "awsjob-gcp")
    assert prov.inputs["project"] == "acme-test", prov.urn
    assert cluster_of(r, prov) == "awsjob", prov.urn
    sa = r.one(T_SA, "awsjob-stage-reader")
    assert cluster_of(r, sa) == "awsjob", sa.urn
    assert sa.inputs["accountId"] == "stg-staging-awsjob", sa.urn
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])", sa.inputs["accountId"]), sa.urn
    assert 6 <= len(sa.inputs["accountId"]) <= 30, sa.urn
    assert sa.inputs["project"] == "acme-test", sa.urn
    for t in (T_SA, T_BIAM, T_HMAC):
        for res in r.by_type(t):
            if cluster_of(r, res) == "awsjob":
                assert "pulumi:providers:gcp::awsjob-gcp::" in res.provider, res.urn


def test_gcs_to_s3_reader_may_list_the_bucket_and_read_only_data(gcs_to_s3):
    _, r = gcs_to_s3
    member = f"serviceAccount:{r.one(T_SA, 'awsjob-stage-reader').outputs['email']}"
    grants = {g.name: g for g in r.by_type(T_BIAM) if cluster_of(r, g) == "awsjob"}
    assert set(grants) == {"awsjob-stage-reader-bucket", "awsjob-stage-reader-objects"}, grants
    for g in grants.values():
        assert g.inputs["bucket"] == "gpulease-staging-corpus", g.urn
        assert g.inputs["member"] == member, g.urn
    lister = grants["awsjob-stage-reader-bucket"]
    assert lister.inputs["role"] == "roles/storage.legacyBucketReader", lister.urn
    assert "condition" not in lister.inputs, lister.urn  # legacy roles take no condition
    reader = grants["awsjob-stage-reader-objects"]
    assert reader.inputs["role"] == "roles/storage.objectViewer", reader.urn
    expr = reader.inputs["condition"]["expression"]
    assert 'resource.name.startsWith("projects/_/buckets/gpulease-staging-corpus/objects/data/")' \
        in expr, reader.urn
    # the same condition style as the GCP side's STS grants
    from gpulease.clouds.gcp import builders
    assert reader.inputs["condition"]["expression"] == builders.prefix_condition(
        "gpulease-staging-corpus", "data/", "x")["expression"], reader.urn


def test_gcs_to_s3_hmac_key_feeds_datasync_and_its_secret_is_masked(gcs_to_s3):
    _, r = gcs_to_s3
    sa = r.one(T_SA, "awsjob-stage-reader")
    key = r.one(T_HMAC, "awsjob-stage-reader-key")
    assert cluster_of(r, key) == "awsjob", key.urn
    assert key.inputs["serviceAccountEmail"] == sa.outputs["email"], key.urn
    assert key.inputs["project"] == "acme-test", key.urn
    assert key.outputs["secret"] == SECRET_MASK, key.urn
    grants = {g.urn for g in r.by_type(T_BIAM) if cluster_of(r, g) == "awsjob"}
    assert grants <= set(key.depends_on), key.urn  # the key exists only once it can read
    src = r.one(T_OBJLOC, "awsjob-stage-source")
    assert src.inputs["accessKey"] == key.outputs["accessId"], src.urn
    assert src.inputs["secretKey"] == SECRET_MASK, src.urn  # never in the plan in clear
    assert src.inputs["serverHostname"] == "storage.googleapis.com", src.urn
    assert src.inputs["subdirectory"] == "/data/", src.urn
    assert key.urn in src.depends_on, src.urn
    task = r.one(T_TASK, "awsjob-stage")
    assert task.inputs["sourceLocationArn"] == src.outputs["arn"], task.urn
    assert task.inputs["destinationLocationArn"] == \
        r.one(T_S3LOC, "awsjob-stage-dest").outputs["arn"], task.urn
    assert task.inputs["schedule"] == {"scheduleExpression": "cron(0 3 1 * ? *)"}, task.urn


def test_gcs_to_s3_declared_reader_costs_nothing(gcs_to_s3):
    env, r = gcs_to_s3
    assert_costs_unchanged(r, env)
    for t in (T_SA, T_HMAC):
        for res in r.by_type(t):
            e = r.ledger.get(t, res.name)
            assert e is not None and e.monthly_usd == 0.0, res.urn
    # the plan total is the one of the same stack staged with an existing key
    with_key = run(env, gcs_hmac=cross_staging.GcsHmac(access_id="GOOG1EXAMPLEACCESSID",
                                                     secret="not-a-real-secret"))
    assert r.ledger.monthly_usd == with_key.ledger.monthly_usd
    assert r.ledger.by_cluster() == with_key.ledger.by_cluster()


def test_gcs_to_s3_override_key_declares_no_gcp_reader():
    env = _gcs_to_s3_env()
    r = run(env, gcs_hmac=cross_staging.GcsHmac(access_id="GOOG1EXAMPLEACCESSID",
                                              secret="not-a-real-secret"))
    assert not gcp_resources_under(r, "awsjob")
    assert not r.by_type(T_SA) or "awsjob-stage-reader" not in [x.name for x in r.by_type(T_SA)]
    assert not r.by_type(T_HMAC)
    assert r.one(T_OBJLOC, "awsjob-stage-source").inputs["accessKey"] == "GOOG1EXAMPLEACCESSID"


def test_no_gcp_reader_for_s3_sources_or_clusters_at_home(s3_to_s3, gcs_to_gcs):
    _, r = s3_to_s3
    for cluster in ("west", "east"):
        assert not gcp_resources_under(r, cluster), cluster
    assert not r.by_type(T_HMAC) and not r.by_type(T_GCP_PROVIDER)
    _, r = gcs_to_gcs  # GCP clusters stage with STS, never with an HMAC key
    assert not r.by_type(T_HMAC)
    assert not [x.urn for x in r.by_type(T_SA) if x.name.endswith("-stage-reader")]


@pytest.mark.parametrize("gcp_cloud", ["absent", "no-project"])
def test_gcs_to_s3_without_gcp_configured_warns_and_declares_nothing(monkeypatch, gcp_cloud):
    env = _gcs_to_s3_env()
    clouds = {"aws": env.stack.clouds["aws"]}
    if gcp_cloud == "no-project":
        clouds["gcp"] = CloudSpec(cloud="gcp", regions=("us-central1",), project=None)
    stack = StackSpec(**{**env.stack.__dict__, "clouds": clouds})
    env = EnvironmentDecision(**{**env.__dict__, "stack": stack})
    warned = []
    monkeypatch.setattr(aws_staging.pulumi.log, "warn", lambda msg, *a, **k: warned.append(msg))
    holder = {}

    def program():  # the AWS adaptor only: the GCP one refuses a stack without a project
        holder["ledger"] = transform.register(env.stack, CATALOG)
        aws_adaptor.deploy(env, CATALOG)
    r = run_program(program, stack="staging")
    r.ledger = holder["ledger"]
    for t in TRANSFER_TYPES + READER_TYPES:
        assert not r.by_type(t), t
    assert not [x.urn for x in r.by_type(T_ROLE) if "datasync" in x.name]
    assert len(warned) == 1, warned
    assert "HMAC key" in warned[0] and "gs://gpulease-staging-corpus/data/" in warned[0], warned
    assert "gpulease:clouds.gcp.project is not configured" in warned[0], warned
    r.one("aws:s3/bucket:Bucket", "awsjob-work-bucket")  # the bucket the nodes read is there
    assert r.ledger.by_cluster()["awsjob"] == env.clusters[0].monthly_money


def test_reader_account_ids_are_valid_unique_and_apart_from_node_accounts():
    from gpulease.clouds.gcp import builders
    env = _gcs_to_s3_env()
    ids = {}
    for cluster in ("a", "awsjob", "x" * 40 + "-one", "x" * 40 + "-two", "train-" + "y" * 30):
        rid = cross_staging.reader_account_id(env.stack.environment, cluster)
        assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])", rid) and 6 <= len(rid) <= 30, rid
        # deterministic
        assert rid == cross_staging.reader_account_id(env.stack.environment, cluster)
        assert rid != builders.service_account_id(env.stack.environment, cluster), rid
        ids[cluster] = rid
    assert len(set(ids.values())) == len(ids), ids
    prod = StackSpec(**{**env.stack.__dict__, "environment": "prod"})
    assert cross_staging.reader_account_id(prod.environment, "awsjob") != ids["awsjob"]


def test_reader_bucket_iam_waits_for_the_dataset_bucket():
    """The hook the program can use: the grants depend on the bucket's resources."""
    import pulumi
    import pulumi_aws as aws
    import pulumi_gcp as gcp
    env = _gcs_to_s3_env()

    def program():
        parent = pulumi.ComponentResource("gpulease:aws:GpuCluster", "awsjob")
        bucket = gcp.storage.Bucket("corpus-bucket", name="gpulease-staging-corpus",
                                    location="US-CENTRAL1")
        aws_staging.declare_staging(
            "awsjob", route=naming.staging_route(env.stack, env.clusters[0]),
            environment=env.stack.environment,
            gcp_project=env.stack.clouds["gcp"].project, decision=env.clusters[0],
            work_bucket_arn="arn:aws:s3:::gpulease-staging-awsjob-work",
            provider=aws.Provider("aws-us-east-1", region="us-east-1"), parent=parent,
            gcs_bucket_dependencies=(bucket,))
    r = run_program(program, stack="staging")
    bucket = r.one("gcp:storage/bucket:Bucket", "corpus-bucket")
    for g in r.by_type(T_BIAM):
        assert bucket.urn in g.depends_on, g.urn
    r.one(T_TASK, "awsjob-stage")


# ---- pure route ---------------------------------------------------------------------------------
def test_route_matches_what_the_nodes_read():
    env = _gcs_to_s3_env()
    d = env.clusters[0]
    route = naming.staging_route(env.stack, d)
    assert route.dest_uri == naming.dataset_uri(env.stack, d)
    assert route.source_uri == "gs://gpulease-staging-corpus/data/"
    home = make_cluster("h", "g2-standard-8", cloud="gcp", region="us-central1", dataset="corpus")
    assert naming.staging_route(env.stack, home) is None
    nodata = make_cluster("n", "g6.xlarge", cloud="aws", region="us-east-1", dataset=None)
    assert naming.staging_route(env.stack, nodata) is None  # work bucket, nothing to copy


def test_transfer_resources_carry_the_cost_tags(s3_to_s3):
    from gpulease import tags
    _, r = s3_to_s3
    for t in (T_TASK, T_S3LOC, T_ROLE):
        for res in r.by_type(t):
            missing = [k for k in tags.REQUIRED_AWS if k not in (res.inputs.get("tags") or {})]
            assert not missing, (res.urn, missing)
