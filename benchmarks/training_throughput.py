"""Training throughput per strategy, and whether training is input-bound.

    python -m benchmarks.training_throughput [--work_dir DIR] [--steps 400]

1. Runs the penguin pipeline (or reuses its cache in --work_dir) for transformed shards.
2. Input-bound ratio: step time of the model fed by the real input pipeline (list files,
   interleave over the gzip shards, batched parse, prefetch) / step time fed by one cached
   synthetic batch (`take(1).cache().repeat()`), same model, strategy and global batch. Target
   <= 1.10 (the input pipeline keeps up with training).
3. Examples/s for each strategy on the same data and global batch, each task in fresh processes
   through the same launcher the Trainer uses, and the scaling ratio of 2 workers vs 1. On a
   2-core machine the worker processes share the two cores, so this is a functional check of the
   multi-worker path, not a speed-up measurement.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

from benchmarks import common
from components import KERAS_ENV

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GLOBAL_BATCH = 64
INPUT_BOUND_TARGET = 1.10


def transformed_data(work_dir: str) -> tuple[str, str]:
    env = dict(os.environ, **KERAS_ENV)
    subprocess.run(
        [
            sys.executable,
            os.path.join(PROJECT_ROOT, "pipeline", "run_local.py"),
            "--output_root",
            work_dir,
        ],
        check=True,
        env=env,
        cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL,
    )
    from pipeline.mlmd import connection, records

    store = connection.open_store(os.path.join(work_dir, "penguins-pipeline", "metadata.sqlite"))
    context = store.get_context_by_type_and_name("node", "penguins-pipeline.Transform")
    latest = max(store.get_executions_by_context(context.id), key=lambda e: e.id)
    outputs = records.Store(store).outputs_by_type(latest.id)
    return outputs["Examples"][0].uri, outputs["TransformGraph"][0].uri


def input_bound_ratio(examples_uri: str, transform_graph: str, steps: int, rounds: int = 6) -> dict:
    import tensorflow as tf
    import tensorflow_transform as tft

    from components.ml import inputs, model

    output = tft.TFTransformOutput(transform_graph)
    files = sorted(glob.glob(os.path.join(examples_uri, "Split-train", "*.gz")))
    # The dataset the Trainer builds for these shards (small: records cached after epoch 1).
    real = inputs.make_dataset(
        files,
        output,
        "species",
        GLOBAL_BATCH,
        shuffle=True,
        repeat=True,
        seed=1,
        cache_records=True,
    )
    synthetic = real.take(1).cache().repeat()
    models = {}
    for name in ("synthetic", "real"):
        tf.keras.utils.set_random_seed(1)
        models[name] = model.build_keras_model(output, "species")
    # Every round's milliseconds per step, the two alternating; the fastest of each is compared.
    step_ms, _ = common.alternate_fit_rounds(
        models, {"synthetic": synthetic, "real": real}, steps, rounds, warm=20
    )
    # The input pipeline alone: how fast it can produce batches with no model consuming them.
    iterator = iter(real)
    next(iterator)
    started = time.monotonic()
    for _ in range(steps):
        next(iterator)
    input_only = time.monotonic() - started
    return {
        "input_only_step_ms": 1000 * input_only / steps,
        "real_step_ms": min(step_ms["real"]),
        "synthetic_step_ms": min(step_ms["synthetic"]),
        "ratio": min(step_ms["real"]) / min(step_ms["synthetic"]),
        "round_step_ms": {
            name: [round(ms, 2) for ms in values] for name, values in step_ms.items()
        },
    }


STRATEGY_RUNS = [
    ("one_device", dict(strategy="one_device", per_replica_batch_size=GLOBAL_BATCH)),
    (
        "mirrored, 2 CPU devices",
        dict(strategy="mirrored", cpu_devices=2, per_replica_batch_size=GLOBAL_BATCH // 2),
    ),
    (
        "multi_worker_mirrored, 1 worker",
        dict(strategy="multi_worker_mirrored", workers=1, per_replica_batch_size=GLOBAL_BATCH),
    ),
    (
        "multi_worker_mirrored, 2 workers",
        dict(strategy="multi_worker_mirrored", workers=2, per_replica_batch_size=GLOBAL_BATCH // 2),
    ),
    (
        "parameter_server, 1 worker + 1 ps",
        dict(strategy="parameter_server", workers=1, ps=1, per_replica_batch_size=GLOBAL_BATCH),
    ),
    (
        "parameter_server, 2 workers + 1 ps",
        dict(strategy="parameter_server", workers=2, ps=1, per_replica_batch_size=GLOBAL_BATCH),
    ),
]


def strategy_throughput(examples_uri, transform_graph, steps, work_dir) -> dict[str, dict]:
    from components.training import cluster
    from components.training import loop as training
    from components.training.settings import TrainingConfig

    results = {}
    for name, settings in STRATEGY_RUNS:
        run_dir = os.path.join(work_dir, name.replace(" ", "_").replace(",", ""))
        task = training.TrainTask.from_transform_output(
            examples_uri,
            transform_graph,
            run_dir,
            "species",
            settings=TrainingConfig(train_steps=steps, **settings),
        )
        print(f"  training: {name} ...", flush=True)
        cluster.LocalProcessLauncher(max_restarts=0).run(cluster.ClusterSpec.for_task(task), task)
        with open(os.path.join(task.model_run_dir, training.RESULT_FILE)) as handle:
            result = json.load(handle)
        # Steady state: after the first 20 steps (tracing and warm-up), measured on the chief.
        # Parameter-server training has no batch-level callbacks: whole fit() time there.
        steady = result["steady_examples_per_second"]
        result["examples_per_second"] = steady or (
            result["steps_run"] * GLOBAL_BATCH / result["train_seconds"]
        )
        result["measured"] = "steady state" if steady else "whole fit(), warm-up included"
        results[name] = result
    return results


def run(quick: bool, work_dir: str | None = None) -> list:
    """Rows for `python -m benchmarks all`; --quick: fewer steps and no per-strategy runs."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    work_dir = work_dir or tempfile.mkdtemp(prefix="train-bench-")
    steps = 200 if quick else 1000
    examples_uri, transform_graph = transformed_data(work_dir)
    bound = input_bound_ratio(examples_uri, transform_graph, steps)
    rows = [
        common.Row(
            "penguin step time, real input / cached batch",
            bound["real_step_ms"],
            bound["synthetic_step_ms"],
            "ms/step",
            INPUT_BOUND_TARGET,
            higher_is_better=False,
            note=f"fastest of 6 rounds each; every round's ms/step: {bound['round_step_ms']}",
        ),
        common.Row(
            "penguin input pipeline vs model rate",
            GLOBAL_BATCH * 1000 / bound["input_only_step_ms"],
            GLOBAL_BATCH * 1000 / bound["synthetic_step_ms"],
            "examples/s",
            2.0,
        ),
    ]
    if not quick:
        for name, result in strategy_throughput(
            examples_uri, transform_graph, steps, work_dir
        ).items():
            rows.append(
                common.Row(
                    f"training {name}",
                    result["examples_per_second"],
                    None,
                    "examples/s",
                    note=result["measured"],
                )
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="train-bench-")
    print(f"transformed penguin shards (pipeline under {work_dir}) ...", flush=True)
    examples_uri, transform_graph = transformed_data(work_dir)

    print("input-bound ratio (one_device, in process) ...", flush=True)
    bound = input_bound_ratio(examples_uri, transform_graph, args.steps)
    print("examples/s per strategy ...", flush=True)
    throughput = strategy_throughput(examples_uri, transform_graph, args.steps, work_dir)

    print(
        f"\nmachine: {os.cpu_count()} CPU core(s); global batch {GLOBAL_BATCH}; "
        f"{args.steps} steps per run"
    )
    verdict = "pass" if bound["ratio"] <= INPUT_BOUND_TARGET else "FAIL"
    print(
        f"input-bound ratio: real {bound['real_step_ms']:.2f} ms/step / synthetic "
        f"{bound['synthetic_step_ms']:.2f} ms/step = {bound['ratio']:.3f} "
        f"(target <= {INPUT_BOUND_TARGET}) {verdict}"
    )
    print(
        f"input pipeline alone: {bound['input_only_step_ms']:.2f} ms/batch = "
        f"{GLOBAL_BATCH * 1000 / bound['input_only_step_ms']:.0f} examples/s, "
        f"{bound['synthetic_step_ms'] / bound['input_only_step_ms']:.1f}x the model's "
        "consumption rate"
    )
    print(f"\n{'strategy':<38}{'replicas':>9}{'examples/s':>12}{'fit s':>8}  measured")
    for name, result in throughput.items():
        print(
            f"{name:<38}{result['replicas']:>9}{result['examples_per_second']:>12.0f}"
            f"{result['train_seconds']:>8.1f}  {result['measured']}"
        )
    for kind in ("multi_worker_mirrored", "parameter_server"):
        one = next(r for n, r in throughput.items() if n.startswith(kind) and "1 worker" in n)
        two = next(r for n, r in throughput.items() if n.startswith(kind) and "2 workers" in n)
        print(
            f"scaling {kind}: 2 workers / 1 worker = "
            f"{two['examples_per_second'] / one['examples_per_second']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
