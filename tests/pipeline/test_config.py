from __future__ import annotations

import dataclasses

import pytest

from pipeline import config as config_lib

DATASET = config_lib.DatasetConfig(name="d", data_root="/data", label_key="y")


def make(**overrides):
    return config_lib.local_config(dataset=DATASET, output_root="/out", **overrides)


def test_local_layout_and_defaults():
    config = make()
    assert config.pipeline_name == "d-pipeline"
    assert config.pipeline_root == "/out/d-pipeline/pipeline_root"
    assert config.metadata_path == "/out/d-pipeline/metadata.sqlite"
    assert config.serving_model_dir == "/out/d-pipeline/serving_model"
    assert config.split_buckets == (75, 25)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.example_shards = 9


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"train_fraction": 1.0}, "train_fraction"),
        ({"train_fraction": 0.001}, "train_fraction"),
        ({"example_shards": 0}, "example_shards"),
        ({"transform_shards": -1}, "transform_shards"),
        ({"max_rejected_fraction": 1.0}, "max_rejected_fraction"),
        ({"accuracy_threshold": 1.5}, "accuracy_threshold"),
        ({"min_classification_skill": 1.0}, "min_classification_skill"),
        ({"training": config_lib.TrainingConfig(class_weight="inverse")}, "training.class_weight"),
        ({"beam": config_lib.BeamConfig(mode="spark")}, "beam.mode"),
        ({"training": config_lib.TrainingConfig(strategy="magic")}, "training.strategy"),
        ({"training": config_lib.TrainingConfig(epochs=0)}, "training.epochs"),
        ({"training": config_lib.TrainingConfig(train_steps=0)}, "training.train_steps"),
        ({"training": config_lib.TrainingConfig(hidden_units=())}, "training.hidden_units"),
    ],
)
def test_invalid_values_name_the_field(overrides, field):
    with pytest.raises(config_lib.ConfigError, match=rf"invalid configuration: {field} "):
        make(**overrides)


def test_beam_args_per_mode():
    assert config_lib.BeamConfig().pipeline_args() == [
        "--runner=DirectRunner",
        "--direct_running_mode=in_memory",
        "--direct_num_workers=1",
    ]
    multi = config_lib.BeamConfig(mode="multi_processing", num_workers=2, extra_args=("--x=1",))
    assert multi.pipeline_args() == [
        "--runner=DirectRunner",
        "--direct_running_mode=multi_processing",
        "--direct_num_workers=2",
        "--x=1",
    ]


@pytest.mark.parametrize(
    "training, field, message",
    [
        (config_lib.TrainingConfig(strategy="mirrored", ps=1), "training.ps", "only valid"),
        (
            config_lib.TrainingConfig(strategy="parameter_server", workers=2, ps=0),
            "training.ps",
            "must be >= 1",
        ),
        (
            config_lib.TrainingConfig(strategy="mirrored", workers=2),
            "training.workers",
            "must be 1 for the single-worker strategy mirrored",
        ),
        (
            config_lib.TrainingConfig(strategy="multi_worker_mirrored", workers=0),
            "training.workers",
            "must be >= 1",
        ),
        (
            config_lib.TrainingConfig(
                strategy="multi_worker_mirrored", workers=5, shard_policy="file"
            ),
            "training.shard_policy",
            r"4 shard\(s\) for 5 worker\(s\)",
        ),
        (
            config_lib.TrainingConfig(mixed_precision="float8"),
            "training.mixed_precision",
            "must be one of",
        ),
    ],
)
def test_invalid_cluster_configurations(training, field, message):
    with pytest.raises(config_lib.ConfigError, match=rf"{field} .*{message}"):
        make(training=training)
