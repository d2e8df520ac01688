"""The Evaluator's baseline: the newest pushed model that is not the candidate itself.

Why not a TFX Resolver: Resolver nodes compile to KFP `resolver` executors, which only Vertex AI
runs (the open-source Kubeflow Pipelines backend refuses them), and TFX's
LatestBlessedModelStrategy returns, on an unchanged rerun, the candidate itself (the Trainer's
cached model): the Evaluator's inputs then differ from the first run's, so Evaluator and Pusher
run again and push the same model twice.

What the Pusher pushed is what the Evaluator blessed: versioned SavedModels under
`serving_model_dir/<version>/`. A component (components.tfx_components.baseline_model) reads
those versions, so the same container runs on LocalDagRunner and on any Kubeflow Pipelines
backend, with no query of ML Metadata. A version is recognised as the candidate by its content
(the SavedModel graph and its variables' index, which holds a checksum of every tensor): a
pushed copy of the candidate is byte-identical to it.

Plain functions on tfx.dsl.io.fileio (local paths, gs://), testable without a pipeline.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os

from tfx.dsl.io import fileio

SAVED_MODEL_FILE = "saved_model.pb"
# The tensor bundle's index: names, shapes and a CRC32C of every variable's value.
VARIABLES_INDEX = os.path.join("variables", "variables.index")


@dataclasses.dataclass(frozen=True)
class PushedVersion:
    version: str
    path: str


def has_saved_model(directory: str) -> bool:
    return fileio.exists(os.path.join(directory, SAVED_MODEL_FILE))


def model_identity(saved_model_dir: str) -> str | None:
    """A digest of the SavedModel's graph and variables index; None when there is no model."""
    if not has_saved_model(saved_model_dir):
        return None
    digest = hashlib.sha256()
    for name in (SAVED_MODEL_FILE, VARIABLES_INDEX):
        path = os.path.join(saved_model_dir, name)
        digest.update(name.encode() + b"\0")
        if fileio.exists(path):
            with fileio.open(path, "rb") as handle:
                digest.update(handle.read())
    return digest.hexdigest()


def pushed_versions(serving_model_dir: str) -> list[PushedVersion]:
    """Complete pushed SavedModels (numeric version folders with a graph), newest first."""
    if not fileio.isdir(serving_model_dir):
        return []
    versions = []
    for name in fileio.listdir(serving_model_dir):
        name = name.rstrip("/")
        path = os.path.join(serving_model_dir, name)
        if name.isdigit() and has_saved_model(path):
            versions.append(PushedVersion(version=name, path=path))
    return sorted(versions, key=lambda pushed: int(pushed.version), reverse=True)


def previous_pushed_model(serving_model_dir: str, candidate_dir: str) -> PushedVersion | None:
    """The newest pushed version that is not a copy of the candidate, or None (first run)."""
    candidate = model_identity(candidate_dir)
    for pushed in pushed_versions(serving_model_dir):
        if candidate is None or model_identity(pushed.path) != candidate:
            return pushed
    return None
