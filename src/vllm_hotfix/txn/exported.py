"""The files of an export (what `hotfix export` wrote beside ``hotfix.lock``), read back as input: the one
reader compose, k8s and pack use before the bytes go into a bind mount, a ConfigMap or an image."""

from __future__ import annotations

from pathlib import Path

from vllm_hotfix.errors import InvalidInput
from vllm_hotfix.settings import LOCK_NAME
from vllm_hotfix.txn.hotfix_lock import LockedFile


def read_exported(export_dir: Path, files: tuple[LockedFile, ...], lock_path: Path) -> dict[str, bytes]:
    """The exported bytes of each of ``files`` (``LockedFile.export``, relative to ``export_dir``), by export
    path, read as input and checked against the lock's sha256 before they go into a ConfigMap, a bind mount,
    a bundle or an image: each is a regular file reached through real directories below ``export_dir`` (a
    symbolic link or a device on the way is InvalidInput), read without blocking and capped
    (``inputs.read_bounded``, EXPORT_FILE_LIMIT); a file that does not hold the lock's bytes is InvalidInput
    (exit 8) naming it. The one reader of an export's files for every command."""
    import hashlib
    import os
    import stat

    from vllm_hotfix.inputs import EXPORT_FILE_LIMIT, read_bounded
    from vllm_hotfix.output import quote_path

    hint = f"re-run `hotfix export` into {quote_path(str(export_dir))}"
    found: dict[str, bytes] = {}
    for locked in files:
        parts = locked.export.split("/")
        for depth in range(1, len(parts)):
            parent = Path(export_dir).joinpath(*parts[:depth])
            try:
                mode = os.lstat(parent).st_mode
            except OSError as exc:
                raise InvalidInput(f"{quote_path(str(parent))}: {exc.strerror} (on the way to {quote_path(locked.export)}, "
                                   f"listed in {LOCK_NAME})", hint=hint) from None
            if not stat.S_ISDIR(mode):
                what = "a symbolic link" if stat.S_ISLNK(mode) else "not a directory"
                raise InvalidInput(f"{quote_path(str(parent))}: {what}; an export is read only through its own "
                                   "directories", hint=hint)
        path = Path(export_dir).joinpath(*parts)
        try:
            data = read_bounded(path, cap=EXPORT_FILE_LIMIT, what="exported file", follow_symlinks=False, hint=hint)
        except OSError as exc:
            raise InvalidInput(f"{quote_path(str(path))}: listed in {quote_path(str(lock_path))} but not readable: "
                               f"{exc.strerror}", hint=hint) from None
        digest = hashlib.sha256(data).hexdigest()
        if digest != locked.sha256:
            raise InvalidInput(f"{quote_path(str(path))}: does not hold the bytes {quote_path(str(lock_path))} names "
                               f"(sha256 {digest[:12]}, expected {locked.sha256[:12]})", hint=hint)
        found[locked.export] = data
    return found
