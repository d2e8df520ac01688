"""inspect_mlmd's error paths: one line on stderr, exit code 2, never a traceback; and --json
before or after the subcommand."""

from __future__ import annotations

import json
import socket
import sqlite3
import threading

import pytest

from pipeline.mlmd import cli as inspect_mlmd


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


def test_files_that_are_not_mlmd_stores(capsys, tmp_path):
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"this is not a database" * 100)
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
    for path, reason in (
        (corrupt, "not a SQLite database"),
        (empty, "the file is empty"),
        (other, "a SQLite database without ML Metadata's tables"),
    ):
        code, err = run(capsys, "--metadata", str(path), "runs")
        assert code == 2
        assert err == f"error: {path} is not an MLMD store: {reason}\n"
    assert other.read_bytes()[:16] == b"SQLite format 3\x00"  # left as it was


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


def test_unreachable_mysql(capfd):
    """ml-metadata's C++ source logs to file descriptor 2 and reports empty fields ("errno: ,
    error:"): the line names host:port and the operating system's reason."""
    code = inspect_mlmd.main(["--mysql_host", "127.0.0.1", "--mysql_port", "9", "runs"])
    err = capfd.readouterr().err
    assert code == 2
    assert err == (
        "error: cannot open the MLMD store at mysql://127.0.0.1:9/metadb: cannot reach the "
        "MySQL server at 127.0.0.1:9: Connection refused\n"
    )


def _one_packet_server(payload: bytes) -> tuple[socket.socket, threading.Thread]:
    """A loopback server that answers one connection with one MySQL protocol packet (3-byte
    length, sequence id 0, payload) and closes it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(30)
    packet = len(payload).to_bytes(3, "little") + b"\x00" + payload

    def serve():
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.sendall(packet)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


@pytest.mark.parametrize(
    "payload, reason",
    [
        (
            b"\xff\x69\x04Host '127.0.0.1' is not allowed to connect to this MariaDB server",
            "the MySQL server at 127.0.0.1:{port} refused the connection: Host '127.0.0.1' is "
            "not allowed to connect to this MariaDB server (1129)",
        ),
        (
            b"\x0a10.11.6-MariaDB-0+deb12u1\x00" + bytes(40),
            "the MySQL server at 127.0.0.1:{port} (version 10.11.6-MariaDB-0+deb12u1) is up but "
            "did not accept the login or the database (check MLMD_MYSQL_USER, "
            "MLMD_MYSQL_PASSWORD and --mysql_database)",
        ),
    ],
)
def test_mysql_server_message(payload, reason):
    from pipeline.mlmd import connection

    server, thread = _one_packet_server(payload)
    port = server.getsockname()[1]
    try:
        assert connection.mysql_server_message("127.0.0.1", port) == reason.format(port=port)
    finally:
        server.close()
        thread.join(timeout=30)


def test_json_before_or_after_the_subcommand(capsys, empty_store):
    for args in (["--json", "runs"], ["runs", "--json"]):
        code = inspect_mlmd.main(["--metadata", empty_store, *args])
        assert code == 0 and json.loads(capsys.readouterr().out) == []
    assert inspect_mlmd.main(["--metadata", empty_store, "runs"]) == 0
    assert capsys.readouterr().out == "(none)\n"


def test_report_to_a_place_that_cannot_be_written(capsys, tmp_path):
    from tests.pipeline.mlmd import tfx_store

    store = str(tmp_path / "metadata.sqlite")
    tfx_store.TfxRecorder(store, str(tmp_path)).execute("run-1", 3, {}, {}, {}, "ImportSchemaGen")
    missing = tmp_path / "missing" / "dir" / "r.html"
    code, err = run(capsys, "--metadata", store, "report", "--out", str(missing))
    assert code == 2
    assert err == (f"error: cannot write the report to {missing}: no directory {missing.parent}\n")
    code, err = run(capsys, "--metadata", store, "report", "--out", str(tmp_path))
    assert code == 2
    assert err == f"error: cannot write the report to {tmp_path}: Is a directory\n"
