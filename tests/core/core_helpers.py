"""Helpers for the pure engine's tests: real git repositories made in the test, a directory reader."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from vllm_hotfix_guard.core.hunk_apply import FileState, Plan

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent",
}


def git(cwd: Path, *args: str, check: bool = True) -> bytes:
    done = subprocess.run(["git", "-c", "core.autocrlf=false", *args], cwd=cwd, capture_output=True,
                          env={**os.environ, **GIT_ENV})
    if check and done.returncode not in (0, 1):
        raise AssertionError(f"git {' '.join(args)} failed: {done.stderr.decode()}")
    return done.stdout


def dir_reader(root: Path):
    """A Reader over a real directory (what target/tree.py does, minus the symlink checks)."""

    def read(relpath: str) -> FileState | None:
        path = root / relpath
        if not path.is_file():
            return None
        return FileState(path.read_bytes(), path.stat().st_mode & 0o7777)

    return read


def write_files(root: Path, files: dict[str, bytes | None]) -> None:
    for rel, data in files.items():
        path = root / rel
        if data is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def apply_plan(root: Path, plan: Plan) -> None:
    """Materialise a plan the simple way (the real writer is txn/journal.py)."""
    for edit in plan.edits:
        if edit.old_path is not None:
            (root / edit.old_path).unlink()
        path = root / edit.path
        if edit.after is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(edit.after)
        if edit.new_mode is not None:
            path.chmod(edit.new_mode)


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mode & 0o111)
        for p in sorted(root.rglob("*")) if p.is_file() and ".git" not in p.relative_to(root).parts
    }


class Repo:
    """A real git work tree: write files, commit, and get real ``git diff`` / ``format-patch`` output."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        git(root, "init", "-q", "-b", "main")

    def write(self, files: dict[str, bytes | None]) -> None:
        write_files(self.root, files)

    def commit(self, message: str = "change") -> None:
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "--allow-empty", "-m", message)

    def git(self, *args: str) -> bytes:
        return git(self.root, *args)

    def copy(self, dest: Path) -> Path:
        shutil.copytree(self.root, dest, ignore=shutil.ignore_patterns(".git"))
        return dest
