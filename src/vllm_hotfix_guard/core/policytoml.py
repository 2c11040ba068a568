"""A strict reader for the part of TOML a trust policy uses, on the standard library of every Python.

The guard reads the trust policy inside vLLM processes on Python 3.10 too, where ``tomllib`` does not
exist and no third-party package (tomli) may be imported; and importing tomllib costs more than this.
So the policy has one reader everywhere, for exactly this subset of TOML 1.0:

- ``key = value`` lines with bare keys (``A-Za-z0-9_-``); comments (``#``) and blank lines;
- values: basic strings ``"..."`` (escapes ``\\b \\t \\n \\f \\r \\" \\\\ \\uXXXX \\UXXXXXXXX``), literal
  strings ``'...'``, decimal integers (``_`` between digits, no leading zero), ``true`` / ``false``;
- ``[[name]]`` headers: an array of tables, whose tables hold ``key = value`` lines.

Everything else TOML allows (dotted keys, quoted keys, ``[table]``, inline tables, arrays, floats,
dates, multi-line strings, hex integers) is refused with the line and a word on what to write
instead: never read differently from tomllib. ``tests/core/test_policytoml.py`` checks it against
tomllib on valid and invalid documents.
"""

from __future__ import annotations

from typing import Any

from vllm_hotfix_guard.errors import InvalidInput

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_DIGITS = frozenset("0123456789")
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}
SUBSET = "strings, integers, true/false and [[name]] tables"


def loads(text: str, source: str) -> dict[str, Any]:
    """``text`` as tomllib would read it, for documents inside the subset; InvalidInput naming the
    line otherwise."""
    top: dict[str, Any] = {}
    table = top
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw[:-1] if raw.endswith("\r") else raw
        where = f"{source}: line {number}"
        if "\r" in line or any(c < " " and c != "\t" or c == "\x7f" for c in line):
            raise InvalidInput(f"{where}: control characters are not allowed in TOML")
        stripped = line.strip(" \t")
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("["):
            table = _header(stripped, top, where)
            continue
        key, sep, rest = stripped.partition("=")
        key = key.strip(" \t")
        if not sep:
            raise InvalidInput(f"{where}: expected `key = value` or a [[table]] header")
        if not key or not _BARE.issuperset(key):
            raise InvalidInput(f"{where}: {key!r}: only bare keys (letters, digits, '_', '-') are read in a trust policy")
        value, tail = _value(rest.strip(" \t"), where)
        tail = tail.strip(" \t")
        if tail and not tail.startswith("#"):
            raise InvalidInput(f"{where}: unexpected text after the value: {tail[:20]!r}")
        if key in table:
            raise InvalidInput(f"{where}: {key!r} is defined twice")
        table[key] = value
    return top


def _header(text: str, top: dict, where: str) -> dict:
    body, _, tail = text.partition("]]")
    tail = tail.strip(" \t")
    if not text.startswith("[[") or not _ or (tail and not tail.startswith("#")):
        raise InvalidInput(f"{where}: only [[name]] headers (arrays of tables) are read in a trust policy "
                           f"({SUBSET})")
    name = body[2:].strip(" \t")
    if not name or not _BARE.issuperset(name):
        raise InvalidInput(f"{where}: [[{name}]]: only bare table names are read in a trust policy")
    existing = top.setdefault(name, [])
    if not isinstance(existing, list) or (existing and not isinstance(existing[0], dict)):
        raise InvalidInput(f"{where}: [[{name}]]: {name!r} is already defined as a value")
    existing.append({})
    return existing[-1]


def _value(text: str, where: str) -> tuple[Any, str]:
    """The value at the start of ``text`` and what follows it."""
    if text.startswith('"""') or text.startswith("'''"):
        raise InvalidInput(f"{where}: multi-line strings are not read in a trust policy ({SUBSET})")
    if text.startswith('"'):
        return _basic(text, where)
    if text.startswith("'"):
        end = text.find("'", 1)
        if end < 0:
            raise InvalidInput(f"{where}: unterminated string")
        return text[1:end], text[end + 1:]
    word, _, tail = text.partition("#")
    word = word.strip(" \t")
    tail = ("#" + tail) if _ else ""
    if word in ("true", "false"):
        return word == "true", tail
    digits = word[1:] if word[:1] in "+-" else word
    plain = digits.replace("_", "")
    if (plain and _DIGITS.issuperset(plain) and not digits.startswith("_") and not digits.endswith("_")
            and "__" not in digits and (plain == "0" or not plain.startswith("0")) and len(plain) <= 18):
        return int(word.replace("_", "")), tail
    raise InvalidInput(f"{where}: {word[:40]!r}: not a value a trust policy holds ({SUBSET})")


def _basic(text: str, where: str) -> tuple[str, str]:
    out = []
    i = 1
    while i < len(text):
        c = text[i]
        if c == '"':
            return "".join(out), text[i + 1:]
        if c == "\\":
            code = text[i + 1:i + 2]
            if code in _ESCAPES:
                out.append(_ESCAPES[code])
                i += 2
                continue
            if code in ("u", "U"):
                size = 4 if code == "u" else 8
                digits = text[i + 2:i + 2 + size]
                if len(digits) == size and all(d in "0123456789abcdefABCDEF" for d in digits):
                    point = int(digits, 16)
                    if point <= 0x10FFFF and not 0xD800 <= point <= 0xDFFF:
                        out.append(chr(point))
                        i += 2 + size
                        continue
            raise InvalidInput(f"{where}: invalid escape in a string")
        out.append(c)
        i += 1
    raise InvalidInput(f"{where}: unterminated string")
