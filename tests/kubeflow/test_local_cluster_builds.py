"""The local cluster's builds (kubeflow/local_cluster/builds.py): cache keys, flags, the Go
modules' pins, a failed build naming its log, the vendored CRDs being the ones the operators' own
releases ship (the releases the cluster builds and deploys), and Kubeflow Pipelines' and Argo's
programs and the S3 server built (cached after the first time), static, each running and saying
its pinned release where it can print one."""

from __future__ import annotations

import filecmp
import os
import re
import shutil
import struct
import subprocess
from unittest import mock

import pytest

from kubeflow.local_cluster import builds

CRDS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "components", "training", "crds"
)


def test_the_kubernetes_build_is_keyed_by_release_and_pins(tmp_path):
    module = tmp_path / "kubernetes"
    shutil.copytree(builds.KUBERNETES_MODULE, module)
    with mock.patch.object(builds, "KUBERNETES_MODULE", str(module)):
        version = builds.kubernetes_version()
        first = builds.kubernetes_cache_dir()
        assert os.path.basename(first).startswith(f"{version}-")
        with open(module / "go.sum", "a") as handle:
            handle.write("example.com/m v1.0.0 h1:AAAA=\n")
        assert builds.kubernetes_cache_dir() != first
    assert version.startswith("v1.")
    flags = builds.kubernetes_build_flags()
    assert flags[0] == "-trimpath"
    assert f"-X k8s.io/component-base/version.gitVersion={version}" in flags[1]
    assert flags[1].startswith("-ldflags=-s -w ")


def test_the_go_module_replaces_every_staging_module_with_its_release():
    """k8s.io/kubernetes requires its staging modules at v0.0.0 (replaced by ./staging there):
    each must be replaced here by the release that matches v1.X.Y, v0.X.Y."""
    with open(os.path.join(builds.KUBERNETES_MODULE, "go.mod")) as handle:
        text = handle.read()
    version = builds.kubernetes_version()
    staging = f"v0.{version.split('.', 1)[1]}"
    replaced = [line.split() for line in text.splitlines() if "=>" in line]
    assert len(replaced) >= 25
    for old, arrow, new, release in replaced:
        assert arrow == "=>" and old == new and old.startswith("k8s.io/"), (old, new)
        assert release == staging, (old, release)
    for tool in builds.KUBERNETES_TOOLS:
        assert f"\tk8s.io/kubernetes/cmd/{tool}\n" in text, tool


def test_the_jobset_module_requires_exactly_the_release_it_builds():
    with open(os.path.join(os.path.dirname(builds.KUBERNETES_MODULE), "jobset", "go.mod")) as h:
        text = h.read()
    jobset = builds.CONTROLLERS["jobset"]
    assert (
        f"\t{jobset.module} {jobset.version}" in text
        or f"require {jobset.module} {jobset.version}" in text
    )
    assert f"tool {jobset.package}" in text


def test_a_failed_build_names_its_log_and_its_last_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    broken = builds.GoInstall(
        "broken", "example.invalid/no-such-module/cmd/x", "v0.0.1", "example.invalid/no-such-module"
    )
    with pytest.raises(builds.BuildFailed) as failure:
        builds.build_controller(broken)
    message = str(failure.value)
    log = os.path.join(str(tmp_path), "tfx-scaleout", "controllers")
    assert "the build of broken v0.0.1 failed (log: " + log in message
    assert "example.invalid/no-such-module" in message.splitlines()[-1]


@pytest.mark.parametrize(
    "file_name, controller, path",
    [
        ("kubeflow.org_tfjobs.yaml", "training-operator", "manifests/base/crds"),
        ("trainer.kubeflow.org_trainjobs.yaml", "trainer", "manifests/base/crds"),
        ("trainer.kubeflow.org_trainingruntimes.yaml", "trainer", "manifests/base/crds"),
        ("trainer.kubeflow.org_clustertrainingruntimes.yaml", "trainer", "manifests/base/crds"),
        ("jobset.x-k8s.io_jobsets.yaml", "jobset", "config/components/crd/bases"),
    ],
)
def test_the_vendored_crds_are_the_ones_the_deployed_releases_ship(file_name, controller, path):
    release = builds.CONTROLLERS[controller]
    shipped = os.path.join(builds.module_dir(release.module, release.version), path, file_name)
    assert filecmp.cmp(os.path.join(CRDS, file_name), shipped, shallow=False), shipped


def test_the_kfp_module_pins_tag_2_14_3_and_the_argo_release_kfp_requires():
    go = os.path.dirname(builds.KUBERNETES_MODULE)
    with open(os.path.join(builds.KFP_MODULE, "go.mod")) as handle:
        kfp = handle.read()
    with open(os.path.join(go, "argo", "go.mod")) as handle:
        argo = handle.read()
    # tag 2.14.3 is commit fc3214d4b4d3 (the one the module proxy serves).
    assert builds.kfp_version() == "v0.0.0-20250902140602-fc3214d4b4d3"
    for package in builds.KFP_PROGRAMS.values():
        assert f"\tgithub.com/kubeflow/pipelines/{package}\n" in kfp, package
    assert f"\t{builds.ARGO_MODULE} {builds.ARGO_VERSION} // indirect" in kfp
    assert f"\t{builds.ARGO_MODULE} {builds.ARGO_VERSION}" in argo
    for name in ("workflow-controller", "argoexec"):
        program = builds.KFP_SERVICES[name]
        assert (program.version, program.wrapper) == (builds.ARGO_VERSION, "argo")
        assert f"\t{program.package}\n" in argo, name
    assert "minio" not in builds.KFP_SERVICES and "garage" not in builds.KFP_SERVICES


def test_the_kfp_build_is_keyed_by_its_pins_and_protos(tmp_path):
    module = tmp_path / "kfp"
    shutil.copytree(builds.KFP_MODULE, module)
    with mock.patch.object(builds, "KFP_MODULE", str(module)):
        first = builds.kfp_cache_dir()
        assert os.path.basename(first).startswith("fc3214d4b4d3-")
        with open(module / "go.sum", "a") as handle:
            handle.write("example.com/m v1.0.0 h1:AAAA=\n")
        assert builds.kfp_cache_dir() != first
    proto = tmp_path / "status.proto"
    proto.write_text("// changed\n")
    files = [
        (name, str(proto) if name.endswith("status.proto") else path)
        for name, path in builds.kfp_protos.proto_files()
    ]
    with mock.patch.object(builds.kfp_protos, "proto_files", return_value=files):
        assert builds.kfp_cache_dir() != first


def _elf_segments(path: str) -> set[int]:
    """The program header types of a 64-bit little-endian ELF file (3: PT_INTERP, the dynamic
    loader a dynamically linked program names; 2: PT_DYNAMIC)."""
    with open(path, "rb") as handle:
        header = handle.read(64)
        assert header[:4] == b"\x7fELF" and header[4] == 2 and header[5] == 1, path
        (offset,) = struct.unpack_from("<Q", header, 0x20)
        size, count = struct.unpack_from("<HH", header, 0x36)
        types = set()
        for index in range(count):
            handle.seek(offset + index * size)
            types.add(struct.unpack("<I", handle.read(4))[0])
    return types


@pytest.fixture(scope="module")
def kfp_programs() -> dict[str, str]:
    """program -> binary: builds.build_kfp (a few minutes per build the first time on a machine,
    cached under ~/.cache/tfx-scaleout/ after)."""
    built = builds.build_kfp(say=print)
    assert set(built) == {"kfp", *builds.KFP_SERVICES}
    paths = {name: path for result in built.values() for name, path in result.paths.items()}
    assert set(paths) == {*builds.KFP_PROGRAMS, *builds.KFP_SERVICES}
    return paths


# program -> (arguments, exit status, a line its output must have): the release where the
# program prints one; KFP's programs print none, so a flag of their own in `-help`'s usage.
RUNS = {
    "apiserver": (["-help"], 0, r"-sampleconfig"),
    "persistence-agent": (["-help"], 0, r"-kubeconfig"),
    "driver": (["-help"], 0, r"-mlmd_server_address"),
    "launcher": (["-help"], 0, r"-mlmd_server_address"),
    "scheduledworkflow": (["-help"], 0, r"-mlPipelineAPIServerName"),
    "workflow-controller": (["version"], 0, r"^workflow-controller: v3\.6\.7$"),
    "argoexec": (["version"], 0, r"^argoexec: v3\.6\.7$"),
    "versitygw": (["--version"], 0, r"^Version  : v1\.8\.0$"),
}


@pytest.mark.slow  # builds KFP's and Argo's programs (minutes each on an empty machine)
@pytest.mark.parametrize("program", sorted(RUNS))
def test_kfp_and_argo_programs_are_static_and_run(kfp_programs, program):
    """Static (no dynamic loader, no dynamic section): the images they go into hold nothing
    else (FROM scratch)."""
    binary = kfp_programs[program]
    assert not {2, 3} & _elf_segments(binary), f"{binary} is dynamically linked"
    arguments, status, expected = RUNS[program]
    result = subprocess.run([binary, *arguments], capture_output=True, text=True, timeout=60)
    output = result.stdout + result.stderr
    assert result.returncode == status, output[-2000:]
    assert re.search(expected, output, re.M), output[-2000:]
