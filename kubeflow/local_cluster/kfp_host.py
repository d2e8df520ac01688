"""KFP's host processes on the local cluster (kfp.py says what runs where and why): MariaDB, the
S3 server (versitygw) and the MLMD gRPC stand-in, held by a second supervisor inside the cluster's
network namespace (plan run/kfp-plan.json, cgroup CGROUP_ROOT/kfp); their credentials, made once
per `up --kfp`."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

from kubeflow.local_cluster import builds, node
from kubeflow.local_cluster.kfp import (
    DB_USER,
    MLMD_DB,
    MLMD_PORT,
    MYSQL_PORT,
    PIPELINE_DB,
    S3_PORT,
    S3_REGION,
    KfpLayout,
)


def credentials(kfp_layout: KfpLayout) -> dict[str, str]:
    """The database password and the S3 keys of this `up` (made once, 0600)."""
    if os.path.exists(kfp_layout.credentials):
        with open(kfp_layout.credentials) as handle:
            return json.load(handle)
    made = {
        "db_password": secrets.token_hex(16),
        "s3_access_key": "kfp" + secrets.token_hex(8),
        "s3_secret_key": secrets.token_hex(20),
    }
    os.makedirs(kfp_layout.folder, exist_ok=True)
    descriptor = os.open(kfp_layout.credentials, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(made, handle)
    return made


def _private_file(path: str, text: str) -> str:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    return path


def prepare_mariadb(kfp_layout: KfpLayout, mariadb_install_db: str) -> None:
    """A fresh data folder (mariadb-install-db), and the init file mariadbd runs at start: the
    two databases and the user `kfp` from any host, with mysql_native_password."""
    os.makedirs(kfp_layout.folder, exist_ok=True)
    result = subprocess.run(
        [
            mariadb_install_db,
            "--no-defaults",
            f"--datadir={kfp_layout.mariadb_data}",
            "--user=root",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise builds.BuildFailed(
            f"mariadb-install-db failed:\n{(result.stderr or result.stdout).strip()[-2000:]}"
        )
    password = credentials(kfp_layout)["db_password"]
    sql = (
        f"CREATE DATABASE IF NOT EXISTS {PIPELINE_DB};\n"
        f"CREATE DATABASE IF NOT EXISTS {MLMD_DB};\n"
        f"CREATE USER IF NOT EXISTS '{DB_USER}'@'%' "
        f"IDENTIFIED VIA mysql_native_password USING PASSWORD('{password}');\n"
        f"GRANT ALL PRIVILEGES ON *.* TO '{DB_USER}'@'%';\n"
        "FLUSH PRIVILEGES;\n"
    )
    _private_file(os.path.join(kfp_layout.folder, "init.sql"), sql)
    _private_file(os.path.join(kfp_layout.folder, "db-password"), password)


def daemons(kfp_layout: KfpLayout, mariadbd: str, versitygw: str) -> list[node.Daemon]:
    keys = credentials(kfp_layout)
    os.makedirs(kfp_layout.s3_root, exist_ok=True)
    return [
        node.Daemon(
            "mariadb",
            [
                mariadbd,
                "--no-defaults",
                f"--datadir={kfp_layout.mariadb_data}",
                f"--socket={kfp_layout.mariadb_socket}",
                f"--pid-file={os.path.join(kfp_layout.folder, 'mariadb.pid')}",
                f"--bind-address={node.NODE_IP}",
                f"--port={MYSQL_PORT}",
                "--user=root",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=64M",
                f"--init-file={os.path.join(kfp_layout.folder, 'init.sql')}",
            ],
            {"socket": kfp_layout.mariadb_socket},
        ),
        node.Daemon(
            "s3-versitygw",
            [
                versitygw,
                f"--port={node.NODE_IP}:{S3_PORT}",
                # The region KFP's launcher signs with for minio:// roots
                # (v2/objectstore/config.go); the API server is told the same.
                f"--region={S3_REGION}",
                "--health=/health",
                "posix",
                kfp_layout.s3_root,
            ],
            {"http": f"http://{node.NODE_IP}:{S3_PORT}/health"},
            env={
                "ROOT_ACCESS_KEY": keys["s3_access_key"],
                "ROOT_SECRET_KEY": keys["s3_secret_key"],
            },
        ),
        node.Daemon(
            "mlmd-grpc",
            [
                sys.executable,
                "-m",
                "kubeflow.local_cluster.mlmd_server",
                f"--listen={node.NODE_IP}:{MLMD_PORT}",
                f"--mysql_host={node.NODE_IP}",
                f"--mysql_port={MYSQL_PORT}",
                f"--database={MLMD_DB}",
                f"--user={DB_USER}",
                f"--password_file={os.path.join(kfp_layout.folder, 'db-password')}",
            ],
            {"tcp": f"{node.NODE_IP}:{MLMD_PORT}"},
        ),
    ]


def write_plan(kfp_layout: KfpLayout, mariadbd: str, versitygw: str) -> None:
    plan = {
        "private_dirs": [],
        "logs": kfp_layout.layout.logs,
        "pidfile": kfp_layout.pidfile,
        "cgroup": "kfp",
        "daemons": [d.to_json() for d in daemons(kfp_layout, mariadbd, versitygw)],
    }
    with open(os.path.join(kfp_layout.layout.run, kfp_layout.plan_name), "w") as handle:
        json.dump(plan, handle, indent=1)
