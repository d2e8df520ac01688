"""--tune end to end on the embedded penguins (2-3 short trials each): TFX's Tuner before the
Trainer with the built-in search and with TFX's own penguin_utils_keras.py (its tuner_fn and
run_fn, unchanged from the wheel), the best point reaching the Trainer, the run's summary and
`python -m pipeline.mlmd tuning`; an unchanged rerun fully cached; a bad search space refused
in one line; --tune_workers 2 surviving a killed worker."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest

from tests.docs import pages

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

ROOT = pages.PROJECT_ROOT
PAGE = "docs/own-model.md"
# Literal strings: tests/docs/test_doc_commands.py reads which page commands a test runs.
TUNE = ".venv/bin/python pipeline/run_local.py --tune --max_trials 3 --tune_steps 10 --epochs 2"
PENGUIN_TUNE = "--eval_steps 5 --tune --max_trials 2 --tune_steps 20"
TUNE_WORKERS = (
    ".venv/bin/python pipeline/run_local.py --tune --tune_workers 2 --max_trials 6"
    " --tune_steps 300 --epochs 1"
)


def run_local(*args, output_root, timeout=1200):
    return subprocess.run(
        [sys.executable, "pipeline/run_local.py", "--output_root", str(output_root), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )


def mlmd_tuning(output_root) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.mlmd", "--output_root", str(output_root), "tuning",
         "--json"],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def dense_kernels(output_root, pipeline: str) -> list[str]:
    """The pushed model's Dense kernels (the rank-2 variables: hidden layers and the output
    layer, no optimizer slots), from its SavedModel's variables checkpoint (any SavedModel: the
    project's export or a Keras model's)."""
    import tensorflow as tf

    [model] = sorted(glob.glob(os.path.join(output_root, pipeline, "serving_model", "*")))[-1:]
    variables = tf.train.list_variables(os.path.join(model, "variables", "variables"))
    return [
        name
        for name, shape in variables
        if len(shape) == 2 and "optimizer" not in name.lower() and "OPTIMIZER_SLOT" not in name
    ]


BUILT_IN = ("--tune", "--max_trials", "3", "--tune_steps", "10", "--epochs", "2")


@pytest.fixture(scope="module")
def built_in(tmp_path_factory):
    """The page's built-in --tune run, in a sandbox (its ./tfx_output)."""
    sandbox = pages.Sandbox(tmp_path_factory.mktemp("tune"))
    command = pages.command(PAGE, TUNE)
    assert command.words()[2:] == list(BUILT_IN)
    first = sandbox.run(command)
    return sandbox, first


def test_built_in_search_reaches_the_trainer_summary_and_mlmd(built_in):
    sandbox, first = built_in
    out = sandbox.output_root
    assert first.returncode == 0, pages.explain(first)
    stdout = first.stdout
    assert "Tuner: the built-in search over width 16|32|64, depth 1|2|3" in stdout
    assert re.search(r"\(6/10\) Tuner executed in", stdout)
    assert "10 component(s) executed, 0 reused from cache" in stdout
    tuning = mlmd_tuning(out)
    assert tuning["trials"] == 3 and len(tuning["trial_scores"]) == 3
    best = min(tuning["trial_scores"], key=lambda t: t["score"])
    assert tuning["best"] == {k: best[k] for k in ("width", "depth", "learning_rate", "dropout")}
    assert tuning["best_score"] == pytest.approx(best["score"], rel=1e-5)
    width, depth = tuning["best"]["width"], tuning["best"]["depth"]
    units = [max(1, width >> i) for i in range(depth)]
    assert tuning["trainer_settings"]["hidden_units"] == units
    assert tuning["trainer_settings"]["learning_rate"] == pytest.approx(
        tuning["best"]["learning_rate"]
    )
    # The Trainer's run_fn built the model of the best point: depth hidden layers + the output.
    assert f"training with the Tuner's best point: hidden units {units}" in stdout
    assert len(dense_kernels(out, "penguins-pipeline")) == depth + 1
    line = re.search(r"tuning:\s+(.*)", stdout).group(1)
    assert line.startswith("3 trial(s), 10 step(s) each; best val_loss "), line
    assert f"depth {depth}" in line and f"width {width}" in line


def test_unchanged_rerun_is_fully_cached_and_a_new_space_reruns_the_tuner(built_in):
    sandbox, first = built_in
    out = sandbox.output_root
    assert first.returncode == 0
    second = sandbox.run(pages.command(PAGE, TUNE))
    assert second.returncode == 0, second.stderr
    assert "0 component(s) executed, 10 reused from cache" in second.stdout, second.stdout
    assert "tuning:        3 trial(s)" in second.stdout
    space = json.dumps({"tune_space": {"width": [8], "depth": [1], "dropout": []}})
    # The same command in the same sandbox (the same data path), the space changed.
    third = sandbox.run(
        pages.command(PAGE, TUNE), replace={"--epochs 2": f"--epochs 2 --custom_config '{space}'"}
    )
    assert third.returncode in (0, 3), third.stdout + third.stderr
    assert re.search(r"\) Tuner executed in", third.stdout)
    assert re.search(r"\) Transform (?:reused|cached)", third.stdout), third.stdout
    assert "search over width 8, depth 1, learning_rate 0.001..0.03 (log)\n" in third.stdout
    tuning = mlmd_tuning(out)
    assert tuning["best"]["width"] == 8 and tuning["best"]["depth"] == 1
    assert "dropout" not in tuning["best"]
    assert tuning["trainer_settings"]["hidden_units"] == [8]


@pytest.mark.parametrize(
    "space, message",
    [
        ({"width": [0, 32]}, "--custom_config tune_space width: choices must be integers >= 1"),
        ({"widht": [8]}, "'widht' is not a setting of the built-in tabular model; tunable:"),
        ({"learning_rate": {"min": 0.1, "max": 0.01}}, "with min < max, got 0.1, 0.01"),
    ],
)
def test_bad_search_space_fails_in_one_line(tmp_path, space, message):
    result = run_local(
        "--tune", "--custom_config", json.dumps({"tune_space": space}), output_root=tmp_path,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not os.path.exists(tmp_path / "penguins-pipeline" / "pipeline_root")


def test_tuning_flags_need_tune(tmp_path):
    result = run_local("--max_trials", "3", output_root=tmp_path, timeout=300)
    assert result.returncode == 2
    assert "--max_trials: for --tune" in result.stderr


def test_tfx_penguin_tuner_fn_unchanged_feeds_its_run_fn(tmp_path):
    """TFX's penguin_utils_keras.py from the wheel, unchanged: its tuner_fn searches (2 trials
    of its 6 with --max_trials) and its run_fn builds the best point's model from
    fn_args.hyperparameters."""
    from tests.test_e2e_tfx_examples import EVAL_CONFIG, write_penguins_processed

    sandbox = pages.Sandbox(tmp_path)
    write_penguins_processed(sandbox.tmp / "penguin")
    (sandbox.tmp / "penguin_eval.pbtxt").write_text(
        EVAL_CONFIG % {"label": "species_xf", "metric": "SparseCategoricalAccuracy"}
    )
    block = pages.block(PAGE, PENGUIN_TUNE)
    [tfx_line] = [c for c in block if c.text.startswith("TFX=")]
    [run] = [c for c in block if PENGUIN_TUNE in c.text]
    assert "--module_file $TFX/penguin/penguin_utils_keras.py" in run.text
    result = sandbox.run([tfx_line, run], {"DIR": str(sandbox.tmp / "penguin")})
    out = sandbox.output_root
    assert result.returncode == 0, pages.explain(result)
    assert "Tuner: your tuner_fn penguin_utils_keras.tuner_fn" in result.stdout
    assert re.search(r"\) Tuner executed in", result.stdout)
    tuning = mlmd_tuning(out)
    assert tuning["trials"] == 2 and len(tuning["trial_scores"]) == 2
    assert tuning["objective"] == "val_sparse_categorical_accuracy"
    best = max(tuning["trial_scores"], key=lambda t: t["score"])
    assert tuning["best"] == {k: best[k] for k in ("learning_rate", "num_layers")}
    # The run_fn's model has the best point's num_layers Dense(8) layers and its Dense(3).
    assert len(dense_kernels(out, "penguin-pipeline")) == tuning["best"]["num_layers"] + 1
    assert "tuning:        2 trial(s), 20 step(s) each; best val_sparse_categorical_accuracy" in (
        result.stdout
    )


def _find(root, name: str) -> list[str]:
    """Files called `name` under root, hidden directories included (the Tuner's search runs
    under its execution's .system/.../.temp/, which glob's ** skips)."""
    return sorted(os.path.join(folder, name) for folder, _, files in os.walk(root) if name in files)


def _trial_states(root) -> list[str]:
    states = []
    for path in _find(root, "trial.json"):
        try:
            with open(path) as handle:
                states.append(json.load(handle)["status"])
        except (OSError, ValueError, KeyError):
            continue
    return states


def test_two_tuner_workers_survive_a_killed_worker(tmp_path):
    """--tune_workers 2: an oracle chief and two worker processes; tuner1 is killed (SIGKILL)
    after the first trial finished; it is restarted with its tuner id, and the search ends
    with every trial, the finished ones kept. (The search directory is the Tuner execution's
    temporary one, which TFX removes when the execution succeeds: its trials are read while it
    runs, the result from the store.)"""
    import signal
    import time

    out = tmp_path / "out"
    words = pages.command(PAGE, TUNE_WORKERS).words()
    process = subprocess.Popen(
        [sys.executable, *words[1:], "--output_root", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    killed = None
    deadline = time.monotonic() + 900
    try:
        while killed is None and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            pids = _find(out, "tuner_processes.json")
            if not pids or "COMPLETED" not in _trial_states(out):
                continue
            with open(pids[0]) as handle:
                worker = json.load(handle)["tuner1"]
            os.kill(worker, signal.SIGKILL)
            killed = worker
        stdout, stderr = process.communicate(timeout=900)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert killed is not None, "the search ended before a worker could be killed"
    assert process.returncode == 0, stdout + stderr
    assert f"tuner worker tuner1 (pid {killed}) ended with signal SIGKILL: restarted" in stdout
    assert "oracle chief on 127.0.0.1:" in stdout
    tuning = mlmd_tuning(out)
    assert tuning["trials"] == 6 and len(tuning["trial_scores"]) == 6
    assert len({t["trial_id"] for t in tuning["trial_scores"]}) == 6
    assert tuning["workers"] == 2 and tuning["restarts"] == 1
    assert re.search(
        r"tuning:\s+6 trial\(s\), 300 step\(s\) each, 2 workers \(1 restarted\)", stdout
    )


def _tuner_execution(output_root) -> dict:
    """The built-in run's Tuner execution in its store: its exec properties (as TFX recorded
    them) and its input artifacts' types and URIs."""
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    [path] = glob.glob(os.path.join(output_root, "*", "metadata.sqlite"))
    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = path
    connection.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    store = metadata_store.MetadataStore(connection)
    types = {t.id: t.name for t in store.get_execution_types()}
    # The built-in run's own (its module's other tests rerun it with a new space: more Tuners).
    execution = min(
        (e for e in store.get_executions() if types[e.type_id].endswith("ProjectTuner")),
        key=lambda e: e.id,
    )
    properties = {
        key: value.string_value
        for key, value in execution.custom_properties.items()
        if key in ("custom_config", "tuner_fn", "train_args", "eval_args")
    }
    events = store.get_events_by_execution_ids([execution.id])
    artifacts = {a.id: a for a in store.get_artifacts_by_id([e.artifact_id for e in events])}
    inputs = {
        event.path.steps[0].key: artifacts[event.artifact_id].uri
        for event in events
        if event.type == event.INPUT
    }
    return {"exec_properties": properties, "inputs": inputs}


def test_launcher_path_runs_the_search_as_a_jobs_workers(built_in, tmp_path):
    """What --tune_workers 2 with --launcher tfjob|trainjob runs, with the Trainer's local
    launcher in the operator's place: the Tuner's executor hands the search to the launcher as
    a 3-worker multi_worker_mirrored cluster of run_task processes (each with the TF_CONFIG a
    TFJob gives its pods); worker 0 serves KerasTuner's oracle on its cluster port, workers 1
    and 2 are tuners 0 and 1. On the built-in run's Transform output: 4 trials, all completed
    and kept in the TunerResults output (the search folder the job's pods share), TFX's best
    point written by the chief and recorded with the launcher on the artifact."""
    from components.tfx_components.tuner import executor

    sandbox, first = built_in
    assert first.returncode == 0, pages.explain(first)
    best, results = _search_on_the_local_launcher(sandbox.output_root, tmp_path, tmp_path)
    search = os.path.join(results.uri, executor.SEARCH_DIR)
    assert not os.path.exists(tmp_path / "tmp" / executor.SEARCH_DIR)
    assert _trial_states(search) == ["COMPLETED"] * 4
    with open(os.path.join(best.uri, "best_hyperparameters.txt")) as handle:
        point = json.load(handle)["values"]
    assert set(point) == {"width", "depth", "learning_rate", "dropout"}
    with open(os.path.join(results.uri, "tuner_results.json")) as handle:
        scores = json.load(handle)
    assert len(scores) == 4
    assert best.get_int_custom_property("trials") == 4
    assert best.get_string_custom_property("tune_launcher") == "local"
    assert best.get_float_custom_property("best_score") == pytest.approx(
        min(t["score"] for t in scores), rel=1e-5
    )


def _search_on_the_local_launcher(output_root, tmp_path, artifacts_root):
    """The Tuner's executor on the built-in run's Tuner inputs (copied under `artifacts_root`
    when it is not `tmp_path`), 4 trials by 2 workers and the chief as a job of the Trainer's
    local launcher; its outputs under `artifacts_root`. Returns (best, results) artifacts."""
    import shutil

    from tfx.dsl.components.base import base_executor
    from tfx.types import standard_artifacts

    from components.tfx_components.tuner import executor

    found = _tuner_execution(output_root)
    kinds = {
        "examples": standard_artifacts.Examples,
        "schema": standard_artifacts.Schema,
        "transform_graph": standard_artifacts.TransformGraph,
    }
    inputs = {}
    for key, uri in found["inputs"].items():
        artifact = kinds[key]()
        artifact.uri = uri
        if artifacts_root != tmp_path:
            artifact.uri = str(artifacts_root / "inputs" / key)
            shutil.copytree(uri, artifact.uri)
        if key == "examples":
            artifact.split_names = json.dumps(["train", "eval"])
        inputs[key] = [artifact]
    best = standard_artifacts.HyperParameters()
    best.uri = str(artifacts_root / "best_hyperparameters")
    results = standard_artifacts.TunerResults()
    results.uri = str(artifacts_root / "tuner_results")
    for artifact in (best, results):
        os.makedirs(artifact.uri)
    properties = dict(found["exec_properties"])
    custom_config = json.loads(properties["custom_config"])
    custom_config["tuning"] = {
        "max_trials": 4, "workers": 2, "max_restarts": 0, "launcher": {"kind": "local"},
    }  # fmt: skip
    properties["custom_config"] = json.dumps(custom_config)
    context = base_executor.BaseExecutor.Context(tmp_dir=str(tmp_path / "tmp"), unique_id="1")
    executor.Executor(context).Do(
        inputs, {"best_hyperparameters": [best], "tuner_results": [results]}, properties
    )
    return best, results


def test_a_search_staged_on_the_volume_runs_as_a_jobs_workers(built_in, tmp_path):
    """--tune_workers 2 with --launcher tfjob|trainjob under a minio:// root, with the Trainer's
    local launcher in the operator's place: the Tuner's inputs and outputs are KFP's launcher's
    local copies (here a folder patched in as /minio/), which the job's workers cannot see (the
    folder is moved away while they run); the search is staged on the volume as the Kubernetes
    launchers stage it (staging.staged_task), its 4 trials run there, and TFX's best point and
    the trials come back to the Tuner's outputs; the staging folder is gone."""
    from unittest import mock

    from components.tfx_components.tuner import executor
    from components.training import kubernetes_job, launchers, staging

    sandbox, first = built_in
    assert first.returncode == 0, pages.explain(first)
    pod, mount = tmp_path / "minio", tmp_path / "volume"
    mount.mkdir()
    create = launchers.create
    seen = []

    class StagingLocalLauncher:
        """The local launcher behind the Kubernetes launchers' staging."""

        def __init__(self, settings):
            self.inner = create(settings)

        def run(self, spec, task):
            name = kubernetes_job.job_name(task)
            with staging.staged_task(task, name, str(mount), "claim", "tfjob") as job_task:
                seen.append(job_task)
                os.rename(pod, tmp_path / "out-of-sight")
                try:
                    self.inner.run(spec, job_task)
                finally:
                    os.rename(tmp_path / "out-of-sight", pod)

    with (
        mock.patch.object(staging, "POD_LOCAL_PREFIXES", (f"{pod}/",)),
        mock.patch.object(launchers, "create", StagingLocalLauncher),
    ):
        best, results = _search_on_the_local_launcher(sandbox.output_root, tmp_path, pod)
    [job_task] = seen
    assert job_task.tuner_task.startswith(f"{mount}/{staging.STAGING_DIR}/tfx-tune-")
    assert _trial_states(os.path.join(results.uri, executor.SEARCH_DIR)) == ["COMPLETED"] * 4
    with open(os.path.join(best.uri, "best_hyperparameters.txt")) as handle:
        point = json.load(handle)["values"]
    assert set(point) == {"width", "depth", "learning_rate", "dropout"}
    assert best.get_int_custom_property("trials") == 4
    assert os.listdir(mount / staging.STAGING_DIR) == []
