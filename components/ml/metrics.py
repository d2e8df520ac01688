"""Evaluation metrics the Evaluator (TFMA) loads by module path (pipeline.builder.eval_config)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import tensorflow as tf

if TYPE_CHECKING:
    from tensorflow import keras
else:
    keras = tf.keras  # tf-keras under TF_USE_LEGACY_KERAS=1 (components.ml.model)


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
        y_true = tf.reshape(tf.cast(y_true, self.dtype), [-1])
        y_pred = tf.reshape(tf.cast(y_pred, self.dtype), [-1])
        weight = (
            tf.ones_like(y_true)
            if sample_weight is None
            else tf.reshape(tf.cast(sample_weight, self.dtype), [-1])
        )
        self.squared_error.assign_add(tf.reduce_sum(weight * tf.square(y_pred - y_true)))
        self.squared_label.assign_add(tf.reduce_sum(weight * tf.square(y_true)))

    def result(self):
        return 1.0 - tf.math.divide_no_nan(self.squared_error, self.squared_label)

    def reset_state(self):
        self.squared_error.assign(0.0)
        self.squared_label.assign(0.0)
