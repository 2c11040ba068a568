"""Parse the diffs people actually have into core.diff's frozen dataclasses. Pure: bytes in, data out.

The parser is one object in three files: this one walks files and headers (git and traditional),
core/names.py decodes and strips names, core/hunks.py reads hunk bodies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm_hotfix_guard.core.patchmodel import ABSENT, EPOCH, FILE_TYPE, GIT_EXTENDED_HEADERS, GITLINK, SYMLINK, FilePatch, Patch
from vllm_hotfix_guard.core.hunks import Hunks
from vllm_hotfix_guard.core.names import Names
from vllm_hotfix_guard.errors import InvalidInput, Refused
from vllm_hotfix_guard.output import quote_path


def _is_epoch(line: bytes) -> bool:
    """git apply's has_epoch_timestamp on a whole '---' / '+++' line."""
    tab = line.rfind(b"\t")
    found = EPOCH.match(line, tab + 1) if tab >= 0 else None
    if not found:
        return False
    day, hour, minute, sign, zone_hours, zone_minutes = found.groups()
    zone = int(zone_hours) * 60 + int(zone_minutes)
    epoch_hour = 24 if day == b"1969-12-31" else 0
    return int(hour) * 60 + int(minute) - epoch_hour * 60 == (-zone if sign == b"-" else zone)


@dataclass
class _Parser(Names, Hunks):
    """The state of one parse: the lines, the -p in force and the files so far."""

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

    def _git_header(self, start: int) -> tuple:
        """The extended header lines of the ``diff --git`` file at ``start`` (modes, new / deleted, rename /
        copy, every ``---`` / ``+++`` name), up to the first line that is not one: (index of that line, the
        modes, the four kinds, the rename names, the last ---/+++ names and lines, the earlier ones)."""
        lines, count = self.lines, self.count
        old_mode = new_mode = None
        extension = None  # (line index, kind) of the first new/deleted/rename/copy line
        is_new = is_delete = is_rename = is_copy = False
        rename_from = rename_to = None
        minus = plus = ABSENT
        minus_at = plus_at = start
        repeated: list[tuple[str, object, int]] = []  # every earlier ---/+++ line: git checks each one
        i = start + 1
        while i < count:
            line = lines[i]
            if line.startswith(b"--- "):
                if minus is not ABSENT:
                    repeated.append(("old", minus, minus_at))
                minus, minus_at = self._header_name(line, i, False), i
                i += 1
                continue
            if line.startswith(b"+++ "):
                if plus is not ABSENT:
                    repeated.append(("new", plus, plus_at))
                plus, plus_at = self._header_name(line, i, False), i
                i += 1
                continue
            if not line.startswith(GIT_EXTENDED_HEADERS):
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
        return (i, old_mode, new_mode, is_new, is_delete, is_rename, is_copy, rename_from, rename_to, minus, minus_at,
                plus, plus_at, repeated)

    def _git_file(self, start: int) -> int:
        """One ``diff --git`` file. Its header runs up to the first line that is not a header line;
        ``---`` / ``+++`` are header lines too and must agree with the names already given."""
        lines, count = self.lines, self.count
        old_name, new_name = self._git_names(lines[start][11:].rstrip(b"\r"), start)
        (i, old_mode, new_mode, is_new, is_delete, is_rename, is_copy, rename_from, rename_to, minus, minus_at, plus,
         plus_at, repeated) = self._git_header(start)
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
        if minus is ABSENT and plus is ABSENT and rename_from is None and rename_to is None and (
                known_old is None or known_old != known_new):
            # Only the 'diff --git' line names the file (a mode change, an empty file created or
            # deleted): git takes a name from it only when both sides name the same path after -p
            # (its def_name); at -p0, 'a/f b/f' are two names.
            s = "" if self.strip == 1 else "s"
            raise self.fail(start, f"git diff header lacks filename information when removing {self.strip} "
                                   f"leading pathname component{s}")
        if (minus is ABSENT) != (plus is ABSENT):
            raise self.fail(start, "git diff header lacks filename information: a '---' line without its "
                                   "'+++' line, or the reverse")
        old_path = self._side(minus, minus_at, known_old, "old", is_new)
        new_path = self._side(plus, plus_at, known_new, "new", is_delete)
        for side, name, at in repeated:
            final, final_at = (old_path, minus_at) if side == "old" else (new_path, plus_at)
            if self._side(name, at, known_old if side == "old" else known_new, side,
                          is_new if side == "old" else is_delete) != final:
                raise self.fail(final_at, f"inconsistent {side} filename: line {at + 1} and line {final_at + 1} differ")
        if (old_path is None and not is_new and minus is ABSENT) or (new_path is None and not is_delete and plus is ABSENT):
            raise self.fail(start, "cannot tell the file names from this 'diff --git' line")
        if old_path is None and new_path is None:  # '--- /dev/null' and '+++ /dev/null': no file at all (git's words)
            raise self.fail(start, "patch with only garbage: both sides of this 'diff --git' are /dev/null")
        if is_new:
            old_path = None
        if is_delete:
            new_path = None
        if old_path and new_path and old_path != new_path and not (is_rename or is_copy):
            if self.strip:
                raise self.fail(plus_at, f"inconsistent file names {quote_path(old_path)} and {quote_path(new_path)} without "
                                         f"'rename' or 'copy' lines (check -p)")
            old_path = new_path  # -p0 keeps git's a/ and b/ prefixes: two names for one file
        hunks, i = self._hunks(i, new_path or old_path or "?")
        for mode in (old_mode, new_mode):
            if mode is not None and mode & FILE_TYPE in (SYMLINK, GITLINK):
                what = "symbolic link" if mode & FILE_TYPE == SYMLINK else "submodule (gitlink)"
                raise Refused(f"{self.source}:{start + 1}: {quote_path(new_path or old_path)}: a {what} "
                              f"(mode {mode:o}) is not supported; only regular files are patched")
        if not hunks and not (is_new or is_delete or is_rename or is_copy) and old_mode == new_mode:
            raise self.fail(start, f"patch with only garbage for {quote_path(new_path or old_path)}: no hunk and no "
                                   f"mode, rename, copy, creation or deletion")
        self.files.append(FilePatch(
            old_path=old_path, new_path=new_path, hunks=hunks, old_mode=old_mode, new_mode=new_mode,
            is_rename=is_rename and old_path is not None and new_path is not None,
            is_copy=is_copy and old_path is not None and new_path is not None, lineno=start + 1,
        ))
        return i

    def _side(self, name: object, at: int, known: str | None, side: str, is_null: bool) -> str | None:
        """One side's path from its ``---`` / ``+++`` line (``ABSENT`` if none), checked against ``known``."""
        if name is ABSENT:
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
            raise self.fail(start + 2, f"no hunks after the header of {quote_path(new_path or old_path)}")
        if is_new and any(h.old_len for h in hunks):
            raise self.fail(start, f"new file {quote_path(new_path)} depends on old contents")
        if is_delete and any(h.new_len for h in hunks):
            raise self.fail(start, f"deleted file {quote_path(old_path)} still has contents")
        maybe_new = not (is_new or is_delete) and len(hunks) == 1 and hunks[0].old_len == 0
        self.files.append(FilePatch(old_path=old_path, new_path=new_path, hunks=hunks, lineno=start + 1,
                                    maybe_new=maybe_new))
        return end


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


