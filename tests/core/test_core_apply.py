"""core/hunk_apply.py: locating hunks byte for byte, chaining, detection; real `git apply` as the oracle."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from core_helpers import Repo, apply_plan, dir_reader, snapshot

from vllm_hotfix_guard.core.hunk_apply import FileState, Placement, detect, plan_patch
from vllm_hotfix_guard.core.diff import parse_patch
from vllm_hotfix_guard.errors import DoesNotApply, ExitCode, Refused

BASE = b"".join(b"line %d\n" % i for i in range(1, 31))


def _replace(text: bytes, old: bytes, new: bytes) -> bytes:
    assert text.count(old) == 1
    return text.replace(old, new)


def _diff(repo: Repo, before: dict, after: dict, *args: str) -> bytes:
    repo.write(before)
    repo.commit("before")
    repo.write(after)
    repo.git("add", "-A")
    data = repo.git("diff", "--cached", *args)
    repo.git("reset", "-q", "--hard", "HEAD")
    return data


def _same_as_git_apply(base: Path, data: bytes, tmp_path: Path, *, reverse: bool = False) -> dict:
    """Plan + write with the engine and with real `git apply` on two copies; both trees must agree."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    shutil.copytree(base, ours, ignore=shutil.ignore_patterns(".git"))
    shutil.copytree(base, theirs, ignore=shutil.ignore_patterns(".git"))
    apply_plan(ours, plan_patch(parse_patch(data), dir_reader(ours), reverse=reverse))
    (tmp_path / "p.diff").write_bytes(data)
    subprocess.run(["git", "apply", *(["-R"] if reverse else []), str(tmp_path / "p.diff")], cwd=theirs, check=True)
    assert snapshot(ours) == snapshot(theirs)
    return snapshot(ours)


def test_exact_placement_and_git_apply_agrees(repo, tmp_path):
    after = _replace(BASE, b"line 12\n", b"line twelve\n")
    data = _diff(repo, {"m.py": BASE}, {"m.py": after})
    plan = plan_patch(parse_patch(data), dir_reader(repo.root))
    (edit,) = plan.edits
    assert (edit.path, edit.action, edit.before, edit.after) == ("m.py", "modify", BASE, after)
    assert [(p.expected, p.actual, p.offset) for p in edit.placements] == [(9, 9, 0)]
    assert plan.offsets == ()
    assert _same_as_git_apply(repo.root, data, tmp_path)["m.py"][0] == after


def test_offset_is_found_and_reported(repo):
    after = _replace(BASE, b"line 20\n", b"line twenty\n")
    data = _diff(repo, {"m.py": BASE}, {"m.py": after})
    shifted = b"new 1\nnew 2\n" + BASE
    plan = plan_patch(parse_patch(data), lambda path: FileState(shifted, 0o644))
    (edit,) = plan.edits
    assert edit.after == b"new 1\nnew 2\n" + after
    assert plan.offsets == (("m.py", Placement(edit.placements[0].header, 17, 19)),)
    assert plan.offsets[0][1].offset == 2


def test_nearest_offset_wins_and_later_hunks_search_after_the_previous():
    block = b"a\nb\nc\nX\nd\ne\nf\n"
    text = block * 3  # the block starts at lines 1, 8 and 15
    data = b"--- a/m\n+++ b/m\n@@ -10,7 +10,7 @@\n a\n b\n c\n-X\n+Y\n d\n e\n f\n"
    plan = plan_patch(parse_patch(data), lambda path: FileState(text, 0o644))
    assert plan.edits[0].placements[0].actual == 8
    assert plan.edits[0].after == block + block.replace(b"X", b"Y") + block
    # both hunks claim line 9: the second is searched only after the end of the first
    two = (b"--- a/m\n+++ b/m\n@@ -9,7 +9,7 @@\n a\n b\n c\n-X\n+Y\n d\n e\n f\n"
           b"@@ -9,7 +9,7 @@\n a\n b\n c\n-X\n+Y\n d\n e\n f\n")
    plan = plan_patch(parse_patch(two), lambda path: FileState(text, 0o644))
    assert [p.actual for p in plan.edits[0].placements] == [8, 15]
    assert plan.edits[0].after == block + block.replace(b"X", b"Y") * 2


def test_no_fuzz_message_reads_like_git_apply(repo):
    text = "".join(f"    foo({i})\n" for i in range(1, 200)).encode()
    after = _replace(text, b"    foo(120)\n", b"    foo(120)\n    extra()\n")
    data = _diff(repo, {"vllm/x.py": text}, {"vllm/x.py": after})
    target = _replace(text, b"    foo(119)\n", b"    bar()\n")
    with pytest.raises(DoesNotApply) as caught:
        plan_patch(parse_patch(data), lambda path: FileState(target, 0o644))
    assert str(caught.value) == \
        ('vllm/x.py: hunk @@ -118,6 +118,7 @@ does not apply: expected line 119 "    foo(119)", found "    bar()" '
         '(at its nominal line 118; its 6 old line(s) were searched for in lines 1-199 and not found)')
    assert caught.value.exit_code == ExitCode.DOES_NOT_APPLY


def test_missing_existing_and_leftover_files_are_named(repo):
    modify = _diff(repo, {"m.py": BASE}, {"m.py": BASE + b"more\n"})
    with pytest.raises(DoesNotApply, match=r"^m.py: does not exist \(the patch modifies it\)$"):
        plan_patch(parse_patch(modify), lambda path: None)
    create = b"--- /dev/null\n+++ b/n.py\n@@ -0,0 +1 @@\n+x\n"
    with pytest.raises(DoesNotApply, match=r"^n.py: already exists \(the patch creates it\)$"):
        plan_patch(parse_patch(create), lambda path: FileState(b"x\n", 0o644))
    delete = b"--- a/d.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    assert plan_patch(parse_patch(delete), lambda path: FileState(b"x\n", 0o644)).edits[0].action == "delete"
    with pytest.raises(DoesNotApply, match=r"^d.py: hunk @@ -1,1 \+0,0 @@ does not apply: expected end of file after line 1"):
        plan_patch(parse_patch(delete), lambda path: FileState(b"x\ny\n", 0o644))


def test_hunk_at_start_must_match_at_the_beginning_like_git(repo, tmp_path):
    after = b"line 0\n" + BASE
    data = _diff(repo, {"m.py": BASE}, {"m.py": after})
    target = b"# header\n" + BASE
    with pytest.raises(DoesNotApply, match='expected line 1 "line 1", found "# header"'):
        plan_patch(parse_patch(data), lambda path: FileState(target, 0o644))  # not at offset 1
    (tmp_path / "m.py").write_bytes(target)
    (tmp_path / "p.diff").write_bytes(data)
    assert subprocess.run(["git", "apply", "--check", "p.diff"], cwd=tmp_path, capture_output=True).returncode != 0


def test_hunk_at_end_must_match_at_the_end_like_git(repo):
    data = _diff(repo, {"m.py": BASE}, {"m.py": BASE + b"appended\n"})
    with pytest.raises(DoesNotApply, match=r'expected end of file after line 30, found "trailer"'):
        plan_patch(parse_patch(data), lambda path: FileState(BASE + b"trailer\n", 0o644))


def test_crlf_and_missing_newline_match_git_apply(repo, tmp_path):
    crlf = b"".join(b"row %d\r\n" % i for i in range(10))
    data = _diff(repo, {"w.txt": crlf, "t.py": b"a\nb", "u.py": b"a\nb\n"},
                 {"w.txt": crlf.replace(b"row 5\r\n", b"ROW 5\r\n"), "t.py": b"a\nb\n", "u.py": b"a\nc"})
    tree = _same_as_git_apply(repo.root, data, tmp_path)
    assert tree["t.py"][0] == b"a\nb\n" and tree["u.py"][0] == b"a\nc" and b"ROW 5\r\n" in tree["w.txt"][0]
    # an LF file does not match a CRLF patch: bytes, not text
    with pytest.raises(DoesNotApply, match=r'expected line 3 "row 2\\r", found "row 2"'):
        plan_patch(parse_patch(data), {"w.txt": FileState(crlf.replace(b"\r\n", b"\n"), 0o644),
                                       "t.py": FileState(b"a\nb", 0o644), "u.py": FileState(b"a\nb\n", 0o644)}.get)


def test_rename_copy_mode_and_delete_match_git_apply(repo, tmp_path):
    before = {"old.py": BASE, "keep.py": BASE.replace(b"line", b"row"), "tool.sh": b"#!/bin/sh\n", "gone.py": b"x\n"}
    repo.write(before)
    repo.commit()
    repo.git("mv", "old.py", "renamed.py")
    repo.write({"renamed.py": _replace(BASE, b"line 1\n", b"first\n"), "copy.py": BASE.replace(b"line", b"row"),
                "gone.py": None})
    (repo.root / "tool.sh").chmod(0o755)
    repo.git("add", "-A")
    data = repo.git("diff", "--cached", "-M", "-C", "--find-copies-harder")
    assert b"rename from old.py" in data and b"copy from keep.py" in data and b"new mode 100755" in data
    repo.git("reset", "-q", "--hard", "HEAD")
    (repo.root / "tool.sh").chmod(0o644)
    plan = plan_patch(parse_patch(data), dir_reader(repo.root))
    actions = {e.path: (e.action, e.old_path) for e in plan.edits}
    assert actions == {"renamed.py": ("rename", "old.py"), "copy.py": ("create", None),
                       "tool.sh": ("mode", None), "gone.py": ("delete", None)}
    assert next(e for e in plan.edits if e.path == "tool.sh").new_mode == 0o755
    forward = _same_as_git_apply(repo.root, data, tmp_path / "fwd")
    assert forward["tool.sh"][1] and "old.py" not in forward
    # `git apply -R` cannot undo a copy ("keep.py: already exists"); the engine can: compare with the original
    applied = tmp_path / "fwd" / "ours"
    apply_plan(applied, plan_patch(parse_patch(data), dir_reader(applied), reverse=True))
    assert snapshot(applied) == snapshot(repo.root)


def test_detect_applicable_applied_conflict(repo):
    after = _replace(BASE, b"line 15\n", b"fixed\n")
    patch = parse_patch(_diff(repo, {"m.py": BASE}, {"m.py": after}))
    assert detect(patch, lambda path: FileState(BASE, 0o644)).state == "applicable"
    applied = detect(patch, lambda path: FileState(after, 0o644))
    assert applied.state == "applied" and applied.plan.reverse and applied.plan.edits[0].after == BASE
    conflict = detect(patch, lambda path: FileState(BASE.replace(b"line 14", b"other"), 0o644))
    assert conflict.state == "conflict" and "expected line 14" in str(conflict.error)


def test_series_on_one_path_plans_against_the_previous_result(repo):
    repo.write({"m.py": BASE})
    repo.commit()
    step1 = _replace(BASE, b"line 3\n", b"three\n")
    repo.write({"m.py": step1})
    repo.commit("one")
    repo.write({"m.py": _replace(step1, b"three\n", b"THREE\n")})
    repo.commit("two: edits what one added")
    patch = parse_patch(repo.git("format-patch", "--stdout", "HEAD~2"))
    plan = plan_patch(patch, lambda path: FileState(BASE, 0o644))
    (edit,) = plan.edits
    assert edit.before == BASE and edit.after == _replace(BASE, b"line 3\n", b"THREE\n")
    undone = plan_patch(patch, lambda path: FileState(edit.after, 0o644), reverse=True)
    assert undone.edits[0].after == BASE
    assert detect(patch, lambda path: FileState(edit.after, 0o644)).state == "applied"


def test_unsafe_paths_are_refused_before_reading():
    read_calls = []

    def read(path):
        read_calls.append(path)
        return None

    for name in (b"../../etc/passwd", b"vllm/../../x"):
        data = b"--- /dev/null\n+++ b/%s\n@@ -0,0 +1 @@\n+x\n" % name
        with pytest.raises(Refused, match=r"^evil.diff:2: invalid path '.*': a '..' component$"):
            plan_patch(parse_patch(data, source="evil.diff"), read)
    assert read_calls == []


def test_mode_mismatch_does_not_apply():
    data = b"diff --git a/t.sh b/t.sh\nold mode 100644\nnew mode 100755\n"
    assert plan_patch(parse_patch(data), lambda p: FileState(b"", 0o100644)).edits[0].new_mode == 0o755
    detection = detect(parse_patch(data), lambda p: FileState(b"", 0o100755))
    assert detection.state == "applied"
