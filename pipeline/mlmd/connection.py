"""Connections to an ML Metadata store: a SQLite file (read-only, checked first), MySQL, or an MLMD
gRPC server; a failure to connect is one InspectError line saying why (for MySQL, in the server's
own words: its handshake or error packet is read here)."""

from __future__ import annotations

import contextlib
import glob
import os
import socket
import sqlite3
from collections.abc import Iterator

from ml_metadata import errors as mlmd_errors
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipeline.mlmd.errors import InspectError

# Kubeflow's metadata-grpc-service can be slow on a large store, but should not hang forever.
GRPC_TIMEOUT_SEC = 60.0
GRPC_MAX_MESSAGE_BYTES = 100 * 1024 * 1024


def sqlite_config(path: str) -> metadata_store_pb2.ConnectionConfig:
    if not os.path.isfile(path):
        raise InspectError(f"no MLMD store at {path} (run the pipeline first, or pass --metadata)")
    check_sqlite_store(path)
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = path
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    return config


# Tables every ML Metadata schema version has (ml-metadata's SQLite schema).
MLMD_TABLES = frozenset({"Type", "Artifact", "Execution", "Context", "Event", "MLMDEnv"})
SQLITE_MAGIC = b"SQLite format 3\x00"


def check_sqlite_store(path: str) -> None:
    """Fails with a clear line when `path` is not an ML Metadata SQLite store: opened read-only,
    ml-metadata would otherwise try to create its schema in it ("attempt to write a readonly
    database")."""
    with open(path, "rb") as handle:
        header = handle.read(len(SQLITE_MAGIC))
    if not header:
        raise InspectError(f"{path} is not an MLMD store: the file is empty")
    if header != SQLITE_MAGIC:
        raise InspectError(f"{path} is not an MLMD store: not a SQLite database")
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    except sqlite3.DatabaseError as error:
        raise InspectError(f"{path} is not an MLMD store: {error}") from error
    if not MLMD_TABLES.issubset(tables):
        raise InspectError(
            f"{path} is not an MLMD store: a SQLite database without ML Metadata's tables"
        )


def mysql_config(host: str, port: int, database: str) -> metadata_store_pb2.ConnectionConfig:
    config = metadata_store_pb2.ConnectionConfig()
    config.mysql.host = host
    config.mysql.port = port
    config.mysql.database = database
    config.mysql.user = os.environ.get("MLMD_MYSQL_USER", "root")
    config.mysql.password = os.environ.get("MLMD_MYSQL_PASSWORD", "")
    return config


def grpc_config(host: str, port: int) -> metadata_store_pb2.MetadataStoreClientConfig:
    """An MLMD gRPC server, e.g. Kubeflow's metadata-grpc-service (port 8080)."""
    config = metadata_store_pb2.MetadataStoreClientConfig(host=host, port=port)
    config.client_timeout_sec = GRPC_TIMEOUT_SEC
    config.channel_arguments.max_receive_message_length = GRPC_MAX_MESSAGE_BYTES
    return config


def find_sqlite(output_root: str, pipeline_name: str | None) -> str:
    if pipeline_name:
        return os.path.join(output_root, pipeline_name, "metadata.sqlite")
    stores = sorted(glob.glob(os.path.join(output_root, "*", "metadata.sqlite")))
    if not stores:
        raise InspectError(
            f"no MLMD store under {output_root} (run pipeline/run_local.py, or pass --metadata)"
        )
    if len(stores) > 1:
        names = ", ".join(os.path.basename(os.path.dirname(s)) for s in stores)
        raise InspectError(
            f"several pipelines under {output_root} ({names}); pick one with --pipeline"
        )
    return stores[0]


def open_store(source) -> metadata_store.MetadataStore:
    """source: a SQLite file path (opened read-only), an ml-metadata ConnectionConfig or a
    MetadataStoreClientConfig (gRPC)."""
    if isinstance(
        source,
        (metadata_store_pb2.ConnectionConfig, metadata_store_pb2.MetadataStoreClientConfig),
    ):
        return connect(source)
    return connect(sqlite_config(source))


def _where(config) -> str:
    if isinstance(config, metadata_store_pb2.MetadataStoreClientConfig):
        return f"grpc://{config.host}:{config.port}"
    return config.sqlite.filename_uri or (
        f"mysql://{config.mysql.host}:{config.mysql.port}/{config.mysql.database}"
    )


@contextlib.contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    """ml-metadata's C++ MySQL source logs to file descriptor 2 before Python sees the error
    (glog's "Logging before InitGoogleLogging" lines); the error is reported as one line."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        data += chunk
    return data


def mysql_server_message(host: str, port: int, timeout: float = 5.0) -> str:
    """Why a MySQL server cannot be used, in the words of the operating system or the server:
    ml-metadata's own error has empty errno and message fields. Reads the server's first packet
    (MySQL client/server protocol: a handshake, or an error packet)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            length = int.from_bytes(_recv_exactly(conn, 4)[:3], "little")
            payload = _recv_exactly(conn, min(length, 4096))
    except OSError as error:
        return f"cannot reach the MySQL server at {host}:{port}: {error.strerror or error}"
    if payload[:1] == b"\xff":  # ERR packet: 0xff, a 2-byte error code, the message
        code = int.from_bytes(payload[1:3], "little")
        message = payload[3:].decode("utf-8", errors="replace")
        return f"the MySQL server at {host}:{port} refused the connection: {message} ({code})"
    if payload[:1] == b"\x0a":  # protocol 10 handshake: the server's version, NUL-terminated
        version = payload[1 : payload.find(b"\x00", 1)].decode("utf-8", errors="replace")
        return (
            f"the MySQL server at {host}:{port} (version {version}) is up but did not accept "
            "the login or the database (check MLMD_MYSQL_USER, MLMD_MYSQL_PASSWORD and "
            "--mysql_database)"
        )
    return f"{host}:{port} answered, but not as a MySQL server"


def connect(config) -> metadata_store.MetadataStore:
    """config: an ml-metadata ConnectionConfig (SQLite, MySQL) or MetadataStoreClientConfig."""
    is_mysql = isinstance(config, metadata_store_pb2.ConnectionConfig) and config.HasField("mysql")
    try:
        with _native_stderr_silenced() if is_mysql else contextlib.nullcontext():
            store = metadata_store.MetadataStore(config)
            store.get_context_types()  # touches the schema: a corrupt file fails here
    except (mlmd_errors.StatusError, RuntimeError) as error:
        where = _where(config)
        if is_mysql:
            reason = mysql_server_message(config.mysql.host, config.mysql.port)
            raise InspectError(f"cannot open the MLMD store at {where}: {reason}") from error
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error)
        raise InspectError(f"cannot open the MLMD store at {where}: {first_line}") from error
    return store
