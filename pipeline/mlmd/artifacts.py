"""Artifacts as rows: type, URI, size on disk, producer, properties."""

from __future__ import annotations

import os

from pipeline.mlmd import records
from pipeline.mlmd.errors import InspectError
from pipeline.mlmd.records import Store


def _disk_size(uri: str) -> int | None:
    if not os.path.exists(uri):
        return None
    if os.path.isfile(uri):
        return os.path.getsize(uri)
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(uri)
        for name in names
    )


def describe_artifact(db: Store, artifact, producer: int | None = None) -> dict:
    producer = producer if producer is not None else db.producer(artifact.id)
    component = None
    if producer is not None:
        component = db.node_of(db.executions_by_id([producer])[0])
    return {
        "artifact": artifact.id,
        "type": db.artifact_types.get(artifact.type_id, "?"),
        "uri": artifact.uri,
        "size_bytes": _disk_size(artifact.uri),
        "produced_by": {"execution": producer, "component": component},
        "properties": records.properties(artifact),
    }


def describe_artifacts(db: Store, run, type_name: str | None) -> list[dict]:
    ids = set()
    for execution in db.executions(run):
        ids.update(db.events(execution.id)[1])
    artifacts = db.artifacts_by_id(sorted(ids)) if ids else []
    producers = db.producers(ids)
    rows = [describe_artifact(db, a, producers.get(a.id)) for a in artifacts]
    if type_name:
        known = set(db.artifact_types.values())
        if type_name not in known:
            raise InspectError(f"unknown artifact type {type_name!r}; known: {sorted(known)}")
        rows = [r for r in rows if r["type"] == type_name]
    return sorted(rows, key=lambda r: r["artifact"])
