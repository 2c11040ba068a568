"""Crash-safe replacement of one file: temp file beside it, fsync, os.replace, fsync the directory."""

from __future__ import annotations

import os
from pathlib import Path

TEMP_SUFFIX = ".hotfix-tmp"


def _read_umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


UMASK = _read_umask()


def temp_path_for(path: str | os.PathLike, tag: str) -> str:
    """The temp file beside ``path`` used while replacing it (``tag`` makes it unique per writer)."""
    directory, name = os.path.split(os.fspath(path))
    return os.path.join(directory, f".{name}.{tag}{TEMP_SUFFIX}")


def unlink_if_present(path: str | os.PathLike) -> None:
    """Remove ``path`` if it exists. A missing file is never an error, whatever errno the file system
    gives for it: on a read-only mount unlink reports EROFS before it looks the name up."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError:
        if os.path.lexists(path):
            raise


def write_new_file(path: str | os.PathLike, data: bytes, mode: int, *, fsync: bool = True) -> None:
    """Create ``path`` (which must not exist) holding ``data`` with permission bits ``mode``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode & 0o777)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if mode & 0o7777 != mode & 0o777 & ~UMASK:  # bits the umask took away, or setuid/sticky
            os.fchmod(fd, mode)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def copy_new_file(source: str | os.PathLike, path: str | os.PathLike, mode: int = 0o644, *, fsync: bool = False) -> None:
    """Create ``path`` (which must not exist) holding the bytes of ``source``, with permission bits ``mode``
    from the start whatever the umask (``shutil.copyfile`` makes 0666 under umask 000, and a file that is
    writable by others even for a moment can be opened for writing and kept open)."""
    import shutil

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode & 0o777)
    try:
        if mode & 0o7777 != mode & 0o777 & ~UMASK:
            os.fchmod(fd, mode)
        with open(source, "rb") as src, os.fdopen(os.dup(fd), "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        if fsync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        fd = -1
        unlink_if_present(path)
        raise
    finally:
        if fd != -1:
            os.close(fd)


def fsync_dir(directory: str | os.PathLike) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace (or create) ``path`` with ``data`` so that a reader or a crash sees old or new, never half.

    ``mode`` defaults to the existing file's permission bits, else 0o644. No temp file is left behind on error.
    """
    path = Path(path)
    if mode is None:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    temp = temp_path_for(path, f"{os.getpid()}")
    try:
        unlink_if_present(temp)
        write_new_file(temp, data, mode)
        os.replace(temp, path)
    except BaseException:
        try:
            unlink_if_present(temp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)
