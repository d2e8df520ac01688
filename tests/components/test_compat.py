"""components.compat: the version check that guards every patch of TFX and Beam internals, and
the patches themselves."""

from __future__ import annotations

import os
from importlib import metadata
from unittest import mock

import pytest

from components import compat


def test_the_installed_stack_is_the_one_the_patches_were_written_for():
    compat.check_versions()  # what importing the module ran
    for name, version in compat.WRITTEN_FOR.items():
        assert metadata.version(name) == version


def test_another_version_fails_naming_the_package_and_what_to_do():
    versions = dict(compat.WRITTEN_FOR, tfx="1.17.0")
    with pytest.raises(compat.CompatError) as error:
        compat.check_versions(installed=versions.__getitem__)
    message = str(error.value)
    assert "tfx 1.17.0 (written for 1.16.0)" in message
    assert "tfx-bsl" not in message
    assert "bash setup.sh" in message and "components/compat.py" in message


def test_a_missing_package_fails_too():
    def installed(name):
        if name == "apache-beam":
            raise metadata.PackageNotFoundError(name)
        return compat.WRITTEN_FOR[name]

    with pytest.raises(compat.CompatError, match="apache-beam not installed"):
        compat.check_versions(installed=installed)


def test_transform_processor_swap_is_undone_after_the_block():
    from tfx.components.transform import executor as tfx_transform_executor

    stock = tfx_transform_executor.TransformProcessor
    with compat.transform_processor(dict):
        assert tfx_transform_executor.TransformProcessor is dict
    assert tfx_transform_executor.TransformProcessor is stock
    assert compat.stock_transform_processor() is stock


def test_tfx_packages_itself_only_for_runners_off_this_machine(monkeypatch):
    from tfx.dsl.components.base import base_beam_executor
    from tfx.utils import dependency_utils

    built = []

    def stock(args):
        built.append(list(args))
        return [*args, "--extra_package=tfx_ephemeral.tar.gz"]

    monkeypatch.setattr(dependency_utils, "make_beam_dependency_flags", stock)
    direct = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]
    flink = ["--runner=FlinkRunner", "--flink_master=localhost:8081"]
    with compat.no_tfx_sdist_for_direct_runner():
        # What every TFX Beam executor calls in its constructor.
        assert base_beam_executor.dependency_utils.make_beam_dependency_flags(direct) == direct
        assert dependency_utils.make_beam_dependency_flags([]) == []
        flink_args = dependency_utils.make_beam_dependency_flags(flink)
    assert flink_args == [*flink, "--extra_package=tfx_ephemeral.tar.gz"]
    assert built == [flink]
    # Outside the context TFX's own behaviour is back.
    assert dependency_utils.make_beam_dependency_flags(direct)[-1].startswith("--extra_package")


def test_tfx_s_sdist_for_runners_off_this_machine_is_built_once_and_removed_after(
    monkeypatch, tmp_path
):
    """TFX builds its sdist in a temporary directory it never removes (49 MB, about 2 s) for
    every Beam component of a Flink or Spark run: under the context the first build serves
    every component, and its directory is gone when the run ends."""
    import tempfile

    from tfx.utils import dependency_utils

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    flink = ["--runner=FlinkRunner", "--flink_master=localhost:8081"]
    spark = ["--runner=SparkRunner", "--spark_master_url=spark://localhost:7077"]
    before = set(os.listdir(tmp_path))
    with compat.no_tfx_sdist_for_direct_runner():
        first = dependency_utils.make_beam_dependency_flags(flink)
        second = dependency_utils.make_beam_dependency_flags(spark)
        sdist = first[-1].split("=", 1)[1]
        assert first == [*flink, f"--extra_package={sdist}"]
        assert second == [*spark, f"--extra_package={sdist}"]
        assert os.path.basename(sdist).startswith("tfx_ephemeral-")
        assert os.path.getsize(sdist) > 1_000_000
        made = set(os.listdir(tmp_path)) - before
        assert len(made) == 1, made
    assert not os.path.exists(sdist)
    assert set(os.listdir(tmp_path)) - before == set()
    # A flag that already names the dependencies builds nothing.
    with compat.no_tfx_sdist_for_direct_runner():
        staged = [*flink, "--extra_package=mine.tar.gz"]
        assert dependency_utils.make_beam_dependency_flags(staged) == staged
    assert set(os.listdir(tmp_path)) - before == set()


def _keras_metric_values(examples) -> dict:
    """TFMA's combiner for two Keras metrics, fed the examples eagerly as TFMA's Beam stage does."""
    import tf_keras
    from tensorflow_model_analysis.metrics import metric_util, tf_metric_wrapper

    computation = tf_metric_wrapper.tf_metric_computations(
        [
            tf_keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
            tf_keras.metrics.SparseCategoricalCrossentropy(name="crossentropy"),
        ]
    )[0]
    combiner = computation.combiner
    combiner.setup()
    accumulator = combiner.create_accumulator()
    for example in examples:
        accumulator = combiner.add_input(
            accumulator, metric_util.to_standard_metric_inputs(example)
        )
    accumulator = combiner.compact(accumulator)
    return {key.name: float(value) for key, value in combiner.extract_output(accumulator).items()}


def test_tfma_keras_metrics_without_autograph_compute_the_same_values():
    from tensorflow.python.autograph.impl import api as autograph_api
    from tensorflow_model_analysis.metrics import tf_metric_wrapper

    examples = [
        {"labels": [label], "predictions": probabilities, "example_weights": [1.0]}
        for label, probabilities in [
            (0, [0.7, 0.2, 0.1]),
            (1, [0.1, 0.8, 0.1]),
            (2, [0.5, 0.3, 0.2]),
            (2, [0.0, 0.1, 0.9]),
        ]
    ]
    converted = autograph_api.converted_call
    with mock.patch.object(autograph_api, "converted_call", side_effect=converted) as spy:
        with_autograph = _keras_metric_values(examples)
        assert spy.call_count > 0  # tf-keras converts update_state, even in eager code
        spy.reset_mock()
        stock_process_batch = tf_metric_wrapper._CompilableMetricsCombiner._process_batch
        with compat.tfma_keras_metrics_without_autograph():
            without_autograph = _keras_metric_values(examples)
        assert spy.call_count == 0
    assert tf_metric_wrapper._CompilableMetricsCombiner._process_batch is stock_process_batch
    assert without_autograph == with_autograph
    assert without_autograph["accuracy"] == 0.75


def _small_model(model_class, steps_per_execution: int):
    import tensorflow as tf

    keras = tf.keras
    keras.utils.set_random_seed(7)
    inputs = keras.Input(shape=(4,), name="x")
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    outputs = keras.layers.Dense(3, activation="softmax")(hidden)
    model = model_class(inputs=inputs, outputs=outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(0.05),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    return model


@pytest.mark.parametrize("strategy_name", ["default", "mirrored"])
def test_steps_without_autograph_train_and_evaluate_as_keras_s_own(strategy_name):
    """The built-in models' multi-step train/test functions (compat.keras_steps_function) give
    the weights, losses and metrics Keras's own give, with an epoch's last execution shorter
    than the others (7 steps, 3 a call) and under a distribution strategy; and they are used.
    The built-in model traces its train step once per trace of the function (every step in
    the loop, the metrics read after it); a model with its own compute_metrics twice, as Keras
    does (one step before the loop)."""
    import numpy as np
    import tensorflow as tf

    from components.ml import model as model_lib

    traces: dict[str, int] = {}

    class Counted(model_lib._StepsWithoutAutograph):
        def train_step(self, data):
            traces[self.name] = traces.get(self.name, 0) + 1
            return super().train_step(data)

    class OwnMetrics(Counted):
        def compute_metrics(self, x, y, y_pred, sample_weight):
            return super().compute_metrics(x, y, y_pred, sample_weight)

    rng = np.random.default_rng(0)
    features = rng.standard_normal((7 * 16, 4)).astype(np.float32)
    labels = (features[:, 0] > 0).astype(np.int64) + (features[:, 1] > 1)
    data = tf.data.Dataset.from_tensor_slices((features, labels)).batch(16)
    strategy = (
        tf.distribute.MirroredStrategy()
        if strategy_name == "mirrored"
        else tf.distribute.get_strategy()
    )
    results = {}
    for name, model_class in (
        ("keras", tf.keras.Model),
        ("ours", Counted),
        ("own_metrics", OwnMetrics),
    ):
        with strategy.scope():
            model = _small_model(model_class, steps_per_execution=3)
        history = model.fit(
            data.repeat(),
            epochs=2,
            steps_per_epoch=7,
            verbose=0,
            validation_data=data,
            validation_steps=7,
        )
        results[name] = (model.get_weights(), history.history)
        if name != "keras":
            assert model.train_function.__name__ == "steps_function"
            assert model.test_function.__name__ == "steps_function"
            # The train function is traced twice (its first call creates the optimizer's
            # variables, and tf.function traces again without creating them), with one or two
            # traces of the step in each.
            assert traces[model.name] == (2 if name == "ours" else 4), name
    keras_weights, keras_history = results["keras"]
    for name in ("ours", "own_metrics"):
        our_weights, our_history = results[name]
        for ours, theirs in zip(our_weights, keras_weights, strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)
        assert our_history.keys() == keras_history.keys()
        for key, values in keras_history.items():
            np.testing.assert_allclose(our_history[key], values, rtol=1e-6, atol=1e-6)


def _wide_preprocessing_fn(inputs):
    """Analyzers over one column, over a stack of several (dense and sparse), and over none."""
    import tensorflow as tf
    import tensorflow_transform as tft

    # The nullable column's value or 0, as [batch, 1] (a row holds at most one value here).
    padded = tf.pad(tf.sparse.to_dense(inputs["sparse_a"]), [[0, 0], [0, 1]])
    dense = tf.ensure_shape(padded[:, :1], [None, 1])
    stacked = tf.concat([inputs["dense_a"], inputs["dense_b"], dense], axis=1)
    return {
        "z": tft.scale_to_z_score(stacked, elementwise=True),
        "vocab": tft.compute_and_apply_vocabulary(inputs["text"]),
        "constant_mean": tf.fill([1], tft.mean(tf.constant([1.0, 2.0]))),
        "untouched": inputs["dense_c"],
        "sparse_twice": dense * 2.0,
    }


def _wide_specs() -> dict:
    """The inputs of _wide_preprocessing_fn, as tf.Transform's TypeSpecs."""
    import tensorflow as tf

    return {
        "dense_a": tf.TensorSpec([None, 1], tf.float32),
        "dense_b": tf.TensorSpec([None, 1], tf.float32),
        "dense_c": tf.TensorSpec([None, 1], tf.float32),
        "sparse_a": tf.SparseTensorSpec([None, 1], tf.float32),
        "text": tf.TensorSpec([None], tf.string),
    }


def test_transform_fingerprints_find_the_keys_tft_s_own_find(tmp_path):
    """Each analyzer output of a traced preprocessing_fn gets the same input keys and
    fingerprint from the set-based search as from tft's own."""
    from tensorflow_transform import graph_tools, impl_helper

    specs = _wide_specs()
    graph, inputs, _ = impl_helper.trace_preprocessing_function(
        _wide_preprocessing_fn, specs, use_tf_compat_v1=False, base_temp_dir=str(tmp_path)
    )
    stock = graph_tools.get_analyzers_fingerprint(graph, inputs)
    with compat.transform_graph_walks_once():
        once = graph_tools.get_analyzers_fingerprint(graph, inputs)
    assert graph_tools._retrieve_source_keys is not compat._retrieve_source_keys_by_set  # noqa: SLF001
    assert once == stock
    keys = {frozenset(fingerprint.source_keys) for fingerprint in stock.values()}
    assert keys == {frozenset({"dense_a", "dense_b", "sparse_a"}), frozenset({"text"}), frozenset()}


def test_transform_graph_loads_find_the_inputs_tft_s_own_find(tmp_path):
    """A written transform graph, loaded with and without the one-walk map: per output the same
    input placeholders, and the same transformed values from a partial feed."""
    import numpy as np
    import tensorflow as tf
    from tensorflow_transform.saved import saved_transform_io_v2
    from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

    from tests.components.conftest import analyze_and_transform

    raw = [
        {"dense_a": [1.0], "dense_b": [2.0], "dense_c": [3.0], "sparse_a": [4.0], "text": b"x"},
        {"dense_a": [5.0], "dense_b": [6.0], "dense_c": [7.0], "sparse_a": [], "text": b"y"},
    ]
    spec = {
        name: tf.io.FixedLenFeature([1], tf.float32) for name in ("dense_a", "dense_b", "dense_c")
    }
    spec["sparse_a"] = tf.io.VarLenFeature(tf.float32)
    spec["text"] = tf.io.FixedLenFeature([], tf.string)
    written = analyze_and_transform(
        tmp_path,
        raw,
        dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(spec)),
        _wide_preprocessing_fn,
    )
    directory = written["output"].transform_savedmodel_dir
    stock = saved_transform_io_v2.SavedModelLoader(directory)
    with compat.transform_graph_walks_once():
        once = saved_transform_io_v2.SavedModelLoader(directory)
    assert saved_transform_io_v2._get_output_to_inputs_map is not (  # noqa: SLF001
        compat._output_to_inputs_map_remembered  # noqa: SLF001
    )

    def names(loader):
        return {
            output: sorted(tensor.name for tensor in placeholders)
            for output, placeholders in loader._output_to_inputs_map.items()  # noqa: SLF001
        }

    assert names(once) == names(stock)

    # The function's inputs are named inputs, inputs_1, ...; the rest are captured values.
    def inputs(output):
        return [name for name in names(stock)[output] if name.startswith("inputs")]

    assert len(inputs("z")) == 5  # dense_a, dense_b and the sparse column's 3 tensors
    assert len(inputs("untouched")) == 1 and inputs("constant_mean") == []
    # Fed only dense_c: only the outputs that need nothing else come back, as from tft's own.
    feed = {"dense_c": tf.constant([[3.0], [7.0]])}
    stock_out = stock.apply_transform_model(feed)
    once_out = once.apply_transform_model(feed)
    assert sorted(once_out) == sorted(stock_out) == ["constant_mean", "untouched"]
    for name in stock_out:
        np.testing.assert_array_equal(once_out[name].numpy(), stock_out[name].numpy())


def test_a_graph_with_a_data_cycle_is_left_to_tft_s_own_walk():
    """TF1 while loops close a data cycle (NextIteration -> Merge): the one-walk map falls back
    to tft's walk, which handles it."""
    import tensorflow as tf
    from tensorflow_transform.saved import saved_transform_io_v2

    tf.compat.v1.disable_control_flow_v2()
    try:
        with tf.Graph().as_default():
            x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
            y = tf.compat.v1.placeholder(tf.float32, [None], name="y")
            _, looped = tf.compat.v1.while_loop(
                lambda i, value: i < 3, lambda i, value: (i + 1, value * 2.0), [0, x]
            )
            outputs = {"looped": looped, "y": y + 1.0}
            with pytest.raises(compat._CycleInGraph):  # noqa: SLF001
                compat._placeholders_behind(looped.op, {})  # noqa: SLF001
            with compat.transform_graph_walks_once():
                found = saved_transform_io_v2._get_output_to_inputs_map(outputs)  # noqa: SLF001
            assert {name: sorted(t.name for t in found[name]) for name in found} == {
                "looped": ["x:0"],
                "y": ["y:0"],
            }
    finally:
        tf.compat.v1.enable_control_flow_v2()


def test_tft_inspections_share_one_trace_and_find_the_same_columns():
    """What TFX's Transform executor asks before its pipeline (the analyzers' input columns
    twice, the transform's once) from one trace, with tft's own answers; outside the scope,
    and for another function, each call traces again."""
    import tensorflow_transform as tft
    from tensorflow_transform import impl_helper

    specs = _wide_specs()
    stock = (
        tft.get_analyze_input_columns(_wide_preprocessing_fn, specs),
        tft.get_transform_input_columns(_wide_preprocessing_fn, specs),
    )
    assert sorted(stock[0]) == ["dense_a", "dense_b", "sparse_a", "text"]
    assert sorted(stock[1]) == sorted(specs)

    def only_text(inputs):
        return {"vocab": tft.compute_and_apply_vocabulary(inputs["text"])}

    stock_trace = impl_helper.trace_preprocessing_function
    with mock.patch.object(impl_helper, "trace_preprocessing_function", wraps=stock_trace) as spy:
        with compat.transform_inspections_traced_once():
            shared = (
                tft.get_analyze_input_columns(_wide_preprocessing_fn, specs),
                tft.get_analyze_input_columns(_wide_preprocessing_fn, specs),
                tft.get_transform_input_columns(_wide_preprocessing_fn, specs),
            )
            assert tft.get_transform_input_columns(only_text, specs) == ["text"]
        assert spy.call_count == 2  # one per function
        tft.get_analyze_input_columns(_wide_preprocessing_fn, specs)
        assert spy.call_count == 3
    assert shared == (stock[0], stock[0], stock[1])
    assert impl_helper.trace_preprocessing_function is stock_trace


# --- Beam's bookkeeping (compat.beam_bookkeeping_remembered) --------------------------------


def test_tft_cache_keys_take_the_shared_trace_over():
    """TFX's OptimizeRun asks for the analyzer cache keys after the inspections: it takes their
    trace (its analysis graph builder clears the trace's analyzer outputs) and gives tft's own
    keys; an inspection after it traces again and still finds tft's columns."""
    import tensorflow_transform as tft
    from tensorflow_transform import impl_helper
    from tensorflow_transform.beam import analysis_graph_builder, analyzer_cache

    specs = _wide_specs()
    dataset_keys = [analyzer_cache.DatasetKey("train")]
    stock_keys = analysis_graph_builder.get_analysis_cache_entry_keys(
        _wide_preprocessing_fn, specs, dataset_keys, False
    )
    stock_columns = tft.get_analyze_input_columns(_wide_preprocessing_fn, specs)
    assert len(stock_keys) >= 2

    stock_trace = impl_helper.trace_preprocessing_function
    with (
        mock.patch.object(impl_helper, "trace_preprocessing_function", wraps=stock_trace) as spy,
        compat.transform_inspections_traced_once(),
    ):
        assert tft.get_analyze_input_columns(_wide_preprocessing_fn, specs) == stock_columns
        keys = analysis_graph_builder.get_analysis_cache_entry_keys(
            _wide_preprocessing_fn, specs, dataset_keys, False
        )
        assert spy.call_count == 1
        assert tft.get_analyze_input_columns(_wide_preprocessing_fn, specs) == stock_columns
        assert spy.call_count == 2
        # The next keys take the inspection's new trace; the keys after them trace their own.
        analysis_graph_builder.get_analysis_cache_entry_keys(
            _wide_preprocessing_fn, specs, dataset_keys, False
        )
        assert spy.call_count == 2
        analysis_graph_builder.get_analysis_cache_entry_keys(
            _wide_preprocessing_fn, specs, dataset_keys, False
        )
        assert spy.call_count == 3
    assert keys == stock_keys


def _with_defaults(element, timestamp=None, limit=3, *rest, keyword=1):
    return element


def _decorated(function):
    import functools

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)

    return wrapper


class _Callable:
    def __call__(self, element, factor=2):
        return element * factor


def _signature_subjects() -> list:
    import apache_beam as beam

    class Stateful(beam.DoFn):
        BUFFER = beam.transforms.userstate.BagStateSpec("buffer", beam.coders.VarIntCoder())
        FLUSH = beam.transforms.userstate.TimerSpec(
            "flush", beam.transforms.timeutil.TimeDomain.WATERMARK
        )

        def process(
            self, element, buffer=beam.DoFn.StateParam(BUFFER), timer=beam.DoFn.TimerParam(FLUSH)
        ):
            yield element

        @beam.transforms.userstate.on_timer(FLUSH)
        def flush(self, buffer=beam.DoFn.StateParam(BUFFER)):
            yield from buffer.read()

    return [
        _with_defaults,
        lambda element, side=beam.DoFn.SideInputParam: element,
        Stateful().process,
        Stateful().flush,
        _decorated(_with_defaults),
        _Callable(),
        str.strip,
        len,
        dict,
    ]


def test_remembered_dofn_signatures_are_beam_s_own():
    from apache_beam.transforms import core

    stock = core.get_function_args_defaults
    calls = []

    def counting(f):
        calls.append(f)
        return stock(f)

    remembered = compat._RememberedArguments(counting)  # noqa: SLF001
    subjects = _signature_subjects()
    for subject in subjects:
        expected = stock(subject)
        for _ in range(3):
            assert remembered(subject) == expected
    # Plain functions and their bound methods are read once; a wrapper (functools.wraps), a
    # callable object, a builtin and a class each time.
    assert len(calls) == 4 + 5 * 3
    # The lists are the caller's own.
    arguments, defaults = remembered(_with_defaults)
    arguments.append("changed"), defaults.clear()
    assert remembered(_with_defaults) == stock(_with_defaults)
    assert remembered(_with_defaults)[1] == [None, 3]


def test_remembered_dofn_signatures_follow_a_function_s_new_defaults_and_code():
    from apache_beam.transforms import core

    remembered = compat._RememberedArguments(core.get_function_args_defaults)  # noqa: SLF001

    def function(element, limit=3):
        return element

    assert remembered(function) == (["element", "limit"], [3])
    function.__defaults__ = (5,)
    assert remembered(function) == (["element", "limit"], [5])
    function.__code__ = (lambda row, a=1, b=2: row).__code__
    function.__defaults__ = (1, 2)
    assert remembered(function) == (["row", "a", "b"], [1, 2])


def test_dofn_specs_under_the_remembered_signatures_are_beam_s_own():
    import apache_beam as beam
    from apache_beam.transforms import userstate

    subjects = [type(subject.__self__)() for subject in _signature_subjects()[2:3]] + [
        beam.transforms.core.CallableWrapperDoFn(lambda x: x),
        beam.DoFn(),
    ]
    expected = [userstate.get_dofn_specs(dofn) for dofn in subjects]
    assert [len(states) + len(timers) for states, timers in expected] == [2, 0, 0]
    with compat.beam_bookkeeping_remembered():
        for _ in range(2):
            assert [userstate.get_dofn_specs(dofn) for dofn in subjects] == expected
    from apache_beam.transforms import core

    assert not isinstance(core.get_function_args_defaults, compat._RememberedArguments)  # noqa: SLF001


def test_state_cache_weighs_values_as_beam_does(monkeypatch):
    import json
    import sys
    import types

    import numpy as np
    from apache_beam.runners.worker import statecache

    stock = statecache.get_deep_size
    weigh = compat._ModuleGlobalsExcluded()  # noqa: SLF001
    values = [
        [1, 2, 3],
        {"a": "text" * 100, "b": (1.5, None)},
        np.arange(1000),
        {"globals": vars(json), "rows": list(range(50))},  # a module's globals: not counted
        b"bytes" * 10,
    ]
    for value in values:
        assert weigh(value) == stock(value)
    assert weigh(*values) == stock(*values)
    # A module loaded after the first call: its globals are excluded too.
    module = types.ModuleType("tests_compat_new_module")
    module.payload = list(range(10_000))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    value = {"globals": vars(module)}
    assert weigh(value) == stock(value) < 1_000
    monkeypatch.delitem(sys.modules, module.__name__)
    assert weigh(value) == stock(value) > 10_000


def test_type_options_views_are_remembered_per_options_and_behave_as_beam_s():
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TypeOptions

    stock = PipelineOptions.view_as
    made = []

    def counting(options, cls):
        made.append(cls)
        return stock(options, cls)

    view_as = compat._type_options_view_remembered(counting)  # noqa: SLF001

    class Unhashable(PipelineOptions):
        __hash__ = None  # type: ignore[assignment]

    unhashable = Unhashable(["--no_pipeline_type_check"])
    assert view_as(unhashable, TypeOptions).pipeline_type_check is False
    assert view_as(unhashable, TypeOptions).pipeline_type_check is False
    assert made == [TypeOptions, TypeOptions]
    made.clear()
    options = PipelineOptions(["--no_pipeline_type_check", "--runner=DirectRunner"])
    first = view_as(options, TypeOptions)
    assert view_as(options, TypeOptions) is first and made == [TypeOptions]
    assert first.pipeline_type_check is False
    assert stock(options, TypeOptions).pipeline_type_check is False
    # Writes through the remembered view reach the options and every other view, as Beam's do.
    first.pipeline_type_check = True
    assert stock(options, TypeOptions).pipeline_type_check is True
    assert options.get_all_options()["pipeline_type_check"] is True
    # Other view classes, other options objects and changed flags make a new view.
    assert view_as(options, StandardOptions).runner == "DirectRunner"
    other = PipelineOptions(["--runtime_type_check"])
    assert view_as(other, TypeOptions).runtime_type_check is True
    assert made == [TypeOptions, StandardOptions, TypeOptions]
    # (Beam keeps the value an option first had, whatever the flags say later.)
    options._flags.append("--runtime_type_check")  # noqa: SLF001
    again = view_as(options, TypeOptions)
    assert again is not first and made[-1] is TypeOptions and len(made) == 4
    assert again.runtime_type_check is stock(options, TypeOptions).runtime_type_check is False
    # Flags from sys.argv (None) are parsed each time, as Beam does.
    from_argv = PipelineOptions(None)
    view_as(from_argv, TypeOptions), view_as(from_argv, TypeOptions)
    assert made[-2:] == [TypeOptions, TypeOptions]


def test_dill_logger_level_is_set_only_when_it_changes(monkeypatch):
    import logging

    log = logging.getLogger("dill")
    monkeypatch.setattr(log, "level", log.level)
    levels = []

    def stock(boolean):
        levels.append(boolean)
        log.setLevel(logging.INFO if boolean else logging.WARN)

    trace = compat._dill_trace_when_changed(stock)  # noqa: SLF001
    log.setLevel(logging.WARN)
    trace(False), trace(False)
    assert levels == []
    trace(True)
    assert log.level == logging.INFO and levels == [True]
    trace(True), trace(False)
    assert log.level == logging.WARN and levels == [True, False]


def test_remembered_compression_gives_bz2_s_bytes_and_forgets_the_oldest(monkeypatch):
    import bz2

    compression = compat._RememberedCompression()  # noqa: SLF001
    monkeypatch.setattr(compression, "MAX_TOTAL_BYTES", 3_000)
    payloads = [bytes([n]) * 1_000 + b"pickle" for n in range(4)]
    for payload in payloads + payloads[::-1]:
        assert compression.compress(payload, compresslevel=9) == bz2.compress(payload, 9)
        assert compression.decompress(compression.compress(payload)) == payload
    assert compression.compress(payloads[0], 1) == bz2.compress(payloads[0], 1)
    assert sum(len(data) for data, _ in compression._known) <= 3_000  # noqa: SLF001
    # A payload over MAX_BYTES is compressed each time, never kept.
    large = b"x" * (compression.MAX_BYTES + 1)
    assert compression.decompress(compression.compress(large)) == large
    assert all(len(data) <= compression.MAX_BYTES for data, _ in compression._known)  # noqa: SLF001


def test_remembered_compression_from_many_threads_keeps_its_count():
    import bz2
    from concurrent.futures import ThreadPoolExecutor

    compression = compat._RememberedCompression()  # noqa: SLF001
    compression.MAX_TOTAL_BYTES = 20 * 600
    payloads = [bytes([n % 50]) * 600 for n in range(400)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(compression.compress, payloads))
    assert results == [bz2.compress(payload, 9) for payload in payloads]
    known = compression._known  # noqa: SLF001
    assert compression._total == sum(len(data) for data, _ in known) <= 20 * 600  # noqa: SLF001


def test_beam_pickles_under_the_bookkeeping_load_in_a_stock_process():
    """The pickles made under the patches are Beam's format: a process without them reads
    them (Beam's SDK workers elsewhere), and the patches are gone afterwards."""
    import bz2
    import subprocess
    import sys

    import dill._dill
    from apache_beam.internal import dill_pickler, pickler

    with compat.beam_bookkeeping_remembered():
        encoded = [pickler.dumps(_with_defaults), pickler.dumps({"rows": [1, 2, 3]})]
        encoded.append(pickler.dumps({"rows": [1, 2, 3]}))
        assert pickler.loads(encoded[0]) is _with_defaults
    assert encoded[1] == encoded[2]
    assert dill_pickler.bz2 is bz2 and dill._dill._trace.__module__ == "dill._dill"
    script = (
        "import sys; from apache_beam.internal import pickler; "
        "print([pickler.loads(line.strip()) for line in sys.stdin.read().split()][1:])"
    )
    read = subprocess.run(
        [sys.executable, "-c", script],
        input=b"\n".join(encoded),
        capture_output=True,
        check=True,
        timeout=120,
    )
    assert read.stdout.decode().strip() == "[{'rows': [1, 2, 3]}, {'rows': [1, 2, 3]}]"


def _device_datasets_made(make_iterator) -> tuple[list, list[int]]:
    """The per-device datasets tf.distribute's MultiDeviceIterator builds while make_iterator()
    runs (through whatever _create_device_dataset is current), and the values read back."""
    import tensorflow as tf
    from tensorflow.python.data.ops import multi_device_iterator_ops

    current = multi_device_iterator_ops._create_device_dataset
    made = []

    def spy(*args, **kwargs):
        made.append(current(*args, **kwargs))
        return made[-1]

    with mock.patch.object(multi_device_iterator_ops, "_create_device_dataset", spy):
        iterator = make_iterator(tf.data.Dataset.range(6).batch(2))
        values = [int(value) for batch in iterator for value in tf.reshape(batch, [-1])]
    return made, values


def test_per_device_datasets_run_without_autotune_and_give_the_same_elements():
    import tensorflow as tf
    from tensorflow.python.data.ops import multi_device_iterator_ops

    from components.ml import inputs

    stock = multi_device_iterator_ops._create_device_dataset
    strategy = tf.distribute.MirroredStrategy()

    def owned(dataset):
        return multi_device_iterator_ops.OwnedMultiDeviceIterator(dataset, ["/cpu:0"])

    def distributed(dataset):
        return iter(strategy.experimental_distribute_dataset(dataset))

    for make_iterator in (owned, distributed):
        before, values_before = _device_datasets_made(make_iterator)
        with compat.per_device_datasets_finished_by(inputs.without_autotune_thread):
            after, values_after = _device_datasets_made(make_iterator)
        assert before and after  # the path tf.distribute takes builds them here
        assert all(ds.options().autotune.enabled is not False for ds in before)
        assert all(ds.options().autotune.enabled is False for ds in after)
        assert values_after == values_before == [0, 1, 2, 3, 4, 5]
    assert multi_device_iterator_ops._create_device_dataset is stock
