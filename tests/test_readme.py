"""The README is read in five minutes: short, the two set-up commands on its first screen, every link
to docs/ resolving; what it moved out lives in docs/, one page per job."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_readme_is_short():
    assert len(README.splitlines()) <= 300


def test_setup_commands_are_on_the_first_screen():
    first = "\n".join(README.splitlines()[:40])
    for command in ("pip install -q . && scripts/try-it", "pip install -q -e '.[test]' && python -m pytest -q -m \"\""):
        assert command in first, command


def test_both_test_commands_are_said():
    """The whole suite (every tier, what CI runs) and the fast loop (plain `pytest`, the unmarked tier)."""
    first = "\n".join(README.splitlines()[:40])
    assert 'python -m pytest -q -m ""' in first and "`python -m pytest -q` runs the fast tier" in first


def test_no_install_from_an_index_of_an_unpublished_name():
    """`vllm-hotfix` is not on any index: the README installs from a clone or a built wheel."""
    assert not re.search(r"pip install (-\S+ )*vllm-hotfix\b", README)


def _anchors(text: str) -> set[str]:
    out = set()
    for heading in re.findall(r"^#+ (.+)$", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M), re.M):
        out.add(re.sub(r"[^\w\- ]", "", heading.lower().strip()).replace(" ", "-"))
    return out


def test_links_between_pages_resolve():
    broken = []
    for page in PAGES:
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md|)(?:#([\w-]+))?\)", page.read_text()):
            path = (page.parent / target) if target else page
            if not path.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and anchor not in _anchors(path.read_text()):
                broken.append(f"{page.name}: {target}#{anchor}")
    assert not broken, broken


def test_no_session_relative_words():
    words = re.compile(r"\b(this stop|two stops ago|last stop|last session|this session|same session)\b", re.I)
    for page in PAGES:
        assert not words.search(page.read_text()), (page.name, words.search(page.read_text()).group(0))
