"""The layers contracts of .importlinter describe the layering the code has: no stricter (import-linter
keeps them: tests/test_project.py) and no looser -- each tier imports the tier right below it (so the order
is the code's, not a guess), and packages in one tier are siblings that import nothing of each other (the
contract's ``a | b``; ``a : b`` are one tier whose members may import each other), which import-linter checks
too. Two contracts: the CLI's (vllm_hotfix, standing on the guard package) and the guard's own
(vllm_hotfix_guard), which imports the standard library only."""

import ast
import configparser
import re
import sys
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[1]
GUARD = REPO / "src" / "vllm_hotfix_guard"


def _tiers(contract: str) -> list[list[str]]:
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    section = config[f"importlinter:contract:{contract}"]
    container = section.get("containers", "").strip()
    lines = [line.strip() for line in section["layers"].splitlines() if line.strip()]
    return [[f"{container}.{n.strip()}" if container else n.strip() for n in re.split(r"[|:]", line)] for line in lines]


def _top(package: Path) -> set[str]:
    return {p.stem if p.is_file() else p.name for p in package.iterdir()
            if (p.suffix == ".py" or (p / "__init__.py").exists()) and not p.name.startswith("_")}


def test_every_package_of_vllm_hotfix_is_in_a_tier():
    listed = {name for tier in _tiers("layers") for name in tier}
    assert {f"vllm_hotfix.{name}" for name in _top(REPO / "src" / "vllm_hotfix")} - listed == set()
    assert "vllm_hotfix_guard" in _tiers("layers")[-1]  # the kernel the CLI stands on


def test_every_module_of_the_guard_is_in_a_tier():
    listed = {name for tier in _tiers("guard_layers") for name in tier}
    assert {f"vllm_hotfix_guard.{name}" for name in _top(GUARD) | {"__main__"}} - listed == set()


def test_each_tier_imports_the_tier_below_it():
    graph = grimp.build_graph("vllm_hotfix", "vllm_hotfix_guard")
    unused = []
    for contract in ("layers", "guard_layers"):
        tiers = _tiers(contract)
        for upper, lower in zip(tiers, tiers[1:]):
            if not any(graph.direct_import_exists(importer=a, imported=b, as_packages=True) for a in upper for b in lower):
                unused.append(f"{' | '.join(upper)} -> {' | '.join(lower)}")
    assert unused == []


def test_the_guard_imports_the_standard_library_only():
    """Every import anywhere in vllm_hotfix_guard (lazy ones included) names the standard library or the guard
    itself; tomli only as tomllib's fallback on Python 3.10 (the guard itself never reads TOML)."""
    found = []
    for path in sorted(GUARD.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, ast.ImportFrom) and node.level:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} relative import")
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                top = name.split(".")[0]
                if top == "tomli" and path.name in ("data.py", "version.py"):
                    continue
                if top != "vllm_hotfix_guard" and top not in sys.stdlib_module_names:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} {name}")
    assert found == []
    by_name = rb"""(__import__|import_module)\(\s*["']vllm_hotfix[."']"""
    strings = [p for p in GUARD.rglob("*.py") if re.search(by_name, p.read_bytes())]
    assert strings == []  # no __import__("vllm_hotfix...") / importlib of the CLI by name either


def test_no_import_circles():
    """No module reaches itself through imports, lazy ones included (issue 43 measured 5 circles): each of
    the two packages is a directed acyclic graph of modules (Tarjan's strongly connected components)."""
    graph = grimp.build_graph("vllm_hotfix", "vllm_hotfix_guard")
    ours = sorted(m for m in graph.modules if m.split(".")[0] in ("vllm_hotfix", "vllm_hotfix_guard"))
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    circles = []

    def visit(start: str) -> None:  # iterative Tarjan (no recursion limit)
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt.split(".")[0] not in ("vllm_hotfix", "vllm_hotfix_guard"):
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))

    for module in ours:
        if module not in index:
            visit(module)
    assert circles == []
