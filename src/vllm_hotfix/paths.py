"""Where vllm-hotfix keeps its own files. Tests point HOTFIX_STATE_DIR at a temp dir."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def state_dir() -> Path:
    """Root of recorded state, journals and backups (never inside the patched package)."""
    explicit = os.environ.get("HOTFIX_STATE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "vllm-hotfix"


def target_state_dir(target_root: Path) -> Path:
    """State of one target, keyed by the real path of the directory patches are applied to."""
    real = os.path.realpath(target_root)
    key = hashlib.sha256(real.encode()).hexdigest()[:16]
    return state_dir() / "targets" / f"{Path(real).name}-{key}"


def journal_dir(state_dir: Path) -> Path:
    """Where a target's in-flight transaction (journal + backups of originals) lives."""
    return state_dir / "journal"


def cache_dir() -> Path:
    explicit = os.environ.get("HOTFIX_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "vllm-hotfix"
