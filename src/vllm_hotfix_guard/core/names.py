"""The names side of the parser: quoted and traditional file names, -p stripping and git's -p guess,
the `diff --git` name pair. A mixin of core.parse._Parser (it reads the parser's lines and strip)."""

from __future__ import annotations

import re

from vllm_hotfix_guard.core.patchmodel import BACKSLASH, C_ESCAPES, NAME_END, TIMESTAMP
from vllm_hotfix_guard.core.safety import check_patch_path
from vllm_hotfix_guard.errors import Refused

_SLASHES = re.compile(rb"//+")


class Names:
    # ---- paths

    def _decode_name(self, raw: bytes, index: int) -> tuple[bytes, bytes]:
        """Split a leading (possibly C-quoted) name off ``raw``: (name, rest)."""
        if not raw.startswith(b'"'):
            return raw, b""
        out = bytearray()
        i = 1
        while i < len(raw):
            c = raw[i]
            if c == 34:  # closing quote
                return bytes(out), raw[i + 1:]
            if c == BACKSLASH:
                i += 1
                if i >= len(raw):
                    break
                e = raw[i]
                if 48 <= e <= 55:
                    digits = raw[i:i + 3]
                    if len(digits) != 3 or not all(48 <= d <= 55 for d in digits):
                        raise self.fail(index, f"bad octal escape in quoted path {raw.decode('utf-8', 'replace')}")
                    out.append(int(digits, 8) & 0xFF)
                    i += 3
                    continue
                if e not in C_ESCAPES:
                    raise self.fail(index, f"bad escape in quoted path {raw.decode('utf-8', 'replace')}")
                out.append(C_ESCAPES[e])
            else:
                out.append(c)
            i += 1
        raise self.fail(index, f"unterminated quoted path {raw.decode('utf-8', 'replace')}")

    def _stripped(self, name: bytes, strip: int) -> bytes | None:
        """``name`` without ``strip`` leading components, as git apply counts them: each '/' ends one, so
        '/abs/x' at -p1 is 'abs/x'. None when there are not enough components (or nothing is left)."""
        if strip:
            cut = -1
            for _ in range(strip):
                cut = name.find(b"/", cut + 1)
                if cut < 0:
                    return None
            name = name[cut + 1:]
        return name or None

    def _checked(self, rest: bytes, index: int) -> str:
        """The stripped name ``rest`` as git apply takes it: runs of '/' squashed to one (git's
        squash_slash), then refused unless git's ``verify_path`` accepts it (core/safety.py)."""
        if not rest.strip(b"/"):
            raise self.fail(index, f"no file name left in '{rest.decode('utf-8', 'replace')}' (check -p)")
        path = _SLASHES.sub(b"/", rest).decode("utf-8", "surrogateescape")
        try:
            check_patch_path(path)
        except Refused as unsafe:
            raise Refused(f"{self.source}:{index + 1}: {unsafe.message}", hint=unsafe.hint) from None
        return path

    def _strip_path(self, name: bytes, strip: int, index: int) -> str:
        rest = self._stripped(name, strip)
        if rest is None:
            shown = name.decode("utf-8", "replace")
            raise self.fail(index, f"cannot strip {strip} leading component(s) from path '{shown}' (check -p)")
        return self._checked(rest, index)

    def _header_name(self, line: bytes, index: int, traditional: bool) -> bytes | None:
        """The raw name of a ``---`` / ``+++`` line as git apply reads it; None for /dev/null.

        Quoted names are unquoted. Otherwise the name ends at a TAB (or CR, VT, FF), not at a space;
        in a traditional diff a trailing timestamp (after a TAB or spaces) is dropped first."""
        rest = line[4:]
        if rest.startswith(b'"'):
            return self._decode_name(rest, index)[0]
        if rest.startswith(b"/dev/null") and (len(rest) == 9 or rest[9:10].isspace()):
            return None
        found = TIMESTAMP.search(rest) if traditional else None
        if found:
            return rest[:found.start()]
        end = NAME_END.search(rest)
        return rest[:end.start()] if end else rest

    def _git_names(self, rest: bytes, index: int) -> tuple[bytes | None, bytes | None]:
        """The two names of a ``diff --git A B`` line; (None, None) when ambiguous."""
        if rest.startswith(b'"'):
            first, tail = self._decode_name(rest, index)
            if not tail.startswith(b" "):
                return None, None
            second, _ = self._decode_name(tail[1:], index)
            return first, second
        quoted_second = rest.find(b' "')
        if quoted_second != -1:
            second, _ = self._decode_name(rest[quoted_second + 1:], index)
            return rest[:quoted_second], second
        # Unquoted names may hold spaces: git writes "a/NAME b/NAME"; find the split where both agree.
        start = 0
        while True:
            space = rest.find(b" ", start)
            if space == -1:
                return None, None
            first, second = rest[:space], rest[space + 1:]
            if first.partition(b"/")[2] == second.partition(b"/")[2]:
                return first, second
            start = space + 1

    # ---- structure

