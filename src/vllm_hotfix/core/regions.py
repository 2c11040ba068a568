"""Which hotfixes of one file's series touch the same lines (pure).

Each step of a file's series is a set of hunks placed on the bytes the steps below it left. A step's
hunk *overlaps* an earlier step when its lines (context included) meet the lines the earlier step
changed, or when the lines it changes meet the earlier step's hunk (context included): then the two
changes do not commute -- the upper one was written against the lower one's text, or removing the
lower one would have to rewrite what the upper one changed. The series refuses such a pair unless a
manifest orders them (``after``).

Regions are half-open line ranges [start, end) in the coordinates of the file as it is after the
newest step; a pure insertion or deletion changes an empty range, which meets a range only strictly
inside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True)
class Span:
    """A hunk as placed: 0-based first old line, its old and new line counts, and how many of its lines
    are leading / trailing context (the changed lines lie between)."""

    start: int
    old_len: int
    new_len: int
    lead: int
    trail: int


@dataclass
class _Region:
    """One step's hunk as lines of the newest file: all of it, and the lines it changed."""

    owner: str
    full: tuple[int, int]
    changed: tuple[int, int]


def _meets(a: tuple[int, int], b: tuple[int, int]) -> bool:
    (a0, a1), (b0, b1) = a, b
    if a0 == a1:
        return b0 < a0 < b1
    if b0 == b1:
        return a0 < b0 < a1
    return a0 < b1 and b0 < a1


def _shift(span: tuple[int, int], cuts: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """Move a range by the line-count changes of hunks that end at or before its start."""
    delta = sum(d for end, d in cuts if end <= span[0])
    return span[0] + delta, span[1] + delta


class Overlaps:
    """Feed the steps of one file in series order; ``step`` returns the earlier owners it overlaps."""

    def __init__(self) -> None:
        self._regions: list[_Region] = []

    def step(self, owner: str, spans: Iterable[Span]) -> list[str]:
        spans = sorted(spans, key=lambda s: s.start)
        hit: list[str] = []
        cuts: list[tuple[int, int]] = []
        added: list[_Region] = []
        delta = 0
        for s in spans:
            full_old = (s.start, s.start + s.old_len)
            changed_old = (s.start + s.lead, s.start + s.old_len - s.trail)
            for region in self._regions:
                if region.owner != owner and region.owner not in hit and (
                        _meets(full_old, region.changed) or _meets(changed_old, region.full)):
                    hit.append(region.owner)
            new_start = s.start + delta
            added.append(_Region(owner, (new_start, new_start + s.new_len),
                                 (new_start + s.lead, new_start + s.new_len - s.trail)))
            cuts.append((s.start + s.old_len, s.new_len - s.old_len))
            delta += s.new_len - s.old_len
        for region in self._regions:
            region.full, region.changed = _shift(region.full, cuts), _shift(region.changed, cuts)
        self._regions.extend(added)
        return hit


def spans_of(hunks: Sequence, placements: Sequence) -> list[Span]:
    """The Spans of a planned file edit: core.diff Hunks and their core.hunk_apply Placements, in order."""
    out = []
    for hunk, placement in zip(hunks, placements):
        ops = hunk.ops
        lead = len(ops) - len(ops.lstrip(b" "))
        trail = len(ops) - len(ops.rstrip(b" "))
        if lead == len(ops):  # only context: nothing changed (a mode change); counts as nothing
            lead, trail = hunk.old_len, 0
        start = placement.actual - 1 if hunk.old_len else placement.actual
        out.append(Span(start, hunk.old_len, hunk.new_len, lead, trail))
    return out


def changed_ranges(steps: Sequence[Sequence[Span]]) -> list[tuple[int, int]]:
    """The lines one hotfix changed in one file, as half-open 0-based ranges of the file it leaves (an
    empty range: lines deleted there). ``steps``: the Spans of each of its file patches for that file,
    in order (a format-patch series can touch a file twice); a later step's hunks move the earlier ones
    as Overlaps moves regions. What core/codeprint.touched maps to functions and classes (export)."""
    found: list[tuple[int, int]] = []
    for spans in steps:
        spans = sorted(spans, key=lambda s: s.start)
        cuts: list[tuple[int, int]] = []
        added: list[tuple[int, int]] = []
        delta = 0
        for s in spans:
            new_start = s.start + delta
            if not (s.lead == s.old_len == s.new_len):  # spans_of's "only context" hunk changes no line
                added.append((new_start + s.lead, new_start + s.new_len - s.trail))
            cuts.append((s.start + s.old_len, s.new_len - s.old_len))
            delta += s.new_len - s.old_len
        found = [_shift(r, cuts) for r in found] + added
    return sorted(found)
