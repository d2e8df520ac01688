"""Side by side: this project's local pipeline vs. TFX 1.16's own penguin example.

Both run in one invocation on this machine, each as a fresh process the way a user starts it,
first cold (empty output root) then warm (the same command again, nothing changed):

    python -m benchmarks.penguin_vs_tfx_example [--work_dir DIR]

The reference is tfx.examples.penguin.penguin_pipeline_local.create_pipeline with the arguments
its __main__ uses, tuning off (keras-tuner rejects tf-keras models) and TF_USE_LEGACY_KERAS=1,
on the same palmerpenguins rows in the format it expects (penguins_processed.csv layout: the
four measurements and an integer species; the 342 rows with measurements).

Prints wall times and the ratios the foundation issue targets:
  ours cold / reference cold  <= 0.5
  ours warm / reference cold  <= 0.1
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time

from components import KERAS_ENV

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

REFERENCE_DRIVER = """
import os, sys
from absl import flags, logging
from tfx import v1 as tfx
from tfx.examples.penguin import penguin_pipeline_local as example

flags.FLAGS(sys.argv[:1])
logging.set_verbosity(logging.INFO)
work = sys.argv[1]
name = "penguin_local_keras"
tfx.orchestration.LocalDagRunner().run(example.create_pipeline(
    pipeline_name=name,
    pipeline_root=os.path.join(work, "tfx", "pipelines", name),
    data_root=os.path.join(work, "data"),
    module_file=os.path.join(work, "penguin_utils_keras.py"),
    accuracy_threshold=0.6,
    serving_model_dir=os.path.join(work, "serving_model", name),
    metadata_path=os.path.join(work, "tfx", "metadata", name, "metadata.db"),
    user_provided_schema_path=None,
    enable_tuning=False,
    enable_bulk_inferrer=True,
    examplegen_input_config=None,
    examplegen_range_config_date=None,
    resolver_range_config=None,
    beam_pipeline_args=example._beam_pipeline_args_by_runner["DirectRunner"],
    enable_transform_input_cache=True,
    enable_example_diff=False,
))
"""

SPECIES = {"Adelie": 0, "Chinstrap": 1, "Gentoo": 2}
MEASUREMENTS = {
    "bill_length_mm": "culmen_length_mm",
    "bill_depth_mm": "culmen_depth_mm",
    "flipper_length_mm": "flipper_length_mm",
    "body_mass_g": "body_mass_g",
}


def write_reference_inputs(work_dir: str) -> int:
    """The example's data layout from the same palmerpenguins CSV, and its module file."""
    import importlib.util

    import palmerpenguins

    source = os.path.join(os.path.dirname(palmerpenguins.__file__), "data", "penguins.csv")
    # The example reads <data_root>/labelled/* and, for its BulkInferrer, <data_root>/unlabelled/*
    # (the same rows without the label).
    labelled_dir = os.path.join(work_dir, "data", "labelled")
    unlabelled_dir = os.path.join(work_dir, "data", "unlabelled")
    os.makedirs(labelled_dir, exist_ok=True)
    os.makedirs(unlabelled_dir, exist_ok=True)
    rows = 0
    with (
        open(source, newline="") as raw,
        open(os.path.join(labelled_dir, "penguins_processed.csv"), "w", newline="") as labelled,
        open(
            os.path.join(unlabelled_dir, "penguins_unlabelled.csv"), "w", newline=""
        ) as unlabelled,
    ):
        labelled_writer, unlabelled_writer = csv.writer(labelled), csv.writer(unlabelled)
        labelled_writer.writerow(["species", *MEASUREMENTS.values()])
        unlabelled_writer.writerow(list(MEASUREMENTS.values()))
        for record in csv.DictReader(raw):
            values = [record[column] for column in MEASUREMENTS]
            if "NA" in values:
                continue  # the example's processed data has no missing measurements
            labelled_writer.writerow([SPECIES[record["species"]], *values])
            unlabelled_writer.writerow(values)
            rows += 1
    # Located, not imported: importing it would load all of TFX into this harness process.
    module = importlib.util.find_spec("tfx.examples.penguin.penguin_utils_keras").origin
    shutil.copy(module, os.path.join(work_dir, "penguin_utils_keras.py"))
    return rows


def timed(command: list[str], env: dict, log_path: str) -> float:
    started = time.monotonic()
    with open(log_path, "w") as log:
        result = subprocess.run(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT, check=False
        )
    seconds = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(
            f"command failed ({result.returncode}): {' '.join(command)}; see {log_path}"
        )
    return seconds


def measure(work_dir: str) -> tuple[dict, int]:
    """Wall seconds per (ours|reference, cold|warm), and the reference's row count."""
    ours_dir = os.path.join(work_dir, "ours")
    reference_dir = os.path.join(work_dir, "reference")
    for path in (ours_dir, reference_dir):
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
    env = dict(os.environ, **KERAS_ENV, PYTHONUNBUFFERED="1")
    rows = write_reference_inputs(reference_dir)
    driver = os.path.join(reference_dir, "run_reference.py")
    with open(driver, "w") as handle:
        handle.write(REFERENCE_DRIVER)

    ours = [
        sys.executable,
        os.path.join(PROJECT_ROOT, "pipeline", "run_local.py"),
        "--output_root",
        ours_dir,
    ]
    reference = [sys.executable, driver, reference_dir]
    times = {}
    for name, command in (("ours", ours), ("reference", reference)):
        for phase in ("cold", "warm"):
            log_path = os.path.join(work_dir, f"{name}-{phase}.log")
            print(f"running {name} {phase} ... (log: {log_path})", flush=True)
            times[name, phase] = timed(command, env, log_path)
            print(f"  {times[name, phase]:.1f} s", flush=True)
    return times, rows


TARGETS = (("cold", "cold", "cold", 0.5), ("warm vs cold", "warm", "cold", 0.1))


def run(quick: bool, work_dir: str | None = None) -> list:
    """Rows for `python -m benchmarks all` (the caller skips this one in --quick)."""
    from benchmarks.common import Row

    del quick  # one size only: the whole pipeline on penguins, cold then warm
    times, _ = measure(work_dir or tempfile.mkdtemp(prefix="penguin-bench-"))
    return [
        Row(
            f"penguin pipeline {label} vs TFX example cold",
            times["ours", ours],
            times["reference", reference],
            "s",
            target,
            higher_is_better=False,
        )
        for label, ours, reference, target in TARGETS
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work_dir", default=None, help="default: a new temporary directory")
    args = parser.parse_args(argv)
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="penguin-bench-")
    times, rows = measure(work_dir)
    ref_cold = times["reference", "cold"]
    print(
        f"\nmachine: {os.cpu_count()} CPU core(s); reference on {rows} penguin rows, "
        "ours on all 344 rows of penguins.csv"
    )
    print(f"{'run':<16}{'ours s':>10}{'reference s':>14}{'ratio':>10}{'target':>10}{'':>6}")
    checks = [
        ("cold", times["ours", "cold"], ref_cold, 0.5),
        ("warm vs cold", times["ours", "warm"], ref_cold, 0.1),
        ("warm vs warm", times["ours", "warm"], times["reference", "warm"], None),
    ]
    for label, ours_s, ref_s, target in checks:
        ratio = ours_s / ref_s
        verdict = "" if target is None else ("pass" if ratio <= target else "FAIL")
        target_text = "" if target is None else f"<= {target}"
        print(
            f"{label:<16}{ours_s:>10.1f}{ref_s:>14.1f}{ratio:>10.3f}{target_text:>10}{verdict:>6}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
