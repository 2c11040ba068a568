"""Strict reading of one TOML table: every error names the file and the key path (``patches[1].sha256``)."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any, Sequence

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from vllm_hotfix_guard.errors import InvalidInput

COMMIT_PATTERN = re.compile(r"[0-9a-f]{7,40}")

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "an array", dict: "a table"}


def type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    for kind, name in ((str, "a string"), (int, "an integer"), (float, "a float"), (list, "an array"), (dict, "a table")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


class Table:
    """One TOML table being validated; knows its key path for error messages."""

    def __init__(self, data: Any, path: str, source: str, allowed: Sequence[str]):
        self.path = path
        self.source = source
        if not isinstance(data, dict):
            raise self.error(None, f"expected a table, got {type_name(data)}")
        self.data = data
        unknown = [key for key in data if key not in allowed]
        if unknown:
            raise self.error(unknown[0], f"unknown key (allowed: {', '.join(allowed)})")

    def key_path(self, key: str | None) -> str:
        if key is None:
            return self.path or "(top level)"
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str | None, problem: str) -> InvalidInput:
        return InvalidInput(f"{self.source}: {self.key_path(key)}: {problem}")

    def has(self, key: str) -> bool:
        return key in self.data

    def value(self, key: str, kinds: tuple[type, ...], *, required: bool = False, default: Any = None) -> Any:
        if key not in self.data:
            if required:
                raise self.error(key, "missing required key")
            return default
        value = self.data[key]
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            expected = " or ".join(_TYPE_NAMES[k] for k in kinds)
            raise self.error(key, f"expected {expected}, got {type_name(value)}")
        return value

    def text(self, key: str, *, required: bool = False, default: str | None = None) -> str | None:
        value = self.value(key, (str,), required=required, default=default)
        if value is not None and key in self.data and not value.strip():
            raise self.error(key, "must not be empty")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        values = self.value(key, (list,), default=[])
        for index, item in enumerate(values):
            if not isinstance(item, str):
                raise self.error(f"{key}[{index}]", f"expected a string, got {type_name(item)}")
        return tuple(values)

    def tables(self, key: str, *, required: bool = False) -> list[tuple[str, Any]]:
        values = self.value(key, (list,), required=required, default=[])
        if required and not values:
            raise self.error(key, "needs at least one entry")
        return [(f"{self.key_path(key)}[{index}]", item) for index, item in enumerate(values)]

    def sub(self, key: str, allowed: Sequence[str]) -> Table | None:
        if key not in self.data:
            return None
        return Table(self.data[key], self.key_path(key), self.source, allowed)

    def hexdigest(self, key: str, length: int, *, required: bool = False) -> str | None:
        value = self.text(key, required=required)
        if value is not None and not re.fullmatch(f"[0-9a-f]{{{length}}}", value):
            raise self.error(key, f"expected {length} hex characters")
        return value

    def commit(self, key: str, *, required: bool = False) -> str | None:
        value = self.text(key, required=required)
        if value is not None and not COMMIT_PATTERN.fullmatch(value):
            raise self.error(key, "expected a commit id (7 to 40 lowercase hex characters)")
        return value

    def specifier(self, key: str) -> str | None:
        value = self.text(key)
        if value is not None:
            try:
                SpecifierSet(value)
            except InvalidSpecifier:
                raise self.error(key, f"invalid PEP 440 version range {value!r} (e.g. '>=0.29.0,<0.32.0')") from None
        return value

    def relative_path(self, key: str, *, required: bool = False) -> str | None:
        value = self.text(key, required=required)
        if value is not None:
            self._check_relative(key, value)
        return value

    def relative_paths(self, key: str) -> tuple[str, ...]:
        values = self.strings(key)
        for index, value in enumerate(values):
            if not value.strip():
                raise self.error(f"{key}[{index}]", "must not be empty")
            self._check_relative(f"{key}[{index}]", value)
        return values

    def _check_relative(self, key: str, value: str) -> None:
        pure = PurePosixPath(value)
        if pure.is_absolute() or ".." in pure.parts or "\\" in value:
            raise self.error(key, f"expected a relative path without '..', got {value!r}")
