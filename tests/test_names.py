"""Names the clouds would reject: buckets never silently cut, never shared; stress stacks."""
from __future__ import annotations

import copy
import re

import pytest

from gpulease import naming
from gpulease.errors import ConfigError
from gpulease.planner.plan import run
from tests.test_offline_plan import BUCKET, GCE_NAME, SA_ID

#: every name at its longest, digits and dashes, every purchase model on both clouds,
#: on-demand and reserved distributed GCP clusters, datasets homed on both clouds.
STRESS = {
    "gpulease:owner": "ml-platform", "gpulease:cost_center": "cc-1",
    "gpulease:budget_monthly_usd": 1e9,
    "gpulease:environment": "stress-env-0123456789-abcdefgh",   # 30 chars
    "gpulease:name_prefix": "acme-ml-platform-01",              # 19 chars
    "gpulease:clouds": {
        "aws": {"regions": ["us-east-1"], "capacity_reservations": True},
        "gcp": {"project": "acme-stress-01", "regions": ["us-central1", "europe-west4"]}},
    "gpulease:storage": [
        {"name": "corpus-2024-shard-01-of-16-xy", "size_tb": 5, "home": "gcp:us-central1"},
        {"name": "evalsets-2025-01-aws-home-abcd", "size_tb": 1, "home": "aws:us-east-1"}],
    "gpulease:clusters": [
        {"name": "gcp-reserved-dist-h100-0001-a", "gpu": "H100", "gpus": 16,
         "hours_per_month": 730, "priority": 9, "distributed": True,
         "regions": ["us-central1", "europe-west4"], "dataset": "corpus-2024-shard-01-of-16-xy"},
        {"name": "gcp-ondemand-dist-h100-0002-b", "gpu": "H100", "gpus": 16,
         "hours_per_month": 300, "priority": 7, "distributed": True,
         "regions": ["us-central1", "europe-west4"],
         "dataset": "evalsets-2025-01-aws-home-abcd"},
        {"name": "gcp-spot-l4-0003-ccccccccccccc", "gpu": "L4", "gpus": 4,
         "hours_per_month": 200, "priority": 2, "checkpoint_minutes": 15,
         "regions": ["us-central1"]},
        {"name": "aws-reserved-h100-0004-dddddd", "gpu": "H100", "gpus": 16,
         "hours_per_month": 730, "priority": 9, "distributed": True, "regions": ["us-east-1"],
         "dataset": "corpus-2024-shard-01-of-16-xy"},
        {"name": "aws-ondemand-l4-0005-eeeeeeee", "gpu": "L4", "gpus": 8,
         "hours_per_month": 300, "priority": 6, "regions": ["us-east-1"]},
        {"name": "aws-spot-l4-0006-ffffffffffff", "gpu": "L4", "gpus": 4,
         "hours_per_month": 200, "priority": 2, "checkpoint_minutes": 15,
         "regions": ["us-east-1"], "dataset": "evalsets-2025-01-aws-home-abcd"},
    ],
}


# ---- pure naming ---------------------------------------------------------------------------
def test_a_name_that_fits_is_kept():
    assert naming.fit_name("gpulease-dev-corpus") == "gpulease-dev-corpus"


def test_a_long_name_is_shortened_with_a_digest_not_cut():
    full = "acme-ml-platform-01-stress-env-0123456789-abcdefgh-corpus-2024-shard-01-of-16-xy"
    short = naming.fit_name(full)
    assert len(short) == 63 and short != full[:63]
    assert re.fullmatch(r"[a-z0-9-]{54}-[0-9a-f]{8}", short)
    assert short == naming.fit_name(full)                      # deterministic
    # two names that only differ after character 63 no longer collide
    assert naming.fit_name(full + "-a") != naming.fit_name(full + "-b")


@pytest.mark.parametrize("name,broken", [
    ("gpulease-dev-corpus", None),
    ("gpulease-Prod-corpus", "lowercase"),
    ("gpulease-dev-corpus-", "ending"),
    ("192.168.5.4", "lowercase letters"),
    ("xn--dev-corpus", "xn--"),
    ("dev-corpus-s3alias", "-s3alias"),
    ("goog-dev-corpus", "goog"),
    ("acme-google-corpus", "google"),
])
def test_bucket_rules(name, broken):
    why = naming.bucket_rule_broken(name)
    assert (why is None) if broken is None else (broken in why), why


# ---- through the program -------------------------------------------------------------------
def _values(**changes):
    v = copy.deepcopy(STRESS)
    v.update(changes)
    return v


@pytest.fixture(scope="module")
def stress_run():
    return run(STRESS, stack="stress")


def test_stress_stack_plans_every_purchase_model_on_both_clouds(stress_run):
    models = {(c.cloud, m, c.distributed) for c in stress_run.result.decision.clusters
              for m, n in c.purchase.as_dict().items() if n}
    for cloud in ("aws", "gcp"):
        for model in ("reserved", "on_demand", "spot"):
            assert any(m[:2] == (cloud, model) for m in models), (cloud, model, models)
    assert ("gcp", "reserved", True) in models and ("gcp", "on_demand", True) in models


def test_stress_stack_names_are_all_accepted_and_unique(stress_run):
    seen = set()
    for r in stress_run.custom:
        p = r.physical_name
        if p is None:
            continue
        if r.type.startswith("gcp:compute/"):
            assert GCE_NAME.fullmatch(p), (r.urn, p)
        if r.type == "gcp:serviceaccount/account:Account":
            assert SA_ID.fullmatch(p), (r.urn, p)
        if r.type in ("gcp:storage/bucket:Bucket", "aws:s3/bucket:Bucket"):
            assert BUCKET.fullmatch(p), (r.urn, p)
            assert p not in seen, (r.urn, p)       # bucket names are global
            seen.add(p)
        if r.type == "aws:iam/role:Role":
            assert len(p) <= 64, (r.urn, p)        # IAM CreateRole RoleName max 64
        if r.type == "gcp:storage/transferJob:TransferJob":
            assert re.fullmatch(r"transferJobs/(?!OPI)[A-Za-z0-9-._~]*[A-Za-z0-9]", p), p
            assert len(p) <= 128


def test_two_storages_sharing_a_bucket_name_fail_located():
    """Storage "<x>-work" and cluster <x>'s work bucket were the same bucket (exit 0 on main)."""
    v = _values(**{"gpulease:environment": "dev"})
    v["gpulease:storage"] = v["gpulease:storage"] + [
        {"name": "gcp-spot-l4-0003-cc-work", "size_tb": 1, "home": "gcp:europe-west4"}]
    v["gpulease:clusters"] = [dict(v["gpulease:clusters"][2], name="gcp-spot-l4-0003-cc",
                                   dataset="gcp-spot-l4-0003-cc-work", index=0)]
    v["gpulease:clusters"][0].pop("index")
    with pytest.raises(ConfigError) as exc:
        run(v, stack="stress")
    text = str(exc.value)
    assert "gpulease:storage[2].name" in text and "gpulease:clusters[0].name" in text
    assert 'would both use bucket "acme-ml-platform-01-dev-gcp-spot-l4-0003-cc-work"' in text
    assert exc.value.exit_code == 2


def test_long_names_that_only_differ_past_63_chars_get_two_buckets(stress_run):
    names = [r.physical_name for r in stress_run.by_type("gcp:storage/bucket:Bucket")
             + stress_run.by_type("aws:s3/bucket:Bucket")]
    long = [n for n in names if len(n) == 63]
    assert long, names                         # the stress names do not fit: shortened
    assert len(set(names)) == len(names)


def test_an_environment_the_buckets_cannot_carry_fails_located():
    v = _values()
    v.pop("gpulease:environment")
    with pytest.raises(ConfigError) as exc:
        run(v, stack="Prod")
    text = str(exc.value)
    assert 'gpulease:environment: the environment defaults to the stack name "Prod"' in text
    assert 'set gpulease:environment: "prod" or rename the stack' in text
