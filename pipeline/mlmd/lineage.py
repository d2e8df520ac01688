"""An artifact's lineage: every execution upstream to the raw data and downstream to the pushed
models, as a graph in which each artifact and execution appears once."""

from __future__ import annotations

from pipeline.mlmd.records import INPUT_EVENTS, OUTPUT_EVENTS, State, Store


def _artifact_node(db: Store, artifact) -> dict:
    return {
        "artifact": artifact.id,
        "type": db.artifact_types.get(artifact.type_id, "?"),
        "uri": artifact.uri,
    }


def _execution_node(db: Store, execution) -> dict:
    run = db.run_of(execution)
    node = {
        "execution": execution.id,
        "component": db.node_of(execution),
        "state": State.Name(execution.last_known_state),
        "run": run.name if run is not None else None,
    }
    source = db.execution_properties(execution).get("input_base")
    if source:  # ExampleGen: the raw data directory
        node["source"] = source
    return node


def _subgraph(db: Store, artifact_ids: set[int], execution_ids: set[int], edges: set) -> dict:
    db.preload_contexts(execution_ids)
    executions = db.executions_by_id(sorted(execution_ids))
    return {
        "artifacts": [_artifact_node(db, a) for a in db.artifacts_by_id(sorted(artifact_ids))],
        "executions": [_execution_node(db, e) for e in executions],
        "edges": [{"artifact": a, "execution": e, "direction": d} for a, e, d in sorted(edges)],
    }


def lineage(db: Store, artifact_id: int) -> dict:
    """An artifact's lineage as a graph: each artifact and execution appears once, however many
    paths lead to it, so the output grows with the graph, not with the number of paths.

    upstream: every execution that produced the artifact or, transitively, one of its inputs
    (the producer being the execution that did the work, not the cached ones that reused it),
    to the raw data. downstream: every execution that consumed it or one of those executions'
    outputs, cached reuses included. Each part: {"artifacts", "executions", "edges"}; an edge is
    an event: {"artifact", "execution", "direction": "input" | "output"}."""
    root = db.artifact(artifact_id)

    up_artifacts, up_executions, up_edges = {root.id}, set(), set()
    frontier = {root.id}
    while frontier:
        producers = db.producers(frontier)
        new_executions = set()
        for artifact, execution in producers.items():
            up_edges.add((artifact, execution, "output"))
            if execution not in up_executions:
                new_executions.add(execution)
        up_executions |= new_executions
        frontier = set()
        if new_executions:
            for event in db.store.get_events_by_execution_ids(sorted(new_executions)):
                if event.type in INPUT_EVENTS:
                    up_edges.add((event.artifact_id, event.execution_id, "input"))
                    if event.artifact_id not in up_artifacts:
                        up_artifacts.add(event.artifact_id)
                        frontier.add(event.artifact_id)

    down_artifacts, down_executions, down_edges = {root.id}, set(), set()
    frontier = {root.id}
    while frontier:
        new_executions = set()
        for event in db.store.get_events_by_artifact_ids(sorted(frontier)):
            if event.type in INPUT_EVENTS:
                down_edges.add((event.artifact_id, event.execution_id, "input"))
                if event.execution_id not in down_executions:
                    new_executions.add(event.execution_id)
        down_executions |= new_executions
        frontier = set()
        if new_executions:
            for event in db.store.get_events_by_execution_ids(sorted(new_executions)):
                if event.type in OUTPUT_EVENTS:
                    down_edges.add((event.artifact_id, event.execution_id, "output"))
                    if event.artifact_id not in down_artifacts:
                        down_artifacts.add(event.artifact_id)
                        frontier.add(event.artifact_id)

    return {
        "artifact": _artifact_node(db, root),
        "upstream": _subgraph(db, up_artifacts, up_executions, up_edges),
        "downstream": _subgraph(db, down_artifacts, down_executions, down_edges),
    }


def topological_executions(graph: dict) -> list[dict]:
    """A lineage part's executions, each after the executions whose outputs it reads."""
    produced_by: dict[int, set[int]] = {}
    for edge in graph["edges"]:
        if edge["direction"] == "output":
            produced_by.setdefault(edge["artifact"], set()).add(edge["execution"])
    needs: dict[int, set[int]] = {e["execution"]: set() for e in graph["executions"]}
    for edge in graph["edges"]:
        if edge["direction"] == "input" and edge["execution"] in needs:
            needs[edge["execution"]] |= produced_by.get(edge["artifact"], set()) - {
                edge["execution"]
            }
    order: list[dict] = []
    done: set[int] = set()
    by_id = {e["execution"]: e for e in graph["executions"]}
    while len(order) < len(by_id):
        ready = sorted(i for i in by_id if i not in done and needs[i] <= done)
        if not ready:  # a cycle cannot happen in MLMD lineage; list the rest by id if it does
            ready = sorted(i for i in by_id if i not in done)
        for execution_id in ready:
            order.append(by_id[execution_id])
            done.add(execution_id)
    return order
