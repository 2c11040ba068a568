"""``apply_hunks``' in-place fast path gives exactly what the line-based search gives."""

from __future__ import annotations

import pytest
import realdata

from vllm_hotfix_guard.core import hunk_apply as core_apply
from vllm_hotfix_guard.core.diff import parse_patch, reverse_patch


def _line_based(path, data, hunks, monkeypatch):
    with monkeypatch.context() as patched:
        patched.setattr(core_apply, "_apply_in_place", lambda data, hunks: None)
        return core_apply.apply_hunks(path, data, hunks)


@pytest.mark.real
def test_fast_path_agrees_with_line_search_on_the_real_diff_both_ways(monkeypatch):
    patch = parse_patch(realdata.vllm_source_diff("0.29.0", "0.30.0").read_bytes())
    for version, side in (("0.29.0", patch), ("0.30.0", reverse_patch(patch))):
        root = realdata.vllm_source_tree(version)
        taken = 0
        for f in side.files:
            if not f.hunks or f.old_path is None:
                continue
            data = (root / f.old_path).read_bytes()
            fast = core_apply._apply_in_place(data, f.hunks)
            if fast is not None:
                taken += 1
                assert fast == _line_based(f.old_path, data, f.hunks, monkeypatch), f.old_path
        assert taken > 800


def _hunk_file(body: bytes) -> tuple:
    return parse_patch(b"--- a/f\n+++ b/f\n" + body).files[0].hunks


@pytest.mark.parametrize("data, body", [
    # the block also occurs before the expected line: nearest to the header wins, as in the line search
    (b"x\ny\nz\nq\nx\ny\nz\n", b"@@ -5,3 +5,3 @@\n x\n-y\n+Y\n z\n"),
    # found only at an offset
    (b"new\nx\ny\nz\n", b"@@ -1,3 +1,3 @@\n x\n-y\n+Y\n z\n"),
    # no trailing context: must end the file
    (b"a\nb\nc\nb\n", b"@@ -1,2 +1,1 @@\n a\n-b\n"),
    # a match that starts inside a line is not a match
    (b"ab\nb\nc\n", b"@@ -2,2 +2,2 @@\n b\n-c\n+C\n"),
])
def test_fast_path_falls_back_or_agrees(data, body, monkeypatch):
    hunks = _hunk_file(body)
    try:
        expected = _line_based("f", data, hunks, monkeypatch)
    except core_apply.DoesNotApply:
        expected = None
    fast = core_apply._apply_in_place(data, hunks)
    assert fast is None or fast == expected
    if expected is not None:
        assert core_apply.apply_hunks("f", data, hunks) == expected
