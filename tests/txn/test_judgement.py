"""txn/judgement.py: the one verdict on a record, the commands' way (everything derived) and the guard's
(the seal instead of the derivation), on a real recorded apply of a small tree (`apply --patch --root`).

Each record below is what hand edits leave; for every one `hotfix status --root` and the guard's call give
the same word, and a record that does not describe the files is never in effect."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from fixtures.smalltree import DIFF, ORIGINAL, PATCHED, apply_small_tree
from vllm_hotfix_guard.paths import TargetDir
from vllm_hotfix_guard.txn.judgement import bounded_reader, judge_record
from vllm_hotfix_guard.txn.state import TargetState

REVERTED = PATCHED.replace("return 10", "return 1  # reverted by hand")


@pytest.fixture
def applied(tmp_path, run_hotfix):
    return apply_small_tree(tmp_path, run_hotfix)


def edit(tdir: TargetDir, change) -> None:
    doc = json.loads(tdir.state_file.read_text())
    change(doc["series"][0])
    tdir.state_file.write_text(json.dumps(doc))


def words(run_hotfix, root: Path, tdir: TargetDir) -> tuple[str, str, str]:
    """(status's word, the guard's word, status's detail)."""
    (entry,) = json.loads(run_hotfix("status", "--root", root, "--json").stdout)
    install = SimpleNamespace(root=root, kind="directory", dist_info=None, version=None, commit=None,
                              version_file=None, distribution=None, package="pkg")
    state = TargetState.load(tdir.directory)
    (guard,) = judge_record(state, install, read=bounded_reader(root, 1 << 20), pending=False, derive=False).values()
    return entry["state"], guard.state, entry["detail"]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_sealed_record_is_applied_both_ways(applied, run_hotfix):
    root, tdir = applied
    doc = json.loads(tdir.state_file.read_text())["series"][0]
    assert doc["seal"] and doc["patch_sha256"] == [hashlib.sha256(DIFF).hexdigest()]
    assert words(run_hotfix, root, tdir)[:2] == ("applied", "applied")


def test_a_record_from_before_seals_is_derived_by_both(applied, run_hotfix):
    root, tdir = applied
    edit(tdir, lambda h: h.update(seal=None, patch_sha256=[]))
    assert words(run_hotfix, root, tdir)[:2] == ("applied", "applied")


@pytest.mark.parametrize("forgery", ["top-names-a-revert", "the-same-unsealed", "kept-patch-rewritten",
                                     "garbage-top", "no-change", "the-target-moved"])
def test_a_record_that_lies_is_unknown_both_ways(forgery, applied, run_hotfix, tmp_path):
    root, tdir = applied
    mod = root / "pkg" / "mod.py"
    if forgery in ("top-names-a-revert", "the-same-unsealed"):
        mod.write_text(REVERTED)
        edit(tdir, lambda h: h["files"][0].update(after_sha256=sha(REVERTED)))
    if forgery == "the-same-unsealed":  # without the seal the guard derives it, and the kept patch says otherwise
        edit(tdir, lambda h: h.update(seal=None, patch_sha256=[]))
    if forgery == "kept-patch-rewritten":
        (kept,) = (tdir.directory / "patches" / "fix").glob("*.patch")
        kept.write_bytes(DIFF.replace(b"+    return 10", b"+    return 11"))
    if forgery == "garbage-top":
        edit(tdir, lambda h: h["files"][0].update(after_sha256="ab" * 32))
    if forgery == "no-change":
        mod.write_text(ORIGINAL)
        edit(tdir, lambda h: h["files"][0].update(after_sha256=sha(ORIGINAL)))
    if forgery == "the-target-moved":  # the record's own target, edited: its seal covers it
        doc = json.loads(tdir.state_file.read_text())
        doc["target"]["version"] = "9.9"
        tdir.state_file.write_text(json.dumps(doc))
    status, guard, detail = words(run_hotfix, root, tdir)
    assert (status, guard) == ("unknown", "unknown"), detail
    assert detail.startswith("the record does not describe the files: ")
    assert run_hotfix("verify", "--root", root).returncode == 1
    assert run_hotfix("rollback", "fix", "--root", root).returncode == 8  # it steers no write either


GUARD_MODULES = r'''
import json, sys
from vllm_hotfix_guard import plugin as guard
(verdict,) = guard.check(lock=None, require=("fix",))
print(json.dumps({"in_effect": verdict.in_effect, "modules": sorted(m for m in sys.modules if m.startswith("vllm_hotfix"))}))
'''


@pytest.mark.parametrize("sealed", [True, False])
def test_the_guard_calls_the_commands_verdict_and_no_engine_for_a_sealed_record(sealed, applied, run_hotfix, tmp_path):
    """The guard's HOTFIX_REQUIRE asks txn/judgement (the module `status` asks), imports nothing of flow/ or
    the catalog, and the patch engine only for a record without a seal (which it derives in full)."""
    import os
    import subprocess
    import sys

    root, tdir = applied
    if not sealed:
        edit(tdir, lambda h: h.update(seal=None, patch_sha256=[]))
    done = subprocess.run([sys.executable, "-c", GUARD_MODULES], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["in_effect"], found
    assert "vllm_hotfix_guard.txn.judgement" in found["modules"]
    assert not [m for m in found["modules"] if m.startswith(("vllm_hotfix.flow", "vllm_hotfix.catalog"))]
    assert ("vllm_hotfix_guard.core.hunk_apply" in found["modules"]) == (not sealed), found["modules"]
