"""Your own code end to end, as docs/own-model.md runs it: the model hook (CSV and images), a
module in TFX's own style under single-worker, multi-worker and parameter-server training, and
the cache following the module's behaviour, not its comments."""

from __future__ import annotations

import glob
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.docs import pages
from tests.test_e2e_local import explain

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

PAGE = "docs/own-model.md"
HOOK = ".venv/bin/python pipeline/run_local.py --module_file examples/penguin_hook.py"
TFX_STYLE = ".venv/bin/python pipeline/run_local.py --module_file examples/penguin_tfx_style.py"
DIGITS = (
    ".venv/bin/python pipeline/run_local.py --dataset digits --module_file examples/digits_hook.py"
)
# Literal strings: tests/docs/test_doc_commands.py reads which page commands a test runs.
HOOK_MULTI_WORKER = (
    ".venv/bin/python pipeline/run_local.py --module_file examples/penguin_hook.py"
    " --custom_config '{\"width\": 32}' --strategy multi_worker_mirrored --workers 2"
)
TFX_STYLE_MULTI_WORKER = (
    ".venv/bin/python pipeline/run_local.py --module_file examples/penguin_tfx_style.py"
    " --strategy multi_worker_mirrored --workers 2"
)
EXAMPLES = os.path.join(pages.PROJECT_ROOT, "examples")
# Exit codes of run_local: pushed, or trained and evaluated but not blessed (a later model that
# scores below the last pushed one).
PUSHED, NOT_PUSHED = 0, 3


def executed(stdout: str, component: str) -> bool:
    return re.search(rf"\) {component} executed in", stdout) is not None


def reused(stdout: str, component: str) -> bool:
    return re.search(rf"\) {component} (?:reused|cached)", stdout) is not None


def pushed_variables(output_root) -> list[str]:
    import tensorflow as tf

    models = sorted(glob.glob(os.path.join(output_root, "penguins-pipeline", "serving_model", "*")))
    loaded = tf.saved_model.load(models[-1])
    return [v.name for v in loaded.model_variables]


def log_file(stdout: str) -> str:
    return re.search(r"log: (\S+)", stdout).group(1)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    return pages.Sandbox(tmp_path_factory.mktemp("user-code"))


@pytest.fixture(scope="module")
def hook_runs(sandbox):
    """The page's hook command on a copy of the module: as it is, after a comment edit, after a
    behaviour edit."""
    (sandbox.root / "mine").mkdir()
    copy = sandbox.root / "mine" / "penguin_hook.py"
    text = Path(EXAMPLES, "penguin_hook.py").read_text()
    copy.write_text(text)
    command = pages.command(PAGE, HOOK)
    swap = {"examples/penguin_hook.py": "mine/penguin_hook.py"}
    first = sandbox.run(command, replace=swap)
    copy.write_text(text.replace("def build_model(", "# Tuned later.\ndef build_model(") + "\n")
    comment = sandbox.run(command, replace=swap)
    copy.write_text(text.replace('get("width", 24)', 'get("width", 20)'))
    behaviour = sandbox.run(command, replace=swap)
    return first, comment, behaviour


def test_hook_trains_the_users_model(hook_runs, sandbox):
    first, _, _ = hook_runs
    assert first.returncode == PUSHED, explain(first)
    assert (
        "Your code: Trainer: the project's run_fn with your model hook penguin_hook.build_model"
        in (first.stdout)
    )
    names = pushed_variables(sandbox.output_root)
    # The hook's own layers (the built-in MLP has neither embeddings nor layer normalization).
    assert any("embedding" in n for n in names) and any("layer_normalization" in n for n in names)
    accuracy = float(re.search(r"sparse_categorical_accuracy (\d\.\d+)", first.stdout).group(1))
    assert accuracy >= 0.9


def test_a_comment_edit_reruns_nothing(hook_runs):
    _, comment, _ = hook_runs
    assert comment.returncode == PUSHED, explain(comment)
    assert "0 component(s) executed" in comment.stdout, comment.stdout


def test_a_behaviour_edit_reruns_the_trainer_and_says_why(hook_runs):
    _, _, behaviour = hook_runs
    assert behaviour.returncode in (PUSHED, NOT_PUSHED), explain(behaviour)
    assert executed(behaviour.stdout, "Trainer"), behaviour.stdout
    assert not executed(behaviour.stdout, "Transform"), behaviour.stdout
    assert "code changed: --module_file penguin_hook.py" in behaviour.stdout


def test_hook_under_multi_worker_training(hook_runs, sandbox):
    command = pages.command(PAGE, HOOK_MULTI_WORKER)
    result = sandbox.run(command)
    assert result.returncode in (PUSHED, NOT_PUSHED), explain(result)
    assert executed(result.stdout, "Trainer") and "2 workers" in result.stdout, result.stdout
    log = Path(log_file(result.stdout)).read_text()
    assert "[worker-1]" in log


@pytest.fixture(scope="module")
def tfx_style_runs(hook_runs, sandbox):
    """The TFX-style module on the same output root: mirrored, then a 2-worker cluster, then
    parameter-server training (the page's command with the strategy swapped)."""
    mirrored = sandbox.run(pages.command(PAGE, TFX_STYLE))
    multi = pages.command(PAGE, TFX_STYLE_MULTI_WORKER)
    multi_worker = sandbox.run(multi)
    parameter_server = sandbox.run(
        multi,
        replace={
            "--strategy multi_worker_mirrored --workers 2": "--strategy parameter_server "
            "--workers 2 --ps 1"
        },
    )
    return mirrored, multi_worker, parameter_server


def test_tfx_style_module_runs_unchanged(tfx_style_runs, sandbox):
    mirrored, _, _ = tfx_style_runs
    assert mirrored.returncode in (PUSHED, NOT_PUSHED), explain(mirrored)
    assert "Transform: preprocessing_fn penguin_tfx_style.preprocessing_fn" in mirrored.stdout
    assert "Trainer: run_fn penguin_tfx_style.run_fn (TFX's FnArgs)" in mirrored.stdout
    assert executed(mirrored.stdout, "Transform") and executed(mirrored.stdout, "Trainer")
    # The Evaluator's default config read the TFX-style signatures.
    accuracy = float(re.search(r"sparse_categorical_accuracy (\d\.\d+)", mirrored.stdout).group(1))
    assert accuracy >= 0.9
    # Transform wrote the user's features, not the project's (its latest execution: the hook's
    # runs before it wrote the project's).
    root = os.path.join(sandbox.output_root, "penguins-pipeline", "pipeline_root", "Transform")
    executions = glob.glob(os.path.join(root, "transformed_examples", "*"))
    latest = max(executions, key=lambda path: int(os.path.basename(path)))
    transformed = glob.glob(os.path.join(latest, "Split-train", "*"))
    assert transformed
    import tensorflow as tf

    record = next(iter(tf.data.TFRecordDataset(transformed[0], compression_type="GZIP")))
    example = tf.train.Example.FromString(record.numpy())
    assert sorted(example.features.feature) == [
        "bill_depth_mm_xf",
        "bill_length_mm_xf",
        "body_mass_g_xf",
        "flipper_length_mm_xf",
        "island_xf",
        "species_xf",
    ]


@pytest.mark.parametrize("run", [1, 2], ids=["multi_worker_mirrored", "parameter_server"])
def test_tfx_style_run_fn_trains_as_a_cluster(tfx_style_runs, run):
    result = tfx_style_runs[run]
    assert result.returncode in (PUSHED, NOT_PUSHED), explain(result)
    assert executed(result.stdout, "Trainer"), result.stdout
    assert not executed(result.stdout, "Transform"), result.stdout
    log = Path(log_file(result.stdout)).read_text()
    # Every task ran with TF_CONFIG; the run_fn ran in the workers (or, parameter-server: the
    # chief ran it while the workers and the server served).
    tasks = ["worker-0", "worker-1"] if run == 1 else ["chief-0", "worker-0", "worker-1", "ps-0"]
    for task in tasks:
        assert f"started task {task}" in log, task
    assert re.search(r"eval metrics: .*sparse_categorical_accuracy", result.stdout)


def test_image_model_hook(tmp_path_factory):
    sandbox = pages.Sandbox(tmp_path_factory.mktemp("digits-hook"))
    result = sandbox.run(pages.command(PAGE, DIGITS))
    assert result.returncode == PUSHED, explain(result)
    assert "model hook digits_hook.build_model" in result.stdout
    models = glob.glob(os.path.join(sandbox.output_root, "digits-pipeline", "serving_model", "*"))
    import tensorflow as tf

    names = [v.name for v in tf.saved_model.load(models[0]).model_variables]
    assert any("separable_conv2d" in n for n in names), names
    shutil.rmtree(sandbox.root / "tfx_output", ignore_errors=True)
