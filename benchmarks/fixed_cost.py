"""Where the fixed cost of a small run goes: the penguin run, cold, with its phases timed.

    python -m benchmarks.fixed_cost [--output_root DIR] [--repeat N] [--run_local_args "FLAGS"]

Each round runs `pipeline/run_local.py`'s main() in a fresh process, into a fresh output
directory, with timers wrapped around the library functions whose cost does not grow with the
data (tracing, SavedModel saves and loads, AutoGraph conversion, Beam's pipeline runs), and
prints per component: seconds, and per phase seconds and calls. Phases nest (a SavedModel save
traces functions; AutoGraph runs inside a trace), so they do not add up to the component.

The timers are plain wall-clock wrappers (time.perf_counter) on a few dozen functions, so the
run is not noticeably slower than without them; recursive calls count once.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import functools
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

from benchmarks import common

# (module, attribute path, phase label): the functions timed. Attribute paths name a function or
# a method of a class in that module.
PHASES: list[tuple[str, str, str]] = [
    # tf.Transform
    (
        "tensorflow_transform.impl_helper",
        "trace_preprocessing_function",
        "tft: trace preprocessing_fn (analysis graph)",
    ),
    (
        "tensorflow_transform.impl_helper",
        "trace_and_write_v2_saved_model",
        "tft: trace + write transform SavedModel",
    ),
    (
        "tensorflow_transform.schema_inference",
        "get_traced_metadata_fn",
        "tft: trace metadata_fn (schema)",
    ),
    (
        "tensorflow_transform.inspect_preprocessing_fn",
        "get_analyze_input_columns",
        "tft: trace for analyze input columns",
    ),
    (
        "tensorflow_transform.inspect_preprocessing_fn",
        "get_transform_input_columns",
        "tft: trace for transform input columns",
    ),
    # Once per run of the project's preprocessing_fn body (its own module is reloaded by TFX,
    # which would drop a timer on it; this one lives in a module TFX leaves alone).
    ("components.ml.vocabularies", "column_vocabularies", "preprocessing_fn bodies run"),
    # Saving and loading
    ("tensorflow.python.saved_model.save", "save_and_return_nodes", "tf.saved_model.save"),
    ("tensorflow.python.saved_model.load", "load_partial", "tf.saved_model.load"),
    (
        "tensorflow_transform.saved.saved_transform_io_v2",
        "SavedModelLoader.__init__",
        "tft: load transform graph",
    ),
    # Tracing
    (
        "tensorflow.python.eager.polymorphic_function.tracing_compilation",
        "trace_function",
        "tf.function traces",
    ),
    # Beam
    ("apache_beam.pipeline", "Pipeline.run", "beam: Pipeline.run (build + execute)"),
    ("apache_beam.pipeline", "Pipeline.to_runner_api", "beam: to_runner_api"),
    # Beam's bookkeeping (compat.beam_bookkeeping_remembered): each DoFn's state and timer specs
    # (every method's signature read), and its SDK worker's state cache, which weighs each value
    # it caches (StateCache.get: the side input's load and its weighing).
    ("apache_beam.transforms.userstate", "get_dofn_specs", "beam: DoFn state/timer specs"),
    ("apache_beam.runners.worker.statecache", "StateCache.get", "beam: state cache get + weigh"),
    # Beam's pickling of DoFns, combiners and sources (at construction, to_runner_api and each
    # bundle's setup), and the TypeOptions views Pipeline.apply reads per transform
    # (compat.beam_bookkeeping_remembered makes one per pipeline: the calls counted here are the
    # views Beam actually built).
    ("apache_beam.internal.pickler", "dumps", "beam: pickle (dumps)"),
    ("apache_beam.internal.pickler", "loads", "beam: unpickle (loads)"),
    ("apache_beam.options.pipeline_options", "PipelineOptions.view_as", "beam: options views"),
    # The project's training
    ("components.training.loop", "_plan", "trainer: plan (count rows)"),
    ("components.training.loop", "_datasets", "trainer: datasets"),
    ("components.training.loop", "_build_model", "trainer: build model"),
    ("components.training.loop", "_fit", "trainer: fit"),
    ("components.training.loop", "_export", "trainer: export serving model"),
    # TFMA
    (
        "tensorflow_model_analysis.utils.model_util",
        "DoFnWithModels.setup",
        "tfma: model load in DoFn setup",
    ),
    (
        "tensorflow_model_analysis.api.model_eval_lib",
        "ExtractEvaluateAndWriteResults",
        "tfma: build its Beam graph",
    ),
    (
        "tensorflow_model_analysis.metrics.tf_metric_wrapper",
        "_CompilableMetricsCombiner._process_batch",
        "tfma: Keras metric updates",
    ),
    # AutoGraph, wherever it is entered (tf.function traces, tf_convert in eager code)
    ("tensorflow.python.autograph.impl.api", "converted_call", "autograph: converted_call"),
]
# Phases printed whatever their seconds (a count matters).
COUNTED = ("preprocessing_fn bodies run",)
# AutoGraph: the time spent in converted code, per top-level converted function.
AUTOGRAPH_LABEL = "autograph: converted calls"
_COMPONENT_RUNS = [
    ("tfx.orchestration.portable.python_executor_operator", "PythonExecutorOperator.run_executor"),
    ("tfx.orchestration.portable.beam_executor_operator", "BeamExecutorOperator.run_executor"),
]


@dataclasses.dataclass
class Tally:
    seconds: float = 0.0
    calls: int = 0


class Timers:
    """Seconds and calls per (component, phase); recursion counted once."""

    def __init__(self) -> None:
        self.component = "(outside components)"
        self.tallies: dict[tuple[str, str], Tally] = collections.defaultdict(Tally)
        self.autograph: dict[tuple[str, str], Tally] = collections.defaultdict(Tally)
        self._active: collections.Counter[str] = collections.Counter()

    def wrap(self, label: str, function: Callable) -> Callable:
        @functools.wraps(function)
        def timed(*args, **kwargs):
            if self._active[label]:
                return function(*args, **kwargs)
            self._active[label] += 1
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self._active[label] -= 1
                tally = self.tallies[(self.component, label)]
                tally.seconds += time.perf_counter() - started
                tally.calls += 1

        return timed

    def wrap_component(self, function: Callable) -> Callable:
        @functools.wraps(function)
        def run_executor(operator, execution_info, *args, **kwargs):
            previous = self.component
            self.component = execution_info.pipeline_node.node_info.id
            started = time.perf_counter()
            try:
                return function(operator, execution_info, *args, **kwargs)
            finally:
                tally = self.tallies[(self.component, "component (executor)")]
                tally.seconds += time.perf_counter() - started
                tally.calls += 1
                self.component = previous

        return run_executor

    def wrap_autograph_source(self, py_func_from_autograph: Callable) -> Callable:
        """autograph_util.py_func_from_autograph returns the handler that runs a tf.function's
        Python function through AutoGraph: time each handler call, by function name."""

        @functools.wraps(py_func_from_autograph)
        def patched(python_func, *args, **kwargs):
            handler = py_func_from_autograph(python_func, *args, **kwargs)
            name = getattr(python_func, "__qualname__", repr(python_func))
            return self.wrap(f"{AUTOGRAPH_LABEL}: {name}", handler)

        return patched

    def as_json(self) -> dict[str, Any]:
        out: dict[str, dict[str, list[float]]] = collections.defaultdict(dict)
        for (component, label), tally in self.tallies.items():
            out[component][label] = [round(tally.seconds, 3), tally.calls]
        return out


def _resolve(module_name: str, path: str) -> tuple[Any, str]:
    import importlib

    owner: Any = importlib.import_module(module_name)
    *parents, attribute = path.split(".")
    for name in parents:
        owner = getattr(owner, name)
    return owner, attribute


@contextlib.contextmanager
def timed_phases(timers: Timers) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for module_name, path, label in PHASES:
            owner, attribute = _resolve(module_name, path)
            stack.enter_context(
                mock.patch.object(owner, attribute, timers.wrap(label, getattr(owner, attribute)))
            )
        for module_name, path in _COMPONENT_RUNS:
            owner, attribute = _resolve(module_name, path)
            stack.enter_context(
                mock.patch.object(
                    owner, attribute, timers.wrap_component(getattr(owner, attribute))
                )
            )
        from tensorflow.python.eager.polymorphic_function import autograph_util

        stack.enter_context(
            mock.patch.object(
                autograph_util,
                "py_func_from_autograph",
                timers.wrap_autograph_source(autograph_util.py_func_from_autograph),
            )
        )
        yield


def _child(output_root: str, result_path: str, run_args: list[str]) -> None:
    """One timed run in this (fresh) process; writes the tallies as JSON."""
    sys.path.insert(0, os.path.join(common.PROJECT_ROOT, "pipeline"))
    timers = Timers()
    started = time.perf_counter()
    import run_local  # pipeline/run_local.py, as `python pipeline/run_local.py` imports it

    imported = time.perf_counter() - started
    with timed_phases(timers):
        code = run_local.main(["--output_root", output_root, *run_args])
    result = {
        "exit_code": code,
        "import_seconds": round(imported, 3),
        "process_seconds": round(time.perf_counter() - started, 3),
        "phases": timers.as_json(),
    }
    with open(result_path, "w") as handle:
        json.dump(result, handle, indent=1)
    # As run_local does: skip the interpreter's teardown (pipeline/local/console.py).
    sys.stdout.flush()
    os._exit(0)


def _print_round(result: dict[str, Any], wall: float, load: str) -> None:
    print(
        f"wall {wall:.1f} s (imports {result['import_seconds']:.1f} s), exit "
        f"{result['exit_code']}, load average {load}"
    )
    for component, phases in result["phases"].items():
        total = phases.get("component (executor)", [0.0, 0])[0]
        print(f"  {component}: {total:.2f} s")
        for label, (seconds, calls) in sorted(phases.items(), key=lambda kv: -kv[1][0]):
            if label != "component (executor)" and (seconds >= 0.05 or label in COUNTED):
                print(f"      {seconds:7.2f} s  {calls:4d}x  {label}")


def _load_average() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_root", default=None, help="default: a temporary directory")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", default=None, help="append each round's result to this file")
    parser.add_argument(
        "--run_local_args", default="", help="flags for run_local.py, in one string"
    )
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    run_args = shlex.split(args.run_local_args)
    if args.child:
        _child(args.child[0], args.child[1], run_args)
        return 0
    work = args.output_root or tempfile.mkdtemp(prefix="fixed-cost-")
    for round_index in range(args.repeat):
        output_root = common.fresh_output(os.path.join(work, f"round-{round_index}"))
        result_path = os.path.join(work, f"round-{round_index}.json")
        load_before = _load_average()
        # A fresh process with the Keras environment the pipeline's own runs get.
        wall = common.run_measured(
            [common.PYTHON, "-m", "benchmarks.fixed_cost", "--child", output_root, result_path]
            + ["--run_local_args", args.run_local_args],
            env=common.child_env(),
        ).seconds
        with open(result_path) as handle:
            result = json.load(handle)
        print(f"round {round_index + 1}/{args.repeat}:")
        _print_round(result, wall, f"{load_before} -> {_load_average()}")
        if args.json:
            with open(args.json, "a") as handle:
                handle.write(json.dumps({"wall": wall, **result}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
