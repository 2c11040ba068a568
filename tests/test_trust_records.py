"""The state directory is input (issue 21): what another local user could plant there -- a record, a link,
a lock -- steers no write, no delete and no "in effect", on a real vLLM 0.30.0 install. Each test plays the
attack, then checks the documented refusal and that nothing outside the target changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_hotfix_guard.paths import TargetDir

pytestmark = [pytest.mark.real, pytest.mark.slow]

MAMBA = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
HOTFIX = "mamba-align-block-size"
SRC = Path(__file__).resolve().parents[1] / "src"


def tree_of(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def applied(vllm_install, run_hotfix):
    venv = vllm_install("0.30.0")
    assert run_hotfix("apply", HOTFIX, "--python", venv.python).returncode == 0
    return venv, TargetDir.of(venv.site_packages)


def edit_record(tdir: TargetDir, change) -> None:
    doc = json.loads(tdir.state_file.read_text())
    change(doc["series"][0])
    tdir.state_file.write_text(json.dumps(doc))


def test_a_planted_backups_field_deletes_nothing(applied, run_hotfix, tmp_path):
    venv, tdir = applied
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    (victim / "sub").mkdir()
    (victim / "sub" / "deep.txt").write_text("also precious")
    edit_record(tdir, lambda h: h.update(backups=os.path.relpath(victim, tdir.directory)))
    for command in (("recover",), ("rollback", HOTFIX), ("apply", HOTFIX), ("status",)):
        done = run_hotfix(*command, "--python", venv.python)
        assert done.returncode == 8, (command, done.stdout, done.stderr)
        assert "series[0].backups: expected 'backups/mamba-align-block-size'" in done.stderr
        assert tree_of(victim) == {"keep.txt": b"precious", "sub/deep.txt": b"also precious"}


def test_a_link_where_the_backups_folder_is_loses_the_link_not_the_files(applied, run_hotfix, tmp_path):
    venv, tdir = applied
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    folder = tdir.directory / "backups" / "stray"
    folder.parent.mkdir(exist_ok=True)
    folder.symlink_to(victim)
    assert run_hotfix("rollback", HOTFIX, "--python", venv.python).returncode == 0  # prunes what no record names
    assert not os.path.lexists(folder) and tree_of(victim) == {"keep.txt": b"precious"}


def test_a_forged_record_cannot_make_rollback_write_chosen_bytes(applied, run_hotfix):
    venv, tdir = applied
    target = venv.site_packages / MAMBA
    patched = target.read_bytes()
    chosen = b"import os; os.system('id')  # chosen by someone else\n"
    kept = tdir.directory / "backups" / HOTFIX / MAMBA.replace("/", "%2F")
    kept.unlink()
    kept.write_bytes(chosen)
    edit_record(tdir, lambda h: h["files"][0].update(before_sha256=hashlib.sha256(chosen).hexdigest()))
    done = run_hotfix("rollback", HOTFIX, "--python", venv.python)
    assert done.returncode == 8, done.stderr
    assert "record was changed after hotfix wrote it (its seal does not match" in done.stderr  # the seal first
    assert target.read_bytes() == patched
    edit_record(tdir, lambda h: h.update(seal=None, patch_sha256=[]))  # as a record from before seals: the origin
    done = run_hotfix("rollback", HOTFIX, "--python", venv.python)
    assert done.returncode == 8, done.stderr
    assert "pip's RECORD gives" in done.stderr and "does not describe this install" in done.stderr
    assert target.read_bytes() == patched


def test_a_forged_record_claiming_the_pristine_file_patched_is_not_in_effect(vllm_install, run_hotfix, tmp_path):
    venv = vllm_install("0.30.0")
    pristine = (venv.site_packages / MAMBA).read_bytes()
    assert run_hotfix("apply", HOTFIX, "--python", venv.python).returncode == 0
    (venv.site_packages / MAMBA).write_bytes(pristine)  # the fix is gone (a rebuild) ...
    tdir = TargetDir.of(venv.site_packages)

    def forge(h):  # ... and someone makes the record call the pristine file "patched"
        h["files"][0].update(after_sha256=hashlib.sha256(pristine).hexdigest(), before_sha256="0" * 64)
    edit_record(tdir, forge)
    done = run_hotfix("verify", "--python", venv.python)
    assert done.returncode == 1 and "unknown" in done.stdout, done.stdout
    code = (f"import sys, json; sys.path.append({str(SRC)!r}); from vllm_hotfix_guard.plugin import check; "
            f"print(json.dumps([v.as_dict() for v in check(lock=None, require=({HOTFIX!r},))]))")
    guard = subprocess.run([str(venv.python), "-c", code], capture_output=True, text=True, check=True)
    (verdict,) = json.loads(guard.stdout)
    assert not verdict["in_effect"] and verdict["detail"].startswith("unknown:"), verdict


def test_the_target_lock_follows_no_symlink(vllm_install, run_hotfix, tmp_path):
    venv = vllm_install("0.30.0")
    victim = tmp_path / "victim.txt"
    victim.write_text("not a lock")
    tdir = TargetDir.of(venv.site_packages)
    tdir.directory.mkdir(parents=True)
    tdir.lock_file.symlink_to(victim)
    done = run_hotfix("apply", HOTFIX, "--python", venv.python)
    assert done.returncode == 6 and "symbolic link" in done.stderr, done.stderr
    assert victim.read_text() == "not a lock"
    assert (venv.site_packages / MAMBA).read_bytes() == (venv.site_packages / MAMBA).read_bytes()


@pytest.mark.parametrize("where", ["state-dir", "targets", "target"])
def test_a_state_directory_others_can_write_is_refused(where, vllm_install, run_hotfix, _isolated_state):
    venv = vllm_install("0.30.0")
    before = (venv.site_packages / MAMBA).read_bytes()
    tdir = TargetDir.of(venv.site_packages)
    tdir.directory.mkdir(parents=True)
    folder = {"state-dir": _isolated_state, "targets": _isolated_state / "targets", "target": tdir.directory}[where]
    os.chmod(folder, 0o777)
    for command in (("apply", HOTFIX), ("status",)):
        done = run_hotfix(*command, "--python", venv.python)
        assert done.returncode == 6, (command, done.stderr)
        assert f"{folder}: is writable by group and others" in done.stderr and "chmod go-w" in done.stderr
    assert (venv.site_packages / MAMBA).read_bytes() == before
    os.chmod(folder, 0o755)
    if os.geteuid() == 0:  # owned by another user (root can make one): refused the same way
        os.chown(folder, 4242, 4242)
        done = run_hotfix("apply", HOTFIX, "--python", venv.python)
        assert done.returncode == 6 and "is owned by uid 4242" in done.stderr, done.stderr
        os.chown(folder, 0, 0)
