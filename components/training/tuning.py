"""The project's tuner_fn (TFX's Tuner contract: tuner_fn(fn_args) -> TunerFnResult) for the
built-in models and a user's model hook: a KerasTuner random search over the settings of
components.training.search_space, each trial the model hook's model trained fn_args.train_steps
steps on Transform's examples through the project's input pipeline and scored by its loss on
fn_args.eval_steps batches of the eval split (lower is better, for either task).

Its custom_config is the Trainer's (TrainingConfig.to_custom_config, the user's custom_config
under USER_CONFIG_KEY) plus SPACE_CONFIG_KEY: the space as pipeline.tuning checked it.
"""

from __future__ import annotations

import dataclasses
import json

import keras_tuner
import tensorflow as tf
import tensorflow_transform as tft
from tfx.components.tuner.component import TunerFnResult

from components import user_code
from components.ml import inputs, model
from components.training import search_space
from components.training.settings import USER_CONFIG_KEY, TrainingConfig

PROJECT_TUNER_FN = "components.training.tuning.tuner_fn"
# The Tuner's custom_config key holding the checked search space.
SPACE_CONFIG_KEY = "tune_space"
# Every trial is scored by this (Keras's validation loss) and the lowest wins.
OBJECTIVE = "val_loss"
PROJECT_NAME = "tuning"


def hyperparameters(space: dict) -> keras_tuner.HyperParameters:
    """The space in KerasTuner's terms: a list is a Choice, a range an Int or a Float."""
    hp = keras_tuner.HyperParameters()
    for name, values in space.items():
        if isinstance(values, list):
            hp.Choice(name, values, ordered=True)
            continue
        options = {"sampling": values.get("sampling", "linear")}
        if values.get("step"):
            options["step"] = values["step"]
        if name in search_space.INT_SETTINGS:
            hp.Int(name, values["min"], values["max"], **options)
        else:
            hp.Float(name, values["min"], values["max"], **options)
    return hp


class SettingsHyperModel(keras_tuner.HyperModel):
    """Builds the model hook's model (settings.model_fn: the project's build_model or a user's)
    with a point of the space applied to the training settings."""

    def __init__(self, settings: TrainingConfig, tf_transform_output, label_key, user_config):
        super().__init__()
        self.settings = settings
        self.tf_transform_output = tf_transform_output
        self.label_key = label_key
        self.user_config = user_config

    def build(self, hp):
        settings = search_space.with_hyperparameters(self.settings, hp.values)
        tf.keras.utils.set_random_seed(settings.seed)
        model_inputs = model.ModelInputs.of(
            self.tf_transform_output, self.label_key, settings, self.user_config
        )
        keras_model = user_code.load_function(settings.model_fn)(model_inputs)
        model.check_hook_model(keras_model, model_inputs, settings.model_fn)
        return keras_model


def _files(patterns) -> list[str]:
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    return sorted(path for pattern in patterns for path in tf.io.gfile.glob(pattern))


def tuner_fn(fn_args) -> TunerFnResult:
    custom_config = dict(fn_args.custom_config or {})
    space = custom_config.pop(SPACE_CONFIG_KEY)
    label_key, settings = TrainingConfig.from_custom_config(custom_config)
    settings = settings.validate()
    user_config = custom_config.get(USER_CONFIG_KEY) or {}
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_graph_path)
    batch = settings.batch_size_for(None)
    settings = dataclasses.replace(
        settings, steps_per_execution=settings.steps_per_execution_for(fn_args.train_steps)
    )
    train = inputs.make_dataset(
        _files(fn_args.train_files),
        tf_transform_output,
        label_key,
        batch,
        shuffle=settings.shuffle,
        repeat=True,
        seed=settings.seed,
    )
    evaluation = inputs.make_dataset(
        _files(fn_args.eval_files),
        tf_transform_output,
        label_key,
        batch,
        shuffle=False,
        repeat=True,
    )
    tuner = keras_tuner.RandomSearch(
        SettingsHyperModel(settings, tf_transform_output, label_key, user_config),
        objective=keras_tuner.Objective(OBJECTIVE, "min"),
        max_trials=search_space.choices(space) or 10,
        hyperparameters=hyperparameters(space),
        allow_new_entries=False,
        tune_new_entries=False,
        seed=settings.seed,
        directory=fn_args.working_dir,
        project_name=PROJECT_NAME,
    )
    return TunerFnResult(
        tuner=tuner,
        fit_kwargs={
            "x": train,
            "validation_data": evaluation,
            "steps_per_epoch": fn_args.train_steps,
            "validation_steps": fn_args.eval_steps,
            "epochs": 1,
            "verbose": 0,
        },
    )


def space_of(custom_config_json: str) -> dict:
    """The space a Tuner's custom_config holds (for the run's summary)."""
    return json.loads(custom_config_json or "{}").get(SPACE_CONFIG_KEY) or {}
