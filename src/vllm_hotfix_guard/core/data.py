"""Structured input (JSON, TOML) parsed into plain values, every way it can fail turned into one
``InvalidInput`` (exit 8) naming the source. Pure; stdlib only (the guard reads the lock with it).

Beyond syntax and encoding, a parser also fails on input it was never meant to take: nesting deeper
than the interpreter's recursion limit (``[[[[...`` a hundred thousand times: RecursionError) and an
integer of more than 4300 digits (Python's int/str conversion limit: ValueError). Both are input errors.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from vllm_hotfix_guard.errors import InvalidInput


def _too_much(source: str, exc: BaseException) -> InvalidInput:
    if isinstance(exc, RecursionError):
        return InvalidInput(f"{source}: nested too deeply to read")
    return InvalidInput(f"{source}: {exc}")  # "Exceeds the limit (4300 digits) for integer string conversion..."


def _text(data: bytes, source: str, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{source}: not UTF-8{what} (byte {exc.start})") from None


def load_json(data: bytes, source: str) -> Any:
    """``data`` (UTF-8 JSON) as Python values."""
    text = _text(data, source, "")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{source}:{exc.lineno}: not JSON: {exc.msg}") from None
    except (RecursionError, ValueError) as exc:
        raise _too_much(source, exc) from None


def load_toml(data: bytes, source: str) -> dict[str, Any]:
    """``data`` (UTF-8 TOML) as a dict; syntax errors name the line and column."""
    import re

    if sys.version_info >= (3, 11):  # here: the guard reads JSON with this module, never TOML
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    text = _text(data, source, " text")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        found = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
        where = ""
        if found:
            where = f"line {found.group(1)}, column {found.group(2)}: "
            message = message[: found.start()]
        raise InvalidInput(f"{source}: {where}invalid TOML: {message}") from None
    except (RecursionError, ValueError) as exc:
        raise _too_much(source, exc) from None
