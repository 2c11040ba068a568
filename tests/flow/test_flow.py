"""flow/: applicability, series planning, upgrade plans, status from records, inverse plans."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.ascend import CAUSAL_CONV1D, make_vllm_ascend_checkout
from vllm_hotfix.flow.applicability import applicability, check_applicable
from vllm_hotfix.flow.apply_hotfix import apply_hotfix
from vllm_hotfix.flow.hotfix import Hotfix, catalog_hotfix, load_patch_bytes, sha256
from vllm_hotfix.flow.plan import invert, propose
from vllm_hotfix.flow.resolve import Resolver
from vllm_hotfix.flow.hotfix_status import SeriesView, status_from_record
from vllm_hotfix.catalog.index import Catalog
from vllm_hotfix_guard.errors import DoesNotApply, FixedUpstream, Refused
from vllm_hotfix_guard.txn.state import TargetState
from vllm_hotfix.install.locate import Target, locate_root
from vllm_hotfix.txn.journal import commit


def wheel_target(root: Path, version: str, distribution: str = "vllm") -> Target:
    return Target(package="vllm", distribution=distribution, version=version, kind="directory",
                  package_dir=root / "vllm", root=root, dist_info=None, python=None, git=None, warnings=())


@pytest.fixture(scope="module")
def mamba():
    return Catalog.load().get("mamba-align-block-size")


@pytest.mark.parametrize("version,state,message", [
    ("0.32.0", "fixed-upstream", "vllm 0.32.0 already contains the upstream fix (0.32.0)"),
    ("0.33.0", "fixed-upstream", "already contains the upstream fix"),
    ("0.24.0", "not-applicable", "not applicable: vllm 0.24.0 is outside >=0.25.0,<0.32.0"),
    ("0.30.0rc1", None, None),
    ("0.25.0", None, None),
])
def test_applicability_of_the_mamba_manifest(mamba, tmp_path, version, state, message):
    target = wheel_target(tmp_path, version)
    verdict = applicability(mamba, mamba.target_for("vllm"), target)
    assert (verdict.state if verdict else None) == state
    if message:
        assert message in verdict.message


def test_check_applicable_raises_the_documented_errors(mamba, tmp_path):
    with pytest.raises(FixedUpstream):
        check_applicable(mamba, mamba.target_for("vllm"), wheel_target(tmp_path, "0.32.0"))
    with pytest.raises(Refused, match="is not a target of mamba-align-block-size@1"):
        check_applicable(mamba, None, wheel_target(tmp_path, "0.30.0", "vllm-ascend"))


def _patch(path: str, old: str, new: str) -> bytes:
    return (f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}\n+{new}\n").encode()


def _adhoc(hotfix_id: str, *datas: bytes) -> Hotfix:
    loaded = tuple(load_patch_bytes(d, label=f"{hotfix_id}-{i}", strip=1) for i, d in enumerate(datas))
    return Hotfix(hotfix_id, sha256(b"".join(datas))[:12], "adhoc", loaded, package="pkg")


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "site"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_bytes(b"")
    (root / "pkg" / "a.py").write_bytes(b"one\n")
    return root


def test_a_series_plans_one_edit_per_path_original_before_final_after(tree, tmp_path):
    hotfix = _adhoc("series", _patch("pkg/a.py", "one", "two"), _patch("pkg/a.py", "two", "three"))
    target = locate_root(tree, "pkg")
    state = TargetState(tmp_path / "state")
    proposal = propose(hotfix, target, state)
    (edit,) = proposal.plan.edits
    assert (edit.path, edit.before, edit.after, proposal.already) == ("pkg/a.py", b"one\n", b"three\n", False)

    commit(tree, proposal.plan, journal_dir=tmp_path / "journal")
    again = propose(hotfix, target, state)
    assert again.already and again.baseline == {"pkg/a.py": b"one\n"}

    commit(tree, invert(proposal.plan), journal_dir=tmp_path / "journal")
    assert (tree / "pkg" / "a.py").read_bytes() == b"one\n"


def test_a_conflict_is_reported_from_the_forward_direction(tree, tmp_path):
    (tree / "pkg" / "a.py").write_bytes(b"something else\n")
    with pytest.raises(DoesNotApply, match=r"pkg/a.py: hunk @@ -1,1 \+1,1 @@ does not apply: expected line 1 \"one\", found \"something else\""):
        propose(_adhoc("x", _patch("pkg/a.py", "one", "two")), locate_root(tree, "pkg"), TargetState(tmp_path / "s"))


def test_status_from_record_applied_lost_drifted(tree, tmp_path, monkeypatch):
    monkeypatch.setenv("HOTFIX_STATE_DIR", str(tmp_path / "state"))
    hotfix = _adhoc("rec", _patch("pkg/a.py", "one", "two"))
    target = locate_root(tree, "pkg")
    apply_hotfix(hotfix, target, None, dry_run=False)
    recorded = TargetState.for_root(tree).hotfixes["rec"]
    assert recorded.source == "adhoc" and recorded.files[0].path == "pkg/a.py"

    def state() -> str:
        return status_from_record(SeriesView.of(target), recorded).state

    assert state() == "applied"
    (tree / "pkg" / "a.py").write_bytes(b"one\n")
    assert state() == "lost"
    (tree / "pkg" / "a.py").write_bytes(b"by hand\n")
    assert state() == "drifted"


def test_an_upgrade_is_one_plan_from_the_recorded_bytes(tree, tmp_path, monkeypatch):
    monkeypatch.setenv("HOTFIX_STATE_DIR", str(tmp_path / "state"))
    target = locate_root(tree, "pkg")
    v1 = _adhoc("up", _patch("pkg/a.py", "one", "v1"))
    apply_hotfix(v1, target, None, dry_run=False)
    manifest = Catalog.load().get("mamba-align-block-size")
    v2 = Hotfix("up", 2, "catalog", (load_patch_bytes(_patch("pkg/a.py", "one", "v2"), label="v2", strip=1),),
                    manifest=replace(manifest, id="up", version=2, supersedes=(v1.version,), checks=()))
    proposal = propose(v2, target, TargetState.for_root(tree))
    (edit,) = proposal.plan.edits
    assert (edit.before, edit.after, proposal.superseded.version) == (b"v1\n", b"v2\n", v1.version)
    assert proposal.baseline == {"pkg/a.py": b"one\n"}


def test_glm_series_touches_the_conv1d_file_once(tmp_path):
    checkout = make_vllm_ascend_checkout(tmp_path / "vllm-ascend")
    manifest = Catalog.load().get("glm-conv-null-slot")
    target, spec = Resolver(None, checkout).for_manifest(manifest)
    assert spec is not None and applicability(manifest, spec, target) is None
    hotfix = catalog_hotfix(manifest, target)
    proposal = propose(hotfix, target, TargetState(tmp_path / "state"))
    paths = [e.path for e in proposal.plan.edits]
    assert paths.count(CAUSAL_CONV1D) == 1 and "release_notes/fragments/18878.yaml" not in paths
    edit = next(e for e in proposal.plan.edits if e.path == CAUSAL_CONV1D)
    assert b"null_block_id = requests" in edit.after and b"kernel_state[-1].zero_()" not in edit.after  # the next one


def test_runs_here_is_decided_by_the_interpreter_that_resolves(tmp_path):
    """verify --lock checks the guard's entry points only where they say something: in the interpreter
    running hotfix (given or not, by path or by its venv directory), not in another one."""
    import os
    import sys

    assert Resolver().runs_here() and Resolver(sys.executable).runs_here()
    assert Resolver(sys.prefix).runs_here()  # this venv, named by its directory
    other = tmp_path / "bin" / "python"
    other.parent.mkdir()
    os.symlink(os.path.realpath(sys.executable), other)  # outside the venv: another interpreter
    assert not Resolver(str(other)).runs_here()
    assert not Resolver(root=tmp_path).runs_here()


def test_status_words_a_file_not_records_changed_as_apply_refuses_it(tree, tmp_path):
    """A vendor edit the patch still applies on (a line appended): apply refuses it (baseline not pristine:
    RECORD's digest differs), so status's file word is `changed`, never `baseline` (flow/restore.not_pristine
    decides both); the installed release's own bytes stay `baseline`."""
    import base64
    import hashlib

    from vllm_hotfix.flow.baseline_proof import prove_files_pristine
    from vllm_hotfix.flow.hotfix_status import status_from_files

    dist_info = tree / "pkg-1.0.dist-info"
    dist_info.mkdir()
    (tree / "pkg" / "a.py").write_bytes(b"one\nctx\n")
    digest = base64.urlsafe_b64encode(hashlib.sha256(b"one\nctx\n").digest()).rstrip(b"=").decode()
    (dist_info / "RECORD").write_text(f"pkg/__init__.py,,\npkg/a.py,sha256={digest},8\npkg-1.0.dist-info/RECORD,,\n")
    target = replace(wheel_target(tree, "1.0", "pkg"), package="pkg", package_dir=tree / "pkg", kind="wheel",
                     dist_info=dist_info)
    hotfix = _adhoc("one-two", b"--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -1,2 +1,2 @@\n-one\n+two\n ctx\n")
    assert [f["state"] for f in status_from_files(hotfix, target, option="--root X").files] == ["baseline"]
    (tree / "pkg" / "a.py").write_bytes(b"one\nctx\n# vendor build\n")
    found = status_from_files(hotfix, target, option="--root X")
    assert found.state == "not-applied" and [f["state"] for f in found.files] == ["changed"], found
    with pytest.raises(Refused, match="baseline not pristine"):
        prove_files_pristine(target, None, ["pkg/a.py"])


def test_a_user_catalog_hotfix_not_for_the_target_names_its_catalog_in_the_show_it_hints(tmp_path, run_hotfix):
    """The refusal's `hotfix show ID` carries the --catalog the hotfix came from, so it runs as pasted (a user
    catalog's id is unknown without it); a built-in one needs none."""
    import re
    import shlex
    import shutil

    mine = tmp_path / "my catalog"
    (mine / "manifests").mkdir(parents=True)
    shutil.copytree(Path(__file__).resolve().parents[2] / "patches" / "mamba-align-block-size",
                    mine / "patches" / "mamba-align-block-size")
    text = (Path(__file__).resolve().parents[2] / "manifests" / "mamba-align-block-size.toml").read_text()
    (mine / "manifests" / "my-mamba.toml").write_text(text.replace('id = "mamba-align-block-size"', 'id = "my-mamba"', 1))
    catalog = Catalog.load([mine], env={})
    manifest = catalog.get("my-mamba")
    with pytest.raises(Refused) as refused:
        check_applicable(manifest, manifest.target_for("vllm"), wheel_target(tmp_path, "0.24.0"), catalog)
    (shown,) = re.findall(r"`([^`]+)`", refused.value.hint)
    assert shlex.split(shown) == ["hotfix", "show", "my-mamba", "--catalog", str(mine.absolute())]
    assert run_hotfix(*shlex.split(shown)[1:], env={"HOTFIX_CATALOG": ""}).returncode == 0  # as pasted
    builtin = Catalog.load(env={})
    with pytest.raises(Refused) as refused:
        check_applicable(builtin.get("mamba-align-block-size"), builtin.get("mamba-align-block-size").target_for("vllm"),
                         wheel_target(tmp_path, "0.24.0"), builtin)
    assert refused.value.hint == "`hotfix show mamba-align-block-size` lists its targets"
