"""A recurring run on the local cluster's Kubeflow Pipelines (`up --kfp`, the `kfp_cluster`
fixture): `run_kubeflow.py deploy --recurring CRON` creates it through KFP's API, KFP's
ScheduledWorkflow controller (built from KFP 2.14.3's source, kubeflow/local_cluster/kfp.py)
starts its run through the API server, the run succeeds; `recurring --disable` stops it (no run
at the cron times that follow), `recurring --delete` removes it and its ScheduledWorkflow.

The cron and flag checks without a cluster: tests/kubeflow/test_deploy_recurring.py."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from kubeflow.local_cluster import kfp
from tests.kubeflow.conftest import CLUSTER_PACKAGES

PROJECT_ROOT = __file__.rsplit("/tests/", 1)[0]
PERIOD_SECONDS = 10

pytestmark = [
    pytest.mark.slow,
    pytest.mark.system_packages(*CLUSTER_PACKAGES, "mariadb-server"),
]


def _pipeline(image: str):
    """One task running a static program of KFP's driver image (exits 0 with -help): a run costs
    the pods of a v2 run and nothing else."""
    from kfp import dsl

    @dsl.container_component
    def tick():
        return dsl.ContainerSpec(image=image, command=["/bin/driver"], args=["-help"])

    @dsl.pipeline(name="recurring-local-cluster")
    def pipeline():
        tick()

    return pipeline


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "kubeflow/run_kubeflow.py", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_ROOT,
    )


def _names(kube, resource: str) -> set[str]:
    return {item["metadata"]["name"] for item in kube.get("-n", kfp.NAMESPACE, resource)["items"]}


def _runs_of(client, recurring_run_id: str) -> list:
    runs = client.list_runs(page_size=100, sort_by="created_at desc").runs or []
    return [run for run in runs if run.recurring_run_id == recurring_run_id]


def test_a_recurring_run_fires_once_then_disabled_fires_no_more(kfp_cluster, tmp_path):
    import kfp as kfp_sdk
    from kfp import compiler

    url = kfp_cluster.info["kfp"]["url"]
    client = kfp_sdk.Client(host=url)
    package = str(tmp_path / "tick.yaml")
    compiler.Compiler().compile(_pipeline(kfp_cluster.info["kfp"]["images"]["kfp-driver"]), package)
    kube = kfp_cluster.kube()
    swfs_before = _names(kube, "scheduledworkflows")
    workflows_before = _names(kube, "workflows")
    # Every PERIOD_SECONDS; one run at a time, so that while the first runs no second starts.
    created = _cli(
        "deploy",
        f"--package={package}",
        f"--endpoint={url}",
        f"--recurring=*/{PERIOD_SECONDS} * * * * *",
        "--max_concurrency=1",
        f"--run_name=tick-{tmp_path.name[-20:]}",
    )
    assert created.returncode == 0, created.stdout + created.stderr
    found = re.search(r"^recurring run ([0-9a-f-]{36}) created$", created.stdout, re.M)
    assert found, created.stdout
    recurring_id = found.group(1)
    recurring = client.get_recurring_run(recurring_id)
    assert recurring.status == "ENABLED"
    assert recurring.trigger.cron_schedule.cron == f"*/{PERIOD_SECONDS} * * * * *"
    # The API server made a ScheduledWorkflow; the controller reconciles it.
    (swf_name,) = _names(kube, "scheduledworkflows") - swfs_before
    deadline = time.monotonic() + 120
    runs: list = []
    while not runs and time.monotonic() < deadline:
        time.sleep(1)
        runs = _runs_of(client, recurring_id)
    assert runs, (
        f"no run of recurring run {recurring_id} in 120 s; controller log:\n"
        + kube.kubectl(
            "-n", kfp.NAMESPACE, "logs", "deployment/ml-pipeline-scheduledworkflow", "--tail=30"
        )
    )
    disabled = _cli("recurring", f"--endpoint={url}", f"--disable={recurring_id}")
    assert disabled.returncode == 0, disabled.stdout + disabled.stderr
    assert f"recurring run {recurring_id} disabled" in disabled.stdout
    assert client.get_recurring_run(recurring_id).status == "DISABLED"
    (run,) = runs
    result = client.wait_for_run_completion(run.run_id, timeout=300, sleep_duration=3)
    assert result.state == "SUCCEEDED", result
    # Three cron times later: still the one run, and the one workflow the controller made.
    time.sleep(3 * PERIOD_SECONDS)
    assert [r.run_id for r in _runs_of(client, recurring_id)] == [run.run_id]
    swf = kube.get("-n", kfp.NAMESPACE, "scheduledworkflow", swf_name)
    # Disabled: spec.enabled false (left out of the object, omitempty) and the controller's
    # condition.
    assert not swf["spec"].get("enabled"), swf["spec"]
    conditions = {c["type"]: c["status"] for c in swf["status"]["conditions"]}
    assert conditions.get("Disabled") == "True", swf["status"]
    # One Argo workflow since the recurring run was made (the tests of a session run one at a
    # time): its run's.
    (workflow,) = _names(kube, "workflows") - workflows_before
    labels = kube.get("-n", kfp.NAMESPACE, "workflow", workflow)["metadata"]["labels"]
    assert labels["pipeline/runid"] == run.run_id
    deleted = _cli("recurring", f"--endpoint={url}", f"--delete={recurring_id}")
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    deadline = time.monotonic() + 60
    while swf_name in _names(kube, "scheduledworkflows") and time.monotonic() < deadline:
        time.sleep(1)
    assert swf_name not in _names(kube, "scheduledworkflows")
    assert client.get_run(run.run_id).state == "SUCCEEDED"  # its run stays
