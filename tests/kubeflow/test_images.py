"""The images install exactly what CI installs: setup.sh's pip steps (pip version, the lock, the
project without dependencies), in the same order; the GPU image adds only TensorFlow's CUDA
libraries for the lock's TensorFlow; both run as a non-root user at the paths the compiled
pipeline refers to. No Docker engine is needed to check that."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from kubeflow.config import IMAGE_DIGITS_DIR, IMAGE_PROJECT_DIR, IMAGE_VENV
from pipeline import datasets

ROOT = datasets.PROJECT_ROOT
# Flags that change how pip prints or caches, not what it installs.
QUIET_FLAGS = {"--quiet", "-q", "--no-cache-dir"}


def _read(path: str) -> str:
    with open(os.path.join(ROOT, path)) as handle:
        return handle.read()


def _instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", _read(dockerfile))
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, arguments = line.partition(" ")
            result.append((instruction.upper(), arguments.strip()))
    return result


def _pip_installs(commands: list[str]) -> list[tuple[str, ...]]:
    """Each `pip install` as its normalized arguments: the interpreter and quiet flags dropped;
    an editable install of the project (setup.sh) equals a regular one (the image)."""
    installs = []
    for command in commands:
        for part in command.split("&&"):
            words = shlex.split(part.replace('"$VENV/bin/python"', "python"))
            if "pip" not in words or "install" not in words:
                continue
            arguments = words[words.index("install") + 1 :]
            arguments = [w for w in arguments if w not in QUIET_FLAGS and w != "-e"]
            installs.append(tuple(arguments))
    return installs


def _setup_installs() -> list[tuple[str, ...]]:
    return _pip_installs(_read("setup.sh").splitlines())


def _docker_installs(dockerfile: str) -> list[tuple[str, ...]]:
    return _pip_installs([args for name, args in _instructions(dockerfile) if name == "RUN"])


def _lock_pin(package: str) -> str:
    for line in _read("requirements.lock").splitlines():
        name, sep, version = line.partition("==")
        if sep and name.strip().lower() == package:
            return version.strip()
    raise AssertionError(f"{package} is not pinned in requirements.lock")


def test_ci_installs_through_setup_sh():
    assert "bash setup.sh" in _read(".ci/run")
    assert _setup_installs() == [
        ("--upgrade", "pip==24.2"),
        ("-r", "requirements.lock"),
        ("--no-deps", "--no-build-isolation", "."),
    ]


def test_image_installs_exactly_what_setup_sh_installs():
    assert _docker_installs("kubeflow/Dockerfile") == _setup_installs()


def test_gpu_image_adds_only_the_cuda_libraries_of_the_locked_tensorflow():
    setup = _setup_installs()
    installs = _docker_installs("kubeflow/Dockerfile.gpu")
    extra = [i for i in installs if i not in setup]
    assert [i for i in installs if i in setup] == setup
    assert extra == [
        ("-c", "requirements.lock", f"tensorflow[and-cuda]=={_lock_pin('tensorflow')}")
    ]
    # Installed after the lock and before the project, like every other dependency.
    assert installs.index(extra[0]) == installs.index(("-r", "requirements.lock")) + 1


def _build_arg_defaults(dockerfile: str) -> dict[str, str]:
    defaults = {}
    for name, args in _instructions(dockerfile):
        if name == "ARG" and "=" in args:
            key, _, value = args.partition("=")
            defaults[key] = value
    return defaults


def _final_base(dockerfile: str) -> str:
    """The last stage's FROM, its ${ARG} resolved to the argument's default."""
    [*_, base] = [args for name, args in _instructions(dockerfile) if name == "FROM"]
    base = base.split(" AS ")[0]
    for key, value in _build_arg_defaults(dockerfile).items():
        base = base.replace("${" + key + "}", value)
    return base


def test_gpu_base_is_cuda_12_3_for_tensorflow_2_16():
    assert _lock_pin("tensorflow") == "2.16.2"
    stages = [args for name, args in _instructions("kubeflow/Dockerfile.gpu") if name == "FROM"]
    assert stages == ["${BASE_IMAGE}"]
    assert _final_base("kubeflow/Dockerfile.gpu").startswith("nvidia/cuda:12.3.")
    assert "python3.10" in _read("kubeflow/Dockerfile.gpu")


def test_base_is_a_build_argument_defaulting_to_the_public_python_3_10():
    """A local base (kubeflow/local_base.sh) can stand in for the public one; the public image
    stays the default."""
    assert _final_base("kubeflow/Dockerfile") == "python:3.10-slim-bookworm"
    instructions = _instructions("kubeflow/Dockerfile")
    assert instructions[0] == ("ARG", "BASE_IMAGE=python:3.10-slim-bookworm")
    assert ("FROM", "${BASE_IMAGE}") in instructions


@pytest.mark.parametrize("dockerfile", ["kubeflow/Dockerfile", "kubeflow/Dockerfile.gpu"])
def test_build_time_pip_configuration_is_used_by_the_install_steps_only(dockerfile):
    """The host's CA bundle and wheel folders are mounted for the build (podman build -v): read
    inside the RUN steps that install, never copied, never set with ENV."""
    instructions = _instructions(dockerfile)
    using = [args for name, args in instructions if "/mnt/build-pip" in args and name != "RUN"]
    assert using == []
    for name, args in instructions:
        if name == "RUN" and " -r requirements.lock" in args:
            assert args.startswith(
                "if [ -f /mnt/build-pip/pip.conf ]; then export PIP_CONFIG_FILE="
            )
    assert not [a for n, a in instructions if n == "ENV" and ("PIP_CERT" in a or "CONFIG" in a)]


@pytest.mark.parametrize("dockerfile", ["kubeflow/Dockerfile", "kubeflow/Dockerfile.gpu"])
def test_paths_user_and_environment(dockerfile):
    instructions = _instructions(dockerfile)
    users = [args for name, args in instructions if name == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    # No RUN after the switch to the unprivileged user needs root.
    assert instructions[-1][0] == "USER" or all(
        name != "RUN" for name, _ in instructions[instructions.index(("USER", users[-1])) :]
    )
    assert ("WORKDIR", IMAGE_PROJECT_DIR) in instructions
    env = " ".join(args for name, args in instructions if name == "ENV")
    assert "TF_USE_LEGACY_KERAS=1" in env and f"VIRTUAL_ENV={IMAGE_VENV}" in env
    copies = [args for name, args in instructions if name == "COPY"]
    assert "schemas ./schemas" in copies and "requirements.lock ./" in copies


def test_image_writes_the_digits_where_the_compiled_pipeline_reads_them():
    """`compile --dataset digits` points data_root at IMAGE_DIGITS_DIR: the project's image
    writes them there, with the project's own command, after the project is installed and
    before the switch to the unprivileged user (the files are read-only for the pods)."""
    instructions = _instructions("kubeflow/Dockerfile")
    write = ("RUN", f"python -m pipeline.datasets.images digits --out {IMAGE_DIGITS_DIR}")
    assert write in instructions
    install = next(
        i for i, (name, args) in enumerate(instructions) if name == "RUN" and "pip check" in args
    )
    user = next(i for i, (name, _) in enumerate(instructions) if name == "USER")
    assert install < instructions.index(write) < user


def test_beam_harness_matches_the_locked_beam():
    beam = _lock_pin("apache-beam")
    instructions = _instructions("kubeflow/Dockerfile")
    assert _build_arg_defaults("kubeflow/Dockerfile")["BEAM_BOOT_IMAGE"] == (
        f"apache/beam_python3.10_sdk:{beam}"
    )
    assert ("FROM", "${BEAM_BOOT_IMAGE} AS beam-boot") in instructions
    assert ("COPY", "--from=beam-boot /opt/apache/beam /opt/apache/beam") in instructions
    assert ("ENTRYPOINT", '["/opt/apache/beam/boot"]') in instructions


def test_stand_in_boot_for_builds_without_a_registry(tmp_path):
    """BEAM_BOOT_IMAGE=no-beam-boot: a stage of the Dockerfile whose boot program runs a given
    command and refuses Beam's boot flags (it is no SDK harness)."""
    instructions = _instructions("kubeflow/Dockerfile")
    stage = instructions.index(("FROM", "scratch AS no-beam-boot"))
    assert instructions[stage + 1] == ("COPY", "kubeflow/no_beam_boot.sh /opt/apache/beam/boot")
    boot = os.path.join(ROOT, "kubeflow", "no_beam_boot.sh")
    assert os.access(boot, os.X_OK)
    ran = subprocess.run([boot, "echo", "ran"], capture_output=True, text=True)
    assert (ran.returncode, ran.stdout) == (0, "ran\n")
    for argv in ([boot, "--id=1", "--provision_endpoint=localhost:1"], [boot]):
        refused = subprocess.run(argv, capture_output=True, text=True)
        assert refused.returncode == 64
        assert "without Beam's SDK harness boot program" in refused.stderr


def _tools(tmp_path, *extra: str):
    """A PATH with the tools the script uses (and the given ones), no container engine."""
    tools = tmp_path / "bin"
    tools.mkdir(exist_ok=True)
    for tool in ("git", "dirname", "mktemp", "rm", "cat", "sed", "realpath", *extra):
        if shutil.which(tool) and not (tools / tool).exists():
            os.symlink(shutil.which(tool), tools / tool)
    if not (tools / "python3").exists():  # reads the host's pip configuration
        os.symlink(sys.executable, tools / "python3")
    return tools


def test_build_script_needs_a_registry_and_a_container_engine(tmp_path):
    script = os.path.join(ROOT, "kubeflow", "build_images.sh")
    bash = shutil.which("bash")
    no_registry = subprocess.run(
        [bash, script], env={"PATH": os.environ["PATH"]}, capture_output=True, text=True
    )
    assert no_registry.returncode == 2 and "set REGISTRY" in no_registry.stderr
    assert "--no-push" in no_registry.stderr
    tools = str(_tools(tmp_path))
    for argv in (["--registry", "registry.example.com/me"], ["--no-push"]):
        no_engine = subprocess.run(
            [bash, script, *argv], env={"PATH": tools}, capture_output=True, text=True
        )
        assert no_engine.returncode == 1 and "no container engine" in no_engine.stderr
    no_docker = subprocess.run(
        [bash, script, "--no-push"],
        env={"PATH": tools, "ENGINE": "docker"},
        capture_output=True,
        text=True,
    )
    assert no_docker.returncode == 1 and "there is no docker command" in no_docker.stderr


FAKE_ENGINE = """#!/bin/sh
# Records each call; a build also copies the mounted pip configuration, a push writes a digest.
echo "$(basename "$0") $*" >> "$CALLS"
if [ "$1" = info ]; then exit "${INFO_RC:-0}"; fi
if [ "$1" = build ]; then
  for arg in "$@"; do
    case "$arg" in
      *:/mnt:ro) cp "${arg%%:*}/build-pip/pip.conf" "$CALLS.pip.conf"
                 cp "${arg%%:*}/build-pip/ca.crt" "$CALLS.ca.crt"
                 ls "${arg%%:*}/build-pip" > "$CALLS.mnt" ;;
    esac
  done
fi
if [ "$1" = push ]; then echo "sha256:$(printf '%064d' 7)" > "$3"; fi
exit 0
"""


def _fake_engines(tmp_path, docker_info_rc: int):
    tools = _tools(tmp_path, "basename", "printf", "cp", "ls", "mkdir")
    for engine in ("docker", "podman"):
        path = tools / engine
        path.write_text(FAKE_ENGINE.replace("${INFO_RC:-0}", str(docker_info_rc)))
        path.chmod(0o755)
    return tools


def test_build_script_uses_podman_when_docker_has_no_daemon(tmp_path):
    """A docker client without a daemon (docker info fails): podman builds, with the base and
    boot build arguments, chroot isolation, each Dockerfile's ignore file, the host's CA bundle
    and local wheel folders mounted for the build; --push prints digest-pinned references."""
    tools = _fake_engines(tmp_path, docker_info_rc=1)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    ca = tmp_path / "ca.crt"
    ca.write_text("not a real certificate\n")
    calls = tmp_path / "calls"
    env = {
        "PATH": str(tools),
        "CALLS": str(calls),
        "HOME": str(tmp_path),
        "BASE_IMAGE": "localhost/base:py3.10",
        "BEAM_BOOT_IMAGE": "no-beam-boot",
        "PIP_CERT": str(ca),
        "PIP_FIND_LINKS": f"{wheels} {tmp_path}/does-not-exist https://example.com/wheels",
        "PIP_CONFIG_FILE": os.devnull,
        "BUILD_OPTIONS": "--pull=never --label a=b",
    }
    script = os.path.join(ROOT, "kubeflow", "build_images.sh")
    result = subprocess.run(
        [
            shutil.which("bash"),
            script,
            "--registry",
            "registry.example.com/me",
            "--tag",
            "t1",
            "--push",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    lines = calls.read_text().splitlines()
    assert lines[0] == "docker info"
    builds = [shlex.split(line) for line in lines if line.startswith("podman build")]
    assert [b[b.index("-f") + 1] for b in builds] == [
        "kubeflow/Dockerfile",
        "kubeflow/Dockerfile.gpu",
    ]
    for build, dockerfile in zip(
        builds, ["kubeflow/Dockerfile", "kubeflow/Dockerfile.gpu"], strict=True
    ):
        assert build[build.index("--isolation") + 1] == "chroot"
        assert build[build.index("--ignorefile") + 1] == dockerfile + ".dockerignore"
        assert "BASE_IMAGE=localhost/base:py3.10" in build
        assert "BEAM_BOOT_IMAGE=no-beam-boot" in build
        # Over the image's empty /mnt first, then each folder at a mount point inside it.
        volumes = [build[i + 1] for i, word in enumerate(build) if word == "-v"]
        assert len(volumes) == 2 and volumes[0].endswith("/mnt:/mnt:ro")
        assert volumes[1] == f"{wheels}:/mnt/build-pip/1:ro"
        assert build[-4:] == ["--pull=never", "--label", "a=b", "."]
    assert (tmp_path / "calls.ca.crt").read_text() == ca.read_text()
    assert (tmp_path / "calls.mnt").read_text().split() == ["1", "ca.crt", "pip.conf"]
    assert (tmp_path / "calls.pip.conf").read_text().splitlines() == [
        "[global]",
        "cert = /mnt/build-pip/ca.crt",
        "find-links = /mnt/build-pip/1 https://example.com/wheels",
    ]
    digest = "sha256:" + "0" * 63 + "7"
    assert f"--image registry.example.com/me/tfx-scaleout@{digest}" in result.stdout
    assert f"--gpu_image registry.example.com/me/tfx-scaleout-gpu@{digest}" in result.stdout


def test_build_script_prefers_a_running_docker_and_mounts_nothing(tmp_path):
    tools = _fake_engines(tmp_path, docker_info_rc=0)
    calls = tmp_path / "calls"
    script = os.path.join(ROOT, "kubeflow", "build_images.sh")
    result = subprocess.run(
        [shutil.which("bash"), script, "--no-push", "--cpu-only", "--tag", "t2"],
        env={"PATH": str(tools), "CALLS": str(calls), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert calls.read_text().splitlines() == [
        "docker info",
        "docker build -f kubeflow/Dockerfile -t localhost/tfx-scaleout:t2 .",
    ]
    assert "images: localhost/tfx-scaleout:t2 (not pushed" in result.stdout
