"""Where vllm-hotfix keeps its own files: the one place that knows the state directory's layout.

Tests point HOTFIX_STATE_DIR at a temp dir. Stdlib only (the in-process guard reads records too).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path


def state_dir() -> Path:
    """Root of recorded state, journals and backups (never inside the patched package)."""
    explicit = os.environ.get("HOTFIX_STATE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "vllm-hotfix"


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
        key = hashlib.sha256(real.encode()).hexdigest()[:16]
        return cls(targets_dir() / f"{Path(real).name}-{key}")

    @property
    def state_file(self) -> Path:
        return self.directory / "state.json"

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
        return (self.journal / "journal.json").exists()


def all_target_dirs() -> list[TargetDir]:
    """Every target that has state (records, a journal) in this state directory."""
    try:
        names = sorted(os.listdir(targets_dir()))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [TargetDir(targets_dir() / name) for name in names]


def read_small_file(path: str | os.PathLike, limit: int) -> bytes | None:
    """The bytes of a small regular file that is input (a marker in the state directory, a checkout's
    version file): never through a symlink, never a FIFO or device, at most ``limit`` bytes; None otherwise."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        data = os.read(fd, limit + 1)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def cache_dir() -> Path:
    explicit = os.environ.get("HOTFIX_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "vllm-hotfix"
