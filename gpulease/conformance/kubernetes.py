"""Kubernetes objects against the Kubernetes API's own schema and the rules its API server
enforces beyond the schema.

- **Schema**: ``gpulease/conformance/data/kubernetes.json``, the definitions of Namespace,
  ResourceQuota, PriorityClass and what they reference, extracted from the Kubernetes v1.37.0
  OpenAPI definitions by ``python -m tools.kubernetes_specs`` (the file records its source and
  date). Strict: an unknown field fails, as the API server's ``fieldValidation=Strict`` does.
- **Names and labels** (the API server's validation, ``k8s.io/apimachinery`` ``validation``
  package, documented in "Object Names and IDs" and "Labels and Selectors"): a Namespace name
  is a DNS-1123 label, a ResourceQuota or PriorityClass name a DNS-1123 subdomain; label keys
  are an optional DNS-subdomain prefix and ``/`` plus a name of at most 63 characters of
  ``[A-Za-z0-9_.-]`` starting and ending alphanumeric; values the same, or empty.
- **PriorityClass** (``pkg/apis/scheduling/validation``, "Pod Priority and Preemption"): a
  ``value`` is required (the conversion dropped the swagger's ``required``), an int32 no higher
  than 1,000,000,000 for user classes, names starting ``system-`` are reserved, and
  ``preemptionPolicy`` is ``Never`` or ``PreemptLowerPriority``.
- **ResourceQuota** ("Resource Quotas", "Resource quota for extended resources"): an extended
  resource such as ``nvidia.com/gpu`` may only be limited with the ``requests.`` prefix.

:func:`check_object` returns ``(path, message)`` for every violation; an empty list passes.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any, Optional

from gpulease import datafiles

DATA = datafiles.package_path("conformance", "data", "kubernetes.json")
REGENERATE = ("python -m tools.kubernetes_specs DEFINITIONS.json --kubernetes vX.Y.Z "
              "--source ... > gpulease/conformance/data/kubernetes.json")

#: Pulumi type token -> (definition, name rule)
TYPES: dict[str, tuple[str, str]] = {
    "kubernetes:core/v1:Namespace": ("io.k8s.api.core.v1.Namespace", "label"),
    "kubernetes:core/v1:ResourceQuota": ("io.k8s.api.core.v1.ResourceQuota", "subdomain"),
    "kubernetes:scheduling.k8s.io/v1:PriorityClass": (
        "io.k8s.api.scheduling.v1.PriorityClass", "subdomain"),
}

#: DNS-1123 label / subdomain (k8s.io/apimachinery/pkg/util/validation: IsDNS1123Label,
#: IsDNS1123Subdomain).
DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
#: label names and values (IsQualifiedName, IsValidLabelValue).
LABEL_NAME_MAX = 63
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
#: scheduling.HighestUserDefinablePriority (pkg/apis/scheduling/types.go).
HIGHEST_USER_PRIORITY = 1_000_000_000
INT32_MIN = -2 ** 31
RESERVED_PRIORITY_PREFIX = "system-"
PREEMPTION_POLICIES = ("Never", "PreemptLowerPriority")
#: resources native to Kubernetes ("kubernetes.io/..." or no domain): the rest are extended.
_NATIVE_DOMAIN = re.compile(r"^([^/]*\.)?kubernetes\.io/|^[^/]*$")


@lru_cache(maxsize=None)
def data() -> dict:
    with open(DATA, encoding="utf-8") as f:
        return json.load(f)


def source() -> str:
    d = data()
    return f"Kubernetes {d['kubernetes']} OpenAPI ({d['source']})"


@lru_cache(maxsize=None)
def _validator(definition: str):
    from jsonschema import Draft202012Validator

    d = data()
    if definition not in d["definitions"]:
        raise KeyError(f"{definition!r} is not in {DATA.name}: run `{REGENERATE}`")
    schema = {"$schema": d["dialect"], "$defs": d["definitions"],
              "$ref": f"#/$defs/{definition}"}
    return Draft202012Validator(schema)


def dns1123_label(value: str) -> Optional[str]:
    if len(value) > DNS1123_LABEL_MAX:
        return f"must be no more than {DNS1123_LABEL_MAX} characters (DNS-1123 label)"
    if not _DNS1123_LABEL.fullmatch(value):
        return ("a DNS-1123 label must consist of lower case alphanumeric characters or '-', "
                "and must start and end with an alphanumeric character")
    return None


def dns1123_subdomain(value: str) -> Optional[str]:
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        return f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters (DNS-1123 subdomain)"
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        return ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character")
    return None


def label_key_problem(key: str) -> Optional[str]:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or dns1123_subdomain(prefix)):
        return f"label key {key!r}: the prefix must be a DNS-1123 subdomain"
    return _label_name(name, f"label key {key!r}")


def label_value_problem(value: str) -> Optional[str]:
    if value == "":
        return None
    return _label_name(value, f"label value {value!r}")


def _label_name(s: str, what: str) -> Optional[str]:
    if len(s) > LABEL_NAME_MAX:
        return f"{what}: must be no more than {LABEL_NAME_MAX} characters"
    if not _LABEL_NAME.fullmatch(s):
        return (f"{what}: must consist of alphanumeric characters, '-', '_' or '.', and must "
                "start and end with an alphanumeric character")
    return None


def _path(parts) -> str:
    return ".".join(str(p) for p in parts) or "(object)"


def check_object(type_token: str, obj: dict) -> list[tuple[str, str]]:
    """Every way ``obj`` (the object as the provider sends it: apiVersion, kind, metadata,
    spec ...) would be refused by the API server. Values not known yet (``[unknown]``) pass."""
    definition, name_rule = TYPES[type_token]
    out: list[tuple[str, str]] = []
    for err in sorted(_validator(definition).iter_errors(obj), key=lambda e: list(e.path)):
        out.append((_path(err.absolute_path), err.message))
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        out.append(("metadata.name", "name or generateName is required"))
    elif name not in ("[unknown]",):
        problem = dns1123_label(name) if name_rule == "label" else dns1123_subdomain(name)
        if problem:
            out.append(("metadata.name", f"{name!r}: {problem}"))
    for k, v in (meta.get("labels") or {}).items():
        for problem in (label_key_problem(k), label_value_problem(v) if isinstance(v, str)
                        else None):
            if problem:
                out.append((f"metadata.labels.{k}", problem))
    if definition.endswith("PriorityClass"):
        out.extend(_priority_class(obj, name))
    if definition.endswith("ResourceQuota"):
        out.extend(_quota(obj))
    return out


def _priority_class(obj: dict, name: Any) -> list[tuple[str, str]]:
    out = []
    value = obj.get("value")
    if value is None:
        out.append(("value", "Required value"))
    elif isinstance(value, int) and not isinstance(value, bool):
        if value > HIGHEST_USER_PRIORITY or value < INT32_MIN:
            out.append(("value", f"{value}: must be between {INT32_MIN} and "
                                 f"{HIGHEST_USER_PRIORITY} (user-defined priority classes)"))
    if isinstance(name, str) and name.startswith(RESERVED_PRIORITY_PREFIX):
        out.append(("metadata.name", f"{name!r}: priority class names with "
                                     f"{RESERVED_PRIORITY_PREFIX!r} prefix are reserved"))
    policy = obj.get("preemptionPolicy")
    if policy is not None and policy not in PREEMPTION_POLICIES:
        out.append(("preemptionPolicy", f"{policy!r}: supported values: "
                                        f"{', '.join(PREEMPTION_POLICIES)}"))
    return out


def _quota(obj: dict) -> list[tuple[str, str]]:
    out = []
    hard = ((obj.get("spec") or {}).get("hard")) or {}
    for key in hard:
        if _NATIVE_DOMAIN.search(key) or key.startswith(("requests.", "count/")):
            continue
        out.append((f"spec.hard.{key}", f"{key!r}: an extended resource may only be limited "
                                        f"as 'requests.{key}' in a ResourceQuota"))
    return out
