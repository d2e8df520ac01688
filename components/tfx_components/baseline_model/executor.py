"""BaselineModel's executor: copies the newest pushed version that is not the candidate into
the output Model artifact's serving-model folder (where the Evaluator reads a model), or leaves
the artifact empty when there is none. A copy, not a reference: the artifact stays what it was
when evaluated even if the push destination is pruned later."""

from __future__ import annotations

import logging
from typing import Any

from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import io_utils, path_utils

from components import PROGRESS_LOGGER
from components.tfx_components import baseline
from components.tfx_components.baseline_model import spec

progress_log = logging.getLogger(PROGRESS_LOGGER)


def find_baseline(serving_model_dir: str, candidate_uri: str, baseline_uri: str):
    """Writes the baseline under baseline_uri; returns the pushed version copied, or None."""
    candidate_dir = path_utils.serving_model_path(candidate_uri)
    found = baseline.previous_pushed_model(serving_model_dir, candidate_dir)
    fileio.makedirs(baseline_uri)
    if found is not None:
        io_utils.copy_dir(found.path, path_utils.serving_model_dir(baseline_uri))
    return found


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict, output_dict, exec_properties: dict[str, Any]) -> None:  # noqa: N802
        candidate = artifact_utils.get_single_instance(input_dict[spec.CANDIDATE_KEY])
        output = artifact_utils.get_single_instance(output_dict[spec.BASELINE_KEY])
        serving_model_dir = exec_properties[spec.SERVING_MODEL_DIR_KEY]
        found = find_baseline(serving_model_dir, candidate.uri, output.uri)
        output.set_int_custom_property(spec.FOUND_PROPERTY, int(found is not None))
        if found is None:
            progress_log.info("baseline: none pushed yet under %s", serving_model_dir)
            return
        output.set_string_custom_property(spec.VERSION_PROPERTY, found.version)
        output.set_string_custom_property(spec.SOURCE_PROPERTY, found.path)
        progress_log.info("baseline: pushed version %s (%s)", found.version, found.path)
