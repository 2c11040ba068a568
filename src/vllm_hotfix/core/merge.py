"""Three-way merge of one file, in two passes of a diff3 engine (pure: the engine is passed in).

The engine is ``git merge-file --diff3`` (``install.git.merge_file``): the same xdiff merge as
``git merge``. Pass 1 merges by lines. A block that conflicts there is merged again by *words*:
each of its three sides is cut into tokens (a newline, a run of blanks, a word, one other
character), one token per line, and handed to the same engine. Line merges refuse two changes on
adjacent lines, which is what a release that reflowed a statement or moved the line next to the
fix looks like (vLLM 0.26: the reset moved above the divisor line; 0.27: the divisor moved into
``.fill_(...)``); by words those are separate changes and merge cleanly. Whole lines the patch
adds at the edges of such a block stay whole lines beside it (``edge_insertions``): only the lines
it changes are merged by words. A block that still conflicts by words is a real conflict and is
reported with its three sides. (The caller also checks that a merged .py file still compiles.)

Markers are parsed safely: the marker size is longer than any run of ``<``, ``=``, ``|`` or ``>``
that starts a line of any input, so no input line can be mistaken for one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Callable

# (ours, base, theirs, marker_size) -> (number of conflicts, the merged text in diff3 style)
MergeFile = Callable[[bytes, bytes, bytes, int], "tuple[int, bytes]"]

LABELS = (b"ours", b"base", b"theirs")
_TOKEN = re.compile(rb"\n|[ \t]+|\w+|[^\w\s]|\s")
_MARKER_RUN = re.compile(rb"^([<=|>])\1*", re.MULTILINE)


@dataclass(frozen=True, slots=True, kw_only=True)
class Conflict:
    """A block both sides changed differently: the new release's lines, the base's, and the patched base's."""

    ours: bytes    # the new release (where the patch is being ported to)
    base: bytes    # the release the patch applies to, pristine
    theirs: bytes  # that release with the patch
    ours_line: int | None  # 1-based line of the block in ``ours`` (None when ours deleted it)
    base_line: int | None  # 1-based line of the block in ``base``


@dataclass(frozen=True, slots=True, kw_only=True)
class Merged:
    """The result: the merged bytes (None when a conflict is left), the conflicts, and how many blocks
    only merged by words."""

    data: bytes | None
    conflicts: tuple[Conflict, ...] = ()
    by_words: int = 0


def marker_size(*texts: bytes) -> int:
    longest = max((len(m.group(0)) for t in texts for m in _MARKER_RUN.finditer(t)), default=0)
    return max(7, longest + 1)


def _markers(size: int) -> tuple[bytes, bytes, bytes, bytes]:
    return (b"<" * size + b" " + LABELS[0], b"|" * size + b" " + LABELS[1], b"=" * size,
            b">" * size + b" " + LABELS[2])


def parse_diff3(output: bytes, size: int) -> list[bytes | tuple[bytes, bytes, bytes]]:
    """The merged text as clean chunks (bytes) and conflict blocks (ours, base, theirs)."""
    start, mid_base, mid, end = _markers(size)
    out: list[bytes | tuple[bytes, bytes, bytes]] = []
    clean: list[bytes] = []
    sides: list[list[bytes]] | None = None
    for line in output.splitlines(keepends=True):
        bare = line.rstrip(b"\r\n")
        if sides is None:
            if bare == start:
                if clean:
                    out.append(b"".join(clean))
                    clean = []
                sides = [[]]
            else:
                clean.append(line)
            continue
        if bare == mid_base and len(sides) == 1 or bare == mid and len(sides) == 2:
            sides.append([])
        elif bare == end and len(sides) == 3:
            out.append((b"".join(sides[0]), b"".join(sides[1]), b"".join(sides[2])))
            sides = None
        else:
            sides[-1].append(line)
    if sides is not None:
        raise ValueError("unterminated conflict block in the merge output")
    if clean:
        out.append(b"".join(clean))
    return out


def _encode(text: bytes) -> bytes:
    escaped = (t.replace(b"\\", b"\\\\").replace(b"\n", b"\\n").replace(b"\r", b"\\r") for t in _TOKEN.findall(text))
    return b"".join(t + b"\n" for t in escaped)


_UNESCAPE = {b"n": b"\n", b"r": b"\r", b"\\": b"\\"}


def _decode(lines: bytes) -> bytes:
    return re.sub(rb"\\([nr\\])", lambda m: _UNESCAPE[m.group(1)], lines.replace(b"\n", b""))


def _window(base: list[bytes], theirs: list[bytes]) -> int:
    """Where the ``len(base)`` lines of ``theirs`` most like ``base`` start (a replacement that also added lines)."""
    n = len(base)
    scores = [sum(SequenceMatcher(None, b, t, autojunk=False).ratio() for b, t in zip(base, theirs[w:w + n]))
              for w in range(len(theirs) - n + 1)]
    return scores.index(max(scores))


def edge_insertions(base: bytes, theirs: bytes) -> tuple[int, int]:
    """(s, e): ``theirs`` lines [:s] and [e:] are whole lines the patch inserted at the block's edges.

    A patch that changes the block's last line and adds a method after it is one block for the line
    merge; only the changed line belongs to the word merge, the added lines stay whole lines beside
    the release's version of the block (else a word merge may put them inside a reflowed statement).
    """
    b, t = base.splitlines(keepends=True), theirs.splitlines(keepends=True)
    if not b:
        return 0, len(t)
    ops = SequenceMatcher(None, b, t, autojunk=False).get_opcodes()
    s, e = 0, len(t)
    for tag, i1, i2, j1, j2 in ops:
        if tag == "insert":
            s = j2
            continue
        if tag == "replace" and j2 - j1 > i2 - i1:
            s = j1 + _window(b[i1:i2], t[j1:j2])
        break
    for tag, i1, i2, j1, j2 in reversed(ops):
        if tag == "insert":
            e = j1
            continue
        if tag == "replace" and j2 - j1 > i2 - i1:
            e = j1 + _window(b[i1:i2], t[j1:j2]) + (i2 - i1)
        break
    return s, max(s, e)


def _by_words(ours: bytes, base: bytes, theirs: bytes, merge_file: MergeFile) -> bytes | None:
    lines = theirs.splitlines(keepends=True)
    s, e = edge_insertions(base, theirs)
    sides = [_encode(t) for t in (ours, base, b"".join(lines[s:e]))]
    count, merged = merge_file(*sides, marker_size(*sides))
    return None if count else b"".join(lines[:s]) + _decode(merged) + b"".join(lines[e:])


def _line_of(text: bytes, block: bytes, after: int) -> tuple[int | None, int]:
    """1-based line where ``block`` starts in ``text`` at or after byte ``after`` (at a line start)."""
    if not block:
        return None, after
    at = after
    while True:
        at = text.find(block, at)
        if at < 0:
            return None, after
        if at == 0 or text[at - 1:at] == b"\n":
            return text.count(b"\n", 0, at) + 1, at + len(block)
        at += 1


def three_way(ours: bytes, base: bytes, theirs: bytes, merge_file: MergeFile) -> Merged:
    """Merge base->theirs (the patch) into ours (the new release): by lines, then conflicting blocks by words."""
    size = marker_size(ours, base, theirs)
    count, output = merge_file(ours, base, theirs, size)
    if not count:
        return Merged(data=output)
    pieces: list[bytes] = []
    conflicts: list[Conflict] = []
    by_words = 0
    ours_at = base_at = 0
    for chunk in parse_diff3(output, size):
        if isinstance(chunk, bytes):
            pieces.append(chunk)
            continue
        mine, common, patched = chunk
        ours_line, ours_at = _line_of(ours, mine, ours_at)
        base_line, base_at = _line_of(base, common, base_at)
        resolved = _by_words(mine, common, patched, merge_file)
        if resolved is None:
            conflicts.append(Conflict(ours=mine, base=common, theirs=patched, ours_line=ours_line,
                                      base_line=base_line))
        else:
            by_words += 1
            pieces.append(resolved)
    if conflicts:
        return Merged(data=None, conflicts=tuple(conflicts), by_words=by_words)
    return Merged(data=b"".join(pieces), by_words=by_words)
