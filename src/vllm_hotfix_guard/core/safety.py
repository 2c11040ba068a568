"""Pure path checks for paths taken from a patch: git's ``verify_path``. The symlink half lives in
install/tree.py.

The rule is git's (read-cache.c ``verify_path`` with ``core.protectNTFS`` and ``core.protectHFS`` both
on, so that a patch refused by git on any platform is refused here): a path is relative, has no
empty, ``.`` or ``..`` component, and no component that a file system could take for ``.git``:

- ``.git`` in any case;
- NTFS: ``.git`` or its short name ``git~1`` (any case), followed only by dots and spaces, or by a
  ``:`` stream name (``.git::$INDEX_ALLOCATION``); a backslash separates components there too;
- HFS+: ``.git`` with any of the Unicode code points HFS+ ignores (zero-width joiners, direction
  marks, U+FEFF) anywhere in it.
"""

from __future__ import annotations

from vllm_hotfix_guard.errors import Refused

_HINT = "patches may only name files under the target root, outside .git; check where this patch came from"

# utf8.c next_hfs_char: code points HFS+ drops when it compares names.
_HFS_IGNORED = dict.fromkeys((0x200C, 0x200D, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E,
                              0x206A, 0x206B, 0x206C, 0x206D, 0x206E, 0x206F, 0xFEFF))
# path.c is_ntfs_dotgit: '.git' or 'git~1', then only dots and spaces up to the end or a ':' stream. Compiled on
# first use (_ntfs): the guard checks every locked path in every vLLM process, and no vLLM path holds "git".
_NTFS_DOTGIT = r"(?:\.git|git~1)[. ]*(?::|\Z)"
_NTFS_SUSPECT = r"\.git|git~1"
_compiled: list = []


def _ntfs():
    """(suspect, dotgit): the two patterns above, compiled once (ASCII, ignoring case)."""
    if not _compiled:
        import re

        _compiled.extend(re.compile(p, re.IGNORECASE | re.ASCII) for p in (_NTFS_SUSPECT, _NTFS_DOTGIT))
    return _compiled


def _is_hfs_dotgit(component: str) -> bool:
    """``component`` reads as '.git' once HFS+'s ignored code points are dropped. A byte that is not
    UTF-8 (a surrogate escape here) ends the name, as git's reader does."""
    folded = []
    for char in component:
        point = ord(char)
        if point in _HFS_IGNORED:
            continue
        if 0xDC80 <= point <= 0xDCFF:
            break
        folded.append(char)
        if len(folded) > 4:
            return False
    name = "".join(folded)
    return name.isascii() and name.lower() == ".git"


def invalid_path_reason(path: str) -> str | None:
    """Why git's ``verify_path`` refuses ``path`` (a stripped patch name), or None when it is valid."""
    if not path:
        return "empty path"
    if "\0" in path:
        return "it contains a NUL byte"
    if path.startswith("/"):
        return "it is absolute"
    components = path.split("/")
    for index, component in enumerate(components):
        if not component:
            return "it ends with '/'" if index == len(components) - 1 else "it has an empty component ('//')"
        if component in (".", ".."):
            return f"a '{component}' component"
        if len(component) == 4 and component.isascii() and component.lower() == ".git":
            return "a '.git' component"
        # both patterns hold "git" (ASCII letters, any case): a component without it in any case cannot match
        if "git" in component.lower() and _ntfs()[0].search(component):
            for piece in component.split("\\"):
                if _ntfs()[1].match(piece):
                    return f"'{piece}' is '.git' on NTFS"
        if "." in component and not component.isascii() and _is_hfs_dotgit(component):
            return "a component that is '.git' on HFS+ (it holds characters HFS+ ignores)"
    return None


_ACCEPTED: set[str] = set()  # paths found valid: a 1,000-file apply checks each one 3-4 times (parse, plan, read, commit)
_ACCEPTED_MAX = 1 << 16


def check_patch_path(path: str) -> None:
    """Refuse (exit 3) what git apply refuses as "invalid path '...'"."""
    if path in _ACCEPTED:  # the answer depends on the string alone
        return
    why = invalid_path_reason(path)
    if why is not None:
        raise Refused(f"invalid path {_shown(path)}: {why}", hint=_HINT)
    if len(_ACCEPTED) < _ACCEPTED_MAX:
        _ACCEPTED.add(path)


def _shown(path: str) -> str:
    from vllm_hotfix_guard.output import quote_path  # a refusal only: the guard's path never needs it

    quoted = quote_path(path)
    return quoted if quoted.startswith('"') else f"'{quoted}'"
