"""The project's real image, built and run on this machine: a local Python 3.10 base
(kubeflow/local_base.sh, debootstrap) stands in for the public one, kubeflow/build_images.sh
builds the image with podman, and the compiled penguin pipeline's tasks up to Transform run in
containers of it through the IR runner, as the image's unprivileged user, on the penguins CSV
the image ships (the compile's default data_root is inside the image).

podman, debootstrap and runc are installed by the test run where it can (tests/system_packages.py).
Skipped when they cannot be, when not root (debootstrap) or when podman cannot run a container
here; each of these fails instead under CI=true. The first run builds the base and every layer;
later runs reuse podman's layer cache and the base.

What it cannot check without a registry: the public base and Beam's SDK boot program (the image
is built with BEAM_BOOT_IMAGE=no-beam-boot); without a cluster: pods, the KFP launcher itself,
object stores."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import time

import pytest
import yaml

from kubeflow import run_kubeflow
from kubeflow.config import IMAGE_SITE_PACKAGES
from pipeline import datasets
from tests.kubeflow import ir_runner

pytestmark = [pytest.mark.slow, pytest.mark.system_packages("podman", "debootstrap", "runc")]

ROOT = datasets.PROJECT_ROOT
IR_IMAGE = "registry.example.com/tfx-scaleout@sha256:" + "1" * 64
IR_GPU_IMAGE = "registry.example.com/tfx-scaleout-gpu@sha256:" + "2" * 64
UID = 1000
UP_TO_TRANSFORM = {
    "CsvExampleGen-span",
    "CsvExampleGen",
    "ImportSchemaGen",
    "StatisticsGen",
    "ExampleValidator",
    "Transform",
}


def podman_run(*args: str, entrypoint: str | None = None) -> subprocess.CompletedProcess:
    argv = ["podman", "run", "--rm", *ir_runner.PODMAN_RUN_OPTIONS]
    if entrypoint is not None:
        argv += ["--entrypoint", entrypoint]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=300)


def _lock() -> dict[str, str]:
    pins = {}
    with open(os.path.join(ROOT, "requirements.lock")) as handle:
        for line in handle:
            name, sep, version = line.split("#", 1)[0].strip().partition("==")
            if sep:
                pins[_normalize(name)] = version.strip()
    return pins


def _normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def test_image_installs_the_lock_and_runs_as_its_unprivileged_user(image):
    result = podman_run(
        image,
        "sh",
        "-c",
        "id -u; python --version; echo $TF_USE_LEGACY_KERAS; python -m pip freeze --all;"
        " python -m pip check >/dev/null && echo pip-check-ok",
        entrypoint="",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    uid, version, legacy_keras, *freeze = result.stdout.splitlines()
    assert int(uid) == UID != 0
    assert version.startswith("Python 3.10.")
    assert legacy_keras == "1"
    assert freeze[-1] == "pip-check-ok"
    installed = {}
    for line in freeze[:-1]:
        name, sep, version = line.partition("==")
        if sep:
            installed[_normalize(name)] = version
    pins = _lock()
    assert {name: installed.get(name) for name in pins} == pins
    # The project itself, installed from the image's /app (not editable).
    assert f"{_project_name()} @ file:///app" in freeze


def _project_name() -> str:
    with open(os.path.join(ROOT, "pyproject.toml")) as handle:
        for line in handle:
            if line.startswith("name"):
                return line.split("=", 1)[1].strip().strip('"')
    raise AssertionError("no project name in pyproject.toml")


def test_build_time_mounts_and_compiler_leave_nothing_in_the_image(image):
    inspect = subprocess.run(
        ["podman", "image", "inspect", image], capture_output=True, text=True, check=True
    )
    [config] = json.loads(inspect.stdout)
    env = config["Config"]["Env"]
    assert not [e for e in env if e.startswith(("PIP_CONFIG_FILE", "PIP_CERT", "PIP_FIND"))]
    assert config["Config"]["User"] == f"{UID}:{UID}"
    result = podman_run(
        image,
        "sh",
        "-c",
        "ls -A /mnt/build-pip 2>&1; command -v g++ || echo no-compiler;"
        " ls /var/lib/apt/lists | wc -l",
        entrypoint="",
    )
    lines = result.stdout.splitlines()
    assert lines[0] == "ls: cannot access '/mnt/build-pip': No such file or directory", lines
    assert lines[1:] == ["no-compiler", "0"]


def test_stand_in_boot_runs_commands_and_refuses_beam_flags(image):
    ran = podman_run(image, "python", "-c", "print('ran')")
    assert (ran.returncode, ran.stdout) == (0, "ran\n")
    refused = podman_run(image, "--id=1", "--provision_endpoint=localhost:1")
    assert refused.returncode == 64
    assert "without Beam's SDK harness boot program" in refused.stderr


def _records(pattern: str) -> int:
    import tensorflow as tf

    return sum(1 for _ in tf.data.TFRecordDataset(glob.glob(pattern), compression_type="GZIP"))


# --tune, small: the Tuner's task runs after Transform in the GPU image's place (the same image
# here), its two workers processes in its container beside KerasTuner's oracle chief.
TUNE_FLAGS = [
    "--tune",
    "--max_trials=2",
    "--tune_steps=5",
    "--tune_workers=2",
    "--launcher=local",
]


def test_penguin_pipeline_up_to_transform_runs_in_the_image(image, tmp_path):
    """...and the Tuner after it (--tune): the search in the image, its best point written."""
    package = str(tmp_path / "pipeline.yaml")
    argv = [
        "compile",
        "--pipeline_root=gs://bucket/tfx",
        f"--image={IR_IMAGE}",
        f"--gpu_image={IR_GPU_IMAGE}",
        f"--output={package}",
        *TUNE_FLAGS,
    ]
    assert run_kubeflow.main(argv) == 0
    with open(package) as handle:
        spec = next(yaml.safe_load_all(handle))
    # The embedded penguins: read from the image's own site-packages, not from this machine.
    data_root = spec["root"]["inputDefinitions"]["parameters"]["data_root"]["defaultValue"]
    assert data_root.startswith(IMAGE_SITE_PACKAGES)
    bucket = tmp_path / "gcs" / "bucket"
    bucket.mkdir(parents=True)
    runner = ir_runner.IRRunner(
        package,
        str(tmp_path / "state"),
        stores={"gs://bucket": str(bucket)},
        container=ir_runner.ContainerRun(
            images={IR_IMAGE: image, IR_GPU_IMAGE: image}, env={"TF_CPP_MIN_LOG_LEVEL": "2"}
        ),
        timeout=900,
    )
    started = time.monotonic()
    result = runner.run(until={"Transform", "Tuner"})
    tasks = ", ".join(f"{name} {task.seconds:.0f} s" for name, task in result.tasks.items())
    elapsed = time.monotonic() - started
    print(f"\nup to Transform and the Tuner in the image: {elapsed:.0f} s ({tasks})")
    assert result.states() == {name: "EXECUTED" for name in UP_TO_TRANSFORM | {"Tuner"}}

    # The Tuner: 2 trials by 2 worker processes and the oracle chief in its container, the best
    # point of the built-in search written as TFX's best_hyperparameters, every trial scored.
    best = result.tasks["Tuner"].outputs["best_hyperparameters"]
    assert best["metadata"]["trials"] == 2 and best["metadata"]["tune_workers"] == 2
    assert best["metadata"]["tune_launcher"] == "processes"
    with open(os.path.join(runner.local(best["uri"]), "best_hyperparameters.txt")) as handle:
        point = json.load(handle)["values"]
    assert set(point) == {"width", "depth", "learning_rate", "dropout"}
    scores = runner.local(result.tasks["Tuner"].outputs["tuner_results"]["uri"])
    with open(os.path.join(scores, "tuner_results.json")) as handle:
        trials = json.load(handle)
    assert len(trials) == 2
    assert best["metadata"]["best_score"] == pytest.approx(min(t["score"] for t in trials))

    # ExampleGen's executor output, read back by the runner: the metadata it wrote.
    examples = result.tasks["CsvExampleGen"].outputs["examples"]
    assert json.loads(examples["metadata"]["split_example_counts"]) == {"train": 253, "eval": 91}
    assert examples["metadata"]["num_rows_rejected"] == 0
    examples_dir = runner.local(examples["uri"])
    for split, rows in (("train", 253), ("eval", 91)):
        assert _records(os.path.join(examples_dir, f"Split-{split}", "*")) == rows
    # Transform's outputs: the transform graph and every row transformed.
    transformed = runner.local(result.tasks["Transform"].outputs["transformed_examples"]["uri"])
    for split, rows in (("train", 253), ("eval", 91)):
        assert _records(os.path.join(transformed, f"Split-{split}", "*")) == rows
    graph = runner.local(result.tasks["Transform"].outputs["transform_graph"]["uri"])
    assert os.path.isdir(os.path.join(graph, "transform_fn"))
    # Written by the image's user, not root: the artifacts and the executor output files.
    written = [
        os.path.join(examples_dir, "Split-train"),
        *glob.glob(os.path.join(transformed, "Split-train", "*")),
        *glob.glob(os.path.join(graph, "transform_fn", "*")),
        *glob.glob(
            str(tmp_path / "state" / "pods" / "Transform" / "**" / "output_metadata.json"),
            recursive=True,
        ),
    ]
    assert len(written) >= 4
    assert {os.stat(path).st_uid for path in written} == {UID}
    # The validator compared the image's penguins with the image's curated schema: no anomaly.
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    anomalies = runner.local(result.tasks["ExampleValidator"].outputs["anomalies"]["uri"])
    diffs = sorted(glob.glob(os.path.join(anomalies, "Split-*", "SchemaDiff.pb")))
    assert [os.path.basename(os.path.dirname(d)) for d in diffs] == ["Split-eval", "Split-train"]
    for diff in diffs:
        with open(diff, "rb") as handle:
            assert not anomalies_pb2.Anomalies.FromString(handle.read()).anomaly_info
