"""The prefilter: which lines of a block of log bytes hold one of a few literal needles. Pure, no I/O.

Gigabytes of a log are mostly lines no signature, error rule or fact reader can match; only the lines
that hold a needle (``engine.needles_for``) are decoded and looked at. Finding them is the hot loop:

- ``ahocorasick-rs`` (SIMD Aho-Corasick) when installed. Its Teddy searcher holds at most 64 needles
  and slows down as a set grows (measured on 1 GiB of INFO lines: 0.11 s at 16 needles, 0.6 s at 32,
  1 s at 64, 2 s at 65 without Teddy), so the needles are split into automata of at most ``GROUP``,
  the short ones together (Teddy fingerprints a set on the length of its shortest needle, up to 4
  bytes), each run over the block in turn;
- else ``bytes.find`` per needle (``python=True`` forces it): the same lines, slower.

``stream`` takes blocks cut anywhere (as read from a file), keeps the unfinished last line for the
next block, and searches every block in place (a memoryview, no copy). A block's newlines are counted
between the candidate lines only, so a line number costs no second pass.

``covers(pattern, needles)`` is the proof the prefilter rests on: every match of a regular
expression contains one of the needles. ``engine.needles_for`` uses it to skip signatures an existing
needle already covers, and the tests use it on every pattern the engine reads a line with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

try:  # the regex parser of the stdlib, to prove what every match of a pattern contains
    from re import _parser as _sre_parse  # type: ignore[attr-defined]  # python >= 3.11
except ImportError:  # pragma: no cover - python 3.10
    import sre_parse as _sre_parse  # type: ignore[no-redef]

GROUP = 16  # needles per Aho-Corasick automaton (Teddy stays at ~9 GB/s up to 16 here, measured)
EXPAND = 64  # literal strings one stretch of a pattern may stand for ('[-_]ascend==', 's?') in ``covers``
REPEATS = ("MAX_REPEAT", "MIN_REPEAT")
CLASS_LIMIT = 8  # characters of a character class ``covers`` expands ('[-_]' yes, '\w' / '[A-Z]' no)


# The most of one line ever held: its first LINE_HEAD bytes (MATCH_LIMIT characters of UTF-8 at most take
# four bytes each: doctor.normalise.MATCH_LIMIT * 4). The rest of a longer line is counted, never kept: a
# 1.2 GB line of a 5 MB .gz, or /dev/zero through a pipe, costs LINE_HEAD, not the line.
LINE_HEAD = 8192 * 4


@dataclass(frozen=True)
class Prefiltered:
    """The lines of a chunk worth looking at: (0-based index of the line in the chunk, its first
    ``LINE_HEAD`` bytes); ``cut``: (index, bytes of that line beyond them, counted, not kept)."""

    lines: tuple[tuple[int, bytes], ...]
    count: int  # lines in the chunk (a last line without a newline counts)
    cut: tuple[tuple[int, int], ...] = ()


def groups(needles: Sequence[bytes], size: int = GROUP) -> tuple[tuple[bytes, ...], ...]:
    """``needles`` in as few sets of at most ``size`` as possible, of even sizes, shortest together."""
    ordered = sorted(needles, key=lambda n: (len(n), n))
    count = -(-len(ordered) // size) if ordered else 0
    return tuple(tuple(ordered[len(ordered) * i // count:len(ordered) * (i + 1) // count]) for i in range(count))


def _automata(parts: Sequence[Sequence[bytes]]) -> tuple[Callable[[Any], list], ...] | None:
    try:
        import ahocorasick_rs
    except ImportError:
        return None
    kind = ahocorasick_rs.MatchKind.LeftmostFirst  # leftmost-first: the kind Teddy runs with
    return tuple(ahocorasick_rs.BytesAhoCorasick(list(part), matchkind=kind).find_matches_as_indexes for part in parts)


class Prefilter:
    """Finds the lines of a chunk that hold one of ``needles``: ``ahocorasick-rs`` automata of at most
    ``GROUP`` needles each when installed and ``python`` is False, else ``bytes.find`` per needle.
    Pure; the same lines either way."""

    def __init__(self, needles: Sequence[bytes], *, python: bool = False):
        self.needles = tuple(needles)
        self._find_alls = None if python or not self.needles else _automata(groups(self.needles))
        self.groups = groups(self.needles) if self._find_alls is not None else ()  # the automata's needles

    @property
    def kind(self) -> str:
        return "aho-corasick" if self._find_alls is not None else "python"

    def starts(self, chunk: bytes, start: int = 0, end: int | None = None) -> list[int]:
        """Where the lines of ``chunk[start:end]`` (whole lines) that hold a needle begin, in order."""
        end = len(chunk) if end is None else end
        find, rfind = chunk.find, chunk.rfind
        seen: set[int] = set()
        if self._find_alls is not None:
            view = memoryview(chunk)[start:end] if start or end != len(chunk) else chunk
            for find_all in self._find_alls:
                line_end = -1
                for _, at, _ in find_all(view):
                    at += start
                    if at > line_end:  # a new line (matches come in order; one per line is enough)
                        seen.add(rfind(b"\n", start, at) + 1 or start)
                        line_end = find(b"\n", at, end)
                        if line_end == -1:
                            break
        else:
            for needle in self.needles:
                at = find(needle, start, end)
                while at != -1:
                    seen.add(rfind(b"\n", start, at) + 1 or start)
                    line_end = find(b"\n", at, end)
                    if line_end == -1:
                        break
                    at = find(needle, line_end + 1, end)
        return sorted(seen)

    def __call__(self, chunk: bytes, start: int = 0, end: int | None = None) -> Prefiltered:
        """The candidate lines of ``chunk[start:end]`` (whole lines; a last one without a newline
        counts), indexed from ``start``."""
        end = len(chunk) if end is None else end
        find, count = chunk.find, chunk.count
        lines, counted, index, cut = [], start, 0, []
        for at in self.starts(chunk, start, end):
            index += count(b"\n", counted, at)
            counted = at
            line_end = find(b"\n", at, end)
            stop = end if line_end == -1 else line_end
            if stop - at > LINE_HEAD:  # kept: its head; the rest counted
                cut.append((index, stop - at - LINE_HEAD))
                stop = at + LINE_HEAD
            line = chunk[at:stop]
            lines.append((index, line if type(line) is bytes else bytes(line)))
        total = index + count(b"\n", counted, end) + (0 if end == start or chunk[end - 1] == 10 else 1)
        return Prefiltered(tuple(lines), total, tuple(cut))

    def stream(self, chunks: Iterable[bytes | Prefiltered]) -> Iterator[Prefiltered]:
        """``self`` over a stream of blocks cut anywhere: a line that runs over a block's end is
        searched once it is whole (a block that ends in a newline ends its line). Already
        prefiltered batches (``grep -F``) pass through."""
        carry = _Carry()  # the head of the line the last block left unfinished, and how much more it had
        for chunk in chunks:
            if isinstance(chunk, Prefiltered):
                if carry:
                    yield carry.searched(self)
                yield chunk
                continue
            first = chunk.find(b"\n")
            if first == -1:
                if chunk:
                    carry.add(chunk, 0, len(chunk))
                continue
            start = 0
            if carry:
                carry.add(chunk, 0, first)
                yield carry.searched(self)
                start = first + 1
            last = chunk.rfind(b"\n") + 1
            if start < last:
                yield self(chunk, start, last)
            if last < len(chunk):
                carry.add(chunk, last, len(chunk))
        if carry:
            yield carry.searched(self)


class _Carry:
    """A line running over blocks: at most its first ``LINE_HEAD`` bytes kept, the rest counted."""

    __slots__ = ("pieces", "kept", "beyond", "pending")

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.kept = self.beyond = 0
        self.pending = False

    def __bool__(self) -> bool:
        return self.pending

    def add(self, chunk, start: int, stop: int) -> None:
        self.pending = True
        room = max(0, LINE_HEAD - self.kept)
        take = min(room, stop - start)
        if take:
            self.pieces.append(bytes(chunk[start:start + take]))
            self.kept += take
        self.beyond += stop - start - take

    def searched(self, prefilter: "Prefilter") -> Prefiltered:
        """The carried line as one Prefiltered (one line: a last line without a newline counts), reset."""
        found = prefilter(b"".join(self.pieces))
        if self.beyond and found.lines:
            found = Prefiltered(found.lines, found.count, ((0, self.beyond),))
        found = found if found.count else Prefiltered((), 1)  # an empty piece is still one line
        self.pieces, self.kept, self.beyond, self.pending = [], 0, 0, False
        return found


def covers(pattern: str, needles: Iterable[str]) -> bool:
    """True when every match of ``pattern`` (Python / RE2 syntax) contains one of ``needles``: proved on
    the parsed pattern, never guessed (False when it cannot be shown: a case-insensitive part, a
    stretch of the pattern that is not literal enough, an alternative without a needle).

    A stretch of literal text counts, also where a small class or an optional part makes it several
    strings (``vllm[-_]ascend==`` stands for two, each must hold a needle); zero-width assertions
    (``^``, ``\\b``) do not break it; a group counts when it is covered, an alternation when every
    alternative is, a repeat that runs at least once when its body is."""
    try:
        parsed = _sre_parse.parse(pattern)
    except (re.error, ValueError, OverflowError):
        return False
    if parsed.state.flags & re.IGNORECASE:
        return False
    return _covered(list(parsed), tuple(needles))


def _holds(strings: set[str] | None, needles: tuple[str, ...]) -> bool:
    return bool(strings) and strings != {""} and all(any(n in s for n in needles) for s in strings)


def _covered(items: list, needles: tuple[str, ...]) -> bool:
    run: set[str] = {""}  # the strings the current stretch of the pattern may be, one of which every match holds
    for op, arg in items:
        strings = _strings(op, arg)
        if strings is not None:
            if len(run) * len(strings) <= EXPAND:
                run = {a + b for a in run for b in strings}
                continue
            if _holds(run, needles):
                return True
            run = strings
            continue
        name = str(op)
        body = _sequence(list(arg[2])) if name in REPEATS and arg[0] >= 1 else None  # 'x+': at least one x
        if body is not None and len(run) * len(body) <= EXPAND:
            run = {a + b for a in run for b in body}  # its first repetition ends the stretch
        if _holds(run, needles) or _item_covered(name, arg, needles):
            return True
        run = body if body is not None and len(body) <= EXPAND else {""}  # its last one starts the next
    return _holds(run, needles)


def _item_covered(name: str, arg: Any, needles: tuple[str, ...]) -> bool:
    if name == "SUBPATTERN":
        return not arg[1] & re.IGNORECASE and _covered(list(arg[-1]), needles)
    if name == "BRANCH":
        return all(_covered(list(alternative), needles) for alternative in arg[1])
    if name in REPEATS:
        return arg[0] >= 1 and _covered(list(arg[2]), needles)
    return False


def _strings(op: Any, arg: Any) -> set[str] | None:
    """The few strings one parsed item matches, or None (too many, unbounded, or not literal)."""
    name = str(op)
    if name == "LITERAL":
        return {chr(arg)}
    if name in ("AT", "ASSERT", "ASSERT_NOT"):  # zero-width: what comes before and after is adjacent
        return {""}
    if name == "IN":
        chars: set[str] = set()
        for kind, value in arg:
            if str(kind) == "LITERAL":
                chars.add(chr(value))
            elif str(kind) == "RANGE" and value[1] - value[0] < CLASS_LIMIT:
                chars.update(chr(c) for c in range(value[0], value[1] + 1))
            else:  # NEGATE, CATEGORY (\d, \w, \s), a wide range
                return None
        return chars if 0 < len(chars) <= CLASS_LIMIT else None
    if name == "SUBPATTERN":
        return None if arg[1] & re.IGNORECASE else _sequence(list(arg[-1]))
    if name == "BRANCH":
        found: set[str] = set()
        for alternative in arg[1]:
            strings = _sequence(list(alternative))
            if strings is None:
                return None
            found |= strings
        return found if len(found) <= EXPAND else None
    if name in REPEATS:
        low, high, body = arg
        strings = _sequence(list(body))
        if strings is None or high > 2:
            return None
        found, power = set(), {""}
        for times in range(high + 1):
            if times >= low:
                found |= power
            power = {a + b for a in power for b in strings}
            if len(power) > EXPAND:
                return None
        return found
    return None


def _sequence(items: list) -> set[str] | None:
    strings: set[str] = {""}
    for op, arg in items:
        part = _strings(op, arg)
        if part is None or len(strings) * len(part) > EXPAND:
            return None
        strings = {a + b for a in strings for b in part}
    return strings
