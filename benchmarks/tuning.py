"""Side by side, in one invocation: --tune_workers 1 against 2 for the same trials, and TFX's own
penguin pipeline with tuning on against ours with --tune and the same module.

    python -m benchmarks.tuning [--work_dir DIR] [--trials 4] [--tune_steps 100]

1. Parallel trials: ours on the embedded penguins, `--tune --max_trials T --tune_steps S`, cold,
   once with `--tune_workers 1` (trials one after another in the Tuner's process) and once with
   `--tune_workers 2` (KerasTuner's distributed mode: an oracle chief and two worker processes).
   Reported: the Tuner's own seconds (its progress line) and the run's wall time, and the ratio
   2 workers / 1 worker.
2. TFX's penguin tuning: tfx.examples.penguin.penguin_pipeline_local.create_pipeline with its
   __main__'s arguments and enable_tuning=True (its Tuner: the module's tuner_fn, 6 trials,
   TrainArgs 20 steps, EvalArgs 5 steps; the Trainer 100 and 5 steps), BulkInferrer off, through
   TFX's LocalDagRunner, against ours with `--module_file penguin_utils_keras.py --tune
   --tune_steps 20 --train_steps 100 --eval_steps 5` and the pipeline's EvalConfig, on the same
   rows (TFX's penguins_processed.csv layout, 342 rows), both cold. The reference imports the
   project's `components` package first: without it keras-tuner 1.4.8 runs on the installed
   Keras 3 and refuses the module's tf-keras model (components/__init__.py says why; the same
   fix runs ours). Our Tuner's eval steps come from the eval rows (fn_args.eval_steps), not 5.
   Reported: wall times, their ratio, and each best trial's val_sparse_categorical_accuracy.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from benchmarks import penguin_vs_tfx_example as reference_lib
from components import KERAS_ENV

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_LOCAL = os.path.join(PROJECT_ROOT, "pipeline", "run_local.py")

REFERENCE_DRIVER = reference_lib.reference_driver(
    tuning=True,
    bulk_inferrer=False,
    transform_input_cache=False,
    prelude="import components  # keras-tuner on tf-keras (see benchmarks/tuning.py)\n",
)
EVAL_CONFIG = """
model_specs {
  signature_name: "serving_default"
  label_key: "species_xf"
  preprocessing_function_names: "transform_features"
}
slicing_specs {}
metrics_specs {
  metrics {
    class_name: "SparseCategoricalAccuracy"
    threshold {
      value_threshold { lower_bound { value: 0.6 } }
      change_threshold { direction: HIGHER_IS_BETTER absolute { value: -1e-10 } }
    }
  }
}
"""


def _timed(command: list[str], log_path: str) -> tuple[float, str]:
    """penguin_vs_tfx_example.timed with tf-keras in the environment, and the log's text."""
    env = dict(os.environ, **KERAS_ENV, PYTHONUNBUFFERED="1")
    seconds = reference_lib.timed(command, env, log_path)
    with open(log_path) as handle:
        return seconds, handle.read()


def _tuner_seconds(output: str) -> float:
    found = re.search(r"\) Tuner executed in ([\d.]+)s", output)
    return float(found.group(1)) if found else float("nan")


def _our_best(output_root: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.mlmd", "--output_root", output_root, "tuning", "--json"],
        capture_output=True, text=True, cwd=PROJECT_ROOT, check=True,
    )  # fmt: skip
    return json.loads(result.stdout)


def parallel_trials(work_dir: str, trials: int, steps: int) -> dict:
    times = {}
    for workers in (1, 2):
        out = os.path.join(work_dir, f"workers-{workers}")
        shutil.rmtree(out, ignore_errors=True)
        log = os.path.join(work_dir, f"workers-{workers}.log")
        print(f"--tune_workers {workers}, {trials} trials x {steps} steps ... (log: {log})")
        wall, output = _timed(
            [sys.executable, RUN_LOCAL, "--output_root", out, "--tune", "--max_trials",
             str(trials), "--tune_steps", str(steps), "--tune_workers", str(workers),
             "--epochs", "2"],
            log,
        )  # fmt: skip
        best = _our_best(out)
        assert best["trials"] == trials, best
        times[workers] = {"wall": wall, "tuner": _tuner_seconds(output), "best": best["best_score"]}
        print(f"  wall {wall:.1f} s, Tuner {times[workers]['tuner']:.1f} s", flush=True)
    return times


def tfx_penguin(work_dir: str) -> dict:
    reference_dir = os.path.join(work_dir, "reference")
    ours_dir = os.path.join(work_dir, "ours")
    for path in (reference_dir, ours_dir):
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
    reference_lib.write_reference_inputs(reference_dir)
    driver = os.path.join(reference_dir, "run_reference.py")
    with open(driver, "w") as handle:
        handle.write(REFERENCE_DRIVER)
    eval_config = os.path.join(ours_dir, "penguin_eval.pbtxt")
    with open(eval_config, "w") as handle:
        handle.write(EVAL_CONFIG)
    module = os.path.join(reference_dir, "penguin_utils_keras.py")  # the wheel's, copied
    log = os.path.join(work_dir, "reference.log")
    print(f"TFX's penguin pipeline, tuning on ... (log: {log})", flush=True)
    reference_wall, _ = _timed([sys.executable, driver, reference_dir], log)
    [results] = glob.glob(
        os.path.join(reference_dir, "tfx", "pipelines", "*", "Tuner", "tuner_results", "*",
                     "tuner_results.json")
    )  # fmt: skip
    with open(results) as handle:
        reference_trials = json.load(handle)
    log = os.path.join(work_dir, "ours.log")
    print(f"ours, --tune with the same module ... (log: {log})", flush=True)
    out = os.path.join(ours_dir, "out")
    ours_wall, output = _timed(
        [sys.executable, RUN_LOCAL, "--output_root", out, "--data",
         os.path.join(reference_dir, "data", "labelled"), "--label", "species", "--module_file",
         module, "--eval_config", eval_config, "--train_steps", "100", "--eval_steps", "5",
         "--tune", "--tune_steps", "20"],
        log,
    )  # fmt: skip
    ours = _our_best(out)
    return {
        "reference_wall": reference_wall,
        "reference_trials": len(reference_trials),
        "reference_best": max(t["score"] for t in reference_trials),
        "ours_wall": ours_wall,
        "ours_tuner": _tuner_seconds(output),
        "ours_trials": ours["trials"],
        "ours_best": ours["best_score"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work_dir", default=None, help="default: a new temporary directory")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--tune_steps", type=int, default=100)
    args = parser.parse_args(argv)
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="tuning-bench-")
    os.makedirs(work_dir, exist_ok=True)
    parallel = parallel_trials(work_dir, args.trials, args.tune_steps)
    penguin = tfx_penguin(work_dir)
    print(f"\nmachine: {os.cpu_count()} CPU core(s)")
    one, two = parallel[1], parallel[2]
    print(f"{'':<34}{'1 worker':>10}{'2 workers':>11}{'ratio':>8}")
    print(f"{'Tuner s (' + str(args.trials) + ' trials)':<34}{one['tuner']:>10.1f}"
          f"{two['tuner']:>11.1f}{two['tuner'] / one['tuner']:>8.2f}")  # fmt: skip
    print(f"{'run wall s':<34}{one['wall']:>10.1f}{two['wall']:>11.1f}"
          f"{two['wall'] / one['wall']:>8.2f}")  # fmt: skip
    print(f"{'best val_loss':<34}{one['best']:>10.4f}{two['best']:>11.4f}")
    print(f"\n{'':<34}{'TFX example':>12}{'ours':>8}{'ratio':>8}")
    print(f"{'cold wall s':<34}{penguin['reference_wall']:>12.1f}{penguin['ours_wall']:>8.1f}"
          f"{penguin['ours_wall'] / penguin['reference_wall']:>8.2f}")  # fmt: skip
    print(f"{'trials':<34}{penguin['reference_trials']:>12}{penguin['ours_trials']:>8}")
    print(f"{'best val_sparse_categorical_acc.':<34}{penguin['reference_best']:>12.4f}"
          f"{penguin['ours_best']:>8.4f}")  # fmt: skip
    print(f"(ours: Tuner {penguin['ours_tuner']:.1f} s of the run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
