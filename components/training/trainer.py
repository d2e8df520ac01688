"""The TFX Trainer's run_fn (referenced by module path: components.training.trainer.run_fn).

It reads the Trainer contract back from custom_config (TrainingConfig.from_custom_config), builds
the TrainTask, and trains in the Trainer's process (single-worker strategies) or hands the task to
the launcher the settings name, which runs one process or pod per cluster task.
"""

from __future__ import annotations

import json
import logging as std_logging

import tensorflow as tf

from components import PROGRESS_LOGGER
from components.training import cluster, launchers, search_space
from components.training.loop import TrainTask, train
from components.training.settings import (
    USER_CONFIG_KEY,
    USER_MODULE_CONFIG_KEY,
    TrainingConfig,
)

progress_log = std_logging.getLogger(PROGRESS_LOGGER)


def run_fn(fn_args) -> None:
    """fn_args: tfx.components.FnArgs (train/eval files, transform output, custom_config, ...)."""
    custom_config = fn_args.custom_config or {}
    label_key, settings = TrainingConfig.from_custom_config(custom_config)
    user_config = custom_config.get(USER_CONFIG_KEY)
    if fn_args.hyperparameters:  # the Tuner's best point (--tune)
        values = fn_args.hyperparameters.get("values", {})
        settings = search_space.with_hyperparameters(settings, values)
        tuned = []
        if "width" in values or "depth" in values:
            tuned.append(f"hidden units {list(settings.hidden_units)}")
        if "learning_rate" in values:
            tuned.append(f"learning rate {settings.learning_rate:.4g}")
        if "dropout" in values:
            tuned.append(f"dropout {settings.dropout:g}")
        progress_log.info("training with the Tuner's best point: %s", ", ".join(tuned))
    task = TrainTask(
        train_files=_expand(fn_args.train_files),
        eval_files=_expand(fn_args.eval_files),
        transform_output=fn_args.transform_output,
        serving_model_dir=fn_args.serving_model_dir,
        model_run_dir=fn_args.model_run_dir,
        label_key=label_key,
        settings=settings.validate(),
        user_module=custom_config.get(USER_MODULE_CONFIG_KEY) or "",
        user_config=json.dumps(user_config) if user_config else "",
    )
    if task.runs_in_process():
        train(task)
        return
    launchers.create(settings).run(cluster.ClusterSpec.for_task(task), task)


def _expand(patterns) -> list[str]:
    """FnArgs gives file patterns (one per split); tasks get the sorted list of shard files."""
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    return sorted(path for pattern in patterns for path in tf.io.gfile.glob(pattern))
