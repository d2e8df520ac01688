"""The flags both runners share (run_local.py, kubeflow/run_kubeflow.py compile), and the one set
of rules that turns the dataset flags into a choice of dataset.

Training flags are made from the fields of components.training.settings.TrainingConfig that carry
`flag` metadata: a new training setting there is a new flag of both runners, with nothing to add
here. A flag left out keeps the dataclass default (every training flag defaults to None, "not
given"), so defaults live in one place.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import typing
from typing import Any

from components import ConfigError
from components.training.settings import TrainingConfig
from pipeline import config as config_lib
from pipeline import datasets, preflight, tuning, user_code
from pipeline.beam import runners as beam_runners

_TRAINING_FIELDS = {f.name: f for f in dataclasses.fields(TrainingConfig) if "flag" in f.metadata}


def _flag_name(field: dataclasses.Field) -> str:
    return f"--{field.metadata['flag'] or field.name}"


def add_training_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per TrainingConfig field with flag metadata (help and default from there)."""
    group = parser.add_argument_group("training (Trainer)")
    hints = typing.get_type_hints(TrainingConfig)
    for name, field in _TRAINING_FIELDS.items():
        options: dict[str, Any] = dict(field.metadata["argparse"])
        shown = "" if field.default is None else f" (default: {field.default})"
        kind = hints[name]
        if kind is bool:
            options["action"] = "store_true"
        else:
            options["type"] = next(t for t in typing.get_args(kind) or (kind,) if t is not None)
            if "choices" not in options:
                options["metavar"] = _flag_name(field)[2:].upper()
        group.add_argument(
            _flag_name(field),
            dest=f"training_{name}",
            default=None,
            help=field.metadata["help"] + shown,
            **options,
        )


def training_config(args: argparse.Namespace, dataset: config_lib.DatasetConfig, **fixed):
    """The TrainingConfig the flags ask for; `fixed`: settings the runner decides itself (the
    launcher on Kubeflow)."""
    given = {
        name: getattr(args, f"training_{name}")
        for name in _TRAINING_FIELDS
        if getattr(args, f"training_{name}") is not None
    }
    given["learning_rate"] = config_lib.learning_rate_for(dataset, given.get("learning_rate"))
    return TrainingConfig(**given, **fixed)


def add_pipeline_flags(
    parser: argparse.ArgumentParser, *, example_shards: int, transform_shards: int
) -> None:
    """Pipeline shape flags; the shard defaults are the runner's (more shards on a cluster)."""
    defaults = config_lib.PipelineConfig.__dataclass_fields__
    parser.add_argument("--pipeline_name", default=None, help="default: <dataset>-pipeline")
    parser.add_argument(
        "--train_fraction",
        type=float,
        default=defaults["train_fraction"].default,
        help="fraction of rows in the train split (hash buckets)",
    )
    parser.add_argument(
        "--example_shards",
        type=int,
        default=example_shards,
        help="TFRecord shards per split written by ExampleGen (streamed: one file per shard "
        "in-process, one part file per worker bundle otherwise)",
    )
    parser.add_argument(
        "--transform_shards",
        type=int,
        default=None,
        help=f"TFRecord shards per split written by Transform (default {transform_shards}, "
        ">= workers for FILE sharding; images: 0, streaming: each Beam bundle writes its own "
        "file and memory stays flat)",
    )
    parser.add_argument(
        "--max_rejected_fraction",
        type=float,
        default=defaults["max_rejected_fraction"].default,
        help="fail when more than this fraction of CSV rows (or image files) is rejected",
    )
    parser.add_argument(
        "--min_classification_skill",
        type=float,
        default=defaults["min_classification_skill"].default,
        help="classification: Evaluator blesses the model only when its accuracy skill over "
        "always answering the training split's majority class, (accuracy - guess) / (1 - "
        "guess), is at least this",
    )
    parser.add_argument(
        "--accuracy_threshold",
        type=float,
        default=defaults["accuracy_threshold"].default,
        help="classification: also require at least this eval accuracy (default: no bound; "
        "a --run_fn of yours: 0.9)",
    )
    parser.add_argument(
        "--min_regression_skill",
        type=float,
        default=defaults["min_regression_skill"].default,
        help="regression: Evaluator blesses the model only when its eval mean squared error is "
        "at most (1 - this) x that of predicting the training mean",
    )
    parser.add_argument(
        "--no_transform_materialize",
        action="store_true",
        help="Transform writes the transform graph only (TFX's materialize=False) and the "
        "Trainer gets ExampleGen's raw examples: for a run_fn of yours that applies the "
        "transform graph itself (tft.TFTransformOutput.transform_features_layer)",
    )
    parser.add_argument(
        "--infer_data",
        default=None,
        metavar="DIR",
        help="CSV files of rows without labels (the training columns; the label may be there "
        "and is kept, not read): TFX's BulkInferrer predicts them when the model is blessed and "
        "writes predictions.csv (the input columns, then the predicted class and each class's "
        "probability, or the predicted value) in its InferenceResult; bad rows are rejected and "
        "listed as the training rows are",
    )
    parser.add_argument(
        "--beam_arg",
        action="append",
        default=[],
        help="extra Beam pipeline argument, repeatable (e.g. --beam_arg=--foo=1)",
    )


def add_dataset_flags(parser: argparse.ArgumentParser, *, data_flag: str, where: str) -> None:
    """--dataset, the data flag (--data locally, --data_root on Kubeflow; each accepts the
    other), --label, --images, --schema, --dataset_name, --image_size. `where`: how the runner
    reads data (a directory here, a URI the pods read)."""
    other = "--data_root" if data_flag == "--data" else "--data"
    parser.set_defaults(data_flag=data_flag)
    parser.add_argument(
        "--dataset",
        choices=(datasets.PENGUINS, datasets.DIGITS),
        default=datasets.PENGUINS,
        help="embedded dataset: penguins (CSV, ships in the palmerpenguins package) or digits "
        "(scikit-learn's handwritten digits written as JPEG class folders)",
    )
    parser.add_argument(
        data_flag, other, dest="data", default=None, help=f"CSV files under {where}"
    )
    parser.add_argument("--label", default=None, help=f"label column (with {data_flag})")
    parser.add_argument(
        "--images",
        default=None,
        help=f"image class folders under {where}: one sub-folder of JPEG/PNG files per class",
    )
    parser.add_argument(
        "--schema",
        default=None,
        help="curated schema.pbtxt (default: schemas/<dataset>/schema.pbtxt)",
    )
    parser.add_argument(
        "--dataset_name", default=None, help="default: the last name of the data or images path"
    )
    parser.add_argument(
        "--task",
        choices=("auto", *config_lib.TASKS),
        default="auto",
        help="auto: a string label, or integers with at most "
        f"{preflight.MAX_AUTO_CLASSES} distinct values, is classified; other numbers are regressed",
    )
    parser.add_argument(
        "--delimiter",
        default=None,
        help="CSV field separator (default: sniffed from the header: comma, semicolon, tab "
        "or pipe); a tab as '\\t'",
    )
    parser.add_argument(
        "--exclude_columns",
        type=_column_list,
        default=(),
        help="comma-separated CSV columns that are not features (ids, dates, leaks)",
    )
    parser.add_argument(
        "--keep_columns",
        type=_column_list,
        default=(),
        help="comma-separated columns to keep as features although they look like identifiers "
        "(near-unique strings, left out of an inferred schema)",
    )
    parser.add_argument(
        "--keep_text_columns",
        type=_column_list,
        default=(),
        help="comma-separated columns to keep as text (a vocabulary) although every value is a "
        "date or date and time (read as timestamps by an inferred schema: hour, day of week "
        "and a continuous time)",
    )
    parser.add_argument(
        "--image_size",
        type=int,
        default=datasets.DIGITS_IMAGE_SIZE,
        help="images are resized to this square in the transform graph",
    )


@dataclasses.dataclass(frozen=True)
class DatasetChoice:
    """What the dataset flags ask for: an embedded dataset or the user's CSV files or images."""

    kind: str  # datasets.PENGUINS, datasets.DIGITS, "csv" or "images"
    location: str | None = None
    label: str | None = None
    schema: str | None = None
    name: str | None = None
    image_size: int = datasets.DIGITS_IMAGE_SIZE
    # CSV data only: what to predict ("auto": from the label's values), the separator (None:
    # sniffed), columns that are not features, and likely identifiers to keep as features.
    task: str = "auto"
    delimiter: str | None = None
    exclude_columns: tuple[str, ...] = ()
    keep_columns: tuple[str, ...] = ()
    keep_text_columns: tuple[str, ...] = ()


def dataset_choice(args: argparse.Namespace) -> DatasetChoice:
    """The flags' rules, the same for every runner; ConfigError names the flags."""
    data_flag = args.data_flag
    if args.images is not None and args.data is not None:
        raise ConfigError(
            f"--images and {data_flag} are exclusive (image class folders or CSV files)"
        )
    if args.dataset != datasets.PENGUINS and (args.images is not None or args.data is not None):
        raise ConfigError(
            f"--dataset {args.dataset} is an embedded dataset; drop {data_flag}/--images"
        )
    if args.images is not None and args.label:
        raise ConfigError(
            "--label is for CSV data; with --images the class folder names are the labels"
        )
    if (args.data is None) != (args.label is None):
        raise ConfigError(
            f"{data_flag} and --label go together (the label column of your CSV files): "
            f"--label is required with {data_flag}"
        )
    common = {"schema": args.schema, "name": args.dataset_name, "image_size": args.image_size}
    images = args.images is not None or args.dataset == datasets.DIGITS
    csv_only = {
        "--task": args.task not in ("auto", "classification"),
        "--delimiter": args.delimiter is not None,
        "--exclude_columns": bool(args.exclude_columns),
        "--keep_columns": bool(args.keep_columns),
        "--keep_text_columns": bool(args.keep_text_columns),
    }
    given = [name for name, value in csv_only.items() if value]
    if images and given:
        raise ConfigError(f"{', '.join(given)}: for CSV data, not for image folders")
    delimiter = args.delimiter
    if delimiter is not None:
        delimiter = {"\\t": "\t", "tab": "\t"}.get(delimiter, delimiter)
        if len(delimiter) != 1:
            raise ConfigError(f"--delimiter must be one character, got {args.delimiter!r}")
    overlap = sorted(set(args.exclude_columns) & set(args.keep_columns))
    if overlap:
        raise ConfigError(f"column(s) {overlap} are in both --exclude_columns and --keep_columns")
    if args.label and args.label in args.exclude_columns:
        raise ConfigError(f"--exclude_columns names the label column {args.label!r} (--label)")
    csv = {
        "task": args.task,
        "delimiter": delimiter,
        "exclude_columns": tuple(args.exclude_columns),
        "keep_columns": tuple(args.keep_columns),
        "keep_text_columns": tuple(args.keep_text_columns),
    }
    if args.images is not None:
        return DatasetChoice("images", location=args.images, **common)
    if args.data is not None:
        return DatasetChoice("csv", location=args.data, label=args.label, **common, **csv)
    if args.dataset == datasets.DIGITS:
        return DatasetChoice(args.dataset, **common)
    return DatasetChoice(args.dataset, **common, **csv)


def _column_list(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors: `prog: error: MESSAGE (--help lists the flags)`, and for
    an unknown flag the closest known one, instead of the whole usage text."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}{self._suggestion(message)}\n")

    def _suggestion(self, message: str) -> str:
        if not message.startswith("unrecognized arguments:"):
            return " (--help lists the flags)"
        known = [o for action in self._actions for o in action.option_strings if o[:2] == "--"]
        hints = []
        for argument in message.split(":", 1)[1].split():
            flag_name = argument.split("=", 1)[0]
            if not flag_name.startswith("-"):
                continue
            close = difflib.get_close_matches("--" + flag_name.lstrip("-"), known, n=1, cutoff=0.6)
            if close:
                hints.append(f"{flag_name}: did you mean {close[0]}?")
        return ("; " + "; ".join(hints)) if hints else " (--help lists the flags)"


def add_common_flags(
    parser: argparse.ArgumentParser,
    *,
    data_flag: str,
    where: str,
    example_shards: int,
    transform_shards: int,
    local: bool,
) -> None:
    """Everything both runners take: dataset, pipeline shape, training, Beam runner."""
    add_dataset_flags(parser, data_flag=data_flag, where=where)
    add_pipeline_flags(parser, example_shards=example_shards, transform_shards=transform_shards)
    add_training_flags(parser)
    user_code.add_flags(parser)
    tuning.add_flags(parser)
    beam_runners.add_flags(parser, local=local)


def check_materialize(transform_materialize: bool, run_fn) -> None:
    """--no_transform_materialize only with a user's run_fn (local runs and the compile)."""
    if not transform_materialize and not run_fn:
        raise ConfigError(
            "--no_transform_materialize gives the Trainer ExampleGen's raw examples: it is for a "
            "run_fn of yours (--module_file or --run_fn) that applies the transform graph itself; "
            "the project's Trainer reads Transform's examples"
        )


def with_user_code(
    config: config_lib.PipelineConfig,
    args: argparse.Namespace,
    *,
    rows: int | None,
    cache_dir: str | None,
    schema_path: str | None = None,
) -> config_lib.PipelineConfig:
    """The config with the user's code checked (pipeline.user_code.check) and, for a user's
    run_fn, fn_args.train_steps and eval_steps: --train_steps / --eval_steps, else what --epochs
    and --batch_size make of the rows (`rows`: the data rows, None when unknown here).
    schema_path: the schema on this machine when the config's is where the pods read it."""
    dataset = config.dataset
    user = user_code.check(
        user_code.choice_from_args(args),
        label_key=dataset.label_key,
        task=dataset.task,
        schema_path=schema_path or dataset.schema_path,
        is_images=dataset.is_images,
        image_size=dataset.image_size,
        cache_dir=cache_dir,
    )
    check_materialize(config.transform_materialize, user.run_fn)
    if user.preprocessing_fn and dataset.timestamp_columns:
        # The user's preprocessing_fn gets the raw columns; only the project's parses timestamps.
        config = dataclasses.replace(
            config, dataset=dataclasses.replace(dataset, timestamp_columns=())
        )
    training = config.training
    if user.model_fn:
        training = dataclasses.replace(training, model_fn=user.model_fn)
    if user.run_fn:
        training = run_fn_steps(training, rows, config.train_fraction)
    tune = tuning.tune_config(
        args,
        rows=rows,
        train_fraction=config.train_fraction,
        training=training,
        images=dataset.is_images,
        user=user,
    )
    return dataclasses.replace(config, user_code=user, training=training, tuning=tune).validate()


def run_fn_steps(training: TrainingConfig, rows: int | None, train_fraction: float):
    """A user's run_fn trains fn_args.train_steps steps and validates fn_args.eval_steps (TFX's
    TrainArgs / EvalArgs): given, or epochs x train rows / batch size and eval rows / batch size."""
    import math

    if training.train_steps and training.eval_steps:
        return training
    if rows is None:
        raise ConfigError(
            "--train_steps and --eval_steps are needed with your run_fn (fn_args.train_steps, "
            "fn_args.eval_steps): the rows are not counted before the run here"
        )
    train_rows = max(1, round(rows * train_fraction))
    eval_rows = max(1, rows - train_rows)
    batch = training.batch_size_for(train_rows)
    return dataclasses.replace(
        training,
        train_steps=training.train_steps or max(1, math.ceil(training.epochs * train_rows / batch)),
        eval_steps=training.eval_steps or max(1, math.ceil(eval_rows / batch)),
    )
