"""The local cluster for real (`python -m kubeflow.local_cluster`): Kubernetes built from source
running pods of the project's image on Debian's containerd, the Training Operator's, JobSet's and
Kubeflow Trainer's own controllers reconciling the jobs, and multi-worker training in those pods.
Nothing here writes a job's or a pod's status: the operators and the kubelet do.

The first test runs before the session's cluster exists (a killed `up`, then `down`); the others
share one cluster (the `local_cluster` fixture), in file order."""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import yaml

from kubeflow.local_cluster import __main__ as cli
from kubeflow.local_cluster import cluster, host, node
from pipeline import datasets
from tests.kubeflow.conftest import CLUSTER_PACKAGES
from tests.kubeflow.pods import container_pids

ROOT = datasets.PROJECT_ROOT
pytestmark = [pytest.mark.slow, pytest.mark.system_packages(*CLUSTER_PACKAGES)]


def _host_state() -> dict:
    """What the cluster could leave on the host."""
    iptables = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    return {
        "cgroup processes": sorted(host.cgroup_pids()),
        "netns processes": sorted(host.pids_in_netns()),
        "netns": host.netns_exists(),
        "veth": host.link_exists(node.HOST_VETH),
        "cgroups": host.cgroup_dirs(),
        "pod netns files": sorted(
            name for name in os.listdir("/run/netns") if name.startswith("cni-")
        )
        if os.path.isdir("/run/netns")
        else [],
        "host KUBE chains": [line for line in iptables.splitlines() if "KUBE-" in line],
        "private dirs": [path for path in node.PRIVATE_DIRS if os.path.exists(path)],
        "runtime dir": os.path.exists(node.RUNTIME_DIR),
    }


def _named_processes() -> list[str]:
    """KFP's host programs running anywhere on this machine (by their executable's name)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                name = os.path.basename(os.readlink(f"/proc/{entry}/exe"))
            except OSError:
                continue
            if name in ("mariadbd", "versitygw"):
                found.append(f"{entry} {name}")
    return found


def _cli(root: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kubeflow.local_cluster", "--root", root, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )


def test_a_killed_up_leaves_nothing_behind_that_down_does_not_remove(image, tmp_path):
    """`up --kfp` killed once Kubeflow Pipelines' host processes (MariaDB, the S3 server, the
    MLMD server) run: `down` still finds and removes everything."""
    before = _host_state()
    assert not before["netns"], "a local cluster is already up on this machine"
    root = str(tmp_path / "cluster")
    command = [sys.executable, "-m", "kubeflow.local_cluster", "--root", root, "up"]
    up = subprocess.Popen(
        [*command, "--image", image, "--operators", "none", "--kfp"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    seen = []
    for line in up.stdout:
        seen.append(line)
        if "ready mlmd-grpc" in line:
            break
    up.kill()  # kill -9: no finally block of `up` runs
    up.wait()
    assert any("ready kubelet" in line for line in seen), "".join(seen)
    assert any("ready mlmd-grpc" in line for line in seen), "".join(seen)
    # The node and KFP's host processes outlive their `up` (each supervisor is in a session of
    # its own).
    status = _cli(root, "status")
    assert status.returncode == 0, status.stdout + status.stderr
    for name in ("kubelet", "mariadb", "s3-versitygw", "mlmd-grpc"):
        assert re.search(rf"^{name}: running \(pid \d+\)$", status.stdout, re.M), status.stdout
    assert _named_processes(), "no mariadbd or versitygw process while the cluster is up"
    during = _host_state()
    assert during["netns"] and during["cgroup processes"] and during["cgroups"]
    down = _cli(root, "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "removed network namespace tfx-scaleout" in down.stdout
    after = _host_state()
    assert after == before, (before, after)
    assert _named_processes() == []
    assert host.mounts_under(root) == []
    assert not os.path.exists(os.path.join(root, "run"))
    again = _cli(root, "status")
    assert again.returncode == 3 and again.stdout.strip() == "cluster: down", again.stdout


def test_status_names_kubeconfig_shared_folder_image_and_every_component(local_cluster):
    status = _cli(local_cluster.root, "status", timeout=60)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[:3] == [
        f"kubeconfig: {local_cluster.kubeconfig}",
        f"shared: {local_cluster.shared}",
        f"image: {local_cluster.info['image']}",
    ]
    for name in (
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "containerd",
        "kubelet",
        "kube-proxy",
    ):
        assert re.search(rf"^{name}: running \(pid \d+\)$", status.stdout, re.M), name
    assert f"node {node.NODE_NAME}: Ready" in lines
    for deployment in (
        "coredns",
        "training-operator",
        "jobset-controller-manager",
        "kubeflow-trainer-controller-manager",
    ):
        assert f"{deployment}: 1/1 ready" in lines


def test_bad_states_get_one_clear_line(local_cluster, tmp_path, capsys, monkeypatch):
    other = str(tmp_path / "other")
    assert cli.main(["--root", other, "up"]) == 1
    assert (
        "network namespace tfx-scaleout or interface tfxs-host is in use" in capsys.readouterr().err
    )
    assert cli.main(["--root", local_cluster.root, "up"]) == 1
    assert "a cluster is already up" in capsys.readouterr().err
    with monkeypatch.context() as patch:
        patch.setattr(os, "geteuid", lambda: 1000)
        assert cli.main(["--root", other, "up"]) == 1
    assert "needs root" in capsys.readouterr().err
    with monkeypatch.context() as patch:
        real = host.which
        patch.setattr(host, "which", lambda p: None if p == "conntrack" else real(p))
        assert cli.main(["--root", other, "up"]) == 1
    error = capsys.readouterr().err
    assert "Debian packages missing: conntrack: apt-get install -y conntrack" in error
    assert len(error.strip().splitlines()) == 1
    # Nothing of the running cluster was touched.
    assert cluster.running_supervisor(local_cluster.layout)


def _run_pod(kube, name: str, image: str, script: str, timeout: float = 120) -> tuple[str, str]:
    """A pod of the project's image running `script` with python; (its phase, its log)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": image, "command": ["python", "-c", script]}],
        },
    }
    kube.apply(yaml.safe_dump(pod))
    deadline = time.monotonic() + timeout
    phase = ""
    while time.monotonic() < deadline:
        phase = kube.get("-n", "default", "pod", name)["status"].get("phase", "")
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(0.5)
    log = kube.kubectl("-n", "default", "logs", name, check=False)
    kube.kubectl("-n", "default", "delete", "pod", name, "--wait=false", check=False)
    return phase, log


def test_pods_reach_services_by_name_and_nothing_off_the_machine(local_cluster):
    script = textwrap.dedent(
        """
        import socket, ssl, urllib.request
        print("dns", socket.gethostbyname("kubernetes.default.svc.cluster.local"))
        context = ssl.create_default_context(
            cafile="/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
        with urllib.request.urlopen("https://kubernetes.default/livez", context=context) as r:
            print("api", r.status, r.read().decode())
        print("coredns", socket.gethostbyname("kube-dns.kube-system"))
        try:
            socket.create_connection(("192.0.2.1", 80), timeout=3)
            print("offsite reached")
        except OSError as error:
            print("offsite", type(error).__name__, error.errno)
        """
    )
    phase, log = _run_pod(local_cluster.kube(), "reach", local_cluster.info["image"], script)
    assert phase == "Succeeded", log
    assert f"dns {node.API_SERVICE_IP}" in log
    assert "api 200 ok" in log
    assert f"coredns {node.DNS_SERVICE_IP}" in log
    # The namespace has no default route: the pod's packets go nowhere off the machine.
    assert "offsite reached" not in log and re.search(r"^offsite OSError 101$", log, re.M), log


def _run_local(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "pipeline/run_local.py", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )


def _accuracy(output: str) -> float:
    found = re.search(r"sparse_categorical_accuracy (\d\.\d+)", output)
    assert found, output[-3000:]
    return float(found.group(1))


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory):
    """The same training as local processes, per strategy: multi_worker_mirrored twice (the
    spread of repeated local runs), parameter_server once; accuracies, computed when asked."""
    runs: dict[tuple[str, ...], list[float]] = {}

    def reference(strategy: tuple[str, ...]) -> list[float]:
        if strategy not in runs:
            repeats = 2 if "multi_worker_mirrored" in strategy else 1
            runs[strategy] = []
            for index in range(repeats):
                root = tmp_path_factory.mktemp(f"local-{strategy[1]}-{index}")
                result = _run_local(*strategy, "--output_root", str(root))
                assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
                runs[strategy].append(_accuracy(result.stdout))
        return runs[strategy]

    return reference


def _trainingruntime(local_cluster, spec_args: dict) -> None:
    """This project's TensorFlow runtime for the run's settings (what a platform team applies
    once; `run_kubeflow.py manifests --launcher trainjob` prints the same)."""
    from components.training import cluster as training_cluster
    from components.training import trainjob
    from components.training.settings import TrainJobConfig
    from pipeline.launcher_flags import LOCAL_WORKER

    settings = TrainJobConfig(
        image=local_cluster.info["image"],
        worker=LOCAL_WORKER,
        chief=LOCAL_WORKER,
        ps=LOCAL_WORKER,
        pvc_name=local_cluster.info["pvc"],
        mount_path=local_cluster.shared,
        run_as_user=os.stat(local_cluster.shared).st_uid,
    )
    spec = training_cluster.ClusterSpec(**spec_args)
    local_cluster.kube().apply(yaml.safe_dump(trainjob.runtime_manifest(spec, settings, "default")))


@pytest.mark.parametrize(
    "launcher, strategy",
    [
        ("tfjob", ("--strategy", "multi_worker_mirrored", "--workers", "2")),
        ("trainjob", ("--strategy", "multi_worker_mirrored", "--workers", "2")),
        ("tfjob", ("--strategy", "parameter_server", "--workers", "2", "--ps", "1")),
    ],
    ids=["tfjob-multi-worker", "trainjob-multi-worker", "tfjob-parameter-server"],
)
def test_training_runs_in_pods_and_matches_local_processes(
    local_cluster, local_reference, launcher, strategy
):
    if launcher == "trainjob":
        _trainingruntime(local_cluster, {"strategy": "multi_worker_mirrored", "workers": 2})
    output_root = os.path.join(local_cluster.shared, f"{launcher}-{strategy[1]}")
    result = _run_local(
        *strategy,
        "--launcher",
        launcher,
        "--kubeconfig",
        local_cluster.kubeconfig,
        "--output_root",
        output_root,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    kind = {"tfjob": "TFJob", "trainjob": "TrainJob"}[launcher]
    assert re.search(rf"Trainer: {kind} default/tfx-train-\w+ created", result.stdout)
    assert re.search(rf"Trainer: {kind} tfx-train-\w+: (Succeeded|Complete)", result.stdout)
    assert "pushed model:" in result.stdout
    accuracy = _accuracy(result.stdout)
    reference = local_reference(strategy)
    spread = max(reference) - min(reference)
    # Within the local runs' spread; where repeated local runs agree exactly (they do here:
    # 0.978 and 0.978), within one of the 91 eval examples (the summary prints 3 decimals).
    tolerance = max(spread, 1 / 91 + 0.001)
    assert min(reference) - tolerance <= accuracy <= max(reference) + tolerance, (
        accuracy,
        reference,
    )


def test_the_tuners_workers_are_a_tfjob_and_the_trainer_uses_the_best_point(local_cluster):
    """--tune --tune_workers 2 --launcher tfjob: the Tuner's search runs as a TFJob of 3 worker
    pods (worker 0 KerasTuner's oracle chief, workers 1-2 the tuners dialing it by its host
    name), the trials finished in the Tuner's output on the shared folder, and the Trainer (in
    the run's process: a single-worker strategy) trains the best point. Small: 3 trials of 5
    steps, one epoch."""
    output_root = os.path.join(local_cluster.shared, "tune-tfjob")
    result = _run_local(
        "--tune",
        "--tune_workers",
        "2",
        "--max_trials",
        "3",
        "--tune_steps",
        "5",
        "--epochs",
        "1",
        "--launcher",
        "tfjob",
        "--kubeconfig",
        local_cluster.kubeconfig,
        "--output_root",
        output_root,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    assert (
        "2 tuner workers and an oracle chief (KerasTuner distributed), as the 3 workers of a "
        "tfjob job" in output
    )
    job = re.search(r"TFJob default/(tfx-tune-\w+) created", output)
    assert job, output[-4000:]
    assert re.search(rf"TFJob {job.group(1)}: Succeeded", output), output[-4000:]
    # The trials, finished, in the Tuner's TunerResults output (the pods wrote them there).
    states = []
    for path in glob.glob(
        os.path.join(output_root, "*", "pipeline_root", "Tuner", "tuner_results", "*", "search",
                     "**", "trial.json"),
        recursive=True,
    ):  # fmt: skip
        with open(path) as handle:
            states.append(json.load(handle)["status"])
    assert states == ["COMPLETED"] * 3, states
    tuning = subprocess.run(
        [sys.executable, "-m", "pipeline.mlmd", "--output_root", output_root, "tuning", "--json"],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=True,
    ).stdout  # fmt: skip
    tuned = json.loads(tuning)
    assert tuned["trials"] == 3 and tuned["launcher"] == "tfjob" and tuned["workers"] == 2
    width, depth = tuned["best"]["width"], tuned["best"]["depth"]
    units = [max(1, width >> i) for i in range(depth)]
    assert f"training with the Tuner's best point: hidden units {units}" in output
    assert tuned["trainer_settings"]["hidden_units"] == units
    assert re.search(r"tuning:\s+3 trial\(s\), 5 step\(s\) each, 2 workers \(a tfjob job\)", output)


def test_a_killed_worker_is_recreated_and_training_resumes_from_the_last_backup(local_cluster):
    """`kill -9` of a worker's training process (what an OOM kill or an eviction does) mid-run:
    the Training Operator recreates the pod (exit 137 is retryable under restartPolicy ExitCode),
    the surviving worker exits with the peer-lost code and is recreated too, both resume from
    BackupAndRestore's last backup, and the run finishes and pushes."""
    kube = local_cluster.kube()
    output_root = os.path.join(local_cluster.shared, "killed-worker")
    args = [
        "--strategy",
        "multi_worker_mirrored",
        "--workers",
        "2",
        "--epochs",
        "60",
        "--early_stopping_patience",
        "0",
        "--launcher",
        "tfjob",
        "--kubeconfig",
        local_cluster.kubeconfig,
        "--output_root",
        output_root,
    ]
    process = subprocess.Popen(
        [sys.executable, "pipeline/run_local.py", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    killed: list[int] = []
    try:
        deadline = time.monotonic() + 600
        while not killed and process.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
            job = re.search(r"TFJob default/(tfx-train-\w+) created", "".join(lines))
            if not job:
                continue
            pods = {pod["metadata"]["name"]: pod for pod in _job_pods(kube, job.group(1))}
            chief, victim = (pods.get(f"{job.group(1)}-worker-{i}") for i in (0, 1))
            if not chief or not victim or victim["status"].get("phase") != "Running":
                continue
            log = kube.kubectl("-n", "default", "logs", chief["metadata"]["name"], check=False)
            # Epoch lines come every 6 epochs; 12 done means backups exist past epoch 1.
            if re.search(r"epoch (1[2-9]|[2-5]\d)/60", log or ""):
                for pid in container_pids(victim):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
        assert killed, "".join(lines)[-4000:]
        process.wait(timeout=900)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        reader.join(timeout=10)
    output = "".join(lines)
    assert process.returncode == 0, output[-5000:]
    assert re.search(r"pod tfx-train-\w+-worker-1 was recreated by the operator", output), output
    resumed = re.findall(r"resumed from the last backup: training starts at epoch (\d+)/60", output)
    assert resumed and all(int(epoch) > 1 for epoch in resumed), output[-5000:]
    assert re.search(r"TFJob tfx-train-\w+: Succeeded", output), output[-5000:]
    assert "pushed model:" in output


def test_an_output_root_the_pods_cannot_see_is_refused_before_training(local_cluster, tmp_path):
    result = _run_local(
        "--strategy",
        "multi_worker_mirrored",
        "--workers",
        "2",
        "--launcher",
        "tfjob",
        "--kubeconfig",
        local_cluster.kubeconfig,
        "--output_root",
        str(tmp_path / "elsewhere"),
        timeout=120,
    )
    assert result.returncode != 0
    assert "is not on the volume the job's pods mount" in result.stderr + result.stdout
    assert f"use an --output_root under {local_cluster.shared}" in result.stderr + result.stdout
    assert not (tmp_path / "elsewhere").exists()


def _assert_gone(kube, job: str, timeout: float) -> None:
    """The TFJob and every pod of it are deleted within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (
        kube.kubectl("-n", "default", "get", "tfjob", job, check=False) or _job_pods(kube, job)
    ):
        time.sleep(1)
    assert not kube.kubectl("-n", "default", "get", "tfjob", job, check=False)
    assert _job_pods(kube, job) == []


def _job_pods(kube, job: str) -> list[dict]:
    return kube.get("-n", "default", "pods", "-l", f"training.kubeflow.org/job-name={job}")["items"]


def _launcher(
    local_cluster,
    command=None,
    image: str = "",
    delete_policy: str = "never",
    backoff_limit: int = 0,
):
    from components.training import tfjob
    from components.training.settings import TFJobConfig
    from pipeline.launcher_flags import LOCAL_WORKER

    settings = TFJobConfig(
        image=image or local_cluster.info["image"],
        worker=LOCAL_WORKER,
        pvc_name=local_cluster.info["pvc"],
        mount_path=local_cluster.shared,
        run_as_user=0,
        kubeconfig=local_cluster.kubeconfig,
        poll_seconds=1.0,
        backoff_limit=backoff_limit,
        delete_policy=delete_policy,
    )
    options = {"command": command} if command else {}
    return tfjob.TFJobLauncher(settings, **options)


def _task(local_cluster, name: str):
    from components.training.loop import TrainTask
    from components.training.settings import TrainingConfig

    run_dir = os.path.join(local_cluster.shared, "launcher", name)
    os.makedirs(run_dir, exist_ok=True)
    settings = TrainingConfig(strategy="multi_worker_mirrored", workers=2)
    return TrainTask(
        train_files=(),
        eval_files=(),
        transform_output="",
        model_run_dir=run_dir,
        serving_model_dir=os.path.join(run_dir, "serving"),
        label_key="species",
        settings=settings,
    )


def test_a_bad_image_fails_with_the_pods_reason(local_cluster):
    from components.training import cluster as training_cluster

    launcher = _launcher(local_cluster, image="localhost/tfx-scaleout-missing:never-built")
    with pytest.raises(training_cluster.ClusterError) as failure:
        launcher.run(
            training_cluster.ClusterSpec("multi_worker_mirrored", 2),
            _task(local_cluster, "bad-image"),
        )
    message = str(failure.value)
    assert re.search(r"pod tfx-train-\w+-worker-\d (ErrImagePull|ImagePullBackOff)", message), (
        message
    )
    assert "localhost/tfx-scaleout-missing:never-built" in message


def test_a_crashing_command_fails_with_its_exit_code_and_last_log_line(local_cluster):
    from components.training import cluster as training_cluster

    def crash(task_uri: str) -> list[str]:
        return [
            "python",
            "-c",
            "import sys; print('loading', flush=True); "
            "sys.exit('ValueError: no shards under /data')",
        ]

    # Restarts allowed: a code error (exit 1, restartPolicy ExitCode) still fails the job at once,
    # while a start that a loaded machine fails (runc's StartError, exit 128) is retried.
    launcher = _launcher(local_cluster, command=crash, backoff_limit=3)
    with pytest.raises(training_cluster.ClusterError) as failure:
        launcher.run(
            training_cluster.ClusterSpec("multi_worker_mirrored", 2), _task(local_cluster, "crash")
        )
    message = str(failure.value)
    assert re.search(r"pod tfx-train-\w+-worker-\d Error \(exit code 1\)", message), message
    assert "last output: ValueError: no shards under /data" in message


def test_a_failure_whose_pods_were_replaced_still_names_its_exit_code(local_cluster):
    """A retryable exit (137: killed) past a backoff limit of 0: the operator deletes and recreates
    the pods and fails the job, often before a poll sees the failed pod. The error still says
    which pod exited how (seen while waiting, or from the operator's ExitedWithCode events)."""
    from components.training import cluster as training_cluster

    def killed(task_uri: str) -> list[str]:
        return ["python", "-c", "import os; print('out of memory', flush=True); os._exit(137)"]

    launcher = _launcher(local_cluster, command=killed, backoff_limit=0)
    with pytest.raises(training_cluster.ClusterError) as failure:
        launcher.run(
            training_cluster.ClusterSpec("multi_worker_mirrored", 2), _task(local_cluster, "lost")
        )
    message = str(failure.value)
    assert "reached the specified backoff limit" in message, message
    assert re.search(
        r"pod tfx-train-\w+-worker-\d Error \(exit code 137\)"
        r"|ExitedWithCode: Pod: default\.tfx-train-\w+-worker-\d exited with code 137",
        message,
    ), message


def test_sigterm_of_the_trainer_deletes_the_job_and_its_pods(local_cluster, tmp_path):
    script = tmp_path / "trainer.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {ROOT!r})
            from tests.kubeflow import test_local_cluster as here
            from tests.kubeflow.conftest import LocalCluster
            import json
            info = json.loads({json.dumps(json.dumps(local_cluster.info))})
            cluster = LocalCluster({local_cluster.root!r}, info)
            launcher = here._launcher(cluster, command=lambda uri: ["sleep", "600"])
            from components.training import cluster as training_cluster
            spec = training_cluster.ClusterSpec("multi_worker_mirrored", 2)
            launcher.run(spec, here._task(cluster, "sigterm"))
            """
        )
    )
    trainer = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    kube = local_cluster.kube()
    deadline = time.monotonic() + 180
    job = ""
    while time.monotonic() < deadline and not job:
        jobs = kube.get("-n", "default", "tfjobs")["items"]
        running = [
            j["metadata"]["name"]
            for j in jobs
            if len(
                [
                    p
                    for p in _job_pods(kube, j["metadata"]["name"])
                    if p["status"].get("phase") == "Running"
                ]
            )
            == 2
        ]
        job = running[0] if running else ""
        time.sleep(1)
    assert job, trainer.stdout.read() if trainer.poll() is not None else "no running job"
    trainer.send_signal(signal.SIGTERM)
    output, _ = trainer.communicate(timeout=120)
    assert trainer.returncode != 0
    assert "the Trainer was cancelled (SIGTERM)" in output, output[-3000:]
    _assert_gone(kube, job, timeout=120)


def _compiled_trainer(tmp_path) -> tuple[dict, dict, list]:
    """A GPU Trainer compiled by `run_kubeflow.py compile` (sized to fit one small node): its
    resources (PipelineSpec), node selector and tolerations (PlatformSpec)."""
    from kubeflow import run_kubeflow
    from tests.kubeflow import variants

    output = tmp_path / "pipeline.yaml"
    argv = [
        "compile",
        f"--pipeline_root={variants.PIPELINE_ROOT}",
        f"--image={variants.IMAGE}",
        f"--gpu_image={variants.GPU_IMAGE}",
        f"--output={output}",
        "--node_selector=pool=gpu",
        "--gpus=1",
        "--trainer_cpu=0.2",
        "--trainer_memory_gb=0.5",
    ]
    assert run_kubeflow.main(argv) == 0
    pipeline_spec, platform_spec = list(yaml.safe_load_all(output.read_text()))
    resources = pipeline_spec["deploymentSpec"]["executors"]["Trainer_executor"]["container"][
        "resources"
    ]
    platform = platform_spec["platforms"]["kubernetes"]["deploymentSpec"]["executors"][
        "Trainer_executor"
    ]
    return resources, platform["nodeSelector"]["labels"], platform["tolerations"]


def test_gpu_pods_are_placed_as_the_compiled_file_says(local_cluster, tmp_path):
    """With the node advertising nvidia.com/gpu (patched capacity: no device plugin here),
    labelled and tainted like a GPU pool, a pod with the compiled GPU Trainer's requests, node
    selector and tolerations is scheduled on it; the same pod without the tolerations stays
    Pending with the scheduler's reason."""
    resources, selector, tolerations = _compiled_trainer(tmp_path)
    gpu = resources["accelerator"]
    assert gpu["type"] == "nvidia.com/gpu" and selector == {"pool": "gpu"} and tolerations
    requests = {
        "cpu": str(resources["cpuRequest"]),
        "memory": f"{resources['memoryRequest']}G",
        gpu["type"]: str(gpu["count"]),
    }
    kube = local_cluster.kube()
    capacity = {gpu["type"]: str(gpu["count"])}
    kube.kubectl(
        "patch",
        "node",
        node.NODE_NAME,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"capacity": capacity, "allocatable": capacity}}),
    )
    taint = tolerations[0]
    taint_text = f"{taint['key']}=present:{taint['effect']}"
    kube.kubectl("label", "node", node.NODE_NAME, "pool=gpu", "--overwrite")
    kube.kubectl("taint", "node", node.NODE_NAME, taint_text, "--overwrite")

    def pod(pod_name: str, tolerated: bool) -> dict:
        spec: dict = {
            "nodeSelector": selector,
            "containers": [
                {
                    "name": "main",
                    "image": local_cluster.info["image"],
                    "command": ["sleep", "600"],
                    "resources": {"requests": requests, "limits": requests},
                }
            ],
        }
        if tolerated:
            spec["tolerations"] = tolerations
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": "default"},
            "spec": spec,
        }

    try:
        kube.apply(yaml.safe_dump_all([pod("gpu-tolerated", True), pod("gpu-untolerated", False)]))
        deadline = time.monotonic() + 60
        placed: dict = {}
        conditions: dict = {}
        while time.monotonic() < deadline:
            placed = kube.get("-n", "default", "pod", "gpu-tolerated")
            pending = kube.get("-n", "default", "pod", "gpu-untolerated")
            conditions = {c["type"]: c for c in pending["status"].get("conditions", [])}
            if placed["spec"].get("nodeName") and "PodScheduled" in conditions:
                break
            time.sleep(0.5)
        assert placed["spec"].get("nodeName") == node.NODE_NAME, placed["status"]
        assert conditions["PodScheduled"]["reason"] == "Unschedulable", conditions
        assert "untolerated taint" in conditions["PodScheduled"]["message"], conditions
    finally:
        kube.kubectl(
            "-n",
            "default",
            "delete",
            "pod",
            "gpu-tolerated",
            "gpu-untolerated",
            "--wait=false",
            check=False,
        )
        kube.kubectl(
            "taint", "node", node.NODE_NAME, f"{taint['key']}:{taint['effect']}-", check=False
        )
        kube.kubectl("label", "node", node.NODE_NAME, "pool-", check=False)
