"""Where vllm-hotfix keeps its own files: the one place that knows the state directory's layout.

Tests point HOTFIX_STATE_DIR at a temp dir. Stdlib only (the in-process guard reads records too).
"""

from __future__ import annotations

import errno
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
    """Root of recorded state, journals and backups (never inside the patched package)."""
    explicit = os.environ.get(STATE_DIR_ENV)
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

    ``state.json`` (the record), ``journal/`` (an in-flight transaction), ``lock``, ``backups/<id>/``
    (originals) and ``patches/<id>/`` (the exact patch bytes applied); what lies inside those two is
    txn.state.TargetState's (``backup_rel`` / ``backup_path``, ``patch_rel``)."""

    directory: Path

    @classmethod
    def of(cls, target_root: Path | str) -> "TargetDir":
        real = os.path.realpath(target_root)
        key = hashlib.sha256(os.fsencode(real)).hexdigest()[:16]
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

    def check(self) -> None:
        """WriteFailed unless this target's folder, targets/ and the state directory can be trusted."""
        check_trusted(state_dir(), targets_dir(), self.directory)

    def pending(self) -> bool:
        """An interrupted transaction waits for recovery."""
        return os.path.lexists(self.journal / JOURNAL_NAME)


def all_target_dirs() -> list[TargetDir]:
    """Every target that has state (records, a journal) in this state directory (WriteFailed when the
    state directory is one another user could have written: ``check_trusted``)."""
    check_trusted(state_dir(), targets_dir())
    try:
        names = sorted(os.listdir(targets_dir()))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [TargetDir(targets_dir() / name) for name in names]


# -- trust: the state directory steers writes and deletes, so another user must not have written it ----

STATE_DIR_MODE = 0o755  # what we create: never writable by group or others, whatever the umask


def trust_problem(directory: Path | str) -> str | None:
    """Why a directory of the state tree cannot be trusted (None: it can, or it does not exist yet): a
    symbolic link, not a directory, owned by another user than this one or root, writable by group or
    others (another local user could plant records, journals or links there)."""
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid not in (os.geteuid(), 0):
        return f"is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()}) or root"
    if info.st_mode & 0o022:
        who = "group and others" if info.st_mode & 0o022 == 0o022 else "group" if info.st_mode & 0o020 else "others"
        return f"is writable by {who} (mode {info.st_mode & 0o7777:o})"
    return None


def check_trusted(*directories: Path | str) -> None:
    """WriteFailed (exit 6) naming the first directory of the state tree that cannot be trusted."""
    from vllm_hotfix.errors import WriteFailed

    for directory in directories:
        problem = trust_problem(directory)
        if problem is not None:
            raise WriteFailed(f"{directory}: {problem}; vllm-hotfix keeps records, journals and backups only where "
                              f"no other user can write", hint=f"`chmod go-w {directory}` and own it (`chown`), or set "
                              f"{STATE_DIR_ENV} to a directory of your own (README: Running with a shared state directory)")


def make_target_dir(tdir: TargetDir) -> None:
    """Create the state directory, targets/ and the target's folder (mode 0o755 each), then check them."""
    for directory in (state_dir(), targets_dir(), tdir.directory):
        try:
            os.mkdir(directory, STATE_DIR_MODE)
        except FileExistsError:
            pass
        except FileNotFoundError:
            os.makedirs(directory, STATE_DIR_MODE, exist_ok=True)
    check_trusted(state_dir(), targets_dir(), tdir.directory)


def cache_dir() -> Path:
    explicit = os.environ.get("HOTFIX_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "vllm-hotfix"


def read_own_file(path: Path | str, *, limit: int) -> bytes | None:
    """The bytes of one of our own files (a record, a journal, a lock), read as input: a regular file,
    not through a symlink (O_NOFOLLOW), never blocking on a FIFO or device (O_NONBLOCK, checked with
    fstat before reading), at most ``limit`` bytes. None when it does not exist. OSError for a file that
    cannot be read; ``InvalidInput`` for one that is not a regular file or is larger than ``limit``."""
    from vllm_hotfix.errors import InvalidInput

    flags = os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise InvalidInput(f"{path}: is a symbolic link; vllm-hotfix reads its own files only as regular files",
                               hint="remove the link (someone else may have planted it)") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInput(f"{path}: not a regular file", hint="remove it; vllm-hotfix writes regular files there")
        if info.st_size > limit:
            raise InvalidInput(f"{path}: {info.st_size} bytes, more than the {limit >> 20} MiB such a file may have",
                               hint="this is not a file vllm-hotfix wrote; move it aside")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise InvalidInput(f"{path}: grew past {limit >> 20} MiB while being read", hint="move it aside")
        return b"".join(chunks)
    finally:
        os.close(fd)
