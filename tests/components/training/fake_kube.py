"""A fake Kubernetes API server on a loopback port, for what the local cluster cannot show: a
cluster without an operator's CRDs, and a Trainer pod that cannot be read.

It serves, over HTTP, to the real kubernetes client: custom objects (create, get, patch, delete;
namespaced and cluster-scoped) of the kinds in `plurals`, and the Trainer's pod by name. It
writes no job or pod status: jobs that run are tested on the local cluster, where the operators
and the kubelet write it (tests/kubeflow/test_local_cluster*.py). Every request is recorded
(method, path, verb, resource).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_CUSTOM = re.compile(
    r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)(?:/namespaces/(?P<namespace>[^/]+))?"
    r"/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?$"
)
_CORE = re.compile(r"^/api/v1/namespaces/(?P<namespace>[^/]+)/pods/(?P<name>[^/]+)$")


@dataclasses.dataclass
class Request:
    method: str
    path: str
    query: dict
    body: object
    # As RBAC sees it: (API group, resource, verb).
    group: str = ""
    resource: str = ""
    verb: str = ""


class FakeKube:
    def __init__(
        self, plurals=("tfjobs", "trainjobs", "trainingruntimes", "clustertrainingruntimes")
    ):
        self.plurals = set(plurals)
        self.objects: dict[tuple[str, str, str], dict] = {}  # (plural, namespace, name) -> object
        self.owner_pods: dict[tuple[str, str], dict] = {}
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def calls(self, verb: str, resource: str) -> list[Request]:
        return [r for r in self.requests if (r.verb, r.resource) == (verb, resource)]

    def clients(self):
        """(CustomObjectsApi, CoreV1Api) of the real kubernetes client, talking to this fake."""
        from kubernetes import client as k8s

        configuration = k8s.Configuration(host=self.url)
        configuration.retries = 0
        api = k8s.ApiClient(configuration)
        return k8s.CustomObjectsApi(api), k8s.CoreV1Api(api)

    # --- server -------------------------------------------------------------------------------

    def start(self) -> FakeKube:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _handle(self):
                fake._dispatch(self)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _handle

        # Loopback only: nothing outside this machine can reach it.
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _dispatch(self, handler: BaseHTTPRequestHandler) -> None:
        parsed = urllib.parse.urlsplit(handler.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(parsed.query).items()}
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        request = Request(handler.command, parsed.path, query, body)
        with self._lock:
            self.requests.append(request)
            status, payload = self._route(request)
        data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        handler.send_response(status)
        content_type = "text/plain" if isinstance(payload, str) else "application/json"
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _route(self, request: Request):
        custom = _CUSTOM.match(request.path)
        if custom and request.path.startswith("/apis/"):
            return self._custom(request, **custom.groupdict())
        core = _CORE.match(request.path)
        if core:
            return self._core(request, **core.groupdict())
        return 404, _status(404, f"no route {request.path}")

    def _custom(self, request, group, version, namespace, plural, name):
        verbs = {"POST": "create", "GET": "get", "PATCH": "patch", "DELETE": "delete"}
        request.group, request.resource = group, plural
        request.verb = verbs[request.method] if name or request.method == "POST" else "list"
        if plural not in self.plurals:
            return 404, _status(404, f"the server could not find the requested resource ({plural})")
        key = (plural, namespace or "", name or "")
        if request.method == "POST":
            obj = copy.deepcopy(request.body)
            key = (plural, namespace or "", obj["metadata"]["name"])
            if key in self.objects:
                return 409, _status(409, f"{plural} {key[2]} already exists", "AlreadyExists")
            obj["metadata"].setdefault("uid", f"uid-{key[2]}")
            self.objects[key] = obj
            return 201, obj
        if key not in self.objects:
            return 404, _status(404, f"{plural} {name} not found", "NotFound")
        obj = self.objects[key]
        if request.method == "GET":
            return 200, obj
        if request.method == "PATCH":
            for field, value in (request.body.get("metadata") or {}).items():
                obj["metadata"][field] = value
            return 200, obj
        if request.method == "DELETE":
            del self.objects[key]
            return 200, _status(200, "deleted", "Success")
        return 405, _status(405, "method not allowed")

    def _core(self, request, namespace, name):
        request.group, request.resource, request.verb = "", "pods", "get"
        pod = self.owner_pods.get((namespace, name))
        if pod is None:
            return 404, _status(404, f'pods "{name}" not found', "NotFound")
        return 200, pod


def _status(code: int, message: str, reason: str = "") -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure" if code >= 400 else "Success",
        "message": message,
        "reason": reason,
        "code": code,
    }


def owner_pod(namespace: str, name: str, uid: str, service_account: str) -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"serviceAccountName": service_account, "containers": [{"name": "main"}]},
    }
