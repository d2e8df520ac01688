"""A Kubeflow Pipelines IR runner for tests: executes a compiled pipeline file on this machine the
way open-source KFP's driver and launcher do (kubeflow/pipelines backend/src/v2, read at commit
7b70c7b95f6832772efd6fd0029a4024491a0f44; no code copied).

What it does as KFP does:
  - refuses the whole file before anything runs when an executor is neither a container nor an
    importer (the Argo compiler: "resolver not implemented yet"), or the pipeline root is not an
    object store the launcher opens (gs://, s3://, minio://, mem://);
  - runs the root DAG's tasks in dependency order; each task's ExecutorInput has its parameter
    values (constants, pipeline parameters with their defaults, upstream output parameters), its
    input artifacts as the driver sends them (name = the recorded artifact's id, type
    `{"instanceSchema": ""}`, URI, and the metadata its producer wrote as MLMD gives it back,
    with the launcher's display_name and store_session_info), output artifacts under
    <root>/<pipeline>/<run>/<task>/<salt>/<output> plus the driver's `executor-logs` output
    (which gets the task's log), output parameter files and the executor output file;
  - the cache key (driver/cache.go, cacheutils/cache.go): input artifact names, input parameter
    values, output artifact specs without URIs, output parameter types, the container's image
    and unresolved command + args, PVC names; sha256 of its JSON; looked up per pipeline name
    among successful executions of tasks whose cachingOptions.enableCache is set; a hit reuses
    that execution's output artifacts and parameters and runs nothing;
  - the container's command and args with `{{$}}` and the `{{$.inputs...}}` /
    `{{$.outputs...}}` placeholders substituted (launcher compileCmdAndArgs), run as a
    subprocess; the ExecutorOutput file read back (output parameters from it or from their
    files; artifact metadata merged).

What stands in for the cluster: object-store URIs are mapped to local folders (`stores`), and
absolute paths inside the image to this checkout (`image_paths`); both are applied to the
ExecutorInput only, never to the cache key. `python` in a command is this interpreter. The
store of artifacts and executions (KFP's MLMD and cache table) is a JSON file under state_dir,
so a second IRRunner on the same state_dir sees the first one's cache.

With `container=ContainerRun(...)` each task's command runs in a container of a locally built
image instead (podman or docker run, the IR's command as the entry point as KFP sets it, the
image's own files, environment and user): the IR's image reference is mapped to the local image,
the store folders and state_dir are mounted at the same paths, and the folders the launcher
would create in the pod (output artifact folders, the output files' folders) are owned by the
container's user, as they would be in the pod. `image_paths` are not used then: the image has
its own files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from typing import Any

import yaml

# objectstore/config.go: the schemes the launcher opens a bucket for.
BUCKET_PATTERN = re.compile(r"(^[a-z][a-z0-9]+:///?)([^/?]+)(/[^?]*)?(\?.+)?$")
OBJECT_STORE_SCHEMES = ("gs://", "s3://", "minio://", "mem://")
# component/launcher_v2.go LocalPathForURI: where the pod sees an object-store URI.
LOCAL_PREFIXES = {"gs://": "/gcs/", "minio://": "/minio/", "s3://": "/s3/"}
# The log output the driver adds to every container task (driver/driver.go:753).
EXECUTOR_LOGS = "executor-logs"
PLACEHOLDER = re.compile(r"\{\{\$(?:\.[^}]*)?\}\}")


# How tasks run under podman on these machines (DESIGN: the runc runtime, the ulimits a build
# host's defaults do not give).
PODMAN_RUN_OPTIONS = (
    "--runtime",
    "runc",
    "--ulimit",
    "nofile=20000:20000",
    "--ulimit",
    "nproc=4096:4096",
)


@dataclasses.dataclass(frozen=True)
class ContainerRun:
    """Run every task in a container of a local image, as its pod would."""

    # The IR's image reference (what the compile was given) -> the local image to run.
    images: dict[str, str]
    engine: str = "podman"
    # uid[:gid]; None: the image's USER, which must then be numeric.
    user: str | None = None
    # More host folders, mounted at the same path (the store folders and state_dir always are).
    mounts: tuple[str, ...] = ()
    # Environment for the task, on top of the image's own.
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    options: tuple[str, ...] = PODMAN_RUN_OPTIONS

    def image_for(self, reference: str) -> str:
        if reference not in self.images:
            raise TaskFailed(f"no local image for {reference} (ContainerRun.images)")
        return self.images[reference]

    def ids(self, image: str) -> tuple[int, int]:
        """(uid, gid) the task runs as."""
        user = self.user
        if user is None:
            user = subprocess.run(
                [self.engine, "image", "inspect", "--format", "{{.Config.User}}", image],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        uid, _, gid = user.partition(":")
        if not uid.isdigit() or (gid and not gid.isdigit()):
            raise TaskFailed(f"image {image}: user {user!r} is not numeric uid[:gid]")
        return int(uid), int(gid or uid)


class IRRejected(ValueError):
    """The backend would refuse this pipeline file before running anything."""


class TaskFailed(RuntimeError):
    pass


@dataclasses.dataclass
class TaskResult:
    name: str
    state: str  # "EXECUTED" | "CACHED"
    seconds: float
    fingerprint: str | None
    outputs: dict[str, dict]  # output name -> artifact record
    output_parameters: dict[str, Any]


@dataclasses.dataclass
class RunResult:
    run_id: str
    tasks: dict[str, TaskResult]
    seconds: float

    def states(self) -> dict[str, str]:
        return {name: task.state for name, task in self.tasks.items()}


def load(package_path: str) -> tuple[dict, dict | None]:
    with open(package_path) as handle:
        documents = list(yaml.safe_load_all(handle))
    return documents[0], (documents[1] if len(documents) > 1 else None)


def check_executors(spec: dict) -> None:
    """As the Argo compiler: only container and importer executors compile."""
    for label, executor in sorted(spec["deploymentSpec"]["executors"].items()):
        if "resolver" in executor:
            raise IRRejected(f"executor {label}: resolver not implemented yet")
        if "container" not in executor and "importer" not in executor:
            raise IRRejected(f"executor {label}: unsupported executor kind {sorted(executor)}")


def check_pipeline_root(root: str) -> None:
    """As objectstore.ParseBucketPathToConfig, which the launcher calls on every task."""
    match = BUCKET_PATTERN.match(root or "")
    if not match:
        raise IRRejected(f"unrecognized pipeline root format: {root!r}")
    if match.group(1) not in OBJECT_STORE_SCHEMES:
        raise IRRejected(f"unsupported Cloud bucket: {root!r}")


def output_uri(root: str, *parts: str) -> str:
    """metadata.GenerateOutputURI: root/parts (the query string dropped)."""
    return root.split("?", 1)[0].rstrip("/") + "/" + "/".join(p.strip("/") for p in parts)


def task_order(tasks: dict) -> list[str]:
    """Dependency order (dependentTasks and the producers of inputs), ties by name."""
    needs: dict[str, set[str]] = {}
    for name, task in tasks.items():
        deps = set(task.get("dependentTasks", []))
        for kind in ("parameters", "artifacts"):
            for value in task.get("inputs", {}).get(kind, {}).values():
                for ref in ("taskOutputParameter", "taskOutputArtifact"):
                    if ref in value:
                        deps.add(value[ref]["producerTask"])
        unknown = deps - set(tasks)
        if unknown:
            raise IRRejected(f"task {name} depends on unknown task(s) {sorted(unknown)}")
        needs[name] = deps
    order: list[str] = []
    while needs:
        ready = sorted(name for name, deps in needs.items() if deps <= set(order))
        if not ready:
            raise IRRejected(f"dependency cycle among {sorted(needs)}")
        order.append(ready[0])
        del needs[ready[0]]
    return order


def upstream(tasks: dict, targets: set[str]) -> set[str]:
    """The targets and every task they depend on."""
    needed: set[str] = set()
    pending = list(targets)
    while pending:
        name = pending.pop()
        if name in needed:
            continue
        needed.add(name)
        task = tasks[name]
        pending.extend(task.get("dependentTasks", []))
        for kind in ("parameters", "artifacts"):
            for value in task.get("inputs", {}).get(kind, {}).values():
                for ref in ("taskOutputParameter", "taskOutputArtifact"):
                    if ref in value:
                        pending.append(value[ref]["producerTask"])
    return needed


def schema_title(artifact_type: dict) -> str:
    if "schemaTitle" in artifact_type:
        return artifact_type["schemaTitle"]
    first_line = artifact_type["instanceSchema"].split("\n", 1)[0]
    return first_line.split(":", 1)[1].strip()


def cache_fingerprint(
    inputs: dict, outputs: dict, output_parameter_types: dict, container: dict, pvc_names
) -> str:
    """sha256 of the cache key's JSON, with the fields of KFP's CacheKey."""
    key = {
        "inputArtifactNames": {
            name: {"artifactNames": [a["name"] for a in listed["artifacts"]]}
            for name, listed in inputs.get("artifacts", {}).items()
        },
        "inputParameterValues": inputs.get("parameterValues", {}),
        "outputArtifactsSpec": {
            name: {k: v for k, v in listed["artifacts"][0].items() if k != "uri"}
            for name, listed in outputs.get("artifacts", {}).items()
            if listed["artifacts"]
        },
        "outputParametersSpec": dict(output_parameter_types),
        "containerSpec": {
            "image": container["image"],
            "cmdArgs": [*container.get("command", []), *container.get("args", [])],
            "pvcNames": sorted(set(pvc_names)),
        },
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def mlmd_round_trip(value: Any) -> Any:
    """A metadata value as it comes back from MLMD: stored by the launcher's RecordArtifact
    through toMLMDArtifact / StructValueToMLMDValue (metadata/converter.go:110-170: numbers as
    double, bools as int 1/0, a list as a struct {"list": [...]}, a struct as {"struct": {...}})
    and read back by toRuntimeArtifact (converter.go:194-212: int and double as numbers)."""
    if isinstance(value, bool):
        return float(int(value))
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, list):
        return {"list": value}
    if isinstance(value, dict):
        return {"struct": value}
    if value is None:  # converter.go:167 "TODO: support null": the launcher fails the task
        raise TaskFailed("null metadata value: the launcher cannot record it in MLMD")
    return value


def store_session_info(root: str) -> str:
    """The store_session_info custom property RecordArtifact adds (metadata/client.go:1243-1250):
    the bucket's objectstore.SessionInfo as JSON; with no kfp-launcher config, gs:// reads
    credentials from the environment (config/gcs.go:69-75), as do s3:// and minio://
    (config/s3.go:89-93)."""
    provider = root.split("://", 1)[0]
    return json.dumps({"Provider": provider, "Params": {"fromEnv": "true"}}, separators=(",", ":"))


def placeholder_values(executor_input: dict) -> dict[str, str]:
    """launcher getPlaceholders: the strings each placeholder becomes."""
    values: dict[str, str] = {}
    for name, listed in executor_input["inputs"].get("artifacts", {}).items():
        if listed["artifacts"]:
            values[f"{{{{$.inputs.artifacts['{name}'].uri}}}}"] = listed["artifacts"][0]["uri"]
    for name, listed in executor_input["outputs"].get("artifacts", {}).items():
        values[f"{{{{$.outputs.artifacts['{name}'].uri}}}}"] = listed["artifacts"][0]["uri"]
    for name, value in executor_input["inputs"].get("parameterValues", {}).items():
        if isinstance(value, str):
            text = value
        elif isinstance(value, bool):
            text = str(value).lower()
        elif isinstance(value, (int, float)):
            text = (
                repr(float(value)).removesuffix(".0") if float(value).is_integer() else repr(value)
            )
        else:
            text = json.dumps(value)
        values[f"{{{{$.inputs.parameters['{name}']}}}}"] = text
    for name, parameter in executor_input["outputs"].get("parameters", {}).items():
        values[f"{{{{$.outputs.parameters['{name}'].output_file}}}}"] = parameter["outputFile"]
    return values


def compile_args(executor_input: dict, args: list[str]) -> list[str]:
    """launcher compileCmdAndArgs; an unknown placeholder is an error here (KFP would pass
    it through as text)."""
    values = placeholder_values(executor_input)
    executor_json = json.dumps(executor_input)
    compiled = []
    for arg in args:
        text = arg.replace("{{$}}", executor_json)
        for placeholder, replacement in values.items():
            text = text.replace(placeholder, replacement)
        leftover = PLACEHOLDER.findall(arg.replace("{{$}}", ""))
        unresolved = [p for p in leftover if p not in values]
        if unresolved:
            raise IRRejected(f"unresolved placeholder(s) {unresolved} in {arg[:80]!r}")
        compiled.append(text)
    return compiled


class Store:
    """Artifacts, executions and the cache table, in one JSON file."""

    def __init__(self, path: str):
        self.path = path
        if os.path.exists(path):
            with open(path) as handle:
                self.data = json.load(handle)
        else:
            self.data = {"artifacts": [], "executions": [], "cache": {}}

    def save(self) -> None:
        with open(self.path, "w") as handle:
            json.dump(self.data, handle, indent=1, sort_keys=True)

    def add_artifact(self, record: dict) -> dict:
        record = dict(record, id=len(self.data["artifacts"]) + 1)
        self.data["artifacts"].append(record)
        return record

    def artifact(self, artifact_id: int) -> dict:
        return self.data["artifacts"][artifact_id - 1]

    def add_execution(self, record: dict) -> dict:
        record = dict(record, id=len(self.data["executions"]) + 1)
        self.data["executions"].append(record)
        return record

    def cached(self, pipeline: str, fingerprint: str) -> dict | None:
        execution_id = self.data["cache"].get(pipeline, {}).get(fingerprint)
        return self.data["executions"][execution_id - 1] if execution_id else None

    def remember(self, pipeline: str, fingerprint: str, execution: dict) -> None:
        self.data["cache"].setdefault(pipeline, {})[fingerprint] = execution["id"]


def _prefixes(mapping: dict[str, str]) -> dict[str, str]:
    stripped = {k.rstrip("/"): v.rstrip("/") for k, v in mapping.items()}
    return dict(sorted(stripped.items(), key=lambda kv: -len(kv[0])))


class IRRunner:
    def __init__(
        self,
        package_path: str,
        state_dir: str,
        stores: dict[str, str],
        image_paths: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 900,
        container: ContainerRun | None = None,
    ):
        if container is not None and image_paths:
            raise ValueError("image_paths are for local runs; in a container the image has them")
        self.spec, self.platform = load(package_path)
        check_executors(self.spec)
        self.state_dir = state_dir
        os.makedirs(state_dir, exist_ok=True)
        self.store = Store(os.path.join(state_dir, "store.json"))
        # Without trailing slashes; longest prefix first, so gs://bucket/x maps before gs://bucket.
        self.stores = _prefixes(stores)
        self.image_paths = _prefixes(image_paths or {})
        self.env = env
        self.timeout = timeout
        self.container = container

    # --- what stands in for the cluster -------------------------------------------------
    def local(self, text: str) -> str:
        """An object-store URI or image path as this machine reads it."""
        for prefix, folder in {**self.stores, **self.image_paths}.items():
            if text == prefix or text.startswith(prefix + "/"):
                return folder + text[len(prefix) :]
        return text

    def _localize(self, value: Any) -> Any:
        """Every URI / image path inside a value (JSON strings included)."""
        if isinstance(value, str):
            for prefix, folder in {**self.stores, **self.image_paths}.items():
                value = value.replace(prefix + "/", folder + "/")
                if value == prefix:
                    value = folder
            return value
        if isinstance(value, dict):
            return {k: self._localize(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._localize(v) for v in value]
        return value

    def _remote(self, value: Any) -> Any:
        """The inverse of _localize for what the executor wrote back."""
        if isinstance(value, str):
            for prefix, folder in self.stores.items():
                value = value.replace(folder + "/", prefix + "/")
            return value
        if isinstance(value, dict):
            return {k: self._remote(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._remote(v) for v in value]
        return value

    def pvc_names(self, executor_label: str) -> list[str]:
        if not self.platform:
            return []
        executors = self.platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
        names = []
        for mount in executors.get(executor_label, {}).get("pvcMount", []):
            parameter = mount.get("pvcNameParameter", {}).get("runtimeValue", {})
            names.append(parameter.get("constant") or mount.get("constant"))
        return [n for n in names if n]

    # --- the run -----------------------------------------------------------------------
    def run(
        self,
        parameters: dict[str, Any] | None = None,
        pipeline_root: str | None = None,
        until: set[str] | None = None,
    ) -> RunResult:
        """One run; with `until`, only those tasks and what they depend on (a partial run)."""
        spec = self.spec
        root = pipeline_root or spec.get("defaultPipelineRoot", "")
        check_pipeline_root(root)
        pipeline_name = spec["pipelineInfo"]["name"]
        run_id = uuid.uuid4().hex[:12]
        run_root = output_uri(root, pipeline_name, run_id)
        values = {}
        for name, definition in (
            spec["root"].get("inputDefinitions", {}).get("parameters", {}).items()
        ):
            if parameters and name in parameters:
                values[name] = parameters[name]
            elif "defaultValue" in definition:
                values[name] = definition["defaultValue"]
            elif not definition.get("isOptional"):
                raise IRRejected(f"pipeline parameter {name!r} has no value")
        tasks = spec["root"]["dag"]["tasks"]
        results: dict[str, TaskResult] = {}
        started = time.monotonic()
        order = task_order(tasks)
        if until is not None:
            unknown = set(until) - set(tasks)
            if unknown:
                raise IRRejected(f"no task(s) {sorted(unknown)} in the pipeline")
            order = [name for name in order if name in upstream(tasks, until)]
        for task_name in order:
            results[task_name] = self._run_task(
                task_name, tasks[task_name], values, results, run_root, pipeline_name
            )
            self.store.save()
        return RunResult(run_id=run_id, tasks=results, seconds=time.monotonic() - started)

    def _inputs(self, task: dict, component: dict, values: dict, results: dict) -> dict:
        parameters: dict[str, Any] = {}
        for name, value in task.get("inputs", {}).get("parameters", {}).items():
            if "runtimeValue" in value:
                parameters[name] = value["runtimeValue"]["constant"]
            elif "componentInputParameter" in value:
                parameters[name] = values[value["componentInputParameter"]]
            elif "taskOutputParameter" in value:
                ref = value["taskOutputParameter"]
                parameters[name] = results[ref["producerTask"]].output_parameters[
                    ref["outputParameterKey"]
                ]
            else:
                raise IRRejected(f"unsupported parameter input {name}: {sorted(value)}")
        # The launcher fills declared defaults of inputs the task does not set.
        for name, definition in component.get("inputDefinitions", {}).get("parameters", {}).items():
            if name not in parameters and "defaultValue" in definition:
                parameters[name] = definition["defaultValue"]
            elif name not in parameters and not definition.get("isOptional"):
                raise IRRejected(f"input parameter {name!r} has no value")
        artifacts: dict[str, dict] = {}
        for name, value in task.get("inputs", {}).get("artifacts", {}).items():
            if "taskOutputArtifact" not in value:
                raise IRRejected(f"unsupported artifact input {name}: {sorted(value)}")
            ref = value["taskOutputArtifact"]
            record = results[ref["producerTask"]].outputs[ref["outputArtifactKey"]]
            artifacts[name] = {"artifacts": [self._runtime_artifact(record)]}
        return {"parameterValues": parameters, "artifacts": artifacts}

    @staticmethod
    def _runtime_artifact(record: dict) -> dict:
        """What the driver hands a downstream task (driver/resolve.go:778-793): the producer's
        output read back from MLMD by GetOutputArtifactsByExecutionId with Schema ""
        (metadata/client.go:1140-1145), then OutputArtifact.ToRuntimeArtifact
        (client.go:245-259): name the MLMD id, the URI, every (custom) property as metadata
        (converter.go:181-221), and the type `{"instanceSchema": ""}`, whatever the compiled
        file declares."""
        return {
            "name": str(record["id"]),
            "type": {"instanceSchema": ""},
            "uri": record["uri"],
            "metadata": dict(record["metadata"]),
        }

    def _run_task(
        self,
        task_name: str,
        task: dict,
        values: dict,
        results: dict,
        run_root: str,
        pipeline_name: str,
    ) -> TaskResult:
        spec = self.spec
        component = spec["components"][task["componentRef"]["name"]]
        label = component["executorLabel"]
        executor = spec["deploymentSpec"]["executors"][label]
        inputs = self._inputs(task, component, values, results)
        started = time.monotonic()
        if "importer" in executor:
            return self._import(task_name, executor["importer"], inputs, component, started)
        container = executor["container"]
        task_root = output_uri(run_root, task_name, uuid.uuid4().hex[:8])
        output_types = {
            name: definition["parameterType"]
            for name, definition in component.get("outputDefinitions", {})
            .get("parameters", {})
            .items()
        }
        outputs = {
            "artifacts": {
                name: {
                    "artifacts": [
                        {
                            "name": name,
                            "type": definition["artifactType"],
                            "uri": output_uri(task_root, name),
                            **(
                                {"metadata": definition["metadata"]}
                                if "metadata" in definition
                                else {}
                            ),
                        }
                    ]
                }
                for name, definition in {
                    **component.get("outputDefinitions", {}).get("artifacts", {}),
                    # driver/driver.go:747-760: publish_logs defaults to "true"
                    # (cmd/driver/main.go:101), so every task gets this launcher-managed output.
                    EXECUTOR_LOGS: {"artifactType": {"schemaTitle": "system.Artifact"}},
                }.items()
            },
            "parameters": {
                name: {"outputFile": f"/tmp/kfp/outputs/{name}"} for name in output_types
            },
            "outputFile": self._pod_path(task_root) + "/output_metadata.json",
        }
        fingerprint = None
        if task.get("cachingOptions", {}).get("enableCache"):
            fingerprint = cache_fingerprint(
                inputs, outputs, output_types, container, self.pvc_names(label)
            )
            hit = self.store.cached(pipeline_name, fingerprint)
            if hit is not None:
                return TaskResult(
                    name=task_name,
                    state="CACHED",
                    seconds=time.monotonic() - started,
                    fingerprint=fingerprint,
                    outputs={k: self.store.artifact(v) for k, v in hit["outputs"].items()},
                    output_parameters=dict(hit["output_parameters"]),
                )
        executor_output = self._execute(task_name, container, inputs, outputs)
        output_parameters = dict(executor_output.get("parameterValues", {}))
        for name in output_types:
            if name not in output_parameters:
                # launcher collectOutputParameters: from the file, else the task fails.
                path = self._pod_file(task_name, outputs["parameters"][name]["outputFile"])
                try:
                    with open(path) as handle:
                        output_parameters[name] = handle.read()
                except OSError as error:
                    raise TaskFailed(
                        f"task {task_name}: failed to read output parameter {name!r}: {error}"
                    ) from None
        recorded = {}
        for name, listed in outputs["artifacts"].items():
            artifact = listed["artifacts"][0]
            # launcher_v2.go:802-807 mergeRuntimeArtifacts (not for executor-logs), then
            # RecordArtifact (metadata/client.go:1214-1250): metadata as custom properties,
            # display_name and store_session_info added when absent.
            written = executor_output.get("artifacts", {}).get(name, {}).get("artifacts", [{}])
            metadata = dict(artifact.get("metadata", {}))
            if name != EXECUTOR_LOGS:
                metadata.update(written[0].get("metadata") or {})
            metadata.setdefault("display_name", name)
            metadata.setdefault("store_session_info", store_session_info(artifact["uri"]))
            recorded[name] = self.store.add_artifact(
                {
                    "schemaTitle": schema_title(artifact["type"]),
                    "uri": artifact["uri"],
                    "metadata": {k: mlmd_round_trip(v) for k, v in self._remote(metadata).items()},
                    "producer": task_name,
                }
            )
        execution = self.store.add_execution(
            {
                "task": task_name,
                "fingerprint": fingerprint,
                "outputs": {name: record["id"] for name, record in recorded.items()},
                "output_parameters": output_parameters,
            }
        )
        if fingerprint:
            self.store.remember(pipeline_name, fingerprint, execution)
        return TaskResult(
            name=task_name,
            state="EXECUTED",
            seconds=time.monotonic() - started,
            fingerprint=fingerprint,
            outputs=recorded,
            output_parameters=output_parameters,
        )

    # --- folders and containers ---------------------------------------------------------
    _ids: tuple[int, int] | None = None

    def _own(self, path: str) -> None:
        """In a container run, a folder the launcher would create in the pod is the pod
        user's (chown when root, else writable for all: rootless engines map the uid)."""
        if self.container is None:
            return
        if os.geteuid() == 0:
            assert self._ids is not None
            os.chown(path, *self._ids)
        else:
            os.chmod(path, 0o777)

    def _makedirs(self, path: str) -> None:
        """os.makedirs, each folder it creates owned as _own says."""
        path = os.path.abspath(path)
        if os.path.isdir(path):
            return
        self._makedirs(os.path.dirname(path))
        os.makedirs(path, exist_ok=True)
        self._own(path)

    def _container_argv(
        self, image: str, command: list[str], args: list[str]
    ) -> tuple[list[str], str]:
        """The engine's run command: the IR's command as the entry point (KFP's command
        replaces the image's ENTRYPOINT), its args as the container's arguments."""
        run = self.container
        assert run is not None and self._ids is not None
        name = f"ir-runner-{uuid.uuid4().hex[:12]}"
        mounts = [*self.stores.values(), os.path.abspath(self.state_dir), *run.mounts]
        argv = [run.engine, "run", "--rm", "--name", name, *run.options]
        argv += ["--user", f"{self._ids[0]}:{self._ids[1]}"]
        argv += ["--entrypoint", json.dumps(command)]
        for folder in dict.fromkeys(mounts):
            argv += ["-v", f"{folder}:{folder}"]
        for key, value in sorted(run.env.items()):
            argv += ["-e", f"{key}={value}"]
        return [*argv, image, *args], name

    def _import(self, task_name, importer, inputs, component, started) -> TaskResult:
        uri = importer["artifactUri"]
        uri = uri["runtimeParameter"] if "runtimeParameter" in uri else uri.get("constant", uri)
        [(name, definition)] = component["outputDefinitions"]["artifacts"].items()
        record = self.store.add_artifact(
            {
                "schemaTitle": schema_title(importer["typeSchema"]),
                "uri": uri,
                "metadata": dict(importer.get("metadata", {})),
                "producer": task_name,
            }
        )
        return TaskResult(
            task_name, "EXECUTED", time.monotonic() - started, None, {name: record}, {}
        )

    def _pod_path(self, uri: str) -> str:
        """The pod-local path the launcher uses for an object-store URI (LocalPathForURI)."""
        for scheme, local_prefix in LOCAL_PREFIXES.items():
            if uri.startswith(scheme):
                return local_prefix + uri[len(scheme) :]
        raise IRRejected(f"failed to generate local path for URI {uri}")

    def _pod_file(self, task_name: str, pod_path: str) -> str:
        """Where this machine keeps a pod-local file of the task."""
        return os.path.join(self.state_dir, "pods", task_name, pod_path.lstrip("/"))

    def _execute(self, task_name: str, container: dict, inputs: dict, outputs: dict) -> dict:
        executor_input = {"inputs": inputs, "outputs": outputs}
        # Resolved for the real pod first (unknown placeholders fail here), then localized.
        compile_args(executor_input, container.get("args", []))
        local_input = self._localize(executor_input)
        output_file = self._pod_file(task_name, outputs["outputFile"])
        local_input["outputs"]["outputFile"] = output_file
        image = self.container.image_for(container["image"]) if self.container else ""
        if self.container:
            self._ids = self.container.ids(image)
            # A bucket has no owners: the task's user writes wherever the pod may.
            for folder in self.stores.values():
                self._makedirs(folder)
                self._own(folder)
        for parameter in local_input["outputs"]["parameters"].values():
            parameter["outputFile"] = self._pod_file(task_name, parameter["outputFile"])
            self._makedirs(os.path.dirname(parameter["outputFile"]))
        self._makedirs(os.path.dirname(output_file))
        for listed in local_input["outputs"]["artifacts"].values():
            # prepareOutputFolders (launcher_v2.go:1280-1305) makes each artifact's parent
            # folder; the artifact's own folder is the executor's to make.
            self._makedirs(os.path.dirname(listed["artifacts"][0]["uri"]))
        command = list(container["command"])
        args = compile_args(local_input, container.get("args", []))
        # getLogWriter (launcher_v2.go:632-656): the task's output goes to the executor-logs
        # artifact's local path.
        log_path = local_input["outputs"]["artifacts"][EXECUTOR_LOGS]["artifacts"][0]["uri"]
        if self.container:
            argv, name = self._container_argv(image, command, args)
        else:
            if command[0] == "python":
                command[0] = sys.executable
            argv, name = [*command, *args], ""
        with open(log_path, "w") as log:
            try:
                completed = subprocess.run(
                    argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=None if self.container else self.env,
                    timeout=self.timeout,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                if name:  # the engine's client is gone; the container is not
                    subprocess.run([self.container.engine, "rm", "-f", name], check=False)
                raise
        if completed.returncode != 0:
            with open(log_path) as handle:
                tail = handle.read()[-4000:]
            raise TaskFailed(f"task {task_name} exited {completed.returncode}:\n{tail}")
        if not os.path.exists(output_file):
            return {}
        with open(output_file) as handle:
            return json.load(handle)


def _pairs(values: list[str]) -> dict[str, str]:
    return dict(value.split("=", 1) for value in values)


def main(argv: list[str] | None = None) -> int:
    """python -m tests.kubeflow.ir_runner PACKAGE --state DIR --store gs://bucket=DIR
    [--image_path /app/schemas=schemas ...] [--param data_root=gs://bucket/data ...]
    [--container_image IR_IMAGE=LOCAL_IMAGE ... [--engine podman] [--user UID:GID]]
    [--until TASK ...]: one run, one line per task (state, seconds), then the run's total.
    With --container_image every task runs in a container of the local image."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("package")
    parser.add_argument("--state", required=True)
    parser.add_argument("--store", action="append", default=[], metavar="URI_PREFIX=DIR")
    parser.add_argument("--image_path", action="append", default=[], metavar="IMAGE_PATH=DIR")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--container_image", action="append", default=[], metavar="IR=LOCAL")
    parser.add_argument("--engine", default="podman")
    parser.add_argument("--user", default=None, metavar="UID[:GID]")
    parser.add_argument("--until", action="append", default=None, metavar="TASK")
    args = parser.parse_args(argv)
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    container = None
    if args.container_image:
        container = ContainerRun(
            _pairs(args.container_image),
            engine=args.engine,
            user=args.user,
            env={"TF_CPP_MIN_LOG_LEVEL": "2"},
        )
    runner = IRRunner(
        args.package,
        args.state,
        _pairs(args.store),
        _pairs(args.image_path),
        env=env,
        container=container,
    )
    result = runner.run(_pairs(args.param) or None, until=set(args.until) if args.until else None)
    for name, task in result.tasks.items():
        sys.stdout.write(f"{name:28s} {task.state:9s} {task.seconds:6.1f} s\n")
    sys.stdout.write(f"run {result.run_id}: {result.seconds:.1f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
