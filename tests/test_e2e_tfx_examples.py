"""TFX's own Keras modules from the installed tfx wheel, unchanged, as docs/own-model.md runs
them: penguin_utils_keras.py on TFX's processed penguin data and taxi_utils_native_keras.py on
the taxi CSV beside it in the wheel, each with the EvalConfig of its TFX pipeline and TFX's
small step counts; each blessed and pushed, and an unchanged rerun fully cached."""

from __future__ import annotations

import csv
import glob
import os
import re

import pytest

from tests.docs import pages

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

PAGE = "docs/own-model.md"
# Literal strings: tests/docs/test_doc_commands.py reads which page commands a test runs.
BLOCK = "TFX=$(python -c 'import os, tfx; print(os.path.dirname(tfx.__file__))')/examples"
PENGUIN = "--module_file $TFX/penguin/penguin_utils_keras.py"
TAXI = "--module_file $TFX/chicago_taxi_pipeline/taxi_utils_native_keras.py"

# The EvalConfigs of tfx/examples/penguin/penguin_pipeline_local.py (accuracy_threshold 0.6, as
# its __main__ passes) and chicago_taxi_pipeline/taxi_pipeline_native_keras.py, as text protos.
EVAL_CONFIG = """
model_specs {
  signature_name: "serving_default"
  label_key: "%(label)s"
  preprocessing_function_names: "transform_features"
}
slicing_specs {}
metrics_specs {
  metrics {
    class_name: "%(metric)s"
    threshold {
      value_threshold { lower_bound { value: 0.6 } }
      change_threshold { direction: HIGHER_IS_BETTER absolute { value: -1e-10 } }
    }
  }
}
"""
# TFX's feature-engineering tutorial's way (Transform(materialize=False)): the run_fn reads the
# raw examples and applies the transform graph itself; penguin_utils_keras's model and signatures.
RAW_EXAMPLES_MODULE = """
import tensorflow as tf
import tensorflow_transform as tft
from tfx.examples.penguin import penguin_utils_base as base
from tfx.examples.penguin import penguin_utils_keras as keras_utils
from tfx_bsl.public import tfxio

preprocessing_fn = base.preprocessing_fn


def _dataset(files, data_accessor, tf_transform_output, batch_size):
    layer = tf_transform_output.transform_features_layer()

    def transform(raw):
        transformed = layer(raw)
        label = transformed.pop(base.transformed_name("species"))
        return transformed, label

    return (
        data_accessor.tf_dataset_factory(
            files,
            tfxio.TensorFlowDatasetOptions(batch_size=batch_size),
            tf_transform_output.raw_metadata.schema,
        )
        .map(transform)
        .repeat()
    )


def run_fn(fn_args):
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
    train = _dataset(fn_args.train_files, fn_args.data_accessor, tf_transform_output, 20)
    evaluation = _dataset(fn_args.eval_files, fn_args.data_accessor, tf_transform_output, 10)
    model = keras_utils._make_keras_model(keras_utils._get_hyperparameters())
    model.fit(train, steps_per_epoch=fn_args.train_steps, validation_data=evaluation,
              validation_steps=fn_args.eval_steps)
    signatures = base.make_serving_signatures(model, tf_transform_output)
    tf.saved_model.save(model, fn_args.serving_model_dir, signatures=signatures)
"""
SPECIES = {"Adelie": 0, "Chinstrap": 1, "Gentoo": 2}
# palmerpenguins' columns -> TFX's processed data's.
MEASUREMENTS = {
    "bill_length_mm": "culmen_length_mm",
    "bill_depth_mm": "culmen_depth_mm",
    "flipper_length_mm": "flipper_length_mm",
    "body_mass_g": "body_mass_g",
}


def tfx_examples() -> str:
    import tfx

    return os.path.join(os.path.dirname(tfx.__file__), "examples")


def write_penguins_processed(directory) -> int:
    """TFX's penguins_processed.csv layout (tfx/examples/penguin/data/labelled/ in the TFX
    repository; not in the wheel): the rows with all four measurements, each scaled to [0, 1],
    and the species as 0, 1, 2; from the palmerpenguins CSV."""
    import palmerpenguins

    source = os.path.join(os.path.dirname(palmerpenguins.__file__), "data", "penguins.csv")
    with open(source, newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if "NA" not in [r[c] for c in MEASUREMENTS]]
    low = {c: min(float(r[c]) for r in rows) for c in MEASUREMENTS}
    high = {c: max(float(r[c]) for r in rows) for c in MEASUREMENTS}
    directory.mkdir(parents=True)
    with open(directory / "penguins_processed.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["species", *MEASUREMENTS.values()])
        for r in rows:
            scaled = [round((float(r[c]) - low[c]) / (high[c] - low[c]), 6) for c in MEASUREMENTS]
            writer.writerow([SPECIES[r["species"]], *scaled])
    return len(rows)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    box = pages.Sandbox(tmp_path_factory.mktemp("tfx-examples"))
    (box.tmp / "penguin_eval.pbtxt").write_text(
        EVAL_CONFIG % {"label": "species_xf", "metric": "SparseCategoricalAccuracy"}
    )
    (box.tmp / "taxi_eval.pbtxt").write_text(
        EVAL_CONFIG % {"label": "tips_xf", "metric": "BinaryAccuracy"}
    )
    return box


def _runs(sandbox, module_option: str, values: dict) -> tuple:
    """The page's block: TFX= and the module's command, twice (the rerun unchanged)."""
    block = pages.block(PAGE, BLOCK)
    [tfx_line] = [c for c in block if c.text.startswith("TFX=")]
    [run] = [c for c in block if module_option in c.text]
    return sandbox.run([tfx_line, run], values), sandbox.run([tfx_line, run], values)


def _check(first, second, pipeline: str, metric: str, output_root) -> None:
    assert first.returncode == 0, pages.explain(first)
    assert "9 component(s) executed, 0 reused from cache" in first.stdout
    # The module ran from the wheel, not a copy of it.
    assert re.search(r"module \S*site-packages/tfx/examples/\S+\.py: 1 file\(s\)", first.stdout)
    blessed = re.search(r"blessed:\s+(.*)", first.stdout)
    assert blessed and blessed.group(1).startswith(f"yes ({metric} >= 0.6, no regression"), (
        first.stdout
    )
    pushed = glob.glob(os.path.join(output_root, pipeline, "serving_model", "*", "saved_model.pb"))
    assert len(pushed) == 1, first.stdout
    assert re.search(r"pushed model:\s+\S+", first.stdout)
    # Unchanged: every component reused, the same model still served.
    assert second.returncode == 0, pages.explain(second)
    assert "0 component(s) executed, 9 reused from cache" in second.stdout, second.stdout
    assert not re.search(r"\) \w+ executed in", second.stdout), second.stdout
    assert (
        glob.glob(os.path.join(output_root, pipeline, "serving_model", "*", "saved_model.pb"))
        == pushed
    )


def test_tfx_penguin_utils_keras_unchanged_is_blessed_pushed_then_cached(sandbox):
    module = os.path.join(tfx_examples(), "penguin", "penguin_utils_keras.py")
    assert os.path.exists(module)
    rows = write_penguins_processed(sandbox.tmp / "penguin")
    assert rows == 342
    first, second = _runs(sandbox, PENGUIN, {"DIR": str(sandbox.tmp / "penguin")})
    _check(first, second, "penguin-pipeline", "SparseCategoricalAccuracy", sandbox.output_root)
    assert "Your code: Trainer: run_fn penguin_utils_keras.run_fn (TFX's FnArgs)" in first.stdout


def test_tfx_taxi_utils_native_keras_unchanged_is_blessed_pushed_then_cached(sandbox):
    data = os.path.join(tfx_examples(), "chicago_taxi_pipeline", "data", "simple", "data.csv")
    assert os.path.exists(data)
    before = sorted(os.listdir(os.path.dirname(data)))
    first, second = _runs(sandbox, TAXI, {})
    _check(first, second, "taxi-pipeline", "BinaryAccuracy", sandbox.output_root)
    assert "run_fn taxi_utils_native_keras.run_fn (TFX's FnArgs)" in first.stdout
    # pickup_census_tract (one value in 15,002 rows) reached the module's preprocessing_fn.
    assert "pickup_census_tract" in first.stdout
    assert sorted(os.listdir(os.path.dirname(data))) == before  # nothing written into the wheel


def test_no_transform_materialize_a_run_fn_applies_the_transform_graph_itself(sandbox, tmp_path):
    """--no_transform_materialize: Transform writes the transform graph only; the Trainer's
    run_fn gets ExampleGen's raw examples, transforms them itself, and is blessed."""
    import subprocess
    import sys

    data = tmp_path / "penguin"
    write_penguins_processed(data)
    module = tmp_path / "raw_examples_module.py"
    module.write_text(RAW_EXAMPLES_MODULE)
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "pipeline/run_local.py", "--data", str(data), "--label", "species",
         "--module_file", str(module), "--eval_config", str(sandbox.tmp / "penguin_eval.pbtxt"),
         "--train_steps", "100", "--eval_steps", "5", "--no_transform_materialize",
         "--output_root", str(out)],
        capture_output=True, text=True, cwd=pages.PROJECT_ROOT, timeout=1200, check=False,
    )  # fmt: skip
    assert result.returncode == 0, pages.explain(result)
    assert "blessed:       yes (SparseCategoricalAccuracy >= 0.6" in result.stdout
    transform = out / "penguin-pipeline" / "pipeline_root" / "Transform"
    outputs = os.listdir(transform)
    assert "transform_graph" in outputs and "transformed_examples" not in outputs, outputs
