"""Beam runner flags shared by the local runner and the Kubeflow compiler, and their mapping to
BeamConfig.

    --beam_runner direct     this machine (--beam_mode, --beam_workers as before)
    --beam_runner portable   Beam's PortableRunner: --beam_job_endpoint embed|HOST:PORT,
                             --beam_environment_type EXTERNAL|PROCESS|LOOPBACK|DOCKER,
                             --beam_environment_config (EXTERNAL: a worker pool's HOST:PORT, e.g.
                             `python -m pipeline.beam.boot worker_pool --service_port 50000`)
    --beam_runner flink      --flink_master HOST:PORT | --beam_job_endpoint HOST:PORT,
                             --beam_environment_type, --beam_environment_config, --beam_parallelism
    --beam_runner spark      --spark_master_url spark://HOST:PORT | --beam_job_endpoint HOST:PORT,
                             --beam_environment_type, --beam_environment_config
    --beam_runner dataflow   --dataflow_project, --dataflow_region, --dataflow_temp_location,
                             --dataflow_max_workers
    --sdk_container_image    the project's image (Dataflow workers, Flink/Spark DOCKER harness)
    --beam_stage_project     build this project's wheel and stage it for the SDK workers
    --beam_extra_package F   stage a wheel or sdist for the SDK workers (repeatable)

Nothing here contacts a cluster: the flags only become pipeline arguments, checked by
BeamConfig.validate() before anything starts. --beam_stage_project builds a wheel (about 2 s).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

from pipeline import PROJECT_ROOT
from pipeline.config import (
    BEAM_RUNNERS,
    FLINK_VERSIONS,
    PORTABLE_ENVIRONMENTS,
    BeamConfig,
    ConfigError,
)


def add_flags(parser: argparse.ArgumentParser, local: bool = True) -> None:
    """local: the runner keeps data, outputs and MLMD on this machine (run_local.py)."""
    parser.set_defaults(beam_runner_local=local)
    group = parser.add_argument_group(
        "Beam runner (ExampleGen, StatisticsGen, Transform, Evaluator)"
    )
    group.add_argument(
        "--beam_runner",
        choices=BEAM_RUNNERS,
        default="direct",
        help="direct: this machine; portable: Beam's PortableRunner (job server or embedded); "
        "flink, spark: portable runner on a cluster; dataflow",
    )
    group.add_argument("--flink_master", default="", help="Flink JobManager host:port")
    group.add_argument("--spark_master_url", default="", help="Spark master spark://host:port")
    group.add_argument(
        "--beam_job_endpoint",
        default="",
        help="host:port of a running Beam job server (Flink or Spark: replaces the master); "
        "portable: HOST:PORT or 'embed' (Beam's job service in this process)",
    )
    group.add_argument(
        "--beam_environment_type",
        choices=PORTABLE_ENVIRONMENTS,
        default="DOCKER",
        help="where portable/Flink/Spark start the Python SDK harness (DOCKER: the project's "
        "image; EXTERNAL: a worker pool)",
    )
    group.add_argument(
        "--beam_environment_config",
        default="",
        help="DOCKER: image (default --sdk_container_image); EXTERNAL: worker pool host:port; "
        'PROCESS: \'{"command": "BOOT"}\'',
    )
    group.add_argument(
        "--beam_stage_project",
        action="store_true",
        help="build this project's wheel and stage it, so that the SDK workers run this code "
        "(installed by their boot) rather than their image's copy",
    )
    group.add_argument(
        "--beam_extra_package",
        action="append",
        default=[],
        metavar="FILE",
        help="a wheel or sdist Beam stages for the SDK workers (repeatable)",
    )
    group.add_argument(
        "--beam_parallelism", type=int, default=0, help="Flink parallelism (0: the cluster's)"
    )
    group.add_argument(
        "--beam_job_server_jar",
        default="",
        metavar="FILE",
        help="flink, spark with a master: the Beam job server jar Beam starts (default: Beam "
        "downloads its own from Maven Central); `python -m pipeline.beam.engines fetch` "
        "caches one for Flink",
    )
    group.add_argument(
        "--flink_version",
        default="",
        choices=("", *FLINK_VERSIONS),
        help="the Flink version of the job server (Beam's default: 1.18); checked against "
        "the cluster's before the run",
    )
    group.add_argument("--dataflow_project", default="", help="Google Cloud project")
    group.add_argument("--dataflow_region", default="", help="Dataflow region, e.g. us-central1")
    group.add_argument(
        "--dataflow_temp_location", default="", help="gs:// directory for Dataflow's temp files"
    )
    group.add_argument(
        "--dataflow_max_workers", type=int, default=0, help="autoscaling limit (0: Dataflow's)"
    )
    group.add_argument(
        "--sdk_container_image",
        default="",
        help="the project's image: Dataflow workers and the Flink/Spark DOCKER environment",
    )


def beam_config(args: argparse.Namespace, direct: BeamConfig) -> BeamConfig:
    """The BeamConfig the flags select; `direct` is the DirectRunner choice (mode, workers,
    --beam_arg extras) made by the caller, kept as is for --beam_runner direct.
    --beam_stage_project builds the project's wheel once the rest is known to be valid."""
    local = getattr(args, "beam_runner_local", False)
    staged = bool(args.beam_extra_package or args.beam_stage_project)
    if args.beam_runner == "direct":
        if staged:
            raise ConfigError(
                "invalid configuration: beam.extra_packages (--beam_stage_project, "
                "--beam_extra_package) are staged for the SDK workers of portable, flink, spark "
                "and dataflow runs; the DirectRunner runs in this environment (choose "
                "--beam_runner portable, or drop the flags)"
            )
        return direct
    if args.beam_runner == "dataflow" and local:
        raise ConfigError(
            "invalid configuration: beam.runner dataflow reads and writes gs:// only, and the "
            "local runner keeps data, outputs and MLMD on this machine; compile the pipeline "
            "for Kubeflow instead (kubeflow/run_kubeflow.py compile --beam_runner dataflow ...)"
        )
    if args.beam_stage_project and not local:
        raise ConfigError(
            "invalid configuration: beam.extra_packages --beam_stage_project builds the wheel "
            "on this machine, where the compiled pipeline's components cannot read it; their "
            "image has the project installed (rebuild it), or pass --beam_extra_package with "
            "a path inside the image"
        )
    extra_packages = list(args.beam_extra_package)
    for package in extra_packages if local else ():
        if not os.path.isfile(package):
            raise ConfigError(
                f"invalid configuration: beam.extra_packages {package!r} (--beam_extra_package) "
                "is not a file; build the wheel or sdist first"
            )
    jar = args.beam_job_server_jar
    if jar and local and not os.path.isfile(jar):
        raise ConfigError(
            f"invalid configuration: beam.job_server_jar {jar!r} (--beam_job_server_jar) is not "
            "a file; `python -m pipeline.beam.engines fetch` caches Beam's Flink job server"
        )
    config = dataclasses.replace(
        direct,
        runner=args.beam_runner,
        flink_master=args.flink_master,
        spark_master_url=args.spark_master_url,
        job_endpoint=args.beam_job_endpoint,
        environment_type=args.beam_environment_type,
        environment_config=args.beam_environment_config,
        parallelism=args.beam_parallelism,
        job_server_jar=os.path.abspath(jar) if jar and local else jar,
        flink_version=args.flink_version,
        project=args.dataflow_project,
        region=args.dataflow_region,
        temp_location=args.dataflow_temp_location,
        max_num_workers=args.dataflow_max_workers,
        sdk_container_image=args.sdk_container_image,
        extra_packages=tuple(os.path.abspath(p) if local else p for p in extra_packages),
    )
    config.validate()
    if args.beam_stage_project:
        wheel = build_project_wheel()
        config = dataclasses.replace(config, extra_packages=(wheel, *config.extra_packages))
    return config


# What the wheel is built from: pyproject.toml's packages and the files it names.
PROJECT_FILES = ("pyproject.toml", "README.md")
PROJECT_PACKAGES = ("pipeline", "components", "kubeflow")


def source_digest(root: str = PROJECT_ROOT) -> str:
    """sha256 over the paths and contents of what the wheel is built from."""
    digest = hashlib.sha256()
    paths = [os.path.join(root, name) for name in PROJECT_FILES]
    for package in PROJECT_PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(root, package)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            paths += [os.path.join(folder, f) for f in sorted(files) if not f.endswith(".pyc")]
    for path in paths:
        digest.update(os.path.relpath(path, root).encode() + b"\0")
        with open(path, "rb") as handle:
            digest.update(handle.read() + b"\0")
    return digest.hexdigest()[:16]


def build_project_wheel(out_dir: str | None = None, root: str = PROJECT_ROOT) -> str:
    """Builds this project's wheel (pip wheel --no-deps, offline) from a copy of its sources, so
    that nothing is written into the tree (setuptools' build/ would keep deleted files and put
    them into later wheels); returns the wheel's path. out_dir None: a directory named by the
    sources' digest under the temporary directory, kept and reused: the wheel's path is part of
    the Beam components' arguments, which TFX's cache keys on, so the same code gives the same
    path (a rerun reuses what finished) and changed code a new one."""
    if out_dir is None:
        out_dir = os.path.join(tempfile.gettempdir(), "tfx-scaleout-wheels", source_digest(root))
        built = (
            [f for f in os.listdir(out_dir) if f.endswith(".whl")] if os.path.isdir(out_dir) else []
        )
        if len(built) == 1:
            return os.path.join(out_dir, built[0])
        partial = build_project_wheel(tempfile.mkdtemp(prefix="tfx-scaleout-wheel-"), root)
        os.makedirs(os.path.dirname(out_dir), exist_ok=True)
        try:
            os.rename(os.path.dirname(partial), out_dir)
        except OSError:  # another run built it meanwhile
            shutil.rmtree(os.path.dirname(partial), ignore_errors=True)
        return build_project_wheel(None, root)
    with tempfile.TemporaryDirectory(prefix="tfx-scaleout-src-") as source:
        for name in PROJECT_FILES:
            shutil.copy2(os.path.join(root, name), source)
        for name in PROJECT_PACKAGES:
            shutil.copytree(
                os.path.join(root, name),
                os.path.join(source, name),
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index"]
        command += ["--no-build-isolation", "--disable-pip-version-check", "-w", out_dir, source]
        result = subprocess.run(command, capture_output=True, text=True)
    wheels = [f for f in os.listdir(out_dir) if f.endswith(".whl")]
    if result.returncode != 0 or len(wheels) != 1:
        raise ConfigError(
            "invalid configuration: beam.extra_packages --beam_stage_project could not build "
            f"the project's wheel (pip exit {result.returncode}): {result.stderr[-2000:]}"
        )
    return os.path.join(out_dir, wheels[0])
