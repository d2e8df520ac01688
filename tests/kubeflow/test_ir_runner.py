"""The IR runner itself, on a two-task pipeline of small Python containers: dependency order,
ExecutorInputs, KFP's cache-key rule (what makes a hit and what does not) and the files the
backend refuses."""

from __future__ import annotations

import copy
import os
import sys

import pytest
import yaml

from tests.kubeflow import ir_runner

# A container that writes its input parameter into its output artifact, the artifact's
# metadata and an output parameter; the consumer copies its input artifact's content.
PRODUCER = """
import json, os, sys
executor_input = json.loads(sys.argv[1])
out = executor_input["outputs"]["artifacts"]["data"]["artifacts"][0]
os.makedirs(out["uri"])
with open(os.path.join(out["uri"], "value.txt"), "w") as handle:
    handle.write(executor_input["inputs"]["parameterValues"]["text"])
with open(executor_input["outputs"]["parameters"]["size"]["outputFile"], "w") as handle:
    handle.write(str(len(executor_input["inputs"]["parameterValues"]["text"])))
with open(executor_input["outputs"]["outputFile"], "w") as handle:
    json.dump({"artifacts": {"data": {"artifacts": [{"metadata": {"written": 1}}]}}}, handle)
"""
CONSUMER = """
import json, os, sys
executor_input = json.loads(sys.argv[1])
data = executor_input["inputs"]["artifacts"]["data"]["artifacts"][0]
assert data["metadata"]["written"] == 1, data
# What KFP's driver sends: no type, the MLMD id as name, the launcher's custom properties.
assert data["type"] == {"instanceSchema": ""}, data
assert data["name"].isdigit() and data["metadata"]["display_name"] == "data", data
assert json.loads(data["metadata"]["store_session_info"])["Provider"] == "gs", data
assert sys.argv[2] == data["uri"], sys.argv
out = executor_input["outputs"]["artifacts"]["copy"]["artifacts"][0]
os.makedirs(out["uri"])
with open(os.path.join(data["uri"], "value.txt")) as source:
    text = source.read()
with open(os.path.join(out["uri"], "value.txt"), "w") as handle:
    handle.write(text + " size " + executor_input["inputs"]["parameterValues"]["size"])
"""
ARTIFACT = {"artifactType": {"schemaTitle": "system.Dataset", "schemaVersion": "0.0.1"}}


def pipeline_spec() -> dict:
    def executor(code: str, *extra: str) -> dict:
        return {
            "container": {
                "image": "registry.example.com/x@sha256:" + "1" * 64,
                "command": ["python", "-c", code],
                "args": ["{{$}}", *extra],
            }
        }

    return {
        "pipelineInfo": {"name": "tiny"},
        "schemaVersion": "2.1.0",
        "sdkVersion": "test",
        "defaultPipelineRoot": "gs://bucket/root",
        "root": {
            "inputDefinitions": {
                "parameters": {"text": {"parameterType": "STRING", "defaultValue": "hello"}}
            },
            "dag": {
                "tasks": {
                    # Named so that name order and dependency order differ.
                    "b-consume": {
                        "taskInfo": {"name": "b-consume"},
                        "componentRef": {"name": "consume"},
                        "cachingOptions": {"enableCache": True},
                        "inputs": {
                            "artifacts": {
                                "data": {
                                    "taskOutputArtifact": {
                                        "producerTask": "a-produce",
                                        "outputArtifactKey": "data",
                                    }
                                }
                            },
                            "parameters": {
                                "size": {
                                    "taskOutputParameter": {
                                        "producerTask": "a-produce",
                                        "outputParameterKey": "size",
                                    }
                                }
                            },
                        },
                    },
                    "a-produce": {
                        "taskInfo": {"name": "a-produce"},
                        "componentRef": {"name": "produce"},
                        "cachingOptions": {"enableCache": True},
                        "inputs": {"parameters": {"text": {"componentInputParameter": "text"}}},
                    },
                }
            },
        },
        "components": {
            "produce": {
                "executorLabel": "produce_executor",
                "inputDefinitions": {"parameters": {"text": {"parameterType": "STRING"}}},
                "outputDefinitions": {
                    "artifacts": {"data": ARTIFACT},
                    "parameters": {"size": {"parameterType": "STRING"}},
                },
            },
            "consume": {
                "executorLabel": "consume_executor",
                "inputDefinitions": {
                    "artifacts": {"data": ARTIFACT},
                    "parameters": {"size": {"parameterType": "STRING"}},
                },
                "outputDefinitions": {"artifacts": {"copy": ARTIFACT}},
            },
        },
        "deploymentSpec": {
            "executors": {
                "produce_executor": executor(PRODUCER),
                "consume_executor": executor(CONSUMER, "{{$.inputs.artifacts['data'].uri}}"),
            }
        },
    }


def write(tmp_path, spec: dict, name: str = "pipeline.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def runner(tmp_path, package: str) -> ir_runner.IRRunner:
    return ir_runner.IRRunner(
        package, str(tmp_path / "state"), {"gs://bucket": str(tmp_path / "gcs" / "bucket")}
    )


def read_copy(tmp_path, result: ir_runner.RunResult, runner_: ir_runner.IRRunner) -> str:
    uri = result.tasks["b-consume"].outputs["copy"]["uri"]
    with open(os.path.join(runner_.local(uri), "value.txt")) as handle:
        return handle.read()


def test_tasks_run_in_dependency_order_and_reruns_are_cached(tmp_path):
    package = write(tmp_path, pipeline_spec())
    first = runner(tmp_path, package).run()
    assert list(first.tasks) == ["a-produce", "b-consume"]
    assert first.states() == {"a-produce": "EXECUTED", "b-consume": "EXECUTED"}
    data_uri = first.tasks["a-produce"].outputs["data"]["uri"]
    assert data_uri.startswith(f"gs://bucket/root/tiny/{first.run_id}/a-produce/")
    assert data_uri.endswith("/data")
    assert read_copy(tmp_path, first, runner(tmp_path, package)) == "hello size 5"

    # A fresh runner on the same store: KFP's cache outlives a run. Output URIs differ per run
    # (a salt), which the cache key leaves out.
    second = runner(tmp_path, package).run()
    assert second.states() == {"a-produce": "CACHED", "b-consume": "CACHED"}
    assert second.tasks["b-consume"].outputs == first.tasks["b-consume"].outputs

    # A new parameter value: the producer reruns, and so does the consumer, whose input
    # artifact (named by its id) is new.
    third = runner(tmp_path, package).run({"text": "changed"})
    assert third.states() == {"a-produce": "EXECUTED", "b-consume": "EXECUTED"}
    assert read_copy(tmp_path, third, runner(tmp_path, package)) == "changed size 7"


def test_cache_key_fields(tmp_path):
    """The image and the command are in the key; caching off means always run."""
    package = write(tmp_path, pipeline_spec())
    runner(tmp_path, package).run()
    spec = pipeline_spec()
    container = spec["deploymentSpec"]["executors"]["consume_executor"]["container"]
    container["image"] = "registry.example.com/x@sha256:" + "2" * 64
    spec["root"]["dag"]["tasks"]["a-produce"]["cachingOptions"] = {"enableCache": False}
    result = runner(tmp_path, write(tmp_path, spec, "other.yaml")).run()
    assert result.states() == {"a-produce": "EXECUTED", "b-consume": "EXECUTED"}


def test_cache_is_scoped_by_pipeline_name(tmp_path):
    package = write(tmp_path, pipeline_spec())
    runner(tmp_path, package).run()
    spec = pipeline_spec()
    spec["pipelineInfo"]["name"] = "another"
    result = runner(tmp_path, write(tmp_path, spec, "another.yaml")).run()
    assert result.states() == {"a-produce": "EXECUTED", "b-consume": "EXECUTED"}


def test_cache_key_is_sha256_of_the_key_fields():
    inputs = {"parameterValues": {"text": "x"}, "artifacts": {"a": {"artifacts": [{"name": "7"}]}}}
    outputs = {"artifacts": {"o": {"artifacts": [{"name": "o", "type": {}, "uri": "gs://b/1"}]}}}
    container = {"image": "i", "command": ["python"], "args": ["{{$}}"]}
    key = ir_runner.cache_fingerprint(inputs, outputs, {}, container, [])
    moved = copy.deepcopy(outputs)
    moved["artifacts"]["o"]["artifacts"][0]["uri"] = "gs://b/2"
    assert ir_runner.cache_fingerprint(inputs, moved, {}, container, []) == key
    renamed = copy.deepcopy(inputs)
    renamed["artifacts"]["a"]["artifacts"][0]["name"] = "8"
    assert ir_runner.cache_fingerprint(renamed, outputs, {}, container, []) != key
    assert ir_runner.cache_fingerprint(inputs, outputs, {}, container, ["pvc"]) != key
    assert len(key) == 64


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda s: s["deploymentSpec"]["executors"].update(r={"resolver": {}}),
            "resolver not implemented yet",
        ),
        (lambda s: s.update(defaultPipelineRoot="/mnt/pipeline"), "unrecognized pipeline root"),
        (lambda s: s.update(defaultPipelineRoot="hdfs://nn/root"), "unsupported Cloud bucket"),
        (
            lambda s: s["deploymentSpec"]["executors"]["produce_executor"]["container"][
                "args"
            ].append("{{$.inputs.parameters['missing']}}"),
            "unresolved placeholder",
        ),
    ],
)
def test_files_the_backend_refuses(tmp_path, edit, message):
    spec = pipeline_spec()
    edit(spec)
    with pytest.raises(ir_runner.IRRejected, match=message):
        runner(tmp_path, write(tmp_path, spec)).run()
    assert not (tmp_path / "gcs").exists()  # nothing ran


def test_failed_task_reports_its_log(tmp_path):
    spec = pipeline_spec()
    container = spec["deploymentSpec"]["executors"]["produce_executor"]["container"]
    container["command"] = ["python", "-c", "import sys; print('boom'); sys.exit(3)"]
    with pytest.raises(ir_runner.TaskFailed, match="(?s)a-produce exited 3.*boom"):
        runner(tmp_path, write(tmp_path, spec)).run()
    # The launcher writes the task's output into its executor-logs artifact.
    [log] = (tmp_path / "gcs" / "bucket" / "root" / "tiny").glob("*/a-produce/*/executor-logs")
    assert log.read_text() == "boom\n"


def test_metadata_comes_back_as_mlmd_returns_it():
    """converter.go: numbers and bools as doubles, lists and structs wrapped, null refused."""
    assert ir_runner.mlmd_round_trip(3) == 3.0 and isinstance(ir_runner.mlmd_round_trip(3), float)
    assert ir_runner.mlmd_round_trip(True) == 1.0
    assert ir_runner.mlmd_round_trip("a") == "a"
    assert ir_runner.mlmd_round_trip([1, "x"]) == {"list": [1, "x"]}
    assert ir_runner.mlmd_round_trip({"k": 1}) == {"struct": {"k": 1}}
    with pytest.raises(ir_runner.TaskFailed, match="null"):
        ir_runner.mlmd_round_trip(None)


def test_python_is_this_interpreter(tmp_path):
    spec = pipeline_spec()
    code = "import json, sys; json.loads(sys.argv[1]); open(sys.argv[2], 'w').write(sys.executable)"
    container = spec["deploymentSpec"]["executors"]["produce_executor"]["container"]
    container["command"] = ["python", "-c", code]
    container["args"] = ["{{$}}", str(tmp_path / "which.txt")]
    # No output parameter written: as KFP's launcher, the task fails.
    with pytest.raises(ir_runner.TaskFailed, match="failed to read output parameter 'size'"):
        runner(tmp_path, write(tmp_path, spec)).run()
    assert (tmp_path / "which.txt").read_text() == sys.executable
    assert not (tmp_path / "state" / "store.json").exists()  # no execution recorded
