"""core.presence: the one content rule (contains, port, check-catalog, status of an unrecorded hotfix),
checked against `git apply --check` / `--reverse --check` on the same trees."""

from __future__ import annotations

import subprocess

import pytest

from vllm_hotfix_guard.core.hunk_apply import FileState
from vllm_hotfix_guard.core.diff import parse_patch
from vllm_hotfix.core.presence import APPLICABLE, CONFLICTS, CONTAINED, PARTLY, presence

OLD = b"".join(b"line %d\n" % i for i in range(1, 31))
NEW = OLD.replace(b"line 5\n", b"line five\n").replace(b"line 25\n", b"line twenty-five\n")
OTHER = b"x = 1\n"
PATCH = (b"diff --git a/pkg/a.py b/pkg/a.py\n--- a/pkg/a.py\n+++ b/pkg/a.py\n"
         b"@@ -3,5 +3,5 @@\n line 3\n line 4\n-line 5\n+line five\n line 6\n line 7\n"
         b"@@ -23,5 +23,5 @@\n line 23\n line 24\n-line 25\n+line twenty-five\n line 26\n line 27\n"
         b"diff --git a/pkg/b.py b/pkg/b.py\n--- a/pkg/b.py\n+++ b/pkg/b.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n")


def _reader(files):
    return lambda path: FileState(files[path], 0o644) if path in files else None


def _git(tree, files, *args):
    for path, data in files.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(data)
    (tree / "fix.diff").write_bytes(PATCH)
    return subprocess.run(["git", "apply", "--check", *args, "fix.diff"], cwd=tree, capture_output=True).returncode == 0


@pytest.mark.parametrize("files,state", [
    ({"pkg/a.py": OLD, "pkg/b.py": OTHER}, APPLICABLE),
    ({"pkg/a.py": NEW, "pkg/b.py": b"x = 2\n"}, CONTAINED),
    ({"pkg/a.py": NEW, "pkg/b.py": OTHER}, PARTLY),                          # one file in, one not
    ({"pkg/a.py": OLD.replace(b"line 5\n", b"line five\n"), "pkg/b.py": b"x = 3\n"}, PARTLY),  # one hunk in
    ({"pkg/a.py": OLD.replace(b"line 4\n", b"LINE 4\n").replace(b"line 24\n", b"LINE 24\n"),
      "pkg/b.py": b"x = 3\n"}, CONFLICTS),
])
def test_presence_words_agree_with_git_apply(tmp_path, files, state):
    found = presence(parse_patch(PATCH), _reader(files))
    assert found.state == state, found.detail
    forward, backward = _git(tmp_path, files), _git(tmp_path, files, "--reverse")
    assert forward == (state == APPLICABLE)
    assert backward == (state == CONTAINED)


def test_partly_names_the_hunks_that_are_in_and_the_ones_that_are_not():
    files = {"pkg/a.py": OLD.replace(b"line 5\n", b"line five\n"), "pkg/b.py": b"x = 3\n"}
    found = presence(parse_patch(PATCH), _reader(files))
    a, b = found.files
    assert (a.path, a.state, [h.state for h in a.hunks]) == ("pkg/a.py", PARTLY, ["present", "missing"])
    assert a.hunks[0].line == 3 and a.hunks[0].header == "@@ -3,5 +3,5 @@"
    assert (b.state, [h.state for h in b.hunks]) == (CONFLICTS, ["conflict"])
    assert "1 of 3 hunk(s) hold the post-image" in found.detail
