"""The lock's optional ``code`` of a locked file (issue 35): the functions, methods and classes its fix
changes, and a fingerprint of each one's code for one interpreter (core/codeprint.py computes them;
flow/export_plan.py writes them; the guard and ``verify --lock`` read them). txn/hotfix_lock.py reads a lock and
calls ``read_code`` only when a file has the field. Stdlib only: the guard's path.
"""

from __future__ import annotations

from typing import Any, Optional

from vllm_hotfix_guard.core.docfields import Fields, is_identifier
from vllm_hotfix_guard.values import Value


class LockedName(Value):
    """A function, method or class a locked hotfix's hunks touch in one file (core/codeprint.py)."""

    name: str  # qualified name in the file's module: "MambaHybridModelState.add_request"
    kind: str  # core.codeprint.KINDS: "function", "method", "class"
    fingerprint: Optional[str]  # of its code compiled from the file that runs (None: not defined there)


class LockedCode(Value):
    """What a locked file's fix changes in code, and for which interpreter the fingerprints hold."""

    interpreter: str  # the cache tag of the interpreter export compiled in: "cpython-311"
    names: tuple[LockedName, ...]

    def describe(self) -> str:
        """One line: the names and kinds, and the interpreter of the fingerprints (export, verify --lock)."""
        from vllm_hotfix_guard.output import quote_path

        names = ", ".join(f"{quote_path(n.name)} ({n.kind})" for n in self.names) or \
            "no function, method or class (module-level lines only)"
        return f"code: {names} [fingerprints for {quote_path(self.interpreter)}]"

    def to_json(self) -> dict:
        return {"interpreter": self.interpreter,
                "names": [{"name": n.name, "kind": n.kind, "fingerprint": n.fingerprint} for n in self.names]}


CODE_NAMES_LIMIT = 512  # names one file's fix can touch; more is not a hotfix
KINDS = ("class", "method", "function")  # core.codeprint.KINDS (not imported: the guard's path)


def read_code(f: Fields, doc: Any, where: str, path: str) -> LockedCode:
    """A file's ``code``: the interpreter (a cache tag) and the touched names, each a dotted identifier
    of a Python file's module, once, with a kind and a fingerprint (64 hex) or null."""
    doc = f.mapping(doc, where)
    interpreter = f.text(doc, where, "interpreter", limit=32)
    if not interpreter or not all(c.isascii() and (c.isalnum() or c in "_.-") for c in interpreter):
        raise f.fail(f.at(where, "interpreter"), f"not an interpreter cache tag: {interpreter!r}")
    if not path.endswith(".py"):
        raise f.fail(where, f"{path!r} is not a Python file: it has no code names")
    return LockedCode(interpreter, read_names(f, f.get(doc, where, "names", list), f.at(where, "names")))


def read_names(f: Fields, items: Any, where: str) -> tuple[LockedName, ...]:
    """A list of touched names (a lock's ``code.names``, a record's ``code[path]``): each a qualified
    name once, with a kind and a fingerprint (64 hex) or none."""
    items = f.items(items, where)
    if len(items) > CODE_NAMES_LIMIT:
        raise f.fail(where, f"{len(items)} names, at most {CODE_NAMES_LIMIT}")
    names, seen = [], set()
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        item = f.mapping(item, at)
        name = f.text(item, at, "name", limit=512)
        if not all(is_identifier(part) for part in name.split(".")):
            raise f.fail(f.at(at, "name"), f"not a qualified name: {name!r}")
        if name in seen:
            raise f.fail(f.at(at, "name"), f"{name!r} is named twice")
        seen.add(name)
        kind = f.text(item, at, "kind", limit=16)
        if kind not in KINDS:
            raise f.fail(f.at(at, "kind"), f"expected one of {', '.join(KINDS)}, got {kind!r}")
        if kind == "method" and "." not in name:
            raise f.fail(f.at(at, "kind"), f"a method is named Class.method, got {name!r}")
        names.append(LockedName(name, kind, f.sha256(item, at, "fingerprint", required=False)))
    return tuple(names)


# -- a record's code (txn/state.py): the names only; the guard fingerprints the verified file itself ----

RecordCode = tuple  # ((path, (LockedName, ...)), ...) in the record's file order: what `hotfix apply` named


def read_record_code(f: Fields, doc: Any, where: str, paths: tuple) -> Optional[RecordCode]:
    """A record's ``code`` ({path: [{name, kind}]} for the Python files of its hotfix that parse), or None
    for a record written before it was kept. Each path is one of the record's own files."""
    if doc is None:
        return None
    doc = f.mapping(doc, where)
    out = []
    for path in paths:
        if path in doc:
            names = read_names(f, doc[path], f.at(where, path))
            out.append((path, tuple(LockedName(n.name, n.kind, None) for n in names)))
    for path in doc:
        if path not in paths or not str(path).endswith(".py"):
            raise f.fail(f.at(where, path), f"{path!r} is not a Python file this hotfix changed")
    return tuple(out)


def record_code_json(code: Optional[RecordCode]) -> Optional[dict]:
    """A record's ``code`` as state.json holds it (None: not kept)."""
    if code is None:
        return None
    return {path: [{"name": n.name, "kind": n.kind} for n in names] for path, names in code}


class CodeFile(Value):
    """A file of a code check (the shape of txn/hotfix_lock.LockedFile that the guard's code check reads)."""

    path: str
    code: Optional[LockedCode]


class CodeHotfix(Value):
    id: str
    files: tuple  # CodeFile, in the order of the check's files


class CodeCheck(Value):
    """A recorded hotfix's names as the guard's code check takes them (vllm_hotfix_guard/code.start, as
    for txn/lock_check.HotfixCheck): the names of each file, and each file as judged now (core.verdict.FileCheck)."""

    hotfix: CodeHotfix
    files: tuple


def record_check(hotfix_id: str, code: RecordCode, files: tuple) -> CodeCheck:
    """The code check of a recorded hotfix judged in effect: its kept names, no fingerprints (the guard
    compiles the verified file itself: code.py's rule when a lock's fingerprints are not for this interpreter)."""
    by_path = dict(code)
    return CodeCheck(CodeHotfix(hotfix_id, tuple(CodeFile(f.path, LockedCode("", by_path[f.path]) if f.path in by_path
                                                         else None) for f in files)), tuple(files))
