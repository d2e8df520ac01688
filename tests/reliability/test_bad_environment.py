"""An output root that cannot be written: one clear error before anything starts."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys

import pytest

from benchmarks import scale_bad_input
from pipeline import datasets, run_local
from tests.reliability.helpers import (
    FAST,
    PROJECT_ROOT,
    RUN_LOCAL,
    node_states,
    store_is_consistent,
)


def test_unwritable_output_root_is_one_clear_error(tmp_path, capsys):
    # Tests may run as root, where chmod 0555 stops nothing: a regular file where the output
    # directory must go fails for every user.
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("a file")
    output_root = str(blocker / "out")
    code = run_local.main(["--output_root", output_root])
    assert code == run_local.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("error: output directory ") and "is not writable" in err
    assert "Traceback" not in err
    assert not os.path.exists(output_root)


def run_with_file_size_limit(limit: int | None, *args: str) -> subprocess.CompletedProcess:
    """run_local.py with every file it (and its children) writes limited to `limit` bytes
    (None: no limit): RLIMIT_FSIZE with SIGXFSZ ignored, so a write past it fails with EFBIG as
    a write to a full disk fails with ENOSPC (mounting a small tmpfs needs privileges)."""

    def limit_file_size():
        if limit is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, RUN_LOCAL, *FAST, *args],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=600,
        check=False,
        preexec_fn=limit_file_size,
    )


@pytest.mark.slow
@pytest.mark.e2e
def test_full_disk_is_a_clear_error_and_the_store_stays_consistent(tmp_path, penguins_csv):
    """A disk that is full when ExampleGen writes its shards."""
    out = str(tmp_path / "out")
    # An empty MLMD SQLite store is 240 KB and a penguin run does not grow it; 60 copies of the
    # penguin rows in one TFRecord shard are larger, so ExampleGen's write is what fails.
    limit = 256 * 1024
    with open(penguins_csv) as source:
        header, *rows = source.read().splitlines()
    data_dir = tmp_path / "penguins"
    data_dir.mkdir()
    (data_dir / "penguins.csv").write_text("\n".join([header, *rows * 60]) + "\n")
    schema = datasets.curated_schema_path(datasets.PENGUINS)
    assert schema is not None
    result = run_with_file_size_limit(
        limit,
        *("--output_root", out, "--example_shards", "1"),
        *("--data", str(data_dir), "--label", "species", "--schema", schema),
    )
    report = f"exit {result.returncode}\n{result.stdout}\n{result.stderr[-3000:]}"
    assert result.returncode == 1, report
    assert "error: CsvExampleGen failed: disk full (or file size limit reached)" in result.stderr
    assert "StatisticsGen started" not in result.stdout
    metadata = os.path.join(out, "penguins-pipeline", "metadata.sqlite")
    assert store_is_consistent(metadata) == []
    [states] = node_states(metadata)
    assert states == {"CsvExampleGen": "FAILED"}


# Transform's disk-full run: 40,000 synthetic rows (2.5 MB of CSV, 5 of them malformed),
# ExampleGen writing 8 shards per split and Transform 1, in_memory. Measured with the same
# command and no limit, the largest files written before Transform are the MLMD store (254 KB
# when the run stops at Transform, 270 KB after a whole run), the run's log (131 KB when it stops
# at Transform, 217 KB after a whole run), ExampleGen's train shards (182 KB each; eval 60 KB)
# and StatisticsGen's FeatureStats.pb (32 KB per split). Transform's SavedModel is 115 KB, its
# eval shard 594 KB and its one train shard 1,797 KB. A 768 KiB limit leaves 3x above everything
# before Transform and stops Transform's train shard at 44 % of its size.
TRANSFORM_DISK_ROWS = 40_000
TRANSFORM_DISK_LIMIT = 768 * 1024


@pytest.mark.slow
@pytest.mark.e2e
def test_disk_full_during_transform_fails_transform_alone_and_keeps_what_came_before(tmp_path):
    """A disk that fills during Transform (ExampleGen, StatisticsGen, ExampleValidator done):
    one clear error naming Transform, the earlier components COMPLETE in MLMD, Transform FAILED
    with no output recorded or left on disk, the store consistent and ExampleGen's rejected-rows
    listing intact. With space again, the same command reuses what finished and reruns
    Transform (nothing of the failed one is taken as done)."""
    from pipeline.datasets import synthetic as synth_data
    from pipeline.mlmd import connection, records

    out = str(tmp_path / "out")
    data_dir = str(tmp_path / "synth")
    paths = synth_data.write_synth(data_dir, TRANSFORM_DISK_ROWS, 4, seed=0)
    # One malformed row of each kind (ragged both ways, a bad number, an empty label, both).
    injected = scale_bad_input.inject_malformed_rows(paths, len(scale_bad_input.KINDS), seed=1)
    schema = datasets.curated_schema_path(datasets.SYNTH)
    assert schema is not None
    command = (
        *("--output_root", out, "--pipeline_name", "disk-full"),
        *("--example_shards", "8", "--transform_shards", "1", "--beam_mode", "in_memory"),
        *("--data", data_dir, "--label", "label", "--schema", schema),
        *("--max_rejected_fraction", "0.01"),
    )
    result = run_with_file_size_limit(TRANSFORM_DISK_LIMIT, *command)
    report = f"exit {result.returncode}\n{result.stdout}\n{result.stderr[-3000:]}"
    assert result.returncode == 1, report
    assert "error: Transform failed: disk full (or file size limit reached)" in result.stderr, (
        report
    )
    assert result.stderr.count("error:") == 1 and "Traceback" not in result.stderr, report
    assert "Transform FAILED" in result.stdout and "Trainer started" not in result.stdout, report

    metadata = os.path.join(out, "disk-full", "metadata.sqlite")
    assert store_is_consistent(metadata) == []
    [states] = node_states(metadata)
    assert states == {
        "CsvExampleGen": "COMPLETE",
        "ImportSchemaGen": "COMPLETE",
        "StatisticsGen": "COMPLETE",
        "ExampleValidator": "COMPLETE",
        "Transform": "FAILED",
    }, states
    db = records.Store(connection.open_store(metadata))
    executions = {db.node_of(e): e for e in db.store.get_executions()}
    # Nothing of Transform's is recorded, and its partial files are gone.
    assert db.outputs_by_type(executions["Transform"].id) == {}
    transform_dir = os.path.join(out, "disk-full", "pipeline_root", "Transform")
    assert [names for _, _, names in os.walk(transform_dir) if names] == []
    # Every file that is left is under the limit: the limit stopped Transform, nothing before.
    for folder, _, names in os.walk(out):
        for name in names:
            assert os.path.getsize(os.path.join(folder, name)) < TRANSFORM_DISK_LIMIT, name
    # What came before is whole: the counts recorded, the rejected rows listed.
    [examples] = db.outputs_by_type(executions["CsvExampleGen"].id)["Examples"]
    assert records.custom_value(examples, "num_rows_read") == TRANSFORM_DISK_ROWS
    assert records.custom_value(examples, "num_rows_rejected") == len(injected)
    listing = scale_bad_input.read_listing(records.custom_value(examples, "rejected_rows_uri"))
    assert {(row["file"], row["line"]): row["reason"] for row in listing} == {
        (item.file, item.line): item.reason for item in injected
    }

    rerun = run_with_file_size_limit(None, *command)
    report = f"exit {rerun.returncode}\n{rerun.stdout}\n{rerun.stderr[-3000:]}"
    assert rerun.returncode in (0, run_local.EXIT_NOT_PUSHED), report
    for name in ("CsvExampleGen", "StatisticsGen", "ExampleValidator"):
        assert f"{name} cached" in rerun.stdout, report
    assert "Transform executed" in rerun.stdout, report
    assert store_is_consistent(metadata) == []
    assert node_states(metadata)[-1]["Transform"] == "COMPLETE"
