"""--infer_data on Kubeflow: the rows' ExampleGen (with its span driver) and TFX's BulkInferrer
compiled as tasks of their own, the BulkInferrer fed the Trainer's model and the Evaluator's
blessing; rows on this machine are checked before compiling, as a local run checks them."""

from __future__ import annotations

import csv

from kubeflow import run_kubeflow
from tests.kubeflow.test_compile import GPU_IMAGE, IMAGE, _compile


def test_infer_data_compiles_to_an_example_gen_and_a_bulk_inferrer_task(tmp_path_factory):
    spec, _, _ = _compile(tmp_path_factory, "infer", "--infer_data=gs://bucket/rows")
    tasks = spec.root.dag.tasks
    assert {"InferCsvExampleGen", "InferCsvExampleGen-span", "BulkInferrer"} <= set(tasks)
    inferrer = tasks["BulkInferrer"]
    producers = {
        name: (
            value.task_output_artifact.producer_task,
            value.task_output_artifact.output_artifact_key,
        )
        for name, value in inferrer.inputs.artifacts.items()
    }
    assert producers == {
        "examples": ("InferCsvExampleGen", "examples"),
        "model": ("Trainer", "model"),
        "model_blessing": ("Evaluator", "blessing"),
    }
    parameters = inferrer.inputs.parameters
    assert parameters["label_key"].runtime_value.constant.string_value == "species"
    assert "serving_numeric" in parameters["model_spec"].runtime_value.constant.string_value
    # The rows' ExampleGen reads the URI with the schema's feature types, the label not among them.
    example_gen = tasks["InferCsvExampleGen"].inputs.parameters
    assert example_gen["input_base"].runtime_value.constant.string_value == "gs://bucket/rows"
    types = example_gen["column_types"].runtime_value.constant.string_value
    assert '"bill_length_mm": "float"' in types and "species" not in types
    executors = spec.deployment_spec.fields["executors"].struct_value.fields
    args = [
        value.string_value
        for value in executors["BulkInferrer_executor"]
        .struct_value.fields["container"]
        .struct_value.fields["args"]
        .list_value.values
    ]
    assert "components.tfx_components.bulk_inferrer.executor.Executor" in " ".join(args)


def test_local_rows_with_other_columns_are_refused_before_compiling(tmp_path, capsys):
    rows = tmp_path / "rows"
    rows.mkdir()
    with open(rows / "rows.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([["island", "bill_length_mm", "colour"], ["Dream", "40", "x"]])
    output = tmp_path / "pipeline.yaml"
    argv = ["compile", "--pipeline_root=gs://bucket/tfx", f"--image={IMAGE}"]
    argv += [f"--gpu_image={GPU_IMAGE}", f"--output={output}", f"--infer_data={rows}"]
    assert run_kubeflow.main(argv) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "columns do not match the model's features" in line
    assert "missing column(s) ['bill_depth_mm', 'flipper_length_mm'" in line
    assert "unexpected column(s) ['colour']" in line
    assert not output.exists()
