"""A large ML Metadata store made from a real one: its runs' records copied, run after run.

For measuring the inspection CLI at scale (benchmarks/mlmd_inspect.py) and testing it (tests):
`grow(source, target, runs)` copies the SQLite store `source` to `target`, then appends runs
until it holds `runs`, each a copy of one of the source's runs taken in turn (a run that
executed every component, then the cached reruns that followed it, ...). A copy has the same
nodes, execution types, states and properties, and the same events: the artifacts its executions
created are created anew (same URIs, so files still resolve), and the artifacts it reused (cached
outputs, a resolved baseline) point at the newest copy of what it reused.
"""

from __future__ import annotations

import shutil

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipeline.mlmd import records
from pipeline.mlmd.errors import InspectError


def _writable(path: str) -> metadata_store.MetadataStore:
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = path
    return metadata_store.MetadataStore(config)


def _template(db: records.Store, run) -> dict:
    """One run's records: executions with their node contexts and events."""
    executions = db.executions(run)
    events = db.store.get_events_by_execution_ids([e.id for e in executions])
    created = {
        e.artifact_id
        for e in events
        if e.type in records.OUTPUT_EVENTS
        and db.executions_by_id([e.execution_id])[0].last_known_state
        != metadata_store_pb2.Execution.CACHED
    }
    return {
        "run": run,
        "executions": executions,
        "contexts": {
            e.id: [c for c in db.store.get_contexts_by_execution(e.id) if c.id != run.id]
            for e in executions
        },
        "events": events,
        "created": created,
        "artifacts": {
            a.id: a for a in db.store.get_artifacts_by_id(sorted({e.artifact_id for e in events}))
        },
    }


def grow(source: str, target: str, runs: int, templates: list[int] | None = None) -> int:
    """Copies `source` to `target` and adds copies of its runs until `target` holds `runs`
    runs; returns how many were added. templates: the row numbers (1 = oldest) of the source
    runs to copy in turn; default all of them."""
    shutil.copyfile(source, target)
    store = _writable(target)
    db = records.Store(store, schema=records.TFX_SCHEMA)
    originals = db.runs()
    if not originals:
        raise InspectError(f"{source} has no pipeline runs to copy")
    rows = templates or list(range(1, len(originals) + 1))
    copied = [_template(db, originals[row - 1]) for row in rows]
    run_type = originals[0].type_id
    newest: dict[int, int] = {}  # source artifact id -> id of its newest copy
    added = 0
    while len(originals) + added < runs:
        template = copied[added % len(copied)]
        added += 1
        context = metadata_store_pb2.Context(
            type_id=run_type, name=f"{template['run'].name}-copy-{added:05d}"
        )
        [run_id] = store.put_contexts([context])
        fresh = []
        for artifact_id in sorted(template["created"]):
            copy = metadata_store_pb2.Artifact()
            copy.CopyFrom(template["artifacts"][artifact_id])
            copy.ClearField("id")
            copy.ClearField("create_time_since_epoch")
            copy.ClearField("last_update_time_since_epoch")
            fresh.append((artifact_id, copy))
        if fresh:
            for (artifact_id, _), new_id in zip(
                fresh, store.put_artifacts([copy for _, copy in fresh]), strict=True
            ):
                newest[artifact_id] = new_id
        copies = []
        for execution in template["executions"]:
            copy = metadata_store_pb2.Execution()
            copy.CopyFrom(execution)
            for field in ("id", "name", "create_time_since_epoch", "last_update_time_since_epoch"):
                copy.ClearField(field)
            copies.append(copy)
        execution_ids = dict(
            zip((e.id for e in template["executions"]), store.put_executions(copies), strict=True)
        )
        events = []
        for event in template["events"]:
            copy = metadata_store_pb2.Event()
            copy.CopyFrom(event)
            copy.ClearField("milliseconds_since_epoch")
            copy.execution_id = execution_ids[event.execution_id]
            copy.artifact_id = newest.get(event.artifact_id, event.artifact_id)
            events.append(copy)
        store.put_events(events)
        associations = [
            metadata_store_pb2.Association(context_id=context_id, execution_id=new_id)
            for old_id, new_id in execution_ids.items()
            for context_id in [run_id] + [c.id for c in template["contexts"][old_id]]
        ]
        attributions = [
            metadata_store_pb2.Attribution(context_id=run_id, artifact_id=artifact_id)
            for artifact_id in sorted({e.artifact_id for e in events})
        ]
        store.put_attributions_and_associations(attributions, associations)
    return added
