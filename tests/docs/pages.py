"""The commands of README.md and docs/*.md, read from the pages, and a sandbox that runs them as
a user types them.

A command is a line of a fenced ```bash block, with its backslash continuations; a `&&` chain is
split into its parts; full-line comments are prose. Every command is run by a test that takes
its text from here (`command()`, `block()`; tests/docs/test_doc_commands.py checks that none is
left out), or it is marked at its end with one of the MARKS and checked as far as this machine
allows.

`Sandbox.run` runs the page's text through bash in a directory that links the checkout's
top-level entries (so `pipeline/run_local.py`, `schemas/...` and `.venv/bin/python` resolve as in
the checkout) and keeps every write inside it: the working directory (`./tfx_output`,
`pipeline.yaml`, `run.html` land there), HOME (`~/diabetes`), TMPDIR, and /tmp/ paths on the page
(rewritten to the sandbox's tmp/). `python` is the venv's interpreter, as after
`source .venv/bin/activate`. The placeholders a page shows in capitals (DIR, COLUMN, RUN, ...)
are replaced by the values the test gives, looked up as "--flag NAME" first, then as "NAME"; an
optional part in brackets ([RUN], [--compare RUN]) is included with its value.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# What the sandbox links from the checkout (never setup.sh: it would reinstall the project from
# the sandbox).
LINKED = (
    "pipeline",
    "components",
    "kubeflow",
    "schemas",
    "benchmarks",
    "examples",
    "tests",
    ".venv",
    "pyproject.toml",
    "requirements.lock",
)

# How a page marks a command that the tests do not run: the end of its trailing comment.
MARKS = {
    "cluster": re.compile(r"needs a cluster"),
    "registry": re.compile(r"needs a registry"),
    "long": re.compile(
        r"takes (?:about |under )?(?:\d+ minutes?|minutes|an hour|\d+ hours?)(?: on \d+ cores)?"
    ),
}

# The values of the placeholders every page uses the same way (cluster names, image references).
CLUSTER_VALUES = {
    "BUCKET": "bucket",
    "REGISTRY": "registry.example.com",
    "TAG": "0.1.0",
    "DIGEST": "1" * 64,
    "GPU_DIGEST": "2" * 64,
    "PROJECT": "example-project",
    "NAMESPACE": "kubeflow-user",
    "RUN_ID": "run-1",
}
# Every placeholder the pages use; one left in a command after substitution is an error.
PLACEHOLDERS = frozenset(
    [*CLUSTER_VALUES, "DIR", "COLUMN", "RUN", "RUN_A", "RUN_B", "ARTIFACT_ID", "N", "F", "S"]
)

_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)\s*$")
_CAPS = re.compile(r"\b[A-Z](?:[A-Z0-9_]*[A-Z0-9])?\b")
_OPTIONAL = re.compile(r"\[((?:--[\w-]+ )?[A-Z][A-Z0-9_]*)\]")
_TMP = re.compile(r"(?<![\w/.])/tmp/")


def pages() -> list[str]:
    """README.md and every docs/*.md, as paths relative to the checkout."""
    docs = sorted(p.relative_to(PROJECT_ROOT).as_posix() for p in PROJECT_ROOT.glob("docs/*.md"))
    return ["README.md", *docs]


def read(page: str) -> list[str]:
    return (PROJECT_ROOT / page).read_text().split("\n")


@dataclasses.dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    lines: tuple[str, ...]  # the block's lines, the fence's indentation removed


def blocks(page: str) -> list[Block]:
    found, current, start, lang, indent = [], None, 0, "", ""
    for number, line in enumerate(read(page), start=1):
        fence = _FENCE.match(line)
        if current is None:
            if fence:
                current, start, lang, indent = [], number, fence["lang"], fence["indent"]
            continue
        if fence and not fence["lang"]:
            found.append(Block(page, start, lang, tuple(current)))
            current = None
            continue
        current.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
    assert current is None, f"{page}:{start}: a fenced block is never closed"
    return found


def split_comment(line: str) -> tuple[str, str]:
    """(code, trailing comment) of one shell line: the first `#` outside quotes that starts a
    word."""
    quote = None
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1] in " \t"):
            return line[:index].rstrip(), line[index + 1 :].strip()
    return line.rstrip(), ""


def key(text: str) -> str:
    """A command's identity: its words, `.venv/bin/python` and `python` being the same."""
    words = " ".join(text.split())
    return re.sub(r"^(?:\.venv/bin/)?python3? ", "python ", words)


@dataclasses.dataclass(frozen=True)
class Command:
    page: str
    line: int  # 1-based, of its first line
    text: str  # continuation lines joined, the trailing comment removed
    comment: str  # the trailing comment of its last line, "" if none
    block_line: int  # the line of its block's opening fence

    @property
    def key(self) -> str:
        return key(self.text)

    @property
    def mark(self) -> str | None:
        """ "cluster", "registry" or "long" when the comment ends with that mark, else None."""
        last = self.comment.split("; ")[-1] if self.comment else ""
        for name, pattern in MARKS.items():
            if pattern.fullmatch(last):
                return name
        return None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def words(self) -> list[str]:
        return shlex.split(self.text)


def block_commands(block: Block) -> list[Command]:
    commands: list[Command] = []
    pending: list[str] = []
    first = 0
    for offset, raw in enumerate(block.lines, start=1):
        number = block.line + offset
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        code, comment = split_comment(raw)
        if not pending:
            first = number
        if code.endswith("\\"):
            pending.append(code[:-1].strip())
            continue
        pending.append(code.strip())
        text = " ".join(part for part in pending if part)
        pending = []
        for part in re.split(r"\s+&&\s+", text):
            commands.append(Command(block.page, first, part, comment, block.line))
    assert not pending, f"{block.page}:{first}: a continued line never ends"
    return commands


def commands(page: str | None = None) -> list[Command]:
    """Every command of one page, or of every page."""
    found = []
    for name in [page] if page else pages():
        for block in blocks(name):
            if block.lang == "bash":
                found.extend(block_commands(block))
    return found


def command(page: str, text: str) -> Command:
    """The one command of the page whose identity is `text`, or the one that contains it (the
    same command may stand on the page more than once)."""
    on_page = commands(page)
    wanted = key(text)
    matches = [c for c in on_page if c.key == wanted] or [c for c in on_page if wanted in c.key]
    assert matches, f"no command of {page} is or contains {text!r}"
    assert len({c.key for c in matches}) == 1, (
        f"{text!r} names several commands of {page}: " + "; ".join(c.key for c in matches)
    )
    return matches[0]


def block(page: str, text: str) -> list[Command]:
    """Every command of the bash block of the page that holds the command `text` names."""
    first = command(page, text)
    return [c for c in commands(page) if c.block_line == first.block_line]


def substitute(text: str, values: Mapping[str, str], tmp: str) -> str:
    """The command with its optional parts included, /tmp/ moved to `tmp` and its placeholders
    replaced ("--flag NAME" before "NAME"); fails on a placeholder without a value."""
    text = _OPTIONAL.sub(r"\1", text)
    text = _TMP.sub(tmp.rstrip("/") + "/", text)
    out, last = [], 0
    for match in _CAPS.finditer(text):
        name, start, end = match.group(), match.start(), match.end()
        if start and text[start - 1] in "${" or text[end : end + 1] == "=":
            continue  # a shell variable or an environment assignment
        flag = re.search(r"(--[\w-]+)[ =]$", text[:start])
        value = values.get(f"{flag.group(1)} {name}") if flag else None
        if value is None:
            value = values.get(name)
        if value is None:
            assert name not in PLACEHOLDERS, f"no value for {name} in: {text}"
            continue
        out.append(text[last:start] + value)
        last = end
    return "".join(out) + text[last:]


class Sandbox:
    """A directory that looks like the checkout to the pages' commands and holds what they
    write."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        for name in LINKED:
            link = self.root / name
            if not link.exists():
                link.symlink_to(PROJECT_ROOT / name)
        for name in ("home", "tmp", "bin"):
            (self.root / name).mkdir(exist_ok=True)
        python = self.root / "bin" / "python"
        if not python.exists():
            # A wrapper, not a link: a venv's interpreter finds its pyvenv.cfg by its own path.
            python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
            python.chmod(0o755)

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def output_root(self) -> Path:
        """Where run_local.py writes by default (./tfx_output)."""
        return self.root / "tfx_output"

    def env(self) -> dict[str, str]:
        return dict(
            os.environ,
            HOME=str(self.home),
            TMPDIR=str(self.tmp),
            PATH=f"{self.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        )

    def script(self, commands: Command | Iterable[Command], values=None, replace=None) -> str:
        """The commands as a bash script; `replace` swaps literal text first (a port the page
        names for a free one)."""
        if isinstance(commands, Command):
            commands = [commands]
        merged = {**CLUSTER_VALUES, **(values or {})}
        lines = []
        for command in commands:
            text = command.text
            for old, new in (replace or {}).items():
                assert old in text, f"{command.where}: no {old!r} to replace"
                text = text.replace(old, new)
            lines.append(substitute(text, merged, str(self.tmp)))
        return "set -eo pipefail\n" + "\n".join(lines) + "\n"

    def run(
        self,
        commands: Command | Iterable[Command],
        values=None,
        timeout: float = 1200,
        replace=None,
    ) -> subprocess.CompletedProcess:
        """The commands as one bash script in the sandbox; stops at the first that fails."""
        return subprocess.run(
            ["bash", "-c", self.script(commands, values, replace)],
            cwd=self.root,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, command: Command, log, values=None, replace=None) -> subprocess.Popen:
        """A command the page runs in the background (`... &`), in its own process group,
        its output to `log`."""
        script = self.script(command, values, replace).rstrip()
        assert script.endswith("&"), f"{command.where} does not run in the background"
        return subprocess.Popen(
            ["bash", "-c", "exec " + script.split("\n", 1)[1].rstrip("&").strip()],
            cwd=self.root,
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def explain(result: subprocess.CompletedProcess) -> str:
    return (
        f"exit {result.returncode}\n{result.args[-1] if result.args else ''}\nstdout:\n"
        f"{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"
    )
