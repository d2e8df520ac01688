"""A compiled component runs as its Kubeflow pod would: the container's command and arguments
from the compiled pipeline file, TFX's Kubeflow v2 executor entry point, an ExecutorInput like
the one the KFP launcher writes (the data_root parameter set to data on this machine, output
artifacts under a temporary directory), and the Beam arguments the compile put there."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow_transform as tft
import yaml

from components.ml import features, image_preprocessing, inputs
from kubeflow import example_gen_driver, run_kubeflow
from pipeline import datasets
from pipeline.datasets import images as image_data


def _compile(tmp_path, *flags: str) -> dict:
    package = tmp_path / "pipeline.yaml"
    argv = [
        "compile",
        "--pipeline_root=gs://bucket/tfx",
        "--image=registry.example.com/tfx-scaleout@sha256:" + "1" * 64,
        "--gpu_image=registry.example.com/tfx-scaleout-gpu@sha256:" + "2" * 64,
        f"--output={package}",
        *flags,
    ]
    assert run_kubeflow.main(argv) == 0
    with open(package) as handle:
        return next(yaml.safe_load_all(handle))


def _artifact(name: str, type_title: str, uri: str, metadata: dict | None = None) -> dict:
    """One artifact of an ExecutorInput, as the KFP launcher writes it."""
    return {
        "artifacts": [
            {
                "name": name,
                "type": {"schemaTitle": type_title},
                "uri": uri,
                "metadata": metadata or {},
            }
        ]
    }


def _run_task(
    spec: dict, task_name: str, tmp_path, data_root: str = "", input_artifacts=None
) -> dict:
    """Runs the compiled task's container command with an ExecutorInput like the KFP
    launcher's: data_root set to a local directory, the given input artifacts, every output
    artifact under tmp_path/<task>/<name>; returns {output name: (metadata, URI)}."""
    task = spec["root"]["dag"]["tasks"][task_name]
    component = spec["components"][task["componentRef"]["name"]]
    parameters = {}
    for name, value in task["inputs"].get("parameters", {}).items():
        if "componentInputParameter" in value:
            # What KFP substitutes for the pipeline parameter: here, data on this machine.
            assert value["componentInputParameter"] == "data_root"
            parameters[name] = data_root
        elif "taskOutputParameter" in value:
            # ExampleGen's driver task (span, fingerprint, resolved input config), as it
            # computes them in its pod.
            driver = spec["root"]["dag"]["tasks"][value["taskOutputParameter"]["producerTask"]]
            input_config = driver["inputs"]["parameters"]["input_config"]["runtimeValue"]
            driver_args = spec["deploymentSpec"]["executors"][
                spec["components"][driver["componentRef"]["name"]]["executorLabel"]
            ]["container"]["args"]
            driver_class = driver_args[driver_args.index("--driver_class_path") + 1]
            resolved = example_gen_driver.resolve(data_root, input_config["constant"], driver_class)
            parameters[name] = resolved[value["taskOutputParameter"]["outputParameterKey"]]
        else:
            parameters[name] = value["runtimeValue"]["constant"]
    outputs = {}
    for name, definition in component["outputDefinitions"]["artifacts"].items():
        title = definition["artifactType"]["instanceSchema"].split("\n")[0].split(": ")[1]
        outputs[name] = _artifact(name, title, str(tmp_path / task_name / name))
    container = spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"]
    output_file = str(tmp_path / task_name / "executor_output.json")
    executor_input = {
        "inputs": {"parameterValues": parameters, "artifacts": input_artifacts or {}},
        "outputs": {"artifacts": outputs, "outputFile": output_file},
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
        written = json.load(handle)["artifacts"]
    return {
        name: (
            written.get(name, {"artifacts": [{}]})["artifacts"][0].get("metadata", {}),
            outputs[name]["artifacts"][0]["uri"],
        )
        for name in outputs
    }


def _shards(examples_uri: str, split: str) -> list[str]:
    return sorted(os.listdir(os.path.join(examples_uri, f"Split-{split}")))


@pytest.mark.slow
def test_compiled_example_gen_container_runs_through_the_v2_entry_point(tmp_path):
    spec = _compile(tmp_path, "--example_shards=3")
    outputs = _run_task(spec, "CsvExampleGen", tmp_path, data_root=datasets.penguins_data_root())
    metadata, examples_uri = outputs["examples"]
    assert json.loads(metadata["split_example_counts"]) == {"train": 253, "eval": 91}
    assert metadata["num_rows_rejected"] == 0
    for split in ("train", "eval"):
        assert len(_shards(examples_uri, split)) == 3


@pytest.mark.slow
def test_compiled_image_pipeline_containers_ingest_and_transform_the_digits(tmp_path):
    spec = _compile(tmp_path, "--dataset=digits", "--example_shards=2")
    # The folders the project's image writes at build time (kubeflow/Dockerfile), written here
    # by the same command.
    digits = image_data.write_digits(str(tmp_path / "digits"))
    metadata, examples_uri = _run_task(spec, "ImageExampleGen", tmp_path, data_root=digits)[
        "examples"
    ]
    counts = json.loads(metadata["split_example_counts"])
    assert set(counts) == {"train", "eval"}
    # The folder's completion marker lies directly under the root: found and ignored.
    assert metadata["num_files_ignored"] == 1
    assert sum(counts.values()) == metadata["num_files_found"] - 1 == 1797
    assert metadata["num_files_rejected"] == 0
    assert json.loads(metadata["label_vocabulary"]) == [str(digit) for digit in range(10)]
    for split in ("train", "eval"):
        assert _shards(examples_uri, split) == [
            f"data_tfrecord-{shard:05d}-of-00002.gz" for shard in range(2)
        ]

    # Transform's pod: the examples and the curated schema (as ImportSchemaGen's artifact) in;
    # the transform graph (label vocabulary, resize target) out and no examples: the Trainer
    # reads ExampleGen's shards (encoded bytes) through the graph, and decodes them where they
    # are consumed (trainer, evaluator, serving).
    schema_uri = tmp_path / "schema"
    schema_uri.mkdir()
    shutil.copy(datasets.curated_schema_path(datasets.DIGITS), schema_uri / "schema.pbtxt")
    outputs = _run_task(
        spec,
        "Transform",
        tmp_path,
        input_artifacts={
            "examples": _artifact("examples", "tfx.Examples", examples_uri, metadata),
            "schema": _artifact("schema", "tfx.Schema", str(schema_uri)),
        },
    )
    assert set(outputs) == {"transform_graph"}
    graph = tft.TFTransformOutput(outputs["transform_graph"][1])
    assert graph.vocabulary_size_by_name(features.LABEL_VOCABULARY) == 10
    assert image_preprocessing.image_size_of(graph) == 32  # --image_size default
    # The Trainer's input: ExampleGen's shards through the transform graph, decoded.
    files = sorted(glob.glob(os.path.join(examples_uri, "Split-*", "*")))
    dataset = inputs.make_dataset(
        files, graph, features.IMAGE_LABEL_KEY, 64, shuffle=False, repeat=False
    )
    total = 0
    for batch, labels in dataset:
        pixels = batch[image_preprocessing.ENCODED_IMAGE].numpy()
        assert pixels.shape[1:] == (32, 32, 3)
        assert pixels.min() >= 0.0 and 0.0 < pixels.max() <= 1.0
        assert set(labels.numpy()) <= set(range(10))
        total += len(labels)
    assert total == 1797
