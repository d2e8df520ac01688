"""The pipeline builder's Transform: TFX's Transform with our executor and two defaults off."""

from __future__ import annotations

import tensorflow_model_analysis as tfma
from tfx.types import channel, standard_artifacts

from components.tfx_components.transform import executor as transform_executor
from components.tfx_components.transform.component import ShardedTransform
from pipeline import builder


def transform(**kwargs):
    return ShardedTransform(
        examples=channel.Channel(type=standard_artifacts.Examples),
        schema=channel.Channel(type=standard_artifacts.Schema),
        preprocessing_fn=builder.PREPROCESSING_FN,
        **kwargs,
    )


def test_statistics_and_the_analyzer_cache_are_off_by_default_and_can_be_turned_on():
    default = transform()
    assert default.executor_spec.executor_class is transform_executor.Executor
    assert default.exec_properties["disable_statistics"] == 1
    # No analyzer cache output that nothing reads (TFX expresses the setting by its absence),
    # and no statistics outputs.
    assert "updated_analyzer_cache" not in default.outputs
    assert "pre_transform_stats" not in default.outputs

    stock = transform(disable_statistics=False, disable_analyzer_cache=False)
    assert stock.exec_properties["disable_statistics"] == 0
    assert {"updated_analyzer_cache", "pre_transform_stats"} <= set(stock.outputs)


def test_images_default_to_the_transform_executor_s_streamed_output():
    from pipeline import config as config_lib
    from pipeline import datasets

    images = datasets.user_images("/data/flowers", 96)
    tabular = datasets.user_csv("/data/csv", "y")
    assert config_lib.IMAGE_TRANSFORM_SHARDS == transform_executor.STREAMING_SHARDS
    assert config_lib.transform_shards_for(images, None, 8) == transform_executor.STREAMING_SHARDS
    assert config_lib.transform_shards_for(images, 3, 8) == 3
    assert config_lib.transform_shards_for(tabular, None, 8) == 8
    assert config_lib.learning_rate_for(images, None) == config_lib.IMAGE_LEARNING_RATE
    assert config_lib.learning_rate_for(tabular, None) == config_lib.TrainingConfig.learning_rate
    assert config_lib.learning_rate_for(images, 0.05) == 0.05


def test_regression_eval_config_thresholds_skill_over_the_training_mean(tmp_path):
    from pipeline import config as config_lib
    from pipeline import datasets

    dataset = datasets.user_csv(str(tmp_path), "mpg", task="regression")
    config = config_lib.local_config(
        dataset=dataset, output_root=str(tmp_path), min_regression_skill=0.25
    )
    eval_config = builder.eval_config(config)
    [spec] = eval_config.model_specs
    assert dict(spec.label_keys) == {"prediction": "mpg", "prediction_xf": "mpg_xf"}
    # The label from the export's transform_label signature: TFMA keeps (and unbatches) the
    # transformed label alone, not every transformed column.
    assert list(spec.preprocessing_function_names) == ["transform_label"]
    units, normalized = eval_config.metrics_specs
    assert [m.class_name for m in units.metrics] == [
        "ExampleCount",
        "MeanAbsoluteError",
        "RootMeanSquaredError",
    ]
    skill, *standardized = normalized.metrics
    assert skill.module == "components.ml.metrics" and list(normalized.output_names) == [
        "prediction_xf"
    ]
    assert skill.threshold.value_threshold.lower_bound.value == 0.25
    assert skill.threshold.change_threshold.direction == tfma.MetricDirection.HIGHER_IS_BETTER
    # The errors of the training mean, beside the model's (no thresholds).
    assert [m.class_name for m in standardized] == [
        "StandardizedAbsoluteError",
        "MeanPredictorStandardizedAbsoluteError",
    ]
    assert not any(m.HasField("threshold") for m in standardized)


def test_classification_eval_config_blesses_on_skill_over_the_majority_guess(tmp_path):
    import dataclasses

    from pipeline import config as config_lib
    from pipeline import datasets

    config = config_lib.local_config(dataset=datasets.penguins(), output_root=str(tmp_path))
    eval_config = builder.eval_config(config)
    [spec] = eval_config.model_specs
    assert list(spec.preprocessing_function_names) == ["transform_label"]
    assert spec.label_key == "species_xf"
    plain, aggregated = eval_config.metrics_specs
    by_name = {m.class_name: m for m in plain.metrics}
    assert list(by_name) == [
        "ExampleCount",
        "SparseCategoricalAccuracy",
        "AccuracySkill",
        "MajorityClassAccuracy",
        "SparseCategoricalCrossentropy",
        "MultiClassConfusionMatrixPlot",
    ]
    skill = by_name["AccuracySkill"]
    assert skill.module == "components.ml.metrics"
    assert skill.threshold.value_threshold.lower_bound.value == 0.1
    accuracy = by_name["SparseCategoricalAccuracy"]
    # No accuracy bound unless --accuracy_threshold gives one; no regression either way.
    assert not accuracy.threshold.HasField("value_threshold")
    assert accuracy.threshold.change_threshold.direction == tfma.MetricDirection.HIGHER_IS_BETTER
    assert [m.class_name for m in aggregated.metrics] == ["AUC"]
    assert aggregated.aggregate.micro_average
    strict = config_lib.local_config(
        dataset=datasets.penguins(),
        output_root=str(tmp_path),
        accuracy_threshold=0.95,
        min_classification_skill=0.3,
    )
    [accuracy, skill] = builder.eval_config(strict).metrics_specs[0].metrics[1:3]
    assert accuracy.threshold.value_threshold.lower_bound.value == 0.95
    assert skill.threshold.value_threshold.lower_bound.value == 0.3
    # --class_weight balanced: the bound and the no-regression rule move to balanced accuracy.
    weighted = dataclasses.replace(
        config, training=dataclasses.replace(config.training, class_weight="balanced")
    )
    metrics = {m.class_name: m for m in builder.eval_config(weighted).metrics_specs[0].metrics}
    balanced = metrics["BalancedAccuracySkill"].threshold
    assert balanced.value_threshold.lower_bound.value == 0.1
    assert balanced.change_threshold.direction == tfma.MetricDirection.HIGHER_IS_BETTER
    assert not metrics["AccuracySkill"].HasField("threshold")
    assert not metrics["SparseCategoricalAccuracy"].threshold.HasField("change_threshold")


def _user_pipeline(tmp_path, module_text: str, **choice):
    """create_pipeline() for penguins with a user module (checked and staged as a run does)."""
    import dataclasses

    from pipeline import config as config_lib
    from pipeline import datasets, user_code
    from pipeline.flags import DatasetChoice

    module = tmp_path / "mine.py"
    module.write_text(module_text)
    dataset = datasets.local_dataset(DatasetChoice(datasets.PENGUINS), str(tmp_path))
    config = config_lib.local_config(dataset=dataset, output_root=str(tmp_path / "out"))
    user = user_code.check(
        user_code.UserCodeChoice(module_file=str(module), **choice),
        label_key=dataset.label_key,
        task=dataset.task,
        schema_path=None,
        is_images=False,
        image_size=32,
    )
    user = user_code.stage(user, config.pipeline_root)
    training = config.training
    if user.model_fn:
        training = dataclasses.replace(training, model_fn=user.model_fn)
    config = dataclasses.replace(config, user_code=user, training=training)
    return config, {c.id: c for c in builder.create_pipeline(config).components}


def test_a_user_run_fn_gets_tfx_style_evaluation_and_the_trainer_executor(tmp_path):
    import json

    from components.tfx_components.trainer import executor as trainer_executor
    from components.user_code import USER_MODULE_KEY

    config, nodes = _user_pipeline(
        tmp_path,
        "def preprocessing_fn(inputs):\n    return inputs\n\ndef run_fn(fn_args):\n    pass\n",
        custom_config='{"hidden": [4]}',
    )
    transform, trainer = nodes["Transform"], nodes["Trainer"]
    assert transform.exec_properties["preprocessing_fn"] == "mine.preprocessing_fn"
    assert json.loads(transform.exec_properties["custom_config"])["hidden"] == [4]
    assert trainer.exec_properties["run_fn"] == "mine.run_fn"
    assert trainer.executor_spec.executor_class is trainer_executor.Executor
    # Each runs the staged copy of its role; the Evaluator does not need it.
    transform_module = json.loads(transform.exec_properties[USER_MODULE_KEY])
    trainer_module = json.loads(trainer.exec_properties[USER_MODULE_KEY])
    assert transform_module["module"] == trainer_module["module"] == "mine"
    assert transform_module["digest"] != trainer_module["digest"]
    assert USER_MODULE_KEY not in nodes["Evaluator"].exec_properties
    fingerprint = json.loads(trainer.exec_properties["cache_fingerprint"])
    assert "--module_file mine.py" in fingerprint["code"]
    [spec] = builder.eval_config(config).model_specs
    assert spec.signature_name == "serving_default" and spec.label_key == "species_xf"
    assert list(spec.preprocessing_function_names) == ["transform_features"]


def test_a_model_hook_keeps_the_project_s_run_fn_and_evaluation(tmp_path):
    import json

    config, nodes = _user_pipeline(tmp_path, "def build_model(model_inputs):\n    pass\n")
    trainer = nodes["Trainer"]
    assert trainer.exec_properties["run_fn"] == builder.RUN_FN
    assert json.loads(trainer.exec_properties["custom_config"])["model_fn"] == "mine.build_model"
    assert nodes["Transform"].exec_properties["preprocessing_fn"] == builder.PREPROCESSING_FN
    assert builder.eval_config(config) == builder.eval_config(dataclasses_replace_user(config))


def dataclasses_replace_user(config):
    import dataclasses

    from pipeline.user_code import UserCode

    return dataclasses.replace(config, user_code=UserCode())


def test_custom_config_may_not_shadow_the_project_s_transform_settings(tmp_path):
    import pytest

    from pipeline.config import ConfigError

    with pytest.raises(ConfigError, match=r"\['num_output_shards'\]"):
        _user_pipeline(
            tmp_path,
            "def preprocessing_fn(inputs):\n    return inputs\n",
            custom_config='{"num_output_shards": 1}',
        )


def test_an_inferred_schema_has_tfx_s_shape_inference_unless_turned_off(tmp_path, write_csv):
    """No curated schema: SchemaGen (under TFX's id) with this project's executor, which keeps
    every column a feature, and infer_feature_shape TFX's default (True) unless
    --no_infer_feature_shape; a curated schema is imported and the flag refused."""
    import dataclasses

    import pytest

    from components.tfx_components.schema_gen import executor as schema_executor
    from pipeline import config as config_lib
    from pipeline import datasets, run_local

    write_csv("rows.csv", "x,y\n" + "".join(f"{i % 7},{'ab'[i % 2]}\n" for i in range(20)))
    schema_gens = {}
    for flags in ([], ["--no_infer_feature_shape"]):
        args = run_local.parse_args(
            ["--data", write_csv.dir, "--label", "y", "--output_root", str(tmp_path), *flags]
        )
        config, _ = run_local.build_config(args)
        components = {c.id: c for c in builder.create_pipeline(config).components}
        schema_gens[bool(flags)] = components["SchemaGen"]
        assert "ImportSchemaGen" not in components
    assert schema_gens[False].exec_properties["infer_feature_shape"] == 1
    assert schema_gens[True].exec_properties["infer_feature_shape"] == 0
    for schema_gen in schema_gens.values():
        assert schema_gen.executor_spec.executor_class is schema_executor.Executor

    penguins = datasets.penguins()
    with pytest.raises(
        config_lib.ConfigError, match=r"dataset.infer_feature_shape \(--no_infer_feature_shape\)"
    ):
        config_lib.local_config(
            dataset=dataclasses.replace(penguins, infer_feature_shape=False),
            output_root=str(tmp_path),
        )
