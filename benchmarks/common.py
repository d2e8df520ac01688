"""What every benchmark module returns, and how the table is printed and peak memory measured.

Each module exposes `run(quick: bool) -> list[Row]`; `python -m benchmarks all` prints one table.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time

from components import KERAS_ENV


@dataclasses.dataclass(frozen=True)
class Row:
    """One measured figure, ours against the reference's, with its target.

    ratio = ours / reference; higher_is_better says which way the target points (ratio >= target
    or ratio <= target). target None: reported, not checked. reference None: ours alone (then
    target, if any, is checked against ours directly).
    """

    name: str
    ours: float
    reference: float | None
    unit: str
    target: float | None = None
    higher_is_better: bool = True
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.reference is None:
            return None
        return self.ours / self.reference if self.reference else float("inf")

    @property
    def passed(self) -> bool | None:
        if self.target is None:
            return None
        value = self.ratio if self.ratio is not None else self.ours
        return value >= self.target if self.higher_is_better else value <= self.target


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def format_table(rows: list[Row]) -> str:
    header = ("benchmark", "ours", "reference", "unit", "ratio", "target", "result")
    lines = []
    for row in rows:
        target = "-"
        if row.target is not None:
            target = f"{'>=' if row.higher_is_better else '<='} {row.target:g}"
        result = {None: "-", True: "pass", False: "FAIL"}[row.passed]
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}x"
        lines.append(
            (row.name, _number(row.ours), _number(row.reference), row.unit, ratio, target, result)
        )
    widths = [max(len(str(c)) for c in column) for column in zip(header, *lines, strict=True)]
    out = [
        "  ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )
        for cells in (header, *lines)
    ]
    notes = [f"  {row.name}: {row.note}" for row in rows if row.note]
    out.insert(1, "-" * len(out[0]))
    footer = [f"machine: {os.cpu_count()} CPU core(s)"]
    return "\n".join(out + ([""] + ["notes:"] + notes if notes else []) + [""] + footer)


def print_medians(figures) -> None:
    """A markdown table of (label, values) pairs: each one's median and its min-max spread."""
    print("\n| | median | spread |")
    print("|---|---:|---:|")
    for label, values in figures:
        spread = f"{min(values):.2f}-{max(values):.2f}"
        print(f"| {label} | {statistics.median(values):.2f} | {spread} |")


def fresh_output(path: str) -> str:
    """`path`, emptied: every measured run starts from an empty output directory (with a reused
    work directory or repeated runs, earlier runs' outputs, gigabytes each, would pile up and
    fill the disk)."""
    shutil.rmtree(path, ignore_errors=True)
    return path


def _tree_rss_bytes(root_pid: int) -> int:
    """Resident memory of a process and all its descendants (summed), from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, parent = int(entry), int(fields[1])
        children.setdefault(parent, []).append(pid)
        rss[pid] = int(fields[21]) * page
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


@dataclasses.dataclass
class ProcessResult:
    seconds: float
    peak_rss_bytes: int
    stdout: str
    # User + system CPU time of the process and the descendants it waited for.
    cpu_seconds: float = 0.0
    # When the process was started (time.time()), for times the process reports itself.
    started_at: float = 0.0
    # (time.time(), tree RSS bytes) of every sample: peaks per phase (e.g. per component).
    timeline: list[tuple[float, int]] = dataclasses.field(default_factory=list)

    def peak_between(self, start: float, end: float) -> int:
        """Peak sampled RSS between two time.time() instants (0 if no sample fell there)."""
        return max((rss for at, rss in self.timeline if start <= at <= end), default=0)


def cpu_seconds(*who: int) -> float:
    """User + system CPU seconds so far of each `resource.RUSAGE_*` in who, summed."""
    usages = [resource.getrusage(one) for one in who]
    return sum(usage.ru_utime + usage.ru_stime for usage in usages)


def run_measured(
    command: list[str],
    *,
    env: dict | None = None,
    log_path: str | None = None,
    interval=0.2,
    ok_codes: tuple[int, ...] = (0,),
) -> ProcessResult:
    """Runs a command in a fresh process; wall time and peak RSS summed over its process tree
    (Beam's multi-processing workers included), sampled every `interval` seconds.

    Dirty pages are flushed first (not timed): the page cache absorbs a few GB of writes, then
    the kernel throttles writers to the disk's speed, so without the flush a run that follows
    gigabytes of writes (generated data, the previous run's outputs) is slowed by them."""
    os.sync()
    log = open(log_path, "w") if log_path else subprocess.DEVNULL  # noqa: SIM115
    # Children's CPU time is summed over every child reaped so far: the difference across this
    # run is this run's (one measured run at a time).
    before = cpu_seconds(resource.RUSAGE_CHILDREN)
    started_at = time.time()
    started = time.monotonic()
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=log, text=True, cwd=PROJECT_ROOT
    )
    peak = 0
    timeline: list[tuple[float, int]] = []
    done = threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            rss = _tree_rss_bytes(process.pid)
            timeline.append((time.time(), rss))
            peak = max(peak, rss)
            done.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, _ = process.communicate()
    seconds = time.monotonic() - started
    used = cpu_seconds(resource.RUSAGE_CHILDREN) - before
    done.set()
    sampler.join()
    if log_path:
        log.close()
    if process.returncode not in ok_codes:
        raise RuntimeError(
            f"{' '.join(command)} failed with exit code {process.returncode}"
            + (f"; log: {log_path}" if log_path else "")
        )
    return ProcessResult(seconds, peak, stdout, used, started_at, timeline)


PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable


def child_env() -> dict:
    return dict(os.environ, **KERAS_ENV, TF_CPP_MIN_LOG_LEVEL="2")


# --- what the ExampleGen -> ImportSchemaGen -> Transform benchmarks share ----------------------


def direct_beam_args(workers: int) -> list[str]:
    """The DirectRunner arguments of the pipeline's own BeamConfig: in_memory for 1 worker,
    else multi_processing with that many worker processes."""
    from pipeline import config

    mode = "multi_processing" if workers > 1 else "in_memory"
    return config.BeamConfig(mode=mode, num_workers=workers).pipeline_args()


def auto_workers(input_bytes: int, images: bool = False) -> int:
    """Beam worker processes `run_local.py --beam_mode auto` uses for this input (1: in_memory)."""
    from pipeline.local import policy as local

    beam = local.choose_beam("auto", None, input_bytes, [], images=images)
    return beam.num_workers if beam.mode == "multi_processing" else 1


def data_pipeline(name: str, root: str, components: list, beam_args: list[str]):
    """An uncached LocalDagRunner pipeline of the given components, SQLite MLMD under root."""
    from tfx.orchestration import metadata
    from tfx.orchestration import pipeline as tfx_pipeline

    return tfx_pipeline.Pipeline(
        pipeline_name=name,
        pipeline_root=os.path.join(root, "pipeline_root"),
        components=components,
        enable_cache=False,
        metadata_connection_config=metadata.sqlite_metadata_connection_config(
            os.path.join(root, "metadata.sqlite")
        ),
        beam_pipeline_args=beam_args,
    )


def component_executions(root: str) -> tuple:
    """(Store, {component: execution}, {component: seconds}) of the pipeline under root, from
    its MLMD: each component's execution time is MLMD's create -> last update."""
    from pipeline.mlmd import connection, records

    db = records.Store(connection.open_store(os.path.join(root, "metadata.sqlite")))
    executions, seconds = {}, {}
    for execution in db.store.get_executions():
        node = db.node_of(execution)
        executions[node] = execution
        seconds[node] = (
            execution.last_update_time_since_epoch - execution.create_time_since_epoch
        ) / 1000
    return db, executions, seconds


def alternate_fit_rounds(
    models: dict, datasets: dict, steps: int, rounds: int, warm: int, during=None
):
    """Keras fit() of each named model on its dataset, the names alternating for `rounds`
    rounds; each timed fit of `steps` steps follows an untimed one of `warm` steps. during: a
    name -> context manager factory entered around that name's timed fits. Returns (wall, cpu):
    per name, the milliseconds per step of every round, wall clock and process CPU.

    Rounds alternate and callers keep each name's fastest: on a shared machine the minimum is
    the measurement least disturbed by other load, and on these 2-vCPU machines TensorFlow runs
    a whole fit() call either with both cores busy or with the process idle about 40 % of the
    time (the same CPU seconds in ~1.6x the wall time; with one constant in-memory batch as the
    input too), so one round per name can compare two modes. CPU time does not depend on the
    mode."""
    import contextlib

    wall: dict[str, list] = {name: [] for name in datasets}
    cpu: dict[str, list] = {name: [] for name in datasets}
    for _ in range(rounds):
        for name, dataset in datasets.items():
            models[name].fit(dataset, steps_per_epoch=warm, epochs=1, verbose=0)
            context = during[name]() if during and name in during else contextlib.nullcontext()
            with context:
                started, cpu_started = time.monotonic(), time.process_time()
                models[name].fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0)
                wall[name].append(1000 * (time.monotonic() - started) / steps)
                cpu[name].append(1000 * (time.process_time() - cpu_started) / steps)
    return wall, cpu
