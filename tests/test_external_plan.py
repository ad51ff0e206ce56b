"""`plan --from-preview` / `--from-state` (issue 36 item 1): a real `pulumi preview --json`
(Pulumi's PreviewDigest: steps[] of op, urn, provider, oldState/newState, diffReasons,
replaceReasons, detailedDiff; changeSummary) or a `pulumi stack export`, costed to the cent
the same as the offline plan of the same stack; what gpulease cannot price listed, never $0."""
from __future__ import annotations

import copy
import json

import pytest

from gpulease.cli import main

UNKNOWN_STRING = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    out = tmp_path_factory.mktemp("offline") / "plan.json"
    assert main(["plan", "--stack", "staging", "--json", "--out", str(out)]) == 0
    return json.loads(out.read_text())


def _state(r: dict) -> dict:
    # what the engine writes as newState (apitype.ResourceV3): provider-computed outputs are
    # unknown at preview
    return {"urn": r["urn"], "custom": True, "type": r["type"], "inputs": r["inputs"],
            "outputs": {"id": UNKNOWN_STRING, "arn": UNKNOWN_STRING},
            "parent": "urn:pulumi:staging::gpulease::pulumi:pulumi:Stack::gpulease-staging"}


def preview_of(plan: dict) -> dict:
    steps = [{"op": "create", "urn": r["urn"], "provider": "", "newState": _state(r),
              "detailedDiff": None} for r in plan["resources"]]
    steps.insert(0, {"op": "create", "urn": "urn:pulumi:staging::gpulease::pulumi:pulumi:Stack::"
                     "gpulease-staging", "newState": {"urn": "x", "custom": False,
                                                      "type": "pulumi:pulumi:Stack"}})
    return {"config": {"gpulease:owner": "ml-platform"}, "steps": steps,
            "diagnostics": [], "duration": 1200000000,
            "changeSummary": {"create": len(steps)}}


def _cost(tmp_path, doc, *extra, flag="--from-preview"):
    f = tmp_path / "doc.json"
    f.write_text(json.dumps(doc))
    out = tmp_path / "costed.json"
    code = main(["plan", "--stack", "staging", flag, str(f), "--json", "--out", str(out),
                 *extra])
    return code, (json.loads(out.read_text()) if out.exists() else None)


def test_a_preview_of_the_same_stack_costs_to_the_cent_the_same(offline, tmp_path):
    code, doc = _cost(tmp_path, preview_of(offline))
    assert code == 0
    assert doc["totals"]["monthly_usd"] == offline["totals"]["monthly_usd"]
    assert doc["totals"]["by_cluster"] == {k: v for k, v in sorted(
        offline["totals"]["by_cluster"].items())}
    x = doc["external"]
    assert x["unknown"] == [] and x["only_in_plan"] == [] and x["priced_by"]["tag"] > 0
    assert x["ops"] == {"create": len(offline["resources"]) + 1}


def test_replaces_deletes_own_instances_and_unknown_types(offline, tmp_path):
    doc = preview_of(offline)
    tagged = next(s for s in doc["steps"][1:]
                  if isinstance(s["newState"]["inputs"].get("tags"), dict)
                  and s["newState"]["inputs"]["tags"].get("gpulease-monthly-usd")
                  not in (None, "0.00"))
    gone = tagged["newState"]["inputs"]["tags"]["gpulease-monthly-usd"]
    tagged["op"] = "delete"
    tagged["oldState"] = tagged.pop("newState")
    repl = doc["steps"][2]
    repl.update(op="replace", replaceReasons=["instanceType"],
                detailedDiff={"instanceType": {"kind": "update-replace", "inputDiff": True}})
    doc["steps"].append({"op": "create", "urn": "urn:pulumi:staging::gpulease::"
                         "aws:ec2/instance:Instance::team-box",
                         "newState": {"urn": "u", "custom": True,
                                      "type": "aws:ec2/instance:Instance",
                                      "inputs": {"instanceType": "p5.48xlarge",
                                                 "availabilityZone": "us-east-1a"}}})
    doc["steps"].append({"op": "create", "urn": "urn:pulumi:staging::gpulease::"
                         "random:index/randomId:RandomId::suffix",
                         "newState": {"urn": "u2", "custom": True,
                                      "type": "random:index/randomId:RandomId",
                                      "inputs": {"byteLength": 4}}})
    code, out = _cost(tmp_path, doc)
    assert code == 0
    from gpulease import money
    from gpulease.catalog import load_catalog

    p5 = next(o for o in load_catalog().offerings
              if o.instance_type == "p5.48xlarge" and o.region == "us-east-1")
    want = money.usd(offline["totals"]["monthly_usd"]) - money.usd(gone) + \
        money.usd(p5.on_demand_usd * 730.0)
    assert money.usd(out["totals"]["monthly_usd"]) == want
    x = out["external"]
    assert x["unknown"] == [{"urn": "urn:pulumi:staging::gpulease::random:index/randomId:"
                                    "RandomId::suffix", "type": "random:index/randomId:RandomId"}]
    assert x["removed"] == [tagged["urn"]] and x["priced_by"]["catalog on-demand"] == 1
    assert x["ops"]["replace"] == 1 and x["ops"]["delete"] == 1


@pytest.mark.parametrize("mutate,words", [
    (lambda d: d["steps"][1].update(op="frobnicate"), "steps[1].op"),
    (lambda d: d["steps"][1].update(urn="x"), "not a Pulumi URN"),
    (lambda d: d["steps"][1].pop("newState"), "no newState"),
    (lambda d: d["steps"][1].update(urn=d["steps"][1]["urn"].replace("staging", "prod", 1)),
     "mixes stacks"),
    (lambda d: d.update(steps={"a": 1}), "not a `pulumi preview --json` document"),
])
def test_a_document_that_is_not_a_preview_is_exit_2(offline, tmp_path, capsys, mutate, words):
    doc = preview_of(offline)
    mutate(doc)
    code, out = _cost(tmp_path, doc)
    assert code == 2 and out is None
    assert words in capsys.readouterr().err


def test_another_stacks_preview_is_refused(offline, tmp_path, capsys):
    doc = json.loads(json.dumps(preview_of(offline)).replace("urn:pulumi:staging::",
                                                             "urn:pulumi:prod::"))
    code, _ = _cost(tmp_path, doc)
    assert code == 2 and 'of stack "prod"' in capsys.readouterr().err


def test_a_stack_export_costs_the_same(offline, tmp_path):
    export = {"version": 3, "deployment": {"manifest": {}, "resources": [
        {**_state(r), "id": "i-123", "outputs": {}} for r in offline["resources"]]}}
    code, doc = _cost(tmp_path, export, flag="--from-state")
    assert code == 0 and doc["totals"]["monthly_usd"] == offline["totals"]["monthly_usd"]
    assert doc["external"]["kind"] == "state"
