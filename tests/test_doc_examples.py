"""The shell examples of README.md and docs/*.md, run: each `shell` block's commands against a real vLLM
0.30.0 install, their output compared with the output shown (the convention: docs/testing.md, "Examples").

A `shell` block is a session: `$ command` lines, each followed by the output it prints (stdout and stderr
as a terminal shows them), run in one shell (a `cd` or an `export` carries on to the block's next
commands). The blocks of one page run in order in one sandbox: a private copy of a real
vLLM 0.30.0 install standing for `/opt/venv`, its own state directory and working directory. In the shown
output `...` on a line of its own stands for any number of lines, `...` inside a line for any text.
A `console` block is a session that is not run (it needs a GPU, a cluster, a registry, the network, or
data the tests do not have); the comment `<!-- not run: WHY -->` right above it says why, and their
number may only go down. A `$ ` line in any other block is refused: every example is one or the other.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import realdata

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M)
NOT_RUN = re.compile(r"<!-- not run: (?P<why>[^>]+?) -->\s*$")
STAND_IN = "/opt/venv"  # the docs' name for the target venv
STAND_IN_SITE = "/opt/venv/lib/python3.11/site-packages"
MAX_NOT_RUN = 15  # a ratchet: examples that are not run may only become fewer
MARK = "@@hotfix-doc-example-step@@"  # printed before each command: where its output starts


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    command: str
    expected: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Block:
    page: Path
    line: int
    lang: str
    steps: tuple[Step, ...]
    why_not_run: str | None

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def _steps(body: str) -> tuple[Step, ...]:
    steps: list[Step] = []
    command: list[str] | None = None
    expected: list[str] = []
    continued = False
    for line in body.rstrip("\n").split("\n"):
        if continued:
            command.append(line)
            continued = line.endswith("\\")
        elif line.startswith("$ "):
            if command is not None:
                steps.append(Step(command="\n".join(command), expected=tuple(expected)))
            command, expected = [line[2:]], []
            continued = line.endswith("\\")
        elif command is not None:
            expected.append(line)
    if command is not None:
        steps.append(Step(command="\n".join(command), expected=tuple(expected)))
    return tuple(steps)


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        body = match.group("body")
        if not re.search(r"^ *\$ ", body, re.M):
            continue
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        why = NOT_RUN.search(before)
        found.append(Block(page=page, line=text.count("\n", 0, match.start()) + 1, lang=match.group("lang"),
                           steps=_steps(body), why_not_run=why.group("why") if why else None))
    return found


ALL = [block for page in PAGES for block in blocks(page)]
RUN = [block for block in ALL if block.lang == "shell"]


def test_every_session_is_marked_run_or_not_run():
    wrong = [f"{b.name}: ```{b.lang}" for b in ALL if b.lang not in ("shell", "console")]
    assert not wrong, "a block of `$ command` lines is ```shell (run) or ```console (not run): " + ", ".join(wrong)
    unexplained = [b.name for b in ALL if b.lang == "console" and b.why_not_run is None]
    assert not unexplained, "a ```console block says why it is not run (<!-- not run: WHY --> above it)"
    explained_run = [b.name for b in ALL if b.lang == "shell" and b.why_not_run is not None]
    assert not explained_run


def test_not_run_is_the_exception():
    not_run = [b for b in ALL if b.lang == "console"]
    assert len(not_run) <= MAX_NOT_RUN, f"{len(not_run)} examples are not run (at most {MAX_NOT_RUN}): run them"
    assert len(RUN) >= 7 and all(b.lang == "shell" for b in RUN)
    readme = [b for b in ALL if b.page.name == "README.md"]
    assert readme and all(b.lang == "shell" for b in readme), "every example of the README runs"


def test_parser_reads_sessions():
    (step1, step2) = _steps("$ a \\\n  b\nout 1\n...\n$ c\n")
    assert step1 == Step(command="a \\\n  b", expected=("out 1", "..."))
    assert step2 == Step(command="c", expected=())
    assert matches(["x", "y /p/q z", "w"], ["x", "y ... z", "..."]) and matches([], ["..."])
    assert not matches(["x", "y"], ["x"]) and not matches(["a"], ["b"]) and matches(["a", "b"], ["...", "b"])


def _line_pattern(expected: str) -> re.Pattern:
    return re.compile(".*".join(re.escape(part) for part in expected.split("...")) + r"\Z", re.S)


def matches(lines: list[str], expected: list[str]) -> bool:
    """`...` alone: any number of lines; inside a line: any text (greedy, with backtracking)."""
    if not expected:
        return not lines
    head, rest = expected[0], expected[1:]
    if head == "...":
        return any(matches(lines[i:], rest) for i in range(len(lines) + 1))
    return bool(lines) and bool(_line_pattern(head).match(lines[0])) and matches(lines[1:], rest)


class Sandbox:
    def __init__(self, root: Path):
        self.root = root
        venv = realdata.copy_venv(realdata.vllm_template("0.30.0"), root / "venv")
        self.venv, self.cwd = venv, root / "work"
        self.cwd.mkdir()
        cache = realdata.CACHE
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith(("HOTFIX_", "PIP_", "COLUMNS", "LINES"))},
                    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                    "HOTFIX_STATE_DIR": str(root / "state"), "PYTHONUNBUFFERED": "1", "NO_COLOR": "1",
                    # a `pip install` in an example reinstalls from the cached wheels, never from an index
                    "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(realdata.WHEELS), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        if cache.name == "vllm-hotfix":  # hotfix's own wheel cache is $XDG_CACHE_HOME/vllm-hotfix/wheels
            self.env["XDG_CACHE_HOME"] = str(cache.parent)

    def to_real(self, text: str) -> str:
        text = text.replace(STAND_IN_SITE, str(self.venv.site_packages))
        return re.sub(re.escape(STAND_IN) + r"(?=[/\s'\"]|$)", str(self.venv.root), text)

    def to_docs(self, text: str) -> str:
        return text.replace(str(self.venv.site_packages), STAND_IN_SITE).replace(str(self.venv.root), STAND_IN)

    def run(self, block: Block) -> list[list[str]]:
        """The block's commands in one shell, as typed at a terminal (`cd`, `export` carry on): what each printed."""
        script = "".join(f"printf '%s\\n' {MARK}\n{self.to_real(step.command)}\n" for step in block.steps)
        done = subprocess.run(["bash", "-c", script], cwd=self.cwd, env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=900)
        parts = self.to_docs(done.stdout).split(MARK + "\n")[1:]
        return [part.rstrip("\n").split("\n") if part.strip() else [] for part in parts]


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.parametrize("page", sorted({b.page for b in RUN}), ids=lambda p: str(p.relative_to(REPO)))
def test_examples_print_what_the_docs_show(page, tmp_path, vllm_template):
    sandbox = Sandbox(tmp_path)
    for block in (b for b in RUN if b.page == page):
        printed = sandbox.run(block)
        assert len(printed) == len(block.steps), f"{block.name}: the shell ended early"
        for step, got in zip(block.steps, printed):
            assert matches(got, list(step.expected)), (
                f"{block.name}: $ {step.command}\n--- shown:\n" + "\n".join(step.expected)
                + "\n--- printed:\n" + "\n".join(got))
