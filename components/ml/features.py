"""Feature names shared by preprocessing, the model, evaluation and serving.

The pipeline is generic over CSV columns: every column in the schema except the label is a
feature, numeric columns (INT/FLOAT) are z-scored and string columns get a vocabulary. This module
is the one place that says how a raw column name maps to its transformed names and vocabularies.
"""

from __future__ import annotations

# palmerpenguins, the embedded default dataset.
PENGUINS_LABEL_KEY = "species"

# Image classification: the features the image ExampleGen writes per file. The label is the class
# name (the sub-folder); label_id is its index in the sorted folder names.
IMAGE_KEY = "image"
IMAGE_LABEL_KEY = "class_name"
IMAGE_LABEL_ID_KEY = "label"
IMAGE_PATH_KEY = "path"
IMAGE_HEIGHT_KEY = "height"
IMAGE_WIDTH_KEY = "width"

# Configuration keys the pipeline passes to preprocessing_fn and run_fn (custom_config).
LABEL_KEY_CONFIG = "label_key"
# "classification" (label vocabulary, softmax head) or "regression" (z-scored label, linear head).
TASK_CONFIG = "task"
CLASSIFICATION, REGRESSION = "classification", "regression"
# Text columns read as timestamps (a list of names): each becomes three numeric features
# (components.ml.timestamps).
TIMESTAMP_COLUMNS_CONFIG = "timestamp_columns"
# Images: side of the square the transform graph resizes to, and the model architecture.
IMAGE_SIZE_CONFIG = "image_size"
IMAGE_MODEL_CONFIG = "image_model"
# Image architectures the Trainer builds (components.ml.model.build_image_model).
IMAGE_MODELS = ("small_cnn", "mobilenet_v2")

LABEL_VOCABULARY = "label_vocabulary"
# The label vocabulary with each class's count over the training split (`COUNT CLASS` lines):
# what --class_weight balanced weighs the classes by.
LABEL_COUNTS = "label_vocabulary_counts"
# Token that stands for a missing string value in the vocabularies.
MISSING_TOKEN = "__missing__"

# Signature names of the exported model.
SERVING_SIGNATURE = "serving_default"
TRANSFORM_SIGNATURE = "transform_features"
# The transformed label only: the Evaluator's preprocessing function (pipeline.builder), so that
# TFMA keeps and unbatches one transformed column per example, not every one.
TRANSFORM_LABEL_SIGNATURE = "transform_label"
# Outputs of the serving signature.
PROBABILITIES = "probabilities"
CLASS_IDS = "class_ids"
CLASSES = "classes"
# Regression outputs: the prediction in the label's units, and z-scored by the training label's
# mean and standard deviation (the units the model is trained in; 0 = the training mean).
PREDICTION = "prediction"
NORMALIZED_PREDICTION = "prediction_xf"
# serving_default without the class names: TFX's BulkInferrer (tfx_bsl's RunInference) cannot
# log a string output of one value per row (its _PredictModelHandler reads `.dtype` of each row's
# value, which a Python bytes object lacks); the names are Transform's label vocabulary, in the
# model's assets, indexed by class_ids.
BULK_INFERENCE_SIGNATURE = "serving_numeric"
# Second serving signature of image models: raw encoded image bytes (JPEG or PNG) in.
IMAGE_SERVING_SIGNATURE = "serving_images"


def transformed_name(key: str) -> str:
    return f"{key}_xf"


def missing_indicator_name(key: str) -> str:
    """1.0 where the raw value was missing (and imputed), else 0.0."""
    return f"{key}_missing_xf"


def vocabulary_name(key: str) -> str:
    return f"{key}_vocabulary"


def raw_key(transformed: str) -> str:
    return transformed[: -len("_xf")] if transformed.endswith("_xf") else transformed
