"""The hand-written reference of the scale benchmark computes what preprocessing_fn computes, and
the shared benchmark table and memory sampler."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import common, scale_baseline

CSV = "x,n,c,label\n1.0,1,a,yes\n,3,b,no\n4.0,,a,yes\n7.0,8,,no\n"


@pytest.fixture
def data_dir(tmp_path):
    path = tmp_path / "data"
    path.mkdir()
    (path / "part-0.csv").write_text(CSV)
    return str(path)


def test_statistics_match_numpy(data_dir):
    table = scale_baseline.read_table(glob.glob(os.path.join(data_dir, "*.csv")))
    stats = scale_baseline.compute_statistics(table, "label")
    x = np.array([1.0, np.nan, 4.0, 7.0])
    mean = np.nanmean(x)
    imputed = np.where(np.isnan(x), mean, x)
    assert stats.numeric["x"] == pytest.approx((mean, imputed.mean(), imputed.std(), True))
    assert stats.vocabularies["c"] == ["a", "__missing__", "b"]  # by count, then value
    assert stats.vocabularies["label"] == ["no", "yes"]


def test_writes_one_transformed_example_per_row(data_dir, tmp_path):
    out = str(tmp_path / "out")
    result = scale_baseline.run(data_dir, out, "label")
    assert result["rows"] == 4
    records = [
        tf.train.Example.FromString(r.numpy())
        for path in sorted(glob.glob(os.path.join(out, "*.gz")))
        for r in tf.data.TFRecordDataset(path, compression_type="GZIP")
    ]
    assert len(records) == 4
    first = records[0].features.feature
    assert first["c_xf"].int64_list.value == [0]
    assert first["label_xf"].int64_list.value == [1]
    assert first["x_missing_xf"].float_list.value == [0.0]
    z = [r.features.feature["x_xf"].float_list.value[0] for r in records]
    assert np.mean(z) == pytest.approx(0.0, abs=1e-6)
    assert np.std(z) == pytest.approx(1.0, abs=1e-5)
    assert records[1].features.feature["x_missing_xf"].float_list.value == [1.0]


def test_row_ratio_and_verdict():
    faster = common.Row("a", 20.0, 10.0, "rows/s", 1.0)
    assert faster.ratio == 2.0 and faster.passed
    slower_time = common.Row("b", 30.0, 10.0, "s", 0.5, higher_is_better=False)
    assert slower_time.passed is False
    report_only = common.Row("c", 5.0, None, "MiB")
    assert report_only.ratio is None and report_only.passed is None
    table = common.format_table([faster, slower_time, report_only])
    assert "FAIL" in table and "pass" in table and "CPU core(s)" in table


def test_peak_rss_counts_the_child_processes():
    # A parent that allocates little, with a child holding ~200 MB: the tree's peak sees both.
    child = "import time; b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096]); "
    child += "time.sleep(1.5)"
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])"
    result = common.run_measured([common.PYTHON, "-c", parent], interval=0.05)
    assert result.peak_rss_bytes > 200 * 2**20


def test_cpu_seconds_count_the_busy_grandchild_not_the_sleeping_parent():
    # A parent that sleeps, with a child that spins for ~0.6 s of CPU: the run's CPU time is
    # the child's, and a second run does not count the first one's again.
    child = "import time; end = time.process_time() + 0.6\nwhile time.process_time() < end: pass"
    parent = f"import subprocess, sys, time; subprocess.run([sys.executable, '-c', {child!r}])"
    busy = common.run_measured([common.PYTHON, "-c", parent], interval=0.05)
    assert 0.6 <= busy.cpu_seconds < busy.seconds + 0.5
    idle = common.run_measured([common.PYTHON, "-c", "import time; time.sleep(0.8)"])
    assert idle.cpu_seconds < 0.4
