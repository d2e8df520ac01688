"""What the local cluster runs, built from source once per machine and cached under
~/.cache/tfx-scaleout/ ($XDG_CACHE_HOME respected), keyed by what each build depends on:

- Kubernetes (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy,
  kubectl): one `go build` in the module go/kubernetes (k8s.io/kubernetes at a release tag, its
  staging modules replaced by their published versions, go.sum pinning all); key: the release
  and a hash of go.mod and go.sum.
- The controllers the cluster runs as pods, each `go install MODULE/PACKAGE@VERSION` (the
  module's own go.mod and go.sum, verified by the Go checksum database), static (CGO off); key:
  the version and the Go release: CoreDNS, the Training Operator v1, JobSet and Kubeflow Trainer.
- The sandbox (pause) program: Kubernetes' own build/pause/linux/pause.c from the same
  k8s.io/kubernetes module, linked statically with gcc.
- Kubeflow Pipelines (`build_kfp`, for `up --kfp`): KFP's API server, persistence agent, driver
  and launcher, `go build` in the module go/kfp (kubeflow/pipelines at tag 2.14.3's commit,
  its `api` and `kubernetes_platform` modules generated from vendored protos: kfp_protos.py);
  key: a hash of go.mod, go.sum, the protos and the Go release. Argo's workflow-controller and
  argoexec v3.6.7 (module go/argo) and the S3 server (versitygw v1.8.0, Apache-2.0), built as
  the controllers are, with their releases stamped in as their own Makefiles do. All static: CGO
  off, but for KFP's API server, which needs cgo and is linked statically (KFP_CGO says why).

Builds that do not depend on each other run at the same time (`build_all`); each writes its log
beside its output, and a failure names that log and its last lines.
"""

from __future__ import annotations

import concurrent.futures
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
from collections.abc import Callable, Iterable

from kubeflow.local_cluster import kfp_protos

HERE = os.path.dirname(os.path.abspath(__file__))
KUBERNETES_MODULE = os.path.join(HERE, "go", "kubernetes")
KFP_MODULE = os.path.join(HERE, "go", "kfp")
VERSION_PACKAGE = "k8s.io/component-base/version"
KUBERNETES_TOOLS = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "kubectl",
)
Say = Callable[[str], None]


class Unavailable(RuntimeError):
    """A tool the build needs is not on this machine; the message says what to install."""


class BuildFailed(RuntimeError):
    """A build failed; the message names its log and ends with the log's last lines."""


@dataclasses.dataclass(frozen=True)
class GoInstall:
    """A program built with `go install PACKAGE@VERSION` from its own module."""

    name: str  # the binary's name and the image's
    package: str
    version: str
    module: str
    # A module of this project that requires `module` at `version` and is built in place of
    # `go install` (its go.sum pins the dependencies): go/<name>.
    wrapper: str = ""
    # -X stamps for the linker (the release the program reports), as the project's Makefile
    # sets them; part of the cache key.
    stamps: tuple[str, ...] = ()
    # Files the project's repository has as symbolic links, (path, target) in the module: a
    # module zip holds no symlinks (golang.org/x/mod/zip), so a package that needs one does not
    # build from the module proxy. The build then uses a copy of the module with them put back
    # (go.mod's replace in a copy of the wrapper). Part of the cache key.
    symlinks: tuple[tuple[str, str], ...] = ()

    @property
    def binary(self) -> str:
        return self.package.rstrip("/").rsplit("/", 1)[-1]


# The versions whose CRDs are vendored in tests/components/training/crds (same releases).
CONTROLLERS: dict[str, GoInstall] = {
    "coredns": GoInstall(
        "coredns", "github.com/coredns/coredns", "v1.15.0", "github.com/coredns/coredns"
    ),
    "training-operator": GoInstall(
        "training-operator",
        "github.com/kubeflow/training-operator/cmd/training-operator.v1",
        "v1.9.0",
        "github.com/kubeflow/training-operator",
    ),
    "jobset": GoInstall(
        "jobset", "sigs.k8s.io/jobset", "v0.12.0", "sigs.k8s.io/jobset", wrapper="jobset"
    ),
    "trainer": GoInstall(
        "trainer",
        "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager",
        "v2.3.0",
        "github.com/kubeflow/trainer/v2",
    ),
}


# Kubeflow Pipelines' processes (issue 44), each a package of kubeflow/pipelines at the commit
# go/kfp/go.mod pins: program -> package (`go build` names the binary after the package's folder).
KFP_PROGRAMS = {
    "apiserver": "backend/src/apiserver",
    "persistence-agent": "backend/src/agent/persistence",
    "driver": "backend/src/v2/cmd/driver",
    "launcher": "backend/src/v2/cmd/launcher-v2",
    # Recurring runs: the ScheduledWorkflow controller (kfp_scheduled.py).
    "scheduledworkflow": "backend/src/crd/controller/scheduledworkflow",
}
# The one that needs cgo: KFP's storage package uses go-sqlite3's error type
# (backend/src/apiserver/storage/db.go:25, :137-138: sqlite3.Error, sqlite3.ErrConstraint), which
# go-sqlite3 v1.14.19 defines only with cgo (error.go:15 `import "C"`), so it does not compile with
# CGO off. Built with cgo and linked statically against glibc (no dynamic loader: it runs in a
# FROM-scratch image): the net and os/user packages in Go (netgo, osusergo, no NSS lookups) and
# SQLite without extension loading (no dlopen). MySQL, what the cluster uses, is pure Go.
KFP_CGO = {"apiserver"}
KFP_FLAGS = ["-trimpath", "-ldflags=-s -w"]
KFP_CGO_FLAGS = [
    "-trimpath",
    "-tags=netgo,osusergo,sqlite_omit_load_extension",
    "-ldflags=-s -w -linkmode=external -extldflags=-static",
]
# The checksum database has no entry for kubeflow/pipelines pseudo-versions: go/kfp/go.sum,
# committed, pins them (the build is -mod=readonly).
KFP_NOSUMDB = "github.com/kubeflow/pipelines"
# The Argo release KFP 2.14.3 requires (go/kfp/go.mod), and the commit of its tag (the module
# proxy's origin for it): stamped in as Argo's Makefile does, so that `version` reports the
# release and the controller's default executor image tag is it (argo.ImageTag).
ARGO_MODULE = "github.com/argoproj/argo-workflows/v3"
ARGO_VERSION = "v3.6.7"
ARGO_COMMIT = "8d7dae690e152d19fb40f7affbb68fb783b32172"
_ARGO_STAMPS = tuple(
    f"-X {ARGO_MODULE}.{name}={value}"
    for name, value in (
        ("version", ARGO_VERSION),
        ("gitTag", ARGO_VERSION),
        ("gitCommit", ARGO_COMMIT),
        ("gitTreeState", "clean"),
    )
)
# What runs beside KFP's own processes. Argo from the module go/argo (the proxy refuses Argo's
# version list, which `go install` reads: as go/jobset); the S3 server, versitygw (Apache-2.0;
# not MinIO or Garage, AGPL), with `go install` (its go.sum verified by the checksum database),
# main.Version stamped as its Makefile does.
KFP_SERVICES: dict[str, GoInstall] = {
    "workflow-controller": GoInstall(
        "workflow-controller",
        f"{ARGO_MODULE}/cmd/workflow-controller",
        ARGO_VERSION,
        ARGO_MODULE,
        wrapper="argo",
        stamps=_ARGO_STAMPS,
    ),
    "argoexec": GoInstall(
        "argoexec",
        f"{ARGO_MODULE}/cmd/argoexec",
        ARGO_VERSION,
        ARGO_MODULE,
        wrapper="argo",
        stamps=_ARGO_STAMPS,
        # Without it: "os-specific/command_unix.go:33:3: undefined: Setpgid" (the Linux
        # signal code is the darwin file, linked; argoproj/argo-workflows#9590 is the same link).
        symlinks=(("workflow/executor/os-specific/signal_linux.go", "signal_darwin.go"),),
    ),
    "versitygw": GoInstall(
        "versitygw",
        "github.com/versity/versitygw/cmd/versitygw",
        "v1.8.0",
        "github.com/versity/versitygw",
        stamps=("-X main.Version=v1.8.0",),
    ),
}


def cache_root() -> str:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "tfx-scaleout")


def kubernetes_version(go_mod: str | None = None) -> str:
    """The k8s.io/kubernetes release go/kubernetes/go.mod requires (e.g. v1.34.4)."""
    with open(go_mod or os.path.join(KUBERNETES_MODULE, "go.mod")) as handle:
        found = re.search(
            r"^require k8s\.io/kubernetes (v\S+)( // indirect)?$", handle.read(), re.M
        )
    if not found:
        raise RuntimeError("go/kubernetes/go.mod does not require k8s.io/kubernetes at a version")
    return found.group(1)


def kubernetes_build_flags() -> list[str]:
    """The lean build: no file paths, symbol tables or debug information in the binary; the
    release stamped in as Kubernetes' own build does (else it reports v0.0.0-master)."""
    version = kubernetes_version()
    major, minor = version.lstrip("v").split(".")[:2]
    stamps = [f"gitVersion={version}", f"gitMajor={major}", f"gitMinor={minor}"]
    ldflags = " ".join(["-s", "-w", *(f"-X {VERSION_PACKAGE}.{stamp}" for stamp in stamps)])
    return ["-trimpath", f"-ldflags={ldflags}"]


def kubernetes_cache_dir() -> str:
    """Where this build of the Kubernetes binaries is kept: per release and module pins."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        with open(os.path.join(KUBERNETES_MODULE, name), "rb") as handle:
            digest.update(handle.read())
    key = f"{kubernetes_version()}-{digest.hexdigest()[:12]}"
    return os.path.join(cache_root(), "kubernetes", key)


def _go_version_needed() -> tuple[int, int]:
    with open(os.path.join(KUBERNETES_MODULE, "go.mod")) as handle:
        found = re.search(r"^go (\d+)\.(\d+)", handle.read(), re.M)
    assert found, "go/kubernetes/go.mod has no go line"
    return int(found.group(1)), int(found.group(2))


def go() -> str:
    """The go command, checked against the release go/kubernetes/go.mod needs."""
    found_go = shutil.which("go")
    if found_go is None:
        raise Unavailable("the cluster is built from source: install Go (go.dev/dl)")
    output = subprocess.run(
        [found_go, "env", "GOVERSION"], capture_output=True, text=True
    ).stdout.strip()
    found = re.match(r"go(\d+)\.(\d+)", output)
    needed = _go_version_needed()
    if not found or (int(found.group(1)), int(found.group(2))) < needed:
        raise Unavailable(
            f"Kubernetes {kubernetes_version()} needs Go >= {needed[0]}.{needed[1]}, "
            f"found {output or 'none'}"
        )
    return found_go


def _go_release() -> str:
    return subprocess.run([go(), "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()


@dataclasses.dataclass(frozen=True)
class Built:
    paths: dict[str, str]  # program -> binary
    seconds: float  # spent building in this process; 0.0 when all came from the cache


def _locked_build(
    folder: str, outputs: dict[str, str], what: str, run: Callable[[str, str], None], say: Say
) -> Built:
    """Runs `run(partial_folder, log_path)` once per machine (a lock in `folder`) unless every
    output exists; moves the partial folder's files into place."""

    def cached() -> bool:
        return all(os.access(path, os.X_OK) for path in outputs.values())

    if cached():
        return Built(outputs, 0.0)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, ".build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cached():
            return Built(outputs, 0.0)
        say(f"building {what} (once per machine; log: {os.path.join(folder, 'build.log')})")
        started = time.monotonic()
        partial = os.path.join(folder, ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        os.makedirs(partial)
        log_path = os.path.join(folder, "build.log")
        run(partial, log_path)
        for path in outputs.values():
            os.replace(os.path.join(partial, os.path.basename(path)), path)
        shutil.rmtree(partial, ignore_errors=True)
        seconds = time.monotonic() - started
        say(f"built {what} in {seconds:.0f} s")
        return Built(outputs, seconds)


def _run_logged(command: list[str], log_path: str, what: str, mode: str = "w", **options) -> None:
    """Runs `command` into the log (mode "a": after the earlier steps of the same build)."""
    with open(log_path, mode) as log:
        log.write(f"$ {' '.join(command)}\n")
        log.flush()
        result = subprocess.run(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **options
        )
    if result.returncode != 0:
        with open(log_path, errors="replace") as log:
            tail = "\n".join(log.read().strip().splitlines()[-15:])
        raise BuildFailed(f"the build of {what} failed (log: {log_path}):\n{tail}")


def build_kubernetes(tools: Iterable[str] = KUBERNETES_TOOLS, say: Say = lambda _: None) -> Built:
    """The binaries of k8s.io/kubernetes/cmd/<tool>: one `go build` (the shared packages
    compiled once, the links in parallel)."""
    tools = tuple(tools)
    folder = kubernetes_cache_dir()
    outputs = {tool: os.path.join(folder, tool) for tool in tools}

    def run(partial: str, log_path: str) -> None:
        flags = f"{os.environ.get('GOFLAGS', '')} -mod=readonly -modcacherw".strip()
        packages = [f"k8s.io/kubernetes/cmd/{tool}" for tool in tools]
        _run_logged(
            [go(), "build", *kubernetes_build_flags(), "-o", partial + os.sep, *packages],
            log_path,
            ", ".join(tools),
            cwd=KUBERNETES_MODULE,
            env=dict(os.environ, GOFLAGS=flags),
        )

    what = f"{', '.join(tools)} {kubernetes_version()} from source"
    return _locked_build(folder, outputs, what, run, say)


def build_controller(controller: GoInstall, say: Say = lambda _: None) -> Built:
    key = f"{controller.name}-{controller.version}-{_go_release()}"
    if controller.stamps or controller.symlinks:
        extra = " ".join([*controller.stamps, *map(repr, controller.symlinks)])
        key += "-" + hashlib.sha256(extra.encode()).hexdigest()[:12]
    wrapper = os.path.join(HERE, "go", controller.wrapper) if controller.wrapper else ""
    if wrapper:
        with open(os.path.join(wrapper, "go.sum"), "rb") as handle:
            key += "-" + hashlib.sha256(handle.read()).hexdigest()[:12]
    folder = os.path.join(cache_root(), "controllers", key)
    outputs = {controller.name: os.path.join(folder, controller.binary)}

    def run(partial: str, log_path: str) -> None:
        flags = f"{os.environ.get('GOFLAGS', '')} -modcacherw".strip()
        lean = ["-trimpath", "-ldflags=" + " ".join(["-s", "-w", *controller.stamps])]
        where = wrapper or partial
        if wrapper:
            command = [go(), "build", *lean, "-mod=readonly", "-o", partial + os.sep]
            command.append(controller.package)
            if controller.symlinks:
                where = _with_symlinks(controller, wrapper, partial)
        else:
            command = [go(), "install", *lean, f"{controller.package}@{controller.version}"]
        _run_logged(
            command,
            log_path,
            f"{controller.name} {controller.version}",
            cwd=where,
            # Static: the images hold nothing but the program.
            env=dict(os.environ, GOBIN=partial, CGO_ENABLED="0", GOFLAGS=flags),
        )

    return _locked_build(folder, outputs, f"{controller.name} {controller.version}", run, say)


def _with_symlinks(controller: GoInstall, wrapper: str, partial: str) -> str:
    """A copy of the wrapper module in `partial` whose go.mod replaces the controller's module by
    a copy of it with its symlinks put back; returns the copy of the wrapper."""
    source = os.path.join(partial, "src")
    copy = os.path.join(partial, "module")
    shutil.copytree(module_dir(controller.module, controller.version), copy)
    for folder, _, names in os.walk(copy):  # the module cache's files and folders are read-only
        os.chmod(folder, 0o755)
        for name in names:
            os.chmod(os.path.join(folder, name), 0o644)
    for path, target in controller.symlinks:
        os.symlink(target, os.path.join(copy, path))
    os.makedirs(source)
    shutil.copyfile(os.path.join(wrapper, "go.sum"), os.path.join(source, "go.sum"))
    with open(os.path.join(wrapper, "go.mod")) as handle:
        text = handle.read()
    with open(os.path.join(source, "go.mod"), "w") as handle:
        handle.write(f"{text}\nreplace {controller.module} => ../module\n")
    return source


def module_dir(module: str, version: str) -> str:
    """The module's files (manifests, sources) in Go's module cache, downloaded if missing."""
    result = subprocess.run(
        [go(), "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        env=dict(os.environ, GOFLAGS="-modcacherw"),
    )
    try:
        info = json.loads(result.stdout)
    except ValueError:
        info = {}
    if result.returncode != 0 or "Dir" not in info:
        raise BuildFailed(
            f"go mod download {module}@{version} failed: "
            f"{info.get('Error') or result.stderr.strip()}"
        )
    return info["Dir"]


def build_pause(say: Say = lambda _: None) -> Built:
    """Kubernetes' pause program (the pod sandbox's one process), static: the image that holds
    it has nothing else."""
    version = kubernetes_version()
    folder = os.path.join(cache_root(), "pause", version)
    outputs = {"pause": os.path.join(folder, "pause")}

    def run(partial: str, log_path: str) -> None:
        gcc = shutil.which("gcc")
        if gcc is None:
            raise Unavailable("the pod sandbox program is built with gcc: apt-get install gcc")
        source = os.path.join(module_dir("k8s.io/kubernetes", version), "build", "pause", "linux")
        _run_logged(
            [
                gcc,
                "-Os",
                "-static",
                "-Wall",
                "-Werror",
                f"-DVERSION={version}-tfx-scaleout",
                "-o",
                os.path.join(partial, "pause"),
                os.path.join(source, "pause.c"),
            ],
            log_path,
            "pause",
        )

    return _locked_build(
        folder, outputs, f"the pod sandbox (pause.c, Kubernetes {version})", run, say
    )


def kfp_version() -> str:
    """The kubeflow/pipelines pseudo-version go/kfp/go.mod requires (tag 2.14.3's commit)."""
    with open(os.path.join(KFP_MODULE, "go.mod")) as handle:
        found = re.search(
            r"^\s*github\.com/kubeflow/pipelines (v\S+)( // indirect)?$", handle.read(), re.M
        )
    if not found:
        raise RuntimeError("go/kfp/go.mod does not require github.com/kubeflow/pipelines")
    return found.group(1)


def kfp_cache_dir() -> str:
    """Where this build of KFP's programs is kept: per commit, module pins, vendored protos,
    protoc and Go release."""
    pins = [_go_release(), *KFP_FLAGS, *KFP_CGO_FLAGS, *kfp_protos.PROTOC_PINS]
    pins += [repr(kfp_protos.GENERATED), repr(sorted(KFP_CGO))]
    digest = hashlib.sha256(" ".join(pins).encode())
    files = [(name, os.path.join(KFP_MODULE, name)) for name in ("go.mod", "go.sum")]
    for name, path in files + kfp_protos.proto_files():
        with open(path, "rb") as handle:
            digest.update(name.encode() + b"\0" + handle.read())
    commit = kfp_version().rsplit("-", 1)[-1]
    return os.path.join(cache_root(), "kfp", f"{commit}-{digest.hexdigest()[:12]}")


def build_kfp_backend(
    programs: Iterable[str] = tuple(KFP_PROGRAMS), say: Say = lambda _: None
) -> Built:
    """KFP's programs: in a copy of go/kfp, KFP's api and kubernetes_platform modules generated
    (kfp_protos), then one `go build` of the packages that build with CGO off (the shared
    packages compiled once) and one with cgo, statically linked, for those in KFP_CGO. All
    static: their images hold nothing else."""
    programs = tuple(programs)
    folder = kfp_cache_dir()
    outputs = {p: os.path.join(folder, os.path.basename(KFP_PROGRAMS[p])) for p in programs}
    what = f"KFP {kfp_version()}"

    def run(partial: str, log_path: str) -> None:
        go_command = go()
        source = os.path.join(partial, "src")
        os.makedirs(source)
        for name in ("go.mod", "go.sum"):
            shutil.copyfile(os.path.join(KFP_MODULE, name), os.path.join(source, name))
        kfp_protos.copy_protos(source)
        flags = f"{os.environ.get('GOFLAGS', '')} -mod=readonly -modcacherw".strip()
        nosumdb = ",".join(filter(None, [os.environ.get("GONOSUMDB", ""), KFP_NOSUMDB]))
        env = dict(os.environ, GOFLAGS=flags, GONOSUMDB=nosumdb, CGO_ENABLED="0")
        open(log_path, "w").close()

        def step(command: list[str], name: str, **overrides: str) -> None:
            _run_logged(
                command,
                log_path,
                f"{what} ({name})",
                mode="a",
                cwd=source,
                env=dict(env, **overrides),
            )

        def build(names: list[str], flags: list[str], name: str, **overrides: str) -> None:
            if names:
                packages = [f"github.com/kubeflow/pipelines/{KFP_PROGRAMS[p]}" for p in names]
                step(
                    [go_command, "build", *flags, "-o", partial + os.sep, *packages],
                    name,
                    **overrides,
                )

        cgo = [p for p in programs if p in KFP_CGO]
        gcc = shutil.which("gcc")
        if cgo and gcc is None:
            raise Unavailable(f"KFP's {', '.join(cgo)} is built with cgo: apt-get install gcc")
        kfp_protos.generate(go_command, source, step)
        build([p for p in programs if p not in KFP_CGO], KFP_FLAGS, "go build")
        build(cgo, KFP_CGO_FLAGS, "go build with cgo", CGO_ENABLED="1", CC=gcc or "gcc")

    return _locked_build(folder, outputs, f"{', '.join(programs)} ({what})", run, say)


def _kfp_jobs(say: Say) -> dict[str, Callable[[], Built]]:
    jobs: dict[str, Callable[[], Built]] = {"kfp": lambda: build_kfp_backend(say=say)}
    for name, program in KFP_SERVICES.items():
        jobs[name] = functools.partial(build_controller, program, say=say)
    return jobs


def build_kfp(say: Say = lambda _: None) -> dict[str, Built]:
    """Every program Kubeflow Pipelines needs on the cluster (KFP_PROGRAMS, built together, and
    KFP_SERVICES), started together as build_all does: build name -> Built ("kfp" holds
    KFP_PROGRAMS)."""
    return _together(_kfp_jobs(say))


def _together(jobs: dict[str, Callable[[], Built]]) -> dict[str, Built]:
    """Runs the builds at the same time; raises the first failure after all have ended (so that
    one failure does not leave another build half done)."""
    results: dict[str, Built] = {}
    errors: list[BaseException] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {pool.submit(job): name for name, job in jobs.items()}
        for future in concurrent.futures.as_completed(futures):
            try:
                results[futures[future]] = future.result()
            except BaseException as error:  # noqa: BLE001 (re-raised below)
                errors.append(error)
    if errors:
        raise errors[0]
    return results


def build_all(
    say: Say = lambda _: None, controllers: Iterable[str] = tuple(CONTROLLERS), kfp: bool = False
) -> dict[str, Built]:
    """Every build the cluster needs (with `kfp`, build_kfp's too), started together; raises the
    first failure after all have ended (so that one failure does not leave another build half
    done)."""
    jobs: dict[str, Callable[[], Built]] = {
        "kubernetes": lambda: build_kubernetes(say=say),
        "pause": lambda: build_pause(say=say),
    }
    for name in controllers:
        jobs[name] = functools.partial(build_controller, CONTROLLERS[name], say=say)
    if kfp:
        jobs.update(_kfp_jobs(say))
    return _together(jobs)
