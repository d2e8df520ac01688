"""Transform's cost per column: wide generated tables, before and after, side by side.

    python -m benchmarks.wide_transform [--quick] [--columns 10 40 80 160] [--rows 3000]

For each column count: writes a wide table (pipeline.datasets.synthetic.write_wide: half text
columns with 8 values, half numeric, some missing) and its schema, then runs, each in a fresh
process, the project's ExampleGen -> ImportSchemaGen -> Transform with
- before: benchmarks.per_column_preprocessing.preprocessing_fn (one tf.Transform analyzer per
  column: what the pipeline ran before issue 30), and
- after: the pipeline's own preprocessing_fn (components.ml.preprocessing: one mean/var pair for
  every numeric column, one vocabulary analyzer for every text column),
alternating before/after at each size. Transform's seconds are MLMD's (the execution's create ->
last update); the process's wall time is beside them. Rows: Transform seconds after vs before
per size, and the growth from the smallest to the 80-column table (target: within 2x).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from benchmarks import common

PIPELINE_NAME = "wide-transform-bench"
BEFORE = "benchmarks.per_column_preprocessing.preprocessing_fn"
AFTER = "components.ml.preprocessing.preprocessing_fn"
FULL_COLUMNS = (10, 40, 80, 160)
QUICK_COLUMNS = (10, 80)
ROWS = 3000
TARGET_GROWTH = 2.0  # Transform at 80 columns <= 2x Transform at 10 columns
GROWTH_COLUMNS = 80


def build_pipeline(data_dir: str, schema_path: str, root: str, preprocessing_fn: str):
    from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen

    from components.ml import features
    from components.tfx_components.example_gen.component import ShardedCsvExampleGen
    from components.tfx_components.example_gen.csv_reader import schema_column_types
    from components.tfx_components.transform import executor as transform_executor
    from components.tfx_components.transform.component import ShardedTransform
    from pipeline import builder, preflight
    from pipeline.datasets import synthetic

    example_gen = ShardedCsvExampleGen(
        input_base=data_dir,
        split_buckets={builder.TRAIN_SPLIT: 75, builder.EVAL_SPLIT: 25},
        num_shards=2,
        column_types=schema_column_types(preflight.load_schema(schema_path)),
    ).with_id("CsvExampleGen")
    schema_gen = ImportSchemaGen(schema_file=schema_path)
    transform = ShardedTransform(
        examples=example_gen.outputs["examples"],
        schema=schema_gen.outputs["schema"],
        preprocessing_fn=preprocessing_fn,
        custom_config={
            features.LABEL_KEY_CONFIG: synthetic.SYNTH_LABEL_KEY,
            transform_executor.NUM_SHARDS_CONFIG_KEY: 2,
        },
    ).with_id("Transform")
    return common.data_pipeline(
        PIPELINE_NAME, root, [example_gen, schema_gen, transform], common.direct_beam_args(1)
    )


def pipeline_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--schema", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--preprocessing_fn", required=True)
    args = parser.parse_args(argv)
    from pipeline.local import policy as local

    local.run_dag(build_pipeline(args.data, args.schema, args.root, args.preprocessing_fn))
    _, _, seconds = common.component_executions(args.root)
    print(json.dumps(seconds))
    return 0


def measure(data_dir: str, schema: str, work_dir: str, fn: str, tag: str) -> dict:
    root = common.fresh_output(os.path.join(work_dir, f"run-{tag}"))
    command = [common.PYTHON, "-m", "benchmarks.wide_transform", "_pipeline", "--data", data_dir]
    command += ["--schema", schema, "--root", root, "--preprocessing_fn", fn]
    result = common.run_measured(
        command, env=common.child_env(), log_path=os.path.join(work_dir, f"run-{tag}.log")
    )
    seconds = json.loads(result.stdout.strip().splitlines()[-1])
    return {"transform_s": seconds["Transform"], "wall_s": result.seconds}


def run(
    quick: bool,
    work_dir: str | None = None,
    columns: tuple[int, ...] | None = None,
    rows: int = ROWS,
) -> list[common.Row]:
    from pipeline.datasets import synthetic

    columns = tuple(columns or (QUICK_COLUMNS if quick else FULL_COLUMNS))
    work_dir = work_dir or tempfile.mkdtemp(prefix="wide-transform-bench-")
    measured: dict[int, dict[str, dict]] = {}
    for count in columns:
        data_dir, schema = synthetic.write_wide(
            os.path.join(work_dir, f"cols-{count}"), rows, count
        )
        measured[count] = {}
        for side, fn in (("before", BEFORE), ("after", AFTER)):
            print(f"  wide_transform: {count} columns, {side} ...", flush=True)
            measured[count][side] = measure(data_dir, schema, work_dir, fn, f"{count}-{side}")
            print(f"  wide_transform: {count} columns, {side}: {measured[count][side]}", flush=True)
    out = []
    for count in columns:
        before, after = measured[count]["before"], measured[count]["after"]
        out.append(
            common.Row(
                f"Transform, {count} columns x {rows:,} rows, after vs before",
                after["transform_s"],
                before["transform_s"],
                "s",
                note=f"whole process (ExampleGen + ImportSchemaGen + Transform): after "
                f"{after['wall_s']:.1f} s, before {before['wall_s']:.1f} s",
            )
        )
    smallest = min(columns)
    if GROWTH_COLUMNS in measured and smallest < GROWTH_COLUMNS:
        for side in ("after", "before"):
            out.append(
                common.Row(
                    f"Transform growth {side}: {GROWTH_COLUMNS} vs {smallest} columns",
                    measured[GROWTH_COLUMNS][side]["transform_s"],
                    measured[smallest][side]["transform_s"],
                    "s",
                    TARGET_GROWTH if side == "after" else None,
                    higher_is_better=False,
                )
            )
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_pipeline":
        return pipeline_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"only {QUICK_COLUMNS} columns")
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--columns", type=int, nargs="*", default=None)
    parser.add_argument("--rows", type=int, default=ROWS)
    args = parser.parse_args(argv)
    rows = run(args.quick, args.work_dir, tuple(args.columns or ()) or None, args.rows)
    print(common.format_table(rows))
    return 0 if all(row.passed is not False for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
