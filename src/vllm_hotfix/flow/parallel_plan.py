"""Parse and plan a large plain diff on two cores: a forked child takes the second half of the files.

An optimisation only. Whenever the clean case does not hold (a half fails to parse or plan, the halves
touch a common path, other threads run, the child dies or sends nothing), ``finish`` returns None and
the caller redoes the work sequentially, so plans, reports and error messages are exactly the
sequential ones. The child only reads the target; the parent alone writes.
"""

from __future__ import annotations

import fcntl
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from vllm_hotfix_guard.core.hunk_apply import FileEdit, Plan, Reader, plan_patch
from vllm_hotfix_guard.core.diff import DiffStat, Patch, parse_patch, file_boundary_near_middle
from vllm_hotfix.install.tree import Tree

_FORWARD, _REVERSE, _PARSED = b"f", b"r", b"p"
MIN_SPLIT_BYTES = 1 << 20  # below, a fork and the plan's trip through a pipe cost about what they save


@dataclass(frozen=True)
class _HalfPlan:
    """The plan of the second half of a diff, as the forked child sends it back."""

    edits: tuple[FileEdit, ...]
    paths_read: frozenset[str]
    file_paths: frozenset[str]  # FilePatch.path of its files, for the diffstat
    insertions: int
    deletions: int
    signatures: dict[str, tuple[int, ...]]


def _widen(pipe_fd: int) -> None:
    """A 1 MiB pipe buffer (Linux) moves the child's plan (tens of MB) in far fewer context switches."""
    try:
        fcntl.fcntl(pipe_fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except OSError:
        pass


def _recording(read: Reader, seen: set[str]) -> Reader:
    def record(relpath: str):
        seen.add(relpath)
        return read(relpath)

    return record


def _plan_half(patch: Patch, tree: Tree, read: Reader, reverse: bool) -> _HalfPlan:
    seen: set[str] = set()
    plan = plan_patch(patch, _recording(read, seen), reverse=reverse)
    signatures = {path: sig for path, sig in tree.read_signatures().items() if path in seen}
    return _HalfPlan(plan.edits, frozenset(seen), frozenset(f.path for f in patch.files),
                     sum(f.insertions for f in patch.files), sum(f.deletions for f in patch.files), signatures)


class ForkedHalf:
    """A child process that parses the second half of ``data`` at once and plans it when told to."""

    @classmethod
    def start(cls, data: bytes, *, strip: int, source: str, root: Path, min_bytes: int = MIN_SPLIT_BYTES
              ) -> ForkedHalf | None:
        """The running child, or None when the diff is not worth or fit to split; the caller parses
        ``first_half`` and then asks ``child_parsed``."""
        cut = file_boundary_near_middle(data, min_bytes=min_bytes)
        if cut is None or not hasattr(os, "fork") or threading.active_count() > 1:
            return None
        go_read, go_write = os.pipe()
        out_read, out_write = os.pipe()
        _widen(out_write)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child, which always leaves through os._exit
            status = 1
            try:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.close(go_write)
                os.close(out_read)
                status = _child(data[cut:], strip, source, Path(root), go_read, out_write)
            finally:
                os._exit(status)
        os.close(go_read)
        os.close(out_write)
        return cls(data[:cut], pid, go_write, out_read)

    def __init__(self, first_half: bytes, pid: int, go_fd: int, out_fd: int):
        self.first_half = first_half
        self._pid: int | None = pid
        self._go_fd: int | None = go_fd
        self._out_fd: int | None = out_fd

    def child_parsed(self) -> bool:
        """Wait for the child's parse; False (child stopped) when its half does not parse."""
        if os.read(self._out_fd, 1) == _PARSED:
            return True
        self.cancel()
        return False

    def finish(self, own: Patch, tree: Tree, read: Reader, *, reverse: bool) -> tuple[Plan, DiffStat] | None:
        """Plan ``own`` (the first half) here while the child plans its half; the merged plan in the
        sequential order, or None: then redo everything sequentially."""
        try:
            os.write(self._go_fd, _REVERSE if reverse else _FORWARD)
            mine = _plan_half(own, tree, read, reverse)
        except Exception:
            self.cancel()
            return None
        theirs = self._receive()
        if theirs is None or mine.paths_read & theirs.paths_read:
            return None
        tree.adopt_read_signatures(theirs.signatures)
        edits = theirs.edits + mine.edits if reverse else mine.edits + theirs.edits
        stat = DiffStat(len(mine.file_paths | theirs.file_paths), mine.insertions + theirs.insertions,
                        mine.deletions + theirs.deletions)
        return Plan(edits, reverse), stat

    def _receive(self) -> _HalfPlan | None:
        """The child's half, unpickled while it streams in; None unless the child also exited cleanly."""
        import pickle

        self._close_go()
        stream, self._out_fd = os.fdopen(self._out_fd, "rb"), None
        try:
            with stream:
                half = pickle.load(stream)
        except Exception:
            half = None
        return half if self._reap(kill=half is None) else None

    def cancel(self) -> None:
        """Stop the child (it only reads) and reap it; safe to call more than once."""
        self._close_go()
        self._reap(kill=True)

    def _close_go(self) -> None:
        if self._go_fd is not None:
            os.close(self._go_fd)
            self._go_fd = None

    def _reap(self, *, kill: bool) -> bool:
        if self._out_fd is not None:
            os.close(self._out_fd)
            self._out_fd = None
        if self._pid is None:
            return False
        if kill:
            try:
                os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, status = os.waitpid(self._pid, 0)
        self._pid = None
        return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _child(data: bytes, strip: int, source: str, root: Path, go_fd: int, out_fd: int) -> int:
    try:
        patch = parse_patch(data, strip=strip, source=source)
    except Exception:
        return 1
    os.write(out_fd, _PARSED)
    order = os.read(go_fd, 1)
    if order not in (_FORWARD, _REVERSE):
        return 1  # the parent gave up
    tree = Tree(root)
    try:
        half = _plan_half(patch, tree, tree.read, order == _REVERSE)
    except Exception:
        return 1
    import pickle

    with os.fdopen(out_fd, "wb") as out:
        pickle.dump(half, out, protocol=pickle.HIGHEST_PROTOCOL)
    return 0
