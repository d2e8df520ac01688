"""Runs and executions as rows: a run's status and times, its component executions, and where
a cached execution's outputs come from."""

from __future__ import annotations

import datetime

from pipeline.mlmd.records import State, Store


def _time(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="seconds")


def run_status(states: list[str]) -> str:
    if "FAILED" in states:
        return "FAILED"
    if any(s in ("RUNNING", "NEW", "UNKNOWN") for s in states):
        return "RUNNING"
    return "COMPLETE"


def describe_run(db: Store, run, row: int) -> dict:
    executions = db.executions(run)
    states = [State.Name(e.last_known_state) for e in executions]
    times = [db.times(e) for e in executions]
    return {
        "row": row,
        "run": run.name,
        "start": _time(min(t[0] for t in times)) if times else "",
        "end": _time(max(t[1] for t in times)) if times else "",
        "status": run_status(states),
        "executed": states.count("COMPLETE"),
        "cached": states.count("CACHED"),
        "failed": states.count("FAILED"),
    }


def describe_runs(db: Store) -> list[dict]:
    return [describe_run(db, run, index) for index, run in enumerate(db.runs(), start=1)]


def describe_executions(db: Store, run) -> list[dict]:
    rows = []
    for execution in db.executions(run):
        inputs, outputs = db.events(execution.id)
        start, end = db.times(execution)
        rows.append(
            {
                "execution": execution.id,
                "component": db.node_of(execution),
                "state": State.Name(execution.last_known_state),
                "seconds": round((end - start) / 1000, 1),
                "inputs": inputs,
                "outputs": outputs,
                "properties": db.execution_properties(execution),
            }
        )
    return sorted(rows, key=lambda r: r["execution"])


def cache_sources(db: Store, executions: list[dict]) -> dict[int, dict]:
    """{cached execution id: where its outputs come from}: the execution that produced them, its
    run (id and row number) and how long it took. Rows as describe_executions returns them."""
    cached = [e for e in executions if e["state"] == "CACHED" and e["outputs"]]
    producers = db.producers(a for e in cached for a in e["outputs"])
    sources = {}
    for row in cached:
        producer_ids = {producers[a] for a in row["outputs"] if a in producers}
        producer_ids.discard(row["execution"])
        if not producer_ids:
            continue
        [producer] = db.executions_by_id([min(producer_ids)])
        run = db.run_of(producer)
        start, end = db.times(producer)
        sources[row["execution"]] = {
            "execution": producer.id,
            "run": run.name if run is not None else None,
            "row": db.row_of(run) if run is not None and run in db.runs() else None,
            "seconds": round((end - start) / 1000, 1),
        }
    return sources
