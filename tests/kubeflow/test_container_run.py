"""A compiled component runs as its Kubeflow pod would: the container's command and arguments
from the compiled pipeline file, TFX's Kubeflow v2 executor entry point, an ExecutorInput like
the one the KFP launcher writes (the data_root parameter set to data on this machine, output
artifacts under a temporary directory), and the Beam arguments the compile put there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from kubeflow import run_kubeflow
from pipeline import datasets, image_data


def _compile(tmp_path, *flags: str) -> dict:
    package = tmp_path / "pipeline.yaml"
    argv = [
        "compile",
        "--pipeline_root=gs://bucket/tfx",
        "--image=registry.example.com/tfx-scaleout:1.0",
        "--gpu_image=registry.example.com/tfx-scaleout-gpu:1.0",
        f"--output={package}",
        *flags,
    ]
    assert run_kubeflow.main(argv) == 0
    with open(package) as handle:
        return next(yaml.safe_load_all(handle))


def _run_example_gen(spec: dict, task_name: str, data_root: str, tmp_path) -> tuple[dict, str]:
    """Runs the compiled ExampleGen task's container command with data_root set to a local
    directory; returns (the output Examples artifact's metadata, its URI)."""
    task = spec["root"]["dag"]["tasks"][task_name]
    parameters = {}
    for name, value in task["inputs"]["parameters"].items():
        if "componentInputParameter" in value:
            # What KFP substitutes for the pipeline parameter: here, data on this machine.
            assert value["componentInputParameter"] == "data_root"
            parameters[name] = data_root
        else:
            parameters[name] = value["runtimeValue"]["constant"]
    label = spec["components"][task["componentRef"]["name"]]["executorLabel"]
    container = spec["deploymentSpec"]["executors"][label]["container"]
    examples_uri = str(tmp_path / "examples")
    output_file = str(tmp_path / "task" / "executor_output.json")
    executor_input = {
        "inputs": {"parameterValues": parameters},
        "outputs": {
            "artifacts": {
                "examples": {
                    "artifacts": [
                        {
                            "name": "examples",
                            "type": {"schemaTitle": "tfx.Examples"},
                            "uri": examples_uri,
                            "metadata": {},
                        }
                    ]
                }
            },
            "outputFile": output_file,
        },
    }
    args = [json.dumps(executor_input) if arg == "{{$}}" else arg for arg in container["args"]]
    assert container["command"][0] == "python"
    command = [sys.executable, *container["command"][1:], *args]
    result = subprocess.run(
        command,
        env=dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    with open(output_file) as handle:
        output = json.load(handle)
    return output["artifacts"]["examples"]["artifacts"][0]["metadata"], examples_uri


def _shards(examples_uri: str, split: str) -> list[str]:
    return sorted(os.listdir(os.path.join(examples_uri, f"Split-{split}")))


@pytest.mark.slow
def test_compiled_example_gen_container_runs_through_the_v2_entry_point(tmp_path):
    spec = _compile(tmp_path, "--example_shards=3")
    metadata, examples_uri = _run_example_gen(
        spec, "CsvExampleGen", datasets.penguins_data_root(), tmp_path
    )
    assert json.loads(metadata["split_example_counts"]) == {"train": 253, "eval": 91}
    assert metadata["num_rows_rejected"] == 0
    for split in ("train", "eval"):
        assert len(_shards(examples_uri, split)) == 3


@pytest.mark.slow
def test_compiled_image_example_gen_container_reads_the_digits_class_folders(tmp_path):
    spec = _compile(tmp_path, "--dataset=digits", "--example_shards=2")
    # The folders the project's image writes at build time (kubeflow/Dockerfile), written here
    # by the same command.
    digits = image_data.write_digits(str(tmp_path / "digits"))
    metadata, examples_uri = _run_example_gen(spec, "ImageExampleGen", digits, tmp_path)
    counts = json.loads(metadata["split_example_counts"])
    assert set(counts) == {"train", "eval"}
    assert sum(counts.values()) == metadata["num_files_found"] == 1797
    assert metadata["num_files_rejected"] == 0
    assert json.loads(metadata["label_vocabulary"]) == [str(digit) for digit in range(10)]
    for split in ("train", "eval"):
        assert _shards(examples_uri, split) == [
            f"data_tfrecord-{shard:05d}-of-00002.gz" for shard in range(2)
        ]
