"""Kubeflow Pipelines' own backend code on the compiled files: a small Go program (kfp_check/,
pinned to a kubeflow/pipelines commit by its go.mod and go.sum; what it uses and why is said
there and in its README) built once per machine and cached under
~/.cache/tfx-scaleout/kfp-check/<hash of its files>/ ($XDG_CACHE_HOME respected; Go's module and
build caches are where `go env` says), as tests/components/training/real_kube.py does for
kube-apiserver. The build first generates KFP's `api` and `kubernetes_platform` Go modules from the
protos vendored in kubeflow/local_cluster/go/kfp/proto (kubeflow/local_cluster/kfp_protos.py, which
the local cluster's KFP build shares: protoc from grpcio-tools in a venv of its own, protoc-gen-go
from the module's own google.golang.org/protobuf), in a copy of the module beside the binary.

`argo` has the API server parse a compiled file, compile a run of it to an Argo Workflow and
validate that, then `argo lint` it, and returns the Workflow.

`run_tasks` has KFP's container driver prepare every task of that Workflow in turn (each task's
outputs published as the launcher publishes them) through a real ML Metadata store served over
gRPC by `MlmdServer` (MLMD's own library on SQLite behind MLMD's own service definition), and
returns each task's ExecutorInput and pod spec patch.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import time

from kubeflow.local_cluster import kfp_protos, mlmd_server

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = os.path.join(HERE, "kfp_check")
# The Go module proxy has no checksum-database entry for kubeflow/pipelines pseudo-versions:
# go.sum (committed) is what pins them; the build is -mod=readonly and never asks sum.golang.org.
NOSUMDB = "github.com/kubeflow/pipelines"


class Unavailable(RuntimeError):
    """Go is missing or too old; the message says what to install."""


def kfp_version(go_mod: str | None = None) -> str:
    """The kubeflow/pipelines pseudo-version kfp_check/go.mod requires."""
    with open(go_mod or os.path.join(MODULE, "go.mod")) as handle:
        found = re.search(
            r"^(?:require )?\s*github\.com/kubeflow/pipelines (v\S+)$", handle.read(), re.M
        )
    if not found:
        raise RuntimeError("kfp_check/go.mod does not require github.com/kubeflow/pipelines")
    return found.group(1)


def _sources() -> list[tuple[str, str]]:
    """(name in the build copy, path here) of the module's files: the Go sources, go.mod, go.sum,
    and the vendored protos as proto/... (kfp_protos), sorted by name."""
    found = [
        (name, os.path.join(MODULE, name))
        for name in os.listdir(MODULE)
        if name.endswith(".go") or name in ("go.mod", "go.sum")
    ]
    return sorted(found + kfp_protos.proto_files())


def cache_dir() -> str:
    pins = [*kfp_protos.PROTOC_PINS, *map(repr, kfp_protos.GENERATED)]
    digest = hashlib.sha256(" ".join(pins).encode())
    for name, path in _sources():
        with open(path, "rb") as handle:
            digest.update(name.encode() + b"\0" + handle.read())
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "tfx-scaleout", "kfp-check", digest.hexdigest()[:16])


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise Unavailable("the KFP backend checks are built with Go: install Go (go.dev/dl)")
    with open(os.path.join(MODULE, "go.mod")) as handle:
        needed_text = re.search(r"^go (\d+)\.(\d+)", handle.read(), re.M)
    assert needed_text, "kfp_check/go.mod has no go line"
    needed = (int(needed_text.group(1)), int(needed_text.group(2)))
    output = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout
    found = re.match(r"go(\d+)\.(\d+)", output.strip())
    if not found or (int(found.group(1)), int(found.group(2))) < needed:
        raise Unavailable(
            f"kfp_check needs Go >= {needed[0]}.{needed[1]}, found {output.strip() or 'none'}"
        )
    return go


@dataclasses.dataclass(frozen=True)
class Built:
    binary: str
    seconds: float  # the build's time in this process; 0.0 when the cached binary was used


def build(say=lambda line: None) -> Built:
    """kfp_check: cached, else built by one `go build` under a lock (two sessions build once)."""
    folder = cache_dir()
    binary = os.path.join(folder, "kfp_check")
    if os.access(binary, os.X_OK):
        return Built(binary, 0.0)
    go = _go()
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, ".build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.access(binary, os.X_OK):
            return Built(binary, 0.0)
        say(f"tests: building kfp_check against kubeflow/pipelines {kfp_version()} (once)")
        started = time.monotonic()
        flags = f"{os.environ.get('GOFLAGS', '')} -mod=readonly -modcacherw".strip()
        nosumdb = ",".join(filter(None, [os.environ.get("GONOSUMDB", ""), NOSUMDB]))
        env = dict(os.environ, GOFLAGS=flags, GONOSUMDB=nosumdb)
        source = _copy_module(os.path.join(folder, "src"))
        kfp_protos.generate(go, source, functools.partial(_run_step, go, source, env))
        partial = binary + ".partial"
        _go_run(go, ["build", "-trimpath", "-ldflags=-s -w", "-o", partial, "."], source, env)
        os.replace(partial, binary)
        return Built(binary, time.monotonic() - started)


def _go_run(go: str, args: list[str], cwd: str, env: dict) -> None:
    result = subprocess.run([go, *args], cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"go {args[0]} for kfp_check failed (in {cwd}):\n{tail}")


def _run_step(go: str, source: str, env: dict, command: list[str], step: str) -> None:
    """One step of kfp_protos.generate, failing as the build's own steps do."""
    if command[0] == go:
        _go_run(go, command[1:], source, env)
        return
    result = subprocess.run(command, cwd=source, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{step} for kfp_check failed:\n{result.stderr[-3000:]}")


def _copy_module(source: str) -> str:
    """A fresh copy of kfp_check/ and the vendored protos to build in (the generated modules go
    under its gen/)."""
    shutil.rmtree(source, ignore_errors=True)
    os.makedirs(source)
    for name, path in _sources():
        if not name.startswith("proto" + os.sep):
            shutil.copyfile(path, os.path.join(source, name))
    kfp_protos.copy_protos(source)
    return source


class CheckFailed(AssertionError):
    """KFP's backend refused a file; the message is kfp_check's (file, step, KFP's error)."""


def _run(binary: str, args: list[str]) -> None:
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise CheckFailed((result.stderr or result.stdout).strip()[-4000:])


class MlmdServer(mlmd_server.MlmdServer):
    """ML Metadata's own store (its C++ library, SQLite file) behind MLMD's gRPC service
    definition, on a loopback port: each RPC is handed to the store unchanged, so the backend's
    Go client talks to real MLMD semantics (the local cluster serves the same class on MariaDB,
    kubeflow/local_cluster/mlmd_server.py)."""

    def __init__(self, sqlite_path: str):
        super().__init__(mlmd_server.sqlite_config(sqlite_path), "127.0.0.1:0")


def argo(binary: str, pipeline: str, out_dir: str) -> dict:
    """The Argo Workflow KFP's API server creates for a run of the compiled file `pipeline`,
    after its upload parser, argocompiler.Compile, its validation and `argo lint` passed."""
    import yaml

    path = os.path.join(out_dir, os.path.basename(pipeline).rsplit(".", 1)[0] + ".workflow.yaml")
    _run(binary, ["argo", pipeline, path])
    with open(path) as handle:
        return yaml.safe_load(handle)


def run_tasks(binary: str, pipeline: str, out_dir: str, mlmd: MlmdServer) -> dict[str, dict]:
    """task -> {"executor_input": ..., "pod_spec_patch": ...} as KFP's container driver builds
    them for a run of the compiled file, every task in turn, against `mlmd`."""
    _run(binary, ["run", pipeline, f"127.0.0.1:{mlmd.port}", out_dir])
    out: dict[str, dict] = {}
    for name in sorted(os.listdir(out_dir)):
        for suffix, key in (
            (".executor_input.json", "executor_input"),
            (".pod_spec_patch.json", "pod_spec_patch"),
        ):
            if name.endswith(suffix):
                with open(os.path.join(out_dir, name)) as handle:
                    out.setdefault(name[: -len(suffix)], {})[key] = json.load(handle)
    return out
