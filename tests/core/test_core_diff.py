"""core/diff.py: parsing the diffs people actually have, made by real git and GNU diff where possible."""

from __future__ import annotations

import subprocess

import re

import pytest
from core_helpers import Repo, dir_reader

from vllm_hotfix_guard.core.hunk_apply import plan_patch
from vllm_hotfix_guard.core.diff import (
    HunkLine, exclude_paths, normalised_diff_bytes, parse_patch, reverse_patch,
)
from vllm_hotfix_guard.errors import ExitCode, InvalidInput, Refused

BASE = b"".join(b"line %d\n" % i for i in range(1, 21))


def _edited(text: bytes, lineno: int, new: bytes) -> bytes:
    lines = text.splitlines(keepends=True)
    lines[lineno - 1] = new
    return b"".join(lines)


def _staged_diff(repo: Repo, files: dict, *args: str) -> bytes:
    repo.write(files)
    repo.git("add", "-A")
    return repo.git("diff", "--cached", *args)


def test_git_diff_modify_create_delete(repo):
    repo.write({"pkg/mod.py": BASE, "pkg/gone.py": b"bye\n"})
    repo.commit()
    data = _staged_diff(repo, {"pkg/mod.py": _edited(BASE, 10, b"LINE TEN\n"), "pkg/gone.py": None,
                               "pkg/new.py": b"hello\n"})
    patch = parse_patch(data, source="fix.diff")
    kinds = {f.path: f.kind for f in patch.files}
    assert kinds == {"pkg/mod.py": "modify", "pkg/gone.py": "delete", "pkg/new.py": "create"}
    mod = next(f for f in patch.files if f.path == "pkg/mod.py")
    (hunk,) = mod.hunks
    assert (hunk.old_start, hunk.old_len, hunk.new_start, hunk.new_len) == (7, 7, 7, 7)
    assert hunk.lines[3] == HunkLine("-", b"line 10\n") and hunk.lines[4] == HunkLine("+", b"LINE TEN\n")
    assert hunk.old_lines[3] == b"line 10\n" and hunk.new_lines[3] == b"LINE TEN\n"
    headers = [n for n, line in enumerate(data.split(b"\n"), 1) if line.startswith(b"@@ -7,7 +7,7 @@")]
    assert [hunk.lineno] == headers
    assert patch.stats.files == 3 and patch.stats.insertions == 2 and patch.stats.deletions == 2
    assert next(f for f in patch.files if f.kind == "create").new_mode == 0o100644


def test_format_patch_series_chains_on_one_path(repo, tmp_path):
    repo.write({"a.py": BASE, "b.py": b"b\n"})
    repo.commit("base")
    repo.write({"a.py": _edited(BASE, 3, b"three\n")})
    repo.commit("first\n\nA message with a diff-looking line:\n--- not a header\n")
    repo.write({"a.py": _edited(_edited(BASE, 3, b"three\n"), 15, b"fifteen\n"), "b.py": b"B\n"})
    repo.commit("second")
    mails = repo.git("format-patch", "--stdout", "HEAD~2")
    assert mails.count(b"\n-- \n2.") == 2 and mails.count(b"From: Test") == 2
    patch = parse_patch(mails, source="series.patch")
    assert [f.path for f in patch.files] == ["a.py", "a.py", "b.py"]
    base = tmp_path / "base"
    base.mkdir()
    (base / "a.py").write_bytes(BASE)
    (base / "b.py").write_bytes(b"b\n")
    plan = plan_patch(patch, dir_reader(base))
    assert [e.path for e in plan.edits] == ["a.py", "b.py"]
    a_edit = plan.edits[0]
    assert a_edit.before == BASE and a_edit.after == (repo.root / "a.py").read_bytes()
    assert len(a_edit.placements) == 2


def test_diff_ruN_with_epoch_create_and_delete(tmp_path):
    (tmp_path / "a/vllm").mkdir(parents=True)
    (tmp_path / "b/vllm").mkdir(parents=True)
    (tmp_path / "a/vllm/keep.py").write_bytes(BASE)
    (tmp_path / "b/vllm/keep.py").write_bytes(_edited(BASE, 20, b"last\n"))
    (tmp_path / "a/vllm/old.py").write_bytes(b"old\n")
    (tmp_path / "b/vllm/new.py").write_bytes(b"new\n")
    data = subprocess.run(["diff", "-ruN", "a/vllm", "b/vllm"], cwd=tmp_path, capture_output=True).stdout
    assert b"1970-01-01" in data
    patch = parse_patch(data)
    assert {f.path: f.kind for f in patch.files} == {
        "vllm/keep.py": "modify", "vllm/new.py": "create", "vllm/old.py": "delete"}
    plan = plan_patch(patch, dir_reader(tmp_path / "a"))
    assert {e.path: e.after for e in plan.edits} == {
        "vllm/keep.py": (tmp_path / "b/vllm/keep.py").read_bytes(), "vllm/new.py": b"new\n", "vllm/old.py": None}


def test_epoch_timestamp_means_creation_even_with_old_lines_as_in_git():
    data = (b"--- a/x.py\t1970-01-01 00:00:00.000000000 +0000\n+++ b/x.py\t1970-01-01 00:00:00.000000000 +0000\n"
            b"@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(InvalidInput, match=r"^<patch>:1: new file x.py depends on old contents$"):
        parse_patch(data)


def test_rename_with_and_without_edits_copy_and_mode(repo):
    repo.write({"old.py": BASE, "same.py": BASE.replace(b"line", b"row"), "tool.sh": b"#!/bin/sh\n"})
    repo.commit()
    repo.git("mv", "same.py", "moved.py")
    (repo.root / "old.py").rename(repo.root / "renamed.py")
    repo.write({"renamed.py": _edited(BASE, 1, b"first\n"), "copied.py": BASE.replace(b"line", b"row")})
    (repo.root / "tool.sh").chmod(0o755)
    data = _staged_diff(repo, {}, "-M", "-C", "--find-copies-harder")
    patch = parse_patch(data)
    by_path = {f.path: f for f in patch.files}
    assert by_path["moved.py"].kind == "rename" and by_path["moved.py"].hunks == ()
    assert by_path["renamed.py"].kind == "rename" and by_path["renamed.py"].old_path == "old.py"
    assert len(by_path["renamed.py"].hunks) == 1
    assert by_path["tool.sh"].kind == "mode"
    assert (by_path["tool.sh"].old_mode, by_path["tool.sh"].new_mode) == (0o100644, 0o100755)
    assert by_path["copied.py"].kind == "copy" and by_path["copied.py"].old_path in {"same.py", "moved.py"}


def test_no_newline_at_end_of_file_and_crlf_are_byte_exact(repo):
    crlf = b"one\r\ntwo\r\nthree\r\n"
    repo.write({"win.txt": crlf, "tail.py": b"a\nb"})
    repo.commit()
    data = _staged_diff(repo, {"win.txt": crlf.replace(b"two", b"TWO"), "tail.py": b"a\nb\nc"})
    patch = parse_patch(data)
    win = next(f for f in patch.files if f.path == "win.txt")
    assert win.hunks[0].lines[1] == HunkLine("-", b"two\r\n")
    tail = next(f for f in patch.files if f.path == "tail.py")
    old_tail, new_tail = tail.hunks[0].old_lines, tail.hunks[0].new_lines
    assert old_tail[-1] == b"b" and new_tail[-2:] == (b"b\n", b"c")


def test_quoted_and_non_ascii_paths(repo):
    names = {"été.py": b"x\n", "with space.py": b"y\n", "tab\there.py": b"z\n"}
    repo.write(names)
    repo.commit()
    data = _staged_diff(repo, {name: body.upper() for name, body in names.items()})
    assert b'"a/\\303\\251t\\303\\251.py"' in data and b'"a/tab\\there.py"' in data
    assert {f.path for f in parse_patch(data).files} == set(names)
    repo.commit()
    renamed = _staged_diff(repo, {"with space.py": None, "dé jà.py": b"Y\n"}, "-M")
    (f,) = [f for f in parse_patch(renamed).files if f.kind == "rename"]
    assert (f.old_path, f.new_path) == ("with space.py", "dé jà.py")


def test_strip_level():
    data = b"--- x/y/vllm/a.py\n+++ x/y/vllm/a.py\n@@ -1 +1 @@\n-a\n+b\n"
    assert parse_patch(data, strip=2).files[0].path == "vllm/a.py"
    assert parse_patch(data, strip=0).files[0].path == "x/y/vllm/a.py"
    with pytest.raises(InvalidInput, match=r"^p.diff:1: cannot strip 4 leading component\(s\) from path 'x/y/vllm/a.py'"):
        parse_patch(data, strip=4, source="p.diff")


UNSAFE_HEADERS = {  # (patch, -p N, line named, reason)
    "absolute at -p0": (b"--- /etc/x\n+++ /etc/x\n@@ -1 +1 @@\n-a\n+b\n", 0, 1, "is absolute"),
    "git-style absolute": (b"diff --git /etc/x /etc/x\nold mode 100644\nnew mode 100755\n", 0, 1, "is absolute"),
    "absolute after -p1": (b"--- a//etc/x\n+++ b//etc/x\n@@ -1 +1 @@\n-a\n+b\n", 1, 1, "is absolute"),
    "escape after normalising": (b"--- a/v/../../x\n+++ b/v/../../x\n@@ -1 +1 @@\n-a\n+b\n", 1, 1,
                                 "a '..' component"),
    "new side only": (b"--- a/x\n+++ /etc/x\n@@ -1 +1 @@\n-a\n+b\n", 0, 2, "is absolute"),
}


@pytest.mark.parametrize("case", list(UNSAFE_HEADERS))
def test_absolute_or_escaping_path_is_refused_naming_patch_and_line(case):
    data, strip, line, reason = UNSAFE_HEADERS[case]
    with pytest.raises(Refused, match=rf"^p.diff:{line}: invalid path .*: (it )?{reason}$") as caught:
        parse_patch(data, strip=strip, source="p.diff")
    assert caught.value.exit_code == ExitCode.REFUSED


def test_absolute_names_are_stripped_as_git_counts_components():
    """git apply's rule: each '/' ends a component, so a leading '/' ends an empty first one."""
    data = b"--- /abs/a/vllm/a.py\t2024-01-01\n+++ /abs/b/vllm/a.py\t2024-01-01\n@@ -1 +1 @@\n-a\n+b\n"
    assert parse_patch(data, strip=3).files[0].path == "vllm/a.py"
    assert parse_patch(data, strip=1).files[0].path == "abs/b/vllm/a.py"
    created = b"--- /dev/null\n+++ /abs/dir/evil.py\n@@ -0,0 +1 @@\n+x\n"
    assert parse_patch(created).files[0].path == "abs/dir/evil.py"
    with pytest.raises(Refused, match="is absolute"):
        parse_patch(created, strip=0)


def test_github_style_diff_with_empty_context_line_stripped_of_its_space():
    data = b"diff --git a/m.py b/m.py\nindex 1..2 100644\n--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n a\n\n-b\n+B\n"
    (f,) = parse_patch(data).files
    assert f.hunks[0].old_lines == (b"a\n", b"\n", b"b\n")


def test_reverse_patch_swaps_sides_and_order(repo):
    repo.write({"a.py": BASE})
    repo.commit()
    data = _staged_diff(repo, {"a.py": _edited(BASE, 5, b"five\n"), "n.py": b"new\n"})
    patch = parse_patch(data)
    back = reverse_patch(patch)
    assert [f.path for f in back.files] == [f.path for f in reversed(patch.files)]
    created = next(f for f in back.files if f.old_path == "n.py")
    assert created.kind == "delete"
    hunk = next(f for f in back.files if f.path == "a.py").hunks[0]
    assert hunk.lines[3] == HunkLine("+", b"line 5\n") and hunk.lines[4] == HunkLine("-", b"five\n")
    assert reverse_patch(back) == patch


def test_exclude_paths():
    data = b"".join(b"--- a/%s\n+++ b/%s\n@@ -1 +1 @@\n-a\n+b\n" % (p, p)
                    for p in (b"vllm/x.py", b"release_notes/0.1.md", b"tests/deep/test_x.py"))
    patch = parse_patch(data)
    kept = exclude_paths(patch, ["release_notes/**", "**/test_*.py"])
    assert [f.path for f in kept.files] == ["vllm/x.py"]


def test_normalised_diff_bytes_is_stable_across_git_renderings(repo):
    repo.write({"a.py": BASE, "b.py": b"b\n"})
    repo.commit()
    repo.write({"a.py": _edited(BASE, 9, b"nine\n"), "b.py": b"B\n"})
    repo.commit("the fix\n\nLong explanation.")
    mail = repo.git("format-patch", "--stdout", "-1")
    plain = repo.git("diff", "HEAD~1", "HEAD")
    full_index = repo.git("show", "--full-index", "--format=commit %H%n%n%B", "HEAD")
    assert normalised_diff_bytes(mail) == normalised_diff_bytes(plain) == normalised_diff_bytes(full_index)
    norm = normalised_diff_bytes(mail)
    assert b"index " not in norm and b"Subject" not in norm and b"2.39" not in norm
    assert b"@@ -6,7 +6,7 @@\n" in norm
    assert normalised_diff_bytes(norm) == norm


# ---------------------------------------------------------------- bad input: one line, file + line


def _error(data: bytes) -> str:
    with pytest.raises(InvalidInput) as caught:
        parse_patch(data, source="bad.patch")
    assert caught.value.exit_code == ExitCode.INVALID_INPUT
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_git_binary_patch_is_refused(repo):
    repo.write({"img.bin": b"\0\1\2"})
    repo.commit()
    data = _staged_diff(repo, {"img.bin": b"\0\1\3"}, "--binary")
    line = data.split(b"\n").index(b"GIT binary patch") + 1
    assert _error(data) == f"bad.patch:{line}: binary diff for img.bin is not supported"


def test_binary_files_differ_is_refused(repo):
    repo.write({"img.bin": b"\0\1\2"})
    repo.commit()
    data = _staged_diff(repo, {"img.bin": b"\0\1\3"})
    assert b"Binary files a/img.bin and b/img.bin differ" in data
    assert _error(data) == "bad.patch:3: binary diff for img.bin is not supported"
    plain = b"diff -ruN a/x b/x\nBinary files a/x and b/x differ\n"
    assert _error(plain) == "bad.patch:1: no file changes found in 2 line(s) (1 binary file(s) skipped); is this a diff?"


def test_binary_files_differ_of_diff_ruN_is_skipped_with_a_warning():
    """git apply applies the text part of such a diff; so does hotfix, and it names what it skipped."""
    data = (b"diff -ruN a/bin b/bin\nBinary files a/bin and b/bin differ\n"
            b"diff -ruN a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    patch = parse_patch(data, source="p.diff")
    assert [f.path for f in patch.files] == ["x"]
    assert patch.warnings == ("p.diff:2: skipped binary file: Binary files a/bin and b/bin differ",)


HEADER = b"--- a/m.py\n+++ b/m.py\n"


@pytest.mark.parametrize(("body", "message"), [
    pytest.param(b"@@ -1,3 +1,3 @@\n a\n-b\n+B\ndiff --git a/n.py b/n.py\n",
                 "bad.patch:7: hunk @@ -1,3 +1,3 @@ of m.py (line 3) has fewer lines than its header says", id="fewer"),
    pytest.param(b"@@ -1,2 +1,2 @@\n a\n-b\n+B\n-c\n",
                 "bad.patch:7: hunk @@ -1,2 +1,2 @@ of m.py (line 3) has more lines than its header says", id="more"),
    pytest.param(b"@@ -1,1 +1,2 @@\n a\n b\n",
                 "bad.patch:5: hunk @@ -1,1 +1,2 @@ of m.py (line 3) has more lines than its header says", id="more-old"),
    pytest.param(b"@@ -1,4 +1,4 @@\n a\n-b\n+B\n",
                 "bad.patch:6: patch ends inside hunk @@ -1,4 +1,4 @@ of m.py (line 3): truncated file?", id="truncated"),
    pytest.param(b"@@ -1,3 +1,3 @@\n a\n*b\n c\n",
                 "bad.patch:5: unexpected line in hunk @@ -1,3 +1,3 @@ of m.py: '*b'", id="garbage"),
    pytest.param(b"@@ -1,x +1 @@\n a\n", "bad.patch:3: malformed hunk header in m.py: @@ -1,x +1 @@", id="header"),
    pytest.param(b"something else\n", "bad.patch:3: no hunks after the header of m.py", id="no-hunks"),
])
def test_malformed_hunks(body, message):
    assert _error(HEADER + body) == message


def test_no_files_in_input():
    assert _error(b"From: someone\nSubject: hello\n\njust text\n") == \
        "bad.patch:1: no file changes found in 4 line(s); is this a diff?"
    assert _error(b"") == "bad.patch:1: no file changes found in 0 line(s); is this a diff?"


def test_git_apply_agrees_these_inputs_are_bad(tmp_path):
    """Our refusals match real `git apply --check` refusing the same inputs."""
    for data in (b"--- a/m.py\n+++ b/m.py\n@@ -1,4 +1,4 @@\n a\n-b\n+B\n",
                 b"--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n a\n*b\n c\n"):
        (tmp_path / "m.py").write_bytes(b"a\nb\nc\nd\n")
        (tmp_path / "p.diff").write_bytes(data)
        done = subprocess.run(["git", "apply", "--check", "p.diff"], cwd=tmp_path, capture_output=True)
        assert done.returncode != 0
        _error(data)


def test_unquoting_errors_name_the_line():
    data = b'diff --git "a/x\\q.py" "b/x.py"\n'
    assert _error(data).startswith("bad.patch:1: bad escape in quoted path")



GIT_REFUSES = {  # (patch, line named, message) -- each is a partial or wrong apply if accepted
    "hunk after a blank line": (b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n\n@@ -3 +3 @@\n-c\n+d\n", 7,
                                "patch fragment without header: @@ -3 +3 @@"),
    "hunk after foreign text": (b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\nnote\n@@ -3 +3 @@\n-c\n+d\n", 7,
                                "patch fragment without header"),
    "--- without +++": (b"diff --git a/x b/x\n--- a/x\n@@ -1 +1 @@\n-a\n+b\n", 1, "git diff header lacks filename"),
    "only garbage": (b"diff --git a/x b/x\nindex 1..2 100644\n", 1, "patch with only garbage for x"),
    "new file and copy": (b"diff --git a/x b/y\nnew file mode 100644\ncopy from x\ncopy to y\n", 3,
                          "inconsistent header lines 2 and 3"),
    "inconsistent new name": (b"diff --git a/setup.py b/setup.py\n--- a/setup.py\n+++ b/evil.py\n@@ -1 +1 @@\n-a\n+b\n",
                              3, "inconsistent new filename: evil.py, but the header names setup.py"),
    "new file without /dev/null": (b"diff --git a/x b/x\nnew file mode 100644\n--- a/x\n+++ b/x\n@@ -0,0 +1 @@\n+a\n",
                                   3, "expected /dev/null"),
    "names differ without rename": (b"diff --git a/x b/y\n--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n", 3,
                                    "inconsistent file names x and y"),
}


@pytest.mark.parametrize("case", list(GIT_REFUSES))
def test_what_git_refuses_is_invalid_input_naming_the_line(case):
    data, line, message = GIT_REFUSES[case]
    with pytest.raises(InvalidInput, match=rf"^p.diff:{line}: {re.escape(message)}"):
        parse_patch(data, source="p.diff")


@pytest.mark.parametrize("mode", ["120000", "160000"])
def test_symlinks_and_submodules_are_refused_before_planning(mode):
    data = f"diff --git a/l b/l\nnew file mode {mode}\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+t\n".encode()
    with pytest.raises(Refused, match=rf"^p.diff:1: l: a .* \(mode {mode}\) is not supported"):
        parse_patch(data, source="p.diff")


def test_format_patch_signature_without_its_trailing_space():
    data = b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--\n2.39.0\n\n"
    assert [f.path for f in parse_patch(data).files] == ["x"]


TRADITIONAL_NAMES = {  # (header lines, -p or None, path, kind) as git apply reads them
    "backup suffix on the new side": (b"--- foo.c\n+++ foo.c.new\n", None, "foo.c", "modify"),
    "backup suffix on the old side": (b"--- a/foo.c.orig\n+++ b/foo.c\n", None, "foo.c", "modify"),
    "unquoted tab ends the name": (b"--- a/foo\tbar\n+++ b/foo\tbar\n", None, "foo", "modify"),
    "epoch west of GMT with a colon zone": (b"--- a/x\t2020-01-01 00:00:00 -08:00\n+++ b/x\t1969-12-31 16:00:00 -08:00\n",
                                            None, "x", "delete"),
    "1970 time that is not the epoch": (b"--- a/x\t1970-01-01 05:00:00 +0000\n+++ b/x\t2020-01-01 00:00:00 +0000\n",
                                        None, "x", "modify"),
    "name with spaces and a timestamp": (b"--- a/my file.py 2020-01-01 10:00:00.5 +0100\n+++ b/my file.py\n",
                                         1, "my file.py", "modify"),
}


@pytest.mark.parametrize("case", list(TRADITIONAL_NAMES))
def test_traditional_names_follow_git_apply(case):
    headers, strip, path, kind = TRADITIONAL_NAMES[case]
    hunk = b"@@ -1 +0,0 @@\n-a\n" if kind == "delete" else b"@@ -0,0 +1 @@\n+a\n"
    (f,) = parse_patch(headers + hunk, strip=strip).files
    assert (f.path, f.kind) == (path, kind)
    assert f.maybe_new == (kind == "modify")


def test_p_guess_only_without_an_explicit_p():
    data = b"--- foo.c\n+++ foo.c.new\n@@ -1 +1 @@\n-a\n+b\n"
    assert parse_patch(data, strip=None).guessed_strip == 0
    with pytest.raises(InvalidInput, match="cannot strip 1 leading component"):
        parse_patch(data, strip=1)
