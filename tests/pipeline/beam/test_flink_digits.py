"""The digits images on the session's Flink cluster (tests/pipeline/beam/conftest.py), through
docs/beam.md's digits command: every Beam component of the image pipeline (ImageExampleGen,
StatisticsGen, Transform, Evaluator) is a FINISHED Flink job of its own in Flink's REST API,
and the run's outputs equal those of the DirectRunner's digits run of the session
(`digits_run`, tests/conftest.py, shared with tests/test_e2e_images.py)."""

from __future__ import annotations

import re
import time

import pytest

from tests.docs import pages
from tests.pipeline.beam import against_direct
from tests.pipeline.beam.flink_page import explain, replacements

pytestmark = [
    pytest.mark.slow,
    pytest.mark.e2e,
    pytest.mark.system_packages("openjdk-17-jre-headless", "maven"),
]

PAGE = "docs/beam.md"
DIGITS_COMMAND = "run_local.py --dataset digits --beam_runner flink --beam_job_endpoint"
BEAM_COMPONENTS = ("ImageExampleGen", "StatisticsGen", "Transform", "Evaluator")


@pytest.fixture(scope="module")
def flink_digits_run(flink, tmp_path_factory):
    """The page's digits command on the session's cluster, job server and worker pool, in a
    sandbox; the Flink jobs that started while it ran."""
    command = pages.command(PAGE, DIGITS_COMMAND)
    sandbox = pages.Sandbox(tmp_path_factory.mktemp("flink-digits"))
    replace = {old: new for old, new in replacements(flink).items() if old in command.text}
    started_ms = int(time.time() * 1000)
    started = time.monotonic()
    result = sandbox.run(command, replace=replace, timeout=1800)
    wall_s = time.monotonic() - started
    ended_ms = int(time.time() * 1000)
    assert result.returncode == 0, explain(result, flink)
    jobs = [j for j in flink.cluster.jobs() if started_ms <= j["start-time"] <= ended_ms]
    metadata = str(sandbox.output_root / "digits-pipeline" / "metadata.sqlite")
    windows = against_direct.execution_windows(metadata, BEAM_COMPONENTS)
    print(
        f"flink digits: {wall_s:.0f} s; Flink jobs: "
        + ", ".join(
            f"{name} {job['duration'] / 1000:.1f} s"
            for name, job in _job_per_component(windows, jobs).items()
        )
    )
    return {"result": result, "jobs": jobs, "windows": windows, "metadata": metadata}


def _job_per_component(windows: dict, jobs: list[dict]) -> dict[str, dict]:
    """{component: its first Flink job}: the job that started and ended inside the component's
    MLMD execution (its end recorded up to 1 s after Flink's)."""
    found = {}
    for name, executions in windows.items():
        for _, (start, end) in executions:
            inside = [j for j in jobs if start <= j["start-time"] and j["end-time"] <= end + 1000]
            if inside:
                found.setdefault(name, inside[0])
    return found


def test_every_beam_component_ran_as_a_finished_flink_job(flink_digits_run):
    jobs, windows = flink_digits_run["jobs"], flink_digits_run["windows"]
    finished: dict[str, list] = {}
    for name, executions in windows.items():
        assert len(executions) == 1, (name, executions)
        for _, (start, end) in executions:
            inside = [j for j in jobs if start <= j["start-time"] and j["end-time"] <= end + 1000]
            finished.setdefault(name, []).extend(j for j in inside if j["state"] == "FINISHED")
    assert {n: len(j) for n, j in finished.items()} == {n: 1 for n in BEAM_COMPONENTS}, jobs
    # No other job ran on the cluster meanwhile, and none failed.
    assert sorted(j["state"] for j in jobs) == ["FINISHED"] * len(BEAM_COMPONENTS), jobs


def test_same_split_counts_and_examples_as_the_direct_runner(flink_digits_run, digits_run):
    against_direct.assert_same_splits_and_records(
        flink_digits_run["metadata"],
        digits_run["metadata"],
        (("ImageExampleGen", "Examples"),),
    )
    on_flink = against_direct.split_example_counts(flink_digits_run["metadata"])
    on_direct = against_direct.split_example_counts(digits_run["metadata"])
    assert on_flink == on_direct and sum(on_flink.values()) == 1797, (on_flink, on_direct)

    def summary(stdout: str) -> list[str]:
        return re.findall(r"^ *(?:examples|files rejected).*$", stdout, re.M)

    lines = summary(flink_digits_run["result"].stdout)
    assert lines and lines == summary(digits_run["result"].stdout), lines


def test_same_statistics_as_the_direct_runner(flink_digits_run, digits_run):
    differ = against_direct.different_statistics(
        flink_digits_run["metadata"], digits_run["metadata"]
    )
    assert not differ, differ


def test_same_transformed_records_as_the_direct_runner(flink_digits_run, digits_run):
    """Transform writes the transform graph only for images (the Trainer reads ExampleGen's
    shards through it): each run's graph applied to the same split's records (the
    DirectRunner's) gives the same transformed records, and the analyzers' vocabularies are
    the same files' contents."""
    on_flink = against_direct.outputs(flink_digits_run["metadata"])
    on_direct = against_direct.outputs(digits_run["metadata"])
    assert "Examples" not in on_flink["Transform"]
    graphs = [o["Transform"]["TransformGraph"] for o in (on_flink, on_direct)]
    assert against_direct.vocabularies(graphs[0]) == against_direct.vocabularies(graphs[1])
    for split in ("train", "eval"):
        raw = against_direct.split_records(on_direct["ImageExampleGen"]["Examples"], split)
        flink_records, direct_records = (
            against_direct.transformed_records(graph, raw) for graph in graphs
        )
        assert len(flink_records) == len(raw) > 0, split
        assert flink_records == direct_records, split


def test_model_quality_as_on_the_direct_runner(flink_digits_run, digits_run):
    against_direct.same_model_quality(
        "Flink (digits)", flink_digits_run["metadata"], digits_run["metadata"]
    )
    assert "blessed:       yes" in flink_digits_run["result"].stdout
