"""Tags that reach the bill (issue 33 item 4): what a node group launches - EC2 instances and
EBS volumes, GCE VMs and disks - is billed on lines of its own, so the plan carries the
attribution tags onto them, and a plan that would not fails conformance (exit 4)."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpulease import tags
import importlib

C = importlib.import_module("gpulease.conformance.check")


@dataclass
class R:
    type: str
    inputs: dict
    name: str = "x"
    urn: str = "urn:pulumi:dev::gpulease::t::x"
    custom: bool = True
    outputs: dict = field(default_factory=dict)
    autoname: object = None
    physical_name: object = None


ATTR = {k: "v" for k in tags.REQUIRED}


def _billed(resource) -> list[dict]:
    return [f for f in C.check([resource]) if f["rule"] == "billed-tags"]


def test_every_shipped_plan_carries_attribution_onto_what_it_launches(shipped_run):
    stack, prun = shipped_run
    lts = [r for r in prun.resources if r.type == C._LT]
    for r in lts:
        specs = {s["resourceType"]: s["tags"] for s in r.inputs["tagSpecifications"]}
        assert set(tags.REQUIRED) <= set(specs["volume"]) and set(tags.REQUIRED) <= set(
            specs["instance"]), (stack, r.name)
    for r in prun.resources:
        if r.type in C._GCE_TEMPLATES:
            for d in r.inputs["disks"]:
                assert set(tags.REQUIRED) <= set(d["labels"]), (stack, r.name)
    assert not [f for f in C.check(prun.resources) if f["rule"] == "billed-tags"]


@pytest.mark.parametrize("resource,words", [
    (R(C._LT, {"tags": ATTR, "tagSpecifications": [{"resourceType": "instance", "tags": ATTR}]}),
     "the volumes it launches miss"),
    (R(C._ASG, {"tags": [{"key": k, "value": "v", "propagateAtLaunch": k != tags.OWNER}
                         for k in tags.REQUIRED]}), f"tag {tags.OWNER} is not propagated"),
    (R("gcp:compute/instanceTemplate:InstanceTemplate",
       {"labels": ATTR, "disks": [{"boot": True, "labels": {tags.CLUSTER: "a"}}]}),
     "disk 0 misses"),
])
def test_what_would_reach_the_bill_untagged_is_an_error(resource, words):
    (f,) = _billed(resource)
    assert f["level"] == C.ERROR and words in f["message"]


def test_resources_gpulease_does_not_attribute_are_left_alone():
    assert _billed(R(C._LT, {"tags": {"team": "x"}, "tagSpecifications": []})) == []


def test_complete_attribution_passes():
    assert _billed(R(C._LT, {"tags": ATTR, "tagSpecifications": [
        {"resourceType": "instance", "tags": ATTR}, {"resourceType": "volume", "tags": ATTR}]})) \
        == []
