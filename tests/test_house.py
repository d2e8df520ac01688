"""The house rules of the code (docs/layout.md): the pipeline's core and the Kubeflow front-end
do not import the local runner's package, and no module of pipeline/ grows past 600 lines (a
module that does has more than one job: split it by job, as user_code.py / user_functions.py
and beam/engines.py / beam/engine_fetch.py are)."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The local runner itself, and its package.
LOCAL_RUNNER = {"pipeline/run_local.py"}


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_neither_the_core_nor_kubeflow_imports_the_local_runners_package():
    files = [
        *ROOT.glob("pipeline/*.py"),
        *ROOT.glob("pipeline/beam/*.py"),
        *ROOT.glob("pipeline/mlmd/*.py"),
        *ROOT.glob("pipeline/datasets/*.py"),
        *ROOT.glob("kubeflow/*.py"),
    ]
    assert len(files) > 30
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name for name in _imports(path) if name.startswith("pipeline.local")
        )
        for path in files
        if str(path.relative_to(ROOT)) not in LOCAL_RUNNER
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_no_module_of_the_pipeline_is_over_600_lines():
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in ROOT.glob("pipeline/**/*.py")
    }
    assert len(sizes) > 30
    assert {path: lines for path, lines in sizes.items() if lines > 600} == {}
