"""The Trainer's run_fn hands multi-worker training to the TFJob launcher when the compiled
custom_config says so (the local process launcher otherwise), and the RBAC manifest grants the
API calls the launcher makes."""

from __future__ import annotations

import json
import os
import types
from unittest import mock

import yaml
from kubernetes import client as k8s

from components import cluster, features, model
from kubeflow import tfjob
from kubeflow.config import TFJobConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _fn_args(tmp_path, custom_config: dict):
    shard = tmp_path / "Split-train" / "part-0.gz"
    shard.parent.mkdir()
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
    )


def test_run_fn_uses_the_tfjob_launcher_from_custom_config(tmp_path):
    settings = TFJobConfig(image="registry.example.com/gpu:1", namespace="ml")
    custom_config = json.loads(
        json.dumps(
            {
                features.LABEL_KEY_CONFIG: "species",
                "strategy": "multi_worker_mirrored",
                "workers": 3,
                "launcher": "tfjob",
                "tfjob": settings.to_dict(),
            }
        )
    )
    with (
        mock.patch.object(tfjob.TFJobLauncher, "run", autospec=True) as run,
        mock.patch.object(cluster.LocalProcessLauncher, "run") as local_run,
        mock.patch("kubeflow.tfjob._load_kubernetes_config"),
    ):
        model.run_fn(_fn_args(tmp_path, custom_config))
    assert not local_run.called
    launcher, spec, task = run.call_args.args
    assert launcher.settings == settings
    assert spec == cluster.ClusterSpec("multi_worker_mirrored", workers=3)
    assert (task.strategy, task.workers, task.train_steps) == ("multi_worker_mirrored", 3, 10)


def test_run_fn_keeps_the_local_launcher_by_default(tmp_path):
    custom_config = {
        features.LABEL_KEY_CONFIG: "species",
        "strategy": "parameter_server",
        "workers": 2,
        "ps": 1,
    }
    with (
        mock.patch.object(tfjob.TFJobLauncher, "run") as run,
        mock.patch.object(cluster.LocalProcessLauncher, "run") as local_run,
    ):
        model.run_fn(_fn_args(tmp_path, custom_config))
    assert not run.called
    assert local_run.call_args.args[0] == cluster.ClusterSpec("parameter_server", 2, 1)


def test_rbac_grants_the_launchers_calls():
    with open(os.path.join(ROOT, "kubeflow", "tfjob-rbac.yaml")) as handle:
        role, binding = list(yaml.safe_load_all(handle))
    api = k8s.ApiClient()

    class _Response:
        data = json.dumps(role)

    parsed = api.deserialize(_Response(), "V1Role")
    granted = {
        (group, resource, verb)
        for rule in parsed.rules
        for group in rule.api_groups
        for resource in rule.resources
        for verb in rule.verbs
    }
    needed = {
        ("kubeflow.org", "tfjobs", "create"),
        ("kubeflow.org", "tfjobs", "get"),
        ("kubeflow.org", "tfjobs", "delete"),
        ("", "pods", "list"),
        ("", "pods/log", "get"),
    }
    assert needed <= granted
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
