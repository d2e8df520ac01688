"""The Evaluator's baseline: the newest pushed version that is not the candidate, read from the
push destination (files laid out as the Pusher writes them), and the Evaluator's view of it."""

from __future__ import annotations

import os

from tfx.types import standard_artifacts

from components.tfx_components import baseline
from components.tfx_components.baseline_model import executor as baseline_executor
from components.tfx_components.baseline_model import spec
from components.tfx_components.evaluator import executor as evaluator_executor


def write_model(directory, graph: bytes, variables: bytes = b"index") -> str:
    """A SavedModel's two identifying files (what the Pusher copies, byte for byte)."""
    os.makedirs(os.path.join(directory, "variables"), exist_ok=True)
    with open(os.path.join(directory, "saved_model.pb"), "wb") as handle:
        handle.write(graph)
    with open(os.path.join(directory, "variables", "variables.index"), "wb") as handle:
        handle.write(variables)
    return str(directory)


def model_artifact(uri: str):
    artifact = standard_artifacts.Model()
    artifact.uri = uri
    return artifact


def test_first_run_has_no_baseline(tmp_path):
    candidate = write_model(tmp_path / "candidate", b"m1")
    assert baseline.previous_pushed_model(str(tmp_path / "serving"), candidate) is None


def test_unchanged_rerun_does_not_use_the_candidate_as_its_own_baseline(tmp_path):
    candidate = write_model(tmp_path / "candidate", b"m1")
    write_model(tmp_path / "serving" / "100", b"m1")
    assert baseline.previous_pushed_model(str(tmp_path / "serving"), candidate) is None


def test_newest_other_version_is_the_baseline(tmp_path):
    serving = tmp_path / "serving"
    write_model(serving / "100", b"m1")
    write_model(serving / "900", b"m2")
    write_model(serving / "1000", b"m3", b"other variables")  # numeric order, not text order
    write_model(serving / "2000", b"m4")  # the candidate's own push
    (serving / "3000").mkdir()  # a push in progress: no graph yet
    (serving / "notes").mkdir()  # not a version
    candidate = write_model(tmp_path / "candidate", b"m4")
    found = baseline.previous_pushed_model(str(serving), candidate)
    assert found == baseline.PushedVersion("1000", str(serving / "1000"))


def test_same_graph_with_other_weights_is_another_model(tmp_path):
    write_model(tmp_path / "serving" / "100", b"graph", b"weights 1")
    candidate = write_model(tmp_path / "candidate", b"graph", b"weights 2")
    assert baseline.previous_pushed_model(str(tmp_path / "serving"), candidate).version == "100"


def test_executor_copies_the_baseline_where_the_evaluator_reads_a_model(tmp_path):
    write_model(tmp_path / "serving" / "100", b"m1")
    candidate_uri = tmp_path / "trainer" / "model"
    write_model(candidate_uri / "Format-Serving", b"m2")
    output = model_artifact(str(tmp_path / "baseline"))
    baseline_executor.Executor().Do(
        {spec.CANDIDATE_KEY: [model_artifact(str(candidate_uri))]},
        {spec.BASELINE_KEY: [output]},
        {spec.SERVING_MODEL_DIR_KEY: str(tmp_path / "serving")},
    )
    copied = tmp_path / "baseline" / "Format-Serving" / "saved_model.pb"
    assert copied.read_bytes() == b"m1"
    assert output.get_int_custom_property(spec.FOUND_PROPERTY) == 1
    assert output.get_string_custom_property(spec.VERSION_PROPERTY) == "100"
    assert evaluator_executor.present_baselines([output]) == [output]


def test_executor_leaves_an_empty_artifact_that_the_evaluator_ignores(tmp_path):
    candidate_uri = tmp_path / "trainer" / "model"
    write_model(candidate_uri / "Format-Serving", b"m1")
    output = model_artifact(str(tmp_path / "baseline"))
    baseline_executor.Executor().Do(
        {spec.CANDIDATE_KEY: [model_artifact(str(candidate_uri))]},
        {spec.BASELINE_KEY: [output]},
        {spec.SERVING_MODEL_DIR_KEY: str(tmp_path / "no-pushes-yet")},
    )
    assert os.path.isdir(output.uri) and not os.listdir(output.uri)
    assert output.get_int_custom_property(spec.FOUND_PROPERTY) == 0
    assert evaluator_executor.present_baselines([output]) == []
