"""A throwaway ML Metadata store written the way TFX's LocalDagRunner writes it, with the
artifact files the inspection CLI reads (statistics, schema, evaluation) written as TFX does.

Layout (tfx/orchestration/portable/mlmd): a `pipeline` context, a `pipeline_run` context per run,
a `node` context per component (`<pipeline>.<node id>`); executions typed by the component's
class path; INPUT/OUTPUT events whose path's first step is the channel key; a cached execution
records OUTPUT events for the artifacts it reused; the resolver's execution has no events.

Three runs of the penguin pipeline's shape: 1 executes everything (no baseline), 2 is a cached
rerun, 3 runs on changed data (bill lengths shifted, a new island, a `sex` feature added to the
schema) and is evaluated against run 1's model as its baseline.
"""

from __future__ import annotations

import json
import os

from google.protobuf import text_format
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2
from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

PIPELINE = "penguins-pipeline"
NODES = [
    ("CsvExampleGen", "tfx.components.example_gen.csv_example_gen.component.CsvExampleGen"),
    ("ImportSchemaGen", "tfx.components.schema_gen.import_schema_gen.component.ImportSchemaGen"),
    ("StatisticsGen", "tfx.components.statistics_gen.component.StatisticsGen"),
    ("ExampleValidator", "tfx.components.example_validator.component.ExampleValidator"),
    ("Transform", "tfx.components.transform.component.Transform"),
    ("Trainer", "tfx.components.trainer.component.Trainer"),
    ("baseline_model_resolver", "tfx.dsl.components.common.resolver.Resolver"),
    ("Evaluator", "tfx.components.evaluator.component.Evaluator"),
    ("Pusher", "tfx.components.pusher.component.Pusher"),
]
# node -> ([(input key, (producer node, output key))], [(output key, artifact type)])
WIRING = {
    "CsvExampleGen": ([], [("examples", "Examples")]),
    "ImportSchemaGen": ([], [("schema", "Schema")]),
    "StatisticsGen": (
        [("examples", ("CsvExampleGen", "examples"))],
        [("statistics", "ExampleStatistics")],
    ),
    "ExampleValidator": (
        [
            ("statistics", ("StatisticsGen", "statistics")),
            ("schema", ("ImportSchemaGen", "schema")),
        ],
        [("anomalies", "ExampleAnomalies")],
    ),
    "Transform": (
        [("examples", ("CsvExampleGen", "examples")), ("schema", ("ImportSchemaGen", "schema"))],
        [("transform_graph", "TransformGraph"), ("transformed_examples", "Examples")],
    ),
    "Trainer": (
        [
            ("examples", ("Transform", "transformed_examples")),
            ("transform_graph", ("Transform", "transform_graph")),
            ("schema", ("ImportSchemaGen", "schema")),
        ],
        [("model", "Model"), ("model_run", "ModelRun")],
    ),
    "baseline_model_resolver": ([], []),
    "Evaluator": (
        [("examples", ("CsvExampleGen", "examples")), ("model", ("Trainer", "model"))],
        [("evaluation", "ModelEvaluation"), ("blessing", "ModelBlessing")],
    ),
    "Pusher": (
        [("model", ("Trainer", "model")), ("model_blessing", ("Evaluator", "blessing"))],
        [("pushed_model", "PushedModel")],
    ),
}
ISLANDS_V1 = {"Biscoe": 120, "Dream": 90, "Torgersen": 40}
ISLANDS_V2 = {"Biscoe": 60, "Dream": 150, "Torgersen": 40, "Atlantis": 10}


def _numeric(
    name: str, counts: list[int], low: float, width: float
) -> statistics_pb2.FeatureNameStatistics:
    feature = statistics_pb2.FeatureNameStatistics(type=statistics_pb2.FeatureNameStatistics.FLOAT)
    feature.path.step.append(name)
    total = sum(counts)
    centres = [low + width * (i + 0.5) for i in range(len(counts))]
    mean = sum(c * x for c, x in zip(counts, centres, strict=True)) / total
    stats = feature.num_stats
    stats.common_stats.num_non_missing = total
    stats.mean = mean
    stats.std_dev = (
        sum(c * (x - mean) ** 2 for c, x in zip(counts, centres, strict=True)) / total
    ) ** 0.5
    stats.min, stats.max = low, low + width * len(counts)
    histogram = stats.histograms.add(type=statistics_pb2.Histogram.STANDARD)
    for i, count in enumerate(counts):
        histogram.buckets.add(
            low_value=low + width * i, high_value=low + width * (i + 1), sample_count=count
        )
    return feature


def _categorical(name: str, counts: dict[str, int]) -> statistics_pb2.FeatureNameStatistics:
    feature = statistics_pb2.FeatureNameStatistics(type=statistics_pb2.FeatureNameStatistics.STRING)
    feature.path.step.append(name)
    stats = feature.string_stats
    stats.common_stats.num_non_missing = sum(counts.values())
    stats.unique = len(counts)
    ranked = sorted(counts.items(), key=lambda item: -item[1])
    for rank, (value, count) in enumerate(ranked):
        stats.top_values.add(value=value, frequency=count)
        stats.rank_histogram.buckets.add(
            low_rank=rank, high_rank=rank, label=value, sample_count=count
        )
    return feature


def statistics(shifted: bool) -> statistics_pb2.DatasetFeatureStatisticsList:
    bills = [5, 20, 60, 80, 60, 20, 5] if not shifted else [0, 2, 10, 40, 80, 80, 38]
    islands = ISLANDS_V2 if shifted else ISLANDS_V1
    stats = statistics_pb2.DatasetFeatureStatisticsList()
    dataset = stats.datasets.add(num_examples=sum(islands.values()))
    dataset.features.append(_numeric("bill_length_mm", bills, 32.0, 4.0))
    dataset.features.append(_categorical("island", islands))
    return stats


def schema(changed: bool) -> schema_pb2.Schema:
    text = """
        feature { name: "bill_length_mm" type: FLOAT presence { min_fraction: 1.0 } }
        feature { name: "island" type: BYTES domain: "island" presence { min_fraction: 1.0 } }
        string_domain { name: "island" value: "Biscoe" value: "Dream" value: "Torgersen" }
    """
    if changed:
        text = """
            feature { name: "bill_length_mm" type: FLOAT presence { min_fraction: 0.9 } }
            feature { name: "island" type: BYTES domain: "island" presence { min_fraction: 1.0 } }
            feature { name: "sex" type: BYTES }
            string_domain { name: "island" value: "Atlantis" value: "Biscoe" value: "Dream"
                            value: "Torgersen" }
        """
    return text_format.Parse(text, schema_pb2.Schema())


def _write_records(path: str, records: list[bytes]) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)


def write_evaluation(uri: str, candidate: dict, baseline: dict | None, ok: bool) -> None:
    """An Evaluator output directory as TFMA writes it: eval_config.json, metrics and
    validations TFRecords of TFMA's own protos."""
    from tensorflow_model_analysis.proto import metrics_for_slice_pb2, validation_result_pb2

    os.makedirs(uri, exist_ok=True)
    model_specs = (
        [{"name": "candidate"}, {"name": "baseline", "isBaseline": True}] if baseline else [{}]
    )
    threshold = {"valueThreshold": {"lowerBound": 0.9}}
    if baseline:
        threshold["changeThreshold"] = {"absolute": -1e-10, "direction": "HIGHER_IS_BETTER"}
    config = {
        "evalConfig": {
            "modelSpecs": model_specs,
            "slicingSpecs": [{}],
            "metricsSpecs": [
                {
                    "metrics": [
                        {"className": "ExampleCount"},
                        {"className": "SparseCategoricalAccuracy", "threshold": threshold},
                    ]
                }
            ],
        },
        "version": "0.47.1",
    }
    with open(os.path.join(uri, "eval_config.json"), "w") as handle:
        json.dump(config, handle)
    record = metrics_for_slice_pb2.MetricsForSlice()
    candidate_name = "candidate" if baseline else ""
    for name, value in candidate.items():
        entry = record.metric_keys_and_values.add()
        entry.key.name, entry.key.model_name = name, candidate_name
        entry.value.double_value.value = value
    for name, value in (baseline or {}).items():
        entry = record.metric_keys_and_values.add()
        entry.key.name, entry.key.model_name = name, "baseline"
        entry.value.double_value.value = value
        diff = record.metric_keys_and_values.add()
        diff.key.name, diff.key.model_name, diff.key.is_diff = name, "candidate", True
        diff.value.double_value.value = candidate[name] - value
    _write_records(
        os.path.join(uri, "metrics-00000-of-00001.tfrecord"), [record.SerializeToString()]
    )
    validation = validation_result_pb2.ValidationResult(validation_ok=ok)
    if not ok:
        failed = validation.metric_validations_per_slice.add()
        failure = failed.failures.add()
        failure.metric_key.name = "sparse_categorical_accuracy"
        failure.metric_value.double_value.value = candidate["sparse_categorical_accuracy"]
        failure.metric_threshold.value_threshold.lower_bound.value = 0.9
        failure.message = "value below the lower bound"
    _write_records(os.path.join(uri, "validations.tfrecord"), [validation.SerializeToString()])


class TfxRecorder:
    def __init__(self, path: str, root: str):
        config = metadata_store_pb2.ConnectionConfig()
        config.sqlite.filename_uri = path
        self.store = metadata_store.MetadataStore(config)
        self.root = root
        self.pipeline = self._context("pipeline", PIPELINE)
        self.node_contexts = {
            node: self._context("node", f"{PIPELINE}.{node}") for node, _ in NODES
        }
        self.types = {
            node: self.store.put_execution_type(metadata_store_pb2.ExecutionType(name=type_name))
            for node, type_name in NODES
        }

    def _context(self, type_name: str, name: str) -> metadata_store_pb2.Context:
        type_id = self.store.put_context_type(metadata_store_pb2.ContextType(name=type_name))
        context = metadata_store_pb2.Context(type_id=type_id, name=name)
        [context.id] = self.store.put_contexts([context])
        return context

    def _artifact(self, type_name: str, uri: str, properties: dict) -> int:
        type_id = self.store.put_artifact_type(metadata_store_pb2.ArtifactType(name=type_name))
        artifact = metadata_store_pb2.Artifact(
            type_id=type_id, uri=uri, state=metadata_store_pb2.Artifact.LIVE
        )
        for key, value in properties.items():
            field = "int_value" if isinstance(value, int) else "string_value"
            setattr(artifact.custom_properties[key], field, value)
        [artifact_id] = self.store.put_artifacts([artifact])
        return artifact_id

    def execute(
        self, run_name: str, state, properties: dict, outputs: dict, inputs: dict, node: str
    ) -> int:
        """One execution of `node` in run `run_name`; inputs/outputs: {key: artifact id}."""
        run = self.store.get_context_by_type_and_name("pipeline_run", run_name) or self._context(
            "pipeline_run", run_name
        )
        execution = metadata_store_pb2.Execution(type_id=self.types[node], last_known_state=state)
        for key, value in properties.items():
            execution.custom_properties[key].string_value = value
        pairs = []
        for kind, artifacts in (
            (metadata_store_pb2.Event.INPUT, inputs),
            (metadata_store_pb2.Event.OUTPUT, outputs),
        ):
            for key, artifact_id in artifacts.items():
                event = metadata_store_pb2.Event(type=kind)
                event.path.steps.add().key = key
                event.path.steps.add().index = 0
                pairs.append((self.store.get_artifacts_by_id([artifact_id])[0], event))
        execution_id, _, _ = self.store.put_execution(
            execution, pairs, [self.pipeline, run, self.node_contexts[node]]
        )
        return execution_id


def _write_artifact_files(type_name: str, uri: str, shifted: bool) -> None:
    os.makedirs(uri, exist_ok=True)
    if type_name == "ExampleStatistics":
        for split in ("train", "eval"):
            os.makedirs(os.path.join(uri, f"Split-{split}"), exist_ok=True)
            with open(os.path.join(uri, f"Split-{split}", "FeatureStats.pb"), "wb") as handle:
                handle.write(statistics(shifted).SerializeToString())
    elif type_name == "Schema":
        with open(os.path.join(uri, "schema.pbtxt"), "w") as handle:
            handle.write(text_format.MessageToString(schema(shifted)))


def record_runs(path: str, root: str) -> dict:
    """Writes the three runs; returns {run name: {node: {"execution", "outputs": {key: id}}}}."""
    recorder = TfxRecorder(path, root)
    runs: dict[str, dict] = {}
    metrics = {
        "run-1": {"sparse_categorical_accuracy": 0.95, "example_count": 90.0},
        "run-3": {"sparse_categorical_accuracy": 0.97, "example_count": 95.0},
    }
    for run_name, mode in (("run-1", "fresh"), ("run-2", "cached"), ("run-3", "shifted")):
        done: dict[str, dict] = {}
        previous = runs.get("run-1")
        for node, _ in NODES:
            inputs_spec, outputs_spec = WIRING[node]
            inputs = {key: done[src]["outputs"][out] for key, (src, out) in inputs_spec}
            cached = mode == "cached"
            properties = {}
            if node == "CsvExampleGen":
                properties["input_base"] = "/data/penguins" + ("-v2" if mode == "shifted" else "")
            if node == "Trainer":
                properties["run_fn"] = "components.training.trainer.run_fn"
            if node == "baseline_model_resolver":
                execution_id = recorder.execute(
                    run_name, metadata_store_pb2.Execution.COMPLETE, {}, {}, {}, node
                )
                done[node] = {"execution": execution_id, "outputs": {}}
                continue
            if node == "Evaluator" and mode == "shifted":
                inputs["baseline_model"] = previous["Trainer"]["outputs"]["model"]
            if cached:
                outputs = previous[node]["outputs"]
                state = metadata_store_pb2.Execution.CACHED
            else:
                state = metadata_store_pb2.Execution.COMPLETE
                outputs = {}
                execution_tag = f"{run_name}-{node}"
                for key, type_name in outputs_spec:
                    uri = os.path.join(root, node, key, execution_tag)
                    props: dict = {}
                    if type_name == "ModelBlessing":
                        props = {
                            "blessed": 1,
                            "current_model": "model",
                            "current_model_id": inputs["model"],
                        }
                        if "baseline_model" in inputs:
                            props.update(
                                baseline_model="baseline",
                                baseline_model_id=inputs["baseline_model"],
                            )
                    if type_name == "PushedModel":
                        props = {
                            "pushed": 1,
                            "pushed_destination": os.path.join(root, "serving", run_name),
                        }
                    _write_artifact_files(type_name, uri, mode == "shifted")
                    if type_name == "ModelEvaluation":
                        baseline = metrics["run-1"] if mode == "shifted" else None
                        write_evaluation(uri, metrics[run_name], baseline, ok=True)
                    outputs[key] = recorder._artifact(type_name, uri, props)
            execution_id = recorder.execute(run_name, state, properties, outputs, inputs, node)
            done[node] = {"execution": execution_id, "outputs": outputs}
        runs[run_name] = done
    return runs
