"""Housekeeping: the state of targets that no longer exist (a venv deleted, a container's checkout gone).

A target's state directory is keyed by the target's real path; the path itself is in its record
(``state.json``: target.root) or its pending journal (root). A directory whose target path is gone is
stale: nothing can be verified, rolled back or recovered there any more. A directory that names no
target at all (only a lock file left by a transaction that wrote nothing) is stale too.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from vllm_hotfix.errors import HotfixError, WriteFailed
from vllm_hotfix.paths import TargetDir, all_target_dirs
from vllm_hotfix.txn.lock import target_lock
from vllm_hotfix.txn.state import TargetState
from vllm_hotfix.txn.writable import describe


@dataclass(frozen=True)
class Stale:
    """A state directory whose target is gone, with what it still records."""

    directory: Path
    root: str | None  # the target it was for (None: it names none)
    hotfixes: tuple[str, ...]
    pending: bool


def _target_root(tdir: TargetDir) -> tuple[str | None, tuple[str, ...]]:
    try:
        state = TargetState.load(tdir.directory)
    except HotfixError:
        state = None
    root = state.target.get("root") if state is not None else None
    hotfixes = tuple(sorted(state.hotfixes)) if state is not None else ()
    if root is None and tdir.pending():
        try:
            root = json.loads((tdir.journal / "journal.json").read_bytes()).get("root")
        except (OSError, ValueError, AttributeError, RecursionError):
            root = None
    return root, hotfixes


def stale_targets() -> list[Stale]:
    """State directories whose target no longer exists (or that name no target and hold nothing)."""
    found = []
    for tdir in all_target_dirs():
        if not tdir.directory.is_dir():
            continue
        root, hotfixes = _target_root(tdir)
        if root is None:
            if hotfixes or tdir.pending() or tdir.state_file.exists():
                continue  # something is recorded but we cannot tell for what: keep it
        elif os.path.isdir(root) or TargetDir.of(root).directory != tdir.directory:
            continue
        found.append(Stale(tdir.directory, root, hotfixes, tdir.pending()))
    return found


def remove(stale: Stale) -> None:
    """Remove one stale state directory, holding its lock so no transaction is running on it."""
    try:
        with target_lock(stale.directory, timeout=0):
            for name in sorted(os.listdir(stale.directory)):
                if name != "lock":
                    path = stale.directory / name
                    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        shutil.rmtree(stale.directory)
    except OSError as exc:
        raise WriteFailed(f"{stale.directory}: cannot remove ({describe(exc)})",
                          hint="set HOTFIX_STATE_DIR to the state directory you mean, or fix its permissions") from None
