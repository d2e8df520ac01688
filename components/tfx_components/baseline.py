"""Resolver strategy for the Evaluator's baseline: the latest blessed model *before* the candidate.

TFX's LatestBlessedModelStrategy returns the latest blessed model, which on a rerun with nothing
changed is the candidate itself (the Trainer's cached output). The Evaluator's inputs then differ
from the first run (baseline present vs. absent), so Evaluator and Pusher run again and push the
same model twice. Comparing a candidate against an earlier model is what a regression check
means, and it keeps an unchanged rerun fully cached.
"""

from __future__ import annotations

from tfx import types
from tfx.dsl.components.common import resolver

CANDIDATE_KEY = "candidate"
MODEL_KEY = "model"
MODEL_BLESSING_KEY = "model_blessing"
# Custom properties the Evaluator writes on ModelBlessing artifacts.
_CURRENT_MODEL_ID = "current_model_id"
_BLESSED = "blessed"


def previous_blessed_model(
    candidates: list[types.Artifact],
    models: list[types.Artifact],
    blessings: list[types.Artifact],
) -> tuple[list[types.Artifact], list[types.Artifact]]:
    """(model, blessing) of the newest blessed model older than the candidate, or ([], [])."""
    blessed = {
        blessing.get_int_custom_property(_CURRENT_MODEL_ID): blessing
        for blessing in blessings
        if blessing.get_int_custom_property(_BLESSED) == 1
    }
    newest_allowed = min((c.id for c in candidates), default=None)
    for model in sorted(models, key=lambda m: m.id, reverse=True):
        if newest_allowed is not None and model.id >= newest_allowed:
            continue
        if model.id in blessed:
            return [model], [blessed[model.id]]
    return [], []


class PreviousBlessedModelStrategy(resolver.ResolverStrategy):
    """Inputs: candidate (this run's Trainer model), model and model_blessing (all of them)."""

    def resolve_artifacts(self, store, input_dict):
        model, blessing = previous_blessed_model(
            list(input_dict.get(CANDIDATE_KEY, [])),
            list(input_dict.get(MODEL_KEY, [])),
            list(input_dict.get(MODEL_BLESSING_KEY, [])),
        )
        return {
            CANDIDATE_KEY: list(input_dict.get(CANDIDATE_KEY, [])),
            MODEL_KEY: model,
            MODEL_BLESSING_KEY: blessing,
        }
