"""The layers contract of .importlinter describes the layering the code has: no stricter (import-linter
keeps it: tests/test_project.py) and no looser -- each tier imports the tier right below it (so the order
is the code's, not a guess), and packages in one tier are siblings that import nothing of each other (the
contract's ``a | b``), which import-linter checks too."""

import configparser
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[1]


def _tiers() -> list[list[str]]:
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    lines = [line.strip() for line in config["importlinter:contract:layers"]["layers"].splitlines() if line.strip()]
    return [[name.strip() for name in line.split("|")] for line in lines]


def test_every_package_of_vllm_hotfix_is_in_a_tier():
    listed = {name for tier in _tiers() for name in tier}
    top = {p.stem if p.is_file() else p.name for p in (REPO / "src" / "vllm_hotfix").iterdir()
           if (p.suffix == ".py" or (p / "__init__.py").exists()) and not p.name.startswith("_")}
    assert {f"vllm_hotfix.{name}" for name in top} - listed == set()


def test_each_tier_imports_the_tier_below_it():
    graph = grimp.build_graph("vllm_hotfix")
    tiers = _tiers()
    unused = []
    for upper, lower in zip(tiers, tiers[1:]):
        if not any(graph.direct_import_exists(importer=a, imported=b, as_packages=True) for a in upper for b in lower):
            unused.append(f"{' | '.join(upper)} -> {' | '.join(lower)}")
    assert unused == []
