"""Corpus: each rule of issue 11, run through `git apply` and hotfix on the same pre-image.

Zero different results, zero partial applies, zero tracebacks; where hotfix refuses and git applies,
the case names its documented category (git_oracle.CATEGORIES, docs/applying.md "git apply compatibility").
"""

from __future__ import annotations

import shutil

import pytest
from git_oracle import CATEGORIES, Case, Dir, Link, compare

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is the oracle")

ABC = b"a\nb\nc\nd\ne\nf\ng\n"
H1 = b"@@ -1,2 +1,2 @@\n-a\n+A\n b\n"  # first line changed, one line of trailing context
SIG = b"From 1 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] x\n\n---\n x | 2 +-\n\n"


def _git(path: str, body: bytes, header: bytes = b"") -> bytes:
    return b"diff --git a/%s b/%s\n%s--- a/%s\n+++ b/%s\n%s" % (
        path.encode(), path.encode(), header, path.encode(), path.encode(), body)


CASES = {
    # ---- breaks all-or-nothing: git refuses, so must hotfix
    "blank line between hunks": Case({"x": ABC}, b"--- a/x\n+++ b/x\n" + H1 + b"\n@@ -7 +7 @@\n-g\n+G\n"),
    "text line between hunks": Case({"x": ABC}, b"--- a/x\n+++ b/x\n" + H1 + b"note\n@@ -7 +7 @@\n-g\n+G\n"),
    "--- without +++ in a git header": Case({"x": ABC}, b"diff --git a/x b/x\n--- a/x\n" + H1),
    "--- without +++ in a traditional diff": Case({"x": ABC}, b"--- a/x\n" + H1),
    "only garbage after the headers": Case({"x": ABC}, b"diff --git a/x b/x\nindex 1..2 100644\nsome text\n"),
    "new file mode with copy from/to": Case({"x": ABC}, b"diff --git a/x b/y\nnew file mode 100644\ncopy from x\ncopy to y\n"),
    "new file mode with rename": Case({"x": ABC}, b"diff --git a/x b/y\nnew file mode 100644\nrename from x\nrename to y\n"),
    # ---- names and -p
    "absolute name at -p1 (git's count)": Case({}, b"--- /dev/null\n+++ /abs/dir/evil.py\n@@ -0,0 +1 @@\n+x\n"),
    "absolute name at -p0": Case({}, b"--- /dev/null\n+++ /abs/dir/evil.py\n@@ -0,0 +1 @@\n+x\n", strip=0),
    "absolute names at -p3": Case({"x": ABC}, b"--- /a/old/x\n+++ /a/new/x\n" + H1, strip=3),
    "dot-dot escape": Case({"x": ABC}, b"--- a/../x\n+++ b/../x\n" + H1),
    "inconsistent new filename": Case({"setup.py": b"a\n"}, _git("setup.py", b"@@ -1 +1 @@\n-a\n+A\n").replace(
        b"+++ b/setup.py", b"+++ b/evil.py"), category="names"),
    "second +++ line: /dev/null after the name (found by hypothesis)": Case(
        {"x": ABC}, b"diff --git a/x b/x\nnew file mode 100644\n--- /dev/null\n+++ b/x\n+++ /dev/null\n@@ -1,1 +1,0 @@\n-a\n"),
    "second +++ line repeating the name": Case({"x": ABC}, _git("x", H1).replace(b"+++ b/x\n", b"+++ b/x\n+++ b/x\n")),
    "new file whose +++ name disagrees": Case({}, b"diff --git a/f b/f\nnew file mode 100644\n--- /dev/null\n+++ b/f-blah\n"
                                              b"@@ -0,0 +1 @@\n+1\n"),
    "deleted file whose --- name disagrees": Case({"f": b"1\n", "f-blah": b"1\n"}, b"diff --git a/f b/f\ndeleted file mode 100644\n"
                                                  b"--- b/f-blah\n+++ /dev/null\n@@ -1 +0,0 @@\n-1\n"),
    "--- foo.c / +++ foo.c.new": Case({"foo.c": ABC}, b"--- foo.c\n+++ foo.c.new\n" + H1),
    "--- foo.c.orig / +++ foo.c": Case({"foo.c": ABC}, b"--- foo.c.orig\n+++ foo.c\n" + H1),
    "-p guess does not override an explicit -p1": Case({"foo.c": ABC}, b"--- foo.c\n+++ foo.c.new\n" + H1, strip=1),
    "unquoted tab in a traditional name": Case({"foo": ABC, "foo\tbar": ABC}, b"--- a/foo\tbar\n+++ b/foo\tbar\n" + H1),
    "name with spaces before a timestamp": Case({"my file": ABC}, b"--- a/my file\t2024-01-01 10:00:00.123 +0100\n"
                                               b"+++ b/my file\t2024-01-02 10:00:00.123 +0100\n" + H1),
    "quoted name with escapes": Case({"t\"ab\\.py": ABC}, b'diff --git "a/t\\"ab\\\\.py" "b/t\\"ab\\\\.py"\n'
                                    b'--- "a/t\\"ab\\\\.py"\n+++ "b/t\\"ab\\\\.py"\n' + H1),
    "epoch deletion with a -08:00 zone": Case({"x": b"a\n"}, b"--- a/x\t2020-01-01 00:00:00 -08:00\n"
                                             b"+++ b/x\t1969-12-31 16:00:00 -08:00\n@@ -1 +0,0 @@\n-a\n"),
    "epoch creation with a +0530 zone": Case({}, b"--- a/x\t1970-01-01 05:30:00 +0530\n"
                                            b"+++ b/x\t2020-01-01 00:00:00 +0530\n@@ -0,0 +1 @@\n+a\n"),
    "1970 time that is not the epoch, file absent": Case({}, b"--- a/x\t1970-01-01 05:00:00 +0000\n"
                                                         b"+++ b/x\t2020-01-01 00:00:00 +0000\n@@ -0,0 +1 @@\n+a\n"),
    "1970 time that is not the epoch, file empty": Case({"x": b""}, b"--- a/x\t1970-01-01 05:00:00 +0000\n"
                                                        b"+++ b/x\t2020-01-01 00:00:00 +0000\n@@ -0,0 +1 @@\n+a\n"),
    "removal without an epoch leaves an empty file": Case({"x": b"a\n"}, b"diff -ruN a/x b/x\n"
                                                          b"--- a/x\t1982-09-16 07:00:00.000000000 -0800\n"
                                                          b"+++ b/x\t1982-09-16 07:00:00.000000000 -0800\n@@ -1 +0,0 @@\n-a\n"),
    "epoch removal east of GMT with fractions": Case({"x": b"a\n"}, b"--- a/x\t1982-09-17 00:00:00.000000000 +0900\n"
                                                     b"+++ b/x\t1970-01-01 09:00:00.000000000 +0900\n@@ -1 +0,0 @@\n-a\n"),
    "epoch with a non-zero fraction is not the epoch": Case({"x": b"a\n"}, b"--- a/x\t1982-09-16 15:00:00 +0000\n"
                                                            b"+++ b/x\t1970-01-01 00:00:00.5 +0000\n@@ -1 +0,0 @@\n-a\n"),
    "epoch creation with old lines": Case({"x": b"a\n"}, b"--- a/x\t1970-01-01 00:00:00 +0000\n"
                                          b"+++ b/x\t2020-01-01 00:00:00 +0000\n@@ -1 +1 @@\n-a\n+b\n"),
    # ---- symlinks and submodules
    "new symlink": Case({}, b"diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n"
                        b"@@ -0,0 +1 @@\n+target\n\\ No newline at end of file\n", category="symlink"),
    "file becomes a symlink": Case({"l": b"target\n"}, b"diff --git a/l b/l\ndeleted file mode 100644\n--- a/l\n+++ /dev/null\n"
                                   b"@@ -1 +0,0 @@\n-target\ndiff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n"
                                   b"@@ -0,0 +1 @@\n+target\n\\ No newline at end of file\n", category="symlink"),
    "new submodule": Case({}, b"diff --git a/sub b/sub\nnew file mode 160000\n--- /dev/null\n+++ b/sub\n"
                          b"@@ -0,0 +1 @@\n+Subproject commit 0123456789012345678901234567890123456789\n",
                          category="symlink"),
    "delete a dangling symlink": Case({"l": Link("nowhere")}, b"diff --git a/l b/l\ndeleted file mode 120000\n"
                                      b"--- a/l\n+++ /dev/null\n@@ -1 +0,0 @@\n-nowhere\n\\ No newline at end of file\n",
                                      category="symlink"),
    "delete a dangling symlink as a text file": Case({"l": Link("nowhere")}, b"--- a/l\n+++ /dev/null\n@@ -1 +0,0 @@\n-nowhere\n"),
    "modify a symlink as text": Case({"real": ABC, "l": Link("real")}, b"--- a/l\n+++ b/l\n" + H1),
    "retarget a symlink by a text diff": Case({"real": ABC, "other": ABC, "l": Link("real")},
                                              b"--- a/l\n+++ b/l\n@@ -1 +1 @@\n-real\n\\ No newline at end of file\n"
                                              b"+other\n\\ No newline at end of file\n", category="symlink"),
    "a new symlink, then a file through it": Case({}, b"diff --git a/tmp b/tmp\nnew file mode 120000\n--- /dev/null\n+++ b/tmp\n"
                                                  b"@@ -0,0 +1 @@\n+..\n\\ No newline at end of file\n"
                                                  b"diff --git a/tmp/foo b/tmp/foo\nnew file mode 100644\n--- /dev/null\n"
                                                  b"+++ b/tmp/foo\n@@ -0,0 +1 @@\n+evil\n"),
    "delete a file named with ..": Case({"x": b"evil\n"}, b"diff --git a/../x b/../x\ndeleted file mode 100644\n--- a/../x\n"
                                        b"+++ /dev/null\n@@ -1 +0,0 @@\n-evil\n"),
    "create beyond a symlinked directory": Case({"real/keep": b"k\n", "d": Link("real")},
                                                b"--- /dev/null\n+++ b/d/x\n@@ -0,0 +1 @@\n+x\n"),
    "modify beyond a symlinked directory": Case({"real/x": ABC, "d": Link("real")},
                                                b"--- a/d/x\n+++ b/d/x\n" + H1),
    # ---- line numbers past the end: git's find_pos clamps the start to the end and searches back
    "line number 2000000000": Case({"x": b"a\n"}, b"--- a/x\n+++ b/x\n@@ -2000000000 +2000000000 @@\n-a\n+b\n"),
    "line number 98765432109876543210": Case({"x": b"a\n"}, b"--- a/x\n+++ b/x\n@@ -98765432109876543210 "
                                             b"+98765432109876543210 @@\n-a\n+b\n"),
    "hunk at line 10 of a 3-line file": Case({"f": b"a\nb\nc\n"}, b"--- a/f\n+++ b/f\n@@ -10,3 +10,3 @@\n a\n-b\n+B\n c\n"),
    "hunk at line 3 of a 3-line file": Case({"f": b"a\nb\nc\n"}, b"--- a/f\n+++ b/f\n@@ -3,3 +3,3 @@\n a\n-b\n+B\n c\n"),
    "t4105 O3.diff: big offset": Case({"file": b"".join(b"%d\n" % i for i in range(1, 13))},
                                      b"diff --git a/file b/file\n--- a/file\n+++ b/file\n@@ -19,6 +19,11 @@\n"
                                      b" 5\n 6\n 7\n+a\n+b\n+c\n+d\n+e\n 8\n 9\n 10\n"),
    "line number 2000000000 with context, matched near the end": Case(
        {"x": b"k\n" * 1000 + b"a\nb\nc\nk\n"},
        b"--- a/x\n+++ b/x\n@@ -2000000000,3 +2000000000,3 @@\n a\n-b\n+B\n c\n"),
    "line number 2000000000 with context, matched nowhere": Case(
        {"x": b"k\n" * 1000}, b"--- a/x\n+++ b/x\n@@ -2000000000,3 +2000000000,3 @@\n a\n-b\n+B\n c\n"),
    "GNU patch no-newline-triggers-assert: an empty last line without newline": Case(
        {"f": b"1\n"}, b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-1\n+1a\n \n\\ No newline at end of file\n"),
    "an empty old line without newline on an empty file": Case(
        {"f": b""}, b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-\n\\ No newline at end of file\n+x\n"),
    "an empty new line without newline": Case(
        {"f": b"1\n"}, b"--- a/f\n+++ b/f\n@@ -1 +1,2 @@\n 1\n+\n\\ No newline at end of file\n"),
    "offset within the file": Case({"x": ABC}, b"--- a/x\n+++ b/x\n@@ -5,3 +5,3 @@\n a\n-b\n+B\n c\n"),
    "equally near matches: forward first": Case({"x": b"k\na\nb\nk\nk\nk\na\nb\nk\n"},
                                               b"--- a/x\n+++ b/x\n@@ -4,3 +4,3 @@\n k\n-a\n+A\n b\n"),
    "second hunk at an offset": Case({"x": b"0\n" + ABC}, b"--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n 0\n-a\n+A\n b\n"
                                     b"@@ -5,3 +5,3 @@\n d\n-e\n+E\n f\n"),
    "insertion at the start": Case({"x": ABC}, b"--- a/x\n+++ b/x\n@@ -0,0 +1 @@\n+top\n"),
    "insertion at the start of a non-empty file with context": Case({"x": ABC},
                                                                  b"--- a/x\n+++ b/x\n@@ -1,2 +1,3 @@\n+top\n a\n b\n"),
    "whitespace-only difference in context": Case({"x": b"a \nb\n"}, b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n"),
    "CRLF patch on an LF file": Case({"x": b"a\nb\n"}, b"--- a/x\r\n+++ b/x\r\n@@ -1,2 +1,2 @@\r\n a\r\n-b\r\n+B\r\n"),
    "trailing context anchors nothing at the end": Case({"x": ABC}, b"--- a/x\n+++ b/x\n@@ -6,2 +6,2 @@\n f\n-g\n+G\n"),
    "no trailing context must be at the end": Case({"x": ABC + b"h\n"}, b"--- a/x\n+++ b/x\n@@ -6,2 +6,2 @@\n f\n-g\n+G\n"),
    "rename with edits and mode": Case({"a.sh": ABC}, b"diff --git a/a.sh b/b.sh\nold mode 100644\nnew mode 100755\n"
                                      b"similarity index 90%\nrename from a.sh\nrename to b.sh\n--- a/a.sh\n+++ b/b.sh\n"
                                      b"@@ -1,2 +1,2 @@\n-a\n+A\n b\n"),
    "delete with a wrong body": Case({"x": b"a\nb\n"}, b"diff --git a/x b/x\ndeleted file mode 100644\n--- a/x\n"
                                    b"+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"),
    "quoted non-ASCII name": Case({"caf\u00e9.py": ABC}, b'diff --git "a/caf\\303\\251.py" "b/caf\\303\\251.py"\n'
                                  b'--- "a/caf\\303\\251.py"\n+++ "b/caf\\303\\251.py"\n' + H1),
    # ---- the dry run predicts the real run
    ".g\u200cit/config where git's default does not look for HFS+ names": Case(
        {"x": ABC}, b"--- /dev/null\n+++ b/.g\xe2\x80\x8cit/config\n@@ -0,0 +1 @@\n+x\n", category="hfs-dotgit"),
    "rename foo to foo/baz": Case({"foo": ABC}, b"diff --git a/foo b/foo/baz\nsimilarity index 100%\nrename from foo\nrename to foo/baz\n",
                                  category="type-change"),
    "write below a regular file": Case({"f": ABC}, b"--- /dev/null\n+++ b/f/x\n@@ -0,0 +1 @@\n+x\n"),
    "create both d and d/x": Case({}, b"--- /dev/null\n+++ b/d\n@@ -0,0 +1 @@\n+d\n--- /dev/null\n+++ b/d/x\n@@ -0,0 +1 @@\n+x\n"),
    "create d/x then d": Case({}, b"--- /dev/null\n+++ b/d/x\n@@ -0,0 +1 @@\n+x\n--- /dev/null\n+++ b/d\n@@ -0,0 +1 @@\n+d\n"),
    "create a file where an empty directory is": Case({"d": Dir()}, b"--- /dev/null\n+++ b/d\n@@ -0,0 +1 @@\n+d\n",
                                                      category="type-change"),
    # ---- tolerated as git tolerates them
    "format-patch signature without its space": Case({"x": ABC}, SIG + _git("x", H1) + b"--\n2.39.5\n\n"),
    "format-patch signature with its space": Case({"x": ABC}, SIG + _git("x", H1) + b"-- \n2.39.5\n\n"),
    "binary files differ in diff -ruN": Case({"x": ABC, "bin": b"\0\1"}, b"diff -ruN a/bin b/bin\nBinary files a/bin and b/bin differ\n"
                                             b"diff -ruN a/x b/x\n--- a/x\n+++ b/x\n" + H1),
    "binary files differ in a git diff": Case({"x": ABC, "bin": b"\0\1"}, b"diff --git a/bin b/bin\nindex 1..2 100644\n"
                                              b"Binary files a/bin and b/bin differ\n" + _git("x", H1)),
    "final hunk line without newline": Case({"x": ABC}, b"--- a/x\n+++ b/x\n@@ -7 +7 @@\n-g\n+G"),
    "final no-newline marker without newline": Case({"x": b"a\nb\n"}, b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n"
                                                    b"\\ No newline at end of file"),
    "final signature line without newline": Case({"x": ABC}, SIG + _git("x", H1) + b"-- \n2.39.5"),
    "no newline at end of file markers": Case({"x": b"a\nb"}, b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+B\n"),
    "empty context line without its space": Case({"x": b"a\n\nb\n"}, b"--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n\n-b\n+B\n"),
    "CRLF file": Case({"x": b"a\r\nb\r\n"}, b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\r\n-b\r\n+B\r\n"),
    "hunk longer than its header": Case({"x": b"a\n"}, b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+A\n+extra\n", category="overlong-hunk"),
    "hunk with only context lines": Case({"x": ABC}, b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n a\n"),
    "hunk shorter than its header": Case({"x": ABC}, b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n+A\n"),
    # ---- renames and copies read the original tree
    "swapped renames": Case({"a": b"A\n", "b": b"B\n"}, b"diff --git a/a b/b\nrename from a\nrename to b\n"
                            b"diff --git a/b b/a\nrename from b\nrename to a\n"),
    "copy from a file the same patch modifies": Case({"x": ABC}, _git("x", H1) +
                                                     b"diff --git a/x b/y\nsimilarity index 100%\ncopy from x\ncopy to y\n"),
    "modify then copy with edits": Case({"x": ABC}, b"diff --git a/x b/y\nsimilarity index 90%\ncopy from x\ncopy to y\n"
                                        b"--- a/x\n+++ b/y\n@@ -7 +7 @@\n-g\n+G\n" + _git("x", H1)),
    "create over an existing file that the patch deletes later": Case({"x": b"precious\n"},
                                                                    b"--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+c\n"
                                                                    b"--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-c\n",
                                                                    category="unchecked-overwrite"),
    "rename onto an existing file": Case({"a": b"A\n", "b": b"B\n"}, b"diff --git a/a b/b\nrename from a\nrename to b\n"),
    "mode change": Case({"run": b"#!/bin/sh\n"}, b"diff --git a/run b/run\nold mode 100644\nnew mode 100755\n"),
    "series touching one file twice": Case({"x": ABC}, _git("x", H1) + _git("x", b"@@ -1,2 +1,2 @@\n-A\n+AA\n b\n")),
    "delete then create one path": Case({"x": b"a\n"}, b"--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"
                                        b"--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+b\n"),
}


# ---- git's verify_path: the .git directory and detours are no paths at all (issue 21)
GITCONFIG = b"[core]\n\trepositoryformatversion = 0\n"
_NEW = b"@@ -0,0 +1 @@\n+x\n"
_FSMONITOR = b"@@ -1,2 +1,4 @@\n [core]\n \trepositoryformatversion = 0\n+[core]\n+\tfsmonitor = touch pwned\n"
HFS = ("core.protectHFS=true",)  # git checks HFS+ names only on macOS by default; hotfix always does
INVALID_PATHS = {  # name: (case, the path git names)
    "modify .git/config": (Case({".git/config": GITCONFIG, "x": ABC}, _git(".git/config", _FSMONITOR)), ".git/config"),
    "create .git/hooks/x": (Case({"x": ABC}, b"--- /dev/null\n+++ b/.git/hooks/x\n" + _NEW), ".git/hooks/x"),
    "create .GIT/x": (Case({"x": ABC}, b"--- /dev/null\n+++ b/.GIT/x\n" + _NEW), ".GIT/x"),
    "create git~1/x": (Case({"x": ABC}, b"--- /dev/null\n+++ b/git~1/x\n" + _NEW), "git~1/x"),
    "modify pkg/../x": (Case({"x": ABC, "pkg/mod.py": ABC}, b"--- a/pkg/../x\n+++ b/pkg/../x\n" + H1), "pkg/../x"),
    "modify pkg/../pkg/mod.py": (Case({"pkg/mod.py": ABC}, _git("pkg/../pkg/mod.py", H1)), "pkg/../pkg/mod.py"),
    "modify pkg/link/../m.py": (Case({"m.py": ABC, "pkg/link": Link("../elsewhere"), "elsewhere/keep": b"k\n"},
                                     b"--- a/pkg/link/../m.py\n+++ b/pkg/link/../m.py\n" + H1), None),
    "delete pkg/../x": (Case({"x": b"a\n", "pkg/mod.py": ABC}, b"--- a/pkg/../x\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"),
                        "pkg/../x"),
    "modify ./x": (Case({"x": ABC}, b"--- a/./x\n+++ b/./x\n" + H1), "./x"),
    "create sub/.git": (Case({"x": ABC}, b"--- /dev/null\n+++ b/sub/.git\n" + _NEW), "sub/.git"),
    "create a name ending in /": (Case({"x": ABC}, b"--- /dev/null\n+++ b/newdir/\n" + _NEW), "newdir/"),
    "rename to .git/x": (Case({"x": ABC}, b"diff --git a/x b/.git/x\nsimilarity index 100%\nrename from x\n"
                                         b"rename to .git/x\n"), ".git/x"),
    "NTFS: .git. . /x": (Case({"x": ABC}, b"--- /dev/null\n+++ b/.git. . /x\n" + _NEW), ".git. . /x"),
    "NTFS: .git::$INDEX_ALLOCATION/config": (Case({"x": ABC}, b"--- /dev/null\n+++ b/.git::$INDEX_ALLOCATION/config\n"
                                                  + _NEW), ".git::$INDEX_ALLOCATION/config"),
    "NTFS: GIT~1/config": (Case({"x": ABC}, b"--- /dev/null\n+++ b/GIT~1/config\n" + _NEW), "GIT~1/config"),
    "NTFS: a backslash before .git": (Case({"x": ABC}, b"--- /dev/null\n+++ b/a\\.git\\config\n" + _NEW),
                                      "a\\.git\\config"),
    "HFS+: a zero-width non-joiner in .git": (Case({"x": ABC}, b"--- /dev/null\n+++ b/.g\xe2\x80\x8cit/config\n"
                                                   + _NEW, git_config=HFS), ".g\u200cit/config"),
    "HFS+: a byte order mark before .GIT": (Case({"x": ABC}, b"--- /dev/null\n+++ b/\xef\xbb\xbf.GIT/config\n"
                                                 + _NEW, git_config=HFS), "\ufeff.GIT/config"),
}


def _tree_with_dot_git(root) -> dict:
    from git_oracle import snapshot

    seen = snapshot(root)
    if (root / ".git").is_dir():
        seen[".git"] = snapshot(root / ".git")
    return seen


@pytest.mark.parametrize("name", list(INVALID_PATHS))
def test_invalid_paths_are_refused_as_git_refuses_them(tmp_path, name):
    from git_oracle import build, run_hotfix

    case, git_names = INVALID_PATHS[name]
    verdict, theirs, ours = compare(tmp_path / "compare", case)
    assert verdict == "both-refused", (theirs.message, ours.message)
    if git_names is not None:  # git checks the pre-image first: a missing 'pkg/link/..' is its reason there
        assert f"invalid path '{git_names}'" in theirs.message, theirs.message
    assert ours.message.startswith("exit 3: case.diff:") and "invalid path " in ours.message, ours.message
    # the tree, its .git folder included, is byte for byte what it was
    root = tmp_path / "root"
    build(root, case)
    before = _tree_with_dot_git(root)
    refused = run_hotfix(root, case.patch, case.strip, tmp_path / "journal")
    assert not refused.applied and _tree_with_dot_git(root) == before


def test_a_name_only_the_git_line_gives_must_agree_after_strip(tmp_path):
    """GNU patch's empty-files test at -p0: git takes no name from 'a/f b/f' (two names) and refuses."""
    data = b"diff --git a/f b/f\nnew file mode 100644\nindex 0000000..e69de29\n"
    verdict, theirs, ours = compare(tmp_path / "p0", Case({}, data, strip=0))
    assert verdict == "both-refused"
    assert "git diff header lacks filename information when removing 0 leading pathname components" in theirs.message
    assert ours.message == ("exit 8: case.diff:1: git diff header lacks filename information when removing 0 "
                            "leading pathname components")
    assert compare(tmp_path / "p1", Case({}, data, strip=1))[0] == "applied"  # -p1: both create an empty f
    modes = b"diff --git a/f b/f\nold mode 100644\nnew mode 100755\n"
    assert compare(tmp_path / "modes-p0", Case({"f": ABC}, modes, strip=0))[0] == "both-refused"
    assert compare(tmp_path / "modes-p1", Case({"f": ABC}, modes, strip=1))[0] == "applied"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_hotfix_agrees_with_git_apply(tmp_path, name):
    case = CASES[name]
    verdict, theirs, ours = compare(tmp_path, case)
    if case.category is not None:
        assert verdict == f"refused:{case.category}", f"expected a refusal ({case.category}); git: {theirs.message!r}"
    else:
        assert verdict in ("applied", "both-refused"), verdict


def test_every_category_is_in_the_readme():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "docs" / "applying.md").read_text()
    section = readme[readme.index("### git apply compatibility"):]
    for category in CATEGORIES:
        assert f"`{category}`" in section, category


PREDICTED = {  # each once said OK on --dry-run and then failed for real (one with exit 6 and debris)
    "modify a symlink as text": ({"real": ABC, "l": Link("real")}, b"--- a/l\n+++ b/l\n" + H1),
    "rename foo to foo/baz": ({"foo": ABC}, b"diff --git a/foo b/foo/baz\nsimilarity index 100%\nrename from foo\nrename to foo/baz\n"),
    "write below a regular file": ({"f": ABC}, b"--- /dev/null\n+++ b/f/x\n@@ -0,0 +1 @@\n+x\n"),
    "create both d and d/x": ({}, b"--- /dev/null\n+++ b/d\n@@ -0,0 +1 @@\n+d\n--- /dev/null\n+++ b/d/x\n@@ -0,0 +1 @@\n+x\n"),
}


@pytest.mark.parametrize("name", list(PREDICTED))
def test_dry_run_predicts_the_real_run(tmp_path, run_hotfix, name):
    from git_oracle import build, snapshot

    files, data = PREDICTED[name]
    root = tmp_path / "root"
    build(root, Case(files, data))
    before = snapshot(root)
    (tmp_path / "p.diff").write_bytes(data)
    dry = run_hotfix("apply", "--patch", tmp_path / "p.diff", "--root", root, "--dry-run")
    real = run_hotfix("apply", "--patch", tmp_path / "p.diff", "--root", root)
    assert dry.returncode == real.returncode == 3, (dry.stderr, real.stderr)
    assert dry.stderr.splitlines()[0] == real.stderr.splitlines()[0]
    assert snapshot(root) == before  # no temp file, nothing half-written
    from vllm_hotfix_guard import paths

    assert not (paths.TargetDir.of(root).journal / "journal.json").exists()


@pytest.mark.parametrize("files", [3, 700])  # 700 files: over 1 MB, so a forked child plans the second half
def test_skipped_binary_is_named_on_stderr_and_the_text_applies(tmp_path, run_hotfix, files):
    root = tmp_path / "root"
    body = b"x" * 1500
    chunks = []
    for n in range(files):
        (root / "pkg").mkdir(parents=True, exist_ok=True)
        (root / "pkg" / f"m{n}.py").write_bytes(b"a\n" + body + b"\n")
        chunks.append(b"diff -ruN a/pkg/m%d.py b/pkg/m%d.py\n--- a/pkg/m%d.py\n+++ b/pkg/m%d.py\n"
                      b"@@ -1,2 +1,2 @@\n-a\n+A\n %s\n" % (n, n, n, n, body))
    chunks.insert(len(chunks) - 1, b"diff -ruN a/img.png b/img.png\nBinary files a/img.png and b/img.png differ\n")
    (tmp_path / "p.diff").write_bytes(b"".join(chunks))
    done = run_hotfix("apply", "--patch", tmp_path / "p.diff", "--root", root)
    assert done.returncode == 0, done.stderr
    assert "skipped binary file: Binary files a/img.png and b/img.png differ" in done.stderr
    assert all((root / "pkg" / f"m{n}.py").read_bytes().startswith(b"A\n") for n in range(files))
