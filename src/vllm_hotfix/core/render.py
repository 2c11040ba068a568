"""Write a ``git diff``-style diff of one file from its two contents (pure). `hotfix new` and `hotfix port`
write their patches with it; the parser (core.parse) and ``git apply`` read them back."""

from __future__ import annotations

import difflib

from vllm_hotfix_guard.output import quote_path


def file_diff(path: str, before: bytes | None, after: bytes | None, mode: int = 0o644) -> bytes:
    """A ``git diff``-style diff of one file (a/ b/ prefixes, 3 lines of context); None sides are a created /
    deleted file; b'' when the two are equal. Lines are matched without difflib's "popular line" junk
    heuristic, so a file with many blank lines still gets the smallest hunks."""
    old_name, new_name = _name("a/", path), _name("b/", path)  # C-quoted as git writes an unusual name
    head = [b"diff --git %s %s\n" % (old_name, new_name)]
    if before is None:
        head.append(b"new file mode 100%o\n" % (mode & 0o777))
    elif after is None:
        head.append(b"deleted file mode 100%o\n" % (mode & 0o777))
    old = (before or b"").splitlines(keepends=True)
    new = (after or b"").splitlines(keepends=True)
    body: list[bytes] = []
    for group in difflib.SequenceMatcher(None, old, new, autojunk=False).get_grouped_opcodes(3):
        first, last = group[0], group[-1]
        body.append(b"@@ -%s +%s @@\n" % (_range(first[1], last[2]), _range(first[3], last[4])))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                body += [_line(b" ", line) for line in old[i1:i2]]
                continue
            body += [_line(b"-", line) for line in old[i1:i2]]
            body += [_line(b"+", line) for line in new[j1:j2]]
    if not body and before is not None and after is not None:
        return b""
    if body:
        head += [b"--- " + (b"/dev/null" if before is None else old_name) + b"\n",
                 b"+++ " + (b"/dev/null" if after is None else new_name) + b"\n"]
    return b"".join(head + body)


def _name(prefix: str, path: str) -> bytes:
    """``prefix + path`` as git's diff header writes it: as is when plain, else C-quoted (``core.quotePath``:
    a newline, a control character or a byte >= 0x80 in a wheel member's name cannot break the header)."""
    return quote_path(prefix + path).encode("ascii")


def _range(start: int, stop: int) -> bytes:
    """difflib's unified range: 'start,length' (1-based; an empty range names the line before it)."""
    length = stop - start
    first = start + 1 if length else start
    return b"%d" % first if length == 1 else b"%d,%d" % (first, length)


def _line(op: bytes, line: bytes) -> bytes:
    return op + line if line.endswith(b"\n") else op + line + b"\n\\ No newline at end of file\n"
