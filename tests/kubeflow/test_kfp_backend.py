"""The compiled penguin pipeline's CsvExampleGen -> StatisticsGen hand-off as Kubeflow Pipelines'
backend performs it: its own metadata client (kfp_check/, pinned to kubeflow/pipelines 2.14.3)
records the producer's outputs in a real ML Metadata store and resolves the consumer's inputs
from it (tests/kubeflow/kfp_backend.py). What the executor then receives is fed to the compiled
command: TFX 1.16's own entry point fails on it (tensorflow/tfx#7768, issue 27); the image's
`kubeflow.run_executor` (issue 27 item 1) must not."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
import yaml

from tests import session
from tests.kubeflow import kfp_backend
from tests.kubeflow.variants import PIPELINE_ROOT

PRODUCER, CONSUMER = "CsvExampleGen", "StatisticsGen"
TFX_ENTRY_POINT = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"
# The first run on a machine builds kfp_check (minutes: docs/benchmarks.md); later ones take
# seconds, the TFX entry point's run aside.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kfp_check(request) -> str:
    say = session.say(request.config)
    try:
        built = kfp_backend.build(say=say)
    except kfp_backend.Unavailable as error:
        session.unavailable(str(error))
    if built.seconds:
        say(f"tests: kfp_check built in {built.seconds:.0f}s")
    return built.binary


@pytest.fixture(scope="module")
def penguins(compiled_files) -> dict:
    with open(compiled_files["penguins"]) as handle:
        return next(yaml.safe_load_all(handle))


@pytest.fixture(scope="module")
def handed_off(kfp_check, compiled_files, tmp_path_factory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("kfp_hand_off")
    mlmd = kfp_backend.MlmdServer(str(folder / "mlmd.sqlite")).start()
    try:
        return kfp_backend.hand_off(
            kfp_check, compiled_files["penguins"], PRODUCER, CONSUMER, str(folder), mlmd
        )
    finally:
        mlmd.stop()


def _command(penguins: dict, task: str, executor_input: dict) -> list[str]:
    """The task's compiled command and args with {{$}} replaced as the launcher replaces it
    (kubeflow/pipelines 2.14.3 backend/src/v2/component/launcher_v2.go:719-727)."""
    label = penguins["components"][penguins["root"]["dag"]["tasks"][task]["componentRef"]["name"]]
    container = penguins["deploymentSpec"]["executors"][label["executorLabel"]]["container"]
    text = json.dumps(executor_input, separators=(",", ":"))
    argv = [part.replace("{{$}}", text) for part in container["command"] + container["args"]]
    assert argv[0] == "python"
    return [sys.executable, *argv[1:]]


def test_the_backend_sends_the_upstream_artifact_with_an_empty_type(handed_off, penguins):
    produced = handed_off[PRODUCER]["outputs"]["artifacts"]
    [examples] = handed_off[CONSUMER]["inputs"]["artifacts"]["examples"]["artifacts"]
    # metadata/client.go:988 Schema "" -> OutputArtifact.ToRuntimeArtifact's type.
    assert examples["type"] == {"instanceSchema": ""}
    [output] = produced["examples"]["artifacts"]
    assert output["type"]["instanceSchema"].startswith("title: tfx.Examples\n")
    assert examples["uri"] == output["uri"]
    assert examples["uri"].startswith(f"{PIPELINE_ROOT}/{PRODUCER}/")
    assert int(examples["name"]) > 0  # the MLMD artifact id
    assert examples["metadata"]["display_name"] == "examples"
    assert json.loads(examples["metadata"]["store_session_info"])["Provider"] == "gs"
    # The driver's launcher-managed log output (driver/driver.go:491-504), typed system.Artifact.
    logs = handed_off[CONSUMER]["outputs"]["artifacts"]["executor-logs"]["artifacts"]
    assert logs[0]["type"] == {"schemaTitle": "system.Artifact"}
    given = penguins["root"]["dag"]["tasks"][CONSUMER]["inputs"]["parameters"]
    expected = {name: value["runtimeValue"]["constant"] for name, value in given.items()}
    assert handed_off[CONSUMER]["inputs"]["parameterValues"] == expected


def test_tfx_s_own_entry_point_fails_on_it(handed_off, penguins):
    """The bug issue 27 is about: TFX's stock entry point, given what the backend sends."""
    argv = _command(penguins, CONSUMER, handed_off[CONSUMER])
    argv[argv.index("-m") + 1] = TFX_ENTRY_POINT
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert result.returncode != 0
    assert "in _retrieve_class_path" in result.stderr, result.stderr[-3000:]
    assert "AttributeError: 'NoneType' object has no attribute 'get'" in result.stderr


@pytest.mark.skipif(
    importlib.util.find_spec("kubeflow.run_executor") is None,
    reason="kubeflow/run_executor.py lands with issue 27 item 1 (branch issue27)",
)
def test_run_executor_gives_tfx_the_declared_type(handed_off, penguins):
    """kubeflow.run_executor's restoration, then what TFX's entry point does with the result
    (kubeflow_v2_run_executor._run_executor: json_format.Parse into ExecutorInput, then
    parse_raw_artifact_dict), on the backend's input."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils
    from tfx.types import standard_artifacts

    from kubeflow import run_executor

    argv = _command(penguins, CONSUMER, handed_off[CONSUMER])
    assert argv[argv.index("-m") + 1] == "kubeflow.run_executor"
    args, _ = run_executor.parse_flags(argv[argv.index("-m") + 1 :])
    executor_input = json.loads(args.json_serialized_invocation_args)
    inputs_spec = json.loads(args.json_serialized_inputs_spec_args)
    restored = run_executor.restore_types(executor_input, inputs_spec, args.executor_class_path)
    message = json_format.Parse(
        json.dumps(restored), pipeline_spec_pb2.ExecutorInput(), ignore_unknown_fields=True
    )
    parsed = kubeflow_v2_entrypoint_utils.parse_raw_artifact_dict(message.inputs.artifacts)
    [examples] = parsed["examples"]
    assert isinstance(examples, standard_artifacts.Examples)
    assert examples.uri == executor_input["inputs"]["artifacts"]["examples"]["artifacts"][0]["uri"]
