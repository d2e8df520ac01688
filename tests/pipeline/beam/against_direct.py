"""A cluster run's outputs against the DirectRunner's run of the same data (the session's
`penguin_runs` and `digits_run`): read from each run's MLMD store and artifacts, compared the
same way for Flink and Spark (tests/pipeline/beam/test_flink.py, test_flink_digits.py,
test_spark.py)."""

from __future__ import annotations

import glob
import math
import os


def store(path: str):
    from pipeline.mlmd import connection, records

    return records.Store(connection.open_store(path))


def outputs(path: str) -> dict[str, dict[str, str]]:
    """{component: {output type: uri}} of the newest execution of each component that ran."""
    db = store(path)
    found: dict[str, dict[str, str]] = {}
    for execution in sorted(db.store.get_executions(), key=lambda e: e.id):
        by_type = db.outputs_by_type(execution.id)
        if by_type:
            found[db.node_of(execution)] = {kind: a[0].uri for kind, a in by_type.items()}
    return found


def execution_windows(path: str, components: tuple[str, ...]) -> dict[str, list[tuple]]:
    """{component: [(state, (start ms, end ms)), ...]} of its executions in the store."""
    db = store(path)
    windows: dict[str, list[tuple]] = {}
    for execution in db.store.get_executions():
        name = db.node_of(execution)
        if name in components:
            window = (execution.create_time_since_epoch, execution.last_update_time_since_epoch)
            windows.setdefault(name, []).append((execution.last_known_state, window))
    return windows


def records(pattern: str) -> list[bytes]:
    import tensorflow as tf

    files = sorted(glob.glob(pattern))
    assert files, pattern
    return [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]


def example_key(serialized: bytes) -> tuple:
    """A record as a sorted tuple of its features, floats rounded (float32 sums in another order
    differ in the last bits)."""
    import tensorflow as tf

    features = tf.train.Example.FromString(serialized).features.feature
    key = []
    for name in sorted(features):
        feature = features[name]
        kind = feature.WhichOneof("kind")
        values = list(getattr(feature, kind).value) if kind else []
        if kind == "float_list":
            values = [round(v, 4) for v in values]
        key.append((name, tuple(values)))
    return tuple(key)


def split_records(examples_uri: str, split: str) -> list[bytes]:
    return records(os.path.join(examples_uri, f"Split-{split}", "*.gz"))


def split_example_counts(metadata: str) -> dict[str, int]:
    """The ExampleGen's split_example_counts (MLMD custom property of its Examples)."""
    import json

    from pipeline.mlmd import records as mlmd_records

    db = store(metadata)
    (execution,) = [e for e in db.store.get_executions() if db.node_of(e).endswith("ExampleGen")]
    (examples,) = db.outputs_by_type(execution.id)["Examples"]
    return json.loads(mlmd_records.custom_value(examples, "split_example_counts"))


def assert_same_splits_and_records(
    metadata: str,
    direct_metadata: str,
    components: tuple[tuple[str, str], ...] = (
        ("CsvExampleGen", "Examples"),
        ("Transform", "Examples"),
    ),
) -> None:
    """Every record of both splits of each (component, output type), as a multiset."""
    on_cluster, on_direct = outputs(metadata), outputs(direct_metadata)
    for component, kind in components:
        for split in ("train", "eval"):
            cluster_records = split_records(on_cluster[component][kind], split)
            direct_records = split_records(on_direct[component][kind], split)
            assert len(cluster_records) == len(direct_records), (component, split)
            assert sorted(map(example_key, cluster_records)) == sorted(
                map(example_key, direct_records)
            ), (component, split)


def vocabularies(transform_graph_uri: str) -> dict[str, list[str]]:
    """{asset file name: its lines} of a transform graph (the analyzers' vocabularies)."""
    import tensorflow_transform as tft

    output = tft.TFTransformOutput(transform_graph_uri)
    assets = os.path.join(transform_graph_uri, "transform_fn", "assets")
    names = sorted(os.listdir(assets))
    assert names, assets
    return {name: list(output.vocabulary_by_name(name)) for name in names}


def transformed_records(transform_graph_uri: str, serialized: list[bytes]) -> list[tuple]:
    """The transform graph applied to serialized tf.Examples (as serving and the Trainer
    apply it), each output row as a sorted tuple of (feature, value), in input order."""
    import tensorflow as tf
    import tensorflow_transform as tft

    output = tft.TFTransformOutput(transform_graph_uri)
    feature_spec = output.raw_feature_spec()
    rows: list[tuple] = []
    for start in range(0, len(serialized), 256):
        batch = tf.io.parse_example(tf.constant(serialized[start : start + 256]), feature_spec)
        transformed = output.transform_raw_features(batch)
        columns = {name: value.numpy().tolist() for name, value in sorted(transformed.items())}
        for index in range(len(serialized[start : start + 256])):
            rows.append(tuple((name, repr(values[index])) for name, values in columns.items()))
    return rows


def statistics(uri: str) -> dict:
    from tensorflow_data_validation import load_stats_binary

    found = {}
    for split in ("train", "eval"):
        stats = load_stats_binary(os.path.join(uri, f"Split-{split}", "FeatureStats.pb"))
        (dataset,) = stats.datasets
        found[(split, "num_examples")] = dataset.num_examples
        for feature in dataset.features:
            name = feature.path.step[0]
            if feature.HasField("num_stats"):
                num = feature.num_stats
                for field in ("mean", "std_dev", "min", "max", "num_zeros"):
                    found[(split, name, field)] = getattr(num, field)
                found[(split, name, "non_missing")] = num.common_stats.num_non_missing
            else:
                found[(split, name, "unique")] = feature.string_stats.unique
                found[(split, name, "avg_length")] = feature.string_stats.avg_length
                found[(split, name, "non_missing")] = (
                    feature.string_stats.common_stats.num_non_missing
                )
    return found


def different_statistics(metadata: str, direct_metadata: str) -> dict:
    """{key: (cluster, direct)} of every statistic that differs beyond 1e-6 relative."""
    on_cluster = statistics(outputs(metadata)["StatisticsGen"]["ExampleStatistics"])
    on_direct = statistics(outputs(direct_metadata)["StatisticsGen"]["ExampleStatistics"])
    assert on_cluster.keys() == on_direct.keys()
    return {
        k: (on_cluster[k], on_direct[k])
        for k in on_cluster
        if not math.isclose(on_cluster[k], on_direct[k], rel_tol=1e-6, abs_tol=1e-9)
    }


def metrics(metadata: str) -> dict:
    from pipeline.mlmd import evaluation

    return evaluation.overall_metrics(outputs(metadata)["Evaluator"]["ModelEvaluation"])


ACCURACY = "sparse_categorical_accuracy"
ACCURACY_TOLERANCE = 0.03  # training on a cluster is not bitwise the DirectRunner's


def same_model_quality(engine: str, on_cluster_metadata: str, direct_metadata: str) -> dict:
    """The Evaluator's figures on the cluster's run against the DirectRunner's: accuracy at
    least 0.9 and within ACCURACY_TOLERANCE of the DirectRunner's, the same eval examples.
    Returns the cluster run's metrics."""
    on_cluster = metrics(on_cluster_metadata)
    on_direct = metrics(direct_metadata)
    print(f"accuracy: {engine} {on_cluster[ACCURACY]:.4f}, DirectRunner {on_direct[ACCURACY]:.4f}")
    assert on_cluster[ACCURACY] >= 0.9, on_cluster
    assert abs(on_cluster[ACCURACY] - on_direct[ACCURACY]) <= ACCURACY_TOLERANCE, (
        on_cluster,
        on_direct,
    )
    assert on_cluster["example_count"] == on_direct["example_count"]
    return on_cluster
