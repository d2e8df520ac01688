"""The Evaluator's classification metrics (components.ml.metrics) on hand-made batches: class 0
is the training split's majority class, the guess a model must beat."""

from __future__ import annotations

import numpy as np
import pytest

from components.ml import metrics


def _result(metric, labels, scores, weights=None):
    metric.update_state(np.array(labels), np.array(scores, np.float32), weights)
    return float(metric.result())


# 10 labels, 6 of class 0 (the guess's accuracy 0.6); the model answers 8 right.
LABELS = [0, 0, 0, 0, 0, 0, 1, 1, 2, 2]
ANSWERS = [0, 0, 0, 0, 0, 1, 1, 1, 2, 0]


def _scores(answers, classes=3):
    return np.eye(classes)[answers] * 0.8 + 0.1


def test_accuracy_skill_is_the_gain_over_the_majority_guess():
    assert _result(metrics.MajorityClassAccuracy(), LABELS, _scores(ANSWERS)) == pytest.approx(0.6)
    # (0.8 - 0.6) / (1 - 0.6)
    assert _result(metrics.AccuracySkill(), LABELS, _scores(ANSWERS)) == pytest.approx(0.5)
    # Always answering class 0 scores 0; a perfect model 1; worse than the guess is negative.
    assert _result(metrics.AccuracySkill(), LABELS, _scores([0] * 10)) == pytest.approx(0.0)
    assert _result(metrics.AccuracySkill(), LABELS, _scores(LABELS)) == pytest.approx(1.0)
    assert _result(metrics.AccuracySkill(), LABELS, _scores([1] * 10)) < 0


def test_skill_counts_example_weights_and_accumulates_batches():
    skill = metrics.AccuracySkill()
    # Row 9 (class 2, answered 0: wrong) three times: 12 examples, 6 of class 0, 8 right.
    weights = np.array([1.0] * 9 + [3.0])
    assert _result(skill, LABELS, _scores(ANSWERS), weights) == pytest.approx((8 - 6) / (12 - 6))
    skill.reset_state()
    skill.update_state(np.array(LABELS[:5]), _scores(ANSWERS[:5]))
    skill.update_state(np.array(LABELS[5:]).reshape(-1, 1), _scores(ANSWERS[5:]))
    assert float(skill.result()) == pytest.approx(0.5)


def test_standardized_errors_of_the_model_and_of_the_training_mean():
    labels = np.array([1.0, -1.0, 2.0, 0.0])  # z-scored: the training mean is 0
    predictions = np.array([0.5, -1.0, 1.0, 0.5])
    assert _result(metrics.StandardizedAbsoluteError(), labels, predictions) == pytest.approx(0.5)
    mean = metrics.MeanPredictorStandardizedAbsoluteError()
    assert _result(mean, labels, predictions) == pytest.approx(1.0)


def test_balanced_accuracy_skill_weighs_every_class_alike():
    # Recalls 5/6, 2/2, 1/2: balanced accuracy 7/9 against the guess's 1/3.
    skill = _result(metrics.BalancedAccuracySkill(), LABELS, _scores(ANSWERS))
    assert skill == pytest.approx((7 / 9 - 1 / 3) / (1 - 1 / 3))
    # The majority guess scores 0 here too, however imbalanced the classes.
    assert _result(metrics.BalancedAccuracySkill(), LABELS, _scores([0] * 10)) == pytest.approx(0)
    # A rare class found at the cost of the common one's accuracy: accuracy skill < 0, balanced > 0.
    labels, answers = [0] * 9 + [1], [0] * 7 + [1, 1, 1]
    assert _result(metrics.AccuracySkill(), labels, _scores(answers, 2)) < 0
    balanced = _result(metrics.BalancedAccuracySkill(), labels, _scores(answers, 2))
    assert balanced == pytest.approx(((7 / 9 + 1) / 2 - 0.5) / 0.5)
