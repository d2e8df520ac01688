"""Text columns of thousands of values at the cost of few (issue 46), on the flights look-alike.

    python -m benchmarks.high_cardinality [--quick] [--rows N] [--rounds K] [--work_dir DIR]
    python -m benchmarks.high_cardinality --evaluator_only [--rows N] [--rounds K]
    python -m benchmarks.high_cardinality --profile_evaluator RUN_ROOT [--evaluator_path tfma]

1. The Trainer's step, side by side in one process: the built-in model over the flights
   look-alike's transformed features with the real table's text columns (tail numbers 4,046
   indices, the hourly timestamp as text: 6,936) against ~100-value ones (cardinality 0.025:
   102 and 172), the same columns; as the input layer is (vocabularies of more than
   model.ONE_HOT_MAX_INDICES indices embedded) and as it was (every vocabulary one-hot in one
   multi-hot: ONE_HOT_MAX_INDICES set past every vocabulary), and as a run sees them now (the
   timestamp read as 3 numbers). One constant in-memory batch, so only the model's step is
   timed; K rounds alternating (common.alternate_fit_rounds), the median kept. Target: 4,000-
   value step within 1.5x of the 100-value one.
2. The whole run (`pipeline/run_local.py`, cold, a fresh output directory each) on a generated
   table of N rows at cardinality 1.0 and 0.025: seconds per component and in all, the MSE
   skill, and the Evaluator's seconds per eval example against the Trainer's per training
   example and epoch (target: within 1.5x).
3. `--profile_evaluator RUN_ROOT`: the project's Evaluator executor (the path it picks, or
   TFMA's with --evaluator_path tfma) rerun under cProfile on a
   finished run's eval split and model (RUN_ROOT: a run_local.py --output_root), its seconds
   split into the fixed part (building and translating the Beam pipeline, loading the model) and
   the per-example part (Beam's bundles: the model's signatures, TFMA's unbatching into one
   extract per example, its per-example metric combiners), beside the metrics it wrote.
4. `--evaluator_only`: the Evaluator against the Trainer per example pass, before and after
   the batched path, side by side: one whole run of N rows (50,000 by default; its own
   component times, the Evaluator batched), then its Evaluator executor rerun K times on
   TFMA's per-example path and K times batched, alternating; medians with min-max, the ratios
   to the Trainer, and both paths' metrics beside each other.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import common

STEPS, WARM = 100, 10
BATCHES = (256, 2048)  # the Trainer's batch at 60,000 and at 300,000 rows
TEXT_SIZES = {
    # vocabulary indices (values + the OOV bucket) of the flights look-alike's text columns
    "real": {"carrier": 17, "origin": 4, "dest": 106, "tailnum": 4_046, "time_hour": 6_936},
    "~100 values": {"carrier": 17, "origin": 4, "dest": 106, "tailnum": 102, "time_hour": 172},
}
NUMERIC = [
    "year",
    "month",
    "day",
    "dep_time",
    "sched_dep_time",
    "dep_delay",
    "arr_time",
    "sched_arr_time",
    "flight",
    "air_time",
    "distance",
    "hour",
    "minute",
]
MISSING = ("dep_time", "dep_delay", "arr_time", "air_time")
STEP_TARGET = 1.5
EVALUATOR_TARGET = 1.5


def model_inputs(sizes: dict[str, int], timestamp_as_numbers: bool):
    import tensorflow as tf

    from components.ml import features, model, timestamps
    from components.training.settings import TrainingConfig

    text = {f"{name}_xf": size for name, size in sizes.items()}
    floats = [f"{name}_xf" for name in NUMERIC] + [f"{name}_missing_xf" for name in MISSING]
    if timestamp_as_numbers:
        del text["time_hour_xf"]
        floats += [f"{name}_xf" for name in timestamps.part_names("time_hour")]
    spec = {name: tf.io.FixedLenFeature([], tf.int64) for name in text}
    spec.update({name: tf.io.FixedLenFeature([], tf.float32) for name in floats})
    return model.ModelInputs(
        feature_spec=spec,
        label_key="arr_delay_xf",
        task=features.REGRESSION,
        class_names=(),
        vocabulary_sizes=text,
        image_shape=None,
        settings=TrainingConfig(),
        custom_config={},
        tf_transform_output=None,
    )


def constant_batch(inputs, batch: int, seed: int = 0):
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    values = {
        name: rng.integers(0, inputs.vocabulary_sizes[name], batch)
        if spec.dtype == tf.int64
        else rng.standard_normal(batch).astype(np.float32)
        for name, spec in inputs.feature_spec.items()
    }
    labels = rng.standard_normal(batch).astype(np.float32)
    return tf.data.Dataset.from_tensors((values, labels)).repeat()


def build(inputs, one_hot_everything: bool):
    from components.ml import model

    if not one_hot_everything:
        return model.tabular_model(inputs)
    saved = model.ONE_HOT_MAX_INDICES
    model.ONE_HOT_MAX_INDICES = 10**9  # the input layer before issue 46: one-hot only
    try:
        return model.tabular_model(inputs)
    finally:
        model.ONE_HOT_MAX_INDICES = saved


def step_rows(batch: int, rounds: int) -> list[common.Row]:
    """Median ms per step of each variant at `batch`, and the ratios real / ~100 values."""
    variants = {}
    for sizes_name, sizes in TEXT_SIZES.items():
        for label, as_numbers, one_hot in (
            ("now (timestamp as numbers, large vocabularies embedded)", True, False),
            ("timestamp kept as text, embedded", False, False),
            ("before (all one-hot)", False, True),
        ):
            inputs = model_inputs(sizes, as_numbers)
            variants[(label, sizes_name)] = (build(inputs, one_hot), constant_batch(inputs, batch))
    names = {key: f"{key[0]} / {key[1]}" for key in variants}
    wall, cpu = common.alternate_fit_rounds(
        {names[key]: value[0] for key, value in variants.items()},
        {names[key]: value[1] for key, value in variants.items()},
        STEPS,
        rounds,
        WARM,
    )
    median = {key: statistics.median(wall[names[key]]) for key in variants}
    cpu_median = {key: statistics.median(cpu[names[key]]) for key in variants}
    for key in variants:
        print(
            f"  step, batch {batch}: {names[key]}: {median[key]:.2f} ms (CPU {cpu_median[key]:.2f})"
        )
    rows = []
    for label in dict.fromkeys(key[0] for key in variants):
        real, few = (label, "real"), (label, "~100 values")
        rows.append(
            common.Row(
                f"Trainer step, batch {batch}, real vs ~100-value text columns: {label}",
                median[real],
                median[few],
                "ms/step",
                target=STEP_TARGET if label.startswith("now") else None,
                higher_is_better=False,
                note=f"CPU ms/step {cpu_median[real]:.2f} vs {cpu_median[few]:.2f}",
            )
        )
    return rows


def whole_run(
    data_dir: str,
    output_root: str,
    *extra: str,
    label: str | None = None,
    skill: str = "mean_squared_error_skill",
) -> dict:
    """pipeline/run_local.py on data_dir (label: the flights' by default), cold; seconds per
    component and in all, the `skill` metric (the MSE skill by default), the eval and train rows
    and the epochs run, from its summary."""
    from pipeline.datasets import synthetic

    command = [
        common.PYTHON, os.path.join(common.PROJECT_ROOT, "pipeline", "run_local.py"),
        "--data", data_dir, "--label", label or synthetic.FLIGHTS_LABEL_KEY,
        "--max_rejected_fraction", "0.05", "--output_root", output_root, *extra,
    ]  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(
        command, capture_output=True, text=True, check=False, env=common.child_env(),
        cwd=common.PROJECT_ROOT,
    )  # fmt: skip
    wall = time.monotonic() - started
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr[-3000:]}")
    out = result.stdout
    components = {
        name: float(seconds)
        for name, seconds in re.findall(r"\(\d+/\d+\) (\w+) executed in ([\d.]+)s", out)
    }
    epochs = re.findall(r"epoch (\d+)/\d+:", out)
    stopped = re.search(r"early stopping at epoch (\d+)/", out)
    train, evaluated = re.search(r"examples:\s+train (\d+), eval (\d+)", out).groups()
    return {
        "total": float(re.search(r"finished in ([\d.]+)s", out).group(1)),
        "wall": wall,
        "components": components,
        "skill": float(re.search(rf"{skill} (-?[\d.]+)", out).group(1)),
        "epochs": int(stopped.group(1)) if stopped else int(epochs[-1]) if epochs else 1,
        "train": int(train),
        "eval": int(evaluated),
    }


def run_rows(rows_count: int, work_dir: str) -> list[common.Row]:
    from pipeline.datasets import synthetic

    measured = {}
    for name, cardinality in (("real", 1.0), ("~100 values", 0.025)):
        data_dir = os.path.join(work_dir, f"flights-{cardinality}")
        synthetic.write_flights(data_dir, rows_count, files=1, seed=0, cardinality=cardinality)
        measured[name] = whole_run(data_dir, os.path.join(work_dir, f"out-{cardinality}"))
        print(f"  whole run, {rows_count} rows, {name}: {measured[name]}", flush=True)
    rows = []
    real, few = measured["real"], measured["~100 values"]
    rows.append(
        common.Row(
            f"whole run, {rows_count} rows, real vs ~100-value text columns",
            real["total"],
            few["total"],
            "s",
            higher_is_better=False,
            note=", ".join(f"{k} {v:.1f}" for k, v in real["components"].items() if v >= 1),
        )
    )
    rows.append(
        common.Row(
            f"MSE skill, {rows_count} rows, real vs ~100-value text columns",
            real["skill"],
            few["skill"],
            "skill",
        )
    )
    for name, result in measured.items():
        trainer = result["components"]["Trainer"] / (result["train"] * result["epochs"])
        evaluator = result["components"]["Evaluator"] / result["eval"]
        rows.append(
            common.Row(
                f"Evaluator vs Trainer, s per example pass, {rows_count} rows, {name}",
                evaluator * 1e6,
                trainer * 1e6,
                "us/example",
                target=EVALUATOR_TARGET,
                higher_is_better=False,
                note=f"{result['epochs']} epochs of {result['train']} rows; {result['eval']} eval",
            )
        )
    return rows


# (file suffix, function) -> part of the Evaluator's time, cumulative seconds (profile_evaluator)
EVALUATOR_PARTS = {
    "whole executor": ("components/tfx_components/evaluator/executor.py", "Do"),
    "Beam pipeline run": ("apache_beam/pipeline.py", "run"),
    "bundles (data path)": ("apache_beam/runners/worker/bundle_processor.py", "process_encoded"),
    "model signatures (transform + serving)": (
        "tensorflow_model_analysis/utils/model_util.py",
        "_batch_reducible_process",
    ),
    "unbatch into per-example extracts": (
        "tensorflow_model_analysis/extractors/unbatch_extractor.py",
        "_extract_unbatched_inputs",
    ),
    "metric combiners, per example": (
        "tensorflow_model_analysis/evaluators/metrics_plots_and_validations_evaluator.py",
        "add_input",
    ),
    "batched path: signatures and sums per record batch": (
        "components/tfx_components/evaluator/batched.py",
        "process",
    ),
}


def evaluator_breakdown(stats) -> dict[str, tuple[float, int]]:
    """Cumulative seconds and calls of each EVALUATOR_PARTS function in a pstats.Stats."""
    found = {}
    for (filename, _, function), (_, calls, _, cumulative, _) in stats.stats.items():
        for part, (suffix, name) in EVALUATOR_PARTS.items():
            if function == name and filename.endswith(suffix):
                seconds, count = found.get(part, (0.0, 0))
                found[part] = (seconds + cumulative, count + calls)
    return found


def rerun_evaluator(
    run_root: str, path: str = "chosen", profile: bool = False, split: str = "eval"
):
    """The project's Evaluator executor on RUN_ROOT's newest examples and model (the eval config
    its Evaluator wrote), on Beam's in-memory DirectRunner as a local run uses it (no TFX sdist,
    Beam's bookkeeping remembered: pipeline.local.policy.run_dag's settings). path: "chosen"
    (the path the executor picks), "tfma" (TFMA's per-example evaluation, as before the batched
    path). Returns (wall seconds of the executor, eval examples, metrics, cProfile or None)."""
    import cProfile
    import glob
    import json
    from unittest import mock

    import tensorflow_model_analysis as tfma
    from google.protobuf import json_format
    from tfx.dsl.components.base import base_beam_executor
    from tfx.types import standard_artifacts
    from tfx.utils import json_utils

    from components import compat
    from components.tfx_components.evaluator import batched, executor

    def newest(pattern: str) -> str:
        found = [  # artifact directories are numbered (not CsvExampleGen's rejected rows)
            path
            for path in glob.glob(os.path.join(run_root, "**", pattern, "*"), recursive=True)
            if os.path.basename(path).isdigit()
        ]
        if not found:
            raise SystemExit(f"--profile_evaluator {run_root}: no {pattern}; give the "
                             "--output_root of a finished run_local.py run")  # fmt: skip
        return max(found, key=lambda path: int(os.path.basename(path)))

    evaluation_dir = newest(os.path.join("Evaluator", "evaluation"))
    with open(os.path.join(evaluation_dir, "eval_config.json")) as handle:
        eval_config = json_format.ParseDict(json.load(handle)["evalConfig"], tfma.EvalConfig())
    examples = standard_artifacts.Examples()
    examples.uri = newest(os.path.join("CsvExampleGen", "examples"))
    examples.split_names = json_utils.dumps([split])
    model = standard_artifacts.Model()
    model.uri = newest(os.path.join("Trainer", "model"))
    with tempfile.TemporaryDirectory() as scratch:
        evaluation = standard_artifacts.ModelEvaluation()
        evaluation.uri = os.path.join(scratch, "evaluation")
        blessing = standard_artifacts.ModelBlessing()
        blessing.uri = os.path.join(scratch, "blessing")
        context = base_beam_executor.BaseBeamExecutor.Context(
            beam_pipeline_args=["--runner=DirectRunner", "--direct_running_mode=in_memory",
                                "--direct_num_workers=1"],
            tmp_dir=os.path.join(scratch, "tmp"),
        )  # fmt: skip
        properties = {
            "eval_config": json_format.MessageToJson(eval_config),
            "example_splits": json_utils.dumps([split]),
        }
        forced = (
            mock.patch.object(batched, "plan", return_value="the benchmark asks for TFMA")
            if path == "tfma"
            else contextlib.nullcontext()
        )
        profiler = cProfile.Profile() if profile else None
        with forced, compat.no_tfx_sdist_for_direct_runner(), compat.beam_bookkeeping_remembered():
            started = time.monotonic()
            if profiler:
                profiler.enable()
            executor.Executor(context).Do(
                {"examples": [examples], "model": [model]},
                {"evaluation": [evaluation], "blessing": [blessing]},
                properties,
            )
            if profiler:
                profiler.disable()
            seconds = time.monotonic() - started
        metrics = {}
        for result in tfma.load_metrics(evaluation.uri):
            for item in result.metric_keys_and_values:
                output = f" ({item.key.output_name})" if item.key.output_name else ""
                metrics[item.key.name + output] = item.value.double_value.value
    counts = [value for name, value in metrics.items() if name.startswith("example_count")]
    return seconds, int(max(counts, default=0)), metrics, profiler


def profile_evaluator(run_root: str, split: str = "eval", path: str = "chosen") -> dict:
    """rerun_evaluator under cProfile: seconds per part (EVALUATOR_PARTS), eval examples and the
    metrics written."""
    import pstats

    _, examples, metrics, profiler = rerun_evaluator(run_root, path, profile=True, split=split)
    return {
        "parts": evaluator_breakdown(pstats.Stats(profiler)),
        "examples": examples,
        "metrics": metrics,
    }


def evaluator_rows(
    rows_count: int, work_dir: str, rounds: int, task: str = "regression"
) -> list[common.Row]:
    """The Evaluator against the Trainer per example pass, before (TFMA's per-example path) and
    after (the batched path), side by side: one whole run of the flights look-alike (task
    regression) or of the 3-class synthetic table (task classification: the project's
    classification EvalConfig), the Trainer's seconds per training example and epoch from its
    summary; then its Evaluator rerun `rounds` times on each path, alternating; medians with
    min-max."""
    from pipeline.datasets import synthetic

    data_dir = os.path.join(work_dir, "data")
    output_root = os.path.join(work_dir, "out")
    if task == "classification":
        synthetic.write_synth(data_dir, rows_count, files=1, seed=0)
        run = whole_run(
            data_dir, output_root, label=synthetic.SYNTH_LABEL_KEY, skill="accuracy_skill"
        )
    else:
        synthetic.write_flights(data_dir, rows_count, files=1, seed=0)
        run = whole_run(data_dir, output_root)
    rows_count_label = f"{rows_count} rows {task}"
    trainer = run["components"]["Trainer"] / (run["train"] * run["epochs"]) * 1e6
    print(f"  whole run, {rows_count} rows: {run}", flush=True)
    seconds: dict[str, list[float]] = {"tfma": [], "chosen": []}
    metrics = {}
    for _ in range(rounds):
        for path in ("tfma", "chosen"):
            wall, examples, metrics[path], _ = rerun_evaluator(output_root, path)
            seconds[path].append(wall / examples * 1e6)
            print(f"  Evaluator rerun, {path}: {wall:.2f} s, {examples} examples", flush=True)
    in_run = run["components"]["Evaluator"] / run["eval"] * 1e6
    rows = [
        common.Row(
            f"Evaluator vs Trainer, us per example pass, {rows_count_label}, in the run (batched)",
            in_run,
            trainer,
            "us/example",
            target=EVALUATOR_TARGET,
            higher_is_better=False,
            note=f"the run's own component times: Evaluator {run['components']['Evaluator']:.1f}"
            f" s, Trainer {run['components']['Trainer']:.1f} s",
        )
    ]
    for path, label in (("tfma", "before (TFMA per example)"), ("chosen", "after (batched)")):
        values = sorted(seconds[path])
        rows.append(
            common.Row(
                f"Evaluator vs Trainer, us per example pass, {rows_count_label}, {label}",
                statistics.median(values),
                trainer,
                "us/example",
                target=EVALUATOR_TARGET,
                higher_is_better=False,
                note=f"Evaluator min-max {values[0]:.0f}-{values[-1]:.0f} over {rounds}; Trainer "
                f"{run['epochs']} epochs of {run['train']} rows; {run['eval']} eval",
            )
        )
    after, before = statistics.median(seconds["chosen"]), statistics.median(seconds["tfma"])
    rows.append(
        common.Row(
            f"Evaluator after vs before, us per example, {rows_count_label}",
            after,
            before,
            "us/example",
            higher_is_better=False,
            note=", ".join(
                f"{name} {value:.6g} vs {metrics['tfma'].get(name, float('nan')):.6g}"
                for name, value in sorted(metrics["chosen"].items())
            ),
        )
    )
    return rows


def format_profile(result: dict) -> str:
    examples = result["examples"]
    total = result["parts"].get("whole executor", (0.0, 0))[0]
    data = result["parts"].get("bundles (data path)", (0.0, 0))[0]
    per_example = data / max(examples, 1) * 1e6
    lines = [
        f"Evaluator profile: {examples} eval examples, {total:.1f} s in all; fixed (outside "
        f"Beam's bundles) {total - data:.1f} s, per example {per_example:.0f} us"
    ]
    for part, (seconds, calls) in result["parts"].items():
        per = f", {seconds / max(examples, 1) * 1e6:.0f} us/example" if examples else ""
        lines.append(f"  {part}: {seconds:.2f} s in {calls} call(s){per}")
    lines += [f"  metric {name}: {value:.6g}" for name, value in sorted(result["metrics"].items())]
    return "\n".join(lines)


def run(quick: bool, work_dir: str | None = None, rows: int | None = None, rounds: int = 3):
    out = []
    for batch in BATCHES[:1] if quick else BATCHES:
        out += step_rows(batch, 2 if quick else rounds)
    with tempfile.TemporaryDirectory(dir=work_dir) as scratch:
        out += run_rows(rows or (20_000 if quick else 300_000), scratch)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="batch 256 only, 20,000 rows")
    parser.add_argument("--rows", type=int, default=None, help="whole-run rows (300,000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work_dir", default=None)
    parser.add_argument(
        "--evaluator_only",
        action="store_true",
        help="only the Evaluator against the Trainer, before (TFMA) and after (batched), "
        "on one whole run of --rows rows (50,000) and --rounds Evaluator reruns of each",
    )
    parser.add_argument(
        "--task",
        choices=("regression", "classification"),
        default="regression",
        help="with --evaluator_only: the flights look-alike (regression) or the 3-class "
        "synthetic table (classification)",
    )
    parser.add_argument(
        "--evaluator_path",
        choices=("chosen", "tfma"),
        default="chosen",
        help="with --profile_evaluator: the path the executor picks, or TFMA's (before)",
    )
    parser.add_argument(
        "--profile_evaluator",
        metavar="RUN_ROOT",
        default=None,
        help="only rerun a finished run's Evaluator (its --output_root) under cProfile",
    )
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()}", flush=True)
    if args.profile_evaluator:
        print(format_profile(profile_evaluator(args.profile_evaluator, path=args.evaluator_path)))
        print(f"load average {os.getloadavg()}", flush=True)
        return 0
    if args.evaluator_only:
        with tempfile.TemporaryDirectory(dir=args.work_dir) as scratch:
            rows = evaluator_rows(args.rows or 50_000, scratch, args.rounds, args.task)
    else:
        rows = run(args.quick, args.work_dir, args.rows, args.rounds)
    print(f"load average {os.getloadavg()}", flush=True)
    print(common.format_table(rows))
    return 0 if all(row.passed is not False for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
