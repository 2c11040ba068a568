"""core.merge.three_way on `git merge-file` (the real binary): by lines, then by words, and what conflicts."""

from __future__ import annotations

import pytest

from vllm_hotfix.core.merge import edge_insertions, marker_size, parse_diff3, three_way
from vllm_hotfix.install.git import merge_file


def merge(ours: bytes, base: bytes, theirs: bytes):
    return three_way(ours, base, theirs, merge_file)


BASE = b"def f(x):\n    y = (\n        x - 1\n    ) // block\n    z = 1\n\n\ndef g():\n    pass\n"


def test_separate_changes_merge_by_lines():
    ours = BASE.replace(b"    pass\n", b"    return 2\n")
    theirs = BASE.replace(b"    z = 1\n", b"    z = 2\n")
    done = merge(ours, BASE, theirs)
    assert done.data == ours.replace(b"    z = 1\n", b"    z = 2\n") and done.by_words == 0


def test_a_reflowed_statement_takes_the_fix_by_words():
    ours = BASE.replace(b"    y = (\n        x - 1\n    ) // block\n", b"    y.fill_(\n        (x - 1) // block\n    )\n")
    theirs = BASE.replace(b"// block", b"// self._block")
    done = merge(ours, BASE, theirs)
    assert done.by_words == 1 and not done.conflicts
    assert done.data == ours.replace(b"// block", b"// self._block")


def test_lines_added_at_the_edge_of_a_reflowed_block_stay_whole_lines_outside_it():
    ours = BASE.replace(b"    y = (\n        x - 1\n    ) // block\n    z = 1\n", b"    y.fill_(\n        (x - 1) // block\n    )\n")
    theirs = BASE.replace(b"    ) // block\n    z = 1\n", b"    ) // self._block\n    z = 1\n    log(y)\n")
    done = merge(ours, BASE, theirs)
    assert not done.conflicts
    assert b"    y.fill_(\n        (x - 1) // self._block\n    )\n    log(y)\n" in done.data


def test_the_same_words_changed_two_ways_is_a_conflict_with_its_three_sides():
    ours = BASE.replace(b"// block", b"// other_block")
    theirs = BASE.replace(b"// block", b"// self._block")
    done = merge(ours, BASE, theirs)
    assert done.data is None
    (c,) = done.conflicts
    assert (c.ours, c.base, c.theirs) == (b"    ) // other_block\n", b"    ) // block\n", b"    ) // self._block\n")
    assert (c.ours_line, c.base_line) == (4, 4)


def test_lines_that_look_like_conflict_markers_are_content():
    base = b"a\n=======\n<<<<<<< x\n|||||||\nb\n>>>>>>> y\n"
    ours, theirs = base.replace(b"a\n", b"A\n"), base.replace(b"b\n", b"B\n")
    assert marker_size(ours, base, theirs) == 8
    done = merge(ours, base, theirs)
    assert done.data == b"A\n=======\n<<<<<<< x\n|||||||\nB\n>>>>>>> y\n"


@pytest.mark.parametrize("tail", [b"", b"\r\n"])
def test_bytes_are_kept_exactly_no_final_newline_and_crlf(tail):
    base = b"one\r\ntwo\r\nthree" + tail
    ours = base.replace(b"one", b"ONE")
    theirs = base.replace(b"three", b"THREE")
    assert merge(ours, base, theirs).data == b"ONE\r\ntwo\r\nTHREE" + tail


def test_edge_insertions_and_the_diff3_parser():
    assert edge_insertions(b"a\n", b"A\nnew\nmore\n") == (0, 1)
    assert edge_insertions(b"a\nb\n", b"pre\na\nB\n") == (1, 3)
    assert parse_diff3(b"x\n<<<<<<< ours\no\n||||||| base\nb\n=======\nt\n>>>>>>> theirs\ny\n", 7) == \
        [b"x\n", (b"o\n", b"b\n", b"t\n"), b"y\n"]
