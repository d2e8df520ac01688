"""--tune: TFX's Tuner before the Trainer, as the runners configure it.

    --tune                 add the Tuner; the Trainer trains with its best hyperparameters
    --max_trials N         trials (default: from the data, see tune_config)
    --tune_steps N         training steps per trial (default: from the data)
    --tune_workers N       trials in parallel: KerasTuner's distributed mode, one oracle chief
                           and N tuner worker processes, or with --launcher tfjob|trainjob the
                           N + 1 workers of a job of the Trainer's launcher

With a module whose tuner_fn (TFX's contract) is found, that tuner runs (its own max_trials
unless --max_trials is given) and a user's run_fn gets the best point as fn_args.hyperparameters.
Otherwise the project's tuner_fn (components.training.tuning) searches the built-in model's
settings (components.training.search_space; --custom_config's tune_space overrides it) and the
project's run_fn trains with the best point's settings.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from components import ConfigError
from components.training import search_space
from components.training import settings as settings_lib

# Defaults from the data: trials and steps per trial grow with the rows up to these bounds.
MIN_TRIALS, MAX_TRIALS = 3, 10
TUNE_EPOCHS = 5
MAX_TUNE_STEPS = 1000
MAX_WORKER_RESTARTS = 2


@dataclasses.dataclass(frozen=True)
class TuneConfig:
    """What --tune and its flags decided (enabled False: no Tuner)."""

    enabled: bool = False
    # None: the user's tuner_fn's own (no --max_trials with a module's tuner_fn).
    max_trials: int | None = None
    steps: int = 1
    eval_steps: int = 1
    workers: int = 1
    # The built-in search space (empty with a user's tuner_fn).
    space: tuple[tuple[str, Any], ...] = ()
    # How the defaults were chosen, for the summary line ("" when given by flags).
    trials_from: str = ""
    steps_from: str = ""
    max_restarts: int = MAX_WORKER_RESTARTS

    def space_dict(self) -> dict[str, Any]:
        return dict(self.space)

    def validate(self) -> TuneConfig:
        if self.max_trials is not None and self.max_trials < 1:
            raise ConfigError(f"--max_trials must be >= 1, got {self.max_trials}")
        if self.steps < 1:
            raise ConfigError(f"--tune_steps must be >= 1, got {self.steps}")
        if self.workers < 1:
            raise ConfigError(f"--tune_workers must be >= 1, got {self.workers}")
        return self


def add_flags(parser) -> None:
    group = parser.add_argument_group("tuning (TFX's Tuner, KerasTuner)")
    group.add_argument(
        "--tune",
        action="store_true",
        help="add TFX's Tuner before the Trainer: your module's tuner_fn, else a search over "
        "the built-in model's width, depth, learning rate and dropout (--custom_config "
        "'{\"tune_space\": {...}}' overrides it); the Trainer trains with the best point",
    )
    group.add_argument(
        "--max_trials",
        type=int,
        default=None,
        help=f"trials of the search (default: from the training rows, {MIN_TRIALS} to "
        f"{MAX_TRIALS}, at most the space's points; your tuner_fn's own max_trials)",
    )
    group.add_argument(
        "--tune_steps",
        type=int,
        default=None,
        help=f"training steps per trial (default: {TUNE_EPOCHS} epochs of the training rows, at "
        f"most {MAX_TUNE_STEPS})",
    )
    group.add_argument(
        "--tune_workers",
        type=int,
        default=1,
        help="trials in parallel: KerasTuner's distributed mode with one oracle chief and N "
        "tuner worker processes (a killed worker is restarted; finished trials are kept); with "
        "--launcher tfjob|trainjob they are the N + 1 workers of a job on the cluster, worker 0 "
        "the oracle chief",
    )


def tune_config(args, *, rows: int | None, train_fraction: float, training, images: bool, user):
    """The TuneConfig the flags ask for, defaults from the rows (None: not counted here, then
    the defaults of a small table). user: pipeline.user_code.UserCode (its tuner_fn)."""
    given = [
        flag
        for flag, value in (
            ("--max_trials", args.max_trials),
            ("--tune_steps", args.tune_steps),
            ("--tune_workers", args.tune_workers != 1),
        )
        if value
    ]
    if not args.tune:
        if given:
            raise ConfigError(f"{', '.join(given)}: for --tune (add it, or drop them)")
        return TuneConfig()
    if user.run_fn and not user.tuner_fn:
        raise ConfigError(
            f"--tune with your run_fn {user.run_fn}: define tuner_fn(fn_args) -> TunerFnResult "
            "in --module_file (TFX's Tuner contract); the built-in search tunes the project's "
            "run_fn and model hook"
        )
    train_rows = max(1, round(rows * train_fraction)) if rows else None
    eval_rows = max(1, rows - train_rows) if rows and train_rows else None
    batch = training.batch_size_for(train_rows)
    space: dict[str, Any] = {}
    if not user.tuner_fn:
        space = search_space.space_for(user.custom_config_dict(), images)
    if args.tune_steps:
        steps, steps_from = args.tune_steps, ""
    else:
        per_epoch = math.ceil((train_rows or batch) / batch)
        steps = min(MAX_TUNE_STEPS, TUNE_EPOCHS * per_epoch)
        steps_from = (
            f"{TUNE_EPOCHS} epochs of {train_rows} training rows at batch {batch}"
            if train_rows
            else f"{TUNE_EPOCHS} epochs of one batch (rows not counted here)"
        )
    max_trials, trials_from = args.max_trials, ""
    if max_trials is None and not user.tuner_fn:
        by_rows = MIN_TRIALS + (train_rows or 0) // 1000
        points = search_space.choices(space)
        max_trials = max(1, min(MAX_TRIALS, by_rows, points or MAX_TRIALS))
        trials_from = f"{train_rows or 'uncounted'} training rows" + (
            f", {points} point(s) in the space" if points and points < by_rows else ""
        )
    return TuneConfig(
        enabled=True,
        max_trials=max_trials,
        steps=steps,
        eval_steps=max(1, math.ceil((eval_rows or batch) / batch)),
        workers=args.tune_workers,
        space=tuple(space.items()),
        trials_from=trials_from,
        steps_from=steps_from,
    ).validate()


def describe(tuning: TuneConfig, user, launcher_kind: str = "") -> list[str]:
    """Start-of-run lines: which tuner, the space, trials and steps and where they came from."""
    if not tuning.enabled:
        return []
    if user.tuner_fn:
        what = f"your tuner_fn {user.tuner_fn}"
    else:
        what = f"the built-in search over {search_space.describe(tuning.space_dict())}"
    trials = "its own max_trials" if tuning.max_trials is None else f"{tuning.max_trials} trial(s)"
    if tuning.trials_from:
        trials += f" (default, from {tuning.trials_from})"
    steps = f"{tuning.steps} step(s) each" + (
        f" (default, {tuning.steps_from})" if tuning.steps_from else ""
    )
    workers = (
        f"{tuning.workers} tuner workers and an oracle chief (KerasTuner distributed)"
        if tuning.workers > 1
        else "in the Tuner's process"
    )
    if tuning.workers > 1 and launcher_kind:
        workers += f", as the {tuning.workers + 1} workers of a {launcher_kind} job"
    return [f"Tuner: {what}", f"  {trials}, {steps}, {workers}"]


def parallel(args) -> bool:
    """--tune with --tune_workers > 1: the runners give the Trainer's launcher settings to the
    Tuner too (a TFJob or a TrainJob runs its workers)."""
    return bool(getattr(args, "tune", False)) and (getattr(args, "tune_workers", 1) or 1) > 1


def job_launcher(config):
    """The Trainer's TFJob or TrainJob settings when the Tuner's workers run as its job (None:
    processes beside the oracle chief, in the Tuner's process or pod)."""
    from components.training.settings import LocalLauncherConfig

    launcher = config.training.launcher
    if config.tuning.workers <= 1 or isinstance(launcher, LocalLauncherConfig):
        return None
    return launcher


def tuner_component(config, examples, transform, schema):
    """TFX's Tuner (the project's executor) over what the Trainer reads; its custom_config: the
    Trainer's (the project's tuner_fn trains the same model) or the user's, and TUNING_CONFIG_KEY
    (workers, --max_trials, restarts)."""
    from tfx.proto import trainer_pb2

    from components.tfx_components.tuner import executor
    from components.tfx_components.tuner.component import ProjectTuner
    from components.training import tuning as project_tuning
    from components.training.settings import USER_CONFIG_KEY

    tuning, user, dataset = config.tuning, config.user_code, config.dataset
    custom_config: dict[str, Any] = {}
    if user.tuner_fn:
        if user.custom_config:
            custom_config[USER_CONFIG_KEY] = user.custom_config_dict()
    else:
        custom_config = config.training.to_custom_config(dataset.label_key)
        if user.component_config():
            custom_config[USER_CONFIG_KEY] = user.component_config()
        custom_config[project_tuning.SPACE_CONFIG_KEY] = tuning.space_dict()
    custom_config[executor.TUNING_CONFIG_KEY] = {
        "max_trials": tuning.max_trials,
        "workers": tuning.workers,
        "max_restarts": tuning.max_restarts,
    }
    launcher = job_launcher(config)
    if launcher is not None:
        # The parallel workers as a job of the Trainer's launcher (components.training.tuner_job).
        custom_config[executor.TUNING_CONFIG_KEY]["launcher"] = settings_lib.to_dict(launcher)
    return ProjectTuner(
        examples=examples,
        schema=schema,
        transform_graph=transform.outputs["transform_graph"],
        tuner_fn=user.tuner_fn or project_tuning.PROJECT_TUNER_FN,
        train_args=trainer_pb2.TrainArgs(splits=["train"], num_steps=tuning.steps),
        eval_args=trainer_pb2.EvalArgs(splits=["eval"], num_steps=tuning.eval_steps),
        custom_config=custom_config,
    ).with_id("Tuner")
