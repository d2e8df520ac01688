"""Feature names shared by preprocessing, the model, evaluation and serving.

The pipeline is generic over CSV columns: every column in the schema except the label is a
feature, numeric columns (INT/FLOAT) are z-scored and string columns get a vocabulary. This module
is the one place that says how a raw column name maps to its transformed names and vocabularies.
"""

from __future__ import annotations

# palmerpenguins, the embedded default dataset.
PENGUINS_LABEL_KEY = "species"

# Configuration keys the pipeline passes to preprocessing_fn and run_fn (custom_config).
LABEL_KEY_CONFIG = "label_key"

LABEL_VOCABULARY = "label_vocabulary"
# Token that stands for a missing string value in the vocabularies.
MISSING_TOKEN = "__missing__"

# Signature names of the exported model.
SERVING_SIGNATURE = "serving_default"
TRANSFORM_SIGNATURE = "transform_features"
# Outputs of the serving signature.
PROBABILITIES = "probabilities"
CLASS_IDS = "class_ids"
CLASSES = "classes"


def transformed_name(key: str) -> str:
    return f"{key}_xf"


def missing_indicator_name(key: str) -> str:
    """1.0 where the raw value was missing (and imputed), else 0.0."""
    return f"{key}_missing_xf"


def vocabulary_name(key: str) -> str:
    return f"{key}_vocabulary"


def raw_key(transformed: str) -> str:
    return transformed[: -len("_xf")] if transformed.endswith("_xf") else transformed
