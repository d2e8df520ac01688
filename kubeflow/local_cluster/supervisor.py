"""The process that holds the local cluster's node: started by `up` inside the cluster's network
namespace and a mount namespace of its own (`unshare --mount --propagation private nsenter
--net=...`), in its own session, so that it outlives `up`. It moves itself into the cluster's
cgroup (CGROUP_ROOT/system), then starts the daemons of the plan one after another, each only
once the one before answers its health check, and logs one line per step to its log (which `up`
follows):

    starting NAME | ready NAME 1.2s | failed NAME: WHY (log PATH) ... | running | stopped

`up --kfp` starts a second one the same way (plan kfp-plan.json, cgroup CGROUP_ROOT/kfp) for
the host processes of Kubeflow Pipelines (MariaDB, the S3 server, the MLMD server).

It ends the cluster on SIGTERM (what `down` sends): kube-proxy and the kubelet first, then every
container process (the kubepods cgroup), containerd and its shims, the control plane, etcd.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

from kubeflow.local_cluster import host, node


def _log(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)


def _probe(ready: dict) -> bool:
    if "tcp" in ready:  # "HOST:PORT" accepts a connection (a gRPC server's port)
        import socket

        address, port = ready["tcp"].rsplit(":", 1)
        with contextlib.suppress(OSError), socket.create_connection((address, int(port)), 2):
            return True
        return False
    if "cri" in ready:  # the CRI answers (containerd's socket takes calls before it does)
        return _cri_ready(ready["cri"])
    if "socket" in ready:
        import socket

        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as probe:
            probe.connect(ready["socket"])
            return True
        return False
    if ready.get("ca"):
        context = ssl.create_default_context(cafile=ready["ca"])
    else:
        context = ssl._create_unverified_context()  # a daemon's own self-signed health port
    headers = {"Authorization": f"Bearer {ready['token']}"} if ready.get("token") else {}
    request = urllib.request.Request(ready["http"], headers=headers)
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _cri_ready(socket_path: str) -> bool:
    """CRI's RuntimeService/Version succeeds: until containerd's CRI plugin has initialized it
    answers "server is not initialized yet", and a kubelet started then exits ("validate CRI v1
    runtime API")."""
    import grpc

    with grpc.insecure_channel(f"unix://{socket_path}") as channel:
        version = channel.unary_unary(
            "/runtime.v1.RuntimeService/Version",
            request_serializer=lambda request: request,
            response_deserializer=lambda response: response,
        )
        try:
            version(b"", timeout=5)  # an empty VersionRequest
        except grpc.RpcError:
            return False
    return True


def _tail(path: str, lines: int = 15) -> str:
    with contextlib.suppress(OSError), open(path, errors="replace") as handle:
        return "\n".join(handle.read().splitlines()[-lines:])
    return ""


class Supervisor:
    def __init__(self, run_dir: str, plan: str = "plan.json"):
        with open(os.path.join(run_dir, plan)) as handle:
            self.plan = json.load(handle)
        self.cgroup = self.plan.get("cgroup", "system")
        self.logs = self.plan["logs"]
        self.processes: dict[str, subprocess.Popen] = {}
        self.stopping = False

    def _stop_signal(self, *_) -> None:
        self.stopping = True

    def start(self, daemon: dict) -> bool:
        name = daemon["name"]
        _log(f"starting {name}")
        log_path = os.path.join(self.logs, f"{name}.log")
        with open(log_path, "ab") as log:
            self.processes[name] = subprocess.Popen(
                daemon["argv"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(os.environ, **daemon.get("env", {})),
                preexec_fn=host.die_with_parent,
            )
        started = time.monotonic()
        deadline = started + daemon["timeout"]
        while time.monotonic() < deadline and not self.stopping:
            process = self.processes[name]
            if process.poll() is not None:
                _log(f"failed {name}: exited with {process.returncode} (log {log_path})")
                print(_tail(log_path), flush=True)
                return False
            if _probe(daemon["ready"]):
                _log(f"ready {name} {time.monotonic() - started:.1f}s")
                return True
            time.sleep(0.2)
        if not self.stopping:
            _log(f"failed {name}: not healthy after {daemon['timeout']:.0f}s (log {log_path})")
            print(_tail(log_path), flush=True)
        return False

    def stop(self) -> None:
        _log("stopping")
        if "kubelet" in self.processes:  # the node's: its pods and containerd first
            for name in ("kube-proxy", "kubelet"):
                self._terminate(name)
            host.kill_all(lambda: host.cgroup_pids(f"{node.CGROUP_ROOT}/kubepods"), timeout=15)
            self._terminate("containerd")
        # The shims (containerd started them in this cgroup): everything but this process and
        # the control plane still running.
        control = {p.pid for p in self.processes.values() if p.poll() is None}
        host.kill_all(
            lambda: host.cgroup_pids(f"{node.CGROUP_ROOT}/{self.cgroup}"),
            exclude=control,
            timeout=10,
        )
        for name in reversed(list(self.processes)):
            self._terminate(name)
        _log("stopped")

    def _terminate(self, name: str) -> None:
        process = self.processes.get(name)
        if process is not None:
            host.stop_process(process, grace=15)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._stop_signal)
        signal.signal(signal.SIGINT, self._stop_signal)
        host.join_cgroup(f"{node.CGROUP_ROOT}/{self.cgroup}", os.getpid())
        with open(self.plan["pidfile"], "w") as handle:
            handle.write(str(os.getpid()))
        for folder in self.plan["private_dirs"]:
            mounted = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "mode=0755", "tfx-scaleout", folder],
                capture_output=True,
                text=True,
            )
            if mounted.returncode != 0:
                _log(f"failed mounting a private tmpfs on {folder}: {mounted.stderr.strip()}")
                return 1
        for daemon in self.plan["daemons"]:
            if not self.start(daemon):
                self.stop()
                return 1
        _log("running")
        reported: set[str] = set()
        while not self.stopping:
            for name, process in self.processes.items():
                if process.poll() is not None and name not in reported:
                    reported.add(name)
                    _log(f"exited {name} with {process.returncode} (log {self.logs}/{name}.log)")
            time.sleep(0.5)
        self.stop()
        return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return Supervisor(*argv[:2]).run()


if __name__ == "__main__":
    sys.exit(main())
