"""Where vllm-hotfix keeps its own files: the one place that knows the state directory's layout.

Tests point HOTFIX_STATE_DIR at a temp dir. Stdlib only (the in-process guard reads records too).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path


def state_dir() -> Path:
    """Root of recorded state, journals and backups (never inside the patched package). Always absolute:
    a relative HOTFIX_STATE_DIR is taken against the current directory once, here, so nothing recorded
    or opened later depends on where the process is; a relative XDG_STATE_HOME is ignored (XDG spec)."""
    explicit = os.environ.get("HOTFIX_STATE_DIR")
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

    ``state.json`` (the record), ``journal/`` (an in-flight transaction), ``lock``, ``backups/<id>/``
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
        return self.directory / "state.json"

    @property
    def journal(self) -> Path:
        return self.directory / "journal"

    @property
    def lock_file(self) -> Path:
        return self.directory / "lock"

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


def cache_dir() -> Path:
    explicit = os.environ.get("HOTFIX_CACHE_DIR")
    if explicit:
        return Path(os.path.abspath(explicit))
    return _xdg("XDG_CACHE_HOME", Path(".cache")) / "vllm-hotfix"
