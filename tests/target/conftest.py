"""Real targets made in the test: git repositories, other interpreters, an editable pip install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import realdata

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


interpreter = realdata.find_python


@pytest.fixture
def other_python():
    def find(version: str) -> str:
        found = interpreter(version)
        if found is None:
            pytest.skip(f"python{version} is not installed")
        return found
    return find


def create_repo(repo: Path, files: dict[str, str]) -> Path:
    """A real git repository holding ``files`` in one commit tagged v1."""
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo.parent, "init", "-q", "-b", "main", str(repo))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    git(repo, "tag", "v1")
    return repo


@pytest.fixture
def make_repo(tmp_path):
    """``make_repo({"pkg/__init__.py": "x = 1\\n"})`` -> a real git repo with one commit tagged v1."""
    return lambda files, name="repo": create_repo(tmp_path / name, files)


TINY_PROJECT = {
    "pyproject.toml": (
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "tiny-pkg"\nversion = "1.2.3"\n'
        '[tool.setuptools]\npackages = ["tinypkg"]\n'
    ),
    "tinypkg/__init__.py": "VALUE = 1\n",
    "tinypkg/mod.py": "def f():\n    return 1\n",
    ".gitignore": "*.egg-info/\nbuild/\n__pycache__/\n",
}


@pytest.fixture(scope="module")
def editable_install(tmp_path_factory):
    """A git repo with a tiny setuptools project, ``pip install -e``'d into a fresh python3.12 venv
    (another interpreter than the one running the tests). Returns (venv, repo)."""
    base = interpreter("3.12") or interpreter("3.10") or sys.executable
    tmp = tmp_path_factory.mktemp("editable")
    repo = create_repo(tmp / "repo", TINY_PROJECT)
    venv = realdata.make_venv(tmp / "venv", base_python=base)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv.python), "install", "--no-deps",
                    "--disable-pip-version-check", "-q", "-e", str(repo)], check=True)
    return venv, repo
