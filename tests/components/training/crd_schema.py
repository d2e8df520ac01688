"""Validate objects against the vendored CRDs' openAPIV3Schema (crds/, see crds/README.md), as
the API server's structural schema would: type, properties, required, items, enum, pattern,
bounds, anyOf (int-or-string), additionalProperties, and pruning. Unknown fields are errors here
(the API server silently prunes them, so a field the schema does not know would vanish), except
under x-kubernetes-preserve-unknown-fields. CEL rules (x-kubernetes-validations) are not
evaluated; tests check the ones that matter to this project by hand."""

from __future__ import annotations

import functools
import os
import re

import yaml

CRD_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crds")
CRD_FILES = {
    ("kubeflow.org/v1", "TFJob"): "kubeflow.org_tfjobs.yaml",
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "trainer.kubeflow.org_trainjobs.yaml",
    (
        "trainer.kubeflow.org/v1alpha1",
        "TrainingRuntime",
    ): "trainer.kubeflow.org_trainingruntimes.yaml",
    (
        "trainer.kubeflow.org/v1alpha1",
        "ClusterTrainingRuntime",
    ): "trainer.kubeflow.org_clustertrainingruntimes.yaml",
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "jobset.x-k8s.io_jobsets.yaml",
}
_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "integer": int,
    "number": (int, float),
}


@functools.cache
def crd(api_version: str, kind: str) -> dict:
    path = os.path.join(CRD_DIR, CRD_FILES[api_version, kind])
    with open(path) as handle:
        return yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def schema(api_version: str, kind: str) -> dict:
    definition = crd(api_version, kind)
    version = api_version.split("/")[1]
    (served,) = [v for v in definition["spec"]["versions"] if v["name"] == version]
    return served["schema"]["openAPIV3Schema"]


def errors_in(obj: dict) -> list[str]:
    """Every way `obj` breaks its CRD's schema (its apiVersion and kind pick the CRD)."""
    found: list[str] = []
    _check(schema(obj["apiVersion"], obj["kind"]), obj, "", found)
    return found


def validate(obj: dict) -> None:
    found = errors_in(obj)
    assert not found, f"{obj['kind']} breaks its CRD schema:\n  " + "\n  ".join(found[:20])


def _type_ok(node: dict, value) -> bool:
    kind = node.get("type")
    if kind is None:
        return True
    if value is None:
        return bool(node.get("nullable"))
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES[kind])


def _check(node: dict, value, path: str, found: list[str]) -> None:
    where = path or "."
    if "anyOf" in node and not any(not _errors(o, value, path) for o in node["anyOf"]):
        found.append(f"{where}: {value!r} matches none of {node['anyOf']}")
        return
    if not _type_ok(node, value):
        found.append(f"{where}: expected {node.get('type')}, got {value!r}")
        return
    if "enum" in node and value not in node["enum"]:
        found.append(f"{where}: {value!r} not one of {node['enum']}")
    if isinstance(value, str):
        if "pattern" in node and not re.search(node["pattern"], value):
            found.append(f"{where}: {value!r} does not match {node['pattern']}")
        if "maxLength" in node and len(value) > node["maxLength"]:
            found.append(f"{where}: longer than {node['maxLength']}")
        if "minLength" in node and len(value) < node["minLength"]:
            found.append(f"{where}: shorter than {node['minLength']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in node and value < node["minimum"]:
            found.append(f"{where}: {value} < minimum {node['minimum']}")
        if "maximum" in node and value > node["maximum"]:
            found.append(f"{where}: {value} > maximum {node['maximum']}")
    if isinstance(value, list):
        if "maxItems" in node and len(value) > node["maxItems"]:
            found.append(f"{where}: more than {node['maxItems']} items")
        if "minItems" in node and len(value) < node["minItems"]:
            found.append(f"{where}: fewer than {node['minItems']} items")
        for index, item in enumerate(value):
            if "items" in node:
                _check(node["items"], item, f"{path}[{index}]", found)
    if isinstance(value, dict):
        for name in node.get("required", []):
            if name not in value:
                found.append(f"{where}: missing required field {name!r}")
        properties = node.get("properties", {})
        extra = node.get("additionalProperties")
        for key, item in value.items():
            child = f"{path}.{key}"
            if path == "" and key == "metadata":
                # The API server validates a custom object's ObjectMeta itself.
                _check(
                    {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    item,
                    child,
                    found,
                )
            elif key in properties:
                _check(properties[key], item, child, found)
            elif isinstance(extra, dict):
                _check(extra, item, child, found)
            elif extra is True or node.get("x-kubernetes-preserve-unknown-fields"):
                continue
            else:
                found.append(f"{child}: unknown field (the API server would prune it)")


def _errors(node: dict, value, path: str) -> list[str]:
    found: list[str] = []
    _check(node, value, path, found)
    return found
