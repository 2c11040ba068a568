"""The only reader of target files: paths relative to a root, refused if they could reach outside it."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from vllm_hotfix_guard.core.hunk_apply import FileState
from vllm_hotfix_guard.core.safety import check_patch_path
from vllm_hotfix_guard.errors import Refused
from vllm_hotfix_guard.inputs import TARGET_FILE_LIMIT, Unfit, read_input, size_text
from vllm_hotfix_guard.output import quote_path


# Kernel file timestamps are coarse (a jiffy, at most 10 ms): a change made within that window of a
# read may leave mtime and ctime unchanged, so such a file is compared by content (git's "racy clean").
RACY_WINDOW_NS = 100_000_000


def _signature(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_mode)


class Tree:
    """Files under ``root``. ``read`` is the engine's Reader; ``path`` is the checked place to write."""

    recovered = False  # txn/recovery.RecoveredTree: the files as recovering the pending journal leaves them

    def __init__(self, root: Path):
        self.root = Path(root)
        self._root_str = str(self.root)
        self._real_root = os.path.realpath(self.root)
        self._read_signatures: dict[str, tuple[int, ...]] = {}
        self._checked_dirs: set[str] = set()  # directories whose real path is inside the root

    def unchanged_since_read(self, relpath: str, info: os.stat_result) -> bool:
        """True when ``info`` (an lstat taken now) proves ``relpath`` still holds what ``read`` returned."""
        seen = self._read_signatures.get(relpath)
        return seen is not None and seen == _signature(info)

    def read_signatures(self) -> dict[str, tuple[int, ...]]:
        """What ``read`` proved so far, to hand to another Tree on the same root (see ``adopt_read_signatures``)."""
        return dict(self._read_signatures)

    def adopt_read_signatures(self, signatures: dict[str, tuple[int, ...]]) -> None:
        """Take over what another Tree on the same root read (a planning child process), as if read here."""
        self._read_signatures.update(signatures)

    def path(self, relpath: str) -> Path:
        """Absolute path of ``relpath``, after refusing anything that leads outside the root.

        Refused: a symlink on the way (a symlinked directory, or the file itself), with the reason
        "leads outside" when it points out of the root.
        """
        return Path(self.checked_path(relpath))

    def checked_path(self, relpath: str) -> str:
        """``path`` as a string (no pathlib object: this runs once per file of a 1,000-file patch)."""
        return self._checked(relpath, quiet=True)[0]

    def checked_lstat(self, relpath: str) -> tuple[str, os.stat_result | None]:
        """``checked_path`` and the file's lstat (None: absent), from the one lstat that refuses a link;
        an lstat that fails otherwise (EACCES, ELOOP) raises."""
        return self._checked(relpath, quiet=False)

    def _checked(self, relpath: str, *, quiet: bool) -> tuple[str, os.stat_result | None]:
        check_patch_path(relpath)  # git's verify_path: no '..', '.' or empty component, no '.git'
        full = os.path.join(self._root_str, relpath)
        parent = os.path.dirname(full)
        if parent not in self._checked_dirs and not self._plain_dirs(relpath):
            # a symbolic link on the way: the reason, as before -- outside the root, else beyond a link
            self._check_inside(relpath, os.path.realpath(parent))
            self._check_no_symlinked_dir(relpath)
        try:
            info = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            info = None
        except OSError:
            if not quiet:
                raise
            info = None  # as os.path.islink: no link; the read that follows says what is wrong
        if info is not None and stat.S_ISLNK(info.st_mode):
            self._check_inside(relpath, os.path.realpath(full))
            raise Refused(f"{quote_path(relpath)}: is a symbolic link under {self.root}; only regular files are patched")
        return full, info

    def _plain_dirs(self, relpath: str) -> bool:
        """Whether no directory of ``relpath`` under the root is a symbolic link (one lstat for each one not
        seen yet); then the parent's real path is the root's real path joined with it, inside the root,
        and no realpath walk is needed. False leaves the reason to the checks that give it."""
        cut = relpath.find("/")
        while cut > 0:
            directory = os.path.join(self._root_str, relpath[:cut])
            if directory not in self._checked_dirs:
                if os.path.islink(directory):
                    return False
                self._checked_dirs.add(directory)
            cut = relpath.find("/", cut + 1)
        return True

    def _check_no_symlinked_dir(self, relpath: str) -> None:
        """Like git apply, refuse a path 'beyond a symbolic link': a symlinked directory inside the root
        would make two names for one file, and the journal would write through it."""
        cut = relpath.find("/")
        while cut > 0:
            directory = os.path.join(self._root_str, relpath[:cut])
            if directory not in self._checked_dirs:
                if os.path.islink(directory):
                    raise Refused(f"{quote_path(relpath)}: is beyond a symbolic link ({quote_path(relpath[:cut])}) under {self.root}")
                self._checked_dirs.add(directory)
            cut = relpath.find("/", cut + 1)

    def _check_inside(self, relpath: str, real: str) -> None:
        if real != self._real_root and not real.startswith(self._real_root + os.sep):
            raise Refused(f"{quote_path(relpath)}: leads outside {self.root} through a symlink (to {real})")

    def read(self, relpath: str) -> FileState | None:
        """The file's bytes and mode, through ``inputs.read_input`` (the one reader of data files): opened
        with O_NOFOLLOW | O_NONBLOCK, so a link swapped in after the check is refused by the open itself and
        a FIFO or device never blocks; a regular file only; at most ``TARGET_FILE_LIMIT``."""
        path = self.checked_path(relpath)
        started_ns = time.time_ns()
        try:
            data, info = read_input(path, cap=TARGET_FILE_LIMIT, what="target file", follow_symlinks=False)
        except Unfit as exc:
            if exc.why == "link":
                raise Refused(f"{quote_path(relpath)}: is a symbolic link under {self.root}; only regular files "
                              f"are patched") from None
            if exc.why == "large":
                raise Refused(f"{quote_path(relpath)}: is over the {size_text(TARGET_FILE_LIMIT)} a target file may "
                              f"be, under {self.root}") from None
            what = "is a directory" if os.path.isdir(path) else "not a regular file"
            raise Refused(f"{quote_path(relpath)}: {what} under {self.root}") from None
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            raise Refused(f"{quote_path(relpath)}: a parent of it is a regular file under {self.root}") from None
        except IsADirectoryError:
            raise Refused(f"{quote_path(relpath)}: is a directory under {self.root}") from None
        except OSError as exc:
            raise Refused(f"{quote_path(relpath)}: cannot read under {self.root}: {exc.strerror}") from None
        if max(info.st_ctime_ns, info.st_mtime_ns) < started_ns - RACY_WINDOW_NS:
            self._read_signatures[relpath] = _signature(info)
        return FileState(data, info.st_mode)
