"""Evaluation metrics the Evaluator (TFMA) loads by module path (pipeline.builder.eval_config)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import tensorflow as tf

if TYPE_CHECKING:
    from tensorflow import keras
else:
    keras = tf.keras  # tf-keras under TF_USE_LEGACY_KERAS=1 (components.ml.model)


def _flat(y_true, y_pred, sample_weight, dtype):
    """Labels, predictions and weights (1 where none are given) as flat vectors of `dtype`."""
    y_true = tf.reshape(tf.cast(y_true, dtype), [-1])
    y_pred = tf.reshape(tf.cast(y_pred, dtype), [-1])
    if sample_weight is None:
        return y_true, y_pred, tf.ones_like(y_true)
    return y_true, y_pred, tf.reshape(tf.cast(sample_weight, dtype), [-1])


def _classes(y_true, y_pred, sample_weight, dtype):
    """Class indices as a flat int64 vector, one row of class scores per example, and weights
    of `dtype` (1 where none are given)."""
    y_true = tf.reshape(tf.cast(y_true, tf.int64), [-1])
    scores = tf.reshape(y_pred, [tf.shape(y_true)[0], -1])
    if sample_weight is None:
        return y_true, scores, tf.ones_like(y_true, dtype)
    return y_true, scores, tf.reshape(tf.cast(sample_weight, dtype), [-1])


class MeanSquaredErrorSkill(keras.metrics.Metric):
    """1 - MSE / MSE of predicting the training mean, over labels and predictions z-scored by
    the training label's mean and deviation (so predicting the training mean is predicting 0).

    1: perfect; 0: no better than the training mean; negative: worse. The z-scoring is affine,
    so the ratio is the same as in the label's units.
    """

    def __init__(self, name: str = "mean_squared_error_skill", **kwargs):
        super().__init__(name=name, **kwargs)
        self.squared_error = self.add_weight(name="squared_error", initializer="zeros")
        self.squared_label = self.add_weight(name="squared_label", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true, y_pred, weight = _flat(y_true, y_pred, sample_weight, self.dtype)
        self.squared_error.assign_add(tf.reduce_sum(weight * tf.square(y_pred - y_true)))
        self.squared_label.assign_add(tf.reduce_sum(weight * tf.square(y_true)))

    def result(self):
        return 1.0 - tf.math.divide_no_nan(self.squared_error, self.squared_label)

    def reset_state(self):
        self.squared_error.assign(0.0)
        self.squared_label.assign(0.0)


# The project's label vocabulary is ordered by count over the training split (tf.Transform
# analyzes the train split only; components.ml.vocabularies orders by decreasing count), so class
# index 0 is the training split's majority class: the guess a classifier must beat.
MAJORITY_CLASS_INDEX = 0


class _MajorityClassCounts(keras.metrics.Metric):
    """Weighted counts over sparse class labels and class scores: examples, correct argmax
    answers, and labels equal to the training split's majority class (index 0)."""

    def __init__(self, name: str, **kwargs):
        super().__init__(name=name, **kwargs)
        self.examples = self.add_weight(name="examples", initializer="zeros")
        self.correct = self.add_weight(name="correct", initializer="zeros")
        self.majority = self.add_weight(name="majority", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true, scores, weight = _classes(y_true, y_pred, sample_weight, self.dtype)
        answered = tf.argmax(scores, axis=1, output_type=tf.int64)
        self.examples.assign_add(tf.reduce_sum(weight))
        self.correct.assign_add(tf.reduce_sum(weight * tf.cast(answered == y_true, self.dtype)))
        majority = tf.cast(y_true == MAJORITY_CLASS_INDEX, self.dtype)
        self.majority.assign_add(tf.reduce_sum(weight * majority))

    def reset_state(self):
        for variable in (self.examples, self.correct, self.majority):
            variable.assign(0.0)


class MajorityClassAccuracy(_MajorityClassCounts):
    """The accuracy of always answering the training split's majority class (the baseline
    guess), on the evaluated examples."""

    def __init__(self, name: str = "majority_class_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)

    def result(self):
        return tf.math.divide_no_nan(self.majority, self.examples)


class AccuracySkill(_MajorityClassCounts):
    """How much of the gap between the majority-class guess and a perfect classifier the model
    closes: (accuracy - guess accuracy) / (1 - guess accuracy), both on the evaluated examples.

    1: perfect; 0: no better than always answering the majority class; negative: worse. On a
    95/5 split an accuracy of 0.95 scores 0; on a 60/40 split 0.80 scores 0.5.
    """

    def __init__(self, name: str = "accuracy_skill", **kwargs):
        super().__init__(name=name, **kwargs)

    def result(self):
        return tf.math.divide_no_nan(self.correct - self.majority, self.examples - self.majority)


class _StandardizedAbsoluteError(keras.metrics.Metric):
    """Weighted mean of |y_pred - y_true| (or |y_true| with `of_mean`) over z-scored labels and
    predictions, where predicting the training mean is predicting 0."""

    def __init__(self, name: str, of_mean: bool, **kwargs):
        super().__init__(name=name, **kwargs)
        self._of_mean = of_mean
        self.total = self.add_weight(name="total", initializer="zeros")
        self.weight = self.add_weight(name="weight", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true, y_pred, weight = _flat(y_true, y_pred, sample_weight, self.dtype)
        error = tf.abs(y_true) if self._of_mean else tf.abs(y_pred - y_true)
        self.total.assign_add(tf.reduce_sum(weight * error))
        self.weight.assign_add(tf.reduce_sum(weight))

    def result(self):
        return tf.math.divide_no_nan(self.total, self.weight)

    def reset_state(self):
        self.total.assign(0.0)
        self.weight.assign(0.0)


class StandardizedAbsoluteError(_StandardizedAbsoluteError):
    """The model's mean absolute error in training standard deviations."""

    def __init__(self, name: str = "standardized_absolute_error", **kwargs):
        super().__init__(name=name, of_mean=False, **kwargs)


class MeanPredictorStandardizedAbsoluteError(_StandardizedAbsoluteError):
    """The mean absolute error of predicting the training mean, in training standard deviations.
    The two ratios give the mean's errors in the label's units: MAE(mean) = MAE x this /
    standardized_absolute_error, RMSE(mean) = RMSE / sqrt(1 - mean_squared_error_skill)."""

    def __init__(self, name: str = "mean_predictor_standardized_absolute_error", **kwargs):
        super().__init__(name=name, of_mean=True, **kwargs)


# Balanced accuracy keeps one count per class; class indices at or above this are an error.
MAX_CLASSES = 1024


class BalancedAccuracySkill(keras.metrics.Metric):
    """Skill in balanced accuracy (the mean of the per-class recalls) over the majority-class
    guess, whose balanced accuracy is 1 / classes (recall 1 on its class, 0 on the others):
    (balanced accuracy - 1/K) / (1 - 1/K), K the classes present among the labels. The measure
    that matches --class_weight balanced, which makes every class weigh the same."""

    def __init__(self, name: str = "balanced_accuracy_skill", **kwargs):
        super().__init__(name=name, **kwargs)
        self.support = self.add_weight(name="support", shape=(MAX_CLASSES,), initializer="zeros")
        self.hits = self.add_weight(name="hits", shape=(MAX_CLASSES,), initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true, scores, weight = _classes(y_true, y_pred, sample_weight, self.dtype)
        tf.debugging.assert_less(
            y_true, tf.constant(MAX_CLASSES, tf.int64), message="more classes than MAX_CLASSES"
        )
        # A label unseen in training (-1) counts for no class.
        known = y_true >= 0
        classes = tf.where(known, y_true, 0)
        weight = weight * tf.cast(known, self.dtype)
        correct = tf.cast(tf.argmax(scores, axis=1, output_type=tf.int64) == y_true, self.dtype)
        self.support.assign_add(tf.math.unsorted_segment_sum(weight, classes, MAX_CLASSES))
        self.hits.assign_add(tf.math.unsorted_segment_sum(weight * correct, classes, MAX_CLASSES))

    def result(self):
        present = self.support > 0
        classes = tf.reduce_sum(tf.cast(present, self.dtype))
        recalls = tf.math.divide_no_nan(self.hits, self.support)
        balanced = tf.math.divide_no_nan(tf.reduce_sum(recalls), classes)
        guess = tf.math.divide_no_nan(1.0, classes)
        return tf.math.divide_no_nan(balanced - guess, 1.0 - guess)

    def reset_state(self):
        self.support.assign(tf.zeros_like(self.support))
        self.hits.assign(tf.zeros_like(self.hits))
