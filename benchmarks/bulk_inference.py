"""TFX's BulkInferrer (--infer_data) against the project's predict_csv on the same model and rows.

    python -m benchmarks.bulk_inference [--rows 1000000] [--train_rows 20000] [--work_dir DIR]

The synthetic data (pipeline.datasets.synthetic): the pipeline trains on --train_rows rows with
--infer_data pointing at --rows other rows (the label column left in: kept, not read); the
BulkInferrer's wall time is the component's, from the run's progress line (TFX's inference on
Beam plus this project's pass that writes predictions.csv). Then `python -m pipeline.predict
--csv` on the same rows with the pushed model (the same model: the run's candidate, blessed and
pushed), in a fresh process, its output to a file. Reported: rows/s of each and the ratio, the
InferCsvExampleGen's time (reading the rows) beside them, and the peak RSS of each process.
Then the predictions-CSV pass alone, twice on the run's PredictionLogs in this process on Beam's
DirectRunner: the per-row writer (csv_row + csv_line per PredictionLog, what the component ran
before) and the component's batched one (WritePredictionsCsv); the two files must be the same
lines.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time

from benchmarks import common

RUN_LOCAL = os.path.join(common.PROJECT_ROOT, "pipeline", "run_local.py")


def _component_seconds(stdout: str, component: str) -> float:
    found = re.search(rf"\) {component} executed in ([0-9.]+)s", stdout)
    if not found:
        raise RuntimeError(f"no '{component} executed' line in the run's output:\n{stdout}")
    return float(found.group(1))


def csv_pass_seconds(output_root: str, rows_dir: str, serving: str, label: str) -> dict:
    """The predictions-CSV pass alone, per row (the old writer) and batched, same logs."""
    import glob

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from tensorflow_serving.apis import prediction_log_pb2

    from components.tfx_components.bulk_inferrer import executor

    [result] = {
        os.path.dirname(path)
        for path in glob.glob(
            os.path.join(output_root, "**", executor.PREDICTION_LOGS_PATTERN), recursive=True
        )
    }
    pattern = os.path.join(result, executor.PREDICTION_LOGS_PATTERN)
    [rows_file] = [os.path.join(rows_dir, name) for name in os.listdir(rows_dir)]
    with open(rows_file) as handle:
        columns = handle.readline().strip().split(",")
    [model] = [os.path.dirname(path) for path in glob.glob(os.path.join(serving, "*", "assets"))]
    class_names = executor.model_class_names(model)
    first = executor.first_log(pattern)
    layout = executor.output_layout(columns, executor.log_parts(first)[1], label, class_names)
    names = tuple(class_names)
    options = PipelineOptions(["--runner=DirectRunner"])
    files = {}
    seconds = {}
    for kind in ("per_row", "batched"):
        path = os.path.join(os.path.dirname(output_root), f"predictions-{kind}.csv")
        start = time.perf_counter()
        with beam.Pipeline(options=options) as pipeline:
            if kind == "batched":
                _ = pipeline | executor.WritePredictionsCsv(pattern, layout, path, names)
            else:
                _ = (
                    pipeline
                    | beam.io.ReadFromTFRecord(
                        pattern, coder=beam.coders.ProtoCoder(prediction_log_pb2.PredictionLog)
                    )
                    | beam.Map(lambda log: executor.csv_line(executor.csv_row(log, layout, names)))
                    | beam.io.WriteToText(
                        path[: -len(".csv")],
                        file_name_suffix=".csv",
                        num_shards=1,
                        shard_name_template="",
                        header=executor.csv_line(layout.header),
                    )
                )
        seconds[f"csv_pass_{kind}_s"] = time.perf_counter() - start
        with open(path) as handle:
            files[kind] = sorted(handle)
    if files["per_row"] != files["batched"]:
        raise RuntimeError("the batched predictions CSV differs from the per-row one")
    return seconds


def measure(work_dir: str, rows: int, train_rows: int) -> dict:
    from pipeline.datasets import synthetic

    train_dir = os.path.join(work_dir, "train")
    rows_dir = os.path.join(work_dir, "rows")
    if not os.path.isdir(train_dir):
        synthetic.write_synth(train_dir, train_rows, 1, seed=7)
    if not os.path.isdir(rows_dir):
        # Another seed: other rows, the same distribution.
        synthetic.write_synth(rows_dir, rows, 1, seed=8)
    output_root = common.fresh_output(os.path.join(work_dir, "out"))
    print(f"  pipeline: train on {train_rows:,} rows, predict {rows:,} ...", flush=True)
    pipeline = common.run_measured(
        [
            common.PYTHON,
            RUN_LOCAL,
            "--data",
            train_dir,
            "--label",
            synthetic.SYNTH_LABEL_KEY,
            "--output_root",
            output_root,
            "--infer_data",
            rows_dir,
            "--epochs",
            "3",
        ],
        env=common.child_env(),
        log_path=os.path.join(work_dir, "pipeline.log"),
    )
    inferrer = _component_seconds(pipeline.stdout, "BulkInferrer")
    example_gen = _component_seconds(pipeline.stdout, "InferCsvExampleGen")
    if f"{rows} predicted + 0 rejected" not in pipeline.stdout:
        raise RuntimeError(f"not every row was predicted:\n{pipeline.stdout}")
    serving = os.path.join(output_root, "train-pipeline", "serving_model")
    [rows_file] = [os.path.join(rows_dir, name) for name in os.listdir(rows_dir)]
    print("  pipeline.predict --csv on the same rows ...", flush=True)
    predicted = common.run_measured(
        [common.PYTHON, "-m", "pipeline.predict", "--model", serving, "--csv", rows_file],
        env=common.child_env(),
        log_path=os.path.join(work_dir, "predict.log"),
    )
    lines = predicted.stdout.count("\n")
    if lines != rows:
        raise RuntimeError(f"pipeline.predict printed {lines} line(s) for {rows} rows")
    print("  the predictions-CSV pass alone, per row and batched ...", flush=True)
    csv_pass = csv_pass_seconds(output_root, rows_dir, serving, synthetic.SYNTH_LABEL_KEY)
    return {
        **csv_pass,
        "load_average_1min": os.getloadavg()[0],
        "rows": rows,
        "bulk_inferrer_s": inferrer,
        "infer_example_gen_s": example_gen,
        "pipeline_s": pipeline.seconds,
        "pipeline_peak_rss_mb": pipeline.peak_rss_bytes / 2**20,
        "predict_csv_s": predicted.seconds,
        "predict_csv_peak_rss_mb": predicted.peak_rss_bytes / 2**20,
    }


def rows_of(measured: dict) -> list[common.Row]:
    rows = measured["rows"]
    return [
        common.Row(
            f"BulkInferrer vs pipeline.predict --csv, {rows:,} rows",
            rows / measured["bulk_inferrer_s"],
            rows / measured["predict_csv_s"],
            "rows/s",
            note=f"InferCsvExampleGen {measured['infer_example_gen_s']:.1f} s besides; peak RSS "
            f"pipeline {measured['pipeline_peak_rss_mb']:.0f} MB, predict "
            f"{measured['predict_csv_peak_rss_mb']:.0f} MB",
        ),
        common.Row(
            f"predictions-CSV pass, batched vs per row, {rows:,} rows",
            rows / measured["csv_pass_batched_s"],
            rows / measured["csv_pass_per_row_s"],
            "rows/s",
            note="the same PredictionLogs, DirectRunner, the same lines written",
        ),
    ]


def run(quick: bool, work_dir: str | None = None) -> list[common.Row]:
    """Rows for `python -m benchmarks all`."""
    work_dir = work_dir or tempfile.mkdtemp(prefix="bulk-inference-bench-")
    return rows_of(measure(work_dir, 200_000 if quick else 1_000_000, 20_000))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bulk_inference")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--train_rows", type=int, default=20_000)
    parser.add_argument("--work_dir", default=None)
    args = parser.parse_args(argv)
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="bulk-inference-bench-")
    measured = measure(work_dir, args.rows, args.train_rows)
    for name, value in measured.items():
        print(f"  {name}: {value:.1f}" if isinstance(value, float) else f"  {name}: {value}")
    print(common.format_table(rows_of(measured)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
