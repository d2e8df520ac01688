"""Beam runner selection: flags -> BeamConfig -> pipeline args, read back through Beam's own
PipelineOptions (the parser the runners use), and the validation errors that name the field.
No engine is contacted."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile

import pytest
from apache_beam.options import pipeline_options as beam_options

from pipeline import run_local
from pipeline.beam import runners as beam_runners
from pipeline.config import BeamConfig, ConfigError
from pipeline.local import policy as local

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
        "--environment_cache_millis=60000",
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
        "--environment_cache_millis=60000",
        "--environment_type=DOCKER",
        f"--environment_config={IMAGE}",
    ]
    spark = _options(config).view_as(beam_options.SparkRunnerOptions)
    assert spark.spark_master_url == "spark://spark-master:7077"
    portable = _options(config).view_as(beam_options.PortableOptions)
    assert portable.environment_cache_millis == "60000"


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
        "--environment_cache_millis=60000",
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


# --- the portable runner ----------------------------------------------------------------------


def test_portable_embedded_job_service_with_external_worker_pool():
    config = _config(
        [
            "--beam_runner=portable",
            "--beam_job_endpoint=embed",
            "--beam_environment_type=EXTERNAL",
            "--beam_environment_config=localhost:50000",
        ]
    )
    assert config.pipeline_args() == [
        "--runner=PortableRunner",
        "--job_endpoint=embed",
        "--environment_type=EXTERNAL",
        "--environment_config=localhost:50000",
    ]
    options = _options(config)
    assert options.view_as(beam_options.StandardOptions).runner == "PortableRunner"
    portable = options.view_as(beam_options.PortableOptions)
    assert (portable.job_endpoint, portable.environment_type, portable.environment_config) == (
        "embed",
        "EXTERNAL",
        "localhost:50000",
    )
    assert config.describe() == "portable runner at embed (EXTERNAL localhost:50000)"


def test_portable_job_server_with_process_environment_and_staged_packages(tmp_path):
    wheel = tmp_path / "tfx_scaleout-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"stand-in: only the path is read")
    boot = '{"command": "/opt/beam-boot"}'
    config = _config(
        [
            "--beam_runner=portable",
            "--beam_job_endpoint=jobserver:8099",
            "--beam_environment_type=PROCESS",
            f"--beam_environment_config={boot}",
            f"--beam_extra_package={wheel}",
        ]
    )
    options = _options(config)
    portable = options.view_as(beam_options.PortableOptions)
    assert (portable.job_endpoint, portable.environment_type, portable.environment_config) == (
        "jobserver:8099",
        "PROCESS",
        boot,
    )
    assert options.view_as(beam_options.SetupOptions).extra_packages == [str(wheel)]


def test_extra_packages_reach_every_remote_runner_and_make_tfx_skip_its_sdist(tmp_path):
    from tfx.utils import dependency_utils

    wheel = str(tmp_path / "project-1.0-py3-none-any.whl")
    for changes in (
        {"runner": "portable", "job_endpoint": "embed", "environment_type": "LOOPBACK"},
        {"runner": "flink", "flink_master": "m:8081", "sdk_container_image": IMAGE},
        {
            "runner": "dataflow",
            "project": "p",
            "region": "r",
            "temp_location": "gs://b/t",
            "sdk_container_image": IMAGE,
        },
    ):
        config = dataclasses.replace(BeamConfig(), extra_packages=(wheel,), **changes)
        config.validate()
        args = config.pipeline_args()
        assert f"--extra_package={wheel}" in args
        # TFX adds its own sdist only when no dependency flag is set: here it leaves them as is.
        assert dependency_utils.make_beam_dependency_flags(args) == args


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        ({"runner": "portable"}, "beam.job_endpoint", "must be 'embed'"),
        ({"runner": "portable", "job_endpoint": "jobserver"}, "beam.job_endpoint", "HOST:PORT"),
        (
            {"runner": "portable", "job_endpoint": "embed", "environment_type": "EXTERNAL"},
            "beam.environment_config",
            "python -m pipeline.beam.boot worker_pool",
        ),
        (
            {
                "runner": "portable",
                "job_endpoint": "embed",
                "environment_type": "PROCESS",
                "environment_config": '{"command": "boot"}',
            },
            "beam.environment_type",
            "embedded job service has no PROCESS environment",
        ),
        (
            {"runner": "portable", "job_endpoint": "j:8099", "environment_type": "PROCESS"},
            "beam.environment_config",
            "JSON object naming the boot executable",
        ),
        (
            {"runner": "portable", "job_endpoint": "embed"},
            "beam.sdk_container_image",
            "DOCKER",
        ),
        (
            {
                "runner": "portable",
                "job_endpoint": "embed",
                "environment_type": "LOOPBACK",
                "parallelism": 2,
            },
            "beam.parallelism",
            "Flink option",
        ),
        (
            {
                "runner": "portable",
                "job_endpoint": "embed",
                "environment_type": "LOOPBACK",
                "extra_packages": ("/tmp/project.egg",),
            },
            "beam.extra_packages",
            ".whl .tar.gz",
        ),
        ({"extra_packages": ("/tmp/p.whl",)}, "beam.extra_packages", "DirectRunner"),
    ],
)
def test_invalid_portable_settings_name_the_field(changes, field, says):
    with pytest.raises(ConfigError, match=f"invalid configuration: {field} ") as raised:
        dataclasses.replace(BeamConfig(), **changes).validate()
    assert says in str(raised.value)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--beam_stage_project"], "DirectRunner runs in this environment"),
        (
            [
                "--beam_runner=portable",
                "--beam_job_endpoint=embed",
                "--beam_environment_type=LOOPBACK",
                "--beam_extra_package=/nonexistent/project.whl",
            ],
            "(--beam_extra_package) is not a file",
        ),
    ],
)
def test_run_local_staging_flags_are_checked(capsys, tmp_path, argv, says):
    code = run_local.main([*argv, "--output_root", str(tmp_path / "out")])
    assert code == run_local.EXIT_BAD_INPUT
    assert says in capsys.readouterr().err


def test_stage_project_is_refused_where_the_wheel_cannot_be_read():
    with pytest.raises(ConfigError, match="beam.extra_packages --beam_stage_project builds"):
        _config(
            [
                "--beam_runner=portable",
                "--beam_job_endpoint=js:8099",
                "--beam_environment_type=LOOPBACK",
                "--beam_stage_project",
            ]
        )


def test_stage_project_builds_the_wheel_of_this_tree(tmp_path):
    """The staged wheel holds the project's packages as they are in the tree, built from a copy
    (nothing written into the tree)."""
    import zipfile

    wheel = beam_runners.build_project_wheel(str(tmp_path))
    assert os.path.basename(wheel).startswith("tfx_scaleout-")
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ("pipeline/beam/boot.py", "pipeline/config.py", "components/__init__.py"):
        assert module in names
    assert not any("__pycache__" in name for name in names)
    args = run_local.parse_args(
        [
            "--beam_runner=portable",
            "--beam_job_endpoint=embed",
            "--beam_environment_type=EXTERNAL",
            "--beam_environment_config=localhost:50000",
            "--beam_stage_project",
        ]
    )
    config = beam_runners.beam_config(args, local.choose_beam("auto", None, 10, []))
    (staged,) = config.extra_packages
    assert staged.endswith(".whl") and os.path.isfile(staged)
    assert f"--extra_package={staged}" in config.pipeline_args()


def test_tfx_sdist_is_skipped_only_where_the_harness_runs_in_this_process(monkeypatch):
    """compat.no_tfx_sdist_for_direct_runner: LOOPBACK workers are threads of this process, so
    TFX's sdist would be built for nothing; EXTERNAL workers install what is staged."""
    from tfx.utils import dependency_utils

    from components import compat

    built = []

    def stock(args):
        built.append(list(args))
        return [*args, "--extra_package=tfx_ephemeral.tar.gz"]

    monkeypatch.setattr(dependency_utils, "make_beam_dependency_flags", stock)
    loopback = _config(
        ["--beam_runner=portable", "--beam_job_endpoint=embed", "--beam_environment_type=LOOPBACK"]
    ).pipeline_args()
    external = _config(
        [
            "--beam_runner=portable",
            "--beam_job_endpoint=embed",
            "--beam_environment_type=EXTERNAL",
            "--beam_environment_config=localhost:50000",
        ]
    ).pipeline_args()
    with compat.no_tfx_sdist_for_direct_runner():
        assert dependency_utils.make_beam_dependency_flags(loopback) == loopback
        assert dependency_utils.make_beam_dependency_flags(external)[-1] == (
            "--extra_package=tfx_ephemeral.tar.gz"
        )
    assert built == [external]


def test_flink_job_server_jar_and_version_reach_beams_options():
    config = _config(
        [
            "--beam_runner=flink",
            "--flink_master=127.0.0.1:8081",
            "--flink_version=1.16",
            "--beam_job_server_jar=/opt/beam/job-server.jar",
            "--beam_environment_type=EXTERNAL",
            "--beam_environment_config=localhost:50000",
        ]
    )
    flink = _options(config).view_as(beam_options.FlinkRunnerOptions)
    assert (flink.flink_version, flink.flink_job_server_jar) == (
        "1.16",
        "/opt/beam/job-server.jar",
    )
    assert (
        _options(config).view_as(beam_options.PortableOptions).environment_cache_millis == "60000"
    )


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        (
            {"runner": "flink", "job_endpoint": "j:8099", "job_server_jar": "/j.jar"},
            "beam.job_server_jar",
        ),
        (
            {"runner": "flink", "flink_master": "m:8081", "job_server_jar": "/j.zip"},
            "beam.job_server_jar",
        ),
        (
            {"runner": "spark", "spark_master_url": "spark://m:7077", "flink_version": "1.16"},
            "beam.flink_version",
        ),
        (
            {"runner": "flink", "flink_master": "m:8081", "flink_version": "1.19"},
            "beam.flink_version",
        ),
    ],
)
def test_invalid_job_server_settings_name_the_field(changes, field):
    config = dataclasses.replace(BeamConfig(sdk_container_image=IMAGE), **changes)
    with pytest.raises(ConfigError, match=f"invalid configuration: {field} "):
        config.validate()


def test_cluster_checks_fail_fast_naming_the_flag():
    from pipeline.beam import clusters, engines

    closed = f"127.0.0.1:{engines.free_port()}"
    flink = BeamConfig(runner="flink", flink_master=closed, sdk_container_image=IMAGE)
    with pytest.raises(ConfigError, match=r"cluster unreachable: beam.flink_master .* refused"):
        clusters.check(flink, timeout=2)
    spark = BeamConfig(runner="spark", spark_master_url=f"spark://{closed}")
    with pytest.raises(ConfigError, match=r"cluster unreachable: beam.spark_master_url"):
        clusters.check(spark, timeout=2)
    endpoint = BeamConfig(runner="portable", job_endpoint=closed)
    with pytest.raises(ConfigError, match=r"cluster unreachable: beam.job_endpoint"):
        clusters.check(endpoint, timeout=1)
    clusters.check(BeamConfig())  # the DirectRunner: nothing to reach


def test_the_job_servers_flink_version_comes_from_the_flag_the_jar_or_beam():
    from pipeline.beam import clusters

    jar = "/c/beam-runners-flink-1.16-job-server-2.56.0.jar"
    assert (
        clusters.job_server_flink(BeamConfig(flink_version="1.17", job_server_jar=jar))[0] == "1.17"
    )
    assert clusters.job_server_flink(BeamConfig(job_server_jar=jar)) == (
        "1.16",
        "--beam_job_server_jar",
    )
    assert clusters.job_server_flink(BeamConfig())[0] == "1.18"


def test_the_launcher_manifest_keeps_lines_of_72_bytes():
    from pipeline.beam import engine_fetch

    manifest = engine_fetch._manifest(
        "a.Main", [f"lib/dependency-number-{i}.jar" for i in range(40)]
    )
    lines = manifest.split(b"\r\n")
    assert all(len(line) <= 72 for line in lines)
    unfolded = manifest.replace(b"\r\n ", b"").decode()
    assert "Class-Path: lib/dependency-number-0.jar lib/dependency-number-1.jar" in unfolded
    assert "lib/dependency-number-39.jar\r\n" in unfolded
    assert "Main-Class: a.Main\r\n" in unfolded


def test_the_staged_wheels_path_is_the_same_for_the_same_code(tmp_path, monkeypatch):
    """TFX's cache keys on the Beam arguments, --extra_package=<wheel> among them: a rerun of
    unchanged code stages the same path (and reuses what finished), changed code a new one."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    first = beam_runners.build_project_wheel()
    assert first == beam_runners.build_project_wheel()
    assert first.startswith(str(tmp_path / "tfx-scaleout-wheels" / beam_runners.source_digest()))
    copy = tmp_path / "tree"
    copy.mkdir()
    for name in (*beam_runners.PROJECT_FILES, *beam_runners.PROJECT_PACKAGES):
        source = os.path.join(beam_runners.PROJECT_ROOT, name)
        (shutil.copytree if os.path.isdir(source) else shutil.copy2)(source, copy / name)
    assert beam_runners.source_digest(str(copy)) == beam_runners.source_digest()
    (copy / "pipeline" / "extra.py").write_text("x = 1\n")
    assert beam_runners.source_digest(str(copy)) != beam_runners.source_digest()
