"""The API constraints the conformance check reads, from data generated out of the SDKs' specs.

``gpulease/conformance/data/specs.json`` holds, for every constraint the tables and rules use, what
botocore's service models, google-cloud-compute's ``compute_v1`` types and google-cloud-storage
say (enums, lengths, patterns, ranges) and which library version said it. It is written by
``python -m tools.conformance_specs`` (which imports those libraries) and checked against
them by a test, so `gpulease plan` reads a small JSON file instead of importing ~3 s of client
libraries only for their constants. A constraint is named by a reference, a tuple such as
``("aws_param", "ec2", "CreateLaunchTemplate", "LaunchTemplateData.InstanceType")``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Optional

from gpulease import datafiles

DATA = datafiles.package_path("conformance", "data", "specs.json")
FORMAT = 1
REGENERATE = "python -m tools.conformance_specs > gpulease/conformance/data/specs.json"

#: constraints read outside gpulease/conformance/tables.py (check.py's tag rules, names.py's GCE
#: names); the generator writes these and every table row's.
REFS_OUTSIDE_TABLES: tuple[tuple[str, ...], ...] = (
    ("aws_shape", "resourcegroupstaggingapi", "TagKey"),
    ("aws_shape", "resourcegroupstaggingapi", "TagValue"),
    ("aws_shape", "iam", "tagKeyType"),
    ("aws_shape", "iam", "tagValueType"),
    ("gce_name",),
    ("gce_base_instance_name",),
)


@dataclass(frozen=True)
class Constraint:
    """What one API parameter accepts, and which spec said so."""

    spec: str
    enum: tuple[str, ...] = ()
    min_len: Optional[int] = None
    max_len: Optional[int] = None
    pattern: Optional[str] = None  # Python regex, matched in full
    minimum: Optional[float] = None
    maximum: Optional[float] = None
    kind: str = "string"  # "string" | "integer" | "number" | "boolean"

    def to_json(self) -> dict:
        out: dict[str, Any] = {"spec": self.spec, "kind": self.kind}
        for k in ("min_len", "max_len", "pattern", "minimum", "maximum"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if self.enum:
            out["enum"] = list(self.enum)
        return out

    @classmethod
    def from_json(cls, d: dict) -> "Constraint":
        return cls(**{**d, "enum": tuple(d.get("enum", ()))})


def ref_key(ref: tuple[str, ...]) -> str:
    """The data file's key for a reference (its parts joined by spaces; none contains one)."""
    return " ".join(ref)


@lru_cache(maxsize=None)
def _data() -> dict:
    with open(DATA, encoding="utf-8") as f:
        return json.load(f)


def libraries() -> dict[str, str]:
    """The library versions the shipped constraints were generated from."""
    return dict(_data()["libraries"])


@lru_cache(maxsize=None)
def lookup(ref: tuple[str, ...]) -> Constraint:
    """The constraint a reference names. A reference the data does not hold is a programming
    error (a new table row without regenerating): KeyError saying how to regenerate."""
    try:
        return Constraint.from_json(_data()["constraints"][ref_key(ref)])
    except KeyError:
        raise KeyError(f"{ref_key(ref)!r} is not in {DATA.name}: run `{REGENERATE}`") from None


def aws_param(service: str, operation: str, path: str) -> Constraint:
    """One input member of an AWS operation (botocore), e.g. ``aws_param("ec2",
    "CreateLaunchTemplate", "LaunchTemplateData.InstanceMarketOptions.MarketType")``; ``a[]``
    steps into a list member."""
    return lookup(("aws_param", service, operation, path))


def aws_shape(service: str, shape_name: str) -> Constraint:
    """A named shape of a botocore service model (``aws_shape("iam", "tagKeyType")``)."""
    return lookup(("aws_shape", service, shape_name))


def gcp_enum(message: str, enum: str) -> Constraint:
    """Values of ``compute_v1.<message>.<enum>`` (its ``UNDEFINED_*`` placeholder excluded)."""
    return lookup(("gcp_enum", message, enum))


def gcp_range(message: str, field: str) -> Constraint:
    """Numeric bounds a compute_v1 field's documentation states (``Network.mtu``)."""
    return lookup(("gcp_range", message, field))


def gce_name() -> Constraint:
    """The RFC 1035 rule every Compute resource name follows (compute_v1 documentation)."""
    return lookup(("gce_name",))


def gce_base_instance_name() -> Constraint:
    """``compute_v1.InstanceGroupManager.base_instance_name``'s length and RFC 1035 rule."""
    return lookup(("gce_base_instance_name",))


def gcs_storage_classes() -> Constraint:
    return lookup(("gcs_storage_classes",))


def gcs_lifecycle_actions() -> Constraint:
    return lookup(("gcs_lifecycle_actions",))


def gcs_public_access_prevention() -> Constraint:
    return lookup(("gcs_public_access_prevention",))


def describe(value: Any) -> str:
    return f"{value!r}" if not isinstance(value, str) else f'"{value}"'
