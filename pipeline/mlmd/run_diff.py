"""What differs between two runs' records: eval metrics, and per component its state, execution
properties and input/output artifacts. What differs in their data (schema, drift):
pipeline.mlmd.diff."""

from __future__ import annotations

from pipeline.mlmd import evaluation, runs
from pipeline.mlmd.records import Store


def run_metrics(db: Store, executions_by_component: dict) -> dict[str, float]:
    """Overall eval metrics of the model evaluation a run produced (or reused from the cache)."""
    evaluator = executions_by_component.get("Evaluator")
    if evaluator is None:
        return {}
    for artifact_id in evaluator["outputs"]:
        artifact = db.artifact(artifact_id)
        if db.artifact_types.get(artifact.type_id) == "ModelEvaluation":
            return {k: round(v, 6) for k, v in evaluation.overall_metrics(artifact.uri).items()}
    return {}


def diff_runs(db: Store, run_a, run_b) -> list[dict]:
    """What differs between two runs: eval metrics, and per component the state, execution
    properties (parameters, user code module paths, custom config) and input/output artifacts."""

    def by_component(run):
        result = {}
        for row in runs.describe_executions(db, run):
            row["input_uris"] = sorted(db.artifact(i).uri for i in row["inputs"])
            row["output_uris"] = sorted(db.artifact(o).uri for o in row["outputs"])
            result[row["component"]] = row
        return result

    a, b = by_component(run_a), by_component(run_b)
    changes = []
    metrics_a, metrics_b = run_metrics(db, a), run_metrics(db, b)
    for name in sorted(set(metrics_a) | set(metrics_b)):
        if metrics_a.get(name) != metrics_b.get(name):
            changes.append(
                {
                    "component": "Evaluator",
                    "change": f"metric {name}",
                    "a": metrics_a.get(name),
                    "b": metrics_b.get(name),
                    "kind": "metric",
                }
            )
    for component in sorted(set(a) | set(b)):
        left, right = a.get(component), b.get(component)
        if left is None or right is None:
            changes.append(
                {
                    "component": component,
                    "change": "only in one run",
                    "a": left and left["state"],
                    "b": right and right["state"],
                    "kind": "component",
                }
            )
            continue
        for field in ("state", "input_uris", "output_uris"):
            if left[field] != right[field]:
                changes.append(
                    {
                        "component": component,
                        "change": field,
                        "a": left[field],
                        "b": right[field],
                        "kind": "component",
                    }
                )
        keys = (set(left["properties"]) | set(right["properties"])) - db.run_specific_properties
        for key in sorted(keys):
            if left["properties"].get(key) != right["properties"].get(key):
                changes.append(
                    {
                        "component": component,
                        "change": f"property {key}",
                        "a": left["properties"].get(key),
                        "b": right["properties"].get(key),
                        "kind": "component",
                    }
                )
    return changes
