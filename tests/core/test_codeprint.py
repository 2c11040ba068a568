"""What a fix changes in code: touched names from the syntax tree, changed line ranges from placed hunks,
and code fingerprints stable across processes and paths (on every supported Python that is installed)."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

import realdata
from vllm_hotfix_guard.core import codeprint
from vllm_hotfix_guard.core.diff import parse_patch
from vllm_hotfix.core.regions import changed_ranges, spans_of
from vllm_hotfix.core.render import file_diff
from vllm_hotfix.flow.series import apply_part

BEFORE = textwrap.dedent('''\
    import os

    LIMIT = 4


    def helper(x):
        def inner(y):
            return y + 1
        return inner(x)


    class State(Base):
        size = 16

        def __init__(self):
            self.n = 0
            self.m = 1

        @property
        def block(self):
            return self.size

        def add(self, req):
            return req // self.size

        class Inner:
            def deep(self):
                return 1
    ''').encode()


def regions_of(before: bytes, after: bytes, path: str = "m.py") -> list:
    """The changed line ranges of ``after`` as the applier places a git-style diff of the two."""
    patch = parse_patch(file_diff(path, before, after))
    result, placed = apply_part(patch, path, before, 0o100644)
    assert result == after
    return changed_ranges([spans_of(fp.hunks, placements) for fp, placements in placed])


@pytest.mark.parametrize("old, new, names", [
    (b"        return req // self.size\n", b"        return req // self.block\n", [("State.add", "method")]),
    (b"        return y + 1\n", b"        return y + 2\n", [("helper", "function")]),  # nested: the outer def
    (b"    size = 16\n", b"    size = 32\n", [("State", "class")]),
    (b"    @property\n", b"    @property  # the decorator line\n", [("State.block", "method")]),
    (b"            return 1\n", b"            return 2\n", [("State.Inner.deep", "method")]),
    (b"LIMIT = 4\n", b"LIMIT = 8\n", []),  # module-level lines name nothing
    (b"        self.m = 1\n\n", b"        self.m = 1\n\n\n", []),  # a blank line between methods is no code
    (b"        self.m = 1\n", b"", [("State.__init__", "method")]),  # a deletion inside a method
])
def test_touched_names_the_innermost_function_or_the_class_body(old, new, names):
    assert BEFORE.count(old) == 1
    after = BEFORE.replace(old, new)
    assert codeprint.touched(after, regions_of(BEFORE, after)) == names


def test_a_hunk_over_two_methods_names_both_and_a_second_step_moves_the_first():
    after = BEFORE.replace(b"        self.n = 0\n", b"        self.n = 2\n").replace(
        b"        return req // self.size\n", b"        return req // self.block\n")
    regions = regions_of(BEFORE, after)
    assert codeprint.touched(after, regions) == [("State.__init__", "method"), ("State.add", "method")]
    # two file patches of one hotfix touching the file in turn: the first one's lines moved by the second
    first = BEFORE.replace(b"        return req // self.size\n", b"        return req // self.block\n")
    second = first.replace(b"import os\n", b"import os\nimport sys\nimport re\n")
    steps = []
    for old, new in ((BEFORE, first), (first, second)):
        patch = parse_patch(file_diff("m.py", old, new))
        _, placed = apply_part(patch, "m.py", old, 0o100644)
        steps += [spans_of(fp.hunks, placements) for fp, placements in placed]
    assert codeprint.touched(second, changed_ranges(steps)) == [("State.add", "method")]


def test_code_objects_by_qualified_name_as_the_compiler_names_them():
    codes = codeprint.code_objects(compile(BEFORE, "m.py", "exec"))
    assert {"helper", "helper.<locals>.inner", "State", "State.__init__", "State.block", "State.add",
            "State.Inner", "State.Inner.deep"} <= set(codes)


def test_a_fingerprint_ignores_path_and_lines_and_sees_bytecode_constants_and_names():
    base = codeprint.fingerprints(BEFORE, ["State.add"], "a.py")["State.add"]
    moved = b"\n\n# a comment\n" + BEFORE
    assert codeprint.fingerprints(moved, ["State.add"], "/elsewhere/b.py")["State.add"] == base
    for old, new in ((b"req // self.size", b"req // self.block"), (b"req // self.size", b"req % self.size"),
                     (b"return req // self.size", b"return (req + 0) // self.size")):
        assert codeprint.fingerprints(BEFORE.replace(old, new), ["State.add"])["State.add"] != base
    assert codeprint.fingerprints(BEFORE, ["State.nothing"]) == {"State.nothing": None}


FROZEN = b'def f(x):\n    return x in {"alpha", "beta", "gamma", "delta", "epsilon"}\n'


def prints_in(python: str, seed: str) -> str:
    """f's fingerprint computed in a fresh ``python`` with PYTHONHASHSEED=seed (core/codeprint.py run as the
    script export runs there)."""
    source = Path(codeprint.__file__).read_text()
    line = BEFORE.splitlines().index(b"        return req // self.size")
    request = repr([("k", FROZEN, [(1, 2)], FROZEN, "f.py"), ("b", BEFORE, [(line, line + 1)], BEFORE, "m.py")])
    done = subprocess.run([python, "-c", source], input=request, capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": seed})
    line = next(line for line in done.stdout.splitlines() if line.startswith(codeprint.MARKER))
    return line[len(codeprint.MARKER):]


@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12", "3.13"])
def test_fingerprints_are_stable_across_processes_of_one_interpreter(version):
    """Frozenset constants iterate in string-hash order, which changes with PYTHONHASHSEED: the fingerprint
    sorts them, so every process of one interpreter gives the same answer, and its cache tag says which."""
    python = realdata.find_python(version)
    if python is None:
        pytest.skip(f"python{version} is not installed here")
    answers = {prints_in(python, seed) for seed in ("0", "1", "12345")}
    assert len(answers) == 1, answers
    import ast

    answer = ast.literal_eval(answers.pop())
    assert answer["interpreter"] == f"cpython-{version.replace('.', '')}"
    assert [name for name, _, _ in answer["results"]["k"]] == ["f"]
    assert [tuple(entry[:2]) for entry in answer["results"]["b"]] == [("State.add", "method")]


def test_a_file_that_does_not_parse_is_an_answer_not_a_crash():
    answer = codeprint.answer([("k", b"def f(:\n", [(0, 1)], b"def f(:\n", "x.py")])
    assert answer["results"]["k"].startswith("SyntaxError:")


def test_module_names_follow_the_import_watch():
    assert codeprint.module_name("vllm/v1/worker/mamba_utils.py") == "vllm.v1.worker.mamba_utils"
    assert codeprint.module_name("vllm/v1/__init__.py") == "vllm.v1"
