import pytest

from conftest import git
from vllm_hotfix_guard.errors import Refused
from vllm_hotfix.install import git as gitmod


@pytest.fixture
def repo(make_repo):
    return make_repo({"pkg/__init__.py": "x = 1\n", "pkg/mod.py": "y = 2\n", "notes/a.txt": "a\n"})


def test_clean_checkout_at_tag_full_and_short_sha_is_at_baseline(repo):
    sha = git(repo, "rev-parse", "HEAD")
    assert gitmod.head(repo) == sha
    for rev in ("v1", sha, sha[:8], None):
        assert gitmod.check_baseline(repo, rev) == []
    assert gitmod.check_baseline(repo / "pkg", "v1") == []  # a subdirectory of the work tree


def test_other_commit_names_both_commits(repo):
    first = git(repo, "rev-parse", "HEAD")
    (repo / "pkg" / "mod.py").write_text("y = 3\n")
    git(repo, "commit", "-q", "-am", "second")
    second = git(repo, "rev-parse", "HEAD")
    (problem,) = gitmod.check_baseline(repo, first[:10])
    assert second[:12] in problem and first[:10] in problem and first[:12] in problem
    assert gitmod.is_ancestor(repo, first) and gitmod.is_ancestor(repo, "HEAD")
    assert gitmod.has_commit(repo, first[:7]) and not gitmod.has_commit(repo, "0" * 40)
    git(repo, "checkout", "-q", first)
    assert not gitmod.is_ancestor(repo, second)


def test_unknown_expected_commit_is_named(repo):
    (problem,) = gitmod.check_baseline(repo, "v9.9")
    assert "v9.9" in problem and "not in this repository" in problem


def test_dirty_and_untracked_files_are_named_unless_allowed(repo):
    (repo / "pkg" / "mod.py").write_text("y = 99\n")
    (repo / "pkg" / "new file.py").write_text("z\n")
    (repo / "notes" / "a.txt").unlink()
    problems = gitmod.check_baseline(repo, "v1")
    assert len(problems) == 3
    text = "\n".join(problems)
    assert "pkg/mod.py is modified" in text
    assert "pkg/new file.py is untracked" in text
    assert "notes/a.txt is deleted" in text
    assert gitmod.check_baseline(repo, "v1", allow=["notes/*", "pkg/new*"]) == [p for p in problems if "mod.py" in p]
    info = gitmod.info(repo)
    assert info.branch == "main" and not info.clean and info.commit == git(repo, "rev-parse", "HEAD")


def test_without_git_binary_says_so(repo, monkeypatch):
    monkeypatch.setenv("GIT_PYTHON_GIT_EXECUTABLE", "/nonexistent/git")
    with pytest.raises(Refused, match="git is not installed here: cannot check the baseline of"):
        gitmod.check_baseline(repo, "v1")
    assert gitmod.find_work_tree(repo / "pkg") == repo.resolve()


def test_not_a_work_tree_is_refused(tmp_path):
    with pytest.raises(Refused, match="is not a git work tree"):
        gitmod.check_baseline(tmp_path, None)
