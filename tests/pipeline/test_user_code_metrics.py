"""Metric modules an --eval_config names: those in --module_file's folder are staged with the
module (and are in its digest, so in the Evaluator's cache key); one that cannot be imported, or
lacks its class, is one error naming --eval_config before anything runs."""

from __future__ import annotations

import os
import shutil

import pytest

from pipeline import PROJECT_ROOT
from pipeline import user_code as user_code_lib

METRIC = """
import tensorflow as tf


class PenguinAccuracy(tf.keras.metrics.SparseCategoricalAccuracy):
    def __init__(self, name="penguin_accuracy", dtype=None):
        super().__init__(name=name, dtype=dtype)
"""


def _eval_config(module: str, class_name: str = "PenguinAccuracy") -> str:
    return (
        'model_specs { signature_name: "serving_default" label_key: "species_xf" }\n'
        "metrics_specs {\n"
        '  metrics { class_name: "ExampleCount" }\n'
        f'  metrics {{ class_name: "{class_name}" module: "{module}" }}\n'
        "}\n"
    )


def _check(folder, eval_config: str) -> user_code_lib.UserCode:
    (folder / "eval_config.pbtxt").write_text(eval_config)
    choice = user_code_lib.UserCodeChoice(
        module_file=str(folder / "penguin_hook.py"),
        eval_config=str(folder / "eval_config.pbtxt"),
    )
    return user_code_lib.check(
        choice,
        label_key="species",
        task="classification",
        schema_path=None,
        is_images=False,
        image_size=0,
    )


@pytest.fixture()
def folder(tmp_path):
    shutil.copy(os.path.join(PROJECT_ROOT, "examples", "penguin_hook.py"), tmp_path)
    (tmp_path / "penguin_metrics.py").write_text(METRIC)
    return tmp_path


def test_a_metric_module_of_the_folder_is_staged_with_the_module(folder, tmp_path):
    user = _check(folder, _eval_config("penguin_metrics"))
    assert user.eval_modules == ("penguin_metrics",)
    assert dict(user.files).keys() == {"penguin_hook.py", "penguin_metrics.py"}
    staged = user_code_lib.stage(user, str(tmp_path / "root"))
    evaluator = staged.module_for(user_code_lib.EVALUATOR)
    assert evaluator is not None
    assert sorted(os.listdir(evaluator.uri)) == sorted(
        [user_code_lib.MANIFEST_FILE, "penguin_hook.py", "penguin_metrics.py"]
    )
    # A behaviour edit of the metric is a new digest (the Evaluator's cache key).
    (folder / "penguin_metrics.py").write_text(METRIC.replace("penguin_accuracy", "acc"))
    assert _check(folder, _eval_config("penguin_metrics")).digest != user.digest


def test_an_installed_metric_module_is_not_staged(folder):
    user = _check(folder, _eval_config("tf_keras.metrics", "AUC"))
    assert user.eval_modules == ()
    assert dict(user.files).keys() == {"penguin_hook.py"}


@pytest.mark.parametrize(
    ("module", "class_name", "message"),
    [
        (
            "no_such_metrics",
            "PenguinAccuracy",
            "metric PenguinAccuracy of module no_such_metrics: no module 'no_such_metrics' "
            "here; put no_such_metrics.py next to --module_file",
        ),
        (
            "penguin_metrics",
            "NoSuchMetric",
            "metric NoSuchMetric of module penguin_metrics: ",
        ),
    ],
)
def test_a_metric_that_cannot_load_is_one_error_naming_the_eval_config(
    folder, module, class_name, message
):
    with pytest.raises(user_code_lib.UserCodeError) as raised:
        _check(folder, _eval_config(module, class_name))
    text = str(raised.value)
    assert text.startswith(f"--eval_config {folder / 'eval_config.pbtxt'}: {message}")
    if class_name == "NoSuchMetric":
        assert "defines no 'NoSuchMetric'" in text
