"""Reading our own JSON documents (state.json, journal.json, hotfix.lock) as validated data.

Pure and stdlib only (the guard reads records and locks inside every vLLM process). Every problem is
one ``InvalidInput`` naming the file and the key path, in the style of packaging's pylock
(``state.json: series[1].files[0].after_sha256: expected 64 lowercase hex digits``); what passes is
confined: paths are relative, without ``..``, ``.`` or empty components, ids follow one rule.
"""

from __future__ import annotations

from typing import Any, Optional

from vllm_hotfix_guard.errors import InvalidInput

# The three shapes below are checked with str methods, not regular expressions: compiling the three
# patterns cost ~0.2 ms in every vLLM process (the guard reads locks and records with this module).
_HEX = frozenset("0123456789abcdef")
_ID_TAIL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-")


def is_hex64(value: str) -> bool:
    """64 lowercase hex digits (a sha256)."""
    return len(value) == 64 and _HEX.issuperset(value)


def is_commit(value: str) -> bool:
    """A full git object name as git writes it: 40 (sha1) or 64 (sha256 repository) lowercase hex digits."""
    return len(value) in (40, 64) and _HEX.issuperset(value)


def is_record_id(value: str) -> bool:
    """A recorded hotfix id: a catalog id, or an ad-hoc diff's name (a file stem: '.' and '_' too), i.e.
    ``[A-Za-z0-9][A-Za-z0-9._+-]{0,127}``. It names a folder of the state directory (backups/<id>,
    patches/<id>) and is printed in guard lines."""
    return 0 < len(value) <= 128 and value[0].isascii() and value[0].isalnum() and _ID_TAIL.issuperset(value)


def is_identifier(value: str) -> bool:
    """An ASCII identifier, ``[A-Za-z_][A-Za-z0-9_]*``: one part of an import name (what the guard hands
    to find_spec; only the top level is looked up)."""
    return value.isascii() and value.isidentifier()


class Fields:
    """Typed access to one document's fields, naming the key path in every error."""

    __slots__ = ("source",)

    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, problem: str) -> InvalidInput:
        return InvalidInput(f"{self.source}: {where or 'top level'}: {problem}")

    @staticmethod
    def at(where: str, key: Any) -> str:
        if isinstance(key, int):
            return f"{where}[{key}]"
        return f"{where}.{key}" if where else str(key)

    def mapping(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, got {_kind(value)}")
        return value

    def items(self, value: Any, where: str) -> list:
        if not isinstance(value, list):
            raise self.fail(where, f"expected an array, got {_kind(value)}")
        return value

    def get(self, doc: dict, where: str, key: str, kind: type | tuple, *, required: bool = True,
            default: Any = None) -> Any:
        path = self.at(where, key)
        value = doc.get(key)
        if value is None:
            if required:
                raise self.fail(path, "missing")
            return default
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise self.fail(path, f"expected {names}, got {_kind(value)}")
        return value

    def text(self, doc: dict, where: str, key: str, *, required: bool = True, limit: int = 4096) -> Optional[str]:
        value = self.get(doc, where, key, str, required=required)
        if value is not None and (len(value) > limit or "\x00" in value):
            raise self.fail(self.at(where, key), f"not a plausible value ({len(value)} characters)")
        return value

    def sha256(self, doc: dict, where: str, key: str, *, required: bool = True) -> Optional[str]:
        """A hex sha256, or None when the key is absent / null and not ``required`` (absent file)."""
        value = self.get(doc, where, key, str, required=required)
        if value is not None and not is_hex64(value):
            raise self.fail(self.at(where, key), "expected 64 lowercase hex digits")
        return value

    def commit(self, doc: dict, where: str, key: str, *, required: bool = True) -> Optional[str]:
        """A full git commit id (``is_commit``), or None when absent / null and not ``required``."""
        value = self.get(doc, where, key, str, required=required)
        if value is not None and not is_commit(value):
            raise self.fail(self.at(where, key), f"expected 40 or 64 lowercase hex digits, got {value!r}")
        return value

    def relpath(self, doc: dict, where: str, key: str, *, required: bool = True) -> Optional[str]:
        """A relative posix path confined below its base (``relpath_problem``: no absolute path, '..', '.',
        empty component, '.git' in any spelling, or NUL)."""
        value = self.text(doc, where, key, required=required)
        if value is not None:
            problem = relpath_problem(value)
            if problem:
                raise self.fail(self.at(where, key), f"unsafe path {value!r} ({problem})")
        return value

    def record_id(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not is_record_id(value):
            raise self.fail(where, f"not a hotfix id: {value!r}")
        return value

    def package(self, doc: dict, where: str, key: str, *, required: bool = True) -> Optional[str]:
        value = self.text(doc, where, key, required=required)
        if value is not None and not all(is_identifier(part) for part in value.split(".")):
            raise self.fail(self.at(where, key), f"not an import name: {value!r}")
        return value

    def version(self, doc: dict, where: str, key: str = "version") -> int | str:
        value = self.get(doc, where, key, (int, str))
        if isinstance(value, str) and (not value or len(value) > 64 or not value.isprintable() or " " in value):
            raise self.fail(self.at(where, key), f"not a version: {value!r}")
        if isinstance(value, int) and not 0 <= value < 10 ** 9:
            raise self.fail(self.at(where, key), f"not a version: {value}")
        return value


def relpath_problem(value: str) -> Optional[str]:
    """Why ``value`` is not a safe relative posix path, or None: the one path rule, the one a patch's paths
    are written by (core/safety.invalid_path_reason, git's verify_path), so that whatever the tool writes
    and records it reads back (issue 45: a backslash is a character of a name, as git has it)."""
    from vllm_hotfix_guard.core.safety import invalid_path_reason

    return invalid_path_reason(value)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), type(value).__name__)
