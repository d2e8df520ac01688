"""The Tuner's result as the store records it (--tune): the HyperParameters artifact's JSON
(TFX's best_hyperparameters.txt, a KerasTuner HyperParameters config) and the custom properties
the project's Tuner executor sets on it (trials, best score, objective, workers, restarts)."""

from __future__ import annotations

import json
import os

from pipeline.mlmd import records
from pipeline.mlmd.errors import InspectError

BEST_FILE = "best_hyperparameters.txt"
RESULTS_FILE = "tuner_results.json"
TYPE = "HyperParameters"


def _read_json(path: str):
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)


def describe(artifact) -> dict:
    """{best, trials, best_score, objective, workers, restarts, uri} of one HyperParameters
    artifact; best: the best point's values from the artifact's JSON."""
    config = _read_json(os.path.join(artifact.uri, BEST_FILE)) or {}
    return {
        "uri": artifact.uri,
        "best": config.get("values", {}),
        "trials": records.custom_value(artifact, "trials"),
        "best_score": records.custom_value(artifact, "best_score"),
        "objective": records.custom_value(artifact, "objective"),
        "workers": records.custom_value(artifact, "tune_workers") or 1,
        # None: the workers were a launcher's job, whose operator restarts pods.
        "restarts": records.custom_value(artifact, "worker_restarts"),
        "launcher": records.custom_value(artifact, "tune_launcher") or "",
    }


def run_tuning(db: records.Store, run) -> dict:
    """The run's Tuner result (produced or reused from the cache) and the settings the Trainer
    recorded it trained with; InspectError when the run had no Tuner."""
    from pipeline.mlmd import artifacts

    if TYPE not in set(db.artifact_types.values()):
        raise InspectError(f"run {run.name} has no Tuner (run the pipeline with --tune)")
    rows = artifacts.describe_artifacts(db, run, TYPE)
    if not rows:
        raise InspectError(f"run {run.name} has no Tuner (run the pipeline with --tune)")
    [best] = db.artifacts_by_id([rows[-1]["artifact"]])
    result = describe(best)
    known = set(db.artifact_types.values())
    results = (
        artifacts.describe_artifacts(db, run, "TunerResults") if "TunerResults" in known else []
    )
    result["trial_scores"] = (
        _read_json(os.path.join(results[-1]["uri"], RESULTS_FILE)) or [] if results else []
    )
    models = artifacts.describe_artifacts(db, run, "Model") if "Model" in known else []
    for model in models:
        tuned = model["properties"].get("tuned_settings")
        if tuned:
            result["trainer_settings"] = json.loads(tuned)
    return result


def print_tuning(name: str, section: dict, out) -> None:
    out.write(f"run {name}: Tuner {section['uri']}\n")
    score = section.get("best_score")
    out.write(
        f"  trials: {section.get('trials')}, workers: {section.get('workers')}"
        f"{_where(section)}; best {section.get('objective')}: "
        f"{'none' if score is None else f'{score:.4f}'}\n"
    )
    for key, value in sorted(section["best"].items()):
        out.write(f"  best {key}: {value}\n")
    if section.get("trainer_settings"):
        out.write(f"  the Trainer trained with: {json.dumps(section['trainer_settings'])}\n")


def _where(section: dict) -> str:
    """Where the workers ran and how often one was restarted."""
    launcher = section.get("launcher") or ""
    if launcher in ("", "processes"):
        return f"{f' ({launcher})' if launcher else ''}, restarted: {section.get('restarts') or 0}"
    return f" (a {launcher} job: its operator's restarts are in the run's log)"
