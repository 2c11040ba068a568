"""One writer per target: an exclusive fcntl.flock on ``<target state dir>/lock``.

The kernel drops the lock when the holder dies (even by kill -9), so a stale lock file is harmless.
The file holds the holder's pid, only to tell a waiting user who holds it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from vllm_hotfix_guard.errors import Busy
from vllm_hotfix_guard.output import note

DEFAULT_TIMEOUT = 30.0
POLL_INTERVAL = 0.05


def _holder_pid(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
    except OSError:
        return "?"


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise


def _note_holder(fd: int, pid: bytes) -> None:
    """Write the holder's pid into the lock file: information only, so a full or read-only disk is no error."""
    try:
        os.ftruncate(fd, 0)
        if pid:
            os.pwrite(fd, pid, 0)
    except OSError:
        pass


@contextmanager
def target_mutex(state_dir: Path, timeout: float = DEFAULT_TIMEOUT, *,
                on_wait: Callable[[str], None] = note) -> Iterator[None]:
    """Hold the target's exclusive lock for the ``with`` block; wait up to ``timeout`` s, then ``Busy``."""
    from vllm_hotfix_guard.errors import WriteFailed
    from vllm_hotfix_guard.paths import TargetDir, make_target_dir
    from vllm_hotfix_guard.txn.writable import WRITE_HINTS, describe

    state_dir = Path(state_dir)
    try:
        make_target_dir(TargetDir(state_dir))
    except OSError as exc:
        raise WriteFailed(f"{state_dir}: cannot create the target's state folder ({exc.strerror}); nothing was "
                          f"changed", hint="set HOTFIX_STATE_DIR to a writable directory") from None
    lock_file = TargetDir(state_dir).lock_file
    try:  # never through a symlink (a planted one would have us truncate the file it names), never a FIFO
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENXIO):  # a full or read-only state directory: nothing was changed
            raise WriteFailed(f"{exc.filename or lock_file}: {describe(exc)}; nothing was changed",
                              hint=WRITE_HINTS.get(exc.errno)) from None
        raise WriteFailed(f"{lock_file}: is a symbolic link or not a regular file; nothing was changed",
                          hint="remove it (vllm-hotfix creates a regular file there)") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise WriteFailed(f"{lock_file}: is not a regular file; nothing was changed", hint="remove it")
    try:
        if not _try_lock(fd):
            holder = _holder_pid(fd)
            on_wait(f"waiting for lock held by pid {holder} ({lock_file})")
            deadline = time.monotonic() + timeout
            while not _try_lock(fd):
                if time.monotonic() >= deadline:
                    raise Busy(
                        f"{lock_file}: still held by pid {_holder_pid(fd)} after {timeout:g} s",
                        hint="another hotfix command is working on this target; wait for it or check that pid",
                    )
                time.sleep(POLL_INTERVAL)
        _note_holder(fd, f"{os.getpid()}\n".encode())
        try:
            yield
        finally:
            _note_holder(fd, b"")
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
