"""The compiled penguin pipeline under KFP's own local runner (kfp.local 2.15.2, DockerRunner)
in the podman-built project image, as the image's non-root user (tests/kubeflow/kfp_local.py
says which kfp.local gaps it works around): the whole pipeline runs and the model is pushed;
then the faults, each one error naming the task: a task that fails (its exit code and log), an
image reference that does not resolve, a pipeline root the image's user cannot write.

kfp.local has no cache, so an unchanged rerun executes every task again: KFP's cache rule is
checked by the IR runner (test_ir_pipeline.py). kfp.local's environment is built from PyPI
once per machine (~/.cache/tfx-scaleout/kfp-local-venv)."""

from __future__ import annotations

import os
import re
import time

import pytest

from kubeflow import run_kubeflow
from tests.kubeflow import kfp_local

pytestmark = [pytest.mark.slow, pytest.mark.system_packages("podman", "debootstrap", "runc")]

IR_IMAGE = "registry.example.com/tfx-scaleout@sha256:" + "1" * 64
IR_GPU_IMAGE = "registry.example.com/tfx-scaleout-gpu@sha256:" + "2" * 64
BUCKET = "gs://bucket/tfx"
UID = 1000


def _compile(directory) -> str:
    package = str(directory / "pipeline.yaml")
    argv = ["compile", f"--pipeline_root={BUCKET}", f"--image={IR_IMAGE}"]
    argv += [f"--gpu_image={IR_GPU_IMAGE}", f"--output={package}"]
    assert run_kubeflow.main(argv) == 0
    return package


def _root(directory, name: str, owner: int) -> str:
    root = directory / name
    root.mkdir()
    os.chown(root, owner, owner)
    return str(root)


def test_penguin_pipeline_runs_under_kfp_local_and_faults_name_the_task(image, tmp_path):
    kfp_local.ensure_venv()
    package = _compile(tmp_path)
    images = {IR_IMAGE: image, IR_GPU_IMAGE: image}
    with kfp_local.podman_socket(str(tmp_path)) as docker_host:

        def run(root: str, **kwargs):
            return kfp_local.run(
                package,
                kwargs.pop("images", images),
                root,
                docker_host,
                stores={BUCKET: root},
                **kwargs,
            )

        # A task that fails: no CSV under data_root; ExampleGen exits non-zero.
        with pytest.raises(kfp_local.KfpLocalFailed) as failed:
            run(_root(tmp_path, "bad-data", UID), arguments={"data_root": "/no/such/data"})
        assert str(failed.value).startswith("task CsvExampleGen exited 1; log:")
        assert "no input files match '/no/such/data/penguins.csv'" in str(failed.value)

        # An image reference that does not resolve: refused before any task runs.
        missing = "localhost/tfx-scaleout:no-such-tag"
        with pytest.raises(kfp_local.KfpLocalFailed, match=f"image {missing} does not resolve"):
            run(_root(tmp_path, "no-image", UID), images={IR_IMAGE: missing, IR_GPU_IMAGE: missing})

        # A pipeline root the image's user cannot write (root's, mode 755).
        with pytest.raises(kfp_local.KfpLocalFailed) as failed:
            run(_root(tmp_path, "read-only", 0))
        # The first task kfp.local starts (ImportSchemaGen) is the one that fails.
        assert re.match(
            r"task \S+ exited 1: the image's user 1000:1000 cannot write the pipeline root",
            str(failed.value),
        ), str(failed.value)

        root = _root(tmp_path, "root", UID)
        started = time.monotonic()
        tasks, output = run(root)
        print(f"\nkfp.local penguins: {time.monotonic() - started:.0f} s")
        assert len(tasks) == 10 and {task["exit"] for task in tasks} == {0}
        assert "finished with status SUCCESS" in output
        [version] = os.listdir(os.path.join(root, "serving_model"))
        pushed = os.path.join(root, "serving_model", version)
        assert os.path.exists(os.path.join(pushed, "saved_model.pb"))
        assert os.stat(pushed).st_uid == UID  # written by the image's user
