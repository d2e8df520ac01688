"""Where a Kubernetes launcher puts its job when nothing is configured: the Trainer pod's
namespace and service account in a pod, the kubeconfig's namespace on a workstation; and the
SIGTERM handler's scope."""

from __future__ import annotations

import re
import signal
import threading

import pytest

from components.training import cluster, kubernetes_job
from components.training.settings import TFJobConfig
from tests.components.training.fake_kube import owner_pod


def test_in_a_pod_the_namespace_file_and_the_pods_own_account_are_the_defaults(fake_kube, tmp_path):
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("kubeflow-user-example-com\n")
    fake_kube.owner_pods["kubeflow-user-example-com", "trainer-xyz"] = owner_pod(
        "kubeflow-user-example-com", "trainer-xyz", "uid-9", "default-editor"
    )
    _, core = fake_kube.clients()
    # No KFP_POD_NAME: the host name is the pod's name.
    placement = kubernetes_job.resolve_placement(
        TFJobConfig(image="i"), core, str(namespace_file), environ={}, hostname="trainer-xyz"
    )
    assert placement == kubernetes_job.Placement(
        "kubeflow-user-example-com",
        "default-editor",
        kubernetes_job.OwnerPod(
            "trainer-xyz", "uid-9", "kubeflow-user-example-com", "default-editor"
        ),
    )
    # Flags win.
    placement = kubernetes_job.resolve_placement(
        TFJobConfig(image="i", service_account="trainer-sa"),
        core,
        str(namespace_file),
        environ={"KFP_POD_NAME": "trainer-xyz"},
    )
    assert placement.service_account == "trainer-sa" and placement.owner is not None


def test_an_unreadable_pod_means_no_owner_not_a_failure(fake_kube, tmp_path):
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("team-a")
    _, core = fake_kube.clients()
    placement = kubernetes_job.resolve_placement(
        TFJobConfig(image="i"), core, str(namespace_file), environ={"KFP_POD_NAME": "gone"}
    )
    assert placement == kubernetes_job.Placement("team-a", "", None)


def test_on_a_workstation_the_kubeconfig_namespace(tmp_path, monkeypatch):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "contexts:\n- name: c\n  context: {cluster: k, user: u, namespace: research}\n"
        "clusters:\n- name: k\n  cluster: {server: 'http://127.0.0.1:1'}\n"
        "users:\n- name: u\n  user: {}\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    placement = kubernetes_job.resolve_placement(
        TFJobConfig(image="i"), core_api=None, namespace_file=str(tmp_path / "absent")
    )
    assert placement == kubernetes_job.Placement("research", "", None)


def test_sigterm_raises_cancelled_only_inside_the_block():
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(cluster.Cancelled, match="SIGTERM"), kubernetes_job.sigterm_cancels():
        signal.raise_signal(signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is previous


def test_outside_the_main_thread_sigterm_is_left_alone():
    seen = []

    def run():
        with kubernetes_job.sigterm_cancels():
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=10)
    assert seen == [signal.getsignal(signal.SIGTERM)]


@pytest.mark.parametrize("kind", ["TFJob", "TrainJob"])
def test_a_cluster_without_the_operator_is_told_what_to_install(fake_kube, kind, tmp_path):
    """A cluster without the job's CRD (the local cluster has them all: the fake API here)."""
    from components.training import tfjob, trainjob
    from components.training.loop import TrainTask
    from components.training.settings import TrainingConfig, TrainJobConfig

    launcher_class, plural, settings = {
        "TFJob": (tfjob.TFJobLauncher, "tfjobs", TFJobConfig(image="i")),
        "TrainJob": (trainjob.TrainJobLauncher, "trainjobs", TrainJobConfig(image="i")),
    }[kind]
    fake_kube.plurals.discard(plural)
    spec = cluster.ClusterSpec("multi_worker_mirrored", workers=2)
    if kind == "TrainJob":  # the platform team applied the runtime, not Trainer's CRDs
        runtime = trainjob.runtime_manifest(spec, settings, "team")
        fake_kube.objects["trainingruntimes", "team", runtime["metadata"]["name"]] = runtime
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("team\n")
    fake_kube.owner_pods["team", "trainer"] = owner_pod("team", "trainer", "uid-1", "editor")
    custom, core = fake_kube.clients()
    launcher = launcher_class(
        settings,
        custom_api=custom,
        core_api=core,
        sleep=lambda seconds: None,
        namespace_file=str(namespace_file),
        environ={"KFP_POD_NAME": "trainer"},
    )
    task = TrainTask(
        train_files=["gs://bucket/t-0"],
        eval_files=["gs://bucket/e-0"],
        transform_output="gs://bucket/tg",
        serving_model_dir=str(tmp_path / "serving"),
        model_run_dir=str(tmp_path / "run"),
        label_key="species",
        settings=TrainingConfig(strategy="multi_worker_mirrored", workers=2, launcher=settings),
    )
    with pytest.raises(cluster.ClusterError, match=re.escape(f"install {launcher.OPERATOR}")):
        launcher.run(spec, task)
