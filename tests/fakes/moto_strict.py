"""Make moto's Auto Scaling as strict as the real API where the reaper depends on it.

moto 5.2 answers CreateOrUpdateTags / DeleteTags on a group that does not exist with an HTML
500 (a KeyError inside moto), and DeleteTags removes a tag whatever value is given. Real Auto
Scaling answers ValidationError "AutoScalingGroup name not found" (cloud-custodian#380 quotes
it), and "If you specify a value and the value is incorrect, the tag is not deleted" (EC2 Auto
Scaling User Guide, Delete tags) — the reaper's claim withdrawal relies on that. moto has no
DescribeCapacityReservations at all. The server runs in-process (ThreadedMotoServer), so
patching the classes is enough.
"""
from __future__ import annotations

from moto.autoscaling.exceptions import ValidationError
from moto.autoscaling.models import AutoScalingBackend


def _group(backend: AutoScalingBackend, name: str):
    group = backend.autoscaling_groups.get(name)
    if group is None:
        raise ValidationError(f"AutoScalingGroup name not found - AutoScaling Group {name} "
                              "not found")
    return group


def create_or_update_tags(self, tags):
    for tag in tags:
        _group(self, tag["ResourceId"])
    return _ORIGINAL["create_or_update_tags"](self, tags)


def delete_tags(self, tags):
    for tag in tags:
        group = _group(self, tag["ResourceId"])
        want = tag.get("Value")
        group.tags = [t for t in group.tags if not (
            t["Key"] == tag["Key"] and (want is None or t.get("Value") == want))]


_ORIGINAL = {"create_or_update_tags": AutoScalingBackend.create_or_update_tags,
             "delete_tags": AutoScalingBackend.delete_tags}


def describe_capacity_reservations(self):
    """moto has no model of capacity reservations (an HTML 500 "not implemented"): answer as
    an account without any does (NOTES.md)."""
    from moto.core.responses import ActionResult

    return ActionResult({"CapacityReservations": []})


def install(monkeypatch) -> None:
    """Patch for the duration of one test (pytest's monkeypatch undoes it)."""
    from moto.ec2.responses import EC2Response

    monkeypatch.setattr(AutoScalingBackend, "create_or_update_tags", create_or_update_tags)
    monkeypatch.setattr(AutoScalingBackend, "delete_tags", delete_tags)
    monkeypatch.setattr(EC2Response, "describe_capacity_reservations",
                        describe_capacity_reservations, raising=False)
