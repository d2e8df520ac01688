"""The pipeline's Beam components through Beam's portability layer, as Flink, Spark and Dataflow
run them: PortableRunner, the embedded job service, SDK workers in other processes started by a
worker pool (`python -m pipeline.beam.boot worker_pool`, Beam's worker_pool_main with this
project's boot), the project staged as a wheel that every worker installs into its own
directory. No Flink or Spark job server can be fetched here (Maven is unreachable); the
portability layer they use is the same."""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.docs import pages
from tests.pipeline_components import CSV_COMPONENTS

pytestmark = pytest.mark.slow

# beam.md's two commands: the worker pool in the background, then the run through it. The port
# the page names is replaced by a free one.
PAGE = "docs/beam.md"
PAGE_PORT = "50000"
# The Beam components of create_pipeline(): one Beam job, so one SDK worker, each.
BEAM_COMPONENTS = ("CsvExampleGen", "StatisticsGen", "Transform", "Evaluator")
BOOTED = re.compile(
    r"beam_boot\[(\d+)\] (\S+): installed \[([^\]]*)\] into (\S+) in .*modules: (.*)"
)
EXITED = re.compile(r"beam_boot\[(\d+)\] (\S+): harness pid (\d+) exited (-?\d+) .* cpu ([\d.]+) s")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


class WorkerPool:
    """beam.md's `python -m pipeline.beam.boot worker_pool ... &`, in a sandbox, in its own
    process group, its log in a file; its worker directories under the sandbox's TMPDIR."""

    def __init__(self, work_dir: str):
        self.port = _free_port()
        self.sandbox = pages.Sandbox(os.path.join(work_dir, "sandbox"))
        self.log_path = os.path.join(work_dir, "worker_pool.log")
        self._log = open(self.log_path, "w")  # noqa: SIM115
        self.process = self.sandbox.start(
            pages.command(PAGE, "pipeline.beam.boot worker_pool"),
            self._log,
            replace={PAGE_PORT: str(self.port)},
        )
        deadline = time.monotonic() + 60
        while "beam_boot worker pool" not in self.log():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"the worker pool did not start:\n{self.log()}")
            time.sleep(0.2)
        self.work_dir = re.search(r"worker directories under (\S+)", self.log()).group(1)
        assert self.work_dir.startswith(str(self.sandbox.tmp)), self.log()

    @property
    def endpoint(self) -> str:
        return f"localhost:{self.port}"

    def log(self) -> str:
        with open(self.log_path) as handle:
            return handle.read()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if not self._log.closed:
            self._log.close()


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    worker_pool = WorkerPool(str(tmp_path_factory.mktemp("portable")))
    yield worker_pool
    worker_pool.stop()


def _explain(result: subprocess.CompletedProcess, pool: WorkerPool) -> str:
    return (
        f"exit {result.returncode}\nstdout:\n{result.stdout[-4000:]}\nstderr:\n"
        f"{result.stderr[-3000:]}\nworker pool log:\n{pool.log()[-4000:]}"
    )


def _records(pattern: str) -> int:
    import tensorflow as tf

    files = sorted(glob.glob(pattern))
    assert files, pattern
    return sum(1 for _ in tf.data.TFRecordDataset(files, compression_type="GZIP"))


def _wait_for_exits(pool: WorkerPool, count: int, timeout: float = 60) -> str:
    """The pool's log once `count` harnesses have exited (a worker exits when the runner closes
    its control stream, just after the job ends)."""
    deadline = time.monotonic() + timeout
    while len(EXITED.findall(pool.log())) < count and time.monotonic() < deadline:
        time.sleep(0.5)
    return pool.log()


def test_penguins_end_to_end_with_sdk_workers_in_the_worker_pool(pool):
    """beam.md's run through the pool, as the page shows it (the pool's port aside)."""
    output_root = pool.sandbox.output_root
    before = len(BOOTED.findall(pool.log())), len(EXITED.findall(pool.log()))
    started = time.monotonic()
    result = pool.sandbox.run(
        pages.command(PAGE, "--beam_runner portable"), replace={PAGE_PORT: str(pool.port)}
    )
    seconds = time.monotonic() - started
    assert result.returncode == 0, _explain(result, pool)
    stdout = result.stdout
    assert f"Beam portable runner at embed (EXTERNAL {pool.endpoint})" in stdout
    assert f"{len(CSV_COMPONENTS)} component(s) executed, 0 reused" in stdout
    # The DirectRunner's split of palmerpenguins' 344 rows (hash buckets 75/25).
    assert "examples:      train 253, eval 91; rows rejected: 0" in stdout, stdout
    assert "blessed:       yes" in stdout
    assert re.search(r"pushed model:  .*serving_model/\d+", stdout), stdout

    from pipeline.mlmd import connection, records

    db = records.Store(
        connection.open_store(str(output_root / "penguins-pipeline" / "metadata.sqlite"))
    )
    executions = {db.node_of(e): e for e in db.store.get_executions()}
    assert sorted(executions) == sorted(CSV_COMPONENTS)
    examples = db.outputs_by_type(executions["CsvExampleGen"].id)["Examples"][0].uri
    transformed = db.outputs_by_type(executions["Transform"].id)["Examples"][0].uri
    for split, rows in (("train", 253), ("eval", 91)):
        assert _records(os.path.join(examples, f"Split-{split}", "*.gz")) == rows
        assert _records(os.path.join(transformed, f"Split-{split}", "*.gz")) == rows

    # The work ran in the pool's workers: one booted worker per Beam component, each with the
    # project installed from the staged wheel into its own directory (not the shared venv,
    # not the tree), each harness a process of the pool, none of this test or of run_local.
    log = _wait_for_exits(pool, before[1] + len(BEAM_COMPONENTS))
    booted = BOOTED.findall(log)[before[0] :]
    exited = EXITED.findall(log)[before[1] :]
    assert len(booted) == len(BEAM_COMPONENTS), log
    for _, _, distributions, target, modules in booted:
        assert distributions == "'tfx_scaleout-0.1.0.dist-info'"
        assert target.startswith(pool.work_dir)
        for module in ("components", "pipeline"):
            assert f"'{module}': '{os.path.join(target, module, '__init__.py')}'" in modules
    assert len(exited) == len(BEAM_COMPONENTS), log
    harness_pids = {int(pid) for _, _, pid, _, _ in exited}
    assert len(harness_pids) == len(BEAM_COMPONENTS)
    assert os.getpid() not in harness_pids
    assert all(code == "0" for *_, code, _ in exited), exited
    # Each harness did real work (decoding CSV, statistics, tf.Transform, TFMA), not idling.
    assert all(float(cpu) >= 1.0 for *_, cpu in exited), exited
    # Workers clean up after themselves.
    assert not glob.glob(os.path.join(pool.work_dir, "worker_*-*"))
    print(f"portable penguins run: {seconds:.0f} s")


# --- a user's module in the SDK workers -------------------------------------------------------

# A custom TFMA metric in the user's folder (a tf-keras metric: TFMA serializes its config into
# the combiner and the worker deserializes it, importing its module). On import it records which
# process imported it from where.
METRICS_MODULE = """
import os

import tensorflow as tf

with open({log!r}, "a") as handle:
    handle.write(f"{{os.getpid()}} {{__file__}}\\n")


class PenguinAccuracy(tf.keras.metrics.SparseCategoricalAccuracy):
    def __init__(self, name="penguin_accuracy", dtype=None):
        super().__init__(name=name, dtype=dtype)
"""
# The project's default EvalConfig for its classifiers (pipeline.builder.eval_config), the
# blessing threshold on the user's metric.
EVAL_CONFIG = """
model_specs {
  signature_name: "serving_default"
  label_key: "species_xf"
  preprocessing_function_names: "transform_features"
  prediction_key: "probabilities"
}
slicing_specs {}
metrics_specs {
  metrics { class_name: "ExampleCount" }
  metrics {
    class_name: "PenguinAccuracy"
    module: "penguin_metrics"
    threshold { value_threshold { lower_bound { value: 0.6 } } }
  }
}
"""


def test_a_users_metric_module_reaches_the_sdk_worker_as_a_staged_wheel(pool, tmp_path):
    """--module_file with an --eval_config whose metric class lives in the module's folder: the
    Evaluator's SDK worker (a process of the pool, whose environment has no such module) gets
    the staged folder as a wheel, installs it and imports the metric from it."""
    import tensorflow_model_analysis as tfma

    from pipeline.mlmd import connection, records

    # In the sandbox (which rewrites /tmp/ paths on the command line), named relative to it.
    folder = pool.sandbox.root / "my_code"
    folder.mkdir()
    shutil.copy(os.path.join(pages.PROJECT_ROOT, "examples", "penguin_hook.py"), folder)
    imports = tmp_path / "imports.log"
    (folder / "penguin_metrics.py").write_text(METRICS_MODULE.format(log=str(imports)))
    (folder / "eval_config.pbtxt").write_text(EVAL_CONFIG)
    before = len(BOOTED.findall(pool.log())), len(EXITED.findall(pool.log()))
    user_flags = (
        "--beam_stage_project --module_file my_code/penguin_hook.py "
        "--eval_config my_code/eval_config.pbtxt --pipeline_name penguins-user-metric"
    )
    result = pool.sandbox.run(
        pages.command(PAGE, "--beam_runner portable"),
        replace={PAGE_PORT: str(pool.port), "--beam_stage_project": user_flags},
    )
    assert result.returncode == 0, _explain(result, pool)
    assert "blessed:       yes" in result.stdout, result.stdout

    log = _wait_for_exits(pool, before[1] + len(BEAM_COMPONENTS))
    booted = BOOTED.findall(log)[before[0] :]
    assert len(booted) == len(BEAM_COMPONENTS), log
    # Only the Evaluator runs the user's code here (the project's preprocessing_fn): its
    # worker, the last Beam component's, installed the module's wheel beside the project's.
    with_user_code = [b for b in booted if "tfx_scaleout_user_code_" in b[2]]
    assert len(with_user_code) == 1, booted
    _, _, distributions, target, modules = with_user_code[0]
    assert re.fullmatch(
        r"'tfx_scaleout-0\.1\.0\.dist-info', 'tfx_scaleout_user_code_[0-9a-f]{16}-0\.dist-info'",
        distributions,
    ), distributions
    staged = os.path.join(target, "penguin_metrics.py")
    assert f"'penguin_metrics': '{staged}'" in modules
    assert f"'penguin_hook': '{os.path.join(target, 'penguin_hook.py')}'" in modules
    # Imported where TFMA builds the computations (the Evaluator's process, from the staged
    # directory under the pipeline root) and in the worker, from its installed wheel.
    lines = [line.split(" ", 1) for line in imports.read_text().splitlines()]
    assert [path for _, path in lines if path == staged], lines
    assert any("_user_code" in path for _, path in lines), lines
    worker_pids = {pid for pid, path in lines if path == staged}
    assert str(os.getpid()) not in worker_pids

    output_root = pool.sandbox.output_root
    db = records.Store(
        connection.open_store(str(output_root / "penguins-user-metric" / "metadata.sqlite"))
    )
    executions = {db.node_of(e): e for e in db.store.get_executions()}
    evaluation = db.outputs_by_type(executions["Evaluator"].id)["ModelEvaluation"][0].uri
    [(_, metrics)] = tfma.load_eval_result(evaluation).slicing_metrics
    assert metrics[""][""]["penguin_accuracy"]["doubleValue"] >= 0.6


# --- the staged packages, each way TFX and Beam stage them -----------------------------------

_WHERE = (
    "import os, sys\n"
    "import apache_beam as beam\n"
    "from apache_beam.options.pipeline_options import PipelineOptions\n"
    "def where(_):\n"
    "    import tfx\n"
    "    return f'{os.getpid()} {os.path.dirname(tfx.__file__)}'\n"
    "with beam.Pipeline(options=PipelineOptions(sys.argv[2:])) as p:\n"
    "    p | beam.Create([0]) | beam.Map(where) | beam.io.WriteToText(sys.argv[1])\n"
)


def _tiny_pipeline(pool: WorkerPool, output: str, args: list[str], timeout: int = 300):
    """A one-element pipeline whose one DoFn writes its process id and where TFX was imported
    from, as output-* text files."""
    return subprocess.run(
        [sys.executable, "-c", _WHERE, output, "--runner=PortableRunner", "--job_endpoint=embed"]
        + ["--environment_type=EXTERNAL", f"--environment_config={pool.endpoint}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_tfx_sdist_is_staged_installed_and_imported_by_the_worker(pool, tmp_path):
    """Without a dependency flag, TFX 1.16's Beam executors stage an sdist of TFX itself
    (dependency_utils.make_beam_dependency_flags, the step compat.no_tfx_sdist_for_direct_runner
    skips for the DirectRunner): the worker installs it and imports TFX from it."""
    from tfx.utils import dependency_utils

    args = dependency_utils.make_beam_dependency_flags(["--runner=PortableRunner"])
    (sdist,) = [a.split("=", 1)[1] for a in args if a.startswith("--extra_package=")]
    assert os.path.basename(sdist) == "tfx_ephemeral-1.16.0.tar.gz"
    before = len(BOOTED.findall(pool.log()))
    result = _tiny_pipeline(pool, str(tmp_path / "where"), [f"--extra_package={sdist}"])
    assert result.returncode == 0, _explain(result, pool)
    (written,) = glob.glob(str(tmp_path / "where-*"))
    with open(written) as handle:
        pid, tfx_dir = handle.read().split()
    booted = BOOTED.findall(pool.log())[before:]
    assert len(booted) == 1, pool.log()
    _, _, distributions, target, modules = booted[0]
    assert distributions == "'tfx_ephemeral-1.16.0.dist-info'"
    assert tfx_dir == os.path.join(target, "tfx")
    assert f"'tfx': '{os.path.join(target, 'tfx', '__init__.py')}'" in modules
    assert int(pid) != os.getpid()


def test_a_staged_package_that_does_not_install_fails_the_job(pool, tmp_path):
    broken = tmp_path / "broken_package-1.0.tar.gz"
    broken.write_bytes(b"not a tarball")
    started = time.monotonic()
    result = _tiny_pipeline(
        pool, str(tmp_path / "where"), [f"--extra_package={broken}"], timeout=120
    )
    assert result.returncode != 0, _explain(result, pool)
    output = result.stdout + result.stderr
    assert "did not start: pip could not install the staged packages" in output, output[-4000:]
    assert "broken_package-1.0.tar.gz" in output
    assert time.monotonic() - started < 90
