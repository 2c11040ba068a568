"""The guard as its own distribution, ``vllm-hotfix-guard``: built from the guard's own source, stdlib only.

Pure: files in, files out (``build``: the file list and bytes; ``wheel_bytes``: them as a wheel). What goes in
is the import closure of ``vllm_hotfix.guard`` -- every module of that package and every ``vllm_hotfix``
module they import, at any depth, found in the syntax trees of the source (never a hand list) -- with each
``vllm_hotfix`` import rewritten to ``vllm_hotfix_guard`` at the position the tokenizer reports (nothing
else in a file changes), plus the distribution's own ``__init__.py`` (its cheap ``register``, the
``vllm.general_plugins`` entry point: a process without HOTFIX_LOCK / HOTFIX_REQUIRE imports nothing
more) and ``__main__.py`` (``python -m vllm_hotfix_guard verify|ready``). Same source, same bytes.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import sys
import tokenize
import zipfile
from dataclasses import dataclass
from pathlib import Path

from vllm_hotfix.errors import Refused

SOURCE_PACKAGE = "vllm_hotfix"
PACKAGE = "vllm_hotfix_guard"
DISTRIBUTION = "vllm-hotfix-guard"
ROOT = "vllm_hotfix.guard"  # the package whose closure is the distribution
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
WHEEL_TAG = "py3-none-any"

INIT = '''"""vllm-hotfix-guard {version}: the in-process guard of vllm-hotfix, built from its source (stdlib only).

``register`` is the ``vllm.general_plugins`` entry point: it imports the guard only when HOTFIX_LOCK or
HOTFIX_REQUIRE is set. ``python -m vllm_hotfix_guard verify`` checks HOTFIX_LOCK as `hotfix verify --lock` does.
"""

__version__ = "{version}"


def register():
    import os

    if os.environ.get("HOTFIX_LOCK", "").strip() or os.environ.get("HOTFIX_REQUIRE", "").strip():
        from vllm_hotfix_guard.guard.plugin import register as guard

        guard()
'''

MAIN = '''"""python -m vllm_hotfix_guard verify [--lock FILE] [--json] | ready ..."""

import sys

from vllm_hotfix_guard.guard.__main__ import main

sys.exit(main())
'''


@dataclass(frozen=True, slots=True, kw_only=True)
class GuardDist:
    """The distribution's files: path inside site-packages -> bytes (RECORD included, last)."""

    version: str
    files: tuple[tuple[str, bytes], ...]

    @property
    def dist_info(self) -> str:
        return f"{PACKAGE}-{self.version}.dist-info"

    @property
    def wheel_name(self) -> str:
        return f"{PACKAGE}-{self.version}-{WHEEL_TAG}.whl"

    @property
    def top(self) -> tuple[str, str]:
        """The two directories it adds to site-packages."""
        return PACKAGE, self.dist_info


def module_path(src: Path, module: str) -> Path | None:
    """The file of ``module`` below ``src`` (the directory holding vllm_hotfix/), or None."""
    base = src.joinpath(*module.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _fallbacks(tree: ast.AST) -> set[int]:
    """The imports that only run on an older Python in place of a stdlib module a newer one has: in the
    ``else`` of an ``if sys.version_info ...``, or the ``except ImportError`` of a ``try``, whose body
    imports the same name (``tomllib`` / ``tomli``); where it is missing, the caller's own fallback runs."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "version_info" in ast.unparse(node.test):
            instead = node.orelse
        elif isinstance(node, ast.Try):  # try: import tomllib / except ImportError: import tomli as tomllib
            instead = [n for h in node.handlers if h.type is not None and ast.unparse(h.type) == "ImportError"
                       for n in h.body]
        else:
            continue
        bound = {alias.asname or alias.name for n in node.body if isinstance(n, ast.Import) for alias in n.names}
        for other in instead:
            if isinstance(other, ast.Import) and {a.asname or a.name for a in other.names} <= bound:
                skipped.add(id(other))
    return skipped


def _imported(tree: ast.AST, module: str, is_package: bool) -> tuple[set[str], set[str]]:
    """(vllm_hotfix modules, other top-level modules) the syntax tree imports, anywhere in it (but the
    fallbacks of a newer Python's stdlib module)."""
    ours: set[str] = set()
    others: set[str] = set()
    skipped = _fallbacks(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and id(node) not in skipped:
            for alias in node.names:
                (ours if alias.name.split(".")[0] == SOURCE_PACKAGE else others).add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[:len(parts) - node.level + 1]
                name = ".".join(parts + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.split(".")[0] == SOURCE_PACKAGE:
                ours.add(name)
                ours.update(f"{name}.{alias.name}" for alias in node.names)  # kept only where a module
            else:
                others.add(name)
    return ours, {name.split(".")[0] for name in others}


def closure(src: Path, root: str = ROOT) -> dict[str, Path]:
    """Every module of ``root`` and what they import from vllm_hotfix, at any depth, with each package's
    ``__init__`` on the way: module name -> file. Refused when one imports a module outside the stdlib."""
    package_dir = src.joinpath(*root.split("."))
    todo = [root] + sorted(f"{root}.{p.stem}" for p in package_dir.glob("*.py") if p.stem != "__init__")
    found: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        if name in found:
            continue
        path = module_path(src, name)
        if path is None:
            continue  # `from vllm_hotfix.x import name`: a name, not a module
        found[name] = path
        tree = ast.parse(path.read_bytes(), filename=str(path))
        ours, others = _imported(tree, name, path.name == "__init__.py")
        outside = sorted(m for m in others if m not in sys.stdlib_module_names)
        if outside:
            raise Refused(f"{path}: imports {', '.join(outside)}, outside the standard library; the guard runs in "
                          "every vLLM process and must stay stdlib-only", hint="import it lazily in a module the "
                          "guard does not import")
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))] + sorted(ours)
    return found


def rewrite(source: bytes, *, where: str) -> bytes:
    """``source`` with every ``vllm_hotfix`` import naming ``vllm_hotfix_guard`` instead: the first name
    of each imported module, at the token the import starts with; an ``import vllm_hotfix...`` without
    ``as`` is refused (it binds the old name), as is a relative import (none in the source)."""
    tree = ast.parse(source, filename=where)
    text = source.decode("utf-8")
    lines = text.splitlines(keepends=True)
    starts: list[tuple[int, int]] = []  # (line, column) of each "vllm_hotfix" name to rename
    tokens = {(t.start[0], t.start[1]): t for t in tokenize.generate_tokens(io.StringIO(text).readline)}
    ordered = sorted(tokens)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                raise Refused(f"{where}:{node.lineno}: a relative import; the guard's source uses absolute ones")
            if (node.module or "").split(".")[0] != SOURCE_PACKAGE:
                continue
            at = ordered.index((node.lineno, node.col_offset))  # the `from` keyword
            starts.append(ordered[at + 1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != SOURCE_PACKAGE:
                    continue
                if alias.asname is None:
                    raise Refused(f"{where}:{node.lineno}: `import {alias.name}` binds the package's name; "
                                  "use `from ... import` in the guard's source")
                starts.append((alias.lineno, alias.col_offset))
    for row, col in sorted(starts, reverse=True):
        token = tokens[(row, col)]
        if token.string != SOURCE_PACKAGE:
            raise Refused(f"{where}:{row}: expected the name {SOURCE_PACKAGE} at column {col}, found {token.string!r}")
        line = lines[row - 1]
        lines[row - 1] = line[:col] + PACKAGE + line[col + len(SOURCE_PACKAGE):]
    return "".join(lines).encode("utf-8")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build(src: Path, version: str) -> GuardDist:
    """The distribution of the guard whose source is below ``src`` (the directory holding vllm_hotfix/)."""
    files: dict[str, bytes] = {}
    for name, path in sorted(closure(src).items()):
        rel = "/".join([PACKAGE, *name.split(".")[1:]]) + ("/__init__.py" if path.name == "__init__.py" else ".py")
        if name == SOURCE_PACKAGE:
            files[f"{PACKAGE}/__init__.py"] = INIT.format(version=version).encode()
        else:
            files[rel] = rewrite(path.read_bytes(), where=str(path))
    files[f"{PACKAGE}/__main__.py"] = MAIN.encode()
    dist_info = f"{PACKAGE}-{version}.dist-info"
    files[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {version}\n"
        "Summary: The in-process guard of vllm-hotfix (built from its source; stdlib only)\n"
        "License: Apache-2.0\nRequires-Python: >=3.10\n").encode()
    files[f"{dist_info}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: vllm-hotfix {version}\nRoot-Is-Purelib: true\nTag: {WHEEL_TAG}\n".encode()
    files[f"{dist_info}/entry_points.txt"] = f"[vllm.general_plugins]\nvllm_hotfix_guard = {PACKAGE}:register\n".encode()
    files[f"{dist_info}/top_level.txt"] = f"{PACKAGE}\n".encode()
    ordered = sorted(files.items(), key=lambda item: (item[0].startswith(dist_info + "/"), item[0]))
    record = "".join(f"{rel},sha256={_b64(data)},{len(data)}\n" for rel, data in ordered) + f"{dist_info}/RECORD,,\n"
    return GuardDist(version=version, files=(*ordered, (f"{dist_info}/RECORD", record.encode())))


def wheel_bytes(dist: GuardDist) -> bytes:
    """The wheel of ``dist``: the same files in the same order, fixed times and modes (reproducible)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for rel, data in dist.files:
            info = zipfile.ZipInfo(rel, ZIP_TIME)
            info.external_attr = (0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return out.getvalue()


def own_source() -> tuple[Path, str]:
    """The directory holding the running vllm_hotfix package, and its version."""
    import vllm_hotfix

    return Path(vllm_hotfix.__file__).resolve().parent.parent, vllm_hotfix.__version__


GUARD_DIR = "guard"  # in an export: EXPORT/guard/site-packages/{vllm_hotfix_guard,vllm_hotfix_guard-V.dist-info}
SITE_DIR = "site-packages"


def tree_files(dist: GuardDist) -> dict[str, bytes]:
    """What `hotfix export` writes into EXPORT/guard (and `hotfix guard --build-dist DIR` into DIR): the
    unpacked site-packages tree to mount, and the wheel to install (`pip install --no-index --no-deps`)."""
    files = {f"{SITE_DIR}/{rel}": data for rel, data in dist.files}
    files[dist.wheel_name] = wheel_bytes(dist)
    return files


def current() -> GuardDist:
    """The distribution of the running vllm-hotfix's guard."""
    src, version = own_source()
    return build(src, version)
