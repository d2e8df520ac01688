"""Run-to-run data diff: schema differences and TFDV's drift comparators per feature."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from pipeline.mlmd import cli as inspect_mlmd
from pipeline.mlmd import diff as mlmd_diff
from tests.pipeline.mlmd import tfx_store


def inspect(path: str, *args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert inspect_mlmd.main(["--metadata", path, *args]) == 0
    return out.getvalue()


def test_schema_changes():
    changes = mlmd_diff.schema_changes(tfx_store.schema(False), tfx_store.schema(True))
    assert {(c["feature"], c["change"]): (c["a"], c["b"]) for c in changes} == {
        ("bill_length_mm", "presence"): ("min_fraction: 1.0", "min_fraction: 0.9"),
        ("sex", "added"): (None, "BYTES"),
        ("string_domain island", "values"): ("", "Atlantis"),
    }
    assert mlmd_diff.schema_changes(tfx_store.schema(True), tfx_store.schema(True)) == []


def test_drift_uses_tfdv_comparators():
    before, after = tfx_store.statistics(False), tfx_store.statistics(True)
    rows = {r["feature"]: r for r in mlmd_diff.drift(before, after, tfx_store.schema(True))}
    # L-infinity: the largest change in any value's share (Biscoe: 120/250 -> 60/260).
    share_v1 = {k: v / sum(tfx_store.ISLANDS_V1.values()) for k, v in tfx_store.ISLANDS_V1.items()}
    share_v2 = {k: v / sum(tfx_store.ISLANDS_V2.values()) for k, v in tfx_store.ISLANDS_V2.items()}
    expected = max(abs(share_v1.get(k, 0) - share_v2.get(k, 0)) for k in share_v2)
    island = rows["island"]
    assert island["measure"] == mlmd_diff.L_INFINITY
    assert island["value"] == pytest.approx(expected, abs=1e-6) and island["drifted"]
    bill = rows["bill_length_mm"]
    assert bill["measure"] == mlmd_diff.JENSEN_SHANNON and bill["drifted"]
    assert 0.1 < bill["value"] <= 1.0
    assert bill["a"] == "mean 46" and bill["b"].startswith("mean 51.")
    unchanged = mlmd_diff.drift(before, before, tfx_store.schema(False))
    assert [r["value"] for r in unchanged] == [0.0, 0.0]
    assert not any(r["drifted"] for r in unchanged)
    # The threshold decides `drifted`, not what is measured.
    lenient = mlmd_diff.drift(before, after, tfx_store.schema(True), threshold=0.9)
    assert [r["value"] for r in lenient] == [r["value"] for r in rows.values()]
    assert not any(r["drifted"] for r in lenient)


def test_diff_command_shows_metrics_schema_and_drift(penguin_store):
    changes = json.loads(inspect(penguin_store["path"], "--json", "diff", "1", "3"))
    kinds = {c["kind"] for c in changes}
    assert kinds == {"metric", "component", "schema", "drift"}
    metric = next(c for c in changes if c["change"] == "metric sparse_categorical_accuracy")
    assert (metric["a"], metric["b"]) == (0.95, 0.97)
    schema = {c["change"] for c in changes if c["kind"] == "schema"}
    assert "schema sex: added" in schema and "schema bill_length_mm: presence" in schema
    drift = {(c["split"], c["feature"]): c for c in changes if c["kind"] == "drift"}
    assert set(drift) == {
        (split, feature) for split in ("train", "eval") for feature in ("bill_length_mm", "island")
    }
    assert all(c["component"] == "StatisticsGen" and c["drifted"] for c in drift.values())

    table = inspect(penguin_store["path"], "diff", "1", "3")
    [island] = [line for line in table.splitlines() if "drift train island" in line]
    assert "DRIFTED L-infinity 0.2492 (threshold 0.1)" in island

    # A cached rerun reads the same statistics and schema: no data differences.
    rerun = json.loads(inspect(penguin_store["path"], "diff", "1", "2", "--json"))
    assert not [c for c in rerun if c["kind"] in ("schema", "drift", "metric")]
