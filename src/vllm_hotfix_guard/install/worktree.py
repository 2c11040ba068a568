"""The top of the git work tree holding a path: one rule for install/facts.py (HEAD, the install's kind) and
install/version.py (a checkout's derived version), so neither imports the other for it. Stdlib only."""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def find_work_tree(path: Path) -> Optional[Path]:
    """Top of the git work tree containing ``path`` (found from .git entries; needs no git binary)."""
    here = Path(path).resolve()
    for candidate in (here, *here.parents):
        if (candidate / ".git").exists():
            return candidate
    return None
