"""How the suite is split between pytest-xdist workers (`-n auto --dist loadscope`, pyproject).

A test file is the unit of scheduling, so its module fixtures (a pipeline run shared by several
asserts) run once. Files that share something expensive or exclusive form one unit and run on one
worker, one after the other (GROUPS):
- a session fixture that starts an engine or runs a pipeline (SHARED_FIXTURES): started once per
  session, as in one process;
- a system package that holds machine-wide state (EXCLUSIVE_PACKAGES: podman's image store and
  its builds, the Kubernetes control plane, the Flink cluster's JVMs).
Every other file may run beside any other. Units start longest first (the GROUPS, then the rest in
the order of SLOW_FIRST, then collection order), so that no long unit starts last.

Why a scheduler of our own instead of `--dist loadgroup` and `xdist_group` marks: pytest-xdist
3.8 marks a group by rewriting `item._nodeid`, which pytest 9.2's structured node ids no longer
read, so the marks are silently ignored (pytest-dev/pytest-xdist#1386, open). The controller sees
only node ids, so the groups are a table of file paths here; every worker checks the table against
what the collected tests use (`check`), and a file that shares a fixture or package with another
but is not grouped with it stops the collection with one line saying what to add.
"""

from __future__ import annotations

import inspect
import pathlib
from collections.abc import Iterable

import pytest
from xdist.scheduler import LoadScopeScheduling

SHARED_FIXTURES = frozenset(
    {
        "penguin_runs",  # two README runs: test_e2e_local and the Flink reference
        "digits_run",  # images.md's digits run: test_e2e_images and the Flink digits reference
        "flink",  # a Flink cluster, its worker pool and job server
        "kube",  # kube-apiserver, kube-controller-manager and etcd
        "transform_run",  # tf.Transform analyze+transform runs
        "image_transform_run",
        "regression_transform_run",
        "compiled_files",  # every Kubeflow variant compiled
        "compiled",  # the documents of those files (the same files' users)
        "image",  # the project's image, built with podman
        "local_cluster",  # the single-node cluster (kubeflow.local_cluster), its operators
        "kfp_cluster",  # Kubeflow Pipelines on that cluster (up --kfp)
    }
)
CHEAP_FIXTURES = frozenset({"penguins_csv", "penguins_schema_path"})
# etcd is not exclusive: each control plane binds its own ports (the local cluster's inside its
# network namespace).
EXCLUSIVE_PACKAGES = frozenset({"podman", "openjdk-17-jre-headless"})

# name -> the test files that run together on one worker.
GROUPS: dict[str, tuple[str, ...]] = {
    "flink-spark-and-direct-references": (
        "tests/pipeline/beam/test_flink.py",
        "tests/pipeline/beam/test_flink_digits.py",
        "tests/pipeline/beam/test_spark.py",
        "tests/test_e2e_images.py",
        "tests/test_e2e_local.py",
    ),
    "kubernetes": (
        "tests/components/training/test_kubernetes_objects.py",
        "tests/components/training/test_real_kube.py",
        "tests/components/training/test_trainjob.py",
    ),
    "podman": (
        "tests/kubeflow/test_image_build.py",
        "tests/kubeflow/test_kfp_local.py",
        "tests/kubeflow/test_local_cluster.py",
        # After test_local_cluster.py (collection order): its first test runs before the
        # session's cluster is up.
        "tests/kubeflow/test_local_cluster_launchers.py",
        "tests/kubeflow/test_local_cluster_kfp.py",
        "tests/kubeflow/test_local_cluster_kfp_recurring.py",
        "tests/kubeflow/test_local_cluster_kfp_training.py",
    ),
    "kubeflow-variants": (
        "tests/kubeflow/test_conformance.py",
        "tests/kubeflow/test_kfp_backend.py",
    ),
    "transform-runs": (
        "tests/components/ml/test_image_preprocessing.py",
        "tests/components/ml/test_image_skew.py",
        "tests/components/ml/test_model.py",
        "tests/components/ml/test_preprocessing.py",
        "tests/components/ml/test_preprocessing_equivalence.py",
        "tests/components/ml/test_regression.py",
        "tests/components/training/test_class_weights.py",
        "tests/components/training/test_loop.py",
    ),
}
# Files that take minutes on their own: started early, after the groups.
SLOW_FIRST: tuple[str, ...] = (
    "tests/test_e2e_user_code.py",
    "tests/kubeflow/test_ir_user_code.py",
    "tests/kubeflow/test_ir_pipeline.py",
    "tests/pipeline/beam/test_portable_runner.py",
    "tests/test_e2e_strategies.py",
    "tests/test_e2e_cache.py",
    "tests/reliability",
    "tests/kubeflow",
    "tests/test_e2e",
)


def unit(nodeid: str) -> str:
    """The scheduling unit of a test: its group's name, else its file."""
    path = nodeid.split("::", 1)[0]
    return next((name for name, paths in GROUPS.items() if path in paths), path)


def _rank(name: str) -> tuple[int, int]:
    if name in GROUPS:
        return (0, list(GROUPS).index(name))
    for index, prefix in enumerate(SLOW_FIRST):
        if name.startswith(prefix):
            return (1, index)
    return (2, 0)


class FileGroupScheduling(LoadScopeScheduling):
    """xdist's loadscope with this suite's units, longest first."""

    def _split_scope(self, nodeid: str) -> str:
        return unit(nodeid)

    def _assign_work_unit(self, node) -> None:
        if self.workqueue and not getattr(self, "_ordered", False):
            self._ordered = True
            ordered = sorted(self.workqueue.items(), key=lambda kv: _rank(kv[0]))  # stable
            self.workqueue.clear()
            self.workqueue.update(ordered)
        super()._assign_work_unit(node)


def _session_fixtures(item: pytest.Item) -> set[str]:
    """The session-scoped fixtures the item uses that this suite defines (not pytest's or a
    plugin's)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    root = item.config.rootpath.resolve()
    found = set()
    for name in info.names_closure:
        definitions = info.name2fixturedefs.get(name, ())
        # The last definition is the one the test gets (a module's own fixture of the same
        # name overrides a conftest's).
        if definitions and definitions[-1].scope == "session" and ours(definitions[-1].func, root):
            found.add(name)
    return found


def ours(func: object, root: pathlib.Path) -> bool:
    try:
        path = pathlib.Path(inspect.getfile(func)).resolve()  # type: ignore[arg-type]
    except TypeError:
        return False
    return path.is_relative_to(root) and "site-packages" not in path.parts


def _packages(item: pytest.Item) -> set[str]:
    return {name for mark in item.iter_markers("system_packages") for name in mark.args}


def check(items: Iterable[pytest.Item]) -> None:
    """Raises UsageError where the collected tests share a fixture or package across units, or
    use a session fixture that is in neither SHARED_FIXTURES nor CHEAP_FIXTURES."""
    users: dict[str, set[str]] = {}  # shared thing -> the files that use it
    unplaced = set()
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        for name in _session_fixtures(item):
            if name in SHARED_FIXTURES:
                users.setdefault(f"session fixture {name!r}", set()).add(path)
            elif name not in CHEAP_FIXTURES:
                unplaced.add(name)
        for package in _packages(item) & EXCLUSIVE_PACKAGES:
            users.setdefault(f"system package {package!r}", set()).add(path)
    if unplaced:
        raise pytest.UsageError(
            f"session fixtures {sorted(unplaced)} are in neither SHARED_FIXTURES nor "
            "CHEAP_FIXTURES (tests/workers.py): add each to the one that fits"
        )
    for thing, paths in sorted(users.items()):
        units = {unit(path) for path in paths}
        if len(paths) > 1 and len(units) > 1:
            raise pytest.UsageError(
                f"{sorted(paths)} share the {thing} but would run on different xdist workers: "
                "put them in one of GROUPS in tests/workers.py"
            )
