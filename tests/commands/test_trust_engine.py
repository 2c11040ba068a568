"""Issue 21, the engine: where git refuses a path we refuse it, and names from a patch never forge output.
Through the real CLI, on real git checkouts, with `git apply` run on the same inputs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fixtures.trees import everything

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is the oracle")

GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": "/nonexistent", "LC_ALL": "C"}


def git(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=cwd,
                          capture_output=True, text=True, env={**os.environ, **GIT_ENV})



def checkout(where: Path) -> Path:
    where.mkdir(parents=True)
    (where / "pkg").mkdir()
    (where / "pkg" / "__init__.py").write_text("")
    (where / "pkg" / "mod.py").write_text("x = 1\n")
    assert git("init", "-q", ".", cwd=where).returncode == 0
    git("add", "-A", cwd=where)
    assert git("commit", "-qm", "init", cwd=where).returncode == 0
    return where


def test_a_patch_adding_core_fsmonitor_to_dot_git_config_is_refused_and_nothing_runs(tmp_path, run_hotfix,
                                                                                    _isolated_state):
    """The attack: `hotfix apply --patch` on a --root checkout adds core.fsmonitor to .git/config, and the
    next `git status` that hotfix (or the user) runs executes it. Refused like `git apply` refuses it."""
    root = checkout(tmp_path / "checkout")
    marker = tmp_path / "PWNED"
    config = (root / ".git" / "config").read_bytes()
    evil = config + b'[core]\n\tfsmonitor = "touch %s; false"\n' % str(marker).encode()
    old, new = tmp_path / "a" / ".git", tmp_path / "b" / ".git"
    for side, data in ((old, config), (new, evil)):
        side.mkdir(parents=True)
        (side / "config").write_bytes(data)
    diff = subprocess.run(["diff", "-u", "a/.git/config", "b/.git/config"], cwd=tmp_path, capture_output=True).stdout
    assert b"+\tfsmonitor" in diff
    patch = tmp_path / "fsmonitor.diff"
    patch.write_bytes(diff)
    before, state_before = everything(root), everything(_isolated_state)

    for args in (("--dry-run",), ()):
        done = run_hotfix("apply", "--patch", patch.name, "--root", root, *args, cwd=tmp_path)
        assert done.returncode == 3, done.stderr
        assert done.stderr.splitlines()[0] == ("hotfix: error: fsmonitor.diff:1: invalid path '.git/config': "
                                               "a '.git' component")
        assert done.stdout == ""
    assert everything(root) == before and everything(_isolated_state) == state_before
    # git refuses the very same input, with the reason we quote
    theirs = git("apply", str(patch), cwd=root)
    assert theirs.returncode != 0 and "invalid path '.git/config'" in theirs.stderr
    # and nothing ran: not during the apply, not in the git commands that follow it
    assert run_hotfix("status", "--root", root).returncode in (0, 1)
    assert git("status", "--porcelain", cwd=root).stdout == ""
    assert not marker.exists()
    assert everything(root) == before


@pytest.mark.parametrize("name, reason", [
    (".git/hooks/post-checkout", "a '.git' component"),
    (".GIT/x", "a '.git' component"),
    ("git~1/x", "'git~1' is '.git' on NTFS"),
    ("pkg/../x", "a '..' component"),
])
def test_creating_under_dot_git_or_through_dot_dot_is_refused(tmp_path, run_hotfix, _isolated_state, name, reason):
    root = checkout(tmp_path / "checkout")
    patch = tmp_path / "p.diff"
    patch.write_bytes(b"--- /dev/null\n+++ b/%s\n@@ -0,0 +1 @@\n+#!/bin/sh\n" % name.encode())
    before, state_before = everything(root), everything(_isolated_state)
    done = run_hotfix("apply", "--patch", patch.name, "--root", root, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stderr.splitlines()[0] == f"hotfix: error: p.diff:2: invalid path '{name}': {reason}"
    assert everything(root) == before and everything(_isolated_state) == state_before
    theirs = git("apply", str(patch), cwd=root)
    assert theirs.returncode != 0 and f"invalid path '{name}'" in theirs.stderr
    assert everything(root) == before


FORGED = "x\nFAKE LINE"
QUOTED = '"x\\nFAKE LINE"'


def test_file_names_are_quoted_as_git_quotes_them_in_every_line(tmp_path, run_hotfix):
    """A created "x\\nFAKE LINE" would print a line of its own; git's core.quotePath C-quoting keeps it one
    name in dry-run, apply, status, verify and rollback output, and in conflict messages."""
    root = checkout(tmp_path / "checkout")
    (root / FORGED).write_text("a\n")
    git("add", "-A", cwd=root)
    git("commit", "-qm", "odd name", cwd=root)
    (root / FORGED).write_text("b\n")
    diff = git("diff", cwd=root).stdout
    assert '"a/x\\nFAKE LINE"' in diff  # git quotes it in the patch too
    git("checkout", "-q", ".", cwd=root)
    patch = tmp_path / "odd.diff"
    patch.write_text(diff)

    dry = run_hotfix("apply", "--patch", patch, "--root", root, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0] == f"M {QUOTED} (1 hunk)"
    assert not any(line.startswith("FAKE") for line in dry.stdout.splitlines())
    applied = run_hotfix("apply", "--patch", patch, "--root", root)
    assert applied.returncode == 0 and applied.stdout.splitlines()[0] == f"M {QUOTED} (1 hunk)"
    assert (root / FORGED).read_text() == "b\n"

    (root / FORGED).write_text("drifted\n")
    status = run_hotfix("status", "odd", "--root", root)
    assert status.returncode == 1 and QUOTED in status.stdout, status.stdout
    assert not any(line.startswith("FAKE") for line in status.stdout.splitlines()), status.stdout
    verify = run_hotfix("verify", "odd", "--root", root)
    assert verify.returncode == 1 and QUOTED in verify.stdout
    assert not any(line.startswith("FAKE") for line in verify.stdout.splitlines()), verify.stdout

    conflict = run_hotfix("apply", "--patch", patch, "--root", root, "--id", "again")
    assert conflict.returncode == 4, conflict.stderr
    assert conflict.stderr.splitlines()[0].startswith(f"hotfix: error: {QUOTED}: hunk @@ -1,1 +1,1 @@ does not apply")
    assert len([line for line in conflict.stderr.splitlines() if not line.startswith("hotfix: ")]) == 0

    (root / FORGED).write_text("b\n")
    rollback = run_hotfix("rollback", "odd", "--root", root)
    assert rollback.returncode == 0, rollback.stderr
    assert rollback.stdout.splitlines()[0] == f"restore {QUOTED}"
    assert (root / FORGED).read_text() == "a\n"
