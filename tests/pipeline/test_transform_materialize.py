"""--no_transform_materialize: TFX's Transform(materialize=False), the Trainer given ExampleGen's
raw examples; only for a user's run_fn (the project's Trainer reads Transform's examples)."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from pipeline import builder, datasets, flags, user_code
from pipeline import config as config_lib
from pipeline.flags import DatasetChoice

RUN_FN_MODULE = (
    "def preprocessing_fn(inputs):\n    return inputs\n\ndef run_fn(fn_args):\n    pass\n"
)


def _config(tmp_path, module_text: str, materialize: bool):
    tmp_path.mkdir(parents=True, exist_ok=True)
    module = tmp_path / "mine.py"
    module.write_text(module_text)
    dataset = datasets.local_dataset(DatasetChoice(datasets.PENGUINS), str(tmp_path))
    config = config_lib.local_config(
        dataset=dataset, output_root=str(tmp_path / "out"), transform_materialize=materialize
    )
    args = argparse.Namespace(
        module_file=str(module),
        preprocessing_fn=None,
        run_fn=None,
        model_fn=None,
        custom_config=None,
        eval_config=None,
        tune=False,
        max_trials=None,
        tune_steps=None,
        tune_workers=1,
    )
    training = dataclasses.replace(config.training, train_steps=10, eval_steps=2)
    config = dataclasses.replace(config, training=training)
    return flags.with_user_code(config, args, rows=None, cache_dir=None)


def _nodes(config):
    config = dataclasses.replace(
        config, user_code=user_code.stage(config.user_code, config.pipeline_root)
    )
    return {c.id: c for c in builder.create_pipeline(config).components}


def test_the_trainer_reads_the_raw_examples_and_transform_writes_the_graph_only(tmp_path):
    nodes = _nodes(_config(tmp_path, RUN_FN_MODULE, materialize=False))
    transform, trainer = nodes["Transform"], nodes["Trainer"]
    assert "transformed_examples" not in transform.outputs
    assert trainer.inputs["examples"].producer_component_id == "CsvExampleGen"
    assert trainer.inputs["transform_graph"].producer_component_id == "Transform"
    # By default, as TFX: the transformed examples.
    default = _nodes(_config(tmp_path / "d", RUN_FN_MODULE, materialize=True))
    assert "transformed_examples" in default["Transform"].outputs
    assert default["Trainer"].inputs["examples"].producer_component_id == "Transform"


def test_without_a_run_fn_of_yours_the_flag_is_refused(tmp_path):
    with pytest.raises(config_lib.ConfigError) as error:
        _config(tmp_path, "def build_model(model_inputs):\n    pass\n", materialize=False)
    assert str(error.value).startswith(
        "--no_transform_materialize gives the Trainer ExampleGen's raw examples: it is for a "
        "run_fn of yours"
    )


def test_the_cli_refuses_it_for_the_project_s_model_in_one_line(capsys, tmp_path):
    from pipeline import run_local

    code = run_local.main(["--no_transform_materialize", "--output_root", str(tmp_path)])
    assert code == run_local.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "--no_transform_materialize gives the Trainer" in err and err.count("\n") == 1
