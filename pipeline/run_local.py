"""Run the pipeline locally: SQLite MLMD, local files, Beam DirectRunner, LocalDagRunner.

    python pipeline/run_local.py                          # penguins, end to end
    python pipeline/run_local.py --data DIR --label COL   # your own CSV files

Prints one line per component (start, finish, elapsed, cached) and a summary at the end; the
full TFX/Beam/TensorFlow log goes to <output_root>/<pipeline>/logs/.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import logging
import os
import shutil
import sys
import time
import warnings

# TensorFlow's C++ INFO and WARNING lines (per-epoch end-of-data notices under a distribution
# strategy among them) would drown the progress lines; TF_CPP_MIN_LOG_LEVEL=0 brings them back.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# google-api-core warns about Python 3.10 on import; TFX 1.16 requires 3.10.
warnings.filterwarnings("ignore", category=FutureWarning, module="google.api_core")

from pipeline import config as config_lib  # noqa: E402
from pipeline import datasets, flags, preflight  # noqa: E402
from pipeline.beam import runners as beam_runners  # noqa: E402
from pipeline.local import console  # noqa: E402
from pipeline.local import policy as local  # noqa: E402

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
    parser.add_argument("--no_cache", action="store_true", help="re-run every component")
    parser.add_argument(
        "--mysql_host",
        default=None,
        help="record MLMD in MySQL instead of SQLite (user and password from "
        "MLMD_MYSQL_USER / MLMD_MYSQL_PASSWORD)",
    )
    parser.add_argument("--mysql_port", type=int, default=3306)
    parser.add_argument("--mysql_database", default="metadb")
    args = parser.parse_args(argv)
    try:
        args.dataset_choice = flags.dataset_choice(args)
    except config_lib.ConfigError as error:
        parser.error(str(error))
    return args


def build_config(
    args: argparse.Namespace,
) -> tuple[config_lib.PipelineConfig, preflight.Facts]:
    choice = args.dataset_choice
    dataset = datasets.local_dataset(choice, args.output_root)
    facts: preflight.Facts
    if dataset.is_images:
        facts = preflight.check_images(dataset)
    else:
        facts = preflight.check_dataset(dataset, choice.delimiter, choice.keep_columns)
    dataset = preflight.resolved(dataset, facts)
    config = config_lib.local_config(
        dataset=dataset,
        output_root=args.output_root,
        pipeline_name=args.pipeline_name,
        training=flags.training_config(args, dataset),
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
        min_regression_skill=args.min_regression_skill,
        enable_cache=not args.no_cache,
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
    return config, facts


def configure_logging(log_dir: str) -> str:
    """Everything to a log file; the console gets progress lines and errors only."""
    os.makedirs(log_dir, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    log_path = os.path.join(log_dir, f"run-{stamp}.log")
    file_handler = logging.FileHandler(log_path)
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [file_handler]
    root.setLevel(logging.INFO)
    # TensorFlow's logger writes to stderr by itself when it is imported before this point.
    tf_logger = logging.getLogger("tensorflow")
    tf_logger.handlers.clear()
    tf_logger.propagate = True
    logging.captureWarnings(True)
    warnings.simplefilter("default")

    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.INFO)
    # absl would otherwise also write its records to stderr.
    absl_logging.get_absl_handler().setLevel(logging.CRITICAL + 1)
    return log_path


def print_summary(summary, config: config_lib.PipelineConfig, seconds: float, out) -> None:
    executed = sum(1 for c in summary.components if c["status"] == "executed")
    cached = sum(1 for c in summary.components if c["status"] == "cached")
    out.write(
        f"\nPipeline {config.pipeline_name} finished in {seconds:.1f}s: "
        f"{executed} component(s) executed, {cached} reused from cache.\n"
    )
    if summary.example_counts:
        counts = ", ".join(f"{name} {n}" for name, n in summary.example_counts.items())
        unit = "files" if config.dataset.is_images else "rows"
        out.write(f"  examples:      {counts}; {unit} rejected: {summary.rows_rejected}\n")
        if summary.rows_rejected and summary.rejected_listing:
            out.write(f"  rejected {unit}: listed in {summary.rejected_listing}\n")
    if summary.metrics:
        metrics = ", ".join(f"{k} {v:.4f}" for k, v in sorted(summary.metrics.items()))
        out.write(f"  eval metrics:  {metrics}\n")
    out.write(f"  blessed:       {describe_blessing(summary, config)}\n")
    out.write(f"  pushed model:  {summary.pushed_model or 'not pushed'}\n")
    out.write(f"  MLMD:          {summary.metadata_path}\n")


# Per task: the metric the Evaluator thresholds, how it reads, and the flag that sets its bound.
_BLESSING_CONDITION = {
    "classification": ("sparse_categorical_accuracy", "accuracy", "--accuracy_threshold"),
    "regression": (
        "mean_squared_error_skill",
        "skill over predicting the training mean (1 - MSE / MSE of the mean)",
        "--min_regression_skill",
    ),
}


def describe_blessing(summary, config: config_lib.PipelineConfig) -> str:
    """yes/NO and the conditions; for NO, each failed condition with its value and the flag (or
    check) that decides it."""
    metric, what, flag = _BLESSING_CONDITION[config.dataset.task]
    bound = (
        config.accuracy_threshold
        if config.dataset.task == "classification"
        else config.min_regression_skill
    )
    conditions = f"{what} >= {bound}, no regression against the previous blessed model"
    if summary.blessed is None:
        return f"unknown ({conditions})"
    if summary.blessed:
        return f"yes ({conditions})"
    reasons = []
    for failure in summary.blessing_failures:
        value = failure["value"]
        if failure["is_diff"]:
            reasons.append(
                f"{what} changed by {value:+.4f} against the previous blessed model (no "
                "regression allowed; the previous model stays the one served)"
            )
        elif failure["metric"] == metric:
            reasons.append(f"{what} {value:.4f} is below {bound} ({flag} sets it)")
        else:
            reasons.append(f"{failure['metric']}: {failure['message']}")
    return "NO: " + ("; ".join(reasons) or f"failed one of: {conditions}")


def export_inferred_schema(summary, config: config_lib.PipelineConfig, out) -> None:
    if config.dataset.schema_path or not summary.inferred_schema_uri:
        return
    target_dir = os.path.join(os.path.dirname(config.pipeline_root), "inferred_schema")
    os.makedirs(target_dir, exist_ok=True)
    target = os.path.join(target_dir, "schema.pbtxt")
    excluded = config.dataset.excluded_columns
    if excluded:
        write_schema_with_excluded(summary.inferred_schema_uri, excluded, target)
    else:
        shutil.copyfile(summary.inferred_schema_uri, target)
    curated = os.path.join(datasets.SCHEMAS_DIR, config.dataset.name, "schema.pbtxt")
    out.write(
        f"  inferred schema: {target}\n"
        f"    review it (types, domains, presence), then curate it into {curated};\n"
        f"    later runs import it and validate new data against it.\n"
    )
    if excluded:
        out.write(
            f"    columns left out are in it as `lifecycle_stage: DISABLED`: {', '.join(excluded)}"
            "\n    (delete that line to make one a feature)\n"
        )


def write_schema_with_excluded(source: str, excluded, target: str) -> None:
    """The inferred schema plus the excluded columns (which ExampleGen never wrote, so SchemaGen
    never saw) as DISABLED features: curated as it is, it reads the same CSV files."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = preflight.load_schema(source)
    for name in excluded:
        feature = schema.feature.add(name=name, type=schema_pb2.BYTES)
        feature.lifecycle_stage = schema_pb2.DISABLED
    with open(target, "w") as handle:
        handle.write(text_format.MessageToString(schema))


def describe_columns(dataset: config_lib.DatasetConfig, facts: preflight.Facts, out) -> None:
    """The task, the label and the columns left out of the features (and how to keep them)."""
    if not isinstance(facts, preflight.CsvFacts):
        return
    delimiter = {"\t": "tab", ",": "comma", ";": "semicolon", "|": "pipe"}.get(
        dataset.delimiter, repr(dataset.delimiter)
    )
    out.write(
        f"  task {dataset.task} (label {dataset.label_key!r}, --task); {delimiter}-separated\n"
    )
    identifiers = facts.identifiers
    names = {identifier.name for identifier in identifiers}
    others = [c for c in dataset.excluded_columns if c not in names]
    if others:
        out.write(f"  excluded columns: {', '.join(others)}\n")
    if identifiers:
        listed = ", ".join(f"{i.name} ({i.distinct} distinct in {i.values})" for i in identifiers)
        out.write(
            f"  left out as likely identifiers (near-unique text): {listed}; "
            f"--keep_columns {','.join(i.name for i in identifiers)} keeps them as features\n"
        )
    if facts.rows_without_label:
        out.write(
            f"  {facts.rows_without_label} row(s) have no label: ExampleGen rejects and "
            "lists them (--max_rejected_fraction)\n"
        )


def describe_training(training: config_lib.TrainingConfig) -> str:
    if training.strategy == "parameter_server":
        return f"parameter_server ({training.workers} worker(s), {training.ps} ps)"
    if training.strategy == "multi_worker_mirrored":
        return f"multi_worker_mirrored ({training.workers} worker(s))"
    if training.cpu_devices > 1:
        return f"{training.strategy} ({training.cpu_devices} logical CPU devices)"
    return training.strategy


def main(argv: list[str] | None = None) -> int:
    # TensorFlow's CUDA wheels log three plugin-registration "errors" per process on CPU-only
    # machines: dropped from the console (child processes included), nothing else is.
    with console.filtered_stderr():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    args = parse_args(argv)
    try:
        # Library import-time warnings would land on the console before the log file exists.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config, facts = build_config(args)
    except (preflight.InputError, config_lib.ConfigError) as error:
        sys.stderr.write(f"error: {error}\n")
        return EXIT_BAD_INPUT

    from pipeline.local import guard as run_guard

    try:  # writable output, one run at a time per store, recovery of a killed run's leftovers
        guard = run_guard.RunGuard.start(config, argv, sys.stdout)
    except run_guard.RunGuardError as error:
        sys.stderr.write(f"error: {error}\n")
        return EXIT_BAD_INPUT
    log_path = configure_logging(os.path.join(os.path.dirname(config.pipeline_root), "logs"))
    out = sys.stdout
    out.write(
        f"Pipeline {config.pipeline_name}: {facts.description}, "
        f"{facts.total_bytes / 1e6:.1f} MB from {config.dataset.data_root}\n"
        f"  Beam {config.beam.describe()}; "
        f"strategy {describe_training(config.training)}; log: {log_path}\n"
    )
    describe_columns(config.dataset, facts, out)
    out.flush()

    from pipeline import builder, fingerprints
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
        failed = reporter.last_component or "the pipeline"
        reason = run_guard.describe_failure(error)
        sys.stderr.write(f"\nerror: {failed} failed: {reason}\n  full log: {log_path}\n")
        return EXIT_PIPELINE_FAILED
    finally:
        progress.detach(reporter)
        guard.close()
    summary = run_summary.summarize(
        config.metadata_connection_config(), reporter.records, config.metadata_location
    )
    print_summary(summary, config, time.monotonic() - started, out)
    export_inferred_schema(summary, config, out)
    if summary.pushed_model:
        return 0
    out.write(
        f"  exit code {EXIT_NOT_PUSHED}: a model was trained but not pushed (not blessed); "
        "the serving directory is unchanged\n"
    )
    return EXIT_NOT_PUSHED


if __name__ == "__main__":
    console.exit_without_teardown(main())
