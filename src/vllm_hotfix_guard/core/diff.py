"""The diff layer's API: parse (core/parse.py), reverse, filter, normalise. Pure: bytes in, data out.

Accepted: ``git diff`` / ``git show``, ``git format-patch`` mails (several commits per file),
GitHub ``.patch`` / ``.diff`` downloads, ``diff -ruN`` and other traditional unified diffs.

Lines are kept as bytes, split on ``\\n`` only, so a ``\\r`` stays part of its line and CRLF files
round-trip byte for byte. Inside a hunk the header's line counts decide where the hunk ends
(a deleted line may well start with ``--- ``), and any disagreement is an error, never a guess.
"""

from __future__ import annotations

import fnmatch
from dataclasses import replace
from typing import Sequence

from vllm_hotfix_guard.core.parse import parse_patch
from vllm_hotfix_guard.core.patchmodel import (  # noqa: F401 - the model is part of this layer's API
    HEADER_RANGES, SWAP_OPS, DiffStat, FilePatch, Hunk, HunkLine, Patch,
)


# --------------------------------------------------------------------------- transforms


def _reverse_hunk(h: Hunk) -> Hunk:
    ranges = HEADER_RANGES.match(h.header)
    header = f"@@ -{ranges[2]} +{ranges[1]} @@{h.header[ranges.end():]}" if ranges else h.header
    return Hunk(h.new_start, h.new_len, h.old_start, h.old_len, header, h.lineno,
                h.new_side, h.old_side, h.new_eof, h.old_eof, h.ops.translate(SWAP_OPS))


def _reverse_file(f: FilePatch) -> FilePatch:
    return replace(
        f, old_path=f.new_path, new_path=f.old_path, old_mode=f.new_mode, new_mode=f.old_mode,
        hunks=tuple(_reverse_hunk(h) for h in f.hunks),
        is_copy=f.is_copy, copy_reversed=f.is_copy and not f.copy_reversed, maybe_new=False,
    )


def reverse_patch(patch: Patch) -> Patch:
    """The patch that undoes ``patch``: sides swapped, files in reverse order (so series unwind)."""
    return Patch(tuple(_reverse_file(f) for f in reversed(patch.files)), patch.source)


def _matches(path: str | None, globs: Sequence[str]) -> bool:
    if path is None:
        return False
    for glob in globs:
        if fnmatch.fnmatchcase(path, glob):
            return True
        if glob.startswith("**/") and fnmatch.fnmatchcase(path, glob[3:]):
            return True
    return False


def exclude_paths(patch: Patch, globs: Sequence[str]) -> Patch:
    """Drop the files whose (stripped) old or new path matches a glob (``*`` and ``**`` cross '/')."""
    kept = tuple(f for f in patch.files if not (_matches(f.old_path, globs) or _matches(f.new_path, globs)))
    return Patch(kept, patch.source)


def _render_mode(mode: int | None) -> bytes:
    return b"%o" % mode if mode is not None else b""


def normalised_diff_bytes(data: bytes) -> bytes:
    """A canonical rendering of a diff for pinning it by hash (like Nix ``fetchpatch``).

    Keeps what changes files (paths, modes, renames, hunks) and drops what varies between tools and
    git versions: ``index`` lines, similarity scores, hunk section headings, mail headers, commit
    messages and the version trailer. Paths are kept unstripped.
    """
    patch = parse_patch(data, strip=0)
    out: list[bytes] = []
    for f in patch.files:
        old = f.old_path.encode("utf-8", "surrogateescape") if f.old_path is not None else None
        new = f.new_path.encode("utf-8", "surrogateescape") if f.new_path is not None else None
        out.append(b"diff --git %s %s" % (old or new, new or old))
        if f.old_path is None:
            out.append(b"new file mode " + _render_mode(f.new_mode))
        elif f.new_path is None:
            out.append(b"deleted file mode " + _render_mode(f.old_mode))
        elif f.old_mode != f.new_mode:
            out.append(b"old mode " + _render_mode(f.old_mode))
            out.append(b"new mode " + _render_mode(f.new_mode))
        if f.is_rename or f.is_copy:
            word = b"copy" if f.is_copy else b"rename"
            out.append(b"%s from %s" % (word, old))
            out.append(b"%s to %s" % (word, new))
        if f.hunks:
            out.append(b"--- " + (old if old is not None else b"/dev/null"))
            out.append(b"+++ " + (new if new is not None else b"/dev/null"))
        for h in f.hunks:
            out.append(h.range_header.encode())
            for line in h.lines:
                text = line.text
                if text.endswith(b"\n"):
                    out.append(line.op.encode() + text[:-1])
                else:
                    out.append(line.op.encode() + text)
                    out.append(b"\\ No newline at end of file")
    return b"\n".join(out) + b"\n"


def file_boundary_near_middle(data: bytes, *, min_bytes: int) -> int | None:
    """Where to cut a large diff into two halves that parse on their own: the start of the first
    ``diff `` line past the middle. Exact for any input, because the parser never consumes a line
    starting with ``diff `` inside a file's headers or hunks: it always restarts there. None when the
    diff is small, or does not start with ``diff `` (mail headers of a format-patch series,
    ``git show``)."""
    if len(data) < min_bytes or not data.startswith(b"diff "):
        return None
    cut = data.find(b"\ndiff ", len(data) // 2)
    return None if cut < 0 else cut + 1
