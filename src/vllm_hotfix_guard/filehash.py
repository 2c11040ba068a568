"""The one bounded file hash (inputs.file_sha256 words its refusals; txn/lock_check.sha256_file and a hit of the
lock verdict cache call ``target_sha256``): never through a symbolic link, never blocking (a FIFO or device
refused), read in blocks up to a cap, so a large file costs no memory. Stdlib only and nothing of the guard
imported: a cache hit hashes every locked file in every vLLM process (lock_cache.py)."""

from __future__ import annotations

import os

MIB = 1024 * 1024
TARGET_FILE_LIMIT = 256 * MIB  # one file of a target read to plan or check (vLLM's largest .py is ~0.3 MB)
_FLAGS = (os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
          | getattr(os, "O_NOFOLLOW", 0))


def sha256_of(path, cap: int) -> tuple:
    """(hex sha256, None, size) of the regular file at ``path``; (None, why, size) when it is not one to hash
    (why: "link", "special", "large"; size: what fstat or the read found). OSError (absent, unreadable) raised."""
    import errno
    import hashlib
    import stat

    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            return None, "link", None
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO opened for writing only
            return None, "special", None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, "special", None
        if info.st_size > cap:
            return None, "large", info.st_size
        digest, size, left = hashlib.sha256(), 0, cap + 1
        while left > 0:  # a file that grows while it is read is measured by what was read
            chunk = os.read(fd, min(left, MIB))
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    return (None, "large", size) if size > cap else (digest.hexdigest(), None, size)


def target_sha256(path) -> str | None:
    """Hex sha256 of a target's regular file (a locked file); None when there is none at ``path`` (absent, a
    directory, a symlink, a FIFO or device; or over TARGET_FILE_LIMIT) -- such a file is not in effect."""
    try:
        return sha256_of(path, TARGET_FILE_LIMIT)[0]
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
