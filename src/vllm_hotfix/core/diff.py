"""Parse the diffs people actually have into frozen dataclasses. Pure: bytes in, data out.

Accepted: ``git diff`` / ``git show``, ``git format-patch`` mails (several commits per file),
GitHub ``.patch`` / ``.diff`` downloads, ``diff -ruN`` and other traditional unified diffs.

Lines are kept as bytes, split on ``\\n`` only, so a ``\\r`` stays part of its line and CRLF files
round-trip byte for byte. Inside a hunk the header's line counts decide where the hunk ends
(a deleted line may well start with ``--- ``), and any disagreement is an error, never a guess.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import compress
from operator import itemgetter
from typing import Sequence

from vllm_hotfix.core.safety import check_relative_path
from vllm_hotfix.errors import InvalidInput, Refused

_SPACE, _MINUS, _PLUS, _BACKSLASH = 32, 45, 43, 92
_SWAP_OPS = bytes.maketrans(b"+-", b"-+")
_FIRST_BYTE = itemgetter(slice(0, 1))
_AFTER_FIRST_BYTE = itemgetter(slice(1, None))
_OLD_SIDE_MASK = bytes.maketrans(b" -+", b"\1\1\0")
_NEW_SIDE_MASK = bytes.maketrans(b" -+", b"\1\0\1")
_HUNK_HEADER = re.compile(rb"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_HEADER_RANGES = re.compile(r"@@ -(\S+) \+(\S+) @@")
# git apply's diff_timestamp_len: a date, an optional time and zone at the end of a traditional
# '---' / '+++' line, after one TAB or after spaces (with any whitespace before them).
_TIMESTAMP = re.compile(
    rb"(?:\t|[ \t]* )(?:\d\d)?\d\d-\d\d-\d\d(?: \d\d:\d\d:\d\d(?:\.\d+)?)?(?: [+-](?:\d{4}|\d\d:\d\d))?\Z")
# git apply's has_epoch_timestamp: after the LAST tab, a date of 1969-12-31 or 1970-01-01 whose time
# is exactly the zone's offset (the Unix epoch written in that zone).
_EPOCH = re.compile(rb"(1969-12-31|1970-01-01) ([0-2][0-9]):([0-5][0-9]):00(?:\.0+)? ([-+])([0-2][0-9]):?([0-5][0-9])\Z")
_NAME_END = re.compile(rb"[\t\r\v\f]")
_SYMLINK, _GITLINK, _FILE_TYPE = 0o120000, 0o160000, 0o170000
_ABSENT = object()  # no '---' / '+++' line in a git header
_GIT_EXTENDED_HEADERS = (
    b"old mode ", b"new mode ", b"deleted file mode ", b"new file mode ", b"copy from ", b"copy to ",
    b"rename from ", b"rename to ", b"rename old ", b"rename new ", b"similarity index ",
    b"dissimilarity index ", b"index ",
)
_C_ESCAPES = {ord("a"): 7, ord("b"): 8, ord("t"): 9, ord("n"): 10, ord("v"): 11, ord("f"): 12,
              ord("r"): 13, ord('"'): 34, ord("\\"): 92}


@dataclass(frozen=True)
class HunkLine:
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
    def leading_context(self) -> int:
        return len(self.ops) - len(self.ops.lstrip(b" "))

    @property
    def trailing_context(self) -> int:
        return len(self.ops) - len(self.ops.rstrip(b" "))

    @cached_property
    def lines(self) -> tuple[HunkLine, ...]:
        old_texts, new_texts = self.old_lines, self.new_lines
        result: list[HunkLine] = []
        o = n = 0
        for op in self.ops:
            if op == _PLUS:
                result.append(HunkLine("+", new_texts[n]))
                n += 1
            else:
                result.append(HunkLine(chr(op), old_texts[o]))
                o += 1
                if op == _SPACE:
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
        return self.ops.count(_PLUS)

    @property
    def deletions(self) -> int:
        return self.ops.count(_MINUS)


def _terminated(side: tuple[bytes, ...], eof: bool) -> tuple[bytes, ...]:
    texts = [line + b"\n" for line in side]
    if eof and texts:
        texts[-1] = side[-1]
    return tuple(texts)


@dataclass(frozen=True)
class FilePatch:
    old_path: str | None  # None for a created file (/dev/null); stripped, posix, relative
    new_path: str | None  # None for a deleted file
    hunks: tuple[Hunk, ...]
    old_mode: int | None = None  # as written in the patch, e.g. 0o100644
    new_mode: int | None = None
    is_rename: bool = False
    is_copy: bool = False
    is_binary: bool = False
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
    files: int
    insertions: int
    deletions: int


@dataclass(frozen=True)
class Patch:
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


def _is_epoch(line: bytes) -> bool:
    """git apply's has_epoch_timestamp on a whole '---' / '+++' line."""
    tab = line.rfind(b"\t")
    found = _EPOCH.match(line, tab + 1) if tab >= 0 else None
    if not found:
        return False
    day, hour, minute, sign, zone_hours, zone_minutes = found.groups()
    zone = int(zone_hours) * 60 + int(zone_minutes)
    epoch_hour = 24 if day == b"1969-12-31" else 0
    return int(hour) * 60 + int(minute) - epoch_hour * 60 == (-zone if sign == b"-" else zone)


@dataclass
class _Parser:
    lines: list[bytes]
    count: int  # number of real lines (the split leaves a b'' after a final newline)
    strip: int
    source: str
    strip_known: bool = True  # False: no -p given, git's guess may still set it
    unterminated: bool = False  # the patch's last line has no newline
    guessed_strip: int | None = None
    files: list[FilePatch] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def fail(self, index: int, message: str) -> InvalidInput:
        return InvalidInput(f"{self.source}:{index + 1}: {message}")

    # ---- paths

    def _decode_name(self, raw: bytes, index: int) -> tuple[bytes, bytes]:
        """Split a leading (possibly C-quoted) name off ``raw``: (name, rest)."""
        if not raw.startswith(b'"'):
            return raw, b""
        out = bytearray()
        i = 1
        while i < len(raw):
            c = raw[i]
            if c == 34:  # closing quote
                return bytes(out), raw[i + 1:]
            if c == _BACKSLASH:
                i += 1
                if i >= len(raw):
                    break
                e = raw[i]
                if 48 <= e <= 55:
                    digits = raw[i:i + 3]
                    if len(digits) != 3 or not all(48 <= d <= 55 for d in digits):
                        raise self.fail(index, f"bad octal escape in quoted path {raw.decode('utf-8', 'replace')}")
                    out.append(int(digits, 8) & 0xFF)
                    i += 3
                    continue
                if e not in _C_ESCAPES:
                    raise self.fail(index, f"bad escape in quoted path {raw.decode('utf-8', 'replace')}")
                out.append(_C_ESCAPES[e])
            else:
                out.append(c)
            i += 1
        raise self.fail(index, f"unterminated quoted path {raw.decode('utf-8', 'replace')}")

    def _stripped(self, name: bytes, strip: int) -> bytes | None:
        """``name`` without ``strip`` leading components, as git apply counts them: each '/' ends one, so
        '/abs/x' at -p1 is 'abs/x'. None when there are not enough components (or nothing is left)."""
        if strip:
            cut = -1
            for _ in range(strip):
                cut = name.find(b"/", cut + 1)
                if cut < 0:
                    return None
            name = name[cut + 1:]
        return name or None

    def _checked(self, rest: bytes, index: int) -> str:
        """Refuse a stripped name that is absolute or leaves the root; 'a//b' -> 'a/b'."""
        parts = [p for p in rest.split(b"/") if p]
        if not parts:
            raise self.fail(index, f"no file name left in '{rest.decode('utf-8', 'replace')}' (check -p)")
        try:
            check_relative_path(rest.decode("utf-8", "surrogateescape"))
        except Refused as unsafe:
            raise Refused(f"{self.source}:{index + 1}: {unsafe.message}", hint=unsafe.hint) from None
        return b"/".join(parts).decode("utf-8", "surrogateescape")

    def _strip_path(self, name: bytes, strip: int, index: int) -> str:
        rest = self._stripped(name, strip)
        if rest is None:
            shown = name.decode("utf-8", "replace")
            raise self.fail(index, f"cannot strip {strip} leading component(s) from path '{shown}' (check -p)")
        return self._checked(rest, index)

    def _header_name(self, line: bytes, index: int, traditional: bool) -> bytes | None:
        """The raw name of a ``---`` / ``+++`` line as git apply reads it; None for /dev/null.

        Quoted names are unquoted. Otherwise the name ends at a TAB (or CR, VT, FF), not at a space;
        in a traditional diff a trailing timestamp (after a TAB or spaces) is dropped first."""
        rest = line[4:]
        if rest.startswith(b'"'):
            return self._decode_name(rest, index)[0]
        if rest.startswith(b"/dev/null") and (len(rest) == 9 or rest[9:10].isspace()):
            return None
        found = _TIMESTAMP.search(rest) if traditional else None
        if found:
            return rest[:found.start()]
        end = _NAME_END.search(rest)
        return rest[:end.start()] if end else rest

    def _git_names(self, rest: bytes, index: int) -> tuple[bytes | None, bytes | None]:
        """The two names of a ``diff --git A B`` line; (None, None) when ambiguous."""
        if rest.startswith(b'"'):
            first, tail = self._decode_name(rest, index)
            if not tail.startswith(b" "):
                return None, None
            second, _ = self._decode_name(tail[1:], index)
            return first, second
        quoted_second = rest.find(b' "')
        if quoted_second != -1:
            second, _ = self._decode_name(rest[quoted_second + 1:], index)
            return rest[:quoted_second], second
        # Unquoted names may hold spaces: git writes "a/NAME b/NAME"; find the split where both agree.
        start = 0
        while True:
            space = rest.find(b" ", start)
            if space == -1:
                return None, None
            first, second = rest[:space], rest[space + 1:]
            if first.partition(b"/")[2] == second.partition(b"/")[2]:
                return first, second
            start = space + 1

    # ---- structure

    def parse(self) -> None:
        i = 0
        lines, count = self.lines, self.count
        while i < count:
            line = lines[i]
            if line.startswith(b"diff --git "):
                i = self._git_file(i)
            elif line.startswith(b"--- ") and i + 1 < count and lines[i + 1].startswith(b"+++ "):
                i = self._traditional_file(i)
            elif line.startswith(b"@@ -"):
                # A hunk after a blank or foreign line: what it belongs to is unknown (git refuses too).
                raise self.fail(i, f"patch fragment without header: {line[:60].decode('utf-8', 'replace')}")
            elif line.startswith(b"diff --cc ") or line.startswith(b"diff --combined "):
                raise self.fail(i, "combined diff of a merge commit is not supported; export the commit against one parent")
            elif line.startswith(b"GIT binary patch"):
                raise self.fail(i, "binary diff is not supported: GIT binary patch")
            elif line.startswith(b"Binary files ") and line.rstrip().endswith(b" differ"):
                # diff -ruN's note for a binary file: no content to apply; the text files still are.
                self.warnings.append(f"{self.source}:{i + 1}: skipped binary file: {line.decode('utf-8', 'replace').strip()}")
                i += 1
            else:
                i += 1  # mail headers, commit message, diffstat, 'diff -ruN', 'Index:', signature...

    def _git_file(self, start: int) -> int:
        """One ``diff --git`` file. Its header runs up to the first line that is not a header line;
        ``---`` / ``+++`` are header lines too and must agree with the names already given."""
        lines, count = self.lines, self.count
        old_name, new_name = self._git_names(lines[start][11:].rstrip(b"\r"), start)
        old_mode = new_mode = None
        extension = None  # (line index, kind) of the first new/deleted/rename/copy line
        is_new = is_delete = is_rename = is_copy = False
        rename_from = rename_to = None
        minus = plus = _ABSENT
        minus_at = plus_at = start
        i = start + 1
        while i < count:
            line = lines[i]
            if line.startswith(b"--- "):
                minus, minus_at = self._header_name(line, i, False), i
                i += 1
                continue
            if line.startswith(b"+++ "):
                plus, plus_at = self._header_name(line, i, False), i
                i += 1
                continue
            if not line.startswith(_GIT_EXTENDED_HEADERS):
                break
            value = line.split(b" ")[-1].rstrip(b"\r")
            kind = None
            if line.startswith((b"old mode ", b"deleted file mode ")):
                old_mode = self._mode(value, i)
                if line.startswith(b"deleted"):
                    is_delete, kind = True, "deleted file"
            elif line.startswith((b"new mode ", b"new file mode ")):
                new_mode = self._mode(value, i)
                if line.startswith(b"new file"):
                    is_new, kind = True, "new file"
            elif line.startswith((b"rename from ", b"rename old ", b"copy from ")):
                rename_from = self._decode_name(line.split(b" ", 2)[2].rstrip(b"\r"), i)[0]
                is_copy = line.startswith(b"copy")
                is_rename = not is_copy
                kind = "copy" if is_copy else "rename"
            elif line.startswith((b"rename to ", b"rename new ", b"copy to ")):
                rename_to = self._decode_name(line.split(b" ", 2)[2].rstrip(b"\r"), i)[0]
                kind = "copy" if line.startswith(b"copy") else "rename"
            if kind is not None:
                if extension is None:
                    extension = (i, kind)
                elif extension[1] != kind:
                    raise self.fail(i, f"inconsistent header lines {extension[0] + 1} and {i + 1} "
                                       f"({extension[1]} and {kind})")
            i += 1
        if i < count and (lines[i].startswith(b"GIT binary patch") or lines[i].startswith(b"Binary files ")):
            name = new_name or old_name or b"?"
            shown = b"/".join(name.split(b"/")[self.strip:]) or name
            raise self.fail(i, f"binary diff for {shown.decode('utf-8', 'replace')} is not supported")
        sub_strip = max(self.strip - 1, 0)
        known_old = known_new = None
        if rename_from is not None:
            known_old = self._strip_path(rename_from, sub_strip, start)
        elif old_name is not None:
            known_old = self._strip_path(old_name, self.strip, start)
        if rename_to is not None:
            known_new = self._strip_path(rename_to, sub_strip, start)
        elif new_name is not None:
            known_new = self._strip_path(new_name, self.strip, start)
        if (minus is _ABSENT) != (plus is _ABSENT):
            raise self.fail(start, "git diff header lacks filename information: a '---' line without its "
                                   "'+++' line, or the reverse")
        old_path = self._side(minus, minus_at, known_old, "old", is_new)
        new_path = self._side(plus, plus_at, known_new, "new", is_delete)
        if (old_path is None and not is_new and minus is _ABSENT) or (new_path is None and not is_delete and plus is _ABSENT):
            raise self.fail(start, "cannot tell the file names from this 'diff --git' line")
        if is_new:
            old_path = None
        if is_delete:
            new_path = None
        if old_path and new_path and old_path != new_path and not (is_rename or is_copy):
            if self.strip:
                raise self.fail(plus_at, f"inconsistent file names {old_path} and {new_path} without "
                                         f"'rename' or 'copy' lines (check -p)")
            old_path = new_path  # -p0 keeps git's a/ and b/ prefixes: two names for one file
        hunks, i = self._hunks(i, new_path or old_path or "?")
        for mode in (old_mode, new_mode):
            if mode is not None and mode & _FILE_TYPE in (_SYMLINK, _GITLINK):
                what = "symbolic link" if mode & _FILE_TYPE == _SYMLINK else "submodule (gitlink)"
                raise Refused(f"{self.source}:{start + 1}: {new_path or old_path}: a {what} "
                              f"(mode {mode:o}) is not supported; only regular files are patched")
        if not hunks and not (is_new or is_delete or is_rename or is_copy) and old_mode == new_mode:
            raise self.fail(start, f"patch with only garbage for {new_path or old_path}: no hunk and no "
                                   f"mode, rename, copy, creation or deletion")
        self.files.append(FilePatch(
            old_path=old_path, new_path=new_path, hunks=hunks, old_mode=old_mode, new_mode=new_mode,
            is_rename=is_rename and old_path is not None and new_path is not None,
            is_copy=is_copy and old_path is not None and new_path is not None, lineno=start + 1,
        ))
        return i

    def _side(self, name: object, at: int, known: str | None, side: str, is_null: bool) -> str | None:
        """One side's path from its ``---`` / ``+++`` line (``_ABSENT`` if none), checked against ``known``."""
        if name is _ABSENT:
            return known
        if name is None:
            return None
        if is_null:
            raise self.fail(at, f"expected /dev/null for the {side} side of a "
                                f"{'new' if side == 'old' else 'deleted'} file")
        path = self._strip_path(name, self.strip, at)  # type: ignore[arg-type]
        if known is not None and path != known:
            raise self.fail(at, f"inconsistent {side} filename: {path}, but the header names {known}")
        return path

    def _mode(self, value: bytes, index: int) -> int:
        try:
            return int(value, 8)
        except ValueError:
            raise self.fail(index, f"bad file mode {value.decode('utf-8', 'replace')}") from None

    def _guess(self, line: bytes, index: int) -> int:
        """git apply's guess_p_value for a traditional name line: 0 for a name without '/', else unknown."""
        name = self._header_name(line, index, True)
        return -1 if name is None or b"/" in name else 0

    def _traditional_file(self, start: int) -> int:
        lines = self.lines
        first, second = lines[start], lines[start + 1]
        if not self.strip_known:  # no -p given: git guesses from the first names that tell
            p, q = self._guess(first, start), self._guess(second, start + 1)
            p = q if p < 0 else p
            if 0 <= p == q:
                self.strip, self.strip_known, self.guessed_strip = p, True, p
        minus = self._header_name(first, start, True)
        plus = self._header_name(second, start + 1, True)
        if minus is None and plus is None:
            raise self.fail(start, "both sides of the diff are /dev/null")
        is_new, is_delete = minus is None, plus is None
        if is_new:
            old_path, new_path = None, self._strip_path(plus, self.strip, start + 1)  # type: ignore[arg-type]
        elif is_delete:
            old_path, new_path = self._strip_path(minus, self.strip, start), None
        else:
            # One name for both sides, as git picks it: the new one, unless the old one is a shorter
            # prefix of it ('x' over 'x.new'), or the new one has too few components for -p.
            a, b = self._stripped(minus, self.strip), self._stripped(plus, self.strip)  # type: ignore[arg-type]
            old_checked = None if a is None else self._checked(a, start)  # an unsafe old name is refused too
            if old_checked is not None and (b is None or (len(a) < len(b) and b.startswith(a))):  # type: ignore[arg-type]
                path = old_checked
            elif b is None:
                path = self._strip_path(minus, self.strip, start)  # raises: neither name has enough components
            else:
                path = self._checked(b, start + 1)
            old_path = new_path = path
            # diff -N marks a missing side with the epoch written in its zone; git then creates / deletes.
            if _is_epoch(first):
                old_path, is_new = None, True
            elif _is_epoch(second):
                new_path, is_delete = None, True
        hunks, end = self._hunks(start + 2, new_path or old_path or "?")
        if not hunks:
            raise self.fail(start + 2, f"no hunks after the header of {new_path or old_path}")
        if is_new and any(h.old_len for h in hunks):
            raise self.fail(start, f"new file {new_path} depends on old contents")
        if is_delete and any(h.new_len for h in hunks):
            raise self.fail(start, f"deleted file {old_path} still has contents")
        maybe_new = not (is_new or is_delete) and len(hunks) == 1 and hunks[0].old_len == 0
        self.files.append(FilePatch(old_path=old_path, new_path=new_path, hunks=hunks, lineno=start + 1,
                                    maybe_new=maybe_new))
        return end

    def _hunks(self, i: int, path: str) -> tuple[tuple[Hunk, ...], int]:
        hunks = []
        lines, count = self.lines, self.count
        while i < count and lines[i].startswith(b"@@ -"):
            hunk, i = self._hunk(i, path)
            if not hunk.ops.strip(b" "):  # git: a fragment that changes nothing is corrupt
                raise self.fail(hunk.lineno - 1, f"hunk {hunk.range_header} of {path} has no '+' or '-' line "
                                                 f"(corrupt patch)")
            hunks.append(hunk)
            if i < count:
                self._check_after_hunk(i, hunk, path)
            elif self.unterminated and lines[i - 1][:1] != b"\\":
                raise self.fail(i - 1, f"corrupt patch: the last line of hunk {hunk.range_header} of {path} "
                                       f"has no newline (truncated file?)")
        return tuple(hunks), i

    def _check_after_hunk(self, i: int, hunk: Hunk, path: str) -> None:
        line = self.lines[i]
        if not line or line.startswith(b"@@ -") or line.rstrip(b" \r") == b"--":  # '-- ': a mail signature
            return
        if line.startswith(b"--- ") and i + 1 < self.count and self.lines[i + 1].startswith(b"+++ "):
            return
        if line[0] in (_SPACE, _MINUS, _PLUS):
            raise self.fail(i, f"hunk {hunk.range_header} of {path} (line {hunk.lineno}) has more lines than its header says")

    def _hunk(self, start: int, path: str) -> tuple[Hunk, int]:
        lines, count = self.lines, self.count
        header_line = lines[start]
        m = _HUNK_HEADER.match(header_line)
        if not m:
            raise self.fail(start, f"malformed hunk header in {path}: {header_line.decode('utf-8', 'replace').strip()}")
        old_start, new_start = int(m.group(1)), int(m.group(3))
        old_len = 1 if m.group(2) is None else int(m.group(2))
        new_len = 1 if m.group(4) is None else int(m.group(4))
        header = header_line.decode("utf-8", "replace").rstrip("\r")
        body = self._plain_body(start + 1, old_len, new_len)
        if body is None:
            return self._hunk_line_by_line(start, path, header, old_start, old_len, new_start, new_len)
        body_lines, ops = body
        texts = list(map(_AFTER_FIRST_BYTE, body_lines))
        old_side = tuple(compress(texts, ops.translate(_OLD_SIDE_MASK)))
        new_side = tuple(compress(texts, ops.translate(_NEW_SIDE_MASK)))
        i = start + 1 + len(ops)
        old_eof = new_eof = False
        if i < count and lines[i][:1] == b"\\" and ops:
            old_eof, new_eof = self._no_newline(ops[-1], old_eof, new_eof)
            i += 1
        return Hunk(old_start, old_len, new_start, new_len, header, start + 1,
                    old_side, new_side, old_eof, new_eof, ops), i

    def _plain_body(self, first: int, old_len: int, new_len: int) -> tuple[list[bytes], bytes] | None:
        """Fast path: the hunk's lines and ops when they are only ' ', '-', '+' (or empty) lines and
        the counts work out exactly; None sends the hunk to the exact line-by-line parser."""
        lines = self.lines
        heads = b""
        length = max(old_len, new_len)
        while True:
            end = first + length
            if end > self.count:
                return None
            more = lines[first + len(heads):end]
            if b"" in more:
                return None
            heads += b"".join(map(_FIRST_BYTE, more))
            old_seen = length - heads.count(b"+")
            new_seen = length - heads.count(b"-")
            if old_seen >= old_len and new_seen >= new_len:
                break
            length += max(old_len - old_seen, new_len - new_seen)
        if old_seen != old_len or new_seen != new_len or heads.translate(None, b" -+"):
            return None
        return lines[first:first + length], heads

    def _hunk_line_by_line(self, start: int, path: str, header: str, old_start: int, old_len: int,
                           new_start: int, new_len: int) -> tuple[Hunk, int]:
        lines, count = self.lines, self.count
        shown = "@@ -%d,%d +%d,%d @@" % (old_start, old_len, new_start, new_len)
        old: list[bytes] = []
        new: list[bytes] = []
        ops = bytearray()
        add_old, add_new, add_op = old.append, new.append, ops.append
        old_left, new_left = old_len, new_len
        old_eof = new_eof = False
        i = start + 1
        while old_left > 0 or new_left > 0:
            if i >= count:
                raise self.fail(i - 1, f"patch ends inside hunk {shown} of {path} (line {start + 1}): truncated file?")
            line = lines[i]
            c = line[0] if line else _SPACE
            if c == _SPACE:
                text = line[1:]
                add_old(text)
                add_new(text)
                old_left -= 1
                new_left -= 1
            elif c == _MINUS:
                add_old(line[1:])
                old_left -= 1
            elif c == _PLUS:
                add_new(line[1:])
                new_left -= 1
            elif c == _BACKSLASH and ops:
                old_eof, new_eof = self._no_newline(ops[-1], old_eof, new_eof)
                i += 1
                continue
            elif line.startswith((b"diff ", b"@@ ", b"Index: ")):
                raise self.fail(i, f"hunk {shown} of {path} (line {start + 1}) has fewer lines than its header says")
            else:
                raise self.fail(i, f"unexpected line in hunk {shown} of {path}: {line[:60].decode('utf-8', 'replace')!r}")
            if old_left < 0 or new_left < 0 or (old_eof and c != _PLUS) or (new_eof and c != _MINUS):
                if old_left < 0 or new_left < 0:
                    raise self.fail(i, f"hunk {shown} of {path} (line {start + 1}) has more lines than its header says")
                raise self.fail(i, f"line after '\\ No newline at end of file' in hunk {shown} of {path}")
            add_op(c)
            i += 1
        if i < count and lines[i][:1] == b"\\" and ops:
            old_eof, new_eof = self._no_newline(ops[-1], old_eof, new_eof)
            i += 1
        hunk = Hunk(old_start, old_len, new_start, new_len, header, start + 1,
                    tuple(old), tuple(new), old_eof, new_eof, bytes(ops))
        return hunk, i

    @staticmethod
    def _no_newline(op: int, old_eof: bool, new_eof: bool) -> tuple[bool, bool]:
        if op == _SPACE:
            return True, True
        if op == _MINUS:
            return True, new_eof
        return old_eof, True


def parse_patch(data: bytes, *, strip: int | None = 1, source: str = "<patch>") -> Patch:
    """Parse a diff. Raises ``InvalidInput`` naming ``source`` and the 1-based line.

    ``strip=None``: no -p was given; -p1, unless git's guess for traditional diffs picks -p0
    (names without '/', as from ``diff -u foo.c foo.c.new``)."""
    lines = data.split(b"\n")
    count = len(lines) - 1 if lines[-1] == b"" else len(lines)
    parser = _Parser(lines, count, 1 if strip is None else strip, source, strip_known=strip is not None,
                     unterminated=lines[-1] != b"")
    parser.parse()
    if not parser.files:
        skipped = f" ({len(parser.warnings)} binary file(s) skipped)" if parser.warnings else ""
        raise InvalidInput(f"{source}:1: no file changes found in {count} line(s){skipped}; is this a diff?")
    return Patch(tuple(parser.files), source, tuple(parser.warnings), parser.guessed_strip)


# --------------------------------------------------------------------------- transforms


def _reverse_hunk(h: Hunk) -> Hunk:
    ranges = _HEADER_RANGES.match(h.header)
    header = f"@@ -{ranges[2]} +{ranges[1]} @@{h.header[ranges.end():]}" if ranges else h.header
    return Hunk(h.new_start, h.new_len, h.old_start, h.old_len, header, h.lineno,
                h.new_side, h.old_side, h.new_eof, h.old_eof, h.ops.translate(_SWAP_OPS))


def _reverse_file(f: FilePatch) -> FilePatch:
    return replace(
        f, old_path=f.new_path, new_path=f.old_path, old_mode=f.new_mode, new_mode=f.old_mode,
        hunks=tuple(_reverse_hunk(h) for h in f.hunks),
        is_copy=f.is_copy, copy_reversed=f.is_copy and not f.copy_reversed, maybe_new=False,
    )


def reverse_patch(patch: Patch) -> Patch:
    """The patch that undoes ``patch``: sides swapped, files in reverse order (so series unwind)."""
    return Patch(tuple(_reverse_file(f) for f in reversed(patch.files)), patch.source)


def _matches(path: str | None, globs: Sequence[str]) -> bool:
    if path is None:
        return False
    for glob in globs:
        if fnmatch.fnmatchcase(path, glob):
            return True
        if glob.startswith("**/") and fnmatch.fnmatchcase(path, glob[3:]):
            return True
    return False


def exclude_paths(patch: Patch, globs: Sequence[str]) -> Patch:
    """Drop the files whose (stripped) old or new path matches a glob (``*`` and ``**`` cross '/')."""
    kept = tuple(f for f in patch.files if not (_matches(f.old_path, globs) or _matches(f.new_path, globs)))
    return Patch(kept, patch.source)


def _render_mode(mode: int | None) -> bytes:
    return b"%o" % mode if mode is not None else b""


def normalised_diff_bytes(data: bytes) -> bytes:
    """A canonical rendering of a diff for pinning it by hash (like Nix ``fetchpatch``).

    Keeps what changes files (paths, modes, renames, hunks) and drops what varies between tools and
    git versions: ``index`` lines, similarity scores, hunk section headings, mail headers, commit
    messages and the version trailer. Paths are kept unstripped.
    """
    patch = parse_patch(data, strip=0)
    out: list[bytes] = []
    for f in patch.files:
        old = f.old_path.encode("utf-8", "surrogateescape") if f.old_path is not None else None
        new = f.new_path.encode("utf-8", "surrogateescape") if f.new_path is not None else None
        out.append(b"diff --git %s %s" % (old or new, new or old))
        if f.old_path is None:
            out.append(b"new file mode " + _render_mode(f.new_mode))
        elif f.new_path is None:
            out.append(b"deleted file mode " + _render_mode(f.old_mode))
        elif f.old_mode != f.new_mode:
            out.append(b"old mode " + _render_mode(f.old_mode))
            out.append(b"new mode " + _render_mode(f.new_mode))
        if f.is_rename or f.is_copy:
            word = b"copy" if f.is_copy else b"rename"
            out.append(b"%s from %s" % (word, old))
            out.append(b"%s to %s" % (word, new))
        if f.hunks:
            out.append(b"--- " + (old if old is not None else b"/dev/null"))
            out.append(b"+++ " + (new if new is not None else b"/dev/null"))
        for h in f.hunks:
            out.append(h.range_header.encode())
            for line in h.lines:
                text = line.text
                if text.endswith(b"\n"):
                    out.append(line.op.encode() + text[:-1])
                else:
                    out.append(line.op.encode() + text)
                    out.append(b"\\ No newline at end of file")
    return b"\n".join(out) + b"\n"


def file_boundary_near_middle(data: bytes, *, min_bytes: int) -> int | None:
    """Where to cut a large diff into two halves that parse on their own: the start of the first
    ``diff `` line past the middle. Exact for any input, because the parser never consumes a line
    starting with ``diff `` inside a file's headers or hunks: it always restarts there. None when the
    diff is small, or does not start with ``diff `` (mail headers of a format-patch series,
    ``git show``)."""
    if len(data) < min_bytes or not data.startswith(b"diff "):
        return None
    cut = data.find(b"\ndiff ", len(data) // 2)
    return None if cut < 0 else cut + 1
