"""kubeflow/run_executor.py: the image's entry point restores each input artifact's TFX type from
the compiled inputs spec, on the three shapes an ExecutorInput arrives in (KFP's backend
driver: `{"instanceSchema": ""}`; kfp.local: `schemaTitle: system.Artifact`; TFX's own: the
declared type), and TFX's own parser (kubeflow_v2_entrypoint_utils) then builds the artifact.
Every TFX task of the compiled pipelines runs through it in test_ir_pipeline.py, which also
shows TFX's stock entry point failing on the backend's shape."""

from __future__ import annotations

import json
import subprocess
import sys
from unittest import mock

import pytest
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from tfx.orchestration.kubeflow.v2 import compiler_utils
from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as tfx_utils
from tfx.types import standard_artifacts

from kubeflow import compile as compiler
from kubeflow import run_executor
from pipeline import PROJECT_ROOT

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


# KFP 2.14.3's launcher (kubeflow/pipelines fc3214d4 backend/src/v2/component/launcher_v2.go:886).
LAUNCHER_MAPPING = [
    ("minio://mlpipeline/v2/artifacts/p/r/T/model", "/minio/mlpipeline/v2/artifacts/p/r/T/model"),
    ("s3://bucket/tfx/T/examples", "/s3/bucket/tfx/T/examples"),
]


@pytest.mark.parametrize(("uri", "path"), LAUNCHER_MAPPING)
def test_object_store_uris_map_to_the_launchers_local_paths_and_back(uri, path):
    scheme = uri[: uri.index("://") + 3]
    assert run_executor.local_path(uri) == path
    assert run_executor.store_uri(path, {scheme}) == uri
    # gs:// stays (TensorFlow opens it); a path of a scheme not in this task is left alone.
    assert run_executor.local_path("gs://b/x") == "gs://b/x"
    assert run_executor.store_uri("/gcs/b/x", {scheme}) == "/gcs/b/x"
    other = {"minio://", "s3://"} - {scheme}
    assert run_executor.store_uri(path, other) == path


def test_input_artifacts_reach_tfx_at_the_launchers_download_path():
    value = executor_input(SHAPES["tfx"], uri="minio://mlpipeline/v2/artifacts/r/Gen/examples")
    mapped, schemes = run_executor.to_local_paths(value)
    assert schemes == {"minio://"}
    (parsed,) = tfx_parse(mapped)
    assert parsed.uri == "/minio/mlpipeline/v2/artifacts/r/Gen/examples"
    assert parsed.split_names == '["train"]'
    # The input itself is untouched (the output file is mapped back from it).
    assert value["inputs"]["artifacts"]["examples"]["artifacts"][0]["uri"].startswith("minio://")


def test_a_real_tfx_executor_runs_on_local_copies_and_hands_back_store_uris(tmp_path):
    """TFX's Pusher through the entry point: its model and blessing inputs are where the launcher
    downloaded them, its PushedModel output is written at the launcher's upload path, and the
    executor output names the minio:// URIs (what the launcher uploads to and records)."""
    root = tmp_path / "pod"
    store = "minio://mlpipeline/v2/artifacts/penguins/run-1"
    model_dir = root / "minio/mlpipeline/v2/artifacts/penguins/run-1/Trainer/model/Format-Serving"
    (model_dir / "variables").mkdir(parents=True)
    (model_dir / "saved_model.pb").write_bytes(b"graph")
    (model_dir / "variables" / "variables.index").write_bytes(b"index")
    (root / "minio/mlpipeline/v2/artifacts/penguins/run-1/Evaluator/blessing").mkdir(parents=True)
    serving = tmp_path / "serving"

    def artifact(cls, uri, metadata=None):
        schema = compiler_utils.get_artifact_schema(cls).decode()
        return {"artifacts": [{"name": uri, "type": {"instanceSchema": schema}, "uri": uri,
                               "metadata": metadata or {}}]}  # fmt: skip

    output_file = tmp_path / "kfp_outputs" / "output_metadata.json"
    value = {
        "inputs": {
            "artifacts": {
                "model": artifact(standard_artifacts.Model, f"{store}/Trainer/model"),
                "model_blessing": artifact(
                    standard_artifacts.ModelBlessing,
                    f"{store}/Evaluator/blessing",
                    {"blessed": 1, "current_model": f"{store}/Trainer/model"},
                ),
            },
            "parameterValues": {
                "push_destination": json.dumps({"filesystem": {"base_directory": str(serving)}}),
                "custom_config": "null",
            },
        },
        "outputs": {
            "artifacts": {
                "pushed_model": artifact(standard_artifacts.PushedModel, f"{store}/Pusher/pushed")
            },
            "outputFile": str(output_file),
        },
    }
    argv = ["prog", "--executor_class_path", "tfx.components.pusher.executor.Executor"]
    argv += ["--json_serialized_invocation_args", json.dumps(value)]
    spec = {name: {"parameterType": "STRING"} for name in value["inputs"]["parameterValues"]}
    argv += ["--json_serialized_inputs_spec_args", json.dumps({"parameters": spec})]
    # In a process of its own, as in the pod (absl's flags and TFX's state of other tests stay
    # out), with the launcher's local root moved under tmp_path.
    driver = (
        "import sys\nfrom kubeflow import run_executor\n"
        "run_executor.LAUNCHER_PATHS['minio://'] = sys.argv[1]\n"
        "run_executor.run(['prog', *sys.argv[2:]])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", driver, f"{root}/minio/", *argv[1:]],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    pushed_local = root / "minio/mlpipeline/v2/artifacts/penguins/run-1/Pusher/pushed"
    assert (pushed_local / "saved_model.pb").read_bytes() == b"graph"
    assert (pushed_local / "variables" / "variables.index").read_bytes() == b"index"
    (version,) = [p.name for p in serving.iterdir()]
    assert (serving / version / "saved_model.pb").read_bytes() == b"graph"
    written = json.loads(output_file.read_text())
    (pushed,) = written["artifacts"]["pushed_model"]["artifacts"]
    assert pushed["uri"] == f"{store}/Pusher/pushed"
    assert pushed["metadata"]["pushed"] == 1.0
    assert pushed["metadata"]["pushed_destination"] == str(serving / version)
    assert str(root) not in output_file.read_text()


def test_a_failed_tasks_error_names_store_uris_and_what_was_not_uploaded(tmp_path):
    """Text rewriting alone: a downloaded input's path is its URI; a path the task wrote is its
    URI saying it was not uploaded (once); a text file there is printed into the log; gs://, a
    path of another scheme and a path that only ends in /minio/... are left as they are."""
    import io

    root = tmp_path / "pod"
    listing = root / "minio/b/run/Gen/examples-rejected_rows/rejected.jsonl"
    listing.parent.mkdir(parents=True)
    listing.write_text('{"file": "a.csv", "line": 2, "reason": "bad"}\n')
    log = io.StringIO()
    with mock.patch.dict(run_executor.LAUNCHER_PATHS, {"minio://": f"{root}/minio/"}):
        task = run_executor.FailedTask({"minio://"}, [f"{root}/minio/b/run/Transform/graph"], log)
        text = task.retell(
            f"cannot read {root}/minio/b/run/Transform/graph/x.pb: listed in {listing}:\n"
            f"  again {listing}, gs://b/x /s3/b/y /data{root}/minio/b/z"
        )
    store = "minio://b/run/Gen/examples-rejected_rows/rejected.jsonl"
    assert text == (
        "cannot read minio://b/run/Transform/graph/x.pb: listed in "
        f"{store} (not uploaded: {run_executor.NOT_UPLOADED}; printed in full in this task's "
        f"log above):\n  again {store}, gs://b/x /s3/b/y /data{root}/minio/b/z"
    )
    assert log.getvalue().splitlines() == [
        f"kubeflow.run_executor: {store}, 46 bytes ({run_executor.NOT_UPLOADED}):",
        '{"file": "a.csv", "line": 2, "reason": "bad"}',
        f"kubeflow.run_executor: end of {store}",
    ]


EXAMPLE_GEN_STORE = "minio://mlpipeline/v2/artifacts/penguins/run-1/CsvExampleGen"


def test_a_large_or_binary_file_is_said_to_be_cut_or_left_in_the_pod(tmp_path):
    import io

    root = tmp_path / "pod"
    (root / "minio/b/out").mkdir(parents=True)
    (root / "minio/b/out/big.jsonl").write_text("é" * 10)  # 20 bytes of UTF-8
    (root / "minio/b/out/model.pb").write_bytes(b"\xff\xfe\x00graph")
    log = io.StringIO()
    with (
        mock.patch.dict(run_executor.LAUNCHER_PATHS, {"minio://": f"{root}/minio/"}),
        mock.patch.object(run_executor, "PRINT_LIMIT_BYTES", 7),
    ):
        task = run_executor.FailedTask({"minio://"}, [], log)
        text = task.retell(f"see {root}/minio/b/out/big.jsonl and {root}/minio/b/out/model.pb")
    assert text == (
        f"see minio://b/out/big.jsonl (not uploaded: {run_executor.NOT_UPLOADED}; its first 7 "
        "bytes are printed in this task's log above) and minio://b/out/model.pb (not uploaded: "
        f"{run_executor.NOT_UPLOADED}; it stayed in the task's pod)"
    )
    assert log.getvalue().splitlines()[1:3] == [
        "ééé",  # 7 bytes read, the 4th character cut: left out
        "kubeflow.run_executor: ... 14 more bytes of minio://b/out/big.jsonl not printed (over 7 "
        "bytes)",
    ]


def _example_gen_under_minio(tmp_path, max_rejected_fraction: str):
    """ExampleGen through the entry point under a minio:// root (the launcher's local folder
    under tmp_path) on a CSV with 25 bad rows of 40: (the process, the CSV's path)."""
    from tfx.proto import example_gen_pb2
    from tfx.utils import proto_utils

    data = tmp_path / "data"
    data.mkdir()
    rows = [f"{i},{i * 0.5}" for i in range(15)] + [f"{i},oops{i}" for i in range(15, 40)]
    (data / "penguins.csv").write_text("id,x\n" + "\n".join(rows) + "\n")
    schema = compiler_utils.get_artifact_schema(standard_artifacts.Examples).decode()
    split = example_gen_pb2.SplitConfig.Split
    output_config = example_gen_pb2.Output(
        split_config=example_gen_pb2.SplitConfig(
            splits=[split(name="train", hash_buckets=3), split(name="eval", hash_buckets=1)]
        )
    )
    input_config = example_gen_pb2.Input(
        splits=[example_gen_pb2.Input.Split(name="single_split", pattern="*.csv")]
    )
    parameters = {
        "input_base": str(data),
        "input_config": proto_utils.proto_to_json(input_config),
        "output_config": proto_utils.proto_to_json(output_config),
        "num_shards": "1",
        "column_types": json.dumps({"id": "int", "x": "float"}),
        "max_rejected_fraction": max_rejected_fraction,
    }
    examples = {"name": "examples", "type": {"instanceSchema": schema},
                "uri": f"{EXAMPLE_GEN_STORE}/examples", "metadata": {}}  # fmt: skip
    value = {
        "inputs": {"parameterValues": parameters},
        "outputs": {
            "artifacts": {"examples": {"artifacts": [examples]}},
            "outputFile": str(tmp_path / "kfp_outputs" / "output_metadata.json"),
        },
    }
    spec = {name: {"parameterType": "STRING"} for name in parameters}
    argv = [
        "--executor_class_path",
        "components.tfx_components.example_gen.executor.Executor",
        "--json_serialized_invocation_args",
        json.dumps(value),
        "--json_serialized_inputs_spec_args",
        json.dumps({"parameters": spec}),
        "--direct_running_mode=in_memory",
    ]
    driver = (
        "import sys\nfrom kubeflow import run_executor\n"
        "run_executor.LAUNCHER_PATHS['minio://'] = sys.argv[1]\n"
        "run_executor.run(['prog', *sys.argv[2:]])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", driver, f"{tmp_path}/pod/minio/", *argv],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=600,
    )
    return done, data / "penguins.csv"


def _printed_listing(log_text: str, listing: str, reason: str) -> tuple[list[dict], int]:
    """The listing the entry point printed into the log, and the line after it."""
    log = log_text.splitlines()
    start = log.index(next(x for x in log if x.startswith(f"kubeflow.run_executor: {listing}, ")))
    assert log[start].endswith(f" bytes ({reason}):"), log[start]
    end = log.index(f"kubeflow.run_executor: end of {listing}")
    return [json.loads(x) for x in log[start + 1 : end]], end


def test_example_gens_rejected_rows_under_a_minio_root_name_the_uri_and_stay_in_the_log(tmp_path):
    """Too many rejects: the error line `deploy --wait` shows names the listing's minio:// URI
    (not the launcher's local path) and says it was not uploaded (KFP's launcher uploads nothing
    of a failed task); the listing is in the task's log in full (the message shows 20 rows)."""
    from kubeflow import deploy

    done, csv = _example_gen_under_minio(tmp_path, "0.0")
    assert done.returncode == 1, done.stderr[-3000:]
    line = deploy.error_line(done.stderr)
    assert line is not None, done.stderr[-3000:]
    listing = f"{EXAMPLE_GEN_STORE}/examples-rejected_rows/rejected.jsonl"
    assert line.startswith(
        "components.tfx_components.example_gen.executor.TooManyRejectedRowsError: 25 of 40 CSV "
        "row(s) rejected"
    ), line
    assert (
        f"all are listed in {listing} (not uploaded: KFP's launcher uploads nothing of a failed "
        "task; printed in full in this task's log above):"
    ) in line
    assert f"{csv}:17: column 'x': 'oops15' is not a float" in line
    assert str(tmp_path / "pod") not in line
    # The whole listing is in the log, above the error: all 25 rows, file:line and reason.
    printed, end = _printed_listing(done.stderr, listing, run_executor.NOT_UPLOADED)
    assert sorted(row["line"] for row in printed) == list(range(17, 42))
    assert {row["file"] for row in printed} == {str(csv)}
    log = done.stderr.splitlines()
    assert end < log.index(next(x for x in log if x.startswith("components.tfx_components.")))


def test_rejects_within_the_allowed_fraction_are_printed_as_the_uri_is_not_uploaded(tmp_path):
    """Within --max_rejected_fraction the task succeeds and its Examples record the listing's
    minio:// URI, beside the Examples folder: the launcher uploads only that folder, so the
    listing is printed into the task's log in full."""
    done, csv = _example_gen_under_minio(tmp_path, "0.7")
    assert done.returncode == 0, done.stderr[-3000:]
    written = json.loads((tmp_path / "kfp_outputs" / "output_metadata.json").read_text())
    [examples] = written["artifacts"]["examples"]["artifacts"]
    listing = f"{EXAMPLE_GEN_STORE}/examples-rejected_rows/rejected.jsonl"
    assert examples["uri"] == f"{EXAMPLE_GEN_STORE}/examples"
    assert examples["metadata"]["rejected_rows_uri"] == listing
    printed, _ = _printed_listing(done.stderr, listing, run_executor.OUTSIDE_OUTPUTS)
    assert sorted(row["line"] for row in printed) == list(range(17, 42))
