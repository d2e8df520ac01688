"""A compiled component runs as its Kubeflow pod would: the container's command and arguments
from the compiled pipeline file, TFX's Kubeflow v2 executor entry point, an ExecutorInput like
the one the KFP launcher writes (the data_root parameter set to the local penguins CSV, output
artifacts under a temporary directory), and the Beam arguments the compile put there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from kubeflow import run_kubeflow
from pipeline import datasets


@pytest.mark.slow
def test_compiled_example_gen_container_runs_through_the_v2_entry_point(tmp_path):
    package = tmp_path / "pipeline.yaml"
    argv = [
        "compile",
        "--pipeline_root=gs://bucket/tfx",
        "--image=registry.example.com/tfx-scaleout:1.0",
        "--gpu_image=registry.example.com/tfx-scaleout-gpu:1.0",
        f"--output={package}",
        "--example_shards=3",
    ]
    assert run_kubeflow.main(argv) == 0
    with open(package) as handle:
        spec = next(yaml.safe_load_all(handle))
    task = spec["root"]["dag"]["tasks"]["CsvExampleGen"]
    parameters = {}
    for name, value in task["inputs"]["parameters"].items():
        if "componentInputParameter" in value:
            # What KFP substitutes for the pipeline parameter: here, the CSV on this machine.
            assert value["componentInputParameter"] == "data_root"
            parameters[name] = datasets.penguins_data_root()
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
    metadata = output["artifacts"]["examples"]["artifacts"][0]["metadata"]
    assert json.loads(metadata["split_example_counts"]) == {"train": 253, "eval": 91}
    assert metadata["num_rows_rejected"] == 0
    for split in ("train", "eval"):
        shards = sorted(os.listdir(os.path.join(examples_uri, f"Split-{split}")))
        assert len(shards) == 3, shards
