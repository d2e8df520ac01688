"""The Trainer's run_fn reads the Trainer contract back from custom_config and hands multi-worker
training to the launcher it names (a TFJob or a TrainJob, or the local process launcher by
default), and each launcher's RBAC manifest grants the API calls it makes."""

from __future__ import annotations

import json
import os
import types
from unittest import mock

import pytest
import yaml
from kubernetes import client as k8s

from components import ConfigError
from components.ml import features
from components.training import cluster, tfjob, trainer, trainjob
from components.training.settings import TFJobConfig, TrainingConfig, TrainJobConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _fn_args(tmp_path, custom_config: dict):
    shard = tmp_path / "Split-train" / "part-0.gz"
    shard.parent.mkdir(exist_ok=True)
    shard.write_bytes(b"")
    return types.SimpleNamespace(
        train_files=[str(tmp_path / "Split-train" / "*")],
        eval_files=[str(tmp_path / "Split-train" / "*")],
        transform_output=str(tmp_path / "transform_graph"),
        serving_model_dir=str(tmp_path / "serving"),
        model_run_dir=str(tmp_path / "run"),
        train_steps=10,
        eval_steps=None,
        custom_config=custom_config,
        hyperparameters=None,  # TFX's FnArgs: the Tuner's best point, when there is one
    )


def test_run_fn_uses_the_tfjob_launcher_from_custom_config(tmp_path):
    settings = TFJobConfig(image="registry.example.com/gpu:1", namespace="ml")
    training = TrainingConfig(
        strategy="multi_worker_mirrored", workers=3, train_steps=10, launcher=settings
    )
    # As the compiled pipeline carries it: JSON in the Trainer's exec properties.
    custom_config = json.loads(json.dumps(training.to_custom_config("species")))
    with (
        mock.patch.object(tfjob.TFJobLauncher, "run", autospec=True) as run,
        mock.patch.object(cluster.LocalProcessLauncher, "run") as local_run,
        mock.patch("components.training.kubernetes_job.load_kubernetes_config"),
    ):
        trainer.run_fn(_fn_args(tmp_path, custom_config))
    assert not local_run.called
    launcher, spec, task = run.call_args.args
    assert launcher.settings == settings
    assert spec == cluster.ClusterSpec("multi_worker_mirrored", workers=3)
    assert task.settings == training and task.label_key == "species"
    assert (task.settings.strategy, task.settings.workers, task.settings.train_steps) == (
        "multi_worker_mirrored",
        3,
        10,
    )


def test_run_fn_keeps_the_local_launcher_by_default(tmp_path):
    custom_config = TrainingConfig(strategy="parameter_server", workers=2, ps=1).to_custom_config(
        "species"
    )
    with (
        mock.patch.object(tfjob.TFJobLauncher, "run") as run,
        mock.patch.object(cluster.LocalProcessLauncher, "run") as local_run,
    ):
        trainer.run_fn(_fn_args(tmp_path, custom_config))
    assert not run.called
    assert local_run.call_args.args[0] == cluster.ClusterSpec("parameter_server", 2, 1)


@pytest.mark.parametrize(
    ("rbac_file", "group", "plural", "extra"),
    [
        ("tfjob-rbac.yaml", "kubeflow.org", "tfjobs", set()),
        (
            "trainjob-rbac.yaml",
            "trainer.kubeflow.org",
            "trainjobs",
            {("trainer.kubeflow.org", "trainingruntimes", "get")},
        ),
    ],
)
def test_rbac_manifests_are_valid_and_grant_the_launchers_calls(rbac_file, group, plural, extra):
    """Each launcher's calls (tests/kubeflow/test_local_cluster_launchers.py makes them as the
    account these files bind, on the local cluster)."""
    with open(os.path.join(ROOT, "kubeflow", rbac_file)) as handle:
        role, binding = list(yaml.safe_load_all(handle))
    api = k8s.ApiClient()

    class _Response:
        data = json.dumps(role)

    parsed = api.deserialize(_Response(), "V1Role")
    granted = {
        (rule_group, resource, verb)
        for rule in parsed.rules
        for rule_group in rule.api_groups
        for resource in rule.resources
        for verb in rule.verbs
    }
    needed = {(group, plural, verb) for verb in ("create", "get", "patch", "delete")} | {
        ("", "pods", "list"),
        ("", "pods", "get"),
        ("", "pods/log", "get"),
        ("", "events", "list"),
        *extra,
    }
    assert needed <= granted
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_run_fn_uses_the_trainjob_launcher_from_custom_config(tmp_path):
    settings = TrainJobConfig(image="registry.example.com/gpu:1", namespace="ml")
    training = TrainingConfig(
        strategy="parameter_server", workers=2, ps=1, train_steps=10, launcher=settings
    )
    custom_config = json.loads(json.dumps(training.to_custom_config("species")))
    with (
        mock.patch.object(trainjob.TrainJobLauncher, "run", autospec=True) as run,
        mock.patch("components.training.kubernetes_job.load_kubernetes_config"),
    ):
        trainer.run_fn(_fn_args(tmp_path, custom_config))
    launcher, spec, task = run.call_args.args
    assert launcher.settings == settings
    assert spec == cluster.ClusterSpec("parameter_server", workers=2, ps=1)


def test_a_stale_or_misspelled_setting_fails_instead_of_taking_a_default(tmp_path):
    custom_config = {features.LABEL_KEY_CONFIG: "species", "batch_size": 64}
    with pytest.raises(ConfigError, match=r"unknown setting\(s\) \['batch_size'\]"):
        trainer.run_fn(_fn_args(tmp_path, custom_config))
    with pytest.raises(ConfigError, match="TrainingConfig.epochs: expected int, got '3'"):
        trainer.run_fn(_fn_args(tmp_path, {features.LABEL_KEY_CONFIG: "y", "epochs": "3"}))
    with pytest.raises(ConfigError, match="no 'label_key'"):
        trainer.run_fn(_fn_args(tmp_path, {"epochs": 3}))
