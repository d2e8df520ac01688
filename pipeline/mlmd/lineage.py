"""An artifact's lineage: every execution upstream to the raw data and downstream to the pushed
models, as a graph in which each artifact and execution appears once."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

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

    def producing(artifact_ids: set[int]) -> Iterator[Edge]:
        for artifact, execution in db.producers(artifact_ids).items():
            yield artifact, execution, "output"

    def consuming(artifact_ids: set[int]) -> Iterator[Edge]:
        return _events(db.store.get_events_by_artifact_ids(sorted(artifact_ids)), "input")

    def read_by(execution_ids: set[int]) -> Iterator[Edge]:
        return _events(db.store.get_events_by_execution_ids(sorted(execution_ids)), "input")

    def written_by(execution_ids: set[int]) -> Iterator[Edge]:
        return _events(db.store.get_events_by_execution_ids(sorted(execution_ids)), "output")

    return {
        "artifact": _artifact_node(db, root),
        "upstream": _subgraph(db, *_walk(root.id, producing, read_by)),
        "downstream": _subgraph(db, *_walk(root.id, consuming, written_by)),
    }


# An event as a lineage edge: (artifact id, execution id, "input" | "output").
Edge = tuple[int, int, str]


def _events(events, direction: str) -> Iterator[Edge]:
    """The input (or output) events among `events`, as edges."""
    types = INPUT_EVENTS if direction == "input" else OUTPUT_EVENTS
    for event in events:
        if event.type in types:
            yield event.artifact_id, event.execution_id, direction


def _walk(
    root: int,
    to_executions: Callable[[set[int]], Iterable[Edge]],
    to_artifacts: Callable[[set[int]], Iterable[Edge]],
) -> tuple[set[int], set[int], set[Edge]]:
    """(artifacts, executions, edges) reached from the root artifact, alternating the two steps
    (artifacts to the executions that made or read them, executions to the artifacts they read
    or wrote), each record visited once."""
    artifacts, executions, edges = {root}, set(), set()
    frontier = {root}
    while frontier:
        new_executions = set()
        for edge in to_executions(frontier):
            edges.add(edge)
            if edge[1] not in executions:
                new_executions.add(edge[1])
        executions |= new_executions
        frontier = set()
        for edge in to_artifacts(new_executions) if new_executions else ():
            edges.add(edge)
            if edge[0] not in artifacts:
                artifacts.add(edge[0])
                frontier.add(edge[0])
    return artifacts, executions, edges


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
