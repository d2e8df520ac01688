"""BaselineModel's keys and spec: the candidate (this run's Trainer model) in, the baseline out
(a Model artifact holding a copy of the newest pushed version that is not the candidate, or
empty on a first run)."""

from __future__ import annotations

from tfx.types import component_spec, standard_artifacts

CANDIDATE_KEY = "candidate"
SERVING_MODEL_DIR_KEY = "serving_model_dir"
BASELINE_KEY = "baseline_model"
# Custom properties of the baseline artifact, for users reading ML Metadata / the KFP UI.
FOUND_PROPERTY = "baseline_found"
VERSION_PROPERTY = "pushed_version"
SOURCE_PROPERTY = "pushed_path"


class BaselineModelSpec(component_spec.ComponentSpec):
    PARAMETERS = {SERVING_MODEL_DIR_KEY: component_spec.ExecutionParameter(type=str)}
    INPUTS = {CANDIDATE_KEY: component_spec.ChannelParameter(type=standard_artifacts.Model)}
    OUTPUTS = {BASELINE_KEY: component_spec.ChannelParameter(type=standard_artifacts.Model)}
