"""The image's executor entry point for TFX components on Kubeflow Pipelines:
`python -m kubeflow.run_executor` takes exactly the flags of TFX's
`tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor` (its own parser is used),
puts back each input artifact's TFX type, then hands over to TFX's entry point.

Why: TFX rebuilds each artifact's class from the type in the ExecutorInput, but KFP does not send
the type the compiled file declares.
  - The open-source backend's driver sends `{"instanceSchema": ""}` for every upstream artifact
    (kubeflow/pipelines 7b70c7b9 backend/src/v2/metadata/client.go:1144 sets Schema "",
    client.go:256 OutputArtifact.ToRuntimeArtifact makes it the type; driver/resolve.go:793).
    TFX 1.16 fails on it (kubeflow_v2_entrypoint_utils._retrieve_class_path; tensorflow/tfx#7768).
  - kfp.local sends `schemaTitle: system.Artifact` (TFX: "Could not import system.Artifact").
  - The backend's driver also adds a launcher-managed `executor-logs` output of type
    system.Artifact to every task (driver/driver.go:753, publish_logs defaults to "true"); the
    launcher writes the task's log into it. TFX's executors do not declare it, and TFX cannot
    build a `system.Artifact`: it is left out of what TFX sees (the launcher records it itself).

Where the types come from: the compiled file's own `--json_serialized_inputs_spec_args`, the
component's inputDefinitions that TFX's compiler puts in every container's args (its artifacts
carry `instanceSchema: "title: tfx.Examples ..."`). A sent type that already names the declared
TFX type is kept (TFX's own shape); an empty or `system.*` one is replaced by the declaration; a
different TFX type, or a generic one with no declaration, is an error naming the input.

Object-store roots TensorFlow cannot open (minio://, s3://: TensorFlow 2.16 has no such file
system here): KFP's launcher downloads every input artifact to, and uploads every output artifact
from, a local path in the pod (kubeflow/pipelines fc3214d4 backend/src/v2/component/
launcher_v2.go:886 LocalPathForURI: `minio://B/K` -> `/minio/B/K`, `s3://B/K` -> `/s3/B/K`;
downloads :621, uploads :536). So each such artifact URI is handed to TFX as that local path,
and the executor output TFX writes gets the original URIs back: the launcher takes an output's
URI from it (:532 mergeRuntimeArtifacts) and uploads from LocalPathForURI(URI), so a local path
there would skip the upload. String metadata naming a mapped path (an artifact recording
another's URI) is mapped back too. gs:// is left as it is (TensorFlow reads it).

A failed executor's error names the object-store URIs too (it is the line `run_kubeflow.py deploy
--wait` shows for the task), in place of the launcher's local paths. What the failed task wrote
is not in the store: the launcher uploads outputs only after the command succeeded (execute()
returns the command's error at launcher_v2.go:505-507, executeV2 returns it at :363-365, before
uploadOutputArtifacts at :380), and then only each output artifact's own folder (:536-545). So a
path the error names that is not a downloaded input says so, and a text file there (ExampleGen's
rejected-rows listing, beside its Examples folder) is printed in full in the task's log, which
stays with the pod (the KFP UI's logs, `kubectl logs`, deploy --wait's error line).
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import re
import sys
from typing import Any

import yaml

# The launcher-managed log output (kubeflow/pipelines 7b70c7b9 backend/src/v2/driver/driver.go:753).
EXECUTOR_LOGS = "executor-logs"
# Generic types KFP puts in place of the compiled one (kfp.local; the backend's logs output).
GENERIC_PREFIX = "system."
# The launcher's local copies of object-store URIs TensorFlow cannot open (launcher_v2.go:886).
LAUNCHER_PATHS = {"minio://": "/minio/", "s3://": "/s3/"}


# The most of one file a failed task prints into its log (more is said, not printed).
PRINT_LIMIT_BYTES = 8 * 2**20
NOT_UPLOADED = "KFP's launcher uploads nothing of a failed task"
OUTSIDE_OUTPUTS = "KFP's launcher uploads only each output artifact's own folder"


class TypeRestoreError(ValueError):
    """An input artifact whose TFX type cannot be known."""


def type_title(artifact_type: dict[str, Any]) -> str:
    """The schema title of an ArtifactTypeSchema in JSON form ("" when empty)."""
    if artifact_type.get("schemaTitle"):
        return str(artifact_type["schemaTitle"])
    schema = artifact_type.get("instanceSchema") or ""
    loaded = yaml.safe_load(schema) if schema.strip() else None
    if isinstance(loaded, dict):
        return str(loaded.get("title", ""))
    return ""


def restore_types(
    executor_input: dict[str, Any], inputs_spec: dict[str, Any] | None, executor_class: str = ""
) -> dict[str, Any]:
    """A copy of the ExecutorInput (JSON form) with each input artifact's type the component's
    declared one and the launcher's executor-logs output left out."""
    restored = json.loads(json.dumps(executor_input))
    declared = (inputs_spec or {}).get("artifacts", {})
    where = f" of {executor_class}" if executor_class else ""
    for name, listed in restored.get("inputs", {}).get("artifacts", {}).items():
        declaration = declared.get(name, {}).get("artifactType")
        want = type_title(declaration) if declaration else ""
        for artifact in listed.get("artifacts", []):
            sent = type_title(artifact.get("type") or {})
            if sent and not sent.startswith(GENERIC_PREFIX) and (not want or sent == want):
                continue  # TFX's own shape: the sent type is the declared one
            if not want:
                raise TypeRestoreError(
                    f"input artifact {name!r}{where} arrived with type {sent or 'empty'!r} and the"
                    " component declares none (no --json_serialized_inputs_spec_args entry):"
                    " recompile the pipeline with kubeflow/run_kubeflow.py compile"
                )
            if sent and not sent.startswith(GENERIC_PREFIX):
                raise TypeRestoreError(
                    f"input artifact {name!r}{where} arrived as {sent!r}, but the component"
                    f" declares {want!r}: the pipeline wires the wrong output into it"
                )
            artifact["type"] = dict(declaration)
    outputs = restored.get("outputs", {}).get("artifacts", {})
    logs = outputs.get(EXECUTOR_LOGS, {}).get("artifacts", [])
    if logs and all(type_title(a.get("type") or {}).startswith(GENERIC_PREFIX) for a in logs):
        del outputs[EXECUTOR_LOGS]
    return restored


def local_path(uri: str) -> str:
    """Where KFP's launcher keeps the artifact at `uri` in the pod (the URI itself when
    TensorFlow opens it directly)."""
    for scheme, prefix in LAUNCHER_PATHS.items():
        if uri.startswith(scheme):
            return prefix + uri[len(scheme) :]
    return uri


def store_uri(path: str, schemes: set[str]) -> str:
    """The object-store URI of a launcher's local path (of one of `schemes`), else `path`."""
    for scheme in schemes:
        prefix = LAUNCHER_PATHS[scheme]
        if path.startswith(prefix):
            return scheme + path[len(prefix) :]
    return path


def to_local_paths(executor_input: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """A copy of the ExecutorInput (JSON form) with every input and output artifact's
    minio:// or s3:// URI replaced by the launcher's local path; and the schemes replaced."""
    mapped = json.loads(json.dumps(executor_input))
    schemes: set[str] = set()
    for side in ("inputs", "outputs"):
        for listed in mapped.get(side, {}).get("artifacts", {}).values():
            for artifact in listed.get("artifacts", []):
                uri = artifact.get("uri", "")
                local = local_path(uri)
                if local != uri:
                    schemes.add(uri[: uri.index("://") + 3])
                    artifact["uri"] = local
    return mapped, schemes


def _map_back(value: Any, schemes: set[str]) -> Any:
    if isinstance(value, str):
        return store_uri(value, schemes)
    if isinstance(value, list):
        return [_map_back(item, schemes) for item in value]
    if isinstance(value, dict):
        return {key: _map_back(item, schemes) for key, item in value.items()}
    return value


def to_store_uris(executor_output: dict[str, Any], schemes: set[str]) -> dict[str, Any]:
    """A copy of the ExecutorOutput (JSON form) with the launcher's local paths of `schemes` in
    artifact URIs and artifact metadata back as the object-store URIs KFP expects."""
    restored = json.loads(json.dumps(executor_output))
    for listed in restored.get("artifacts", {}).values():
        for artifact in listed.get("artifacts", []):
            if "uri" in artifact:
                artifact["uri"] = store_uri(artifact["uri"], schemes)
            if "metadata" in artifact:
                artifact["metadata"] = _map_back(artifact["metadata"], schemes)
    return restored


def restore_output_file(
    path: str, schemes: set[str], inputs: list[str] | None = None, log=None
) -> None:
    """Rewrites the executor output TFX wrote at `path` with object-store URIs. A text file its
    artifacts' metadata names outside every output artifact's folder (ExampleGen's listing of
    rejected rows within --max_rejected_fraction, beside its Examples) and not under a
    downloaded input (`inputs`) is not uploaded (launcher_v2.go:536-545): it is printed in full
    into the task's log."""
    if not schemes:
        return
    with open(path) as handle:
        written = json.load(handle)
    artifacts = [
        artifact
        for listed in written.get("artifacts", {}).values()
        for artifact in listed.get("artifacts", [])
    ]
    stored = [*(inputs or []), *(a.get("uri", "") for a in artifacts)]
    beside = FailedTask(schemes, stored, log, OUTSIDE_OUTPUTS)
    beside.retell(json.dumps([a.get("metadata", {}) for a in artifacts]))
    with open(path, "w") as handle:
        json.dump(to_store_uris(written, schemes), handle)


class ExecutorFailed(RuntimeError):
    """A failed executor's error whose text could not be rewritten in place."""


class FailedTask:
    """Rewrites a failed executor's error text: each launcher-local path of `schemes` becomes its
    object-store URI; one outside the folders the store holds (`downloaded`: the inputs; for a
    task that succeeded, its outputs too) says it was not uploaded (`reason`), and a text file
    there is printed in full into the task's log (`log`)."""

    def __init__(
        self, schemes: set[str], downloaded: list[str], log=None, reason: str = NOT_UPLOADED
    ):
        self.schemes = schemes
        self.downloaded = [path.rstrip("/") for path in downloaded if path]
        self.log = log if log is not None else sys.stderr
        self.reason = reason
        self.told: set[str] = set()
        prefixes = "|".join(re.escape(LAUNCHER_PATHS[scheme]) for scheme in sorted(schemes))
        # A path starts after a non-path character; it ends at a space, a quote, a bracket or
        # punctuation that follows paths in messages (`path:11:`, `path, ...`).
        self.pattern = re.compile(rf"(?<![\w.\-/])(?:{prefixes})[^\s'\"()\[\]{{}},;:]*")

    def retell(self, text: str) -> str:
        return self.pattern.sub(self._uri, text)

    def _uri(self, match: re.Match) -> str:
        path = match.group(0).rstrip(".")
        uri = store_uri(path, self.schemes) + match.group(0)[len(path) :]
        if path in self.told or any(
            path == root or path.startswith(root + "/") for root in self.downloaded
        ):
            return uri
        self.told.add(path)
        where = {
            "full": "printed in full in this task's log above",
            "head": f"its first {PRINT_LIMIT_BYTES} bytes are printed in this task's log above",
            "": "it stayed in the task's pod",
        }[self._print(path, store_uri(path, self.schemes))]
        return f"{uri} (not uploaded: {self.reason}; {where})"

    def _print(self, path: str, uri: str) -> str:
        """The text file at `path`, into the log: "full", "head" (cut at PRINT_LIMIT_BYTES), or
        "" when it is none."""
        try:
            if not os.path.isfile(path):
                return ""
            size = os.path.getsize(path)
            with open(path, "rb") as handle:
                head = handle.read(PRINT_LIMIT_BYTES)
            # Strict (a binary file is not printed); a character cut at the limit waits.
            text = codecs.getincrementaldecoder("utf-8")().decode(head, size == len(head))
        except (OSError, UnicodeDecodeError):
            return ""
        self.log.write(f"kubeflow.run_executor: {uri}, {size} bytes ({self.reason}):\n")
        self.log.write(text if text.endswith("\n") or not text else text + "\n")
        if size > len(head):
            rest = size - len(text.encode("utf-8"))
            self.log.write(
                f"kubeflow.run_executor: ... {rest} more bytes of {uri} not printed "
                f"(over {PRINT_LIMIT_BYTES} bytes)\n"
            )
        self.log.write(f"kubeflow.run_executor: end of {uri}\n")
        self.log.flush()
        return "full" if size == len(head) else "head"

    def retold(self, error: Exception) -> Exception:
        """`error` with its text rewritten in place (its class stays: the line deploy --wait
        shows names it), or an ExecutorFailed when its class makes its own text."""
        error.args = tuple(self.retell(a) if isinstance(a, str) else a for a in error.args)
        if isinstance(error, OSError):
            for name in ("filename", "filename2"):
                if isinstance(getattr(error, name, None), str):
                    setattr(error, name, self.retell(getattr(error, name)))
        text = str(error)
        if not self.pattern.search(text):
            return error
        kind = type(error)
        return ExecutorFailed(f"{kind.__module__}.{kind.__qualname__}: {self.retell(text)}")


def downloaded_paths(executor_input: dict[str, Any]) -> list[str]:
    """The launcher-local paths of the input artifacts (JSON form, after to_local_paths)."""
    prefixes = tuple(LAUNCHER_PATHS.values())
    listed = executor_input.get("inputs", {}).get("artifacts", {}).values()
    return [
        artifact["uri"]
        for entry in listed
        for artifact in entry.get("artifacts", [])
        if artifact.get("uri", "").startswith(prefixes)
    ]


def parse_flags(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """TFX's own parser: the same flags, the rest are Beam's."""
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor

    return kubeflow_v2_run_executor._parse_flags(argv)  # noqa: SLF001 (the exact CLI)


def main(parsed: tuple[argparse.Namespace, list[str]]) -> None:
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor

    args, beam_args = parsed
    inputs_spec = None
    if getattr(args, "json_serialized_inputs_spec_args", None):
        inputs_spec = json.loads(args.json_serialized_inputs_spec_args)
    executor_input = json.loads(args.json_serialized_invocation_args)
    restored = restore_types(executor_input, inputs_spec, args.executor_class_path)
    local, schemes = to_local_paths(restored)
    args.json_serialized_invocation_args = json.dumps(local)
    try:
        kubeflow_v2_run_executor.main((args, beam_args))
    except Exception as error:
        if not schemes:
            raise
        retold = FailedTask(schemes, downloaded_paths(local)).retold(error)
        if retold is error:
            raise
        raise retold from error
    # TFX wrote it where the launcher reads it: a local file (/tmp/kfp_outputs/...).
    restore_output_file(executor_input["outputs"]["outputFile"], schemes, downloaded_paths(local))


def run(argv: list[str] | None = None) -> None:
    """As TFX's `__main__`: absl's app.run with TFX's flag parser."""
    from absl import app

    try:
        app.run(main, argv=argv if argv is not None else sys.argv, flags_parser=parse_flags)
    except TypeRestoreError as error:
        sys.stderr.write(f"kubeflow.run_executor: {error}\n")
        sys.exit(2)


if __name__ == "__main__":
    run()
