"""Run the pipeline locally: SQLite MLMD, local files, Beam DirectRunner, LocalDagRunner.

    python pipeline/run_local.py                          # penguins, end to end
    python pipeline/run_local.py --data DIR --label COL   # your own CSV files

Prints one line per component (start, finish, elapsed, cached) and a summary at the end; the
full TFX/Beam/TensorFlow log goes to <output_root>/<pipeline>/logs/.
"""

from __future__ import annotations

import argparse
import dataclasses
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

from pipeline import beam_runners, datasets, flags, local, preflight  # noqa: E402
from pipeline import config as config_lib  # noqa: E402

EXIT_PIPELINE_FAILED = 1
EXIT_BAD_INPUT = 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
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
        help="auto: in_memory below 64 MB of CSV input and for images, else multi_processing",
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


def build_config(args: argparse.Namespace) -> tuple[config_lib.PipelineConfig, dict]:
    dataset = datasets.local_dataset(args.dataset_choice, args.output_root)
    facts = (preflight.check_images if dataset.is_images else preflight.check_dataset)(dataset)
    dataset = dataclasses.replace(dataset, column_types=tuple(facts["column_types"].items()))
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
                facts["total_bytes"],
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
    if summary.metrics:
        metrics = ", ".join(f"{k} {v:.4f}" for k, v in sorted(summary.metrics.items()))
        out.write(f"  eval metrics:  {metrics}\n")
    blessed = {True: "yes", False: "NO (below threshold or regressed)", None: "unknown"}
    out.write(
        f"  blessed:       {blessed[summary.blessed]} "
        f"(accuracy >= {config.accuracy_threshold}, no regression)\n"
    )
    out.write(f"  pushed model:  {summary.pushed_model or 'not pushed'}\n")
    out.write(f"  MLMD:          {summary.metadata_path}\n")


def export_inferred_schema(summary, config: config_lib.PipelineConfig, out) -> None:
    if config.dataset.schema_path or not summary.inferred_schema_uri:
        return
    target_dir = os.path.join(os.path.dirname(config.pipeline_root), "inferred_schema")
    os.makedirs(target_dir, exist_ok=True)
    target = os.path.join(target_dir, "schema.pbtxt")
    shutil.copyfile(summary.inferred_schema_uri, target)
    curated = os.path.join(datasets.SCHEMAS_DIR, config.dataset.name, "schema.pbtxt")
    out.write(
        f"  inferred schema: {target}\n"
        f"    review it (types, domains, presence), then curate it into {curated};\n"
        f"    later runs import it and validate new data against it.\n"
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
    args = parse_args(argv)
    try:
        # Library import-time warnings would land on the console before the log file exists.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config, facts = build_config(args)
    except (preflight.InputError, config_lib.ConfigError) as error:
        sys.stderr.write(f"error: {error}\n")
        return EXIT_BAD_INPUT

    from pipeline import run_guard

    try:  # writable output, one run at a time per store, recovery of a killed run's leftovers
        guard = run_guard.RunGuard.start(config, argv, sys.stdout)
    except run_guard.RunGuardError as error:
        sys.stderr.write(f"error: {error}\n")
        return EXIT_BAD_INPUT
    log_path = configure_logging(os.path.join(os.path.dirname(config.pipeline_root), "logs"))
    out = sys.stdout
    out.write(
        f"Pipeline {config.pipeline_name}: {facts['description']}, "
        f"{facts['total_bytes'] / 1e6:.1f} MB from {config.dataset.data_root}\n"
        f"  Beam {config.beam.describe()}; "
        f"strategy {describe_training(config.training)}; log: {log_path}\n"
    )
    out.flush()

    from pipeline import builder, fingerprints, progress, run_summary

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
    return 0


if __name__ == "__main__":
    sys.exit(main())
