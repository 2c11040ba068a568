"""Bounded reads of files that are input: a regular file, opened without blocking (a FIFO or device never
hangs a command or a vLLM process), read up to a size cap, refused before it is parsed when larger (a
200 MB manifest took 47 s and 600 MB of memory, a 1.7 MB compose file 94 s, `/dev/zero` never ends).

The one implementation for the files a user hands us (manifests, compose files: a symlink is followed,
as the user meant it) and for the files we wrote ourselves and read back (records, journals, locks:
``follow_symlinks=False``, since a planted link must not make us read or trust another file).
Stdlib only: the guard reads locks and records with it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from vllm_hotfix.errors import InvalidInput

MIB = 1024 * 1024


def size_text(n: int) -> str:
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} bytes"


def read_bounded(path: Path | str, *, cap: int, what: str, follow_symlinks: bool = True,
                 hint: str | None = None) -> bytes:
    """The bytes of ``path``; InvalidInput (exit 8) naming the file and the cap when it is larger, not a
    regular file, or (``follow_symlinks=False``) a symbolic link. OSError (missing, unreadable) is left to
    the caller, which names it its way."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow_symlinks and exc.errno in (errno.ELOOP, errno.EMLINK):
            raise InvalidInput(f"{path}: is a symbolic link; a {what} is read only as a regular file",
                               hint="remove the link (someone else may have planted it)") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInput(f"{path}: not a regular file; a {what} must be one", hint=hint)
        if info.st_size > cap:
            raise InvalidInput(f"{path}: {what} is {size_text(info.st_size)}, over the {size_text(cap)} a {what} "
                               f"may be", hint=hint)
        chunks = []
        left = cap + 1  # a file that grows while read is measured by what was read
        while left > 0:
            chunk = os.read(fd, min(left, MIB))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > cap:
        raise InvalidInput(f"{path}: {what} is over the {size_text(cap)} a {what} may be", hint=hint)
    return data
