"""A user's module_file: what it adds to a warm rerun, and what it costs here against TFX.

    python -m benchmarks.user_module [--repeats 5] [--work_dir DIR] [--reference_pipeline]

1. Warm rerun: `pipeline/run_local.py --module_file examples/penguin_hook.py` against the same
   rerun without --module_file (each output root run once cold first, untimed), every component
   from the cache, each run a fresh process, the two alternating --repeats times. Target: the
   medians within 0.5 s. A warm rerun with the module pays pipeline.user_code's remembered check
   (the digest of the module's syntax tree and of the check's inputs, looked up in
   user_code_checks.json: no import, no trace) and finds the staged directory in place.

2. Handling the module file, TFX 1.16 against this project, on TFX's own penguin example module
   (tfx/examples/penguin/penguin_utils_keras.py of the installed tfx, copied alone into a folder
   as benchmarks.penguin_vs_tfx_example runs it). TFX's functions are called directly, each side
   in fresh processes that have imported TensorFlow first (the pipeline's process has):
   - TFX: at every pipeline compile, UserModuleFilePipDependency.resolve calls
     udf_utils.package_user_module_file (a `setup.py bdist_wheel` of the module's folder) once
     per component that takes the module_file; at run time each executor that loads a function
     from it installs the wheel with `pip install --target` into a new temporary directory
     (udf_utils.TempPipInstallContext / install_to_temp_directory). Cold: an empty pip cache
     (PIP_CACHE_DIR); warm: the same cache again.
   - Ours: pipeline.user_code.check (cold: parse, import, signatures, the preprocessing_fn traced
     on the schema; warm: the remembered check), stage (cold: copied under the pipeline root;
     warm: found there) and components.user_code.activate in each component that runs it.
   Per pipeline run: TFX's builds x the components that take the module (Transform and Trainer
   in TFX's penguin pipeline; the Tuner too with tuning on), installs x the installs its
   executors do (TFX_INSTALLS, counted from the example's log with --reference_pipeline), against
   ours check + stage + activate x the same components. A cold TFX run builds and installs like a
   warm one (nothing of it is cached), except for pip's cache.

--reference_pipeline also runs TFX's penguin example once, cold (about 3 minutes,
benchmarks.penguin_vs_tfx_example's reference), and reads from its log how long each wheel build
and each install took inside the pipeline.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import common

PROJECT_ROOT = common.PROJECT_ROOT
PYTHON = common.PYTHON
RUN_LOCAL = os.path.join(PROJECT_ROOT, "pipeline", "run_local.py")
HOOK_MODULE = os.path.join("examples", "penguin_hook.py")
TARGET_SECONDS = 0.5
TFX_MODULE = "tfx.examples.penguin.penguin_utils_keras"
# TFX's penguin pipeline (tuning off, as benchmarks.penguin_vs_tfx_example runs it): the
# components that take module_file, each building its own wheel at compile time.
TFX_BUILDS = {"Transform": 1, "Trainer": 1}
# pip installs of the wheel per executor run: Transform's TempPipInstallContext around its Beam
# pipeline and one per function it loads from the module (preprocessing_fn and the optional
# stats_options_updater_fn, each through import_utils.import_func_from_module's own
# TempPipInstallContext), the Trainer's one for run_fn. --reference_pipeline counts them.
TFX_INSTALLS = {"Transform": 3, "Trainer": 1}
# Ours: components whose executor activates the staged module for penguin_utils_keras
# (preprocessing_fn: Transform; run_fn: Trainer).
OUR_COMPONENTS = ("Transform", "Trainer")

# A schema of TFX's penguin example data (penguins_processed.csv) for our check's trace.
PENGUIN_SCHEMA = "".join(
    f'feature {{ name: "{name}" type: {kind} presence {{ min_fraction: 1.0 min_count: 1 }} '
    "shape { dim { size: 1 } } }\n"
    for name, kind in (
        ("species", "INT"),
        ("culmen_length_mm", "FLOAT"),
        ("culmen_depth_mm", "FLOAT"),
        ("flipper_length_mm", "FLOAT"),
        ("body_mass_g", "FLOAT"),
    )
)


def _spread(values: list[float], digits: int = 2) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


# --- 1. the warm rerun ---------------------------------------------------------------------


def _run_local(output_root: str, with_module: bool, log_path: str) -> common.ProcessResult:
    command = [PYTHON, RUN_LOCAL, "--output_root", output_root]
    if with_module:
        command += ["--module_file", HOOK_MODULE]
    return common.run_measured(command, env=common.child_env(), log_path=log_path)


def _all_cached(stdout: str) -> bool:
    return bool(re.search(r"finished in [\d.]+s: 0 component\(s\) executed", stdout))


def measure_warm(work_dir: str, repeats: int) -> dict[str, dict[str, list[float]]]:
    """{"with"|"without": {"wall": [...], "cpu": [...]}} of the warm reruns."""
    roots = {side: os.path.join(work_dir, side) for side in ("with", "without")}
    os.makedirs(work_dir, exist_ok=True)
    for side, root in roots.items():
        common.fresh_output(root)
        print(f"  cold run {side} --module_file (untimed) ...", flush=True)
        _run_local(root, side == "with", os.path.join(work_dir, f"{side}-cold.log"))
    results: dict[str, dict[str, list[float]]] = {side: {"wall": [], "cpu": []} for side in roots}
    for attempt in range(repeats):
        # Alternating which side goes first: a load change on the shared machine hits both.
        order = ("with", "without") if attempt % 2 == 0 else ("without", "with")
        line = []
        for side in order:
            log_path = os.path.join(work_dir, f"{side}-warm-{attempt + 1}.log")
            result = _run_local(roots[side], side == "with", log_path)
            if not _all_cached(result.stdout):
                raise RuntimeError(f"warm rerun {side} --module_file ran a component: {log_path}")
            results[side]["wall"].append(result.seconds)
            results[side]["cpu"].append(result.cpu_seconds)
            line.append(f"{side} {result.seconds:.2f} s ({result.cpu_seconds:.2f} s CPU)")
        print(f"  repeat {attempt + 1}: " + ", ".join(line), flush=True)
    return results


def warm_rows(results: dict[str, dict[str, list[float]]]) -> list[common.Row]:
    wall = {side: statistics.median(v["wall"]) for side, v in results.items()}
    cpu = {side: statistics.median(v["cpu"]) for side, v in results.items()}
    n = len(results["with"]["wall"])
    return [
        common.Row(
            "penguin warm rerun with --module_file examples/penguin_hook.py vs without",
            wall["with"],
            wall["without"],
            "s",
            note=f"medians of {n} alternating fresh processes; spread with "
            f"{_spread(results['with']['wall'])} s, without {_spread(results['without']['wall'])}"
            f" s; CPU {cpu['with']:.2f} vs {cpu['without']:.2f} s",
        ),
        common.Row(
            "  the difference (median with - median without)",
            wall["with"] - wall["without"],
            None,
            "s",
            TARGET_SECONDS,
            higher_is_better=False,
            note=f"CPU: {cpu['with'] - cpu['without']:+.2f} s",
        ),
    ]


# --- 2. TFX's wheel against the staged module ----------------------------------------------


def _tfx_child(module_path: str, pipeline_root: str) -> dict[str, float]:
    """In this (fresh) process: one wheel build and one executor's install, TFX's functions."""
    import tensorflow  # noqa: F401 (the pipeline's process has it; not timed)
    from tfx.components.util import udf_utils

    started = time.perf_counter()
    wheel, _ = udf_utils.package_user_module_file("Transform", module_path, pipeline_root)
    build = time.perf_counter() - started
    started = time.perf_counter()
    with udf_utils.TempPipInstallContext([wheel]) as context:
        installed = context.temp_directory
    install = time.perf_counter() - started
    assert installed and os.path.isfile(os.path.join(installed, os.path.basename(module_path)))
    return {"build": build, "install": install}


def _ours_child(
    module_path: str, pipeline_root: str, cache_dir: str, schema_path: str
) -> dict[str, float]:
    """In this (fresh) process: check, stage and one activate per component, ours."""
    import tensorflow  # noqa: F401 (the pipeline's process has it; not timed)

    from components import user_code as runtime
    from pipeline import user_code

    choice = user_code.UserCodeChoice(module_file=module_path)
    started = time.perf_counter()
    user = user_code.check(
        choice,
        label_key="species",
        task="classification",
        schema_path=schema_path,
        is_images=False,
        image_size=32,
        cache_dir=cache_dir,
    )
    check = time.perf_counter() - started
    assert user.preprocessing_fn and user.run_fn, user
    started = time.perf_counter()
    user = user_code.stage(user, pipeline_root)
    stage = time.perf_counter() - started
    started = time.perf_counter()
    for _ in OUR_COMPONENTS:
        runtime.activate(user.module)
    activate = (time.perf_counter() - started) / len(OUR_COMPONENTS)
    runtime.load_function(user.preprocessing_fn)
    runtime.load_function(user.run_fn)
    return {"check": check, "stage": stage, "activate": activate}


def _child(side: str, *args: str, env: dict) -> dict[str, float]:
    result = subprocess.run(
        [PYTHON, "-m", "benchmarks.user_module", "--child", side, *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=PROJECT_ROOT,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{side} child failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _tfx_module_folder(work_dir: str) -> str:
    """TFX's penguin_utils_keras.py alone in a folder (TFX wheels every .py file of it)."""
    import importlib.util

    spec = importlib.util.find_spec(TFX_MODULE)  # located, not imported (all of TFX)
    assert spec and spec.origin, TFX_MODULE
    folder = os.path.join(work_dir, "module")
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, os.path.basename(spec.origin))
    shutil.copy(spec.origin, target)
    return target


@dataclasses.dataclass
class Handling:
    """Seconds per step, each list one fresh process each (cold first)."""

    tfx_cold: dict[str, float]
    tfx_warm: list[dict[str, float]]
    ours_cold: dict[str, float]
    ours_warm: list[dict[str, float]]

    @staticmethod
    def tfx_total(step: dict[str, float], builds: dict, installs: dict) -> float:
        return step["build"] * sum(builds.values()) + step["install"] * sum(installs.values())

    @staticmethod
    def ours_total(step: dict[str, float]) -> float:
        return step["check"] + step["stage"] + step["activate"] * len(OUR_COMPONENTS)


def measure_handling(work_dir: str, repeats: int) -> Handling:
    os.makedirs(work_dir, exist_ok=True)
    module = _tfx_module_folder(work_dir)
    schema = os.path.join(work_dir, "schema.pbtxt")
    with open(schema, "w", encoding="utf-8") as handle:
        handle.write(PENGUIN_SCHEMA)
    tmp = os.path.join(work_dir, "tmp")
    pip_cache = common.fresh_output(os.path.join(work_dir, "pip-cache"))
    env = dict(common.child_env(), TMPDIR=tmp, PIP_CACHE_DIR=pip_cache)
    tfx_root = common.fresh_output(os.path.join(work_dir, "tfx-root"))
    ours_root = common.fresh_output(os.path.join(work_dir, "ours-root"))
    ours_cache = common.fresh_output(os.path.join(work_dir, "ours-checks"))
    common.fresh_output(tmp)
    os.makedirs(tmp)
    tfx: list[dict[str, float]] = []
    ours: list[dict[str, float]] = []
    for attempt in range(1 + repeats):
        tfx.append(_child("tfx", module, tfx_root, env=env))
        ours.append(_child("ours", module, ours_root, ours_cache, schema, env=env))
        phase = "cold" if attempt == 0 else f"warm {attempt}"
        print(
            f"  {phase}: TFX build {tfx[-1]['build']:.2f} s, install {tfx[-1]['install']:.2f} s;"
            f" ours check {ours[-1]['check']:.3f} s, stage {ours[-1]['stage']:.4f} s, "
            f"activate {ours[-1]['activate'] * 1000:.2f} ms",
            flush=True,
        )
    shutil.rmtree(tmp, ignore_errors=True)  # TFX's build and install directories
    return Handling(tfx[0], tfx[1:], ours[0], ours[1:])


def handling_rows(
    handling: Handling, builds: dict | None = None, installs: dict | None = None
) -> list[common.Row]:
    builds, installs = builds or TFX_BUILDS, installs or TFX_INSTALLS
    counts = (
        f"TFX: {sum(builds.values())} builds ({', '.join(builds)}) + "
        f"{sum(installs.values())} installs ("
        + ", ".join(f"{name} {n}" for name, n in installs.items())
        + f"); ours: check + stage + {len(OUR_COMPONENTS)} activations"
    )
    rows = []
    for phase, tfx_steps, ours_steps in (
        ("cold", [handling.tfx_cold], [handling.ours_cold]),
        ("warm", handling.tfx_warm, handling.ours_warm),
    ):
        tfx_totals = [Handling.tfx_total(s, builds, installs) for s in tfx_steps]
        ours_totals = [Handling.ours_total(s) for s in ours_steps]
        build = statistics.median(s["build"] for s in tfx_steps)
        install = statistics.median(s["install"] for s in tfx_steps)
        check = statistics.median(s["check"] for s in ours_steps)
        note = (
            f"TFX build {build:.2f} s, install {install:.2f} s each; ours check {check:.3f} s, "
            f"stage {statistics.median(s['stage'] for s in ours_steps) * 1000:.1f} ms, activate "
            f"{statistics.median(s['activate'] for s in ours_steps) * 1000:.2f} ms"
        )
        if len(tfx_totals) > 1:
            note += (
                f"; median of {len(tfx_totals)} fresh processes, spread TFX "
                f"{_spread(tfx_totals)} s, ours {_spread(ours_totals, 3)} s"
            )
        rows.append(
            common.Row(
                f"module_file handling per pipeline run, {phase} (TFX penguin_utils_keras.py)",
                statistics.median(ours_totals),
                statistics.median(tfx_totals),
                "s",
                note=note + (f"; {counts}" if phase == "cold" else ""),
            )
        )
    # A rerun with every component cached runs no executor: TFX still builds its wheels (the
    # pipeline is compiled on every run), ours checks (remembered) and stages (found in place).
    cached_tfx = [s["build"] * sum(builds.values()) for s in handling.tfx_warm]
    cached_ours = [s["check"] + s["stage"] for s in handling.ours_warm]
    rows.append(
        common.Row(
            "  the same, rerun with every component cached (no executor runs)",
            statistics.median(cached_ours),
            statistics.median(cached_tfx),
            "s",
            note=f"TFX: {sum(builds.values())} wheel builds at compile; ours: the remembered check"
            " + stage",
        )
    )
    return rows


# --- the reference pipeline's own log --------------------------------------------------------

# The reference driver's log lines, with a timestamp in front (LOG_FORMAT, set before TFX logs).
LOG_FORMAT = "%(created).3f %(levelname)s:%(name)s:%(message)s"
_LOG_PREFIX = f"import logging\nlogging.basicConfig(format={LOG_FORMAT!r})\n"
_STAMP = re.compile(r"^(\d+\.\d+) ")
_COMPONENT = re.compile(r"Component (\w+) is running\.")
_MARKERS = (
    ("build", "Generating ephemeral wheel package", "Successfully built user code wheel"),
    ("install", "to a temporary directory.", "Successfully installed '"),
)


@dataclasses.dataclass
class WheelSpan:
    kind: str  # "build" or "install"
    component: str  # the component whose run it was in ("compile" for the builds)
    seconds: float


def wheel_spans(log_text: str) -> list[WheelSpan]:
    """Each wheel build (package_user_module_file's 'Generating ephemeral wheel' -> 'Successfully
    built user code wheel') and each install ('Installing ... to a temporary directory' ->
    'Successfully installed') in TFX's log, with the component that was running."""
    spans: list[WheelSpan] = []
    starts: dict[str, float] = {}
    component = "compile"
    for line in log_text.splitlines():
        running = _COMPONENT.search(line)
        if running:
            component = running.group(1)
        stamp = _STAMP.match(line)
        if not stamp:
            continue
        at = float(stamp.group(1))
        for kind, begin, end in _MARKERS:
            if begin in line:
                starts[kind] = at
            elif end in line and kind in starts:
                spans.append(WheelSpan(kind, component, at - starts.pop(kind)))
    return spans


def run_reference_pipeline(work_dir: str) -> tuple[float, str]:
    """TFX's penguin example once, cold (benchmarks.penguin_vs_tfx_example's reference driver, its
    log lines timestamped): wall seconds and its log."""
    from benchmarks import penguin_vs_tfx_example as example

    reference_dir = common.fresh_output(os.path.join(work_dir, "reference"))
    os.makedirs(reference_dir)  # work_dir too
    example.write_reference_inputs(reference_dir)
    driver = os.path.join(reference_dir, "run_reference.py")
    with open(driver, "w", encoding="utf-8") as handle:
        handle.write(_LOG_PREFIX + example.REFERENCE_DRIVER)
    log_path = os.path.join(work_dir, "reference-cold.log")
    env = dict(common.child_env(), PYTHONUNBUFFERED="1")
    print(f"  TFX's penguin example, cold ... (log: {log_path})", flush=True)
    seconds = example.timed([PYTHON, driver, reference_dir], env, log_path)
    with open(log_path, encoding="utf-8", errors="replace") as handle:
        return seconds, handle.read()


def counts_from_log(log_text: str) -> tuple[dict[str, int], dict[str, int]]:
    """({component: builds}, {component: installs}) in TFX's log (the builds named by the wheel
    file, tfx_user_code_<component>-...)."""
    builds: dict[str, int] = {}
    for match in re.finditer(
        r"Successfully built user code wheel distribution at '[^']*"
        r"tfx_user_code_(\w+?)-",
        log_text,
    ):
        builds[match.group(1)] = builds.get(match.group(1), 0) + 1
    installs: dict[str, int] = {}
    component = "compile"
    for line in log_text.splitlines():
        running = _COMPONENT.search(line)
        if running:
            component = running.group(1)
        elif "Installing '" in line and line.endswith("to a temporary directory."):
            installs[component] = installs.get(component, 0) + 1
    return builds, installs


def reference_rows(seconds: float, log_text: str) -> list[common.Row]:
    spans = wheel_spans(log_text)
    total = sum(span.seconds for span in spans)
    by_kind: dict[str, list[str]] = {"build": [], "install": []}
    for span in spans:
        by_kind[span.kind].append(f"{span.component} {span.seconds:.1f}")
    return [
        common.Row(
            "TFX penguin example cold: its wheel builds + installs, from its log",
            total,
            None,
            "s",
            note=f"{len(by_kind['build'])} builds at compile ({', '.join(by_kind['build'])} s), "
            f"{len(by_kind['install'])} installs ({', '.join(by_kind['install'])} s); "
            f"{total / seconds:.0%} of the run's {seconds:.0f} s",
        )
    ]


# --- entry points ------------------------------------------------------------------------------


def run(quick: bool, work_dir: str | None = None) -> list[common.Row]:
    """Rows for `python -m benchmarks all` (--quick: the module handling only, no pipeline)."""
    work_dir = work_dir or tempfile.mkdtemp(prefix="user-module-bench-")
    rows = handling_rows(measure_handling(os.path.join(work_dir, "handling"), 1 if quick else 3))
    if not quick:
        rows = warm_rows(measure_warm(os.path.join(work_dir, "warm"), 5)) + rows
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.user_module", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--repeats", type=int, default=5, help="warm reruns per side")
    parser.add_argument("--handling_repeats", type=int, default=3, help="warm processes per side")
    parser.add_argument("--work_dir", default=None, help="default: a new temporary directory")
    parser.add_argument(
        "--skip_warm_rerun", action="store_true", help="only the module handling (no pipeline)"
    )
    parser.add_argument(
        "--reference_pipeline",
        action="store_true",
        help="also run TFX's penguin example once, cold, and read its wheel times from its log",
    )
    parser.add_argument("--child", nargs="+", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        side, *rest = args.child
        steps = _tfx_child(*rest) if side == "tfx" else _ours_child(*rest)
        print(json.dumps(steps))
        return 0
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="user-module-bench-")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    rows: list[common.Row] = []
    if not args.skip_warm_rerun:
        print("warm rerun, with and without --module_file:", flush=True)
        rows += warm_rows(measure_warm(os.path.join(work_dir, "warm"), args.repeats))
    print("module_file handling, TFX's wheel against ours:", flush=True)
    handling = measure_handling(os.path.join(work_dir, "handling"), args.handling_repeats)
    if args.reference_pipeline:
        seconds, log_text = run_reference_pipeline(work_dir)
        builds, installs = counts_from_log(log_text)
        rows += handling_rows(handling, builds, installs) + reference_rows(seconds, log_text)
    else:
        rows += handling_rows(handling)
    print()
    print(common.format_table(rows))
    return 1 if any(row.passed is False for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
