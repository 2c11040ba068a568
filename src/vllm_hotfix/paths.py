"""Where vllm-hotfix keeps its own files: the one place that knows the state directory's layout.

Tests point HOTFIX_STATE_DIR at a temp dir. Stdlib only (the in-process guard reads records too).
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from vllm_hotfix.settings import (  # noqa: F401 - the names, defined once there
    CONTAINER_LOCK, JOURNAL_NAME, LOCK_ENV, LOCK_NAME, REQUIRE_ENV, STATE_DIR_ENV, STATE_NAME, STRICT_ENV)

# Size caps for the files we read back: far above what we write, far below what hurts a process.
STATE_LIMIT = 16 << 20
JOURNAL_LIMIT = 64 << 20   # a journal of the real 0.29 -> 0.30 diff (1,106 files) is ~0.5 MB
LOCK_LIMIT = 4 << 20


def state_dir() -> Path:
    """Root of recorded state, journals and backups (never inside the patched package). Always absolute:
    a relative HOTFIX_STATE_DIR is taken against the current directory once, here, so nothing recorded
    or opened later depends on where the process is; a relative XDG_STATE_HOME is ignored (XDG spec)."""
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return Path(os.path.abspath(explicit))
    return _xdg("XDG_STATE_HOME", Path(".local") / "state") / "vllm-hotfix"


def _xdg(variable: str, default: Path) -> Path:
    value = os.environ.get(variable)
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / default


def targets_dir() -> Path:
    return state_dir() / "targets"


@dataclass(frozen=True)
class TargetDir:
    """The state of one target (the directory patches are applied to), keyed by its real path.

    ``state.json`` (the record), ``journal/`` (an in-flight transaction), ``lock``, ``gone.json`` (gc's
    "first seen missing"), ``backups/<id>/``
    (originals) and ``patches/<id>/`` (the exact patch bytes applied); what lies inside those two is
    txn.state.TargetState's (``backup_rel`` / ``backup_path``, ``patch_rel``)."""

    directory: Path

    @classmethod
    def of(cls, target_root: Path | str) -> "TargetDir":
        real = os.path.realpath(target_root)
        key = hashlib.sha256(os.fsencode(real)).hexdigest()[:16]  # the path's bytes, whatever the locale
        return cls(targets_dir() / f"{Path(real).name}-{key}")

    @property
    def state_file(self) -> Path:
        return self.directory / STATE_NAME

    @property
    def journal(self) -> Path:
        return self.directory / "journal"

    @property
    def lock_file(self) -> Path:
        return self.directory / "lock"

    @property
    def gone_file(self) -> Path:
        """Written by `hotfix gc` when the target is first seen missing (flow/gc.py)."""
        return self.directory / "gone.json"

    def pending(self) -> bool:
        """An interrupted transaction waits for recovery."""
        return os.path.lexists(self.journal / JOURNAL_NAME)


def all_target_dirs() -> list[TargetDir]:
    """Every target that has state (records, a journal) in this state directory."""
    try:
        names = sorted(os.listdir(targets_dir()))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [TargetDir(targets_dir() / name) for name in names]


def read_small_file(path: str | os.PathLike, limit: int) -> bytes | None:
    """The bytes of a small regular file that is input and may simply be wrong (a marker in the state
    directory, a checkout's version file): ``inputs.read_bounded`` without following a symlink; None for
    anything it refuses (absent, a link, a FIFO or device, over ``limit``, unreadable)."""
    from vllm_hotfix.errors import InvalidInput
    from vllm_hotfix.inputs import read_bounded

    try:
        return read_bounded(path, cap=limit, what="file", follow_symlinks=False)
    except (OSError, InvalidInput):
        return None


def cache_dir() -> Path:
    explicit = os.environ.get("HOTFIX_CACHE_DIR")
    if explicit:
        return Path(os.path.abspath(explicit))
    return _xdg("XDG_CACHE_HOME", Path(".cache")) / "vllm-hotfix"


def read_own_file(path: Path | str, *, limit: int) -> bytes | None:
    """The bytes of one of our own files (a record, a journal, a lock, a kept original) read back as input:
    ``inputs.read_bounded`` without following a symlink; None when it does not exist."""
    from vllm_hotfix.inputs import read_bounded

    try:
        return read_bounded(path, cap=limit, what="file vllm-hotfix writes", follow_symlinks=False,
                            hint="this is not a file vllm-hotfix wrote; move it aside")
    except FileNotFoundError:
        return None
