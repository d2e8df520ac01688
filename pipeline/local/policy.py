"""Policy of local runs, shared by the local runner and the benchmarks: which Beam mode an input
gets, and running a pipeline with TFX's LocalDagRunner."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

from components import compat
from pipeline import config as config_lib

# Inputs smaller than this run Beam in-process; larger ones use one worker process per core on
# machines with at least MIN_CORES_FOR_WORKERS cores.
IN_MEMORY_LIMIT_BYTES = 64 * 1024 * 1024
MIN_CORES_FOR_WORKERS = 4


def choose_beam(
    mode: str,
    workers: int | None,
    input_bytes: int,
    extra_args: list[str],
    images: bool = False,
    cores: int | None = None,
) -> config_lib.BeamConfig:
    """auto: in-process for small CSV input, for images and on machines with fewer than
    MIN_CORES_FOR_WORKERS cores; else one worker process per core.

    ExampleGen and Transform stream their shards (components.records.bulk_tfrecord), so the
    in-process runner's memory is flat with the data; each worker process adds TensorFlow and
    its share of the data in flight. Measured on 2 cores (docs/scale.md, benchmarks.scale_memory):
    1M rows whole pipeline in-process 1.25 GiB; 3M rows with two worker processes 3.04 GiB and
    slower than in-process. Images stay in-process on any machine: the image ExampleGen reads
    and decodes on threads and Transform's decode and resize run in TensorFlow's thread pool, so
    one process already keeps the cores busy (20,000 JPEGs: ExampleGen 19 s in-process vs 41 s
    with two workers, Transform 70 s vs 84 s, measured 2026-11-30)."""
    cores = cores or os.cpu_count() or 1
    if mode == "auto":
        small = input_bytes < IN_MEMORY_LIMIT_BYTES
        few_cores = cores < MIN_CORES_FOR_WORKERS
        mode = "in_memory" if small or images or few_cores else "multi_processing"
    return config_lib.BeamConfig(
        mode=mode,
        num_workers=workers or (cores if mode == "multi_processing" else 1),
        extra_args=tuple(extra_args),
    )


def run_dag(tfx_pipeline) -> None:
    """Runs the pipeline with TFX's LocalDagRunner, without TFX's sdist for the DirectRunner
    (compat.no_tfx_sdist_for_direct_runner), with Beam's bookkeeping remembered
    (compat.beam_bookkeeping_remembered) and the objects alive before the run out of the
    garbage collector's way (_frozen_for_the_run)."""
    from tfx.orchestration.local.local_dag_runner import LocalDagRunner

    with (
        _frozen_for_the_run(),
        compat.no_tfx_sdist_for_direct_runner(),
        compat.beam_bookkeeping_remembered(),
    ):
        LocalDagRunner().run(tfx_pipeline)


@contextlib.contextmanager
def _frozen_for_the_run() -> Iterator[None]:
    """What is alive when the run starts (the imported TensorFlow, TFX, Beam and TFMA: about
    615,000 objects in run_local) is moved out of the garbage collector's generations, so that
    its full collections scan only what the components allocate: 2.5 -> 2.0 s of full
    collections in a penguin run, 3.6 -> 2.4-2.8 s at 75 columns (docs/benchmarks.md). Put back
    after the run, so that a process running several pipelines collects them as before."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
