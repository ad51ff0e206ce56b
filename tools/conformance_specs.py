"""Generates gpulease/conformance/data/specs.json from the API specs maintained libraries ship.

Run: ``python -m tools.conformance_specs > gpulease/conformance/data/specs.json`` after changing
a table row (gpulease/conformance/tables.py), ``specs.REFS_OUTSIDE_TABLES`` or a pinned library;
tests/test_conformance.py regenerates it in memory and fails on any difference. Only this module
and that test import the libraries; `gpulease plan` reads the data (``gpulease.conformance.specs``).

- AWS: botocore's service models (``Loader().load_service_model(service, "service-2")``): a
  member's enum, min/max length or value, and pattern. Patterns are Java regexes; the few Java
  constructs they use are translated (:func:`java_pattern`).
- GCP Compute: google-cloud-compute's ``compute_v1`` message types (enums are nested
  ``proto.Enum`` classes; the RFC 1035 name rule is read from the ``name`` field's docstring).
- GCS: google-cloud-storage (``Bucket.STORAGE_CLASSES``, the lifecycle rule classes, the public
  access prevention constants): the storage v1 discovery document lists these in prose only.
"""
from __future__ import annotations

import importlib
import json
import re
import sys
import warnings
from functools import lru_cache
from typing import Optional

from gpulease.conformance.specs import FORMAT, REFS_OUTSIDE_TABLES, Constraint, ref_key


# ---- AWS: botocore ----------------------------------------------------------------------------
@lru_cache(maxsize=None)
def _aws_model(service: str) -> dict:
    import botocore.loaders

    return botocore.loaders.Loader().load_service_model(service, "service-2")


def botocore_version() -> str:
    import botocore

    return botocore.__version__


_SURROGATE_RANGE = re.compile(r"\\uD800\\uDC00-\\uDBFF\\uDFFF", re.IGNORECASE)
_Z_CLASS = r" \u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000"


def java_pattern(pattern: str) -> Optional[str]:
    """A botocore (Java) pattern as a Python regex.

    Translated: the UTF-16 surrogate-pair range ``\\uD800\\uDC00-\\uDBFF\\uDFFF`` (= every
    supplementary character) and the Unicode classes ``\\p{L}`` / ``\\p{N}`` (both become ``\\w``,
    which adds ``_``: every botocore pattern that uses them allows ``_`` anyway, pinned by a test)
    and ``\\p{Z}`` (the Unicode separators, listed). A pattern with another Unicode class
    (``\\p{M}``, ``\\p{S}`` ...) has no ``re`` equivalent: None, and the check reports what it
    can (lengths, enums) rather than guess."""
    p = _SURROGATE_RANGE.sub(r"\\U00010000-\\U0010FFFF", pattern)
    p = p.replace(r"\p{L}", r"\w").replace(r"\p{N}", r"\w").replace(r"\p{Z}", _Z_CLASS)
    if r"\p{" in p:
        return None
    try:
        re.compile(p)
    except re.error:
        return None
    return p


def _documented_values(doc: str) -> tuple[str, ...]:
    """Values an API lists in its documentation as ``<dt>value</dt>`` after "valid values"
    (the ASG allocation strategies are plain strings in the model, enumerated only there)."""
    if "valid values" not in doc.lower():
        return ()
    # "<dt>price-capacity-optimized (recommended)</dt>": the value is what precedes a note
    return tuple(v.strip() for v in re.findall(r"<dt>\s*([^<(]+?)\s*(?:\([^<]*\))?\s*</dt>", doc))


@lru_cache(maxsize=None)
def aws_param(service: str, operation: str, path: str) -> Constraint:
    """The constraint on one input member of an AWS operation, e.g.
    ``aws_param("ec2", "CreateLaunchTemplate", "LaunchTemplateData.InstanceMarketOptions.MarketType")``.
    ``a[]`` steps into a list member. Raises KeyError for a path the model does not have."""
    model = _aws_model(service)
    shapes = model["shapes"]
    shape_name = model["operations"][operation]["input"]["shape"]
    shape = shapes[shape_name]
    doc = ""
    for part in path.split("."):
        many = part.endswith("[]")
        member = shape["members"][part[:-2] if many else part]
        doc = member.get("documentation", "")
        shape_name = member["shape"]
        shape = shapes[shape_name]
        if many:
            shape_name = shape["member"]["shape"]
            shape = shapes[shape_name]
    version = model["metadata"]["apiVersion"]
    label = f"botocore {botocore_version()} {service} {version} {operation} {path} ({shape_name}"
    enum = tuple(shape.get("enum", ()))
    how = ""
    if not enum and shape.get("type") == "string":
        enum = _documented_values(doc)
        how = ", valid values listed in its documentation" if enum else ""
    kind = {"integer": "integer", "long": "integer", "double": "number", "float": "number",
            "boolean": "boolean"}.get(shape.get("type", "string"), "string")
    bounds = dict(minimum=shape.get("min"), maximum=shape.get("max")) if kind in (
        "integer", "number") else dict(min_len=shape.get("min"), max_len=shape.get("max"))
    return Constraint(spec=label + (" enum" if shape.get("enum") else "") + how + ")",
                      enum=enum, pattern=java_pattern(shape.get("pattern", "")) or None, kind=kind,
                      **bounds)


@lru_cache(maxsize=None)
def aws_shape(service: str, shape_name: str) -> Constraint:
    """The constraint of a named shape of a service model (``aws_shape("iam", "tagKeyType")``)."""
    model = _aws_model(service)
    shape = model["shapes"][shape_name]
    return Constraint(
        spec=f"botocore {botocore_version()} {service} {model['metadata']['apiVersion']} "
             f"{shape_name}", enum=tuple(shape.get("enum", ())), min_len=shape.get("min"),
        max_len=shape.get("max"),
        pattern=java_pattern(shape.get("pattern", "")) or None)


def _import(module: str):
    """Import a Google client library without its import-time FutureWarning about the Python
    version (google.api_core), which would otherwise land on `gpulease plan`'s stderr."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return importlib.import_module(module)


# ---- GCP Compute: google-cloud-compute --------------------------------------------------------
def compute_version() -> str:
    return _import("google.cloud.compute_v1.gapic_version").__version__


@lru_cache(maxsize=None)
def gcp_enum(message: str, enum: str) -> Constraint:
    """Values of ``compute_v1.<message>.<enum>`` (its ``UNDEFINED_*`` placeholder excluded)."""
    compute_v1 = _import("google.cloud.compute_v1")
    cls = getattr(getattr(compute_v1, message), enum)
    values = tuple(m.name for m in cls if not m.name.startswith("UNDEFINED_"))
    return Constraint(spec=f"google-cloud-compute {compute_version()} compute_v1.{message}.{enum}",
                      enum=values)


@lru_cache(maxsize=None)
def gce_name() -> Constraint:
    """The RFC 1035 rule every Compute resource name follows, read from the API's own field
    documentation (``compute_v1.InstanceTemplate.name``: "1-63 characters long and match the
    regular expression ``[a-z]([-a-z0-9]*[a-z0-9])?``")."""
    compute_v1 = _import("google.cloud.compute_v1")
    doc = " ".join((compute_v1.InstanceTemplate.__doc__ or "").split())
    m = re.search(r"name must be 1-(\d+) characters long and match the regular expression "
                  r"``?([^` ]+)``?", doc)
    if not m:  # pragma: no cover - a future client reworded it: fail loudly, never guess
        raise RuntimeError("compute_v1.InstanceTemplate.name no longer states the RFC 1035 rule")
    return Constraint(spec=f"google-cloud-compute {compute_version()} compute_v1.InstanceTemplate"
                           f".name (RFC 1035)", min_len=1, max_len=int(m.group(1)),
                      pattern=m.group(2))


@lru_cache(maxsize=None)
def gce_base_instance_name() -> Constraint:
    """``compute_v1.InstanceGroupManager.base_instance_name``: "The maximum character length is
    58 and the name must comply with RFC1035 format"."""
    compute_v1 = _import("google.cloud.compute_v1")
    doc = " ".join((compute_v1.InstanceGroupManager.__doc__ or "").split())
    m = re.search(r"base_instance_name \(str\): .*?maximum character length is (\d+) and the "
                  r"name must comply with RFC1035", doc)
    if not m:  # pragma: no cover
        raise RuntimeError("compute_v1.InstanceGroupManager.base_instance_name no longer states "
                           "its length")
    return Constraint(spec=f"google-cloud-compute {compute_version()} compute_v1."
                           "InstanceGroupManager.base_instance_name (RFC 1035)", min_len=1,
                      max_len=int(m.group(1)), pattern=gce_name().pattern)


@lru_cache(maxsize=None)
def gcp_range(message: str, field: str) -> Constraint:
    """Numeric bounds a compute_v1 field states as "The minimum value for this field is A and
    the maximum value is B" (``Network.mtu``)."""
    compute_v1 = _import("google.cloud.compute_v1")
    doc = " ".join((getattr(compute_v1, message).__doc__ or "").split())
    i = doc.find(f"{field} (")
    m = re.search(r"minimum value for this field is (\d+) and the maximum value is (\d+)",
                  doc[i:i + 600])
    if i < 0 or not m:  # pragma: no cover
        raise RuntimeError(f"compute_v1.{message}.{field} no longer states its range")
    return Constraint(spec=f"google-cloud-compute {compute_version()} compute_v1.{message}."
                           f"{field}", minimum=int(m.group(1)), maximum=int(m.group(2)),
                      kind="integer")


# ---- GCS: google-cloud-storage ---------------------------------------------------------------
def storage_version() -> str:
    return _import("google.cloud.storage").__version__


@lru_cache(maxsize=None)
def gcs_storage_classes() -> Constraint:
    Bucket = _import("google.cloud.storage").Bucket

    return Constraint(spec=f"google-cloud-storage {storage_version()} Bucket.STORAGE_CLASSES",
                      enum=tuple(Bucket.STORAGE_CLASSES))


@lru_cache(maxsize=None)
def gcs_lifecycle_actions() -> Constraint:
    b = _import("google.cloud.storage.bucket")

    rules = (b.LifecycleRuleDelete(age=1), b.LifecycleRuleSetStorageClass("STANDARD", age=1),
             b.LifecycleRuleAbortIncompleteMultipartUpload(age=1))
    return Constraint(spec=f"google-cloud-storage {storage_version()} LifecycleRule* action types",
                      enum=tuple(r["action"]["type"] for r in rules))


@lru_cache(maxsize=None)
def gcs_public_access_prevention() -> Constraint:
    c = _import("google.cloud.storage.constants")

    return Constraint(spec=f"google-cloud-storage {storage_version()} constants."
                           "PUBLIC_ACCESS_PREVENTION_*",
                      enum=(c.PUBLIC_ACCESS_PREVENTION_ENFORCED,
                            c.PUBLIC_ACCESS_PREVENTION_INHERITED))


# ---- the data file ----------------------------------------------------------------------------
READERS = {"aws_param": aws_param, "aws_shape": aws_shape, "gcp_enum": gcp_enum,
           "gcp_range": gcp_range, "gce_name": gce_name,
           "gce_base_instance_name": gce_base_instance_name,
           "gcs_storage_classes": gcs_storage_classes,
           "gcs_lifecycle_actions": gcs_lifecycle_actions,
           "gcs_public_access_prevention": gcs_public_access_prevention}


def all_refs() -> list[tuple[str, ...]]:
    """Every constraint reference the check uses: the tables' rows and the rules' own."""
    from gpulease.conformance import tables

    refs = {row.ref for rows in (*tables.AWS.values(), *tables.GCP.values()) for row in rows}
    return sorted(refs | set(REFS_OUTSIDE_TABLES))


def generate() -> dict:
    """The data file's document, read from the installed libraries."""
    constraints = {ref_key(r): READERS[r[0]](*r[1:]).to_json() for r in all_refs()}
    return {
        "format": FORMAT,
        "generated_by": "python -m tools.conformance_specs",
        "libraries": {"botocore": botocore_version(), "google-cloud-compute": compute_version(),
                      "google-cloud-storage": storage_version()},
        "constraints": constraints,
    }


def render(doc: dict) -> str:
    return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render(generate()))
