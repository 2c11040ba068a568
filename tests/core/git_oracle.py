"""`git apply` as the oracle: one pre-image, two identical copies, git on one and hotfix on the other.

A case ends in one of: both apply and the trees are equal byte for byte (modes and symlinks included),
both refuse and both trees are untouched, or hotfix refuses where git applies -- allowed only for a
documented category (docs/applying.md "git apply compatibility"). hotfix runs through the core API and the real
journalled writer, so a plan that passes must also commit: a dry run predicts the real run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from vllm_hotfix_guard.core.hunk_apply import plan_patch
from vllm_hotfix_guard.core.diff import parse_patch
from vllm_hotfix_guard.errors import HotfixError
from vllm_hotfix.install.tree import Tree
from vllm_hotfix.txn.journal import commit

GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": "/nonexistent", "LC_ALL": "C"}

# hotfix refuses, git applies: on purpose, each listed in docs/applying.md "git apply compatibility".
CATEGORIES = {
    "binary": "binary content (GIT binary patch, 'Binary files ... differ' in a git diff)",
    "hfs-dotgit": "a .git component with code points HFS+ ignores (git refuses it only with core.protectHFS)",
    "symlink": "symbolic links and submodules (modes 120000 and 160000)",
    "names": "a git header whose '---' / '+++' names disagree with its 'diff --git' names",
    "overlong-hunk": "lines after a hunk that continue it (its header undercounts them)",
    "type-change": "a file that becomes a directory, or the reverse, in one patch",
    "unchecked-overwrite": "a creation over an existing file that the same patch deletes later",
}


class Link(str):
    """A symlink in a pre-image: ``Link("target")``."""


class Dir(str):
    """An empty directory in a pre-image: ``Dir()``."""


@dataclass(frozen=True)
class Case:
    files: dict  # path -> bytes | Link | Dir
    patch: bytes
    strip: int | None = None  # None: no -p given (git's default and guess)
    category: str | None = None  # set when hotfix refuses on purpose where git applies
    modes: dict = field(default_factory=dict)  # path -> permission bits
    git_config: tuple = ()  # ('core.protectHFS=true',): git's settings for this case (git -c)


@dataclass(frozen=True)
class Outcome:
    applied: bool
    tree: dict
    message: str


def build(root: Path, case: Case) -> None:
    root.mkdir(parents=True)
    for rel, content in case.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Link):
            path.symlink_to(str(content))
        elif isinstance(content, Dir):
            path.mkdir()
        else:
            path.write_bytes(content)
            path.chmod(case.modes.get(rel, 0o644))


def snapshot(root: Path) -> dict:
    """Every entry under root but .git: kind, content or link target, permission bits."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git" or dirpath != str(root)]
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            info = os.lstat(path)
            if os.path.islink(path):
                seen[rel] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                seen[rel] = ("dir",)
            else:
                with open(path, "rb") as fh:
                    seen[rel] = ("file", fh.read(), info.st_mode & 0o777)
    return seen


def run_git(root: Path, patch_file: Path, strip: int | None, config: tuple = ()) -> Outcome:
    subprocess.run(["git", "init", "-q", "."], cwd=root, check=True, env={**os.environ, **GIT_ENV})
    settings = [arg for setting in config for arg in ("-c", setting)]
    args = ["git", *settings, "apply", "--whitespace=nowarn"] + ([f"-p{strip}"] if strip is not None else []) + [str(patch_file)]
    done = subprocess.run(args, cwd=root, capture_output=True, env={**os.environ, **GIT_ENV}, timeout=60)
    return Outcome(done.returncode == 0, snapshot(root), done.stderr.decode("utf-8", "replace").strip())


def run_hotfix(root: Path, data: bytes, strip: int | None, journal: Path) -> Outcome:
    """Parse, plan and commit with the real writer. Only HotfixError may escape as a refusal; a plan
    that does not commit is a failure of the dry run's promise and is raised as AssertionError."""
    try:
        patch = parse_patch(data, strip=strip, source="case.diff")
        tree = Tree(root)
        plan = plan_patch(patch, tree.read)
    except HotfixError as refused:
        return Outcome(False, snapshot(root), f"exit {int(refused.exit_code)}: {refused.message}")
    try:
        commit(root, plan, journal_dir=journal, tree=tree)
    except HotfixError as failed:
        raise AssertionError(f"planned, but the commit failed (a dry run would have lied): {failed.message}")
    return Outcome(True, snapshot(root), "")


def category_of(message: str) -> str | None:
    """The documented category of a hotfix refusal message, for diffs that come without one."""
    for words, category in (
        (("binary",), "binary"), (("symbolic link", "submodule"), "symlink"),
        (("inconsistent", "header names"), "names"),
        (("more lines than its header",), "overlong-hunk"), (("leaves", "a file", "directory"), "type-change"),
    ):
        if any(word in message for word in words):
            return category
    return None


def compare(tmp: Path, case: Case, *, classify: bool = False) -> tuple[str, Outcome, Outcome]:
    """'applied' | 'both-refused' | 'refused:<category>'; raises AssertionError on any other difference. ``classify``:
    the case has no category of its own, take it from hotfix's message."""
    build(tmp / "git", case)
    build(tmp / "hotfix", case)
    pre = snapshot(tmp / "hotfix")
    patch_file = tmp / "case.diff"
    patch_file.write_bytes(case.patch)
    theirs = run_git(tmp / "git", patch_file, case.strip, case.git_config)
    ours = run_hotfix(tmp / "hotfix", case.patch, case.strip, tmp / "journal")
    if not ours.applied:
        assert ours.tree == pre, f"hotfix refused but changed the tree: {ours.message}"
        assert not (tmp / "journal" / "journal.json").exists()
    if theirs.applied == ours.applied:
        if ours.applied:
            assert ours.tree == theirs.tree, f"different results\n git: {theirs.tree}\n hotfix: {ours.tree}"
        return "applied" if ours.applied else "both-refused", theirs, ours
    assert theirs.applied, f"hotfix applied what git refuses ({theirs.message})\n hotfix: {ours.tree}"
    category = category_of(ours.message) if classify else case.category
    assert category in CATEGORIES, f"hotfix refused what git applies, in no documented category: {ours.message}"
    return f"refused:{category}", theirs, ours


def fresh(tmp: Path, name: str) -> Path:
    where = tmp / name
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    return where
