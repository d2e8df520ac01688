"""benchmarks/coverage_compare.py on real `coverage json` reports of a small module run two ways."""

from __future__ import annotations

import subprocess
import sys

from benchmarks import coverage_compare

MODULE = """
def sign(x):
    if x < 0:
        return "negative"
    return "not negative"
"""


def _report(tmp_path, name: str, calls: str) -> str:
    (tmp_path / "signs.py").write_text(MODULE)
    (tmp_path / f"{name}_main.py").write_text(f"import signs\n{calls}\n")
    data, out = tmp_path / f".coverage.{name}", tmp_path / f"{name}.json"
    env = {"COVERAGE_FILE": str(data), "PATH": "/usr/bin:/bin"}
    coverage = [sys.executable, "-m", "coverage"]
    for command in (
        ["run", "--branch", "--include=signs.py", f"{name}_main.py"],
        ["json", "-o", str(out)],
    ):
        subprocess.run([*coverage, *command], cwd=tmp_path, env=env, check=True)
    return str(out)


def test_a_module_that_ran_fewer_lines_or_branches_fails_the_comparison(tmp_path, capsys):
    one_way = _report(tmp_path, "one", "signs.sign(1)")
    both_ways = _report(tmp_path, "both", "signs.sign(1)\nsigns.sign(-1)")

    assert coverage_compare.main([one_way, both_ways]) == 0
    gained = capsys.readouterr().out
    assert "     signs.py: lines 3/4 -> 4/4, branches 1/2 -> 2/2" in gained, gained

    assert coverage_compare.main([both_ways, one_way]) == 1
    lost = capsys.readouterr().out
    assert "LOST signs.py: lines 4/4 -> 3/4" in lost, lost
    assert "1 module(s) lost covered lines or branches: signs.py" in lost, lost

    assert coverage_compare.main([one_way, one_way]) == 0
    assert "no module's covered lines or branches changed" in capsys.readouterr().out
