"""Run the pipeline locally: SQLite MLMD, local files, Beam DirectRunner, LocalDagRunner.

    python pipeline/run_local.py                          # penguins, end to end
    python pipeline/run_local.py --data DIR --label COL   # your own CSV files

Prints one line per component (start, finish, elapsed, cached) and a summary at the end; the
full TFX/Beam/TensorFlow log goes to <output_root>/<pipeline>/logs/.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import os
import sys
import time
import warnings
from typing import TYPE_CHECKING, TextIO

# TensorFlow's C++ INFO and WARNING lines (per-epoch end-of-data notices under a distribution
# strategy among them) would drown the progress lines; TF_CPP_MIN_LOG_LEVEL=0 brings them back.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# google-api-core warns about Python 3.10 on import; TFX 1.16 requires 3.10.
warnings.filterwarnings("ignore", category=FutureWarning, module="google.api_core")

from pipeline import config as config_lib  # noqa: E402
from pipeline import (  # noqa: E402
    datasets,
    entrypoint,
    flags,
    inference,
    launcher_flags,
    preflight,
    tuning,
    user_code,
)
from pipeline.beam import clusters as beam_clusters  # noqa: E402
from pipeline.beam import runners as beam_runners  # noqa: E402
from pipeline.local import console, report  # noqa: E402
from pipeline.local import policy as local  # noqa: E402

if TYPE_CHECKING:
    from components.training.settings import TrainingConfig
    from pipeline.local.guard import RunGuard

EXIT_PIPELINE_FAILED = 1
EXIT_BAD_INPUT = 2
# The pipeline ran and trained a model, but the Evaluator did not bless it: nothing was pushed.
EXIT_NOT_PUSHED = 3


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = flags.ArgumentParser(
        prog="run_local.py",
        description="Run the TFX pipeline locally (penguins by default, or --data/--label).",
    )
    parser.add_argument(
        "--output_root",
        default=config_lib.default_output_root(),
        help="where pipeline outputs, MLMD and the serving model go (digits are written "
        "under <output_root>/data/digits)",
    )
    flags.add_common_flags(
        parser,
        data_flag="--data",
        where="a local directory",
        example_shards=config_lib.PipelineConfig.example_shards,
        transform_shards=config_lib.PipelineConfig.transform_shards,
        local=True,
    )
    parser.add_argument(
        "--beam_mode",
        choices=("auto", *config_lib.BEAM_MODES),
        default="auto",
        help="auto: in_memory for images, below 64 MB of CSV input and on fewer than 4 cores, "
        "else multi_processing",
    )
    parser.add_argument(
        "--beam_workers",
        type=int,
        default=None,
        help="worker processes for multi_processing (default: CPU count)",
    )
    parser.add_argument(
        "--no_infer_feature_shape",
        action="store_true",
        help="an inferred schema (no curated one) gives every feature a variable length "
        "(SparseTensors in preprocessing_fn) instead of TFX's default: a fixed shape for "
        "features present once in every row of every split (dense tensors)",
    )
    parser.add_argument("--no_cache", action="store_true", help="re-run every component")
    parser.add_argument(
        "--mysql_host",
        default=None,
        help="record MLMD in MySQL instead of SQLite (user and password from "
        "MLMD_MYSQL_USER / MLMD_MYSQL_PASSWORD)",
    )
    parser.add_argument("--mysql_port", type=int, default=3306)
    parser.add_argument("--mysql_database", default="metadb")
    launcher_flags.add_cluster_flags(parser)
    args = parser.parse_args(argv)
    try:
        args.dataset_choice = flags.dataset_choice(args)
    except config_lib.ConfigError as error:
        parser.error(str(error))
    return args


def _training(args: argparse.Namespace, dataset) -> TrainingConfig:
    """The training flags; a multi-worker strategy with --launcher tfjob/trainjob trains on the
    cluster of --kubeconfig, and --tune_workers N runs the Tuner's workers there."""
    training = flags.training_config(args, dataset)
    if args.launcher == "local" or not (training.needs_cluster or tuning.parallel(args)):
        return training
    launcher = launcher_flags.cluster_job(args, training, args.output_root)
    return dataclasses.replace(training, launcher=launcher)


def build_config(
    args: argparse.Namespace,
) -> tuple[config_lib.PipelineConfig, preflight.Facts]:
    choice = args.dataset_choice
    dataset = datasets.local_dataset(choice, args.output_root)
    facts: preflight.Facts
    if dataset.is_images:
        facts = preflight.check_images(dataset)
    else:
        facts = preflight.check_dataset(
            dataset,
            choice.delimiter,
            choice.keep_columns,
            choice.keep_text_columns,
            features=args.infer_data is not None,
        )
        preflight.check_rows_without_label(facts, args.max_rejected_fraction)
    dataset = dataclasses.replace(
        preflight.resolved(dataset, facts), infer_feature_shape=not args.no_infer_feature_shape
    )
    rows_to_predict = (
        inference.check_infer_data(args.infer_data, dataset, facts)
        if args.infer_data is not None
        else None
    )
    config = config_lib.local_config(
        dataset=dataset,
        output_root=args.output_root,
        pipeline_name=args.pipeline_name,
        training=_training(args, dataset),
        beam=beam_runners.beam_config(
            args,
            local.choose_beam(
                args.beam_mode,
                args.beam_workers,
                facts.total_bytes,
                args.beam_arg,
                images=dataset.is_images,
            ),
        ),
        train_fraction=args.train_fraction,
        example_shards=args.example_shards,
        transform_shards=config_lib.transform_shards_for(
            dataset, args.transform_shards, config_lib.PipelineConfig.transform_shards
        ),
        max_rejected_fraction=args.max_rejected_fraction,
        accuracy_threshold=args.accuracy_threshold,
        min_classification_skill=args.min_classification_skill,
        min_regression_skill=args.min_regression_skill,
        enable_cache=not args.no_cache,
        transform_materialize=not args.no_transform_materialize,
        inference=rows_to_predict,
        mysql=config_lib.MySQLConfig(
            host=args.mysql_host,
            port=args.mysql_port,
            database=args.mysql_database,
            user=os.environ.get("MLMD_MYSQL_USER", "root"),
            password=os.environ.get("MLMD_MYSQL_PASSWORD", ""),
        )
        if args.mysql_host
        else None,
    )
    rows = (
        len(facts.files)
        if isinstance(facts, preflight.ImageFolderFacts)
        else facts.rows - facts.rows_without_label
    )
    config = flags.with_user_code(
        config, args, rows=rows, cache_dir=os.path.dirname(config.pipeline_root)
    )
    return config, facts


def main(argv: list[str] | None = None) -> int:
    # TensorFlow's CUDA wheels log three plugin-registration "errors" per process on CPU-only
    # machines: dropped from the console (child processes included), nothing else is.
    with entrypoint.filtered_stderr():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    args = parse_args(argv)
    try:
        # Library import-time warnings would land on the console before the log file exists.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config, facts = build_config(args)
        # Flink, Spark, a job server: there and of the right version, or one error now.
        beam_clusters.check(config.beam)
    except (preflight.InputError, config_lib.ConfigError, user_code.UserCodeError) as error:
        sys.stderr.write(f"error: {error}\n")
        return EXIT_BAD_INPUT

    from pipeline.local import guard as run_guard

    try:  # writable output, one run at a time per store, recovery of a killed run's leftovers
        guard = run_guard.RunGuard.start(config, argv, sys.stdout)
    except run_guard.RunGuardError as error:
        sys.stderr.write(f"error: {error}\n")
        return EXIT_BAD_INPUT
    # The user's module, under the pipeline root where every component imports it from.
    config = dataclasses.replace(
        config, user_code=user_code.stage(config.user_code, config.pipeline_root)
    )
    log_dir = os.path.join(os.path.dirname(config.pipeline_root), "logs")
    log_path = console.configure_logging(log_dir)
    report.print_start(config, facts, log_path, sys.stdout)
    return _run(config, guard, log_path, sys.stdout)


def _run(config: config_lib.PipelineConfig, guard: RunGuard, log_path: str, out: TextIO) -> int:
    """Runs the pipeline with progress lines, then summarises it; the exit code."""
    from pipeline import builder, fingerprints
    from pipeline.local import guard as run_guard
    from pipeline.local import progress
    from pipeline.local import summary as run_summary

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tfx_pipeline = builder.create_pipeline(config)
    # Why a component reran when an earlier run had finished it: code, schema or stack changes
    # from the recorded fingerprints, else its inputs or parameters.
    previous = run_summary.previous_fingerprints(config) if config.enable_cache else {}
    current = fingerprints.of_components(tfx_pipeline.components)
    reporter = progress.attach(
        len(tfx_pipeline.components),
        out,
        why_executed=functools.partial(fingerprints.rerun_reason, previous, current),
    )
    guard.watch(reporter)  # Ctrl-C: what finished, how to resume, exit 130
    started = time.monotonic()
    try:
        local.run_dag(tfx_pipeline)
    except Exception as error:  # report any component failure in one clear block
        logging.exception("pipeline failed")
        reason = run_guard.describe_failure(error)
        report.print_failure(reporter.last_component, reason, log_path, sys.stderr)
        return EXIT_PIPELINE_FAILED
    finally:
        progress.detach(reporter)
        guard.close()
    summary = run_summary.summarize(
        config.metadata_connection_config(), reporter.records, config.metadata_location
    )
    report.print_summary(summary, config, time.monotonic() - started, out)
    report.export_inferred_schema(summary, config, out)
    if summary.pushed_model:
        return 0
    report.print_not_pushed(EXIT_NOT_PUSHED, out)
    return EXIT_NOT_PUSHED


if __name__ == "__main__":
    entrypoint.exit_without_teardown(main())
