"""The compiled pipeline, end to end through the IR runner (tests/kubeflow/ir_runner.py), as
open-source Kubeflow Pipelines would run it: every task the container TFX's v2 entry point (or
the ExampleGen driver) runs in the pod, with KFP's cache-key rule between runs.

Penguins (the user-CSV variant, so that a file can be added under data_root): a cold run
executes every task and pushes a model; an unchanged rerun is a cache hit for every component
(only the uncached ExampleGen driver runs); a file added under data_root reruns ExampleGen and
everything downstream, and the Evaluator compares the new model against the first one. Digits
(the image pipeline) end to end as well.

The cold run is docs/kubeflow.md's "Try it" block, run as the page shows it (compile, then
`python -m tests.kubeflow.ir_runner`): the page's commands and the cold run were two runs of the
same compiled pipeline through the IR runner (tests/docs/test_doc_commands.py ran the page's);
one run serves both. The packaged-penguins variant (no --data_root) runs end to end on Kubeflow
Pipelines itself: tests/kubeflow/test_local_cluster_kfp.py."""

from __future__ import annotations

import json
import os
import re

import pytest
import tensorflow_model_analysis as tfma
import yaml

from kubeflow import run_kubeflow
from kubeflow.config import IMAGE_DIGITS_DIR, IMAGE_PROJECT_DIR, IMAGE_SITE_PACKAGES
from pipeline.datasets import images as image_data
from tests.docs import pages
from tests.docs.pages import Sandbox, explain
from tests.kubeflow import ir_runner
from tests.pipeline_components import CSV_COMPONENTS

pytestmark = pytest.mark.slow

IMAGE = "registry.example.com/tfx-scaleout@sha256:" + "1" * 64
GPU_IMAGE = "registry.example.com/tfx-scaleout-gpu@sha256:" + "2" * 64
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DRIVER = "CsvExampleGen-span"
COMPONENTS = set(CSV_COMPONENTS)
STOCK_TFX_COMMAND = [
    "python",
    "-m",
    "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor",
]
# docs/kubeflow.md's "Try it": the penguins as user CSV in a folder standing for gs://bucket,
# compiled, then every task through the IR runner's command line.
TRY_IT_PAGE = "docs/kubeflow.md"
TRY_IT = "python -m tests.kubeflow.ir_runner"
REPORTED = re.compile(r"(\S+) +(EXECUTED|CACHED) +(\d+\.\d) s")


def _site_packages() -> str:
    import palmerpenguins

    return os.path.dirname(os.path.dirname(os.path.abspath(palmerpenguins.__file__)))


def compile_package(directory, *flags: str) -> str:
    package = str(directory / "pipeline.yaml")
    argv = [
        "compile",
        "--pipeline_root=gs://bucket/tfx",
        f"--image={IMAGE}",
        f"--gpu_image={GPU_IMAGE}",
        f"--output={package}",
        *flags,
    ]
    assert run_kubeflow.main(argv) == 0
    return package


def make_runner(directory, package: str, image_paths: dict[str, str]) -> ir_runner.IRRunner:
    """gs://bucket is a folder here; the image's project and site-packages are this checkout's."""
    return ir_runner.IRRunner(
        package,
        str(directory / "state"),
        stores={"gs://bucket": str(directory / "gcs" / "bucket")},
        image_paths={
            f"{IMAGE_PROJECT_DIR}/schemas": os.path.join(PROJECT_ROOT, "schemas"),
            IMAGE_SITE_PACKAGES: _site_packages(),
            **image_paths,
        },
        # What the image's ENV sets (kubeflow/Dockerfile).
        env=dict(
            os.environ,
            TF_USE_LEGACY_KERAS="1",
            TF_CPP_MIN_LOG_LEVEL="2",
            PYTHONPATH=PROJECT_ROOT,
        ),
    )


def served_versions(directory) -> list[str]:
    return sorted(os.listdir(directory / "gcs" / "bucket" / "tfx" / "serving_model"))


def reported_run(stdout: str, state_dir: str, package: str) -> ir_runner.RunResult:
    """The run the command line reported (its last lines: a line per task, name, state and
    seconds, then the run's id and total; the compile's lines come before them), each task's
    outputs as the runner recorded them in its store (what MLMD holds in KFP): its execution's
    artifacts and output parameters, an importer's one artifact."""
    *lines, last = stdout.splitlines()
    run = re.fullmatch(r"run (\w+): (\d+\.\d) s", last)
    assert run, stdout[-3000:]
    reported = []
    while lines and (match := REPORTED.fullmatch(lines[-1])):
        reported.insert(0, match)
        lines.pop()
    assert reported, stdout[-3000:]
    with open(os.path.join(state_dir, "store.json")) as handle:
        store = json.load(handle)
    artifacts = {record["id"]: record for record in store["artifacts"]}
    executions = {execution["task"]: execution for execution in store["executions"]}
    spec, _ = ir_runner.load(package)
    tasks = {}
    for match in reported:
        name, state, seconds = match.group(1), match.group(2), float(match.group(3))
        if name in executions:
            execution = executions[name]
            outputs = {k: artifacts[v] for k, v in execution["outputs"].items()}
            fingerprint, parameters = execution["fingerprint"], execution["output_parameters"]
        else:  # an importer: no execution, its one artifact
            reference = spec["root"]["dag"]["tasks"][name]["componentRef"]["name"]
            component = spec["components"][reference]
            [output] = component["outputDefinitions"]["artifacts"]
            [record] = [r for r in store["artifacts"] if r["producer"] == name]
            outputs, fingerprint, parameters = {output: record}, None, {}
        tasks[name] = ir_runner.TaskResult(name, state, seconds, fingerprint, outputs, parameters)
    return ir_runner.RunResult(run.group(1), tasks, float(run.group(2)))


@pytest.fixture(scope="module")
def penguin_runs(tmp_path_factory):
    sandbox = Sandbox(tmp_path_factory.mktemp("ir-penguins"))
    # The page's cold run: its compile, then its IR runner command, the folders under /tmp/ir.
    result = sandbox.run(pages.block(TRY_IT_PAGE, TRY_IT), timeout=1200)
    assert result.returncode == 0, explain(result)
    directory = sandbox.tmp / "ir"
    package = str(directory / "penguins.yaml")
    cold = reported_run(result.stdout, str(directory / "state"), package)
    versions_after_cold = served_versions(directory)
    # Every run is a fresh runner on the same store, as every KFP run is a fresh workflow.
    unchanged = make_runner(directory, package, {}).run()
    versions_after_unchanged = served_versions(directory)
    data = directory / "gcs" / "bucket" / "penguins"
    with open(data / "penguins.csv") as source:
        lines = source.read().splitlines()
    (data / "more-penguins.csv").write_text("\n".join([lines[0], *lines[1:80]]) + "\n")
    added = make_runner(directory, package, {}).run()
    return {
        "directory": directory,
        "package": package,
        "runner": make_runner(directory, package, {}),
        "cold": cold,
        "unchanged": unchanged,
        "added": added,
        "versions_after_cold": versions_after_cold,
        "versions_after_unchanged": versions_after_unchanged,
    }


def test_cold_run_executes_every_task_and_pushes_a_model(penguin_runs):
    """Also docs/kubeflow.md's "Try it" as the page says it: every task runs and a model is
    pushed (a numbered version in the serving folder under the bucket)."""
    cold = penguin_runs["cold"]
    assert set(cold.tasks) == {*COMPONENTS, DRIVER}
    assert set(cold.states().values()) == {"EXECUTED"}
    [version] = penguin_runs["versions_after_cold"]
    assert version.isdigit(), version
    pushed = cold.tasks["Pusher"].outputs["pushed_model"]["metadata"]
    assert pushed["pushed"] == 1
    assert cold.tasks["BaselineModel"].outputs["baseline_model"]["metadata"]["baseline_found"] == 0
    blessing = cold.tasks["Evaluator"].outputs["blessing"]["metadata"]
    assert blessing["blessed"] == 1 and "baseline_model" not in blessing


def test_unchanged_rerun_is_a_cache_hit_for_every_component(penguin_runs):
    unchanged = penguin_runs["unchanged"]
    assert unchanged.states() == {DRIVER: "EXECUTED", **{name: "CACHED" for name in COMPONENTS}}
    cold = penguin_runs["cold"]
    assert unchanged.tasks["Trainer"].outputs == cold.tasks["Trainer"].outputs
    # Nothing pushed twice.
    assert penguin_runs["versions_after_unchanged"] == penguin_runs["versions_after_cold"]
    assert unchanged.tasks["Pusher"].outputs == cold.tasks["Pusher"].outputs


def test_added_file_reruns_example_gen_and_downstream_against_the_first_model(penguin_runs):
    added, cold = penguin_runs["added"], penguin_runs["cold"]
    assert added.states() == {
        **{name: "EXECUTED" for name in COMPONENTS - {"ImportSchemaGen"}},
        DRIVER: "EXECUTED",
        "ImportSchemaGen": "CACHED",
    }
    assert (
        added.tasks[DRIVER].output_parameters["input_fingerprint"]
        != cold.tasks[DRIVER].output_parameters["input_fingerprint"]
    )
    examples = added.tasks["CsvExampleGen"].outputs["examples"]["metadata"]
    assert sum(json.loads(examples["split_example_counts"]).values()) == 344 + 79
    [first_version] = penguin_runs["versions_after_cold"]
    baseline = added.tasks["BaselineModel"].outputs["baseline_model"]
    assert baseline["metadata"]["baseline_found"] == 1
    assert baseline["metadata"]["pushed_version"] == first_version
    blessing = added.tasks["Evaluator"].outputs["blessing"]["metadata"]
    assert blessing["baseline_model"] == baseline["uri"]
    evaluation = added.tasks["Evaluator"].outputs["evaluation"]["uri"]
    result = tfma.load_eval_result(penguin_runs["runner"].local(evaluation))
    [(_, metrics)] = result.slicing_metrics
    assert "sparse_categorical_accuracy_diff" in metrics[""][""]  # compared with the first model


def test_digits_end_to_end_through_the_ir(tmp_path):
    digits = image_data.write_digits(str(tmp_path / "digits"))
    package = compile_package(tmp_path, "--dataset=digits", "--example_shards=2", "--epochs=2")
    with open(package) as handle:
        spec = next(yaml.safe_load_all(handle))
    data_root = spec["root"]["inputDefinitions"]["parameters"]["data_root"]["defaultValue"]
    assert data_root == IMAGE_DIGITS_DIR
    result = make_runner(tmp_path, package, {IMAGE_DIGITS_DIR: digits}).run()
    assert set(result.states().values()) == {"EXECUTED"}
    assert "ImageExampleGen-span" in result.tasks
    examples = result.tasks["ImageExampleGen"].outputs["examples"]["metadata"]
    # 1,797 images and the folder's completion marker (directly under the root: ignored).
    assert examples["num_files_found"] == 1797 + 1
    assert examples["num_files_ignored"] == 1
    assert result.tasks["Evaluator"].outputs["evaluation"]["uri"].startswith("gs://bucket/tfx/")


def test_tfxs_stock_entry_point_fails_on_what_the_backend_sends(penguin_runs, tmp_path):
    """Without kubeflow/run_executor.py: the same file with TFX's own entry point as
    StatisticsGen's command fails at the first hand-off, as tensorflow/tfx#7768 reports on a
    cluster (upstream tasks cached; only StatisticsGen runs)."""
    directory = penguin_runs["directory"]
    with open(penguin_runs["package"]) as handle:
        spec, platform = list(yaml.safe_load_all(handle))
    container = spec["deploymentSpec"]["executors"]["StatisticsGen_executor"]["container"]
    assert container["command"] == ["python", "-m", "kubeflow.run_executor"]
    container["command"] = STOCK_TFX_COMMAND
    package = tmp_path / "stock.yaml"
    package.write_text(yaml.safe_dump_all([spec, platform]))
    with pytest.raises(ir_runner.TaskFailed) as failed:
        make_runner(directory, str(package), {}).run(until={"StatisticsGen"})
    message = str(failed.value)
    assert message.startswith("task StatisticsGen exited 1")
    assert "AttributeError: 'NoneType' object has no attribute 'get'" in message
