"""Strategy factory: a name from the configuration -> a tf.distribute strategy.

  one_device              the first GPU, else the CPU
  mirrored                sync, all local GPUs or the listed devices (CPU: one replica, or the
                          logical CPU devices the process was started with)
  multi_worker_mirrored   sync, N worker processes, collective all-reduce (TF_CONFIG)
  parameter_server        async, N workers + M parameter servers + a coordinator (TF_CONFIG)
  auto                    mirrored over local GPUs when there are several, else one_device

The model is always built and compiled inside `strategy.scope()`, and the global batch is the
per-replica batch times `strategy.num_replicas_in_sync`.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf
from absl import logging

from components.training.settings import STRATEGIES as STRATEGY_NAMES


class StrategyError(ValueError):
    pass


def local_devices(device_type: str) -> list[str]:
    return [device.name for device in tf.config.list_logical_devices(device_type)]


def split_cpu(logical_devices: int) -> None:
    """Expose the CPU as N logical devices (mirrored on a CPU-only machine, tests). Must run
    before TensorFlow initializes its runtime, i.e. at the start of a fresh process."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(logical_devices)]
    )


def make_strategy(name: str, devices: Sequence[str] | None = None) -> tf.distribute.Strategy:
    if name not in STRATEGY_NAMES:
        raise StrategyError(f"unknown strategy {name!r}; expected one of {STRATEGY_NAMES}")
    if name == "multi_worker_mirrored":
        # Before anything lists devices: that initializes the runtime, and collective ops must
        # be configured first.
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=tf.distribute.experimental.CommunicationImplementation.AUTO
            )
        )
    elif name == "parameter_server":
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    else:
        gpus = local_devices("GPU")
        if name == "auto":
            name = "mirrored" if len(gpus) > 1 else "one_device"
        if name == "one_device":
            strategy = tf.distribute.OneDeviceStrategy((devices or gpus or ["/cpu:0"])[0])
        else:
            strategy = tf.distribute.MirroredStrategy(
                devices=list(devices or gpus or local_devices("CPU")),
                # NCCL exists only between GPUs; CPU replicas reduce through the host.
                cross_device_ops=(
                    None if gpus and not devices else tf.distribute.ReductionToOneDevice()
                ),
            )
    logging.info(
        "Strategy %s: %d replica(s) in sync",
        type(strategy).__name__,
        strategy.num_replicas_in_sync,
    )
    return strategy


def global_batch_size(per_replica_batch_size: int, strategy: tf.distribute.Strategy) -> int:
    return per_replica_batch_size * strategy.num_replicas_in_sync


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this task writes the exported model and summaries.

    Multi-worker mirrored: worker 0 (or an explicit chief); parameter server: the coordinator,
    which is the only task that runs the training function; single worker: always."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    return task_type == "chief" or (task_type == "worker" and task_id == 0)
