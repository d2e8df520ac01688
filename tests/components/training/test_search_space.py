"""The built-in search space (components.training.search_space) and the --tune defaults from
the data (pipeline.tuning): checked overrides, a point applied to the training settings."""

from __future__ import annotations

import argparse
import math

import pytest

from components import ConfigError
from components.training import search_space
from components.training.settings import TrainingConfig
from pipeline import tuning
from pipeline.user_code import UserCode


def test_overrides_replace_a_setting_and_empty_leaves_it_out():
    space = search_space.space_for(
        {"tune_space": {"width": {"min": 8, "max": 64, "step": 8}, "dropout": []}}, images=False
    )
    assert space["width"] == {"min": 8, "max": 64, "step": 8}
    assert "dropout" not in space and space["depth"] == [1, 2, 3]
    assert search_space.describe(space) == (
        "width 8..64 (step 8), depth 1|2|3, learning_rate 0.001..0.03 (log)"
    )
    assert search_space.choices(space) is None
    assert search_space.choices({"width": [8, 16], "depth": [1, 2, 3]}) == 6


@pytest.mark.parametrize(
    "given, message",
    [
        ({"depth": [1.5]}, "depth: choices must be integers >= 1, got [1.5]"),
        ({"dropout": [1.0]}, "dropout: choices must be numbers in [0, 1), got [1.0]"),
        ({"learning_rate": {"min": 0.01}}, "a range has min, max"),
        ({"learning_rate": {"min": 0.1, "max": 0.2, "sampling": "cubic"}}, "linear or log"),
        ({"width": [8, 8]}, "repeated choices"),
        ({"width": "wide"}, "a list of choices or"),
        ({"width": [], "depth": [], "learning_rate": [], "dropout": []}, "nothing to tune"),
    ],
)
def test_bad_spaces_name_the_setting(given, message):
    with pytest.raises(ConfigError, match="--custom_config tune_space") as raised:
        search_space.space_for({"tune_space": given}, images=False)
    assert message in str(raised.value)


def test_images_tune_the_learning_rate_and_dropout_only():
    assert set(search_space.space_for({}, images=True)) == {"learning_rate", "dropout"}
    with pytest.raises(ConfigError, match="not a setting of the built-in image model"):
        search_space.space_for({"tune_space": {"width": [8]}}, images=True)


def test_a_point_becomes_settings():
    settings = TrainingConfig()
    tuned = search_space.with_hyperparameters(
        settings, {"width": 64, "depth": 3, "learning_rate": 0.002, "dropout": 0.1, "other": 1}
    )
    assert tuned.hidden_units == (64, 32, 16)
    assert (tuned.learning_rate, tuned.dropout) == (0.002, 0.1)
    assert search_space.with_hyperparameters(settings, {"depth": 1}).hidden_units == (32,)
    assert tuned.validate() is tuned


def _args(**given):
    values = {"tune": True, "max_trials": None, "tune_steps": None, "tune_workers": 1}
    return argparse.Namespace(**{**values, **given})


def test_defaults_come_from_the_rows():
    config = tuning.tune_config(
        _args(), rows=344, train_fraction=0.75, training=TrainingConfig(), images=False,
        user=UserCode(),
    )  # fmt: skip
    # 258 training rows at batch 32: 9 steps an epoch, 5 epochs; 3 trials below 1,000 rows.
    assert (config.steps, config.max_trials, config.eval_steps) == (45, 3, 3)
    assert "258 training rows" in config.trials_from
    bigger = tuning.tune_config(
        _args(), rows=40_000, train_fraction=0.75, training=TrainingConfig(), images=False,
        user=UserCode(),
    )  # fmt: skip
    batch = TrainingConfig().batch_size_for(30_000)
    assert batch == 256
    assert bigger.max_trials == tuning.MAX_TRIALS and bigger.steps == 5 * math.ceil(30_000 / 256)
    space = '{"tune_space": {"width": [8], "depth": [1], "learning_rate": [0.01, 0.001]}}'
    small_space = tuning.tune_config(
        _args(), rows=40_000, train_fraction=0.75, training=TrainingConfig(), images=False,
        user=UserCode(custom_config=space),
    )  # fmt: skip
    # width 1 x depth 1 x learning_rate 2 x the default dropout's 3 points.
    assert small_space.max_trials == 6 and "6 point(s) in the space" in small_space.trials_from


def test_flags_without_tune_and_a_run_fn_without_tuner_fn_are_refused():
    with pytest.raises(ConfigError, match="--tune_workers: for --tune"):
        tuning.tune_config(
            _args(tune=False, tune_workers=2), rows=1, train_fraction=0.5,
            training=TrainingConfig(), images=False, user=UserCode(),
        )  # fmt: skip
    with pytest.raises(ConfigError, match="define tuner_fn"):
        tuning.tune_config(
            _args(), rows=100, train_fraction=0.5, training=TrainingConfig(), images=False,
            user=UserCode(run_fn="mine.run_fn"),
        )  # fmt: skip
