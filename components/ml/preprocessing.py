"""tf.Transform preprocessing_fn, generic over the columns of a CSV schema.

- numeric columns: missing values imputed with the training mean, then z-scored; a 0/1
  missing-indicator feature is added for columns the schema allows to be missing;
- string columns: vocabulary (missing -> a reserved token, unseen -> one OOV bucket);
- the label (custom_config['label_key']): for classification (custom_config['task'], the
  default) a vocabulary of class names (numbers as their text), index as the target; for
  regression the number z-scored with the training mean and deviation (serving turns the
  prediction back into the label's units).
Every output is a dense [batch] tensor. Rows without a label never get here (ExampleGen
rejects them).

The analyzers do not grow with the columns: all numeric columns (the regression label with them)
are stacked into one [batch, columns] tensor whose per-column statistics come from one
`tft.mean` and one `tft.var` (reduce_instance_dims=False; tf.Transform packs the two into one
combine), and every string column's vocabulary, the label's included, comes from one analyzer
(components.ml.vocabularies). Missing indicators need no analyzer. Nor do the transforms grow
with the columns: the features' z-scores are computed on their stacked tensor at once, and every
text feature is looked up in one table (a table per column was most of a wide table's Transform
time); the label has its own table and statistics, so no feature depends on it. The features,
their names, dtypes, schema domains and vocabulary files are those of one analyzer per column
(benchmarks/per_column_preprocessing.py, the reference).
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_transform as tft
from tensorflow_transform import schema_inference

from components.ml import features, vocabularies

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
    label = inputs[label_key]
    if task == features.REGRESSION and label.dtype == tf.string:
        raise ValueError(
            f"label column {label_key!r} is text; regression needs a numeric label column"
        )
    # name -> dense [batch] value: text columns (and a class label) get a vocabulary, numeric
    # columns (and a regression label) are z-scored; presence None: never missing.
    text: dict[str, tf.Tensor] = {}
    numeric: dict[str, tuple[tf.Tensor, tf.Tensor | None]] = {}
    for key, value in sorted(inputs.items()):
        if key == label_key:
            if task == features.REGRESSION:
                # A label is never missing (ExampleGen rejects such rows): no indicator.
                numeric[key] = (_dense_with_presence(_as_float(value), 0.0)[0], None)
            else:
                text[key] = _dense_with_presence(_class_names(value), features.MISSING_TOKEN)[0]
        elif value.dtype == tf.string:
            text[key] = _dense_with_presence(value, features.MISSING_TOKEN)[0]
        else:
            numeric[key] = _dense_with_presence(_as_float(value), 0.0)
    outputs = {}
    for key, z_score in _impute_and_z_score(numeric, label_key).items():
        outputs[features.transformed_name(key)] = z_score
        present = numeric[key][1]
        if present is not None and key != label_key:
            outputs[features.missing_indicator_name(key)] = 1.0 - tf.cast(present, tf.float32)
    outputs.update(_vocabulary_indices(text, label_key))
    return outputs


def _as_float(value):
    """The numeric column as float32, sparse or dense as it came."""
    if isinstance(value, tf.SparseTensor):
        return tf.SparseTensor(value.indices, tf.cast(value.values, tf.float32), value.dense_shape)
    return tf.cast(value, tf.float32)


def _class_names(value):
    """A classification label as text: integer-coded classes (0/1, ratings) are named by their
    digits."""
    if value.dtype == tf.string:
        return value
    values = value.values if isinstance(value, tf.SparseTensor) else value
    text = tf.strings.as_string(values, shortest=values.dtype.is_floating)
    if isinstance(value, tf.SparseTensor):
        return tf.SparseTensor(value.indices, text, value.dense_shape)
    return text


def _vocabulary_indices(text: dict[str, tf.Tensor], label_key: str) -> dict[str, tf.Tensor]:
    """Every text column's index in its own vocabulary, all vocabularies from one analyzer:
    features get one OOV bucket (index = vocabulary size), looked up together in one table
    (vocabularies.apply_column_vocabularies); the label none (-1 if unseen), in a table of its
    own, so that no feature depends on the label (serving feeds none)."""
    if not text:
        return {}
    keys = list(text)
    names = [
        features.LABEL_VOCABULARY if key == label_key else features.vocabulary_name(key)
        for key in keys
    ]
    # The label's vocabulary also with its counts over the analyzed (train) split: the class
    # weights of --class_weight balanced (components.training.loop).
    counted = [index for index, key in enumerate(keys) if key == label_key]
    indexed = [index for index, key in enumerate(keys) if key != label_key]
    analyzed = vocabularies.column_vocabularies(list(text.values()), names, counted, indexed)
    outputs = {}
    for index in counted:
        outputs[features.transformed_name(label_key)] = tft.apply_vocabulary(
            text[label_key], analyzed.paths[index], default_value=-1
        )
    if indexed:
        indices, sizes = vocabularies.apply_column_vocabularies(
            [text[keys[index]] for index in indexed], analyzed.lookup_path
        )
        for number, (index, column) in enumerate(zip(indexed, tf.unstack(indices, axis=1))):
            # The schema's int_domain, as tft.apply_vocabulary records it: [0, size] (the OOV
            # bucket included).
            schema_inference.set_tensor_schema_override(
                column, tf.constant(0, tf.int64), sizes[number]
            )
            outputs[features.transformed_name(keys[index])] = column
    return outputs


def _impute_and_z_score(
    columns: dict[str, tuple[tf.Tensor, tf.Tensor | None]], label_key: str
) -> dict[str, tf.Tensor]:
    """Every numeric column with its missing values imputed by the mean of its observed ones,
    then z-scored over the imputed column, from the statistics of one analysis pass over all
    columns at once: imputing the mean leaves the mean as it is and adds nothing to the squared
    deviations, so over N rows of which a fraction p is observed, var(imputed) = p *
    var(observed). (Z-scoring the imputed tensor directly would make tf.Transform read the data
    twice: the mean first, then the variance of the result.)

    The columns are stacked into one [batch, columns] tensor with NaN where a value is missing,
    which tft.mean and tft.var leave out (reduce_instance_dims=False: per-column statistics);
    the observed fractions are the means of the presence columns appended to the same tensor.
    A column that is never missing has p = 1: its z-score is tft.scale_to_z_score's.

    The z-scores of the features are computed on the same stack at once and split into columns
    (a handful of ops whatever the column count); a regression label is stacked apart and
    z-scored on its own, so that no feature depends on the label (serving feeds none)."""
    if not columns:
        return {}
    feature_keys = [key for key in columns if key != label_key]
    parts = [part for part in (feature_keys, [label_key] if label_key in columns else []) if part]
    stacks = [(part, *_stacked([columns[key] for key in part])) for part in parts]
    values = tf.concat([stack_values for _, stack_values, _ in stacks], axis=1)
    present = tf.concat([stack_present for _, _, stack_present in stacks], axis=1)
    observed = tf.where(present, values, tf.constant(float("nan"), tf.float32))
    count = len(columns)
    means = tft.mean(
        tf.concat([observed, tf.cast(present, tf.float32)], axis=1), reduce_instance_dims=False
    )
    mean, present_fraction = means[:count], means[count:]
    variance = tft.var(observed, reduce_instance_dims=False) * present_fraction
    z_scores = {}
    start = 0
    for part, part_values, part_present in stacks:
        end = start + len(part)
        part_mean, part_variance = mean[start:end], variance[start:end]
        centered = tf.where(part_present, part_values, part_mean) - part_mean
        # As tft.scale_to_z_score: a constant column is only centred.
        z_score = tf.where(
            part_variance > 0, centered / tf.sqrt(tf.maximum(part_variance, 1e-30)), centered
        )
        z_scores.update(zip(part, tf.unstack(z_score, num=len(part), axis=1)))
        start = end
    return z_scores


def _stacked(columns: list[tuple[tf.Tensor, tf.Tensor | None]]) -> tuple[tf.Tensor, tf.Tensor]:
    """[batch] values and presence masks (None: never missing) -> [batch, columns] values and
    presence."""
    values = tf.stack([dense for dense, _ in columns], axis=1)
    present = tf.stack(
        [tf.ones_like(dense, tf.bool) if mask is None else mask for dense, mask in columns],
        axis=1,
    )
    return values, present
