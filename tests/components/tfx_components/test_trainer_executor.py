"""The Trainer executor's contract with a user's run_fn: a run that wrote no model is one error
naming the function, its file and the directory; a cluster task carries everything a task
process needs to rebuild TFX's FnArgs."""

from __future__ import annotations

import json

import pytest

from components import user_code
from components.tfx_components.trainer import executor
from components.training import loop
from components.training.run_fn_task import RunFnTask
from components.training.settings import TrainingConfig


def test_a_run_fn_that_writes_no_model_names_it(tmp_path):
    module = user_code.UserModule(
        module="mine", uri=str(tmp_path), digest="d", source="examples/mine.py"
    )
    serving = tmp_path / "Format-Serving"
    serving.mkdir()
    with pytest.raises(RuntimeError) as error:
        executor.check_model_written(str(serving), "mine.run_fn", module)
    message = str(error.value)
    assert "run_fn mine.run_fn (examples/mine.py) wrote no model" in message
    assert str(serving) in message and "fn_args.serving_model_dir" in message
    (serving / "saved_model.pb").write_bytes(b"x")
    executor.check_model_written(str(serving), "mine.run_fn", module)


def test_run_fn_task_round_trips_through_its_file(tmp_path):
    task = RunFnTask(
        run_fn="mine.run_fn",
        input_dict=json.dumps({"examples": []}),
        output_dict=json.dumps({"model": []}),
        exec_properties=json.dumps({"custom_config": "{}"}),
        model_run_dir=str(tmp_path / "run"),
        user_module=user_code.UserModule("mine", str(tmp_path), "d").to_json(),
        settings=TrainingConfig(strategy="multi_worker_mirrored", workers=2),
    )
    path = str(tmp_path / "task.json")
    task.save(path)
    assert loop.load_task(path) == task
    assert not task.runs_in_process()
