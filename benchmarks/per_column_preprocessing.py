"""The reference of benchmarks.wide_transform and of the equivalence tests: the CSV
preprocessing_fn as it was before issue 30, one tf.Transform analyzer per column (a vocabulary
per string column, a mean and a variance per numeric column). Not used by the pipeline; the
pipeline's own is components.ml.preprocessing, which computes the same features with a few
analyzers in all. Kept unchanged so that "before" can be measured and compared. What it computes:

- numeric columns: missing values imputed with the training mean, then z-scored; a 0/1
  missing-indicator feature is added for columns the schema allows to be missing;
- string columns: vocabulary (missing -> a reserved token, unseen -> one OOV bucket);
- the label (custom_config['label_key']): for classification (custom_config['task'], the
  default) a vocabulary of class names (numbers as their text), index as the target; for
  regression the number z-scored with the training mean and deviation (serving turns the
  prediction back into the label's units).
Every output is a dense [batch] tensor. Rows without a label never get here (ExampleGen
rejects them).
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_transform as tft

from components.ml import features

NUM_OOV_BUCKETS = 1


def _dense_with_presence(value, default) -> tuple[tf.Tensor, tf.Tensor | None]:
    """[batch] values with `default` where missing, and a presence mask (None: never missing)."""
    if isinstance(value, tf.SparseTensor):
        dense = tft.sparse_tensor_to_dense_with_shape(value, [None, 1], default_value=default)
        present_sparse = tf.SparseTensor(
            value.indices, tf.ones_like(value.values, dtype=tf.bool), value.dense_shape
        )
        present = tft.sparse_tensor_to_dense_with_shape(
            present_sparse, [None, 1], default_value=False
        )
        return tf.squeeze(dense, axis=1), tf.squeeze(present, axis=1)
    if value.shape.rank == 2:
        value = tf.squeeze(value, axis=1)
    return value, None


# tf.Transform traces this function several times; it has no data-dependent Python control flow,
# so AutoGraph's source conversion (of it and of every tft/tf function it calls) is pure cost.
@tf.autograph.experimental.do_not_convert
def preprocessing_fn(inputs: dict, custom_config: dict) -> dict:
    label_key = custom_config[features.LABEL_KEY_CONFIG]
    task = custom_config.get(features.TASK_CONFIG, features.CLASSIFICATION)
    if label_key not in inputs:
        raise ValueError(
            f"label column {label_key!r} is not in the schema's features {sorted(inputs)}"
        )
    if task not in (features.CLASSIFICATION, features.REGRESSION):
        raise ValueError(f"task must be classification or regression, got {task!r}")
    outputs = {}
    for key, value in sorted(inputs.items()):
        if key == label_key:
            outputs[features.transformed_name(key)] = _label(key, value, task)
            continue
        if value.dtype == tf.string:
            dense, _ = _dense_with_presence(value, features.MISSING_TOKEN)
            outputs[features.transformed_name(key)] = tft.compute_and_apply_vocabulary(
                dense,
                num_oov_buckets=NUM_OOV_BUCKETS,
                vocab_filename=features.vocabulary_name(key),
            )
            continue
        numeric = tf.cast(value.values if isinstance(value, tf.SparseTensor) else value, tf.float32)
        dense, present = _dense_with_presence(
            tf.SparseTensor(value.indices, numeric, value.dense_shape)
            if isinstance(value, tf.SparseTensor)
            else numeric,
            0.0,
        )
        if present is None:
            outputs[features.transformed_name(key)] = tft.scale_to_z_score(dense)
            continue
        outputs[features.missing_indicator_name(key)] = 1.0 - tf.cast(present, tf.float32)
        outputs[features.transformed_name(key)] = _impute_and_z_score(numeric, dense, present)
    return outputs


def _label(key: str, value, task: str) -> tf.Tensor:
    """Class index (vocabulary of names) or z-scored number."""
    if task == features.REGRESSION:
        if value.dtype == tf.string:
            raise ValueError(
                f"label column {key!r} is text; regression needs a numeric label column"
            )
        values = value.values if isinstance(value, tf.SparseTensor) else value
        numeric = tf.cast(values, tf.float32)
        if isinstance(value, tf.SparseTensor):
            numeric = tf.SparseTensor(value.indices, numeric, value.dense_shape)
        dense, _ = _dense_with_presence(numeric, 0.0)
        return tft.scale_to_z_score(dense)
    if value.dtype != tf.string:
        # Integer-coded classes (0/1, ratings): their text is the class name.
        values = value.values if isinstance(value, tf.SparseTensor) else value
        text = tf.strings.as_string(values, shortest=values.dtype.is_floating)
        value = (
            tf.SparseTensor(value.indices, text, value.dense_shape)
            if isinstance(value, tf.SparseTensor)
            else text
        )
    dense, _ = _dense_with_presence(value, features.MISSING_TOKEN)
    return tft.compute_and_apply_vocabulary(dense, vocab_filename=features.LABEL_VOCABULARY)


def _impute_and_z_score(observed: tf.Tensor, dense: tf.Tensor, present: tf.Tensor) -> tf.Tensor:
    """Missing values imputed with the mean of the observed ones, then z-scored over the imputed
    column, with the statistics of one analysis pass: imputing the mean leaves the mean as it
    is and adds nothing to the squared deviations, so over N rows of which a fraction p is
    observed, var(imputed) = p * var(observed). (Z-scoring the imputed tensor directly would
    make tf.Transform read the data twice: the mean first, then the variance of the result.)"""
    mean, observed_var = tft.mean(observed), tft.var(observed)
    present_fraction = tft.mean(tf.cast(present, tf.float32))
    variance = observed_var * present_fraction
    centered = tf.where(present, dense, mean) - mean
    # As tft.scale_to_z_score: a constant column is only centred.
    return tf.where(variance > 0, centered / tf.sqrt(tf.maximum(variance, 1e-30)), centered)
