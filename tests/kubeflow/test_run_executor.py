"""kubeflow/run_executor.py: the image's entry point restores each input artifact's TFX type from
the compiled inputs spec, on the three shapes an ExecutorInput arrives in (KFP's backend
driver: `{"instanceSchema": ""}`; kfp.local: `schemaTitle: system.Artifact`; TFX's own: the
declared type), and TFX's own parser (kubeflow_v2_entrypoint_utils) then builds the artifact.
Every TFX task of the compiled pipelines runs through it in test_ir_pipeline.py, which also
shows TFX's stock entry point failing on the backend's shape."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from tfx.orchestration.kubeflow.v2 import compiler_utils
from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as tfx_utils
from tfx.types import standard_artifacts

from kubeflow import compile as compiler
from kubeflow import run_executor

EXAMPLES_SCHEMA = compiler_utils.get_artifact_schema(standard_artifacts.Examples).decode()
SCHEMA_SCHEMA = compiler_utils.get_artifact_schema(standard_artifacts.Schema).decode()
INPUTS_SPEC = {
    "artifacts": {"examples": {"artifactType": {"instanceSchema": EXAMPLES_SCHEMA}}},
    "parameters": {"exclude_splits": {"parameterType": "STRING"}},
}
STOCK_TFX = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"
SHAPES = {
    # backend/src/v2/metadata/client.go:1144 + OutputArtifact.ToRuntimeArtifact (client.go:256)
    "backend": {"instanceSchema": ""},
    # kfp.local rebuilds input types as the generic artifact
    "kfp.local": {"schemaTitle": "system.Artifact", "schemaVersion": "0.0.1"},
    # what TFX's own runners send
    "tfx": {"instanceSchema": EXAMPLES_SCHEMA},
    "tfx-title": {"schemaTitle": "tfx.Examples"},
}


def executor_input(artifact_type: dict, uri: str = "gs://b/examples", outputs=None) -> dict:
    return {
        "inputs": {
            "artifacts": {
                "examples": {
                    "artifacts": [
                        {
                            "name": "12",
                            "type": artifact_type,
                            "uri": uri,
                            "metadata": {"split_names": '["train"]', "display_name": "examples"},
                        }
                    ]
                }
            },
            "parameterValues": {"exclude_splits": "[]"},
        },
        "outputs": outputs or {"artifacts": {}, "outputFile": "/gcs/b/t/output_metadata.json"},
    }


def tfx_parse(value: dict) -> list:
    """TFX 1.16's own parser on the ExecutorInput's input artifacts."""
    message = pipeline_spec_pb2.ExecutorInput()
    json_format.ParseDict(value, message, ignore_unknown_fields=True)
    return tfx_utils.parse_raw_artifact_dict(message.inputs.artifacts)["examples"]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_becomes_the_declared_tfx_type(shape):
    restored = run_executor.restore_types(executor_input(SHAPES[shape]), INPUTS_SPEC)
    [artifact] = tfx_parse(restored)
    assert isinstance(artifact, standard_artifacts.Examples)
    assert artifact.split_names == '["train"]'
    assert artifact.uri == "gs://b/examples"


@pytest.mark.parametrize(
    ("shape", "error"),
    [("backend", AttributeError), ("kfp.local", ImportError)],
)
def test_tfx_alone_fails_on_what_kfp_sends(shape, error):
    """Why the module exists: TFX 1.16 cannot build an artifact from these types."""
    with pytest.raises(error):
        tfx_parse(executor_input(SHAPES[shape]))


def test_the_backends_executor_logs_output_is_left_out():
    """driver/driver.go:753 adds it to every task; TFX cannot build a system.Artifact."""
    outputs = {
        "artifacts": {
            "statistics": {"artifacts": [{"name": "statistics", "uri": "gs://b/s", "type": {}}]},
            "executor-logs": {
                "artifacts": [
                    {
                        "name": "executor-logs",
                        "uri": "gs://b/l",
                        "type": {"schemaTitle": "system.Artifact"},
                    }
                ]
            },
        },
        "outputFile": "/gcs/b/t/output_metadata.json",
    }
    restored = run_executor.restore_types(
        executor_input(SHAPES["backend"], outputs=outputs), INPUTS_SPEC
    )
    assert list(restored["outputs"]["artifacts"]) == ["statistics"]


def test_what_cannot_be_restored_is_one_error_naming_the_input():
    with pytest.raises(
        run_executor.TypeRestoreError, match="'examples' of X arrived with type 'empty'.*recompile"
    ):
        run_executor.restore_types(executor_input(SHAPES["backend"]), None, "X")
    wrong = {"artifacts": {"examples": {"artifactType": {"instanceSchema": SCHEMA_SCHEMA}}}}
    with pytest.raises(
        run_executor.TypeRestoreError, match="arrived as 'tfx.Examples'.*declares 'tfx.Schema'"
    ):
        run_executor.restore_types(executor_input(SHAPES["tfx"]), wrong)


def test_the_cli_is_tfxs_and_the_compiled_command_is_this_module():
    argv = [
        "--executor_class_path",
        "a.B",
        "--json_serialized_invocation_args",
        "{}",
        "--runner=DirectRunner",
    ]
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor as stock

    ours, beam = run_executor.parse_flags(["prog", *argv])
    theirs, stock_beam = stock._parse_flags(["prog", *argv])  # noqa: SLF001
    # absl hands the parser the whole argv: TFX's leftover (Beam) args start with the program.
    assert vars(ours) == vars(theirs) and beam == stock_beam == ["prog", "--runner=DirectRunner"]
    assert compiler.EXECUTOR_COMMAND == ["python", "-m", "kubeflow.run_executor"]


def test_unrestorable_input_exits_2_with_the_message(capsys):
    argv = ["prog", "--executor_class_path", "tfx.components.statistics_gen.executor.Executor"]
    argv += ["--json_serialized_invocation_args", json.dumps(executor_input(SHAPES["kfp.local"]))]
    with pytest.raises(SystemExit) as exited:
        run_executor.run(argv)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert (
        "kubeflow.run_executor: input artifact 'examples' of tfx.components.statistics_gen" in error
    )
    assert "'system.Artifact'" in error
