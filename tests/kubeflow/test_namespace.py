"""`kubeflow/` (ours) coexists with the `kubeflow.*` namespace Kubeflow's own Python SDKs install.

Each case builds, in a tmp dir, an SDK portion with the exact `kubeflow/__init__.py` layout the real
SDK ships, puts it and this checkout on PYTHONPATH in either order, and imports both the SDK's
subpackage and `kubeflow.compile` / `kubeflow.config` in a fresh interpreter. No network: the
layouts are copied from the published wheels (inspected with `pip download --no-deps`):

- kubeflow-training 1.9.4 (Training Operator SDK, `kubeflow.training`): a pkgutil-style namespace,
  `kubeflow/__init__.py` is exactly the extend_path line below (kubeflow/training-operator,
  sdk/python/kubeflow/__init__.py, added in f3509e67, unchanged through ee116291).
- kubeflow 0.5.0 (Kubeflow SDK, `kubeflow.trainer`, `kubeflow.common`, ...): a regular package
  with no namespace declaration, `kubeflow/__init__.py` holds only the license header and
  `__version__ = "0.5.0"` (kubeflow/sdk, kubeflow/__init__.py, c867a1d3: a docstring and
  `__version__ = "0.4.1"`; built by hatchling).
- a PEP 420 portion (no `kubeflow/__init__.py`), which extend_path must pick up as well.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OURS = REPO / "kubeflow"

PKGUTIL_INIT = "__path__ = __import__('pkgutil').extend_path(__path__, __name__)\n"
REGULAR_INIT = (
    '# Copyright 2025 The Kubeflow Authors. (Apache-2.0 header)\n\n__version__ = "0.5.0"\n'
)

# layout id -> (the portion's kubeflow/__init__.py, or None for PEP 420; the SDK's subpackage)
LAYOUTS = {
    "kubeflow-training-pkgutil": (PKGUTIL_INIT, "training"),
    "kubeflow-sdk-regular": (REGULAR_INIT, "trainer"),
    "pep420": (None, "trainer"),
}

SCRIPT = """
import importlib, json, sys
sub, sdk_first = sys.argv[1], sys.argv[2] == "sdk"
if sdk_first:
    sdk = importlib.import_module("kubeflow." + sub)
from kubeflow import compile, config
if not sdk_first:
    sdk = importlib.import_module("kubeflow." + sub)
import kubeflow
print(json.dumps({
    "init": kubeflow.__file__,
    "path": list(kubeflow.__path__),
    "sdk": sdk.__file__,
    "portion": sdk.PORTION,
    "compile": compile.__file__,
    "config": config.__file__,
}))
"""


def _editable_finder_reaches_checkout() -> bool:
    """True if setuptools' editable finder maps `kubeflow` to this checkout (a meta-path hook
    that finds `kubeflow.<ours>` whatever package `kubeflow` resolved to)."""
    for finder in sys.meta_path:
        module = sys.modules.get(getattr(finder, "__module__", ""), None)
        mapping = getattr(module, "MAPPING", None)
        ours = mapping.get("kubeflow") if isinstance(mapping, dict) else None
        if ours and Path(ours).resolve() == OURS:
            return True
    return False


def _make_portion(site: Path, init: str | None, sub: str) -> Path:
    pkg = site / "kubeflow"
    (pkg / sub).mkdir(parents=True)
    if init is not None:
        (pkg / "__init__.py").write_text(init)
    (pkg / sub / "__init__.py").write_text('PORTION = "sdk"\n')
    return pkg


@pytest.mark.parametrize(
    "import_order", ["sdk", "ours"], ids=["import-sdk-first", "import-ours-first"]
)
@pytest.mark.parametrize("path_order", ["ours", "sdk"], ids=["path-ours-first", "path-sdk-first"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_kubeflow_coexists_with_sdk_namespace(tmp_path, layout, path_order, import_order):
    init, sub = LAYOUTS[layout]
    if (
        layout == "kubeflow-sdk-regular"
        and path_order == "sdk"
        and not _editable_finder_reaches_checkout()
    ):
        pytest.skip(
            "a regular kubeflow/__init__.py earlier on sys.path (the Kubeflow SDK's) hides every "
            "later kubeflow/ directory; only setuptools' editable finder reaches ours then"
        )
    site = tmp_path / "site"
    sdk_pkg = _make_portion(site, init, sub)
    entries = [str(REPO), str(site)] if path_order == "ours" else [str(site), str(REPO)]
    cwd = tmp_path / "cwd"  # sys.path[0] of `python -c` is the cwd: keep the checkout off it
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(PYTHONPATH=os.pathsep.join(entries), PYTHONNOUSERSITE="1")

    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, sub, import_order],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr

    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(got["sdk"]) == sdk_pkg / sub / "__init__.py"
    assert got["portion"] == "sdk"
    assert Path(got["compile"]) == OURS / "compile.py"
    assert Path(got["config"]) == OURS / "config.py"
    path = [Path(p) for p in got["path"]]
    if path_order == "ours" or init is None:
        # Our __init__.py ran (a regular package beats a PEP 420 portion wherever it sits) and
        # extend_path added the SDK's portion behind ours.
        assert Path(got["init"]) == OURS / "__init__.py"
        assert path[0] == OURS and sdk_pkg in path
    else:
        assert Path(got["init"]) == sdk_pkg / "__init__.py"
        assert path[0] == sdk_pkg
