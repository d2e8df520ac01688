"""ML Metadata's gRPC service over MLMD's own library (the ml-metadata wheel): the stand-in for
Kubeflow Pipelines' metadata-grpc-server, whose C++ build needs Bazel downloads.

Each RPC of MLMD's service definition (metadata_store_service.proto's MetadataStoreService) is
handed unchanged to the wheel's store, the same C++ library metadata-grpc-server links, so KFP's
driver and launcher (Go gRPC clients) see real MLMD semantics on a real database. What it does not
prove: metadata-grpc-server's own gRPC front end (its flags, its connection pooling and retries,
its TLS), and concurrency: calls are served one at a time, as one store connection allows.

    python -m kubeflow.local_cluster.mlmd_server --listen HOST:PORT --mysql_host HOST \
        --mysql_port 3306 --database metadb --user USER --password_file FILE

`tests/kubeflow/kfp_backend.py` serves a SQLite store with the same class.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import signal
import sys
import threading


class MlmdServer:
    """MLMD's store behind MLMD's gRPC service definition, on `listen` (host:port; port 0 picks
    one: `port` says which after `start`)."""

    def __init__(self, config, listen: str = "127.0.0.1:0"):
        from ml_metadata.metadata_store import metadata_store

        # Connects, and creates or upgrades MLMD's schema in the database.
        self.store = metadata_store.MetadataStore(config)
        self.listen = listen
        self.server = None
        self.port = 0
        self._lock = threading.Lock()

    def _handler(self, method):
        import grpc
        from ml_metadata import errors
        from ml_metadata.proto import metadata_store_service_pb2 as service

        response_class = getattr(service, method.output_type.name)

        def call(request, context):
            response = response_class()
            try:
                with self._lock:  # one store connection: one call at a time
                    # The store's own dispatch by RPC name (what its Python methods call).
                    self.store._call(method.name, request, response)  # noqa: SLF001
            except errors.StatusError as error:
                code = next(c for c in grpc.StatusCode if c.value[0] == error.error_code)
                context.abort(code, str(error))
            return response

        return grpc.unary_unary_rpc_method_handler(
            call,
            request_deserializer=getattr(service, method.input_type.name).FromString,
            response_serializer=response_class.SerializeToString,
        )

    def start(self) -> MlmdServer:
        import grpc
        from ml_metadata.proto import metadata_store_service_pb2 as service

        described = service.DESCRIPTOR.services_by_name["MetadataStoreService"]
        handlers = {method.name: self._handler(method) for method in described.methods}
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(described.full_name, handlers),)
        )
        self.port = server.add_insecure_port(self.listen)
        if not self.port:
            raise OSError(f"cannot listen on {self.listen}")
        server.start()
        self.server = server
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=None)


def sqlite_config(path: str):
    from ml_metadata.proto import metadata_store_pb2

    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = path
    config.sqlite.connection_mode = (
        metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    )
    return config


def mysql_config(host: str, port: int, database: str, user: str, password: str):
    from ml_metadata.proto import metadata_store_pb2

    config = metadata_store_pb2.ConnectionConfig()
    config.mysql.host = host
    config.mysql.port = port
    config.mysql.database = database
    config.mysql.user = user
    config.mysql.password = password
    return config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubeflow.local_cluster.mlmd_server")
    parser.add_argument("--listen", required=True, help="HOST:PORT")
    parser.add_argument("--mysql_host", required=True)
    parser.add_argument("--mysql_port", type=int, default=3306)
    parser.add_argument("--database", required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--password_file", required=True)
    args = parser.parse_args(argv)
    with open(args.password_file) as handle:
        password = handle.read().strip()
    config = mysql_config(args.mysql_host, args.mysql_port, args.database, args.user, password)
    server = MlmdServer(config, args.listen).start()
    print(f"MLMD gRPC on {args.listen} (MySQL {args.mysql_host}:{args.mysql_port}/{args.database})")
    sys.stdout.flush()
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    stopped.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
