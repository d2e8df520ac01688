"""Every use of TFX, tfx-bsl or Beam internals, in one place, checked against the installed stack.

The project changes a few things TFX 1.16 offers no hook for (how Transform writes and reads its
data, TFX's sdist for local Beam runs). Each such reach into a private name or module attribute
lives here, so that a TFX or Beam upgrade has one file to review. Importing this module checks
the installed versions against the ones these patches were written and tested for, and fails
with a message naming the package, both versions and what to do, instead of misbehaving later
inside a component.

Heavy modules (TFX's Transform executor, Beam's options) are imported by the functions that need
them, not at import time: the version check itself reads package metadata only.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any
from unittest import mock

# The distributions whose internals are used here, and the versions this file was written for
# (requirements.lock pins the same).
WRITTEN_FOR = {
    "tfx": "1.16.0",
    "tfx-bsl": "1.16.1",
    "tensorflow-transform": "1.16.0",
    "apache-beam": "2.59.0",
    "tensorflow-model-analysis": "0.47.1",
    "tensorflow": "2.16.2",
    "tf-keras": "2.16.0",
    "objsize": "0.7.1",
    "dill": "0.3.1.1",
}


class CompatError(ImportError):
    """The installed stack is not the one the patches in this module were written for."""


def check_versions(installed: Callable[[str], str] = metadata.version) -> None:
    """Raises CompatError when a package in WRITTEN_FOR is missing or at another version."""
    wrong = []
    for name, expected in WRITTEN_FOR.items():
        try:
            version = installed(name)
        except metadata.PackageNotFoundError:
            version = "not installed"
        if version != expected:
            wrong.append(f"{name} {version} (written for {expected})")
    if wrong:
        raise CompatError(
            "components.compat patches TFX and Beam internals for a pinned stack, and the "
            f"installed one differs: {'; '.join(wrong)}. Install the tested set with "
            "`bash setup.sh` (requirements.lock); to move to a new stack, review and update "
            "components/compat.py and its WRITTEN_FOR first."
        )


check_versions()


# --- Transform ------------------------------------------------------------------------------
# TFX's Transform executor builds its TransformProcessor by name inside Do(), with no hook to
# replace it, and drops a private passthrough-key column only in its own writer.


def transform_passthrough_key_column() -> str:
    """The internal key column TFX's Transform adds to RecordBatches when passthrough keys are
    configured; a writer of transformed examples must drop it."""
    from tfx.components.transform import executor as tfx_transform_executor

    return tfx_transform_executor._TRANSFORM_INTERNAL_FEATURE_FOR_KEY  # noqa: SLF001


def stock_transform_processor() -> type[Any]:
    """TFX's TransformProcessor class (to subclass), as it is before any swap."""
    from tfx.components.transform import executor as tfx_transform_executor

    return _STOCK.setdefault("TransformProcessor", tfx_transform_executor.TransformProcessor)


_STOCK: dict[str, Any] = {}


@contextlib.contextmanager
def transform_processor(factory: Callable[[], Any]) -> Iterator[None]:
    """While active, TFX's Transform executor builds its processor with `factory`."""
    from tfx.components.transform import executor as tfx_transform_executor

    stock_transform_processor()  # remembered before the module attribute changes
    with mock.patch.object(tfx_transform_executor, "TransformProcessor", factory):
        yield


# tf.Transform walks its graphs once per output where one walk would do, which on a wide table
# (one analyzer over every text column, so every output depends on most inputs) is outputs x
# graph (tensorflow-transform 1.16.0):
# - building the Beam pipeline and writing the transform graph, it fingerprints each analyzer
#   output: the input keys it depends on are found by testing every source placeholder against
#   every input's list of components (graph_tools._retrieve_source_keys: outputs x inputs x
#   sources);
# - each load of the transform graph (3 in Transform, 1 in the Trainer's export, 1 more for a
#   regression's label scale) walks the whole graph back from each of its outputs to find the
#   inputs it needs (saved_transform_io_v2._get_output_to_inputs_map), about 0.5 s of a 0.9 s
#   load at 80 columns.
# The same results: the keys tested against a set, and one walk that remembers each op's sources.


def _retrieve_source_keys_by_set(sourced_tensors, structured_inputs) -> set[str]:
    """graph_tools._retrieve_source_keys's result, with the sources in a set of references
    (Tensor.ref(): hashed and compared by identity, as the list's `in` compared them)."""
    from tensorflow_transform import graph_tools, tf_utils

    sources = graph_tools.retrieve_sources(
        [tensor.op for tensor in sourced_tensors], ignore_control_dependencies=True
    )
    references = {tf_utils.hashable_tensor_or_op(source) for source in sources}
    return {
        key
        for key, value in structured_inputs.items()
        if any(
            tf_utils.hashable_tensor_or_op(component) in references
            for component in graph_tools._decompose_tensor_or_op(value)  # noqa: SLF001
        )
    }


class _CycleInGraph(Exception):
    """A data edge cycle (TF1 while loops): the remembering walk leaves it to tft's own."""


def _placeholders_behind(op, memo: dict) -> frozenset:
    """The Placeholder ops `op` depends on through data inputs (graph_tools.retrieve_sources
    with ignore_control_dependencies, which returns their outputs), remembered per op in
    `memo` so that outputs sharing a graph walk it once."""
    stack, open_ops = [op], set()
    while stack:
        current = stack[-1]
        if current in memo:
            stack.pop()
            continue
        pending = [tensor.op for tensor in current.inputs if tensor.op not in memo]
        if pending and current not in open_ops:
            open_ops.add(current)
            stack.extend(pending)
            continue
        if pending:
            raise _CycleInGraph(current.name)
        stack.pop()
        open_ops.discard(current)
        found = {current} if current.type == "Placeholder" else set()
        for tensor in current.inputs:
            found.update(memo[tensor.op])
        memo[current] = frozenset(found)
    return memo[op]


def _output_to_inputs_map_remembered(output_signature) -> dict:
    """saved_transform_io_v2._get_output_to_inputs_map's result (per output name, the
    placeholder tensors it depends on, as an ObjectIdentitySet), from one walk of the graph."""
    from tensorflow.python.util import object_identity
    from tensorflow_transform.saved import saved_transform_io_v2

    memo: dict = {}
    result = {}
    try:
        for name, output in output_signature.items():
            placeholders: set = set()
            for component in saved_transform_io_v2._get_component_tensors(output):  # noqa: SLF001
                sink = saved_transform_io_v2._as_operation(component)  # noqa: SLF001
                placeholders.update(_placeholders_behind(sink, memo))
            result[name] = object_identity.ObjectIdentitySet(
                tensor for placeholder in placeholders for tensor in placeholder.outputs
            )
    except _CycleInGraph:
        return _STOCK["_get_output_to_inputs_map"](output_signature)
    return result


@contextlib.contextmanager
def transform_graph_walks_once() -> Iterator[None]:
    """While active, tf.Transform's fingerprints and transform graph loads walk its graphs once
    (in this process: a runner's SDK workers use tft's own, with the same results)."""
    from tensorflow_transform import graph_tools
    from tensorflow_transform.saved import saved_transform_io_v2

    _STOCK.setdefault(
        "_get_output_to_inputs_map",
        saved_transform_io_v2._get_output_to_inputs_map,  # noqa: SLF001
    )
    with (
        mock.patch.object(graph_tools, "_retrieve_source_keys", _retrieve_source_keys_by_set),
        mock.patch.object(
            saved_transform_io_v2, "_get_output_to_inputs_map", _output_to_inputs_map_remembered
        ),
    ):
        yield


# TFX's Transform executor inspects the preprocessing_fn three times before its Beam pipeline
# (tfx/components/transform/executor.py, TFX 1.16.0: get_analyze_input_columns in Transform()
# and again in _RunBeamImpl, get_transform_input_columns once), and each inspection traces the
# function anew (tensorflow_transform/inspect_preprocessing_fn.py calls
# impl_helper.trace_preprocessing_function without a temp dir); a trace costs about 0.5 s at 80
# columns. The inspections only read the traced graph, so one trace serves all three.


class _InspectionTraces:
    """impl_helper.trace_preprocessing_function for tft's inspections, each (function, specs,
    compat mode) traced once while the scope lasts; `take` hands a trace to a caller that
    changes it (tft's analysis graph builder clears its collection of analyzer outputs), which
    no caller sees afterwards."""

    def __init__(self, stock):
        self._stock = stock
        self._traced: dict = {}

    @staticmethod
    def _key(preprocessing_fn, input_specs, use_tf_compat_v1) -> tuple:
        return (
            id(preprocessing_fn),
            tuple(sorted((name, repr(spec)) for name, spec in input_specs.items())),
            use_tf_compat_v1,
        )

    def __call__(self, preprocessing_fn, input_specs, use_tf_compat_v1, base_temp_dir=None):
        if base_temp_dir is not None:
            return self._stock(preprocessing_fn, input_specs, use_tf_compat_v1, base_temp_dir)
        key = self._key(preprocessing_fn, input_specs, use_tf_compat_v1)
        if key not in self._traced:
            # The function is kept with its trace, so that its id is not reused meanwhile.
            traced = self._stock(preprocessing_fn, input_specs, use_tf_compat_v1)
            self._traced[key] = (preprocessing_fn, traced)
        return self._traced[key][1]

    def take(self, preprocessing_fn, input_specs, use_tf_compat_v1, base_temp_dir=None):
        if base_temp_dir is not None:
            return self._stock(preprocessing_fn, input_specs, use_tf_compat_v1, base_temp_dir)
        known = self._traced.pop(self._key(preprocessing_fn, input_specs, use_tf_compat_v1), None)
        if known is None:
            return self._stock(preprocessing_fn, input_specs, use_tf_compat_v1)
        return known[1]


@contextlib.contextmanager
def transform_inspections_traced_once() -> Iterator[None]:
    """While active, tft.get_analyze_input_columns and tft.get_transform_input_columns (what
    TFX's Transform executor calls) share one trace per preprocessing_fn and specs, and the
    executor's analyzer cache keys (analysis_graph_builder.get_analysis_cache_entry_keys, in
    its OptimizeRun, which builds the analysis graph and so clears the trace's analyzer
    outputs) take that trace over: the inspections after it trace again. Nothing else sees
    the shared traces."""
    import tensorflow_transform as tft
    from tensorflow_transform import impl_helper
    from tensorflow_transform.beam import analysis_graph_builder

    traces = _InspectionTraces(impl_helper.trace_preprocessing_function)

    def tracing_with(trace, inspect):
        @functools.wraps(inspect)
        def inspect_with_shared_trace(*args, **kwargs):
            with mock.patch.object(impl_helper, "trace_preprocessing_function", trace):
                return inspect(*args, **kwargs)

        return inspect_with_shared_trace

    with contextlib.ExitStack() as stack:
        for name in ("get_analyze_input_columns", "get_transform_input_columns"):
            stack.enter_context(
                mock.patch.object(tft, name, tracing_with(traces, getattr(tft, name)))
            )
        stack.enter_context(
            mock.patch.object(
                analysis_graph_builder,
                "get_analysis_cache_entry_keys",
                tracing_with(traces.take, analysis_graph_builder.get_analysis_cache_entry_keys),
            )
        )
        yield


def tfexample_record_parts(tfxio) -> tuple[Any, Any]:
    """(file pattern, schema) of a tfx_bsl TFExampleRecord, which keeps both private."""
    return tfxio._file_pattern, tfxio._schema  # noqa: SLF001


def tfexample_record_decoding_schema(tfxio):
    """The schema a tfx_bsl TFExampleRecord decodes with (its projection applied)."""
    return tfxio._GetSchemaForDecoding()  # noqa: SLF001


# --- The transform graph inside the serving SavedModel ---------------------------------------
# tft's public TransformFeaturesLayer is a tf_keras.Model: attached to a saved object, it is also
# serialized as a Keras model, and tf.saved_model.save traces its call again under AutoGraph for
# a Keras save signature (about 5 s of a 5.5 s export on the penguins). The layer's call is its
# SavedModelLoader's apply_transform_model; the loader's attributes (the loaded transform
# SavedModel: tables, assets) are what the layer tracks so that they are saved.


class TransformGraph:
    """The transform graph as a function of raw features, and the objects a SavedModel that
    calls it must track (assign `trackable` to an attribute of the saved object)."""

    def __init__(self, transform_savedmodel_dir: str):
        from tensorflow_transform.saved import saved_transform_io_v2

        with transform_graph_walks_once():
            self._loader = saved_transform_io_v2.SavedModelLoader(transform_savedmodel_dir)
        # tft's TransformFeaturesLayer tracks the same dict (output_wrapper.py, __init__): its
        # values include what apply_transform_model creates on first use.
        self.trackable = self._loader.__dict__

    def __call__(self, raw_features):
        return self._loader.apply_transform_model(raw_features)


# --- TFMA's Keras metrics -------------------------------------------------------------------
# TFMA updates its Keras metrics (accuracy, crossentropy, ...) eagerly, a batch at a time
# (tf_metric_wrapper._CompilableMetricsCombiner._process_batch; result() in extract_output).
# tf-keras wraps every metric's update_state and result in tf_convert with the caller's AutoGraph
# status, which outside any tf.function is "unspecified": AutoGraph source-converts them and
# every function they call, then runs
# the converted code eagerly, which computes what the plain code computes (AutoGraph only
# matters while tracing a graph). About 2 s of the penguins' Evaluator.


@contextlib.contextmanager
def tfma_keras_metrics_without_autograph() -> Iterator[None]:
    """While in the block, TFMA's eager metric updates and results run their Python code
    unconverted (in this process: a runner's separate SDK worker processes convert as before)."""
    from tensorflow.python.autograph.core import ag_ctx
    from tensorflow_model_analysis.metrics import tf_metric_wrapper

    combiner = tf_metric_wrapper._CompilableMetricsCombiner  # noqa: SLF001

    def unconverted_when_eager(method):
        @functools.wraps(method)
        def eager_method(self, accumulator):
            import tensorflow as tf

            if not tf.executing_eagerly():
                return method(self, accumulator)
            with ag_ctx.ControlStatusCtx(status=ag_ctx.Status.DISABLED):
                return method(self, accumulator)

        return eager_method

    # _process_batch: update_state per metric; extract_output: the last batch, then result().
    with contextlib.ExitStack() as stack:
        for name in ("_process_batch", "extract_output"):
            stack.enter_context(
                mock.patch.object(combiner, name, unconverted_when_eager(getattr(combiner, name)))
            )
        yield


@contextlib.contextmanager
def per_device_datasets_finished_by(finish: Callable[[Any], Any]) -> Iterator[None]:
    """While active, each per-device dataset of tf.distribute's MultiDeviceIterator (a generator
    over the host iterator and a prefetch of fixed size, one per device;
    tensorflow/python/data/ops/multi_device_iterator_ops.py, _create_device_dataset) is passed
    through `finish` before its iterator is made. These are new datasets with default options,
    which the options set on the host dataset do not reach (loop.train finishes them with
    components.ml.inputs.without_autotune_thread, as the host dataset is)."""
    from tensorflow.python.data.ops import multi_device_iterator_ops

    stock = multi_device_iterator_ops._create_device_dataset  # noqa: SLF001

    @functools.wraps(stock)
    def finished(*args, **kwargs):
        return finish(stock(*args, **kwargs))

    with mock.patch.object(multi_device_iterator_ops, "_create_device_dataset", finished):
        yield


# --- Beam dependencies of TFX's Beam executors ----------------------------------------------

# Runner names that run Beam on this machine, in this Python environment.
_LOCAL_RUNNERS = frozenset({"DirectRunner", "direct", "SwitchingDirectRunner"})


def runs_locally(beam_pipeline_args: list[str]) -> bool:
    """The DirectRunner, or any portable runner with the LOOPBACK environment (its SDK harness
    runs in this process)."""
    from apache_beam.options.pipeline_options import (
        PipelineOptions,
        PortableOptions,
        StandardOptions,
    )

    options = PipelineOptions(flags=beam_pipeline_args)
    runner = options.view_as(StandardOptions).runner
    loopback = options.view_as(PortableOptions).environment_type == "LOOPBACK"
    return runner is None or runner in _LOCAL_RUNNERS or loopback


@contextlib.contextmanager
def no_tfx_sdist_for_direct_runner() -> Iterator[None]:
    """While active, TFX's Beam executors skip packaging TFX when Beam runs on this machine, and
    package it once, not once per component, when it does not.

    With no --extra_package, --setup_file or container image in the Beam args, every TFX Beam
    executor (ExampleGen, StatisticsGen, Transform, Evaluator) copies TFX's whole installation
    into a temporary directory and runs `setup.py sdist` on it, about 2 s per component, so
    that remote workers can install TFX. The DirectRunner's workers are this process or its
    children in the same environment and never install it, nor do a portable runner's LOOPBACK
    workers (threads of this process). Other runners (SDK workers in other processes or
    containers, which install what is staged: pipeline/beam/boot.py) get TFX's sdist as TFX
    makes it, built once while the context is active and removed when it ends: TFX itself
    never removes it (tfx/utils/dependency_utils.py, build_ephemeral_package), so each
    component of a Flink or Spark run left about 49 MB in the temporary directory."""
    from tfx.utils import dependency_utils

    stock = dependency_utils.make_beam_dependency_flags
    build = dependency_utils.build_ephemeral_package
    built: list[str] = []

    def dependency_flags(beam_pipeline_args):
        if runs_locally(beam_pipeline_args):
            return beam_pipeline_args
        return stock(beam_pipeline_args)

    def build_once() -> str:
        if not built:
            built.append(build())
        return built[0]

    try:
        with (
            mock.patch.object(dependency_utils, "make_beam_dependency_flags", dependency_flags),
            mock.patch.object(dependency_utils, "build_ephemeral_package", build_once),
        ):
            yield
    finally:
        for sdist in built:
            _remove_tfx_build(sdist)


def _remove_tfx_build(sdist: str) -> None:
    """Removes the temporary directory TFX built its sdist in: `<mkdtemp>/build/tfx/dist/<sdist>`
    (dependency_utils.build_ephemeral_package); a path of another shape is left alone."""
    dist = os.path.dirname(sdist)
    tfx_dir = os.path.dirname(dist)
    build_dir = os.path.dirname(tfx_dir)
    shape = (os.path.basename(dist), os.path.basename(tfx_dir), os.path.basename(build_dir))
    if shape == ("dist", "tfx", "build"):
        shutil.rmtree(os.path.dirname(build_dir), ignore_errors=True)


# Beam's bookkeeping has costs that do not depend on the data. The first two were 4.6-5.3 s of a
# penguin run's 26-30 s of components; the other three, after them, 2.0-2.3 s of 17-19 s
# (benchmarks.fixed_cost, 2026-12-03):
# - Beam asks for a DoFn's state and timer specs (apache_beam/transforms/userstate.py,
#   get_dofn_specs) when its ParDo is built, validated and converted to the runner API, and
#   when each bundle's operations are built: 4 to 9 times per DoFn, 4,958 times in a penguin
#   run, 3.5-3.9 s. Each time, it reads the signature of every one of the DoFn's ~30 methods
#   with inspect.signature (apache_beam/transforms/core.py, get_function_args_defaults):
#   154,490 signatures. A plain function's argument names, kinds and defaults are fixed by its
#   code object and its defaults tuple, so they are read once per function and code and
#   defaults; anything else (a wrapper, a __signature__, a builtin, a callable object) is read
#   by Beam as before.
# - Beam's SDK worker weighs each value it caches (the side inputs: 169 in a penguin run) with
#   objsize (apache_beam/runners/worker/statecache.py, get_deep_size), which first collects the
#   globals of every loaded module (about 8,000) to exclude them: 1.1-1.4 s. The
#   excluded set is computed again only when the loaded modules change.
# - Pipeline.apply and Pipeline._infer_result_type (apache_beam/pipeline.py) read
#   options.view_as(TypeOptions).pipeline_type_check for every transform applied: 2,400 views in
#   a penguin run, each a new argparse parser over the pipeline's flags, 1.2 s. A view holds
#   nothing of its own (PipelineOptions.__setattr__ accepts only _flags, _all_options and
#   _visible_options; reads and writes go to the _all_options it shares with the options it
#   came from), so one view per options object serves every call while those three are the
#   same.
# - Beam's dill pickler (apache_beam/internal/dill_pickler.py) calls dill._trace(False) after
#   every dumps and loads, which sets the "dill" logger's level and so clears the cache of every
#   logger in the process, level unchanged or not: 8,700 times a penguin run. With the next
#   item, Beam's pickling (dumps and loads) took 3.2-3.8 s of a penguin run before and 2.4-2.9 s
#   after.
# - It compresses each pickle with bz2 at level 9 (about 160 us a call whatever the size, for
#   its 900 kB blocks): 3,679 calls in a penguin run for 884 distinct pickles (a DoFn is pickled
#   when its ParDo is built, converted to the runner API and its bundles set up). The same bytes
#   compress to the same bytes; the compressed pickles, which other processes may read, are
#   Beam's own.
# The same results as Beam's own, which tests/components/test_compat.py checks.

_SIGNATURE_OVERRIDES = frozenset({"__wrapped__", "__signature__", "_partialmethod"})


class _RememberedArguments:
    """core.get_function_args_defaults, remembered for plain functions and methods bound to one
    (the attributes inspect.signature reads for them: __code__, __defaults__ and, for a bound
    method, that its first argument is bound)."""

    def __init__(self, stock: Callable[[Any], tuple[list, list]]):
        import weakref

        self._stock = stock
        self._known: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __call__(self, f: Any) -> tuple[list, list]:
        import types

        bound = isinstance(f, types.MethodType)
        function = f.__func__ if bound else f
        if type(function) is not types.FunctionType or not _SIGNATURE_OVERRIDES.isdisjoint(
            function.__dict__
        ):
            return self._stock(f)
        code, defaults = function.__code__, function.__defaults__
        known = self._known.get(function)
        if known is None or known[0] is not code or known[1] is not defaults or known[2] != bound:
            known = (code, defaults, bound, self._stock(f))
            self._known[function] = known
        arguments, default_values = known[3]
        return list(arguments), list(default_values)


class _ModuleGlobalsExcluded:
    """statecache.get_deep_size: objsize's deep size with Beam's size, referents and filter
    functions, excluding what objsize excludes (None and every loaded module's globals); the
    module globals' ids are collected again when sys.modules holds other modules."""

    def __init__(self):
        import objsize
        from apache_beam.runners.worker import statecache

        self._settings = objsize.traverse.ObjSizeSettings(
            get_referents_func=statecache._get_referents_func,  # noqa: SLF001
            filter_func=statecache._filter_func,  # noqa: SLF001
            get_size_func=statecache._size_func,  # noqa: SLF001
            exclude_modules_globals=False,
        )
        self._modules: list = []
        self._excluded: frozenset = frozenset()

    def _module_globals(self) -> frozenset:
        import sys

        modules = list(sys.modules.values())
        if modules != self._modules:  # modules compare by identity
            ids = set()
            for module in modules:
                # objsize skips what has no __dict__ the same way.
                with contextlib.suppress(TypeError):
                    ids.add(id(vars(module)))
            self._modules, self._excluded = modules, frozenset(ids)
        return self._excluded

    def __call__(self, *objs: Any) -> int:
        import objsize

        context = objsize.traverse.TraversalContext(self._settings)
        context.exclude_set.update(self._module_globals())
        return context.get_deep_size(*objs)


def _type_options_view_remembered(stock: Callable[[Any, type], Any]) -> Callable[[Any, type], Any]:
    """PipelineOptions.view_as: for TypeOptions, the view made the first time for an options
    object, while its flags (a list or tuple, their values too) and its shared option values are
    the ones that view was made with; flags read from sys.argv (None) and every other view class
    as Beam makes them."""
    import weakref

    from apache_beam.options.pipeline_options import TypeOptions

    views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def view_as(options: Any, cls: type) -> Any:
        flags, shared = options._flags, options._all_options  # noqa: SLF001
        if cls is not TypeOptions or not isinstance(flags, list | tuple):
            return stock(options, cls)
        try:
            known = views.get(options)
        except TypeError:  # an options class that is not hashable: Beam's own every time
            return stock(options, cls)
        if known is None or known[0] is not flags or known[1] != flags or known[2] is not shared:
            known = (flags, type(flags)(flags), shared, stock(options, cls))
            views[options] = known
        return known[3]

    return view_as


def _dill_trace_when_changed(stock: Callable[[bool], None]) -> Callable[[bool], None]:
    """dill._trace: the "dill" logger's level set only when it is not already the one asked."""
    import logging

    log = logging.getLogger("dill")

    def trace(boolean: bool) -> None:
        if log.level != (logging.INFO if boolean else logging.WARN):
            stock(boolean)

    return trace


class _RememberedCompression:
    """The bz2 module as Beam's picklers use it, with compress's results remembered by their
    input bytes and level (inputs up to MAX_BYTES, MAX_TOTAL_BYTES of inputs in all, oldest
    forgotten first); decompress is bz2's."""

    MAX_BYTES = 1 << 20
    MAX_TOTAL_BYTES = 64 << 20

    def __init__(self) -> None:
        import bz2
        import threading

        self._bz2 = bz2
        self.decompress = bz2.decompress
        self._known: dict[tuple[bytes, int], bytes] = {}
        self._total = 0
        # Beam compresses outside its pickling lock, from whichever thread pickles.
        self._lock = threading.Lock()

    def compress(self, data: bytes, compresslevel: int = 9) -> bytes:
        if len(data) > self.MAX_BYTES:
            return self._bz2.compress(data, compresslevel)
        key = (bytes(data), compresslevel)
        compressed = self._known.get(key)
        if compressed is None:
            compressed = self._bz2.compress(data, compresslevel)
            with self._lock:
                if key not in self._known:
                    self._known[key] = compressed
                    self._total += len(key[0])
                while self._total > self.MAX_TOTAL_BYTES:
                    oldest = next(iter(self._known))
                    del self._known[oldest]
                    self._total -= len(oldest[0])
        return compressed


@contextlib.contextmanager
def beam_bookkeeping_remembered() -> Iterator[None]:
    """While active, Beam's DoFn signature reads, state cache weighing, TypeOptions views and
    pickle compression in this process remember what does not change between calls, and its
    pickler sets dill's logger level only when it changes (a runner's separate SDK worker
    processes do all of it as before); every result is Beam's."""
    import dill._dill
    from apache_beam.internal import dill_pickler
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.worker import statecache
    from apache_beam.transforms import core

    with (
        mock.patch.object(
            core,
            "get_function_args_defaults",
            _RememberedArguments(core.get_function_args_defaults),
        ),
        mock.patch.object(statecache, "get_deep_size", _ModuleGlobalsExcluded()),
        mock.patch.object(
            PipelineOptions,
            "view_as",
            _type_options_view_remembered(PipelineOptions.view_as),
        ),
        mock.patch.object(dill._dill, "_trace", _dill_trace_when_changed(dill._dill._trace)),
        mock.patch.object(dill_pickler, "bz2", _RememberedCompression()),
    ):
        yield


def beam_pipeline_args(executor) -> list[str]:
    """The Beam pipeline arguments a TFX Beam executor (BaseBeamExecutor) builds its pipeline
    with, which TFX keeps in a protected attribute and its own executors extend in Do() (the
    wheels of a module_file); TFX has no public setter."""
    return list(executor._beam_pipeline_args or [])  # noqa: SLF001


def set_beam_pipeline_args(executor, args: list[str]) -> None:
    executor._beam_pipeline_args = list(args)  # noqa: SLF001


# --- Keras ----------------------------------------------------------------------------------
# tf-keras builds its train and test functions in Model.make_train_function /
# make_test_function as tf.functions with AutoGraph on: with several steps per execution the
# steps run in `for _ in tf.range(steps)`, which needs AutoGraph, and AutoGraph then converts
# every function the step calls that is not marked (Keras's step and reduction helpers): seconds
# per process, traced twice for training. The functions below are those of tf-keras 2.16
# (tf_keras/src/engine/training.py, make_train_function and make_test_function, the branch
# without a cluster coordinator), with the loop written as a tf.while_loop, built without
# AutoGraph.


def keras_steps_function(model, step, counter, returns_metrics: bool = False):
    """A tf.function that runs `step` (the model's train_step or test_step, on one batch, in the
    strategy's replica context) model._steps_per_execution times on an iterator, each step
    counted in `counter` (model._train_counter / _test_counter), and returns the last step's
    outputs reduced across replicas, as tf-keras 2.16's multi-step function does.

    Keras traces the step twice per function: once before its loop (the loop needs the
    outputs' structure) and once inside it. returns_metrics: the step returns what Keras's own
    train_step and test_step return, the model's metric results after its update
    (Model.compute_metrics -> get_metrics_result); then every step runs inside the loop, traced
    once, and the results are read after it, which is what the last step would have returned."""
    import tensorflow as tf
    from tf_keras.src.engine import training as keras_training

    strategy = model.distribute_strategy

    def run_step(data):
        outputs = step(data)
        # The counter moves only if the step succeeded.
        with tf.control_dependencies(keras_training._minimum_control_deps(outputs)):
            counter.assign_add(1)
        return outputs

    def reduced(outputs):
        return keras_training.reduce_per_replica(
            outputs, strategy, reduction=model.distribute_reduction_method
        )

    def one_step(iterator):
        return reduced(strategy.run(run_step, args=(next(iterator),)))

    steps = model._steps_per_execution
    single = steps is None or int(steps.numpy()) == 1

    def steps_function(iterator):
        if single:
            return one_step(iterator)
        # Read at each call: Keras lowers it for an epoch's last, shorter execution.
        count = tf.cast(steps, tf.int32)
        if returns_metrics:

            def counted_step(done):
                with tf.control_dependencies(tf.nest.flatten(one_step(iterator))):
                    return done + 1

            (done,) = tf.while_loop(lambda done: done < count, counted_step, (tf.constant(0),))
            with tf.control_dependencies([done]):
                return reduced(strategy.run(model.get_metrics_result))
        outputs = one_step(iterator)
        _, outputs = tf.while_loop(
            lambda done, _: done < count,
            lambda done, _: (done + 1, one_step(iterator)),
            (tf.constant(1), outputs),
        )
        return outputs

    return tf.function(steps_function, reduce_retracing=True, autograph=False)


def keras_runs_own_functions(model) -> bool:
    """Whether keras_steps_function can stand in for the model's train/test function: not with
    a cluster coordinator (parameter-server training schedules Keras's own), eager runs, XLA
    (Keras wraps the step in a jit-compiled function) or autotuned steps per execution."""
    return not (
        model._cluster_coordinator
        or model.run_eagerly
        or model.jit_compile
        or model.autotune_steps_per_execution
    )
