"""Upstream commits as patch sources: real git repositories (tests/fixtures/ascend.py), real git."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from fixtures.ascend import RELEASE_NOTE, make_upstream_clone, make_vllm_ascend_checkout
from fixtures.gitrepo import git

from vllm_hotfix.catalog.index import builtin_dir
from vllm_hotfix_guard.core.diff import parse_patch
from vllm_hotfix_guard.errors import Refused
from vllm_hotfix.catalog.model import PatchSpec
from vllm_hotfix.catalog.upstream import find_commit_source, format_commit_patch, load_commit_patch, load_pinned_commit
from vllm_hotfix_guard.core.diff import normalised_diff_bytes


def pinned_sha256(data: bytes) -> str:
    return hashlib.sha256(normalised_diff_bytes(data)).hexdigest()

BUILTIN_0001 = next((builtin_dir() / "patches" / "glm-conv-null-slot").glob("0001-*.patch"))
ASCEND_URL = "https://github.com/vllm-project/vllm-ascend"


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    return make_upstream_clone(tmp_path_factory.mktemp("upstream") / "vllm-ascend")


def _spec(commit: str, sha256: str) -> PatchSpec:
    return PatchSpec(kind="commit", sha256=sha256, repo=ASCEND_URL, commit=commit, exclude=("release_notes/**",))


def test_pin_does_not_depend_on_abbreviated_index_lines_or_mail_headers(clone):
    short = git(clone, "format-patch", "-1", "--stdout", "HEAD").encode()
    long = git(clone, "-c", "core.abbrev=12", "format-patch", "-1", "--stdout", "HEAD").encode()
    assert short != long  # the index lines really differ
    loaded = load_commit_patch(clone, "HEAD")
    assert pinned_sha256(short) == pinned_sha256(long) == pinned_sha256(loaded)
    # The built-in catalog file is this commit's vllm_ascend/ part (the stand-in commit's sources are made
    # from it): the same pin as the commit read with only those paths.
    sources = ["vllm_ascend/models/glm5next/ops/causal_conv1d.py", "vllm_ascend/ops/triton/kda/conv_state.py"]
    assert pinned_sha256(BUILTIN_0001.read_bytes()) == pinned_sha256(format_commit_patch(clone, "HEAD", sources))
    assert pinned_sha256(loaded) == hashlib.sha256(loaded).hexdigest()  # already normalised


def test_excluded_release_note_is_not_in_the_diff_and_not_created(clone, tmp_path):
    full = parse_patch(load_commit_patch(clone, "HEAD"))
    assert RELEASE_NOTE in [f.path for f in full.files]
    data = load_commit_patch(clone, "HEAD", exclude=["release_notes/**"])
    patch = parse_patch(data)
    assert RELEASE_NOTE not in [f.path for f in patch.files]
    assert (patch.stats.files, patch.stats.insertions, patch.stats.deletions) == (4, 69, 6)

    checkout = make_vllm_ascend_checkout(tmp_path / "checkout")
    (tmp_path / "commit.patch").write_bytes(data)
    subprocess.run(["git", "-C", str(checkout), "apply", str(tmp_path / "commit.patch")], check=True)
    assert not (checkout / RELEASE_NOTE).exists()
    assert "tl.where(active, request, REQUESTS)" in (checkout / "vllm_ascend/ops/triton/kda/conv_state.py").read_text()


def test_commit_found_in_target_checkout_and_pin_verified(clone):
    sha = git(clone, "rev-parse", "HEAD").strip()
    pin = pinned_sha256(load_commit_patch(clone, sha))
    assert find_commit_source(sha[:7], target_root=clone / "vllm_ascend") == clone
    data = load_pinned_commit(_spec(sha, pin), target_root=clone)
    assert pinned_sha256(data) == pin
    with pytest.raises(Refused, match="sha256 of the normalised diff"):
        load_pinned_commit(_spec(sha, "0" * 64), upstream_repo=clone)


def test_commit_missing_everywhere_names_where_it_looked_and_the_clone_to_pass(clone, tmp_path):
    checkout = make_vllm_ascend_checkout(tmp_path / "checkout")
    sha = git(clone, "rev-parse", "HEAD").strip()
    with pytest.raises(Refused) as caught:
        load_pinned_commit(_spec(sha, "0" * 64), target_root=checkout)
    assert f"commit {sha[:12]} not found in {checkout}" in caught.value.message
    assert caught.value.hint == f"pass --upstream-repo PATH (a clone of {ASCEND_URL})"


def test_no_git_binary_is_one_line_refusal(clone, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("GIT_PYTHON_GIT_EXECUTABLE", raising=False)
    with pytest.raises(Refused, match="git is not installed here"):
        find_commit_source("f5826a4", upstream_repo=clone)
