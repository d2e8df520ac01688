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
(components.ml.vocabularies), each column then looked up in its own vocabulary file. Missing
indicators need no analyzer. The features, their names, dtypes and vocabulary files are those of
one analyzer per column (benchmarks/per_column_preprocessing.py, the reference).
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_transform as tft

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
    for key, z_score in _impute_and_z_score(numeric).items():
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
    features get one OOV bucket (index = vocabulary size), the label none (-1 if unseen)."""
    if not text:
        return {}
    names = [
        features.LABEL_VOCABULARY if key == label_key else features.vocabulary_name(key)
        for key in text
    ]
    # The label's vocabulary also with its counts over the analyzed (train) split: the class
    # weights of --class_weight balanced (components.training.loop).
    counted = [index for index, key in enumerate(text) if key == label_key]
    paths = vocabularies.column_vocabularies(list(text.values()), names, counted)
    outputs = {}
    for (key, dense), path in zip(text.items(), paths[: len(names)], strict=True):
        if key == label_key:
            index = tft.apply_vocabulary(dense, path, default_value=-1)
        else:
            index = tft.apply_vocabulary(dense, path, num_oov_buckets=NUM_OOV_BUCKETS)
        outputs[features.transformed_name(key)] = index
    return outputs


def _impute_and_z_score(
    columns: dict[str, tuple[tf.Tensor, tf.Tensor | None]],
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
    A column that is never missing has p = 1: its z-score is tft.scale_to_z_score's."""
    if not columns:
        return {}
    values = tf.stack([dense for dense, _ in columns.values()], axis=1)
    present = tf.stack(
        [
            tf.ones_like(dense, tf.bool) if mask is None else mask
            for dense, mask in columns.values()
        ],
        axis=1,
    )
    observed = tf.where(present, values, tf.constant(float("nan"), tf.float32))
    count = len(columns)
    means = tft.mean(
        tf.concat([observed, tf.cast(present, tf.float32)], axis=1), reduce_instance_dims=False
    )
    mean, present_fraction = means[:count], means[count:]
    variance = tft.var(observed, reduce_instance_dims=False) * present_fraction
    # Applied column by column, so that each output depends on its own input only (serving
    # feeds no label; the stacked tensor feeds the analyzers alone).
    z_scores = {}
    for index, (key, (dense, mask)) in enumerate(columns.items()):
        column_mean, column_variance = mean[index], variance[index]
        centered = (dense if mask is None else tf.where(mask, dense, column_mean)) - column_mean
        # As tft.scale_to_z_score: a constant column is only centred.
        z_scores[key] = tf.where(
            column_variance > 0,
            centered / tf.sqrt(tf.maximum(column_variance, 1e-30)),
            centered,
        )
    return z_scores
