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

from collections.abc import Sequence

import tensorflow as tf
import tensorflow_transform as tft
from tensorflow_transform import schema_inference

from components.ml import features, timestamps, vocabularies

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


def stack_columns(
    columns: Sequence[tf.Tensor | tf.SparseTensor], dtype: tf.DType, default
) -> tuple[tf.Tensor, tf.Tensor | None]:
    """CSV columns (dense [batch] or [batch, 1]; sparse [batch, <= 1] where a value may be
    missing) -> ([batch, columns] values as `dtype`, `default` where missing; [batch, columns]
    presence, None when no column can be missing).

    A few ops whatever the column count: the dense columns of one dtype and rank are stacked by
    one op, the sparse ones of one dtype concatenated by one SparseConcat and scattered into one
    dense tensor, and the parts put back in the columns' order by one gather. (A
    densify, a presence mask and a squeeze per column made the transform graph, and every trace
    and save of it, grow with the columns.) A CSV cell holds at most one value."""
    groups: dict[tuple, list[int]] = {}
    for index, column in enumerate(columns):
        sparse = isinstance(column, tf.SparseTensor)
        groups.setdefault((sparse, column.dtype, None if sparse else column.shape.rank), []).append(
            index
        )
    order, values, present = [], [], []
    for (sparse, _, rank), indices in groups.items():
        group = [columns[index] for index in indices]
        order.extend(indices)
        if sparse:
            # One SparseConcat along the columns, every input given the shape [batch, 1]: the
            # column of input i's values is then i (their position in a row is 0).
            # A second value in a row would land in the next column: refused instead.
            # (The max of no positions, when every value of the batch is missing, is int64's min.)
            one_value = tf.debugging.assert_less_equal(
                tf.reduce_max(tf.concat([column.indices for column in group], 0)[:, 1]),
                tf.constant(0, tf.int64),
                message="a column holds more than one value in a row; this preprocessing_fn "
                "reads CSV columns (one value per cell): use your own preprocessing_fn "
                "(--module_file) for multi-valued features",
            )
            with tf.control_dependencies([one_value]):
                shape = tf.stack([group[0].dense_shape[0], tf.constant(1, tf.int64)])
            concatenated = tf.sparse.concat(
                axis=1,
                sp_inputs=[
                    tf.SparseTensor(column.indices, column.values, shape) for column in group
                ],
            )
            dense_shape = concatenated.dense_shape
            group_values = tf.cast(concatenated.values, dtype)
            values.append(
                tf.tensor_scatter_nd_update(
                    tf.fill(dense_shape, tf.constant(default, dtype)),
                    concatenated.indices,
                    group_values,
                )
            )
            present.append(
                tf.scatter_nd(
                    concatenated.indices, tf.ones_like(group_values, tf.int8), dense_shape
                )
                > 0
            )
            for part in (values[-1], present[-1]):
                part.set_shape([None, len(group)])
        else:
            stacked = (tf.stack if rank == 1 else tf.concat)(group, axis=1)
            values.append(tf.cast(stacked, dtype))
            present.append(None)
    stacked_values = _in_order(tf.concat(values, axis=1) if len(values) > 1 else values[0], order)
    if all(mask is None for mask in present):
        return stacked_values, None
    masks = [
        tf.ones(tf.shape(part), tf.bool) if mask is None else mask
        for part, mask in zip(values, present, strict=True)
    ]
    return stacked_values, _in_order(
        tf.concat(masks, axis=1) if len(masks) > 1 else masks[0], order
    )


def _in_order(stacked: tf.Tensor, order: list[int]) -> tf.Tensor:
    """Columns stacked in `order` (column i of `stacked` is column order[i]) -> in column order."""
    if order == sorted(order):
        return stacked
    inverse = [0] * len(order)
    for position, index in enumerate(order):
        inverse[index] = position
    return tf.gather(stacked, inverse, axis=1)


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
    inputs = _with_timestamp_parts(
        inputs, custom_config.get(features.TIMESTAMP_COLUMNS_CONFIG) or (), label_key
    )
    label = inputs[label_key]
    regression = task == features.REGRESSION
    if regression and label.dtype == tf.string:
        raise ValueError(
            f"label column {label_key!r} is text; regression needs a numeric label column"
        )
    # A label is never missing (ExampleGen rejects such rows): no indicator. A class label gets a
    # vocabulary, a regression label is z-scored.
    if regression:
        dense_label = _dense_with_presence(_as_float(label), 0.0)[0]
    else:
        dense_label = _dense_with_presence(_class_names(label), features.MISSING_TOKEN)[0]
    feature_keys = sorted(key for key in inputs if key != label_key)
    text = {key: inputs[key] for key in feature_keys if inputs[key].dtype == tf.string}
    numeric = {key: inputs[key] for key in feature_keys if inputs[key].dtype != tf.string}
    outputs = _numeric_outputs(numeric, label_key, dense_label if regression else None)
    outputs.update(_text_outputs(text, label_key, None if regression else dense_label))
    return outputs


def _with_timestamp_parts(inputs: dict, columns, label_key: str) -> dict:
    """The inputs with each timestamp column (custom_config[TIMESTAMP_COLUMNS_CONFIG], found by
    the pre-flight check) replaced by its numeric parts (components.ml.timestamps): hour of the
    day, day of the week and a continuous time, sparse where a value is missing or unparsed."""
    inputs = dict(inputs)
    for column in columns:
        if column == label_key or column not in inputs or inputs[column].dtype != tf.string:
            raise ValueError(
                f"timestamp column {column!r} ({features.TIMESTAMP_COLUMNS_CONFIG}) is not a text "
                f"feature of the schema (features {sorted(inputs)}, label {label_key!r})"
            )
        names = timestamps.part_names(column)
        clash = sorted(set(names) & set(inputs))
        if clash:
            raise ValueError(
                f"timestamp column {column!r} becomes {names}, but the data already has "
                f"column(s) {clash}: rename them, or keep {column!r} as text "
                "(--keep_text_columns)"
            )
        for name, part in zip(names, timestamps.numeric_parts(inputs.pop(column), tf), strict=True):
            inputs[name] = part
    return inputs


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


def _text_outputs(columns: dict, label_key: str, label: tf.Tensor | None) -> dict[str, tf.Tensor]:
    """Every text column's index in its own vocabulary, all vocabularies (a class label's too)
    from one analyzer: features get one OOV bucket (index = vocabulary size), looked up together
    in one table (vocabularies.apply_column_vocabularies); the label none (-1 if unseen), in a
    table of its own, so that no feature depends on the label (serving feeds none)."""
    keys = list(columns)
    stacked = (
        stack_columns(list(columns.values()), tf.string, features.MISSING_TOKEN)[0]
        if keys
        else None
    )
    names = [features.vocabulary_name(key) for key in keys]
    analyzed_columns = [] if stacked is None else [stacked]
    counted = []
    if label is not None:
        # The label's vocabulary also with its counts over the analyzed (train) split: the
        # class weights of --class_weight balanced (components.training.loop).
        names.append(features.LABEL_VOCABULARY)
        analyzed_columns.append(tf.reshape(label, [-1, 1]))
        counted.append(len(keys))
    if not names:
        return {}
    analyzed = vocabularies.column_vocabularies(
        tf.concat(analyzed_columns, axis=1) if len(analyzed_columns) > 1 else analyzed_columns[0],
        names,
        counted,
        indexed=range(len(keys)),
    )
    outputs = {}
    if label is not None:
        outputs[features.transformed_name(label_key)] = tft.apply_vocabulary(
            label, analyzed.paths[features.LABEL_VOCABULARY], default_value=-1
        )
    if keys:
        indices, sizes = vocabularies.apply_column_vocabularies(stacked, analyzed.lookup_path)
        columns = tf.unstack(indices, num=len(keys), axis=1)
        zero = tf.constant(0, tf.int64)
        for key, column, size in zip(keys, columns, tf.unstack(sizes, num=len(keys)), strict=True):
            # The schema's int_domain, as tft.apply_vocabulary records it: [0, size] (the OOV
            # bucket included).
            schema_inference.set_tensor_schema_override(column, zero, size)
            outputs[features.transformed_name(key)] = column
    return outputs


def _numeric_outputs(
    columns: dict, label_key: str, label: tf.Tensor | None
) -> dict[str, tf.Tensor]:
    """Every numeric column with its missing values imputed by the mean of its observed ones,
    then z-scored over the imputed column, plus a 0/1 missing indicator where a value may be
    missing; a regression label z-scored the same way.

    The statistics come from one analysis pass over all columns at once: imputing the mean
    leaves the mean as it is and adds nothing to the squared deviations, so over N rows of which
    a fraction p is observed, var(imputed) = p * var(observed). (Z-scoring the imputed tensor
    directly would make tf.Transform read the data twice: the mean first, then the variance of
    the result.) The columns are stacked into one [batch, columns] tensor with NaN where a value
    is missing, which tft.mean and tft.var leave out (reduce_instance_dims=False: per-column
    statistics); the observed fractions are the means of the presence columns appended to the
    same tensor. A column that is never missing has p = 1: its z-score is
    tft.scale_to_z_score's.

    The features' z-scores and indicators are computed on their stack at once and split into
    columns (a handful of ops whatever the column count); the label is appended for the
    analysis only and z-scored apart, so that no feature depends on it (serving feeds none)."""
    keys = list(columns)
    if not keys and label is None:
        return {}
    values, present = (
        stack_columns(list(columns.values()), tf.float32, 0.0) if keys else (None, None)
    )
    analyzed_values = [] if values is None else [values]
    analyzed_present = []
    if values is not None:
        analyzed_present.append(tf.ones(tf.shape(values), tf.bool) if present is None else present)
    if label is not None:
        analyzed_values.append(tf.reshape(label, [-1, 1]))
        analyzed_present.append(tf.ones_like(analyzed_values[-1], tf.bool))
    all_values = tf.concat(analyzed_values, axis=1)
    all_present = tf.concat(analyzed_present, axis=1)
    observed = tf.where(all_present, all_values, tf.constant(float("nan"), tf.float32))
    count = len(keys) + (label is not None)
    means = tft.mean(
        tf.concat([observed, tf.cast(all_present, tf.float32)], axis=1),
        reduce_instance_dims=False,
    )
    mean, present_fraction = means[:count], means[count:]
    variance = tft.var(observed, reduce_instance_dims=False) * present_fraction
    # A column with no value in the analyzed (train) split, which the inferred schema keeps when
    # another split has values (components.tfx_components.schema_gen), has NaN statistics (0 / 0)
    # and nothing to scale its values by: its feature is 0 in every row (the model never saw it
    # vary; a raw value, a census tract number say, would swamp every other input), its missing
    # indicator still says where it has a value.
    analyzed = tf.logical_not(tf.math.is_nan(mean))
    mean = tf.where(analyzed, mean, tf.zeros_like(mean))
    variance = tf.where(analyzed, variance, tf.zeros_like(variance))
    outputs = {}
    if keys:
        z_scores = _z_score(values, present, mean[: len(keys)], variance[: len(keys)])
        z_scores = tf.where(analyzed[: len(keys)], z_scores, tf.zeros_like(z_scores))
        for key, column in zip(keys, tf.unstack(z_scores, num=len(keys), axis=1), strict=True):
            outputs[features.transformed_name(key)] = column
        # Indicators for the columns that may be missing (sparse in the schema's spec).
        nullable = [
            index for index, key in enumerate(keys) if isinstance(columns[key], tf.SparseTensor)
        ]
        if nullable:
            missing = 1.0 - tf.cast(tf.gather(present, nullable, axis=1), tf.float32)
            for index, column in zip(
                nullable, tf.unstack(missing, num=len(nullable), axis=1), strict=True
            ):
                outputs[features.missing_indicator_name(keys[index])] = column
    if label is not None:
        outputs[features.transformed_name(label_key)] = _z_score(
            label, None, mean[len(keys)], variance[len(keys)]
        )
    return outputs


def _z_score(values, present, mean, variance) -> tf.Tensor:
    """(values, with the mean where not present) z-scored; as tft.scale_to_z_score, a constant
    column is only centred."""
    centered = (values if present is None else tf.where(present, values, mean)) - mean
    return tf.where(variance > 0, centered / tf.sqrt(tf.maximum(variance, 1e-30)), centered)
