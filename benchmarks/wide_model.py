"""The Trainer's step time on wide inputs: the built-in tabular model, before and after issue 30.

    python -m benchmarks.wide_model [--quick] [--columns 10 40 80 160] [--batch 32]

For each column count, half vocabulary features (8 values + the OOV bucket, int64 indices as
Transform writes them) and half float features: the model's input layer as it was
(benchmarks.per_column_model: a Reshape and a one-hot CategoryEncoding per column) and as it is
(components.ml.model.tabular_inputs: one stack and one multi-hot for every vocabulary column),
the same MLP head, fed one constant in-memory batch so that only the model's step is timed;
and the model as it is compiled with the steps per call the Trainer chooses
(settings.MAX_AUTO_STEPS_PER_EXECUTION: a call of the compiled step pays a fixed cost, the
iterator's element, one tensor per feature, matched against the traced function). fit() rounds
alternate between the three (common.alternate_fit_rounds); each keeps its fastest. Rows: ms per
step after vs before per size, and the growth from the smallest size to the largest.
"""

from __future__ import annotations

import argparse
import sys

from benchmarks import common

FULL_COLUMNS = (10, 40, 80, 160)
QUICK_COLUMNS = (10, 160)
VOCABULARY = 9  # 8 values + 1 OOV bucket
BATCH = 32  # the batch the Trainer chooses for tables up to 6,400 training rows
STEPS, WARM, ROUNDS = 200, 20, 3
CLASSES = ("a", "b", "c")
AFTER_PER_CALL = "after, steps per call as the Trainer chooses"


def model_inputs(columns: int):
    import tensorflow as tf

    from components.ml import features, model
    from components.training.settings import TrainingConfig

    text = [f"text_{i:03d}_xf" for i in range(columns // 2)]
    numbers = [f"number_{i:03d}_xf" for i in range(columns - columns // 2)]
    spec = {name: tf.io.FixedLenFeature([], tf.int64) for name in text}
    spec.update({name: tf.io.FixedLenFeature([], tf.float32) for name in numbers})
    return model.ModelInputs(
        feature_spec=spec,
        label_key="label_xf",
        task=features.CLASSIFICATION,
        class_names=CLASSES,
        vocabulary_sizes={name: VOCABULARY for name in text},
        image_shape=None,
        settings=TrainingConfig(),
        custom_config={},
        tf_transform_output=None,
    )


def constant_batch(inputs, batch: int, seed: int = 0):
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    batch_features = {
        name: rng.integers(0, VOCABULARY, batch)
        if spec.dtype == tf.int64
        else rng.standard_normal(batch).astype(np.float32)
        for name, spec in inputs.feature_spec.items()
    }
    labels = rng.integers(0, len(CLASSES), batch)
    return tf.data.Dataset.from_tensors((batch_features, labels)).repeat()


def measure(columns: int, batch: int, rounds: int, steps: int) -> dict:
    """{"before", "after", AFTER_PER_CALL: fastest ms per step (wall), and CPU ms of that
    round}."""
    import dataclasses

    from benchmarks import per_column_model
    from components.ml import model
    from components.training.settings import MAX_AUTO_STEPS_PER_EXECUTION, TrainingConfig

    inputs = model_inputs(columns)
    per_call = dataclasses.replace(
        inputs, settings=TrainingConfig(steps_per_execution=MAX_AUTO_STEPS_PER_EXECUTION)
    )
    models = {
        "before": per_column_model.per_column_model(inputs),
        "after": model.tabular_model(inputs),
        AFTER_PER_CALL: model.tabular_model(per_call),
    }
    data = {name: constant_batch(inputs, batch) for name in models}
    wall, cpu = common.alternate_fit_rounds(models, data, steps, rounds, WARM)
    out = {}
    for name in models:
        best = min(range(rounds), key=lambda i: wall[name][i])
        out[name] = {"ms": wall[name][best], "cpu_ms": cpu[name][best]}
    return out


def run(
    quick: bool,
    work_dir: str | None = None,
    columns: tuple[int, ...] | None = None,
    batch: int = BATCH,
) -> list[common.Row]:
    columns = tuple(columns or (QUICK_COLUMNS if quick else FULL_COLUMNS))
    rounds, steps = (2, STEPS // 2) if quick else (ROUNDS, STEPS)
    measured = {}
    for count in columns:
        measured[count] = measure(count, batch, rounds, steps)
        print(f"  wide_model: {count} columns: {measured[count]}", flush=True)
    out = []
    for count in columns:
        before = measured[count]["before"]
        for side in ("after", AFTER_PER_CALL):
            after = measured[count][side]
            out.append(
                common.Row(
                    f"Trainer step, {count} columns, batch {batch}, {side} vs before",
                    after["ms"],
                    before["ms"],
                    "ms/step",
                    higher_is_better=False,
                    note=f"CPU ms/step: after {after['cpu_ms']:.2f}, before {before['cpu_ms']:.2f}",
                )
            )
    smallest, largest = min(columns), max(columns)
    if largest > smallest:
        for side in (AFTER_PER_CALL, "after", "before"):
            out.append(
                common.Row(
                    f"Trainer step growth {side}: {largest} vs {smallest} columns",
                    measured[largest][side]["ms"],
                    measured[smallest][side]["ms"],
                    "ms/step",
                    higher_is_better=False,
                )
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"only {QUICK_COLUMNS} columns")
    parser.add_argument("--columns", type=int, nargs="*", default=None)
    parser.add_argument("--batch", type=int, default=BATCH)
    args = parser.parse_args(argv)
    rows = run(args.quick, None, tuple(args.columns or ()) or None, args.batch)
    print(common.format_table(rows))
    return 0 if all(row.passed is not False for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
