"""inspect_mlmd's error paths: one line on stderr, exit code 2, never a traceback."""

from __future__ import annotations

import pytest

from pipeline import inspect_mlmd


def run(capsys, *args):
    code = inspect_mlmd.main(list(args))
    captured = capsys.readouterr()
    return code, captured.err


def test_missing_store(capsys, tmp_path):
    code, err = run(capsys, "--metadata", str(tmp_path / "none.sqlite"), "runs")
    assert code == 2
    assert err.startswith("error: no MLMD store at ") and err.count("\n") == 1


def test_no_store_under_output_root(capsys, tmp_path):
    code, err = run(capsys, "--output_root", str(tmp_path), "runs")
    assert code == 2 and "no MLMD store under" in err


def test_several_pipelines_need_a_choice(capsys, tmp_path):
    for name in ("a-pipeline", "b-pipeline"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metadata.sqlite").write_bytes(b"")
    code, err = run(capsys, "--output_root", str(tmp_path), "runs")
    assert code == 2 and "several pipelines" in err and "--pipeline" in err


def test_corrupt_store(capsys, tmp_path):
    corrupt = tmp_path / "metadata.sqlite"
    corrupt.write_bytes(b"this is not a database" * 100)
    code, err = run(capsys, "--metadata", str(corrupt), "runs")
    assert code == 2
    assert err.startswith(f"error: cannot open the MLMD store at {corrupt}")
    assert err.count("\n") == 1


@pytest.fixture
def empty_store(tmp_path):
    """A valid, empty MLMD store (the schema created by a writable connection)."""
    from ml_metadata import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    path = tmp_path / "metadata.sqlite"
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = str(path)
    metadata_store.MetadataStore(config)
    return str(path)


def test_unknown_run_and_artifact(capsys, empty_store):
    code, err = run(capsys, "--metadata", empty_store, "executions", "7")
    assert code == 2 and "the store has no pipeline runs" in err
    code, err = run(capsys, "--metadata", empty_store, "lineage", "42")
    assert code == 2 and "unknown artifact id 42" in err


def test_unreachable_mysql(capsys):
    code, err = run(capsys, "--mysql_host", "127.0.0.1", "--mysql_port", "9", "runs")
    assert code == 2
    assert err.startswith("error: cannot open the MLMD store at mysql://127.0.0.1:9/metadb")
