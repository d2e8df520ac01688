"""The blessing line of a run with the user's --eval_config states that config's thresholds (TFX's
taxi example's BinaryAccuracy on a float label is not the project's regression skill)."""

from __future__ import annotations

import dataclasses

from pipeline import config as config_lib
from pipeline import datasets
from pipeline.local import report
from pipeline.local import summary as run_summary

TAXI_EVAL_CONFIG = """
model_specs { signature_name: "serving_default" label_key: "tips_xf"
              preprocessing_function_names: "transform_features" }
slicing_specs {}
metrics_specs { metrics { class_name: "BinaryAccuracy" threshold {
  value_threshold { lower_bound { value: 0.6 } }
  change_threshold { direction: HIGHER_IS_BETTER absolute { value: -1e-10 } } } } }
metrics_specs { metrics { class_name: "MeanSquaredError" threshold {
  value_threshold { upper_bound { value: 2.5 } } } } }
"""


def _summary(blessed, failures=()):
    return run_summary.RunSummary(
        components=[],
        metrics={},
        blessed=blessed,
        pushed_model=None,
        example_counts={},
        rows_rejected=0,
        inferred_schema_uri=None,
        metadata_path="m",
        blessing_failures=list(failures),
    )


def _config(tmp_path):
    dataset = datasets.user_csv(str(tmp_path), "tips", task="regression")
    config = config_lib.local_config(dataset=dataset, output_root=str(tmp_path))
    user = dataclasses.replace(config.user_code, eval_config=TAXI_EVAL_CONFIG)
    return dataclasses.replace(config, user_code=user)


def test_the_blessing_line_states_the_user_s_eval_config_thresholds(tmp_path):
    config = _config(tmp_path)
    assert report.eval_config_conditions(TAXI_EVAL_CONFIG) == [
        "BinaryAccuracy >= 0.6",
        "MeanSquaredError <= 2.5",
        "no regression against the previous blessed model",
    ]
    assert report.describe_blessing(_summary(True), config) == (
        "yes (BinaryAccuracy >= 0.6, MeanSquaredError <= 2.5, no regression against the "
        "previous blessed model, from --eval_config)"
    )
    below = {
        "metric": "binary_accuracy",
        "value": 0.55,
        "is_diff": False,
        "message": "value 0.55 is below the lower bound 0.6",
    }
    assert report.describe_blessing(_summary(False, [below]), config) == (
        "NO: binary_accuracy: value 0.55 is below the lower bound 0.6 (--eval_config sets it)"
    )
    regressed = {**below, "value": -0.01, "is_diff": True}
    assert "changed by -0.0100 against the previous blessed model" in (
        report.describe_blessing(_summary(False, [regressed]), config)
    )
