"""The guard's per-container caches under ``$HOTFIX_READY_DIR`` -- the trust verdicts (trust.py) and the lock
verdicts (lock_cache.py) -- as one rule for where an entry may live and how it is read and written. Stdlib
only, nothing of the guard imported: a cache hit is the cheap path of every vLLM process after a container's first.

- **The directory** (``private_dir``): ``$HOTFIX_READY_DIR/NAME``, created 0700; usable only as a real
  directory (no link) owned by this process's user with no permission for group or others, judged on its
  open descriptor. Every entry is opened, written and renamed relative to that descriptor, so a link or a
  rename in a 0777 ready directory (an emptyDir) cannot send a read or a write elsewhere (issue 45).
- **An entry** (``read_entry``): a regular file there, opened without following links or blocking, owned by
  this user, no permission for group or others, one link, at most ``limit`` bytes. Anything else reads as
  no entry: the caller derives its verdict again and writes the entry anew.
- **A write** (``store_entry``): a 0600 file under a temporary name, renamed into place (a reader sees a whole
  entry or none). A failure only costs the next process a derivation.
- **The container** (``container_identity``): the boot id and the start time of the pid namespace's first
  process, part of every key, so an entry left in a volume before this container started matches nothing.
"""

from __future__ import annotations

import os
from typing import Optional

from vllm_hotfix_guard.settings import READY_DIR_ENV

_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class CacheDir:
    """A cache directory as checked: ``fd`` is the descriptor of the very directory judged (a path-like; plain, not a
    pathlib path: a hit in every vLLM process makes one)."""

    __slots__ = ("path", "fd")

    def __init__(self, path: str) -> None:
        self.path, self.fd = path, -1

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path


def private_dir(name: str, *, create: bool = True) -> Optional[CacheDir]:
    """``$HOTFIX_READY_DIR/name``, created 0700 (``create``), when it is fit to hold entries (see the module); None:
    no cache (or none yet)."""
    import stat

    ready = os.environ.get(READY_DIR_ENV, "")
    if not ready or not os.path.isabs(ready) or "\0" in ready:
        return None
    directory = CacheDir(os.path.join(ready, name))
    if create:
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    info = os.fstat(fd)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        os.close(fd)
        return None
    directory.fd = fd
    return directory


def dir_fd(directory) -> Optional[int]:
    return getattr(directory, "fd", None) if getattr(directory, "fd", -1) >= 0 else None


def read_entry(directory: CacheDir, name: str, limit: int) -> Optional[bytes]:
    """The bytes of a fit entry ``name`` in ``directory`` (see the module), else None."""
    import stat

    where = dir_fd(directory)
    if where is None:
        return None
    try:
        fd = os.open(name, _OPEN, dir_fd=where)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077 \
                or info.st_nlink != 1 or info.st_size > limit:
            return None
        raw = os.read(fd, limit + 1)
        return raw if len(raw) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def store_entry(directory: CacheDir, name: str, data: bytes) -> None:
    """Leave ``data`` as entry ``name`` (see the module); never raises."""
    where = dir_fd(directory)
    if where is None:
        return
    tmp = f".{name}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600,
                     dir_fd=where)
    except OSError:
        return
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=where, dst_dir_fd=where)
    except OSError:
        try:
            os.unlink(tmp, dir_fd=where)
        except OSError:
            pass


def container_identity() -> bytes:
    """The boot id and the start time (clock ticks since boot) of pid 1 as this process sees it: different
    for every container start, unknown before it (empty where /proc does not say)."""
    parts = []
    for name in ("/proc/sys/kernel/random/boot_id", "/proc/1/stat"):
        try:
            with open(name, "rb") as fh:
                text = fh.read(4096)
        except OSError:
            text = b""
        if name.endswith("stat"):
            fields = text[text.rfind(b")") + 2:].split()
            text = fields[19] if len(fields) > 19 else b""  # field 22, starttime
        parts.append(text.strip())
    return b"\0".join(parts)
