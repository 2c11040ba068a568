"""The diff model: frozen dataclasses for a parsed patch, and the byte tables the parser shares. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from operator import itemgetter

SPACE, MINUS, PLUS, BACKSLASH = 32, 45, 43, 92
SWAP_OPS = bytes.maketrans(b"+-", b"-+")
FIRST_BYTE = itemgetter(slice(0, 1))
AFTER_FIRST_BYTE = itemgetter(slice(1, None))
OLD_SIDE_MASK = bytes.maketrans(b" -+", b"\1\1\0")
NEW_SIDE_MASK = bytes.maketrans(b" -+", b"\1\0\1")
HUNK_HEADER = re.compile(rb"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
HEADER_RANGES = re.compile(r"@@ -(\S+) \+(\S+) @@")
# git apply's diff_timestamp_len: a date, an optional time and zone at the end of a traditional
# '---' / '+++' line, after one TAB or after spaces (with any whitespace before them).
TIMESTAMP = re.compile(
    rb"(?:\t|[ \t]* )(?:\d\d)?\d\d-\d\d-\d\d(?: \d\d:\d\d:\d\d(?:\.\d+)?)?(?: [+-](?:\d{4}|\d\d:\d\d))?\Z")
# git apply's has_epoch_timestamp: after the LAST tab, a date of 1969-12-31 or 1970-01-01 whose time
# is exactly the zone's offset (the Unix epoch written in that zone).
EPOCH = re.compile(rb"(1969-12-31|1970-01-01) ([0-2][0-9]):([0-5][0-9]):00(?:\.0+)? ([-+])([0-2][0-9]):?([0-5][0-9])\Z")
NAME_END = re.compile(rb"[\t\r\v\f]")
SYMLINK, GITLINK, FILE_TYPE = 0o120000, 0o160000, 0o170000
ABSENT = object()  # no '---' / '+++' line in a git header
GIT_EXTENDED_HEADERS = (
    b"old mode ", b"new mode ", b"deleted file mode ", b"new file mode ", b"copy from ", b"copy to ",
    b"rename from ", b"rename to ", b"rename old ", b"rename new ", b"similarity index ",
    b"dissimilarity index ", b"index ",
)
C_ESCAPES = {ord("a"): 7, ord("b"): 8, ord("t"): 9, ord("n"): 10, ord("v"): 11, ord("f"): 12,
              ord("r"): 13, ord('"'): 34, ord("\\"): 92}


@dataclass(frozen=True)
class HunkLine:
    """One line of a hunk: its op and its bytes."""

    op: str  # ' ', '-', '+'
    text: bytes  # with its terminator, or without one when '\ No newline at end of file' follows


@dataclass(frozen=True)
class Hunk:
    """One ``@@`` block.

    ``old_side`` / ``new_side`` are the file lines the hunk expects / produces, WITHOUT their
    ``\\n`` (a ``\\r`` stays); ``old_eof`` / ``new_eof`` say that the side's last line has no
    newline. ``ops`` holds one op byte per hunk line, in patch order, so ``lines`` can be rebuilt.
    """

    old_start: int
    old_len: int
    new_start: int
    new_len: int
    header: str
    lineno: int
    old_side: tuple[bytes, ...] = ()
    new_side: tuple[bytes, ...] = ()
    old_eof: bool = False
    new_eof: bool = False
    ops: bytes = b""

    @property
    def range_header(self) -> str:
        """``@@ -a,b +c,d @@`` without the section heading, for messages."""
        return "@@ -%d,%d +%d,%d @@" % (self.old_start, self.old_len, self.new_start, self.new_len)

    @property
    def trailing_context(self) -> int:
        return len(self.ops) - len(self.ops.rstrip(b" "))

    @cached_property
    def lines(self) -> tuple[HunkLine, ...]:
        old_texts, new_texts = self.old_lines, self.new_lines
        result: list[HunkLine] = []
        o = n = 0
        for op in self.ops:
            if op == PLUS:
                result.append(HunkLine("+", new_texts[n]))
                n += 1
            else:
                result.append(HunkLine(chr(op), old_texts[o]))
                o += 1
                if op == SPACE:
                    n += 1
        return tuple(result)

    @property
    def old_lines(self) -> tuple[bytes, ...]:
        return _terminated(self.old_side, self.old_eof)

    @property
    def new_lines(self) -> tuple[bytes, ...]:
        return _terminated(self.new_side, self.new_eof)

    @property
    def insertions(self) -> int:
        return self.ops.count(PLUS)

    @property
    def deletions(self) -> int:
        return self.ops.count(MINUS)


def _terminated(side: tuple[bytes, ...], eof: bool) -> tuple[bytes, ...]:
    texts = [line + b"\n" for line in side]
    if eof and texts:
        texts[-1] = side[-1]
    return tuple(texts)


@dataclass(frozen=True)
class FilePatch:
    """Everything a patch does to one file: names, modes, hunks, rename or copy."""

    old_path: str | None  # None for a created file (/dev/null); stripped, posix, relative
    new_path: str | None  # None for a deleted file
    hunks: tuple[Hunk, ...]
    old_mode: int | None = None  # as written in the patch, e.g. 0o100644
    new_mode: int | None = None
    is_rename: bool = False
    is_copy: bool = False
    lineno: int = 0
    copy_reversed: bool = False  # reverse of a copy: new_path must already hold the result; old_path goes
    maybe_new: bool = False  # traditional diff, no /dev/null, only a '-0,0' hunk: created if absent (git)

    @property
    def kind(self) -> str:
        if self.old_path is None:
            return "create"
        if self.new_path is None:
            return "delete"
        if self.is_rename:
            return "rename"
        if self.is_copy:
            return "copy"
        if not self.hunks and self.old_mode != self.new_mode:
            return "mode"
        return "modify"

    @property
    def path(self) -> str:
        return self.new_path if self.new_path is not None else self.old_path  # type: ignore[return-value]

    @property
    def insertions(self) -> int:
        return sum(h.insertions for h in self.hunks)

    @property
    def deletions(self) -> int:
        return sum(h.deletions for h in self.hunks)


@dataclass(frozen=True)
class DiffStat:
    """Files, insertions and deletions of a patch (as `git apply --stat` counts them)."""

    files: int
    insertions: int
    deletions: int


@dataclass(frozen=True)
class Patch:
    """A parsed diff: its files in order, and what was skipped on the way."""

    files: tuple[FilePatch, ...]
    source: str = "<patch>"
    warnings: tuple[str, ...] = ()  # harmless things skipped, e.g. 'Binary files ... differ' of diff -ruN
    guessed_strip: int | None = None  # the -p git's guess chose (parse_patch(strip=None) only)

    @property
    def stats(self) -> DiffStat:
        return DiffStat(
            files=len({f.path for f in self.files}),
            insertions=sum(f.insertions for f in self.files),
            deletions=sum(f.deletions for f in self.files),
        )


# --------------------------------------------------------------------------- parsing
