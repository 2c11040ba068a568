"""parallel_plan.py (and core/diff.file_boundary_near_middle): the forked half-plan equals the sequential
plan on the real vLLM 0.29.0 -> 0.30.0 diff, and every failure falls back to the sequential result."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import realdata
from vllm_hotfix_guard.core.hunk_apply import plan_patch
from vllm_hotfix_guard.core.diff import file_boundary_near_middle, parse_patch
from vllm_hotfix_guard.errors import DoesNotApply, InvalidInput
from vllm_hotfix.flow.parallel_plan import ForkedHalf
from vllm_hotfix.install.tree import Tree

pytestmark = pytest.mark.real


def git(*args: str, cwd: Path) -> bytes:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True).stdout


def forked_plan(data: bytes, root: Path, *, reverse: bool = False, min_bytes: int | None = None):
    """What `hotfix apply` does with a large diff: (merged plan, diffstat) or None (fall back)."""
    extra = {} if min_bytes is None else {"min_bytes": min_bytes}
    child = ForkedHalf.start(data, strip=1, source="x.diff", root=root, **extra)
    assert child is not None
    try:
        first = parse_patch(child.first_half, strip=1, source="x.diff")
        assert child.child_parsed()
        tree = Tree(root)
        return child.finish(first, tree, tree.read, reverse=reverse)
    finally:
        child.cancel()


@pytest.fixture(scope="module")
def real_diff() -> bytes:
    return realdata.vllm_source_diff("0.29.0", "0.30.0").read_bytes()


@pytest.mark.parametrize("version, reverse", [("0.29.0", False), ("0.30.0", True)])
def test_forked_plan_equals_sequential_plan_on_the_real_diff(real_diff, version, reverse):
    root = realdata.vllm_source_tree(version)
    sequential_patch = parse_patch(real_diff, strip=1, source="x.diff")
    sequential = plan_patch(sequential_patch, Tree(root).read, reverse=reverse)
    merged = forked_plan(real_diff, root, reverse=reverse)
    assert merged is not None
    plan, stats = merged
    assert plan == sequential
    assert stats == sequential_patch.stats
    assert len(plan.edits) == 1106


def test_the_cut_is_at_a_file_header_past_the_middle(real_diff):
    cut = file_boundary_near_middle(real_diff, min_bytes=1 << 20)
    assert cut is not None and cut >= len(real_diff) // 2
    assert real_diff[cut:].startswith(b"diff -ruN a/vllm/")
    assert file_boundary_near_middle(real_diff[:cut], min_bytes=len(real_diff)) is None  # too small


@pytest.fixture
def repo(tmp_path) -> Path:
    """A real git repo: 80 files committed twice (every file changed), f00.py changed a third time."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    for round_no in range(3):
        for n in range(80 if round_no < 2 else 1):
            (repo / f"f{n:02d}.py").write_text("".join(f"line {i} v{round_no if i == 5 else 0}\n" for i in range(12)))
        git("add", ".", cwd=repo)
        git("commit", "-qm", f"round {round_no}", cwd=repo)
    return repo


def test_format_patch_series_is_not_split(repo):
    series = git("format-patch", "--stdout", "HEAD~2", cwd=repo)
    assert series.startswith(b"From ")
    assert file_boundary_near_middle(series, min_bytes=0) is None
    assert ForkedHalf.start(series, strip=1, source="s.patch", root=repo, min_bytes=0) is None


def test_a_path_in_both_halves_falls_back(repo):
    both = git("diff", "HEAD~2", "HEAD~1", cwd=repo) + git("diff", "HEAD~1", "HEAD", "--", "f00.py", cwd=repo)
    git("checkout", "-q", "HEAD~2", cwd=repo)
    sequential = plan_patch(parse_patch(both, strip=1), Tree(repo).read)
    assert [e.path for e in sequential.edits][0] == "f00.py"  # chained: planned, but only sequentially
    assert forked_plan(both, repo, min_bytes=0) is None


def test_a_hunk_that_fails_in_the_child_falls_back(repo):
    diff = git("diff", "HEAD~2", "HEAD~1", cwd=repo)
    git("checkout", "-q", "HEAD~2", cwd=repo)
    (repo / "f79.py").write_text("changed locally\n")
    with pytest.raises(DoesNotApply):
        plan_patch(parse_patch(diff, strip=1), Tree(repo).read)
    assert forked_plan(diff, repo, min_bytes=0) is None


@pytest.fixture(scope="module")
def broken_tree(tmp_path_factory) -> Path:
    """The real 0.29.0 sources (hard links: nothing is written through them) with one late file cut short."""
    root = tmp_path_factory.mktemp("broken") / "tree"
    shutil.copytree(realdata.vllm_source_tree("0.29.0"), root, copy_function=os.link)
    late = root / "vllm/v1/worker/gpu_model_runner.py"
    text = late.read_bytes()
    late.unlink()
    late.write_bytes(b"".join(text.splitlines(keepends=True)[:3]))
    return root


def test_cli_does_not_apply_message_is_the_sequential_one(run_hotfix, real_diff, broken_tree, tmp_path):
    diff_file = tmp_path / "big.diff"
    diff_file.write_bytes(real_diff)
    assert file_boundary_near_middle(real_diff, min_bytes=0) < real_diff.index(b"a/vllm/v1/worker/gpu_model_runner.py")
    with pytest.raises(DoesNotApply) as sequential:
        plan_patch(parse_patch(real_diff, strip=1, source=str(diff_file)), Tree(broken_tree).read)
    done = run_hotfix("apply", "--patch", diff_file, "--root", broken_tree, "--dry-run",
                      process=True)  # the half-plan forks only in a process of one thread
    assert done.returncode != 0
    assert done.stderr.startswith(f"hotfix: error: {sequential.value.message}\n")


@pytest.mark.parametrize("where", ["first half", "second half"])
def test_cli_parse_error_names_the_line_of_the_whole_file(run_hotfix, real_diff, tmp_path, where):
    cut = file_boundary_near_middle(real_diff, min_bytes=0)
    at = real_diff.index(b"\n@@ -", 0 if where == "first half" else cut) + 1
    broken = real_diff[:at] + b"@@ -x" + real_diff[at + 4:]
    diff_file = tmp_path / "broken.diff"
    diff_file.write_bytes(broken)
    with pytest.raises(InvalidInput) as sequential:
        parse_patch(broken, strip=1, source=str(diff_file))
    done = run_hotfix("apply", "--patch", diff_file, "--root", realdata.vllm_source_tree("0.29.0"), "--dry-run",
                      process=True)  # the half-plan forks only in a process of one thread
    assert done.returncode != 0
    assert done.stderr.startswith(f"hotfix: error: {sequential.value.message}\n")
