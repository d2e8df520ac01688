"""A cluster run's outputs against the DirectRunner's run of the same data (the session's
`penguin_runs`): read from each run's MLMD store and artifacts, compared the same way for Flink
and Spark (tests/pipeline/beam/test_flink.py, test_spark.py)."""

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


def assert_same_splits_and_records(metadata: str, direct_metadata: str) -> None:
    """Every ExampleGen and Transform record of both splits, as a multiset."""
    on_cluster, on_direct = outputs(metadata), outputs(direct_metadata)
    for component, kind in (("CsvExampleGen", "Examples"), ("Transform", "Examples")):
        for split in ("train", "eval"):
            pattern = os.path.join("{}", f"Split-{split}", "*.gz")
            cluster_records = records(pattern.format(on_cluster[component][kind]))
            direct_records = records(pattern.format(on_direct[component][kind]))
            assert len(cluster_records) == len(direct_records), (component, split)
            assert sorted(map(example_key, cluster_records)) == sorted(
                map(example_key, direct_records)
            ), (component, split)


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
