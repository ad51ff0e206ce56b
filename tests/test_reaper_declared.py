"""Only groups the program declared belong to a cluster (issue 35 item 6): a group anyone tags
or labels like an existing cluster, without the program's tags.DECLARED (or with another
cluster's value), is reported ("not declared by the program, left alone") and never acted on -
on moto (AWS) and on the Compute fake (GCP)."""
from __future__ import annotations

import io

from gpulease import tags
from gpulease.cli import ui
from gpulease.cli.reap import render_text
from gpulease.reaper import decision as d
from gpulease.reaper import engine
from tests.test_reaper_aws import aws, by_cluster, reap  # noqa: F401 (fixture)
from tests.test_reaper_gcp import ZONE, T0, gcp, labels, mig_size, reaper  # noqa: F401
from tests.test_reaper_gcp import reap as gcp_reap


def test_declared_value_is_bound_to_environment_and_cluster():
    v = tags.declared_value("dev", "sandbox")
    assert v.startswith("v1-") and len(v) == 23 and tags.label_value(v) == v
    assert v == tags.declared_value("dev", "sandbox")
    assert len({v, tags.declared_value("prod", "sandbox"), tags.declared_value("dev", "train"),
                tags.declared_value("devs", "andbox")}) == 4
    assert tags.is_declared({tags.DECLARED: v}, "dev", "sandbox")
    assert not tags.is_declared({tags.DECLARED: v}, "dev", "train")
    assert not tags.is_declared({}, "dev", "sandbox")


def _text(report) -> str:
    buf = io.StringIO()
    render_text(report, o=ui.Out(buf))
    return " ".join(buf.getvalue().split())     # the console wraps long lines


def test_aws_foreign_group_tagged_like_a_cluster_is_never_reaped(aws):
    asg, ids, t0 = aws.cluster("dev", "sandbox")
    # someone's group with the cluster's tags (copied from the console), no declaration
    foreign, fids, _ = aws.cluster("dev", "sandbox", declared=False,
                                   extra={tags.IDLE_MINUTES: "30"})
    # and one carrying another cluster's declaration value
    copied, cids, _ = aws.cluster("dev", "sandbox",
                                  extra={tags.DECLARED: tags.declared_value("dev", "train")})
    aws.util(ids + fids + cids, t0, t0 + 120 * 60, 0.5)
    r = aws.reaper()
    first = reap(r, t0 + 40 * 60)
    o = by_cluster(first)["sandbox"]
    assert (o.state, o.nodes, o.groups) == (d.MARKED, 2, (asg,))
    assert tags.IDLE_SINCE not in aws.group_tags(foreign)
    assert tags.IDLE_SINCE not in aws.group_tags(copied)
    second = reap(r, t0 + 75 * 60)
    o = by_cluster(second)["sandbox"]
    assert (o.state, o.action, o.applied) == (d.REAPED, d.SCALE_TO_ZERO, True)
    assert aws.group(asg)["DesiredCapacity"] == 0
    # the others keep their nodes, their tags untouched
    for g in (foreign, copied):
        assert aws.group(g)["DesiredCapacity"] == 2, g
        assert tags.IDLE_SINCE not in aws.group_tags(g)
    listed = {u["group"]: u for u in second.undeclared}
    assert set(listed) == {foreign, copied}
    assert listed[foreign]["reason"] == (
        f"{foreign} is tagged {tags.CLUSTER}='sandbox', {tags.ENVIRONMENT}='dev' but carries no "
        f"{tags.DECLARED}: not declared by the program, left alone")
    assert f"carries {tags.DECLARED}='{tags.declared_value('dev', 'train')}', which is not the " \
        "value of dev/sandbox" in listed[copied]["reason"]
    assert (listed[foreign]["cloud"], listed[foreign]["nodes"]) == ("aws", 2)
    doc = second.as_json()
    assert [u["group"] for u in doc["undeclared"]] == [u["group"] for u in second.undeclared]
    text = _text(second)
    assert "not declared by the program: 2 groups tagged like a cluster, left alone" in text
    assert f"dev/sandbox (aws {r.region}): {foreign} is tagged" in text


def test_aws_only_undeclared_groups_means_no_cluster(aws):
    foreign, fids, t0 = aws.cluster("dev", "orphan", declared=False)
    aws.util(fids, t0, t0 + 120 * 60, 0.5)
    report = reap(aws.reaper(), t0 + 75 * 60)
    assert report.outcomes == []
    assert [u["group"] for u in report.undeclared] == [foreign]
    assert aws.group(foreign)["DesiredCapacity"] == 2
    assert "no gpulease clusters found" in _text(report)


def test_gcp_foreign_mig_labelled_like_a_cluster_is_never_reaped(gcp):
    mine = gcp.add_mig(ZONE, "sandbox-mig", 2, labels=labels("dev", "sandbox"), launched=T0)
    bare = {k: v for k, v in labels("dev", "sandbox").items() if k != tags.DECLARED}
    theirs = gcp.add_mig(ZONE, "team-mig", 2, labels=bare, launched=T0)
    for i in mine + theirs:
        gcp.put_points(i, T0, T0 + 3 * 3600, 0.5, gpus=4)
    r = reaper(gcp)
    o = gcp_reap(r, T0 + 40 * 60)["sandbox"]
    assert (o.state, o.nodes) == (d.MARKED, 2)
    assert tags.IDLE_SINCE not in gcp.labels_of(ZONE, "team-mig-0000")
    o = gcp_reap(r, T0 + 75 * 60)["sandbox"]
    assert (o.state, o.action, o.applied) == (d.REAPED, d.SCALE_TO_ZERO, True)
    assert mig_size(gcp, "sandbox-mig") == 0
    assert mig_size(gcp, "team-mig") == 2
    assert tags.IDLE_SINCE not in gcp.labels_of(ZONE, "team-mig-0000")
    (u,) = r.undeclared
    assert u["group"].endswith(f"/zones/{ZONE}/instanceGroupManagers/team-mig")
    assert (u["cloud"], u["environment"], u["cluster"], u["nodes"]) == ("gcp", "dev", "sandbox", 2)
    assert u["reason"].endswith(f"carries no {tags.DECLARED}: not declared by the program, "
                                "left alone")
    report = engine.run([r], policy=d.Policy(grace_minutes=30), apply=False,
                        environments=["dev"], now=T0 + 80 * 60, settle_s=0)
    assert [x["group"] for x in report.as_json()["undeclared"]] == [u["group"]]
