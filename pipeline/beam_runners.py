"""Beam runner flags shared by the local runner and the Kubeflow compiler, and their mapping to
BeamConfig.

    --beam_runner direct     this machine (--beam_mode, --beam_workers as before)
    --beam_runner flink      --flink_master HOST:PORT | --beam_job_endpoint HOST:PORT,
                             --beam_environment_type, --beam_environment_config, --beam_parallelism
    --beam_runner spark      --spark_master_url spark://HOST:PORT | --beam_job_endpoint HOST:PORT,
                             --beam_environment_type, --beam_environment_config
    --beam_runner dataflow   --dataflow_project, --dataflow_region, --dataflow_temp_location,
                             --dataflow_max_workers
    --sdk_container_image    the project's image (Dataflow workers, Flink/Spark DOCKER harness)

Nothing here contacts a cluster: the flags only become pipeline arguments, checked by
BeamConfig.validate() before anything starts.
"""

from __future__ import annotations

import argparse
import dataclasses

from pipeline.config import BEAM_RUNNERS, PORTABLE_ENVIRONMENTS, BeamConfig, ConfigError


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
        help="direct: this machine; flink, spark: portable runner on a cluster; dataflow",
    )
    group.add_argument("--flink_master", default="", help="Flink JobManager host:port")
    group.add_argument("--spark_master_url", default="", help="Spark master spark://host:port")
    group.add_argument(
        "--beam_job_endpoint",
        default="",
        help="host:port of a running Beam job server (Flink or Spark); replaces the master",
    )
    group.add_argument(
        "--beam_environment_type",
        choices=PORTABLE_ENVIRONMENTS,
        default="DOCKER",
        help="where Flink/Spark start the Python SDK harness (DOCKER: the project's image)",
    )
    group.add_argument(
        "--beam_environment_config",
        default="",
        help="DOCKER: image (default --sdk_container_image); EXTERNAL: worker pool host:port",
    )
    group.add_argument(
        "--beam_parallelism", type=int, default=0, help="Flink parallelism (0: the cluster's)"
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
    --beam_arg extras) made by the caller, kept as is for --beam_runner direct."""
    if args.beam_runner == "direct":
        return direct
    if args.beam_runner == "dataflow" and getattr(args, "beam_runner_local", False):
        raise ConfigError(
            "invalid configuration: beam.runner dataflow reads and writes gs:// only, and the "
            "local runner keeps data, outputs and MLMD on this machine; compile the pipeline "
            "for Kubeflow instead (kubeflow/run_kubeflow.py compile --beam_runner dataflow ...)"
        )
    return dataclasses.replace(
        direct,
        runner=args.beam_runner,
        flink_master=args.flink_master,
        spark_master_url=args.spark_master_url,
        job_endpoint=args.beam_job_endpoint,
        environment_type=args.beam_environment_type,
        environment_config=args.beam_environment_config,
        parallelism=args.beam_parallelism,
        project=args.dataflow_project,
        region=args.dataflow_region,
        temp_location=args.dataflow_temp_location,
        max_num_workers=args.dataflow_max_workers,
        sdk_container_image=args.sdk_container_image,
    )
