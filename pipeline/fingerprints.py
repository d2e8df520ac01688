"""Cache fingerprints: what a component's result depends on beyond its inputs and parameters.

TFX's cache key is a node's input artifacts and exec properties. This project references user
code by module path (no `module_file`, whose content TFX would hash), so an edit to
preprocessing_fn, the model or a custom executor would be served from the cache. Every
component therefore gets one more exec property, FINGERPRINT_KEY, with

  code    a digest per project source file the component's code loads (its executor, its
          component class, the functions its parameters name by module path, and everything
          those import from the project, followed statically, function-level imports included)
  schema  the content digest of the curated schema file it imports (ImportSchemaGen)
  stack   the versions of the libraries that compute the results

so that any of them changing is a cache miss. A source file's digest is taken over its syntax
tree: an edit to comments or formatting does not rerun anything, any other edit does.
explain() turns two fingerprints into the reason a component reran.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
from collections.abc import Iterable
from importlib import metadata
from typing import Any

from components.user_code import USER_MODULE_KEY
from pipeline import PROJECT_ROOT

FINGERPRINT_KEY = "cache_fingerprint"
# Distributions whose versions change what the components compute.
STACK = (
    "tfx",
    "tensorflow",
    "tensorflow-transform",
    "apache-beam",
    "tfx-bsl",
    "tensorflow-data-validation",
    "tensorflow-model-analysis",
    "tf-keras",
)
# The package whose code runs inside component executors (pipeline/ and kubeflow/ only build
# and launch the pipeline; what they decide reaches a component as its exec properties).
PROJECT_PACKAGES = ("components",)
_SCHEMA_FILE_KEY = "schema_file"


def module_file(
    module: str, root: str = PROJECT_ROOT, packages: tuple[str, ...] | None = PROJECT_PACKAGES
) -> str | None:
    """The source file under root of a dotted module name, or None when there is none there (or
    its top-level package is not one of `packages`; None: any but the project's)."""
    top = module.split(".")[0]
    if (top not in packages) if packages is not None else (top in PROJECT_PACKAGES or not top):
        return None
    base = os.path.join(root, *module.split("."))
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return None


@functools.cache
def _parse(path: str, mtime_ns: int) -> tuple[str, tuple[tuple[int, str, tuple[str, ...]], ...]]:
    """(digest of the syntax tree, its imports as (level, module, names)) of one version of a
    file; every import statement counts, function bodies included."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), filename=path)
    imports: list[tuple[int, str, tuple[str, ...]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports.extend((0, alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name for alias in node.names)
            imports.append((node.level, node.module or "", names))
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16], tuple(imports)


def _candidates(imports, module: str, is_package: bool) -> set[str]:
    """Dotted names an import may load: for `from a import b`, both a.b (if b is a submodule)
    and a; relative imports resolved against the importing module."""
    package_parts = (module if is_package else module.rpartition(".")[0]).split(".")
    found: set[str] = set()
    for level, base, names in imports:
        if level:
            parent = ".".join(package_parts[: len(package_parts) - level + 1])
            base = f"{parent}.{base}" if base else parent
        found.add(base)
        found.update(f"{base}.{name}" for name in names)
    return found


def source_closure(
    modules: Iterable[str],
    root: str = PROJECT_ROOT,
    packages: tuple[str, ...] | None = PROJECT_PACKAGES,
) -> dict[str, str]:
    """{root-relative path: digest} of the modules and every module under root they import (of
    `packages`; None: a user's folder, any module there but the project's), parent packages'
    __init__.py included (importing a module runs them)."""
    digests: dict[str, str] = {}
    pending = list(modules)
    seen: set[str] = set()
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        path = module_file(module, root, packages)
        if path is None:
            continue
        parts = module.split(".")
        pending.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        digest, imports = _parse(path, os.stat(path).st_mtime_ns)
        digests[os.path.relpath(path, root)] = digest
        is_package = os.path.basename(path) == "__init__.py"
        pending.extend(_candidates(imports, module, is_package))
    return dict(sorted(digests.items()))


def file_digest(path: str) -> str:
    """Content digest of a file (a curated schema)."""
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def stack_versions() -> dict[str, str]:
    versions = {}
    for name in STACK:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def code_roots(component) -> list[str]:
    """The project modules a component runs: its class, its executor class, and the module of
    every parameter that names a project function by module path (preprocessing_fn, run_fn)."""
    roots = [type(component).__module__]
    executor_class = getattr(component.executor_spec, "executor_class", None)
    if executor_class is not None:
        roots.append(executor_class.__module__)
    for value in component.exec_properties.values():
        if isinstance(value, str) and "." in value and module_file(value.rpartition(".")[0]):
            roots.append(value.rpartition(".")[0])
        roots.extend(_metric_modules(value))
    return [root for root in roots if module_file(root)]


def _metric_modules(value: Any) -> list[str]:
    """The modules an EvalConfig (an Evaluator's exec property, as JSON) loads metrics from."""
    if not (isinstance(value, str) and value.lstrip().startswith("{")):
        return []
    try:
        config = json.loads(value)
    except ValueError:
        return []
    if not isinstance(config, dict):
        return []
    return [
        metric["module"]
        for spec in config.get("metrics_specs") or config.get("metricsSpecs") or []
        for metric in spec.get("metrics", [])
        if metric.get("module")
    ]


def fingerprint(
    component, schema_digest: str | None = None, user_files: dict[str, str] | None = None
) -> dict[str, Any]:
    """What the component's result depends on besides its inputs and exec properties;
    user_files: {label: digest} of a user's module, for a component that runs it."""
    result: dict[str, Any] = {"code": source_closure(code_roots(component))}
    if user_files and USER_MODULE_KEY in component.exec_properties:
        result["code"].update(user_files)
    if schema_digest is not None:
        result["schema"] = schema_digest
    result["stack"] = stack_versions()
    return result


def attach(
    tfx_components: Iterable[Any],
    schema_digest: str | None,
    user_files: dict[str, dict[str, str]] | None = None,
) -> None:
    """Sets FINGERPRINT_KEY on every component (resolver nodes are never cached: skipped).
    schema_digest: the curated schema's content digest, for the component that imports it;
    user_files: {component id: the user's module files as that component runs them}."""
    from tfx.dsl.components.base import base_component

    for component in tfx_components:
        if not isinstance(component, base_component.BaseComponent):
            continue
        imports_schema = _SCHEMA_FILE_KEY in component.exec_properties
        value = fingerprint(
            component,
            schema_digest if imports_schema else None,
            (user_files or {}).get(component.id),
        )
        component.exec_properties[FINGERPRINT_KEY] = json.dumps(value, sort_keys=True)


def of_components(tfx_components: Iterable[Any]) -> dict[str, str]:
    """{component id: its FINGERPRINT_KEY exec property} of a built pipeline's components."""
    return {
        component.id: component.exec_properties[FINGERPRINT_KEY]
        for component in tfx_components
        if FINGERPRINT_KEY in getattr(component, "exec_properties", {})
    }


def rerun_reason(previous: dict[str, str], current: dict[str, str], component: str) -> str:
    """Why `component` executed although an earlier run had finished it: what changed in its
    fingerprint, else its inputs or parameters. Empty for a component never run before."""
    if component not in previous:
        return ""
    return explain(previous[component], current.get(component)) or (
        "its inputs or parameters changed (an upstream component reran, or a flag)"
    )


def explain(previous: str | None, current: str | None) -> str:
    """Why a component reran, from the fingerprints of its last execution and of this one:
    e.g. "code changed: components/ml/preprocessing.py". Empty when they are the same (then its
    inputs or parameters changed)."""
    if not previous or not current:
        return ""
    before, after = json.loads(previous), json.loads(current)
    reasons = []
    code_before, code_after = before.get("code", {}), after.get("code", {})
    changed = sorted(
        path
        for path in set(code_before) | set(code_after)
        if code_before.get(path) != code_after.get(path)
    )
    if changed:
        reasons.append("code changed: " + ", ".join(changed))
    if before.get("schema") != after.get("schema"):
        reasons.append("curated schema changed")
    stack_before, stack_after = before.get("stack", {}), after.get("stack", {})
    upgraded = [
        f"{name} {stack_before.get(name)} -> {stack_after.get(name)}"
        for name in sorted(set(stack_before) | set(stack_after))
        if stack_before.get(name) != stack_after.get(name)
    ]
    if upgraded:
        reasons.append("stack changed: " + ", ".join(upgraded))
    return "; ".join(reasons)
