"""Pure path checks for paths taken from a patch. The symlink half lives in target/tree.py."""

from __future__ import annotations

import posixpath

from vllm_hotfix.errors import Refused

_HINT = "patches may only name files under the target root; check where this patch came from"


def check_relative_path(path: str) -> None:
    """Refuse an empty or absolute path, a NUL byte, or a path that leaves the root after normalisation."""
    if not path:
        raise Refused("unsafe path in patch: empty path", hint=_HINT)
    if "\0" in path:
        raise Refused(f"unsafe path in patch: {path!r} contains a NUL byte", hint=_HINT)
    if path.startswith("/"):
        raise Refused(f"unsafe path in patch: {path!r} is absolute", hint=_HINT)
    normal = posixpath.normpath(path)
    if normal == "." or normal == ".." or normal.startswith("../"):
        raise Refused(f"unsafe path in patch: {path!r} escapes the target root", hint=_HINT)


def normalised_relative_path(path: str) -> str:
    """``check_relative_path`` then the normal form ('a/./b' -> 'a/b')."""
    check_relative_path(path)
    return posixpath.normpath(path)
