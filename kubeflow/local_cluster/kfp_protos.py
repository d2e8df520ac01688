"""Kubeflow Pipelines' `api` and `kubernetes_platform` Go modules at the commit the project pins
(kubeflow/pipelines fc3214d4b4d3, tag 2.14.3), generated from the protos vendored in go/kfp/proto.

Why generated: the Go module proxy has no version of either module at that commit (404), and the
stale pseudo-versions KFP's root go.mod requires do not compile with its driver, compiler and API
server packages (proto fields added since); KFP's own `replace ./api` lines do not apply to a
module that depends on it. Two builds use this: the local cluster's KFP binaries
(builds.build_kfp, module go/kfp) and the tests' kfp_check (tests/kubeflow/kfp_backend.py), each
in a build copy of its module whose go.mod replaces both modules by ./gen/<module>.

protoc is grpcio-tools' (a venv of its own, venvs.py: it needs protobuf >= 6, the project's lock
pins 3.20.3); protoc-gen-go is built from the consuming module's google.golang.org/protobuf (its
go.sum pins it). tests/kubeflow/kfp_check/README.md says how the output was compared with
upstream's committed files.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from kubeflow.local_cluster import venvs

PROTOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "go", "kfp", "proto")
PROTOC_PINS = ["grpcio-tools==1.84.0"]
PROTOC_VENV = "protoc-venv"
# What is generated: (proto file, its -I folders, the output folder under gen/).
GENERATED = [
    ("pipeline_spec.proto", ["proto/api/v2alpha1", "proto"], "api/v2alpha1/go/pipelinespec"),
    ("cache_key.proto", ["proto/api/v2alpha1", "proto"], "api/v2alpha1/go/cachekey"),
    (
        "kubernetes_executor_config.proto",
        ["proto/kubernetes_platform/proto", "proto/api/v2alpha1", "proto"],
        "kubernetes_platform/go/kubernetesplatform",
    ),
]
# Each generated module's go.mod (upstream's at the pinned commit), relative to the build copy.
GO_MODS = {"api": "proto/api.go.mod", "kubernetes_platform": "proto/kubernetes_platform.go.mod"}
# Runs one step of the generation in the build copy (the command, the step's name for errors);
# raises on failure.
Run = Callable[[list[str], str], None]


def proto_files() -> list[tuple[str, str]]:
    """(name in a build copy, e.g. proto/api.go.mod; path here) for every vendored file, sorted by
    name: what a build copy holds under proto/ and what its cache key hashes."""
    found = []
    for folder, _, names in os.walk(PROTOS):
        for name in names:
            path = os.path.join(folder, name)
            found.append((os.path.join("proto", os.path.relpath(path, PROTOS)), path))
    return sorted(found)


def copy_protos(source: str) -> None:
    """The vendored protos into the build copy `source` (under proto/), and the two modules'
    go.mod files into gen/api and gen/kubernetes_platform, where go.mod's replace lines point."""
    for name, path in proto_files():
        os.makedirs(os.path.dirname(os.path.join(source, name)), exist_ok=True)
        shutil.copyfile(path, os.path.join(source, name))
    for module, go_mod in GO_MODS.items():
        os.makedirs(os.path.join(source, "gen", module))
        shutil.copyfile(os.path.join(source, go_mod), os.path.join(source, "gen", module, "go.mod"))


def generate(go: str, source: str, run: Run) -> None:
    """The generated Go code under `source`/gen, as upstream generates it (protoc-gen-go,
    paths=source_relative). `source` holds a go.mod that requires google.golang.org/protobuf
    and the files copy_protos put there."""
    python = venvs.ensure(PROTOC_VENV, PROTOC_PINS)
    plugin = os.path.join(source, "bin", "protoc-gen-go")
    # The plugin at the version the module requires (pinned by its go.sum).
    run([go, "build", "-o", plugin, "google.golang.org/protobuf/cmd/protoc-gen-go"], "go build")
    for proto, includes, out in GENERATED:
        target = os.path.join(source, "gen", out)
        os.makedirs(target, exist_ok=True)
        command = [
            python,
            "-m",
            "grpc_tools.protoc",
            f"--plugin=protoc-gen-go={plugin}",
            *(f"-I{include}" for include in includes),
            "--go_opt=paths=source_relative",
            f"--go_out={target}",
            proto,
        ]
        run(command, f"protoc {proto}")
