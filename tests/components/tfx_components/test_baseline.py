"""Baseline resolution: the newest blessed model older than the candidate."""

from __future__ import annotations

from tfx.types import standard_artifacts

from components.tfx_components import baseline


def model(artifact_id: int):
    artifact = standard_artifacts.Model()
    artifact.id = artifact_id
    return artifact


def blessing(artifact_id: int, model_id: int, blessed: bool):
    artifact = standard_artifacts.ModelBlessing()
    artifact.id = artifact_id
    artifact.set_int_custom_property("current_model_id", model_id)
    artifact.set_int_custom_property("blessed", int(blessed))
    return artifact


def ids(artifacts):
    return [a.id for a in artifacts]


def test_first_run_has_no_baseline():
    assert baseline.previous_blessed_model([model(5)], [model(5)], []) == ([], [])


def test_unchanged_rerun_does_not_use_the_candidate_as_its_own_baseline():
    # Run 1 trained and blessed model 5; the cached rerun's candidate is model 5 again.
    models = [model(5)]
    blessings = [blessing(7, 5, True)]
    assert baseline.previous_blessed_model([model(5)], models, blessings) == ([], [])


def test_new_candidate_is_compared_with_the_newest_earlier_blessed_model():
    models = [model(3), model(5), model(9), model(12)]
    blessings = [blessing(4, 3, True), blessing(7, 5, True), blessing(10, 9, False)]
    found_model, found_blessing = baseline.previous_blessed_model([model(12)], models, blessings)
    assert ids(found_model) == [5]  # 9 was not blessed; 12 is the candidate itself
    assert ids(found_blessing) == [7]


def test_strategy_keeps_the_candidate_and_returns_the_baseline():
    strategy = baseline.PreviousBlessedModelStrategy()
    resolved = strategy.resolve_artifacts(
        None,
        {
            baseline.CANDIDATE_KEY: [model(12)],
            baseline.MODEL_KEY: [model(5), model(12)],
            baseline.MODEL_BLESSING_KEY: [blessing(7, 5, True)],
        },
    )
    assert ids(resolved[baseline.CANDIDATE_KEY]) == [12]
    assert ids(resolved[baseline.MODEL_KEY]) == [5]
    assert ids(resolved[baseline.MODEL_BLESSING_KEY]) == [7]
