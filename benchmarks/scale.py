"""ExampleGen + Transform at scale vs. a hand-written single-process baseline, linearity, memory.

    python -m benchmarks.scale [--quick] [--work_dir DIR] [--rows 1000000] [--workers N]

For each size: writes synthetic CSV files (pipeline.datasets.synthetic), then runs, each in a fresh
process with peak resident memory summed over its process tree (Beam's worker processes included):
- ours: a LocalDagRunner pipeline of the project's ShardedCsvExampleGen -> ImportSchemaGen ->
  ShardedTransform (the same components and preprocessing_fn as the full pipeline), in the
  DirectRunner mode `run_local.py --beam_mode auto` picks for the input;
- the reference: benchmarks.scale_baseline (pyarrow + numpy + one tf.train.Example per row).
Rows/s counts the end-to-end time of each process (start-up included), side by side in one run;
linearity (10M vs 1M rows, ours only) is reported per wall second and per CPU second.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time

from benchmarks import common

PIPELINE_NAME = "scale-bench"
TARGET_VS_BASELINE = 1.0
TARGET_LINEARITY = 0.9
TARGET_INPUT_VS_MODEL = 2.0
QUICK_ROWS = 200_000
FULL_ROWS = 1_000_000
LINEARITY_ROWS = 10_000_000
MEMORY_ROWS = 100_000
FILES_PER_MILLION = 16


def synth_data(work_dir: str, rows: int) -> str:
    from pipeline.datasets import synthetic as synth_data

    data_dir = os.path.join(work_dir, f"synth-{rows}")
    if not os.path.isdir(data_dir):
        files = max(4, round(FILES_PER_MILLION * rows / 1_000_000))
        synth_data.write_synth(data_dir, rows, files, seed=0)
    return data_dir


# --- the pipeline, run in a child process ---------------------------------------------------


def build_pipeline(data_dir: str, root: str, beam_args: list[str], shards: int):
    """ExampleGen -> ImportSchemaGen -> Transform: the full pipeline's first data steps."""
    from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen

    from components.ml import features
    from components.tfx_components.example_gen.component import ShardedCsvExampleGen
    from components.tfx_components.example_gen.csv_reader import schema_column_types
    from components.tfx_components.transform import executor as transform_executor
    from components.tfx_components.transform.component import ShardedTransform
    from pipeline import builder, datasets, preflight

    dataset = datasets.synth(data_dir)
    column_types = schema_column_types(preflight.load_schema(dataset.schema_path))
    example_gen = ShardedCsvExampleGen(
        input_base=data_dir,
        split_buckets={builder.TRAIN_SPLIT: 75, builder.EVAL_SPLIT: 25},
        num_shards=shards,
        column_types=column_types,
    ).with_id("CsvExampleGen")
    schema_gen = ImportSchemaGen(schema_file=dataset.schema_path)
    transform = ShardedTransform(
        examples=example_gen.outputs["examples"],
        schema=schema_gen.outputs["schema"],
        preprocessing_fn=builder.PREPROCESSING_FN,
        custom_config={
            features.LABEL_KEY_CONFIG: dataset.label_key,
            transform_executor.NUM_SHARDS_CONFIG_KEY: shards,
        },
    ).with_id("Transform")
    return common.data_pipeline(
        PIPELINE_NAME, root, [example_gen, schema_gen, transform], beam_args
    )


def component_results(root: str) -> dict:
    """Seconds per component and the transformed examples / graph URIs, from MLMD."""
    db, executions, seconds = common.component_executions(root)
    outputs = db.outputs_by_type(executions["Transform"].id)
    return {
        "seconds": seconds,
        "transformed_examples": outputs["Examples"][0].uri,
        "transform_graph": outputs["TransformGraph"][0].uri,
    }


def pipeline_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--shards", type=int, default=4)
    args = parser.parse_args(argv)
    from pipeline.local import policy as local

    beam_args = common.direct_beam_args(args.workers)
    local.run_dag(build_pipeline(args.data, args.root, beam_args, args.shards))
    print(json.dumps(component_results(args.root)))
    return 0


# --- the measurements -----------------------------------------------------------------------


def auto_workers(data_dir: str) -> int:
    """Beam worker processes `run_local.py --beam_mode auto` uses for this input (1: in_memory)."""
    size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(data_dir, "*.csv")))
    return common.auto_workers(size)


def mode_name(workers: int) -> str:
    return f"multi_processing x{workers}" if workers > 1 else "in_memory"


def measure_pipeline(data_dir: str, work_dir: str, workers: int, tag: str) -> dict:
    root = common.fresh_output(os.path.join(work_dir, f"ours-{tag}"))
    command = [common.PYTHON, "-m", "benchmarks.scale", "_pipeline", "--data", data_dir]
    command += ["--root", root, "--workers", str(workers)]
    result = common.run_measured(
        command, env=common.child_env(), log_path=os.path.join(work_dir, f"ours-{tag}.log")
    )
    details = json.loads(result.stdout.strip().splitlines()[-1])
    return {
        **details,
        "wall_s": result.seconds,
        "cpu_s": result.cpu_seconds,
        "peak_rss": result.peak_rss_bytes,
    }


def measure_baseline(data_dir: str, work_dir: str, tag: str) -> dict:
    command = [common.PYTHON, "-m", "benchmarks.scale_baseline", "--data", data_dir]
    command += ["--out", common.fresh_output(os.path.join(work_dir, f"baseline-{tag}"))]
    result = common.run_measured(
        command, env=common.child_env(), log_path=os.path.join(work_dir, f"baseline-{tag}.log")
    )
    return {"wall_s": result.seconds, "peak_rss": result.peak_rss_bytes}


def input_pipeline_rate(transformed_examples: str, transform_graph: str, batch: int):
    """Examples/s of the Trainer's input pipeline alone vs. of the model fed one cached batch,
    at the Trainer's batch size."""
    import tensorflow as tf
    import tensorflow_transform as tft

    from components.ml import inputs, model
    from pipeline.datasets import synthetic as synth_data

    output = tft.TFTransformOutput(transform_graph)
    files = sorted(glob.glob(os.path.join(transformed_examples, "Split-train", "*.gz")))
    dataset = inputs.make_dataset(
        files, output, synth_data.SYNTH_LABEL_KEY, batch, shuffle=True, repeat=True, seed=1
    )
    steps = 400
    iterator = iter(dataset)
    for _ in range(20):
        next(iterator)
    started = time.monotonic()
    for _ in range(steps):
        next(iterator)
    input_rate = steps * batch / (time.monotonic() - started)
    tf.keras.utils.set_random_seed(1)
    keras_model = model.build_keras_model(output, synth_data.SYNTH_LABEL_KEY)
    synthetic = dataset.take(1).cache().repeat()
    keras_model.fit(synthetic, steps_per_epoch=20, epochs=1, verbose=0)
    started = time.monotonic()
    keras_model.fit(synthetic, steps_per_epoch=steps, epochs=1, verbose=0)
    model_rate = steps * batch / (time.monotonic() - started)
    return input_rate, model_rate


def repeated_ratio(rows: int, repeats: int, work_dir: str, workers=None) -> common.Row:
    """Ours and the reference measured alternately `repeats` times at one size: the median ratio
    of rows/s, with every ratio in the note (the machine is shared: the spread is the error)."""
    import statistics

    data_dir = synth_data(work_dir, rows)
    size_workers = workers or auto_workers(data_dir)
    ratios, ours_rates, reference_rates = [], [], []
    for attempt in range(repeats):
        print(f"  scale: {rows:,} rows: repeat {attempt + 1}/{repeats} ...", flush=True)
        ours = measure_pipeline(data_dir, work_dir, size_workers, f"{rows}-r{attempt}")
        reference = measure_baseline(data_dir, work_dir, f"{rows}-r{attempt}")
        ours_rates.append(rows / ours["wall_s"])
        reference_rates.append(rows / reference["wall_s"])
        ratios.append(ours_rates[-1] / reference_rates[-1])
        print(f"  scale: ratio {ratios[-1]:.2f} ({ours['seconds']})", flush=True)
    middle = sorted(range(repeats), key=lambda i: ratios[i])[repeats // 2]
    return common.Row(
        f"ExampleGen+Transform rows/s, {rows:,} rows, median of {repeats}",
        ours_rates[middle],
        reference_rates[middle],
        "rows/s",
        TARGET_VS_BASELINE,
        note=f"ratios {', '.join(f'{r:.2f}' for r in ratios)} (min {min(ratios):.2f}, max "
        f"{max(ratios):.2f}, stdev {statistics.pstdev(ratios):.2f}); ours DirectRunner "
        f"{mode_name(size_workers)}, each pair back to back",
    )


def run(quick: bool, work_dir: str | None = None, rows: int | None = None, workers=None):
    """Rows of the table. workers None: as `run_local.py --beam_mode auto` chooses per size; at
    the main size (full run) the other mode is measured too."""
    rows = rows or (QUICK_ROWS if quick else FULL_ROWS)
    cores = os.cpu_count() or 1
    work_dir = work_dir or tempfile.mkdtemp(prefix="scale-bench-")
    sizes = [rows] if quick else [MEMORY_ROWS, rows, LINEARITY_ROWS]
    measured, other_mode = {}, None
    for size in sizes:
        data_dir = synth_data(work_dir, size)
        size_workers = workers or auto_workers(data_dir)
        print(f"  scale: {size:,} rows: pipeline ({mode_name(size_workers)}) ...", flush=True)
        ours = measure_pipeline(data_dir, work_dir, size_workers, f"{size}-{size_workers}")
        ours["workers"] = size_workers
        reference = None
        if size != LINEARITY_ROWS:
            # At the linearity size ours is compared with ours at the main size only (the
            # baseline would hold 10M rows in memory: about 8 GB and 20 minutes).
            print(f"  scale: {size:,} rows: baseline ...", flush=True)
            reference = measure_baseline(data_dir, work_dir, str(size))
        measured[size] = (ours, reference)
        print(
            f"  scale: {size:,} rows: ours {ours['wall_s']:.0f} s, {ours['cpu_s']:.0f} CPU-s "
            f"(components {ours['seconds']})"
            + (f", baseline {reference['wall_s']:.0f} s" if reference else ""),
            flush=True,
        )
        if size == rows and not quick and workers is None and cores > 1:
            other = cores if size_workers == 1 else 1
            print(f"  scale: {size:,} rows: pipeline ({mode_name(other)}) ...", flush=True)
            other_mode = measure_pipeline(data_dir, work_dir, other, f"{size}-{other}")
            other_mode["workers"] = other
    ours, reference = measured[rows]
    rows_out = [
        common.Row(
            f"ExampleGen+Transform rows/s, {rows:,} rows",
            rows / ours["wall_s"],
            rows / reference["wall_s"],
            "rows/s",
            TARGET_VS_BASELINE,
            note=f"ours: LocalDagRunner, DirectRunner {mode_name(ours['workers'])} (what "
            "--beam_mode auto picks), whole process; reference: single-process "
            "pyarrow/numpy/tf.train.Example script; component seconds "
            + json.dumps(ours["seconds"]),
        )
    ]
    if other_mode:
        rows_out.append(
            common.Row(
                f"  same, DirectRunner {mode_name(other_mode['workers'])}",
                rows / other_mode["wall_s"],
                rows / reference["wall_s"],
                "rows/s",
                note=f"peak RSS {other_mode['peak_rss'] / 2**20:,.0f} MiB; component seconds "
                + json.dumps(other_mode["seconds"]),
            )
        )
    for size in sizes:
        ours_size, reference_size = measured[size]
        rows_out.append(
            common.Row(
                f"peak RSS, {size:,} rows ({mode_name(ours_size['workers'])})",
                ours_size["peak_rss"] / 2**20,
                reference_size["peak_rss"] / 2**20 if reference_size else None,
                "MiB",
            )
        )
    if LINEARITY_ROWS in measured:
        big, _ = measured[LINEARITY_ROWS]
        # Same Beam mode at both sizes (auto may pick different ones).
        small = other_mode if other_mode and other_mode["workers"] == big["workers"] else ours
        modes = mode_name(big["workers"])
        if small["workers"] != big["workers"]:
            modes += f" vs {mode_name(small['workers'])}"
        rows_out.append(
            common.Row(
                f"linearity: rows/s at {LINEARITY_ROWS:,} vs {rows:,} ({modes})",
                LINEARITY_ROWS / big["wall_s"],
                rows / small["wall_s"],
                "rows/s",
                TARGET_LINEARITY,
                note="whole process, wall time: on a shared machine the load differs between "
                "the two runs; the CPU row below does not depend on it",
            )
        )
        rows_out.append(
            common.Row(
                f"  same, rows per CPU-second at {LINEARITY_ROWS:,} vs {rows:,}",
                LINEARITY_ROWS / big["cpu_s"],
                rows / small["cpu_s"],
                "rows/CPU-s",
                TARGET_LINEARITY,
                note="user + system CPU of the process tree",
            )
        )
    from pipeline.config import PipelineConfig, TrainingConfig

    # The batch the Trainer chooses for this many training rows (no --batch_size).
    batch = TrainingConfig().batch_size_for(round(rows * PipelineConfig.train_fraction))
    input_rate, model_rate = input_pipeline_rate(
        ours["transformed_examples"], ours["transform_graph"], batch
    )
    rows_out.append(
        common.Row(
            f"Trainer input pipeline, {rows:,} rows",
            input_rate,
            model_rate,
            "examples/s",
            TARGET_INPUT_VS_MODEL,
            note=f"reference = the model's own rate fed one cached batch (batch {batch}, "
            "the Trainer's choice for these rows)",
        )
    )
    return rows_out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_pipeline":
        return pipeline_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument(
        "--repeats",
        type=int,
        default=0,
        help="only the ours-vs-reference ratio at --rows, measured this many times",
    )
    args = parser.parse_args(argv)
    if args.repeats:
        work_dir = args.work_dir or tempfile.mkdtemp(prefix="scale-bench-")
        row = repeated_ratio(args.rows or FULL_ROWS, args.repeats, work_dir, args.workers)
        print(common.format_table([row]))
        return 0
    rows = run(args.quick, args.work_dir, args.rows, args.workers)
    print(common.format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
