"""Beam runner selection: flags -> BeamConfig -> pipeline args, read back through Beam's own
PipelineOptions (the parser the runners use), and the validation errors that name the field.
No engine is contacted."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
from apache_beam.options import pipeline_options as beam_options

from pipeline import beam_runners, local, run_local
from pipeline.config import BeamConfig, ConfigError

IMAGE = "registry.example.com/tfx-scaleout:1.0"


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    beam_runners.add_flags(parser, local=False)
    return parser.parse_args(argv)


def _config(argv: list[str], direct: BeamConfig | None = None) -> BeamConfig:
    config = beam_runners.beam_config(_parse(argv), direct or BeamConfig())
    config.validate()
    return config


def _options(config: BeamConfig) -> beam_options.PipelineOptions:
    return beam_options.PipelineOptions(config.pipeline_args())


def test_direct_keeps_the_local_choice_and_extra_args():
    direct = BeamConfig(mode="multi_processing", num_workers=3, extra_args=("--foo=1",))
    config = _config([], direct)
    assert config is direct
    assert config.pipeline_args() == [
        "--runner=DirectRunner",
        "--direct_running_mode=multi_processing",
        "--direct_num_workers=3",
        "--foo=1",
    ]
    assert BeamConfig().pipeline_args() == [
        "--runner=DirectRunner",
        "--direct_running_mode=in_memory",
        "--direct_num_workers=1",
    ]
    assert config.describe() == "multi_processing (3 worker(s))"


def test_flink_with_master_docker_environment_and_parallelism():
    config = _config(
        [
            "--beam_runner=flink",
            "--flink_master=flink-jobmanager:8081",
            "--beam_parallelism=8",
            f"--sdk_container_image={IMAGE}",
        ]
    )
    assert config.pipeline_args() == [
        "--runner=FlinkRunner",
        "--flink_master=flink-jobmanager:8081",
        "--parallelism=8",
        "--environment_type=DOCKER",
        f"--environment_config={IMAGE}",
    ]
    options = _options(config)
    assert options.view_as(beam_options.StandardOptions).runner == "FlinkRunner"
    flink = options.view_as(beam_options.FlinkRunnerOptions)
    assert (flink.flink_master, flink.parallelism) == ("flink-jobmanager:8081", 8)
    portable = options.view_as(beam_options.PortableOptions)
    assert (portable.environment_type, portable.environment_config) == ("DOCKER", IMAGE)
    assert config.describe() == "flink runner at flink-jobmanager:8081"


def test_flink_job_server_with_external_worker_pool():
    config = _config(
        [
            "--beam_runner=flink",
            "--beam_job_endpoint=flink-beam-jobserver:8099",
            "--beam_environment_type=EXTERNAL",
            "--beam_environment_config=localhost:50000",
        ]
    )
    portable = _options(config).view_as(beam_options.PortableOptions)
    assert portable.job_endpoint == "flink-beam-jobserver:8099"
    assert (portable.environment_type, portable.environment_config) == (
        "EXTERNAL",
        "localhost:50000",
    )
    assert "--flink_master" not in " ".join(config.pipeline_args())


def test_spark_portable_runner():
    config = _config(
        [
            "--beam_runner=spark",
            "--spark_master_url=spark://spark-master:7077",
            f"--sdk_container_image={IMAGE}",
        ]
    )
    assert config.pipeline_args() == [
        "--runner=SparkRunner",
        "--spark_master_url=spark://spark-master:7077",
        "--environment_type=DOCKER",
        f"--environment_config={IMAGE}",
    ]
    spark = _options(config).view_as(beam_options.SparkRunnerOptions)
    assert spark.spark_master_url == "spark://spark-master:7077"


def test_dataflow_args():
    config = _config(
        [
            "--beam_runner=dataflow",
            "--dataflow_project=my-project",
            "--dataflow_region=us-central1",
            "--dataflow_temp_location=gs://my-bucket/tmp",
            "--dataflow_max_workers=20",
            f"--sdk_container_image={IMAGE}",
        ]
    )
    options = _options(config)
    assert options.view_as(beam_options.StandardOptions).runner == "DataflowRunner"
    gcp = options.view_as(beam_options.GoogleCloudOptions)
    assert (gcp.project, gcp.region, gcp.temp_location) == (
        "my-project",
        "us-central1",
        "gs://my-bucket/tmp",
    )
    assert options.view_as(beam_options.WorkerOptions).sdk_container_image == IMAGE
    assert options.view_as(beam_options.WorkerOptions).max_num_workers == 20
    assert config.describe() == "dataflow runner at my-project/us-central1"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"runner": "samza"}, "beam.runner"),
        ({"mode": "threads"}, "beam.mode"),
        ({"num_workers": 0}, "beam.num_workers"),
        ({"runner": "flink", "sdk_container_image": IMAGE}, "beam.flink_master"),
        ({"runner": "spark", "sdk_container_image": IMAGE}, "beam.spark_master_url"),
        ({"runner": "flink", "flink_master": "m:8081"}, "beam.sdk_container_image"),
        (
            {"runner": "flink", "flink_master": "m:8081", "environment_type": "EXTERNAL"},
            "beam.environment_config",
        ),
        (
            {"runner": "flink", "flink_master": "m:8081", "environment_type": "K8S"},
            "beam.environment_type",
        ),
        (
            {
                "runner": "spark",
                "job_endpoint": "j:8099",
                "parallelism": 4,
                "sdk_container_image": IMAGE,
            },
            "beam.parallelism",
        ),
        ({"runner": "dataflow", "region": "r", "temp_location": "gs://b/t"}, "beam.project"),
        (
            {
                "runner": "dataflow",
                "project": "p",
                "region": "r",
                "temp_location": "/tmp/x",
                "sdk_container_image": IMAGE,
            },
            "beam.temp_location",
        ),
        (
            {"runner": "dataflow", "project": "p", "region": "r", "temp_location": "gs://b/t"},
            "beam.sdk_container_image",
        ),
    ],
)
def test_invalid_runner_settings_name_the_field(changes, field):
    with pytest.raises(ConfigError, match=f"invalid configuration: {field} "):
        dataclasses.replace(BeamConfig(), **changes).validate()


def test_run_local_flags_reach_the_config(capsys, tmp_path):
    code = run_local.main(["--beam_runner=flink", "--output_root", str(tmp_path / "out")])
    assert code == run_local.EXIT_BAD_INPUT
    assert "beam.flink_master or beam.job_endpoint must be set" in capsys.readouterr().err
    args = run_local.parse_args(
        ["--beam_runner=spark", "--beam_job_endpoint=js:8099", "--beam_environment_type=LOOPBACK"]
    )
    config = beam_runners.beam_config(args, local.choose_beam("auto", None, 10, []))
    assert config.pipeline_args() == [
        "--runner=SparkRunner",
        "--job_endpoint=js:8099",
        "--environment_type=LOOPBACK",
    ]


def test_run_local_refuses_dataflow_with_the_way_to_use_it(capsys, tmp_path):
    code = run_local.main(
        [
            "--beam_runner=dataflow",
            "--dataflow_project=p",
            "--dataflow_region=r",
            "--dataflow_temp_location=gs://b/t",
            f"--sdk_container_image={IMAGE}",
            "--output_root",
            str(tmp_path / "out"),
        ]
    )
    assert code == run_local.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "beam.runner dataflow reads and writes gs:// only" in err
    assert "kubeflow/run_kubeflow.py compile --beam_runner dataflow" in err
