"""An output root that cannot be written: one clear error before anything starts."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys

import pytest

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


@pytest.mark.slow
@pytest.mark.e2e
def test_full_disk_is_a_clear_error_and_the_store_stays_consistent(tmp_path, penguins_csv):
    """A full disk, simulated with a file size limit (RLIMIT_FSIZE, SIGXFSZ ignored, so writes past
    it fail with EFBIG as they would with ENOSPC; mounting a small tmpfs needs privileges)."""
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

    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = subprocess.run(
        [sys.executable, RUN_LOCAL, *FAST, "--output_root", out, "--example_shards", "1"]
        + ["--data", str(data_dir), "--label", "species", "--schema", schema],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=600,
        check=False,
        preexec_fn=limit_file_size,
    )
    report = f"exit {result.returncode}\n{result.stdout}\n{result.stderr[-3000:]}"
    assert result.returncode == 1, report
    assert "error: CsvExampleGen failed: disk full (or file size limit reached)" in result.stderr
    assert "StatisticsGen started" not in result.stdout
    metadata = os.path.join(out, "penguins-pipeline", "metadata.sqlite")
    assert store_is_consistent(metadata) == []
    [states] = node_states(metadata)
    assert states == {"CsvExampleGen": "FAILED"}
