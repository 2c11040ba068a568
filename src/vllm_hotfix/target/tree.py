"""The only reader of target files: paths relative to a root, refused if they could reach outside it."""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from vllm_hotfix.errors import Refused

if TYPE_CHECKING:
    from vllm_hotfix.core.apply import FileState


def normalise_relative(relpath: str) -> str:
    """``relpath`` normalised to a posix path inside the root; Refused if absolute or escaping."""
    if not relpath or "\0" in relpath:
        raise Refused(f"{relpath!r}: not a usable file path")
    if relpath.startswith("/") or (len(relpath) > 1 and relpath[1] == ":"):
        raise Refused(f"{relpath}: absolute path; patch paths must be relative to the target root")
    norm = posixpath.normpath(relpath)
    if norm in (".", "..") or norm.startswith("../"):
        raise Refused(f"{relpath}: escapes the target root")
    return norm


class Tree:
    """Files under ``root``. ``read`` is the engine's Reader; ``path`` is the checked place to write."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._real_root = os.path.realpath(self.root)

    def path(self, relpath: str) -> Path:
        """Absolute path of ``relpath``, after refusing anything that leads outside the root.

        A symlinked parent directory or a symlinked file may be followed only while it stays inside.
        """
        norm = normalise_relative(relpath)
        full = os.path.join(self.root, norm)
        real = os.path.realpath(full)
        if real != self._real_root and not real.startswith(self._real_root + os.sep):
            raise Refused(f"{relpath}: leads outside {self.root} through a symlink (to {real})")
        return Path(full)

    def read(self, relpath: str) -> FileState | None:
        from vllm_hotfix.core.apply import FileState

        path = self.path(relpath)
        try:
            with open(path, "rb") as fh:
                info = os.fstat(fh.fileno())
                if not stat.S_ISREG(info.st_mode):
                    raise Refused(f"{relpath}: not a regular file under {self.root}")
                return FileState(fh.read(), info.st_mode)
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise Refused(f"{relpath}: is a directory under {self.root}") from None
        except NotADirectoryError:
            return None
