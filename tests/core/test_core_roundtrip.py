"""Property: for random texts diffed by real `git diff --no-index`, apply then reverse is the identity."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from hypothesis import event, given, settings
from hypothesis import strategies as st

from vllm_hotfix_guard.core.hunk_apply import FileState, detect, plan_patch
from vllm_hotfix_guard.core.diff import parse_patch

BODIES = st.one_of(
    st.sampled_from(["", "x", "def f():", "    return 1", "é", "中文 ", "\t tab", "a\rb", "-- ", "--- x", "+++ y", "@@"]),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\0"), max_size=6),
)
LINES = st.tuples(BODIES, st.sampled_from(["\n", "\r\n"])).map("".join)


@st.composite
def texts(draw, base: list[str] | None = None) -> list[str]:
    lines = list(base) if base is not None else draw(st.lists(LINES, max_size=25))
    for _ in range(draw(st.integers(0, 4)) if base is not None else 0):
        at = draw(st.integers(0, len(lines)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        if op == "insert" or not lines or at == len(lines):
            lines.insert(at, draw(LINES))
        elif op == "delete":
            del lines[at]
        else:
            lines[at] = draw(LINES)
    return lines


def _bytes(lines: list[str], no_final_newline: bool) -> bytes:
    data = "".join(lines).encode()
    if no_final_newline:
        data = data.rstrip(b"\n").removesuffix(b"\r")
    return data


@st.composite
def pairs(draw):
    old_lines = draw(texts())
    new_lines = draw(texts(old_lines))
    return _bytes(old_lines, draw(st.booleans())), _bytes(new_lines, draw(st.booleans()))


def _git_diff(old: bytes, new: bytes) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "a").mkdir()
        (Path(tmp) / "b").mkdir()
        (Path(tmp) / "a" / "f.txt").write_bytes(old)
        (Path(tmp) / "b" / "f.txt").write_bytes(new)
        done = subprocess.run(["git", "diff", "--no-index", "--text", "a/f.txt", "b/f.txt"], cwd=tmp,
                              capture_output=True)
        assert done.returncode == 1, done.stderr
        return done.stdout


@settings(max_examples=60, deadline=None)
@given(pairs())
def test_apply_then_reverse_is_byte_exact(pair):
    old, new = pair
    if old == new:
        return
    patch = parse_patch(_git_diff(old, new), strip=2)
    (edit,) = plan_patch(patch, lambda path: FileState(old, 0o644)).edits
    assert edit.after == new
    (back,) = plan_patch(patch, lambda path: FileState(new, 0o644), reverse=True).edits
    assert back.after == old
    detection = detect(patch, lambda path: FileState(new, 0o644))
    if detection.state == "applicable":
        # Legitimate only when the patch's context really occurs again in the result (git apply agrees).
        event("patch applies twice")
        assert detection.plan.edits[0].after != new
    else:
        assert detection.state == "applied" and detection.plan.edits[0].after == old


def test_a_patch_that_applies_twice_is_not_mistaken_for_applied(tmp_path):
    # deleting one of ten identical lines: the result still holds the context, so it applies again
    old, new = b"k\n" * 10, b"k\n" * 9
    patch = parse_patch(_git_diff(old, new), strip=2)
    assert detect(patch, lambda path: FileState(new, 0o644)).state == "applicable"
    (tmp_path / "f.txt").write_bytes(new)
    (tmp_path / "p.diff").write_bytes(_git_diff(old, new))
    assert subprocess.run(["git", "apply", "--check", "-p2", "p.diff"], cwd=tmp_path).returncode == 0
