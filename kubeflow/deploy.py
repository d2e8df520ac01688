"""Upload a compiled pipeline to Kubeflow Pipelines (a new version when it exists), start a run,
follow it to the end. kfp.Client (KFP REST API v2beta1) does the talking.

Credentials come from the environment, never from pipeline parameters (those are stored in
MLMD): KF_PIPELINES_TOKEN (a bearer token, e.g. `kubectl create token` or an OIDC token), else
what kfp.Client finds itself (the in-cluster service account token, KF_PIPELINES_* variables).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging as std_logging
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from components import PROGRESS_LOGGER, ConfigError

log = std_logging.getLogger("tfx_scaleout.deploy")
progress_log = std_logging.getLogger(PROGRESS_LOGGER)

TOKEN_ENV = "KF_PIPELINES_TOKEN"
ENDPOINT_ENV = "KF_PIPELINES_ENDPOINT"
FINAL_STATES = ("SUCCEEDED", "FAILED", "SKIPPED", "CANCELED", "CANCELING")
# KFP 2.14.3 serves the run's Argo Workflow (its nodes: each task's driver pod, the executor DAG
# node and its `executor` pod) only through the v1beta1 GetRun (backend/api/v1beta1/run.proto:75,
# pipeline_runtime.workflow_manifest, server/api_converter.go:1568), and a pod's log through
# `/apis/v1alpha1/runs/{run_id}/nodes/{pod name}/log` (apiserver/main.go:325: the pod's `main`
# container, resource/resource_manager.go:988-1010), not through v2beta1.
RUN_V1_PATH = "/apis/v1beta1/runs/{run_id}"
EXECUTOR_NODE = "executor"  # argocompiler/container.go:373
NODE_LOG_PATH = "/apis/v1alpha1/runs/{run_id}/nodes/{pod}/log"
LOG_TAIL_LINES = 300  # of a failed pod's log read from Kubernetes
# Argo v3.6.7 workflow/util/pod_name.go:12-15: pod names are cut to 253 - 10 - 1 before the hash.
POD_NAME_PREFIX_MAX = 253 - 10 - 1
POD_NAME_VERSION_ANNOTATION = "workflows.argoproj.io/pod-name-format"
# The error line of a task's log: a Python exception's last line, else a glog E/F line (the
# launcher's and driver's own errors, "F1204 18:01:02.123456 1 main.go:52] failed to ...").
PYTHON_ERROR = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit)(?::\s.*)?$")
GLOG_ERROR = re.compile(r"^[EF]\d{4} [\d:.]+\s+\d+ [^\]]+\] (.*)$")


class DeployError(RuntimeError):
    """The endpoint is unreachable, rejected a request, or the run did not succeed."""


@dataclasses.dataclass(frozen=True)
class Connection:
    client: Any  # kfp.Client (kfp is read as untyped)
    endpoint: str
    token: str | None = None
    # For failed tasks' logs when the API server cannot read them (with_error_lines).
    kubeconfig: str | None = None


@dataclasses.dataclass(frozen=True)
class Deployment:
    pipeline_id: str
    version_id: str
    run_id: str | None = None
    state: str | None = None


@dataclasses.dataclass(frozen=True)
class Package:
    name: str  # the pipeline name to upload under
    # The file's defaultPipelineRoot. KFP's backend never reads it (kubeflow/pipelines 2.14.3:
    # the run's root is its runtime_config.pipeline_root, apiserver/template/template.go:169,
    # else the kfp-launcher ConfigMap's defaultPipelineRoot, else minio://mlpipeline/v2/artifacts,
    # driver/root_dag.go:93-100), so every run this tool starts sends it.
    pipeline_root: str | None


def check_package(package_path: str, pipeline_name: str | None) -> Package:
    """The pipeline name to upload under and the root the file was compiled for, once the file
    is known to be a compiled pipeline the open-source backend runs and, with --pipeline_name,
    one compiled for that pipeline (a version of another pipeline would mix two pipelines' runs
    and KFP cache, which is scoped by pipeline name). Raises ConfigError naming the flag;
    nothing is uploaded then."""
    import yaml

    try:
        with open(package_path) as handle:
            documents = list(yaml.safe_load_all(handle))
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"invalid --package {package_path}: {error}") from None
    spec = documents[0] if documents and isinstance(documents[0], dict) else {}
    compiled_name = (spec.get("pipelineInfo") or {}).get("name")
    if not compiled_name or "deploymentSpec" not in spec or "root" not in spec:
        raise ConfigError(
            f"invalid --package {package_path}: not a compiled KFP pipeline file (no "
            "pipelineInfo.name, root and deploymentSpec); run `compile` first"
        )
    executors = (spec.get("deploymentSpec") or {}).get("executors") or {}
    unsupported = sorted(
        label
        for label, executor in executors.items()
        if "container" not in executor and "importer" not in executor
    )
    if unsupported:
        raise ConfigError(
            f"invalid --package {package_path}: executor(s) {unsupported} are neither containers "
            "nor importers (resolvers, say), which open-source Kubeflow Pipelines refuses; "
            "recompile it with this version of `compile`"
        )
    if pipeline_name and pipeline_name != compiled_name:
        raise ConfigError(
            f"invalid --pipeline_name {pipeline_name!r}: --package {package_path} was compiled "
            f"for pipeline {compiled_name!r}; compile it with --pipeline_name {pipeline_name} "
            "or leave --pipeline_name out"
        )
    return Package(compiled_name, spec.get("defaultPipelineRoot"))


def api_error(action: str, endpoint: str, error: Exception) -> DeployError:
    """One line: what failed, where, and the server's own message."""
    import kfp_server_api

    if isinstance(error, kfp_server_api.ApiException):
        body = (error.body or "").strip() if isinstance(error.body, str) else error.body
        return DeployError(
            f"{action} at {endpoint} was rejected: HTTP {error.status} {error.reason}"
            + (f": {body}" if body else "")
        )
    return DeployError(
        f"{action}: Kubeflow Pipelines endpoint {endpoint} is unreachable "
        f"({type(error).__name__}: {error}); check --endpoint / {ENDPOINT_ENV} "
        "(e.g. kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80)"
    )


def network_errors() -> tuple[type[Exception], ...]:
    import kfp_server_api
    import urllib3

    return (kfp_server_api.ApiException, urllib3.exceptions.HTTPError, OSError)


def connect(
    endpoint: str | None,
    namespace: str | None = None,
    environ=os.environ,
    kubeconfig: str | None = None,
) -> Connection:
    """A kfp.Client for the endpoint, with the token from the environment when there is one;
    the kubeconfig (the flag, else $KUBECONFIG) is kept for failed tasks' logs."""
    import kfp

    kubeconfig = kubeconfig or environ.get("KUBECONFIG") or None
    if kubeconfig and not os.path.isfile(kubeconfig.split(os.pathsep)[0]):
        raise DeployError(f"--kubeconfig {kubeconfig}: no such file")

    endpoint = endpoint or environ.get(ENDPOINT_ENV)
    if not endpoint:
        raise DeployError(f"no Kubeflow Pipelines endpoint: pass --endpoint or set {ENDPOINT_ENV}")
    token = environ.get(TOKEN_ENV) or None
    try:
        client = kfp.Client(host=endpoint, existing_token=token, namespace=namespace or "kubeflow")
        client.get_kfp_healthz(sleep_duration=1)
    except network_errors() as error:
        raise api_error("connecting", endpoint, error) from error
    except TimeoutError as error:
        raise DeployError(
            f"Kubeflow Pipelines endpoint {endpoint} is not healthy: {error}"
        ) from error
    return Connection(client=client, endpoint=endpoint, token=token, kubeconfig=kubeconfig)


def upload(
    connection: Connection, package_path: str, pipeline_name: str, version_name: str
) -> Deployment:
    """Uploads the pipeline, or a new version of it when a pipeline of that name exists."""
    client, endpoint = connection.client, connection.endpoint
    try:
        pipeline_id = client.get_pipeline_id(pipeline_name)
        if pipeline_id is None:
            pipeline = client.upload_pipeline(package_path, pipeline_name=pipeline_name)
            pipeline_id = pipeline.pipeline_id
            versions = client.list_pipeline_versions(
                pipeline_id, page_size=1, sort_by="created_at desc"
            )
            version_id = versions.pipeline_versions[0].pipeline_version_id
            progress_log.info("uploaded pipeline %s (%s)", pipeline_name, pipeline_id)
        else:
            version = client.upload_pipeline_version(
                package_path, pipeline_version_name=version_name, pipeline_id=pipeline_id
            )
            version_id = version.pipeline_version_id
            progress_log.info(
                "uploaded version %s of pipeline %s (%s)", version_name, pipeline_name, version_id
            )
    except network_errors() as error:
        raise api_error(f"uploading {package_path}", endpoint, error) from error
    return Deployment(pipeline_id=pipeline_id, version_id=version_id)


def start_run(
    connection: Connection,
    deployment: Deployment,
    experiment: str,
    run_name: str,
    parameters: dict | None = None,
    pipeline_root: str | None = None,
    uncached_package: str | None = None,
) -> Deployment:
    """Starts a run of the uploaded version; with `uncached_package` (the same file), a run of
    that file's spec with every task's cache off instead: KFP 2.14's v2beta1 run has no cache
    switch of its own, so kfp.Client rewrites the spec (enable_caching=False), and such a run
    names no pipeline version."""
    client, endpoint = connection.client, connection.endpoint
    source = (
        {"pipeline_package_path": uncached_package, "enable_caching": False}
        if uncached_package
        else {"pipeline_id": deployment.pipeline_id, "version_id": deployment.version_id}
    )
    try:
        experiment_id = client.create_experiment(experiment).experiment_id
        run = client.run_pipeline(
            experiment_id=experiment_id,
            job_name=run_name,
            params=parameters or {},
            pipeline_root=pipeline_root,
            **source,
        )
    except network_errors() as error:
        raise api_error(f"starting run {run_name}", endpoint, error) from error
    progress_log.info("run %s started (%s) in experiment %s", run_name, run.run_id, experiment)
    return dataclasses.replace(deployment, run_id=run.run_id)


@dataclasses.dataclass(frozen=True)
class TaskOutcome:
    """One task of a finished run, from its Argo Workflow: `cached` (KFP's driver found a cache
    entry and the executor pod was skipped), `ran` (the executor pod ran and succeeded), `failed`
    (the driver or executor pod failed: Argo's message, the pod whose log says why), or the
    executor node's phase in lower case (e.g. `running`, `not started`)."""

    name: str
    state: str
    message: str = ""
    pod: str | None = None
    error: str | None = None  # the error line of the pod's log


def _get(connection: Connection, path: str) -> bytes | None:
    """One GET on the API server, None when it cannot answer it (404, a server without that
    route, a network error): what it feeds is detail on top of the run's state."""
    request = urllib.request.Request(connection.endpoint.rstrip("/") + path)
    if connection.token:
        request.add_header("Authorization", f"Bearer {connection.token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read()
    except (urllib.error.URLError, OSError, ValueError) as error:
        log.info("GET %s: %s", path, error)
        return None


def run_workflow(connection: Connection, run_id: str) -> dict | None:
    """The run's Argo Workflow as the API server stored it (v1beta1 GetRun's
    pipeline_runtime.workflow_manifest), None when the server does not serve it."""
    body = _get(connection, RUN_V1_PATH.format(run_id=urllib.parse.quote(run_id)))
    try:
        manifest = json.loads(body or b"{}").get("pipeline_runtime", {}).get("workflow_manifest")
        return json.loads(manifest) if manifest else None
    except (ValueError, AttributeError):
        return None


def pod_name(workflow: dict, node: dict) -> str:
    """The pod of a Pod node, named as Argo v3.6.7 names it (workflow/util/pod_name.go:50-69:
    v2 names `<workflow>-<template>-<fnv32a(node name)>`, v1 the node id)."""
    metadata = workflow.get("metadata") or {}
    workflow_name = metadata.get("name", "")
    if (metadata.get("annotations") or {}).get(POD_NAME_VERSION_ANNOTATION) == "v1":
        return node["id"]
    if node.get("name") == workflow_name:
        return workflow_name
    template = node.get("templateName") or (node.get("templateRef") or {}).get("template", "")
    prefix = f"{workflow_name}-{template}" if template else workflow_name
    prefix = prefix[:POD_NAME_PREFIX_MAX]
    digest = 0x811C9DC5  # FNV-1a, 32 bits (Go's hash/fnv New32a)
    for byte in node.get("name", "").encode():
        digest = ((digest ^ byte) * 0x01000193) & 0xFFFFFFFF
    return f"{prefix}-{digest}"


def task_outcomes(workflow: dict) -> list[TaskOutcome]:
    """Each task of the run in start order. KFP 2.14.3 compiles a container task into a driver
    pod `<task>-driver` and a DAG node `<task>` (template system-container-executor) whose one
    child `executor` is the pod, run only `when` the driver's cached-decision is not true
    (backend/src/v2/compiler/argocompiler/container.go:321-390): a Skipped `executor` is a cache
    hit."""
    nodes = (workflow.get("status") or {}).get("nodes") or {}
    outcomes: list[tuple[str, TaskOutcome]] = []

    def failed_pod(node: dict) -> dict | None:
        """The failed Pod node at or under `node` (a retried executor has a Retry node)."""
        if node.get("type") == "Pod":
            return node if node.get("phase") in ("Failed", "Error") else None
        for child in node.get("children") or []:
            found = failed_pod(nodes.get(child) or {})
            if found:
                return found
        return None

    for node in nodes.values():
        name = node.get("displayName") or ""
        children = [nodes.get(c) or {} for c in node.get("children") or []]
        executor = next((c for c in children if c.get("displayName") == EXECUTOR_NODE), None)
        started = node.get("startedAt") or ""
        if executor is not None:
            phase = executor.get("phase") or ""
            failed = failed_pod(executor)
            if failed is not None:
                outcome = TaskOutcome(
                    name,
                    "failed",
                    failed.get("message") or phase,
                    pod_name(workflow, failed),
                )
            elif phase == "Skipped":
                outcome = TaskOutcome(name, "cached")
            elif phase == "Succeeded":
                outcome = TaskOutcome(name, "ran")
            else:
                outcome = TaskOutcome(name, (phase or "not started").lower())
            outcomes.append((started, outcome))
        elif (
            name.endswith("-driver")
            and node.get("type") == "Pod"
            and node.get("phase") in ("Failed", "Error")
        ):
            task = name[: -len("-driver")]
            message = f"driver: {node.get('message') or node.get('phase')}"
            outcomes.append(
                (started, TaskOutcome(task, "failed", message, pod_name(workflow, node)))
            )
    return [outcome for _, outcome in sorted(outcomes, key=lambda pair: pair[0])]


def error_line(log_text: str, detail_lines: int = 5) -> str | None:
    """What a task's log says about why it failed: the last Python exception line (the
    executor's own error) with the indented lines that continue its message (ExampleGen lists
    the rejected rows, file:line: reason, under it), else the last error line of KFP's launcher
    or driver (glog E/F)."""
    lines = [line.rstrip() for line in log_text.splitlines() if line.strip()]
    for index in range(len(lines) - 1, -1, -1):
        if PYTHON_ERROR.match(lines[index]):
            more: list[str] = []
            for line in lines[index + 1 :]:
                if not line[:1].isspace() or len(more) == detail_lines:
                    break
                more.append(line.strip())
            return "; ".join([lines[index], *more])
    for line in reversed(lines):
        match = GLOG_ERROR.match(line.strip())
        if match:
            return match.group(1)
    return None


def with_error_lines(
    connection: Connection, run_id: str, outcomes: list[TaskOutcome], namespace: str = ""
) -> list[TaskOutcome]:
    """Failed tasks with the error line of their pod's `main` log: through the API server's node
    log endpoint first, then, when that gives none and a kubeconfig is at hand, from Kubernetes.
    KFP 2.14.3 in single-user mode reads the pod at cluster scope (resource_manager.go:964-999:
    the namespace comes from the run's experiment, "" in single-user mode, :1913-1933) and its
    API server's Role is namespaced (manifests base/pipeline/ml-pipeline-apiserver-role.yaml), so
    there the endpoint answers 200 with an empty body (its own log: `forbidden ... at the cluster
    scope`); its fallback, Argo's log archive, holds nothing in an install without one."""
    done = []
    for outcome in outcomes:
        if outcome.state == "failed" and outcome.pod:
            path = NODE_LOG_PATH.format(
                run_id=urllib.parse.quote(run_id), pod=urllib.parse.quote(outcome.pod)
            )
            text = (_get(connection, path) or b"").decode(errors="replace")
            line = error_line(text)
            if line is None:
                # The endpoint answers 200, then an error as JSON or nothing (run_log_server.go:
                # ReadRunLogV1 writes the header before reading the pod): say why.
                why = f"the API server: {_log_error(text) or 'empty'}"
                if connection.kubeconfig and namespace:
                    pod_log, problem = _kubernetes_pod_log(
                        connection.kubeconfig, namespace, outcome.pod
                    )
                    line = error_line(pod_log)
                    if line is None:
                        why += f"; Kubernetes: {problem or 'no error line in the log'}"
                elif not connection.kubeconfig:
                    why += "; pass --kubeconfig (or set KUBECONFIG) to read it from Kubernetes"
                if line is None:
                    line = f"no error line in its log ({why})"
            outcome = dataclasses.replace(outcome, error=line)
        done.append(outcome)
    return done


def _kubernetes_pod_log(kubeconfig: str, namespace: str, pod: str) -> tuple[str, str | None]:
    """(the last lines of the pod's `main` container log, why there is none)."""
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    try:
        api = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
        text = api.read_namespaced_pod_log(
            pod, namespace, container="main", tail_lines=LOG_TAIL_LINES
        )
        return text or "", None
    except ApiException as error:
        return "", f"{error.status} {error.reason} reading pod {namespace}/{pod}"
    except (OSError, ValueError, config.ConfigException) as error:
        return "", f"{type(error).__name__}: {error}"


def _log_error(text: str) -> str | None:
    """The API server's error in a node log response, or the log's last line."""
    start = text.find('{"error_message"')
    if start >= 0:
        try:
            return str(json.loads(text[start:]).get("error_message"))
        except ValueError:
            pass
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f"last line: {lines[-1][:300]}" if lines else None


def describe_outcomes(outcomes: list[TaskOutcome]) -> list[str]:
    """`tasks: 9 cached, 1 ran`, then one line per task."""
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.state] = counts.get(outcome.state, 0) + 1
    lines = ["tasks: " + ", ".join(f"{n} {state}" for state, n in counts.items())]
    for outcome in outcomes:
        detail = ""
        if outcome.state == "failed":
            detail = f": {outcome.error}" if outcome.error else ""
            detail += f" ({outcome.message})" if outcome.message else ""
        lines.append(f"  {outcome.name}: {outcome.state}{detail}")
    return lines


def wait(
    connection: Connection,
    run_id: str,
    timeout_seconds: float = 0,
    poll_seconds: float = 15,
    sleep=time.sleep,
    clock=time.monotonic,
) -> str:
    """Follows a run to its end, one progress line per change (run state, each task's state),
    then each task's outcome (cached, ran, failed with its error line) when the server serves
    the run's Workflow; returns SUCCEEDED or raises DeployError naming the failed tasks and
    why."""
    client, endpoint = connection.client, connection.endpoint
    started = clock()
    reported: dict[str, str] = {}
    while True:
        try:
            run = client.get_run(run_id)
        except network_errors() as error:
            raise api_error(f"following run {run_id}", endpoint, error) from error
        state = (run.state or "PENDING").upper()
        if reported.get("") != state:
            progress_log.info("run %s: %s", run_id, state)
            reported[""] = state
        tasks = (run.run_details.task_details if run.run_details else None) or []
        for task in tasks:
            name, task_state = task.display_name or task.task_id, (task.state or "").upper()
            if name == EXECUTOR_NODE:
                # KFP 2.14.3's pod under each task's DAG node: every task's is named so; the
                # task's own line (and its outcome at the end) says the same.
                continue
            if name and task_state and reported.get(name) != task_state:
                progress_log.info("  %s: %s", name, task_state)
                reported[name] = task_state
        if state in FINAL_STATES:
            workflow = run_workflow(connection, run_id)
            outcomes = task_outcomes(workflow) if workflow else []
            if state != "SUCCEEDED":
                namespace = ((workflow or {}).get("metadata") or {}).get("namespace", "")
                outcomes = with_error_lines(connection, run_id, outcomes, namespace)
            for line in describe_outcomes(outcomes) if outcomes else []:
                progress_log.info("%s", line)
            if state == "SUCCEEDED":
                return state
            failed = [
                f"{o.name}: {o.error or o.message}"
                + (f" ({o.message})" if o.error and o.message else "")
                for o in outcomes
                if o.state == "failed"
            ] or [
                f"{task.display_name}: {task.error.message}" if task.error else task.display_name
                for task in tasks
                if (task.state or "").upper() == "FAILED"
            ]
            detail = f"; failed: {'; '.join(failed)}" if failed else ""
            message = f" ({run.error.message})" if run.error and run.error.message else ""
            raise DeployError(f"run {run_id} ended {state}{message}{detail}")
        if timeout_seconds and clock() - started > timeout_seconds:
            raise DeployError(f"run {run_id} still {state} after {timeout_seconds:g}s")
        sleep(poll_seconds)


def default_version_name(now: datetime.datetime | None = None) -> str:
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("v%Y%m%d-%H%M%S")
