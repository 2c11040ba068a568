"""Fuzz the parser and the planner with diff-shaped garbage: only HotfixError may escape, and every
input finishes in bounded time, huge hunk numbers included."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_hotfix_guard.core.hunk_apply import FileState, detect, plan_patch
from vllm_hotfix_guard.core.diff import exclude_paths, normalised_diff_bytes, parse_patch, reverse_patch
from vllm_hotfix_guard.errors import HotfixError

import pytest

NAMES = st.sampled_from([b"x", b"d/x", b"d", b"y", b"/abs/x", b"../x", b"a b", b'"q\\tx"', b"/dev/null", b""])
PREFIXED = st.builds(lambda p, n: p + n, st.sampled_from([b"a/", b"b/", b"", b"a//"]), NAMES)
NUMBERS = st.one_of(st.integers(0, 12), st.sampled_from([2000000000, 98765432109876543210, 2**63, 10**40]))
TEXT = st.sampled_from([b"a", b"b", b"c", b"", b"a\r", b"-- ", b"--- a/x", b"+++ b/x", b"@@ -1 +1 @@"])
STAMP = st.sampled_from([b"", b"\t1970-01-01 00:00:00 +0000", b"\t1969-12-31 16:00:00 -08:00",
                         b"\t2024-01-01 10:00:00.5 +0100", b" 2024-01-01", b"\t1970-01-01 05:00:00 +0000"])


def _range(start: int, length: int | None) -> bytes:
    return b"%d" % start if length is None else b"%d,%d" % (start, length)


LINE = st.one_of(
    st.builds(lambda a, b: b"diff --git " + a + b" " + b, PREFIXED, PREFIXED),
    st.builds(lambda n, s: b"--- " + n + s, PREFIXED, STAMP),
    st.builds(lambda n, s: b"+++ " + n + s, PREFIXED, STAMP),
    st.builds(lambda a, b, c, d: b"@@ -" + _range(a, b) + b" +" + _range(c, d) + b" @@",
              NUMBERS, st.none() | NUMBERS, NUMBERS, st.none() | NUMBERS),
    st.builds(lambda op, t: op + t, st.sampled_from([b" ", b"-", b"+"]), TEXT),
    st.sampled_from([b"", b"\\ No newline at end of file", b"new file mode 100644", b"deleted file mode 100644",
                     b"old mode 100644", b"new mode 100755", b"new file mode 120000", b"new mode 160000",
                     b"similarity index 90%", b"rename from x", b"rename to y", b"copy from x", b"copy to d/x",
                     b"index 1..2 100644", b"Binary files a/x and b/x differ", b"GIT binary patch", b"--", b"-- ",
                     b"2.39.5", b"From 1 Mon", b"diff -ruN a/x b/x", b"diff --cc x", b"old mode zzz"]),
)
PATCHES = st.builds(lambda lines, end: b"\n".join(lines) + end, st.lists(LINE, max_size=24), st.sampled_from([b"\n", b""]))
TREES = st.dictionaries(st.sampled_from(["x", "d/x", "d", "y", "a b"]),
                        st.lists(st.sampled_from([b"a", b"b", b"c", b""]), max_size=6).map(b"\n".join), max_size=3)


def _reader(files: dict[str, bytes]):
    return lambda path: FileState(files[path], 0o100644) if path in files else None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PATCHES, TREES, st.sampled_from([None, 0, 1, 2]))
def test_only_hotfix_errors_escape_and_time_is_bounded(data, files, strip):
    started = time.perf_counter()
    try:
        patch = parse_patch(data, strip=strip, source="fuzz.diff")
    except HotfixError:
        return
    reverse_patch(patch)
    exclude_paths(patch, ["d/*"])
    for reverse in (False, True):
        try:
            plan_patch(patch, _reader(files), reverse=reverse)
        except HotfixError:
            pass
    try:
        detect(patch, _reader(files))
        normalised_diff_bytes(data)
    except HotfixError:
        pass
    assert time.perf_counter() - started < 2.0


def test_huge_hunk_numbers_cost_nothing():
    """git's find_pos: the search starts at the header's line clamped to the end of the file, so a hunk at
    line 2000000000 (or a number past any integer) is found near the end or refused, in time bounded by
    the file, not by the number (the 10**20 one would never finish otherwise)."""
    files = {"x": b"a\n" * 1000 + b"b\nc\n"}
    for number in (2000000000, 98765432109876543210):
        found = b"--- a/x\n+++ b/x\n@@ -%d,3 +%d,3 @@\n a\n-b\n+B\n c\n" % (number, number)
        plan = plan_patch(parse_patch(found), _reader(files))
        assert plan.edits[0].after == b"a\n" * 1000 + b"B\nc\n"
        assert plan.edits[0].placements[0].actual == 1000
        nowhere = b"--- a/x\n+++ b/x\n@@ -%d,3 +%d,3 @@\n a\n-q\n+Q\n c\n" % (number, number)
        try:
            plan_patch(parse_patch(nowhere), _reader(files))
        except HotfixError as refused:
            assert f"line {number} is beyond the end of the file (1002 lines) and its lines are nowhere in it" \
                in refused.message
        else:
            raise AssertionError("planned a hunk whose lines are nowhere")


@st.composite
def _hunk(draw, start: int) -> tuple[list[bytes], list[bytes]]:
    """A hunk with consistent counts, and the old lines it expects."""
    body = draw(st.lists(st.tuples(st.sampled_from([b" ", b"-", b"+"]), st.sampled_from([b"a", b"b", b"c", b""])),
                         min_size=1, max_size=6))
    old = [t for op, t in body if op != b"+"]
    new_len = sum(op != b"-" for op, _ in body)
    number = draw(st.sampled_from([start, start, start + 2, 2000000000]))
    lines = [b"@@ -%d,%d +%d,%d @@" % (number, len(old), number, new_len)] + [op + t for op, t in body]
    return lines, old


@st.composite
def _file(draw) -> tuple[list[bytes], str, bytes]:
    name = draw(st.sampled_from([b"x", b"d/x", b"y", b"a b"]))
    other = draw(st.sampled_from([name, b"y", b"d/x", b"x"]))
    head = draw(st.sampled_from([
        [b"diff --git a/N b/N"], [b"diff --git a/N b/O", b"rename from N", b"rename to O"],
        [b"diff --git a/N b/O", b"copy from N", b"copy to O"], [b"diff --git a/N b/N", b"new file mode 100644"],
        [b"diff --git a/N b/N", b"deleted file mode 100644"], [b"diff -ruN a/N b/N"], [],
        [b"diff --git a/N b/N", b"old mode 100644", b"new mode 100755"]]))
    head = [line.replace(b"N", name).replace(b"O", other) for line in head]
    minus = b"/dev/null" if b"new file mode 100644" in head else b"a/" + name
    plus = b"/dev/null" if b"deleted file mode 100644" in head else b"b/" + (other if b"rename to " + other in head
                                                                            or b"copy to " + other in head else name)
    lines = head + [b"--- " + minus + draw(STAMP), b"+++ " + plus + draw(STAMP)]
    content: list[bytes] = []
    for _ in range(draw(st.integers(1, 3))):
        hunk, old = draw(_hunk(len(content) + 1))
        lines += hunk
        content += old + draw(st.lists(st.sampled_from([b"a", b"z"]), max_size=2))
    if draw(st.booleans()):
        lines.append(b"\\ No newline at end of file")
    return lines, name.decode(), b"".join(line + b"\n" for line in content)


@st.composite
def _mutated(draw) -> tuple[bytes, dict[str, bytes]]:
    lines: list[bytes] = []
    files: dict[str, bytes] = {}
    for _ in range(draw(st.integers(1, 3))):
        more, name, content = draw(_file())
        lines += more
        if draw(st.integers(0, 4)):
            files.setdefault(name, content)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(lines)))
        action = draw(st.sampled_from(["insert", "delete", "replace", "keep"]))
        if action == "insert":
            lines.insert(at, draw(LINE))
        elif lines and at < len(lines) and action != "keep":
            if action == "delete":
                del lines[at]
            else:
                lines[at] = draw(LINE)
    return b"\n".join(lines) + draw(st.sampled_from([b"\n", b"\n", b""])), files


@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated(), st.sampled_from([None, 1]))
def test_mutated_well_formed_patches(case, strip):
    data, files = case
    test_only_hotfix_errors_escape_and_time_is_bounded.hypothesis.inner_test(data, files, strip)
