"""Strategy factory: a name from the configuration -> a tf.distribute strategy.

The model is always built and compiled inside `strategy.scope()`, and the global batch is the
per-replica batch times `strategy.num_replicas_in_sync`.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf
from absl import logging

STRATEGY_NAMES = ("auto", "one_device", "mirrored")


class StrategyError(ValueError):
    pass


def local_devices(device_type: str) -> list[str]:
    return [device.name for device in tf.config.list_logical_devices(device_type)]


def make_strategy(name: str, devices: Sequence[str] | None = None) -> tf.distribute.Strategy:
    """one_device: the first GPU, else the CPU. mirrored: the given devices, else all local GPUs,
    else the CPU (one replica). auto: mirrored when there are several GPUs, else one_device."""
    if name not in STRATEGY_NAMES:
        raise StrategyError(f"unknown strategy {name!r}; expected one of {STRATEGY_NAMES}")
    gpus = local_devices("GPU")
    if name == "auto":
        name = "mirrored" if len(gpus) > 1 else "one_device"
    if name == "one_device":
        device = (devices or gpus or ["/cpu:0"])[0]
        strategy = tf.distribute.OneDeviceStrategy(device)
    else:
        chosen = list(devices or gpus or local_devices("CPU")[:1])
        strategy = tf.distribute.MirroredStrategy(
            devices=chosen,
            # NCCL only exists for GPUs; on CPU devices all-reduce by copying through the host.
            cross_device_ops=None if gpus and not devices else tf.distribute.ReductionToOneDevice(),
        )
    logging.info(
        "Strategy %s: %d replica(s) in sync",
        type(strategy).__name__,
        strategy.num_replicas_in_sync,
    )
    return strategy


def global_batch_size(per_replica_batch_size: int, strategy: tf.distribute.Strategy) -> int:
    return per_replica_batch_size * strategy.num_replicas_in_sync
