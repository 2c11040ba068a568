""""May we write this target?" — answered here, once, before any transaction writes a byte.

Real containers are hostile: site-packages on a ``:ro`` mount or an immutable image layer, a state
directory on a read-only volume, in another user's HOME, or a file where a directory should be. The
transaction runner (flow/transaction.py) asks both questions before it takes the lock (state dir) and
before it keeps a backup or writes a journal (target), so a refusal changes nothing and leaves nothing.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Iterable

from vllm_hotfix_guard.errors import WriteFailed
from vllm_hotfix_guard.install.mounts import mount_points
from vllm_hotfix_guard.paths import state_dir

WRITE_HINTS = {
    errno.EROFS: "this file system is read-only (a container image?): `hotfix export ID --to DIR` writes the "
                 "patched files elsewhere and `hotfix compose` bind-mounts them read-only",
    errno.ENOSPC: "free some space there: the transaction needs room for one new copy of each changed file",
    errno.EDQUOT: "the disk quota is exhausted: the transaction needs room for one new copy of each changed file",
    errno.EBUSY: "that file is a mount point (a bind mount of a patched file?): change it where it is mounted "
                 "from (`hotfix export` + `hotfix compose`), or remove the mount first",
    errno.EACCES: "run as the user who owns the installed files (or as root)",
    errno.EPERM: "run as the user who owns the installed files (or as root)",
}


def describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        name = errno.errorcode.get(exc.errno or 0, "")
        return f"{exc.strerror} ({name})" if name else exc.strerror
    return f"{type(exc).__name__}: {exc}"


def _os_error(code: int, path: str | os.PathLike) -> OSError:
    return OSError(code, os.strerror(code), os.fspath(path))


def _refusal(directory: str | os.PathLike) -> OSError | None:
    """Why files cannot be created or replaced in the existing ``directory`` (None: they can)."""
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return _os_error(errno.EROFS, directory)
    except OSError as exc:
        return exc
    if not os.access(directory, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids):
        return _os_error(errno.EACCES, directory)
    return None


def _nearest_directory(path: str) -> str | OSError:
    """``path`` or its nearest existing ancestor; ENOTDIR if that ancestor is not a directory."""
    while not os.path.lexists(path) and path != os.path.dirname(path):
        path = os.path.dirname(path)
    return path if os.path.isdir(path) else _os_error(errno.ENOTDIR, path)


def state_dir_writable(target_state: Path, *, create: bool = True) -> None:
    """Create ``target_state`` (a target's directory in the state dir) or refuse with exit 6.
    ``create=False`` (a dry run): only check that it could be created and written."""
    from vllm_hotfix_guard.paths import TargetDir, make_target_dir

    tdir = TargetDir(Path(target_state))
    try:
        if create:
            make_target_dir(tdir)  # 0o755 each, then checked: never one another user can write
        nearest = _nearest_directory(os.fspath(target_state))
        problem = nearest if isinstance(nearest, OSError) else _refusal(nearest)
    except OSError as exc:
        problem = exc
    if problem is None and not create:
        tdir.check()
    if problem is not None:
        which = "HOTFIX_STATE_DIR" if os.environ.get("HOTFIX_STATE_DIR") else "the state directory"
        raise WriteFailed(
            f"{which} {state_dir()} is not writable ({describe(problem)}); nothing was changed",
            hint="set HOTFIX_STATE_DIR to a writable directory (records, journals and backups are kept there)",
        )


def target_writable(root: Path, paths: Iterable[str]) -> None:
    """Refuse (exit 6, nothing written) if a file of ``paths`` (relative to ``root``) cannot be
    created, replaced or removed: its directory, or the nearest one that exists, is read-only or not ours."""
    root = Path(root)
    seen: set[str] = set()
    paths = list(paths)
    inside = os.path.realpath(root) + os.sep
    mounted = {point for point in mount_points() if point.startswith(inside)}
    for rel in paths if mounted else ():
        path = os.path.realpath(os.path.join(root, rel))
        if path in mounted:  # a file bind-mounted over the install: os.replace would give EBUSY
            raise WriteFailed(f"{path}: {describe(_os_error(errno.EBUSY, path))}: it is a mount point; the target is "
                              f"not writable, nothing was changed", hint=WRITE_HINTS[errno.EBUSY])
    for rel in paths:
        directory = _nearest_directory(os.path.dirname(os.path.join(root, rel)))
        if isinstance(directory, OSError):
            continue  # a file where a directory must be: the plan's own check refuses it (exit 3)
        if directory in seen:
            continue
        seen.add(directory)
        problem = _refusal(directory)
        if problem is not None:
            raise WriteFailed(f"{directory}: {describe(problem)}; the target is not writable, nothing was changed",
                              hint=WRITE_HINTS.get(problem.errno))
