"""Multi-worker training from a KFP run on the local cluster (`up --kfp`, the `kfp_cluster`
fixture), the way a user of a standalone KFP install runs it: the penguin pipeline compiled with
`--strategy multi_worker_mirrored --workers 2 --launcher tfjob`, the data on the shared volume
(`--pvc_name`, `--data_root` there), a user module (`--module_file examples/penguin_hook.py`,
staged on the volume with `--user_code_root`), KFP's own store as pipeline root (minio://).

What it proves: the run SUCCEEDED per KFP's API; the Trainer task's pod created a TFJob through
the Training Operator on the same cluster (RBAC from kubeflow/tfjob-rbac.yaml bound to
pipeline-runner, as docs/kubeflow.md says), which Succeeded with 2 worker pods of the project's
image; those pods read the Trainer's inputs from the volume, where the Trainer staged KFP's
launcher's local copies (components/training/staging.py), and the staging folder is gone
afterwards; the model trained is the module's (its name and its residual block's width from
--custom_config), and it was pushed (bucket and serving folder)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest
import yaml

from components.training import staging
from kubeflow.local_cluster import kfp
from tests.kubeflow.conftest import CLUSTER_PACKAGES

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WIDTH = 16  # the hook's residual block (--custom_config); the built-in model has no such layer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.system_packages(*CLUSTER_PACKAGES, "mariadb-server"),
]


def _bind_tfjob_rbac(kube) -> None:
    """kubeflow/tfjob-rbac.yaml applied in KFP's namespace, bound to the account KFP runs
    pipeline pods as in a standalone install (pipeline-runner)."""
    with open(os.path.join(PROJECT_ROOT, "kubeflow", "tfjob-rbac.yaml")) as handle:
        documents = [d for d in yaml.safe_load_all(handle) if d]
    for document in documents:
        document["metadata"]["namespace"] = kfp.NAMESPACE
        for subject in document.get("subjects", []):
            subject.update(name="pipeline-runner", namespace=kfp.NAMESPACE)
    kube.apply(yaml.safe_dump_all(documents))


def _pod_logs(kube) -> str:
    """The last lines of the failed pods in KFP's namespace, and of the TFJob's pods."""
    lines = []
    for pod in kube.get("-n", kfp.NAMESPACE, "pods")["items"]:
        name = pod["metadata"]["name"]
        failed = pod.get("status", {}).get("phase") == "Failed"
        if not (failed or name.startswith("tfx-train-")):
            continue
        for container in pod["spec"]["containers"]:
            log = kube.kubectl(
                "-n", kfp.NAMESPACE, "logs", name, "-c", container["name"], "--tail=25", check=False
            )
            lines.append(f"--- {name}/{container['name']}:\n{log}")
    return "\n".join(lines)


def test_multi_worker_tfjob_from_a_kfp_run_with_a_user_module_and_data_on_the_volume(
    kfp_cluster, tmp_path, penguins_csv, penguins_schema_path
):
    from kubeflow import run_kubeflow

    image = kfp_cluster.info["image"]
    shared = kfp_cluster.info["shared"]
    kube = kfp_cluster.kube()
    _bind_tfjob_rbac(kube)
    work = os.path.join(shared, f"training-{tmp_path.name}")
    data = os.path.join(work, "data")
    os.makedirs(data)
    shutil.copyfile(penguins_csv, os.path.join(data, "penguins.csv"))
    # As the cluster's admin prepares a volume's folders for pipelines' pods (which run as the
    # image's user, and the volume's root is not theirs): the serving folder the Pusher writes,
    # and the folder where the Trainer stages the job's inputs.
    serving = os.path.join(work, "serving")
    staging_root = os.path.join(shared, staging.STAGING_DIR)
    for folder in (serving, staging_root):
        os.makedirs(folder, exist_ok=True)
        os.chmod(folder, 0o777)
    package = str(tmp_path / "penguins-tfjob.yaml")
    sizes = [f"--{k}_{s}=0" for k in ("beam", "trainer", "default") for s in ("cpu", "memory_gb")]
    compiled = run_kubeflow.main(
        [
            "compile",
            "--pipeline_root=minio://mlpipeline/v2/artifacts",
            f"--image={image}",
            f"--gpu_image={image}",
            "--allow_unpinned_images",
            "--pvc_name=tfx-scaleout-shared",
            f"--mount_path={shared}",
            f"--serving_model_dir={serving}",
            f"--data_root={data}",
            "--label=species",
            f"--schema={penguins_schema_path}",
            f"--module_file={PROJECT_ROOT}/examples/penguin_hook.py",
            f"--user_code_root={work}/user_code",
            f'--custom_config={{"width": {WIDTH}}}',
            "--strategy=multi_worker_mirrored",
            "--workers=2",
            "--launcher=tfjob",
            "--worker_cpu=0.3",
            "--worker_memory_gb=2",
            "--job_delete=never",  # kept for the checks below
            "--pipeline_name=penguins-tfjob-on-the-local-cluster",
            "--gpus=0",
            "--epochs=1",
            *sizes,
            f"--output={package}",
        ]
    )
    assert compiled == 0
    url = kfp_cluster.info["kfp"]["url"]
    started = time.monotonic()
    deployed = subprocess.run(
        [sys.executable, "kubeflow/run_kubeflow.py", "deploy", f"--package={package}"]
        + ["--run", "--wait", "--timeout=1400", "--poll=5", f"--endpoint={url}"],
        capture_output=True,
        text=True,
        timeout=1500,
        cwd=PROJECT_ROOT,
    )
    assert deployed.returncode == 0, (
        deployed.stdout[-2000:] + deployed.stderr[-2000:] + _pod_logs(kube)
    )
    print(f"penguin run with a TFJob: {time.monotonic() - started:.0f} s")
    run_id = re.search(r"run ([0-9a-f-]{36})", deployed.stdout + deployed.stderr)
    assert run_id, deployed.stdout
    import kfp as kfp_sdk

    assert kfp_sdk.Client(host=url).get_run(run_id.group(1)).state == "SUCCEEDED"

    # The TFJob the Trainer's pod created: owned by that pod, of this run's workflow.
    (workflow,) = kube.get(
        "-n", kfp.NAMESPACE, "workflows", "-l", f"pipeline/runid={run_id.group(1)}"
    )["items"]
    run_pods = kube.get(
        "-n",
        kfp.NAMESPACE,
        "pods",
        "-l",
        f"workflows.argoproj.io/workflow={workflow['metadata']['name']}",
    )["items"]
    run_pod_names = {pod["metadata"]["name"] for pod in run_pods}
    tfjobs = [
        job
        for job in kube.get("-n", kfp.NAMESPACE, "tfjobs")["items"]
        if {o["name"] for o in job["metadata"].get("ownerReferences", [])} & run_pod_names
    ]
    assert len(tfjobs) == 1, [j["metadata"]["name"] for j in tfjobs]
    (tfjob,) = tfjobs
    name = tfjob["metadata"]["name"]
    conditions = {c["type"]: c["status"] for c in tfjob["status"]["conditions"]}
    assert conditions.get("Succeeded") == "True", tfjob["status"]
    assert tfjob["status"]["replicaStatuses"]["Worker"].get("succeeded") == 2, tfjob["status"]
    workers = kube.get("-n", kfp.NAMESPACE, "pods", "-l", f"training.kubeflow.org/job-name={name}")[
        "items"
    ]
    # The job's cleanPodPolicy (Running) deletes a worker still running when the operator marks
    # the job done (seen: 1 of the 2 left); the replica status above counts both.
    assert 1 <= len(workers) <= 2
    assert {p["status"]["phase"] for p in workers} == {"Succeeded"}
    assert {c["image"] for p in workers for c in p["spec"]["containers"]} == {image}
    # The workers read the task from the staging folder on the volume; it is gone now.
    (task_file,) = {
        arg
        for p in workers
        for c in p["spec"]["containers"]
        for arg in c.get("args", []) + c.get("command", [])
        if arg.endswith("task.json")
    }
    assert task_file.startswith(f"{staging_root}/{name}/minio/"), task_file
    assert not os.path.exists(os.path.join(staging_root, name))

    # The model trained is the module's: its name and its residual block's width.
    bucket = os.path.join(kfp.KfpLayout(kfp_cluster.layout).s3_root, kfp.BUCKET)
    pushed = subprocess.run(
        ["find", bucket, "-path", f"*{run_id.group(1)}*Pusher*", "-name", "saved_model.pb"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert len(pushed) == 1, pushed
    with open(pushed[0], "rb") as handle:
        graph = handle.read()
    assert b"penguin_residual/" in graph and b"layer_normalization" in graph
    import tensorflow as tf

    shapes = [
        shape
        for _, shape in tf.train.list_variables(
            os.path.join(os.path.dirname(pushed[0]), "variables", "variables")
        )
    ]
    assert [WIDTH, WIDTH] in shapes and [WIDTH, 3] in shapes, shapes
    # Pushed to the serving folder on the volume too.
    (version,) = os.listdir(serving)
    assert os.path.getsize(os.path.join(serving, version, "saved_model.pb")) == len(graph)
