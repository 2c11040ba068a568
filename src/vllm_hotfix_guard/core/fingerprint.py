"""One short digest of what is in effect, identical on every node and in every process that loads the same bytes.

Pure and stdlib only: `verify`, `verify --lock`, `status --json` and the in-process guard
(vllm_hotfix_guard/plugin.py, inside every vLLM process) all call ``fingerprint``, so equal installs print
equal fingerprints whatever their paths, and one differing byte in one patched file changes it.

What goes in, in this order (the canonical text, UTF-8, lines joined by "\\n" with a final "\\n"):

    vllm-hotfix-fingerprint/2
    hotfix <id> <version> <distribution> <installed version>
    file <path> <sha256>
    ...

- one ``hotfix`` line per hotfix, grouped by distribution (sorted by name) and, within one, in series
  order -- the order they were applied (a record) or exported (a lock): the same files patched in
  another order are another fingerprint; after each hotfix its ``file`` lines sorted by path;
- ``version`` is the hotfix's version as written in the manifest / lock (``str()``);
- ``distribution`` and ``installed version`` are those of the baseline the files are in (the
  distribution the hotfix targets and the version installed there; ``-`` when unknown);
- ``path`` is relative to site-packages (or the checkout root), posix;
- ``sha256`` is the hex digest of the bytes found there *now* (``-``: absent or not read).

No absolute path, host name, time or state word goes in. The fingerprint is ``hf1-`` followed by the
first 16 hex digits of the sha256 of that text; ``NONE`` (``hf1-none``) when there is no hotfix.
(``/2``: the series order; ``/1`` sorted hotfixes by id. The ``hf1-`` prefix names the digest's form.)
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Optional

from vllm_hotfix_guard.values import Value

FORMAT = "vllm-hotfix-fingerprint/2"
PREFIX = "hf1-"
NONE = PREFIX + "none"
DIGITS = 16


class Entry(Value):
    """One hotfix as found in one interpreter: its identity, its baseline, and each file's current sha256."""

    id: str
    version: object
    distribution: Optional[str]
    installed_version: Optional[str]
    files: tuple[tuple[str, Optional[str]], ...]  # (path, sha256 now or None)


def _field(value: object) -> str:
    text = "-" if value is None or value == "" else str(value)
    if text.isprintable() and text.split() == [text]:  # the common case, without a loop per character
        return text
    return "".join(ch if ch.isprintable() and not ch.isspace() else "_" for ch in text)


def canonical(entries: Iterable[Entry]) -> str:
    """The exact text that is hashed (see the module docstring)."""
    lines = [FORMAT]
    for e in sorted(entries, key=lambda e: e.distribution or ""):  # stable: the series order stays
        lines.append(f"hotfix {_field(e.id)} {_field(e.version)} {_field(e.distribution)} {_field(e.installed_version)}")
        for path, sha in sorted(e.files, key=lambda f: f[0]):
            lines.append(f"file {_field(path)} {_field(sha)}")
    return "\n".join(lines) + "\n"


def fingerprint(entries: Iterable[Entry]) -> str:
    """``hf1-`` + 16 hex digits of sha256(canonical(entries)); ``hf1-none`` for no entry."""
    entries = list(entries)
    if not entries:
        return NONE
    return PREFIX + hashlib.sha256(canonical(entries).encode("utf-8")).hexdigest()[:DIGITS]


def is_fingerprint(text: str) -> bool:
    body = text[len(PREFIX):]
    return text.startswith(PREFIX) and (body == "none" or (len(body) == DIGITS and all(c in "0123456789abcdef" for c in body)))
