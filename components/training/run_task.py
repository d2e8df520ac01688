"""Entry point of one training task process: `python -m components.training.run_task --task FILE`.

Reads the TrainTask JSON (or a user run_fn's RunFnTask, or a replica's of the Tuner's job:
components.training.tuner_job) and this process's role from TF_CONFIG
(set by the launcher: the local one, or the Kubeflow Training Operator in a pod; in a Kubeflow
Trainer v2 JobSet pod it is computed here from the JobSet's indexes,
components.training.tf_config). Workers and parameter
servers of a parameter-server cluster serve until they are stopped; every other task runs the
training function.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from components import PROGRESS_LOGGER  # importing components selects Keras 2 first


def _configure_logging() -> None:
    """Plain lines on stdout for the launcher to relay; progress lines keep a known prefix."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    logging.getLogger(PROGRESS_LOGGER).setLevel(logging.INFO)


# A worker whose peer died (a deleted or evicted pod) exits with this code. The Training
# Operator's restartPolicy ExitCode treats 1-127 as permanent (the job fails) and 128-255 as
# retryable (the pod is recreated); the same process that lost its peer would otherwise exit 1.
PEER_LOST_EXIT_CODE = 138


def _peer_lost(error: BaseException) -> bool:
    """TensorFlow's errors when a collective's or a parameter server's peer is gone."""
    import tensorflow as tf

    lost = (
        tf.errors.UnavailableError,
        tf.errors.DeadlineExceededError,
        tf.errors.AbortedError,
        tf.errors.CancelledError,
    )
    current: BaseException | None = error
    while current is not None:
        if isinstance(current, lost):
            return True
        current = current.__cause__ or current.__context__
    return False


def run_server(cluster: dict, task_type: str, index: int, num_workers: int) -> None:
    import tensorflow as tf

    # A parameter-server cluster deadlocks on a 2-core machine when its servers have fewer
    # inter-op threads than workers + 1 (each worker holds one while it waits on the others).
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=num_workers + 1)
    server = tf.distribute.Server(
        tf.train.ClusterSpec(cluster),
        job_name=task_type,
        task_index=index,
        protocol="grpc",
        config=config,
        start=True,
    )
    logging.getLogger("tfx_scaleout.cluster").info(
        "%s %d serving at %s", task_type, index, server.target
    )
    server.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", required=True, help="TrainTask JSON file")
    args = parser.parse_args(argv)
    _configure_logging()

    from components.training import loop as training
    from components.training import strategies, tuner_job
    from components.training.tuner_job import TunerJobTask

    task = training.load_task(args.task)
    if task.settings.cpu_devices > 1:
        strategies.split_cpu(task.settings.cpu_devices)
    if not os.environ.get("TF_CONFIG"):
        # A Kubeflow Trainer v2 (JobSet) pod: TF_CONFIG from its indexes and host names.
        from components.training import cluster
        from components.training import tf_config as jobset_tf_config

        computed = jobset_tf_config.from_environ(os.environ, cluster.ClusterSpec.for_task(task))
        if computed:
            os.environ["TF_CONFIG"] = computed  # before TensorFlow's resolver reads it
            logging.getLogger("tfx_scaleout.cluster").info(
                "TF_CONFIG from the JobSet: %s", computed
            )
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    role = tf_config.get("task", {})
    if task.settings.strategy == "parameter_server" and role.get("type") in ("worker", "ps"):
        run_server(tf_config["cluster"], role["type"], int(role["index"]), task.settings.workers)
        return 0
    try:
        if isinstance(task, training.TrainTask):
            result = training.train(task)
        elif isinstance(task, TunerJobTask):  # KerasTuner's chief or a tuner worker
            result = tuner_job.run(task)
        else:  # a user's run_fn (components.training.run_fn_task)
            from components.training import run_fn_task

            result = run_fn_task.run(task)
    except Exception as error:  # noqa: BLE001 (only a peer's loss is turned into a retry)
        if not task.settings.needs_cluster or not _peer_lost(error):
            raise
        logging.getLogger("tfx_scaleout.cluster").error(
            "a peer of this cluster is gone (%s: %s): exiting with %d, a retryable code, so "
            "that the operator restarts this task; it resumes from the last backup",
            type(error).__name__,
            str(error).splitlines()[0][:300] if str(error) else "",
            PEER_LOST_EXIT_CODE,
        )
        return PEER_LOST_EXIT_CODE
    logging.getLogger("tfx_scaleout.cluster").info("task result: %s", json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
