"""Before a run on Flink or Spark: is the cluster (or job server) there, and does its version
fit the job server? Each failure is one ConfigError naming the flag, found within seconds, so
that a wrong address or version never becomes a component that hangs or fails half-way.

Checked (pipeline/run_local.py, before any component starts):
- --flink_master: Flink's REST API answers `GET /config`, and its `flink-version` has the minor
  version of the job server (--flink_version, else the one in the --beam_job_server_jar name,
  else Beam's default 1.18): a Flink client submits only to a cluster of its own minor version.
- --spark_master_url: the master's port accepts a connection.
- --beam_job_endpoint (not `embed`): a gRPC server answers there.
"""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.request

from pipeline.config import EMBEDDED_JOB_ENDPOINT, BeamConfig, ConfigError

TIMEOUT_S = 5.0
# Beam 2.59's FlinkRunner default --flink_version.
BEAM_DEFAULT_FLINK = "1.18"


def flink_version(master: str, timeout: float = TIMEOUT_S) -> str:
    """The Flink version the JobManager at `master` (its REST host:port) reports."""
    try:
        with urllib.request.urlopen(f"http://{master}/config", timeout=timeout) as response:
            return str(json.load(response)["flink-version"])
    except (urllib.error.URLError, OSError, ValueError, KeyError) as error:
        reason = getattr(error, "reason", None) or error
        raise ConfigError(
            f"cluster unreachable: beam.flink_master {master} (--flink_master): no Flink REST "
            f"API answers there within {timeout:.0f} s ({reason}); start the cluster or correct "
            "the address (the JobManager's REST port, 8081 by default)"
        ) from error


def job_server_flink(config: BeamConfig) -> tuple[str, str]:
    """(Flink minor version the job server is built for, where that was read from)."""
    if config.flink_version:
        return config.flink_version, "--flink_version"
    found = re.search(r"flink-(\d+\.\d+)", config.job_server_jar.rsplit("/", 1)[-1])
    if found:
        return found.group(1), "--beam_job_server_jar"
    return BEAM_DEFAULT_FLINK, "Beam's default --flink_version"


def _check_flink(config: BeamConfig, timeout: float) -> None:
    version = flink_version(config.flink_master, timeout)
    minor = ".".join(version.split(".")[:2])
    expected, source = job_server_flink(config)
    if minor != expected:
        raise ConfigError(
            f"wrong Flink version: the cluster at {config.flink_master} runs Flink {version}, "
            f"the job server is for Flink {expected} ({source}); a Flink client submits only "
            f"to its own minor version: pass --flink_version {minor} with a job server for it "
            "(--beam_job_server_jar), or use a Flink {expected} cluster"
        )


def _check_port(what: str, address: str, timeout: float) -> None:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return
    except (OSError, ValueError) as error:
        raise ConfigError(
            f"cluster unreachable: {what} {address}: nothing accepts connections there within "
            f"{timeout:.0f} s ({error}); start it or correct the address"
        ) from error


def _check_job_server(endpoint: str, timeout: float) -> None:
    import grpc

    channel = grpc.insecure_channel(endpoint)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError as error:
        raise ConfigError(
            f"cluster unreachable: beam.job_endpoint {endpoint} (--beam_job_endpoint): no Beam "
            f"job server answers there within {timeout:.0f} s; start it or correct the address"
        ) from error
    finally:
        channel.close()


def check(config: BeamConfig, timeout: float = TIMEOUT_S) -> None:
    """Raises ConfigError when the configured cluster or job server cannot take the run."""
    if config.runner not in ("portable", "flink", "spark"):
        return
    if config.job_endpoint and config.job_endpoint != EMBEDDED_JOB_ENDPOINT:
        _check_job_server(config.job_endpoint, timeout)
    elif config.runner == "flink" and config.flink_master:
        _check_flink(config, timeout)
    elif config.runner == "spark" and config.spark_master_url:
        _check_port(
            "beam.spark_master_url (--spark_master_url)",
            config.spark_master_url.removeprefix("spark://"),
            timeout,
        )
