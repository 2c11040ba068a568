"""Plan a patch against file contents supplied by a reader. Pure: no file-system access here.

Every hunk is located exactly at its line or at the nearest offset; the context must match byte for
byte (no fuzz). Hunks of one file are placed in order, each searched after the end of the previous
one. Anchoring follows ``git apply``: a hunk starting at line 0 or 1 must match at the beginning of
the file, a hunk without trailing context at its end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from vllm_hotfix_guard.core.diff import FilePatch, Hunk, Patch, reverse_patch
from vllm_hotfix_guard.core.safety import check_patch_path
from vllm_hotfix_guard.errors import DoesNotApply, Refused
from vllm_hotfix_guard.output import quote_path, quoted

_HINT = "the target differs from what the patch expects; nothing was written"


@dataclass(frozen=True)
class FileState:
    """A file as a reader sees it: its bytes and mode."""

    data: bytes
    mode: int  # as the reader reports it; only the permission bits are compared / changed


Reader = Callable[[str], Optional[FileState]]  # None: the file does not exist


@dataclass(frozen=True)
class Placement:
    """Where a hunk was found compared with where its header said."""

    header: str
    expected: int  # 1-based old line from the hunk header
    actual: int  # where it was found; offset = actual - expected

    @property
    def offset(self) -> int:
        return self.actual - self.expected


@dataclass(frozen=True)
class FileEdit:
    """What a plan does to one path: its bytes before and after, and the mode."""

    path: str  # relative posix path under the target root (destination)
    action: str  # 'modify' | 'create' | 'delete' | 'rename' (old_path removed) | 'mode'
    old_path: str | None  # for rename
    before: bytes | None  # None when the file did not exist; for a rename: old_path's bytes
    after: bytes | None  # None when the file is deleted
    old_mode: int | None  # the reader's mode of the original file (None if it did not exist)
    new_mode: int | None  # permission bits to set (e.g. 0o755), None: keep / default
    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class Plan:
    """Every edit of a patch, planned before anything is written (a dry run stops here)."""

    edits: tuple[FileEdit, ...]  # at most one edit per path, in patch order
    reverse: bool

    @property
    def offsets(self) -> tuple[tuple[str, Placement], ...]:
        return tuple((e.path, p) for e in self.edits for p in e.placements if p.offset)


@dataclass(frozen=True)
class Detection:
    """Whether a patch applies, is applied already, or conflicts, with the plan that worked."""

    state: str  # 'applicable' | 'applied' | 'conflict'
    error: DoesNotApply | None = None  # why the forward plan failed ('conflict')
    plan: Plan | None = None  # the plan that worked: forward ('applicable') or reverse ('applied')


def _show(line: bytes) -> str:
    """A patch or file line inside a message: quoted by ``output.quoted`` (the one sanitiser), cut at 80."""
    text = line.decode("utf-8", "replace").replace("\t", "\\t")
    if len(text) > 80:
        text = text[:77] + "..."
    return quoted(text)


def _does_not_apply(path: str, hunk: Hunk, why: str) -> DoesNotApply:
    return DoesNotApply(f"{quote_path(path)}: hunk {hunk.range_header} does not apply: {why}", hint=_HINT)


def _found_at(lines: tuple[bytes, ...], index: int) -> str:
    if index >= len(lines) or (index == len(lines) - 1 and not lines[index]):
        return "end of file"
    if index == len(lines) - 1:
        return _show(lines[index]) + " (no newline at end of file)"
    return _show(lines[index])


def _explain(path: str, lines: tuple[bytes, ...], hunk: Hunk, expected: int, previous_end: int,
             at_start: bool, at_end: bool, searched: str = "") -> DoesNotApply:
    """The first difference at the hunk's own line, worded like ``git apply --check -v``, and the lines
    the search for its context covered (``searched``)."""
    old = hunk.old_side
    last = len(lines) - 1
    for j, want in enumerate(old):
        index = expected + j
        unterminated = hunk.old_eof and j == len(old) - 1
        if index > last or lines[index] != want or (index == last) != unterminated:
            shown = _show(want) + (" (no newline at end of file)" if unterminated else "")
            return _does_not_apply(path, hunk, f"expected line {index + 1} {shown}, found {_found_at(lines, index)}"
                                               + searched)
    if expected < previous_end:
        return _does_not_apply(path, hunk, "it overlaps the previous hunk")
    if at_start and expected != 0:
        return _does_not_apply(path, hunk, "it must match at the beginning of the file")
    if at_end and (expected + len(old) != last or (lines[last] and not hunk.old_eof)):
        return _does_not_apply(path, hunk, f"expected end of file after line {expected + len(old)}, "
                                           f"found {_found_at(lines, expected + len(old))}")
    return _does_not_apply(path, hunk, f"line {expected + 1} is past the end of the file")


def _locate(path: str, lines: tuple[bytes, ...], hunk: Hunk, previous_end: int) -> int:
    """0-based index in ``lines`` where ``hunk.old_side`` starts; DoesNotApply if nowhere.

    git apply's find_pos: the search starts at the header's line, clamped to the end of the file (so
    a huge number costs nothing), and goes outwards, one line forward, then one back."""
    old = hunk.old_side
    k = len(old)
    n = len(lines)
    if hunk.old_eof and k and not old[-1]:
        # '\ No newline' after an empty line: a line of no bytes, which no file holds (git's image
        # has no zero-length line), so git never matches it; it must not match a file's final '\n'.
        raise _does_not_apply(path, hunk, "its last line is empty and has no newline, which no file has")
    expected = hunk.old_start - 1 if hunk.old_len else hunk.old_start
    file_lines = n - 1 if not lines[-1] else n
    beyond = expected > file_lines
    if beyond:
        expected = file_lines
    at_start = hunk.old_start <= 1
    at_end = hunk.old_eof or hunk.new_eof or hunk.trailing_context == 0
    highest = n - k if hunk.old_eof else n - 1 - k
    lowest = previous_end
    if at_end:
        lowest = max(lowest, highest)
        if not hunk.old_eof and lines[-1]:
            highest = -1  # lines ending with a newline cannot reach the end of a file that lacks one
    if at_start:
        highest = min(highest, 0)
    if lowest <= expected <= highest and lines[expected:expected + k] == old:
        return expected
    if lowest <= highest:
        first = old[0] if k else None
        for distance in range(1, max(expected - lowest, highest - expected, 0) + 1):
            for p in (expected + distance, expected - distance):
                if lowest <= p <= highest and (first is None or lines[p] == first) and lines[p:p + k] == old:
                    return p
    if beyond:
        raise _does_not_apply(path, hunk, f"line {hunk.old_start} is beyond the end of the file ({file_lines} "
                                          f"lines) and its lines are nowhere in it")
    searched = (f" (at its nominal line {expected + 1}; its {k} old line(s) were searched for in lines "
                f"{lowest + 1}-{highest + k} and not found)" if lowest < highest and k else "")
    raise _explain(path, lines, hunk, max(expected, 0), previous_end, at_start, at_end, searched)


def _apply_in_place(data: bytes, hunks: tuple[Hunk, ...]) -> tuple[bytes, tuple[Placement, ...]] | None:
    """Fast path of ``apply_hunks`` for the usual patch: every hunk is found exactly at its header's line,
    all its lines end with a newline, and no offset search is needed. Works on byte
    offsets (C-speed find / count) instead of splitting the file into lines; None when any hunk needs
    more, and ``apply_hunks`` then does the full line-based search (same result when both apply)."""
    out: list[bytes] = []
    placements = []
    byte_pos = line_pos = 0  # byte_pos is the start of line index line_pos
    for hunk in hunks:
        old = hunk.old_side
        if hunk.old_eof or hunk.new_eof or not old:
            return None
        expected = hunk.old_start - 1
        block = b"\n".join(old) + b"\n"
        found = data.find(block, byte_pos)
        if found < 0 or (found > byte_pos and data[found - 1] != 10):
            return None
        if line_pos + data.count(b"\n", byte_pos, found) != expected:
            return None
        if hunk.ops[-1:] != b" " and found + len(block) != len(data):  # no trailing context: anchored at the end
            return None
        out.append(data[byte_pos:found])
        if hunk.new_side:
            out.append(b"\n".join(hunk.new_side) + b"\n")
        byte_pos = found + len(block)
        line_pos = expected + len(old)
        placements.append(Placement(hunk.header, hunk.old_start, expected + 1))
    out.append(data[byte_pos:])
    return b"".join(out), tuple(placements)


def apply_hunks(path: str, data: bytes, hunks: tuple[Hunk, ...]) -> tuple[bytes, tuple[Placement, ...]]:
    """``data`` with ``hunks`` applied in order, and where each hunk was placed."""
    if not hunks:
        return data, ()
    fast = _apply_in_place(data, hunks)
    if fast is not None:
        return fast
    # Split on '\n' only: every element but the last was followed by '\n'; the last is the
    # unterminated tail (b'' when the file ends with a newline).
    lines = tuple(data.split(b"\n"))
    n = len(lines)
    out: list[bytes] = []
    placements = []
    pos = 0
    for hunk in hunks:
        p = _locate(path, lines, hunk, pos)
        out.extend(lines[pos:p])
        out.extend(hunk.new_side)
        if hunk.old_eof:
            if not hunk.new_eof:
                out.append(b"")
            pos = n
        elif hunk.new_eof:
            pos = n
        else:
            pos = p + len(hunk.old_side)
        placements.append(Placement(hunk.header, hunk.old_start, p + 1 if hunk.old_len else p))
    out.extend(lines[pos:])
    return b"\n".join(out), tuple(placements)


def _permissions(mode: int | None) -> int | None:
    return None if mode is None else mode & 0o777


class _Planner:
    def __init__(self, read: Reader):
        self.read = read
        self.original: dict[str, FileState | None] = {}
        self.current: dict[str, FileState | None] = {}
        self.placements: dict[str, list[Placement]] = {}
        self.explicit_mode: set[str] = set()
        self.renames: list[tuple[str, str]] = []
        self.vacated: set[str] = set()  # renamed away somewhere in the patch: may be a destination
        self.created: set[str] = set()  # given content by a creation, rename or copy of this patch

    def original_state(self, path: str) -> FileState | None:
        """The tree's file before the patch: what renames and copies read, as in git apply."""
        self.state(path)
        return self.original[path]

    def state(self, path: str) -> FileState | None:
        if path not in self.current:
            found = self.read(path)
            self.original[path] = found
            self.current[path] = found
        return self.current[path]

    def existing(self, path: str, what: str) -> FileState:
        found = self.state(path)
        if found is None:
            raise DoesNotApply(f"{quote_path(path)}: does not exist (the patch {what} it)", hint=_HINT)
        return found

    def absent(self, path: str, what: str) -> None:
        if self.state(path) is not None and path not in self.vacated:
            raise DoesNotApply(f"{quote_path(path)}: already exists (the patch {what} it)", hint=_HINT)

    def patched(self, path: str, data: bytes, f: FilePatch) -> bytes:
        result, placements = apply_hunks(path, data, f.hunks)
        self.placements.setdefault(path, []).extend(placements)
        return result

    def set(self, path: str, data: bytes, mode: int, new_mode: int | None) -> None:
        if new_mode is not None:
            mode = (mode & ~0o777) | (new_mode & 0o777)
            self.explicit_mode.add(path)
        self.current[path] = FileState(data, mode)

    def check_mode(self, path: str, found: FileState, f: FilePatch) -> None:
        if f.old_mode is not None and f.new_mode is not None and (found.mode & 0o111) != (f.old_mode & 0o111):
            raise DoesNotApply(f"{quote_path(path)}: mode is {found.mode & 0o777:o}, the patch expects {f.old_mode & 0o777:o}",
                               hint=_HINT)

    def file(self, f: FilePatch) -> None:
        old, new = f.old_path, f.new_path
        for path in (old, new):
            if path is not None:
                check_patch_path(path)
        if old is None:
            self.absent(new, "creates")  # type: ignore[arg-type]
            self.set(new, self.patched(new, b"", f), 0o644, f.new_mode)  # type: ignore[arg-type]
            self.created.add(new)  # type: ignore[arg-type]
        elif new is None:
            found = self.existing(old, "deletes")
            if self.patched(old, found.data, f):
                raise DoesNotApply(f"{quote_path(old)}: the patch deletes it but it holds more than the patch removes", hint=_HINT)
            self.current[old] = None
        elif f.copy_reversed:
            copy = self.existing(old, "removes the copy")
            source = self.existing(new, "is the source of a copy in")
            if self.patched(old, copy.data, f) != source.data:
                raise DoesNotApply(f"{quote_path(old)}: is not the copy of {quote_path(new)} the patch made", hint=_HINT)
            self.current[old] = None
        elif old != new:
            found = self.original_state(old)
            if found is None:
                raise DoesNotApply(f"{quote_path(old)}: does not exist (the patch {'renames' if f.is_rename else 'copies'} it)",
                                   hint=_HINT)
            self.check_mode(old, found, f)
            self.absent(new, "renames a file to" if f.is_rename else "copies a file to")
            self.set(new, self.patched(new, found.data, f), found.mode, f.new_mode)
            self.created.add(new)
            if f.is_rename:
                if old not in self.created:  # swapped renames: 'b' -> 'a' after 'a' -> 'b' keeps the new 'b'
                    self.current[old] = None
                self.renames.append((old, new))
            elif f.new_mode is None:
                self.explicit_mode.add(new)
        elif f.maybe_new and self.state(old) is None:  # traditional diff of an added file, no /dev/null
            self.set(old, self.patched(old, b"", f), 0o644, None)
            self.created.add(old)
        else:
            found = self.existing(old, "modifies")
            self.check_mode(old, found, f)
            self.set(old, self.patched(old, found.data, f), found.mode, f.new_mode if f.old_mode != f.new_mode else None)

    def check_layout(self) -> None:
        """Refuse a result where a file would have to be a directory too ('d' and 'd/x'), at plan time,
        so that a dry run predicts it and the commit never meets it."""
        existing = {path for path, found in self.current.items() if found is not None}
        for path in existing:
            cut = path.rfind("/")
            while cut > 0:
                if path[:cut] in existing:
                    raise Refused(f"{quote_path(path)}: cannot be written, the patch leaves {quote_path(path[:cut])} a file")
                cut = path.rfind("/", 0, cut)

    def edits(self) -> tuple[FileEdit, ...]:
        edits: dict[str, FileEdit] = {}
        for path, before in self.original.items():
            after = self.current[path]
            if before == after:
                continue
            before_mode = None if before is None else before.mode
            new_mode = None
            if after is not None and path in self.explicit_mode and (
                    before is None or _permissions(after.mode) != _permissions(before_mode)):
                new_mode = _permissions(after.mode)
            if before is None:
                action = "create"
            elif after is None:
                action = "delete"
            else:
                action = "mode" if before.data == after.data else "modify"
            edits[path] = FileEdit(
                path, action, None, None if before is None else before.data, None if after is None else after.data,
                before_mode, new_mode, tuple(self.placements.get(path, ())),
            )
        for source, destination in self.renames:
            gone, made = edits.get(source), edits.get(destination)
            if gone and made and gone.action == "delete" and made.action == "create":
                new_mode = made.new_mode if made.new_mode is not None else _permissions(gone.old_mode)
                edits[source] = FileEdit(destination, "rename", source, gone.before, made.after,
                                         gone.old_mode, new_mode, made.placements)
                del edits[destination]
        return tuple(edits.values())


def plan_patch(patch: Patch, read: Reader, *, reverse: bool = False) -> Plan:
    """Locate every hunk of every file; the Plan holds the final bytes of each touched path.

    Raises ``DoesNotApply`` (first failing hunk) or ``Refused`` (unsafe path). Several file
    patches for one path (a format-patch series) chain: each plans against the previous result.
    """
    planner = _Planner(read)
    files = (reverse_patch(patch) if reverse else patch).files
    # Only a rename source may already exist as a destination: its bytes move on with its own rename.
    # (A file the patch deletes later is not: its original content would go unchecked.)
    planner.vacated = {f.old_path for f in files if f.is_rename and f.old_path is not None}
    for f in files:
        try:
            planner.file(f)
        except Refused as unsafe:
            raise Refused(f"{patch.source}:{f.lineno}: {unsafe.message}", hint=unsafe.hint) from None
    planner.check_layout()
    return Plan(planner.edits(), reverse)


def detect(patch: Patch, read: Reader) -> Detection:
    """'applicable' if the patch plans forward; 'applied' if only its reverse plans; else 'conflict'."""
    try:
        return Detection("applicable", plan=plan_patch(patch, read))
    except DoesNotApply as forward:
        try:
            return Detection("applied", plan=plan_patch(patch, read, reverse=True))
        except DoesNotApply:
            return Detection("conflict", error=forward)
