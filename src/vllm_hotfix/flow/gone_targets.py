"""Housekeeping: the state of targets that are gone for good (a venv deleted, a container's checkout gone).

A target's state directory is keyed by the target's real path; the path itself is in its record
(``state.json``: target.root) or its pending journal (root). A target whose path is missing may only
be away for a while -- a checkout moved, a volume not mounted right now -- and its record and
backups are the only way back to the original files. So a missing target is removed only when

- it has been seen missing for at least ``older_than`` (default 7 days): the first `hotfix gc` that
  finds it missing writes ``gone.json`` into its state directory (atomically; the root and the time),
  later ones count from there; or
- its path is confirmed gone (``--confirm PATH``).

``gone.json`` is input like every file there: it counts only when it is a small regular file (no
symlink) naming the same root, with a time that is not in the future and not before the last change
of the record (a target that came back and was applied to again starts over). Anything else starts
the clock again, which only ever keeps state longer. A target that exists again loses its marker.
A directory that names no target and holds nothing (only a lock file left by a transaction that wrote
nothing) is removed at once: nothing in it can be lost. `--dry-run` writes no marker.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from vllm_hotfix_guard.core.docfields import Fields
from vllm_hotfix_guard.errors import HotfixError, InvalidInput, WriteFailed
from vllm_hotfix_guard.paths import TargetDir, all_target_dirs, read_small_file
from vllm_hotfix.txn.mutex import target_mutex
from vllm_hotfix.txn.recovery import journal_root
from vllm_hotfix_guard.txn.state import TargetState
from vllm_hotfix_guard.txn.writable import describe

DEFAULT_OLDER_THAN = 7 * 24 * 3600.0
MARKER_MAX = 4096
# the state of one target directory, and what gc does with it
LIVE, GONE, EMPTY, UNNAMED, FOREIGN = "live", "gone", "empty", "unnamed", "foreign"


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One target state directory as gc judges it: remove it or keep it, and why."""

    directory: Path
    root: str | None  # the target it is for (None: it names none)
    hotfixes: tuple[str, ...]
    pending: bool
    state: str  # LIVE | GONE | EMPTY | UNNAMED | FOREIGN
    remove: bool
    reason: str
    gone_since: float | None = None  # epoch seconds the target was first seen missing (GONE)
    mark: bool = False  # a real run writes gone.json (first seen missing now)


def _target_root(tdir: TargetDir) -> tuple[str | None, tuple[str, ...]]:
    try:
        state = TargetState.load(tdir.directory)
    except HotfixError:
        state = None
    root = state.target.get("root") if state is not None else None
    hotfixes = tuple(sorted(state.hotfixes)) if state is not None else ()
    if root is None and tdir.pending():
        root = journal_root(tdir.journal)  # gc then checks that this root keys this very state folder
    return root, hotfixes


def _last_change(tdir: TargetDir) -> float:
    """When the record or the journal last changed (the target existed then)."""
    times = []
    for path in (tdir.state_file, tdir.journal_file):
        try:
            times.append(os.lstat(path).st_mtime)
        except OSError:
            pass
    return max(times, default=0.0)


def read_marker(tdir: TargetDir, root: str, now: float) -> float | None:
    """When ``root`` was first seen missing, from gone.json, or None if that file cannot be trusted."""
    data = read_small_file(tdir.gone_file, MARKER_MAX)  # bounded, a regular file, no link followed
    if data is None:
        return None
    fields = Fields(str(tdir.gone_file))
    try:
        doc = fields.mapping(json.loads(data), "")
        since = fields.get(doc, "", "since", (int, float))
        if fields.text(doc, "", "root") != root:
            return None
    except (ValueError, InvalidInput):  # not JSON, or not the fields write_marker writes: not trusted
        return None
    if since > now + 60 or since < _last_change(tdir):  # from the future, or older than the record's last change
        return None
    return float(since)


def write_marker(tdir: TargetDir, root: str, now: float) -> None:
    from vllm_hotfix_guard.txn.atomic import atomic_write

    doc = {"root": root, "since": now, "since_utc": iso(now), "by": "hotfix gc"}
    atomic_write(tdir.gone_file, (json.dumps(doc, indent=1) + "\n").encode(), 0o644)


def iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def age(seconds: float) -> str:
    """'3d 4h', '5h 12m', '40s': how long, for people."""
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    return f"{minutes}m" if minutes else f"{secs}s"


def _same_path(a: str, b: str) -> bool:
    return os.path.normpath(os.path.abspath(a)) == os.path.normpath(os.path.abspath(b))


def survey(*, older_than: float = DEFAULT_OLDER_THAN, confirmed: Iterable[str] = (),
           now: float | None = None) -> list[Entry]:
    """Every target state directory, judged: which gc removes and which it keeps, and why."""
    now = time.time() if now is None else now
    confirmed = tuple(confirmed)
    out = []
    for tdir in all_target_dirs():
        if tdir.directory.is_symlink() or not tdir.directory.is_dir():
            continue
        root, hotfixes = _target_root(tdir)
        common = dict(directory=tdir.directory, root=root, hotfixes=hotfixes, pending=tdir.pending())
        if root is None:
            if hotfixes or tdir.pending() or tdir.state_file.exists():
                out.append(Entry(**common, state=UNNAMED, remove=False,
                                 reason="something is recorded but it names no target: kept"))
            else:
                out.append(Entry(**common, state=EMPTY, remove=True, reason="nothing recorded, no target named"))
            continue
        if os.path.isdir(root):
            out.append(Entry(**common, state=LIVE, remove=False, reason=f"{root} exists"))
            continue
        if TargetDir.of(root).directory != tdir.directory:
            out.append(Entry(**common, state=FOREIGN, remove=False,
                             reason=f"its name is not the key of {root}: not a directory gc made sense of, kept"))
            continue
        since = read_marker(tdir, root, now)
        if any(_same_path(root, c) for c in confirmed):
            out.append(Entry(**common, state=GONE, remove=True, gone_since=since, reason="confirmed gone (--confirm)"))
        elif since is None:
            out.append(Entry(**common, state=GONE, remove=older_than <= 0, gone_since=now, mark=older_than > 0,
                             reason="missing (--older-than 0)" if older_than <= 0 else
                             f"first seen missing now: kept until it has been missing for {age(older_than)}"))
        elif now - since >= older_than:
            out.append(Entry(**common, state=GONE, remove=True, gone_since=since,
                             reason=f"missing since {iso(since)} ({age(now - since)})"))
        else:
            out.append(Entry(**common, state=GONE, remove=False, gone_since=since,
                             reason=f"missing since {iso(since)} ({age(now - since)}): kept until it has been "
                                    f"missing for {age(older_than)}"))
    return out


def unconfirmed(confirmed: Iterable[str], entries: list[Entry]) -> list[str]:
    """The --confirm paths that name no missing recorded target."""
    gone = [e.root for e in entries if e.state == GONE and e.root]
    return [c for c in confirmed if not any(_same_path(c, g) for g in gone)]


def forget_marker(entry: Entry) -> None:
    """A target that exists again starts over: its gone.json goes."""
    from vllm_hotfix_guard.txn.atomic import unlink_if_present

    try:
        unlink_if_present(TargetDir(entry.directory).gone_file)
    except OSError:
        pass  # best effort: a stale marker is rejected anyway once the record changes


def mark(entry: Entry, now: float) -> None:
    """Record that the entry's target was first seen missing now (a real run only)."""
    try:
        write_marker(TargetDir(entry.directory), entry.root or "", now)
    except OSError as exc:
        raise WriteFailed(f"{entry.directory}: cannot record when its target went missing ({describe(exc)})",
                          hint="set HOTFIX_STATE_DIR to the state directory you mean, or fix its permissions") from None


def remove(entry: Entry) -> None:
    """Remove one state directory, holding its lock so no transaction is running on it."""
    mutex = TargetDir(entry.directory).lock_file
    try:
        with target_mutex(entry.directory, timeout=0):
            for name in sorted(os.listdir(entry.directory)):
                if name != mutex.name:
                    path = entry.directory / name
                    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        shutil.rmtree(entry.directory)
    except OSError as exc:
        raise WriteFailed(f"{entry.directory}: cannot remove ({describe(exc)})",
                          hint="set HOTFIX_STATE_DIR to the state directory you mean, or fix its permissions") from None
