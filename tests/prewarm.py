"""The session's cold builds, started together at its beginning (`python -m tests.prewarm NAME...`).

Without this, each Go build, engine fetch or image build starts inside the first test that needs
it, in whichever worker runs that test, one after another: on an empty machine the cluster's tests
waited for Kubernetes' build, then the image, while KFP's build waited for its own test. Here the
first process that has collected the tests (an xdist worker, or the only process) looks at what
the selected tests use (BUILDS: by fixture or by file) and starts one background process that
runs those builds at once: the Go builds one after another on one thread (they share Go's build
cache: KFP's packages compiled for kfp_check serve KFP's own programs), the downloads and the
image beside them. Every build it runs is the same function the fixtures call, cached under
~/.cache keyed by its inputs and locked, so a fixture that needs a build still running waits for
it and then finds it cached; a build that failed here is simply done again by its fixture, which
then reports the failure in the test. With warm caches each build is a cache check (seconds).

The background process records its phases as the fixtures do (tests/session.py, worker
"prewarm"), writes its log beside the session's phase file, and is stopped with its children when
the session ends (`stop`), so that an interrupted session leaves no build running."""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable

CLAIM_ENV = "TFX_SCALEOUT_PREWARM"


def _kubernetes() -> None:
    from kubeflow.local_cluster import builds

    builds.build_all(say=print)


def _kube_apiserver() -> None:
    from kubeflow.local_cluster import builds

    builds.build_kubernetes(say=print)


def _kfp_check() -> None:
    from tests.kubeflow import kfp_backend

    kfp_backend.build(say=print)


def _kfp_programs() -> None:
    from kubeflow.local_cluster import builds

    builds.build_kfp(say=print)


def _flink() -> None:
    from pipeline.beam import engine_fetch

    engine_fetch.fetch()


def _spark() -> None:
    from pipeline.beam import engine_fetch

    engine_fetch.fetch_spark()


def _kfp_local_venv() -> None:
    from tests.kubeflow import kfp_local

    kfp_local.ensure_venv()


def _image() -> None:
    from tests.kubeflow import project_image

    project_image.build()


# name -> (what it builds, the fixtures or test files that need it, the build, its lane).
# Builds of the lane "go" run one after another in this order; every other lane runs beside it.
BUILDS: dict[str, tuple[str, frozenset[str], Callable[[], None], str]] = {
    "kubernetes": (
        "Kubernetes, the pause image, the operators' controllers (Go)",
        frozenset({"local_cluster"}),
        _kubernetes,
        "go",
    ),
    "kube-apiserver": (
        "Kubernetes' kube-apiserver .. kubectl (Go)",
        frozenset({"kube"}),
        _kube_apiserver,
        "go",
    ),
    "kfp_check": (
        "kfp_check: KFP's and Argo's Go code",
        frozenset({"kfp_check"}),
        _kfp_check,
        "go",
    ),
    "kfp": (
        "KFP's and Argo's programs, the S3 server (Go)",
        frozenset({"kfp_programs", "kfp_cluster"}),
        _kfp_programs,
        "go",
    ),
    "image": (
        "the project's image (podman)",
        frozenset({"image", "local_cluster"}),
        _image,
        "image",
    ),
    "flink": ("Flink and Beam's Flink job server", frozenset({"flink"}), _flink, "flink"),
    "spark": ("Spark and Beam's Spark job server", frozenset({"spark_cluster"}), _spark, "spark"),
    "kfp-local": (
        "kfp.local's own venv",
        frozenset({"tests/kubeflow/test_kfp_local.py"}),
        _kfp_local_venv,
        "pip",
    ),
}


def needed(uses: Iterable[tuple[str, Iterable[str]]]) -> list[str]:
    """The builds that tests need, in BUILDS' order: `uses` holds (test file, fixture names) per
    selected test."""
    wanted: set[str] = set()
    for path, fixtures in uses:
        keys = {path, *fixtures}
        wanted |= {name for name, (_, users, _, _) in BUILDS.items() if users & keys}
    return [name for name in BUILDS if name in wanted]


# --- the session's side -------------------------------------------------------------------------
def open_claim() -> None:
    """In the controller (or the only process): the file the first collecting process claims,
    named by CLAIM_ENV for every process the session starts; also this session's marks."""
    import tempfile

    handle, path = tempfile.mkstemp(prefix="tfx-scaleout-prewarm-", suffix=".pid")
    os.close(handle)
    os.environ[CLAIM_ENV] = path


def start(names: list[str], say: Callable[[str], None]) -> None:
    """Starts the background builds unless another process of the session did."""
    path = os.environ.get(CLAIM_ENV)
    if not names or not path or not os.path.exists(path):
        return
    with open(path, "r+") as claim:
        fcntl.flock(claim, fcntl.LOCK_EX)
        if claim.read().strip():
            return
        log = path[: -len(".pid")] + ".log"
        with open(log, "w") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.prewarm", *names],
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=dict(os.environ, PYTEST_XDIST_WORKER="prewarm"),
            )
        what = "; ".join(BUILDS[name][0] for name in names)
        line = f"tests: the session's builds started at once, in the background: {what} ({log})"
        claim.write(f"{process.pid}\n{line}\n")
    say(line)


def started_line() -> str:
    """What `start` said, for the controller of an xdist session (its workers print nothing)."""
    path = os.environ.get(CLAIM_ENV, "")
    if not path or not os.path.exists(path):
        return ""
    with open(path) as claim:
        lines = claim.read().splitlines()
    return lines[1] if len(lines) > 1 else ""


def stop() -> list[str]:
    """At the end of the session: stops the background builds if they still run (their process
    group); returns its log's lines about failures, and removes the session's files."""
    path = os.environ.pop(CLAIM_ENV, "")
    if not path or not os.path.exists(path):
        return []
    with open(path) as claim:
        text = claim.readline().strip()
    if text:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(text), signal.SIGKILL)
    base = path[: -len(".pid")]
    log = base + ".log"
    failures: list[str] = []
    if os.path.exists(log):
        with open(log, errors="replace") as handle:
            failures = [line.rstrip() for line in handle if line.startswith("prewarm: failed")]
        os.unlink(log)
    for name in BUILDS:
        mark = f"{base}.{name}.done"
        if os.path.exists(mark):
            os.unlink(mark)
    os.unlink(path)
    return failures


def done_this_session(name: str) -> bool:
    path = os.environ.get(CLAIM_ENV, "")
    return bool(path) and os.path.exists(f"{path[: -len('.pid')]}.{name}.done")


def mark_done(name: str) -> None:
    """For a build that is not a cache check (the image): later callers in the session skip it."""
    path = os.environ.get(CLAIM_ENV, "")
    if path and os.path.exists(path):
        open(f"{path[: -len('.pid')]}.{name}.done", "w").close()


# --- the background process ---------------------------------------------------------------------
def _run(name: str) -> None:
    from tests import session

    what, _, build, _ = BUILDS[name]
    started = time.monotonic()
    print(f"prewarm: {name}: {what}: started", flush=True)
    try:
        with session.phase(f"prewarm: {what}"):
            build()
    except BaseException as error:  # noqa: BLE001 (its fixture builds again and reports it)
        print(f"prewarm: failed: {name}: {type(error).__name__}: {error}", flush=True)
        return
    print(f"prewarm: {name}: done in {time.monotonic() - started:.0f} s", flush=True)


def main(names: list[str]) -> int:
    lanes: dict[str, list[str]] = {}
    for name in names:
        lanes.setdefault(BUILDS[name][3], []).append(name)

    def lane(members: list[str]) -> None:
        for member in members:
            _run(member)

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(lanes) or 1) as pool:
        for future in [pool.submit(lane, members) for members in lanes.values()]:
            future.result()
    return 0


if __name__ == "__main__":
    import pipeline  # noqa: F401  (Keras 2 before TensorFlow, as in the tests)

    sys.exit(main(sys.argv[1:]))
