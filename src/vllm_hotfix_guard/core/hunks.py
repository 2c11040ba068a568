"""The hunks side of the parser: '@@' headers, hunk bodies (a fast path for plain hunks, line by line
otherwise) and what may follow a hunk. A mixin of core.parse._Parser."""

from __future__ import annotations

from itertools import compress

from vllm_hotfix_guard.core.patchmodel import (
    AFTER_FIRST_BYTE, BACKSLASH, FIRST_BYTE, HUNK_HEADER, MINUS, NEW_SIDE_MASK, OLD_SIDE_MASK, PLUS, SPACE,
    Hunk,
)
from vllm_hotfix_guard.output import quote_path


class Hunks:
    def _hunks(self, i: int, path: str) -> tuple[tuple[Hunk, ...], int]:
        path = quote_path(path)  # the name is only ever used in messages below
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
        if line[0] in (SPACE, MINUS, PLUS):
            raise self.fail(i, f"hunk {hunk.range_header} of {path} (line {hunk.lineno}) has more lines than its header says")

    def _hunk(self, start: int, path: str) -> tuple[Hunk, int]:
        lines, count = self.lines, self.count
        header_line = lines[start]
        m = HUNK_HEADER.match(header_line)
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
        texts = list(map(AFTER_FIRST_BYTE, body_lines))
        old_side = tuple(compress(texts, ops.translate(OLD_SIDE_MASK)))
        new_side = tuple(compress(texts, ops.translate(NEW_SIDE_MASK)))
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
            heads += b"".join(map(FIRST_BYTE, more))
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
            c = line[0] if line else SPACE
            if c == SPACE:
                text = line[1:]
                add_old(text)
                add_new(text)
                old_left -= 1
                new_left -= 1
            elif c == MINUS:
                add_old(line[1:])
                old_left -= 1
            elif c == PLUS:
                add_new(line[1:])
                new_left -= 1
            elif c == BACKSLASH and ops:
                old_eof, new_eof = self._no_newline(ops[-1], old_eof, new_eof)
                i += 1
                continue
            elif line.startswith((b"diff ", b"@@ ", b"Index: ")):
                raise self.fail(i, f"hunk {shown} of {path} (line {start + 1}) has fewer lines than its header says")
            else:
                raise self.fail(i, f"unexpected line in hunk {shown} of {path}: {line[:60].decode('utf-8', 'replace')!r}")
            if old_left < 0 or new_left < 0 or (old_eof and c != PLUS) or (new_eof and c != MINUS):
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
        if op == SPACE:
            return True, True
        if op == MINUS:
            return True, new_eof
        return old_eof, True

