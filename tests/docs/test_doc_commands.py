"""Every command of README.md and docs/*.md is run, taken from the page (tests/docs/pages.py).

Who runs what:
- this module runs the cheap ones for real, in a sandbox (every `--help`, `python -m
  pipeline.mlmd` against a store made once, the Kubeflow compiles and `manifests`, the data
  generators), and, marked slow, the diabetes regression run and the compiled pipeline through the
  IR runner, which no other test runs as the pages show them;
- the end-to-end tests run the whole-pipeline commands, their command lines read from the pages
  with `pages.command(...)` (found here by reading their source), so no pipeline runs twice;
- CI runs the README's set-up and test commands (`.ci/run`), and the pytest commands of the pages
  are parts of the suite (their paths and markers are checked);
- a command marked at its end (`# needs a cluster`, `# needs a registry`, `# takes ... minutes`)
  is checked as far as this machine allows: the project's own CLIs parse its flags (argparse, in
  one process), a build script accepts its flags and variables, kubectl's files exist and parse,
  an exported variable is one the code reads.
A command none of these covers fails test_every_command_is_run_or_marked.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tomli  # in requirements.lock (tomllib is Python 3.11's)
import yaml

from tests.docs import pages
from tests.docs.pages import PROJECT_ROOT, Command, Sandbox, explain

README = "README.md"
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
# The pages that hold dated figures: the benchmarks page and the scale benchmark's own page.
DATED_PAGES = {"docs/benchmarks.md", "docs/scale.md"}
PROJECT_PACKAGES = ("pipeline", "components", "kubeflow", "benchmarks", "tests")
# How a command looks when it hides outside a ```bash block.
LOOKS_LIKE_A_COMMAND = re.compile(
    r"^(?:\$ )?(?:\.venv/bin/\S+|python3? \S|bash \S|kubectl |podman |docker |export [A-Z]"
    r"|[A-Z_]+=\S+ (?:bash|python))"
)


def unique(commands: list[Command]) -> list[Command]:
    seen: dict[str, Command] = {}
    for command in commands:
        seen.setdefault(command.key, command)
    return list(seen.values())


def scripts() -> dict[str, str]:
    with open(PROJECT_ROOT / "pyproject.toml", "rb") as handle:
        return tomli.load(handle)["project"]["scripts"]


# --- what this module runs -----------------------------------------------------------------

DIABETES = ("docs/csv.md", "python -m pipeline.datasets.regression --out ~/diabetes")
# Run by tests/kubeflow/test_ir_pipeline.py as its cold run, so not by is_kubeflow here.
IR_TRY_IT = ("docs/kubeflow.md", "python -m tests.kubeflow.ir_runner")


def in_block(command: Command, page: str, text: str) -> bool:
    return command.key in {c.key for c in pages.block(page, text)}


def is_help(command: Command) -> bool:
    return command.mark is None and command.key.endswith(" --help")


def is_mlmd(command: Command) -> bool:
    return command.mark is None and command.key.startswith("python -m pipeline.mlmd ")


def is_kubeflow(command: Command) -> bool:
    words = command.key.split()
    return (
        command.mark is None
        and words[:2] == ["python", "kubeflow/run_kubeflow.py"]
        and words[2] in ("compile", "manifests")
        and not in_block(command, *IR_TRY_IT)
    )


def is_generator(command: Command) -> bool:
    return command.mark is None and command.key.startswith("python -m pipeline.datasets.synthetic")


def run_here(command: Command) -> bool:
    return (
        is_help(command)
        or is_mlmd(command)
        or is_kubeflow(command)
        or is_generator(command)
        or in_block(command, *DIABETES)
    )


def is_suite(command: Command) -> bool:
    """A pytest command: the suite itself or a part of it."""
    return command.key.split()[:3] == ["python", "-m", "pytest"]


def run_by_ci(command: Command) -> bool:
    return command.key == "bash setup.sh"


def claims_in_tests() -> dict[str, str]:
    """{command key: test file} for every `pages.command(page, text)` and `pages.block(page,
    text)` in the tests, read from their source: the commands those tests run."""
    claims: dict[str, str] = {}
    for path in sorted((PROJECT_ROOT / "tests").rglob("*.py")):
        if path.parent.name == "docs" and path.name == "pages.py":
            continue
        tree = ast.parse(path.read_text())
        # Module-level string constants (PAGE = "docs/beam.md") stand for their value.
        constants = {
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            for target in node.targets
            if isinstance(target, ast.Name) and isinstance(node.value.value, str)
        }
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "pages"
                and node.func.attr in ("command", "block")
            ):
                continue
            args = [
                a.value if isinstance(a, ast.Constant) else constants.get(getattr(a, "id", ""))
                for a in node.args
            ]
            if len(args) != 2 or not all(isinstance(a, str) for a in args):
                continue
            found = getattr(pages, node.func.attr)(*args)
            for command in found if isinstance(found, list) else [found]:
                claims.setdefault(command.key, path.relative_to(PROJECT_ROOT).as_posix())
    return claims


# --- the pages as a whole --------------------------------------------------------------------


def test_pages_and_their_commands_are_found():
    assert {"README.md", "docs/kubeflow.md", "docs/benchmarks.md"} <= set(pages.pages())
    commands = pages.commands()
    assert len(commands) > 60
    # A continued command is one command; a `&&` chain two.
    compile_ = pages.command("docs/kubeflow.md", "--toleration nvidia.com/gpu:NoSchedule")
    assert compile_.key.startswith("python kubeflow/run_kubeflow.py compile --pipeline_root")
    first = [c.key for c in commands if c.page == README and c.line == 4]
    assert first == ["bash setup.sh", "python pipeline/run_local.py"]


def test_every_command_is_run_or_marked():
    claims = claims_in_tests()
    assert len(set(claims.values()) - {"tests/docs/test_doc_commands.py"}) >= 5, claims
    left = []
    for command in pages.commands():
        if command.mark or is_suite(command) or run_by_ci(command) or run_here(command):
            continue
        if command.key not in claims:
            left.append(f"{command.where}: {command.text}")
    assert not left, "commands no test runs and no mark excuses:\n" + "\n".join(left)


def test_what_runs_here_is_not_run_again_elsewhere():
    claims = claims_in_tests()
    here = "tests/docs/test_doc_commands.py"
    twice = [
        f"{c.where}: {c.key} (also {claims[c.key]})"
        for c in unique(pages.commands())
        if run_here(c) and claims.get(c.key, here) != here
    ]
    assert not twice


def test_marks_are_known():
    """A trailing comment that tries to excuse a command uses one of the marks exactly."""
    wrong = [
        f"{c.where}: # {c.comment}"
        for c in pages.commands()
        if c.mark is None and re.search(r"\b(needs|takes)\b", c.comment.split("; ")[-1])
    ]
    assert not wrong, "not one of tests/docs/pages.MARKS:\n" + "\n".join(wrong)


def test_no_command_outside_a_bash_block():
    found = []
    for page in pages.pages():
        fenced: set[int] = set()
        for block in pages.blocks(page):
            fenced.update(range(block.line, block.line + len(block.lines) + 2))
            if block.lang != "bash":
                found += [
                    f"{page}:{block.line}: ```{block.lang or '(no language)'} block: {line}"
                    for line in block.lines
                    if LOOKS_LIKE_A_COMMAND.match(line.strip())
                ]
        for number, line in enumerate(pages.read(page), start=1):
            if (
                number not in fenced
                and line.startswith("    ")
                and LOOKS_LIKE_A_COMMAND.match(line.strip())
            ):
                found.append(f"{page}:{number}: an indented block: {line.strip()}")
    assert not found, "\n".join(found)


def github_anchor(heading: str) -> str:
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: str) -> set[str]:
    fenced = set()
    for block in pages.blocks(page):
        fenced.update(range(block.line, block.line + len(block.lines) + 2))
    return {
        github_anchor(line.lstrip("#"))
        for number, line in enumerate(pages.read(page), start=1)
        if line.startswith("#") and number not in fenced
    }


def test_links_between_pages_resolve():
    broken = []
    for page in pages.pages():
        text = "\n".join(pages.read(page))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (PROJECT_ROOT / page).parent / path if path else PROJECT_ROOT / page
            if not resolved.exists():
                broken.append(f"{page}: {target}: no such file")
            elif anchor and anchor not in anchors(resolved.relative_to(PROJECT_ROOT).as_posix()):
                broken.append(f"{page}: {target}: no such heading")
    assert not broken, "\n".join(broken)


# Paths the pages name as examples of what a user adds.
EXAMPLE_PATHS = {"schemas/flowers/schema.pbtxt"}


def test_paths_the_pages_name_exist():
    missing = []
    tops = "pipeline|components|kubeflow|tests|benchmarks|schemas|docs"
    pattern = re.compile(rf"`((?:{tops})/[^`\s]*)`")
    for page in pages.pages():
        for path in pattern.findall("\n".join(pages.read(page))):
            path = path.split(":")[0].rstrip(".,")
            if re.search(r"[<>*{]|\.\.\.", path) or "/" not in path.rstrip("/"):
                continue
            # `components/ml/inputs.make_image_dataset`: a function of components/ml/inputs.py
            module = re.sub(r"\.\w+$", ".py", path)
            exists = (PROJECT_ROOT / path).exists() or (PROJECT_ROOT / module).exists()
            if not exists and path not in EXAMPLE_PATHS:
                missing.append(f"{page}: {path}")
    assert not missing, "\n".join(missing)


def test_readme_is_a_front_page():
    lines = pages.read(README)
    assert len(lines) < 150
    assert lines[:6] == [
        "# tfx-scaleout",
        "",
        "```bash",
        "bash setup.sh && .venv/bin/python pipeline/run_local.py",
        ".venv/bin/python -m pytest",
        "```",
    ]
    text = "\n".join(lines)
    assert not DATE.search(text)
    assert not re.search(r"\b\d+(\.\d+)? ?(s|ms|min|minutes|seconds|hours?)\b", text)
    # Every page is linked from the front page.
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)", text))
    assert linked == set(pages.pages()) - {README}


def test_dated_figures_only_on_the_benchmark_pages():
    dated = [
        f"{page}: {match}"
        for page in set(pages.pages()) - DATED_PAGES
        for match in DATE.findall("\n".join(pages.read(page)))
    ]
    assert not dated


def layout_block(page: str) -> list[str]:
    (block,) = [
        b
        for b in pages.blocks(page)
        if b.lang == "" and any(x.startswith("schemas/") for x in b.lines)
    ]
    return list(block.lines)


def test_readme_layout_matches_the_tree():
    text = "\n".join(layout_block(README))
    for top in ("components", "pipeline", "kubeflow", "schemas", "tests", "benchmarks"):
        assert re.search(rf"^{top}/", text, re.M), top
        assert (PROJECT_ROOT / top).is_dir()
    for parent in ("components", "pipeline"):
        for package in (PROJECT_ROOT / parent).iterdir():
            if (package / "__init__.py").exists():
                assert f"{package.name}/" in text, f"{parent}/{package.name} is not in the README"
    for name in re.findall(r"\b([\w]+)/ \(", text):
        assert list(PROJECT_ROOT.glob(f"*/{name}")), name


def test_full_layout_names_what_exists_and_everything_that_does():
    lines = layout_block("docs/layout.md")
    parent = None
    named: set[str] = set()
    for line in lines:
        entry = re.match(r"^( *)(\S+)", line)
        if not entry or len(entry.group(1)) >= 8:
            continue  # a continuation of the description
        name = entry.group(2)
        if not entry.group(1):
            parent, path = name.rstrip("/"), name
        else:
            path = f"{parent}/{name}"
        named.add(path.rstrip("/"))
        assert (PROJECT_ROOT / path).exists(), path
    for parent in ("components", "pipeline"):
        for child in (PROJECT_ROOT / parent).iterdir():
            if (child / "__init__.py").exists() or (
                parent == "pipeline" and child.suffix == ".py" and child.name != "__init__.py"
            ):
                assert f"{parent}/{child.name}" in named, f"{parent}/{child.name} not in layout.md"


def test_console_scripts_on_the_layout_page_are_pyprojects():
    text = "\n".join(pages.read("docs/layout.md"))
    rows = re.findall(r"^\| `python (?:-m )?([\w./]+)` \| `([\w-]+)` \|$", text, re.M)
    table = {script: target for target, script in rows}
    assert set(table) == set(scripts())
    for script, target in table.items():
        module = target.removesuffix(".py").replace("/", ".")
        assert scripts()[script].split(":")[0] in (module, f"{module}.cli"), (script, target)
    helps = {c.words()[0].removeprefix(".venv/bin/") for c in pages.commands("docs/layout.md")}
    assert set(scripts()) <= helps


def test_ci_runs_the_readme_commands():
    ci = (PROJECT_ROOT / ".ci" / "run").read_text().split("\n")
    assert "bash setup.sh" in ci
    assert ".venv/bin/python -m pytest" in ci
    assert ci.index("bash setup.sh") < ci.index(".venv/bin/python -m pytest")


def test_pytest_commands_name_tests_that_exist():
    with open(PROJECT_ROOT / "pyproject.toml", "rb") as handle:
        options = tomli.load(handle)["tool"]["pytest"]["ini_options"]
    markers = {m.split(":")[0] for m in options["markers"]}
    suite = [c for c in pages.commands() if is_suite(c)]
    assert len(suite) >= 3
    for command in suite:
        words = command.words()[3:]
        for index, word in enumerate(words):
            if words[index - 1] == "-m" and index:
                assert set(re.findall(r"\w+", word)) - {"not", "and", "or"} <= markers, word
            elif not word.startswith("-"):
                assert (PROJECT_ROOT / word).exists(), f"{command.where}: {word}"


# --- marked commands: checked as far as this machine allows ----------------------------------

PARSE_HARNESS = r"""
import argparse, contextlib, importlib, io, json, runpy, sys

class Parsed(BaseException):
    pass

depth = 0

def wrap(original):
    def call(self, args=None, namespace=None):
        global depth
        depth += 1
        try:
            result = original(self, args, namespace)
        finally:
            depth -= 1
        if depth == 0:
            raise Parsed()
        return result
    return call

argparse.ArgumentParser.parse_args = wrap(argparse.ArgumentParser.parse_args)
argparse.ArgumentParser.parse_known_args = wrap(argparse.ArgumentParser.parse_known_args)
results = []
for kind, target, argv in json.load(sys.stdin):
    err = io.StringIO()
    status = "ran without parsing"
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            sys.argv = [target, *argv]
            if kind == "module":
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            elif kind == "path":
                runpy.run_path(target, run_name="__main__")
            else:
                module, function = target.split(":")
                getattr(importlib.import_module(module), function)()
    except Parsed:
        status = "parsed"
    except SystemExit as exit:
        status = f"exit {exit.code}"
    except BaseException as error:
        status = f"{type(error).__name__}: {error}"
    results.append({"status": status, "stderr": err.getvalue()[-1500:]})
json.dump(results, sys.__stdout__)
"""


# The marked commands' placeholders (what they would name on a cluster).
MARKED_VALUES = {**pages.CLUSTER_VALUES, "ARTIFACT_ID": "7"}


def marked() -> list[Command]:
    return unique([c for c in pages.commands() if c.mark])


def program(command: Command, values: dict[str, str]) -> tuple[list[str], list[str]]:
    """(environment assignments, the program's words) with placeholders replaced."""
    words = shlex.split(pages.substitute(command.text, values, "/tmp"))
    env = []
    while words and re.match(r"^[A-Z_]+=", words[0]) and len(words) > 1:
        env.append(words.pop(0))
    return env, words


def parse_target(words: list[str]) -> tuple[str, str, list[str]] | None:
    """(kind, target, argv) for the harness when the words run one of the project's CLIs."""
    if words[0] in ("python", "python3", ".venv/bin/python"):
        if words[1] == "-m" and words[2].split(".")[0] in PROJECT_PACKAGES:
            return "module", words[2], words[3:]
        if (PROJECT_ROOT / words[1]).is_file():
            return "path", str(PROJECT_ROOT / words[1]), words[2:]
    name = words[0].removeprefix(".venv/bin/")
    if name in scripts():
        return "entry", scripts()[name], words[1:]
    return None


def source_of(kind: str, target: str) -> str:
    """The source of the program's module, and of the module its `main` comes from."""
    if kind == "path":
        text = Path(target).read_text()
    else:
        module = target.split(":")[0]
        base = PROJECT_ROOT.joinpath(*module.split("."))
        candidates = (base.with_suffix(".py"), base / "__main__.py", base / "__init__.py")
        text = next(c.read_text() for c in candidates if c.is_file())
    imported = re.search(r"^from ([\w.]+) import main$", text, re.M)
    if imported:
        text += source_of("module", imported.group(1))
    return text


def test_marked_commands_of_the_project_parse():
    values = MARKED_VALUES
    jobs, where = [], []
    for command in marked():
        target = parse_target(program(command, values)[1])
        if target is None:
            continue
        # The harness stops each CLI when its parser returns; a program without one would run.
        assert "ArgumentParser" in source_of(*target[:2]), f"{command.where}: no argparse"
        jobs.append(target)
        where.append(command)
    assert len(jobs) >= 12
    # The control: the harness refuses what a CLI refuses (a flag it does not have).
    control = [(kind, target, [*argv, "--no_such_flag"]) for kind, target, argv in jobs]
    result = subprocess.run(
        [sys.executable, "-c", PARSE_HARNESS],
        input=json.dumps(jobs + control),
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, explain(result)
    outcomes = json.loads(result.stdout)
    outcomes, refused = outcomes[: len(jobs)], outcomes[len(jobs) :]
    assert all(o["status"] == "exit 2" for o in refused), refused
    failed = [
        f"{c.where}: {c.text}\n  {o['status']}: {o['stderr']}"
        for c, o in zip(where, outcomes, strict=True)
        if o["status"] != "parsed"
    ]
    assert not failed, "\n".join(failed)


def test_marked_commands_outside_the_project_are_checked_here():
    values = MARKED_VALUES
    unchecked = []
    for command in marked():
        env, words = program(command, values)
        if parse_target(words) is not None:
            continue
        if words[:1] == ["bash"] and words[1].startswith("kubeflow/"):
            script = PROJECT_ROOT / words[1]
            text = script.read_text()
            assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
            for flag in (w for w in words[2:] if w.startswith("--")):
                assert re.search(rf"^\s*{re.escape(flag)}\)", text, re.M), (command.where, flag)
            for name in (e.split("=")[0] for e in env):
                assert re.search(rf"\${{?{name}\b", text), (command.where, name)
        elif words[:1] == ["kubectl"]:
            for index, word in enumerate(words):
                if word == "-f" and words[index + 1] != "-":
                    with open(PROJECT_ROOT / words[index + 1]) as handle:
                        documents = [d for d in yaml.safe_load_all(handle) if d]
                    assert documents and all("kind" in d for d in documents), command.where
        elif words[:1] == ["export"]:
            name = words[1].split("=")[0]
            code = "".join(
                path.read_text()
                for top in ("pipeline", "kubeflow")
                for path in (PROJECT_ROOT / top).rglob("*.py")
            )
            assert re.search(rf"""["']{name}["']""", code), f"{command.where}: {name} unread"
        else:
            unchecked.append(f"{command.where}: {command.text}")
    assert not unchecked, "marked commands with no check:\n" + "\n".join(unchecked)


# --- cheap commands, run for real ------------------------------------------------------------


def test_help_commands(tmp_path):
    commands = unique([c for c in pages.commands() if is_help(c)])
    assert len(commands) >= 10
    sandbox = Sandbox(tmp_path)
    for command in commands:
        result = sandbox.run(command, timeout=300)
        assert result.returncode == 0, f"{command.where}\n{explain(result)}"
        assert result.stdout.startswith("usage:"), f"{command.where}\n{result.stdout[:500]}"


@pytest.fixture(scope="module")
def store_sandbox(tmp_path_factory):
    """A sandbox whose ./tfx_output holds one pipeline's store: three runs written the way TFX's
    LocalDagRunner writes them (run 3 on shifted data, a new category and a schema change)."""
    from tests.pipeline.mlmd import tfx_store

    sandbox = Sandbox(tmp_path_factory.mktemp("mlmd-sandbox"))
    base = sandbox.output_root / tfx_store.PIPELINE
    base.mkdir(parents=True)
    runs = tfx_store.record_runs(str(base / "metadata.sqlite"), str(base / "pipeline_root"))
    examples = runs["run-1"]["CsvExampleGen"]["outputs"]["examples"]
    values = {
        "RUN": "3",
        "--compare RUN": "1",
        "RUN_A": "1",
        "RUN_B": "3",
        "ARTIFACT_ID": str(examples),
    }
    return sandbox, values


# What the pages say each command shows, checked on the store's three runs.
MLMD_SHOWS = {
    "runs": ["COMPLETE", "run-1", "run-3"],
    "executions": ["CsvExampleGen", "Trainer", "Pusher"],
    "artifacts": ["Model"],
    "lineage": ["CsvExampleGen", "Transform", "Trainer"],
    "diff": ["DRIFTED", "island"],
    "evaluation": ["Model blessed", "sparse_categorical_accuracy"],
}


def test_mlmd_commands_on_a_store(store_sandbox):
    sandbox, values = store_sandbox
    commands = unique([c for c in pages.commands() if is_mlmd(c)])
    assert {c.words()[3] for c in commands} == set(MLMD_SHOWS) | {"report"}
    for command in commands:
        report = sandbox.root / "run.html"
        report.unlink(missing_ok=True)
        result = sandbox.run(command, values, timeout=300)
        assert result.returncode == 0, f"{command.where}\n{explain(result)}"
        subcommand = command.words()[3]
        for text in MLMD_SHOWS.get(subcommand, []):
            assert text in result.stdout, f"{command.where}: {text!r} not in\n{result.stdout}"
        if subcommand == "report":
            page = report.read_text()
            assert "<svg" in page and "<script" not in page, command.where
            if "--compare" in command.text:
                assert "DRIFTED" in page, command.where


# What each compiled file holds, by a flag of its command.
COMPILED_HOLDS = {
    "--beam_runner dataflow": ["--runner=DataflowRunner", "example-project"],
    "--toleration": ["nvidia.com/gpu", "nvidia-l4"],
    "manifests": ["kind: TrainJob", "kind: TrainingRuntime"],
}


def test_kubeflow_compile_and_manifests(tmp_path):
    commands = unique([c for c in pages.commands() if is_kubeflow(c)])
    assert len(commands) >= 4
    for index, command in enumerate(commands):
        sandbox = Sandbox(tmp_path / str(index))
        result = sandbox.run(command, timeout=300)
        assert result.returncode == 0, f"{command.where}\n{explain(result)}"
        words = command.words()
        if words[2] == "compile":
            output = sandbox.root / "pipeline.yaml"
            assert "pipelineInfo" in output.read_text(), command.where
        else:
            output = sandbox.root / words[-1]  # `> training.yaml`
        text = output.read_text()
        for flag, holds in COMPILED_HOLDS.items():
            if flag in command.text:
                for item in holds:
                    assert item in text, f"{command.where}: {item!r} not in {output.name}"


def test_data_generators(tmp_path):
    commands = unique([c for c in pages.commands() if is_generator(c)])
    assert len(commands) >= 2
    for index, command in enumerate(commands):
        sandbox = Sandbox(tmp_path / str(index))
        values = {"N": "300", "F": "3", "S": "1", "DIR": "synth"}
        result = sandbox.run(command, values, timeout=300)
        assert result.returncode == 0, f"{command.where}\n{explain(result)}"
        words = pages.substitute(command.text, values, str(sandbox.tmp)).split()
        out = sandbox.root / words[words.index("--out") + 1]
        files = sorted(out.glob("*.csv"))
        rows = sum(f.read_text().count("\n") - 1 for f in files)
        assert len(files) == int(words[words.index("--files") + 1]), command.where
        assert rows == int(words[words.index("--rows") + 1]), command.where


# --- the doc's own scenarios, slow -----------------------------------------------------------


@pytest.mark.slow
def test_diabetes_regression_as_csv_md_shows_it(tmp_path):
    """csv.md's regression block: the data written to ~/diabetes, the run (auto: regression,
    blessed, pushed), then predictions for new.csv in the label's units."""
    *run, predict = pages.block(*DIABETES)
    sandbox = Sandbox(tmp_path)
    result = sandbox.run(run, timeout=1200)
    assert result.returncode == 0, explain(result)
    assert "task regression" in result.stdout and "blessed:       yes" in result.stdout
    with open(sandbox.home / "diabetes" / "diabetes.csv") as source:
        lines = source.read().splitlines()
    (sandbox.root / "new.csv").write_text("\n".join(lines[:3]) + "\n")
    predicted = sandbox.run(predict, timeout=300)
    assert predicted.returncode == 0, explain(predicted)
    shown = re.compile(r"new\.csv:(\d+)\tprogression=(\d+(?:\.\d+)?)")
    assert [shown.fullmatch(line).group(1) for line in predicted.stdout.splitlines()] == ["2", "3"]
    # The page's own example output has the same shape.
    assert shown.search("\n".join(pages.read("docs/csv.md")))
