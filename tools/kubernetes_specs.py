"""Generates gpulease/conformance/data/kubernetes.json: the Kubernetes API's own schema of the
objects an owned `kubernetes` pool declares (Namespace, ResourceQuota, PriorityClass and what
they reference: ObjectMeta, ...), extracted from a Kubernetes OpenAPI definitions file.

Run::

    python -m tools.kubernetes_specs DEFINITIONS.json --kubernetes v1.37.0 \\
        --source "..." > gpulease/conformance/data/kubernetes.json

``DEFINITIONS.json`` is either the OpenAPI v2 ``api/openapi-spec/swagger.json`` of
kubernetes/kubernetes (its ``definitions``) or a ``_definitions.json`` of the
kubernetes-json-schema layout (its ``$defs``) - the file the shipped data came from is
kubernetes-validate 1.37.0's ``kubernetes-json-schema/v1.37.0-local-strict/_definitions.json``
(openapi2jsonschema's conversion of the v1.37.0 swagger: ``additionalProperties: false`` on
every object, which is the API server's ``fieldValidation=Strict``). Only the definitions the
roots reach are kept, descriptions dropped (the file stays small; the docs are upstream).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

#: the definitions gpulease declares; everything they reference is kept too.
ROOTS = ("io.k8s.api.core.v1.Namespace", "io.k8s.api.core.v1.ResourceQuota",
         "io.k8s.api.scheduling.v1.PriorityClass")
FORMAT = 1


def _refs(node: Any, out: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            out.add(ref.rsplit("/", 1)[-1])
        for v in node.values():
            _refs(v, out)
    elif isinstance(node, list):
        for v in node:
            _refs(v, out)


def _strip(node: Any) -> Any:
    """The definition without prose (``description``), refs pointing into this file."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "description" and isinstance(v, str):
                continue
            if k == "$ref" and isinstance(v, str):
                v = "#/$defs/" + v.rsplit("/", 1)[-1]
            out[k] = _strip(v)
        return out
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def extract(document: dict, roots=ROOTS) -> dict:
    defs = document.get("$defs") or document.get("definitions")
    if not isinstance(defs, dict):
        raise SystemExit("no `definitions` (swagger) or `$defs` (json-schema) in the file")
    keep: dict[str, Any] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        if name not in defs:
            raise SystemExit(f"definition {name!r} is not in the file")
        keep[name] = defs[name]
        found: set[str] = set()
        _refs(defs[name], found)
        todo.extend(sorted(found - set(keep)))
    return {k: _strip(keep[k]) for k in sorted(keep)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("definitions", help="swagger.json or _definitions.json")
    ap.add_argument("--kubernetes", required=True, help="the Kubernetes release, e.g. v1.37.0")
    ap.add_argument("--source", required=True, help="where the file came from (and when)")
    a = ap.parse_args(argv)
    with open(a.definitions, encoding="utf-8") as f:
        document = json.load(f)
    out = {"format": FORMAT, "kubernetes": a.kubernetes, "source": a.source,
           "dialect": document.get("$schema", "swagger 2.0"),
           "roots": list(ROOTS), "definitions": extract(document)}
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
