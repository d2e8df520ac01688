"""create_pipeline(config): the whole TFX pipeline as a pure function of a PipelineConfig.

  ShardedCsvExampleGen | ImageExampleGen -> StatisticsGen
    -> ImportSchemaGen (curated) | SchemaGen (first use)
    -> ExampleValidator (fails on anomalies) -> Transform (sharded output; images: the transform
       graph only) -> Trainer (tabular: Transform's examples; images: ExampleGen's)
    -> BaselineModel (newest pushed model but the candidate) -> Evaluator (threshold + no
       regression) -> Pusher
  with --infer_data: InferCsvExampleGen (rows without labels) -> BulkInferrer (TFX's, with the
    Trainer's model and the Evaluator's blessing: it predicts only a blessed model's rows)

No environment reads and no data I/O: runners (local, Kubeflow) build the config and hand it
over. User code is referenced by module path from the installed package; so that an edit to it
is never served from the cache, every component carries a fingerprint of the project code it
runs, the curated schema's content and the stack's versions (pipeline.fingerprints), read from
the project's own source files.
"""

from __future__ import annotations

import tensorflow_model_analysis as tfma

# Component modules, not `tfx.v1`: the v1 facade also imports the Google Cloud extensions
# (about 5 s of a 15 s start-up), which a local or Kubeflow run never uses.
from tfx.components import (
    Pusher,
    StatisticsGen,
    Trainer,
)
from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen
from tfx.orchestration import pipeline
from tfx.proto import pusher_pb2, trainer_pb2

from components.ml import features, metrics
from components.tfx_components.baseline_model import spec as baseline_spec
from components.tfx_components.baseline_model.component import BaselineModel
from components.tfx_components.bulk_inferrer.component import CsvBulkInferrer
from components.tfx_components.evaluator.component import BaselineEvaluator
from components.tfx_components.example_gen.component import ShardedCsvExampleGen
from components.tfx_components.image_example_gen.component import ImageExampleGen
from components.tfx_components.schema_gen.executor import ColumnSchemaGen
from components.tfx_components.trainer import executor as trainer_executor
from components.tfx_components.transform import executor as transform_executor
from components.tfx_components.transform.component import ShardedTransform
from components.tfx_components.validation.executor import StrictExampleValidator
from components.training.settings import USER_CONFIG_KEY
from components.user_code import USER_MODULE_KEY
from pipeline import fingerprints, tuning, user_code
from pipeline.config import ConfigError, DatasetConfig, PipelineConfig

# The serving model is a plain SavedModel (signatures over tf.Examples, components.ml.export),
# not a Keras one. Said in the EvalConfig, TFMA does not find it out by loading the model with
# tf.keras.models.load_model first (a whole load of the candidate, and of the baseline, before
# the evaluation loads them again).
GENERIC_SAVED_MODEL = tfma.TF_GENERIC
PREPROCESSING_FN = "components.ml.preprocessing.preprocessing_fn"
IMAGE_PREPROCESSING_FN = "components.ml.image_preprocessing.preprocessing_fn"
# Rows per tf.Transform batch for images: encoded bytes (tens of KB each), not decoded pixels, so
# larger batches than the 128 decoded images did fit; still far below the default 10,000 rows.
IMAGE_TRANSFORM_BATCH_SIZE = 1024
RUN_FN = trainer_executor.PROJECT_RUN_FN
TRAIN_SPLIT, EVAL_SPLIT = "train", "eval"
# A user's run_fn encodes its label its own way (the majority class need not be index 0): its
# classifier is held to an accuracy, this one unless --accuracy_threshold is given.
USER_RUN_FN_ACCURACY = 0.9


def image_transform_config(image_size: int) -> dict:
    """Transform settings for images: the resize target (recorded in the transform graph, which
    keeps the encoded bytes; the trainer, TFMA and serving decode), and bounded batches."""
    return {
        features.IMAGE_SIZE_CONFIG: image_size,
        transform_executor.BATCH_SIZE_CONFIG_KEY: IMAGE_TRANSFORM_BATCH_SIZE,
    }


def regression_eval_config(config: PipelineConfig) -> tfma.EvalConfig:
    """Two views of one prediction: in the label's units (the raw label; MAE, RMSE) and z-scored
    by the training mean and deviation (the transformed label), where predicting the training
    mean scores 0: mse_skill = 1 - MSE / MSE(training mean) must reach min_regression_skill and
    must not drop below the previous blessed model's."""
    units, normalized = features.PREDICTION, features.NORMALIZED_PREDICTION
    skill = tfma.MetricConfig(
        class_name="MeanSquaredErrorSkill",
        module=metrics.__name__,
        threshold=tfma.MetricThreshold(
            value_threshold=tfma.GenericValueThreshold(
                lower_bound={"value": config.min_regression_skill}
            ),
            change_threshold=tfma.GenericChangeThreshold(
                direction=tfma.MetricDirection.HIGHER_IS_BETTER, absolute={"value": -1e-10}
            ),
        ),
    )
    label = config.dataset.label_key
    return tfma.EvalConfig(
        model_specs=[
            tfma.ModelSpec(
                signature_name=features.SERVING_SIGNATURE,
                model_type=GENERIC_SAVED_MODEL,
                label_keys={units: label, normalized: features.transformed_name(label)},
                prediction_keys={units: units, normalized: normalized},
                preprocessing_function_names=[features.TRANSFORM_LABEL_SIGNATURE],
            )
        ],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[
            tfma.MetricsSpec(
                metrics=[
                    tfma.MetricConfig(class_name="ExampleCount"),
                    tfma.MetricConfig(class_name="MeanAbsoluteError"),
                    tfma.MetricConfig(class_name="RootMeanSquaredError"),
                ],
                output_names=[units],
            ),
            tfma.MetricsSpec(
                metrics=[
                    skill,
                    tfma.MetricConfig(
                        class_name="StandardizedAbsoluteError", module=metrics.__name__
                    ),
                    tfma.MetricConfig(
                        class_name="MeanPredictorStandardizedAbsoluteError",
                        module=metrics.__name__,
                    ),
                ],
                output_names=[normalized],
            ),
        ],
    )


def user_eval_config(config: PipelineConfig) -> tfma.EvalConfig:
    """The default for a user's run_fn, whose model follows TFX's examples: a serving_default
    signature over serialized tf.Examples and a transform_features signature that gives the
    transformed label. Classification: accuracy (argmax of probabilities or logits) at least
    --accuracy_threshold; regression: MSE and MAE, no worse than the previous blessed model's
    (an absolute bar needs your own --eval_config). Both: no regression against the baseline."""
    user = config.user_code
    label = user.transformed_label or features.transformed_name(config.dataset.label_key)
    regression = config.dataset.task == "regression"
    no_regression = tfma.GenericChangeThreshold(
        direction=tfma.MetricDirection.LOWER_IS_BETTER
        if regression
        else tfma.MetricDirection.HIGHER_IS_BETTER,
        absolute={"value": 1e-10 if regression else -1e-10},
    )
    accuracy_threshold = (
        USER_RUN_FN_ACCURACY if config.accuracy_threshold is None else config.accuracy_threshold
    )
    if regression:
        metrics = [
            tfma.MetricConfig(class_name="ExampleCount"),
            tfma.MetricConfig(
                class_name="MeanSquaredError",
                threshold=tfma.MetricThreshold(change_threshold=no_regression),
            ),
            tfma.MetricConfig(class_name="MeanAbsoluteError"),
        ]
    else:
        metrics = [
            tfma.MetricConfig(class_name="ExampleCount"),
            tfma.MetricConfig(
                class_name="SparseCategoricalAccuracy",
                threshold=tfma.MetricThreshold(
                    value_threshold=tfma.GenericValueThreshold(
                        lower_bound={"value": accuracy_threshold}
                    ),
                    change_threshold=no_regression,
                ),
            ),
        ]
    return tfma.EvalConfig(
        model_specs=[
            tfma.ModelSpec(
                signature_name=features.SERVING_SIGNATURE,
                model_type=GENERIC_SAVED_MODEL,
                label_key=label,
                preprocessing_function_names=[features.TRANSFORM_SIGNATURE],
            )
        ],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[tfma.MetricsSpec(metrics=metrics)],
    )


def eval_config(config: PipelineConfig) -> tfma.EvalConfig:
    """--eval_config's, else the default for a user's run_fn, else the project's model's."""
    user = config.user_code
    if user.eval_config:
        from google.protobuf import text_format

        return text_format.Parse(user.eval_config, tfma.EvalConfig())
    if user.run_fn:
        return user_eval_config(config)
    if config.dataset.task == "regression":
        return regression_eval_config(config)
    return classification_eval_config(config)


def classification_eval_config(config: PipelineConfig) -> tfma.EvalConfig:
    """The project's classifier. Blessed when its accuracy skill over the majority-class guess
    (the training split's most frequent class: index 0 of Transform's label vocabulary),
    (accuracy - guess) / (1 - guess), reaches min_classification_skill, its accuracy reaches
    accuracy_threshold when one is given, and its accuracy does not drop below the previous
    blessed model's; with --class_weight balanced, the balanced-accuracy skill takes the
    accuracy skill's place in both conditions. Beside them, for a reader: the guess's accuracy,
    log loss, AUC (one-vs-rest, micro-averaged over the classes) and the confusion matrix
    (TFMA's plot), from which the per-class precision and recall are read
    (pipeline.mlmd.evaluation)."""
    no_regression = tfma.GenericChangeThreshold(
        direction=tfma.MetricDirection.HIGHER_IS_BETTER, absolute={"value": -1e-10}
    )
    # --class_weight balanced asks for every class to count alike: the skill is then measured
    # in balanced accuracy (the mean per-class recall), where the guess scores 1 / classes, and
    # it is that which must not regress; the accuracy skill is still shown.
    balanced = config.training.class_weight == "balanced"
    accuracy = tfma.MetricConfig(
        class_name="SparseCategoricalAccuracy",
        threshold=tfma.MetricThreshold(
            value_threshold=tfma.GenericValueThreshold(
                lower_bound={"value": config.accuracy_threshold}
            )
            if config.accuracy_threshold is not None
            else None,
            # No regression against the previous blessed model (when there is one).
            change_threshold=None if balanced else no_regression,
        ),
    )
    skill_threshold = tfma.MetricThreshold(
        value_threshold=tfma.GenericValueThreshold(
            lower_bound={"value": config.min_classification_skill}
        ),
        change_threshold=no_regression if balanced else None,
    )
    skill = tfma.MetricConfig(
        class_name="AccuracySkill",
        module=metrics.__name__,
        threshold=None if balanced else skill_threshold,
    )
    extra = (
        [
            tfma.MetricConfig(
                class_name="BalancedAccuracySkill",
                module=metrics.__name__,
                threshold=skill_threshold,
            )
        ]
        if balanced
        else []
    )
    return tfma.EvalConfig(
        model_specs=[
            tfma.ModelSpec(
                signature_name=features.SERVING_SIGNATURE,
                model_type=GENERIC_SAVED_MODEL,
                # The label as Transform encodes it, from the model's transform_label signature.
                label_key=features.transformed_name(config.dataset.label_key),
                preprocessing_function_names=[features.TRANSFORM_LABEL_SIGNATURE],
                prediction_key=features.PROBABILITIES,
            )
        ],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[
            tfma.MetricsSpec(
                metrics=[
                    tfma.MetricConfig(class_name="ExampleCount"),
                    accuracy,
                    skill,
                    tfma.MetricConfig(class_name="MajorityClassAccuracy", module=metrics.__name__),
                    tfma.MetricConfig(class_name="SparseCategoricalCrossentropy"),
                    tfma.MetricConfig(class_name="MultiClassConfusionMatrixPlot"),
                    *extra,
                ]
            ),
            tfma.MetricsSpec(
                metrics=[tfma.MetricConfig(class_name="AUC")],
                aggregate=tfma.AggregationOptions(micro_average=True),
            ),
        ],
    )


def _schema_digest(dataset: DatasetConfig) -> str | None:
    if not dataset.schema_path:
        return None
    return dataset.schema_digest or fingerprints.file_digest(dataset.schema_path)


def create_pipeline(config: PipelineConfig) -> pipeline.Pipeline:
    """The components in order, each wired to the outputs it reads, with their fingerprints."""
    dataset = config.dataset
    example_gen = _example_gen(config)
    examples = example_gen.outputs["examples"]
    statistics_gen = StatisticsGen(examples=examples)
    schema_gen = _schema_gen(dataset, statistics_gen)
    schema = schema_gen.outputs["schema"]
    example_validator = StrictExampleValidator(
        statistics=statistics_gen.outputs["statistics"], schema=schema
    ).with_id("ExampleValidator")
    transform = _transform(config, examples, schema)
    # Transform reads the examples, not the validation result: order it explicitly so that an
    # anomaly stops the run before any preprocessing or training.
    transform.add_upstream_node(example_validator)
    tuner = _tuner(config, examples, transform, schema) if config.tuning.enabled else None
    trainer = _trainer(config, examples, transform, schema, tuner)
    # The newest model the Pusher pushed that is not this candidate: a container component, so
    # that open-source Kubeflow Pipelines (which runs no resolver) and a local run find the
    # baseline the same way (components.tfx_components.baseline says why).
    baseline_model = BaselineModel(
        candidate=trainer.outputs["model"], serving_model_dir=config.serving_model_dir
    ).with_id("BaselineModel")
    evaluator = BaselineEvaluator(
        examples=examples,
        model=trainer.outputs["model"],
        baseline_model=baseline_model.outputs[baseline_spec.BASELINE_KEY],
        eval_config=eval_config(config),
        example_splits=[EVAL_SPLIT],
    ).with_id("Evaluator")
    user = config.user_code
    if user.module_name and user.eval_modules:  # metrics of --eval_config in the user's folder
        _runs_user_module(evaluator, config, user_code.EVALUATOR)
    pusher = _pusher(config, trainer, evaluator)
    nodes = [
        example_gen,
        statistics_gen,
        schema_gen,
        example_validator,
        transform,
        *([tuner] if tuner is not None else []),
        trainer,
        baseline_model,
        evaluator,
        pusher,
    ]
    if config.inference is not None:
        nodes += _bulk_inferrer(config, trainer, evaluator)
    fingerprints.attach(
        nodes,
        schema_digest=_schema_digest(dataset),
        user_files={role: config.user_code.fingerprint_files(role) for role in user_code.ROLES}
        if config.user_code.module_name
        else None,
    )
    return pipeline.Pipeline(
        pipeline_name=config.pipeline_name,
        pipeline_root=config.pipeline_root,
        components=nodes,
        enable_cache=config.enable_cache,
        metadata_connection_config=config.metadata_connection_config(),
        beam_pipeline_args=config.beam.pipeline_args(),
    )


def _example_gen(config: PipelineConfig):
    """Image class folders or CSV files, hash-split into train and eval, in sharded files."""
    dataset = config.dataset
    train_buckets, eval_buckets = config.split_buckets
    split_buckets = {TRAIN_SPLIT: train_buckets, EVAL_SPLIT: eval_buckets}
    if dataset.is_images:
        return ImageExampleGen(
            input_base=dataset.data_root,
            split_buckets=split_buckets,
            num_shards=config.example_shards,
            max_rejected_fraction=config.max_rejected_fraction,
        ).with_id("ImageExampleGen")
    return ShardedCsvExampleGen(
        input_base=dataset.data_root,
        file_pattern=dataset.file_pattern,
        split_buckets=split_buckets,
        num_shards=config.example_shards,
        null_values=dataset.null_values,
        column_types=dict(dataset.column_types),
        max_rejected_fraction=config.max_rejected_fraction,
        delimiter=dataset.delimiter,
        excluded_columns=dataset.excluded_columns,
        label_key=dataset.label_key,
    ).with_id("CsvExampleGen")


def _bulk_inferrer(config: PipelineConfig, trainer, evaluator) -> list:
    """The rows to predict, read as the training rows are (same null tokens, the training
    types; rejected rows listed), one split; TFX's BulkInferrer on them with the candidate model
    and its blessing."""
    from pipeline import inference as inference_lib

    inference = config.inference
    assert inference is not None
    example_gen = ShardedCsvExampleGen(
        input_base=inference.data_root,
        file_pattern=inference.file_pattern,
        split_buckets={inference_lib.INFER_SPLIT: 1},
        num_shards=config.example_shards,
        null_values=config.dataset.null_values,
        column_types=dict(inference.column_types),
        max_rejected_fraction=config.max_rejected_fraction,
        delimiter=inference.delimiter,
        required_columns=inference.required_columns,
    ).with_id("InferCsvExampleGen")
    bulk_inferrer = CsvBulkInferrer(
        examples=example_gen.outputs["examples"],
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        split=inference_lib.INFER_SPLIT,
        columns=inference.columns,
        label_key=config.dataset.label_key,
        # The project's model has a signature without string outputs (components.ml.features
        # says why); a user's run_fn exports its own serving_default.
        signature=features.SERVING_SIGNATURE
        if config.user_code.run_fn
        else features.BULK_INFERENCE_SIGNATURE,
    ).with_id("BulkInferrer")
    return [example_gen, bulk_inferrer]


def _schema_gen(dataset: DatasetConfig, statistics_gen):
    """The curated schema when the dataset has one, else one inferred from the statistics of
    every split, with TFX's shape inference unless --no_infer_feature_shape (a TFX module's
    preprocessing_fn may expect dense tensors), every column ExampleGen wrote kept a feature
    (components.tfx_components.schema_gen says why)."""
    if dataset.schema_path:
        return ImportSchemaGen(schema_file=dataset.schema_path)
    return ColumnSchemaGen(
        statistics=statistics_gen.outputs["statistics"],
        infer_feature_shape=dataset.infer_feature_shape,
    ).with_id("SchemaGen")


def _runs_user_module(component, config: PipelineConfig, role: str) -> None:
    """The staged user module, which the component's executor imports before it runs."""
    module = config.user_code.module_for(role)
    assert module is not None, "pipeline.user_code.stage() ran before the pipeline was built"
    component.exec_properties[USER_MODULE_KEY] = module.to_json()


def materializes_transform(config: PipelineConfig) -> bool:
    """Images with the project's preprocessing: Transform analyzes (label vocabulary, resize
    target) and writes the transform graph only; its examples would be ExampleGen's encoded bytes
    again, copied through tf.Transform at a cost per image larger than ExampleGen's own, so the
    Trainer reads ExampleGen's shards and applies the transform graph in its tf.data pipeline,
    as TFMA and serving apply it. A user's preprocessing_fn is materialized, as TFX does, unless
    --no_transform_materialize (a user's run_fn then reads ExampleGen's examples and applies the
    transform graph itself, as TFX's Transform(materialize=False) pipelines do)."""
    if not config.transform_materialize:
        return False
    return not (config.dataset.is_images and not config.user_code.preprocessing_fn)


def _transform(config: PipelineConfig, examples, schema):
    dataset, user = config.dataset, config.user_code
    project_config = {
        features.LABEL_KEY_CONFIG: dataset.label_key,
        features.TASK_CONFIG: dataset.task,
        transform_executor.NUM_SHARDS_CONFIG_KEY: config.transform_shards,
        **(image_transform_config(dataset.image_size) if dataset.is_images else {}),
    }
    if dataset.timestamp_columns and not user.preprocessing_fn:
        # Only where it changes the result: other runs keep their cache keys.
        project_config[features.TIMESTAMP_COLUMNS_CONFIG] = list(dataset.timestamp_columns)
    clash = sorted(set(user.component_config()) & set(project_config))
    if clash:
        raise ConfigError(
            f"--custom_config: key(s) {clash} are the project's own Transform settings (set "
            "them by their flags); rename them"
        )
    default_fn = IMAGE_PREPROCESSING_FN if dataset.is_images else PREPROCESSING_FN
    transform = ShardedTransform(
        examples=examples,
        schema=schema,
        preprocessing_fn=user.preprocessing_fn or default_fn,
        materialize=materializes_transform(config),
        custom_config={**project_config, **user.component_config()},
    ).with_id("Transform")
    if user.from_module(user.preprocessing_fn):
        _runs_user_module(transform, config, user_code.TRANSFORM)
    return transform


def _tuner(config: PipelineConfig, examples, transform, schema):
    """TFX's Tuner over what the Trainer reads (pipeline.tuning): the module's tuner_fn, else the
    project's search over the model hook's settings."""
    user = config.user_code
    tuner = tuning.tuner_component(
        config,
        transform.outputs["transformed_examples"] if materializes_transform(config) else examples,
        transform,
        schema,
    )
    if user.from_module(user.tuner_fn or config.training.model_fn):
        _runs_user_module(tuner, config, user_code.TUNER)
    return tuner


def _trainer(config: PipelineConfig, examples, transform, schema, tuner=None):
    """Transform's examples, or for images with the project's preprocessing the raw examples
    (encoded bytes) with the transform graph, which the project's input pipeline applies
    (components.ml.inputs.make_dataset). The executor (components.tfx_components.trainer) runs
    the project's run_fn or the user's, in the Trainer's process or in every task of a cluster;
    custom_config carries the training settings and, under USER_CONFIG_KEY, the user's."""
    dataset, training, user = config.dataset, config.training, config.user_code
    custom_config = training.to_custom_config(dataset.label_key)
    if user.component_config():
        custom_config[USER_CONFIG_KEY] = user.component_config()
    trainer = Trainer(
        run_fn=user.run_fn or RUN_FN,
        examples=transform.outputs["transformed_examples"]
        if materializes_transform(config)
        else examples,
        transform_graph=transform.outputs["transform_graph"],
        schema=schema,
        train_args=trainer_pb2.TrainArgs(splits=[TRAIN_SPLIT], num_steps=training.train_steps),
        eval_args=trainer_pb2.EvalArgs(splits=[EVAL_SPLIT], num_steps=training.eval_steps),
        custom_config=custom_config,
        custom_executor_spec=trainer_executor.EXECUTOR_SPEC,
        # The Tuner's best point: fn_args.hyperparameters (TFX's wiring).
        hyperparameters=tuner.outputs["best_hyperparameters"] if tuner is not None else None,
    )
    if user.from_module(user.run_fn or training.model_fn):
        _runs_user_module(trainer, config, user_code.TRAINER)
    return trainer


def _pusher(config: PipelineConfig, trainer, evaluator):
    """Pushes a blessed model to the serving directory."""
    return Pusher(
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        push_destination=pusher_pb2.PushDestination(
            filesystem=pusher_pb2.PushDestination.Filesystem(
                base_directory=config.serving_model_dir
            )
        ),
    )
