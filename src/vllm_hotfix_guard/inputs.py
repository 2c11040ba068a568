"""Bounded reads of files that are input: a regular file, opened without blocking (a FIFO or device never
hangs a command or a vLLM process), read up to a size cap, refused before it is parsed when larger (a
200 MB manifest took 47 s and 600 MB of memory, a 1.7 MB compose file 94 s, `/dev/zero` never ends).

The one reader of data files: the files a user hands us (manifests, compose files, Kubernetes manifests,
patch files: a symlink is followed, as the user meant it), the files we wrote ourselves and read back
(records, journals, locks, export files: ``follow_symlinks=False``, since a planted link must not make us
read or trust another file), and the target's own files (``install/tree.Tree.read``, through
``read_input``: the open itself refuses a link, so no lstat-then-open race). Stdlib only: the guard reads
locks and records with it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Callable

from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix_guard.filehash import TARGET_FILE_LIMIT  # noqa: F401 - with the one file hash (filehash.py)

MIB = 1024 * 1024
PATCH_LIMIT = 64 * MIB  # a patch file (--patch, --patch-file, a catalog's): seed 004's is ~1 MB, the real 0.29 -> 0.30 diff 8.5 MB
EXPORT_FILE_LIMIT = 64 * MIB  # one exported file (a ConfigMap holds at most 1 MiB anyway)
YAML_LIMIT = 4 * MIB  # a Kubernetes manifest or kustomization read by `hotfix k8s`
ARCHIVE_MEMBER_LIMIT = 64 * MIB  # one member of a wheel read into memory (a source file, a RECORD)


class Unfit(InvalidInput):
    """A file that is not one to read as data: ``why`` is "link", "special" (FIFO, device, socket,
    directory) or "large". Callers that word their own refusal (``Tree.read``) catch this."""

    def __init__(self, message: str, *, why: str, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.why = why


def size_text(n: int) -> str:
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} bytes"


def read_input(path: Path | str, *, cap: int, what: str, follow_symlinks: bool = True, hint: str | None = None,
               check: Callable[[os.stat_result], None] | None = None) -> tuple[bytes, os.stat_result]:
    """The bytes of ``path`` and the fstat of the very file read. ``Unfit`` (InvalidInput, exit 8) naming
    the file when it is larger than ``cap``, not a regular file, or (``follow_symlinks=False``) a symbolic
    link; ``check(info)`` may refuse it too (an owner rule). OSError (missing, unreadable) is left to the
    caller, which names it its way."""
    fd, info = _open_input(path, cap=cap, what=what, follow_symlinks=follow_symlinks, hint=hint, check=check)
    try:
        data = b"".join(_blocks(fd, cap))
    finally:
        os.close(fd)
    if len(data) > cap:
        raise Unfit(f"{path}: {what} is over the {size_text(cap)} a {what} may be", why="large", hint=hint)
    return data, info


def _open_input(path: Path | str, *, cap: int, what: str, follow_symlinks: bool, hint: str | None,
                check: Callable[[os.stat_result], None] | None) -> tuple[int, os.stat_result]:
    """An open descriptor of ``path`` and its fstat, refused (``Unfit``) as ``read_input`` says; the
    caller closes it."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow_symlinks and exc.errno in (errno.ELOOP, errno.EMLINK):
            raise Unfit(f"{path}: is a symbolic link; a {what} is read only as a regular file", why="link",
                        hint="remove the link (someone else may have planted it)") from None
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO opened for writing only
            raise Unfit(f"{path}: not a regular file; a {what} must be one", why="special", hint=hint) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unfit(f"{path}: not a regular file; a {what} must be one", why="special", hint=hint)
        if info.st_size > cap:
            raise Unfit(f"{path}: {what} is {size_text(info.st_size)}, over the {size_text(cap)} a {what} may be",
                        why="large", hint=hint)
        if check is not None:
            check(info)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def _blocks(fd: int, cap: int):
    """The file's bytes in blocks of at most 1 MiB, ``cap + 1`` at most: a file that grows while it is read
    is measured by what was read."""
    left = cap + 1
    while left > 0:
        chunk = os.read(fd, min(left, MIB))
        if not chunk:
            return
        yield chunk
        left -= len(chunk)


def file_sha256(path: Path | str, *, cap: int, what: str) -> str:
    """The hex sha256 of the regular file at ``path`` (filehash.sha256_of: never through a symbolic link, never
    blocking, read in blocks up to ``cap``). ``Unfit`` (why: "link", "special", "large") when it is not one to
    hash; OSError (absent, unreadable) is left to the caller. The one way a file of ours or of a target is hashed
    where its bytes are not needed."""
    from vllm_hotfix_guard.filehash import sha256_of

    digest, why, size = sha256_of(path, cap)
    if why == "link":
        raise Unfit(f"{path}: is a symbolic link; a {what} is read only as a regular file", why="link",
                    hint="remove the link (someone else may have planted it)")
    if why == "special":
        raise Unfit(f"{path}: not a regular file; a {what} must be one", why="special")
    if why == "large":
        raise Unfit(f"{path}: {what} is {size_text(size)}, over the {size_text(cap)} a {what} may be", why="large")
    return digest


def read_bounded(path: Path | str, *, cap: int, what: str, follow_symlinks: bool = True,
                 hint: str | None = None, check: Callable[[os.stat_result], None] | None = None) -> bytes:
    """``read_input`` without the fstat: the bytes of ``path`` (InvalidInput, exit 8, when unfit)."""
    return read_input(path, cap=cap, what=what, follow_symlinks=follow_symlinks, hint=hint, check=check)[0]


def read_patch_file(path: Path | str, *, what: str = "patch file", hint: str | None = None) -> bytes:
    """A patch file a user names (``--patch``, ``--patch-file``, a catalog's): a regular file (a FIFO or
    ``/dev/zero`` is refused at once), at most ``PATCH_LIMIT``; a symlink is followed, as the user meant it."""
    return read_bounded(path, cap=PATCH_LIMIT, what=what, hint=hint)
