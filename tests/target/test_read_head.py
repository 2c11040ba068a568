"""install/facts.read_head: HEAD's commit read from the repository's files, checked against `git rev-parse
HEAD` (the oracle) on real repositories made here: loose and packed refs, a detached HEAD, a linked
worktree, a sha256 repository, and what git never writes (a link, a ref outside refs/) gives None."""

from __future__ import annotations

import os
import subprocess

import pytest

from fixtures.gitrepo import git, init_repo
from vllm_hotfix_guard.install.facts import read_head


def rev_parse(repo) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def repo(tmp_path):
    path = init_repo(tmp_path / "repo", {"pkg/__init__.py": "", "README": "one\n"}, branch="main", message="one")
    (path / "README").write_text("two\n")
    git(path, "commit", "-q", "-am", "two")
    return path


def test_a_loose_branch_ref_from_a_subdirectory(repo):
    assert read_head(repo / "pkg") == rev_parse(repo)


def test_packed_refs_after_git_pack_refs(repo):
    git(repo, "tag", "v1.0.0")
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    assert read_head(repo) == rev_parse(repo)


def test_a_detached_head_and_a_moved_branch(repo):
    first = git(repo, "rev-parse", "HEAD~1").strip()
    git(repo, "checkout", "-q", first)
    assert read_head(repo) == first == rev_parse(repo)
    git(repo, "checkout", "-q", "main")
    assert read_head(repo) == rev_parse(repo) != first


def test_a_linked_worktree_reads_its_own_head(repo, tmp_path):
    first = git(repo, "rev-parse", "HEAD~1").strip()
    git(repo, "worktree", "add", "-q", "-b", "side", str(tmp_path / "side"), first)
    assert (tmp_path / "side" / ".git").is_file()
    assert read_head(tmp_path / "side") == first == rev_parse(tmp_path / "side")
    assert read_head(repo) == rev_parse(repo)


def test_a_sha256_repository(tmp_path):
    path = tmp_path / "sha256"
    path.mkdir()
    try:
        git(path, "init", "-q", "--object-format=sha256", "-b", "main")
    except subprocess.CalledProcessError:
        pytest.skip("this git cannot make sha256 repositories")
    (path / "f").write_text("x\n")
    git(path, "add", "f")
    git(path, "commit", "-q", "-m", "x")
    assert len(read_head(path)) == 64 and read_head(path) == rev_parse(path)


def test_no_work_tree_or_an_unborn_head_is_none(tmp_path):
    assert read_head(tmp_path) is None
    git_dir = tmp_path / "empty"
    git_dir.mkdir()
    git(git_dir, "init", "-q", "-b", "main")
    assert read_head(git_dir) is None


@pytest.mark.parametrize("forgery", ["symlinked-head", "ref-outside-refs", "not-hex", "fifo-ref"])
def test_what_git_never_writes_is_none(repo, tmp_path, forgery):
    head = repo / ".git" / "HEAD"
    if forgery == "symlinked-head":
        (tmp_path / "elsewhere").write_text(rev_parse(repo) + "\n")
        head.unlink()
        head.symlink_to(tmp_path / "elsewhere")
    elif forgery == "ref-outside-refs":
        head.write_text("ref: ../../../etc/passwd\n")
    elif forgery == "not-hex":
        head.write_text("z" * 40 + "\n")
    else:
        ref = repo / ".git" / "refs" / "heads" / "main"
        ref.unlink()
        os.mkfifo(ref)  # must not block the reader (the guard reads this in every vLLM process)
    assert read_head(repo) is None
