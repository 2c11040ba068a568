"""docs/design.md is the map: every module it names exists where it says, and so does the function or
class it names in that module (`flow/transaction.run`, `vllm_hotfix_guard.HotfixNotInEffect`,
`src/vllm_hotfix_guard/txn/fsops.py`), and every test or benchmark file it points at."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"
PACKAGES = ("vllm_hotfix", "vllm_hotfix_guard")  # a short path (`core/verdict.py`) names a module of either
DESIGN = (REPO / "docs" / "design.md").read_text()
LAYERS = "cli|commands|containers|vllm_hotfix_guard|flow|doctor|catalog|txn|install|core"
# `flow/transaction.run`, `txn/fsops.py`, `src/vllm_hotfix_guard/core/verdict.py`: a layer's module, maybe an attribute
SLASHED = re.compile(rf"(?<![\w./-])(?:src/(?:vllm_hotfix/)?)?((?:{LAYERS})/\w+(?:/\w+)?)(\.py\b|\.\w+)?")
DOTTED = re.compile(r"(?<![\w.])(vllm_hotfix(?:_guard)?)((?:\.\w+)+)")
# `paths.TargetDir`, `output.note`: a top-level module's attribute
TOP = re.compile(r"(?<![\w./-])(output|paths|inputs|errors|settings|values|cli_options|cli_signing|cli_bundles)\.(?!py\b)(\w+)")
FILES = re.compile(r"(?<![\w./-])((?:tests|benchmarks)/[\w/]+\.py)\b")


def _module_file(parts: list[str]) -> Path | None:
    for base in ([SRC] if parts[0] in PACKAGES else [SRC / package for package in PACKAGES]):
        path = base.joinpath(*parts)
        if (path / "__init__.py").is_file():
            return path / "__init__.py"
        if path.with_suffix(".py").is_file():
            return path.with_suffix(".py")
    return None


@cache
def _names(module: Path) -> set[str]:
    """What the module defines or imports at its top level, and the methods and fields of its classes."""
    tree = ast.parse(module.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
                names.update(n.attr for n in ast.walk(target) if isinstance(n, ast.Attribute))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _check(parts: list[str], attr: str | None, spelled: str) -> str | None:
    module = _module_file(parts)
    if module is None:
        return f"{spelled}: no module {'/'.join(parts)}"
    if attr is not None and attr not in _names(module):
        return f"{spelled}: {module.relative_to(REPO)} has no {attr}"
    return None


def named_modules() -> list[tuple[str, list[str], str | None]]:
    found = []
    for match in SLASHED.finditer(DESIGN):
        suffix = match.group(2)
        attr = suffix[1:] if suffix and suffix != ".py" else None
        found.append((match.group(0), match.group(1).split("/"), attr))
    for match in TOP.finditer(DESIGN):
        found.append((match.group(0), [match.group(1)], match.group(2)))
    for match in DOTTED.finditer(DESIGN):
        parts = [match.group(1)] + match.group(2).strip(".").split(".")
        for cut in range(len(parts), 0, -1):  # the longest prefix that is a module; the next part an attribute
            if _module_file(parts[:cut]) is not None:
                found.append((match.group(0), parts[:cut], parts[cut] if cut < len(parts) else None))
                break
        else:
            found.append((match.group(0), parts, None))
    return found


def test_the_map_names_modules():
    assert len(named_modules()) > 100


def test_every_module_the_map_names_exists():
    problems = sorted({p for spelled, parts, attr in named_modules() if (p := _check(parts, attr, spelled))})
    assert not problems, "\n".join(problems)


def test_every_test_and_benchmark_file_the_map_names_exists():
    missing = sorted({path for path in FILES.findall(DESIGN) if not (REPO / path).is_file()})
    assert not missing, missing
