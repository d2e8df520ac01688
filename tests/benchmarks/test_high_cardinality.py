"""benchmarks/high_cardinality.py --profile_evaluator: the parts of a profile it reports, on a
real cProfile of functions at the paths TFMA's and Beam's have, and its error without a run."""

from __future__ import annotations

import cProfile
import importlib.util
import pstats

import pytest

from benchmarks import high_cardinality

SLEEP = 0.02


def _load(tmp_path, relative: str, source: str):
    path = tmp_path / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_breakdown_sums_each_named_function_and_ignores_namesakes_elsewhere(tmp_path):
    unbatch = _load(
        tmp_path,
        "site/tensorflow_model_analysis/extractors/unbatch_extractor.py",
        f"import time\ndef _extract_unbatched_inputs():\n    time.sleep({SLEEP})\n",
    )
    bundles = _load(
        tmp_path,
        "site/apache_beam/runners/worker/bundle_processor.py",
        "def process_encoded(unbatch):\n    unbatch()\n    unbatch()\n",
    )
    # The same function name in another file is not TFMA's.
    namesake = _load(
        tmp_path,
        "elsewhere/unbatch_extractor_copy.py",
        f"import time\ndef _extract_unbatched_inputs():\n    time.sleep({SLEEP})\n",
    )
    profile = cProfile.Profile()
    profile.enable()
    bundles.process_encoded(unbatch._extract_unbatched_inputs)
    namesake._extract_unbatched_inputs()
    profile.disable()

    parts = high_cardinality.evaluator_breakdown(pstats.Stats(profile))

    assert set(parts) == {"bundles (data path)", "unbatch into per-example extracts"}
    seconds, calls = parts["unbatch into per-example extracts"]
    assert calls == 2
    assert 2 * SLEEP * 0.9 <= seconds < 2 * SLEEP + 1.0
    bundle_seconds, bundle_calls = parts["bundles (data path)"]
    assert bundle_calls == 1 and bundle_seconds >= seconds

    text = high_cardinality.format_profile(
        {"parts": parts, "examples": 4, "metrics": {"example_count": 4.0}}
    )
    assert "4 eval examples" in text
    assert "unbatch into per-example extracts: " in text and " in 2 call(s), " in text
    assert "metric example_count: 4" in text


def test_profile_evaluator_without_a_finished_run_names_the_flag(tmp_path):
    with pytest.raises(SystemExit, match="--profile_evaluator .*--output_root of a finished"):
        high_cardinality.profile_evaluator(str(tmp_path))
