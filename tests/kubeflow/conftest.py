"""Fixtures of the Kubeflow tests: every variant the conformance checks cover, compiled once per
session (tests/kubeflow/test_conformance.py reads them; tests/kubeflow/test_kfp_backend.py hands
the same files to KFP's own backend code)."""

from __future__ import annotations

import os

import pytest

from kubeflow import run_kubeflow
from tests.kubeflow.variants import GPU_IMAGE, IMAGE, PIPELINE_ROOT, VARIANTS


@pytest.fixture(scope="session")
def compiled_files(tmp_path_factory) -> dict[str, str]:
    """variant -> its pipeline.yaml, `run_kubeflow.py compile` with the variant's flags."""
    out = {}
    for name, flags in VARIANTS.items():
        output = tmp_path_factory.mktemp(name) / "pipeline.yaml"
        argv = [
            "compile",
            f"--pipeline_root={PIPELINE_ROOT}",
            f"--image={IMAGE}",
            f"--gpu_image={GPU_IMAGE}",
            f"--output={output}",
            *flags,
        ]
        assert run_kubeflow.main(argv) == 0, name
        assert os.path.exists(output), name
        out[name] = str(output)
    return out
